"""The `cond` and `while` ops: kernels, inference, gradients, binding, and how nodes are made.

Each node holds its functions as attrs (branches; cond and body) and takes the values they
capture as extra inputs. A node whose functions contain effects is stateful (graph.nodes.Node).
Gradients are written with ops, so they build graph nodes like any other gradient, and
they read only what the forward saved (graph/gradients.py: a node is raised a level in
place to return what its functions' backwards read):
- a cond's gradient is a cond over the branches' backward functions; raised, each branch
  also returns its own side outputs, and empty stand-ins for the other branch's, so the
  backward cond picks, by the same predicate, the values of the branch that ran;
- a while's gradient is another while loop calling the body's backward function once per
  iteration, newest first; raised, the node also returns the iteration count and, stacked
  per iteration, every value the body's backward reads (side outputs of the body, the
  variable values it read, the loop variables it needs).
The Python tracers `df.cond` / `df.while_loop` (defun/control_flow.py) make the functions.
Batched (vmap), a cond with a batched predicate runs both branches and selects per
example; a while with one runs while any example's condition holds, masked per example.

This module is long because each op's row stays whole beside it: kernel, inference,
gradient (with the levels it is raised through), ONNX form and batching rule.
"""
import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.batching import broadcast_batch
from defun.runtime.context import state
from defun.runtime.execute import run_op
from defun.runtime.indexed_slices import IndexedSlices, dense
from defun.runtime.ops.array_ops import cast, gather, identity, stack, zeros, zeros_like
from defun.runtime.ops.math_ops import greater, maximum
from defun.runtime.registry import get as get_op, register
from defun.runtime.shapes import merge_shapes, shape_str, shapes_compatible
from defun.runtime.tensor import Tensor, constant
from defun.runtime.variables import watch_read_handles
from defun.graph.functions import CALL, call_graph, input_grads, plan_of, add_side_outputs
from defun.graph.gradients import LOCK as _grad_lock, levels_of, pick_level, saving_of
from defun.graph.ir import Graph, unique_name
from defun.graph.loop_stacks import is_loop_stack, is_stand_in, padded, padded_tensors
from defun.graph.nodes import CONST
from defun.graph.onnx_loops import loop_keeping

__all__ = ["COND", "WHILE", "cond_node", "while_node", "share_captures", "holds_stand_ins"]


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
    pairs = list(zip(levels_of(then_g), levels_of(else_g)))
    n_top = len(then_g.outputs)
    grads = [g if k < n_top and then_g.outputs[k].dtype.is_inexact else None
             for k, g in enumerate(grads)]
    level = pick_level([len(t.outputs) for t, _ in pairs], grads)
    if level is None:
        return [None] * len(op.inputs)
    then_l, else_l = pairs[level]
    lv = _cond_level(then_l, else_l)
    outs = op.outputs
    if lv.next != (then_l, else_l) and level == len(pairs) - 1:
        outs = add_side_outputs(op, {"then_branch": lv.next[0], "else_branch": lv.next[1]})
    diff = [k for k, t in enumerate(then_l.outputs) if t.dtype.is_inexact]
    seeds = [grads[k] if k < len(grads) and grads[k] is not None else zeros_like(outs[k])
             for k in diff]
    grad_then, grad_else, positions, values = lv.gradient_branches()
    result = [None] * len(op.inputs)
    if not positions:
        return result
    feed = [op.inputs[0]] + list(op.inputs[1:]) + seeds + list(outs[:len(lv.next[0].outputs)])
    out = _as_list(run_op(COND, feed + values, {"then_branch": grad_then, "else_branch": grad_else}))
    for j, k in enumerate(positions):
        result[1 + k] = out[j]
    return result


