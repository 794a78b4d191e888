"""`df.math`: elementwise math and reductions under TensorFlow's `tf.math` names, so
`tf.math.X` code runs with `df.math.X`. Each name is a df op (the same function as `df.X`
where df has one) or a composition of df ops (runtime/ops/composites.py); gradients, vmap
and exports work on all of them.

    import defun as df
    r = df.math.floormod(x, 3.0)          # df.mod under TF's name
"""
from defun.runtime.ops.composites import (count_nonzero, divide_no_nan, is_inf, l2_normalize,  # noqa: F401
                                          log_sigmoid, multiply_no_nan, reduce_euclidean_norm, reduce_std,
                                          reduce_variance, xdivy)
from defun.runtime.ops.elementwise_ops import (acos, acosh, asin, asinh, atan, atan2, atanh, ceil,  # noqa: F401
                                               log10, log2, reciprocal, squared_difference)
from defun.runtime.ops.math_ops import (abs, add, add_n, angle, argmax, argmin, conj, cos, divide,  # noqa: F401
                                        equal, exp, floor, floordiv, greater, greater_equal, imag, less,
                                        less_equal, log, log1p, logical_and, logical_not, logical_or, maximum,
                                        minimum, mod, multiply, negative, not_equal, pow, real, reduce_max,
                                        reduce_mean, reduce_min, reduce_prod, reduce_sum, round, rsqrt, sigmoid,
                                        sign, sin, sqrt, square, subtract, tanh)
from defun.runtime.ops.nn_ops import log_softmax, softmax  # noqa: F401
from defun.runtime.ops.scatter_ops import segment_sum, unsorted_segment_sum  # noqa: F401
from defun.runtime.ops.sort_ops import top_k  # noqa: F401
from defun.runtime.ops.cumulative_ops import cumprod, cumsum  # noqa: F401
from defun.runtime.ops.special_math_ops import (erf, expm1, is_finite, is_nan,  # noqa: F401
                                                reduce_all, reduce_any, reduce_logsumexp, softplus, tan)
from defun.runtime.ops.elementwise_ops import sinh, cosh  # noqa: F401
from defun.runtime.ops.special_functions import (bessel_i0e, bessel_i1e, betainc, digamma, erfc, erfinv,  # noqa: F401
                                                 igamma, igammac, lgamma, polygamma, xlog1py, xlogy)
from defun.namespaces import missing_name

floormod = mod
truediv = divide

__all__ = sorted(n for n in dir() if not n.startswith("_") and n != "missing_name")


def __getattr__(name):
    raise missing_name(__name__, name, __all__)
