"""gather_nd, scatter_nd, segment_sum and unsorted_segment_sum: declarations and public
functions (TensorFlow's semantics; `gather(..., batch_dims)` lives with gather in array_ops).

Index values are checked by the kernels: an index out of range raises InvalidArgumentError
naming the op and the index, eagerly and when a traced or loaded graph runs. The gradients are
each other: gather_nd's is a scatter of the gradient (`gather_nd_grad`, dense, shaped like the
params), scatter_nd's is gather_nd of the gradient, the segment sums' are gathers.
"""
import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.dtypes import from_numpy
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops._onnx import scatter_adjoint, shape_of
from defun.runtime.ops.array_ops import expand_dims, gather, where, zeros_like
from defun.runtime.ops.index_ops import _check_int_dtype
from defun.runtime.ops.math_ops import cast, greater_equal, multiply
from defun.runtime.registry import Cost, register
from defun.runtime import batching as bt

__all__ = ["gather_nd", "scatter_nd", "segment_sum", "unsorted_segment_sum"]

_EMPTY = {}


# ------------------------------------------------------------------ index tuples
def _index_depth(op_name, indices_shape, shape):
    """How many leading axes of `shape` each index names (the last size of indices)."""
    if not indices_shape:
        raise errors.InvalidArgumentError(f"{op_name}: indices must have rank >= 1, got a scalar")
    m = indices_shape[-1]
    if m is None:
        raise errors.InvalidArgumentError(
            f"{op_name}: the last axis of indices {shape_rules.shape_str(indices_shape)} is unknown while tracing; it "
            f"says how many axes each index names, so give it a static size (e.g. TensorSpec([None, 2]))")
    if m > len(shape):
        raise errors.InvalidArgumentError(
            f"{op_name}: indices {shape_rules.shape_str(indices_shape)} name {m} axes, but the shape "
            f"{shape_rules.shape_str(shape)} has only {len(shape)}")
    return m


def _index_tuple(op_name, indices, shape):
    """The numpy index of `indices` (last axis: coordinates) into `shape`, range-checked."""
    if indices.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(f"{op_name}: indices must be int32 or int64, got {indices.dtype}")
    m = _index_depth(op_name, indices.shape, shape)
    if m == 0:
        return ()
    flat = indices.reshape(-1, m)
    bad = (flat < 0) | (flat >= np.asarray(shape[:m], np.int64))
    if bad.any():
        row = int(np.argmax(bad.any(axis=1)))
        at = "".join(f"[{int(i)}]" for i in np.unravel_index(row, indices.shape[:-1]))
        raise errors.InvalidArgumentError(
            f"{op_name}: index {flat[row].tolist()} (indices{at}) is out of range for shape {tuple(shape)}")
    return tuple(np.moveaxis(indices, -1, 0))


def _scatter_add(indices, updates, shape, op_name):
    """Zeros of `shape` with updates added at the indices (duplicates add up)."""
    index = _index_tuple(op_name, indices, shape)
    out = np.zeros(shape, updates.dtype)
    if index:
        np.add.at(out, index, updates)
    else:  # indices of depth 0 each name the whole tensor (their count, not -1: none fits no elements)
        n = int(np.prod(indices.shape[:-1], dtype=np.int64))
        out += np.add.reduce(updates.reshape((n,) + tuple(shape)), axis=0, dtype=updates.dtype)
    return out


# ------------------------------------------------------------------ gather_nd
def _gather_nd_infer(shapes, dts, attrs):
    _check_int_dtype("gather_nd", "indices", dts[1])
    p, i = tuple(shapes[0]), tuple(shapes[1])
    m = _index_depth("gather_nd", i, p)
    return [(i[:-1] + p[m:], dts[0])]


def _gather_nd_kernel(params, indices):
    index = _index_tuple("gather_nd", indices, params.shape)
    if not index:
        return np.array(np.broadcast_to(params, indices.shape[:-1] + params.shape))
    return params[index]