class _CondLevel:
    """A branch pair (then, else) one level up: `next`, the pair that also returns what the
    pair's backward functions read (each branch returns its own side outputs and empty
    stand-ins for the other's: only the branch taken computes anything), and where each
    backward finds its side outputs among the outputs of `next`."""

    __slots__ = ("pair", "savings", "next", "positions", "_grads")

    def __init__(self, then_g, else_g):
        st, se = saving_of(then_g), saving_of(else_g)
        self.pair = (then_g, else_g)
        self.savings = (st, se)
        if st.next is then_g and se.next is else_g:
            self.next = (then_g, else_g)
            self.positions = (list(st.side_pos), list(se.side_pos))
        else:
            n = len(then_g.outputs)
            extra_t, extra_e = st.next.outputs[n:], se.next.outputs[n:]
            w_then = _with_extras(then_g, st.next, [], extra_e)
            w_else = _with_extras(else_g, se.next, extra_t, [])
            w_then.derived.saves_for, w_else.derived.saves_for = then_g, else_g
            self.next = (w_then, w_else)
            self.positions = (list(st.side_pos),
                              [p if p < n else p + len(extra_t) for p in se.side_pos])
        self._grads = None

    def gradient_branches(self):
        """(grad then, grad else, input positions they return gradients for, captured values).

        Both take the branch inputs, one seed per float output of this level, this level's
        outputs one up (where the side outputs are), then shared captures; a branch whose
        backward gives no gradient for an input returns zeros for it.
        """
        if self._grads is None:
            with _grad_lock:
                if self._grads is None:
                    self._grads = self._make_gradient_branches()
        return self._grads

    def _make_gradient_branches(self):
        pair, nxt = self.pair, self.next
        bws = [s.backward for s in self.savings]
        n_in = len(pair[0].all_inputs)
        positions = [k for k in range(n_in) if any(bw.input_grads[k] is not None for bw in bws)]
        level_types = [(merge_shapes(a.shape, b.shape), a.dtype) for a, b in zip(*[g.outputs for g in nxt])]
        diff = [k for k, t in enumerate(pair[0].outputs) if t.dtype.is_inexact]
        made = []
        for branch, bw, pos in zip(pair, bws, self.positions):
            w = Graph(unique_name(f"{branch.base_name}_grad"), outer=state.graph,
                      base_name=f"{branch.base_name}_grad")
            with w.building():
                xs = [w.placeholder(p.shape, p.dtype, p.handle_data) for p in branch.all_inputs]
                gs = [w.placeholder(level_types[k][0], level_types[k][1]) for k in diff]
                los = [w.placeholder(shape, dtype) for shape, dtype in level_types]
                feed = [gs[diff.index(k)] for k in bw.grad_outputs]
                for kind, v in bw.capture_sources:
                    feed.append(xs[v] if kind == "input" else los[pos[v]] if kind == "side" else v)
                got = input_grads(bw, call_graph(bw.graph, feed))
                outs = []
                for k in positions:
                    g = got[k]
                    if g is None:
                        g = _zeros_for(xs[k])
                    elif isinstance(g, IndexedSlices):
                        g = g._as_tensor()
                    outs.append(g if g.node.graph is w else identity(g))
            w.finalize(outs)
            made.append(w)
        values = share_captures(made)
        return made[0], made[1], positions, values


def _with_extras(branch, saving_fn, before, after):
    """A branch returning `saving_fn`'s outputs (those of `branch`, then its side outputs)
    with empty stand-ins for the other branch's side outputs: `before` ahead of its own,
    `after` behind them (same dtype and rank, no elements: nothing is computed; a loop
    keeping them per iteration gives them the shape of the real ones, see _stack)."""
    n = len(branch.outputs)
    w = Graph(unique_name(f"{branch.base_name}_saves"), outer=branch.outer,
              base_name=f"{branch.base_name}_saves")
    with w.building():
        xs = [w.placeholder(p.shape, p.dtype, p.handle_data) for p in branch.all_inputs]
        res = call_graph(saving_fn, xs)
        pad = lambda ts: [w.constant(np.zeros((0,) * len(t.shape), t.dtype.np)) for t in ts]  # noqa: E731
        outs = res[:n] + pad(before) + res[n:] + pad(after)
    return w.finalize(outs)


def _derived_level(g, key, make):
    """`g.derived.levels[key]`, made once by `make()` (double-checked under the lock)."""
    lv = g.derived.levels.get(key)
    if lv is None:
        with _grad_lock:
            lv = g.derived.levels.get(key)
            if lv is None:
                lv = g.derived.levels[key] = make()
    return lv


