"""The tracers `df.cond`, `df.while_loop`, `df.scan`, `df.map_fn` and `df.foldl`: plain
Python eagerly, one node while tracing.

While tracing, `cond` traces each branch into its own function graph and `while_loop`
traces `cond` and `body` the same way; graph/control_flow.py and graph/while_op.py own the
`cond` and `while` ops those functions go into (kernels, inference, gradients). `scan`, `map_fn` and `foldl`
trace `fn` once into the body of one `scan` node (graph/scan.py), whatever the number of
rows. Tensors a branch or body uses
from outside become extra inputs of the node. Here: the Python side only (structures,
weak typing of returned numbers, the checks that name the user's function).
"""
import numpy as np

from defun.runtime import dtypes, errors, sites
from defun.runtime.context import state
from defun.runtime.nest import flatten, pack_as, sorted_keys
from defun.runtime.ops._args import bool_arg, count_arg, error
from defun.runtime.ops.array_ops import cast, concat, expand_dims, identity, reduce_sum, stack, zeros
from defun.runtime.shapes import merge_shapes, shape_str, shapes_compatible
from defun.runtime.tensor import EagerTensor, Tensor, convert_to_tensor
from defun.runtime.variables import Variable
from defun.graph.control_flow import cond_node
from defun.graph.while_op import while_node
from defun.graph.scan import scan_node
from defun.graph.ir import Graph, unique_name
from defun.graph.nodes import SymbolicTensor
from defun.spec import TensorSpec

__all__ = ["cond", "while_loop", "scan", "map_fn", "foldl"]


# ---------------------------------------------------------------------------------------
# helpers shared by both constructs
def _type_text(t):
    return f"{t.dtype.name}{shape_str(t.shape)}"


def _structure(s):
    """A comparable description of a nest's shape (leaves are '*'; list and tuple agree)."""
    if isinstance(s, dict):
        return ("dict", tuple((k, _structure(s[k])) for k in sorted_keys(s)))
    if isinstance(s, tuple) and hasattr(s, "_fields"):
        return (type(s).__name__, tuple(_structure(v) for v in s))
    if isinstance(s, (list, tuple)):
        return ("seq", tuple(_structure(v) for v in s))
    return "*"


def _own_tensor(graph, leaf, what):
    """Leaf `leaf` of a traced function's result as a tensor computed in `graph`."""
    if isinstance(leaf, Variable):
        leaf = leaf.read_value()
    if isinstance(leaf, SymbolicTensor) and leaf.node.graph is graph:
        return leaf
    if isinstance(leaf, Tensor):
        # an outer tensor passed straight through: an identity node reads its capture
        return identity(leaf)
    if leaf is None:
        raise errors.TracingError(f"{what} is None; every output of a traced control-flow function "
                                  f"must be a tensor (or a number)")
    try:
        return convert_to_tensor(leaf)
    except (errors.InvalidArgumentError, TypeError) as e:
        raise errors.TracingError(f"{what} is a {type(leaf).__name__} ({leaf!r:.60}), not a tensor: {e}") from None