def _gather_nd_grad_infer(shapes, dts, attrs):
    # (g, indices, params): g has the shape gather_nd gives
    _check_int_dtype("gather_nd_grad", "indices", dts[1])
    m = _index_depth("gather_nd_grad", tuple(shapes[1]), tuple(shapes[2]))
    shape_rules.check_compatible("gather_nd_grad", "the gradient", shapes[0], "the gathered slices",
                         tuple(shapes[1])[:-1] + tuple(shapes[2])[m:])
    return [(tuple(shapes[2]), dts[0])]


def _gather_nd_onnx(e, params, indices):
    return e.op("GatherND", params, e.cast(indices, "int64"))


def _scatter_add_onnx(e, zeros, indices, updates):
    return e.op("ScatterND", zeros, e.cast(indices, "int64"), updates, reduction="add")


def _with_example_index(ctx, indices, shape):
    """Batched nd-`indices` (B, ..., k), per example of `shape` (..., k), with each example's
    number prefixed: (B, ..., k + 1)."""
    iota = bt.reshape_batch(ctx, bt.iota(ctx, dtypes.as_dtype(indices.dtype)), (1,) * len(shape))
    iota = bt.broadcast_batch(ctx, iota, shape[:-1] + (1,))
    return bt.op("concat", [iota, indices], axis=len(shape))


def _zeros_batch(ctx, rest, dtype):
    """Zeros of (B,) + `rest` (all known), also when B is known only when the batch runs."""
    return bt.broadcast_batch(ctx, np.zeros((1,) * (len(rest) + 1), dtype.np), rest)


def _gather_nd_batch(ctx, node, inputs, batched):
    params, indices = bt.materialize_all(ctx, node, inputs, batched)
    idx = _with_example_index(ctx, indices, bt.static_shape(node, node.inputs[1]))
    return bt.all_batched(bt.emit(node, [params, idx]))


_GATHER_ND = register(
    name="gather_nd",
    kernel=_gather_nd_kernel,
    infer=_gather_nd_infer,
    grad=lambda op, g: [run_op(_GATHER_ND_GRAD, (g, op.inputs[1], op.inputs[0])), None],
    num_inputs=2,
    attrs={},
    defaults={},
    onnx=lambda e, node, ins: _gather_nd_onnx(e, *ins),
    batch=_gather_nd_batch,
)


def _gather_nd_grad_batch(ctx, node, inputs, batched):
    g, indices, params = bt.materialize_all(ctx, node, inputs, batched)
    idx = _with_example_index(ctx, indices, bt.static_shape(node, node.inputs[1]))
    return bt.all_batched(bt.emit(node, [g, idx, params]))


# Internal: the gradient of gather_nd, a scatter-add of g into zeros shaped like the params
# (scatter_nd with the params' shape, which may be unknown while tracing).
_GATHER_ND_GRAD = register(
    name="gather_nd_grad",
    kernel=lambda g, indices, params: _scatter_add(
        indices, g, params.shape, "gather_nd_grad"),
    infer=_gather_nd_grad_infer,
    grad=lambda op, gg: [gather_nd(gg, op.inputs[1]), None, None],
    num_inputs=3,
    attrs={},
    defaults={},
    onnx=lambda e, node, ins: scatter_adjoint(
        e, ins[0], shape_of(e, ins[2], node.inputs[2]), node.outputs[0].dtype,
        lambda idx: _gather_nd_onnx(e, idx, ins[1])),
    batch=_gather_nd_grad_batch,
)


def gather_nd(params, indices, name=None):
    """Slices of `params` at the coordinates in the last axis of `indices`: the result has
    shape indices.shape[:-1] + params.shape[m:], m = indices.shape[-1].

    >>> df.gather_nd([[1, 2], [3, 4]], [[1, 0], [0, 1]])   # [3, 2]
    >>> df.gather_nd([[1, 2], [3, 4]], [[1]])              # [[3, 4]]
    """
    return run_op(_GATHER_ND, (params, indices), _EMPTY, name)


