"""Op table rows: gather_nd, scatter_nd, segment_sum, unsorted_segment_sum and the internal
gather_nd_grad (runtime/ops/scatter_ops.py); batch_gather, which `df.gather(..., batch_dims)`
runs, and its batch_gather_grad (runtime/ops/array_ops.py). Gathered by test_ops.py.

gather_nd and scatter_nd need the last size of their indices while tracing (it fixes the
result's rank), so their rows pass the indices as a static argument (`indices=` in the
variant's keywords: a constant of the traced graph) rather than as a placeholder whose sizes
the graph tests make unknown; test_ops_math.py traces them with unknown leading sizes.
"""
import numpy as np

from opcheck import DATA_DEPENDENT_SIZES, A, NUMERIC, Row, V, adjoint_of, internal_op, idx
import defun as df

i32, i64 = df.int32, df.int64
DATA_DEPENDENT_SIZES.add("segment_sum")  # rows = the largest id + 1


def ints(value, dtype=np.int32):
    return np.asarray(value, dtype)


def _gather_nd_ref(params, indices):
    out = np.empty(indices.shape[:-1] + params.shape[indices.shape[-1]:], params.dtype)
    for pos in np.ndindex(indices.shape[:-1]):
        out[pos] = params[tuple(indices[pos])]
    return out


def _scatter_nd_ref(updates, indices, shape):
    out = np.zeros(shape, updates.dtype)
    for pos in np.ndindex(indices.shape[:-1]):
        out[tuple(indices[pos])] += updates[pos]
    return out


def _segment_sum_ref(data, ids):
    out = np.zeros(((int(ids.max()) + 1) if ids.size else 0,) + data.shape[1:], data.dtype)
    for row, i in enumerate(ids):
        out[i] += data[row]
    return out


def _unsorted_ref(data, ids, num_segments):
    out = np.zeros((num_segments,) + data.shape[ids.ndim:], data.dtype)
    for pos in np.ndindex(ids.shape):
        if ids[pos] >= 0:
            out[ids[pos]] += data[pos]
    return out


def batch_gather_ref(params, indices, axis, batch_dims):
    """gather with batch_dims, one batch element at a time."""
    lead = params.shape[:batch_dims]
    rows = [np.take(params[b], indices[b], axis - batch_dims) for b in np.ndindex(lead)]
    return np.stack(rows).reshape(lead + rows[0].shape) if rows else \
        np.zeros(lead + params.shape[batch_dims:axis] + indices.shape[batch_dims:] + params.shape[axis + 1:],
                 params.dtype)


GATHER_ND = [((3, 2), [[1, 0], [0, 1], [2, 1]]), ((3, 2), [[1], [0], [1]]),
             ((3, 4, 2), [[[0, 3], [2, 0]], [[1, 1], [0, 3]]]),
             ((2, 3), [1, 2]), ((2, 3), np.zeros((2, 0))), ((3, 2), np.zeros((0, 2))), ((2, 3), [[1, 0], [1, 0]])]
SCATTER_ND = [((3,), [[1], [3], [1]], (4,)), ((2, 3), [[0], [2]], (3, 3)), ((2,), [[0, 1], [0, 1]], (2, 2)),
              ((2, 2, 2), [[[0, 0], [1, 1]], [[2, 0], [0, 0]]], (3, 2, 2)), ((0,), np.zeros((0, 1)), (3,)),
              ((2, 2, 3), np.zeros((2, 0)), (2, 3))]

