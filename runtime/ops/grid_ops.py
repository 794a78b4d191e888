"""Array functions that build grids of values: linspace, meshgrid, outer.

TensorFlow's names and semantics (`tf.linspace`, `tf.meshgrid`), numpy's for `outer`.
Static arguments (num, axis, indexing) are attrs; gradients are written with ops.
"""
import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops import math_ops as m
from defun.runtime.ops import array_ops as arr
from defun.runtime.ops.index_ops import _rank
from defun.runtime.registry import one_of, register
from defun.runtime import batching as bt


__all__ = ["linspace", "meshgrid", "outer"]


# ------------------------------------------------------------------ linspace
def _linspace_infer(shapes, dts, attrs):
    shape_rules.check_same("linspace", dts)
    shape_rules.check_kinds("linspace", dts[0], "f")
    s = list(shape_rules.broadcast_shapes("linspace", shapes[0], shapes[1]))
    num, axis = attrs["num"], attrs["axis"]
    if num < 0:
        raise errors.InvalidArgumentError(f"linspace: num must be >= 0, got {num}")
    if not 0 <= axis <= len(s):
        raise errors.InvalidArgumentError(
            f"linspace: axis {axis} is out of range for an output of rank {len(s) + 1}")
    s.insert(axis, num)
    return [(tuple(s), dts[0])]


def _linspace_kernel(start, stop, num, axis):
    return np.linspace(start, stop, num, axis=axis).astype(start.dtype, copy=False)


def _linspace_weights(op):
    """w with out = start * (1 - w) + stop * w, shaped to broadcast along the output's axis."""
    num, axis = op.attrs["num"], op.attrs["axis"]
    w = np.arange(num, dtype=np.float64) / max(num - 1, 1)
    shape = [1] * len(op.outputs[0].shape)
    shape[axis] = num
    return w.reshape(shape).astype(op.inputs[0].dtype.np)


def _linspace_grad(op, g):
    start, stop = op.inputs
    w = _linspace_weights(op)
    axis = op.attrs["axis"]
    return [m.unbroadcast(m.reduce_sum(m.multiply(g, 1 - w), axis=axis), start),
            m.unbroadcast(m.reduce_sum(m.multiply(g, w), axis=axis), stop)]


def _linspace_onnx(e, node, ins):
    """start + i * (stop - start) / (num - 1) along the new axis in float64, the last value
    stop itself (as numpy's linspace), rounded once to the dtype."""
    num, axis = node.attrs["num"], node.attrs["axis"]
    rank = len(node.outputs[0].shape)
    both = e.op("Shape", e.op("Add", ins[0], ins[1]))   # their broadcast shape
    start, stop = (e.unsqueeze(e.op("Expand", e.cast(x, dtypes.float64), both), [axis]) for x in ins)
    shape = [1] * rank
    shape[axis] = num
    steps = e.op("Reshape", e.op("Range", *[e.scalar(v, dtypes.float64) for v in (0, num, 1)]), e.ints(shape))
    step = e.op("Div", e.op("Sub", stop, start), e.scalar(max(num - 1, 1), dtypes.float64))
    out = e.op("Add", start, e.op("Mul", steps, step))
    if num > 1:
        head = e.op("Slice", out, e.ints([0]), e.ints([num - 1]), e.ints([axis]))
        last = e.op("Expand", stop, e.op("Shape", e.op("Slice", out, e.ints([0]), e.ints([1]), e.ints([axis]))))
        out = e.op("Concat", head, last, axis=axis)
    return e.cast(out, node.outputs[0].dtype)


_LINSPACE = register(
    name="linspace",
    kernel=_linspace_kernel,
    infer=_linspace_infer,
    grad=_linspace_grad,
    num_inputs=2,
    attrs={"num": "int", "axis": "int"},
    defaults={"axis": 0},
    same_dtype=(0, 1),
    kinds="f",
    onnx=_linspace_onnx,
    batch=bt.axes("axis", rank_of="output", align=True),
)


def _is_number(v):
    """A Python int or float: not a bool, nor a numpy scalar (np.float64 subclasses float,
    and keeps its dtype)."""
    return type(v) in (int, float)


def linspace(start, stop, num, axis=0, name=None):
    """`num` evenly spaced values from `start` to `stop` (both included), along a new `axis`;
    `start`/`stop` may be tensors (broadcast together): `df.linspace(0., 1., 5)`."""
    if _is_number(start) and _is_number(stop):  # a range of Python numbers is float32
        start, stop = np.float32(start), np.float32(stop)
    num = _args.count_arg("linspace", num, "num")
    rank = max(_rank(start), _rank(stop)) + 1
    axis = _args.axis_arg("linspace", axis, rank)
    return run_op(_LINSPACE, (start, stop), {"num": num, "axis": axis}, name)


