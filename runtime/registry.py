"""The op registry: one declaration per op (kernel, inference, gradient, flags)."""
from runtime import errors

__all__ = ["OpDef", "register", "get", "all_ops", "ATTR_TYPES"]

# Attr types the graph layer validates and serializes:
#   int, float, bool, str, ints (tuple of int), shape (tuple of int|None), dtype,
#   tensor (numpy array), func (a graph function), funcs (tuple of functions),
#   opt_int (int or None), opt_ints (tuple of int or None), transient (never exported)
ATTR_TYPES = frozenset(["int", "float", "bool", "str", "ints", "shape", "dtype", "tensor",
                        "func", "funcs", "opt_int", "opt_ints", "transient", "slices", "dtypes"])

_REGISTRY = {}


class OpDef:
    """Everything known about one op type.

    kernel(*arrays, **attrs) -> array, or a tuple of arrays when num_outputs != 1.
    infer(shapes, dtypes, attrs) -> [(shape, dtype), ...] (sizes may be None).
    grad(op, *output_grads) -> one gradient (or None) per input; `op` has `.inputs`,
        `.outputs`, `.attrs` and `.type`, eager or symbolic alike; built from ops.
    """

    __slots__ = ("name", "kernel", "infer", "grad", "num_outputs", "stateful", "none_grads",
                 "same_dtype", "attrs", "doc", "single", "kinds", "bind", "prune_outputs",
                 "num_inputs", "required_attrs", "defaults")

    def __init__(self, name, kernel, infer, grad=None, num_outputs=1, stateful=False,
                 none_grads=False, same_dtype=None, attrs=None, doc="", kinds=None, bind=None,
                 prune_outputs=None, num_inputs=-1, required_attrs=None, defaults=None):
        self.name = name
        self.kernel = kernel
        self.infer = infer
        self.grad = grad
        # int, or callable(attrs, num_inputs) -> int for variadic ops (split, calls)
        self.num_outputs = num_outputs
        self.single = num_outputs == 1
        self.stateful = stateful
        self.none_grads = none_grads
        self.same_dtype = tuple(same_dtype) if same_dtype is not None else None
        self.attrs = dict(attrs or {})
        for a, t in self.attrs.items():
            if t not in ATTR_TYPES:
                raise ValueError(f"op {name!r}: attr {a!r} has unknown type {t!r}")
        self.doc = doc
        # numpy dtype kinds the first input may have ("f" float, "i" int, "b" bool);
        # checked eagerly (one attribute test) and by graph inference alike.
        self.kinds = kinds
        # Optional bind(attrs) -> callable(*arrays): lets the graph compiler bind attrs once
        # (e.g. a call op binds straight to the callee's compiled plan).
        self.bind = bind
        # Optional prune_outputs(attrs, used) -> attrs or None: attrs computing only a prefix of
        # the outputs when the rest are unused (`used`: one bool per output). A pass uses it,
        # e.g. a while loop drops its per-iteration history when no gradient reads it.
        self.prune_outputs = prune_outputs
        # How many inputs the op takes (None: variadic, checked by its inference). Read off the
        # kernel's signature unless given: positional parameters that are not attrs.
        self.num_inputs = _count_inputs(kernel, self.attrs) if num_inputs == -1 else num_inputs
        # Values of the attrs a graph document may leave out (declared, so the file format does
        # not depend on kernel signatures); every other non-transient attr is required.
        self.defaults = dict(defaults or {})
        for a in self.defaults:
            if a not in self.attrs:
                raise ValueError(f"op {name!r}: default for undeclared attr {a!r}")
        if required_attrs is not None:
            self.required_attrs = frozenset(required_attrs)
        elif defaults is not None:
            self.required_attrs = frozenset(a for a, t in self.attrs.items()
                                            if t != "transient" and a not in self.defaults)
        else:   # legacy declarations: read off the kernel's signature
            self.required_attrs = _required_attrs(kernel, self.attrs)

    @property
    def differentiable(self):
        return self.grad is not None

    def output_count(self, attrs, num_inputs):
        n = self.num_outputs
        return n if isinstance(n, int) else n(attrs, num_inputs)

    def __repr__(self):
        return f"<OpDef {self.name}>"


def _count_inputs(kernel, attrs):
    import inspect
    import numpy as np
    if isinstance(kernel, np.ufunc):
        return kernel.nin
    try:
        params = inspect.signature(kernel).parameters.values()
    except (TypeError, ValueError):
        return None
    n = 0
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            return None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in attrs \
                and p.default is p.empty:
            n += 1
    return n


def _required_attrs(kernel, attrs):
    import inspect
    try:
        params = inspect.signature(kernel).parameters
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(name for name, p in params.items()
                     if name in attrs and p.default is p.empty and attrs[name] != "transient")


def check_input_count(op, n):
    """Raise InvalidArgumentError unless `op` takes `n` inputs."""
    if op.num_inputs is not None and n != op.num_inputs:
        raise errors.InvalidArgumentError(
            f"{op.name} takes {op.num_inputs} input{'s' if op.num_inputs != 1 else ''}, got {n}")


def register(name, kernel, infer, grad=None, **kw):
    """Declare an op once; returns its OpDef. Re-registering a name is an error."""
    if name in _REGISTRY:
        raise ValueError(f"op {name!r} is already registered")
    op = OpDef(name, kernel, infer, grad, **kw)
    _REGISTRY[name] = op
    return op


def get(name):
    """The OpDef named `name`; raises NotFoundError listing close names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        import difflib
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise errors.NotFoundError(f"no op named {name!r} is registered{hint}") from None


def exists(name):
    return name in _REGISTRY


def all_ops():
    """All registered OpDefs, sorted by name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]