# ---------------------------------------------------------------------------------------
# cond
def cond(pred, true_fn, false_fn, name=None):
    """`true_fn()` if `pred` else `false_fn()`; while tracing, one `cond` node.

    >>> df.cond(x > 0, lambda: x * 2.0, lambda: -x)

    Both functions take no arguments and must return the same structure of tensors with
    the same dtypes (shapes may differ in size; the result then has None there).
    """
    if not callable(true_fn) or not callable(false_fn):
        raise TypeError(f"cond: true_fn and false_fn must be callables taking no arguments, got "
                        f"{type(true_fn).__name__} and {type(false_fn).__name__}")
    if isinstance(pred, Variable):
        pred = pred.read_value()
    elif hasattr(pred, "_weak_tensor"):     # bools a converted tensor `if` joined (autograph.values.WeakValue)
        pred = pred._weak_tensor()
    outer = state.graph
    if outer is None or not isinstance(pred, SymbolicTensor):
        # Eager, or a predicate whose value is known now: plain Python.
        value = np.asarray(pred)
        if value.ndim != 0 or value.dtype != np.bool_:
            raise errors.InvalidArgumentError(
                f"cond: the predicate must be a scalar bool, got {value.dtype.name}"
                f"{list(value.shape)} (at {sites.format_site(sites.user_site(2))}); use e.g. "
                f"df.greater(x, 0), or reduce first (df.reduce_max(x) > 0)")
        return true_fn() if bool(pred) else false_fn()
    if pred.dtype is not dtypes.bool or tuple(pred.shape) != ():
        raise errors.InvalidArgumentError(
            f"cond: the predicate must be a scalar bool tensor, got {_type_text(pred)} "
            f"(at {sites.format_site(sites.user_site(2))}); use e.g. df.greater(x, 0) or df.cast")

    branches, (then_res, else_res) = trace_branches(outer, true_fn, false_fn)
    if _structure(then_res) != _structure(else_res):
        raise errors.InvalidArgumentError(
            f"cond: true_fn and false_fn must return the same structure; true_fn returned "
            f"{_describe(then_res)}, false_fn returned {_describe(else_res)}")
    then_leaves, else_leaves = flatten(then_res), flatten(else_res)
    out = join_branches(pred, branches, then_leaves, else_leaves, name)
    return pack_as(then_res, out) if then_leaves else then_res


def trace_branches(outer, true_fn, false_fn):
    """([true graph, false graph], [true_fn(), false_fn()]): each function traced into a
    branch graph of `outer`, not yet finalized (join_branches does that)."""
    branches, results = [], []
    for which, fn in (("true", true_fn), ("false", false_fn)):
        g = Graph(unique_name(f"cond_{which}"), outer=outer, base_name=f"cond_{which}")
        with g.building():
            results.append(fn())
        branches.append(g)
    return branches, results


def join_branches(pred, branches, then_leaves, else_leaves, name=None):
    """The outputs of one `cond` node choosing, by `pred`, between the leaves each traced
    branch (trace_branches) returns: Python numbers take the other branch's dtype."""
    outs = _branch_outputs(branches, then_leaves, else_leaves)
    for g, o in zip(branches, outs):
        g.finalize(o)
    return cond_node(pred, branches[0], branches[1], name)


def _branch_outputs(branches, then_leaves, else_leaves):
    """Each branch's result leaves as tensors of its graph, checked to agree in dtype and
    rank (a Python number takes the dtype of the other branch's tensor: weak typing)."""
    outs = ([], [])
    for k, pair in enumerate(zip(then_leaves, else_leaves)):
        for j, (g, leaf) in enumerate(zip(branches, pair)):
            with g.building():
                if not isinstance(leaf, (Tensor, Variable)) and isinstance(pair[1 - j], (Tensor, Variable)):
                    leaf = _weak(leaf, pair[1 - j])
                outs[j].append(_own_tensor(g, leaf, f"cond: output {k} of {('true_fn', 'false_fn')[j]}"))
        ta, tb = outs[0][-1], outs[1][-1]
        if ta.dtype is not tb.dtype:
            raise errors.InvalidArgumentError(
                f"cond: output {k} has dtype {ta.dtype.name} in true_fn but {tb.dtype.name} in false_fn; "
                f"both branches must return the same dtypes (use df.cast)")
        if len(ta.shape) != len(tb.shape):
            raise errors.InvalidArgumentError(
                f"cond: output {k} has shape {shape_str(ta.shape)} in true_fn but "
                f"{shape_str(tb.shape)} in false_fn; the ranks must agree")
    return outs


def _weak(value, like):
    """Python number `value` (or numbers an autograph `if` joined) in the dtype of tensor `like`."""
    if hasattr(value, "_weak_tensor"):
        return value._weak_tensor(like.dtype.np)
    dt = like.dtype
    arr = np.asarray(value)
    if arr.dtype.kind == "f" and not dt.is_floating:
        return value
    return np.asarray(value, dtype=dt.np)


