"""A node and its outputs: Node, SymbolicTensor, the placeholder and const rows, and what is
known of a node before it runs: its output types (`infer_types`) and, from constant inputs,
its value (`evaluate`, the one constant evaluator; `SymbolicTensor.static_value`).

Graphs (graph/ir.py) hold nodes in program order; the tracer (graph/tracer.py) makes them.
"""
import numbers
import warnings

import numpy as np

from defun.runtime import attr_types, dtypes, errors, sites
from defun.runtime import tensor as rt
from defun.runtime.ops.shape_rules import check_kinds
from defun.runtime.registry import register
from defun.runtime.tensor import Tensor
from defun.graph.printer import bracket_shape, format_node, type_str

__all__ = ["Node", "SymbolicTensor", "PLACEHOLDER", "CONST", "infer_types", "functions_in",
           "has_effects", "evaluate", "shape_stand_in"]


def _placeholder_kernel(**attrs):
    raise errors.InvalidArgumentError("a placeholder has no value; feed it as a function input")


PLACEHOLDER = register(
    name="placeholder",
    kernel=_placeholder_kernel,
    infer=lambda s, d, a: [(tuple(a["shape"]), a["dtype"])],
    grad=None,
    num_inputs=0,
    attrs={"shape": "shape", "dtype": "dtype"},
    defaults={},
)
CONST = register(
    name="const",
    kernel=lambda value: value,
    infer=lambda s, d, a: [(a["value"].shape, dtypes.from_numpy(a["value"].dtype))],
    grad=None,
    num_inputs=0,
    attrs={"value": "tensor"},
    defaults={},
    bind=lambda attrs: (lambda v=attrs["value"]: v),
    onnx=lambda e, node, ins: e.const(node.attrs["value"]),
)


class SymbolicTensor(Tensor):
    """An output of a graph node: static (possibly partial) shape and dtype, no value."""

    __slots__ = ("node", "index", "shape", "dtype", "_id", "handle_data", "__weakref__")

    def __init__(self, node, index, shape, dtype):
        self.node = node
        self.index = index
        self.shape = shape
        self.dtype = dtype
        self._id = _next_tensor_id()
        self.handle_data = None

    @property
    def name(self):
        n = self.node.name
        return n if self.index == 0 and len(self.node.outputs) <= 1 else f"{n}:{self.index}"

    @property
    def graph(self):
        return self.node.graph

    @property
    def op(self):
        return self.node

    @property
    def creation_site(self):
        site = self.node.site
        if site is None and self.node.op.name == "placeholder":
            return f"an argument of function @{self.node.graph.name}"
        return sites.format_site(site)

    def _trace_error(self, what, hint):
        here = sites.user_site(2)
        line = sites.source_line(here)
        if self.node.graph.finalized:
            return errors.TracingError(
                f"{what} symbolic tensor {self.name} after the function trace that created it ended "
                f"(created at {self.creation_site}; used at {sites.format_site(here)}"
                f"{': ' + line if line else ''}). Return the tensor from the traced function and use "
                f"the result instead of keeping symbolic tensors outside.")
        return errors.TracingError(
            f"{what} a symbolic tensor ({self.name}, {type_str(self.shape, self.dtype)}) while "
            f"tracing, at {sites.format_site(here)}{': ' + line if line else ''}. Its value is "
            f"only known when the graph runs. {hint}")

    def __eq__(self, other):
        # `==` stays identity (tensors are dict keys), but against a number it is always False,
        # which silently breaks `df.cond(n % 2 == 0, ...)`: say so.
        if isinstance(other, (numbers.Number, np.ndarray, np.generic)):
            _warn_identity(self, "==")
        return self is other

    def __ne__(self, other):
        if isinstance(other, (numbers.Number, np.ndarray, np.generic)):
            _warn_identity(self, "!=")
        return self is not other

    __hash__ = Tensor.__hash__

    def static_value(self):
        """This tensor's value if it is known while tracing, else None.

        Known: constants, shape/size of fully known static shapes, and small pure ops on
        known values (e.g. `df.shape(x)[::-1]`). Ops taking a shape use it, so
        `df.zeros(df.shape(x))` traces when x's shape is static.
        """
        return _static_value(self)

    def __bool__(self):
        raise self._trace_error("Used `if`/`bool()` on",
                                "Use df.cond(pred, true_fn, false_fn) for data-dependent branches "
                                "(or df.while_loop for loops).")

    def __len__(self):
        if self.shape and self.shape[0] is not None:
            return self.shape[0]
        raise self._trace_error("Called len() on", "Its first dimension is unknown; use df.shape(t)[0].")

    def __iter__(self):
        n = len(self)
        return (self[i] for i in range(n))

    def __float__(self):
        raise self._trace_error("Called float() on", "Return the tensor from the function and convert the result.")

    def __int__(self):
        raise self._trace_error("Called int() on", "Return the tensor from the function and convert the result.")

    __index__ = __int__

    def __array__(self, dtype=None, copy=None):
        raise self._trace_error("Converted to numpy", "numpy code cannot run inside a traced function; "
                                "use df ops, or call numpy on the function's result.")

    def numpy(self):
        raise self._trace_error("Called .numpy() on", "Return the tensor from the function instead.")

    def __repr__(self):
        return f"<df.Tensor {self.name} shape={bracket_shape(self.shape)} dtype={self.dtype.name} (symbolic)>"


