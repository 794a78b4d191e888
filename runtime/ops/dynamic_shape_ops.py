"""Creation and tiling ops whose shape is an input tensor computed when the graph runs.

`df.fill`, `df.zeros`, `df.ones`, `df.tile` and `df.range` build these when, while tracing,
their shape argument (or range's bounds) is known only at run time (`df.shape(x)` of an x
with None sizes); a known shape keeps the ops with shape attrs (array_ops). Each node
carries the sizes known while tracing (`shape`: None where unknown) and its kernel checks
the run-time value against them (`_args.shape_value`), as the random ops do.
`dynamic_reshape` and `dynamic_broadcast_to` live with their static forms (shape_ops, base_ops).
`t[a:b]` whose bounds are symbolic integer scalars (a loop counter) is one
`dynamic_strided_slice`: strided_slice's attrs with those bounds as inputs. The module is
long because that slice's batching rule (each example's positions gathered, slices of
different sizes per example refused by name) sits beside its row, as every rule does.
"""
import math

import numpy as np

from defun.runtime import dtypes, errors, sites
from defun.runtime.context import state
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops._onnx import BIG, before_the_start, scatter_adjoint, shape_of
from defun.runtime.ops.base_ops import _shape_input_infer, reduce_sum
from defun.runtime.ops.index_ops import (_SLICE_ATTRS, _index_value, _numpy_key, _rank, _slice_attrs,
                                         _strided_slice_infer, slice_past_batch, strided_slice)
from defun.runtime.registry import Cost, register
from defun.runtime.tensor import EagerTensor, Tensor
from defun.runtime import batching as bt

__all__ = ["dynamic_fill", "dynamic_tile", "dynamic_range", "range_length", "slice_helper"]


# ------------------------------------------------------------------ fill (zeros, ones)
def _fill_infer(shapes, dts, attrs):
    static = tuple(attrs["shape"])
    _shape_input_infer("fill", shapes[0], dts[0], static, "dims")
    if len(shapes[1]):
        raise errors.InvalidArgumentError(f"fill: value must be a scalar, got shape {shape_rules.shape_str(shapes[1])}")
    return [(static, dts[1])]


def _fill_kernel(dims, value, shape):
    out = _args.shape_value("fill", dims, shape, "dims")
    if min(out, default=0) < 0:
        raise errors.InvalidArgumentError(f"fill: negative size in dims {list(out)}; sizes must be >= 0")
    if value.ndim:
        raise errors.InvalidArgumentError(f"fill: value must be a scalar, got shape {value.shape}")
    return np.full(out, value, value.dtype)


def _product_bytes(sizes, itemsize):
    """Bytes of an array of `sizes` (run-time values); 0 if any is negative (the kernel
    refuses those), so the budget never reads a negative count as room."""
    sizes = [int(d) for d in np.asarray(sizes).reshape(-1)]
    return 0 if min(sizes, default=0) < 0 else math.prod(sizes) * itemsize


def _fill_bytes(args, attrs):
    return _product_bytes(args[0], args[1].dtype.itemsize)


def _dynamic_fill_batch(ctx, node, inputs, batched):
    """(dims, value): a batched scalar value broadcast to the batch of shapes."""
    dims, value = inputs
    if batched[0]:
        raise errors.UnimplementedError("dynamic_fill: batching covers a shape shared by every example")
    r = len(node.outputs[0].shape)
    dt = node.inputs[0].dtype
    first = np.asarray([ctx.size], dt.np) if ctx.size is not None else \
        bt.op("reshape", [bt.batch_size(ctx, dt)], shape=(1,))
    full = bt.op("concat", [first, dims], axis=0)
    v = bt.reshape_batch(ctx, value, (1,) * r)
    out = bt.op("dynamic_broadcast_to", [v, full], shape=(ctx.size,) + tuple(node.attrs["shape"]))
    return bt.all_batched([out])


_DYNAMIC_FILL = register(
    name="dynamic_fill",
    kernel=_fill_kernel,
    infer=_fill_infer,
    grad=lambda op, g: [None, reduce_sum(g)],
    num_inputs=2,
    attrs={"shape": "shape"},
    defaults={},
    kinds=shape_rules.int_kinds,
    onnx=lambda e, node, ins: e.op("Expand", ins[1], e.cast(ins[0], dtypes.int64)),
    batch=_dynamic_fill_batch,
    cost=Cost(sized=_fill_bytes),
)