def _describe(s):
    if isinstance(s, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(s[k])}" for k in sorted_keys(s)) + "}"
    if isinstance(s, (list, tuple)):
        inner = ", ".join(_describe(v) for v in s)
        return f"[{inner}]" if isinstance(s, list) else f"({inner}{',' if len(s) == 1 else ''})"
    if isinstance(s, Tensor):
        return "tensor"
    return type(s).__name__


# ---------------------------------------------------------------------------------------
# while
def while_loop(cond, body, loop_vars, maximum_iterations=None, name=None):
    """Repeat `loop_vars = body(*loop_vars)` while `cond(*loop_vars)`; one `while` node traced.

    >>> i, x = df.while_loop(lambda i, x: i < 10, lambda i, x: (i + 1, x * 2.0), (0, x0))

    `loop_vars` is a tuple/list (or any nest inside one); `body` returns the same
    structure with the same dtypes and shapes. `maximum_iterations` bounds the count.
    """
    if not callable(cond) or not callable(body):
        raise TypeError(f"while_loop: cond and body must be callables, got {type(cond).__name__} "
                        f"and {type(body).__name__}")
    single = not isinstance(loop_vars, (list, tuple))
    vars_in = [loop_vars] if single else loop_vars
    if not flatten(vars_in):
        raise error(f"while_loop: loop_vars {_describe(loop_vars)} holds no loop variable; a loop needs at "
                    f"least one (the state cond tests and body updates, e.g. a counter)")
    max_iter = _max_iterations(maximum_iterations)

    def call_body(vs):
        out = body(*vs)
        if len(vs) == 1 and not isinstance(out, (list, tuple)):
            out = [out]
        if _structure(list(out) if isinstance(out, tuple) and not hasattr(out, "_fields") else out) != \
                _structure(list(vs) if isinstance(vs, tuple) and not hasattr(vs, "_fields") else vs):
            raise errors.InvalidArgumentError(
                f"while_loop: body must return the structure of loop_vars {_describe(vs)}, got {_describe(out)}")
        return pack_as(vars_in, flatten(out))

    outer = state.graph
    if outer is None:
        vs = vars_in
        count = 0
        while (max_iter is None or count < max_iter) and bool(cond(*vs)):
            vs = call_body(vs)
            count += 1
        return vs[0] if single else vs

    init = [convert_to_tensor(x.read_value() if isinstance(x, Variable) else x) for x in flatten(vars_in)]
    # an outer eager tensor among them enters as a capture of the graph being traced
    init = [outer.capture(t) if isinstance(t, EagerTensor) else t for t in init]
    body_g, shapes = _relaxed_body(call_body, vars_in, init, outer)
    cond_g = _trace_cond(cond, vars_in, init, outer, shapes)
    out = while_node(cond_g, body_g, init, max_iter, name)
    result = pack_as(vars_in, out)
    return result[0] if single else result


def _relaxed_body(call_body, vars_in, init, outer, collect=0):
    """(the finalized body graph, the loop variables' shapes in it): a loop variable whose
    size the body changes (or makes unknown) is unknown there, so nothing inside the body
    folds the size it had on entry (no shape_invariants needed). Traced again until no
    size changes; each trace can only turn sizes into None, so at most rank + 1 traces."""
    shapes = [tuple(t.shape) for t in init]
    while True:
        body_g = _trace_body(call_body, vars_in, init, outer, shapes, collect)
        relaxed = [merge_shapes(s, r.shape) for s, r in zip(shapes, body_g.outputs)]
        if relaxed == shapes:
            return body_g, shapes
        shapes = relaxed


