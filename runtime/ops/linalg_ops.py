"""Linear algebra (`df.linalg`): declarations and public functions, batched over leading dims.

TensorFlow's names and semantics (`tf.linalg.*`), numpy (LAPACK) kernels. Inputs are float32
or float64 matrices `(..., M, N)`; a numerical failure (a singular matrix, one that is not
positive definite, no convergence) raises `InvalidArgumentError` naming the op and the batch
index, never numpy's LinAlgError. The module is long because it holds all its ops with
their gradient rules, which share the batching, error and symmetrizing helpers at its top.

Gradients are the published reverse-mode rules, written with ops (so they trace and have
their own gradients):
  - inv, solve, triangular_solve, det, slogdet: the matrix-calculus identities; det's is
    g adj(A)^T (the internal op `adjugate`, by the SVD), so a singular A has one too;
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
import functools

import math

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops import _onnx_linalg as la
from defun.runtime.ops._onnx import diag_part_of, scatter_adjoint, shape_of
from defun.runtime.ops import array_ops as arr
from defun.runtime.ops import math_ops as m
from defun.runtime.ops.index_ops import _rank
from defun.runtime.registry import Cost, register
from defun.runtime import batching as bt

__all__ = []  # the public functions live in the `df.linalg` namespace (defun/linalg.py)

_EMPTY = {}
_LinAlgError = np.linalg.LinAlgError


# ---------------------------------------------------------------------------------------
# Shape and dtype checks shared by inference (static shapes, None = unknown) and kernels

# inv, solve and det also take complex matrices (issue 22), and so does adjugate (det's
# gradient); the factorizations do not
_COMPLEX_OK = frozenset(("inv", "solve", "det", "adjugate"))


def _check_dtype(op_name, dt):
    if dt not in (dtypes.float32, dtypes.float64) and not (
            op_name in _COMPLEX_OK and dt in (dtypes.complex64, dtypes.complex128)):
        also = " or complex64/complex128" if op_name in _COMPLEX_OK else ""
        raise errors.InvalidArgumentError(
            f"{op_name}: unsupported input dtype {dt.name} (expected float32 or float64{also}); use df.cast")


def _matrix(op_name, shape, square=False, what="input"):
    """Check a static (or actual) shape holds matrices; returns (rows, cols)."""
    if len(shape) < 2:
        raise errors.InvalidArgumentError(
            f"{op_name}: {what} must be a matrix or a batch of matrices (rank >= 2), got shape "
            f"{shape_rules.shape_str(shape)}")
    rows, cols = shape[-2], shape[-1]
    if square and rows is not None and cols is not None and rows != cols:
        raise errors.InvalidArgumentError(
            f"{op_name}: {what} must be a square matrix (or a batch of them), got shape "
            f"{shape_rules.shape_str(shape)}")
    return rows, cols


def _square_infer(op_name, out):
    """Inference of a one-input op on square matrices; `out(shape)` gives the output shapes."""
    def infer(shapes, dts, attrs):
        _check_dtype(op_name, dts[0])
        _matrix(op_name, shapes[0], square=True)
        return [(tuple(s), dts[0]) for s in out(tuple(shapes[0]))]
    return infer


def _solve_shape(op_name, a, b):
    """The shape of X solving (..., M, M) systems for (..., M, K) right-hand sides."""
    n, _ = _matrix(op_name, a, square=True, what="matrix")
    rows, k = _matrix(op_name, b, what="rhs")
    if n is not None and rows is not None and n != rows:
        raise errors.InvalidArgumentError(
            f"{op_name}: matrix {shape_rules.shape_str(a)} and rhs {shape_rules.shape_str(b)} disagree: rhs "
            f"must have as many rows as the matrix ({n}), got {rows}")
    return shape_rules.broadcast_shapes(op_name, a[:-2], b[:-2]) + (n if n is not None else rows, k)


def _solve_infer(op_name):
    def infer(shapes, dts, attrs):
        shape_rules.check_same(op_name, dts)
        _check_dtype(op_name, dts[0])
        return [(_solve_shape(op_name, tuple(shapes[0]), tuple(shapes[1])), dts[0])]
    return infer


def _solve_operands(op_name, a, b):
    """A kernel's operands checked, their batch dimensions broadcast together (views)."""
    batch = _solve_shape(op_name, a.shape, b.shape)[:-2]
    if a.shape[:-2] != batch:
        a = np.broadcast_to(a, batch + a.shape[-2:])
    if b.shape[:-2] != batch:
        b = np.broadcast_to(b, batch + b.shape[-2:])
    return a, b


