"""The ops every gradient is written with: shape plumbing, cast, where, reduce_sum, unbroadcast.

Below `math_ops` and `array_ops` (both import it, it imports neither), so any gradient can use them.
The module is long because each op keeps its whole row together: kernel, inference, gradient,
and its fused (numba) and ONNX forms.
"""
import math

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.fused import Elementwise as Ew, Reduction
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops._onnx import reduce_form, shape_of
from defun.runtime.registry import register
from defun.runtime.tensor import EagerTensor
from defun.runtime import batching as bt
from defun.runtime.ops import _batch as vb

__all__ = ["identity", "stop_gradient", "zeros_like", "ones_like", "reshape", "expand_dims", "squeeze",
           "broadcast_to", "shape", "size", "where", "cast", "reduce_sum", "unbroadcast"]

_EMPTY = {}

# ------------------------------------------------------------------ identity, stop_gradient
_IDENTITY = register("identity", lambda x: x, shape_rules.unary_same("identity"), lambda op, g: [g],
                     num_inputs=1, attrs={}, defaults={}, fused=Ew("{0}"), onnx="Identity", batch=bt.elementwise)
_STOP_GRADIENT = register("stop_gradient", lambda x: x, shape_rules.unary_same("stop_gradient"), None,
                          num_inputs=1, attrs={}, defaults={}, fused=Ew("{0}"), onnx="Identity", batch=bt.elementwise)


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
_ZEROS_LIKE = register("zeros_like", _filled_like(0), shape_rules.unary_same("zeros_like", None),
                       lambda op, g: [None], num_inputs=1, attrs={}, defaults={},
                       fused=Ew("0", shape_of=0), shape_only=True,
                       onnx=_filled_like_onnx(0), batch=bt.elementwise)
_ONES_LIKE = register("ones_like", _filled_like(1), shape_rules.unary_same("ones_like", None),
                      lambda op, g: [None], num_inputs=1, attrs={}, defaults={},
                      fused=Ew("1", shape_of=0), shape_only=True,
                      onnx=_filled_like_onnx(1), batch=bt.elementwise)


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
                f"reshape: cannot reshape {shape_rules.shape_str(shapes[0])} ({n_in} elements) into {shape} ({known} elements)")
        out = tuple(shape)
    return [(out, dts[0])]


def _reshape_grad(op, g):
    x = op.inputs[0]
    if None in tuple(x.shape):
        return [run_op(_RESHAPE_LIKE, (g, x))]
    return [reshape(g, x.shape)]


# The method x.reshape is what np.reshape calls, without its ~0.5 us of Python wrapping.
_RESHAPE = register("reshape", lambda x, shape: x.reshape(shape), _reshape_infer, _reshape_grad,
                    attrs={"shape": "ints"}, bind=lambda attrs: _bind_reshape(attrs["shape"]),
                    num_inputs=1, defaults={},
                    onnx=lambda e, node, ins: e.op("Reshape", ins[0], e.ints(node.attrs["shape"])), batch=vb.reshape)


def _bind_reshape(shape):
    return lambda x: x.reshape(shape)


def _reshape_like_infer(shapes, dts, attrs):
    n, m = shape_rules.num_elements(shapes[0]), shape_rules.num_elements(shapes[1])
    if n is not None and m is not None and n != m:
        raise errors.InvalidArgumentError(
            f"reshape_like: cannot reshape {shape_rules.shape_str(shapes[0])} ({n} elements) into "
            f"{shape_rules.shape_str(shapes[1])} ({m} elements)")
    return [(tuple(shapes[1]), dts[0])]


_RESHAPE_LIKE = register("reshape_like", lambda x, like: np.reshape(x, np.shape(like)), _reshape_like_infer,
                         lambda op, g: [run_op(_RESHAPE_LIKE, (g, op.inputs[0])), None],
                         num_inputs=2, attrs={}, defaults={},
                         onnx=lambda e, node, ins: e.op("Reshape", ins[0], shape_of(e, ins[1], node.inputs[1])), batch=vb.reshape_like)


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
            f"reshape: cannot reshape {shape_rules.shape_str(shapes[0])} ({n} elements) into {shape_rules.shape_str(out)} "
            f"({m if m is not None else f'a multiple of {known}'} elements)")
    return [(out, dts[0])]