# ------------------------------------------------------------------ scatter_nd
def _scatter_nd_infer(shapes, dts, attrs):
    _check_int_dtype("scatter_nd", "indices", dts[0])
    shape_rules.check_kinds("scatter_nd", dts[1], shape_rules.numeric_kinds)
    i, u, shape = tuple(shapes[0]), tuple(shapes[1]), tuple(attrs["shape"])
    if min(shape, default=0) < 0:
        raise errors.InvalidArgumentError(f"scatter_nd: negative size in shape {shape}")
    m = _index_depth("scatter_nd", i, shape)
    want = i[:-1] + shape[m:]
    if len(u) != len(want) or any(a is not None and b is not None and a != b for a, b in zip(u, want)):
        raise errors.InvalidArgumentError(
            f"scatter_nd: updates must have shape indices.shape[:-1] + shape[{m}:] = "
            f"{shape_rules.shape_str(want)}, got {shape_rules.shape_str(u)}")
    return [(shape, dts[1])]


def _scatter_nd_kernel(indices, updates, shape):
    _scatter_nd_infer([indices.shape, updates.shape], [from_numpy(indices.dtype), from_numpy(updates.dtype)],
                      {"shape": shape})
    return _scatter_add(indices, updates, tuple(shape), "scatter_nd")


def _scatter_nd_batch(ctx, node, inputs, batched):
    indices, updates = bt.materialize_all(ctx, node, inputs, batched)
    idx = _with_example_index(ctx, indices, bt.static_shape(node, node.inputs[0]))
    if ctx.size is None:    # the shape attr needs B: a scatter-add into zeros of the batch's shape instead
        zeros = _zeros_batch(ctx, tuple(node.attrs["shape"]), node.outputs[0].dtype)
        return bt.all_batched([bt.op("gather_nd_grad", [updates, idx, zeros])])
    return bt.all_batched(bt.emit(node, [idx, updates], {"shape": (ctx.size,) + tuple(node.attrs["shape"])}))


_SCATTER_ND = register(
    name="scatter_nd",
    kernel=_scatter_nd_kernel,
    infer=_scatter_nd_infer,
    grad=lambda op, g: [None, gather_nd(g, op.inputs[0])],
    num_inputs=2,
    attrs={"shape": "ints"},
    defaults={},
    onnx=lambda e, node, ins: _scatter_add_onnx(
        e, e.op("Expand", e.scalar(0, node.outputs[0].dtype), e.ints(node.attrs["shape"])), *ins),
    batch=_scatter_nd_batch,
)


def scatter_nd(indices, updates, shape, name=None):
    """Zeros of `shape` with `updates` added at `indices` (repeated indices add up): the
    inverse layout of gather_nd.

    >>> df.scatter_nd([[1], [3], [1]], [1., 2., 5.], [4])   # [0., 6., 0., 2.]
    """
    return run_op(_SCATTER_ND, (indices, updates), {"shape": _args.shape_arg("scatter_nd", shape)}, name)


# ------------------------------------------------------------------ segment sums
def _segment_infer(shapes, dts, attrs):
    shape_rules.check_kinds("segment_sum", dts[0], shape_rules.numeric_kinds)
    _check_int_dtype("segment_sum", "segment_ids", dts[1])
    d, s = tuple(shapes[0]), tuple(shapes[1])
    if len(s) != 1 or not d or (s[0] is not None and d[0] is not None and s[0] != d[0]):
        raise errors.InvalidArgumentError(
            f"segment_sum: segment_ids must be a vector as long as the first axis of data, got segment_ids "
            f"{shape_rules.shape_str(s)} and data {shape_rules.shape_str(d)}")
    # the number of segments (largest id + 1) is known only from the values
    return [((None,) + d[1:], dts[0])]


def _segment_sum_kernel(data, segment_ids):
    ids = segment_ids
    if ids.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(f"segment_sum: segment_ids must be int32 or int64, got {ids.dtype}")
    if ids.ndim != 1 or data.ndim == 0 or ids.shape[0] != data.shape[0]:
        raise errors.InvalidArgumentError(
            f"segment_sum: segment_ids must be a vector as long as the first axis of data, got segment_ids "
            f"{ids.shape} and data {data.shape}")
    if not ids.size:
        return np.zeros((0,) + data.shape[1:], data.dtype)
    if ids[0] < 0:
        raise errors.InvalidArgumentError(f"segment_sum: segment id {ids[0]} at position 0 is negative")
    down = np.flatnonzero(ids[1:] < ids[:-1])
    if down.size:
        k = int(down[0]) + 1
        raise errors.InvalidArgumentError(
            f"segment_sum: segment_ids must be sorted, but segment_ids[{k}] = {ids[k]} follows {ids[k - 1]} "
            f"(use unsorted_segment_sum for unsorted ids)")
    starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
    out = np.zeros((int(ids[-1]) + 1,) + data.shape[1:], data.dtype)
    out[ids[starts]] = np.add.reduceat(data, starts, axis=0, dtype=data.dtype)
    return out


