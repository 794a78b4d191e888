"""`df.linalg`: linear algebra with TensorFlow's names and semantics, batched over leading
dimensions, differentiable (the gradient rules: runtime/ops/linalg_ops.py, decomposition_ops.py).

    import defun as df
    low = df.linalg.cholesky(k)
    alpha = df.linalg.triangular_solve(low, y)
"""
from defun.runtime.ops.decomposition_ops import cholesky, eigh, qr, svd  # noqa: F401
from defun.runtime.ops.linalg_ops import (band_part, det, diag, diag_part, inv,  # noqa: F401
                                          matrix_transpose, slogdet, solve, trace, triangular_solve)
from defun.runtime.ops.special_math_ops import norm  # noqa: F401  (df.norm, also under df.linalg as in TF)

__all__ = ["band_part", "cholesky", "det", "diag", "diag_part", "eigh", "inv", "matrix_transpose", "norm", "qr",
           "slogdet", "solve", "svd", "trace", "triangular_solve"]