def _shape_input_infer(op_name, shape, dtype, static, what="shape"):
    """The checks of a shape given as an input tensor: 1-D int, as long as the static shape."""
    if not dtype.is_integer or len(shape) != 1 or shape[0] not in (None, len(static)):
        raise errors.InvalidArgumentError(
            f"{op_name}: {what} must be a 1-D int32 or int64 tensor of length {len(static)}, got "
            f"{dtype.name}{shape_rules.shape_str(shape)}")
    if any(d is not None and d < 0 for d in static):
        raise errors.InvalidArgumentError(f"{op_name}: negative size in the static {what} {shape_rules.shape_str(static)}")


def _dynamic_reshape_kernel(x, dims, shape):
    out = _args.shape_value("reshape", dims, shape)
    try:
        return x.reshape(out)
    except ValueError:
        raise errors.InvalidArgumentError(
            f"reshape: cannot reshape {shape_rules.shape_str(x.shape)} ({x.size} elements) into {list(out)}"
        ) from None


_DYNAMIC_RESHAPE = register("dynamic_reshape", _dynamic_reshape_kernel, _dynamic_reshape_infer,
                            lambda op, g: [run_op(_RESHAPE_LIKE, (g, op.inputs[0])), None],
                            num_inputs=2, attrs={"shape": "shape"}, defaults={},
                            onnx=lambda e, node, ins: e.op("Reshape", ins[0], e.cast(ins[1], dtypes.int64),
                                                           allowzero=1), batch=bt.dynamic_shape(1, "batch"))


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


_EXPAND_DIMS = register("expand_dims", _expand_dims_kernel, _expand_infer,
                        lambda op, g: [squeeze(g, [op.attrs["axis"] % (len(op.inputs[0].shape) + 1)])],
                        attrs={"axis": "int"}, bind=_bind_expand_dims, num_inputs=1, defaults={},
                        onnx=lambda e, node, ins: e.unsqueeze(
                            ins[0], [node.attrs["axis"] % len(node.outputs[0].shape)]), batch=bt.axes("axis", rank_of="output"))


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


_SQUEEZE = register("squeeze", _squeeze_kernel, _squeeze_infer,
                    lambda op, g: [_reshape_grad(op, g)[0]], attrs={"axis": "opt_ints"},
                    num_inputs=1, defaults={"axis": None},
                    onnx=lambda e, node, ins: e.squeeze(
                        ins[0], _squeeze_axes(node.inputs[0].shape, node.attrs.get("axis"))), batch=vb.squeeze)


def squeeze(input, axis=None, name=None):
    """Remove size-1 dimensions (all, or those in `axis`)."""
    axis = _args.axes_arg("squeeze", axis)
    if isinstance(axis, int):
        axis = (axis,)
    return run_op(_SQUEEZE, (input,), {"axis": axis}, name)


# ------------------------------------------------------------------ broadcast_to
def _broadcast_to_infer(shapes, dts, attrs):
    target = attrs["shape"]
    out = shape_rules.broadcast_shapes("broadcast_to", shapes[0], target)
    if out != tuple(target):
        raise errors.InvalidArgumentError(
            f"broadcast_to: cannot broadcast {shape_rules.shape_str(shapes[0])} to {shape_rules.shape_str(target)}")
    return [(tuple(target), dts[0])]


# Up to this many elements broadcast_to fills a new array instead of returning
# np.broadcast_to's read-only view: the same values, ~0.3 us instead of ~2.5 us of Python
# (a mean's gradient broadcasts a scalar). Larger results stay views: no copy.
_BROADCAST_COPY_MAX = 4096


def _broadcast_to_kernel(x, shape):
    return _bind_broadcast_to({"shape": shape})(x)


