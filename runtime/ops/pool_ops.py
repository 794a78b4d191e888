"""Pooling over NHWC images: max_pool2d, avg_pool2d and their gradient ops, which are each
other's gradients (the window geometry and padding rules are conv_ops.py's):

    max_pool2d(x)                   -> max_pool2d_grad(x, y, g)        (routes g to each window's max)
    max_pool2d_grad(x, y, g)        -> max_pool2d_grad_grad(x, y, gg)  (selects gg at each max)
    avg_pool2d(x) <-> avg_pool2d_grad(x, g)                             (adjoints of each other)

Kernels loop over the kh*kw offsets of the window, each a strided slice of the whole batch,
never over pixels; where the windows tile the input exactly (window = stride, no padding),
the max-pool gradient is written by one multiply over a (kh, kw, N, Ho, Wo, C) view of it.
"""
import functools

import numpy as np

from defun.runtime import batching as bt
from defun.runtime import errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _costs, shape_rules
from defun.runtime.ops._onnx_windows import Windows
from defun.runtime.ops.conv_ops import (_PADDINGS, _Geometry, _check_attrs, _check_format, _check_rank4, _crop,
                                        _floats, _nchw, _nhwc, _onnx_window_attrs, _pad, _padding, _pair)
from defun.runtime.registry import one_of, register

__all__ = ["max_pool2d", "avg_pool2d"]


# ------------------------------------------------------------------ ONNX forms
def _pool_windows(e, node, x_name, x_shape):
    a = node.attrs
    return Windows(e, x_name, x_shape, *a["ksize"], a["strides"], (1, 1), a["padding"])


def _avg_counts(e, w, dt):
    """How many input pixels each window holds (TF's SAME mean leaves the padding out)."""
    ones = e.op("Expand", e.scalar(1, dt), e.op("Concat", e.ints([1]), w.h, w.w, e.ints([1]), axis=0))
    zeros = e.op("Expand", e.scalar(0, dt), e.op("Concat", e.ints([1]), w.ho, w.wo, e.ints([1]), axis=0))
    onesp = w.pad(ones, 0, dt)
    return w.loop([(zeros, dt, 4)], lambda window, i, j, acc: [e.op("Add", acc[0], window(onesp))])[0]


def _avg_pool_float64(e, node, ins):
    dt = node.outputs[0].dtype
    w = _pool_windows(e, node, ins[0], node.inputs[0].shape)
    xp = w.pad(ins[0], 0, dt)
    zeros = e.op("Expand", e.scalar(0, dt), w.shape())
    total = w.loop([(zeros, dt, 4)], lambda window, i, j, acc: [e.op("Add", acc[0], window(xp))])[0]
    return e.op("Div", total, _avg_counts(e, w, dt))


def _avg_pool_grad_onnx(e, node, ins):
    dt = node.outputs[0].dtype
    w = _pool_windows(e, node, ins[0], node.inputs[0].shape)
    share = e.op("Div", ins[1], _avg_counts(e, w, dt))
    return w.scatter(dt, lambda window, i, j, rest: (share, rest))


def _first_max(e, xp, y, rest):
    """(this offset holds its window's first maximum, the offsets taken so far)."""
    hit = e.op("And", e.op("Equal", xp, y), e.op("Not", rest[0]))
    return hit, [e.op("Or", rest[0], hit)]


def _max_pool_grad_onnx(e, node, ins):
    x, y, dy = ins
    dt = node.outputs[0].dtype
    w = _pool_windows(e, node, x, node.inputs[0].shape)
    xp = w.pad(x, -np.inf, dt)
    taken = e.op("Expand", e.scalar(False, "bool"), w.shape())

    def contribution(window, i, j, rest):
        hit, rest = _first_max(e, window(xp), y, rest)
        return e.op("Where", hit, dy, e.scalar(0, dt)), rest
    return w.scatter(dt, contribution, extra=[(taken, "bool", 4)])


def _max_pool_grad_grad_onnx(e, node, ins):
    x, y, ddx = ins
    dt = node.outputs[0].dtype
    w = _pool_windows(e, node, x, node.inputs[0].shape)
    xp, ddxp = w.pad(x, -np.inf, dt), w.pad(ddx, 0, dt)

    def body(window, i, j, values):
        hit, rest = _first_max(e, window(xp), y, values[1:])
        return [e.op("Add", values[0], e.op("Where", hit, window(ddxp), e.scalar(0, dt)))] + rest
    zeros = e.op("Expand", e.scalar(0, dt), e.op("Shape", y))
    taken = e.op("Expand", e.scalar(False, "bool"), e.op("Shape", y))
    return w.loop([(zeros, dt, 4), (taken, "bool", 4)], body)[0]


