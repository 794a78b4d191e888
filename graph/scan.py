"""The `scan` op: a loop over the rows of tensors, one node (kernel, inference, gradient,
ONNX form, how nodes are made). `df.scan`, `df.map_fn` and `df.foldl` (tracers in
defun/control_flow.py) trace their `fn` into its body.

A scan node takes `carries` loop variables, `sliced` tensors whose rows (axis 0) it walks
(all of one length T), then the values its body captures. Per row t (from the last with
`reverse`) the body takes the carries, row t of each sliced tensor and the captures, and
returns the new carries then values the node stacks at position t. The node returns the
final carries, then the stacks: a foldl has no stacked value, a map_fn no carry, a scan
stacks its carries.

The gradient is another scan, in the other direction, over the body's backward function,
so it is one node too and has gradients of its own. It reads only what the forward saved,
with the machinery of `while` (graph/while_op.py): raised a level, the body also
returns (stacked per row, as any stacked value) what its backward reads; a row of a
sliced input the backward reads is sliced again, not saved. The carries of the backward
scan are the carries' gradients and the sums of the captures' gradients; its stacked
values are the sliced inputs' gradients.

    %3, %4 = scan(%0, %1, %2) {body=@scan_body_0, carries=1, reverse=False, sliced=1}
"""

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.context import state
from defun.runtime.execute import run_op
from defun.runtime.indexed_slices import dense
from defun.runtime.ops.array_ops import expand_dims, zeros_like
from defun.runtime.registry import get as get_op, register
from defun.runtime.shapes import shape_str, shapes_compatible
from defun.runtime.variables import watch_read_handles
from defun.graph.control_flow import _as_list, _derived_level, _materialized, _zeros_for, share_captures
from defun.graph.while_op import _eager_stack, _stack, holds_stand_ins, loop_gradient_level
from defun.graph.functions import call_graph, input_grads, plan_of
from defun.graph.onnx_loops import loop_keeping
from defun.graph.gradients import levels_of
from defun.graph.ir import Graph, unique_name
from defun.graph.size_labels import size_labels
from defun.graph.specialize import specialize

__all__ = ["SCAN", "scan_node", "empty_row_sizes"]


def _type_text(shape, dtype):
    return f"{dtype.name}{shape_str(shape)}"


def _split(attrs, vals):
    n, m = attrs["carries"], attrs["sliced"]
    return vals[:n], vals[n:n + m], vals[n + m:]


def _length(xs):
    length = xs[0].shape[0]
    for k, x in enumerate(xs[1:]):
        if x.shape[0] != length:
            raise errors.InvalidArgumentError(
                f"scan: the sliced inputs must have the same size in dimension 0; input 0 has "
                f"{length} rows, input {k + 1} has {x.shape[0]}")
    return length


def empty_row_sizes(body, carries, sliced):
    """Each stacked value's row sizes in a scan of no rows, as a relaxed trace does not know
    them: (k, axis), the size of the node's input k there, for a carry stacked (df.scan: its
    initial value's shape) or a size the body passes through from an input (graph/size_labels.py:
    a backward scan's rows of a sliced input's shape); else the size the body knows, else 0
    (None: sizes only the rows decide, or the node's inputs' shapes)."""
    labels = size_labels(body, ())      # every unknown input size a label of its own
    where = {}
    for k, p in enumerate(body.all_inputs):
        for a, (d, label) in enumerate(zip(p.shape or (), labels.get(id(p), ()))):
            if d is None:
                where.setdefault(label, (k, a + 1 if carries <= k < carries + sliced else a))
    carried = {id(t): k for k, t in enumerate(body.outputs[:carries])}
    return [tuple((carried[id(t)], a) if id(t) in carried else d if d is not None else where.get(lab)
                  for a, (d, lab) in enumerate(zip(t.shape, labels.get(id(t), (None,) * len(t.shape)))))
            for t in body.outputs[carries:]]