_next_tensor_id = rt._next_id   # the runtime's counter: symbolic and eager ids never collide


_STATIC_BUDGET = 10000   # nodes one static_value query may evaluate


def evaluate(node, values):
    """Run `node`'s kernel on the arrays `values`: a list of output arrays, or None when the
    kernel fails, meets a floating-point error (overflow, 0/0, ...; it then stays where the
    user sees it, at call time) or disagrees with the node's inferred types. The one constant
    evaluator: `static_value` and the constant-folding pass both use it.

    np.errstate is per thread; warnings.catch_warnings is not, so it is not used here.
    """
    op, attrs = node.op, node.attrs
    try:
        with np.errstate(all="raise"):
            out = op.bind(attrs)(*values) if op.bind is not None else op.kernel(*values, **attrs)
    except Exception:
        return None
    outs = (out,) if op.single else tuple(out)
    if len(outs) != len(node.outputs):
        return None
    result = []
    for t, v in zip(node.outputs, outs):
        if not isinstance(v, (np.ndarray, np.generic)):
            return None
        v = np.asarray(v)
        if v.dtype.kind == "O" or v.dtype != t.dtype.np or len(v.shape) != len(t.shape) or \
                any(d is not None and d != s for d, s in zip(t.shape, v.shape)):
            return None     # the kernel disagrees with inference: leave it to run (and fail)
        result.append(v)
    return result


def shape_stand_in(t):
    """For a shape-only op's input (`OpDef.shape_only`): an array of `t`'s static shape and
    dtype, a broadcast view of one zero (no allocation); None if a size is unknown."""
    return None if None in t.shape else np.broadcast_to(np.zeros((), t.dtype.np), t.shape)


def _static_value(t):
    """Evaluate `t` from constants and static shapes, iteratively and memoized per query."""
    memo = {}            # id(node) -> tuple of output values, or None when not known
    stack = [t.node]
    visited = 0
    while stack:
        node = stack[-1]
        if id(node) in memo:
            stack.pop()
            continue
        op = node.op
        if op is CONST:
            memo[id(node)] = (node.attrs["value"],)
            stack.pop()
            continue
        if node.stateful or op.name == "placeholder" or any(
                k in ("func", "funcs", "transient") for k in op.attrs.values()):
            memo[id(node)] = None
            stack.pop()
            continue
        if op.shape_only:
            x = shape_stand_in(node.inputs[0])
            values = None if x is None else [x]
        else:
            pending = [u.node for u in node.inputs if id(u.node) not in memo]
            if pending:
                visited += len(pending)
                if visited > _STATIC_BUDGET:
                    return None
                stack.extend(pending)
                continue
            values = []
            for u in node.inputs:
                got = memo[id(u.node)]
                v = None if got is None else got[u.index]
                if v is None or np.size(v) > 4096:
                    values = None
                    break
                values.append(v)
        stack.pop()
        if values is None:
            memo[id(node)] = None
            continue
        out = evaluate(node, values)
        memo[id(node)] = None if out is None else tuple(out)
    got = memo[id(t.node)]
    return None if got is None else got[t.index]


def _warn_identity(t, op):
    here = sites.user_site(3)
    warnings.warn_explicit(
        f"`{op}` between symbolic tensor {t.name} and a number compares identity (always "
        f"{op == '!='}), not values; use df.equal / df.not_equal for elementwise comparison",
        UserWarning, here[0] if here else "<unknown>", here[1] if here else 0)


