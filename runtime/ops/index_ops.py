"""Indexing ops: gather (its sparse gradient densifies here), one_hot, strided slicing.

Declarations and public functions; `runtime.ops.array_ops` re-exports them (the place op
functions are found), and `Tensor.__getitem__` is `slice_helper`. The module is long because
each op keeps its kernel, inference, gradient, ONNX form and batching rule together.
"""
import operator

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.indexed_slices import IndexedSlices
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops._onnx import BIG, before_the_start, scatter_adjoint, shape_of
from defun.runtime.ops.base_ops import reshape
from defun.runtime.registry import register
from defun.runtime.tensor import EagerTensor, Tensor
from defun.runtime import batching as bt

__all__ = ["gather", "one_hot", "strided_slice", "slice_helper"]

_pyrange = range


def _rank(x):
    """Static rank of a tensor, variable, array or nested list (always known, even traced)."""
    s = getattr(x, "shape", None)
    return len(s) if s is not None else np.ndim(x)


def _norm_axis(op_name, axis, rank):
    """`axis` of an existing dimension (runtime.shapes.normalize_axis, no scalar axis)."""
    return shape_rules.normalize_axis(op_name, axis, rank, scalar_axis=False)


def _check_int_dtype(op_name, what, dtype):
    if not dtype.is_integer:
        raise errors.InvalidArgumentError(f"{op_name}: {what} must be int32 or int64, got {dtype.name}")


# ------------------------------------------------------------------ gather, gather_grad
def _gather_infer(shapes, dts, attrs):
    _check_int_dtype("gather", "indices", dts[1])
    p, axis = shapes[0], attrs["axis"]
    if not p:
        raise errors.InvalidArgumentError("gather: params must have rank >= 1, got a scalar")
    axis = _norm_axis("gather", axis, len(p))
    return [(tuple(p[:axis]) + tuple(shapes[1]) + tuple(p[axis + 1:]), dts[0])]


def _check_gather_indices(params, indices, axis):
    if indices.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(f"gather: indices must be int32 or int64, got {indices.dtype}")
    n = params.shape[axis]
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        bad = indices[(indices < 0) | (indices >= n)].reshape(-1)[0]
        raise errors.InvalidArgumentError(
            f"gather: index {bad} is out of range [0, {n}) for axis {axis} of params shape {params.shape}")


def _gather_kernel(params, indices, axis):
    _check_gather_indices(params, indices, axis)
    return np.take(params, indices, axis)


def _gather_grad(op, g):
    params, indices = op.inputs
    axis = op.attrs["axis"]
    pshape = tuple(params.shape)
    if axis == 0 and None not in pshape:
        # sparse: row indices[i] of the gradient is values[i]
        if len(indices.shape) == 1:
            return [IndexedSlices(g, indices, pshape), None]
        if None not in tuple(indices.shape):    # (the count, not -1: no size fits a row of 0 elements)
            n = int(np.prod(indices.shape, dtype=np.int64))
            return [IndexedSlices(reshape(g, (n,) + pshape[1:]), reshape(indices, (n,)), pshape), None]
    return [run_op(_GATHER_GRAD, (g, indices, params), op.attrs), None]


def _gather_grad_kernel(g, indices, params, axis):
    """Dense scatter-add of `g` into zeros shaped like `params` (repeated indices add up)."""
    out = np.zeros(params.shape, g.dtype)
    k = indices.ndim
    rows = np.moveaxis(out, axis, 0)
    vals = np.moveaxis(g, tuple(_pyrange(axis, axis + k)), tuple(_pyrange(k)))
    # (indices.size, not -1: with a zero-size row, -1 cannot be inferred)
    np.add.at(rows, indices.reshape(-1), vals.reshape((indices.size,) + rows.shape[1:]))
    return out


def _gather_grad_onnx(e, node, ins):
    g, indices, params = ins
    return scatter_adjoint(e, g, shape_of(e, params, node.inputs[2]), node.outputs[0].dtype,
                           lambda idx: e.op("Gather", idx, indices, axis=node.attrs["axis"]))