def _bind_broadcast_to(attrs):
    shape = tuple(attrs["shape"])
    if _prod(shape) > _BROADCAST_COPY_MAX:
        return lambda x: np.broadcast_to(x, shape)
    rank = len(shape)

    def broadcast_small(x):
        if x.ndim > rank:  # assignment would drop leading 1s; broadcast_to refuses them
            return np.broadcast_to(x, shape)
        out = _empty(shape, x.dtype)
        out[...] = x
        return out
    return broadcast_small


_prod, _empty = math.prod, np.empty
_BROADCAST_TO = register("broadcast_to", _broadcast_to_kernel, _broadcast_to_infer,
                         lambda op, g: [unbroadcast(g, op.inputs[0])], attrs={"shape": "ints"},
                         bind=_bind_broadcast_to, num_inputs=1, defaults={},
                         fused=Ew("{0}", shape_of="attr"),
                         onnx=lambda e, node, ins: e.op("Expand", ins[0], e.ints(node.attrs["shape"])), batch=vb.broadcast_to)


def broadcast_to(input, shape, name=None):
    """`input` broadcast to `shape` (numpy rules); the shape may be a tensor computed when the
    graph runs (`df.broadcast_to(b, df.shape(x))`)."""
    static, operand = _args.shape_operand("broadcast_to", shape)
    if operand is None:
        return run_op(_BROADCAST_TO, (input,), {"shape": static}, name)
    return run_op(_DYNAMIC_BROADCAST_TO, (input, operand), {"shape": static}, name)


def _dynamic_broadcast_to_infer(shapes, dts, attrs):
    target = tuple(attrs["shape"])
    _shape_input_infer("broadcast_to", shapes[1], dts[1], target)
    out = shape_rules.broadcast_shapes("broadcast_to", shapes[0], target)
    if len(out) != len(target) or any(t is not None and o != t for o, t in zip(out, target)):
        raise errors.InvalidArgumentError(
            f"broadcast_to: cannot broadcast {shape_rules.shape_str(shapes[0])} to {shape_rules.shape_str(target)}")
    # a size known in neither: the input's when it is not 1 (numpy's rule), else unknown
    return [(tuple(t if t is not None else (d if d != 1 else None) for t, d in
                   zip(target, (None,) * (len(target) - len(shapes[0])) + tuple(shapes[0]))), dts[0])]


def _dynamic_broadcast_to_kernel(x, dims, shape):
    out = _args.shape_value("broadcast_to", dims, shape)
    try:
        return np.broadcast_to(x, out)
    except ValueError:
        raise errors.InvalidArgumentError(
            f"broadcast_to: cannot broadcast {shape_rules.shape_str(x.shape)} to {shape_rules.shape_str(out)}") from None


_DYNAMIC_BROADCAST_TO = register(
    "dynamic_broadcast_to", _dynamic_broadcast_to_kernel, _dynamic_broadcast_to_infer,
    lambda op, g: [unbroadcast(g, op.inputs[0]), None], num_inputs=2, attrs={"shape": "shape"},
    defaults={}, onnx=lambda e, node, ins: e.op("Expand", ins[0], e.cast(ins[1], dtypes.int64)), batch=bt.dynamic_shape(1, "batch", align=True))


# ------------------------------------------------------------------ shape, size
_SHAPE = register("shape", lambda x, out_type: np.asarray(np.shape(x), out_type.np),
                  lambda s, d, a: [((len(s[0]),), a.get("out_type", dtypes.int32))], None,
                  attrs={"out_type": "dtype"}, num_inputs=1, defaults={"out_type": dtypes.int32},
                  onnx=lambda e, node, ins: e.cast(e.op("Shape", ins[0]), node.outputs[0].dtype),
                  shape_only=True, batch=vb.shape_of)
_SIZE = register("size", lambda x, out_type: np.asarray(np.size(x), out_type.np),
                 lambda s, d, a: [((), a.get("out_type", dtypes.int32))], None,
                 attrs={"out_type": "dtype"}, num_inputs=1, defaults={"out_type": dtypes.int32},
                 onnx=lambda e, node, ins: e.cast(e.op("Size", ins[0]), node.outputs[0].dtype),
                 shape_only=True, batch=vb.shape_of)


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