def _empty_stacks(attrs, vals, sizes):
    """The stacks of a scan of no rows (`sizes`: empty_row_sizes), their sizes still unknown
    inferred from the body's inputs' shapes (its graph made static for them: graph/specialize.py;
    a backward scan's rows broadcast from two unknown sizes)."""
    body, n, m = attrs["body"], attrs["carries"], attrs["sliced"]
    shapes = [tuple(vals[d[0]].shape[d[1]] if type(d) is tuple else d for d in row) for row in sizes]
    if any(None in row for row in sizes):
        try:
            known = specialize(body, [np.shape(v)[1:] if n <= k < n + m else np.shape(v)
                                      for k, v in enumerate(vals[:len(body.inputs)])]).outputs[n:]
            shapes = [s if None not in row else tuple(d or 0 for d in t.shape)
                      for s, row, t in zip(shapes, sizes, known)]
        except errors.InvalidArgumentError:
            pass        # (a size the body refuses: it runs no row)
    return tuple(np.zeros((0,) + tuple(d or 0 for d in s), t.dtype.np) for s, t in zip(shapes, body.outputs[n:]))


def _scan_runner(attrs, backend=None):
    body = attrs["body"]
    run_body = plan_of(body, backend).run
    n, reverse = attrs["carries"], attrs["reverse"]
    kept = body.outputs[n:]
    loose = [holds_stand_ins(t) for t in kept]     # a cond's side outputs, raised (see _stack)
    unknown = any(None in t.shape for t in kept)
    empty = []      # empty_row_sizes, once a call has no rows

    def run_scan(*vals):
        carry, xs, consts = _split(attrs, vals)
        length = _length(xs)
        if not length and unknown:
            if not empty:
                empty.append(empty_row_sizes(body, n, attrs["sliced"]))
            return tuple(carry) + _empty_stacks(attrs, vals, empty[0])
        rows = [[] for _ in kept]     # grown row by row: a budget stops a long scan before
        for t in (range(length - 1, -1, -1) if reverse else range(length)):     # it allocates
            out = run_body(*carry, *[x[t, ...] for x in xs], *consts)
            carry = out[:n]
            for r, v in zip(rows, out[n:]):
                r.append(v)
        if reverse:
            for r in rows:
                r.reverse()
        return tuple(carry) + tuple(_stack(r, t, body, lo, "scan") for r, t, lo in zip(rows, kept, loose))
    return run_scan


def _scan_kernel(*vals, **attrs):
    return _scan_runner(attrs)(*vals)


def _scan_outputs(attrs, n_inputs):
    return len(attrs["body"].outputs)


def _scan_infer(shapes, dts, attrs):
    body, n, m = attrs["body"], attrs["carries"], attrs["sliced"]
    params = body.all_inputs
    if n < 0 or m < 1 or n + m > len(shapes):
        raise errors.InvalidArgumentError(
            f"scan: carries={n} and sliced={m} for a node of {len(shapes)} inputs (it needs "
            f"sliced >= 1 and carries + sliced <= the inputs)")
    if len(params) != len(shapes):
        raise errors.InvalidArgumentError(
            f"scan: body {body.name} takes {len(params)} inputs, the node passes {len(shapes)}")
    length = None
    for k, (s, d, p) in enumerate(zip(shapes, dts, params)):
        s = tuple(s)
        row = s[1:] if n <= k < n + m else s
        if n <= k < n + m and not s:
            raise errors.InvalidArgumentError(
                f"scan: sliced input {k - n} is a scalar ({d.name}); a scan walks the rows of "
                f"tensors of rank >= 1")
        if d is not p.dtype or not shapes_compatible(row, tuple(p.shape)):
            raise errors.InvalidArgumentError(
                f"scan: input {k} is {_type_text(s, d)}, body {body.name} expects "
                f"{'rows of ' if n <= k < n + m else ''}{_type_text(p.shape, p.dtype)}")
        if n <= k < n + m and s[0] is not None:
            if length is not None and s[0] != length:
                raise errors.InvalidArgumentError(
                    f"scan: the sliced inputs must have the same size in dimension 0; got "
                    f"{length} and {s[0]}")
            length = s[0]
    if len(body.outputs) < n:
        raise errors.InvalidArgumentError(
            f"scan: body {body.name} returns {len(body.outputs)} values for {n} carries")
    carries = [(tuple(p.shape), p.dtype) for p in params[:n]]
    for k, ((s, d), t) in enumerate(zip(carries, body.outputs)):
        if t.dtype is not d or not shapes_compatible(s, tuple(t.shape)):
            raise errors.InvalidArgumentError(
                f"scan: carry {k} enters as {_type_text(s, d)} but body {body.name} returns "
                f"{_type_text(t.shape, t.dtype)}")
    return carries + [((length,) + tuple(t.shape), t.dtype) for t in body.outputs[n:]]


