"""Matrix factorizations (`df.linalg`'s cholesky, eigh, svd, qr): declarations and public
functions, batched over leading dims, with linalg_ops.py's checks, failures and helpers.

Gradients are the published reverse-mode rules, written with ops (so they trace and have
their own gradients):
  - cholesky: Murray (2016), "Differentiation of the Cholesky decomposition";
  - eigh: e.g. Giles (2008), "An extended collection of matrix derivative results", for
    distinct eigenvalues;
  - svd: Townsend (2016), "Differentiating the singular value decomposition", for distinct
    non-zero singular values, reduced factors;
  - qr: Walter and Lehmann (2018) / Liao et al. (2019) for the reduced factorization, tall
    and wide.
`cholesky` and `eigh` read only the lower triangle of their input (as LAPACK and TF do), so
their gradients are the true derivatives of that: zero above the diagonal. Along symmetric
perturbations they agree with the symmetric convention (TF's cholesky gradient).
"""
import numpy as np

from defun.runtime import batching as bt
from defun.runtime import errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops import _onnx_linalg as la
from defun.runtime.ops import array_ops as arr
from defun.runtime.ops import math_ops as m
from defun.runtime.ops.linalg_ops import (_check_dtype, _col, _cubic, _failure, _lower_part, _matrix, _min,
                                          _off_diagonal_reciprocal, _row, _square_infer, _t, band_part, diag,
                                          triangular_solve)
from defun.runtime.registry import Cost, register

__all__ = []  # the public functions live in the `df.linalg` namespace (defun/linalg.py)

_EMPTY = {}
_LinAlgError = np.linalg.LinAlgError


# ------------------------------------------------------------------ cholesky
def _cholesky_kernel(a):
    _matrix("cholesky", a.shape, square=True)
    try:
        return np.linalg.cholesky(a)
    except _LinAlgError:
        raise _failure("cholesky", a, np.linalg.cholesky,
                       "is not symmetric positive definite (only its lower triangle is read)",
                       "make it positive definite, e.g. add a small multiple of the identity "
                       "(jitter) to the diagonal") from None


def _cholesky_grad(op, g):
    low = op.outputs[0]
    # S = L^-T phi(L^T g) L^-1 with phi: the lower triangle, diagonal halved (Murray 2016);
    # the gradient w.r.t. the symmetric input is (S + S^T) / 2.
    middle = m.matmul(low, g, transpose_a=True)
    phi = m.subtract(band_part(middle, -1, 0), m.multiply(band_part(middle, 0, 0), 0.5))
    left = triangular_solve(low, phi, lower=True, adjoint=True)                   # L^-T phi
    s = _t(triangular_solve(low, _t(left), lower=True, adjoint=True))            # (L^-T phi) L^-1
    return [_lower_part(s)]   # (_lower_part reads only s + s^T and the diagonal of s)


_CHOLESKY = register(
    name="cholesky",
    kernel=_cholesky_kernel,
    infer=_square_infer("cholesky", lambda s: [s]),
    grad=_cholesky_grad,
    num_inputs=1,
    attrs={},
    defaults={},
    kinds="f",
    onnx=lambda e, node, ins: la.cholesky(e, ins[0], len(node.inputs[0].shape), node.outputs[0].dtype),
    batch=bt.leading,
    cost=_cubic(1),
)


def cholesky(input, name=None):
    """The lower-triangular L with L @ L^T == input, for symmetric positive definite matrices
    (only the lower triangle of `input` is read). A matrix that is not positive definite
    raises InvalidArgumentError naming `cholesky`."""
    return run_op(_CHOLESKY, (input,), _EMPTY, name)


# ------------------------------------------------------------------ eigh
def _eigh_kernel(a):
    _matrix("eigh", a.shape, square=True)
    try:
        e, v = np.linalg.eigh(a)
    except _LinAlgError:
        raise _failure("eigh", a, np.linalg.eigh, "did not converge",
                       "check the input for NaN or Inf") from None
    return e, v


def _eigh_grad(op, ge, gv):
    e, v = op.outputs
    if ge is None and gv is None:
        return [None]
    terms = [] if ge is None else [diag(ge)]
    if gv is not None:   # F o (V^T gV), F_ij = 1 / (e_j - e_i)
        terms.append(m.multiply(_off_diagonal_reciprocal(e), m.matmul(v, gv, transpose_a=True)))
    inner = terms[0] if len(terms) == 1 else m.add(terms[0], terms[1])
    g = m.matmul(v, m.matmul(inner, v, transpose_b=True))
    return [_lower_part(g)]