class Node:
    """One op application: `%id = type(inputs) {attrs}`, with output tensors.

    `stateful`: the op is (a variable read or assignment), or a function it runs contains
    effects (a call, branch or loop body that reads or assigns). Passes keep such nodes
    in program order and never remove or merge them; the executor always runs them.
    """

    __slots__ = ("graph", "id", "op", "inputs", "attrs", "control_inputs", "outputs", "site",
                 "stateful", "__weakref__")

    def __init__(self, graph, id_, op, inputs, attrs, control_inputs, site):
        self.graph, self.id, self.op, self.site = graph, id_, op, site
        self.inputs, self.attrs, self.control_inputs = inputs, attrs, control_inputs
        self.outputs = []
        # (a branch, not `or`: this runs for every node made; most have neither)
        if op.stateful:
            self.stateful = True
        elif op.function_attrs:
            self.stateful = any(has_effects(g) for g in functions_in(op, attrs))
        else:
            self.stateful = False

    @property
    def type(self):
        return self.op.name

    @property
    def name(self):
        return f"%{self.id}"

    def get_attr(self, name):
        return self.attrs[name]

    def __repr__(self):
        return f"<Node {format_node(self)}>"


def functions_in(op, attrs):
    """The function graphs `attrs` of `op` refer to (call bodies, branches, loop bodies)."""
    for name in op.function_attrs:
        v = attrs.get(name)
        for g in (v if isinstance(v, tuple) else (v,)):
            if attr_types.is_function(g):
                yield g


def has_effects(graph):
    """True if a node of `graph` is stateful (kept per finalized graph in `graph.derived`)."""
    known = graph.derived.effectful
    if known is None:
        # a node's flag already covers the functions it runs; a function calling itself
        # reads the flags of the nodes made so far, so there is no unbounded recursion
        known = any(n.stateful for n in graph.nodes)
        if graph.finalized:
            graph.derived.effectful = known
    return known



# Inference results by (op, input types, attrs). Tracing a chain, and verifying it after
# every pass, infers the same few signatures thousands of times: the memo took verify of a
# 10,000-node chain from 2.5 to ~1.5 us per node. Only attrs of immutable scalar types take
# part (a graph attr, e.g. a call's function, can change between two calls), and only
# results whose shapes are tuples are kept (they are shared by every hit).
_INFERRED = {}
_INFERRED_MAX = 10_000
_KEY_TYPES = frozenset([int, bool, str, type(None), dtypes.DType])


def _attrs_key(attrs):
    """A hashable, type-exact key of `attrs`, or None when a value is not a plain scalar."""
    key = []
    for k, v in attrs.items():
        t = type(v)
        if t is tuple:
            if any(type(x) is not int and x is not None for x in v):
                return None
        elif t not in _KEY_TYPES:
            return None
        key.append((k, t, v))
    return tuple(key)


def infer_types(op, inputs, attrs):
    """[(shape, dtype)] of `op`'s outputs for `inputs` (tensors) and `attrs`: the op's
    dtype-kind check, then its inference (memoized; errors are raised, never kept)."""
    key = None
    akey = _attrs_key(attrs) if attrs else ()
    if akey is not None:
        # dtypes by id (DType.__hash__ is Python code); the entry keeps them alive, so an
        # id cannot be reused while the entry exists. One and two inputs (most nodes) make
        # a flat key: their last item is an int, never a tuple as in the general key.
        n = len(inputs)
        try:
            if n == 1:
                t = inputs[0]
                key = (op, akey, t.shape, id(t.dtype))
            elif n == 2:
                a, b = inputs
                key = (op, akey, a.shape, b.shape, id(a.dtype), id(b.dtype))
            else:
                key = (op, akey, tuple([t.shape for t in inputs]), tuple([id(t.dtype) for t in inputs]))
            hit = _INFERRED.get(key)
        except TypeError:       # a shape that is not a tuple
            key = hit = None
        if hit is not None:
            return hit[1]
    dts = [t.dtype for t in inputs]
    if op.kinds is not None and inputs and dts[0].np.kind not in op.kinds:
        check_kinds(op.name, dts[0], op.kinds)
    out = op.infer([t.shape for t in inputs], dts, attrs)
    if key is not None and type(out) is list and \
            all(type(r) is tuple and len(r) == 2 and type(r[0]) is tuple for r in out):
        if len(_INFERRED) >= _INFERRED_MAX:
            _INFERRED.clear()
        _INFERRED[key] = (dts, out)
    return out