def _gather_batch(ctx, node, inputs, batched):
    params, indices = inputs
    r = len(node.inputs[0].shape)
    axis = bt.norm_axis(node, node.attrs["axis"], r) - 1
    if batched[0] and not batched[1]:
        return bt.all_batched(bt.emit(node, inputs, {"axis": axis + 1}))
    if not batched[0]:       # result: params[:axis] + (B,) + indices + params[axis + 1:]
        out = bt.emit(node, inputs)[0]
        if axis:
            k = len(node.outputs[0].shape) + 1
            perm = (axis,) + tuple(i for i in range(k) if i != axis)
            out = bt.op("transpose", [out], perm=perm)
        return bt.all_batched([out])
    return bt.all_batched([bt.op("batch_gather", inputs, axis=axis + 1, batch_dims=1)])


_GATHER = register(
    name="gather",
    kernel=_gather_kernel,
    infer=_gather_infer,
    grad=_gather_grad,
    num_inputs=2,
    attrs={"axis": "int"},
    defaults={},
    onnx="Gather",
    batch=_gather_batch,
)
# Internal: the dense gradient of gather (axis != 0, or sizes unknown while tracing).
def _adjoint_infer(name, forward_infer, forward_inputs):
    """Inference of an op taking (g, ...) and giving the gradient of a forward op's input:
    the forward op's inference on inputs `forward_inputs` (positions) must accept them and
    give g's shape; the result has the shape of the last input (the forward input)."""
    def infer(shapes, dts, attrs):
        fwd = forward_infer([shapes[i] for i in forward_inputs], [dts[i] for i in forward_inputs], attrs)
        shape_rules.check_compatible(name, "the gradient", shapes[0], "the forward result", fwd[0][0])
        return [(tuple(shapes[-1]), dts[0])]
    return infer


_GATHER_GRAD_INFER = _adjoint_infer("gather_grad", _gather_infer, (2, 1))


def _gather_grad_batch(ctx, node, inputs, batched):
    """(g, indices, params) -> zeros like params with g scattered in along `axis`."""
    axis = bt.norm_axis(node, node.attrs["axis"], len(node.inputs[2].shape))
    xs = bt.materialize_all(ctx, node, inputs, batched, (0, 2) if not batched[1] else None)
    if not batched[1]:
        return bt.all_batched(bt.emit(node, xs, {"axis": axis}))
    return bt.all_batched([bt.op("batch_gather_grad", xs, axis=axis, batch_dims=1)])


_GATHER_GRAD = register(
    name="gather_grad",
    kernel=_gather_grad_kernel,
    infer=_GATHER_GRAD_INFER,
    grad=lambda op, gg: [gather(gg, op.inputs[1], op.attrs["axis"]), None, None],
    num_inputs=3,
    attrs={"axis": "int"},
    defaults={},
    onnx=_gather_grad_onnx,
    batch=_gather_grad_batch,
)


# gather with batch_dims=b: the first b axes of params and indices are matched one to one
# (TensorFlow's semantics). Its own op, so plain gathers keep their attrs and sparse gradient.
def _batch_gather_infer(shapes, dts, attrs):
    _check_int_dtype("gather", "indices", dts[1])
    p, i, b = tuple(shapes[0]), tuple(shapes[1]), attrs["batch_dims"]
    axis = _norm_axis("gather", attrs["axis"], max(len(p), 1))
    _check_batch_dims(b, len(i), axis)
    if any(x is not None and y is not None and x != y for x, y in zip(p[:b], i[:b])):
        raise errors.InvalidArgumentError(
            f"gather: with batch_dims={b}, params {shape_rules.shape_str(p)} and indices "
            f"{shape_rules.shape_str(i)} must agree on their first {b} sizes")
    batch = tuple(x if x is not None else y for x, y in zip(p[:b], i[:b]))
    return [(batch + p[b:axis] + i[b:] + p[axis + 1:], dts[0])]


