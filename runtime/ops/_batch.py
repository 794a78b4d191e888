"""The op-specific batching rules the op rows name (`batch=`); the shared ones and the rule
contract are in runtime/batching.py. Each rule emits ordinary ops on values whose batch is
at axis 0 (`ctx.size` long) and says per output whether it is batched."""
import string

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.batching import (batch_shape, batch_size, broadcast_batch, elementwise, emit, expand_rank,
                                    materialize, materialize_all, norm_axis, op, reshape_batch, static_shape)
from defun.runtime.context import state

def _out(outs):
    return outs, [True] * len(outs)


# ------------------------------------------------------------------ shapes
def reshape(ctx, node, inputs, batched):
    return _out([reshape_batch(ctx, inputs[0], _known(node.attrs["shape"], node.outputs[0]))])


def _known(shape, t):
    """Per-example reshape target `shape` with its -1 resolved from `t`'s inferred shape when
    that is known: (B, -1) cannot be resolved by a reshape of an empty batch (B = 0)."""
    shape = tuple(shape)
    return tuple(t.shape) if -1 in shape and None not in tuple(t.shape) else shape


def _rows(ctx, t):
    """(B, elements of one example of `t`): its flattened batch, -1 only if a size is unknown."""
    shape = tuple(t.shape)
    return (-1 if ctx.size is None else ctx.size, -1 if None in shape else int(np.prod(shape, dtype=np.int64)))


def broadcast_to(ctx, node, inputs, batched):
    shape = tuple(node.attrs["shape"])
    x = expand_rank(inputs[0], len(node.inputs[0].shape), len(shape))
    return _out([broadcast_batch(ctx, x, shape)])


def tile(ctx, node, inputs, batched):
    return _out(emit(node, inputs, {"multiples": (1,) + tuple(node.attrs["multiples"])}))


def fill(ctx, node, inputs, batched):
    dims = tuple(node.attrs["dims"])
    v = reshape_batch(ctx, inputs[0], (1,) * len(dims))
    return _out([broadcast_batch(ctx, v, dims)])


def transpose(ctx, node, inputs, batched):
    return _out(emit(node, inputs, {"perm": (0,) + tuple(p + 1 for p in node.attrs["perm"])}))


def pad(ctx, node, inputs, batched):
    x = inputs[0] if batched[0] else materialize(ctx, node, inputs[0], node.inputs[0])
    attrs = dict(node.attrs, paddings=(0, 0) + tuple(node.attrs["paddings"]))
    if len(batched) == 1 or not batched[1]:
        return _out(emit(node, [x] + list(inputs[1:]), attrs))
    # a constant per example: padded with zeros, then each example's constant where the
    # padding is (a mask of the padded region, so x's own entries stay exact)
    c = inputs[1]
    zero = np.zeros((), node.inputs[1].dtype.np)     # (not c[0]: a batch may be empty)
    inside = emit(node, [op("ones_like", [x]), zero], attrs)[0]
    r = len(node.inputs[0].shape)
    c = reshape_batch(ctx, c, (1,) * r)
    padded = emit(node, [x, zero], attrs)[0]
    return _out([op("add", [padded, op("multiply", [op("subtract", [op("ones_like", [inside]), inside]), c])])])


def clip_by_value(ctx, node, inputs, batched):
    """The bounds broadcast to t, so t is batched whenever a bound is."""
    xs = materialize_all(ctx, node, inputs, batched, (0,))
    return elementwise(ctx, node, xs, [True] + list(batched[1:]))


def _slice_past_batch(a):
    """strided_slice attrs `a` (and dynamic_strided_slice's operands) with a whole batch axis first."""
    attrs = dict(a, begin=(0,) + tuple(a["begin"]), end=(0,) + tuple(a["end"]),
                 strides=(1,) + tuple(a["strides"]), begin_mask=a["begin_mask"] << 1 | 1,
                 end_mask=a["end_mask"] << 1 | 1, shrink_axis_mask=a["shrink_axis_mask"] << 1,
                 new_axis=tuple(p + 1 for p in a["new_axis"]))
    if "operands" in a:
        attrs["operands"] = tuple(c + 3 for c in a["operands"])
    return attrs


def _slice_past_batch_of(ctx, a):
    """dynamic_strided_slice's attrs with a whole batch axis first (and on its known sizes)."""
    return dict(_slice_past_batch(a), shape=(ctx.size,) + tuple(a["shape"]) if a["shape"] else ())


