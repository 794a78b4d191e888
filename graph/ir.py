"""The graph IR: nodes, symbolic tensors, function graphs (with captures), their derived data.

A `Graph` is one function: placeholder nodes for its inputs (arguments, then captures),
op nodes in creation order (always a valid topological order), and a list of outputs.
While a graph is the thread's builder (`with graph.building():`), every op call adds a
node through the same registry and shape inference the eager path uses.

This module is long because the three IR types, a graph's building and capture rules and
what is derived from a graph refer to each other; split, they would import in a cycle.
"""
import itertools
import numbers
import threading

import numpy as np

from defun.runtime import dtypes, errors, sites
from defun.runtime import tensor as rt
from defun.runtime.execute import promote_or_raise
from defun.runtime.context import state
from defun.runtime.convert import convert_operands
from defun.runtime.ops._infer import check_kinds
from defun.runtime.registry import check_input_count, register
from defun.runtime.tensor import EagerTensor, Tensor, to_array
from defun.graph.printer import bracket_shape, format_graph, format_node, type_str

__all__ = ["Graph", "Node", "SymbolicTensor", "Derived", "PLACEHOLDER", "CONST", "infer_types",
           "functions_in", "has_effects", "unique_name", "evaluate", "shape_stand_in"]

_graph_ids = itertools.count(1)
_PY_SCALARS = frozenset([float, int, bool])
_FIRST_TWO = (0, 1)


def _placeholder_kernel(**attrs):
    raise errors.InvalidArgumentError("a placeholder has no value; feed it as a function input")


PLACEHOLDER = register("placeholder", _placeholder_kernel,
                       lambda s, d, a: [(tuple(a["shape"]), a["dtype"])], None,
                       attrs={"shape": "shape", "dtype": "dtype"}, num_inputs=0, defaults={})
CONST = register("const", lambda value: value,
                 lambda s, d, a: [(a["value"].shape, dtypes.from_numpy(a["value"].dtype))], None,
                 attrs={"value": "tensor"}, bind=lambda attrs: (lambda v=attrs["value"]: v),
                 num_inputs=0, defaults={}, onnx=lambda e, node, ins: e.const(node.attrs["value"]))


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
    import warnings
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
        self.graph = graph
        self.id = id_
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.control_inputs = control_inputs
        self.outputs = []
        self.site = site
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
            if isinstance(g, Graph):
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


class Derived:
    """What is computed from a finalized graph and kept with it: declared here, in one place.

    plans: {backend name: compiled Plan} (graph.functions.plan_of)
    effectful: whether a node is stateful (has_effects)
    backward: (Backward, forward-with-side-outputs view) (graph.gradients.saving_of)
    saving: the Saving of this function: its Backward and what to run so that the
        backward's side outputs exist (graph.gradients.saving_of)
    saves_for: for a function that is another's forward with side outputs, that other
        function (its outputs come first): how a node finds the levels it was raised through
    remat: the rematerializing Backward (graph.gradients.rematerialize)
    levels: {key: what a cond or while node at this function needs to go one level up}
        (graph.control_flow)
    functions: {backend name: the defun GraphFunction calling this graph}
    live: ((node count, ids of the outputs asked for), ids of the live nodes), the last
        answer of graph.analysis.live_node_ids (a pass's test and then the compiler ask it)
    budget: for a function of a loaded document, the backend keeping its budgets
        (graph/serialize/budget.py): a `call` of it from any graph runs it there, and no
        pass inlines it
    """

    __slots__ = ("plans", "effectful", "backward", "saving", "saves_for", "remat", "levels",
                 "functions", "live", "budget")

    def __init__(self):
        self.plans = {}
        self.effectful = None
        self.backward = None
        self.saving = None
        self.saves_for = None
        self.remat = None
        self.levels = {}
        self.functions = {}
        self.live = None
        self.budget = None


_name_counts = {}
_name_lock = threading.Lock()


def unique_name(base):
    """`base_0`, `base_1`, ...: distinct graph names in one process (library entries)."""
    with _name_lock:
        n = _name_counts.get(base, 0)
        _name_counts[base] = n + 1
    return f"{base}_{n}"


