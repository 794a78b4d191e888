"""More array functions: repeat, roll, reverse, linspace, meshgrid, outer.

TensorFlow's names and semantics (`tf.repeat`, `tf.roll`, `tf.reverse`, `tf.linspace`,
`tf.meshgrid`), numpy's for `outer`. Static arguments (repeats, shifts, axes, num) are
attrs; gradients are written with ops, and the linear ops pair with their adjoints
(`repeat` with the internal `repeat_grad`) so every order of gradient exists.
"""

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops import math_ops as m
from defun.runtime.ops import array_ops as arr
from defun.runtime.ops._onnx import BIG, scatter_adjoint, shape_of
from defun.runtime.registry import one_of, register
from defun.runtime.tensor import Tensor
from defun.runtime import batching as bt
from defun.runtime.ops import _batch as vb

__all__ = ["repeat", "roll", "reverse", "linspace", "meshgrid", "outer"]


# ---------------------------------------------------------------------------------------
# Helpers

def static_ints(value, op_name, what):
    """`value` (int, list, array, eager tensor, or a traced tensor known while tracing) as
    a tuple of Python ints, and whether it was a scalar."""
    if isinstance(value, (list, tuple)):
        return _args.int_list_arg(op_name, value, what), False
    if isinstance(value, (Tensor, np.ndarray)) or hasattr(value, "_as_tensor"):
        arr = value if isinstance(value, np.ndarray) else _args.value_now(op_name, value, what)
        if arr.ndim == 1:
            return _args.int_list_arg(op_name, arr, what), False
    return (_args.int_arg(op_name, value, what),), True


def rank_of(x):
    s = getattr(x, "shape", None)
    return len(s) if s is not None else np.ndim(x)


def _axes(op_name, axis, rank):
    """Axes (ints or a list) normalized to non-negative ints, each in range."""
    axes, _ = static_ints(axis, op_name, "axis")
    return tuple(_args.axis_arg(op_name, ax, rank) for ax in axes)


# ------------------------------------------------------------------ repeat
def _check_counts(repeats, n):
    """One count, or one count per element of the repeated axis (of size n, None: unknown)."""
    if len(repeats) != 1 and n is not None and len(repeats) != n:
        raise errors.InvalidArgumentError(
            f"repeat: repeats has {len(repeats)} entries but the axis has size {n}; pass one "
            f"count per element or a single count")


def _repeated_size(repeats, n):
    _check_counts(repeats, n)
    if len(repeats) == 1:
        return None if n is None else n * repeats[0]
    return sum(repeats)


def _repeat_infer(shapes, dts, attrs):
    s, repeats, axis = tuple(shapes[0]), attrs["repeats"], attrs["axis"]
    if min(repeats) < 0:
        raise errors.InvalidArgumentError(f"repeat: repeats must be >= 0, got {repeats}")
    if axis is None:
        return [((_repeated_size(repeats, shape_rules.num_elements(s)),), dts[0])]
    if not s:
        raise errors.InvalidArgumentError("repeat: a scalar has no axis to repeat along; pass axis=None")
    axis = shape_rules.normalize_axis("repeat", axis, len(s))
    out = list(s)
    out[axis] = _repeated_size(repeats, s[axis])
    return [(tuple(out), dts[0])]


def _repeat_kernel(x, repeats, axis):
    if axis is None:
        x, axis = x.reshape(-1), 0
    _check_counts(repeats, x.shape[axis])
    return np.repeat(x, repeats[0] if len(repeats) == 1 else repeats, axis)


def _repeat_grad_kernel(g, x, repeats, axis):
    """The adjoint of repeat: sums each run of copies back into its element."""
    shape = x.shape
    if axis is None:
        x, axis = x.reshape(-1), 0
    n = x.shape[axis]
    if len(repeats) == 1:
        r = repeats[0]
        grouped = g.reshape(g.shape[:axis] + (n, r) + g.shape[axis + 1:])
        out = np.add.reduce(grouped, axis + 1, g.dtype)
    else:
        ids = np.repeat(np.arange(n), repeats)
        out = np.zeros(x.shape, g.dtype)
        np.add.at(np.moveaxis(out, axis, 0), ids, np.moveaxis(g, axis, 0))
    return out.reshape(shape)


class _Static:
    """A stand-in with a static `shape` (for shape_of)."""

    def __init__(self, shape):
        self.shape = tuple(shape)