ROWS = [
    Row("gather_nd", lambda p, indices: df.gather_nd(p, indices), _gather_nd_ref,
        [V([A(p)], dict(indices=ints(i, np.int64 if k == 2 else np.int32))) for k, (p, i) in enumerate(GATHER_ND)],
        NUMERIC, also=("gather_nd_grad",), second=True),
    Row("gather_nd_grad", lambda g, p, indices: internal_op("gather_nd_grad")(g, indices, p),
        lambda g, p, indices: adjoint_of(lambda x: _gather_nd_ref(x, indices), p.shape, g),
        [V([A((3,)), A((3, 2))], dict(indices=ints([[1, 0], [0, 1], [1, 0]]))),
         V([A((2, 2)), A((3, 2))], dict(indices=ints([[2], [2]]))),
         V([A((2, 2, 3)), A((2, 3))], dict(indices=ints(np.zeros((2, 0)))))], NUMERIC,
        also=("gather_nd",), second=True),
    Row("scatter_nd", lambda u, indices, shape: df.scatter_nd(indices, u, shape), _scatter_nd_ref,
        [V([A(u)], dict(indices=ints(i), shape=s)) for u, i, s in SCATTER_ND], NUMERIC,
        also=("gather_nd",), second=True),
    Row("segment_sum", df.segment_sum, _segment_sum_ref,
        [V([A((4,)), idx([0, 0, 2, 2])]), V([A((4, 3)), idx([0, 1, 1, 3], i64)]), V([A((2, 2)), idx([1, 1])]),
         V([A((1,)), idx([0])]), V([A((0, 3)), idx(np.zeros(0, np.int32))]), V([A((3, 2, 2)), idx([0, 0, 0])])],
        NUMERIC, also=("gather",), second=True),
    Row("unsorted_segment_sum", df.unsorted_segment_sum, _unsorted_ref,
        [V([A((3,)), idx([2, 0, 2])], dict(num_segments=3)), V([A((4, 2)), idx([1, -1, 0, 1])], dict(num_segments=4)),
         V([A((2, 2, 3)), idx([[0, 1], [1, 0]], i64)], dict(num_segments=2)),
         V([A((2, 3)), idx([[2, 0, 2], [-1, 1, 2]])], dict(num_segments=3)),
         V([A((0, 2)), idx(np.zeros(0, np.int32))], dict(num_segments=2)),
         V([A((2,)), idx([1, 1])], dict(num_segments=3))], NUMERIC, also=("gather",), second=True),
    Row("batch_gather", lambda p, i, axis=None, batch_dims=1: df.gather(p, i, axis, batch_dims),
        lambda p, i, axis=None, batch_dims=1: batch_gather_ref(
            p, i, batch_dims % i.ndim if axis is None else axis % p.ndim, batch_dims % i.ndim),
        [V([A((2, 3)), idx([[1, 1], [0, 2]])], dict(axis=1)), V([A((2, 3, 2)), idx([[1], [0]], i64)]),
         V([A((2, 3, 4)), idx([[3, 0], [1, 1]])], dict(axis=-1)),
         V([A((2, 2, 3)), idx([[[0, 2], [1, 1]], [[1, 0], [2, 2]]])], dict(axis=2, batch_dims=2)),
         V([A((2, 3)), idx([[2], [0]])], dict(batch_dims=-1)), V([A((0, 3)), idx(np.zeros((0, 2), np.int32))])],
        NUMERIC, also=("batch_gather_grad",), second=True),
    Row("batch_gather_grad",
        lambda g, i, p, axis, batch_dims: internal_op("batch_gather_grad")(g, i, p, axis=axis, batch_dims=batch_dims),
        lambda g, i, p, axis, batch_dims: adjoint_of(lambda x: batch_gather_ref(x, i, axis, batch_dims), p.shape, g),
        [V([A((2, 2)), idx([[1, 1], [0, 2]]), A((2, 3))], dict(axis=1, batch_dims=1)),
         V([A((2, 3, 1)), idx([[1], [0]]), A((2, 3, 2))], dict(axis=2, batch_dims=1)),
         V([A((2, 2, 2)), idx([[[0, 2], [1, 1]], [[1, 0], [2, 2]]]), A((2, 2, 3))], dict(axis=2, batch_dims=2))],
        NUMERIC,
        also=("batch_gather",), second=True),
]
