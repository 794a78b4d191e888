"""TensorSpec: the shape (None for any size) and dtype a function argument must have."""
from runtime import dtypes
from runtime.shapes import shape_fits

__all__ = ["TensorSpec"]


class TensorSpec:
    """The shape (None for any size) and dtype a function argument must have."""

    __slots__ = ("shape", "dtype", "name")

    def __init__(self, shape, dtype=dtypes.float32, name=None):
        if shape is None:
            raise ValueError("TensorSpec needs a shape (use None for unknown sizes, not for the rank)")
        self.shape = tuple(None if d is None else int(d) for d in shape)
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
