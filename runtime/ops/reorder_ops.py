"""Array functions that reorder or repeat elements along axes: repeat, roll, reverse.

TensorFlow's names and semantics (`tf.repeat`, `tf.roll`, `tf.reverse`). Static arguments
(repeats, shifts, axes) are attrs; gradients are written with ops, and the linear ops pair
with their adjoints (`repeat` with the internal `repeat_grad`) so every order of gradient
exists.
"""
import numpy as np

from defun.runtime import errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops import array_ops as arr
from defun.runtime.ops.index_ops import _rank
from defun.runtime.ops._onnx import BIG, scatter_adjoint, shape_of
from defun.runtime.registry import register
from defun.runtime.tensor import Tensor
from defun.runtime import batching as bt


__all__ = ["repeat", "roll", "reverse"]


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


def _flat_axis(ctx, node, inputs, batched, flatten):
    """repeat / repeat_grad: axis None (the flattened tensor) becomes axis 1 of (B, -1)."""
    attrs = dict(node.attrs)
    xs = bt.materialize_all(ctx, node, inputs, batched)
    if attrs["axis"] is None:
        flat = [bt.flat_rows(ctx, x, t) for x, t in zip(xs[:flatten], node.inputs)]
        xs = flat + xs[flatten:]
        attrs["axis"] = 1
    else:
        attrs["axis"] = bt.norm_axis(node, attrs["axis"], len(node.inputs[0].shape))
    return attrs, xs


def _repeat_batch(ctx, node, inputs, batched):
    attrs, xs = _flat_axis(ctx, node, inputs, batched, 1)
    return bt.all_batched(bt.emit(node, xs, attrs))


_REPEAT = register(
    name="repeat",
    kernel=_repeat_kernel,
    infer=_repeat_infer,
    grad=lambda op, g: [run_op(_REPEAT_GRAD, (g, op.inputs[0]), op.attrs)],
    num_inputs=1,
    attrs=_REPEAT_ATTRS,
    defaults={"axis": None},
    onnx=_repeat_onnx,
    batch=_repeat_batch,
)
# Internal: the gradient of repeat (the sum of each element's copies); its gradient is repeat.
def _repeat_grad_infer(shapes, dts, attrs):
    # (g, x): g has the shape repeat gives x
    fwd = _repeat_infer([shapes[1]], [dts[1]], attrs)
    shape_rules.check_compatible("repeat_grad", "the gradient", shapes[0], "the repeated input", fwd[0][0])
    return [(tuple(shapes[1]), dts[0])]


def _repeat_grad_batch(ctx, node, inputs, batched):
    """(g, like): with axis None, `like` is flattened too and the result takes its shape."""
    attrs, xs = _flat_axis(ctx, node, inputs, batched, 2)
    out = bt.emit(node, xs, attrs)[0]
    if node.attrs["axis"] is None:
        out = bt.reshape_batch(ctx, out, bt.static_shape(node, node.outputs[0], "output"))
    return bt.all_batched([out])


_REPEAT_GRAD = register(
    name="repeat_grad",
    kernel=_repeat_grad_kernel,
    infer=_repeat_grad_infer,
    grad=lambda op, gg: [run_op(_REPEAT, (gg,), op.attrs), None],
    num_inputs=2,
    attrs=_REPEAT_ATTRS,
    defaults={"axis": None},
    onnx=_repeat_grad_onnx,
    batch=_repeat_grad_batch,
)


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
        rank = _rank(x)
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


_ROLL = register(
    name="roll",
    kernel=_roll_kernel,
    infer=_roll_infer,
    grad=lambda op, g: [run_op(_ROLL, (g,), {"shift": tuple(-s for s in op.attrs["shift"]),
        "axis": op.attrs["axis"]})],
    num_inputs=1,
    attrs={"shift": "ints", "axis": "ints"},
    defaults={},
    onnx=_roll_onnx,
    batch=bt.axes("axis"),
)


def roll(input, shift, axis, name=None):
    """Elements shifted cyclically by `shift` along `axis` (ints or equal-length lists; shifts
    of a repeated axis add up): `df.roll([0, 1, 2, 3], 1, 0) -> [3, 0, 1, 2]`."""
    shifts, _ = static_ints(shift, "roll", "shift")
    axes = _axes("roll", axis, _rank(input))
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


_REVERSE = register(
    name="reverse",
    kernel=lambda x, axis: x[_reverse_key(axis)],
    infer=_reverse_infer,
    grad=lambda op, g: [run_op(_REVERSE, (g,), op.attrs)],
    num_inputs=1,
    attrs={"axis": "ints"},
    defaults={},
    bind=lambda attrs: _bind_reverse(attrs["axis"]),
    onnx=_reverse_onnx,
    batch=bt.axes("axis"),
)


def _bind_reverse(axes):
    key = _reverse_key(axes)
    return lambda x: x[key]


def reverse(tensor, axis, name=None):
    """`tensor` with the order of its elements along each of `axis` reversed (TF's
    `tf.reverse`; numpy's `np.flip`): `df.reverse([[1, 2], [3, 4]], [1]) -> [[2, 1], [4, 3]]`."""
    axes = _axes("reverse", axis, _rank(tensor))
    if len(set(axes)) != len(axes):
        raise _args.error(f"reverse: axis {axes} names an axis twice")
    return run_op(_REVERSE, (tensor,), {"axis": axes}, name)
