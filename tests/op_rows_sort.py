"""Op table rows: sort, argsort, top_k and their internal take/scatter_along_axis
(runtime/ops/sort_ops.py). Gathered by test_ops.py."""
import numpy as np

import defun as df
from opcheck import A, NUMERIC, Row, V, internal_op, idx

i32, i64 = df.int32, df.int64

TIES = [[3., 1., 3., 2., 1., 3.], [0., 0., -1., 5., 0., 5.]]


def _stable_desc(x, axis):
    """Descending order, ties in index order: a sort by (-value, index), done by Python."""
    moved = np.moveaxis(x, axis, -1)
    out = np.empty(moved.shape, np.int64)
    for lane in np.ndindex(moved.shape[:-1]):
        row = moved[lane].tolist()
        out[lane] = sorted(range(len(row)), key=lambda i: (-row[i], i))
    return np.moveaxis(out, -1, axis)


def _argsort_ref(x, axis=-1, direction="ASCENDING"):
    if direction == "ASCENDING":
        return np.argsort(x, axis=axis, kind="stable").astype(np.int32)
    return _stable_desc(x, axis).astype(np.int32)


def _sort_ref(x, axis=-1, direction="ASCENDING"):
    return np.take_along_axis(x, _argsort_ref(x, axis, direction), axis)


def _top_k_ref(x, k=1, sorted=True):
    order = _stable_desc(x, -1)[..., :k].astype(np.int32)
    return [np.take_along_axis(x, order, -1), order]


def _scatter_along_ref(u, indices, like, axis):
    out = np.zeros(like.shape, u.dtype)
    for pos in np.ndindex(indices.shape):
        at = list(pos)
        at[axis] = indices[pos]
        out[tuple(at)] += u[pos]
    return out


def _sort_variants():
    return [V([A((5,), "distinct")]), V([A((2, 3), "distinct")], dict(axis=0)),
            V([A((2, 3, 4), "distinct")], dict(axis=1, direction="DESCENDING")),
            V([A((2, 4), "distinct")], dict(direction="descending")),
            V([A(value=TIES)], dict(direction="DESCENDING"), grad=False), V([A(value=TIES)], dict(axis=-1), grad=False),
            V([A((0, 3))], dict(axis=0)), V([A((3, 1), "distinct")], dict(axis=-1))]


ROWS = [
    Row("sort", df.sort, _sort_ref, _sort_variants(), NUMERIC, also=("argsort", "scatter_along_axis"), second=True),
    Row("argsort", df.argsort, _argsort_ref, _sort_variants(), NUMERIC, grad=False),
    Row("top_k", df.top_k, _top_k_ref,
        [V([A((5,), "distinct")], dict(k=2)), V([A((2, 4), "distinct")], dict(k=4)),
         V([A((2, 3, 4), "distinct")], dict(k=1)), V([A((3,), "distinct")], dict(k=0)),
         V([A(value=TIES)], dict(k=4), grad=False), V([A(value=[[1., 1., 1.]])], dict(k=2, sorted=False), grad=False),
         V([A((0, 3))], dict(k=2))], NUMERIC, also=("scatter_along_axis",), second=True),
    Row("take_along_axis", internal_op("take_along_axis"), lambda x, i, axis: np.take_along_axis(x, i, axis),
        [V([A((5,)), idx([4, 0, 4])], dict(axis=0)), V([A((2, 3)), idx([[2, 0], [1, 1]], i64)], dict(axis=1)),
         V([A((3, 2)), idx([[0, 1], [2, 2], [1, 0], [0, 0]])], dict(axis=-2))], NUMERIC,
        also=("scatter_along_axis",), second=True),
    Row("scatter_along_axis", internal_op("scatter_along_axis"), _scatter_along_ref,
        [V([A((3,)), idx([4, 0, 4]), A((5,))], dict(axis=0)),
         V([A((2, 2)), idx([[2, 0], [1, 1]], i64), A((2, 3))], dict(axis=1)),
         V([A((4, 2)), idx([[0, 1], [2, 2], [1, 0], [0, 0]]), A((3, 2))], dict(axis=-2))], NUMERIC,
        also=("take_along_axis",), second=True),
]

# Ops API.md marks (nd).
API_ND = {"argsort"}
