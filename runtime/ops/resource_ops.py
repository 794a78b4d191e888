"""Variable ops on resource handles: read and the three assignments (stateful)."""
import numpy as np

from runtime import dtypes, errors
from runtime.registry import register
from runtime.ops import _infer as inf


class VariableStore:
    """The mutable cell a resource handle points at."""

    __slots__ = ("value", "shape", "dtype", "name")

    def __init__(self, value, name):
        self.value = value
        self.shape = value.shape
        self.dtype = value.dtype
        self.name = name

    def __repr__(self):
        return f"<variable {self.name} {self.dtype}{list(self.shape)}>"


def _read_infer(shapes, dts, attrs):
    if dts[0] is not dtypes.resource:
        raise errors.InvalidArgumentError(
            f"read_variable: input 0 must be a resource handle, got {dts[0].name}")
    return [(tuple(attrs["shape"]), attrs["dtype"])]


def _read_kernel(h, dtype, shape):
    return h.value


_READ = register("read_variable", _read_kernel, _read_infer, lambda op, g: [g], stateful=True,
                 attrs={"dtype": "dtype", "shape": "shape"}, num_inputs=1, defaults={})


def _check_assign(h, v, op_name):
    if v.shape != h.shape or v.dtype != h.dtype:
        raise errors.InvalidArgumentError(
            f"{op_name}: variable {h.name!r} holds {h.dtype.name}{list(h.shape)}, "
            f"cannot assign {v.dtype.name}{list(v.shape)}")


def _assign(h, v):
    _check_assign(h, v, "assign_variable")
    h.value = v


def _assign_add(h, v):
    new = h.value + v  # a new array: earlier reads keep their value
    _check_assign(h, new, "assign_add_variable")
    h.value = new


def _assign_sub(h, v):
    new = h.value - v
    _check_assign(h, new, "assign_sub_variable")
    h.value = new


def _assign_infer(name):
    def infer(shapes, dts, attrs):
        if dts[0] is not dtypes.resource:
            raise errors.InvalidArgumentError(f"{name}: input 0 must be a resource handle, got {dts[0].name}")
        if attrs["dtype"] is not dts[1]:
            raise errors.InvalidArgumentError(
                f"{name}: variable holds {attrs['dtype'].name}, cannot assign {dts[1].name}")
        try:
            out = inf.broadcast_shapes(name, attrs["shape"], shapes[1])
        except errors.InvalidArgumentError:
            out = None
        if out != tuple(attrs["shape"]) or (name == "assign_variable" and len(shapes[1]) != len(attrs["shape"])):
            raise errors.InvalidArgumentError(
                f"{name}: variable has shape {inf.shape_str(attrs['shape'])}, cannot assign "
                f"shape {inf.shape_str(shapes[1])}")
        return []
    return infer


_ASSIGN_ATTRS = {"dtype": "dtype", "shape": "shape"}
_ASSIGN = register("assign_variable", lambda h, v, dtype, shape: _assign(h, v),
                   _assign_infer("assign_variable"), None, num_outputs=0, stateful=True,
                   attrs=_ASSIGN_ATTRS, num_inputs=2, defaults={})
_ASSIGN_ADD = register("assign_add_variable",
                       lambda h, v, dtype, shape: _assign_add(h, v),
                       _assign_infer("assign_add_variable"), None, num_outputs=0, stateful=True,
                       attrs=_ASSIGN_ATTRS, num_inputs=2, defaults={})
_ASSIGN_SUB = register("assign_sub_variable",
                       lambda h, v, dtype, shape: _assign_sub(h, v),
                       _assign_infer("assign_sub_variable"), None, num_outputs=0, stateful=True,
                       attrs=_ASSIGN_ATTRS, num_inputs=2, defaults={})

ASSIGN_OPS = frozenset(["assign_variable", "assign_add_variable", "assign_sub_variable"])
