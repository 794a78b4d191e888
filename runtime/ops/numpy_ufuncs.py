"""numpy's ufuncs on tensors and variables: `np.tanh(t)`, `np.add(a, t)`, `a * t`.

A ufunc with a df op of the same meaning runs that op (a tensor comes back; it is recorded
on tapes and traces like the op, so `ndarray + tensor` stays a tensor, as before). Any
other ufunc, a ufunc method (`np.add.reduce`) or a ufunc given numpy-only keywords (`out=`,
`where=`, `dtype=`) runs numpy on the values of eager tensors and gives numpy's result, as
TensorFlow's eager tensors do; on a symbolic tensor (inside a defun) there is no value to
give, so it is a TracingError naming the df function to use.
"""
import numpy as np

from defun.runtime import errors
from defun.runtime.ops import bitwise_ops as b
from defun.runtime.ops import composites as c
from defun.runtime.ops import elementwise_ops as e
from defun.runtime.ops import math_ops as m
from defun.runtime.ops import special_math_ops as s
from defun.runtime.tensor import ByIdentity, EagerTensor, Tensor

__all__ = ["UFUNC_OPS", "array_ufunc"]

# numpy ufunc -> the df function of the same meaning (and arguments).
UFUNC_OPS = {
    np.add: m.add, np.subtract: m.subtract, np.multiply: m.multiply, np.true_divide: m.divide,
    np.floor_divide: m.floordiv, np.remainder: m.mod, np.power: m.pow, np.matmul: m.matmul,
    np.negative: m.negative, np.absolute: m.abs, np.sign: m.sign, np.conjugate: m.conj,
    np.sqrt: m.sqrt, np.square: m.square, np.reciprocal: e.reciprocal,
    np.exp: m.exp, np.expm1: s.expm1, np.log: m.log, np.log1p: m.log1p, np.log2: e.log2, np.log10: e.log10,
    np.sin: m.sin, np.cos: m.cos, np.tan: s.tan, np.arcsin: e.asin, np.arccos: e.acos, np.arctan: e.atan,
    np.sinh: e.sinh, np.cosh: e.cosh, np.tanh: m.tanh, np.arcsinh: e.asinh, np.arccosh: e.acosh,
    np.arctanh: e.atanh, np.arctan2: e.atan2, np.hypot: e.hypot, np.logaddexp: e.logaddexp,
    np.maximum: m.maximum, np.minimum: m.minimum, np.floor: m.floor, np.ceil: e.ceil, np.rint: m.round,
    np.equal: m.equal, np.not_equal: m.not_equal, np.less: m.less, np.less_equal: m.less_equal,
    np.greater: m.greater, np.greater_equal: m.greater_equal, np.logical_and: m.logical_and,
    np.logical_or: m.logical_or, np.logical_not: m.logical_not, np.isnan: s.is_nan,
    np.isfinite: s.is_finite, np.isinf: c.is_inf, np.bitwise_and: b.bitwise_and, np.bitwise_or: b.bitwise_or,
    np.bitwise_xor: b.bitwise_xor, np.invert: b.invert, np.left_shift: b.left_shift, np.right_shift: b.right_shift,
}


def _symbolic(x):
    # a traced variable's value is refused by its own __array__ below
    return isinstance(x, Tensor) and not isinstance(x, EagerTensor)


def array_ufunc(ufunc, method, inputs, kwargs):
    """`Tensor.__array_ufunc__` and `Variable.__array_ufunc__` (see the module docstring)."""
    op = UFUNC_OPS.get(ufunc)
    if op is not None and method == "__call__" and not kwargs:
        return op(*inputs)
    operands = inputs + tuple(kwargs.get("out", ()))
    if any(_symbolic(x) for x in operands):
        call = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        use = f"df.{op.__name__}" if op is not None else "df ops"
        raise errors.TracingError(f"{call} was given a symbolic tensor: numpy cannot run inside a traced "
                                  f"function; use {use} (without numpy-only arguments)")
    arrays = tuple(np.asarray(x) if isinstance(x, ByIdentity) else x for x in inputs)
    if "out" in kwargs:
        kwargs = dict(kwargs, out=tuple(_writable_out(o) for o in kwargs["out"]))
    return getattr(ufunc, method)(*arrays, **kwargs)


def _writable_out(o):
    if isinstance(o, np.ndarray):
        return o
    raise TypeError(f"out= must be a numpy array, got {type(o).__name__}: tensors are immutable")