def _repeat_onnx_of(e, x, shape, repeats, axis):
    """ONNX of repeat on `x` of static `shape`: one count tiles a new axis after `axis` and
    merges it; per-element counts gather the repeated positions."""
    if axis is None:
        x, axis, shape = e.op("Reshape", x, e.ints([-1])), 0, (None,)
    if len(repeats) != 1:
        return e.op("Gather", x, e.ints(np.repeat(np.arange(len(repeats)), repeats)), axis=axis)
    r = repeats[0]
    tiles = [1] * (len(shape) + 1)
    tiles[axis + 1] = r
    tiled = e.op("Tile", e.unsqueeze(x, [axis + 1]), e.ints(tiles))
    scale = [1] * len(shape)
    scale[axis] = r
    return e.op("Reshape", tiled, e.op("Mul", shape_of(e, x, _Static(shape)), e.ints(scale)))


def _repeat_onnx(e, node, ins):
    return _repeat_onnx_of(e, ins[0], node.inputs[0].shape, node.attrs["repeats"], node.attrs["axis"])


def _repeat_grad_onnx(e, node, ins):
    like = node.inputs[1]
    return scatter_adjoint(e, ins[0], shape_of(e, ins[1], like), node.outputs[0].dtype, lambda idx: _repeat_onnx_of(
        e, idx, like.shape, node.attrs["repeats"], node.attrs["axis"]))


_REPEAT_ATTRS = {"repeats": "ints", "axis": "opt_int"}
_REPEAT = register("repeat", _repeat_kernel, _repeat_infer,
                   lambda op, g: [run_op(_REPEAT_GRAD, (g, op.inputs[0]), op.attrs)],
                   num_inputs=1, attrs=_REPEAT_ATTRS, defaults={"axis": None}, onnx=_repeat_onnx, batch=vb.repeat)
# Internal: the gradient of repeat (the sum of each element's copies); its gradient is repeat.
def _repeat_grad_infer(shapes, dts, attrs):
    # (g, x): g has the shape repeat gives x
    fwd = _repeat_infer([shapes[1]], [dts[1]], attrs)
    shape_rules.check_compatible("repeat_grad", "the gradient", shapes[0], "the repeated input", fwd[0][0])
    return [(tuple(shapes[1]), dts[0])]


_REPEAT_GRAD = register("repeat_grad", _repeat_grad_kernel, _repeat_grad_infer,
                        lambda op, gg: [run_op(_REPEAT, (gg,), op.attrs), None],
                        num_inputs=2, attrs=_REPEAT_ATTRS, defaults={"axis": None}, onnx=_repeat_grad_onnx, batch=vb.repeat_grad)


def repeat(x, repeats, axis=None, name=None):
    """Each element repeated `repeats` times along `axis` (None: of the flattened input).

    `repeats` is one count or one count per element:
    `df.repeat([1, 2], 2) -> [1, 1, 2, 2]`, `df.repeat([[1, 2]], [1, 2], axis=1) -> [[1, 2, 2]]`.
    """
    counts, _ = static_ints(repeats, "repeat", "repeats")
    if not counts:
        raise _args.error("repeat: repeats is empty; pass a count")
    if min(counts) < 0:
        raise _args.error(f"repeat: repeats must be >= 0, got {list(counts)}")
    if axis is not None:
        rank = rank_of(x)
        if rank == 0:
            raise _args.error("repeat: a scalar has no axis to repeat along; pass axis=None")
        axis = _args.axis_arg("repeat", axis, rank)
    return run_op(_REPEAT, (x,), {"repeats": counts, "axis": axis}, name)


# ------------------------------------------------------------------ roll
def _roll_infer(shapes, dts, attrs):
    s = tuple(shapes[0])
    if len(attrs["shift"]) != len(attrs["axis"]):
        raise errors.InvalidArgumentError(
            f"roll: shift {attrs['shift']} and axis {attrs['axis']} must have the same length")
    for ax in attrs["axis"]:
        if not 0 <= ax < len(s):
            raise errors.InvalidArgumentError(
                f"roll: axis {ax} is out of range for a tensor of rank {len(s)}")
    return [(s, dts[0])]


def _roll_kernel(x, shift, axis):
    return np.roll(x, shift, axis) if axis else x.copy()