def _cond_level(then_g, else_g):
    return _derived_level(then_g, ("cond", else_g.uid), lambda: _CondLevel(then_g, else_g))


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


# ---------------------------------------------------------------------------------------
# batching (graph/vectorize.py walks the graph; `ctx` is its BatchContext)
def _select(pred, a, b, rank):
    """Per example: `a` where the batched scalar `pred` holds, else `b` (rank: a's per example)."""
    p = run_op(get_op("reshape"), [pred], {"shape": (-1,) + (1,) * rank})
    return run_op(get_op("where"), [p, a, b])


def _materialized(ctx, x, t):
    return broadcast_batch(ctx, run_op(get_op("expand_dims"), [x], {"axis": 0}), tuple(t.shape))


def _cond_batch(ctx, node, inputs, batched):
    """An unbatched predicate: one cond of the batched branches. A batched one: both
    branches run on the whole batch and each example takes its branch's values."""
    then_g, else_g = node.attrs["then_branch"], node.attrs["else_branch"]
    pred, vals, flags = inputs[0], inputs[1:], batched[1:]
    if batched[0]:      # (a side output's empty stand-in in one branch: the other's value)
        (a, fa), (b, fb) = [ctx.run_graph(g, vals, flags) for g in (then_g, else_g)]
        picks = [(b[k], fb[k]) if is_stand_in(then_g, k) else (a[k], fa[k]) if is_stand_in(else_g, k) else
                 (_select(pred, a[k], b[k], len(t.shape)), True) for k, t in enumerate(node.outputs)]
        return [v for v, _ in picks], [f for _, f in picks]
    if state.graph is None:      # eager: the branch the predicate picks, as df.cond does
        return ctx.run_graph(then_g if bool(pred) else else_g, vals, flags)
    made = [ctx.function(g, [], vals, flags, f"{g.base_name}_batched") for g in (then_g, else_g)]
    out_flags = [x or y for x, y in zip(made[0][2], made[1][2])]
    for g, outs, fl in made:
        with g.building():
            outs = [_materialized(ctx, o, t) if want and not f else o
                    for o, f, want, t in zip(outs, fl, out_flags, node.outputs)]
        g.finalize(outs)
    return cond_node(pred, made[0][0], made[1][0]), out_flags


def _eager_while_batch(ctx, node, n, vs, flags, extra, extra_flags):
    """The masked loop run eagerly, so the tapes listening record every iteration's ops
    (counted: also each iteration's kept values and each example's count, see _while_batch)."""
    attrs = node.attrs
    cond_g, body_g = attrs["cond"], _effective_body(attrs)
    limit, count, counts, rows = attrs["maximum_iterations"], 0, 0, []
    loop_ts = node.outputs[:n]
    while limit is None or count < limit:
        (go,), (go_batched,) = ctx.run_graph(cond_g, vs + list(extra), flags + list(extra_flags))
        if not bool(run_op(get_op("reduce_any"), [go], {"axis": None, "keepdims": False})
                    if go_batched else go) and not (go_batched and ctx.size == 0 and count == 0):
            break       # an empty batch runs the masked body once: on no example, but taped
        new, new_flags = ctx.run_graph(body_g, vs + list(extra), flags + list(extra_flags))
        rows.append((new[n:], new_flags[n:]))
        new, new_flags = new[:n], new_flags[:n]
        if go_batched:      # the examples still running take the new values
            vs = [v if b else _materialized(ctx, v, t) for v, b, t in zip(vs, flags, loop_ts)]
            new = [_select(go, x if b else _materialized(ctx, x, t), v, len(t.shape))
                   for x, b, v, t in zip(new, new_flags, vs, loop_ts)]
            new_flags = [True] * n
        flags = list(new_flags)
        vs = new
        count += 1
        counts = counts + (cast(go, dtypes.int32) if go_batched else 1)
    if not _counted(attrs):
        return vs, flags
    stacks, stack_flags = [], []
    for k, t in enumerate(node.outputs[n + 1:]):
        kept = [(r[k], f[k]) for r, f in rows]
        stacks.append(_eager_stack(ctx, kept, t))
        stack_flags.append(any(f for _, f in kept))
    batched_count = isinstance(counts, Tensor)
    counts = counts if batched_count else constant(np.int32(counts))
    return vs + [counts] + stacks, flags + [batched_count] + stack_flags