def _min(a, b):
    return None if a is None or b is None else min(a, b)


def _failure(op_name, a, fn, problem, fix):
    """The error for a LAPACK failure of `fn` on `a`: names the first failing matrix of a batch
    (found again one by one: only on this failure path)."""
    where = ""
    if a.ndim > 2:
        for idx in np.ndindex(a.shape[:-2]):
            try:
                fn(a[idx])
            except _LinAlgError:
                where = f" at batch index {idx}"
                break
    return errors.InvalidArgumentError(f"{op_name}: the matrix{where} {problem}; {fix}")


_SINGULAR = "is singular (not invertible)"
_SINGULAR_FIX = "check the input, or regularize it (add a small multiple of the identity)"


# ---------------------------------------------------------------------------------------
# Helpers of the gradients, in ops

def matrix_transpose(a, name=None):
    """Swap the last two dimensions: `df.linalg.matrix_transpose(x)` has shape (..., N, M)."""
    rank = _rank(a)
    if rank < 2:
        raise errors.InvalidArgumentError(
            f"matrix_transpose: input must have rank >= 2, got rank {rank}")
    return arr.transpose(a, tuple(range(rank - 2)) + (rank - 1, rank - 2), name=name)


def _t(a):
    return matrix_transpose(a)


def _col(x):
    """(..., n) -> (..., n, 1): broadcasts along columns."""
    return arr.expand_dims(x, -1)


def _row(x):
    """(..., n) -> (..., 1, n): broadcasts along rows."""
    return arr.expand_dims(x, -2)


def _lower_part(g):
    """The gradient w.r.t. an input whose lower triangle alone is read, from the gradient `g`
    w.r.t. the symmetric matrix that triangle stands for: tril(g + g^T) - diag(g)."""
    return m.subtract(band_part(m.add(g, _t(g)), -1, 0), band_part(g, 0, 0))


def _off_diagonal_reciprocal(values):
    """F[..., i, j] = 1 / (values_j - values_i) off the diagonal, 0 on it. The diagonal is
    shifted to 1 before dividing, so no inf appears (not even in second derivatives)."""
    eye = diag(arr.ones_like(values))
    return m.subtract(m.divide(1.0, m.add(m.subtract(_row(values), _col(values)), eye)), eye)


# ------------------------------------------------------------------ inv
def _inv_kernel(a):
    _matrix("inv", a.shape, square=True)
    try:
        return np.linalg.inv(a)
    except _LinAlgError:
        raise _failure("inv", a, np.linalg.inv, _SINGULAR, _SINGULAR_FIX) from None


def _inv_grad(op, g):
    y = m.conj(op.outputs[0])   # d(A^-1) = -A^-1 dA A^-1 (complex: the adjoints, A^-H)
    return [m.negative(m.matmul(y, m.matmul(g, y, transpose_b=True), transpose_a=True))]


def _inv_onnx(e, node, ins):
    a = node.inputs[0]
    n = e.op("Squeeze", e.dim(ins[0], -1 % len(a.shape), a.shape), e.ints([0]))
    eye = e.op("Expand", e.where(la.eye_mask(e, n, n), e.scalar(1, a.dtype), e.scalar(0, a.dtype), a.dtype),
               e.op("Shape", ins[0]))
    return la.solve(e, ins[0], eye, len(a.shape), len(a.shape), a.dtype)