def _check_batch_dims(b, indices_rank, axis):
    if not 0 < b <= min(indices_rank, axis):
        raise errors.InvalidArgumentError(
            f"gather: batch_dims={b} must be at most the rank of indices ({indices_rank}) and the axis ({axis})")


def _batch_gather_index(indices, pshape, axis, batch_dims):
    """The numpy index of a batched gather: one index array per params axis, broadcasting to
    the result's shape (batch, params[b:axis], indices[b:], params[axis+1:])."""
    b, ki = batch_dims, indices.ndim - batch_dims
    index = []
    for d, n in enumerate(pshape):
        if d == axis:
            index.append(indices.reshape(indices.shape[:b] + (1,) * (axis - b) + indices.shape[b:] +
                                         (1,) * (len(pshape) - axis - 1)))
        else:
            shape = [1] * (len(pshape) - 1 + ki)
            shape[d if d < axis else d - 1 + ki] = n
            index.append(np.arange(n).reshape(shape))
    return tuple(index)


def _batch_gather_kernel(params, indices, axis, batch_dims):
    _check_gather_indices(params, indices, axis)
    if params.shape[:batch_dims] != indices.shape[:batch_dims]:
        raise errors.InvalidArgumentError(
            f"gather: with batch_dims={batch_dims}, params {params.shape} and indices {indices.shape} must agree "
            f"on their first {batch_dims} sizes")
    return params[_batch_gather_index(indices, params.shape, axis, batch_dims)]


def _batch_gather_grad_kernel(g, indices, params, axis, batch_dims):
    out = np.zeros(params.shape, g.dtype)
    np.add.at(out, _batch_gather_index(indices, params.shape, axis, batch_dims), g)
    return out


def _batch_gather_of(e, params, indices, p_rank, i_rank, axis, b):
    """GatherND with b batch dims on params with `axis` moved to position b; the result's
    axes are then put in gather's order (batch, params[b:axis], indices[b:], params[axis+1:])."""
    if axis != b:
        perm = list(_pyrange(b)) + [axis] + [d for d in _pyrange(b, p_rank) if d != axis]
        params = e.op("Transpose", params, perm=perm)
    where = e.op("Unsqueeze", e.cast(indices, dtypes.int64), e.ints([-1]))
    out = e.op("GatherND", params, where, batch_dims=b)
    ki, mid = i_rank - b, axis - b
    if not mid:
        return out
    perm = list(_pyrange(b)) + list(_pyrange(b + ki, b + ki + mid)) + list(_pyrange(b, b + ki)) + \
        list(_pyrange(b + ki + mid, p_rank - 1 + ki))
    return e.op("Transpose", out, perm=perm)


def _batch_gather_onnx(e, node, ins):
    p, i = node.inputs
    return _batch_gather_of(e, ins[0], ins[1], len(p.shape), len(i.shape), node.attrs["axis"],
                            node.attrs["batch_dims"])


def _batch_gather_grad_onnx(e, node, ins):
    g, indices, params = ins
    i, p = node.inputs[1], node.inputs[2]
    return scatter_adjoint(e, g, shape_of(e, params, p), node.outputs[0].dtype, lambda idx: _batch_gather_of(
        e, idx, indices, len(p.shape), len(i.shape), node.attrs["axis"], node.attrs["batch_dims"]))


_BATCH_ATTRS = {"axis": "int", "batch_dims": "int"}


def _batch_gather_batch(ctx, node, inputs, batched):
    params = node.inputs[-1] if node.op.name == "batch_gather_grad" else node.inputs[0]
    axis = bt.norm_axis(node, node.attrs["axis"], len(params.shape))
    b = node.attrs["batch_dims"]
    if b < 0:
        b += len(node.inputs[1].shape)
    xs = bt.materialize_all(ctx, node, inputs, batched)
    return bt.all_batched(bt.emit(node, xs, {"axis": axis, "batch_dims": b + 1}))