# ------------------------------------------------------------------ meshgrid
def _meshgrid_positions(n, indexing):
    """Output axis of each input: with "xy" the first two swap (numpy's and TF's rule)."""
    pos = list(range(n))
    if indexing == "xy" and n >= 2:
        pos[0], pos[1] = 1, 0
    return pos


def _meshgrid_infer(shapes, dts, attrs):
    indexing = attrs["indexing"]
    if indexing not in ("xy", "ij"):
        raise errors.InvalidArgumentError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    if not shapes:
        raise errors.InvalidArgumentError("meshgrid: needs at least one input")
    shape_rules.check_same("meshgrid", dts)
    for s in shapes:
        if len(s) != 1:
            raise errors.InvalidArgumentError(
                f"meshgrid: inputs must be 1-D, got shapes {', '.join(shape_rules.shape_str(t) for t in shapes)}; "
                f"use df.reshape(x, [-1])")
    out = [None] * len(shapes)
    for k, p in enumerate(_meshgrid_positions(len(shapes), indexing)):
        out[p] = shapes[k][0]
    return [(tuple(out), dts[0])] * len(shapes)


def _meshgrid_kernel(*xs, indexing):
    # numpy would flatten N-D inputs and promote mixed dtypes: refuse them as inference does
    _meshgrid_infer([x.shape for x in xs], [dtypes.from_numpy(x.dtype) for x in xs], {"indexing": indexing})
    return tuple(np.meshgrid(*xs, indexing=indexing))


def _meshgrid_grad(op, *gs):
    n = len(op.inputs)
    pos = _meshgrid_positions(n, op.attrs["indexing"])
    return [None if g is None else m.reduce_sum(g, axis=tuple(d for d in range(n) if d != pos[k]))
            for k, g in enumerate(gs)]


def _meshgrid_onnx(e, node, ins):
    """Each input laid along its output axis, expanded to the grid's shape."""
    n = len(ins)
    pos = _meshgrid_positions(n, node.attrs["indexing"])
    sizes = [None] * n
    for k, p in enumerate(pos):
        sizes[p] = e.dim(ins[k], 0, node.inputs[k].shape)
    grid = e.op("Concat", *sizes, axis=0)
    outs = []
    for k, p in enumerate(pos):
        shape = [1] * n
        shape[p] = -1
        outs.append(e.op("Expand", e.op("Reshape", ins[k], e.ints(shape)), grid))
    return outs


def _meshgrid_batch(ctx, node, inputs, batched):
    """Each 1-D input varies along one output axis: reshaped onto it and broadcast."""
    n = len(inputs)
    xy = node.attrs["indexing"] == "xy" and n >= 2
    shape = bt.static_shape(node, node.outputs[0], "output")
    outs = []
    for k, x in enumerate(bt.materialize_all(ctx, node, inputs, batched)):
        along = {0: 1, 1: 0}.get(k, k) if xy else k
        s = [1] * n
        s[along] = shape[along]
        outs.append(bt.broadcast_batch(ctx, bt.reshape_batch(ctx, x, s), shape))
    return bt.all_batched(outs)


_MESHGRID = register(
    name="meshgrid",
    kernel=_meshgrid_kernel,
    infer=_meshgrid_infer,
    grad=_meshgrid_grad,
    num_inputs=None,
    attrs={"indexing": one_of("xy", "ij")},
    defaults={"indexing": "xy"},
    num_outputs=lambda attrs, n: n,
    none_grads=True,
    onnx=_meshgrid_onnx,
    batch=_meshgrid_batch,
)


def meshgrid(*args, indexing="xy", name=None):
    """Coordinate grids from 1-D tensors, one output per input (numpy's and TF's meshgrid):
    with `indexing="xy"` outputs have shape (len(y), len(x), ...), with "ij" (len(x), len(y), ...)."""
    if not args:
        raise _args.error("meshgrid: needs at least one input")
    if indexing not in ("xy", "ij"):
        raise _args.error(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    return list(run_op(_MESHGRID, args, {"indexing": indexing}, name))


# ------------------------------------------------------------------ outer
def outer(a, b, name=None):
    """Outer product of two tensors, flattened first (numpy's `outer`): shape (a.size, b.size)."""
    return m.multiply(arr.reshape(a, [-1, 1]), arr.reshape(b, [1, -1]), name=name)