def dynamic_fill(dims, value, static, name=None):
    """A tensor of run-time shape `dims` (static sizes `static`) filled with scalar `value`."""
    return run_op(_DYNAMIC_FILL, (dims, value), {"shape": tuple(static)}, name)


# ------------------------------------------------------------------ tile, tile_reduce
def _tile_infer(shapes, dts, attrs):
    x, static = tuple(shapes[0]), tuple(attrs["shape"])
    _shape_input_infer("tile", shapes[1], dts[1], static, "multiples")
    if len(static) != len(x):
        raise errors.InvalidArgumentError(
            f"tile: multiples must hold one int per axis of shape {shape_rules.shape_str(x)}, got {len(static)}")
    return [(tuple(None if d is None or k is None else d * k for d, k in zip(x, static)), dts[0])]


def _tile_kernel(x, multiples, shape):
    m = _args.shape_value("tile", multiples, shape, "multiples")
    if len(m) != x.ndim or min(m, default=0) < 0:
        raise errors.InvalidArgumentError(
            f"tile: multiples {list(m)} must hold one non-negative int per axis of shape {x.shape}")
    return np.tile(x, m)


def _tile_reduce_kernel(g, multiples, like, shape):
    """The sum of the tiles of `g` into the shape of `like`: the adjoint of tile."""
    m = _args.shape_value("tile_reduce", multiples, shape, "multiples")
    if g.shape != tuple(d * k for d, k in zip(like.shape, m)):
        raise errors.InvalidArgumentError(
            f"tile_reduce: the gradient of shape {g.shape} is not {like.shape} tiled by {list(m)}")
    if 0 in m:  # an empty result: nothing flows back
        return np.zeros(like.shape, g.dtype)
    split = [n for d, k in zip(g.shape, m) for n in (k, d // k)]
    return np.add.reduce(g.reshape(split), tuple(range(0, 2 * g.ndim, 2)), g.dtype)


def _tile_reduce_infer(shapes, dts, attrs):
    g, like, static = tuple(shapes[0]), tuple(shapes[2]), tuple(attrs["shape"])
    _shape_input_infer("tile_reduce", shapes[1], dts[1], like, "multiples")
    if len(g) != len(like) or len(static) != len(like) or any(
            d is not None and n is not None and (d != n * k if k is not None else (d % n if n else d))
            for d, n, k in zip(g, like, static)):
        raise errors.InvalidArgumentError(
            f"tile_reduce: the gradient of shape {shape_rules.shape_str(g)} is not "
            f"{shape_rules.shape_str(like)} tiled by {shape_rules.shape_str(static)}")
    return [(like, dts[0])]


def _tile_bytes(args, attrs):
    x, m = args[0], np.asarray(args[1]).reshape(-1)
    if len(m) != x.ndim:
        return 0        # the kernel refuses it
    return _product_bytes(list(x.shape) + list(m), x.dtype.itemsize)


_DYNAMIC_TILE = register(
    name="dynamic_tile",
    kernel=_tile_kernel,
    infer=_tile_infer,
    grad=lambda op, g: [run_op(_DYNAMIC_TILE_REDUCE, (g, op.inputs[1], op.inputs[0]), op.attrs), None],
    num_inputs=2,
    attrs={"shape": "shape"},
    defaults={},
    onnx=lambda e, node, ins: e.op("Tile", ins[0], e.cast(ins[1], dtypes.int64)),
    batch=bt.dynamic_shape(1, 1),
    cost=Cost(sized=_tile_bytes),
)
# Internal: the gradient of dynamic_tile (`like`: the tiled input, for its shape); its own
# gradient is dynamic_tile again.
def _tile_reduce_grad(op, g):
    # tile back with the multiples made as static as the shapes allow: g's size / like's
    grad, like = op.inputs[0], op.inputs[2]
    static = tuple(k if k is not None else (a // b if a is not None and b else None)
                   for k, a, b in zip(op.attrs["shape"], tuple(grad.shape), tuple(like.shape)))
    return [run_op(_DYNAMIC_TILE, (g, op.inputs[1]), {"shape": static}), None, None]


def _tile_reduce_onnx(e, node, ins):
    """Reshape g (d0 * k0, ...) into (k0, d0, k1, d1, ...) and sum the k axes."""
    rank = len(node.outputs[0].shape)
    if not rank:
        return e.op("Identity", ins[0])
    m, like = e.cast(ins[1], dtypes.int64), e.op("Shape", ins[2])
    pairs = e.op("Concat", e.op("Unsqueeze", m, e.ints([1])), e.op("Unsqueeze", like, e.ints([1])), axis=1)
    split = e.op("Reshape", ins[0], e.op("Reshape", pairs, e.ints([-1])), allowzero=1)
    return e.reduce("ReduceSum", split, tuple(range(0, 2 * rank, 2)), False)


_DYNAMIC_TILE_REDUCE = register(
    name="dynamic_tile_reduce",
    kernel=_tile_reduce_kernel,
    infer=_tile_reduce_infer,
    grad=_tile_reduce_grad,
    num_inputs=3,
    attrs={"shape": "shape"},
    defaults={},
    onnx=_tile_reduce_onnx,
    batch=bt.dynamic_shape(1, 1),
)


def dynamic_tile(x, multiples, static, name=None):
    """`x` tiled by the run-time `multiples` (static entries `static`)."""
    return run_op(_DYNAMIC_TILE, (x, multiples), {"shape": tuple(static)}, name)


# ------------------------------------------------------------------ range
def range_length(start, limit, delta, dtype):
    """The number of values of range(start, limit, delta) in `dtype` (static or dynamic)."""
    if not all(np.isfinite(v) for v in (start, limit, delta)):
        raise errors.InvalidArgumentError(
            f"range: start, limit and delta must be finite, got start={start}, limit={limit}, delta={delta}")
    if delta == 0:
        raise errors.InvalidArgumentError("range: delta must not be 0")
    if (delta > 0 and start > limit) or (delta < 0 and start < limit):
        raise errors.InvalidArgumentError(
            f"range: start={start} must be {'<=' if delta > 0 else '>='} limit={limit} when delta={delta}")
    if dtype.is_integer:
        return len(range(int(start), int(limit), int(delta)))
    return int(np.ceil((limit - start) / delta))


def _range_infer(shapes, dts, attrs):
    shape_rules.check_same("range", dts)
    shape_rules.check_kinds("range", dts[0], shape_rules.numeric_kinds)
    for what, s in zip(("start", "limit", "delta"), shapes):
        if len(s):
            raise errors.InvalidArgumentError(f"range: {what} must be a scalar, got shape {shape_rules.shape_str(s)}")
    return [((None,), dts[0])]


def _range_kernel(start, limit, delta):
    dtype = dtypes.from_numpy(start.dtype)
    n = range_length(start.item(), limit.item(), delta.item(), dtype)
    if dtype.is_integer:
        return np.arange(start, limit, delta, dtype=start.dtype)
    return (float(start) + np.arange(n, dtype=np.float64) * float(delta)).astype(start.dtype)


def _range_onnx(e, node, ins):
    dtype = node.outputs[0].dtype
    if dtype.is_integer:
        return e.op("Range", *ins)
    # start + i * delta in float64, rounded once to the dtype (as the kernel)
    return e.cast(e.op("Range", *[e.cast(x, dtypes.float64) for x in ins]), dtype)


def _range_bytes(args, attrs):
    start, limit, delta = args[:3]
    try:
        n = range_length(start.item(), limit.item(), delta.item(), dtypes.from_numpy(start.dtype))
    except (errors.InvalidArgumentError, ValueError, OverflowError):
        return 0        # the kernel says what is wrong
    return max(n, 0) * start.dtype.itemsize


_DYNAMIC_RANGE = register(
    name="dynamic_range",
    kernel=_range_kernel,
    infer=_range_infer,
    grad=None,
    num_inputs=3,
    attrs={},
    defaults={},
    same_dtype=(0, 1, 2),
    kinds=shape_rules.numeric_kinds,
    onnx=_range_onnx,
    cost=Cost(sized=_range_bytes),
)


def dynamic_range(start, limit, delta, name=None):
    """`range` of scalar tensors known only when the graph runs (one dtype)."""
    return run_op(_DYNAMIC_RANGE, (start, limit, delta), {}, name)


# ------------------------------------------------------------------ t[a:b] with tensor bounds
# strided_slice's attrs (index_ops), `operands`: one code 3 * axis + k per input after x,
# k = 0 begin, 1 end, 2 stride, whose run-time value replaces that entry of the attrs, and
# `shape`: the result's sizes known beyond what inference gives (a gradient's are its
# forward input's), or () when none are; the kernel checks them.
_DYNAMIC_SLICE_ATTRS = dict(_SLICE_ATTRS, operands="ints", shape="shape")


def _slice_bounds(op_name, bounds, begin, end, strides, operands):
    """(begin, end, strides) of the attrs with the run-time `bounds` set in at `operands`."""
    if len(bounds) != len(operands):
        raise errors.InvalidArgumentError(f"{op_name}: {len(operands)} bounds expected, got {len(bounds)}")
    parts = [list(begin), list(end), list(strides)]
    for b, code in zip(bounds, operands):
        if np.ndim(b) or np.asarray(b).dtype.kind not in "iu":
            raise errors.InvalidArgumentError(
                f"{op_name}: slice bounds must be integer scalars, got {np.asarray(b).dtype} of shape {np.shape(b)}")
        parts[code % 3][code // 3] = int(b)
    if 0 in parts[2]:
        raise errors.InvalidArgumentError(f"{op_name}: slice step cannot be zero")
    return parts


def _check_operands(op_name, a):
    """Operand codes name distinct bounds of the axes that the masks do not leave out (an
    index: its begin only); a loaded document's may not."""
    operands, rank = a["operands"], len(a["begin"])
    masks = (a["begin_mask"], a["end_mask"], 0)
    if len(set(operands)) != len(operands) or not all(
            0 <= c < 3 * rank and not masks[c % 3] >> (c // 3) & 1
            and (c % 3 == 0 or not a["shrink_axis_mask"] >> (c // 3) & 1) for c in operands):
        raise errors.InvalidArgumentError(
            f"{op_name}: operands {tuple(operands)} must be distinct codes 3 * axis + (0 begin, 1 end, 2 step) "
            f"of the {rank} axes, naming bounds the masks keep (an index: its begin)")


def _slice_key(op_name, shape, bounds, a):
    """The numpy key of the node's attrs `a` and run-time `bounds` on an input of `shape`."""
    if len(a["begin"]) != len(shape):
        raise errors.InvalidArgumentError(
            f"{op_name}: the index covers {len(a['begin'])} axes, the tensor has shape {shape}")
    _check_operands(op_name, a)
    begin, end, strides = _slice_bounds(op_name, bounds, a["begin"], a["end"], a["strides"], a["operands"])
    for d, n in enumerate(shape):
        if a["shrink_axis_mask"] >> d & 1 and not -n <= begin[d] < n:
            raise errors.InvalidArgumentError(
                f"{op_name}: index {begin[d]} is out of range for axis {d} of shape {shape}")
    return _numpy_key(begin, end, strides, a["begin_mask"], a["end_mask"], a["shrink_axis_mask"])


def _dynamic_slice_kernel(x, *bounds, **a):
    y = x[_slice_key("dynamic_strided_slice", x.shape, bounds, a)]
    return _shaped(np.expand_dims(y, a["new_axis"]) if a["new_axis"] else y, a["shape"])


def _bind_dynamic_slice(attrs):
    """The kernel with its attrs read once: a call sets the run-time bounds into the slices
    made here. Anything irregular (a bound that is not an integer scalar, an index out of
    range, a zero step, another rank) runs the kernel, which says what is wrong."""
    a, rank = attrs, len(attrs["begin"])
    _check_operands("dynamic_strided_slice", a)
    template = list(_numpy_key(a["begin"], a["end"], a["strides"], a["begin_mask"], a["end_mask"],
                               a["shrink_axis_mask"]))
    axes = sorted({c // 3 for c in a["operands"]})
    shrunk = {d for d in axes if a["shrink_axis_mask"] >> d & 1}
    base = [[None if a["begin_mask"] >> d & 1 else a["begin"][d], None if a["end_mask"] >> d & 1 else a["end"][d],
             a["strides"][d]] for d in axes]
    fill = [(axes.index(c // 3), c % 3) for c in a["operands"]]
    new_axis, shape = a["new_axis"], a["shape"]

    def run(x, *bounds):
        if x.ndim != rank or len(bounds) != len(fill) or \
                any(b.ndim or b.dtype.kind not in "iu" for b in bounds):
            return _dynamic_slice_kernel(x, *bounds, **a)
        parts = [list(p) for p in base]
        for b, (i, k) in zip(bounds, fill):
            parts[i][k] = int(b)
        key = template.copy()
        for d, (start, stop, step) in zip(axes, parts):
            if d in shrunk and -x.shape[d] <= start < x.shape[d]:
                key[d] = start
            elif d in shrunk or step == 0:
                return _dynamic_slice_kernel(x, *bounds, **a)
            else:
                key[d] = slice(start, stop, step)
        y = x[tuple(key)]
        return _shaped(np.expand_dims(y, new_axis) if new_axis else y, shape)
    return run


def _shaped(y, shape):
    """`y`, checked against the sizes the graph knows (`shape`, () when none)."""
    if shape and any(k is not None and k != n for k, n in zip(shape, np.shape(y))):
        raise errors.InvalidArgumentError(
            f"dynamic_strided_slice: the slice has shape {np.shape(y)}, the graph expects {shape}")
    return y


def _dynamic_slice_grad_kernel(g, like, *bounds, **a):
    """`g` put into zeros shaped like the forward input where the slice took its elements."""
    out = np.zeros(np.shape(like), g.dtype)
    out[_slice_key("dynamic_strided_slice_grad", out.shape, bounds, a)] = \
        np.squeeze(g, tuple(a["new_axis"])) if a["new_axis"] else g
    return out


def _dynamic_slice_infer(shapes, dts, attrs):
    s, a = tuple(shapes[0]), attrs
    if len(a["begin"]) != len(s) or len(shapes) - 1 != len(a["operands"]):
        raise errors.InvalidArgumentError(
            f"dynamic_strided_slice: the index covers {len(a['begin'])} axes with {len(a['operands'])} "
            f"run-time bounds, got a tensor of shape {shape_rules.shape_str(s)} and {len(shapes) - 1} bounds")
    _check_operands("dynamic_strided_slice", a)
    for bs, dt in zip(shapes[1:], dts[1:]):
        if len(bs) or not dt.is_integer:
            raise errors.InvalidArgumentError(
                f"dynamic_strided_slice: slice bounds must be integer scalars, got "
                f"{dt.name}{shape_rules.shape_str(bs)}")
    dynamic = {c // 3 for c in a["operands"]}
    full = sum(1 << d for d in dynamic)
    # the static axes as strided_slice infers them; the dynamic ones whole, then each
    # removed (an index) or unknown (a slice; 0 of an empty axis)
    static = dict(a, begin_mask=a["begin_mask"] | full, end_mask=a["end_mask"] | full,
                  shrink_axis_mask=a["shrink_axis_mask"] & ~full, new_axis=(),
                  strides=tuple(1 if d in dynamic else st for d, st in enumerate(a["strides"])))
    out = list(_strided_slice_infer([s], dts[:1], static)[0][0])
    kept = [d for d in range(len(s)) if not static["shrink_axis_mask"] >> d & 1]
    for k in reversed(range(len(kept))):
        d = kept[k]
        if d in dynamic and a["shrink_axis_mask"] >> d & 1:
            del out[k]
        elif d in dynamic and s[d] != 0:
            out[k] = None
    for p in a["new_axis"]:
        out.insert(p, 1)
    if a["shape"]:
        shape_rules.check_compatible("dynamic_strided_slice", "the slice", tuple(out), "the shape attr", a["shape"])
        out = [n if n is not None else k for n, k in zip(out, a["shape"])]
    return [(tuple(out), dts[0])]


def _dynamic_slice_grad_infer(shapes, dts, attrs):
    fwd = _dynamic_slice_infer(shapes[1:], dts[1:], attrs)
    shape_rules.check_compatible("dynamic_strided_slice_grad", "the gradient", shapes[0], "the forward result",
                                 fwd[0][0])
    return [(tuple(shapes[1]), dts[0])]


def _dynamic_slice_of(e, x, a, bounds, shape):
    """ONNX of the slice with attrs `a` on `x` (static `shape`), `bounds` the names of its
    run-time bounds: one Slice (which clamps as Python does but for a negative-step start
    before the first element: before_the_start), a Gather per axis indexed by a run-time int,
    a Squeeze of the axes indexed by a static one, an Unsqueeze of the new axes."""
    dyn = {c: e.cast(b, dtypes.int64) for c, b in zip(a["operands"], bounds)}
    shape = tuple(shape)

    def value(d, k, static):
        return e.unsqueeze(dyn[3 * d + k], [0]) if 3 * d + k in dyn else e.ints([static])

    def omitted(step, first, last):     # the default of an omitted bound, by the step's sign
        if not isinstance(step, str):
            return e.ints([first if step > 0 else last])
        return e.op("Where", e.op("Greater", step, e.ints([0])), e.ints([first]), e.ints([last]))

    starts, ends, axes, steps, gathers, shrink = [], [], [], [], [], []
    for d, (b, n, st) in enumerate(zip(a["begin"], a["end"], a["strides"])):
        if a["shrink_axis_mask"] >> d & 1:
            if 3 * d in dyn:
                gathers.append(d)
                continue
            b, n, st = e.ints([b]), e.ints([b + 1 if b != -1 else BIG]), e.ints([1])
            shrink.append(d - len(gathers))
        else:
            step = value(d, 2, st) if 3 * d + 2 in dyn else st
            start = omitted(step, 0, BIG) if a["begin_mask"] >> d & 1 else value(d, 0, b)
            n = omitted(step, BIG, -BIG) if a["end_mask"] >> d & 1 else value(d, 1, n)
            if not (a["begin_mask"] >> d & 1 or (3 * d not in dyn and b >= 0) or (isinstance(step, int) and step > 0)):
                n = before_the_start(e, x, d, shape, start, step, n)
            b, st = start, step if isinstance(step, str) else e.ints([step])
        starts.append(b), ends.append(n), axes.append(d), steps.append(st)
    if axes:
        x = e.op("Slice", x, *[e.op("Concat", *v, axis=0) for v in (starts, ends)], e.ints(axes),
                 e.op("Concat", *steps, axis=0))
    for d in reversed(gathers):
        x = e.op("Gather", x, dyn[3 * d], axis=d)
    return e.unsqueeze(e.squeeze(x, shrink), a["new_axis"])


def _view_bytes(x, bounds, attrs):
    """Bytes of the slice of `x` (numpy's own view of a broadcast zero: nothing allocated)."""
    try:
        key = _slice_key("dynamic_strided_slice", x.shape, bounds, attrs)
    except errors.InvalidArgumentError:
        return 0        # the kernel says what is wrong
    return np.broadcast_to(np.zeros((), x.dtype), x.shape)[key].size * x.dtype.itemsize


def _slice_past_batch_of(ctx, a):
    """dynamic_strided_slice's attrs with a whole batch axis first (and on its known sizes)."""
    return dict(slice_past_batch(a), shape=(ctx.size,) + tuple(a["shape"]) if a["shape"] else ())


def _dynamic_slice_batch(ctx, node, inputs, batched):
    """(x, *bounds) or its gradient's (g, like, *bounds), the tensors batched. Bounds shared
    by every example: the op with a whole batch axis first. Bounds per example: the axes they
    bound are taken whole by that op, then each is gathered per example (batch_gather) at
    its own positions, which must be as many in every example (_example_positions)."""
    op = bt.op
    tensors = 2 if node.op.name.endswith("_grad") else 1
    xs = bt.materialize_all(ctx, node, inputs, batched, tuple(range(tensors)))
    if not any(batched[tensors:]):
        return bt.all_batched(bt.emit(node, xs, _slice_past_batch_of(ctx, node.attrs)))
    a, bounds = node.attrs, dict(zip(node.attrs["operands"], zip(inputs[tensors:], batched[tensors:])))
    per = sorted({c // 3 for c, (_, b) in bounds.items() if b})     # the axes bounded per example
    whole = sum(1 << d for d in per)
    shared = dict(a, begin_mask=a["begin_mask"] | whole, end_mask=a["end_mask"] | whole, new_axis=(), shape=(),
                  shrink_axis_mask=a["shrink_axis_mask"] & ~whole,
                  strides=tuple(1 if d in per else st for d, st in enumerate(a["strides"])),
                  operands=tuple(c for c in a["operands"] if c // 3 not in per))
    kept = [x for c, (x, _) in bounds.items() if c // 3 not in per]
    shared = slice_past_batch(shared)
    x = xs[tensors - 1]
    steps = [op(node.op.name.replace("_grad", ""), [x] + kept, **shared)]   # the whole-axes slice, gathered
    place = {d: 1 + sum(1 for k in range(d) if not shared["shrink_axis_mask"] >> (k + 1) & 1) for d in per}
    gathers = []        # (positions, axis), from the last bounded axis to the first
    for d in reversed(per):
        size = _axis_size(node.inputs[tensors - 1], x, d)
        gathers.append((_example_positions(a, d, size, {c % 3: v for c, (v, _) in bounds.items() if c // 3 == d},
                                           node.site), place[d]))
        steps.append(op("batch_gather", [steps[-1], gathers[-1][0]], axis=place[d], batch_dims=1))
    if tensors == 1:
        y = steps[-1]
        for p in a["new_axis"]:
            y = op("expand_dims", [y], axis=p + 1)
        return bt.all_batched([y])
    g = xs[0]
    for p in reversed(a["new_axis"]):
        g = op("squeeze", [g], axis=(p + 1,))
    for (idx, axis), before in zip(reversed(gathers), reversed(steps[:-1])):
        g = op("batch_gather_grad", [g, idx, before], axis=axis, batch_dims=1)
    return bt.all_batched([op(node.op.name, [g, x] + kept, **shared)])


def _axis_size(t, x, d):
    """Size of axis `d` of one example of `t` (batched value `x`): an int64 scalar tensor or int."""
    n = tuple(t.shape)[d]
    return np.int64(n) if n is not None else bt.op("shape", [x], out_type=dtypes.int64)[d + 1]


def _example_positions(a, d, n, given, site):
    """The positions along axis `d` (size `n`) each example's slice takes, as Python's slice
    rules place them: (B,) for an index, (B, K) for a slice, K the largest count. Slices of
    different sizes per example would be a ragged batch: an assert op refuses them when the
    batch runs, naming the slice's line (`site`). `given`: {0 begin, 1 end, 2 step: batched
    (B,) or shared scalar tensor}; the rest are static in the attrs `a` (or omitted)."""
    op, i64 = bt.op, dtypes.int64

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
    most = _largest(count)
    agree = op("reduce_sum", [op("cast", [op("equal", [count, most])], dtype=i64)], axis=None, keepdims=False)
    checked = op("check_batch_size", [op("dynamic_range", [np.int64(0), agree, np.int64(1)]),
                                      op("size", [count], out_type=i64)], message=_ragged(site, d))
    k = op("dynamic_range", [np.int64(0), _largest(op("gather", [count, checked], axis=0)), np.int64(1)])
    column = [op("reshape", [v], shape=(-1, 1)) for v in (start, step, count)]
    taken = op("add", [column[0], op("multiply", [op("reshape", [k], shape=(1, -1)), column[1]])])
    return op("where", [op("less", [op("reshape", [k], shape=(1, -1)), column[2]]), taken, n])


def _largest(count):
    """The largest of the (B,) counts (0 for no examples)."""
    return bt.op("reduce_max", [bt.op("concat", [count, np.zeros(1, np.int64)], axis=0)], axis=None, keepdims=False)


def _ragged(site, d):
    """check_batch_size's message (its {got} and {want}) when the examples' slices differ in size."""
    at = "" if site is None else f" at {sites.format_site(site)}" + (
        f" ({sites.source_line(site)})" if sites.source_line(site) else "")
    at = at.replace("{", "{{").replace("}", "}}")
    return (f"vmap: the slice{at} takes a different number of elements along axis {d} in different examples "
            "(only {got} of the {want} take as many as the largest); slices of different sizes cannot be stacked "
            "into one batch (the result would be ragged): slice the same size in every example (x[k:k + m]), "
            "or mask the elements instead (df.where)")


_DYNAMIC_SLICE = register(
    name="dynamic_strided_slice",
    kernel=_dynamic_slice_kernel,
    infer=_dynamic_slice_infer,
    grad=lambda op, g: [run_op(_DYNAMIC_SLICE_GRAD, (g,) + tuple(op.inputs), op.attrs)] + [None] * len(op.inputs[1:]),
    num_inputs=None,
    attrs=_DYNAMIC_SLICE_ATTRS,
    defaults={},
    bind=_bind_dynamic_slice,
    onnx=lambda e, node, ins: _dynamic_slice_of(e, ins[0], node.attrs, ins[1:], node.inputs[0].shape),
    batch=_dynamic_slice_batch,
    cost=Cost(sized=lambda args, attrs: _view_bytes(args[0], args[1:], attrs)),
)
# Internal: the gradient of dynamic_strided_slice, `g` scattered into zeros shaped like the
# input (`like`); its own gradient is the slice again.
_DYNAMIC_SLICE_GRAD = register(
    name="dynamic_strided_slice_grad",
    kernel=_dynamic_slice_grad_kernel,
    infer=_dynamic_slice_grad_infer,
    grad=lambda op, gg: [run_op(_DYNAMIC_SLICE, (gg,) + tuple(op.inputs[2:]),
                                dict(op.attrs, shape=tuple(op.inputs[0].shape)))] + [None] * len(op.inputs[1:]),
    num_inputs=None,
    attrs=_DYNAMIC_SLICE_ATTRS,
    defaults={},
    onnx=lambda e, node, ins: scatter_adjoint(
        e, ins[0], shape_of(e, ins[1], node.inputs[1]), node.outputs[0].dtype,
        lambda idx: _dynamic_slice_of(e, idx, node.attrs, ins[2:], node.inputs[1].shape)),
    batch=_dynamic_slice_batch,
    cost=Cost(sized=lambda args, attrs: args[1].size * args[0].dtype.itemsize),
)


def _is_symbolic(k):
    return isinstance(k, Tensor) and not isinstance(k, EagerTensor) and \
        (not hasattr(k, "static_value") or k.static_value() is None)


def _bound(k):
    """A key's int, or a symbolic integer scalar tensor (a bound known when the graph runs)."""
    if not _is_symbolic(k):
        return _index_value(k)
    if len(k.shape) or not k.dtype.is_integer:
        raise _args.error(f"strided_slice: slice bounds and indices must be integer scalars, got "
                          f"{_args.describe(k)}; use df.gather for tensors of indices", TypeError)
    return k


def slice_helper(tensor, key):
    """`Tensor.__getitem__`: `t[1:, ::-1, None, ..., 0]` is one strided_slice; a bound or index
    that is a symbolic integer scalar (`t[i:i + 2]` in a loop) makes it one dynamic_strided_slice,
    whose sliced sizes are unknown while tracing."""
    if state.graph is None:     # eagerly every bound is a value (the per-op path: nothing more)
        return strided_slice(tensor, key)
    items = key if isinstance(key, tuple) else (key,)
    if not any(_is_symbolic(v) for k in items
               for v in ((k.start, k.stop, k.step) if isinstance(k, slice) else (k,))):
        return strided_slice(tensor, key)
    attrs = _slice_attrs(key, _rank(tensor), _bound)
    bounds, operands = [], []
    for k, what in enumerate(("begin", "end", "strides")):
        values = list(attrs[what])
        for d, v in enumerate(values):
            if isinstance(v, Tensor):
                bounds.append(v), operands.append(3 * d + k)
                values[d] = 1 if k == 2 else 0
        attrs[what] = tuple(values)
    return run_op(_DYNAMIC_SLICE, (tensor,) + tuple(bounds), dict(attrs, operands=tuple(operands), shape=()))