def _segment_sum_onnx(e, node, ins):
    """Scatter-add the rows into zeros of max(id) + 1 rows (-1 joins the ids: no ids, no rows)."""
    data, ids = ins
    ids = e.cast(ids, "int64")
    top = e.reduce("ReduceMax", e.op("Concat", ids, e.ints([-1]), axis=0), None, True)
    rows = e.op("Add", top, e.ints([1]))
    zeros = e.op("Expand", e.scalar(0, node.outputs[0].dtype),
                 e.op("Concat", rows, e.op("Shape", data, start=1), axis=0))
    return _scatter_add_onnx(e, zeros, e.op("Unsqueeze", ids, e.ints([-1])), data)


def _segment_sum_bytes(args, attrs):
    """The result's bytes from the ids, before the kernel allocates its rows."""
    data, ids = args[0], args[1]
    rows = int(ids.max()) + 1 if ids.size else 0
    return max(rows, 0) * int(np.prod(data.shape[ids.ndim:], dtype=np.int64)) * data.dtype.itemsize


_SEGMENT_SUM_BATCH = (
    "its output size is the largest segment id plus one, data-dependent per example; use unsorted_segment_sum")
_SEGMENT_SUM = register(
    name="segment_sum",
    kernel=_segment_sum_kernel,
    infer=_segment_infer,
    grad=lambda op, g: [gather(g, op.inputs[1]), None],
    num_inputs=2,
    attrs={},
    defaults={},
    kinds=shape_rules.numeric_kinds,
    onnx=_segment_sum_onnx,
    batch=_SEGMENT_SUM_BATCH,
    cost=Cost(sized=_segment_sum_bytes),
)


def segment_sum(data, segment_ids, name=None):
    """Sums of the rows of `data` sharing a segment id; ids are sorted, and the result has
    max(id) + 1 rows (empty segments give zeros). Its first size is known only when run.

    >>> df.segment_sum([1., 2., 3., 4.], [0, 0, 2, 2])   # [3., 0., 7.]
    """
    return run_op(_SEGMENT_SUM, (data, segment_ids), _EMPTY, name)


def _unsorted_infer(shapes, dts, attrs):
    shape_rules.check_kinds("unsorted_segment_sum", dts[0], shape_rules.numeric_kinds)
    _check_int_dtype("unsorted_segment_sum", "segment_ids", dts[1])
    d, s, n = tuple(shapes[0]), tuple(shapes[1]), attrs["num_segments"]
    if n < 0:
        raise errors.InvalidArgumentError(f"unsorted_segment_sum: num_segments must be >= 0, got {n}")
    if len(s) > len(d) or any(a is not None and b is not None and a != b for a, b in zip(s, d)):
        raise errors.InvalidArgumentError(
            f"unsorted_segment_sum: the shape of segment_ids {shape_rules.shape_str(s)} must be a prefix "
            f"of the shape of data {shape_rules.shape_str(d)}")
    return [((n,) + d[len(s):], dts[0])]


def _unsorted_kernel(data, segment_ids, num_segments):
    ids = segment_ids
    if ids.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(
            f"unsorted_segment_sum: segment_ids must be int32 or int64, got {ids.dtype}")
    if data.shape[:ids.ndim] != ids.shape:
        raise errors.InvalidArgumentError(
            f"unsorted_segment_sum: the shape of segment_ids {ids.shape} must be a prefix of the shape of data "
            f"{data.shape}")
    too_big = ids >= num_segments
    if too_big.any():
        at = np.unravel_index(int(np.argmax(too_big)), ids.shape)
        raise errors.InvalidArgumentError(
            f"unsorted_segment_sum: segment id {ids[at]} at segment_ids[{', '.join(map(str, at))}] is out of "
            f"range [0, {num_segments}) (negative ids are dropped)")
    out = np.zeros((num_segments,) + data.shape[ids.ndim:], data.dtype)
    kept = ids >= 0  # TensorFlow drops the rows of negative ids
    np.add.at(out, ids[kept], data[kept])
    return out