def _pool_onnx(onnx_type, float64=None, **extra):
    def form(e, node, ins):
        a = node.attrs
        if float64 is not None and node.inputs[0].dtype.name == "float64":
            return float64(e, node, ins)
        kh, kw = a["ksize"]
        window = _onnx_window_attrs(node.op.name, node.inputs[0].shape, kh, kw, a["strides"], (1, 1), a["padding"])
        return _nhwc(e, e.op(onnx_type, _nchw(e, ins[0]), kernel_shape=[kh, kw], strides=list(a["strides"]),
                             **window, **extra))
    return form


# ------------------------------------------------------------------ pooling
def _pool_geometry(op_name, xs, attrs):
    _check_attrs(op_name, attrs, ("ksize", "strides"))
    _check_rank4(op_name, "the input", xs, "NHWC: batch, height, width, channels")
    kh, kw = attrs["ksize"]
    return _Geometry(op_name, xs[1], xs[2], kh, kw, attrs["strides"], (1, 1), attrs["padding"])


def _pool_infer(op_name):
    def infer(shapes, dts, attrs):
        shape_rules.check_kinds(op_name, dts[0], shape_rules.float_kinds)
        xs = shapes[0]
        g = _pool_geometry(op_name, xs, attrs)
        return [((xs[0], g.ho, g.wo, xs[3]), dts[0])]
    return infer


def _pool_grad_infer(op_name, input_kinds):
    """Inference of a pooling gradient op: inputs (x, ...); `input_kinds` says, for each input
    after x, whether it has the pooled shape ("pooled") or x's ("input"). The output has the
    shape the last input does not."""
    names = {"pooled": "the pooled output", "input": "the input gradient"}

    def infer(shapes, dts, attrs):
        _floats(op_name, dts, len(shapes))
        xs = tuple(shapes[0])
        g = _pool_geometry(op_name, xs, attrs)
        pooled = (xs[0], g.ho, g.wo, xs[3])
        for k, (kind, s) in enumerate(zip(input_kinds, shapes[1:])):
            want = pooled if kind == "pooled" else xs
            if len(s) != 4 or any(a is not None and b is not None and a != b for a, b in zip(s, want)):
                what = "the gradient" if k == len(input_kinds) - 1 else names[kind]
                raise errors.InvalidArgumentError(
                    f"{op_name}: {what} has shape {shape_rules.shape_str(s)}, expected "
                    f"{shape_rules.shape_str(want)} (input of shape {shape_rules.shape_str(xs)}, pooled "
                    f"{shape_rules.shape_str(pooled)})")
        return [(xs if input_kinds[-1] == "pooled" else pooled, dts[0])]
    return infer


def _pool_kernel_geometry(op_name, x, ksize, strides, padding):
    """As _kernel_conv_geometry, for pooling."""
    try:
        return _cached_pool_geometry(op_name, x.shape, ksize, strides, padding)
    except TypeError:
        return _pool_geometry(op_name, x.shape, {"ksize": ksize, "strides": strides, "padding": padding})


@functools.lru_cache(maxsize=256)
def _cached_pool_geometry(op_name, xs, ksize, strides, padding):
    return _pool_geometry(op_name, xs, {"ksize": ksize, "strides": strides, "padding": padding})


def _reduce_windows(xp, g, ufunc):
    """ufunc (maximum, add) over each window: one strided slice of the batch per offset."""
    slices = g.slices()
    rows, cols = slices[0]
    out = np.array(xp[:, rows, cols])
    for rows, cols in slices[1:]:
        ufunc(out, xp[:, rows, cols], out=out)
    return out


def _max_pool_kernel(x, ksize, strides, padding):
    g = _pool_kernel_geometry("max_pool2d", x, ksize, strides, padding)
    return _reduce_windows(_pad(x, g, -np.inf), g, np.maximum)


def _max_pool_grad(op, g):
    x, = op.inputs
    return [run_op(_MAX_POOL_GRAD, (x, op.outputs[0], g), op.attrs)]


def _tiles(g, h, w):
    """True if the windows cover the input exactly once (window = stride, no padding)."""
    return not g.padded and g.sh == g.kh and g.sw == g.kw and h == g.ho * g.kh and w == g.wo * g.kw


def _tap_view(a, g):
    """An exact tiling's (kh, kw, N, Ho, Wo, C) view of C-contiguous NHWC `a`: [i, j] is
    offset (i, j) of every window."""
    n, _, _, c = a.shape
    return a.reshape(n, g.ho, g.kh, g.wo, g.kw, c).transpose(2, 4, 0, 1, 3, 5)