def _trace_cond(cond, vars_in, init, outer, shapes):
    """The finalized graph of a while loop's `cond` on placeholders of `init`'s dtypes, of `shapes`."""
    cond_g = Graph(unique_name("while_cond"), outer=outer, base_name="while_cond")
    with cond_g.building():
        ph = [cond_g.placeholder(s, t.dtype, t.handle_data) for s, t in zip(shapes, init)]
        c = cond(*pack_as(vars_in, ph))
        if isinstance(c, Variable):
            c = c.read_value()
        if not isinstance(c, Tensor):
            c = convert_to_tensor(bool(c))
        c = _own_tensor(cond_g, c, "while_loop: the result of cond")
        if c.dtype is not dtypes.bool or tuple(c.shape) != ():
            raise errors.InvalidArgumentError(
                f"while_loop: cond must return a scalar bool tensor, got {_type_text(c)}")
    cond_g.finalize([c])
    return cond_g


def _trace_body(call_body, vars_in, init, outer, shapes, collect=0):
    """The finalized graph of a while loop's body on placeholders of `init`'s dtypes, of
    `shapes`, each result keeping its loop variable's dtype and rank (then `collect`
    values it gives per iteration, see collecting_while_loop)."""
    body_g = Graph(unique_name("while_body"), outer=outer, base_name="while_body")
    with body_g.building():
        ph = [body_g.placeholder(s, t.dtype, t.handle_data) for s, t in zip(shapes, init)]
        new = call_body(pack_as(vars_in, ph))
        new_leaves = []
        for k, (leaf, t) in enumerate(zip(flatten(new), init)):
            if not isinstance(leaf, (Tensor, Variable)) and leaf is not None:
                leaf = _weak(leaf, t)
            r = _own_tensor(body_g, leaf, f"while_loop: loop variable {k} returned by body")
            new_leaves.append(_kept_type(r, t, f"while_loop: loop variable {k}", "body",
                                         "a loop variable must keep", sizes=False))
        extra = flatten(new)[len(init):len(init) + collect]
        new_leaves += [_own_tensor(body_g, leaf, f"while_loop: collected value {k}") for k, leaf in enumerate(extra)]
    body_g.finalize(new_leaves)
    return body_g


def collecting_while_loop(cond, body, loop_vars, collect):
    """While tracing: one while node running `body(*loop_vars)` while `cond(*loop_vars)`,
    where `body` returns the new loop variables (a flat list) and then `collect` values of
    the iteration. ([final loop variables], [each collected value stacked: iterations
    first]); the stacks are differentiable like the loop variables (the node keeps them
    per iteration, as it does for its gradient)."""
    outer = state.graph
    init = [convert_to_tensor(x.read_value() if isinstance(x, Variable) else x) for x in loop_vars]
    init = [outer.capture(t) if isinstance(t, EagerTensor) else t for t in init]
    vars_in = list(init)
    body_g, shapes = _relaxed_body(lambda vs: list(body(*vs)), vars_in, init, outer, collect)
    cond_g = _trace_cond(cond, vars_in, init, outer, shapes)
    out = while_node(cond_g, body_g, init, None, None, saves=collect or None)    # none: a plain while node
    return out[:len(init)], out[len(init) + 1:]


def _max_iterations(m):
    if m is None:
        return None
    if isinstance(m, SymbolicTensor):
        raise errors.UnimplementedError(
            "while_loop: maximum_iterations must be a Python int or an eager tensor, not a traced tensor")
    # an int, a numpy integer or an integer eager scalar (1.5, True or "3" is a TypeError)
    return count_arg("while_loop", m, "maximum_iterations")


# ---------------------------------------------------------------------------------------
# scan, map_fn, foldl
def scan(fn, elems, initializer=None, reverse=False, name=None):
    """Every accumulator of `acc = fn(acc, x)` over the rows `x` of `elems`, stacked (TF's
    `tf.scan`); while tracing, one `scan` node however many rows.

    >>> df.scan(lambda a, x: a + x, df.constant([1., 2., 3.]))     # [1., 3., 6.]

    `elems` is a tensor or a nest of tensors of one length along axis 0 (`fn` gets rows
    in that nest); the accumulator has the structure of `initializer`, or without one of
    `elems`, whose first row (the last with `reverse`) is then the first accumulator and
    the first (last) result. With `reverse`, rows are taken from the last; result t is
    still the accumulator after row t.
    """
    return _fold("scan", fn, elems, initializer, reverse, True, name)


