"""The ops every gradient is written with: broadcast_to, where, reduce_sum (and the
`reducer` of every reduction), unbroadcast (and the sum_to_like / broadcast_like pair it
uses when sizes are unknown while tracing); and, re-exported from shape_ops, identity,
zeros_like / ones_like, reshape, expand_dims, squeeze, shape, size and cast.

Below `math_ops` and `array_ops` (both import it, it imports neither), so any gradient can use them.
"""
import math

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.fused import Elementwise as Ew, Reduction
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops._onnx import reduce_form, shape_of
from defun.runtime.ops.shape_ops import (_shape_input_infer, cast, expand_dims, identity, ones_like,  # noqa: F401
                                         reshape, shape, size, squeeze, stop_gradient, zeros_like)
from defun.runtime.registry import register
from defun.runtime.tensor import EagerTensor
from defun.runtime import batching as bt

__all__ = ["identity", "stop_gradient", "zeros_like", "ones_like", "reshape", "expand_dims", "squeeze",
           "broadcast_to", "shape", "size", "where", "cast", "reduce_sum", "unbroadcast"]

_EMPTY = {}


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


def _broadcast_to_batch(ctx, node, inputs, batched):
    shape = tuple(node.attrs["shape"])
    x = bt.expand_rank(inputs[0], len(node.inputs[0].shape), len(shape))
    return bt.all_batched([bt.broadcast_batch(ctx, x, shape)])


_BROADCAST_TO = register(
    name="broadcast_to",
    kernel=_broadcast_to_kernel,
    infer=_broadcast_to_infer,
    grad=lambda op, g: [unbroadcast(g, op.inputs[0])],
    num_inputs=1,
    attrs={"shape": "ints"},
    defaults={},
    bind=_bind_broadcast_to,
    fused=Ew("{0}", shape_of="attr"),
    onnx=lambda e, node, ins: e.op("Expand", ins[0], e.ints(node.attrs["shape"])),
    batch=_broadcast_to_batch,
)


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
        raise errors.InvalidArgumentError(f"broadcast_to: cannot broadcast {shape_rules.shape_str(x.shape)} to "
                                          f"{shape_rules.shape_str(out)}") from None


_DYNAMIC_BROADCAST_TO = register(
    name="dynamic_broadcast_to",
    kernel=_dynamic_broadcast_to_kernel,
    infer=_dynamic_broadcast_to_infer,
    grad=lambda op, g: [unbroadcast(g, op.inputs[0]), None],
    num_inputs=2,
    attrs={"shape": "shape"},
    defaults={},
    onnx=lambda e, node, ins: e.op("Expand", ins[0], e.cast(ins[1], dtypes.int64)),
    batch=bt.dynamic_shape(1, "batch", align=True),
)


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


_WHERE = register(
    name="where",
    kernel=_where_kernel,
    infer=_where_infer,
    grad=_where_grad,
    num_inputs=3,
    attrs={},
    defaults={},
    same_dtype=(1, 2),
    fused=Ew("{1} if {0} else {2}"),
    onnx=lambda e, node, ins: e.where(*ins, node.outputs[0].dtype),
    batch=bt.elementwise,
)


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
    if not isinstance(x, _ARRAYS):
        x = np.asarray(x)
    if x.shape == shape:
        return x
    if x.ndim <= len(shape) and _prod(shape) <= _BROADCAST_COPY_MAX:   # as broadcast_to's kernel
        out = _empty(shape, x.dtype)
        out[...] = x
        return out
    return np.broadcast_to(x, shape)


_ARRAYS = (np.ndarray, np.generic)


def _sum_to(g, shape):
    lead = g.ndim - len(shape)
    if lead == 1 and g.shape[1:] == shape:    # over the leading axis alone: a bias's gradient
        return np.add.reduce(g, axis=0, dtype=g.dtype)
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


def _sum_to_like_batch(ctx, node, inputs, batched):
    """Sum batched `g` to `like`'s per-example shape: the broadcast axes, then the size-1 ones."""
    g, like = inputs
    if not batched[0]:
        return [bt.emit(node, [g, bt.example_like(ctx, node, like, batched[1])])[0]], [False]
    gs, ls = tuple(node.inputs[0].shape), tuple(node.inputs[1].shape)
    lead = len(gs) - len(ls)
    if None in gs + ls:     # the leading axes summed here, the size-1 ones by the op (batch against batch)
        if lead:
            g = bt.op("reduce_sum", [g], axis=tuple(range(1, lead + 1)), keepdims=False)
        like = like if batched[1] else bt.materialize(ctx, node, like, node.inputs[1])
        return bt.all_batched(bt.emit(node, [g, like]))
    axes = tuple(range(1, lead + 1)) + tuple(
        lead + i + 1 for i, n in enumerate(ls) if n == 1 and gs[lead + i] != 1)
    if axes:
        g = bt.op("reduce_sum", [g], axis=axes, keepdims=False)
    return bt.all_batched([bt.reshape_batch(ctx, g, ls)])


_SUM_TO_LIKE = register(
    name="sum_to_like",
    kernel=_sum_to_like,
    infer=_infer_like("sum_to_like"),
    grad=lambda op, gg: [run_op(_BROADCAST_LIKE, (gg, op.inputs[0])), None],
    num_inputs=2,
    attrs={},
    defaults={},
    onnx=_sum_to_like_onnx,
    batch=_sum_to_like_batch,
)


def _broadcast_like_batch(ctx, node, inputs, batched):
    x, like = inputs
    if not batched[0]:
        return [bt.emit(node, [x, bt.example_like(ctx, node, like, batched[1])])[0]], [False]
    shape = tuple(node.outputs[0].shape)
    x = bt.expand_rank(x, len(node.inputs[0].shape), len(shape))
    if None not in shape:
        return bt.all_batched([bt.broadcast_batch(ctx, x, shape)])
    dims = bt.batched_shape(ctx, like, batched[1])
    return bt.all_batched([bt.op("dynamic_broadcast_to", [x, dims], shape=(ctx.size,) + shape)])


_BROADCAST_LIKE = register(
    name="broadcast_like",
    kernel=_broadcast_like,
    infer=_infer_like("broadcast_like"),
    grad=lambda op, gg: [run_op(_SUM_TO_LIKE, (gg, op.inputs[0])), None],
    num_inputs=2,
    attrs={},
    defaults={},
    fused=Ew("{0}", shape_of=1),
    onnx=lambda e, node, ins: e.op("Expand", ins[0], shape_of(e, ins[1], node.inputs[1])),
    batch=_broadcast_like_batch,
)


def _mask(cond, like):
    return cast(cond, like.dtype)


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
    op = register(
        name=name,
        kernel=kernel,
        infer=_reduce_infer(name, kinds, out),
        grad=grad,
        num_inputs=1,
        attrs=_RED_ATTRS,
        defaults=_RED_DEFAULTS,
        kinds=kinds,
        bind=bind,
        fused=fused,
        onnx=onnx,
        batch=bt.axes("axis"),
    )
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
