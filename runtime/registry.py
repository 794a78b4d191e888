"""The op registry: one declaration per op (kernel, inference, gradient, attrs, flags).

Every op is declared once with `register(...)`; all layers read its row (`get(name)`).
"""
from defun.runtime import attr_types, errors

__all__ = ["OpDef", "Cost", "register", "get", "all_ops", "exists", "ATTR_TYPES", "one_of"]

# Attr type names (runtime/attr_types.py says what each means and how it is exported);
# `one_of("A", "B")` names the type of a string attr that must be one of the listed values.
ATTR_TYPES = attr_types.TYPES
one_of = attr_types.one_of

_REGISTRY = {}


class Cost:
    """What running an op's kernel costs beyond writing its outputs: the budgets of loaded
    documents (graph/serialize/budget.py) count it before the kernel runs.

    scratch: the memory the kernel holds at its peak besides its outputs: a number (that
        multiple of the bytes of the node's largest array, input or output: softmax's 1, a
        normal sample's 6), or scratch(shapes, out_shapes, attrs) -> elements of the output's
        dtype (conv2d's patch matrix).
    scratch_bytes: scratch(shapes, out_shapes, attrs) -> bytes, for a kernel whose buffers
        do not follow its output's dtype (an FFT works in complex128 whatever its dtype).
    work: operations beyond one per element read and written (which every kernel is
        charged): work(shapes, out_shapes, attrs) -> int (svd's m n min(m, n), a sort's
        n log n). The unit is what numpy takes to read or write one element of an add.
    per_element: operations per output element beyond that, for a kernel of constant but
        heavy work per element: a number, or {dtype kind: number} ({"c": 100}: complex pow).
    sized: for an op whose output size depends on input values, not only on shapes:
        sized(arrays, attrs) -> the bytes of its outputs, from the input arrays, before the
        kernel allocates them (segment_sum's rows are its largest id + 1).
    `shapes`/`out_shapes` are tuples of ints (a resource input's shape is ()).
    """

    __slots__ = ("scratch", "work", "sized", "scratch_bytes", "per_element")

    def __init__(self, scratch=0, work=None, sized=None, scratch_bytes=None, per_element=0):
        if not (callable(scratch) or (isinstance(scratch, (int, float)) and scratch >= 0)):
            raise ValueError(f"Cost: scratch must be a number >= 0 or a function, got {scratch!r}")
        if not (isinstance(per_element, dict) or (isinstance(per_element, (int, float)) and per_element >= 0)):
            raise ValueError(f"Cost: per_element must be a number >= 0 or a dict, got {per_element!r}")
        self.scratch, self.work, self.sized = scratch, work, sized
        self.scratch_bytes, self.per_element = scratch_bytes, per_element

    def heavy(self, kind):
        """Operations per output element of dtype kind `kind` beyond reading and writing it."""
        p = self.per_element
        return p.get(kind, 0) if isinstance(p, dict) else p

    def __repr__(self):
        return (f"Cost(scratch={self.scratch!r}, work={self.work!r}, sized={self.sized!r}, "
                f"scratch_bytes={self.scratch_bytes!r}, per_element={self.per_element!r})")


FREE = Cost()       # the cost of most ops: their elements read and written


def _declared_attrs(name, attrs, defaults):
    """Op `name`'s attr types and defaults as dicts, refused for an unknown attr type or a
    default of an attr it does not declare."""
    attrs, defaults = dict(attrs or {}), dict(defaults or {})
    for a, t in attrs.items():
        if t not in ATTR_TYPES:
            raise ValueError(f"op {name!r}: attr {a!r} has unknown type {t!r}")
    for a in defaults:
        if a not in attrs:
            raise ValueError(f"op {name!r}: default for undeclared attr {a!r}")
    return attrs, defaults


def _name_or_function(name, field, value, expected):
    """`value` of op `name`'s `field` (onnx, batch): None, a string or a callable."""
    if value is not None and not (isinstance(value, str) or callable(value)):
        raise ValueError(f"op {name!r}: {field} must be {expected}, got {value!r}")
    return value


