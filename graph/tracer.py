"""The tracer: how running Python builds a graph. While a graph is the thread's builder
(`with graph.building():`), every op call reaches `add_op` (from runtime.execute.run_op):
its operands converted (Python values become constants, by the eager dispatcher's weak
typing), outer tensors captured (`capture`: the graph's capture map, scoped by `outer`),
its types inferred, a node made. `Tracing` is that half of `graph.ir.Graph`, which
inherits it: the graph itself is the builder the runtime calls.
"""
import numpy as np

from defun.runtime import dtypes, errors, numerics, sites
from defun.runtime.autodiff import GRADIENT_WALK
from defun.runtime.context import state
from defun.runtime.convert import convert_operands
from defun.runtime.execute import same_dtype_inputs
from defun.runtime.registry import check_input_count
from defun.runtime.tensor import EagerTensor, Tensor, to_array, weak_or_raise
from defun.graph.nodes import CONST, SymbolicTensor, infer_types

__all__ = ["Tracing"]

_PY_SCALARS = frozenset([float, int, bool])
_FIRST_TWO = (0, 1)


class Tracing:
    """Building a graph by running ops on its tensors (a base of graph.ir.Graph, whose
    fields and node makers it uses: `captures`, `capture_order`, `outer`, `aliases`,
    `inline_constants`, the constant caches `_const_cache` and `_scalar_consts`,
    `_new_node` and `_placeholder`)."""

    def building(self):
        """Context manager making this graph the thread's op builder (tapes start empty)."""
        return _Building(self)

    def constant(self, value, name=None):
        """A const node holding numpy `value` (deduplicated for small scalars)."""
        arr = np.asarray(value)
        key = None
        if arr.ndim == 0:
            key = (arr.dtype.str, arr.tobytes())
            hit = self._const_cache.get(key)
            if hit is not None:
                return hit
        dtypes.from_numpy(arr.dtype)
        arr = np.array(arr, copy=True)
        arr.flags.writeable = False
        st = state
        grad_of = st.grad_of
        node = self._new_node(CONST, [], {"value": arr}, [(arr.shape, dtypes.from_numpy(arr.dtype))],
                              (st.node_site or sites.user_site(2)) if grad_of is None else _gradient_site(grad_of))
        t = node.outputs[0]
        if key is not None:
            self._const_cache[key] = t
        return t

    def capture(self, t):
        """The placeholder standing for outer tensor `t` in this graph (made on first use)."""
        if isinstance(t, SymbolicTensor) and t.node.graph is self:
            return t
        entry = self.captures.get(t._id)
        if entry is not None:
            return entry[1]
        if isinstance(t, SymbolicTensor):
            g = self.outer
            while g is not None and g is not t.node.graph:
                g = g.outer
            if g is None:
                alias = self._alias(t)
                if alias is not None:
                    return self.capture(alias)
                raise errors.TracingError(
                    f"symbolic tensor {t.name} (created at {t.creation_site}) belongs to a function "
                    f"trace that has ended or is not enclosing this one; it cannot be used here. "
                    f"Return it from that function, or pass it as an argument.")
            if self.inline_constants and t.node.op is CONST:
                return self._inlined_constant(t)
            outer_value = t
        elif isinstance(t, EagerTensor):
            outer_value = t
        else:
            raise TypeError(f"cannot capture {type(t).__name__}")
        ph = self._placeholder(t.shape, t.dtype, getattr(t, "handle_data", None))
        self.captures[t._id] = (outer_value, ph)
        self.capture_order.append(t._id)
        return ph

    def _alias(self, t):
        """The tensor standing for `t` in a copy this graph or an enclosing one was built on."""
        g = self
        while g is not None:
            entry = g.aliases.get(id(t)) if g.aliases else None
            if entry is not None and entry[0] is t:
                return entry[1]
            g = g.outer
        return None

    def _inlined_constant(self, t):
        hit = self._const_cache.get(("inlined", t._id))
        if hit is None:
            value = t.node.attrs["value"]      # read-only: shared, not copied
            node = self._new_node(CONST, [], {"value": value}, [(value.shape, t.dtype)], t.node.site)
            hit = self._const_cache[("inlined", t._id)] = node.outputs[0]
        return hit


    def add_op(self, op, inputs, attrs, name=None):
        """Add a node for OpDef `op` (called by runtime.execute.run_op); returns (inputs, outputs)."""
        st = state
        grad_of = st.grad_of
        site = (st.node_site or sites.user_site(3)) if grad_of is None else _gradient_site(grad_of)
        inputs = self._convert_inputs(op, inputs, site)
        try:
            if op.num_inputs is not None and len(inputs) != op.num_inputs:
                check_input_count(op, len(inputs))
            out_types = infer_types(op, inputs, attrs)
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"{e} (while tracing, at {_site_text(site)})") from None
        n = 1 if op.single else op.output_count(attrs, len(inputs))
        if len(out_types) != n:
            raise errors.InvalidArgumentError(
                f"{op.name}: inference gave {len(out_types)} outputs, expected {n}")
        node = self._new_node(op, inputs, dict(attrs), out_types, site)
        if grad_of is not None:     # a gradient: which forward op's (runtime/numerics.py)
            numerics.note_backward(self.name, node.id)
        return inputs, node.outputs

    def _convert_inputs(self, op, inputs, site):
        out = list(inputs)
        weak = False
        for i, x in enumerate(out):
            cls = x.__class__
            if cls is SymbolicTensor:       # the common case first: no isinstance of an ABC
                if x.node.graph is not self:
                    out[i] = self.capture(x)
            elif cls in _PY_SCALARS:        # never a tensor, and has no _as_tensor
                weak = True
            elif isinstance(x, SymbolicTensor):
                if x.node.graph is not self:
                    out[i] = self.capture(x)
            elif isinstance(x, EagerTensor):
                out[i] = self.capture(x)
            elif isinstance(x, Tensor):
                raise TypeError(f"{op.name}: unsupported tensor type {type(x).__name__}")
            elif hasattr(x, "_as_tensor"):
                out[i] = x._as_tensor()
            else:
                weak = True
        if weak:    # the eager dispatcher's conversion rules, making constants of this graph
            out = self._convert_weak(op, out, site)
        if op.same_dtype is None:
            return out
        try:   # two integer dtypes numpy would promote become cast nodes, as eagerly
            return same_dtype_inputs(op, out)
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"{e} (while tracing, at {_site_text(site)})") from None

    def _convert_weak(self, op, out, site):
        if op.same_dtype == _FIRST_TWO and len(out) == 2:
            # a tensor and a Python number (`x * 1.01`): the number takes the tensor's dtype,
            # as convert_operands would decide, without its general loop; a number met
            # before is a cache hit (-0.3 us per node)
            a, b = out
            if a.__class__ is SymbolicTensor and b.__class__ in _PY_SCALARS:
                c = self._scalar_consts.get((b.__class__, b, a.dtype.np))
                if c is not None:
                    return [a, c]
            elif b.__class__ is SymbolicTensor and a.__class__ in _PY_SCALARS:
                c = self._scalar_consts.get((a.__class__, a, b.dtype.np))
                if c is not None:
                    return [c, b]
        try:
            return convert_operands(op, out, _is_own_tensor, self._operand_constant)
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"{e} (while tracing, at {_site_text(site)})") from None

    def _operand_constant(self, x, dtype):
        # A Python scalar met again (the 1.01 of every step of a chain) reuses its
        # constant without converting it again. Not for zeros (0.0 == -0.0) or NaN.
        if x.__class__ not in _PY_SCALARS and hasattr(x, "_weak_tensor"):
            return self.capture(x._weak_tensor(dtype))    # numbers an autograph `if` joined (weakly typed)
        key = (x.__class__, x, dtype) if x.__class__ in _PY_SCALARS and x and x == x else None
        t = self._scalar_consts.get(key) if key is not None else None
        if t is None:
            try:
                t = self.constant(to_array(x, dtype))
            except TypeError as e:      # a list holding numbers an autograph `if` joined
                return self.capture(weak_or_raise(x, dtype, e))
            if key is not None:
                self._scalar_consts[key] = t
        return t



def _site_text(site):
    if site is None:
        return "<unknown location>"
    line = sites.source_line(site)
    return sites.format_site(site) + (f": {line}" if line else "")


def _is_own_tensor(x):
    return isinstance(x, Tensor)    # by now every tensor input is one of this graph


class _Building:
    __slots__ = ("graph", "_saved")

    def __init__(self, graph):
        self.graph = graph

    def __enter__(self):
        self._saved = (state.graph, state.tapes)
        state.graph = self.graph
        state.tapes = []
        return self.graph

    def __exit__(self, *exc):
        state.graph, state.tapes = self._saved
        return False


def _gradient_site(grad_of):
    """The line of a node traced as the gradient of `grad_of`'s forward op: in a gradient the
    user wrote (a custom_gradient's function), its own line; in a built-in rule, the forward
    op's line, where the plan's errors and warnings then point (not the line that asked for
    the gradient, which every node of the backward would share)."""
    site = sites.user_site_below(GRADIENT_WALK, 3)
    if site is None:
        forward = getattr(grad_of[1], "node", None)
        site = forward.site if forward is not None and forward.site is not None else sites.user_site(3)
    return site