_BATCH_GATHER = register(
    name="batch_gather",
    kernel=_batch_gather_kernel,
    infer=_batch_gather_infer,
    grad=lambda op, g: [run_op(_BATCH_GATHER_GRAD, (g, op.inputs[1], op.inputs[0]), op.attrs), None],
    num_inputs=2,
    attrs=_BATCH_ATTRS,
    defaults={},
    onnx=_batch_gather_onnx,
    batch=_batch_gather_batch,
)
# Internal: the (dense) gradient of batch_gather, whose own gradient is that gather.
_BATCH_GATHER_GRAD_INFER = _adjoint_infer("batch_gather_grad", _batch_gather_infer, (2, 1))
_BATCH_GATHER_GRAD = register(
    name="batch_gather_grad",
    kernel=_batch_gather_grad_kernel,
    infer=_BATCH_GATHER_GRAD_INFER,
    grad=lambda op, gg: [gather(gg, op.inputs[1], op.attrs["axis"], op.attrs["batch_dims"]), None, None],
    num_inputs=3,
    attrs=_BATCH_ATTRS,
    defaults={},
    onnx=_batch_gather_grad_onnx,
    batch=_batch_gather_batch,
)


def gather(params, indices, axis=None, batch_dims=0, name=None):
    """Slices of `params` at integer `indices` along `axis`; the gradient is an IndexedSlices.
    With `batch_dims=b` the first b axes of params and indices are batch axes, matched one to
    one (negative b counts from the rank of indices; `axis` defaults to b).

    >>> df.gather([[1, 2], [3, 4], [5, 6]], [2, 0])                    # [[5, 6], [1, 2]]
    >>> df.gather([[1, 2], [3, 4]], [[1], [0]], axis=1, batch_dims=1)  # [[2], [3]]
    """
    rank = _rank(params)
    if rank == 0:
        raise _args.error("gather: params must have rank >= 1, got a scalar")
    batch_dims = _args.int_arg("gather", batch_dims, "batch_dims")
    if batch_dims < 0:
        batch_dims += _rank(indices)
    axis = _args.axis_arg("gather", batch_dims if axis is None else axis, rank)
    if batch_dims:
        try:
            _check_batch_dims(batch_dims, _rank(indices), axis)
        except errors.InvalidArgumentError as e:
            raise _args.error(str(e)) from None
        return run_op(_BATCH_GATHER, (params, indices), {"axis": axis, "batch_dims": batch_dims}, name)
    return run_op(_GATHER, (params, indices), {"axis": axis}, name)


# ------------------------------------------------------------------ IndexedSlices (gather's gradient)
def _to_dense_kernel(values, indices, dense_shape):
    out = np.zeros(dense_shape, values.dtype)
    np.add.at(out, indices, values)
    return out


def _to_dense_grad(op, g):
    return [gather(g, op.inputs[1]), None]


def _to_dense_infer(shapes, dts, attrs):
    name, dense = "indexed_slices_to_dense", tuple(attrs["dense_shape"])
    _check_int_dtype(name, "indices", dts[1])
    if not dense or any(d is not None and d < 0 for d in dense):
        raise errors.InvalidArgumentError(f"{name}: dense_shape {dense} must hold non-negative sizes, rank >= 1")
    shape_rules.check_compatible(name, "values", shapes[0], "indices.shape + dense_shape[1:]",
                                 tuple(shapes[1]) + dense[1:])
    return [(dense, dts[0])]


def _to_dense_onnx(e, node, ins):
    out = node.outputs[0]
    zeros = e.op("Expand", e.scalar(0, out.dtype), e.ints(node.attrs["dense_shape"]))
    where = e.op("Unsqueeze", e.cast(ins[1], dtypes.int64), e.ints([-1]))
    return e.op("ScatterND", zeros, where, ins[0], reduction="add")