def foldl(fn, elems, initializer=None, name=None):
    """The last accumulator of `acc = fn(acc, x)` over the rows of `elems` (TF's
    `tf.foldl`); while tracing, one `scan` node that stacks nothing.

    >>> df.foldl(lambda a, x: a * x, df.constant([1., 2., 3., 4.]))  # 24.
    """
    return _fold("foldl", fn, elems, initializer, False, False, name)


def map_fn(fn, elems, fn_output_signature=None, name=None):
    """`fn(x)` for every row `x` of `elems` (a tensor or a nest of them), the results
    stacked (TF's `tf.map_fn`); while tracing, one `scan` node with no carry.

    >>> df.map_fn(lambda x: df.reduce_sum(x * x), df.ones([4, 3]))   # [3., 3., 3., 3.]

    `fn_output_signature` (a dtype, a df.TensorSpec, or a nest of them) states what `fn`
    returns; it is checked against the trace (Python numbers returned take its dtypes).
    """
    if not callable(fn):
        raise TypeError(f"map_fn: fn must be a callable, got {type(fn).__name__}")
    flat = _elements("map_fn", elems)
    signature = None if fn_output_signature is None else _signature(fn_output_signature)
    outer = state.graph
    if outer is None:
        results = [_leaves_like(fn(pack_as(elems, [x[t] for x in flat])), signature, "map_fn")
                   for t in range(int(flat[0].shape[0]))]
        if not results:     # no row to run: the types from a trace of fn
            structure, body_g = _trace_fn("map_fn", flat, lambda rows: fn(pack_as(elems, rows)), signature)
            return pack_as(structure, [zeros((0,) + tuple(d or 0 for d in t.shape), t.dtype)
                                       for t in body_g.outputs])
        for k, r in enumerate(results[1:]):
            if _structure(r) != _structure(results[0]):
                raise errors.InvalidArgumentError(
                    f"map_fn: fn returned {_describe(results[0])} for row 0 but {_describe(r)} for "
                    f"row {k + 1}; every row must give the same structure")
        flat_results = [flatten(r) for r in results]
        return pack_as(results[0], [stack([r[k] for r in flat_results])
                                    for k in range(len(flat_results[0]))])
    structure, body_g = _trace_fn("map_fn", flat, lambda rows: fn(pack_as(elems, rows)), signature)
    out = scan_node(body_g, [], flat, False, name)
    return pack_as(structure, out) if flatten(structure) else structure


