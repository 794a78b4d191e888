"""Optimization passes: each is `graph -> new graph`, results unchanged.

Every pass copies its input (which it never mutates) node by node into a new graph with
the same calling convention: the same inputs (arguments, then captures, with the same
shapes, dtypes and capture keys) and outputs of the same shapes and dtypes. Copied nodes
keep their ids, so `%7` names the same computation before and after, and their source
sites, so a kernel failure in an optimized plan still points at the user's line.

Stateful ops (and calls of functions containing one) are never removed, merged, folded
or reordered, and keep their control edges; no pass reorders any node.

`optimize(graph)` runs the default pipeline, verifying its input and result (see there):

    inline_calls -> simplify_algebra -> fold_constants
                 -> eliminate_common_subexpressions -> eliminate_dead_code
"""
import numpy as np

from defun.runtime import dtypes, registry
from defun.graph.analysis import live_node_ids
from defun.runtime.collector import paused_gc
from defun.graph.ir import Graph
from defun.graph.nodes import CONST, PLACEHOLDER, evaluate, infer_types, shape_stand_in
from defun.graph.rewrite import GraphCopy
from defun.runtime.ops.shape_rules import num_elements
from defun.graph.verify import VerifyError, verify

__all__ = ["optimize", "DEFAULT_PIPELINE", "FOLD_MAX_ELEMENTS", "GraphCopy",
           "eliminate_dead_code", "eliminate_common_subexpressions", "fold_constants",
           "simplify_algebra", "inline_calls", "prune_unused_outputs"]

# Constant folding never creates a constant with more elements than this (per output).
FOLD_MAX_ELEMENTS = 100_000
# Constants larger than this (in bytes) are merged by CSE only when they are the same array.
_CSE_MAX_CONST_BYTES = 1 << 20


_IDENTITY = registry.get("identity")
_STOP_GRADIENT = registry.get("stop_gradient")
_BROADCAST_TO = registry.get("broadcast_to")
_REDUCE_SUM = registry.get("reduce_sum")


# ---------------------------------------------------------------------------------------
# Dead code elimination

def eliminate_dead_code(graph):
    """Drop nodes that no output and no stateful op depends on.

    Before:                                   After:
      func @f(%0: f32[3]) -> (f32[3]):          func @f(%0: f32[3]) -> (f32[3]):
        %1: f32[3] = tanh(%0)                     %1: f32[3] = tanh(%0)
        %2: f32[3] = exp(%0)                      return (%1)
        return (%1)

    Placeholders always stay (the calling convention), and so do stateful ops and
    everything they depend on, through data or control edges.
    """
    live = live_node_ids(graph)
    cp = GraphCopy(graph)
    for node in graph.nodes:
        if id(node) in live and node.op is not PLACEHOLDER:
            cp.copy(node)
    return cp.finish()


# ---------------------------------------------------------------------------------------
# Common subexpression elimination

