"""Tensor methods with numpy's names and signatures: `t.T`, `t.reshape(2, 3)`, `t.sum(axis)`,
`t.mean`, `t.max`, `t.astype`, `t.size`, `t.flatten()`, `t.squeeze(axis)`.

Each is the df op of the same meaning, so it traces and differentiates like the op; the
dtype rules are df's (an integer sum keeps its dtype, an integer mean truncates; pass
`dtype=` for another). numpy functions that defer to these methods (`np.sum(t)`,
`np.reshape(t, s)`) give tensors too. `runtime.ops._install_operators` puts them on Tensor
and Variable.
"""
import operator

from defun.runtime import dtypes, errors, sites
from defun.runtime.ops import shape_rules
from defun.runtime.ops import array_ops as arr
from defun.runtime.ops import math_ops as m

__all__ = ["METHODS"]


def _no_out(method, out):
    if out is not None:
        raise errors.InvalidArgumentError(
            f"Tensor.{method}: out= is not supported (tensors are immutable); use the result")


def _in_dtype(x, dtype):
    if dtype is None:
        return x
    dtype = dtypes.as_dtype(dtype)
    return x if dtype is x.dtype else m.cast(x, dtype)


def transposed(self):
    """`t.T`: the axes reversed (the matrix transpose of a matrix), as numpy's `.T`."""
    return arr.transpose(self)


def size(self):
    """`t.size`: the number of elements, a Python int as in numpy.

    Eagerly it is always known; while tracing, only when every size is static. With unknown
    sizes there is no int to give: the error points to `df.size(t)`, a tensor computed when
    the graph runs.
    """
    n = shape_rules.num_elements(self.shape)
    if n is None:
        raise errors.TracingError(
            f"Tensor.size: a tensor of shape {shape_rules.shape_str(self.shape)} has sizes unknown while "
            f"tracing, so its size is no Python int (at {sites.format_site(sites.user_site())}); "
            f"use df.size(t), the size as a tensor computed when the graph runs")
    return n


def reshape(self, *shape, order="C"):
    """`t.reshape(2, 3)` or `t.reshape((2, -1))`: df.reshape (C order only)."""
    if order != "C":
        raise errors.InvalidArgumentError(f"Tensor.reshape: only order='C' is supported, got {order!r}")
    if len(shape) == 1:
        try:
            shape = (operator.index(shape[0]),)
        except TypeError:
            shape = shape[0]   # a tuple, list or shape tensor
    return arr.reshape(self, shape)


def flatten(self, order="C"):
    """`t.flatten()`: the elements as a 1-D tensor (C order)."""
    if order != "C":
        raise errors.InvalidArgumentError(f"Tensor.flatten: only order='C' is supported, got {order!r}")
    return arr.reshape(self, [-1])


def squeeze(self, axis=None):
    """`t.squeeze(axis=None)`: df.squeeze."""
    return arr.squeeze(self, axis)


def sum_(self, axis=None, dtype=None, out=None, keepdims=False):
    """`t.sum(axis=None, dtype=None, keepdims=False)`: df.reduce_sum (in `dtype` if given)."""
    _no_out("sum", out)
    return m.reduce_sum(_in_dtype(self, dtype), axis=axis, keepdims=keepdims)


def mean(self, axis=None, dtype=None, out=None, keepdims=False):
    """`t.mean(axis=None, dtype=None, keepdims=False)`: df.reduce_mean (in `dtype` if given)."""
    _no_out("mean", out)
    return m.reduce_mean(_in_dtype(self, dtype), axis=axis, keepdims=keepdims)


def max_(self, axis=None, out=None, keepdims=False):
    """`t.max(axis=None, keepdims=False)`: df.reduce_max."""
    _no_out("max", out)
    return m.reduce_max(self, axis=axis, keepdims=keepdims)


def astype(self, dtype):
    """`t.astype(dtype)`: df.cast."""
    return m.cast(self, dtype)


METHODS = {"T": property(transposed), "size": property(size), "reshape": reshape, "flatten": flatten,
           "squeeze": squeeze, "sum": sum_, "mean": mean, "max": max_, "astype": astype}
for _name, _f in METHODS.items():   # tracebacks and help() show `sum`, not `sum_`
    if not isinstance(_f, property):
        _f.__name__ = _f.__qualname__ = _name