def _eager_stack(ctx, kept, t):
    """Eagerly, the (value, batched) of each iteration of stacked output `t` stacked: on
    axis 1 when any is batched (the batch first), else on axis 0. A cond's empty stand-in
    (see _stack) becomes zeros shaped like the other rows; they are never read."""
    if not kept:
        return zeros(tuple(d or 0 for d in t.shape), t.dtype)
    empty = (0,) * len(t.shape)
    ref, ref_batched = next(((v, f) for v, f in kept if tuple(v.shape)[f:] != empty), kept[0])
    on = 1 if any(f for _, f in kept) else 0
    out = []
    for v, f in kept:
        if tuple(v.shape)[f:] == empty and v is not ref:
            v, f = zeros_like(ref), ref_batched
        out.append(_materialized(ctx, v, v) if on and not f else v)
    if len({tuple(v.shape) for v in out}) > 1 and is_loop_stack(t):    # see _stack
        out = padded_tensors(out)
    return stack(out, axis=on)


def _batched_counts(mask):
    """Per example, the iterations it was active in: `mask` is [iterations, batch] bool."""
    return run_op(get_op("reduce_sum"), [cast(mask, dtypes.int32)], {"axis": (0,), "keepdims": False})


def _batch_first(stack_, rank):
    """A batched stacked value [iterations, batch, ...] as [batch, iterations, ...]."""
    return run_op(get_op("transpose"), [stack_], {"perm": (1, 0) + tuple(range(2, rank + 2))})


def _while_batch(ctx, node, inputs, batched):
    """The loop variables an iteration can make batched are batched from the start; with a
    batched condition the loop runs while any example's holds, and an example whose
    condition fails keeps its values (masked), so each ends where its own loop would.

    A counted loop (one keeping values per iteration for its gradient) keeps them for the
    whole batch, [batch, iterations, ...] for a batched value (padded: an example's rows
    past its own count hold values computed on its frozen loop variables), and its count
    becomes per example: how many iterations it was active in (with a batched condition,
    the body also returns its active mask, stacked as one more kept value). The gradient's
    reverse loop (_while_grad) counts down from that count, so batched it is masked the
    same way, and each example's gradient reads only its own iterations' rows."""
    attrs = node.attrs
    n = _num_loop_vars(attrs)
    cond_g, body_g = attrs["cond"], _effective_body(attrs)
    init, extra, extra_flags = list(inputs[:n]), inputs[n:], batched[n:]
    flags = list(batched[:n])
    if state.graph is None:     # eager: a Python loop of batched ops, as df.while_loop runs
        return _eager_while_batch(ctx, node, n, init, flags, extra, extra_flags)
    while True:
        cg, couts, cflags = ctx.function(cond_g, flags, extra, extra_flags, "while_cond_batched")
        if cflags[0]:
            flags = [True] * n
            cg, couts, cflags = ctx.function(cond_g, flags, extra, extra_flags, "while_cond_batched")
        bg, bouts, bflags = ctx.function(body_g, flags, extra, extra_flags, "while_body_batched")
        grown = [f or b for f, b in zip(flags, bflags)]
        if grown == flags:
            break
        flags = grown
    loop_ts, kept = node.outputs[:n], bouts[n:]
    with bg.building():
        new = [_materialized(ctx, o, t) if f and not b else o
               for o, b, f, t in zip(bouts, bflags, flags, loop_ts)]
        if cflags[0]:     # the examples still running take the new values
            go, _ = ctx.run_graph(cond_g, bg.inputs + list(extra), flags + list(extra_flags))
            new = [_select(go[0], x, v, len(t.shape)) for x, v, t in zip(new, bg.inputs, loop_ts)]
            kept = kept + ([go[0]] if _counted(attrs) else [])
    bg.finalize(new + kept)
    with cg.building():
        c = couts[0]
        if cflags[0]:
            c = run_op(get_op("reduce_any"), [c], {"axis": None, "keepdims": False})
    cg.finalize([c])
    init = [_materialized(ctx, x, t) if f and not b else x
            for x, b, f, t in zip(init, batched[:n], flags, loop_ts)]
    if not _counted(attrs):
        return while_node(cg, bg, init, attrs["maximum_iterations"]), flags
    out = while_node(cg, bg, init, attrs["maximum_iterations"], saves=len(kept))
    count, stacks = out[n], out[n + 1:n + 1 + len(body_g.outputs) - n]
    if cflags[0]:
        count = _batched_counts(out[-1])
    kept_flags = bflags[n:]
    stacks = [_batch_first(s, len(t.shape)) if f else s for s, f, t in zip(stacks, kept_flags, body_g.outputs[n:])]
    return out[:n] + [count] + stacks, flags + [cflags[0]] + kept_flags