def _to_dense_batch(ctx, node, inputs, batched):
    """Example b's row i becomes row b * rows + i of one dense tensor."""
    values, ids = bt.materialize_all(ctx, node, inputs, batched)
    dense = bt.static_shape(node, node.outputs[0], "output")
    if ctx.size is None:     # B unknown: a batched gather's gradient, into a broadcast zero of (B,) + dense
        like = bt.op("dynamic_broadcast_to", [np.zeros((1,) * (len(dense) + 1), node.inputs[0].dtype.np),
                                              bt.batch_shape(ctx, dense)], shape=(None,) + dense)
        return bt.all_batched([bt.op("batch_gather_grad", [values, ids, like], axis=1, batch_dims=1)])
    ishape = bt.static_shape(node, node.inputs[1])
    rows = bt.op("multiply", [bt.iota(ctx, node.inputs[1].dtype), dense[0]])
    offset = bt.reshape_batch(ctx, rows, (1,) * len(ishape))
    out = bt.emit(node, [values, bt.op("add", [ids, offset])],
                  {"dense_shape": (ctx.size * dense[0],) + dense[1:]})[0]
    return bt.all_batched([bt.reshape_batch(ctx, out, dense)])


_TO_DENSE = register(
    name="indexed_slices_to_dense",
    kernel=_to_dense_kernel,
    infer=_to_dense_infer,
    grad=_to_dense_grad,
    num_inputs=2,
    attrs={"dense_shape": "shape"},
    defaults={},
    onnx=_to_dense_onnx,
    batch=_to_dense_batch,
)


# ------------------------------------------------------------------ one_hot
def _one_hot_value(dtype, value, what):
    """Refuse an on/off value the result's dtype cannot hold as it is (2.5 as int32, 300 as
    uint8, 1e6 as float16), rather than truncating it."""
    kind = np.dtype(dtype.np).kind
    if kind in "iub":
        fits = np.isfinite(value) and value == int(value) and (
            value in (0, 1) if kind == "b" else np.iinfo(dtype.np).min <= value <= np.iinfo(dtype.np).max)
    else:
        with np.errstate(over="ignore"):
            fits = not (np.isfinite(value) and not np.isfinite(np.asarray(value).astype(dtype.np)))
    if not fits:
        raise errors.InvalidArgumentError(
            f"one_hot: {what}={value!r} does not fit the result's dtype {dtype.name} exactly (it "
            f"would be truncated or overflow); pass a value {dtype.name} holds")


def _one_hot_infer(shapes, dts, attrs):
    _check_int_dtype("one_hot", "indices", dts[0])
    if attrs["depth"] < 0:
        raise errors.InvalidArgumentError(f"one_hot: depth must be >= 0, got {attrs['depth']}")
    _one_hot_value(attrs["dtype"], attrs["on_value"], "on_value")
    _one_hot_value(attrs["dtype"], attrs["off_value"], "off_value")
    s = list(shapes[0])
    s.insert(attrs["axis"], attrs["depth"])
    return [(tuple(s), attrs["dtype"])]


def _one_hot_kernel(indices, depth, on_value, off_value, axis, dtype):
    if indices.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(f"one_hot: indices must be int32 or int64, got {indices.dtype}")
    hot = np.expand_dims(indices, -1) == np.arange(depth)
    out = np.where(hot, on_value, off_value).astype(dtype.np)
    return np.moveaxis(out, -1, axis) if axis != indices.ndim else out


def _one_hot_onnx(e, node, ins):
    """Compare the indices, given a new axis, with 0..depth-1 laid along it (ONNX OneHot
    counts negative indices from the end; here they are all off, as the kernel)."""
    a, rank = node.attrs, len(node.inputs[0].shape)
    depth = e.op("Range", *[e.scalar(v, node.inputs[0].dtype) for v in (0, a["depth"], 1)])
    depth = e.op("Reshape", depth, e.ints([-1] + [1] * (rank - a["axis"])))
    hot = e.op("Equal", e.unsqueeze(ins[0], [a["axis"]]), depth)
    return e.where(hot, e.scalar(a["on_value"], a["dtype"]), e.scalar(a["off_value"], a["dtype"]), a["dtype"])