def _first_max_masks(xp, y, g, out=None):
    """Per window offset, in row-major order: (rows, cols, mask of the windows whose first
    maximum sits at that offset). A later offset equal to the maximum is dropped where an
    earlier one was taken, so ties go to the first maximum of the window, as TensorFlow; a
    window holding NaN (nothing equals its maximum) has no mark. With `out`, a
    (kh*kw, N, Ho, Wo, C) bool array, the masks are written there (offset k in out[k]).
    (Masking with np.copyto(where=) instead cost 0.8 ms a step more on the conv benchmark.)"""
    taken = None
    slices = g.slices()
    for k, (rows, cols) in enumerate(slices):
        eq = np.equal(xp[:, rows, cols], y, out=None if out is None else out[k])
        if taken is None:
            taken = eq.copy() if len(slices) > 1 else eq
        else:
            np.greater(eq, taken, out=eq)          # eq and not taken
            if k < len(slices) - 1:
                np.logical_or(taken, eq, out=taken)
        yield rows, cols, eq


def _max_pool_grad_kernel(x, y, dy, ksize, strides, padding):
    g = _pool_kernel_geometry("max_pool2d_grad", x, ksize, strides, padding)
    if _tiles(g, x.shape[1], x.shape[2]):
        # Every pixel is in one window (x is its own padded input). All the masks first, then
        # one multiply writes all of dx through its tap view: on the conv benchmark ~150 us a
        # step faster than comparing and writing offset by offset. The masks take 1 byte per
        # pixel here; other geometries stream them one offset at a time.
        masks = np.empty((g.kh, g.kw) + y.shape, bool)
        for _ in _first_max_masks(x, y, g, out=masks.reshape((g.kh * g.kw,) + y.shape)):
            pass
        dx = np.empty(x.shape, dy.dtype)
        np.multiply(dy, masks, out=_tap_view(dx, g))
        return dx
    xp = _pad(x, g, -np.inf)
    dxp = np.zeros(xp.shape, dy.dtype)
    add = g.overlapping()
    for rows, cols, eq in _first_max_masks(xp, y, g):
        if add:
            dxp[:, rows, cols] += dy * eq
        else:   # the windows' slices do not overlap: write instead of add
            np.multiply(dy, eq, out=dxp[:, rows, cols])
    return _crop(dxp, g, x.shape[1], x.shape[2])


def _max_pool_grad_grad_of(op, gdx):
    x, y, _ = op.inputs
    return [None, None, run_op(_MAX_POOL_GRAD_GRAD, (x, y, gdx), op.attrs)]


def _max_pool_grad_grad_kernel(x, y, ddx, ksize, strides, padding):
    g = _pool_kernel_geometry("max_pool2d_grad_grad", x, ksize, strides, padding)
    xp = _pad(x, g, -np.inf)
    ddxp = _pad(ddx, g, 0)
    out = np.zeros(y.shape, ddx.dtype)
    for rows, cols, eq in _first_max_masks(xp, y, g):
        out += ddxp[:, rows, cols] * eq      # one offset per window holds its first maximum
    return out


def _max_pool_grad_grad_grad(op, gy):
    x, y, _ = op.inputs
    return [None, None, run_op(_MAX_POOL_GRAD, (x, y, gy), op.attrs)]


def _valid_counts(g, h, w, dtype):
    """How many input pixels (not padding) each window holds, as a (1, Ho, Wo, 1) array,
    or a Python int when every window is full (VALID)."""
    if not g.padded:
        return g.kh * g.kw

    def along(n_out, size, k, s, before):
        start = np.arange(n_out) * s - before
        return np.minimum(start + k, size) - np.maximum(start, 0)
    counts = np.multiply.outer(along(g.ho, h, g.kh, g.sh, g.pt), along(g.wo, w, g.kw, g.sw, g.pl))
    return counts.astype(dtype)[None, :, :, None]


def _avg_pool_kernel(x, ksize, strides, padding):
    g = _pool_kernel_geometry("avg_pool2d", x, ksize, strides, padding)
    out = _reduce_windows(_pad(x, g, 0), g, np.add)
    out /= _valid_counts(g, x.shape[1], x.shape[2], x.dtype)
    return out


def _avg_pool_grad(op, g):
    x, = op.inputs
    return [run_op(_AVG_POOL_GRAD, (x, g), op.attrs)]


