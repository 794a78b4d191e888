"""Linear algebra (`df.linalg`): declarations and public functions, batched over leading dims.

TensorFlow's names and semantics (`tf.linalg.*`), numpy (LAPACK) kernels. Inputs are float32
or float64 matrices `(..., M, N)`; a numerical failure (a singular matrix, one that is not
positive definite, no convergence) raises `InvalidArgumentError` naming the op and the batch
index, never numpy's LinAlgError. The checks, failures and symmetrizing helpers at its top
are shared with the factorizations (cholesky, eigh, svd, qr: decomposition_ops.py).

Gradients are written with ops (so they trace and have their own gradients): for inv, solve,
triangular_solve, det, slogdet the matrix-calculus identities; det's is g adj(A)^T (the
internal op `adjugate`, by the SVD), so a singular A has one too. The module is long because
each op keeps its kernel, inference, gradient and ONNX form together.
"""
import functools

import math

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, _costs, shape_rules
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

# inv, solve and det (and det's gradient, adjugate) also take complex matrices (issue 22); the
# factorizations do not
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


_INV = register(
    name="inv",
    kernel=_inv_kernel,
    infer=_square_infer("inv", lambda s: [s]),
    grad=_inv_grad,
    num_inputs=1,
    attrs={},
    defaults={},
    kinds="fc",
    onnx=_inv_onnx,
    batch=bt.leading,
    cost=_cubic(2),
)


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


_SOLVE = register(
    name="solve",
    kernel=_solve_kernel,
    infer=_solve_infer("solve"),
    grad=_solve_grad,
    num_inputs=2,
    attrs={"adjoint": "bool"},
    defaults={"adjoint": False},
    same_dtype=(0, 1),
    kinds="fc",
    onnx=lambda e, node, ins: la.solve(
        e, _t_onnx(e, ins[0], node.inputs[0]) if node.attrs["adjoint"] else ins[0], ins[1],
        len(node.inputs[0].shape), len(node.inputs[1].shape), node.outputs[0].dtype),
    batch=bt.elementwise,
    cost=_costs.triangular(2),
)


def solve(matrix, rhs, adjoint=False, name=None):
    """X with `matrix @ X == rhs` (`matrix^T @ X == rhs` if `adjoint`); matrix (..., M, M),
    rhs (..., M, K), batch dimensions broadcast."""
    return run_op(_SOLVE, (matrix, rhs), {"adjoint": _args.bool_arg("solve", adjoint, "adjoint")}, name)


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
    name="triangular_solve",
    kernel=_triangular_solve_kernel,
    infer=_solve_infer("triangular_solve"),
    grad=_triangular_solve_grad,
    num_inputs=2,
    attrs={"lower": "bool", "adjoint": "bool"},
    defaults={"lower": True, "adjoint": False},
    same_dtype=(0, 1),
    kinds="f",
    onnx=_triangular_solve_onnx,
    batch=bt.elementwise,
    cost=_costs.triangular(0),
)


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


def _det_onnx(e, x, rank, dtype):
    # (onnxruntime's Det takes float32 only: float64 by elimination)
    return la.det(e, x, rank, dtype) if dtype.name == "float64" else e.op("Det", x)


def _adjugate_onnx(e, node, ins):
    a = node.inputs[0]
    return la.adjugate(e, ins[0], len(a.shape), a.dtype, lambda t, r: _det_onnx(e, t, r, a.dtype))


_ADJUGATE = register(
    name="adjugate",
    kernel=_adjugate_kernel,
    infer=_square_infer("adjugate", lambda s: [s]),
    grad=_adjugate_grad,
    num_inputs=1,
    attrs={},
    defaults={},
    kinds="fc",
    onnx=_adjugate_onnx,
    batch=bt.leading,
    cost=_cubic(10),      # an svd
)


def _det_grad(op, g):
    # g * conj(adj(A))^T: the cofactors, also at a singular A (jax's; g conj(det A^-T) elsewhere)
    return [m.multiply(_col(_col(g)), m.conj(_t(run_op(_ADJUGATE, (op.inputs[0],), _EMPTY))))]


_DET = register(
    name="det",
    kernel=_det_kernel,
    infer=_square_infer("det", lambda s: [s[:-2]]),
    grad=_det_grad,
    num_inputs=1,
    attrs={},
    defaults={},
    kinds="fc",
    onnx=lambda e, node, ins: _det_onnx(e, ins[0], len(node.inputs[0].shape), node.inputs[0].dtype),
    batch=bt.leading,
    cost=_cubic(2),
)