_ONE_HOT = register(
    name="one_hot",
    kernel=_one_hot_kernel,
    infer=_one_hot_infer,
    grad=None,
    num_inputs=1,
    attrs={"depth": "int", "on_value": "float", "off_value": "float", "axis": "int",
        "dtype": "dtype"},
    defaults={},
    onnx=_one_hot_onnx,
    batch=bt.axes("axis", rank_of="output"),
)


def one_hot(indices, depth, on_value=1.0, off_value=0.0, axis=-1, dtype=dtypes.float32, name=None):
    """`on_value` where the new axis equals `indices`, else `off_value` (out-of-range: all off).

    >>> df.one_hot([0, 2], 3)   # [[1., 0., 0.], [0., 0., 1.]]  (not differentiable)
    """
    rank = _rank(indices)
    axis = _args.int_arg("one_hot", axis, "axis")
    axis = rank if axis == -1 else _args.axis_arg("one_hot", axis, rank + 1)
    depth = _args.count_arg("one_hot", depth, "depth")
    attrs = {"depth": depth, "on_value": _args.float_arg("one_hot", on_value, "on_value"),
             "off_value": _args.float_arg("one_hot", off_value, "off_value"), "axis": axis,
             "dtype": dtypes.as_dtype(dtype)}
    for what in ("on_value", "off_value"):
        try:
            _one_hot_value(attrs["dtype"], attrs[what], what)
        except errors.InvalidArgumentError as e:
            raise _args.error(str(e)) from None      # (while tracing: the user's line)
    return run_op(_ONE_HOT, (indices,), attrs, name)


# ------------------------------------------------------------------ strided slicing: t[...]
# Attrs describe every input axis: begin/end/strides, bit d of begin_mask/end_mask set when
# that bound was omitted, bit d of shrink_axis_mask set when axis d is indexed by an int
# (kept in `begin`, the axis disappears); `new_axis` lists output positions of `None`s.
_SLICE_ATTRS = {"begin": "ints", "end": "ints", "strides": "ints", "begin_mask": "int",
                "end_mask": "int", "shrink_axis_mask": "int", "new_axis": "ints"}


def _numpy_key(begin, end, strides, begin_mask, end_mask, shrink_axis_mask):
    key = []
    for d, (b, e, s) in enumerate(zip(begin, end, strides)):
        if shrink_axis_mask >> d & 1:
            key.append(b)
        else:
            key.append(slice(None if begin_mask >> d & 1 else b, None if end_mask >> d & 1 else e, s))
    return tuple(key)


def _strided_slice_kernel(x, begin, end, strides, begin_mask, end_mask, shrink_axis_mask, new_axis):
    if len(begin) != x.ndim:
        raise errors.InvalidArgumentError(
            f"strided_slice: the index covers {len(begin)} axes, the tensor has shape {x.shape}")
    y = x[_numpy_key(begin, end, strides, begin_mask, end_mask, shrink_axis_mask)]
    return np.expand_dims(y, new_axis) if new_axis else y


def _strided_slice_infer(shapes, dts, attrs):
    s = shapes[0]
    begin, end, strides = attrs["begin"], attrs["end"], attrs["strides"]
    if len(begin) != len(s):
        raise errors.InvalidArgumentError(
            f"strided_slice: the index covers {len(begin)} axes, the tensor has shape {shape_rules.shape_str(s)}")
    bm, em, sm = attrs["begin_mask"], attrs["end_mask"], attrs["shrink_axis_mask"]
    out = []
    for d, n in enumerate(s):
        if sm >> d & 1:
            if n is not None and not -n <= begin[d] < n:
                raise errors.InvalidArgumentError(
                    f"strided_slice: index {begin[d]} is out of range for axis {d} of shape "
                    f"{shape_rules.shape_str(s)}")
            continue
        if n is None:
            out.append(None)
        else:
            sl = slice(None if bm >> d & 1 else begin[d], None if em >> d & 1 else end[d], strides[d])
            out.append(len(_pyrange(*sl.indices(n))))
    for p in attrs["new_axis"]:
        out.insert(p, 1)
    return [(tuple(out), dts[0])]


