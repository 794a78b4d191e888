"""ONNX forms of the linear algebra ONNX has no op for (solve, inv, triangular_solve,
cholesky, slogdet, qr; det in float64, which onnxruntime's Det does not take), each an ONNX
Loop over the matrix's columns, batched over the leading axes, any float dtype:

- Gauss-Jordan elimination with partial pivoting: at column k the largest |a[i, k]|,
  i >= k, is swapped into row k (the right-hand sides follow), and row k's multiples are
  taken from every other row; then x = b / diag(a), det = the swaps' sign * prod(diag(a)).
- Cholesky by columns: l[:, j] = (a[:, j] - l l[j, :]^T) / sqrt(that at j), below the diagonal.
- QR by Householder reflections, with LAPACK's sign choices (so the factors agree with numpy's).

A singular matrix gives inf/nan (the kernels raise instead). Used by runtime/ops/linalg_ops.py
and decomposition_ops.py; nothing here imports onnx.
"""
from defun.runtime.ops._onnx import diag_part_of

__all__ = ["eye_mask", "gauss_jordan", "det", "slogdet", "solve", "cholesky", "qr", "adjugate"]


def eye_mask(e, rows, cols):
    """bool (rows, cols) with True where i == j; `rows`, `cols` are int64 scalars."""
    one, zero = e.scalar(1, "int64"), e.scalar(0, "int64")
    i = e.op("Unsqueeze", e.op("Range", zero, rows, one), e.ints([1]))
    return e.op("Equal", i, e.op("Range", zero, cols, one))


def _size(e, x, rank):
    return e.op("Squeeze", e.op("Shape", x, start=rank - 1, end=rank), e.ints([0]))


def gauss_jordan(e, a, rank, dtype, b=None):
    """(reduced a, reduced b or None, sign of the row swaps) of square `a` (..., n, n) and
    right-hand sides `b` (..., n, k) of the same batch shape."""
    n = _size(e, a, rank)
    rows = e.op("Range", e.scalar(0, "int64"), n, e.scalar(1, "int64"))
    c = lambda v: e.scalar(v, dtype)  # noqa: E731

    def swap(t, order):
        return e.op("GatherElements", t, e.op("Expand", e.op("Unsqueeze", order, e.ints([-1])), e.op("Shape", t)),
                    axis=-2)

    def body(args):
        k, _, m, *rest = args
        column = e.op("Abs", e.op("Gather", m, k, axis=-1))                        # (..., n)
        p = e.op("ArgMax", e.op("Where", e.op("Less", rows, k), c(-1), column), axis=-1, keepdims=1)
        order = e.op("Where", e.op("Equal", rows, k), p, e.op("Where", e.op("Equal", rows, p), k, rows))
        m = swap(m, order)
        moved = e.op("Not", e.op("Equal", e.op("Squeeze", p, e.ints([-1])), k))
        sign = e.op("Where", moved, e.op("Neg", rest[-1]), rest[-1])
        pivot = e.op("Gather", e.op("Gather", m, k, axis=-1), k, axis=-1)           # (...)
        pivot = e.op("Where", e.op("Equal", pivot, c(0)), c(1), pivot)              # a zero column
        factors = e.op("Div", e.op("Gather", m, k, axis=-1), e.op("Unsqueeze", pivot, e.ints([-1])))
        factors = e.op("Unsqueeze", e.op("Where", e.op("Equal", rows, k), c(0), factors), e.ints([-1]))

        def eliminate(t):
            return e.op("Sub", t, e.op("Mul", factors, e.op("Gather", t, e.op("Unsqueeze", k, e.ints([0])), axis=-2)))
        out = [eliminate(m)]
        if b is not None:
            out.append(eliminate(swap(rest[0], order)))
        return [e.op("Identity", e.scalar(True, "bool"))] + out + [sign]
    sign0 = e.op("Expand", c(1), e.op("Shape", a, start=0, end=rank - 2))
    types = [((), "int64"), ((), "bool"), ((None,) * rank, dtype)] + \
        ([((None,) * rank, dtype)] if b is not None else []) + [((None,) * (rank - 2), dtype)]
    init = [a] + ([b] if b is not None else []) + [sign0]
    out = e.op("Loop", n, e.scalar(True, "bool"), *init, n=len(init),
               body=e.subgraph(types, body, types[1:], name="eliminate"))
    return out[0], (out[1] if b is not None else None), out[-1]


