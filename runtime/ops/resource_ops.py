"""Variable ops on resource handles: read, the three assignments and the scatters (stateful).

Each assignment is atomic per variable: eagerly it holds the variable's lock while it reads
the old value and stores the new one, so concurrent `assign_add`s never lose an update; a
compiled plan that may assign holds the locks of all its variables for the whole call (the
undo log section of graph/executor.py) and binds the bare update. Reads take no lock: an
assignment stores a new array instead of writing into the old one, so a read always sees
one whole value.
"""
import threading

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.registry import register
from defun.runtime.ops import shape_rules


class VariableStore:
    """The mutable cell a resource handle points at.

    `lock` (reentrant) is held by every assignment and, for a whole call, by a plan that
    may assign; `serial` (the store's id: unique while it lives) orders locks, so calls taking several
    always take them in one order.
    """

    __slots__ = ("value", "shape", "dtype", "name", "lock", "serial")

    def __init__(self, value, name):
        self.value = value
        self.shape = value.shape
        self.dtype = value.dtype
        self.name = name
        self.lock = threading.RLock()
        self.serial = id(self)

    def __repr__(self):
        return f"<variable {self.name} {self.dtype}{list(self.shape)}>"


def _read_infer(shapes, dts, attrs):
    if dts[0] is not dtypes.resource:
        raise errors.InvalidArgumentError(
            f"read_variable: input 0 must be a resource handle, got {dts[0].name}")
    return [(tuple(attrs["shape"]), attrs["dtype"])]


def _read_kernel(h, dtype, shape):
    return h.value


_READ_VARIABLE_BATCH = "a variable handle is never a batched value: a read inside vmap is shared by every example"
_READ = register(
    name="read_variable",
    kernel=_read_kernel,
    infer=_read_infer,
    grad=lambda op, g: [g],
    num_inputs=1,
    attrs={"dtype": "dtype", "shape": "shape"},
    defaults={},
    stateful=True,
    onnx=lambda e, node, ins: e.variable(ins[0]),
    # the initializer of its value
    batch=_READ_VARIABLE_BATCH,
)   # the initializer of its value


def _check_assign(h, v, op_name):
    if v.shape != h.shape or v.dtype != h.dtype:
        raise errors.InvalidArgumentError(
            f"{op_name}: variable {h.name!r} holds {h.dtype.name}{list(h.shape)}, "
            f"cannot assign {v.dtype.name}{list(v.shape)}")


# The updates, run with the variable's lock held (by the eager kernel, or by the plan of a
# call that assigns). Each stores a new array: reads already taken keep their value, and an
# undo log can hold the old one.
def _assign(h, v):
    _check_assign(h, v, "assign_variable")
    h.value = v


def _assign_add(h, v):
    new = h.value + v
    _check_assign(h, new, "assign_add_variable")
    h.value = new


def _assign_sub(h, v):
    new = h.value - v
    _check_assign(h, new, "assign_sub_variable")
    h.value = new


def _register_update(name, update, infer, num_inputs):
    """An assignment op: the eager kernel takes the variable's lock around `update` (a
    read-modify-write, and it must wait for a call holding the variable, whose rollback
    would otherwise undo it); plans bind `update` itself, as a plan that may assign holds
    its variables' locks for the whole call (graph/executor.py). `with` rather than
    acquire/try: an interrupt cannot land between taking the lock and the try."""
    def kernel(h, *values, dtype, shape):
        with h.lock:
            update(h, *values)
    return register(
        name=name,
        kernel=kernel,
        infer=infer,
        grad=None,
        num_inputs=num_inputs,
        attrs=_ASSIGN_ATTRS,
        defaults={},
        num_outputs=0,
        stateful=True,
        bind=lambda attrs: update,
    )


def _assign_infer(name):
    def infer(shapes, dts, attrs):
        if dts[0] is not dtypes.resource:
            raise errors.InvalidArgumentError(f"{name}: input 0 must be a resource handle, got {dts[0].name}")
        if attrs["dtype"] is not dts[1]:
            raise errors.InvalidArgumentError(
                f"{name}: variable holds {attrs['dtype'].name}, cannot assign {dts[1].name}")
        try:
            out = shape_rules.broadcast_shapes(name, attrs["shape"], shapes[1])
        except errors.InvalidArgumentError:
            out = None
        if out != tuple(attrs["shape"]) or (name == "assign_variable" and len(shapes[1]) != len(attrs["shape"])):
            raise errors.InvalidArgumentError(
                f"{name}: variable has shape {shape_rules.shape_str(attrs['shape'])}, cannot assign "
                f"shape {shape_rules.shape_str(shapes[1])}")
        return []
    return infer