def _avg_pool_grad_kernel(like, dy, ksize, strides, padding):
    g = _pool_kernel_geometry("avg_pool2d_grad", like, ksize, strides, padding)
    n, h, w, c = like.shape
    share = dy / _valid_counts(g, h, w, dy.dtype)
    dxp = np.zeros((n, h + g.pt + g.pb, w + g.pl + g.pr, c), dy.dtype)
    for rows, cols in g.slices():
        dxp[:, rows, cols] += share
    return _crop(dxp, g, h, w)


def _avg_pool_grad_grad(op, gdx):
    return [None, run_op(_AVG_POOL, (gdx,), op.attrs)]


_POOL_ATTRS = {"ksize": "ints", "strides": "ints", "padding": one_of(*_PADDINGS)}
_F = shape_rules.float_kinds
_MAX_POOL = register(
    name="max_pool2d",
    kernel=_max_pool_kernel,
    infer=_pool_infer("max_pool2d"),
    grad=_max_pool_grad,
    num_inputs=1,
    attrs=_POOL_ATTRS,
    defaults={},
    kinds=_F,
    onnx=_pool_onnx("MaxPool"),
    batch=bt.fold_leading(0),
    cost=_costs.windows(1, 1.5),
)
_MAX_POOL_GRAD = register(
    name="max_pool2d_grad",
    kernel=_max_pool_grad_kernel,
    infer=_pool_grad_infer("max_pool2d_grad", ("pooled", "pooled")),
    grad=_max_pool_grad_grad_of,
    num_inputs=3,
    attrs=_POOL_ATTRS,
    defaults={},
    same_dtype=(0, 1, 2),
    kinds=_F,
    onnx=_max_pool_grad_onnx,
    batch=bt.fold_leading(0, 1, 2),
    cost=_costs.windows(4),
)
_MAX_POOL_GRAD_GRAD = register(
    name="max_pool2d_grad_grad",
    kernel=_max_pool_grad_grad_kernel,
    infer=_pool_grad_infer("max_pool2d_grad_grad", ("pooled", "input")),
    grad=_max_pool_grad_grad_grad,
    num_inputs=3,
    attrs=_POOL_ATTRS,
    defaults={},
    same_dtype=(0, 1, 2),
    kinds=_F,
    onnx=_max_pool_grad_grad_onnx,
    batch=bt.fold_leading(0, 1, 2),
    cost=_costs.windows(4),
)
_AVG_POOL = register(
    name="avg_pool2d",
    kernel=_avg_pool_kernel,
    infer=_pool_infer("avg_pool2d"),
    grad=_avg_pool_grad,
    num_inputs=1,
    attrs=_POOL_ATTRS,
    defaults={},
    kinds=_F,
    # count_include_pad=0, as TF: the mean of what is inside
    onnx=_pool_onnx("AveragePool", _avg_pool_float64, count_include_pad=0),
    batch=bt.fold_leading(0),
    cost=_costs.windows(1, 1.5),
)
_AVG_POOL_GRAD = register(
    name="avg_pool2d_grad",
    kernel=_avg_pool_grad_kernel,
    infer=_pool_grad_infer("avg_pool2d_grad", ("pooled",)),
    grad=_avg_pool_grad_grad,
    num_inputs=2,
    attrs=_POOL_ATTRS,
    defaults={},
    same_dtype=(0, 1),
    kinds=_F,
    onnx=_avg_pool_grad_onnx,
    batch=bt.fold_leading(0, 1),
    cost=_costs.windows(2),
)


def _pool_attrs(op_name, ksize, strides, padding, data_format):
    _check_format(op_name, data_format)
    return {"ksize": _pair(op_name, "ksize", ksize), "strides": _pair(op_name, "strides", strides),
            "padding": _padding(op_name, padding)}


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):
    """The maximum of each ksize window of NHWC `input`, windows `strides` apart.

    `ksize`/`strides` are an int, a pair or [1, h, w, 1]; SAME padding never wins a window.
    The gradient goes to the first maximum of each window.

    >>> df.max_pool2d(df.reshape(df.range(16.0), [1, 4, 4, 1]), 2, 2, "VALID")[0, :, :, 0]
    [[ 5.,  7.], [13., 15.]]
    """
    return run_op(_MAX_POOL, (input,), _pool_attrs("max_pool2d", ksize, strides, padding, data_format), name)


def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):
    """The mean of each ksize window of NHWC `input`; with SAME padding a window at the border
    averages only its pixels inside the input (as TensorFlow)."""
    return run_op(_AVG_POOL, (input,), _pool_attrs("avg_pool2d", ksize, strides, padding, data_format), name)
