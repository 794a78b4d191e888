"""The `while` op: kernel (runner), inference, gradient (with the levels it is raised
through), pruning, ONNX form, batching rule, and how its nodes are made.

A node holds its cond and body as attrs and takes the values they capture as extra inputs.
A while's gradient is another while loop calling the body's backward function once per
iteration, newest first; raised, the node also returns the iteration count and, stacked
per iteration, every value the body's backward reads (side outputs of the body, the
variable values it read, the loop variables it needs). The Python tracer `df.while_loop`
(defun/control_flow.py) makes the functions. Batched (vmap), a while with a batched
condition runs while any example's condition holds, masked per example.

This module is long because the op's row stays whole beside it: kernel, inference,
gradient, ONNX form and batching rule.
"""
import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.context import state
from defun.runtime.execute import run_op
from defun.runtime.indexed_slices import dense
from defun.runtime.ops.array_ops import cast, gather, stack, zeros, zeros_like
from defun.runtime.ops.math_ops import greater, maximum
from defun.runtime.registry import get as get_op, register
from defun.runtime.shapes import shape_str, shapes_compatible
from defun.runtime.tensor import Tensor, constant
from defun.runtime.variables import watch_read_handles
from defun.graph.functions import CALL, call_graph, input_grads, plan_of, add_side_outputs
from defun.graph.gradients import Source, levels_of, pick_level, saving_of
from defun.graph.ir import Graph, unique_name
from defun.graph.loop_stacks import is_loop_stack, padded, padded_tensors
from defun.graph.nodes import CONST
from defun.graph.onnx_loops import loop_keeping
from defun.graph.control_flow import (COND, _as_list, _derived_level, _materialized, _select, _type_text,
                                      _zeros_for, share_captures)

__all__ = ["WHILE", "while_node", "holds_stand_ins", "loop_gradient_level"]


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
            if kind is Source.INPUT:
                self.feed.append(("stack", stack_of(fwd.all_inputs[v])) if v < n else
                                 ("slice", v - n) if v < n + sliced else ("const", v - n - sliced))
            elif kind is Source.SIDE:
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


# batching (graph/vectorize.py walks the graph; `ctx` is its BatchContext)
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


WHILE = register(
    name="while",
    kernel=_while_kernel,
    infer=_while_infer,
    grad=_while_grad,
    num_inputs=None,
    attrs=_WHILE_ATTRS,
    defaults={"saves": None},
    num_outputs=_while_outputs,
    none_grads=True,
    bind=_while_runner,
    prune_outputs=_while_prune,
    onnx=_while_onnx,
    batch=_while_batch,
)


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