def _trace_rows(base, types, fn):
    """A finalized function graph of `fn(*placeholders)` for [(shape, dtype, handle_data)]."""
    g = Graph(unique_name(base), outer=state.graph, base_name=base)
    with g.building():
        outs = fn(*[g.placeholder(s, d, h) for s, d, h in types])
    return g.finalize(outs)


def _scan_grad(op, *grads):
    attrs = op.attrs
    n, m = attrs["carries"], attrs["sliced"]
    chain = levels_of(attrs["body"])
    found = loop_gradient_level(op, chain, grads, "is_inexact", (n, m),
                                lambda lv, body: {"body": lv.next} if lv.next is not body else None)
    if found is None:
        return [None] * len(op.inputs)
    grads, body, lv, outs = found
    bw = lv.saving.backward
    stacks = outs[n:]
    _, xs, consts = _split(attrs, list(op.inputs))
    float_vars = [k for k in range(n) if body.outputs[k].dtype.is_inexact]
    cap = [j for j in range(len(consts)) if bw.input_grads[n + m + j] is not None]
    rows_of = [j for j in range(m) if bw.input_grads[n + j] is not None]
    if not float_vars and not cap and not rows_of:
        return [None] * len(op.inputs)
    seeds = [dense(grads[k]) if k < len(grads) and grads[k] is not None else zeros_like(outs[k])
             for k in float_vars]
    accum = [_zeros_for(consts[j]) for j in cap]
    feed_plan, sliced = _backward_feed(bw, lv, grads, float_vars, stacks, xs, consts, n)
    nv, nc = len(float_vars), len(cap)

    def step(*vals):
        carried, sums, rows = vals[:nv], vals[nv:nv + nc], vals[nv + nc:]
        feed = [carried[v] if kind == "carry" else rows[v] if kind == "row" else v
                for kind, v in feed_plan]
        got = [dense(g) for g in input_grads(bw, call_graph(bw.graph, feed))]
        new_vars = [got[k] if got[k] is not None else zeros_like(carried[j])
                    for j, k in enumerate(float_vars)]
        new_sums = [sums[j] + got[n + m + c] for j, c in enumerate(cap)]
        row_grads = [got[n + j] for j in rows_of]     # (given: its backward returns one)
        return new_vars + new_sums + row_grads

    init = seeds + accum
    types = [(tuple(t.shape), t.dtype, None) for t in init] + \
            [(tuple(t.shape)[1:], t.dtype, None) for t in sliced]
    body_g = _trace_rows(f"{body.base_name}_grad", types, step)
    out = scan_node(body_g, init, sliced, reverse=not attrs["reverse"])
    result = [None] * len(op.inputs)
    for j, k in enumerate(float_vars):
        result[k] = out[j]
    for j, c in enumerate(cap):
        result[n + m + c] = out[nv + j]
    for j, k in enumerate(rows_of):     # a scan of no rows cannot tell what sizes its rows' gradients
        g = out[nv + nc + j]            # have (its body calls the backward): they have x's
        result[n + k] = run_op(get_op("reshape_like"), [g, xs[k]], {}) if None in g.shape else g
    return result


def _backward_feed(bw, lv, grads, float_vars, stacks, xs, consts, n):
    """How the backward scan's body feeds the body's backward `bw`: one (kind, value) per
    input of it, a carry, a row or a value; and the tensors the backward scan slices per
    row (stacked gradients, saved stacks, forward rows)."""
    sliced, slot = [], {}

    def row_of(t):
        if id(t) not in slot:
            slot[id(t)] = len(sliced)
            sliced.append(t)
        return slot[id(t)]
    feed_plan = []
    for k in bw.grad_outputs:
        if k < n:
            feed_plan.append(("carry", float_vars.index(k)))
        else:
            g = dense(grads[k]) if k < len(grads) and grads[k] is not None else zeros_like(stacks[k - n])
            feed_plan.append(("row", row_of(g)))
    for kind, v in lv.feed:
        feed_plan.append(("row", row_of(stacks[v])) if kind == "stack" else
                         ("row", row_of(xs[v])) if kind == "slice" else
                         ("value", consts[v]) if kind == "const" else ("value", v))
    if not sliced:
        row_of(xs[0])       # (read by nothing: it gives the backward scan its number of rows)
    return feed_plan, sliced


