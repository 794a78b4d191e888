"""Control flow: `cond` and `while_loop`, plain Python eagerly, one op holding functions traced.

While tracing, `cond` traces each branch into its own function graph and adds ONE `cond`
node whose attrs are the two branch graphs; `while_loop` traces `cond` and `body` the same
way and adds ONE `while` node. Tensors a branch or body uses from outside become extra
inputs of the node (both functions of one node take the same inputs, in one order).

Gradients are written with ops, so they build graph nodes like any other gradient:
- a cond's gradient is a cond over the branches' gradient functions;
- a while's forward node also returns the iteration count and, per loop variable, the
  stacked values that entered each iteration; its gradient is another while loop that
  walks those back, calling the body's gradient function once per iteration.

A node whose functions contain stateful ops (variable reads or assignments) is a
`stateful_cond` / `stateful_while`, so passes keep it in program order and never prune it.
"""
import numpy as np

from runtime import dtypes, errors, sites
from runtime.context import state
from runtime.execute import run_op
from runtime.ops.array_ops import gather, identity, zeros, zeros_like
from runtime.ops.math_ops import greater

from runtime.nest import flatten, pack_as
from runtime.registry import register
from runtime.tensor import EagerTensor, Tensor, convert_to_tensor
from runtime.variables import Variable, _BY_HANDLE, watch_variable
from graph.functions import call_graph, has_stateful_ops, plan_of, remat_backward
from graph.ir import Graph, SymbolicTensor
from defun.function import _unique_name

__all__ = ["cond", "while_loop"]


# ---------------------------------------------------------------------------------------
# helpers shared by both constructs
def _structure(s):
    """A comparable description of a nest's shape (leaves are '*'; list and tuple agree)."""
    if isinstance(s, dict):
        return ("dict", tuple((k, _structure(s[k])) for k in sorted(s)))
    if isinstance(s, tuple) and hasattr(s, "_fields"):
        return (type(s).__name__, tuple(_structure(v) for v in s))
    if isinstance(s, (list, tuple)):
        return ("seq", tuple(_structure(v) for v in s))
    return "*"


def _shapes_compatible(a, b):
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


def _merge_shape(a, b):
    return tuple(x if x == y else None for x, y in zip(a, b))


def _shape_text(shape):
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _type_text(t):
    return f"{t.dtype.name}{_shape_text(t.shape)}"


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