def det(e, a, rank, dtype):
    m, _, sign = gauss_jordan(e, a, rank, dtype)
    return e.op("Mul", sign, e.reduce("ReduceProd", diag_part_of(e, m, (None,) * rank), (rank - 2,), False))


def adjugate(e, a, rank, dtype, det_of):
    """adj(A) of (..., n, n) `a` by cofactors: adj[j, i] = (-1)^(i+j) det(A without row i and
    column j), every minor's determinant `det_of(minors, rank + 2)` at once; exact for a
    singular A too, as the SVD kernel (elimination meets a zero pivot column there and
    gives det 0, never dividing by it)."""
    one, zero = e.scalar(1, "int64"), e.scalar(0, "int64")
    n = _size(e, a, rank)
    i = e.op("Range", zero, n, one)
    r = e.op("Unsqueeze", e.op("Range", zero, e.op("Sub", n, one), one), e.ints([0]))       # (1, n-1)
    keep = e.op("Add", r, e.cast(e.op("GreaterOrEqual", r, e.op("Unsqueeze", i, e.ints([1]))), "int64"))
    rows = e.op("Gather", a, keep, axis=-2)                        # (..., i, r, n): row i left out
    minors = e.op("Gather", rows, keep, axis=-1)                   # (..., i, r, j, c)
    lead = list(range(rank - 2))
    minors = e.op("Transpose", minors, perm=lead + [rank - 2, rank, rank - 1, rank + 1])
    parity = e.op("Mod", e.op("Add", e.op("Unsqueeze", i, e.ints([1])), e.op("Unsqueeze", i, e.ints([0]))),
                  e.scalar(2, "int64"))
    signs = e.cast(e.op("Sub", one, e.op("Mul", e.scalar(2, "int64"), parity)), dtype)
    cof = e.op("Mul", det_of(minors, rank + 2), signs)
    return e.op("Transpose", cof, perm=lead + [rank - 1, rank - 2])


def slogdet(e, a, rank, dtype):
    m, _, sign = gauss_jordan(e, a, rank, dtype)
    d = diag_part_of(e, m, (None,) * rank)
    sign = e.op("Mul", sign, e.reduce("ReduceProd", e.op("Sign", d), (rank - 2,), False))
    return sign, e.reduce("ReduceSum", e.op("Log", e.op("Abs", d)), (rank - 2,), False)


def solve(e, a, b, a_rank, b_rank, dtype):
    """x with a x = b, batch axes broadcast."""
    rank = max(a_rank, b_rank)
    corner = lambda t: e.op("Slice", t, e.ints([0, 0]), e.ints([1, 1]), e.ints([-2, -1]))  # noqa: E731
    batch = e.op("Shape", e.op("Add", corner(a), corner(b)))          # (batch..., 1, 1)
    a, b = e.op("Expand", a, batch), e.op("Expand", b, batch)
    m, x, _ = gauss_jordan(e, a, rank, dtype, b)
    return e.op("Div", x, e.op("Unsqueeze", diag_part_of(e, m, (None,) * rank), e.ints([-1])))