# ------------------------------------------------------------------ where
def _where_infer(shapes, dts, attrs):
    if dts[0] is not dtypes.bool:
        raise errors.InvalidArgumentError(f"where: condition must be bool, got {dts[0].name}")
    shape_rules.check_same("where", dts[1:])
    s = shape_rules.broadcast_shapes("where", shapes[0], shapes[1])
    return [(shape_rules.broadcast_shapes("where", s, shapes[2]), dts[1])]


def _where_grad(op, g):
    c, x, y = op.inputs
    z = zeros_like(g)
    return [None, unbroadcast(where(c, g, z), x), unbroadcast(where(c, z, g), y)]


def _where_kernel(c, x, y):
    if c.dtype != np.bool_:
        raise errors.InvalidArgumentError(f"where: condition must be bool, got {c.dtype.name}")
    return np.where(c, x, y)


_WHERE = register("where", _where_kernel, _where_infer, _where_grad, same_dtype=(1, 2),
                  num_inputs=3, attrs={}, defaults={}, fused=Ew("{1} if {0} else {2}"),
                  onnx=lambda e, node, ins: e.where(*ins, node.outputs[0].dtype), batch=bt.elementwise)


def where(condition, x, y, name=None):
    """Elementwise `x if condition else y`, with broadcasting."""
    return run_op(_WHERE, (condition, x, y), _EMPTY, name)


# ---------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------
# Broadcast gradient reduction: the one helper every broadcasting gradient goes through.

def unbroadcast(g, x):
    """Sum gradient `g` down to the shape of input `x` (undoing numpy broadcasting)."""
    if type(g) is EagerTensor and type(x) is EagerTensor:
        # Eagerly, most calls compare two numpy shapes and return `g`; the others reuse
        # the reduce_sum attrs made for their pair of shapes (-1.5 us per broadcast
        # operand, e.g. a bias). The same ops and attrs as below.
        gs, xs = g._value.shape, x._value.shape
        if gs == xs:
            return g
        sum_attrs = _unbroadcast_attrs.get((gs, xs))
        if sum_attrs is None:
            sum_attrs = _eager_unbroadcast_attrs(gs, xs)
        r = run_op(_REDUCE_SUM, (g,), sum_attrs) if sum_attrs is not _EMPTY else g
        return r if tuple(r.shape) == xs else reshape(r, xs)  # r: symbolic if tracing
    gs, xs = tuple(g.shape), tuple(x.shape)
    if gs == xs and None not in gs:
        return g
    if None in gs or None in xs:
        return run_op(_SUM_TO_LIKE, (g, x))
    axes = _broadcast_axes(gs, xs)
    r = reduce_sum(g, axis=axes) if axes else g
    if tuple(r.shape) != xs:
        r = reshape(r, xs)
    return r


def _broadcast_axes(gs, xs):
    """The axes of a gradient of shape `gs` to sum for an input of shape `xs`."""
    lead = len(gs) - len(xs)
    return tuple(range(lead)) + tuple(lead + i for i, d in enumerate(xs) if d == 1 and gs[lead + i] != 1)


_unbroadcast_attrs = {}  # (gradient shape, input shape) -> reduce_sum attrs, _EMPTY for none


def _eager_unbroadcast_attrs(gs, xs):
    axes = _broadcast_axes(gs, xs)
    attrs = {"axis": axes, "keepdims": False} if axes else _EMPTY  # as reduce_sum makes them
    if len(_unbroadcast_attrs) >= 1024:
        _unbroadcast_attrs.clear()
    _unbroadcast_attrs[(gs, xs)] = attrs
    return attrs


def _sum_to_like(g, like):
    # sizes unknown while tracing are often equal when the graph runs: then g is the sum
    shape = np.shape(like)
    return g if g.shape == shape else _sum_to(g, shape)


def _broadcast_like(x, like):
    shape = np.shape(like)
    return x if np.shape(x) == shape else np.broadcast_to(x, shape)


