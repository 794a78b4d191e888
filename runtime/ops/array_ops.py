"""Shape, indexing and creation ops: declarations and public functions."""
import numpy as np

from runtime import dtypes, errors
from runtime.execute import run_op
from runtime.ops import _infer as inf
from runtime.ops.math_ops import unbroadcast, reduce_sum, cast
from runtime.registry import register

__all__ = ["identity", "stop_gradient", "zeros_like", "ones_like", "reshape", "expand_dims", "squeeze",
           "broadcast_to", "shape", "size", "where"]

_EMPTY = {}


def _static_shape(shape, op_name):
    """A static shape argument (tuple/list/array/eager tensor) as a tuple of ints."""
    if hasattr(shape, "numpy"):
        shape = np.asarray(shape)
    try:
        return tuple(int(d) for d in (shape.tolist() if isinstance(shape, np.ndarray) else shape))
    except TypeError:
        raise TypeError(f"{op_name}: shape must be a list of ints, got {shape!r}") from None


# ------------------------------------------------------------------ identity, stop_gradient
_IDENTITY = register("identity", lambda x: x, inf.unary_same("identity"), lambda op, g: [g])
_STOP_GRADIENT = register("stop_gradient", lambda x: x, inf.unary_same("stop_gradient"), None)


def identity(x, name=None):
    """The same value as a new tensor (a node of its own while tracing)."""
    return run_op(_IDENTITY, (x,), _EMPTY, name)


def stop_gradient(x, name=None):
    """The same value, with no gradient flowing back through it."""
    return run_op(_STOP_GRADIENT, (x,), _EMPTY, name)


# ------------------------------------------------------------------ zeros_like / ones_like
_ZEROS_LIKE = register("zeros_like", np.zeros_like, inf.unary_same("zeros_like", None), lambda op, g: [None])
_ONES_LIKE = register("ones_like", np.ones_like, inf.unary_same("ones_like", None), lambda op, g: [None])


def zeros_like(x, dtype=None, name=None):
    """Zeros with the shape (and dtype) of `x`."""
    out = run_op(_ZEROS_LIKE, (x,), _EMPTY, name)
    return cast(out, dtype) if dtype is not None and dtypes.as_dtype(dtype) is not out.dtype else out


def ones_like(x, dtype=None, name=None):
    """Ones with the shape (and dtype) of `x`."""
    out = run_op(_ONES_LIKE, (x,), _EMPTY, name)
    return cast(out, dtype) if dtype is not None and dtypes.as_dtype(dtype) is not out.dtype else out


