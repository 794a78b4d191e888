"""Ops that keep their input's values and change only its shape or dtype: identity,
stop_gradient, zeros_like / ones_like, reshape (static, like another tensor, or to a shape
computed when the graph runs), expand_dims, squeeze, shape, size and cast.

The lowest op module: base_ops builds broadcasting and reduce_sum on it and re-exports its
functions, so gradients find every op they are written with in one place.
"""
import math

import numpy as np

from defun.runtime import batching as bt
from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.fused import Elementwise as Ew
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops._onnx import shape_of
from defun.runtime.registry import register

__all__ = ["identity", "stop_gradient", "zeros_like", "ones_like", "reshape", "expand_dims", "squeeze",
           "shape", "size", "cast"]

_EMPTY = {}


# ------------------------------------------------------------------ identity, stop_gradient
_IDENTITY = register(
    name="identity",
    kernel=lambda x: x,
    infer=shape_rules.unary_same("identity"),
    grad=lambda op, g: [g],
    num_inputs=1,
    attrs={},
    defaults={},
    fused=Ew("{0}"),
    onnx="Identity",
    batch=bt.elementwise,
)
_STOP_GRADIENT = register(
    name="stop_gradient",
    kernel=lambda x: x,
    infer=shape_rules.unary_same("stop_gradient"),
    grad=None,
    num_inputs=1,
    attrs={},
    defaults={},
    fused=Ew("{0}"),
    onnx="Identity",
    batch=bt.elementwise,
)


def identity(input, name=None):  # noqa: A002  (TF's parameter names, here and below)
    """The same value as a new tensor (a node of its own while tracing)."""
    return run_op(_IDENTITY, (input,), _EMPTY, name)


def stop_gradient(input, name=None):  # noqa: A002
    """The same value, with no gradient flowing back through it."""
    return run_op(_STOP_GRADIENT, (input,), _EMPTY, name)


# ------------------------------------------------------------------ zeros_like / ones_like
def _filled_like(value):
    """np.zeros_like / np.ones_like (same layout, an array even for a numpy scalar) without
    their Python wrapper: -1 us per call (a gradient's seed is one)."""
    def kernel(x):
        out = _empty_like(x)
        out.fill(value)
        return out
    return kernel


def _filled_like_onnx(value):
    def form(e, node, ins):
        t = node.outputs[0]
        return e.op("Expand", e.scalar(value, t.dtype), shape_of(e, ins[0], node.inputs[0]))
    return form


_empty_like = np.empty_like
_ZEROS_LIKE = register(
    name="zeros_like",
    kernel=_filled_like(0),
    infer=shape_rules.unary_same("zeros_like", None),
    grad=lambda op, g: [None],
    num_inputs=1,
    attrs={},
    defaults={},
    fused=Ew("0", shape_of=0),
    onnx=_filled_like_onnx(0),
    shape_only=True,
    batch=bt.elementwise,
)
_ONES_LIKE = register(
    name="ones_like",
    kernel=_filled_like(1),
    infer=shape_rules.unary_same("ones_like", None),
    grad=lambda op, g: [None],
    num_inputs=1,
    attrs={},
    defaults={},
    fused=Ew("1", shape_of=0),
    onnx=_filled_like_onnx(1),
    shape_only=True,
    batch=bt.elementwise,
)


def zeros_like(input, dtype=None, name=None):  # noqa: A002
    """Zeros with the shape (and dtype) of `input`."""
    out = run_op(_ZEROS_LIKE, (input,), _EMPTY, name)
    return cast(out, dtype) if dtype is not None and dtypes.as_dtype(dtype) is not out.dtype else out


def ones_like(input, dtype=None, name=None):  # noqa: A002
    """Ones with the shape (and dtype) of `input`."""
    out = run_op(_ONES_LIKE, (input,), _EMPTY, name)
    return cast(out, dtype) if dtype is not None and dtypes.as_dtype(dtype) is not out.dtype else out