def _sum_to(g, shape):
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    r = np.add.reduce(g, axis=axes, dtype=g.dtype) if axes else g
    return r if r.shape == shape else np.reshape(r, shape)


def _sum_to_like_onnx(e, node, ins):
    """ReduceSum over the leading axes, then (keeping dims) over the axes where `like` has
    size 1; those are found when the graph runs if sizes are unknown."""
    g, like = node.inputs
    lead = len(g.shape) - len(like.shape)
    y = e.reduce("ReduceSum", ins[0], tuple(range(lead)), False) if lead else ins[0]
    rest = tuple(g.shape)[lead:]
    if None not in rest and None not in tuple(like.shape):
        axes = [i for i, (d, n) in enumerate(zip(like.shape, rest)) if d == 1 and n != 1]
        y = e.reduce("ReduceSum", y, axes, True) if axes else y
    elif like.shape:
        ones = e.op("Equal", e.op("Shape", ins[1]), e.ints([1]))
        axes = e.op("Compress", e.ints(range(len(like.shape))), ones)
        y = e.op("ReduceSum", y, axes, keepdims=1, noop_with_empty_axes=1)
    return e.op("Reshape", y, shape_of(e, ins[1], like))


def _infer_like(name):
    """sum_to_like(g, like) sums g down to like's shape; broadcast_like(x, like) broadcasts x
    up to it: one of the two broadcasts to the other."""
    def infer(shapes, dts, attrs):
        if name == "sum_to_like":
            shape_rules.check_broadcastable(name, shapes[1], shapes[0])
        else:
            shape_rules.check_broadcastable(name, shapes[0], shapes[1])
        return [(tuple(shapes[1]), dts[0])]
    return infer


_SUM_TO_LIKE = register("sum_to_like", _sum_to_like,
                        _infer_like("sum_to_like"),
                        lambda op, gg: [run_op(_BROADCAST_LIKE, (gg, op.inputs[0])), None],
                        num_inputs=2, attrs={}, defaults={}, onnx=_sum_to_like_onnx, batch=vb.sum_to_like)
_BROADCAST_LIKE = register("broadcast_like", _broadcast_like,
                           _infer_like("broadcast_like"),
                           lambda op, gg: [run_op(_SUM_TO_LIKE, (gg, op.inputs[0])), None],
                           num_inputs=2, attrs={}, defaults={}, fused=Ew("{0}", shape_of=1),
                           onnx=lambda e, node, ins: e.op("Expand", ins[0], shape_of(e, ins[1], node.inputs[1])), batch=vb.broadcast_like)


def _mask(cond, like):
    return cast(cond, like.dtype)


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


_CAST = register("cast", _cast_kernel, _cast_infer,
                 _cast_grad, attrs={"dtype": "dtype"}, num_inputs=1, defaults={}, fused=Ew("{0}"),
                 onnx=lambda e, node, ins: e.cast(ins[0], node.attrs["dtype"]), batch=bt.elementwise)


def cast(x, dtype, name=None):
    """x converted to `dtype`: `df.cast(df.constant([1.7]), df.int32) -> [1]`."""
    dtype = dtypes.as_dtype(dtype)
    if dtype is dtypes.resource:
        raise _args.error("cast: cannot cast to resource; a resource is a variable handle, not a dtype "
                          "of values (use df.Variable to make one)")
    return run_op(_CAST, (x,), {"dtype": dtype}, name)


# ------------------------------------------------------------------ reductions
def _reduce_infer(name, kinds=shape_rules.numeric_kinds, out=None):
    def infer(shapes, dts, attrs):
        shape_rules.check_kinds(name, dts[0], kinds)
        shape = shape_rules.reduced_shape(name, shapes[0], attrs.get("axis"), attrs.get("keepdims", False))
        return [(shape, out(dts[0]) if out else dts[0])]
    return infer