def _strided_slice_grad_kernel(g, like, begin, end, strides, begin_mask, end_mask, shrink_axis_mask,
                               new_axis):
    out = np.zeros(np.shape(like), g.dtype)
    key = _numpy_key(begin, end, strides, begin_mask, end_mask, shrink_axis_mask)
    out[key] = np.squeeze(g, tuple(new_axis)) if new_axis else g
    return out


def _strided_slice_of(e, x, a, shape):
    """ONNX of strided_slice attrs `a` on `x` (static `shape`): one Slice (ONNX clamps bounds
    as Python does, but for a negative-step start before the first element: before_the_start),
    Squeeze of the int-indexed axes, Unsqueeze of the new ones."""
    starts, ends, axes, steps, shrink, shape = [], [], [], [], [], tuple(shape)
    for d, (b, n, st) in enumerate(zip(a["begin"], a["end"], a["strides"])):
        if a["shrink_axis_mask"] >> d & 1:
            starts.append(b), ends.append(b + 1 if b != -1 else BIG), axes.append(d), steps.append(1)
            shrink.append(d)
            continue
        b = (0 if st > 0 else BIG) if a["begin_mask"] >> d & 1 else b
        n = (BIG if st > 0 else -BIG) if a["end_mask"] >> d & 1 else n
        if st < 0 and b < -(shape[d] or 0):     # maybe before the start: empty when it is
            n = 0 if shape[d] is not None else before_the_start(e, x, d, shape, e.ints([b]), st, e.ints([n]))
        if (b, n, st) != (0, BIG, 1):
            starts.append(b), ends.append(n), axes.append(d), steps.append(st)
    if axes:
        ends = e.ints(ends) if all(isinstance(n, int) for n in ends) else \
            e.op("Concat", *[e.ints([n]) if isinstance(n, int) else n for n in ends], axis=0)
        x = e.op("Slice", x, e.ints(starts), ends, e.ints(axes), e.ints(steps))
    x = e.squeeze(x, shrink)
    x = e.unsqueeze(x, a["new_axis"])
    return x if axes or shrink or a["new_axis"] else e.op("Identity", x)


def slice_past_batch(a):
    """strided_slice attrs `a` (and dynamic_strided_slice's operands) with a whole batch axis first."""
    attrs = dict(a, begin=(0,) + tuple(a["begin"]), end=(0,) + tuple(a["end"]),
                 strides=(1,) + tuple(a["strides"]), begin_mask=a["begin_mask"] << 1 | 1,
                 end_mask=a["end_mask"] << 1 | 1, shrink_axis_mask=a["shrink_axis_mask"] << 1,
                 new_axis=tuple(p + 1 for p in a["new_axis"]))
    if "operands" in a:
        attrs["operands"] = tuple(c + 3 for c in a["operands"])
    return attrs


def _strided_slice_batch(ctx, node, inputs, batched):
    return bt.all_batched(bt.emit(node, bt.materialize_all(ctx, node, inputs, batched), slice_past_batch(node.attrs)))


_STRIDED_SLICE = register(
    name="strided_slice",
    kernel=_strided_slice_kernel,
    infer=_strided_slice_infer,
    grad=lambda op, g: [run_op(_STRIDED_SLICE_GRAD, (g, op.inputs[0]), op.attrs)],
    num_inputs=1,
    attrs=_SLICE_ATTRS,
    defaults={},
    onnx=lambda e, node, ins: _strided_slice_of(e, ins[0], node.attrs, node.inputs[0].shape),
    batch=_strided_slice_batch,
)
# Internal: the gradient of strided_slice, scattering `g` into zeros shaped like the input.
_STRIDED_SLICE_GRAD_INFER = _adjoint_infer("strided_slice_grad", _strided_slice_infer, (1,))
_STRIDED_SLICE_GRAD = register(
    name="strided_slice_grad",
    kernel=_strided_slice_grad_kernel,
    infer=_STRIDED_SLICE_GRAD_INFER,
    grad=lambda op, gg: [run_op(_STRIDED_SLICE, (gg,), op.attrs), None],
    num_inputs=2,
    attrs=_SLICE_ATTRS,
    defaults={},
    onnx=lambda e, node, ins: scatter_adjoint(
        e, ins[0], shape_of(e, ins[1], node.inputs[1]), node.outputs[0].dtype,
        lambda idx: _strided_slice_of(e, idx, node.attrs, node.inputs[1].shape)),
    batch=_strided_slice_batch,
)