_EIGH = register(
    name="eigh",
    kernel=_eigh_kernel,
    infer=_square_infer("eigh", lambda s: [s[:-1], s]),
    grad=_eigh_grad,
    num_inputs=1,
    attrs={},
    defaults={},
    num_outputs=2,
    none_grads=True,
    kinds="f",
    batch=bt.leading,
    cost=_cubic(10),
)


def eigh(tensor, name=None):
    """`(eigenvalues, eigenvectors)` of symmetric matrices, eigenvalues ascending, eigenvectors
    as columns (only the lower triangle is read). Gradients assume distinct eigenvalues."""
    return run_op(_EIGH, (tensor,), _EMPTY, name)


# ------------------------------------------------------------------ svd
def _svd_kernel(a, full_matrices, compute_uv):
    _matrix("svd", a.shape)
    try:
        if not compute_uv:
            return (np.linalg.svd(a, full_matrices=full_matrices, compute_uv=False),)
        u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    except _LinAlgError:
        raise _failure("svd", a, np.linalg.svd, "did not converge",
                       "check the input for NaN or Inf") from None
    return s, u, vh.swapaxes(-1, -2)


def _svd_infer(shapes, dts, attrs):
    _check_dtype("svd", dts[0])
    s = tuple(shapes[0])
    rows, cols = _matrix("svd", s)
    k = _min(rows, cols)
    out = [(s[:-2] + (k,), dts[0])]
    if attrs.get("compute_uv", True):
        full = attrs.get("full_matrices", False)
        out.append((s[:-2] + (rows, rows if full else k), dts[0]))
        out.append((s[:-2] + (cols, cols if full else k), dts[0]))
    return out


def _svd_grad(op, *grads):
    a = op.inputs[0]
    rows, cols = tuple(a.shape)[-2:]
    gs, gu, gv = grads if len(grads) == 3 else (grads[0], None, None)
    if gs is None and gu is None and gv is None:
        return [None]
    full = op.attrs.get("full_matrices", False) and (rows is None or rows != cols)
    if full and (gu is not None or gv is not None):
        raise errors.UnimplementedError(
            f"svd: the gradient of u and v with full_matrices=True is only defined for square "
            f"matrices (got shape {shape_rules.shape_str(a.shape)}); use full_matrices=False")
    if full or not op.attrs.get("compute_uv", True):
        s, u, v = svd(a, full_matrices=False, compute_uv=True)   # the reduced factors, recomputed
    else:
        s, u, v = op.outputs
    # Townsend (2016): dA = U [(F o (U^T gU - gU^T U)) S + diag(gS) + S (F o (V^T gV - gV^T V))] V^T
    #                       + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T),  F_ij = 1/(s_j^2 - s_i^2)
    terms = [] if gs is None else [diag(gs)]
    extra = []
    if gu is not None or gv is not None:
        f = _off_diagonal_reciprocal(m.square(s))
    if gu is not None:
        utgu = m.matmul(u, gu, transpose_a=True)
        terms.append(m.multiply(m.multiply(f, m.subtract(utgu, _t(utgu))), _row(s)))
        if rows is None or cols is None or rows > cols:   # (I - U U^T) vanishes when U is square
            extra.append(m.matmul(m.divide(m.subtract(gu, m.matmul(u, utgu)), _row(s)), v,
                                  transpose_b=True))
    if gv is not None:
        vtgv = m.matmul(v, gv, transpose_a=True)
        terms.append(m.multiply(_col(s), m.multiply(f, m.subtract(vtgv, _t(vtgv)))))
        if rows is None or cols is None or cols > rows:   # (I - V V^T) vanishes when V is square
            extra.append(m.matmul(u, m.divide(_t(m.subtract(gv, m.matmul(v, vtgv))), _col(s))))
    inner = terms[0] if len(terms) == 1 else m.add_n(terms)
    da = m.matmul(u, m.matmul(inner, v, transpose_b=True))
    return [m.add_n([da] + extra) if extra else da]


def _svd_outputs(attrs, n):
    return 3 if attrs.get("compute_uv", True) else 1


_SVD = register(
    name="svd",
    kernel=_svd_kernel,
    infer=_svd_infer,
    grad=_svd_grad,
    num_inputs=1,
    attrs={"full_matrices": "bool", "compute_uv": "bool"},
    defaults={"full_matrices": False, "compute_uv": True},
    num_outputs=_svd_outputs,
    none_grads=True,
    kinds="f",
    batch=bt.leading,
    cost=_cubic(10),
)


