"""The `cond` and `while` ops: kernels, inference, gradients, binding, and how nodes are made.

Each node holds its functions as attrs (branches; cond and body) and takes the values they
capture as extra inputs. A node whose functions contain effects is stateful (graph.ir.Node).
Gradients are written with ops, so they build graph nodes like any other gradient:
- a cond's gradient is a cond over the branches' gradient functions;
- a while's forward node also returns the iteration count and, per loop variable, the
  stacked values that entered each iteration; its gradient is another while loop that
  walks those back, calling the body's gradient function once per iteration.
The Python tracers `df.cond` / `df.while_loop` (defun/control_flow.py) make the functions.
"""
import numpy as np

from runtime import dtypes, errors
from runtime.context import state
from runtime.execute import run_op
from runtime.ops.array_ops import gather, zeros, zeros_like
from runtime.ops.math_ops import greater
from runtime.registry import register
from runtime.shapes import merge_shapes, shape_str, shapes_compatible
from runtime.variables import watch_read_handles
from graph.functions import call_graph, plan_of, remat_backward
from graph.ir import Graph, unique_name

__all__ = ["COND", "WHILE", "cond_node", "while_node", "share_captures"]


def _type_text(t):
    return f"{t.dtype.name}{shape_str(t.shape)}"


def share_captures(graphs):
    """Give every graph a placeholder for every value any of them captured, in one order.

    Returns the outer values (the extra inputs of the node). Afterwards each graph's
    `all_inputs` is its own argument placeholders followed by the shared captures.
    """
    order, values = [], {}
    for g in graphs:
        for tid in g.capture_order:
            if tid not in values:
                values[tid] = g.captures[tid][0]
                order.append(tid)
    for g in graphs:
        for tid in order:
            if tid not in g.captures:
                g.capture(values[tid])   # an unused placeholder keeps the calling convention
        g.capture_order = list(order)
    return [values[tid] for tid in order]


def _zeros_for(t, like=None):
    """Zeros shaped like the gradient of `t` (a resource handle's gradient is its value's)."""
    if t.dtype is dtypes.resource:
        shape, dtype = t.handle_data.shape_and_type[0]
        return zeros(tuple(shape), dtype)
    if like is not None and None not in tuple(like.shape):
        return zeros(tuple(like.shape), like.dtype)
    return zeros_like(t)


def _as_list(out):
    if out is None:
        return []
    return list(out) if isinstance(out, tuple) else [out]


# ---------------------------------------------------------------------------------------
# cond
def _cond_kernel(pred, *vals, then_branch, else_branch):
    return plan_of(then_branch if pred else else_branch).run(*vals)


def _cond_bind(attrs, backend):
    run_then = plan_of(attrs["then_branch"], backend).run
    run_else = plan_of(attrs["else_branch"], backend).run

    def run_cond(pred, *vals):
        return run_then(*vals) if pred else run_else(*vals)
    return run_cond


def _cond_infer(shapes, dts, attrs):
    then_g, else_g = attrs["then_branch"], attrs["else_branch"]
    if dts[0] is not dtypes.bool or tuple(shapes[0]) != ():
        raise errors.InvalidArgumentError(
            f"cond: the predicate must be a scalar bool tensor, got {dts[0].name}{shape_str(shapes[0])}; "
            f"compare with df.greater/df.equal or use df.cast")
    for g in (then_g, else_g):
        params = g.all_inputs
        if len(params) != len(shapes) - 1:
            raise errors.InvalidArgumentError(
                f"cond: branch {g.name} takes {len(params)} inputs, the node passes {len(shapes) - 1}")
        for k, (s, d, p) in enumerate(zip(shapes[1:], dts[1:], params)):
            if d is not p.dtype or not shapes_compatible(tuple(s), p.shape):
                raise errors.InvalidArgumentError(
                    f"cond: input {k + 1} is {d.name}{shape_str(s)}, branch {g.name} expects "
                    f"{_type_text(p)}")
    if len(then_g.outputs) != len(else_g.outputs):
        raise errors.InvalidArgumentError(
            f"cond: branches return {len(then_g.outputs)} and {len(else_g.outputs)} tensors")
    out = []
    for k, (a, b) in enumerate(zip(then_g.outputs, else_g.outputs)):
        if a.dtype is not b.dtype or len(a.shape) != len(b.shape):
            raise errors.InvalidArgumentError(
                f"cond: output {k} is {_type_text(a)} in the true branch but {_type_text(b)} in the false branch")
        out.append((merge_shapes(a.shape, b.shape), a.dtype))
    return out