def strided_slice(ctx, node, inputs, batched):
    return _out(emit(node, materialize_all(ctx, node, inputs, batched), _slice_past_batch(node.attrs)))


def dynamic_strided_slice(ctx, node, inputs, batched):
    """(x, *bounds) or its gradient's (g, like, *bounds), the tensors batched. Bounds shared
    by every example: the op with a whole batch axis first. Bounds per example: the axes they
    bound are taken whole by that op, then each is gathered per example (batch_gather) at
    its own positions, which must be as many in every example (_example_positions)."""
    tensors = 2 if node.op.name.endswith("_grad") else 1
    xs = materialize_all(ctx, node, inputs, batched, tuple(range(tensors)))
    if not any(batched[tensors:]):
        return _out(emit(node, xs, _slice_past_batch_of(ctx, node.attrs)))
    a, bounds = node.attrs, dict(zip(node.attrs["operands"], zip(inputs[tensors:], batched[tensors:])))
    per = sorted({c // 3 for c, (_, b) in bounds.items() if b})     # the axes bounded per example
    whole = sum(1 << d for d in per)
    shared = dict(a, begin_mask=a["begin_mask"] | whole, end_mask=a["end_mask"] | whole, new_axis=(), shape=(),
                  shrink_axis_mask=a["shrink_axis_mask"] & ~whole,
                  strides=tuple(1 if d in per else st for d, st in enumerate(a["strides"])),
                  operands=tuple(c for c in a["operands"] if c // 3 not in per))
    kept = [x for c, (x, _) in bounds.items() if c // 3 not in per]
    shared = _slice_past_batch(shared)
    x = xs[tensors - 1]
    steps = [op(node.op.name.replace("_grad", ""), [x] + kept, **shared)]   # the whole-axes slice, gathered
    place = {d: 1 + sum(1 for k in range(d) if not shared["shrink_axis_mask"] >> (k + 1) & 1) for d in per}
    gathers = []        # (positions, axis), from the last bounded axis to the first
    for d in reversed(per):
        size = _axis_size(node.inputs[tensors - 1], x, d)
        gathers.append((_example_positions(a, d, size, {c % 3: v for c, (v, _) in bounds.items() if c // 3 == d}),
                        place[d]))
        steps.append(op("batch_gather", [steps[-1], gathers[-1][0]], axis=place[d], batch_dims=1))
    if tensors == 1:
        y = steps[-1]
        for p in a["new_axis"]:
            y = op("expand_dims", [y], axis=p + 1)
        return _out([y])
    g = xs[0]
    for p in reversed(a["new_axis"]):
        g = op("squeeze", [g], axis=(p + 1,))
    for (idx, axis), before in zip(reversed(gathers), reversed(steps[:-1])):
        g = op("batch_gather_grad", [g, idx, before], axis=axis, batch_dims=1)
    return _out([op(node.op.name, [g, x] + kept, **shared)])


def _axis_size(t, x, d):
    """Size of axis `d` of one example of `t` (batched value `x`): an int64 scalar tensor or int."""
    n = tuple(t.shape)[d]
    return np.int64(n) if n is not None else op("shape", [x], out_type=dtypes.int64)[d + 1]


def _example_positions(a, d, n, given):
    """The positions along axis `d` (size `n`) each example's slice takes, as Python's slice
    rules place them: (B,) for an index, (B, K) for a slice, K the largest count; an example
    taking fewer gets the position n past the rest, which the gather refuses (out of range)
    as the examples' slices would differ in size. `given`: {0 begin, 1 end, 2 step: batched
    (B,) or shared scalar tensor}; the rest are static in the attrs `a` (or omitted)."""
    i64 = dtypes.int64

    def bound(k, static):
        return op("cast", [given[k]], dtype=i64) if k in given else np.int64(static)
    start = bound(0, a["begin"][d])
    if a["shrink_axis_mask"] >> d & 1:
        return op("where", [op("less", [start, np.int64(0)]), op("add", [start, n]), start])
    step = bound(2, a["strides"][d])
    neg = op("less", [step, np.int64(0)])
    last = op("subtract", [n, np.int64(1)])
    lo, hi = op("where", [neg, np.int64(-1), np.int64(0)]), op("where", [neg, last, n])

    def clamped(k, static, omitted):
        if k not in given and a[("begin_mask", "end_mask")[k]] >> d & 1:
            return omitted
        v = bound(k, static)
        return op("where", [op("less", [v, np.int64(0)]), op("maximum", [op("add", [v, n]), lo]),
                            op("minimum", [v, hi])])
    start = clamped(0, a["begin"][d], op("where", [neg, last, np.int64(0)]))
    stop = clamped(1, a["end"][d], op("where", [neg, np.int64(-1), n]))
    sign = op("where", [neg, np.int64(-1), np.int64(1)])
    span = op("subtract", [op("add", [op("subtract", [stop, start]), step]), sign])
    count = op("maximum", [op("floordiv", [span, step]), np.int64(0)])
    k = op("dynamic_range", [np.int64(0), op("reduce_max", [op("concat", [
        op("reshape", [count], shape=(-1,)), np.zeros(1, np.int64)], axis=0)], axis=None, keepdims=False), np.int64(1)])
    column = [op("reshape", [v], shape=(-1, 1)) for v in (start, step, count)]
    taken = op("add", [column[0], op("multiply", [op("reshape", [k], shape=(1, -1)), column[1]])])
    return op("where", [op("less", [op("reshape", [k], shape=(1, -1)), column[2]]), taken, n])


def squeeze(ctx, node, inputs, batched):
    axis = node.attrs["axis"]
    r = len(node.inputs[0].shape)
    if axis is None:
        shape = static_shape(node, node.inputs[0])
        axis = tuple(i for i, n in enumerate(shape) if n == 1)
    return _out(emit(node, inputs, {"axis": tuple(norm_axis(node, a, r) for a in axis)}))


def _flat_axis(ctx, node, inputs, batched, flatten):
    """repeat / repeat_grad: axis None (the flattened tensor) becomes axis 1 of (B, -1)."""
    attrs = dict(node.attrs)
    xs = materialize_all(ctx, node, inputs, batched)
    if attrs["axis"] is None:
        xs = [op("reshape", [x], shape=_rows(ctx, t)) for x, t in zip(xs[:flatten], node.inputs)] + xs[flatten:]
        attrs["axis"] = 1
    else:
        attrs["axis"] = norm_axis(node, attrs["axis"], len(node.inputs[0].shape))
    return attrs, xs


def repeat(ctx, node, inputs, batched):
    attrs, xs = _flat_axis(ctx, node, inputs, batched, 1)
    return _out(emit(node, xs, attrs))


def repeat_grad(ctx, node, inputs, batched):
    """(g, like): with axis None, `like` is flattened too and the result takes its shape."""
    attrs, xs = _flat_axis(ctx, node, inputs, batched, 2)
    out = emit(node, xs, attrs)[0]
    if node.attrs["axis"] is None:
        out = reshape_batch(ctx, out, static_shape(node, node.outputs[0], "output"))
    return _out([out])


def reshape_like(ctx, node, inputs, batched):
    """Only the `like` input's shape matters: the result is batched as `x` is."""
    x, like = inputs
    if not batched[0]:
        return [emit(node, [x, _example_like(ctx, node, like, batched[1])])[0]], [False]
    shape = tuple(node.outputs[0].shape)
    if None not in shape:
        return _out([reshape_batch(ctx, x, shape)])
    dims = _batched_shape(ctx, like, batched[1])
    return _out([op("dynamic_reshape", [x, dims], shape=(ctx.size,) + shape)])


def _example_like(ctx, node, like, like_batched):
    """A tensor of one example's shape of `like` (batched or not) for an op that reads only
    its shape: zeros of the per-example shape (the shape is all they say; a batch may be empty)."""
    t = node.inputs[1]
    if not like_batched:
        return like
    if None not in tuple(t.shape):
        return np.zeros(tuple(t.shape), t.dtype.np)
    return op("dynamic_fill", [op("shape", [like], out_type=dtypes.int32)[1:], np.zeros((), t.dtype.np)],
              shape=tuple(t.shape))


def _batched_shape(ctx, like, like_batched):
    """The run-time shape of `like` with the batch first (B prefixed when it is unbatched)."""
    s = op("shape", [like], out_type=dtypes.int32)
    if like_batched:
        return s
    return op("concat", [op("reshape", [batch_size(ctx, dtypes.int32)], shape=(1,)), s], axis=0)


def broadcast_like(ctx, node, inputs, batched):
    x, like = inputs
    if not batched[0]:
        return [emit(node, [x, _example_like(ctx, node, like, batched[1])])[0]], [False]
    shape = tuple(node.outputs[0].shape)
    x = expand_rank(x, len(node.inputs[0].shape), len(shape))
    if None not in shape:
        return _out([broadcast_batch(ctx, x, shape)])
    return _out([op("dynamic_broadcast_to", [x, _batched_shape(ctx, like, batched[1])], shape=(ctx.size,) + shape)])


def sum_to_like(ctx, node, inputs, batched):
    """Sum batched `g` to `like`'s per-example shape: the broadcast axes, then the size-1 ones."""
    g, like = inputs
    if not batched[0]:
        return [emit(node, [g, _example_like(ctx, node, like, batched[1])])[0]], [False]
    gs, ls = tuple(node.inputs[0].shape), tuple(node.inputs[1].shape)
    lead = len(gs) - len(ls)
    if None in gs + ls:     # the leading axes summed here, the size-1 ones by the op (batch against batch)
        if lead:
            g = op("reduce_sum", [g], axis=tuple(range(1, lead + 1)), keepdims=False)
        return _out(emit(node, [g, like if batched[1] else materialize(ctx, node, like, node.inputs[1])]))
    axes = tuple(range(1, lead + 1)) + tuple(
        lead + i + 1 for i, n in enumerate(ls) if n == 1 and gs[lead + i] != 1)
    if axes:
        g = op("reduce_sum", [g], axis=axes, keepdims=False)
    return _out([reshape_batch(ctx, g, ls)])


def dropout(ctx, node, inputs, batched):
    """One mask for every example (it depends on the seed alone, as per example)."""
    if batched[1]:
        raise errors.UnimplementedError("dropout: batching covers a shared seed only")
    ns = node.attrs["noise_shape"]
    xs = tuple(node.inputs[0].shape)
    ns = xs if ns is None else tuple(x if n is None else n for n, x in zip(ns, xs))
    return _out(emit(node, inputs, dict(node.attrs, noise_shape=(1,) + ns)))


def custom_gradient(ctx, node, inputs, batched):
    """The batched op passes its outputs through (every one batched) and keeps a gradient:
    the user's grad_fn, which speaks of one example, run on the batch (traced on one
    example's cotangents, reading the batched values of what it closes over; ctx.call_batched).
    Gradients of unbatched inputs and of variables are summed over the examples."""
    n, nv = node.attrs["num_outputs"], node.attrs.get("num_variables", 0)
    k = len(inputs) - n - nv
    outs = materialize_all(ctx, node, inputs[:n], batched[:n])
    # a loaded document's custom_gradient has no Python grad_fn: batched, it has none either
    # (differentiating it is then the loaded op's own typed refusal, not a call of None)
    grad_fn = node.attrs["grad_fn"] and _batched_grad_fn(ctx, node, list(batched[n:n + k]), ctx.scope())
    attrs = dict(node.attrs, grad_fn=grad_fn)
    return _out(emit(node, outs + list(inputs[n:]), attrs))


def _batched_grad_fn(ctx, node, x_flags, scope):
    n, nv = node.attrs["num_outputs"], node.attrs.get("num_variables", 0)
    grad_fn, k = node.attrs["grad_fn"], len(x_flags)

    def one_example(*dys):
        if not nv:
            dxs = grad_fn(*dys)
            return list(dxs) if isinstance(dxs, (list, tuple)) else [dxs]
        dxs, dvars = grad_fn(*dys, variables=list(node.attrs["variables"]))
        return (list(dxs) if isinstance(dxs, (list, tuple)) else [dxs]) + list(dvars)

    def batched_grad_fn(*dys, variables=None):
        got, flags = ctx.call_batched(one_example, node.outputs[:n], dys, scope, node.graph)
        if len(got) != k + nv:       # the op's own gradient names the mismatch
            return got if not nv else (got[:k], got[k:])
        res = []
        for i, (g, f) in enumerate(zip(got, flags)):
            if g is None:
                res.append(None)
            elif i < k and x_flags[i]:
                res.append(g if f else materialize(ctx, node, g, node.inputs[n + i]))
            else:           # shared by every example: the examples' gradients summed
                res.append(op("reduce_sum", [g], axis=(0,), keepdims=False) if f else
                           op("multiply", [g, batch_size(ctx, g.dtype)]))
        return res[:k] if not nv else (res[:k], res[k:])
    return batched_grad_fn


def norm(ctx, node, inputs, batched):
    attrs = dict(node.attrs)
    r = len(node.inputs[0].shape)
    x = inputs[0]
    if attrs["axis"] is None:
        if (attrs["ord"] != "euclidean" and r > 1) or r == 0:   # a vector norm of the flattened tensor
            out = op("norm", [op("reshape", [x], shape=_rows(ctx, node.inputs[0]))], ord=attrs["ord"], axis=(1,),
                     keepdims=False)
            if attrs["keepdims"]:
                out = reshape_batch(ctx, out, (1,) * r)
            return _out([out])
        attrs["axis"] = tuple(range(1, r + 1))
    else:
        attrs["axis"] = tuple(norm_axis(node, a, r) for a in attrs["axis"])
    return _out(emit(node, [x], attrs))


def meshgrid(ctx, node, inputs, batched):
    """Each 1-D input varies along one output axis: reshaped onto it and broadcast."""
    n = len(inputs)
    xy = node.attrs["indexing"] == "xy" and n >= 2
    shape = static_shape(node, node.outputs[0], "output")
    outs = []
    for k, x in enumerate(materialize_all(ctx, node, inputs, batched)):
        along = {0: 1, 1: 0}.get(k, k) if xy else k
        s = [1] * n
        s[along] = shape[along]
        outs.append(broadcast_batch(ctx, reshape_batch(ctx, x, s), shape))
    return _out(outs)


# ------------------------------------------------------------------ indexing
def gather(ctx, node, inputs, batched):
    params, indices = inputs
    r = len(node.inputs[0].shape)
    axis = norm_axis(node, node.attrs["axis"], r) - 1
    if batched[0] and not batched[1]:
        return _out(emit(node, inputs, {"axis": axis + 1}))
    if not batched[0]:       # result: params[:axis] + (B,) + indices + params[axis + 1:]
        out = emit(node, inputs)[0]
        if axis:
            k = len(node.outputs[0].shape) + 1
            perm = (axis,) + tuple(i for i in range(k) if i != axis)
            out = op("transpose", [out], perm=perm)
        return _out([out])
    return _out([op("batch_gather", inputs, axis=axis + 1, batch_dims=1)])


def gather_grad(ctx, node, inputs, batched):
    """(g, indices, params) -> zeros like params with g scattered in along `axis`."""
    axis = norm_axis(node, node.attrs["axis"], len(node.inputs[2].shape))
    xs = materialize_all(ctx, node, inputs, batched, (0, 2) if not batched[1] else None)
    if not batched[1]:
        return _out(emit(node, xs, {"axis": axis}))
    return _out([op("batch_gather_grad", xs, axis=axis, batch_dims=1)])


def batch_gather(ctx, node, inputs, batched):
    params = node.inputs[-1] if node.op.name == "batch_gather_grad" else node.inputs[0]
    axis = norm_axis(node, node.attrs["axis"], len(params.shape))
    b = node.attrs["batch_dims"]
    if b < 0:
        b += len(node.inputs[1].shape)
    return _out(emit(node, materialize_all(ctx, node, inputs, batched), {"axis": axis, "batch_dims": b + 1}))


def _iota(ctx, dtype):
    """[0, 1, ..., B - 1] of `dtype`."""
    if ctx.size is None:
        return op("dynamic_range", [np.zeros((), dtype.np), batch_size(ctx, dtype), np.ones((), dtype.np)])
    return op("range", [], start=0.0, limit=float(ctx.size), delta=1.0, dtype=dtype)


def _with_example_index(ctx, indices, shape):
    """Batched nd-`indices` (B, ..., k), per example of `shape` (..., k), with each example's
    number prefixed: (B, ..., k + 1)."""
    iota = reshape_batch(ctx, _iota(ctx, dtypes.as_dtype(indices.dtype)), (1,) * len(shape))
    iota = broadcast_batch(ctx, iota, shape[:-1] + (1,))
    return op("concat", [iota, indices], axis=len(shape))


def gather_nd(ctx, node, inputs, batched):
    params, indices = materialize_all(ctx, node, inputs, batched)
    return _out(emit(node, [params, _with_example_index(ctx, indices, static_shape(node, node.inputs[1]))]))


def gather_nd_grad(ctx, node, inputs, batched):
    g, indices, params = materialize_all(ctx, node, inputs, batched)
    return _out(emit(node, [g, _with_example_index(ctx, indices, static_shape(node, node.inputs[1])), params]))


def _zeros_batch(ctx, rest, dtype):
    """Zeros of (B,) + `rest` (all known), also when B is known only when the batch runs."""
    return broadcast_batch(ctx, np.zeros((1,) * (len(rest) + 1), dtype.np), rest)


def scatter_nd(ctx, node, inputs, batched):
    indices, updates = materialize_all(ctx, node, inputs, batched)
    idx = _with_example_index(ctx, indices, static_shape(node, node.inputs[0]))
    if ctx.size is None:    # the shape attr needs B: a scatter-add into zeros of the batch's shape instead
        zeros = _zeros_batch(ctx, tuple(node.attrs["shape"]), node.outputs[0].dtype)
        return _out([op("gather_nd_grad", [updates, idx, zeros])])
    return _out(emit(node, [idx, updates], {"shape": (ctx.size,) + tuple(node.attrs["shape"])}))


def unsorted_segment_sum(ctx, node, inputs, batched):
    """Example b's segment s becomes segment b * num_segments + s of one sum (B unknown while
    tracing: a scatter-add at (b, s) into zeros of (B, num_segments, ...))."""
    data, ids = materialize_all(ctx, node, inputs, batched)
    n = node.attrs["num_segments"]
    ishape = static_shape(node, node.inputs[1])
    if ctx.size is None:
        rest = static_shape(node, node.outputs[0], "output")
        kept = op("greater_equal", [ids, 0])       # negative ids dropped: their rows add zeros at 0
        mask = kept
        for _ in range(len(node.inputs[0].shape) - len(ishape)):
            mask = op("expand_dims", [mask], axis=-1)
        data = op("where", [mask, data, op("zeros_like", [data])])
        ids = op("where", [kept, ids, op("zeros_like", [ids])])
        idx = _with_example_index(ctx, op("expand_dims", [ids], axis=-1), ishape + (1,))
        return _out([op("gather_nd_grad", [data, idx, _zeros_batch(ctx, rest, node.outputs[0].dtype)])])
    offset = reshape_batch(ctx, op("multiply", [_iota(ctx, node.inputs[1].dtype), n]), (1,) * len(ishape))
    ids = op("where", [op("greater_equal", [ids, 0]), op("add", [ids, offset]), ids])  # < 0: dropped
    out = emit(node, [data, ids], {"num_segments": n * ctx.size})[0]
    rest = static_shape(node, node.outputs[0], "output")
    return _out([reshape_batch(ctx, out, rest)])


def einsum(ctx, node, inputs, batched):
    """A new letter for the batch, on every batched operand and on the result."""
    eq = node.attrs["equation"].replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if not arrow:
        letters = [c for c in lhs if c.isalpha()]
        rhs = ("..." if "..." in lhs else "") + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    free = [c for c in string.ascii_letters if c not in eq]
    if not free:
        raise errors.UnimplementedError("einsum: the equation uses every letter; none is left for the batch")
    b = free[0]
    terms = [b + t if flag else t for t, flag in zip(terms, batched)]
    return _out(emit(node, inputs, {"equation": ",".join(terms) + "->" + b + rhs}))


def indexed_slices_to_dense(ctx, node, inputs, batched):
    """Example b's row i becomes row b * rows + i of one dense tensor."""
    values, ids = materialize_all(ctx, node, inputs, batched)
    dense = static_shape(node, node.outputs[0], "output")
    if ctx.size is None:     # B unknown: a batched gather's gradient, into a broadcast zero of (B,) + dense
        like = op("dynamic_broadcast_to", [np.zeros((1,) * (len(dense) + 1), node.inputs[0].dtype.np),
                                           batch_shape(ctx, dense)], shape=(None,) + dense)
        return _out([op("batch_gather_grad", [values, ids, like], axis=1, batch_dims=1)])
    ishape = static_shape(node, node.inputs[1])
    offset = reshape_batch(ctx, op("multiply", [_iota(ctx, node.inputs[1].dtype), dense[0]]), (1,) * len(ishape))
    out = emit(node, [values, op("add", [ids, offset])],
               {"dense_shape": (ctx.size * dense[0],) + dense[1:]})[0]
    return _out([reshape_batch(ctx, out, dense)])


def shape_of(ctx, node, inputs, batched):
    """shape/size of a batched tensor: one example's (every example has that shape; the
    batch may be empty), from the batched shape past its first size."""
    dt = node.attrs.get("out_type", dtypes.int32)
    s = op("shape", [inputs[0]], out_type=dt)[1:]
    return [s if node.op.name == "shape" else op("reduce_prod", [s], axis=None, keepdims=False)], [False]


def dynamic_shape(pos, lead, align=False):
    """Ops taking a shape tensor at input `pos` (unbatched): `lead` (the batch size, or 1
    for tile multiples) is prefixed to it and to its static value (the `shape` attr); the
    other inputs are materialized (`align`: x broadcasts to the shape, ranks aligned first)."""
    def rule(ctx, node, inputs, batched):
        if batched[pos]:
            raise errors.UnimplementedError(
                f"{node.op.name}: batching covers a shape shared by every example; its shape input is batched")
        xs = materialize_all(ctx, node, inputs, batched, tuple(i for i in range(len(inputs)) if i != pos))
        dims = inputs[pos]
        n = ctx.size if lead == "batch" else lead
        if align:
            xs[0] = expand_rank(xs[0], len(node.inputs[0].shape), len(node.outputs[0].shape))
        dt = node.inputs[pos].dtype
        first = np.asarray([n], dt.np) if n is not None else op("reshape", [batch_size(ctx, dt)], shape=(1,))
        xs[pos] = op("concat", [first, dims], axis=0)
        attrs = dict(node.attrs, shape=(n,) + tuple(node.attrs["shape"]))
        return _out(emit(node, xs, attrs))
    return rule


def dynamic_fill(ctx, node, inputs, batched):
    """(dims, value): a batched scalar value broadcast to the batch of shapes."""
    dims, value = inputs
    if batched[0]:
        raise errors.UnimplementedError("dynamic_fill: batching covers a shape shared by every example")
    r = len(node.outputs[0].shape)
    dt = node.inputs[0].dtype
    first = np.asarray([ctx.size], dt.np) if ctx.size is not None else op("reshape", [batch_size(ctx, dt)], shape=(1,))
    full = op("concat", [first, dims], axis=0)
    v = reshape_batch(ctx, value, (1,) * r)
    return _out([op("dynamic_broadcast_to", [v, full], shape=(ctx.size,) + tuple(node.attrs["shape"]))])


def matmul(ctx, node, inputs, batched):
    """A batched left operand times a shared matrix is one matrix product of the rows
    (B * rows, k) @ (k, n); anything else broadcasts its leading axes (elementwise)."""
    a, b = node.inputs
    if batched[0] and not batched[1] and len(b.shape) == 2 and not node.attrs.get("transpose_a") \
            and None not in tuple(a.shape):
        k = a.shape[-1]
        out = emit(node, [op("reshape", [inputs[0]], shape=(-1, k)), inputs[1]])[0]
        return _out([reshape_batch(ctx, out, static_shape(node, node.outputs[0], "output"))])
    ta, tb = node.attrs.get("transpose_a"), node.attrs.get("transpose_b")
    ka = a.shape[-2] if ta else a.shape[-1]
    if all(batched) and ka == 1 and None not in tuple(a.shape) + tuple(b.shape):
        # a contraction of size 1 is an outer product: a broadcasting multiply, ~2.5x
        # faster than numpy's stacked matmul of (m, 1) @ (1, n) (per-example weight gradients)
        m, n = (a.shape[-1] if ta else a.shape[-2]), (b.shape[-2] if tb else b.shape[-1])
        r = max(len(a.shape), len(b.shape))
        x = reshape_batch(ctx, inputs[0], tuple(a.shape[:-2]) + (m, 1))
        y = reshape_batch(ctx, inputs[1], tuple(b.shape[:-2]) + (1, n))
        x, y = expand_rank(x, len(a.shape), r), expand_rank(y, len(b.shape), r)
        return _out([op("multiply", [x, y])])
    return elementwise(ctx, node, inputs, batched)
