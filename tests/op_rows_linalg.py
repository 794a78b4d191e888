"""Op-table rows of df.linalg (issue 15), on matrices built to keep every check meaningful:
well-conditioned (inv, solve, det), symmetric positive definite (cholesky), symmetric with
distinct eigenvalues (eigh), distinct singular values (svd), several batch shapes each.

cholesky and eigh read only the lower triangle, so their gradients are zero above the
diagonal; the rows check that against finite differences of the raw input (where moving an
upper entry changes nothing), and also through `symmetrize=True`, f(a) = op((a + a^T) / 2),
where every perturbation stays symmetric.

trace and matrix_transpose are composites of other ops: tests/test_linalg.py.
"""
import numpy as np

import defun as df
from opcheck import A, FLOATS, NUMERIC, Row, V, adjoint_of, internal_op

_rng = np.random.default_rng(15)


def _normal(shape):
    return _rng.normal(size=shape)


def well_conditioned(*shape):
    """Random matrices near 2 I: condition numbers of a few units."""
    n = shape[-1]
    return A(value=0.4 * _normal(shape) + 2.0 * np.eye(n))


def _orthogonal(shape):
    q, _ = np.linalg.qr(_normal(shape))
    return q


def spd(*shape):
    """Symmetric positive definite: B B^T / n + I/2."""
    b = _normal(shape)
    return A(value=b @ np.swapaxes(b, -1, -2) / shape[-1] + 0.5 * np.eye(shape[-1]))


def symmetric_distinct(*shape):
    """Q diag(e) Q^T with eigenvalues at least 0.6 apart."""
    n = shape[-1]
    q = _orthogonal(shape)
    e = np.arange(n) * 0.8 - 1.0 + _rng.uniform(-0.1, 0.1, size=shape[:-1])
    return A(value=(q * e[..., None, :]) @ np.swapaxes(q, -1, -2))


def distinct_singular(*shape):
    """U diag(s) V^T with singular values 1, 1.7, 2.4, ... (distinct, away from 0)."""
    m, n = shape[-2:]
    k = min(m, n)
    u = _orthogonal(shape[:-2] + (m, k))
    v = _orthogonal(shape[:-2] + (n, k))
    s = 1.0 + 0.7 * np.arange(k)[::-1] + _rng.uniform(-0.05, 0.05, size=shape[:-2] + (k,))
    return A(value=(u * s[..., None, :]) @ np.swapaxes(v, -1, -2))


def _t(x):
    return np.swapaxes(x, -1, -2)


def _sym(a, symmetrize):
    return (a + df.linalg.matrix_transpose(a)) * 0.5 if symmetrize else a


def _sym_np(a, symmetrize):
    return (a + _t(a)) * a.dtype.type(0.5) if symmetrize else a


def _batched(a, b):
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])


def _solve_ref(a, b, adjoint=False):
    a, b = _batched(a, b)
    return np.linalg.solve(_t(a) if adjoint else a, b)


def _triangular_ref(a, b, lower=True, adjoint=False):
    """scipy's (unbatched) solve_triangular, one matrix at a time: an independent reference."""
    import scipy.linalg   # (a test extra; imported here so the rest of the table needs only numpy)
    a, b = _batched(a, b)
    out = np.empty(b.shape, b.dtype)
    for idx in np.ndindex(a.shape[:-2]):
        out[idx] = scipy.linalg.solve_triangular(a[idx], b[idx], lower=lower, trans=1 if adjoint else 0)
    return out


def _svd_ref(a, full_matrices=False, compute_uv=True):
    if not compute_uv:
        return np.linalg.svd(a, compute_uv=False)
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    return [s, u, _t(vh)]


def _band_ref(x, num_lower, num_upper):
    i, j = np.indices(x.shape[-2:])
    keep = ((num_lower < 0) | (i - j <= num_lower)) & ((num_upper < 0) | (j - i <= num_upper))
    return np.where(keep, x, np.zeros((), x.dtype))


def _adjugate_ref(a):
    """adj(A) = C^T by the definition: C[i, j] = (-1)^(i + j) det(A without row i, column j)."""
    n = a.shape[-1]
    out = np.empty(a.shape, a.dtype)
    for idx in np.ndindex(a.shape[:-2]):
        m = a[idx].astype(np.float64)
        for i in range(n):
            for j in range(n):
                minor = np.delete(np.delete(m, i, 0), j, 1)
                out[idx + (j, i)] = (-1) ** (i + j) * (np.linalg.det(minor) if n > 1 else 1.0)
    return out


def _diag_ref(v):
    out = np.zeros(v.shape + v.shape[-1:], v.dtype)
    for idx in np.ndindex(v.shape[:-1]):
        out[idx] = np.diag(v[idx])
    return out