def cholesky(e, a, rank, dtype):
    n = _size(e, a, rank)
    rows = e.op("Range", e.scalar(0, "int64"), n, e.scalar(1, "int64"))

    def body(args):
        j, _, low = args
        row_j = e.op("Gather", low, e.op("Unsqueeze", j, e.ints([0])), axis=-2)         # (..., 1, n)
        col = e.op("Sub", e.op("Gather", a, j, axis=-1),
                   e.op("Squeeze", e.op("MatMul", low, e.op("Transpose", row_j, perm=list(range(rank - 2)) +
                                                              [rank - 1, rank - 2])), e.ints([-1])))
        root = e.op("Sqrt", e.op("Gather", col, j, axis=-1))
        new = e.op("Where", e.op("Less", rows, j), e.scalar(0, dtype),
                   e.op("Div", col, e.op("Unsqueeze", root, e.ints([-1]))))
        low = e.op("Where", e.op("Equal", rows, j), e.op("Unsqueeze", new, e.ints([-1])), low)
        return [e.op("Identity", e.scalar(True, "bool")), low]
    zeros = e.op("Expand", e.scalar(0, dtype), e.op("Shape", a))
    types = [((), "int64"), ((), "bool"), ((None,) * rank, dtype)]
    return e.op("Loop", n, e.scalar(True, "bool"), zeros, body=e.subgraph(types, body, types[1:], name="cholesky"))


def qr(e, a, rank, dtype, full_matrices):
    """Householder QR as LAPACK's geqrf computes it (so signs agree with numpy's): at column
    k, with alpha = r[k, k] and the entries below of norm s, beta = -sign(alpha) sqrt(alpha^2
    + s^2), v = (1, r[k+1:, k] / (alpha - beta)), tau = (beta - alpha) / beta (no reflection
    where s = 0); r <- (I - tau v v^T) r and q <- q (I - tau v v^T), for k < min(m, n)."""
    c = lambda v: e.scalar(v, dtype)  # noqa: E731
    m = _size(e, a, rank - 1)
    cols = _size(e, a, rank)
    rows = e.op("Range", e.scalar(0, "int64"), m, e.scalar(1, "int64"))
    eye = e.where(eye_mask(e, m, m), c(1), c(0), dtype)
    q0 = e.op("Expand", eye, e.op("Concat", e.op("Shape", a, start=0, end=rank - 2), e.op("Reshape", m, e.ints([1])),
                                   e.op("Reshape", m, e.ints([1])), axis=0))

    def body(args):
        k, _, r, q = args
        col = e.op("Gather", r, k, axis=-1)                                          # (..., m)
        alpha = e.op("Gather", col, k, axis=-1)                                      # (...)
        below = e.op("Where", e.op("Greater", rows, k), col, c(0))
        s2 = e.reduce("ReduceSum", e.op("Mul", below, below), (rank - 2,), False)
        norm = e.op("Sqrt", e.op("Add", e.op("Mul", alpha, alpha), s2))
        beta = e.op("Where", e.op("Less", alpha, c(0)), norm, e.op("Neg", norm))
        reflect = e.op("Greater", s2, c(0))
        denominator = e.op("Where", reflect, e.op("Sub", alpha, beta), c(1))
        v = e.op("Add", e.op("Div", below, e.op("Unsqueeze", denominator, e.ints([-1]))),
                 e.op("Cast", e.op("Equal", rows, k), to=e.onnx_type(dtype)))
        tau = e.op("Where", reflect, e.op("Div", e.op("Sub", beta, alpha), e.op("Where", reflect, beta, c(1))), c(0))
        tau = e.op("Unsqueeze", tau, e.ints([-1, -2]))
        column_v, row_v = e.op("Unsqueeze", v, e.ints([-1])), e.op("Unsqueeze", v, e.ints([-2]))
        r = e.op("Sub", r, e.op("Mul", tau, e.op("Mul", column_v, e.op("MatMul", row_v, r))))
        q = e.op("Sub", q, e.op("Mul", tau, e.op("Mul", e.op("MatMul", q, column_v), row_v)))
        return [e.op("Identity", e.scalar(True, "bool")), r, q]
    types = [((), "int64"), ((), "bool"), ((None,) * rank, dtype), ((None,) * rank, dtype)]
    r, q = e.op("Loop", e.op("Min", m, cols), e.scalar(True, "bool"), a, q0, n=2,
                body=e.subgraph(types, body, types[1:], name="householder"))
    r = e.op("Trilu", r, upper=1)
    if full_matrices:
        return q, r
    k = e.op("Reshape", e.op("Min", m, cols), e.ints([1]))
    return (e.op("Slice", q, e.ints([0]), k, e.ints([-1])), e.op("Slice", r, e.ints([0]), k, e.ints([-2])))