def _share_captures(graphs, n_args):
    """Give every graph a placeholder for every value any of them captured, in one order.

    Returns the outer values (the extra inputs of the node). Afterwards each graph's
    `all_inputs` is its `n_args` argument placeholders followed by the shared captures.
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


def _watch_captured_variables(captured):
    """Variables read inside the functions count as accessed by the tapes active here."""
    tapes = state.tapes
    if not tapes:
        return
    for value in captured:
        if value.dtype is dtypes.resource:
            var = _BY_HANDLE.get(value._id)
            if var is not None and var.trainable:
                for tape in tapes:
                    if tape.watch_accessed_variables:
                        watch_variable(tape, var)


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


def _cond_bind(attrs):
    run_then = plan_of(attrs["then_branch"]).run
    run_else = plan_of(attrs["else_branch"]).run

    def run_cond(pred, *vals):
        return run_then(*vals) if pred else run_else(*vals)
    return run_cond


def _cond_infer(shapes, dts, attrs):
    then_g, else_g = attrs["then_branch"], attrs["else_branch"]
    if dts[0] is not dtypes.bool or tuple(shapes[0]) != ():
        raise errors.InvalidArgumentError(
            f"cond: the predicate must be a scalar bool tensor, got {dts[0].name}{_shape_text(shapes[0])}; "
            f"compare with df.greater/df.equal or use df.cast")
    for g in (then_g, else_g):
        params = g.all_inputs
        if len(params) != len(shapes) - 1:
            raise errors.InvalidArgumentError(
                f"cond: branch {g.name} takes {len(params)} inputs, the node passes {len(shapes) - 1}")
        for k, (s, d, p) in enumerate(zip(shapes[1:], dts[1:], params)):
            if d is not p.dtype or not _shapes_compatible(tuple(s), p.shape):
                raise errors.InvalidArgumentError(
                    f"cond: input {k + 1} is {d.name}{_shape_text(s)}, branch {g.name} expects "
                    f"{_type_text(p)}")
    if len(then_g.outputs) != len(else_g.outputs):
        raise errors.InvalidArgumentError(
            f"cond: branches return {len(then_g.outputs)} and {len(else_g.outputs)} tensors")
    out = []
    for k, (a, b) in enumerate(zip(then_g.outputs, else_g.outputs)):
        if a.dtype is not b.dtype or len(a.shape) != len(b.shape):
            raise errors.InvalidArgumentError(
                f"cond: output {k} is {_type_text(a)} in the true branch but {_type_text(b)} in the false branch")
        out.append((_merge_shape(a.shape, b.shape), a.dtype))
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
    opdef = STATEFUL_COND if (has_stateful_ops(grad_then) or has_stateful_ops(grad_else)) else COND
    out = _as_list(run_op(opdef, [op.inputs[0]] + list(op.inputs[1:]) + seeds,
                          {"then_branch": grad_then, "else_branch": grad_else}))
    for j, k in enumerate(positions):
        result[1 + k] = out[j]
    return result


def _cond_grad_branches(then_g, else_g, out_shapes):
    """(then gradient graph, else gradient graph, input positions they give gradients for).

    Both take the branch inputs then one seed per float output, and return the same list
    of gradients: a branch with no gradient for an input returns zeros for it.
    """
    cache = then_g.__dict__.setdefault("_cond_grads", {})
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
        w = Graph(f"{b.name}_grad", library=b.library, base_name=f"{b.base_name}_grad")
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


_COND_ATTRS = {"then_branch": "func", "else_branch": "func"}
COND = register("cond", _cond_kernel, _cond_infer, _cond_grad, num_outputs=_cond_outputs,
                none_grads=True, attrs=_COND_ATTRS, bind=_cond_bind, num_inputs=None, defaults={})
STATEFUL_COND = register("stateful_cond", _cond_kernel, _cond_infer, _cond_grad, num_outputs=_cond_outputs,
                         none_grads=True, stateful=True, attrs=_COND_ATTRS, bind=_cond_bind, num_inputs=None, defaults={})


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

    branches, results = [], []
    for which, fn in (("true", true_fn), ("false", false_fn)):
        g = Graph(_unique_name(f"cond_{which}"), outer=outer, base_name=f"cond_{which}")
        with g.building():
            results.append(fn())
        branches.append(g)
    then_res, else_res = results
    if _structure(then_res) != _structure(else_res):
        raise errors.InvalidArgumentError(
            f"cond: true_fn and false_fn must return the same structure; true_fn returned "
            f"{_describe(then_res)}, false_fn returned {_describe(else_res)}")
    then_leaves, else_leaves = flatten(then_res), flatten(else_res)
    outs = ([], [])
    for k, (a, b) in enumerate(zip(then_leaves, else_leaves)):
        # a Python number takes the dtype of the other branch's tensor (weak typing)
        if not isinstance(a, (Tensor, Variable)) and isinstance(b, (Tensor, Variable)):
            a = _weak(a, b)
        elif not isinstance(b, (Tensor, Variable)) and isinstance(a, (Tensor, Variable)):
            b = _weak(b, a)
        for j, (g, leaf) in enumerate(zip(branches, (a, b))):
            with g.building():
                outs[j].append(_own_tensor(g, leaf, f"cond: output {k} of {('true_fn', 'false_fn')[j]}"))
        ta, tb = outs[0][-1], outs[1][-1]
        if ta.dtype is not tb.dtype:
            raise errors.InvalidArgumentError(
                f"cond: output {k} has dtype {ta.dtype.name} in true_fn but {tb.dtype.name} in false_fn; "
                f"both branches must return the same dtypes (use df.cast)")
        if len(ta.shape) != len(tb.shape):
            raise errors.InvalidArgumentError(
                f"cond: output {k} has shape {_shape_text(ta.shape)} in true_fn but "
                f"{_shape_text(tb.shape)} in false_fn; the ranks must agree")
    for g, o in zip(branches, outs):
        g.finalize(o)
    captured = _share_captures(branches, 0)
    _watch_captured_variables(captured)
    then_g, else_g = branches
    opdef = STATEFUL_COND if (has_stateful_ops(then_g) or has_stateful_ops(else_g)) else COND
    out = _as_list(run_op(opdef, [pred] + captured, {"then_branch": then_g, "else_branch": else_g}, name))
    return pack_as(then_res, out) if then_leaves else then_res


def _weak(value, like):
    dt = like.dtype
    arr = np.asarray(value)
    if arr.dtype.kind == "f" and not dt.is_floating:
        return value
    return np.asarray(value, dtype=dt.np)


def _describe(s):
    if isinstance(s, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(s[k])}" for k in sorted(s)) + "}"
    if isinstance(s, (list, tuple)):
        inner = ", ".join(_describe(v) for v in s)
        return f"[{inner}]" if isinstance(s, list) else f"({inner}{',' if len(s) == 1 else ''})"
    if isinstance(s, Tensor):
        return "tensor"
    return type(s).__name__


# ---------------------------------------------------------------------------------------
# while
def _while_runner(attrs):
    run_cond = plan_of(attrs["cond"]).run
    run_body = plan_of(attrs["body"]).run
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
            if d is not p.dtype or not _shapes_compatible(tuple(s), p.shape):
                raise errors.InvalidArgumentError(
                    f"while: input {k} is {d.name}{_shape_text(s)}, {g.name} expects {_type_text(p)}")
    if len(cond_g.outputs) != 1 or cond_g.outputs[0].dtype is not dtypes.bool:
        raise errors.InvalidArgumentError(f"while: {cond_g.name} must return one bool scalar")
    loop = [(tuple(p.shape), p.dtype) for p in body_g.all_inputs[:n]]
    for k, ((s, d), t) in enumerate(zip(loop, body_g.outputs)):
        if t.dtype is not d or not _shapes_compatible(s, tuple(t.shape)):
            raise errors.InvalidArgumentError(
                f"while: loop variable {k} enters as {d.name}{_shape_text(s)} but the body returns "
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

    def more(i, g_vars, g_caps):
        return greater(i, 0)

    def step(i, g_vars, g_caps):
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
        return i, new_vars, new_caps

    _, g_vars, g_caps = while_loop(more, step, (count, seeds, accum))
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

WHILE = register("while", _while_kernel, _while_infer, _while_grad, num_outputs=_while_outputs,
                 none_grads=True, attrs=_WHILE_ATTRS, bind=_while_runner, prune_outputs=_while_prune, num_inputs=None, defaults={})
STATEFUL_WHILE = register("stateful_while", _while_kernel, _while_infer, _while_grad,
                          num_outputs=_while_outputs, none_grads=True, stateful=True, attrs=_WHILE_ATTRS,
                          bind=_while_runner, prune_outputs=_while_prune, num_inputs=None, defaults={})


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
    n = len(init)
    cond_g = Graph(_unique_name("while_cond"), outer=outer, base_name="while_cond")
    with cond_g.building():
        ph = [cond_g.placeholder(t.shape, t.dtype, t.handle_data) for t in init]
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
    body_g = Graph(_unique_name("while_body"), outer=outer, base_name="while_body")
    with body_g.building():
        ph = [body_g.placeholder(t.shape, t.dtype, t.handle_data) for t in init]
        new = call_body(pack_as(vars_in, ph))
        new_leaves = []
        for k, (leaf, t) in enumerate(zip(flatten(new), init)):
            if not isinstance(leaf, (Tensor, Variable)) and leaf is not None:
                leaf = _weak(leaf, t)
            r = _own_tensor(body_g, leaf, f"while_loop: loop variable {k} returned by body")
            if r.dtype is not t.dtype:
                raise errors.InvalidArgumentError(
                    f"while_loop: loop variable {k} enters as {t.dtype.name} but body returns "
                    f"{r.dtype.name}; a loop variable must keep its dtype (use df.cast)")
            if not _shapes_compatible(tuple(t.shape), tuple(r.shape)):
                raise errors.InvalidArgumentError(
                    f"while_loop: loop variable {k} enters with shape {_shape_text(t.shape)} but body "
                    f"returns shape {_shape_text(r.shape)}; a loop variable must keep its shape")
            new_leaves.append(r)
    body_g.finalize(new_leaves)
    captured = _share_captures([cond_g, body_g], n)
    _watch_captured_variables(captured)
    history = any(t.dtype.is_floating for t in init)
    opdef = STATEFUL_WHILE if (has_stateful_ops(cond_g) or has_stateful_ops(body_g)) else WHILE
    out = _as_list(run_op(opdef, init + captured,
                          {"cond": cond_g, "body": body_g, "maximum_iterations": max_iter,
                           "history": history}, name))
    result = pack_as(vars_in, out[:n])
    return result[0] if single else result


def _max_iterations(m):
    if m is None:
        return None
    if isinstance(m, SymbolicTensor):
        raise errors.UnimplementedError(
            "while_loop: maximum_iterations must be a Python int or an eager tensor, not a traced tensor")
    if isinstance(m, EagerTensor):
        m = m.numpy()
    m = int(m)
    if m < 0:
        raise errors.InvalidArgumentError(f"while_loop: maximum_iterations must be >= 0, got {m}")
    return m