def _fold(what, fn, elems, initializer, reverse, stacked, name):
    if not callable(fn):
        raise TypeError(f"{what}: fn must be a callable taking (accumulator, row), got {type(fn).__name__}")
    reverse = bool_arg(what, reverse, "reverse")
    flat = _elements(what, elems)
    if initializer is None:
        if flat[0].shape[0] == 0:
            raise errors.InvalidArgumentError(
                f"{what}: elems has no rows and no initializer is given; the first row is the "
                f"initializer when none is given, so give one (or at least one row)")
        structure = elems
        init = [x[-1] if reverse else x[0] for x in flat]
        rows = [x[:-1] if reverse else x[1:] for x in flat]
    else:
        structure = initializer
        init = [convert_to_tensor(v.read_value() if isinstance(v, Variable) else v)
                for v in flatten(initializer)]
        rows = flat
    if not init:
        raise errors.InvalidArgumentError(f"{what}: the initializer {_describe(initializer)} holds no tensor")
    if state.graph is not None:     # an outer eager tensor enters as a capture of the trace
        init = [state.graph.capture(t) if isinstance(t, EagerTensor) else t for t in init]
    acc_text = "initializer" if initializer is not None else "elems"

    def step(acc, row_leaves):
        new = fn(pack_as(structure, acc), pack_as(elems, row_leaves))
        if _structure(new) != _structure(structure):
            raise errors.InvalidArgumentError(
                f"{what}: fn must return the structure of the accumulator ({acc_text}: "
                f"{_describe(structure)}), got {_describe(new)}")
        return flatten(new)

    if state.graph is None:
        order = range(int(rows[0].shape[0]))
        acc, history = list(init), [None] * len(order)
        for t in (reversed(order) if reverse else order):
            acc = [_accumulator_leaf(what, k, v, a)
                   for k, (v, a) in enumerate(zip(step(acc, [x[t] for x in rows]), acc))]
            history[t] = acc
        if not stacked:
            return pack_as(structure, acc)
        out = [stack([h[k] for h in history]) if history else _no_rows(init[k], rows) for k in range(len(init))]
    else:
        body_g = _trace_fold(what, init, rows, step, stacked)
        out = scan_node(body_g, init, rows, reverse, name)
        if not stacked:
            return pack_as(structure, out[:len(init)])
        out = out[len(init):]
    if initializer is None:     # the first accumulator is the first (last) row itself
        ends = [expand_dims(a, 0) for a in init]
        out = [concat([o, e] if reverse else [e, o], 0) for o, e in zip(out, ends)]
    return pack_as(structure, out)


def _no_rows(init, rows):
    """Eagerly, what a scan of no rows stacks: empty, of the accumulator's shape, and (a tape's
    gradient: zeros) of the initial accumulator and the float rows, as a traced scan's is (the
    gradient of an argument only the rows read was 'not connected' eagerly, zeros in a defun)."""
    out = expand_dims(init, 0)[:0]
    if init.dtype.is_floating:
        for x in rows:
            if x.dtype.is_floating:     # (its sum: 0, over no row)
                out = out + cast(reduce_sum(x), init.dtype)
    return out


def _elements(what, elems):
    flat = flatten(elems)
    if not flat:
        raise errors.InvalidArgumentError(f"{what}: elems {_describe(elems)} holds no tensor")
    out = []
    for k, x in enumerate(flat):
        t = convert_to_tensor(x.read_value() if isinstance(x, Variable) else x)
        if not t.shape:
            raise errors.InvalidArgumentError(
                f"{what}: elems leaf {k} is a scalar ({_type_text(t)}); {what} walks the rows "
                f"(axis 0) of tensors of rank >= 1")
        out.append(t)
    lengths = {t.shape[0] for t in out} - {None}
    if len(lengths) > 1:
        raise errors.InvalidArgumentError(
            f"{what}: the tensors of elems must have the same size in dimension 0, got "
            f"{', '.join(_type_text(t) for t in out)}")
    return out


def _trace_fold(what, init, rows, step, stacked):
    """The body of a fold: carries = the accumulator leaves, then (scan) the same again to stack."""
    body_g = Graph(unique_name(f"{what}_body"), outer=state.graph, base_name=f"{what}_body")
    with body_g.building():
        acc = [body_g.placeholder(t.shape, t.dtype, t.handle_data) for t in init]
        xs = [body_g.placeholder(tuple(x.shape)[1:], x.dtype) for x in rows]
        leaves = [_accumulator_leaf(what, k, leaf, t, body_g)
                  for k, (leaf, t) in enumerate(zip(step(acc, xs), init))]
    return body_g.finalize(leaves + leaves if stacked else leaves)


def _accumulator_leaf(what, k, leaf, t, graph=None):
    """Leaf `k` of fn's new accumulator as a tensor (of `graph` while tracing), checked
    against the leaf `t` it replaces (a Python number takes its dtype)."""
    if not isinstance(leaf, (Tensor, Variable)) and leaf is not None:
        leaf = _weak(leaf, t)
    if graph is not None:
        r = _own_tensor(graph, leaf, f"{what}: accumulator leaf {k} returned by fn")
    elif leaf is None:
        raise errors.InvalidArgumentError(f"{what}: accumulator leaf {k} returned by fn is None")
    else:
        r = leaf.read_value() if isinstance(leaf, Variable) else convert_to_tensor(leaf)
    return _kept_type(r, t, f"{what}: accumulator leaf {k}", "fn", "an accumulator keeps")