_COND_ATTRS = {"then_branch": "func", "else_branch": "func"}
COND = register("cond", _cond_kernel, _cond_infer, _cond_grad, num_outputs=_cond_outputs,
                none_grads=True, attrs=_COND_ATTRS, bind=_cond_bind, num_inputs=None, defaults={},
                onnx=_cond_onnx, batch=_cond_batch)


# ---------------------------------------------------------------------------------------
# while
#
# A traced loop keeps nothing per iteration. Raised for a gradient (attr `saves`, an int),
# its body also returns values to keep, and the node returns, after the loop variables,
# the iteration count and those values stacked per iteration. (Attr `history`, from
# earlier documents: also keep each iteration's incoming loop variables, first.)
def _num_loop_vars(attrs):
    return len(attrs["body"].outputs) - (attrs["saves"] or 0)


def _counted(attrs):
    return attrs["history"] or attrs["saves"] is not None


def _effective_body(attrs):
    """The body returning the loop variables, then every value stacked per iteration."""
    body = attrs["body"]
    if not attrs["history"]:
        return body
    n = _num_loop_vars(attrs)
    return _derived_level(body, "history", lambda: body.view(
        body.outputs[:n] + body.all_inputs[:n] + body.outputs[n:], f"{body.name}_history"))


def _while_runner(attrs, backend=None):
    run_cond = plan_of(attrs["cond"], backend).run
    max_iter = attrs["maximum_iterations"]
    n = _num_loop_vars(attrs)
    if not _counted(attrs):
        run_body = plan_of(attrs["body"], backend).run

        def run_while(*vals):
            loop, consts = tuple(vals[:n]), tuple(vals[n:])
            count = 0
            while (max_iter is None or count < max_iter) and run_cond(*loop, *consts)[0]:
                loop = run_body(*loop, *consts)
                count += 1
            return loop
        return run_while
    body = _effective_body(attrs)
    run_body = plan_of(body, backend).run
    kept = body.outputs[n:]
    loose = [holds_stand_ins(t) for t in kept]

    def run_saving_while(*vals):
        loop, consts = tuple(vals[:n]), tuple(vals[n:])
        count = 0
        rows = [[] for _ in kept]
        while (max_iter is None or count < max_iter) and run_cond(*loop, *consts)[0]:
            out = run_body(*loop, *consts)
            loop = out[:n]
            for r, v in zip(rows, out[n:]):
                r.append(v)
            count += 1
        return tuple(loop) + (np.asarray(count, np.int32),) + tuple(
            _stack(r, t, body, lo) for r, t, lo in zip(rows, kept, loose))
    return run_saving_while


def _stack(rows, t, body, loose=False, op="while"):
    """One kept value of every iteration, stacked (no rows: an empty stack of its type;
    `op`: whose, for the message).

    `loose`: `t` is a cond's side output, which the branch not taken gives as an empty
    stand-in (_with_extras); those rows become zeros of the others' shape (the backward
    reads them only where that branch ran, so their values are never used)."""
    if not rows:
        return np.zeros((0,) + tuple(d or 0 for d in t.shape), t.dtype.np)
    empty = (0,) * len(t.shape)
    ref = next((k for k, r in enumerate(rows) if not (loose and r.shape == empty)), 0)
    first = rows[ref].shape
    if op == "while" and any(r.shape != first for r in rows) and is_loop_stack(t):
        return np.stack(padded(rows))
    for k, r in enumerate(rows):
        if r.shape != first and not (loose and r.shape == empty):
            what, fix = (("the gradient keeps", "a differentiated loop must keep the shapes of what "
                          "its gradient reads") if op == "while" else
                         ("it stacks", "what a scan stacks (its results, what its gradient reads) "
                          "must keep its shape"))
            raise errors.InvalidArgumentError(
                f"{op}: {what} {t.name} of {body.name} from every iteration, but its shape "
                f"changes ({list(first)} in iteration {ref}, {list(r.shape)} in iteration {k}); "
                f"{fix}")
    if loose and first != empty:
        rows = [r if r.shape == first else np.zeros(first, r.dtype) for r in rows]
    return np.stack(rows)