# ------------------------------------------------------------------ reshape
def _reshape_infer(shapes, dts, attrs):
    shape = attrs["shape"]
    n_in = shape_rules.num_elements(shapes[0])
    if shape.count(-1) > 1:
        raise errors.InvalidArgumentError(f"reshape: at most one -1 in shape {shape}")
    known = 1
    for d in shape:
        if d != -1:
            if d < 0:
                raise errors.InvalidArgumentError(f"reshape: negative size in shape {shape}")
            known *= d
    if -1 in shape:
        if n_in is None:
            out = tuple(None if d == -1 else d for d in shape)
        else:
            if known == 0 or n_in % known:
                raise errors.InvalidArgumentError(
                    f"reshape: cannot reshape {shape_rules.shape_str(shapes[0])} ({n_in} elements) into {shape}")
            out = tuple(n_in // known if d == -1 else d for d in shape)
    else:
        if n_in is not None and n_in != known:
            raise errors.InvalidArgumentError(
                f"reshape: cannot reshape {shape_rules.shape_str(shapes[0])} ({n_in} elements) into {shape} "
                f"({known} elements)")
        out = tuple(shape)
    return [(out, dts[0])]


def _reshape_grad(op, g):
    x = op.inputs[0]
    if None in tuple(x.shape):
        return [run_op(_RESHAPE_LIKE, (g, x))]
    return [reshape(g, x.shape)]


def _known(shape, t):
    """Per-example reshape target `shape` with its -1 resolved from `t`'s inferred shape when
    that is known: (B, -1) cannot be resolved by a reshape of an empty batch (B = 0)."""
    shape = tuple(shape)
    return tuple(t.shape) if -1 in shape and None not in tuple(t.shape) else shape


def _reshape_batch(ctx, node, inputs, batched):
    return bt.all_batched([bt.reshape_batch(ctx, inputs[0], _known(node.attrs["shape"], node.outputs[0]))])


# The method x.reshape is what np.reshape calls, without its ~0.5 us of Python wrapping.
_RESHAPE = register(
    name="reshape",
    kernel=lambda x, shape: x.reshape(shape),
    infer=_reshape_infer,
    grad=_reshape_grad,
    num_inputs=1,
    attrs={"shape": "ints"},
    defaults={},
    bind=lambda attrs: _bind_reshape(attrs["shape"]),
    onnx=lambda e, node, ins: e.op("Reshape", ins[0], e.ints(node.attrs["shape"])),
    batch=_reshape_batch,
)


def _bind_reshape(shape):
    return lambda x: x.reshape(shape)


def _reshape_like_infer(shapes, dts, attrs):
    n, m = shape_rules.num_elements(shapes[0]), shape_rules.num_elements(shapes[1])
    if n is not None and m is not None and n != m:
        raise errors.InvalidArgumentError(
            f"reshape_like: cannot reshape {shape_rules.shape_str(shapes[0])} ({n} elements) into "
            f"{shape_rules.shape_str(shapes[1])} ({m} elements)")
    return [(tuple(shapes[1]), dts[0])]


def _reshape_like_batch(ctx, node, inputs, batched):
    """Only the `like` input's shape matters: the result is batched as `x` is."""
    x, like = inputs
    if not batched[0]:
        return [bt.emit(node, [x, bt.example_like(ctx, node, like, batched[1])])[0]], [False]
    shape = tuple(node.outputs[0].shape)
    if None not in shape:
        return bt.all_batched([bt.reshape_batch(ctx, x, shape)])
    dims = bt.batched_shape(ctx, like, batched[1])
    return bt.all_batched([bt.op("dynamic_reshape", [x, dims], shape=(ctx.size,) + shape)])


_RESHAPE_LIKE = register(
    name="reshape_like",
    kernel=lambda x, like: np.reshape(x, np.shape(like)),
    infer=_reshape_like_infer,
    grad=lambda op, g: [run_op(_RESHAPE_LIKE, (g, op.inputs[0])), None],
    num_inputs=2,
    attrs={},
    defaults={},
    onnx=lambda e, node, ins: e.op("Reshape", ins[0], shape_of(e, ins[1], node.inputs[1])),
    batch=_reshape_like_batch,
)


def reshape(tensor, shape, name=None):
    """`tensor` with a new shape (one size may be -1): `df.reshape(x, [2, -1])`. While tracing
    the shape may be a tensor computed when the graph runs: `df.reshape(y, df.shape(x))`."""
    static, operand = _args.shape_operand("reshape", shape, minus_one=True)
    if operand is None:
        return run_op(_RESHAPE, (tensor,), {"shape": static}, name)
    return run_op(_DYNAMIC_RESHAPE, (tensor, operand), {"shape": _reshaped(tensor, static)}, name)


def _reshaped(x, static):
    """The static sizes of a reshape to `static` (None: unknown or -1), filling in the one
    size a -1 stands for when every other size is known."""
    unknown = [i for i, d in enumerate(static) if d is None]
    s = getattr(x, "shape", None)
    n = shape_rules.num_elements(tuple(s)) if s is not None else None
    if len(unknown) == 1 and n is not None:
        known = math.prod(d for d in static if d is not None)
        if known and n % known == 0:
            return static[:unknown[0]] + (n // known,) + static[unknown[0] + 1:]
    return static


# reshape with the shape an input: a tensor computed when the graph runs (one size may be -1)
def _dynamic_reshape_infer(shapes, dts, attrs):
    _shape_input_infer("reshape", shapes[1], dts[1], attrs["shape"])
    out, n = tuple(attrs["shape"]), shape_rules.num_elements(shapes[0])
    m = shape_rules.num_elements(out)
    known = math.prod(d for d in out if d is not None)
    if n is not None and (m is not None and n != m or m is None and known and n % known):
        raise errors.InvalidArgumentError(
            f"reshape: cannot reshape {shape_rules.shape_str(shapes[0])} ({n} elements) into "
            f"{shape_rules.shape_str(out)} ({m if m is not None else f'a multiple of {known}'} elements)")
    return [(out, dts[0])]


def _shape_input_infer(op_name, shape, dtype, static, what="shape"):
    """The checks of a shape given as an input tensor: 1-D int, as long as the static shape."""
    if not dtype.is_integer or len(shape) != 1 or shape[0] not in (None, len(static)):
        raise errors.InvalidArgumentError(
            f"{op_name}: {what} must be a 1-D int32 or int64 tensor of length {len(static)}, got "
            f"{dtype.name}{shape_rules.shape_str(shape)}")
    if any(d is not None and d < 0 for d in static):
        raise errors.InvalidArgumentError(
            f"{op_name}: negative size in the static {what} {shape_rules.shape_str(static)}")


def _dynamic_reshape_kernel(x, dims, shape):
    out = _args.shape_value("reshape", dims, shape)
    try:
        return x.reshape(out)
    except ValueError:
        raise errors.InvalidArgumentError(
            f"reshape: cannot reshape {shape_rules.shape_str(x.shape)} ({x.size} elements) into {list(out)}"
        ) from None


_PREFIX_BATCH = bt.dynamic_shape(1, "batch")


def _dynamic_reshape_batch(ctx, node, inputs, batched):
    """The batch size prefixed to the shared shape, its -1 filled in from one example's size
    first: (B, -1) fits no batch of 0 examples."""
    if batched[0] and not batched[1]:
        op, dt = bt.op, node.inputs[1].dtype
        x, dims = inputs
        per = op("reduce_prod", [op("shape", [x], out_type=dt)[1:]], axis=None, keepdims=False)
        minus = op("equal", [dims, np.asarray(-1, dt.np)])
        known = op("reduce_prod", [op("where", [minus, np.ones((), dt.np), dims])], axis=None, keepdims=False)
        fill = op("floordiv", [per, op("maximum", [known, np.ones((), dt.np)])])
        inputs = [x, op("where", [minus, fill, dims])]
    return _PREFIX_BATCH(ctx, node, inputs, batched)


_DYNAMIC_RESHAPE = register(
    name="dynamic_reshape",
    kernel=_dynamic_reshape_kernel,
    infer=_dynamic_reshape_infer,
    grad=lambda op, g: [run_op(_RESHAPE_LIKE, (g, op.inputs[0])), None],
    num_inputs=2,
    attrs={"shape": "shape"},
    defaults={},
    onnx=lambda e, node, ins: e.op("Reshape", ins[0], e.cast(ins[1], dtypes.int64),
        allowzero=1),
    batch=_dynamic_reshape_batch,
)


# ------------------------------------------------------------------ expand_dims
def _expand_infer(shapes, dts, attrs):
    s = list(shapes[0])
    a = attrs["axis"]
    nd = len(s) + 1
    if not -nd <= a < nd:
        raise errors.InvalidArgumentError(f"expand_dims: axis {a} out of range for rank {len(s)}")
    s.insert(a % nd, 1)
    return [(tuple(s), dts[0])]


def _expand_key(axis):
    """The index inserting a size-1 axis at `axis` of the result: x[_expand_key(-1)] is
    x[..., None]. Indexing is np.expand_dims' view without its ~1.5 us of Python; an axis
    out of range leaves too many indices, which numpy refuses."""
    if axis >= 0:
        return (slice(None),) * axis + (None, Ellipsis)
    return (Ellipsis, None) + (slice(None),) * (-axis - 1)


def _expand_dims_kernel(x, axis):
    nd = x.ndim + 1
    if not -nd <= axis < nd:
        raise errors.InvalidArgumentError(f"expand_dims: axis {axis} out of range for rank {x.ndim}")
    return x[_expand_key(axis)]


def _bind_expand_dims(attrs):
    key = _expand_key(attrs["axis"])  # the rank is static: inference checked the axis
    return lambda x: x[key]


_EXPAND_DIMS = register(
    name="expand_dims",
    kernel=_expand_dims_kernel,
    infer=_expand_infer,
    grad=lambda op, g: [squeeze(g, [op.attrs["axis"] % (len(op.inputs[0].shape) + 1)])],
    num_inputs=1,
    attrs={"axis": "int"},
    defaults={},
    bind=_bind_expand_dims,
    onnx=lambda e, node, ins: e.unsqueeze(
        ins[0], [node.attrs["axis"] % len(node.outputs[0].shape)]),
    batch=bt.axes("axis", rank_of="output"),
)


def expand_dims(input, axis, name=None):
    """Insert a size-1 dimension at `axis`."""
    return run_op(_EXPAND_DIMS, (input,), {"axis": _args.int_arg("expand_dims", axis, "axis")}, name)


# ------------------------------------------------------------------ squeeze
def _squeeze_axes(shape, axis):
    nd = len(shape)
    if axis is None:
        if None in shape:  # the output rank would depend on run-time sizes
            raise errors.InvalidArgumentError(
                f"squeeze: axis=None on shape {shape_rules.shape_str(shape)} with unknown sizes leaves the rank "
                f"unknown; pass the axes to squeeze explicitly")
        return tuple(i for i, d in enumerate(shape) if d == 1)
    axes = tuple(sorted(shape_rules.normalize_axes("squeeze", axis, nd)))
    for a in axes:
        if shape[a] is not None and shape[a] != 1:
            raise errors.InvalidArgumentError(
                f"squeeze: cannot squeeze axis {a} of size {shape[a]} (shape {shape_rules.shape_str(shape)})")
    return axes


def _squeeze_infer(shapes, dts, attrs):
    axes = _squeeze_axes(shapes[0], attrs.get("axis"))
    return [(tuple(d for i, d in enumerate(shapes[0]) if i not in axes), dts[0])]


def _squeeze_kernel(x, axis):
    return np.squeeze(x, axis=axis) if axis is None else np.squeeze(x, axis=tuple(axis))


def _squeeze_batch(ctx, node, inputs, batched):
    axis = node.attrs["axis"]
    r = len(node.inputs[0].shape)
    if axis is None:
        shape = bt.static_shape(node, node.inputs[0])
        axis = tuple(i for i, n in enumerate(shape) if n == 1)
    return bt.all_batched(bt.emit(node, inputs, {"axis": tuple(bt.norm_axis(node, a, r) for a in axis)}))


_SQUEEZE = register(
    name="squeeze",
    kernel=_squeeze_kernel,
    infer=_squeeze_infer,
    grad=lambda op, g: [_reshape_grad(op, g)[0]],
    num_inputs=1,
    attrs={"axis": "opt_ints"},
    defaults={"axis": None},
    onnx=lambda e, node, ins: e.squeeze(
        ins[0], _squeeze_axes(node.inputs[0].shape, node.attrs.get("axis"))),
    batch=_squeeze_batch,
)


def squeeze(input, axis=None, name=None):
    """Remove size-1 dimensions (all, or those in `axis`)."""
    axis = _args.axes_arg("squeeze", axis)
    if isinstance(axis, int):
        axis = (axis,)
    return run_op(_SQUEEZE, (input,), {"axis": axis}, name)


def _shape_of_batch(ctx, node, inputs, batched):
    """shape/size of a batched tensor: one example's (every example has that shape; the
    batch may be empty), from the batched shape past its first size."""
    dt = node.attrs.get("out_type", dtypes.int32)
    s = bt.op("shape", [inputs[0]], out_type=dt)[1:]
    return [s if node.op.name == "shape" else bt.op("reduce_prod", [s], axis=None, keepdims=False)], [False]


# ------------------------------------------------------------------ shape, size
_SHAPE = register(
    name="shape",
    kernel=lambda x, out_type: np.asarray(np.shape(x), out_type.np),
    infer=lambda s, d, a: [((len(s[0]),), a.get("out_type", dtypes.int32))],
    grad=None,
    num_inputs=1,
    attrs={"out_type": "dtype"},
    defaults={"out_type": dtypes.int32},
    onnx=lambda e, node, ins: e.cast(e.op("Shape", ins[0]), node.outputs[0].dtype),
    shape_only=True,
    batch=_shape_of_batch,
)
_SIZE = register(
    name="size",
    kernel=lambda x, out_type: np.asarray(np.size(x), out_type.np),
    infer=lambda s, d, a: [((), a.get("out_type", dtypes.int32))],
    grad=None,
    num_inputs=1,
    attrs={"out_type": "dtype"},
    defaults={"out_type": dtypes.int32},
    onnx=lambda e, node, ins: e.cast(e.op("Size", ins[0]), node.outputs[0].dtype),
    shape_only=True,
    batch=_shape_of_batch,
)


def shape(input, out_type=dtypes.int32, name=None):
    """The shape of `input` as a 1-D int tensor (dynamic while tracing)."""
    return run_op(_SHAPE, (input,), {"out_type": _int_type("shape", out_type)}, name)


def size(input, out_type=dtypes.int32, name=None):
    """The number of elements of `input` as a scalar int tensor."""
    return run_op(_SIZE, (input,), {"out_type": _int_type("size", out_type)}, name)


def _int_type(op_name, out_type):
    dt = dtypes.as_dtype(out_type)
    if not dt.is_integer:
        raise _args.error(f"{op_name}: out_type must be int32 or int64, got {dt.name}")
    return dt


# ------------------------------------------------------------------ cast
def _cast_infer(shapes, dts, attrs):
    _check_cast("cast", dts[0], attrs["dtype"])
    return [(tuple(shapes[0]), attrs["dtype"])]


def _check_cast(op_name, src, dtype):
    if dtype is dtypes.resource or src is dtypes.resource:
        raise errors.InvalidArgumentError(
            f"{op_name}: cannot cast {src.name} to {dtype.name}; a resource (variable handle) has no "
            f"values to convert: read the variable (v.read_value()) and cast that")


def _cast_grad(op, g):
    src = op.inputs[0].dtype
    if src.is_inexact and op.attrs["dtype"].is_inexact:
        # real -> complex: the gradient of the real part flows back (g's real part, as TF)
        return [cast(g, src)]
    return [None]


def _cast_kernel(x, dtype):
    x = np.asarray(x)
    if x.dtype.kind == "c" and dtype.np.kind != "c":
        x = x.real          # complex -> real keeps the real part, as TF (numpy would warn)
    return x.astype(dtype.np, copy=False)


_CAST = register(
    name="cast",
    kernel=_cast_kernel,
    infer=_cast_infer,
    grad=_cast_grad,
    num_inputs=1,
    attrs={"dtype": "dtype"},
    defaults={},
    fused=Ew("{0}"),
    onnx=lambda e, node, ins: e.cast(ins[0], node.attrs["dtype"]),
    batch=bt.elementwise,
)


def cast(x, dtype, name=None):
    """x converted to `dtype`: `df.cast(df.constant([1.7]), df.int32) -> [1]`."""
    dtype = dtypes.as_dtype(dtype)
    if dtype is dtypes.resource:
        raise _args.error("cast: cannot cast to resource; a resource is a variable handle, not a dtype "
                          "of values (use df.Variable to make one)")
    return run_op(_CAST, (x,), {"dtype": dtype}, name)
