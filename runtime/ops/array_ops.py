"""Tiling, padding and creation ops (tile, pad, zeros, ones, fill, range): declarations and
public functions. Re-exported here, the place op functions are found: the shape ops (reshape,
broadcast_to, where, cast, ...: shape_ops and base_ops), the ops along an axis (transpose,
concat, stack, unstack, split: axis_ops) and the indexing ops (gather, one_hot, slicing:
index_ops).

This module defines `range` (the op), so Python's builtin is spelled `_pyrange` here.
"""
import builtins

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops._onnx import BIG, scatter_adjoint, shape_of
from defun.runtime.ops.base_ops import (broadcast_to, cast, expand_dims, identity, ones_like,  # noqa: F401
                                        reduce_sum, reshape, shape, size, squeeze, stop_gradient, where,
                                        zeros_like)
from defun.runtime.ops.dynamic_shape_ops import dynamic_fill, dynamic_range, dynamic_tile, slice_helper  # noqa: F401
from defun.runtime.ops.dynamic_shape_ops import range_length as _range_length
from defun.runtime.ops.index_ops import _norm_axis, _rank, gather, one_hot, strided_slice  # noqa: F401
from defun.runtime.ops.math_ops import subtract
from defun.runtime.ops.axis_ops import concat, split, stack, transpose, unstack  # noqa: F401  (re-exported)
from defun.runtime.registry import one_of, register
from defun.runtime.tensor import EagerTensor, Tensor, convert_to_tensor
from defun.runtime import batching as bt

__all__ = ["identity", "stop_gradient", "zeros_like", "ones_like", "reshape", "expand_dims", "squeeze",
           "broadcast_to", "shape", "size", "where", "transpose", "concat", "stack", "unstack", "split",
           "tile", "pad", "gather", "one_hot", "zeros", "ones", "fill", "range"]

_pyrange = builtins.range

_EMPTY = {}


# ------------------------------------------------------------------ tile, tile_reduce
def _tile_infer(shapes, dts, attrs):
    s, m = shapes[0], attrs["multiples"]
    if len(m) != len(s) or any(k < 0 for k in m):
        raise errors.InvalidArgumentError(
            f"tile: multiples {m} must hold one non-negative int per axis of shape {shape_rules.shape_str(s)}")
    return [(tuple(None if d is None else d * k for d, k in zip(s, m)), dts[0])]


def _tile_kernel(x, multiples):
    if len(multiples) != x.ndim or min(multiples, default=0) < 0:
        raise errors.InvalidArgumentError(
            f"tile: multiples {multiples} must hold one non-negative int per axis of shape {x.shape}")
    return np.tile(x, multiples)