def holds_stand_ins(t):
    """True if `t`, a value of unknown size a loop body keeps per iteration, can be a
    cond's empty stand-in for the side output of the branch that did not run (a branch
    returns an empty constant there, also inside a called function): stacking it, rows of
    that empty shape take the shape of the others."""
    return None in t.shape and _from_stand_in(t)


def _from_stand_in(t):
    node = t.node
    if node.op is COND:
        return any(g.outputs[t.index].node.op is CONST and g.outputs[t.index].node.attrs["value"].size == 0
                   for g in (node.attrs["then_branch"], node.attrs["else_branch"]))
    if node.op is CALL:
        return _from_stand_in(node.attrs["f"].outputs[t.index])
    return False


def _while_kernel(*vals, **attrs):
    return _while_runner(attrs)(*vals)


def _while_outputs(attrs, n_inputs):
    n = _num_loop_vars(attrs)
    if not _counted(attrs):
        return n
    return n + 1 + (n if attrs["history"] else 0) + (attrs["saves"] or 0)


def _while_infer(shapes, dts, attrs):
    cond_g, body_g = attrs["cond"], attrs["body"]
    saves = attrs["saves"]
    if saves is not None and not 0 <= saves <= len(body_g.outputs):
        raise errors.InvalidArgumentError(
            f"while: saves={saves}, but body {body_g.name} returns {len(body_g.outputs)} values")
    n = _num_loop_vars(attrs)
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
    if not _counted(attrs):
        return loop
    kept = [(tuple(t.shape), t.dtype) for t in body_g.outputs[n:]]
    if attrs["history"]:
        kept = loop + kept
    return loop + [((), dtypes.int32)] + [((None,) + s, d) for s, d in kept]


def _while_grad(op, *grads):
    attrs = op.attrs
    n = _num_loop_vars(attrs)
    chain = levels_of(_effective_body(attrs))
    counted = _counted(attrs)
    # per body output (loop variables, then the values kept per iteration): its gradient
    body_grads = list(grads[:n]) + (list(grads[n + 1:]) if counted else [])
    found = loop_gradient_level(
        op, chain, body_grads, "is_inexact", (n,),
        lambda lv, body: {"body": lv.next, "history": False, "saves": len(lv.next.outputs) - n}
        if lv.next is not body or not counted else None)
    if found is None:
        return [None] * len(op.inputs)
    body_grads, body, lv, outs = found
    bw = lv.saving.backward
    count, stacks = outs[n], outs[n + 1:]
    consts = list(op.inputs[n:])
    float_vars = [k for k in range(n) if body.outputs[k].dtype.is_inexact]
    cap = [j for j in range(len(consts)) if bw.input_grads[n + j] is not None]
    seeds = [dense(grads[k]) if k < len(grads) and grads[k] is not None else zeros_like(outs[k])
             for k in float_vars]
    accum = [_zeros_for(consts[j]) for j in cap]
    kept_grads = {}     # stack position -> the gradient of the stack (zeros when none came)
    for k in bw.grad_outputs:
        if k >= n:
            g = body_grads[k] if k < len(body_grads) else None
            kept_grads[k - n] = dense(g) if g is not None else zeros_like(stacks[k - n])
    nv = len(float_vars)

    def more(i, *g):
        return greater(i, 0)

    def step(i, *g):
        carried, sums = g[:nv], g[nv:]
        i = i - 1
        at = maximum(i, 0)      # i: batched (vmap), an example already done reads row 0, unused
        feed = [carried[float_vars.index(k)] if k < n else gather(kept_grads[k - n], at)
                for k in bw.grad_outputs]
        for kind, v in lv.feed:
            feed.append(gather(stacks[v], at) if kind == "stack" else consts[v] if kind == "const" else v)
        got = [dense(g) for g in input_grads(bw, call_graph(bw.graph, feed))]
        new_vars = [got[k] if got[k] is not None else zeros_like(carried[j])
                    for j, k in enumerate(float_vars)]
        new_sums = [sums[j] + got[n + c] for j, c in enumerate(cap)]
        return [i] + new_vars + new_sums

    final = _loop(more, step, [count] + seeds + accum)
    result = [None] * len(op.inputs)
    for j, k in enumerate(float_vars):
        result[k] = final[1 + j]
    for j, c in enumerate(cap):
        result[n + c] = final[1 + nv + j]
    return result