def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """Singular value decomposition, TF's order: `s, u, v = df.linalg.svd(x)` with
    `x == u @ diag(s) @ v^T`, s descending; `compute_uv=False` returns s alone. Gradients
    assume distinct, non-zero singular values (and full_matrices=False unless square)."""
    out = run_op(_SVD, (tensor,), {"full_matrices": _args.bool_arg("svd", full_matrices, "full_matrices"),
                                   "compute_uv": _args.bool_arg("svd", compute_uv, "compute_uv")},
                 name)
    return out if compute_uv else out[0]


# ------------------------------------------------------------------ qr
def _qr_kernel(a, full_matrices):
    _matrix("qr", a.shape)
    q, r = np.linalg.qr(a, mode="complete" if full_matrices else "reduced")
    return q, r


def _qr_infer(shapes, dts, attrs):
    _check_dtype("qr", dts[0])
    s = tuple(shapes[0])
    rows, cols = _matrix("qr", s)
    k = rows if attrs.get("full_matrices", False) else _min(rows, cols)
    return [(s[:-2] + (rows, k), dts[0]), (s[:-2] + (k, cols), dts[0])]


def _qr_square_grad(q, r, gq, gr):
    """Gradient of A = Q R for R square (k x k): (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q,
    copyltu(M) the symmetric matrix with M's lower triangle."""
    mm = m.subtract(m.matmul(r, gr, transpose_b=True), m.matmul(gq, q, transpose_a=True))
    low = band_part(mm, -1, 0)
    copyltu = m.add(low, _t(m.subtract(low, band_part(mm, 0, 0))))
    b = m.add(gq, m.matmul(q, copyltu))
    return _t(triangular_solve(r, _t(b), lower=False))    # b R^-T


def _qr_grad(op, gq, gr):
    a = op.inputs[0]
    q, r = op.outputs
    rows, cols = tuple(a.shape)[-2:]
    if op.attrs.get("full_matrices", False) and (rows is None or cols is None or rows > cols):
        raise errors.UnimplementedError(
            f"qr: the gradient with full_matrices=True is only defined when rows <= columns "
            f"(got shape {shape_rules.shape_str(a.shape)}); use full_matrices=False")
    if rows is not None and cols is not None:
        if rows >= cols:
            return [_qr_square_grad(q, r, gq, gr)]
        # wide: A = [X | Y], R = [U | V], X = Q U, Y = Q V
        y, u, gu, gv = a[..., :, rows:], r[..., :, :rows], gr[..., :, :rows], gr[..., :, rows:]
        dx = _qr_square_grad(q, u, m.add(gq, m.matmul(y, gv, transpose_b=True)), gu)
        return [arr.concat([dx, m.matmul(q, gv)], -1)]
    # sizes unknown while tracing: the same split written with masks. P (N x K) has ones on
    # its diagonal, so A P = X, R P = U; C = I - P P^T keeps the columns of Y (none when tall).
    p = band_part(arr.ones_like(_t(r)), 0, 0)
    c = m.subtract(diag(arr.ones_like(m.reduce_sum(r, axis=-2))), m.matmul(p, p, transpose_b=True))
    gy = m.matmul(m.matmul(a, c), gr, transpose_b=True)                         # Y gV^T
    dx = _qr_square_grad(q, m.matmul(r, p), m.add(gq, gy), m.matmul(gr, p))
    return [m.add(m.matmul(dx, p, transpose_b=True), m.matmul(q, m.matmul(gr, c)))]


_QR = register(
    name="qr",
    kernel=_qr_kernel,
    infer=_qr_infer,
    grad=_qr_grad,
    num_inputs=1,
    attrs={"full_matrices": "bool"},
    defaults={"full_matrices": False},
    num_outputs=2,
    kinds="f",
    onnx=lambda e, node, ins: la.qr(e, ins[0], len(node.inputs[0].shape), node.inputs[0].dtype,
        node.attrs["full_matrices"]),
    batch=bt.leading,
    cost=Cost(scratch=0.6, work=_cubic(4).work),
)


def qr(input, full_matrices=False, name=None):
    """`(q, r)` with input == q @ r, q with orthonormal columns, r upper triangular; reduced
    (q: (..., M, K), r: (..., K, N), K = min(M, N)) unless `full_matrices`."""
    return run_op(_QR, (input,), {"full_matrices": _args.bool_arg("qr", full_matrices, "full_matrices")}, name)
