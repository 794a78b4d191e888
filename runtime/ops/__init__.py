"""All registered ops and their public functions; installs Tensor operators."""
from defun.runtime.ops import math_ops, array_ops  # noqa: F401  (registration happens on import)
from defun.runtime.ops.math_ops import *  # noqa: F401,F403
from defun.runtime.ops.array_ops import *  # noqa: F401,F403
from defun.runtime.ops import nn_ops, resource_ops  # noqa: F401,E402
from defun.runtime.ops.nn_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops import linalg_ops, decomposition_ops, numpy_methods  # noqa: F401,E402  (df.linalg)
from defun.runtime.ops.elementwise_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops.reorder_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops.grid_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops import sparse_ops  # noqa: F401,E402
from defun.runtime.ops import bitwise_ops  # noqa: E402
from defun.runtime.ops.bitwise_ops import *  # noqa: F401,F403,E402


def _install_operators(cls):
    """Python operators on tensors (and variables), all routed through the registry."""
    m, a, b = math_ops, array_ops, bitwise_ops

    def rev(f):
        return lambda self, other: f(other, self)

    ops = {
        "__add__": m.add, "__radd__": rev(m.add),
        "__sub__": m.subtract, "__rsub__": rev(m.subtract),
        "__mul__": m.multiply, "__rmul__": rev(m.multiply),
        "__truediv__": m.divide, "__rtruediv__": rev(m.divide),
        "__floordiv__": m.floordiv, "__rfloordiv__": rev(m.floordiv),
        "__mod__": m.mod, "__rmod__": rev(m.mod),
        "__pow__": m.pow, "__rpow__": rev(m.pow),
        "__matmul__": m.matmul, "__rmatmul__": rev(m.matmul),
        "__lt__": m.less, "__le__": m.less_equal, "__gt__": m.greater, "__ge__": m.greater_equal,
        # &, |, ~ the logical ops on bools, the bitwise ones on integers; ^ and shifts bitwise
        "__and__": _by_dtype(m.logical_and, b.bitwise_and), "__rand__": _by_dtype(m.logical_and, b.bitwise_and, 1),
        "__or__": _by_dtype(m.logical_or, b.bitwise_or), "__ror__": _by_dtype(m.logical_or, b.bitwise_or, 1),
        "__xor__": b.bitwise_xor, "__rxor__": rev(b.bitwise_xor),
        "__lshift__": b.left_shift, "__rlshift__": rev(b.left_shift),
        "__rshift__": b.right_shift, "__rrshift__": rev(b.right_shift),
        "__invert__": lambda self: (m.logical_not if self.dtype.is_bool else b.invert)(self),
        "__neg__": m.negative, "__abs__": m.abs, "__pos__": lambda self: self,
        "__getitem__": lambda self, key: a.slice_helper(self, key),
    }
    for k, f in ops.items():
        setattr(cls, k, f)
    for k, f in numpy_methods.METHODS.items():  # t.T, t.reshape, t.sum, ... (numpy's names)
        setattr(cls, k, f)
    cls.__array_ufunc__ = _array_ufunc


def _by_dtype(logical, bitwise, reflected=False):
    """The method `self <op> other` (`other <op> self` if `reflected`): `logical` on a bool tensor."""
    if reflected:
        return lambda self, other: (logical if self.dtype.is_bool else bitwise)(other, self)
    return lambda self, other: (logical if self.dtype.is_bool else bitwise)(self, other)


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """numpy's ufuncs on tensors: the df op of the same meaning (runtime/ops/numpy_ufuncs.py)."""
    return numpy_ufuncs.array_ufunc(ufunc, method, inputs, kwargs)


from defun.runtime.tensor import Tensor  # noqa: E402
_install_operators(Tensor)
from defun.runtime.ops import special_math_ops  # noqa: F401,E402
from defun.runtime.ops.special_math_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops import cumulative_ops  # noqa: F401,E402
from defun.runtime.ops.cumulative_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops import einsum_ops  # noqa: F401,E402
from defun.runtime.ops.einsum_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops import sort_ops  # noqa: F401,E402
from defun.runtime.ops.sort_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops import scatter_ops  # noqa: F401,E402
from defun.runtime.ops.scatter_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops import conv_ops  # noqa: F401,E402
from defun.runtime.ops.conv_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops import pool_ops  # noqa: F401,E402
from defun.runtime.ops.pool_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops import random_ops, debug_ops, fft_ops  # noqa: F401,E402
from defun.runtime.ops.random_ops import *  # noqa: F401,F403,E402
from defun.runtime.ops import special_functions  # noqa: F401,E402  (df.math's lgamma, igamma, ...)
from defun.runtime.ops import numpy_ufuncs  # noqa: E402  (after every op it maps to)