class _WhileLevel:
    """A loop body one level up: `next`, the body that also returns (to stack per
    iteration) what the body's backward reads, and `feed`, per capture of that backward,
    where one iteration's value is: ("stack", j) the j-th stacked value, ("slice", j) the
    iteration's row of the j-th sliced input (a scan's elements), ("const", j) the loop's
    j-th captured input, or ("value", v) an outer value. The body takes `n` loop variables,
    then `sliced` rows (a while: none), then the captures; its outputs past the first `n`
    are stacked per iteration."""

    __slots__ = ("saving", "next", "feed")

    def __init__(self, body, n, sliced=0):
        self.saving = s = saving_of(body)
        bw = s.backward
        fwd = bw.forward                    # its tensors are those of bw's forward graph
        outs = list(fwd.outputs[:len(body.outputs)])
        stacked = {}
        for j in range(n, len(outs)):
            stacked.setdefault(id(outs[j]), j - n)
        extras = []

        def stack_of(t):
            j = stacked.get(id(t))
            if j is None:
                j = stacked[id(t)] = len(outs) - n + len(extras)
                extras.append(t)
            return j
        self.feed = []
        for kind, v in bw.capture_sources:
            if kind == "input":
                self.feed.append(("stack", stack_of(fwd.all_inputs[v])) if v < n else
                                 ("slice", v - n) if v < n + sliced else ("const", v - n - sliced))
            elif kind == "side":
                self.feed.append(("stack", stack_of(bw.side_outputs[v])))
            else:
                self.feed.append(("value", v))
        if extras:
            self.next = fwd.view(outs + extras, f"{body.name}_saves", f"{body.base_name}_saves")
            self.next.derived.saves_for = body
        else:
            self.next = body


def _while_level(body, n, sliced=0):
    return _derived_level(body, ("while", n, sliced), lambda: _WhileLevel(body, n, sliced))


def loop_gradient_level(op, chain, grads, differentiable, sizes, side_attrs):
    """Where the backward of loop node `op` (a `while` or a `scan`, its body raised through
    `chain`) starts: the gradients per body output that flow (the dtype's `differentiable`
    flag; the others None), the body of the lowest level holding them, its _WhileLevel
    (`sizes`: loop variables, sliced inputs) and the node's outputs, the node raised to
    return the side outputs first when the top level is needed and
    `side_attrs(level, body)` gives its new attrs. None when no gradient flows."""
    top = chain[-1]
    grads = [g if k < len(top.outputs) and getattr(top.outputs[k].dtype, differentiable) else None
             for k, g in enumerate(grads)]
    level = pick_level([len(b.outputs) for b in chain], grads)
    if level is None:
        return None
    body = chain[level]
    lv = _while_level(body, *sizes)
    outs = op.outputs
    attrs = side_attrs(lv, body) if level == len(chain) - 1 else None
    if attrs is not None:
        outs = add_side_outputs(op, attrs)
    return grads, body, lv, outs


_WHILE_ATTRS = {"cond": "func", "body": "func", "maximum_iterations": "opt_int", "history": "bool",
                "saves": "opt_int"}


def _while_prune(attrs, used):
    """Without a reader of the count and the stacked values, run the loop keeping none."""
    n = _num_loop_vars(attrs)
    if not _counted(attrs) or any(used[n:]):
        return None
    body = attrs["body"]
    if attrs["saves"]:
        whole = body
        body = _derived_level(whole, "pruned", lambda: whole.view(whole.outputs[:n], f"{whole.name}_pruned"))
    return {**attrs, "body": body, "history": False, "saves": None}