def _keepdims_grad(g, op):
    """Reshape a reduction's output gradient so it broadcasts against the input."""
    x = op.inputs[0]
    axis = op.attrs.get("axis")
    if op.attrs.get("keepdims", False) or not len(g.shape):
        return g  # a scalar (full reduction) broadcasts as it is: no reshape op needed
    nd = len(x.shape)
    axes = range(nd) if axis is None else sorted(a % nd for a in (axis if isinstance(axis, tuple) else (axis,)))
    shape = tuple(x.shape)
    if None not in shape:
        kd = tuple(1 if i in set(axes) else d for i, d in enumerate(shape))
        return reshape(g, kd)
    for a in axes:
        g = expand_dims(g, a)
    return g


def _broadcast_back(g, x):
    if type(g) is EagerTensor and type(x) is EagerTensor:
        # broadcast_to's own op with the numpy shape (a tuple of ints, as broadcast_to
        # would make it): -1 us per call without the shape normalization and None scans
        xs = x._value.shape
        return g if g._value.shape == xs else run_op(_BROADCAST_TO, (g,), {"shape": xs})
    if None in tuple(x.shape):
        return run_op(_BROADCAST_LIKE, (g, x))
    if tuple(g.shape) == tuple(x.shape):
        return g
    return broadcast_to(g, x.shape)


def _sum_grad(op, g):
    return [_broadcast_back(_keepdims_grad(g, op), op.inputs[0])]


_RED_ATTRS = {"axis": "opt_ints", "keepdims": "bool"}
_RED_DEFAULTS = {"axis": None, "keepdims": False}


def reducer(name, kernel, grad, kinds=shape_rules.numeric_kinds, out=None, doc="", ufunc=None, keep_dtype=False,
            fused=None,
            onnx=None):
    """A reduction op. Its graph kernel has axis and keepdims bound once: a closure over
    `ufunc.reduce` itself when the kernel is just that call (one Python frame less)."""
    def bind(attrs):
        axis, keepdims = attrs.get("axis"), attrs.get("keepdims", False)
        if ufunc is None:
            return lambda x: kernel(x, axis, keepdims)
        if keep_dtype:
            return lambda x: ufunc(x, axis, x.dtype, None, keepdims)
        return lambda x: ufunc(x, axis, None, None, keepdims)
    op = register(name, kernel, _reduce_infer(name, kinds, out), grad, num_inputs=1,
                  attrs=_RED_ATTRS, defaults=_RED_DEFAULTS, kinds=kinds, bind=bind, fused=fused, onnx=onnx, batch=bt.axes("axis"))
    name_ = name

    def f(input_tensor, axis=None, keepdims=False, name=None):
        return run_op(op, (input_tensor,), {"axis": _args.axes_arg(name_, axis),
                                            "keepdims": _args.bool_arg(name_, keepdims, "keepdims")},
                      name)
    f.__name__ = f.__qualname__ = op.name
    f.op = op
    f.__doc__ = doc or f"{name} over `axis` (None = all), keeping reduced dims if `keepdims`."
    return f


# Kernels call ufunc.reduce directly, with positional arguments (array, axis, dtype, out,
# keepdims): np.sum/np.max/np.mean add 1-4 us of Python wrapping per call, which dominates
# on the small arrays of eager code, and keywords cost another ~0.1 us.
_add_reduce, _max_reduce, _min_reduce, _mul_reduce = (np.add.reduce, np.maximum.reduce,
                                                      np.minimum.reduce, np.multiply.reduce)


def _k_sum(x, axis, keepdims):
    # dtype=x.dtype: numpy would widen int32 sums to int64; TensorFlow keeps the dtype
    return _add_reduce(x, axis, x.dtype, None, keepdims)

reduce_sum = reducer("reduce_sum", _k_sum, _sum_grad, ufunc=_add_reduce, keep_dtype=True, kinds="fiuc",
                     fused=Reduction("0", "{acc} + {x}"),
                     onnx=reduce_form("ReduceSum"),
                     doc="Sum over `axis`: `df.reduce_sum([[1, 2], [3, 4]], axis=0) -> [4, 6]`.")
_REDUCE_SUM = reduce_sum.op