def _scan_onnx(e, node, ins):
    """ONNX Loop over the rows: the trip count is the rows' number, the loop variables the
    carries; the body gathers row i (T-1-i with `reverse`) of each sliced input, emits the
    body function and keeps its stacked values (graph/onnx_loops.py), reversed afterwards
    with `reverse`, so row t stays at position t."""
    body_g, n, m = node.attrs["body"], node.attrs["carries"], node.attrs["sliced"]
    reverse = node.attrs["reverse"]
    init, xs, consts = _split(node.attrs, list(ins))
    first = node.inputs[n]
    length = e.dim(xs[0], 0, tuple(first.shape))
    carry_types = [(tuple(p.shape), p.dtype) for p in body_g.all_inputs[:n]]
    y_types = [(tuple(t.shape), t.dtype) for t in body_g.outputs[n:]]
    last = e.op("Sub", e.squeeze(length, [0]), e.scalar(1, dtypes.int64)) if reverse else None

    def body(it, carries):
        i = e.op("Sub", last, it) if reverse else it
        rows = [e.op("Gather", x, i, axis=0) for x in xs]
        out = e.inline(body_g, carries + rows + consts)
        return e.scalar(True, dtypes.bool), out[:n], out[n:]
    final, outs = loop_keeping(e, e.squeeze(length, [0]), e.scalar(True, dtypes.bool), init, carry_types, body,
                               y_types, [holds_stand_ins(t) for t in body_g.outputs[n:]], "scan")
    if any(None in s for s, _ in y_types):     # a relaxed trace's stacks: their sizes stated (no rows
        outs = _sized_stacks(e, node, ins, outs, length)        # made [0, 0, 0] of [0, 2, 3])
    if reverse:
        outs = [e.op("Slice", o, e.ints([-1]), e.ints([-(2 ** 63)]), e.ints([0]), e.ints([-1])) for o in outs]
    return final + outs


def _sized_stacks(e, node, ins, outs, length):
    """The ONNX stacks of a scan reshaped to their rows' sizes (empty_row_sizes: a carry's, or
    an input's the body passes through), where those are all found."""
    body, n, m = node.attrs["body"], node.attrs["carries"], node.attrs["sliced"]
    sized = []
    for o, row, t in zip(outs, empty_row_sizes(body, n, m), body.outputs[n:]):
        if None not in t.shape or None in row:
            sized.append(o)
            continue
        dims = [e.dim(ins[d[0]], d[1], tuple(node.inputs[d[0]].shape)) if type(d) is tuple else e.ints([d])
                for d in row]
        sized.append(e.op("Reshape", o, e.op("Concat", length, *dims, axis=0)))
    return sized


def _scan_prune(attrs, used):
    """Without readers of the trailing stacked values, a body that does not return them."""
    body, n = attrs["body"], attrs["carries"]
    keep = max([k + 1 for k, u in enumerate(used) if u] + [n])
    if keep >= len(body.outputs):
        return None
    whole = body
    view = _derived_level(whole, ("pruned", keep),
                          lambda: whole.view(whole.outputs[:keep], f"{whole.name}_pruned"))
    return {**attrs, "body": view}


def _swap01(x, rank):
    """`x` with its first two axes exchanged (the batch and the rows)."""
    return run_op(get_op("transpose"), [x], {"perm": (1, 0) + tuple(range(2, rank))})


