"""IndexedSlices: a sparse gradient (rows `indices` of a `dense_shape` tensor hold `values`).

A plain data class; its ops (densify, aggregate) are declared beside `gather` in array_ops.
"""
import numpy as np

from defun.runtime import registry
from defun.runtime.execute import run_op
from defun.runtime.tensor import Tensor

__all__ = ["IndexedSlices", "dense"]


class IndexedSlices:
    """Sparse rows of a dense tensor; gradients of `gather` come as these.

    `values[i]` is the slice at row `indices[i]` of a tensor of shape `dense_shape`;
    repeated indices add up. `df.convert_to_tensor(s)` / `np.asarray(s)` give the dense value.
    """

    __slots__ = ("values", "indices", "dense_shape", "shape")

    def __init__(self, values, indices, dense_shape):
        self.values = values
        self.indices = indices
        self.dense_shape = self.shape = tuple(dense_shape)    # shape: the dense tensor's

    @property
    def dtype(self):
        """The DType of the values."""
        return self.values.dtype

    def _as_tensor(self):
        # by name: the op is declared in array_ops, above this module
        return run_op(registry.get("indexed_slices_to_dense"), (self.values, self.indices),
                      {"dense_shape": self.dense_shape})

    def __array__(self, dtype=None, copy=None):
        dense = np.asarray(self._as_tensor())
        return dense.astype(dtype) if dtype is not None else dense

    def numpy(self):
        return np.asarray(self)

    def __repr__(self):
        indices = self.indices if _symbolic(self.indices) else np.asarray(self.indices).tolist()
        return (f"IndexedSlices(indices={indices}, "
                f"dense_shape={self.dense_shape})")


def dense(g):
    """`g` as a dense tensor: an IndexedSlices densified, anything else as it is (for code
    that takes tensors only, such as a function's backward fed a gather's gradient)."""
    return g._as_tensor() if isinstance(g, IndexedSlices) else g


def _symbolic(t):
    return isinstance(t, Tensor) and not hasattr(t, "_value")