def _cond_grad(op, *grads):
    then_g, else_g = op.attrs["then_branch"], op.attrs["else_branch"]
    diff = [k for k, t in enumerate(op.outputs) if t.dtype.is_floating]
    result = [None] * len(op.inputs)
    if not diff or all(grads[k] is None for k in diff):
        return result
    out_shapes = tuple(tuple(op.outputs[k].shape) for k in diff)
    grad_then, grad_else, positions = _cond_grad_branches(then_g, else_g, out_shapes)
    if not positions:
        return result
    seeds = [grads[k] if grads[k] is not None else zeros_like(op.outputs[k]) for k in diff]
    out = _as_list(run_op(COND, [op.inputs[0]] + list(op.inputs[1:]) + seeds,
                          {"then_branch": grad_then, "else_branch": grad_else}))
    for j, k in enumerate(positions):
        result[1 + k] = out[j]
    return result


def _cond_grad_branches(then_g, else_g, out_shapes):
    """(then gradient graph, else gradient graph, input positions they give gradients for).

    Both take the branch inputs then one seed per float output, and return the same list
    of gradients: a branch with no gradient for an input returns zeros for it.
    """
    cache = then_g.derived.cond_grads
    key = (else_g.uid, out_shapes)
    hit = cache.get(key)
    if hit is not None:
        return hit
    remats = [remat_backward(then_g), remat_backward(else_g)]
    n_in = len(then_g.all_inputs)
    positions = [k for k in range(n_in) if any(spec[k] is not None for _, spec in remats)]
    diff = [k for k, t in enumerate(then_g.outputs) if t.dtype.is_floating]
    made = []
    for b, (rb, spec), (orb, ospec) in ((then_g, remats[0], remats[1]), (else_g, remats[1], remats[0])):
        w = Graph(f"{b.name}_grad", base_name=f"{b.base_name}_grad")
        with w.building():
            xs = [w.placeholder(p.shape, p.dtype, p.handle_data) for p in b.all_inputs]
            gs = [w.placeholder(shape, b.outputs[k].dtype) for k, shape in zip(diff, out_shapes)]
            res = call_graph(rb, xs + gs)
            outs = []
            for k in positions:
                if spec[k] is not None:
                    outs.append(res[spec[k]])
                else:
                    outs.append(_zeros_for(xs[k], like=orb.outputs[ospec[k]]))
        w.finalize(outs)
        made.append(w)
    cache[key] = (made[0], made[1], positions)
    return cache[key]


def _cond_outputs(attrs, n):
    return len(attrs["then_branch"].outputs)


def _cond_onnx(e, node, ins):
    """ONNX If: each branch a subgraph emitting the branch function on the node's inputs,
    which it reads from the enclosing graph."""
    pred, vals = ins[0], list(ins[1:])
    types = [(t.shape, t.dtype) for t in node.outputs]
    if not types:       # only variable reads inside (assignments have no form): nothing to compute
        return []

    def branch(g, name):
        return e.subgraph([], lambda _: e.inline(g, vals), types, name=name)
    return e.op("If", pred, n=len(types), then_branch=branch(node.attrs["then_branch"], "then"),
                else_branch=branch(node.attrs["else_branch"], "else"))


_COND_ATTRS = {"then_branch": "func", "else_branch": "func"}
COND = register("cond", _cond_kernel, _cond_infer, _cond_grad, num_outputs=_cond_outputs,
                none_grads=True, attrs=_COND_ATTRS, bind=_cond_bind, num_inputs=None, defaults={},
                onnx=_cond_onnx)