def _roll_onnx(e, node, ins):
    """Per axis: the last k = shift mod n elements, then the others (k found when run if n is
    unknown; k = 0 gives the whole axis, then nothing)."""
    x, shape = ins[0], node.inputs[0].shape
    for shift, axis in zip(node.attrs["shift"], node.attrs["axis"]):
        if shape[axis] is not None and not shift % max(shape[axis], 1):
            continue
        k = e.ints([shift % shape[axis]]) if shape[axis] else e.op("Mod", e.ints([shift]), e.dim(x, axis))
        tail = e.op("Slice", x, e.op("Neg", k), e.ints([BIG]), e.ints([axis]))
        head = e.op("Slice", x, e.ints([0]), e.op("Neg", k), e.ints([axis]))
        x = e.op("Concat", tail, head, axis=axis)
    return e.op("Identity", x)


_ROLL = register("roll", _roll_kernel, _roll_infer,
                 lambda op, g: [run_op(_ROLL, (g,), {"shift": tuple(-s for s in op.attrs["shift"]),
                                                     "axis": op.attrs["axis"]})],
                 num_inputs=1, attrs={"shift": "ints", "axis": "ints"}, defaults={}, onnx=_roll_onnx, batch=bt.axes("axis"))


def roll(input, shift, axis, name=None):
    """Elements shifted cyclically by `shift` along `axis` (ints or equal-length lists; shifts
    of a repeated axis add up): `df.roll([0, 1, 2, 3], 1, 0) -> [3, 0, 1, 2]`."""
    shifts, _ = static_ints(shift, "roll", "shift")
    axes = _axes("roll", axis, rank_of(input))
    if len(shifts) != len(axes):
        raise _args.error(f"roll: shift {shifts} and axis {axes} must have the same length")
    return run_op(_ROLL, (input,), {"shift": shifts, "axis": axes}, name)


# ------------------------------------------------------------------ reverse
def _reverse_infer(shapes, dts, attrs):
    s = tuple(shapes[0])
    axes = attrs["axis"]
    for ax in axes:
        if not 0 <= ax < len(s):
            raise errors.InvalidArgumentError(
                f"reverse: axis {ax} is out of range for a tensor of rank {len(s)}")
    _distinct_axes(axes)
    return [(s, dts[0])]


def _distinct_axes(axes):
    if len(set(axes)) != len(axes):   # (the kernel would reverse a repeated axis once)
        raise errors.InvalidArgumentError(f"reverse: axis {axes} names an axis twice")


def _reverse_key(axes):
    """The index reversing `axes`: a view, as np.flip makes it, without its Python wrapper."""
    n = max(axes) + 1 if axes else 0
    return tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(n))


def _reverse_onnx(e, node, ins):
    axes = list(node.attrs["axis"])
    if not axes:
        return e.op("Identity", ins[0])
    k = len(axes)
    return e.op("Slice", ins[0], e.ints([-1] * k), e.ints([-BIG] * k), e.ints(axes), e.ints([-1] * k))


_REVERSE = register("reverse", lambda x, axis: x[_reverse_key(axis)], _reverse_infer,
                    lambda op, g: [run_op(_REVERSE, (g,), op.attrs)],
                    num_inputs=1, attrs={"axis": "ints"}, defaults={}, onnx=_reverse_onnx,
                    bind=lambda attrs: _bind_reverse(attrs["axis"]), batch=bt.axes("axis"))


def _bind_reverse(axes):
    key = _reverse_key(axes)
    return lambda x: x[key]


def reverse(tensor, axis, name=None):
    """`tensor` with the order of its elements along each of `axis` reversed (TF's
    `tf.reverse`; numpy's `np.flip`): `df.reverse([[1, 2], [3, 4]], [1]) -> [[2, 1], [4, 3]]`."""
    axes = _axes("reverse", axis, rank_of(tensor))
    if len(set(axes)) != len(axes):
        raise _args.error(f"reverse: axis {axes} names an axis twice")
    return run_op(_REVERSE, (tensor,), {"axis": axes}, name)


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


_LINSPACE = register("linspace", _linspace_kernel, _linspace_infer, _linspace_grad,
                     num_inputs=2, attrs={"num": "int", "axis": "int"}, defaults={"axis": 0},
                     same_dtype=(0, 1), kinds="f", onnx=_linspace_onnx, batch=bt.axes("axis", rank_of="output", align=True))


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
    rank = max(rank_of(start), rank_of(stop)) + 1
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


_MESHGRID = register("meshgrid", _meshgrid_kernel, _meshgrid_infer, _meshgrid_grad,
                     num_inputs=None, attrs={"indexing": one_of("xy", "ij")}, defaults={"indexing": "xy"},
                     num_outputs=lambda attrs, n: n, none_grads=True, onnx=_meshgrid_onnx, batch=vb.meshgrid)


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