def _scan_batch(ctx, node, inputs, batched):
    """Batched (graph/vectorize.py): the batch moves behind the rows of the sliced inputs, so
    one scan walks rows of whole batches; a carry any row makes batched is batched from the
    start; a batched stacked value comes back with the batch first. Every example has the
    same number of rows, so nothing is masked."""
    attrs = node.attrs
    n, m = attrs["carries"], attrs["sliced"]
    body = attrs["body"]
    carries, sliced, extra = inputs[:n], inputs[n:n + m], inputs[n + m:]
    cflags, sflags, eflags = list(batched[:n]), list(batched[n:n + m]), batched[n + m:]
    rows = [_swap01(x, len(t.shape) + 1) if b else x
            for x, b, t in zip(sliced, sflags, node.inputs[n:n + m])]
    if state.graph is None:     # eager: a Python loop of batched rows, as df.scan runs (tapes record it)
        return _eager_scan_batch(ctx, node, list(carries) + rows, cflags + sflags, extra, eflags)
    while True:
        bg, outs, oflags = ctx.function(body, cflags + sflags, extra, eflags, "scan_body_batched")
        grown = [c or o for c, o in zip(cflags, oflags[:n])]
        if grown == cflags:
            break
        cflags = grown
    with bg.building():
        outs = [_materialized(ctx, o, t) if want and not f else o
                for o, f, want, t in zip(outs, oflags, cflags + [False] * (len(outs) - n), body.outputs)]
    bg.finalize(outs)
    init = [_materialized(ctx, x, t) if want and not b else x
            for x, b, want, t in zip(carries, batched[:n], cflags, node.inputs[:n])]
    res = scan_node(bg, init, rows, attrs["reverse"])
    flags = cflags + list(oflags[n:])
    res = [_swap01(r, len(t.shape) + 1) if f and k >= n else r
           for k, (r, f, t) in enumerate(zip(res, flags, node.outputs))]
    return res, flags


def _eager_scan_batch(ctx, node, vals, flags, extra, eflags):
    """The batched scan run eagerly row by row: carries and row t of each sliced input
    (`vals`: the rows on axis 0, the batch behind them) through the body's batching; the
    stacked values stacked with the batch first when any example's is batched."""
    attrs = node.attrs
    n = attrs["carries"]
    carry, cflags, rows, sflags = vals[:n], flags[:n], vals[n:], flags[n:]
    length = int(rows[0].shape[0])
    kept = [[None] * length for _ in node.outputs[n:]]
    for t in (range(length - 1, -1, -1) if attrs["reverse"] else range(length)):
        outs, oflags = ctx.run_graph(attrs["body"], carry + [x[t] for x in rows] + list(extra),
                                     cflags + sflags + list(eflags))
        carry, cflags = outs[:n], oflags[:n]
        for k, (o, f) in enumerate(zip(outs[n:], oflags[n:])):
            kept[k][t] = (o, f)
    stacks = [_eager_stack(ctx, k, t) for k, t in zip(kept, node.outputs[n:])]
    sflags = [any(f for _, f in k) for k in kept]
    if not length:      # a stacked carry: none of the rows of its initial value, tied to it (a tape's
        body = attrs["body"]        # gradient: zeros, not 'not connected'), as df.scan's of no rows
        carried = {id(t): i for i, t in enumerate(body.outputs[:n])}
        for k, t in enumerate(body.outputs[n:]):
            i = carried.get(id(t))
            if i is not None and carry[i].dtype.is_floating:
                c, f = carry[i], cflags[i]
                stacks[k] = expand_dims(c, 1)[:, :0] if f else expand_dims(c, 0)[:0]
                sflags[k] = f
    return carry + stacks, cflags + sflags


_SCAN_ATTRS = {"body": "func", "carries": "int", "sliced": "int", "reverse": "bool"}
SCAN = register(
    name="scan",
    kernel=_scan_kernel,
    infer=_scan_infer,
    grad=_scan_grad,
    num_inputs=None,
    attrs=_SCAN_ATTRS,
    defaults={},
    num_outputs=_scan_outputs,
    none_grads=True,
    bind=_scan_runner,
    prune_outputs=_scan_prune,
    onnx=_scan_onnx,
    batch=_scan_batch,
)


def scan_node(body_g, carries, sliced, reverse=False, name=None):
    """Add (or run eagerly) one `scan` node of finalized `body_g` over the rows of `sliced`
    with loop variables `carries` (then the body's captures); a list: the final carries,
    then the stacked values."""
    captured = share_captures([body_g])
    watch_read_handles(captured)
    out = _as_list(run_op(SCAN, list(carries) + list(sliced) + captured,
                          {"body": body_g, "carries": len(carries), "sliced": len(sliced),
                           "reverse": bool(reverse)}, name))
    return out[:len(body_g.outputs)]