# ---------------------------------------------------------------------------------------
# while
def _while_runner(attrs, backend=None):
    run_cond = plan_of(attrs["cond"], backend).run
    run_body = plan_of(attrs["body"], backend).run
    n = len(attrs["body"].outputs)
    max_iter = attrs["maximum_iterations"]
    keep = attrs["history"]

    def run_while(*vals):
        loop, consts = tuple(vals[:n]), tuple(vals[n:])
        count = 0
        history = [[] for _ in range(n)] if keep else None
        while (max_iter is None or count < max_iter) and run_cond(*loop, *consts)[0]:
            if keep:
                for k in range(n):
                    history[k].append(loop[k])
            loop = run_body(*loop, *consts)
            count += 1
        if not keep:
            return loop
        stacks = tuple(np.stack(h) if h else np.zeros((0,) + np.shape(x), np.asarray(x).dtype)
                       for h, x in zip(history, loop))
        return tuple(loop) + (np.asarray(count, np.int32),) + stacks
    return run_while


def _while_kernel(*vals, **attrs):
    return _while_runner(attrs)(*vals)


def _while_outputs(attrs, n_inputs):
    n = len(attrs["body"].outputs)
    return 2 * n + 1 if attrs["history"] else n


def _while_infer(shapes, dts, attrs):
    cond_g, body_g = attrs["cond"], attrs["body"]
    n = len(body_g.outputs)
    for g in (cond_g, body_g):
        params = g.all_inputs
        if len(params) != len(shapes):
            raise errors.InvalidArgumentError(
                f"while: function {g.name} takes {len(params)} inputs, the node passes {len(shapes)}")
        for k, (s, d, p) in enumerate(zip(shapes, dts, params)):
            if d is not p.dtype or not shapes_compatible(tuple(s), p.shape):
                raise errors.InvalidArgumentError(
                    f"while: input {k} is {d.name}{shape_str(s)}, {g.name} expects {_type_text(p)}")
    if len(cond_g.outputs) != 1 or cond_g.outputs[0].dtype is not dtypes.bool:
        raise errors.InvalidArgumentError(f"while: {cond_g.name} must return one bool scalar")
    loop = [(tuple(p.shape), p.dtype) for p in body_g.all_inputs[:n]]
    for k, ((s, d), t) in enumerate(zip(loop, body_g.outputs)):
        if t.dtype is not d or not shapes_compatible(s, tuple(t.shape)):
            raise errors.InvalidArgumentError(
                f"while: loop variable {k} enters as {d.name}{shape_str(s)} but the body returns "
                f"{_type_text(t)}")
    if not attrs["history"]:
        return loop
    return loop + [((), dtypes.int32)] + [((None,) + s, d) for s, d in loop]


def _while_grad(op, *grads):
    body_g = op.attrs["body"]
    n = len(body_g.outputs)
    result = [None] * len(op.inputs)
    if not op.attrs["history"]:
        return result
    outs = op.outputs
    count, hist = outs[n], outs[n + 1:]
    float_vars = [k for k in range(n) if outs[k].dtype.is_floating]
    hist_grads = grads[n + 1:]
    if all(grads[k] is None for k in float_vars) and all(g is None for g in hist_grads):
        return result
    rb, spec = remat_backward(body_g)
    consts = list(op.inputs[n:])
    cap_pos = [j for j in range(len(consts)) if spec[n + j] is not None]
    seeds = [grads[k] if grads[k] is not None else zeros_like(outs[k]) for k in float_vars]
    accum = [_zeros_for(consts[j], like=rb.outputs[spec[n + j]]) for j in cap_pos]

    nv = len(seeds)

    def more(i, *g):
        return greater(i, 0)

    def step(i, *g):
        g_vars, g_caps = g[:nv], g[nv:]
        i = i - 1
        xs = [gather(hist[k], i) for k in range(n)]
        res = call_graph(rb, xs + consts + list(g_vars))
        new_vars = []
        for j, k in enumerate(float_vars):
            g = res[spec[k]] if spec[k] is not None else zeros_like(g_vars[j])
            if hist_grads[k] is not None:   # second order: the history itself was used
                g = g + gather(hist_grads[k], i)
            new_vars.append(g)
        new_caps = [g_caps[j] + res[spec[n + c]] for j, c in enumerate(cap_pos)]
        return [i] + new_vars + new_caps

    final = _loop(more, step, [count] + seeds + accum)
    g_vars, g_caps = final[1:1 + nv], final[1 + nv:]
    for j, k in enumerate(float_vars):
        result[k] = g_vars[j]
    for j, c in enumerate(cap_pos):
        result[n + c] = g_caps[j]
    return result