class Graph:
    """A function graph: placeholders (arguments, then captures), nodes, outputs.

    `captures` maps an outer tensor's id to `(outer value, placeholder)`; the outer value
    is an eager tensor or a tensor of an enclosing graph, fed as an extra input per call.
    `view_of`: the graph whose nodes a view (`Graph.view`) shares, else None. `aliases`:
    for a copy made to build a backward, {id(old tensor): (old tensor, its copy)}, so a
    gradient closure holding tensors of the original (custom_gradient) captures the copy's.
    `inline_constants`: capture an enclosing graph's constant as a constant of this graph
    (backward graphs: a constant is no side output).
    """

    is_function_graph = True    # what a `func` attr holds (runtime.attr_types.is_function)

    def __init__(self, name="f", outer=None, base_name=None):
        self.name = name
        # the name without a process-wide counter (`loss` for `loss_3`): exports use it, so
        # a function's document does not depend on what else the process traced
        self.base_name = base_name or name
        self.outer = outer
        self.nodes = []
        self.inputs = []          # argument placeholders (SymbolicTensor), in order
        self.outputs = []         # output tensors
        self.captures = {}        # outer tensor id -> (outer value, placeholder)
        self.capture_order = []   # outer tensor ids in capture order
        self.last_stateful = None
        self.finalized = False
        self.structured_outputs = None
        self.view_of = None
        self.aliases = None
        self.inline_constants = False
        self.uid = next(_graph_ids)
        self._ids = itertools.count()
        self._const_cache = {}
        self._scalar_consts = {}  # (type, Python scalar, target np.dtype) -> const tensor
        self.derived = Derived()

    # ------------------------------------------------------------------ building
    def building(self):
        """Context manager making this graph the thread's op builder (tapes start empty)."""
        return _Building(self)

    def _new_node(self, op, inputs, attrs, out_types, site, control_inputs=(), node_id=None):
        """A node appended to this graph (`node_id`: keep a copied node's id; default: the next)."""
        node = Node(self, next(self._ids) if node_id is None else node_id, op, inputs, attrs,
                    list(control_inputs), site)
        if len(out_types) == 1:     # most nodes: no comprehension
            (s, d), = out_types
            node.outputs = [SymbolicTensor(node, 0, s, d)]
        else:
            node.outputs = [SymbolicTensor(node, i, s, d) for i, (s, d) in enumerate(out_types)]
        if node.stateful:
            if self.last_stateful is not None and self.last_stateful not in node.control_inputs:
                node.control_inputs.append(self.last_stateful)
            self.last_stateful = node
        self.nodes.append(node)
        return node

    def placeholder(self, shape, dtype, handle_data=None, name=None):
        """A new argument placeholder (appended to `inputs`)."""
        t = self._placeholder(shape, dtype, handle_data)
        self.inputs.append(t)
        return t

    def _placeholder(self, shape, dtype, handle_data):
        shape = tuple(None if d is None else int(d) for d in shape)
        node = self._new_node(PLACEHOLDER, [], {"shape": shape, "dtype": dtype}, [(shape, dtype)],
                              None)
        t = node.outputs[0]
        t.handle_data = handle_data
        return t

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
        node = self._new_node(CONST, [], {"value": arr}, [(arr.shape, dtypes.from_numpy(arr.dtype))],
                              sites.user_site(2))
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

    @property
    def captured_placeholders(self):
        return [self.captures[i][1] for i in self.capture_order]

    @property
    def captured_values(self):
        return [self.captures[i][0] for i in self.capture_order]

    @property
    def all_inputs(self):
        """Argument placeholders followed by capture placeholders: the function signature."""
        return self.inputs + self.captured_placeholders

    def add_op(self, op, inputs, attrs, name=None):
        """Add a node for OpDef `op` (called by runtime.execute.run_op); returns (inputs, outputs)."""
        site = sites.user_site(3)
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
        same = op.same_dtype
        if same is not None and len(same) > 1:
            d0 = out[same[0]].dtype
            if any(out[i].dtype is not d0 for i in same):
                try:   # two integer dtypes numpy would promote: cast nodes, as eagerly
                    return promote_or_raise(op, out)
                except errors.InvalidArgumentError as e:
                    raise errors.InvalidArgumentError(f"{e} (while tracing, at {_site_text(site)})") from None
        return out

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
        key = (x.__class__, x, dtype) if x.__class__ in _PY_SCALARS and x and x == x else None
        t = self._scalar_consts.get(key) if key is not None else None
        if t is None:
            t = self.constant(to_array(x, dtype))
            if key is not None:
                self._scalar_consts[key] = t
        return t

    # ------------------------------------------------------------------ finishing
    def finalize(self, outputs):
        """Set the outputs (tensors of this graph) and freeze the graph."""
        self.outputs = list(outputs)
        self.finalized = True
        return self

    def view(self, outputs, name=None, base_name=None):
        """A function sharing this graph's nodes and inputs but returning `outputs`."""
        g = Graph.__new__(Graph)
        g.__dict__.update({k: v for k, v in self.__dict__.items() if not k.startswith("_") or
                           k in ("_ids", "_const_cache", "_scalar_consts")})
        g.name = name or self.name
        g.base_name = base_name or (self.base_name if name is None else name)
        g.outputs = list(outputs)
        g.uid = next(_graph_ids)
        g.view_of = self.view_of or self
        g.derived = Derived()     # a view computes its own plan and backward
        return g

    def __str__(self):
        return format_graph(self)

    def __repr__(self):
        return f"<Graph {self.name}: {len(self.all_inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs>"


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
