"""IndexedSlices: a sparse gradient (rows `indices` of a `dense_shape` tensor hold `values`)."""
import numpy as np

from runtime import dtypes
from runtime.execute import run_op
from runtime.registry import register
from runtime.tensor import Tensor

__all__ = ["IndexedSlices", "aggregate_indexed_slices"]


def _to_dense_kernel(values, indices, dense_shape):
    out = np.zeros(dense_shape, values.dtype)
    np.add.at(out, indices, values)
    return out


def _to_dense_grad(op, g):
    from runtime.ops.array_ops import gather
    return [gather(g, op.inputs[1]), None]


_TO_DENSE = register(
    "indexed_slices_to_dense", _to_dense_kernel,
    lambda shapes, dts, attrs: [(tuple(attrs["dense_shape"]), dts[0])], _to_dense_grad,
    attrs={"dense_shape": "shape"})


class IndexedSlices:
    """Sparse rows of a dense tensor; gradients of `gather` come as these.

    `values[i]` is the slice at row `indices[i]` of a tensor of shape `dense_shape`;
    repeated indices add up. `df.convert_to_tensor(s)` / `np.asarray(s)` give the dense value.
    """

    __slots__ = ("values", "indices", "dense_shape")

    def __init__(self, values, indices, dense_shape):
        self.values = values
        self.indices = indices
        self.dense_shape = tuple(dense_shape)

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def shape(self):
        return self.dense_shape

    def _as_tensor(self):
        return run_op(_TO_DENSE, (self.values, self.indices), {"dense_shape": self.dense_shape})

    def __array__(self, dtype=None, copy=None):
        dense = np.asarray(self._as_tensor())
        return dense.astype(dtype) if dtype is not None else dense

    def numpy(self):
        return np.asarray(self)

    def __repr__(self):
        return (f"IndexedSlices(indices={np.asarray(self.indices).tolist() if not _symbolic(self.indices) else self.indices}, "
                f"dense_shape={self.dense_shape})")


def _symbolic(t):
    return isinstance(t, Tensor) and not hasattr(t, "_value")


def aggregate_indexed_slices(slices):
    """Sum of several IndexedSlices, still sparse: values and indices concatenated."""
    from runtime.ops.array_ops import concat
    from runtime.ops.math_ops import cast
    indices = [s.indices for s in slices]
    if any(i.dtype is not indices[0].dtype for i in indices):
        # gathers with int32 and int64 indices: concat needs one dtype; int64 holds both
        indices = [i if i.dtype is dtypes.int64 else cast(i, dtypes.int64) for i in indices]
    return IndexedSlices(concat([s.values for s in slices], 0), concat(indices, 0),
                         slices[0].dense_shape)