class OpDef:
    """Everything known about one op type.

    kernel(*arrays, **attrs) -> array, or a tuple of arrays when num_outputs != 1.
    infer(shapes, dtypes, attrs) -> [(shape, dtype), ...] (sizes may be None).
    grad(op, *output_grads) -> one gradient (or None) per input; `op` has `.inputs`,
        `.outputs`, `.attrs` and `.type`, eager or symbolic alike; built from ops.
    batch(ctx, node, inputs, batched) -> (outputs, batched): the op on a batch (vmap).
    """

    __slots__ = ("name", "kernel", "infer", "grad", "num_outputs", "stateful", "none_grads",
                 "same_dtype", "attrs", "single", "kinds", "bind", "prune_outputs",
                 "num_inputs", "required_attrs", "defaults", "function_attrs", "fused", "onnx",
                 "shape_only", "batch", "cost")

    def __init__(self, name, kernel, infer, grad=None, num_inputs=None, attrs=None, defaults=None,
                 num_outputs=1, stateful=False, none_grads=False, same_dtype=None, kinds=None,
                 bind=None, prune_outputs=None, fused=None, onnx=None, shape_only=False, batch=None,
                 cost=None):
        self.name = name
        self.kernel = kernel
        self.infer = infer
        self.grad = grad
        # How many inputs the op takes (None: variadic, checked by its inference).
        if num_inputs is not None and (not isinstance(num_inputs, int) or num_inputs < 0):
            raise ValueError(f"op {name!r}: num_inputs must be an int >= 0 or None, got {num_inputs!r}")
        self.num_inputs = num_inputs
        # int, or callable(attrs, num_inputs) -> int for variadic ops (split, calls)
        self.num_outputs = num_outputs
        self.single = num_outputs == 1
        self.stateful = stateful
        self.none_grads = none_grads
        self.same_dtype = tuple(same_dtype) if same_dtype is not None else None
        # attrs: name -> attr type; defaults: the values of the attrs a graph document may
        # leave out (the loader fills them in); every other non-transient attr is required
        self.attrs, self.defaults = _declared_attrs(name, attrs, defaults)
        self.required_attrs = frozenset(a for a, t in self.attrs.items()
                                        if t != "transient" and a not in self.defaults)
        # attrs holding function graphs (call bodies, branches): the node runs them
        self.function_attrs = tuple(a for a, t in self.attrs.items() if t in ("func", "funcs"))
        # numpy dtype kinds the first input may have ("f" float, "i" int, "b" bool);
        # checked eagerly (one attribute test) and by graph inference alike.
        self.kinds = kinds
        # Optional bind(attrs) -> callable(*arrays): lets a backend bind attrs once (e.g.
        # reductions bind their axis). Ops holding functions get bind(attrs, backend), so
        # the functions they run are compiled for the caller's backend.
        self.bind = bind
        # Optional prune_outputs(attrs, used) -> attrs or None: attrs computing only a prefix of
        # the outputs when the rest are unused (`used`: one bool per output). A pass uses it,
        # e.g. a while loop drops its per-iteration history when no gradient reads it.
        self.prune_outputs = prune_outputs
        # Optional fused form (runtime/fused.py): how a fusing backend (numba) computes the
        # op inside one loop; backends that do not fuse ignore it.
        self.fused = fused
        # The op's ONNX form (graph/onnx_export.py): the name of the ONNX op computing it from
        # the same inputs and attrs, or form(emitter, node, inputs) -> output name(s) written
        # with the emitter's methods (so no runtime module imports onnx); None: no form.
        self.onnx = _name_or_function(name, "onnx", onnx, "an ONNX op name or a form function")
        # True if the result depends only on the first input's static shape and dtype,
        # never its values (shape, size, zeros_like, ones_like): constant evaluation
        # (static_value, constant folding) runs it whenever that shape is fully known.
        self.shape_only = bool(shape_only)
        # The op's batching rule (runtime/batching.py says how one is written and holds the
        # shared ones): rule(ctx, node, inputs, batched) -> (outputs, batched); or a string
        # saying why the op has none (`vmap` then raises, or loops when asked to); None: not
        # declared (tests/test_vmap_ops.py fails for a differentiable row left so).
        self.batch = _name_or_function(name, "batch", batch, "a batching rule or a reason string")
        self.cost = _cost_of(name, cost)    # beyond its outputs, for loaded documents' budgets

    @property
    def differentiable(self):
        return self.grad is not None

    def output_count(self, attrs, num_inputs):
        n = self.num_outputs
        return n if isinstance(n, int) else n(attrs, num_inputs)

    def __repr__(self):
        return f"<OpDef {self.name}>"


def _cost_of(name, cost):
    """An op's Cost (what its kernel costs beyond its outputs: scratch memory, work, sizes
    from values, counted by the budgets of loaded documents); None: FREE."""
    if cost is not None and not isinstance(cost, Cost):
        raise ValueError(f"op {name!r}: cost must be a registry.Cost, got {cost!r}")
    return cost if cost is not None else FREE


def check_input_count(op, n):
    """Raise InvalidArgumentError unless `op` takes `n` inputs."""
    if op.num_inputs is not None and n != op.num_inputs:
        raise errors.InvalidArgumentError(
            f"{op.name} takes {op.num_inputs} input{'s' if op.num_inputs != 1 else ''}, got {n}")


_MISSING = object()


def register(name, kernel, infer, grad=None, *, num_inputs=_MISSING, attrs=_MISSING,
             defaults=_MISSING, **kw):
    """Declare an op once; returns its OpDef. Re-registering a name is an error.

    `num_inputs` (None if variadic), `attrs` ({name: type}) and `defaults` ({name: value}
    for the optional attrs) are always given: nothing is inferred from the kernel.
    """
    if name in _REGISTRY:
        raise ValueError(f"op {name!r} is already registered")
    missing = [k for k, v in (("num_inputs", num_inputs), ("attrs", attrs), ("defaults", defaults))
               if v is _MISSING]
    if missing:
        raise TypeError(f"register({name!r}): declare {', '.join(missing)} explicitly "
                        f"(num_inputs=N or None, attrs={{name: type}}, defaults={{}} or the "
                        f"optional attrs' values)")
    op = OpDef(name, kernel, infer, grad, num_inputs, attrs, defaults, **kw)
    _REGISTRY[name] = op
    return op


def get(name):
    """The OpDef named `name`; raises NotFoundError listing close names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        import difflib    # only on the error path (a close name)
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise errors.NotFoundError(f"no op named {name!r} is registered{hint}") from None


def exists(name):
    return name in _REGISTRY


def all_ops():
    """All registered OpDefs, sorted by name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]