def _attr_key(v):
    """A hashable, type-exact key for an attr value (1, 1.0 and True differ)."""
    if isinstance(v, np.ndarray):
        if v.nbytes > _CSE_MAX_CONST_BYTES:
            return ("array", id(v))
        return ("ndarray", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(_attr_key(x) for x in v)
    if isinstance(v, float):
        return ("float", v.hex())         # -0.0 and 0.0 differ; equal NaNs match
    if isinstance(v, slice):
        return ("slice", _attr_key(v.start), _attr_key(v.stop), _attr_key(v.step))
    if v is None or isinstance(v, (bool, int, str, np.generic)):
        return (type(v).__name__, v)
    return ("object", id(v))              # dtypes, functions, anything else: by identity


def eliminate_common_subexpressions(graph):
    """Merge nodes with the same op, inputs, attrs and control inputs into the first one.

    Before:                                   After:
      func @f(%0: f32[3]) -> (f32[3]):          func @f(%0: f32[3]) -> (f32[3]):
        %1: f32[3] = tanh(%0)                     %1: f32[3] = tanh(%0)
        %2: f32[3] = tanh(%0)                     %2: f32[3] = add(%1, %1)
        %3: f32[3] = add(%1, %2)                  return (%2)
        return (%3)

    Constants with equal dtype, shape and bytes merge too. Stateful nodes never merge
    (two reads of a variable may see different values).
    """
    cp = GraphCopy(graph)
    seen = {}
    for node in graph.nodes:
        if node.op is PLACEHOLDER:
            continue
        if not node.outputs or node.stateful:
            cp.copy(node)
            continue
        inputs = cp.inputs_of(node)
        key, hit = _cse_lookup(seen, node, inputs, cp.controls_of(node))
        if key is None:          # an attr value that cannot be hashed: leave the node alone
            cp.copy(node, inputs)
        elif hit is not None:
            cp.replace(node, hit.outputs, (hit,))
        else:
            seen[key] = cp.copy(node, inputs)
    return cp.finish()


def _cse_lookup(seen, node, inputs, controls):
    """(key, earlier node `node` merges into or None); key None: `node` cannot be keyed."""
    attrs = node.attrs
    try:
        key = (node.op.name, tuple([(t.node.id, t.index) for t in inputs]),
               tuple(sorted([(k, _attr_key(v)) for k, v in attrs.items()])) if attrs else (),
               tuple([n.id for n in controls]) if controls else ())
        hit = seen.get(key)
    except TypeError:
        return None, None
    if hit is not None and all(a.shape == b.shape and a.dtype is b.dtype
                               for a, b in zip(hit.outputs, node.outputs)):
        return key, hit
    return key, None


def _cse_applies(graph):
    """True if eliminate_common_subexpressions would merge a node (it finds the first one)."""
    seen = {}
    for node in graph.nodes:
        if node.op is PLACEHOLDER or not node.outputs or node.stateful:
            continue
        controls = list(dict.fromkeys(node.control_inputs)) if node.control_inputs else ()
        key, hit = _cse_lookup(seen, node, node.inputs, controls)
        if hit is not None:
            return True
        if key is not None:
            seen[key] = node         # as the pass does: a later equal node is compared to this one
    return False


# ---------------------------------------------------------------------------------------
# Constant folding

def fold_constants(graph, max_elements=None):
    """Replace ops whose inputs are all constants by constants of their results.

    Before:                                   After:
      func @f(%0: f32[2]) -> (f32[2]):          func @f(%0: f32[2]) -> (f32[2]):
        %1: f32[2] = const() {value=[1., 2.]}     %1: f32[2] = const() {value=[1., 2.]}
        %2: f32[] = const() {value=2.0}           %2: f32[] = const() {value=2.0}
        %3: f32[2] = multiply(%1, %2)             %3: f32[2] = const() {value=[2., 4.]}
        %4: f32[2] = add(%0, %3)                  %4: f32[2] = add(%0, %3)
        return (%4)                               return (%4)

    Results are computed by the op's own kernel (graph.nodes.evaluate), so they equal what the
    plan would compute. Shape-only ops (rows with `shape_only`: zeros_like, ones_like, shape,
    size) also fold when their input's static shape is fully known, whatever computes it.
    Not folded: stateful ops and function calls, nodes with control inputs, results with
    more than `max_elements` (default FOLD_MAX_ELEMENTS) elements, nodes whose kernel fails
    or meets a floating-point error (it stays where it belongs, at call time), nodes producing a
    function output (each call keeps returning a fresh array). Inputs left unused are
    removed by dead code elimination.
    """
    cap = FOLD_MAX_ELEMENTS if max_elements is None else max_elements
    cp = GraphCopy(graph)
    output_nodes = {id(t.node) for t in graph.outputs}
    for node in graph.nodes:
        op = node.op
        if op is PLACEHOLDER:
            continue
        inputs = cp.inputs_of(node)
        values = None
        if _may_fold(node, inputs, output_nodes, cap):
            values = evaluate(node, [_fold_input(t) for t in inputs])
        if values is None or any(v.size > cap for v in values):
            cp.copy(node, inputs)
            continue
        single = len(values) == 1
        consts = [cp.emit_const(v, node.site, node.id if single else None) for v in values]
        cp.replace(node, consts)
    return cp.finish()


def _fold_input(t):
    """A constant input's value; for a shape-only op, a stand-in of the right shape/dtype."""
    if t.node.op is CONST:
        return t.node.attrs["value"]
    return shape_stand_in(t)


def _may_fold(node, inputs, output_nodes, cap):
    """True if fold_constants tries to evaluate `node` (its kernel may still refuse)."""
    op = node.op
    if op is CONST or not node.outputs or node.control_inputs or id(node) in output_nodes:
        return False
    shape_only = op.shape_only
    for t in inputs:
        if t.node.op is not CONST and not (shape_only and None not in t.shape):
            return False
    if op.function_attrs or "transient" in op.attrs.values() or node.stateful:
        return False
    return all(n is None or n <= cap for n in (num_elements(t.shape) for t in node.outputs))


def _fold_applies(graph):
    """True if some node has only constant inputs and fold_constants would try it."""
    output_nodes = {id(t.node) for t in graph.outputs}
    return any(_may_fold(n, n.inputs, output_nodes, FOLD_MAX_ELEMENTS)
               for n in graph.nodes if n.op is not PLACEHOLDER)


# ---------------------------------------------------------------------------------------
# Algebraic simplification

def _const_value(t):
    return t.node.attrs["value"] if t.node.op is CONST else None


def _neutral(c, x, out, test, _seen={}):
    """True if `x op c` is `x` itself: `c` is a constant that passes `test` everywhere and
    broadcasting it changes neither the shape nor the dtype of `x`."""
    if c is None:
        return False
    xs = tuple(x.shape)
    if c.ndim > len(xs) or x.dtype is not out.dtype or xs != tuple(out.shape):
        return False
    if c.ndim:
        lead = len(xs) - c.ndim
        if any(d != 1 and d != xs[lead + i] for i, d in enumerate(c.shape)):
            return False    # c would broadcast x to a bigger shape (or x's size is unknown)
        if c.size > 16:
            return bool(test(c))
    # A constant such as 1.01 meets every node of a chain: test its bytes once.
    # (Keyed by value, not id(): the ids of dead arrays are reused.)
    key = (test, c.dtype, c.shape, c.tobytes())
    hit = _seen.get(key)
    if hit is None:
        if len(_seen) > 4096:
            _seen.clear()
        hit = _seen[key] = bool(test(c))
    return hit


def _is_one(c):
    return np.all(c == 1)


def _is_neg_zero(c):
    # x + (-0.0) == x for every float x; x + 0.0 is not (-0.0 + 0.0 is +0.0)
    return np.all(c == 0) and (c.dtype.kind not in "fc" or np.all(np.signbit(c)))


def _is_pos_zero(c):
    # x - 0.0 == x for every float x; x - (-0.0) is not
    return np.all(c == 0) and (c.dtype.kind not in "fc" or not np.any(np.signbit(c)))


def _either_side(is_neutral):
    """The rule of a commutative op: `x op c` and `c op x` are x where constant c is neutral."""
    def rule(cp, node, x, y):
        out = node.outputs[0]
        if _neutral(_const_value(y), x, out, is_neutral):
            return [x]
        if _neutral(_const_value(x), y, out, is_neutral):
            return [y]
        return None
    return rule


_rule_multiply = _either_side(_is_one)
_rule_add = _either_side(_is_neg_zero)


def _rule_subtract(cp, node, x, y):
    return [x] if _neutral(_const_value(y), x, node.outputs[0], _is_pos_zero) else None


def _rule_divide(cp, node, x, y):
    return [x] if _neutral(_const_value(y), x, node.outputs[0], _is_one) else None


def _rule_identity(cp, node, x):
    return [x]


def _rule_stop_gradient(cp, node, x):
    # stop_gradient itself stays (gradients built from this graph need it); twice is once
    return [x] if x.node.op is _STOP_GRADIENT else None


def _rule_same_type(cp, node, x, *rest):
    """cast to its own dtype, reshape/broadcast_to to its own (fully known) shape."""
    out = node.outputs[0]
    if x.dtype is out.dtype and tuple(x.shape) == tuple(out.shape) and None not in x.shape:
        return [x]
    if node.op.name == "cast" and x.dtype is out.dtype and tuple(x.shape) == tuple(out.shape):
        return [x]
    return None


def _rule_transpose(cp, node, x):
    perm = tuple(node.attrs["perm"])
    if perm == tuple(range(len(perm))):
        return [x]
    inner = x.node
    if inner.op is node.op and not inner.control_inputs:
        p1 = tuple(inner.attrs["perm"])
        composed = tuple(p1[i] for i in perm)          # transpose(transpose(y, p1), p2)[i] axis
        y = inner.inputs[0]
        if composed == tuple(range(len(composed))):
            return [y]
        out = node.outputs[0]
        new = cp.emit(node.op, (y,), {"perm": composed}, [(out.shape, out.dtype)], node.site)
        return new.outputs
    return None


def _known(shape):
    return shape is not None and None not in shape


def _rule_like(cp, node, x, like):
    """sum_to_like / broadcast_like: x itself when x already has like's (known) shape; a
    broadcast to that shape, once known (which folds when x is constant); a sum over the
    leading axes alone (what a gradient makes of a broadcast bias) as reduce_sum."""
    out = node.outputs[0]
    shape = tuple(out.shape)
    if not _known(shape):
        return None
    if tuple(x.shape) == shape:
        return [x]
    if node.op.name == "broadcast_like":
        return cp.emit(_BROADCAST_TO, (x,), {"shape": shape}, [(shape, out.dtype)], node.site).outputs
    lead = len(x.shape) - len(shape)
    if _known(x.shape) and lead > 0 and tuple(x.shape[lead:]) == shape:
        attrs = {"axis": tuple(range(lead)), "keepdims": False}
        return cp.emit(_REDUCE_SUM, (x,), attrs, [(shape, out.dtype)], node.site).outputs
    return None


def _rule_size(cp, node, x):
    """size / shape of a tensor whose shape is known: a constant."""
    if not _known(x.shape):
        return None
    out = node.outputs[0]
    value = num_elements(x.shape) if node.op.name == "size" else tuple(x.shape)
    return [cp.emit_const(np.array(value, dtype=out.dtype.np), node.site)]


_RULES = {
    "sum_to_like": _rule_like, "broadcast_like": _rule_like, "size": _rule_size, "shape": _rule_size,
    "multiply": _rule_multiply, "add": _rule_add, "subtract": _rule_subtract,
    "divide": _rule_divide, "identity": _rule_identity, "stop_gradient": _rule_stop_gradient,
    "cast": _rule_same_type, "reshape": _rule_same_type, "broadcast_to": _rule_same_type,
    "transpose": _rule_transpose,
}


def simplify_algebra(graph):
    """Remove operations that do nothing: x*1, 1*x, x/1, x+(-0.), x-0, identity, ...

    Before:                                   After:
      func @f(%0: f32[3]) -> (f32[3]):          func @f(%0: f32[3]) -> (f32[3]):
        %1: f32[] = const() {value=1.0}           %1: f32[] = const() {value=1.0}
        %2: f32[3] = multiply(%0, %1)             %2: f32[3] = tanh(%0)
        %3: f32[3] = identity(%2)                 return (%2)
        %4: f32[3] = tanh(%3)
        return (%4)

    Rules (each only when the result has exactly the shape and dtype of the operand kept,
    so broadcasting never changes a result): x*1, 1*x, x/1; x+0, 0+x, x-0 for integers
    and, for floats, only where exact (x + -0.0 and x - 0.0: `-0.0 + 0.0` is `+0.0`);
    identity(x) -> x; stop_gradient(stop_gradient(x)) -> stop_gradient(x) (one is kept);
    cast to the same dtype, reshape/broadcast_to to the same known shape -> x;
    transpose(transpose(x, p), q) -> x when the composed permutation is the identity,
    else one transpose; sum_to_like/broadcast_like(x, like) -> x when x already has like's
    known shape, broadcast_like to a known shape -> broadcast_to (folded when x is
    constant); size/shape of a known shape -> a constant (what a relaxed trace made static
    by graph/specialize.py leaves to fold). Nodes with control inputs and stateful nodes
    are kept.
    Unused constants are left for dead code elimination.
    """
    cp = GraphCopy(graph)
    for node in graph.nodes:
        if node.op is PLACEHOLDER:
            continue
        inputs = cp.inputs_of(node)
        new = _simplified(cp, node, inputs)
        if new is not None:
            cp.replace(node, new)
        else:
            cp.copy(node, inputs)
    return cp.finish()


def _simplified(cp, node, inputs):
    """The tensors standing for `node`'s outputs once simplified, or None (keep the node)."""
    rule = _RULES.get(node.op.name)
    if rule is None or node.control_inputs or node.stateful:
        return None
    new = rule(cp, node, *inputs)
    if new is not None and all(a.dtype is b.dtype and tuple(a.shape) == tuple(b.shape)
                               for a, b in zip(new, node.outputs)):
        return new
    return None


class _Probe:
    """Stands in for a GraphCopy when only asking whether a rule applies: emits nothing,
    returns a node-like object with outputs of the requested types."""

    class _Tensor:
        __slots__ = ("shape", "dtype")

    class _Node:
        __slots__ = ("outputs",)

    @classmethod
    def emit_const(cls, value, site=None, node_id=None):
        arr = np.asarray(value)
        return cls.emit(CONST, (), {}, [(arr.shape, _probe_dtype(arr))]).outputs[0]

    @classmethod
    def emit(cls, op, inputs, attrs, out_types, site=None, control_inputs=(), node_id=None):
        node = cls._Node()
        node.outputs = []
        for shape, dtype in out_types:
            t = cls._Tensor()
            t.shape, t.dtype = shape, dtype
            node.outputs.append(t)
        return node


def _probe_dtype(arr):
    return dtypes.from_numpy(arr.dtype)


def _simplify_applies(graph):
    """True if simplify_algebra would remove or rewrite a node (it finds the first one)."""
    return any(_simplified(_Probe, n, n.inputs) is not None
               for n in graph.nodes if n.op.name in _RULES)


# ---------------------------------------------------------------------------------------
# Call inlining

def inline_calls(graph):
    """Replace each `call` node by a copy of its function's nodes (recursively).

    Before:                                   After:
      func @f(%0: f32[3]) -> (f32[3]):          func @f(%0: f32[3]) -> (f32[3]):
        %1: f32[3] = call(%0) {f=@g}              %1: f32[3] = tanh(%0)
        return (%1)                               return (%1)

      func @g(%0: f32[3]) -> (f32[3]):
        %1: f32[3] = tanh(%0)
        return (%1)

    Inlined nodes get fresh ids (after the caller's) and keep their own source sites.
    Inlined stateful ops are chained after the caller's earlier stateful ops and get the
    call's control inputs; a function that calls itself is left as a call, and so is a
    function of a loaded document (it runs within that document's budgets).
    """
    cp = GraphCopy(graph)
    _inline_nodes(cp, graph.nodes, [graph], keep_ids=True)
    return cp.finish()


def _inline_nodes(cp, nodes, active, keep_ids, extra_controls=()):
    for node in nodes:
        if node.op is PLACEHOLDER:
            continue
        f = node.attrs.get("f") if node.op.name == "call" else None
        if isinstance(f, Graph) and f not in active and len(f.all_inputs) == len(node.inputs) and \
                f.derived.budget is None:     # a loaded document's function keeps its budgets
            inputs = cp.inputs_of(node)
            controls = cp.controls_of(node)
            for c in extra_controls:
                if c not in controls:
                    controls.append(c)
            for p, t in zip(f.all_inputs, inputs):
                cp.tensors[id(p)] = t
                cp.stands_for[id(p.node)] = (t.node,)
            first = len(cp.graph.nodes)
            active.append(f)
            _inline_nodes(cp, f.nodes, active, keep_ids=False, extra_controls=controls)
            active.pop()
            outs = [cp.tensors[id(t)] for t in f.outputs]
            effects = [n for n in cp.graph.nodes[first:] if n.stateful]
            stands = list(dict.fromkeys([t.node for t in outs] + effects))
            cp.replace(node, outs, stands)
            continue
        extra = extra_controls if extra_controls and node.stateful else ()
        cp.copy(node, keep_id=keep_ids, extra_controls=extra)


# ---------------------------------------------------------------------------------------
# The pipeline

def _has_calls(graph):
    return any(n.op.name == "call" for n in graph.nodes)


def _has_dead_nodes(graph):
    live = live_node_ids(graph)
    return any(id(n) not in live and n.op is not PLACEHOLDER for n in graph.nodes)


# ---------------------------------------------------------------------------------------
# Pruning unused outputs

def _used_outputs(graph):
    """id(tensor) of every tensor some node or the graph's outputs read."""
    used = {id(t) for t in graph.outputs}
    for n in graph.nodes:
        used.update(id(t) for t in n.inputs)
    return used


def _prunable(node, used):
    op = node.op
    if op.prune_outputs is None or node.stateful:
        return None
    flags = [id(t) in used for t in node.outputs]
    if all(flags):
        return None
    return op.prune_outputs(node.attrs, flags)


def prune_unused_outputs(graph):
    """Re-emit ops that can skip trailing outputs nobody reads (OpDef.prune_outputs).

    Before:                                        After:
      %3: (f32[], i32[], f32[?]) = while(%0) {       %3: f32[] = while(%0) {
          history=True, ...}                             history=False, ...}
      return (%3:0)                                  return (%3)

    Only the leading outputs survive, so every reader keeps its tensor. Effectful nodes are
    left as they are.
    """
    used = _used_outputs(graph)
    cp = GraphCopy(graph)
    for node in graph.nodes:
        if node.op is PLACEHOLDER:
            continue
        attrs = _prunable(node, used)
        if attrs is None:
            cp.copy(node)
            continue
        inputs = cp.inputs_of(node)
        out_types = infer_types(node.op, inputs, attrs)
        new = cp.emit(node.op, inputs, attrs, out_types, node.site, cp.controls_of(node), node.id)
        cp.replace(node, new.outputs, (new,))
    return cp.finish()


def _prune_applies(graph):
    candidates = [n for n in graph.nodes if n.op.prune_outputs is not None and not n.stateful]
    if not candidates:      # the common case: no op of the graph can prune (no reads to index)
        return False
    used = _used_outputs(graph)
    return any(_prunable(n, used) is not None for n in candidates)


# Tests that let `optimize` skip a pass that would only copy the graph, each sharing its
# pass's decision code and stopping at the first change found. A skipped pass saves a copy
# and a verify: on a 10,000-node chain that none of the passes changes, the pipeline went
# from 22 to ~5 us per node.
_APPLIES = {inline_calls: _has_calls, simplify_algebra: _simplify_applies,
            fold_constants: _fold_applies, eliminate_common_subexpressions: _cse_applies,
            eliminate_dead_code: _has_dead_nodes, prune_unused_outputs: _prune_applies}

DEFAULT_PIPELINE = (inline_calls, simplify_algebra, fold_constants,
                    eliminate_common_subexpressions, prune_unused_outputs, eliminate_dead_code)


def optimize(graph, pipeline=DEFAULT_PIPELINE):
    """Run `pipeline` (default: DEFAULT_PIPELINE) on `graph`, verifying input and result:
    `fast = optimize(g)` computes what `g` does. A pass that would not change the graph is
    skipped (its test in `_APPLIES`; all skipped: `g` itself, verified once). Passes never
    mutate their input, so an invalid result (or a pass failing on an earlier one's) re-runs
    the pipeline verifying every pass, to name it: only a failure pays a verify per pass.
    """
    # Passes make many small objects that form reference cycles (node <-> tensor); pausing
    # the cyclic collector meanwhile took a 10,000-node chain from 0.62 s to 0.43 s.
    with paused_gc():
        try:
            verify(graph)
        except VerifyError as e:
            raise VerifyError(f"optimize: the input function is invalid: {e}") from None
        try:
            out = _run_pipeline(graph, pipeline, checked=False)
            return out if out is graph else verify(out, recursive=False)   # (callees: checked above)
        except Exception:   # noqa: BLE001 - whatever broke, the checked run names its pass
            return _run_pipeline(graph, pipeline, checked=True)


def _run_pipeline(graph, pipeline, checked):
    """`graph` through `pipeline`'s passes that apply; `checked`: verified after each."""
    for step in pipeline:
        if step in _APPLIES and not _APPLIES[step](graph):
            continue
        graph = step(graph)
        if checked:
            try:
                verify(graph, recursive=False)
            except VerifyError as e:
                raise VerifyError(f"optimize: pass {getattr(step, '__name__', repr(step))} produced an invalid "
                                  f"graph (a bug in graph/passes.py; call optimize(g, pipeline=...) without "
                                  f"that pass to work around it): {e}") from None
    return graph