def _kept_type(r, t, subject, returner, rule, sizes=True):
    """`r`, what `returner` returns for `subject` that entered as `t`, refused unless it has
    t's dtype and a shape compatible with t's (`rule`: '... keeps' its dtype, its shape;
    `sizes=False`: its rank only, the sizes may change)."""
    if r.dtype is not t.dtype:
        raise errors.InvalidArgumentError(
            f"{subject} enters as {t.dtype.name} but {returner} returns {r.dtype.name}; "
            f"{rule} its dtype (use df.cast)")
    if not sizes and len(t.shape) != len(r.shape):
        raise errors.InvalidArgumentError(
            f"{subject} enters with shape {shape_str(t.shape)} but {returner} returns shape "
            f"{shape_str(r.shape)}; {rule} its rank (its sizes may change)")
    if sizes and not shapes_compatible(tuple(t.shape), tuple(r.shape)):
        raise errors.InvalidArgumentError(
            f"{subject} enters with shape {shape_str(t.shape)} but {returner} returns shape "
            f"{shape_str(r.shape)}; {rule} its shape")
    return r


def _trace_fn(what, rows, fn, signature):
    """(structure of fn's result, the finalized body graph returning its leaves) for fn(rows)."""
    body_g = Graph(unique_name(f"{what}_body"), outer=state.graph, base_name=f"{what}_body")
    with body_g.building():
        xs = [body_g.placeholder(tuple(x.shape)[1:], x.dtype) for x in rows]
        result = _leaves_like(fn(xs), signature, what)
        leaves = [_own_tensor(body_g, leaf, f"{what}: output {k} of fn") for k, leaf in enumerate(flatten(result))]
    return result, body_g.finalize(leaves)


class _AnyShape:
    """A signature leaf that gives only a dtype (TensorSpec's fields; shape None: any)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, dtype):
        self.shape, self.dtype = None, dtypes.as_dtype(dtype)


def _signature(sig):
    """fn_output_signature as a nest of TensorSpec-likes."""
    def leaf(s):
        return s if isinstance(s, TensorSpec) else _AnyShape(s)
    if isinstance(sig, (list, tuple, dict)):
        return pack_as(sig, [leaf(s) for s in flatten(sig)])
    return leaf(sig)


def _leaves_like(result, signature, what):
    """`result` with Python numbers as tensors of the signature's dtypes (or their own)."""
    if signature is not None and _structure(result) != _structure(signature):
        raise errors.InvalidArgumentError(
            f"{what}: fn returned {_describe(result)}, but fn_output_signature has the structure "
            f"{_describe(signature)}")
    leaves = flatten(result)
    specs = flatten(signature) if signature is not None else [None] * len(leaves)
    out = []
    for k, (leaf, spec) in enumerate(zip(leaves, specs)):
        if isinstance(leaf, Variable):
            leaf = leaf.read_value()
        elif not isinstance(leaf, Tensor) and leaf is not None:
            leaf = convert_to_tensor(leaf, None if spec is None else spec.dtype)
        if spec is not None and isinstance(leaf, Tensor) and (
                leaf.dtype is not spec.dtype or
                not shapes_compatible(tuple(leaf.shape), tuple(spec.shape or leaf.shape))):
            raise errors.InvalidArgumentError(
                f"{what}: output {k} of fn is {_type_text(leaf)}, fn_output_signature says "
                f"{spec.dtype.name}{'' if spec.shape is None else shape_str(spec.shape)}")
        out.append(leaf)
    return pack_as(result, out) if isinstance(result, (list, tuple, dict)) else out[0]
