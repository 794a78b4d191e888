"""TensorSpec: the shape (None for any size) and dtype a function argument must have."""
import numpy as np

from defun.runtime import dtypes
from defun.runtime.shapes import shape_fits

__all__ = ["TensorSpec"]


class TensorSpec:
    """The shape (None for any size) and dtype a function argument must have."""

    __slots__ = ("shape", "dtype", "name")

    def __init__(self, shape, dtype=dtypes.float32, name=None):
        if shape is None:
            raise ValueError("TensorSpec needs a shape (use None for unknown sizes, not for the rank)")
        self.shape = _spec_shape(shape)
        self.dtype = dtypes.as_dtype(dtype)
        self.name = name

    @classmethod
    def from_tensor(cls, t, name=None):
        return cls(t.shape, t.dtype, name)

    def is_compatible_with(self, t):
        """True if `t` (a tensor, or a spec) has this dtype and fits this shape."""
        return t.dtype is self.dtype and shape_fits(t.shape, self.shape)

    def __eq__(self, other):
        return isinstance(other, TensorSpec) and (self.shape, self.dtype, self.name) == \
            (other.shape, other.dtype, other.name)

    def __hash__(self):
        return hash((self.shape, self.dtype.name, self.name))

    def __repr__(self):
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype!r}{', name=%r' % self.name if self.name else ''})"


def _spec_shape(shape):
    """`shape` as a tuple of sizes: non-negative ints, or None for a size known only at run time."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"TensorSpec: shape must be a list of ints or None (unknown sizes), got {shape!r:.60}")
    out = []
    for k, d in enumerate(shape):
        if d is not None and (isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer))):
            raise TypeError(f"TensorSpec: shape[{k}] must be an int or None (an unknown size), got "
                            f"{type(d).__name__} {d!r:.40} in shape {list(shape)!r:.80}")
        if d is not None and d < 0:
            raise ValueError(f"TensorSpec: shape[{k}] is {d}; sizes must be >= 0, or None for an "
                             f"unknown size (not -1)")
        out.append(None if d is None else int(d))
    return tuple(out)