_ASSIGN_ATTRS = {"dtype": "dtype", "shape": "shape"}
_ASSIGN = _register_update("assign_variable", _assign, _assign_infer("assign_variable"), 2)
_ASSIGN_ADD = _register_update("assign_add_variable", _assign_add, _assign_infer("assign_add_variable"), 2)
_ASSIGN_SUB = _register_update("assign_sub_variable", _assign_sub, _assign_infer("assign_sub_variable"), 2)


# ------------------------------------------------------------------ sparse (scatter) updates
# Inputs (handle, indices, updates): rows `indices` along axis 0 of the variable take `updates`
# (shape indices.shape + variable.shape[1:]). Like the dense assignments, a scatter puts a new
# array in the cell instead of writing into the old one: reads already taken keep their
# value, and a failed graph call's undo log holds the old array. Nothing is densified: the
# update touches only its rows. Checked before anything changes, so a bad index leaves the
# variable as it was.

def _check_scatter(h, indices, updates, op_name):
    if indices.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(
            f"{op_name}: indices for variable {h.name!r} must be int32 or int64, got {indices.dtype.name}")
    if not h.shape:
        raise errors.InvalidArgumentError(
            f"{op_name}: variable {h.name!r} is a scalar; a scatter updates rows of a variable of "
            f"rank >= 1 (use assign for a scalar)")
    want = indices.shape + h.shape[1:]
    if updates.shape != want or updates.dtype != h.dtype:
        raise errors.InvalidArgumentError(
            f"{op_name}: variable {h.name!r} holds {h.dtype.name}{list(h.shape)}, so {indices.size} "
            f"indices take updates of {h.dtype.name}{list(want)}; got {updates.dtype.name}"
            f"{list(updates.shape)}")
    n = h.shape[0]
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        flat = indices.reshape(-1)
        bad = flat[(flat < 0) | (flat >= n)][0]
        raise errors.InvalidArgumentError(
            f"{op_name}: index {int(bad)} is out of range [0, {n}) for variable {h.name!r} of shape "
            f"{list(h.shape)}; the variable is unchanged")
    return indices.reshape(-1), updates.reshape((indices.size,) + h.shape[1:])


def _scatter_add(h, indices, updates):
    rows, vals = _check_scatter(h, indices, updates, "scatter_add_variable")
    new = h.value.copy()
    np.add.at(new, rows, vals)      # repeated indices add up
    h.value = new


def _scatter_sub(h, indices, updates):
    rows, vals = _check_scatter(h, indices, updates, "scatter_sub_variable")
    new = h.value.copy()
    np.subtract.at(new, rows, vals)
    h.value = new


def _scatter_update(h, indices, updates):
    rows, vals = _check_scatter(h, indices, updates, "scatter_update_variable")
    new = h.value.copy()
    new[rows] = vals                # a repeated index takes one of its updates
    h.value = new


def _scatter_infer(name):
    def infer(shapes, dts, attrs):
        if dts[0] is not dtypes.resource:
            raise errors.InvalidArgumentError(f"{name}: input 0 must be a resource handle, got {dts[0].name}")
        if dts[1] not in (dtypes.int32, dtypes.int64):
            raise errors.InvalidArgumentError(f"{name}: indices must be int32 or int64, got {dts[1].name}")
        var_shape = tuple(attrs["shape"])
        if not var_shape:
            raise errors.InvalidArgumentError(f"{name}: the variable is a scalar; a scatter needs rank >= 1")
        if attrs["dtype"] is not dts[2]:
            raise errors.InvalidArgumentError(
                f"{name}: variable holds {attrs['dtype'].name}, cannot scatter {dts[2].name} updates")
        want = tuple(shapes[1]) + var_shape[1:]
        got = tuple(shapes[2])
        if len(got) != len(want) or any(a is not None and b is not None and a != b for a, b in zip(got, want)):
            raise errors.InvalidArgumentError(
                f"{name}: variable has shape {shape_rules.shape_str(var_shape)} and indices shape "
                f"{shape_rules.shape_str(shapes[1])}, so updates must have shape {shape_rules.shape_str(want)}, got "
                f"{shape_rules.shape_str(got)}")
        return []
    return infer


def _scatter_op(name, fn):
    return _register_update(name, fn, _scatter_infer(name), 3)


_SCATTER_ADD = _scatter_op("scatter_add_variable", _scatter_add)
_SCATTER_SUB = _scatter_op("scatter_sub_variable", _scatter_sub)
_SCATTER_UPDATE = _scatter_op("scatter_update_variable", _scatter_update)

# Ops that change a variable's value: a graph plan logs the old value before each (rollback).
ASSIGN_OPS = frozenset(["assign_variable", "assign_add_variable", "assign_sub_variable",
                        "scatter_add_variable", "scatter_sub_variable", "scatter_update_variable"])