def _unsorted_grad(op, g):
    data, ids = op.inputs
    kept = greater_equal(ids, 0)
    rows = gather(g, where(kept, ids, zeros_like(ids)))
    mask = cast(kept, g.dtype)
    for _ in range(len(data.shape) - len(ids.shape)):
        mask = expand_dims(mask, -1)
    return [multiply(rows, mask), None]


def _unsorted_onnx(e, node, ins):
    """Scatter-add into num_segments + 1 rows, negative ids into the last one, dropped after."""
    data, ids = ins
    n, t = node.attrs["num_segments"], node.inputs[1]
    ids = e.cast(ids, "int64")
    ids = e.op("Where", e.op("Less", ids, e.scalar(0, "int64")), e.scalar(n, "int64"), ids)
    zeros = e.op("Expand", e.scalar(0, node.outputs[0].dtype),
                 e.op("Concat", e.ints([n + 1]), e.op("Shape", data, start=len(t.shape)), axis=0))
    out = _scatter_add_onnx(e, zeros, e.op("Unsqueeze", ids, e.ints([-1])), data)
    return e.op("Slice", out, e.ints([0]), e.ints([n]), e.ints([0]))


def _unsorted_segment_sum_batch(ctx, node, inputs, batched):
    """Example b's segment s becomes segment b * num_segments + s of one sum (B unknown while
    tracing: a scatter-add at (b, s) into zeros of (B, num_segments, ...))."""
    data, ids = bt.materialize_all(ctx, node, inputs, batched)
    n = node.attrs["num_segments"]
    ishape = bt.static_shape(node, node.inputs[1])
    if ctx.size is None:
        rest = bt.static_shape(node, node.outputs[0], "output")
        kept = bt.op("greater_equal", [ids, 0])       # negative ids dropped: their rows add zeros at 0
        mask = kept
        for _ in range(len(node.inputs[0].shape) - len(ishape)):
            mask = bt.op("expand_dims", [mask], axis=-1)
        data = bt.op("where", [mask, data, bt.op("zeros_like", [data])])
        ids = bt.op("where", [kept, ids, bt.op("zeros_like", [ids])])
        idx = _with_example_index(ctx, bt.op("expand_dims", [ids], axis=-1), ishape + (1,))
        return bt.all_batched([bt.op("gather_nd_grad", [data, idx, _zeros_batch(ctx, rest, node.outputs[0].dtype)])])
    offset = bt.reshape_batch(ctx, bt.op("multiply", [bt.iota(ctx, node.inputs[1].dtype), n]), (1,) * len(ishape))
    ids = bt.op("where", [bt.op("greater_equal", [ids, 0]), bt.op("add", [ids, offset]), ids])  # < 0: dropped
    out = bt.emit(node, [data, ids], {"num_segments": n * ctx.size})[0]
    rest = bt.static_shape(node, node.outputs[0], "output")
    return bt.all_batched([bt.reshape_batch(ctx, out, rest)])


_UNSORTED = register(
    name="unsorted_segment_sum",
    kernel=_unsorted_kernel,
    infer=_unsorted_infer,
    grad=_unsorted_grad,
    num_inputs=2,
    attrs={"num_segments": "int"},
    defaults={},
    kinds=shape_rules.numeric_kinds,
    onnx=_unsorted_onnx,
    batch=_unsorted_segment_sum_batch,
)


def unsorted_segment_sum(data, segment_ids, num_segments, name=None):
    """Sums of the slices of `data` by segment id, in any order: the result has
    `num_segments` rows; ids may have the shape of leading axes of data; negative ids are
    dropped.

    >>> df.unsorted_segment_sum([1., 2., 3.], [2, 0, 2], 3)   # [2., 0., 4.]
    """
    n = _args.count_arg("unsorted_segment_sum", num_segments, "num_segments")
    return run_op(_UNSORTED, (data, segment_ids), {"num_segments": n}, name)