def _index_value(k):
    """A static int from a key item (Python/numpy int or an eager integer scalar tensor)."""
    if isinstance(k, (bool, np.bool_)):
        raise _args.error(f"strided_slice: boolean index {k!r} is not supported; use df.where or df.gather",
                          TypeError)
    if isinstance(k, Tensor) and not isinstance(k, EagerTensor):
        known = k.static_value() if hasattr(k, "static_value") else None
        if known is not None and np.ndim(known) == 0 and np.asarray(known).dtype.kind in "iu":
            return int(known)
        raise _args.error("strided_slice: indices must be static Python ints while tracing, got a symbolic "
                          "tensor; use df.gather(t, index) for a data-dependent index", TypeError)
    try:
        return operator.index(k)
    except TypeError:
        raise _args.error(f"strided_slice: index {k!r:.60} is not an int, slice, ..., or None; use df.gather "
                          f"for lists or tensors of indices", TypeError) from None


def _slice_attrs(key, rank, value=_index_value):
    """Attrs of the one strided_slice op computing `t[key]` for a tensor of `rank`; `value`
    reads each int of the key (dynamic_shape_ops' keeps symbolic scalars, set into the attrs)."""
    key = key if isinstance(key, tuple) else (key,)
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise _args.error("strided_slice: an index can hold only one ellipsis (...)")
    if consumed > rank:
        raise _args.error(f"strided_slice: too many indices ({consumed}) for a tensor of rank {rank}")
    if Ellipsis not in key:
        key = key + (Ellipsis,)
    begin, end, strides, new_axis = [], [], [], []
    bm = em = sm = 0
    out_pos = 0

    def full_axis():
        nonlocal bm, em
        d = len(begin)
        begin.append(0), end.append(0), strides.append(1)
        bm |= 1 << d
        em |= 1 << d

    for k in key:
        d = len(begin)
        if k is Ellipsis:
            for _ in _pyrange(rank - consumed):
                full_axis()
                out_pos += 1
        elif k is None:
            new_axis.append(out_pos)
            out_pos += 1
        elif isinstance(k, slice):
            step = 1 if k.step is None else value(k.step)
            if isinstance(step, int) and step == 0:
                raise _args.error("strided_slice: slice step cannot be zero")
            begin.append(0 if k.start is None else value(k.start))
            end.append(0 if k.stop is None else value(k.stop))
            strides.append(step)
            bm |= (k.start is None) << d
            em |= (k.stop is None) << d
            out_pos += 1
        else:
            i = value(k)
            begin.append(i), end.append(i + 1 if isinstance(i, int) else 0), strides.append(1)
            sm |= 1 << d
    return {"begin": tuple(begin), "end": tuple(end), "strides": tuple(strides), "begin_mask": bm,
            "end_mask": em, "shrink_axis_mask": sm, "new_axis": tuple(new_axis)}


def strided_slice(input, key, name=None):
    """`input[key]` as one op: `key` holds ints, slices (any step), `...` and `None`."""
    return run_op(_STRIDED_SLICE, (input,), _slice_attrs(key, _rank(input)), name)


def slice_helper(tensor, key):
    """`Tensor.__getitem__`: `t[1:, ::-1, None, ..., 0]` is one differentiable strided_slice."""
    return strided_slice(tensor, key)
