"""The `cond` op: kernel, inference, gradient, binding, ONNX form, batching rule, and how its
nodes are made; and the helpers the loops share with it (graph/while_op.py, graph/scan.py):
captures shared between function graphs, zeros of a type, derived levels.

Each node holds its functions as attrs (the branches) and takes the values they capture as
extra inputs. A node whose functions contain effects is stateful (graph.nodes.Node).
Gradients are written with ops, so they build graph nodes like any other gradient, and
they read only what the forward saved (graph/gradients.py: a node is raised a level in
place to return what its functions' backwards read): a cond's gradient is a cond over the
branches' backward functions; raised, each branch also returns its own side outputs, and
empty stand-ins for the other branch's, so the backward cond picks, by the same predicate,
the values of the branch that ran. The Python tracer `df.cond` (defun/control_flow.py)
makes the branches. Batched (vmap), a cond with a batched predicate runs both branches and
selects per example.
"""
import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.batching import broadcast_batch
from defun.runtime.context import state
from defun.runtime.execute import run_op
from defun.runtime.indexed_slices import IndexedSlices
from defun.runtime.ops.array_ops import identity, zeros, zeros_like
from defun.runtime.registry import get as get_op, register
from defun.runtime.shapes import merge_shapes, shape_str, shapes_compatible
from defun.runtime.variables import watch_read_handles
from defun.graph.functions import call_graph, input_grads, plan_of, add_side_outputs
from defun.graph.gradients import LOCK as _grad_lock, Source, levels_of, pick_level, saving_of
from defun.graph.ir import Graph, unique_name
from defun.graph.loop_stacks import is_stand_in

__all__ = ["COND", "cond_node", "share_captures"]


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
                    feed.append(xs[v] if kind is Source.INPUT else los[pos[v]] if kind is Source.SIDE else v)
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


_COND_ATTRS = {"then_branch": "func", "else_branch": "func"}
COND = register(
    name="cond",
    kernel=_cond_kernel,
    infer=_cond_infer,
    grad=_cond_grad,
    num_inputs=None,
    attrs=_COND_ATTRS,
    defaults={},
    num_outputs=_cond_outputs,
    none_grads=True,
    bind=_cond_bind,
    onnx=_cond_onnx,
    batch=_cond_batch,
)


def cond_node(pred, then_g, else_g, name=None):
    """Add (or run eagerly) one `cond` node over finalized branch graphs; a list of outputs."""
    captured = share_captures([then_g, else_g])
    watch_read_handles(captured)     # variables read in a branch count as read here
    out = _as_list(run_op(COND, [pred] + captured, {"then_branch": then_g, "else_branch": else_g},
                          name))
    return out[:len(then_g.outputs)]   # a forward accumulator may have raised the node already