def _cubic(factor):
    """The Cost of a factorization: `factor` operations per m n min(m, n) of each matrix."""
    def work(shapes, out_shapes, attrs):
        s = shapes[0]
        if len(s) < 2:
            return 0
        return factor * math.prod(s[:-2]) * s[-2] * s[-1] * min(s[-2], s[-1])
    return Cost(work=work)


_INV = register("inv", _inv_kernel, _square_infer("inv", lambda s: [s]), _inv_grad,
                num_inputs=1, attrs={}, defaults={}, kinds="fc", onnx=_inv_onnx, batch=bt.leading, cost=_cubic(2))


def inv(input, name=None):
    """The inverse of each square matrix: `df.linalg.inv(a) @ a` is the identity.

    Raises InvalidArgumentError naming `inv` (and the batch index) for a singular matrix.
    """
    return run_op(_INV, (input,), _EMPTY, name)


# ------------------------------------------------------------------ solve
def _solve_kernel(a, b, adjoint):
    a, b = _solve_operands("solve", a, b)
    if adjoint:   # the conjugate transpose, as TF's adjoint
        a = a.swapaxes(-1, -2).conj() if a.dtype.kind == "c" else a.swapaxes(-1, -2)
    try:
        return np.linalg.solve(a, b)
    except _LinAlgError:
        raise _failure("solve", a, np.linalg.inv, _SINGULAR, _SINGULAR_FIX) from None


def _solve_grad(op, g):
    a, b = op.inputs
    x = op.outputs[0]
    adjoint = op.attrs["adjoint"]
    db = solve(a, g, adjoint=not adjoint)     # A^-H g (A^-1 g for the adjoint system)
    da = m.negative(m.matmul(x, m.conj(db), transpose_b=True) if adjoint else
                    m.matmul(db, m.conj(x), transpose_b=True))
    return [m.unbroadcast(da, a), m.unbroadcast(db, b)]


_SOLVE = register("solve", _solve_kernel, _solve_infer("solve"), _solve_grad, num_inputs=2,
                  attrs={"adjoint": "bool"}, defaults={"adjoint": False}, same_dtype=(0, 1), kinds="fc",
                  cost=_cubic(2), onnx=lambda e, node, ins: la.solve(
                      e, _t_onnx(e, ins[0], node.inputs[0]) if node.attrs["adjoint"] else ins[0], ins[1],
                      len(node.inputs[0].shape), len(node.inputs[1].shape), node.outputs[0].dtype), batch=bt.elementwise)


def solve(matrix, rhs, adjoint=False, name=None):
    """X with `matrix @ X == rhs` (`matrix^T @ X == rhs` if `adjoint`); matrix (..., M, M),
    rhs (..., M, K), batch dimensions broadcast."""
    return run_op(_SOLVE, (matrix, rhs), {"adjoint": _args.bool_arg("solve", adjoint, "adjoint")}, name)


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


_CHOLESKY = register("cholesky", _cholesky_kernel, _square_infer("cholesky", lambda s: [s]),
                     _cholesky_grad, num_inputs=1, attrs={}, defaults={}, kinds="f", cost=_cubic(1),
                     onnx=lambda e, node, ins: la.cholesky(e, ins[0], len(node.inputs[0].shape), node.outputs[0].dtype), batch=bt.leading)


def cholesky(input, name=None):
    """The lower-triangular L with L @ L^T == input, for symmetric positive definite matrices
    (only the lower triangle of `input` is read). A matrix that is not positive definite
    raises InvalidArgumentError naming `cholesky`."""
    return run_op(_CHOLESKY, (input,), _EMPTY, name)


# ------------------------------------------------------------------ triangular_solve
def _triangular_solve_kernel(a, b, lower, adjoint):
    a, b = _solve_operands("triangular_solve", a, b)
    diagonal = np.diagonal(a, axis1=-2, axis2=-1)
    if not diagonal.all():
        zero = tuple(int(i) for i in np.argwhere(diagonal == 0)[0])
        where = f" at batch index {zero[:-1]}" if len(zero) > 1 else ""
        raise errors.InvalidArgumentError(
            f"triangular_solve: the matrix{where} {_SINGULAR}: diagonal entry {zero[-1]} is zero; "
            f"{_SINGULAR_FIX}")
    if adjoint:   # T^T X = B: the transpose's other triangle holds the same entries
        return _substitute(a.swapaxes(-1, -2), b, not lower)
    return _substitute(a, b, lower)