def _tile_reduce_kernel(g, multiples):
    """Sum the tiles of `g` back into one: the adjoint of tile."""
    split_shape = []
    for d, k in zip(g.shape, multiples):
        split_shape += [k, d // k]
    r = g.reshape(split_shape)
    return np.sum(r, axis=tuple(_pyrange(0, 2 * g.ndim, 2)), dtype=g.dtype)


def _tile_reduce_infer(shapes, dts, attrs):
    m = attrs["multiples"]
    if len(m) != len(shapes[0]) or min(m, default=1) <= 0:
        raise errors.InvalidArgumentError(
            f"tile_reduce: multiples {m} must hold one positive int per axis of {shape_rules.shape_str(shapes[0])}")
    return [(tuple(None if d is None else d // k for d, k in zip(shapes[0], m)), dts[0])]


def _tile_grad(op, g):
    if 0 in op.attrs["multiples"]:  # the output is empty: nothing flows back
        return [zeros_like(op.inputs[0])]
    return [run_op(_TILE_REDUCE, (g,), op.attrs)]


def _tile_onnx(e, node, ins):
    m = node.attrs["multiples"]
    return e.op("Tile", ins[0], e.ints(m)) if m else e.op("Identity", ins[0])


def _tile_reduce_onnx(e, node, ins):
    """Reshape (d0 * k0, ...) into (k0, d0, k1, d1, ...) and sum the k axes."""
    m = node.attrs["multiples"]
    if not m:
        return e.op("Identity", ins[0])
    out = shape_of(e, None, node.outputs[0]) if None not in node.outputs[0].shape else \
        e.op("Div", e.op("Shape", ins[0]), e.ints(m))
    pairs = e.op("Concat", e.op("Unsqueeze", e.ints(m), e.ints([1])), e.op("Unsqueeze", out, e.ints([1])), axis=1)
    split = e.op("Reshape", ins[0], e.op("Reshape", pairs, e.ints([-1])))
    return e.reduce("ReduceSum", split, tuple(_pyrange(0, 2 * len(m), 2)), False)


def _tile_batch(ctx, node, inputs, batched):
    return bt.all_batched(bt.emit(node, inputs, {"multiples": (1,) + tuple(node.attrs["multiples"])}))


_TILE = register(
    name="tile",
    kernel=_tile_kernel,
    infer=_tile_infer,
    grad=_tile_grad,
    num_inputs=1,
    attrs={"multiples": "ints"},
    defaults={},
    onnx=_tile_onnx,
    batch=_tile_batch,
)
# Internal: the gradient of tile for positive multiples (its own gradient is tile again).
_TILE_REDUCE = register(
    name="tile_reduce",
    kernel=_tile_reduce_kernel,
    infer=_tile_reduce_infer,
    grad=lambda op, g: [tile(g, op.attrs["multiples"])],
    num_inputs=1,
    attrs={"multiples": "ints"},
    defaults={},
    onnx=_tile_reduce_onnx,
    batch=_tile_batch,
)


def tile(input, multiples, name=None):
    """Repeat `input` `multiples[i]` times along axis i: `df.tile([1, 2], [2]) -> [1, 2, 1, 2]`;
    `multiples` may be a tensor computed when the graph runs."""
    static, operand = _args.shape_operand("tile", multiples, "multiples")
    if operand is None:
        return run_op(_TILE, (input,), {"multiples": static}, name)
    return dynamic_tile(input, operand, static, name)


# ------------------------------------------------------------------ pad, pad_grad
_PAD_MODES = ("CONSTANT", "REFLECT", "SYMMETRIC")


def _pairs(paddings):
    return [(paddings[i], paddings[i + 1]) for i in _pyrange(0, len(paddings), 2)]


def _check_pad(shape, paddings, mode):
    """Validate flattened `paddings` against a (possibly partial) shape; raises naming pad."""
    if len(paddings) != 2 * len(shape) or min(paddings, default=0) < 0:
        raise errors.InvalidArgumentError(
            f"pad: paddings must be one non-negative [before, after] pair per axis of shape "
            f"{shape_rules.shape_str(shape)}, got {_pairs(paddings)}")
    limit = {"REFLECT": 1, "SYMMETRIC": 0}.get(mode)
    if limit is not None:
        for d, (b, a) in zip(shape, _pairs(paddings)):
            most = None if d is None else max(d - limit, 0)     # an empty axis: nothing to mirror, 0 fits
            if d is not None and max(b, a) > most:
                raise errors.InvalidArgumentError(
                    f"pad: {mode} padding {[b, a]} is too large for an axis of size {d} "
                    f"(at most {most}) in shape {shape_rules.shape_str(shape)}")


def _pad_infer(shapes, dts, attrs):
    shape_rules.check_same("pad", dts)
    if len(shapes[1]):
        raise errors.InvalidArgumentError(f"pad: constant_values must be a scalar, got shape {shapes[1]}")
    p = attrs["paddings"]
    _check_pad(shapes[0], p, attrs["mode"])
    return [(tuple(None if d is None else d + b + a for d, (b, a) in zip(shapes[0], _pairs(p))), dts[0])]


def _pad_kernel(x, constant_values, paddings, mode):
    _check_pad(x.shape, paddings, mode)
    if np.ndim(constant_values):
        raise errors.InvalidArgumentError(
            f"pad: constant_values must be a scalar, got shape {np.shape(constant_values)}")
    if not x.ndim:
        return x
    if mode == "CONSTANT":
        return np.pad(x, _pairs(paddings), mode="constant", constant_values=constant_values)
    return np.pad(x, _pairs(paddings), mode=mode.lower())


def _pad_grad_kernel(g, paddings, mode):
    """The adjoint of pad: crop, and for REFLECT/SYMMETRIC fold the mirrored borders back in."""
    pairs = _pairs(paddings)
    if mode == "CONSTANT":
        return g[tuple(slice(b, d - a) for d, (b, a) in zip(g.shape, pairs))]
    out = g
    for axis, (b, a) in enumerate(pairs):
        if not b and not a:
            continue
        moved = np.moveaxis(out, axis, 0)
        n = moved.shape[0] - b - a
        core = moved[b:b + n].copy()
        if mode == "REFLECT":       # padded row b-k mirrors row k; row b+n-1+k mirrors n-1-k
            core[1:b + 1] += moved[:b][::-1]
            core[n - 1 - a:n - 1] += moved[b + n:][::-1]
        else:                       # SYMMETRIC: the edge row itself is repeated
            core[:b] += moved[:b][::-1]
            core[n - a:] += moved[b + n:][::-1]
        out = np.moveaxis(core, 0, axis)
    return out


def _pad_grad_infer(shapes, dts, attrs):
    p = _pairs(attrs["paddings"])
    return [(tuple(None if d is None else d - b - a for d, (b, a) in zip(shapes[0], p)), dts[0])]


def _pad_grad(op, g):
    dx = run_op(_PAD_GRAD, (g,), op.attrs)
    if op.attrs["mode"] != "CONSTANT":
        return [dx, None]
    # every padded element is a copy of constant_values
    return [dx, subtract(reduce_sum(g), reduce_sum(dx))]


def _pad_onnx_of(e, x, paddings, mode, value=None):
    """ONNX of pad: Pad for CONSTANT and REFLECT; SYMMETRIC (edge rows repeated, which ONNX
    has no mode for) concatenates reversed slices of the borders, axis by axis."""
    pairs = _pairs(paddings)
    if not pairs:
        return e.op("Identity", x)
    if mode == "CONSTANT":
        return e.op("Pad", x, e.ints([b for b, _ in pairs] + [a for _, a in pairs]), value)
    if mode == "REFLECT":
        return e.op("Pad", x, e.ints([b for b, _ in pairs] + [a for _, a in pairs]), mode="reflect")
    for axis, (b, a) in enumerate(pairs):
        parts = [x]
        if b:
            parts.insert(0, e.op("Slice", x, e.ints([b - 1]), e.ints([-BIG]), e.ints([axis]), e.ints([-1])))
        if a:
            parts.append(e.op("Slice", x, e.ints([-1]), e.ints([-a - 1]), e.ints([axis]), e.ints([-1])))
        x = e.op("Concat", *parts, axis=axis) if len(parts) > 1 else x
    return x


def _pad_grad_onnx(e, node, ins):
    pairs = _pairs(node.attrs["paddings"])
    if not pairs:
        return e.op("Identity", ins[0])
    if node.attrs["mode"] == "CONSTANT":
        return e.op("Slice", ins[0], e.ints([b for b, _ in pairs]), e.ints([-a if a else BIG for _, a in pairs]),
                    e.ints(_pyrange(len(pairs))))
    out = node.outputs[0]
    shape = shape_of(e, None, out) if None not in out.shape else \
        e.op("Sub", e.op("Shape", ins[0]), e.ints([b + a for b, a in pairs]))
    return scatter_adjoint(e, ins[0], shape, out.dtype,
                           lambda idx: _pad_onnx_of(e, idx, node.attrs["paddings"], node.attrs["mode"]))


def _pad_batch(ctx, node, inputs, batched):
    x = inputs[0] if batched[0] else bt.materialize(ctx, node, inputs[0], node.inputs[0])
    attrs = dict(node.attrs, paddings=(0, 0) + tuple(node.attrs["paddings"]))
    if len(batched) == 1 or not batched[1]:
        return bt.all_batched(bt.emit(node, [x] + list(inputs[1:]), attrs))
    # a constant per example: padded with zeros, then each example's constant where the
    # padding is (a mask of the padded region, so x's own entries stay exact)
    c = inputs[1]
    zero = np.zeros((), node.inputs[1].dtype.np)     # (not c[0]: a batch may be empty)
    inside = bt.emit(node, [bt.op("ones_like", [x]), zero], attrs)[0]
    r = len(node.inputs[0].shape)
    c = bt.reshape_batch(ctx, c, (1,) * r)
    padded = bt.emit(node, [x, zero], attrs)[0]
    outside = bt.op("subtract", [bt.op("ones_like", [inside]), inside])
    return bt.all_batched([bt.op("add", [padded, bt.op("multiply", [outside, c])])])


_PAD = register(
    name="pad",
    kernel=_pad_kernel,
    infer=_pad_infer,
    grad=_pad_grad,
    num_inputs=2,
    attrs={"paddings": "ints", "mode": one_of(*_PAD_MODES)},
    defaults={},
    same_dtype=(0, 1),
    onnx=lambda e, node, ins: _pad_onnx_of(e, ins[0], node.attrs["paddings"], node.attrs["mode"], ins[1]),
    batch=_pad_batch,
)
# Internal: the gradient of pad (its own gradient is pad with zeros).
_PAD_GRAD = register(
    name="pad_grad",
    kernel=_pad_grad_kernel,
    infer=_pad_grad_infer,
    grad=lambda op, g: [pad(g, _pairs(op.attrs["paddings"]), op.attrs["mode"])],
    num_inputs=1,
    attrs={"paddings": "ints", "mode": one_of(*_PAD_MODES)},
    defaults={},
    onnx=_pad_grad_onnx,
    batch=_pad_batch,
)


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """Pad each axis by `paddings[i] = [before, after]` (CONSTANT, REFLECT or SYMMETRIC).

    >>> df.pad([[1, 2]], [[0, 0], [1, 1]])   # [[0, 1, 2, 0]]
    """
    m = mode.upper() if isinstance(mode, str) else mode
    if m not in _PAD_MODES:
        raise _args.error(f"pad: mode must be one of {', '.join(_PAD_MODES)}, got {mode!r}")
    try:
        p = np.asarray(_args.value_now("pad", paddings, "paddings") if _args.is_tensor_arg(paddings) else paddings)
    except ValueError:      # ragged
        p = np.asarray(None)
    if p.size == 0:  # a scalar has no axes to pad
        p = p.reshape(0, 2)
    if p.ndim != 2 or p.shape[1:] != (2,) or (p.size and p.dtype.kind not in "iu"):
        raise _args.error(f"pad: paddings must be a [rank, 2] list of ints ([before, after] per axis), "
                          f"got {paddings!r:.80}")
    flat = tuple(int(v) for v in p.reshape(-1))
    if not isinstance(tensor, Tensor) and not hasattr(tensor, "_as_tensor"):
        tensor = convert_to_tensor(tensor)  # so a Python constant_values adopts its dtype
    return run_op(_PAD, (tensor, constant_values), {"paddings": flat, "mode": m}, name)


# ------------------------------------------------------------------ zeros, ones, fill, range
def _shape_attr_infer(op_name):
    def infer(shapes, dts, attrs):
        if min(attrs["shape"], default=0) < 0:
            raise errors.InvalidArgumentError(f"{op_name}: negative size in shape {attrs['shape']}")
        return [(tuple(attrs["shape"]), attrs["dtype"])]
    return infer


def _filled_onnx(value):
    return lambda e, node, ins: e.op("Expand", e.scalar(value, node.attrs["dtype"]), e.ints(node.attrs["shape"]))


_ZEROS = register(
    name="zeros",
    kernel=lambda shape, dtype: np.zeros(shape, dtype.np),
    infer=_shape_attr_infer("zeros"),
    grad=None,
    num_inputs=0,
    attrs={"shape": "ints", "dtype": "dtype"},
    defaults={},
    onnx=_filled_onnx(0),
)
_ONES = register(
    name="ones",
    kernel=lambda shape, dtype: np.ones(shape, dtype.np),
    infer=_shape_attr_infer("ones"),
    grad=None,
    num_inputs=0,
    attrs={"shape": "ints", "dtype": "dtype"},
    defaults={},
    onnx=_filled_onnx(1),
)


def zeros(shape, dtype=dtypes.float32, name=None):
    """A tensor of zeros: `df.zeros([2, 3])` (float32 unless `dtype` says otherwise); the shape
    may be a tensor computed when the graph runs (`df.zeros(df.shape(x))`)."""
    return _filled(_ZEROS, 0, shape, dtype, name)


def ones(shape, dtype=dtypes.float32, name=None):
    """A tensor of ones: `df.ones([2, 3], df.int32)`."""
    return _filled(_ONES, 1, shape, dtype, name)


def _filled(op, value, shape, dtype, name):
    dtype = _values_dtype(op.name, dtype)
    static, operand = _args.shape_operand(op.name, shape)
    if operand is None:
        return run_op(op, (), {"shape": static, "dtype": dtype}, name)
    return dynamic_fill(operand, np.asarray(value, dtype.np), static, name)


def _values_dtype(op_name, dtype):
    dt = dtypes.as_dtype(dtype)
    if dt is dtypes.resource:
        raise _args.error(f"{op_name}: dtype resource has no values; pass a numeric or bool dtype", TypeError)
    return dt


def _fill_infer(shapes, dts, attrs):
    if len(shapes[0]):
        raise errors.InvalidArgumentError(f"fill: value must be a scalar, got shape {shape_rules.shape_str(shapes[0])}")
    if min(attrs["dims"], default=0) < 0:
        raise errors.InvalidArgumentError(f"fill: negative size in dims {attrs['dims']}")
    return [(tuple(attrs["dims"]), dts[0])]


def _fill_kernel(value, dims):
    if value.ndim:
        raise errors.InvalidArgumentError(f"fill: value must be a scalar, got shape {value.shape}")
    return np.full(dims, value, value.dtype)


def _fill_batch(ctx, node, inputs, batched):
    dims = tuple(node.attrs["dims"])
    v = bt.reshape_batch(ctx, inputs[0], (1,) * len(dims))
    return bt.all_batched([bt.broadcast_batch(ctx, v, dims)])


_FILL = register(
    name="fill",
    kernel=_fill_kernel,
    infer=_fill_infer,
    grad=lambda op, g: [reduce_sum(g)],
    num_inputs=1,
    attrs={"dims": "ints"},
    defaults={},
    onnx=lambda e, node, ins: e.op("Expand", ins[0], e.ints(node.attrs["dims"])),
    batch=_fill_batch,
)


def fill(dims, value, name=None):
    """A tensor of shape `dims` filled with scalar `value` (its dtype): `df.fill([2], 7) -> [7, 7]`."""
    static, operand = _args.shape_operand("fill", dims, "dims")
    if operand is None:
        return run_op(_FILL, (value,), {"dims": static}, name)
    return dynamic_fill(operand, value, static, name)


def _range_kernel(start, limit, delta, dtype):
    n = _range_length(start, limit, delta, dtype)
    if dtype.is_integer:
        return np.arange(int(start), int(limit), int(delta), dtype=dtype.np)
    # start + i * delta in float64, rounded once to the dtype
    return (start + np.arange(n, dtype=np.float64) * delta).astype(dtype.np)


def _range_infer(shapes, dts, attrs):
    a = attrs
    if not a["dtype"].is_numeric:
        raise errors.InvalidArgumentError(f"range: dtype must be numeric, got {a['dtype'].name}")
    return [((_range_length(a["start"], a["limit"], a["delta"], a["dtype"]),), a["dtype"])]


def _range_onnx(e, node, ins):
    a = node.attrs
    if a["dtype"].is_integer:
        args = [e.scalar(int(a[k]), a["dtype"]) for k in ("start", "limit", "delta")]
        return e.op("Range", *args)
    # start + i * delta in float64, rounded once to the dtype (as the kernel)
    n = node.outputs[0].shape[0]
    steps = e.op("Range", *[e.scalar(v, dtypes.float64) for v in (0, n, 1)])
    values = e.op("Add", e.scalar(a["start"], dtypes.float64), e.op("Mul", steps, e.scalar(a["delta"], dtypes.float64)))
    return e.cast(values, a["dtype"])


_RANGE = register(
    name="range",
    kernel=_range_kernel,
    infer=_range_infer,
    grad=None,
    num_inputs=0,
    attrs={"start": "float", "limit": "float", "delta": "float", "dtype": "dtype"},
    defaults={},
    onnx=_range_onnx,
)


def _range_arg(x):
    """(Python number or None, its default dtype, the tensor when known only at run time)."""
    if isinstance(x, Tensor) and not isinstance(x, EagerTensor):
        if len(x.shape):
            raise _args.error(f"range: arguments must be scalars, got {_args.describe(x)}")
        known = x.static_value() if hasattr(x, "static_value") else None
        if known is None:
            if not x.dtype.is_numeric:
                raise _args.error(f"range: arguments must be numbers, got {_args.describe(x)}", TypeError)
            return None, x.dtype, x
        x = np.asarray(known)
    if isinstance(x, (EagerTensor, np.ndarray, np.generic)):
        arr = np.asarray(x)
        if arr.ndim:
            raise _args.error(f"range: arguments must be scalars, got shape {arr.shape}")
        if arr.dtype.kind not in "iuf":
            raise _args.error(f"range: arguments must be numbers, got {_args.describe(arr)}", TypeError)
        return arr.item(), dtypes.from_numpy(arr.dtype), None
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise _args.error(f"range: arguments must be numbers, got {_args.describe(x)}", TypeError)
    return x, dtypes.int32 if isinstance(x, int) else dtypes.float32, None


def range(start, limit=None, delta=1, dtype=None, name=None):  # noqa: A001 - df.range, as in TF
    """`[start, start + delta, ...)` up to `limit` (one argument: `[0, start)`).

    Integers give int32, any float gives float32 (or pass `dtype`): `df.range(3) -> [0, 1, 2]`.
    While tracing the bounds may be scalar tensors computed when the graph runs
    (`df.range(df.size(x))`); the length is then unknown while tracing.
    """
    if limit is None:
        start, limit = 0, start
    args = [_range_arg(v) for v in (start, limit, delta)]
    if dtype is None:
        kinds = [d for _, d, _ in args]
        floats = [d for d in kinds if d.is_floating]
        pool = floats or kinds
        dtype = max(pool, key=lambda d: d.np.itemsize)
    dtype = dtypes.as_dtype(dtype)
    if not dtype.is_numeric:
        raise _args.error(f"range: dtype must be numeric, got {dtype.name}")
    if any(t is not None for _, _, t in args):
        return dynamic_range(*[np.asarray(v, dtype.np) if t is None else
                               (t if t.dtype is dtype else cast(t, dtype)) for v, _, t in args], name=name)
    s, l, d = (float(v) for v, _, _ in args)
    return run_op(_RANGE, (), {"start": s, "limit": l, "delta": d, "dtype": dtype}, name)
