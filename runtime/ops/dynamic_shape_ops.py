"""Creation and tiling ops whose shape is an input tensor computed when the graph runs.

`df.fill`, `df.zeros`, `df.ones`, `df.tile` and `df.range` build these when, while tracing,
their shape argument (or range's bounds) is known only at run time (`df.shape(x)` of an x
with None sizes); a known shape keeps the ops with shape attrs (array_ops). Each node
carries the sizes known while tracing (`shape`: None where unknown) and its kernel checks
the run-time value against them (`_args.shape_value`), as the random ops do.
`dynamic_reshape` and `dynamic_broadcast_to` live with their static forms (shape_ops, base_ops).
"""
import math

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops.base_ops import _shape_input_infer, reduce_sum
from defun.runtime.registry import Cost, register
from defun.runtime import batching as bt

__all__ = ["dynamic_fill", "dynamic_tile", "dynamic_range", "range_length"]


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