# ------------------------------------------------------------------ reshape
def _reshape_infer(shapes, dts, attrs):
    shape = attrs["shape"]
    n_in = inf.num_elements(shapes[0])
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
                    f"reshape: cannot reshape {inf.shape_str(shapes[0])} ({n_in} elements) into {shape}")
            out = tuple(n_in // known if d == -1 else d for d in shape)
    else:
        if n_in is not None and n_in != known:
            raise errors.InvalidArgumentError(
                f"reshape: cannot reshape {inf.shape_str(shapes[0])} ({n_in} elements) into {shape} ({known} elements)")
        out = tuple(shape)
    return [(out, dts[0])]


def _reshape_grad(op, g):
    x = op.inputs[0]
    if None in tuple(x.shape):
        return [run_op(_RESHAPE_LIKE, (g, x))]
    return [reshape(g, x.shape)]


_RESHAPE = register("reshape", lambda x, shape: np.reshape(x, shape), _reshape_infer, _reshape_grad,
                    attrs={"shape": "ints"})
_RESHAPE_LIKE = register("reshape_like", lambda x, like: np.reshape(x, np.shape(like)),
                         lambda s, d, a: [(tuple(s[1]), d[0])],
                         lambda op, g: [run_op(_RESHAPE_LIKE, (g, op.inputs[0])), None])


def reshape(tensor, shape, name=None):
    """`tensor` with a new shape (one size may be -1): `df.reshape(x, [2, -1])`."""
    return run_op(_RESHAPE, (tensor,), {"shape": _static_shape(shape, "reshape")}, name)


# ------------------------------------------------------------------ expand_dims
def _expand_infer(shapes, dts, attrs):
    s = list(shapes[0])
    a = attrs["axis"]
    nd = len(s) + 1
    if not -nd <= a < nd:
        raise errors.InvalidArgumentError(f"expand_dims: axis {a} out of range for rank {len(s)}")
    s.insert(a % nd, 1)
    return [(tuple(s), dts[0])]


_EXPAND_DIMS = register("expand_dims", lambda x, axis: np.expand_dims(x, axis), _expand_infer,
                        lambda op, g: [squeeze(g, [op.attrs["axis"] % (len(op.inputs[0].shape) + 1)])],
                        attrs={"axis": "int"})


def expand_dims(input, axis, name=None):
    """Insert a size-1 dimension at `axis`."""
    return run_op(_EXPAND_DIMS, (input,), {"axis": int(axis)}, name)


# ------------------------------------------------------------------ squeeze
def _squeeze_axes(shape, axis):
    nd = len(shape)
    if axis is None:
        return tuple(i for i, d in enumerate(shape) if d == 1)
    axes = tuple(sorted(inf.normalize_axis("squeeze", a, nd) for a in axis))
    for a in axes:
        if shape[a] is not None and shape[a] != 1:
            raise errors.InvalidArgumentError(
                f"squeeze: cannot squeeze axis {a} of size {shape[a]} (shape {inf.shape_str(shape)})")
    return axes


def _squeeze_infer(shapes, dts, attrs):
    axes = _squeeze_axes(shapes[0], attrs.get("axis"))
    return [(tuple(d for i, d in enumerate(shapes[0]) if i not in axes), dts[0])]


def _squeeze_kernel(x, axis=None):
    return np.squeeze(x, axis=axis) if axis is None else np.squeeze(x, axis=tuple(axis))


_SQUEEZE = register("squeeze", _squeeze_kernel, _squeeze_infer,
                    lambda op, g: [_reshape_grad(op, g)[0]], attrs={"axis": "opt_ints"})


def squeeze(input, axis=None, name=None):
    """Remove size-1 dimensions (all, or those in `axis`)."""
    if axis is not None:
        axis = (int(axis),) if isinstance(axis, (int, np.integer)) else tuple(int(a) for a in axis)
    return run_op(_SQUEEZE, (input,), {"axis": axis}, name)


# ------------------------------------------------------------------ broadcast_to
def _broadcast_to_infer(shapes, dts, attrs):
    target = attrs["shape"]
    out = inf.broadcast_shapes("broadcast_to", shapes[0], target)
    if out != tuple(target):
        raise errors.InvalidArgumentError(
            f"broadcast_to: cannot broadcast {inf.shape_str(shapes[0])} to {inf.shape_str(target)}")
    return [(tuple(target), dts[0])]


_BROADCAST_TO = register("broadcast_to", lambda x, shape: np.broadcast_to(x, shape), _broadcast_to_infer,
                         lambda op, g: [unbroadcast(g, op.inputs[0])], attrs={"shape": "ints"})


def broadcast_to(input, shape, name=None):
    """`input` broadcast to `shape` (numpy rules)."""
    return run_op(_BROADCAST_TO, (input,), {"shape": _static_shape(shape, "broadcast_to")}, name)


# ------------------------------------------------------------------ shape, size
_SHAPE = register("shape", lambda x, out_type=dtypes.int32: np.asarray(np.shape(x), out_type.np),
                  lambda s, d, a: [((len(s[0]),), a.get("out_type", dtypes.int32))], None,
                  attrs={"out_type": "dtype"})
_SIZE = register("size", lambda x, out_type=dtypes.int32: np.asarray(np.size(x), out_type.np),
                 lambda s, d, a: [((), a.get("out_type", dtypes.int32))], None, attrs={"out_type": "dtype"})


def shape(input, out_type=dtypes.int32, name=None):
    """The shape of `input` as a 1-D int tensor (dynamic while tracing)."""
    return run_op(_SHAPE, (input,), {"out_type": dtypes.as_dtype(out_type)}, name)


def size(input, out_type=dtypes.int32, name=None):
    """The number of elements of `input` as a scalar int tensor."""
    return run_op(_SIZE, (input,), {"out_type": dtypes.as_dtype(out_type)}, name)


# ------------------------------------------------------------------ where
def _where_infer(shapes, dts, attrs):
    if dts[0] is not dtypes.bool:
        raise errors.InvalidArgumentError(f"where: condition must be bool, got {dts[0].name}")
    inf.check_same("where", dts[1:])
    s = inf.broadcast_shapes("where", shapes[0], shapes[1])
    return [(inf.broadcast_shapes("where", s, shapes[2]), dts[1])]


def _where_grad(op, g):
    c, x, y = op.inputs
    z = zeros_like(g)
    return [None, unbroadcast(where(c, g, z), x), unbroadcast(where(c, z, g), y)]


def _where_kernel(c, x, y):
    if c.dtype != np.bool_:
        raise errors.InvalidArgumentError(f"where: condition must be bool, got {c.dtype.name}")
    return np.where(c, x, y)


_WHERE = register("where", _where_kernel, _where_infer, _where_grad, same_dtype=(1, 2))


def where(condition, x, y, name=None):
    """Elementwise `x if condition else y`, with broadcasting."""
    return run_op(_WHERE, (condition, x, y), _EMPTY, name)