_WHILE_ATTRS = {"cond": "func", "body": "func", "maximum_iterations": "opt_int", "history": "bool"}


def _while_prune(attrs, used):
    """Without a reader of the count and history outputs, run the loop without keeping them."""
    n = len(attrs["body"].outputs)
    if attrs["history"] and not any(used[n:]):
        return {**attrs, "history": False}
    return None


def _while_onnx(e, node, ins):
    """ONNX Loop: maximum_iterations is the trip count, the condition's first value an input;
    the body runs the body function then the condition on its result. With history, the body
    also counts (a loop variable) and emits the values entering each iteration (scan outputs)."""
    cond_g, body_g = node.attrs["cond"], node.attrs["body"]
    n = len(body_g.outputs)
    init, consts = list(ins[:n]), list(ins[n:])
    keep = node.attrs["history"]
    loop_types = [(tuple(p.shape), p.dtype) for p in body_g.all_inputs[:n]]
    counter = [((), dtypes.int32)] if keep else []
    scans = [((None,) + s, d) for s, d in loop_types] if keep else []

    def body(args):
        values = list(args[2:2 + n])
        new = e.inline(body_g, values + consts)
        again = e.inline(cond_g, new + consts)[0]
        extra = [e.op("Add", args[2 + n], e.scalar(1, dtypes.int32))] if keep else []
        return [again] + new + extra + ([e.op("Identity", v) for v in values] if keep else [])
    graph = e.subgraph([((), dtypes.int64), ((), dtypes.bool)] + loop_types + counter, body,
                       [((), dtypes.bool)] + loop_types + counter + [(s[1:], d) for s, d in scans],
                       name="loop")
    trips = node.attrs["maximum_iterations"]
    trips = "" if trips is None else e.scalar(trips, dtypes.int64)
    first = e.inline(cond_g, init + consts)[0]
    start = [e.scalar(0, dtypes.int32)] if keep else []
    outs = e.op("Loop", trips, first, *init, *start, n=len(node.outputs), body=graph)
    return [outs] if len(node.outputs) == 1 else outs


WHILE = register("while", _while_kernel, _while_infer, _while_grad, num_outputs=_while_outputs,
                 none_grads=True, attrs=_WHILE_ATTRS, bind=_while_runner,
                 prune_outputs=_while_prune, num_inputs=None, defaults={}, onnx=_while_onnx)


def cond_node(pred, then_g, else_g, name=None):
    """Add (or run eagerly) one `cond` node over finalized branch graphs; a list of outputs."""
    captured = share_captures([then_g, else_g])
    watch_read_handles(captured)     # variables read in a branch count as read here
    return _as_list(run_op(COND, [pred] + captured, {"then_branch": then_g, "else_branch": else_g},
                           name))


def while_node(cond_g, body_g, init, maximum_iterations=None, name=None):
    """Add (or run eagerly) one `while` node over finalized cond/body graphs taking the loop
    variables `init` (then the shared captures); the loop variables' final values."""
    captured = share_captures([cond_g, body_g])
    watch_read_handles(captured)
    history = any(t.dtype.is_floating for t in init)   # a gradient may walk it back
    out = _as_list(run_op(WHILE, list(init) + captured,
                          {"cond": cond_g, "body": body_g, "maximum_iterations": maximum_iterations,
                           "history": history}, name))
    return out[:len(init)]


def _trace(base, outer, params, fn):
    """A finalized function graph of `fn(*placeholders)` (a list of tensors of it)."""
    g = Graph(unique_name(base), outer=outer, base_name=base)
    with g.building():
        outs = fn(*[g.placeholder(t.shape, t.dtype, t.handle_data) for t in params])
    return g.finalize(outs)


def _loop(cond_fn, body_fn, init):
    """A while loop over flat lists of tensors, for gradients (no Python checks needed)."""
    outer = state.graph     # gradients of a while are built into a backward graph only
    cond_g = _trace("while_cond", outer, init, lambda *vs: [cond_fn(*vs)])
    body_g = _trace("while_body", outer, init, lambda *vs: list(body_fn(*vs)))
    return while_node(cond_g, body_g, init)