def det(input, name=None):
    """The determinant of each square matrix (0 for a singular one): shape (...)."""
    return run_op(_DET, (input,), _EMPTY, name)


def _slogdet_kernel(a):
    _matrix("slogdet", a.shape, square=True)
    sign, logdet = np.linalg.slogdet(a)
    return sign, logdet


_SLOGDET = register(
    name="slogdet",
    kernel=_slogdet_kernel,
    infer=_square_infer("slogdet", lambda s: [s[:-2], s[:-2]]),
    grad=lambda op, g_sign, g_log: [None if g_log is None
        else _times_inverse_transpose(g_log, op.inputs[0])],
    num_inputs=1,
    attrs={},
    defaults={},
    num_outputs=2,
    none_grads=True,
    kinds="f",
    onnx=lambda e, node, ins: la.slogdet(e, ins[0], len(node.inputs[0].shape), node.inputs[0].dtype),
    batch=bt.leading,
    cost=_cubic(2),
)


def slogdet(input, name=None):
    """`(sign, log_abs_det)` of each square matrix: det == sign * exp(log_abs_det), without
    overflow. The sign has no gradient; a singular matrix gives (0, -inf)."""
    return run_op(_SLOGDET, (input,), _EMPTY, name)


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


_DIAG = register(
    name="diag",
    kernel=_diag_kernel,
    infer=_diag_infer,
    grad=lambda op, g: [diag_part(g)],
    num_inputs=1,
    attrs={},
    defaults={},
    onnx=_diag_onnx,
    batch=bt.leading,
)


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


_DIAG_PART = register(
    name="diag_part",
    kernel=_diag_part_kernel,
    infer=_diag_part_infer,
    grad=_diag_part_grad,
    num_inputs=1,
    attrs={},
    defaults={},
    onnx=lambda e, node, ins: diag_part_of(e, ins[0], node.inputs[0].shape),
    batch=bt.leading,
)
# Internal: the gradient of diag_part for non-square (or unknown-size) matrices: `g` on the
# diagonal of zeros shaped like the input.
_DIAG_PART_GRAD = register(
    name="diag_part_grad",
    kernel=lambda g, like: _with_diagonal(g, like.shape),
    infer=lambda s, d, attrs: [(tuple(s[1]), d[0])],
    grad=lambda op, gg: [diag_part(gg), None],
    num_inputs=2,
    attrs={},
    defaults={},
    onnx=lambda e, node, ins: scatter_adjoint(
        e, ins[0], shape_of(e, ins[1], node.inputs[1]), node.outputs[0].dtype,
        lambda idx: diag_part_of(e, idx, node.inputs[1].shape)),
    batch=bt.leading,
)


def diag_part(input, name=None):
    """The main diagonal of each matrix: (..., M, N) -> (..., min(M, N))."""
    return run_op(_DIAG_PART, (input,), _EMPTY, name)


def trace(x, name=None):
    """The sum of each matrix's diagonal: (..., M, N) -> (...)."""
    if _rank(x) < 2:    # checked here, so that the error names trace, not the diag_part it runs
        raise _args.error(f"trace: input must be a matrix or a batch of matrices (rank >= 2), got "
                          f"shape {shape_rules.shape_str(tuple(getattr(x, 'shape', np.shape(x))))}")
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


_BAND_PART = register(
    name="band_part",
    kernel=_band_part_kernel,
    infer=_band_part_infer,
    grad=lambda op, g: [run_op(_BAND_PART, (g,), op.attrs)],
    num_inputs=1,
    attrs={"num_lower": "int", "num_upper": "int"},
    defaults={},
    onnx=_band_part_onnx,
    batch=bt.leading,
)


def band_part(input, num_lower, num_upper, name=None):
    """Each matrix with everything outside a band set to zero: keeps entry (i, j) when
    i - j <= num_lower and j - i <= num_upper, a negative count keeping that whole triangle.
    `band_part(x, -1, 0)` is the lower triangle, `band_part(x, 0, 0)` the diagonal."""
    attrs = {"num_lower": _args.int_arg("band_part", num_lower, "num_lower"),
             "num_upper": _args.int_arg("band_part", num_upper, "num_upper")}
    return run_op(_BAND_PART, (input,), attrs, name)