ROWS = [
    Row("inv", df.linalg.inv, np.linalg.inv,
        [V([well_conditioned(3, 3)]), V([well_conditioned(2, 4, 4)]), V([well_conditioned(2, 1, 2, 2)]),
         V([well_conditioned(1, 1)])], second=True),
    Row("solve", df.linalg.solve, _solve_ref,
        [V([well_conditioned(3, 3), A((3, 2))]), V([well_conditioned(2, 3, 3), A((2, 3, 1))]),
         V([well_conditioned(2, 3, 3), A((3, 4))]), V([well_conditioned(3, 3), A((2, 3, 2))]),
         V([well_conditioned(3, 3), A((3, 2))], dict(adjoint=True)),
         V([well_conditioned(2, 2, 2), A((2, 2))], dict(adjoint=True))], second=True),
    Row("cholesky", lambda a, symmetrize=False: df.linalg.cholesky(_sym(a, symmetrize)),
        lambda a, symmetrize=False: np.linalg.cholesky(_sym_np(a, symmetrize)),
        [V([spd(3, 3)]), V([spd(2, 3, 3)], dict(symmetrize=True)), V([spd(2, 1, 4, 4)]),
         V([spd(4, 4)], dict(symmetrize=True)), V([spd(1, 1)])], second=True),
    Row("triangular_solve", df.linalg.triangular_solve, _triangular_ref,
        [V([well_conditioned(3, 3), A((3, 2))]),
         V([well_conditioned(2, 3, 3), A((2, 3, 1))], dict(lower=False)),
         V([well_conditioned(3, 3), A((2, 3, 2))], dict(adjoint=True)),
         V([well_conditioned(2, 4, 4), A((4, 3))], dict(lower=False, adjoint=True))], second=True),
    Row("det", df.linalg.det, np.linalg.det,
        [V([well_conditioned(3, 3)]), V([well_conditioned(2, 3, 3)]), V([well_conditioned(2, 2, 2, 2)]),
         V([well_conditioned(1, 1)]), V([A(value=[[1., 2.], [2., 4.]])], grad=False)], second=True,
        also=("adjugate",)),
    Row("slogdet", df.linalg.slogdet, lambda a: list(np.linalg.slogdet(a)),
        [V([well_conditioned(3, 3)]), V([well_conditioned(2, 3, 3)]),
         V([A(value=[[0.5, 2.], [1.5, 0.3]])]), V([A(value=[[1., 2.], [2., 4.]])], grad=False)], second=True),
    Row("eigh", lambda a, symmetrize=False: df.linalg.eigh(_sym(a, symmetrize)),
        lambda a, symmetrize=False: list(np.linalg.eigh(_sym_np(a, symmetrize))),
        [V([symmetric_distinct(3, 3)]), V([symmetric_distinct(2, 3, 3)], dict(symmetrize=True)),
         V([symmetric_distinct(2, 1, 4, 4)]), V([symmetric_distinct(4, 4)], dict(symmetrize=True)),
         V([symmetric_distinct(1, 1)])], second=True, tol=(1e-4, 1e-5)),
    Row("svd", df.linalg.svd, _svd_ref,
        [V([distinct_singular(3, 3)]), V([distinct_singular(4, 2)]), V([distinct_singular(2, 4)]),
         V([distinct_singular(2, 3, 2)]), V([distinct_singular(2, 2, 3)]),
         V([distinct_singular(3, 2)], dict(compute_uv=False)),
         V([distinct_singular(2, 2, 4)], dict(compute_uv=False)),
         V([distinct_singular(4, 2)], dict(full_matrices=True), grad=False),
         V([distinct_singular(3, 3)], dict(full_matrices=True), grad=False)], second=True, tol=(1e-4, 1e-5)),
    Row("qr", df.linalg.qr, lambda a, full_matrices=False: list(np.linalg.qr(
        a, mode="complete" if full_matrices else "reduced")),
        [V([well_conditioned(3, 3)]), V([A((4, 2))]), V([A((2, 4))]), V([A((2, 3, 2))]), V([A((2, 2, 3))]),
         V([A((4, 2))], dict(full_matrices=True), grad=False),
         V([A((2, 3))], dict(full_matrices=True), grad=False)], second=True, tol=(1e-4, 1e-5)),
    Row("diag", df.linalg.diag, _diag_ref, [V([A((3,))]), V([A((2, 3))]), V([A((1,))]), V([A((2, 1, 2))])],
        NUMERIC, second=True),
    Row("diag_part", df.linalg.diag_part, lambda a: np.diagonal(a, axis1=-2, axis2=-1).copy(),
        [V([A((3, 3))]), V([A((2, 3, 4))]), V([A((4, 2))]), V([A((2, 1, 2, 2))])], NUMERIC,
        also=("diag_part_grad", "diag"), second=True),
    Row("diag_part_grad", internal_op("diag_part_grad"),
        lambda g, like: adjoint_of(lambda x: np.diagonal(x, axis1=-2, axis2=-1), like.shape, g),
        [V([A((3,)), A((3, 4))]), V([A((2, 2)), A((2, 2, 3))]), V([A((2,)), A((2, 2))])], NUMERIC,
        also=("diag_part",), second=True),
    Row("band_part", df.linalg.band_part, _band_ref,
        [V([A((3, 4))], dict(num_lower=-1, num_upper=0)), V([A((2, 3, 3))], dict(num_lower=0, num_upper=0)),
         V([A((4, 3))], dict(num_lower=1, num_upper=-1)), V([A((3, 3))], dict(num_lower=-1, num_upper=-1)),
         V([A((2, 3, 3))], dict(num_lower=0, num_upper=1)),
         V([A((3, 2), "bool")], dict(num_lower=0, num_upper=0), dtypes=(df.bool,))],
        NUMERIC, second=True),
    # det's gradient helper: the cofactors, singular matrices too (their second order needs inv)
    Row("adjugate", internal_op("adjugate"), _adjugate_ref,
        [V([well_conditioned(3, 3)]), V([well_conditioned(2, 3, 3)]), V([well_conditioned(1, 1)]),
         V([A(value=[[1., 2.], [2., 4.]])], grad=False),
         V([A(value=[[1., 2., 3.], [4., 5., 6.], [7., 8., 9.]])], grad=False),
         V([A(value=np.zeros((2, 3, 3)))], grad=False)], second=True),
]

# float16 is not a LAPACK type: the linalg ops refuse it (test_linalg.py), so rows use FLOATS.
assert all(r.dtypes == FLOATS for r in ROWS[:9])