_BLOCK = 64


def _substitute(t, b, lower):
    """X with T X = B, T the lower (upper) triangle of `t`, by blocked substitution: numpy has no
    triangular solver, and a general solve (LU of the whole matrix) costs 2-6x more. Each
    diagonal block is solved by LAPACK, the rest are matrix products; only T's triangle is read
    (the blocks left of (right of) the diagonal lie entirely inside it)."""
    n = t.shape[-1]
    mask = np.tril if lower else np.triu
    if n <= _BLOCK:
        return np.linalg.solve(mask(t), b)
    x = np.empty(b.shape, b.dtype)
    starts = range(0, n, _BLOCK) if lower else range((n - 1) // _BLOCK * _BLOCK, -1, -_BLOCK)
    for s in starts:
        e = min(s + _BLOCK, n)
        rhs = b[..., s:e, :]
        if lower and s:
            rhs = rhs - t[..., s:e, :s] @ x[..., :s, :]
        elif not lower and e < n:
            rhs = rhs - t[..., s:e, e:] @ x[..., e:, :]
        x[..., s:e, :] = np.linalg.solve(mask(t[..., s:e, s:e]), rhs)
    return x


def _triangular_solve_grad(op, g):
    a, b = op.inputs
    x = op.outputs[0]
    lower, adjoint = op.attrs["lower"], op.attrs["adjoint"]
    db = triangular_solve(a, g, lower=lower, adjoint=not adjoint)
    dt = m.negative(m.matmul(x, db, transpose_b=True) if adjoint else m.matmul(db, x, transpose_b=True))
    da = band_part(dt, -1, 0) if lower else band_part(dt, 0, -1)   # only that triangle is read
    return [m.unbroadcast(da, a), m.unbroadcast(db, b)]


def _t_onnx(e, x, t):
    perm = list(range(len(t.shape)))
    perm[-2:] = perm[-1], perm[-2]
    return e.op("Transpose", x, perm=perm)


def _triangular_solve_onnx(e, node, ins):
    a, lower = node.inputs[0], node.attrs["lower"]
    t = e.op("Trilu", ins[0], upper=int(not lower))        # only that triangle is read
    t = _t_onnx(e, t, a) if node.attrs["adjoint"] else t
    return la.solve(e, t, ins[1], len(a.shape), len(node.inputs[1].shape), node.outputs[0].dtype)


_TRIANGULAR_SOLVE = register(
    "triangular_solve", _triangular_solve_kernel, _solve_infer("triangular_solve"),
    _triangular_solve_grad, num_inputs=2, attrs={"lower": "bool", "adjoint": "bool"},
    defaults={"lower": True, "adjoint": False}, same_dtype=(0, 1), kinds="f", onnx=_triangular_solve_onnx, batch=bt.elementwise)


def triangular_solve(matrix, rhs, lower=True, adjoint=False, name=None):
    """X with `T @ X == rhs`, T the lower (or upper, `lower=False`) triangle of `matrix`
    (the other triangle is not read); `T^T @ X == rhs` if `adjoint`. A zero on the diagonal
    raises InvalidArgumentError naming `triangular_solve`."""
    return run_op(_TRIANGULAR_SOLVE, (matrix, rhs), {"lower": _args.bool_arg("triangular_solve", lower, "lower"),
                                                     "adjoint": _args.bool_arg("triangular_solve", adjoint, "adjoint")},
                  name)


# ------------------------------------------------------------------ det, slogdet
def _det_kernel(a):
    _matrix("det", a.shape, square=True)
    return np.linalg.det(a)


def _times_inverse_transpose(g, a):
    """g[..., None, None] * A^-H: the gradient of det-like scalars of A (A^-T for real A)."""
    return m.multiply(_col(_col(g)), m.conj(_t(inv(a))))


def _adjugate_kernel(a):
    """adj(A) (= det(A) A^-1 where A is invertible), defined for singular A too: with
    A = U diag(s) V^H, adj(A) = det(U) det(V^H) V diag(prod_{j != i} s_j) U^H."""
    _matrix("adjugate", a.shape, square=True)
    n = a.shape[-1]
    if n == 0 or a.size == 0:
        return np.zeros(a.shape, a.dtype)
    u, s, vh = np.linalg.svd(a)
    ones = np.ones(s.shape[:-1] + (1,), s.dtype)
    before = np.cumprod(np.concatenate([ones, s[..., :-1]], -1), -1)       # prod_{j < i} s_j
    after = np.cumprod(np.concatenate([ones, s[..., :0:-1]], -1), -1)[..., ::-1]   # prod_{j > i}
    others = before * after * (np.linalg.det(u) * np.linalg.det(vh))[..., None]
    v, u_h = np.conj(np.swapaxes(vh, -1, -2)), np.conj(np.swapaxes(u, -1, -2))
    return np.matmul(v * others[..., None, :], u_h).astype(a.dtype)


def _adjugate_grad(op, g):
    # adj(A) = det(A) A^-1 where A is invertible: the gradient of <G, adj(A)> is
    # <G, A^-1> adj(A)^T - A^-T G adj(A)^T, A's factors conjugated for complex A (TF's
    # convention); the second order of det, where inv names a singular A
    a_inv = m.conj(inv(op.inputs[0]))
    adj_h = m.conj(_t(op.outputs[0]))
    c = m.reduce_sum(m.multiply(g, a_inv), axis=(-2, -1))
    return [m.subtract(m.multiply(_col(_col(c)), adj_h), m.matmul(m.matmul(a_inv, g, transpose_a=True), adj_h))]


_ADJUGATE = register("adjugate", _adjugate_kernel, _square_infer("adjugate", lambda s: [s]), _adjugate_grad,
                     num_inputs=1, attrs={}, defaults={}, kinds="fc", batch=bt.leading,
                     cost=_cubic(10))      # an svd


def _det_grad(op, g):
    # g * conj(adj(A))^T: the cofactors, also at a singular A (jax's; g conj(det A^-T) elsewhere)
    return [m.multiply(_col(_col(g)), m.conj(_t(run_op(_ADJUGATE, (op.inputs[0],), _EMPTY))))]


_DET = register("det", _det_kernel, _square_infer("det", lambda s: [s[:-2]]), _det_grad,
                num_inputs=1, attrs={}, defaults={}, kinds="fc", cost=_cubic(2),
                # (onnxruntime's Det takes float32 only: float64 by elimination)
                onnx=lambda e, node, ins: la.det(e, ins[0], len(node.inputs[0].shape), node.inputs[0].dtype)
                if node.inputs[0].dtype.name == "float64" else e.op("Det", ins[0]), batch=bt.leading)


def det(input, name=None):
    """The determinant of each square matrix (0 for a singular one): shape (...)."""
    return run_op(_DET, (input,), _EMPTY, name)


def _slogdet_kernel(a):
    _matrix("slogdet", a.shape, square=True)
    sign, logdet = np.linalg.slogdet(a)
    return sign, logdet


_SLOGDET = register("slogdet", _slogdet_kernel, _square_infer("slogdet", lambda s: [s[:-2], s[:-2]]),
                    lambda op, g_sign, g_log: [None if g_log is None
                                               else _times_inverse_transpose(g_log, op.inputs[0])],
                    num_inputs=1, attrs={}, defaults={}, kinds="f", num_outputs=2, none_grads=True,
                    onnx=lambda e, node, ins: la.slogdet(e, ins[0], len(node.inputs[0].shape), node.inputs[0].dtype), batch=bt.leading, cost=_cubic(2))


def slogdet(input, name=None):
    """`(sign, log_abs_det)` of each square matrix: det == sign * exp(log_abs_det), without
    overflow. The sign has no gradient; a singular matrix gives (0, -inf)."""
    return run_op(_SLOGDET, (input,), _EMPTY, name)


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


_EIGH = register("eigh", _eigh_kernel, _square_infer("eigh", lambda s: [s[:-1], s]), _eigh_grad,
                 num_inputs=1, attrs={}, defaults={}, kinds="f", num_outputs=2, none_grads=True, batch=bt.leading, cost=_cubic(10))


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


_SVD = register("svd", _svd_kernel, _svd_infer, _svd_grad, num_inputs=1,
                attrs={"full_matrices": "bool", "compute_uv": "bool"},
                defaults={"full_matrices": False, "compute_uv": True}, kinds="f",
                num_outputs=_svd_outputs, none_grads=True, batch=bt.leading, cost=_cubic(10))


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


_QR = register("qr", _qr_kernel, _qr_infer, _qr_grad, num_inputs=1, attrs={"full_matrices": "bool"},
               onnx=lambda e, node, ins: la.qr(e, ins[0], len(node.inputs[0].shape), node.inputs[0].dtype,
                                               node.attrs["full_matrices"]),
               defaults={"full_matrices": False}, kinds="f", num_outputs=2, batch=bt.leading, cost=Cost(scratch=0.6, work=_cubic(4).work))


def qr(input, full_matrices=False, name=None):
    """`(q, r)` with input == q @ r, q with orthonormal columns, r upper triangular; reduced
    (q: (..., M, K), r: (..., K, N), K = min(M, N)) unless `full_matrices`."""
    return run_op(_QR, (input,), {"full_matrices": _args.bool_arg("qr", full_matrices, "full_matrices")}, name)


# ------------------------------------------------------------------ diag, diag_part, trace
def _vectors(shape):
    if not shape:
        raise errors.InvalidArgumentError(
            "diag: input must be a vector or a batch of vectors (rank >= 1), got a scalar; "
            "use df.reshape(x, [1])")


def _diag_infer(shapes, dts, attrs):
    s = tuple(shapes[0])
    _vectors(s)
    return [(s + (s[-1],), dts[0])]


def _with_diagonal(v, shape):
    """Zeros of `shape` (..., M, N) with `v` (..., min(M, N)) on the diagonal."""
    out = np.zeros(shape, v.dtype)
    i = np.arange(v.shape[-1])
    out[..., i, i] = v
    return out


def _diag_kernel(v):
    _vectors(v.shape)
    return _with_diagonal(v, v.shape + v.shape[-1:])


def _scalar_dim(e, x, axis, shape):
    return e.op("Squeeze", e.dim(x, axis, shape), e.ints([0]))


def _diag_onnx(e, node, ins):
    v = node.inputs[0]
    n = _scalar_dim(e, ins[0], -1 % len(v.shape), v.shape)
    return e.where(la.eye_mask(e, n, n), e.op("Unsqueeze", ins[0], e.ints([-1])), e.scalar(0, v.dtype), v.dtype)


_DIAG = register("diag", _diag_kernel, _diag_infer, lambda op, g: [diag_part(g)],
                 num_inputs=1, attrs={}, defaults={}, onnx=_diag_onnx, batch=bt.leading)


def diag(diagonal, name=None):
    """Square matrices with `diagonal` (..., N) on their diagonal, zeros elsewhere: (..., N, N)."""
    return run_op(_DIAG, (diagonal,), _EMPTY, name)


def _diag_part_kernel(a):
    _matrix("diag_part", a.shape)
    return np.diagonal(a, axis1=-2, axis2=-1).copy()   # a copy: the view would keep `a` alive


def _diag_part_infer(shapes, dts, attrs):
    s = tuple(shapes[0])
    rows, cols = _matrix("diag_part", s)
    return [(s[:-2] + (_min(rows, cols),), dts[0])]


def _diag_part_grad(op, g):
    rows, cols = tuple(op.inputs[0].shape)[-2:]
    if rows is not None and rows == cols:
        return [diag(g)]
    return [run_op(_DIAG_PART_GRAD, (g, op.inputs[0]))]


_DIAG_PART = register("diag_part", _diag_part_kernel, _diag_part_infer, _diag_part_grad,
                      num_inputs=1, attrs={}, defaults={},
                      onnx=lambda e, node, ins: diag_part_of(e, ins[0], node.inputs[0].shape), batch=bt.leading)
# Internal: the gradient of diag_part for non-square (or unknown-size) matrices: `g` on the
# diagonal of zeros shaped like the input.
_DIAG_PART_GRAD = register("diag_part_grad", lambda g, like: _with_diagonal(g, like.shape),
                           lambda s, d, attrs: [(tuple(s[1]), d[0])],
                           lambda op, gg: [diag_part(gg), None], num_inputs=2, attrs={}, defaults={},
                           onnx=lambda e, node, ins: scatter_adjoint(
                               e, ins[0], shape_of(e, ins[1], node.inputs[1]), node.outputs[0].dtype,
                               lambda idx: diag_part_of(e, idx, node.inputs[1].shape)), batch=bt.leading)


def diag_part(input, name=None):
    """The main diagonal of each matrix: (..., M, N) -> (..., min(M, N))."""
    return run_op(_DIAG_PART, (input,), _EMPTY, name)


def trace(x, name=None):
    """The sum of each matrix's diagonal: (..., M, N) -> (...)."""
    return m.reduce_sum(diag_part(x), axis=-1, name=name)


# ------------------------------------------------------------------ band_part
@functools.lru_cache(maxsize=64)
def _band_mask(rows, cols, num_lower, num_upper):
    """The (read-only, cached) mask of the band: building it took ~0.5 ms per 342 x 342 call,
    and gradients of cholesky / eigh apply the same few bands again and again."""
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    keep = np.ones((rows, cols), bool)
    if num_lower >= 0:
        keep &= i - j <= num_lower
    if num_upper >= 0:
        keep &= j - i <= num_upper
    keep.flags.writeable = False
    return keep


def _band_part_kernel(a, num_lower, num_upper):
    _matrix("band_part", a.shape)
    keep = _band_mask(a.shape[-2], a.shape[-1], num_lower, num_upper)
    return np.where(keep, a, np.zeros((), a.dtype))


def _band_part_infer(shapes, dts, attrs):
    _matrix("band_part", shapes[0])
    return [(tuple(shapes[0]), dts[0])]


def _band_part_onnx(e, node, ins):
    """Trilu keeps j - i <= num_upper (upper=0) and i - j <= num_lower (upper=1, k=-num_lower)."""
    x, a = ins[0], node.attrs
    if a["num_upper"] >= 0:
        x = e.op("Trilu", x, e.scalar(a["num_upper"], "int64"), upper=0)
    if a["num_lower"] >= 0:
        x = e.op("Trilu", x, e.scalar(-a["num_lower"], "int64"), upper=1)
    return e.op("Identity", x)


_BAND_PART = register("band_part", _band_part_kernel, _band_part_infer,
                      lambda op, g: [run_op(_BAND_PART, (g,), op.attrs)], num_inputs=1,
                      attrs={"num_lower": "int", "num_upper": "int"}, defaults={}, onnx=_band_part_onnx, batch=bt.leading)


def band_part(input, num_lower, num_upper, name=None):
    """Each matrix with everything outside a band set to zero: keeps entry (i, j) when
    i - j <= num_lower and j - i <= num_upper, a negative count keeping that whole triangle.
    `band_part(x, -1, 0)` is the lower triangle, `band_part(x, 0, 0)` the diagonal."""
    attrs = {"num_lower": _args.int_arg("band_part", num_lower, "num_lower"),
             "num_upper": _args.int_arg("band_part", num_upper, "num_upper")}
    return run_op(_BAND_PART, (input,), attrs, name)