def _while_onnx(e, node, ins):
    """ONNX Loop: maximum_iterations is the trip count, the condition's first value an input;
    the body runs the body function then the condition on its result. A counted loop (one
    keeping values for its gradient) also counts (a loop variable) and keeps per iteration
    the values entering it (history), then the body's saves (graph/onnx_loops.py)."""
    cond_g, body_g = node.attrs["cond"], node.attrs["body"]
    n = _num_loop_vars(node.attrs)
    history, counted = node.attrs["history"], _counted(node.attrs)
    init, consts = list(ins[:n]), list(ins[n:])
    loop_types = [(tuple(p.shape), p.dtype) for p in body_g.all_inputs[:n]]
    counter = [((), dtypes.int32)] if counted else []
    kept_types = (loop_types if history else []) + [(tuple(t.shape), t.dtype) for t in body_g.outputs[n:]]
    loose = [False] * (n if history else 0) + [holds_stand_ins(t) for t in body_g.outputs[n:]]

    def body(_, args):
        values = args[:n]
        out = e.inline(body_g, values + consts)
        new, saved = out[:n], out[n:]
        again = e.inline(cond_g, new + consts)[0]
        extra = [e.op("Add", args[n], e.scalar(1, dtypes.int32))] if counted else []
        return again, new + extra, (values if history else []) + saved
    trips = node.attrs["maximum_iterations"]
    trips = "" if trips is None else e.scalar(trips, dtypes.int64)
    first = e.inline(cond_g, init + consts)[0]
    start = [e.scalar(0, dtypes.int32)] if counted else []
    final, kept = loop_keeping(e, trips, first, init + start, loop_types + counter, body, kept_types, loose, "loop")
    return final + kept


WHILE = register("while", _while_kernel, _while_infer, _while_grad, num_outputs=_while_outputs,
                 none_grads=True, attrs=_WHILE_ATTRS, bind=_while_runner,
                 prune_outputs=_while_prune, num_inputs=None, defaults={"saves": None}, onnx=_while_onnx,
                 batch=_while_batch)


def cond_node(pred, then_g, else_g, name=None):
    """Add (or run eagerly) one `cond` node over finalized branch graphs; a list of outputs."""
    captured = share_captures([then_g, else_g])
    watch_read_handles(captured)     # variables read in a branch count as read here
    out = _as_list(run_op(COND, [pred] + captured, {"then_branch": then_g, "else_branch": else_g},
                          name))
    return out[:len(then_g.outputs)]   # a forward accumulator may have raised the node already


def while_node(cond_g, body_g, init, maximum_iterations=None, name=None, saves=None):
    """Add (or run eagerly) one `while` node over finalized cond/body graphs taking the loop
    variables `init` (then the shared captures); the loop variables' final values (`saves`:
    a counted loop whose body's last `saves` outputs are kept per iteration; all its outputs)."""
    captured = share_captures([cond_g, body_g])
    watch_read_handles(captured)
    out = _as_list(run_op(WHILE, list(init) + captured,
                          {"cond": cond_g, "body": body_g, "maximum_iterations": maximum_iterations,
                           "history": False, "saves": saves}, name))
    return out[:len(init) + (0 if saves is None else 1 + saves)]


def _trace(base, outer, params, fn):
    """A finalized function graph of `fn(*placeholders)` (a list of tensors of it)."""
    g = Graph(unique_name(base), outer=outer, base_name=base)
    with g.building():
        outs = fn(*[g.placeholder(t.shape, t.dtype, t.handle_data) for t in params])
    return g.finalize(outs)


def _loop(cond_fn, body_fn, init):
    """A while loop over flat lists of tensors, for gradients (no Python checks needed)."""
    outer = state.graph     # gradients of a while are built into a backward graph only
    cond_g = _trace("while_grad_cond", outer, init, lambda *vs: [cond_fn(*vs)])
    body_g = _trace("while_grad_body", outer, init, lambda *vs: list(body_fn(*vs)))
    return while_node(cond_g, body_g, init)

