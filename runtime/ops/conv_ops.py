"""Convolution over NHWC images: conv2d and its two gradient ops, and the window geometry and
padding rules pooling (pool_ops.py) shares.

Each op's gradient is another registered op, and the gradient ops are each other's
gradients, so derivatives of any order are built from the same kernels:

    conv2d(x, w)                    -> d/dx: conv2d_backprop_input(x, w, g)
                                       d/dw: conv2d_backprop_filter(x, w, g)
    conv2d_backprop_input(x, w, dy) -> d/dw: conv2d_backprop_filter(g, w, dy), d/ddy: conv2d(g, w)
    conv2d_backprop_filter(x, w, dy)-> d/dx: conv2d_backprop_input(x, g, dy), d/ddy: conv2d(x, g)

The backprop ops take the tensor whose gradient they compute (`x` or `w`) only for its
shape ("like" inputs, as `reshape_like`); its gradient through them is None.

Kernels: a convolution is one BLAS matmul over a patch matrix (im2col); the scatter back to
the input (col2im) loops over the kh*kw offsets of the window, each a strided slice of the
whole batch, never over pixels; no np.add.at. Kernels look their geometry up in a small
cache keyed by shapes and attrs.
"""
import functools

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from defun.runtime import errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops._onnx_windows import Windows
from defun.runtime.registry import Cost, one_of, register
from defun.runtime.tape import skip_input_indices
from defun.runtime import batching as bt

__all__ = ["conv2d"]

_PADDINGS = ("SAME", "VALID")


# ------------------------------------------------------------------ arguments and geometry
def _pair(op_name, what, value):
    """An int, a pair, or TensorFlow's 4-list [1, a, b, 1] as the pair (a, b)."""
    if hasattr(value, "numpy"):
        value = value.numpy().tolist()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        pair = (int(value), int(value))
    elif isinstance(value, (list, tuple)) and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        value = [int(v) for v in value]
        if len(value) == 4:
            if value[0] != 1 or value[3] != 1:
                raise _args.error(
                    f"{op_name}: {what} {value} step along the batch or channel dimension; only "
                    f"[1, height, width, 1] is supported (NHWC)")
            value = value[1:3]
        elif len(value) == 1:
            value = value * 2
        if len(value) != 2:
            raise _args.error(
                f"{op_name}: {what} must be an int, a pair or a list of 4, got {value}")
        pair = tuple(value)
    else:
        raise _args.error(
            f"{op_name}: {what} must be an int, a pair or a list of 4 ints, got {value!r}")
    if min(pair) < 1:
        raise _args.error(f"{op_name}: {what} must be positive, got {list(pair)}")
    return pair


def _padding(op_name, padding):
    p = padding.upper() if isinstance(padding, str) else padding
    if p not in _PADDINGS:
        raise _args.error(f"{op_name}: padding must be 'SAME' or 'VALID', got {padding!r}")
    return p


def _check_format(op_name, data_format):
    if data_format != "NHWC":
        raise _args.error(
            f"{op_name}: data_format {data_format!r} is not supported; only 'NHWC' (batch, height, "
            f"width, channels): transpose the input with df.transpose(x, [0, 2, 3, 1])", errors.UnimplementedError)


def _window(op_name, axis, size, k, s, d, padding):
    """(output size, padding before, padding after) along one spatial axis; None if unknown.

    SAME as TensorFlow computes it: out = ceil(size / s), total padding
    max((out - 1) * s + (k - 1) * d + 1 - size, 0), the odd pixel at the end.
    """
    if size is None or k is None:
        return None, 0, 0
    span = (k - 1) * d + 1
    if padding == "SAME":
        out = -(-size // s)
        total = max((out - 1) * s + span - size, 0)
        return out, total // 2, total - total // 2
    if size < span:
        dil = " dilated" if d > 1 else ""
        raise errors.InvalidArgumentError(
            f"{op_name}: with padding 'VALID' the input {axis} {size} is smaller than the{dil} "
            f"window {axis} {span}; use padding='SAME' or a larger input")
    return (size - span) // s + 1, 0, 0


class _Geometry:
    """Where the windows of one conv/pool call sit: sizes, steps, padding, output size."""

    __slots__ = ("kh", "kw", "sh", "sw", "dh", "dw", "ho", "wo", "pt", "pb", "pl", "pr", "_slices")

    def __init__(self, op_name, h, w, kh, kw, strides, dilations, padding):
        self.kh, self.kw = kh, kw
        (self.sh, self.sw), (self.dh, self.dw) = strides, dilations
        self.ho, self.pt, self.pb = _window(op_name, "height", h, kh, self.sh, self.dh, padding)
        self.wo, self.pl, self.pr = _window(op_name, "width", w, kw, self.sw, self.dw, padding)
        self._slices = None

    @property
    def padded(self):
        return bool(self.pt or self.pb or self.pl or self.pr)

    def slices(self):
        """(rows, cols) slices of the padded input, one per window offset in row-major order:
        offset (i, j) of every window at once (a tuple, made once per geometry)."""
        if self._slices is None:
            # (an empty output takes empty slices: a negative stop would count from the end)
            hspan = (self.ho - 1) * self.sh + 1 if self.ho else 0
            wspan = (self.wo - 1) * self.sw + 1 if self.wo else 0
            self._slices = tuple((slice(i * self.dh, i * self.dh + hspan, self.sh),
                                  slice(j * self.dw, j * self.dw + wspan, self.sw))
                                 for i in range(self.kh) for j in range(self.kw))
        return self._slices

    def overlapping(self):
        """True if two windows share an input pixel (then scattering back must add)."""
        return self.sh < (self.kh - 1) * self.dh + 1 or self.sw < (self.kw - 1) * self.dw + 1


def _check_rank4(op_name, what, shape, layout):
    if len(shape) != 4:
        raise errors.InvalidArgumentError(
            f"{op_name}: {what} must have rank 4 ({layout}), got shape {shape_rules.shape_str(shape)}")


def _check_attrs(op_name, attrs, names):
    for a in names:
        v = attrs[a]
        if not (isinstance(v, tuple) and len(v) == 2 and all(isinstance(d, int) and d >= 1 for d in v)):
            raise errors.InvalidArgumentError(f"{op_name}: {a} must be two positive ints, got {v!r}")
    if attrs["padding"] not in _PADDINGS:
        raise errors.InvalidArgumentError(
            f"{op_name}: padding must be 'SAME' or 'VALID', got {attrs['padding']!r}")


def _conv_geometry(op_name, xs, fs, attrs):
    """Check input shape `xs` against filter shape `fs` (None: unknown sizes); the geometry."""
    _check_attrs(op_name, attrs, ("strides", "dilations"))
    _check_rank4(op_name, "the input", xs, "NHWC: batch, height, width, channels")
    _check_rank4(op_name, "the filters", fs, "HWIO: height, width, in channels, out channels")
    c, ci = xs[3], fs[2]
    if c is not None and ci is not None and c != ci:
        raise errors.InvalidArgumentError(
            f"{op_name}: the input has {c} channels but the filters expect {ci} (filters of shape "
            f"{shape_rules.shape_str(fs)}, HWIO); the third filter size must equal the input's last")
    if 0 in (fs[0], fs[1]):
        raise errors.InvalidArgumentError(
            f"{op_name}: the filters of shape {shape_rules.shape_str(fs)} (HWIO) have no "
            f"{'rows' if fs[0] == 0 else 'columns'}; a filter window needs at least one of each")
    return _Geometry(op_name, xs[1], xs[2], fs[0], fs[1], attrs["strides"], attrs["dilations"],
                     attrs["padding"])


def _kernel_conv_geometry(op_name, xs, fs, strides, padding, dilations):
    """_conv_geometry of a kernel call (concrete shapes), computed once per shapes and attrs:
    a step calls the same few geometries again and again. (Errors are not cached.)"""
    try:
        return _cached_conv_geometry(op_name, xs, fs, strides, padding, dilations)
    except TypeError:   # an unhashable attr: _conv_geometry names it
        return _conv_geometry(op_name, xs, fs, {"strides": strides, "padding": padding, "dilations": dilations})


@functools.lru_cache(maxsize=256)
def _cached_conv_geometry(op_name, xs, fs, strides, padding, dilations):
    return _conv_geometry(op_name, xs, fs, {"strides": strides, "padding": padding, "dilations": dilations})


def _conv_out_shape(xs, fs, g):
    return (xs[0], g.ho, g.wo, fs[3])


def _check_dy(op_name, dy, expected):
    if len(dy) != 4 or any(a is not None and b is not None and a != b for a, b in zip(dy, expected)):
        raise errors.InvalidArgumentError(
            f"{op_name}: the output gradient has shape {shape_rules.shape_str(dy)}, but the forward "
            f"output has shape {shape_rules.shape_str(expected)}")


def _floats(op_name, dts, n):
    shape_rules.check_same(op_name, dts[:n])
    shape_rules.check_kinds(op_name, dts[0], shape_rules.float_kinds)


def _pad(x, g, value):
    """x (NHWC) with the geometry's padding filled with `value` (x itself if none)."""
    if not g.padded:
        return x
    n, h, w, c = x.shape
    out = np.full((n, h + g.pt + g.pb, w + g.pl + g.pr, c), value, x.dtype)
    out[:, g.pt:g.pt + h, g.pl:g.pl + w] = x
    return out


def _crop(xp, g, h, w):
    """The unpadded part of a padded NHWC array, as its own (contiguous) array."""
    if not g.padded:
        return xp
    return np.ascontiguousarray(xp[:, g.pt:g.pt + h, g.pl:g.pl + w])


# ------------------------------------------------------------------ conv2d: im2col + one matmul
# Up to this many input channels the patch matrix is built channel-major, (K, M), by one
# contiguous copy per window offset: for a 1-channel 28x28 batch of 32 that is 70 us against
# 440 us for reshaping the strided (N, Ho, Wo, kh, kw, C) view, whose innermost runs are only
# C elements long. From ~8 channels on the strided view's copy is the faster one.
_CHANNEL_MAJOR_MAX = 4


def _channel_major(c):
    return c <= _CHANNEL_MAJOR_MAX


def _im2col(x, g):
    """The (N*Ho*Wo, kh*kw*C) patch matrix of x: row = one output pixel, columns in HWI order
    (the order of filters.reshape(-1, O)). Channel-major layouts return the transpose of a
    C-contiguous (K, M) array, which BLAS reads without a copy."""
    n, h, w, c = x.shape
    m, k = n * g.ho * g.wo, g.kh * g.kw * c
    if _channel_major(c):
        if g.padded:
            xt = np.zeros((c, n, h + g.pt + g.pb, w + g.pl + g.pr), x.dtype)
            xt[:, :, g.pt:g.pt + h, g.pl:g.pl + w] = x.transpose(3, 0, 1, 2)
        else:
            xt = x.transpose(3, 0, 1, 2)
        cols = np.empty((g.kh * g.kw, c, n, g.ho, g.wo), x.dtype)
        for k_off, (rows, cs) in enumerate(g.slices()):
            cols[k_off] = xt[:, :, rows, cs]
        return cols.reshape(k, m).T
    xp = _pad(x, g, 0)
    s0, s1, s2, s3 = xp.strides
    view = as_strided(xp, (n, g.ho, g.wo, g.kh, g.kw, c),
                      (s0, s1 * g.sh, s2 * g.sw, s1 * g.dh, s2 * g.dw, s3), writeable=False)
    return view.reshape(m, k)


def _col2im(dcols_of, like_shape, g):
    """The input gradient from patch gradients: each window offset's slice of the (padded)
    input receives its column block. `dcols_of(channel_major)` gives the patch gradient as
    a (K, M) array if channel_major, else (M, K)."""
    n, h, w, c = like_shape
    hp, wp = h + g.pt + g.pb, w + g.pl + g.pr
    if _channel_major(c):
        blocks = dcols_of(True).reshape(g.kh * g.kw, c, n, g.ho, g.wo)
        dxt = np.zeros((c, n, hp, wp), blocks.dtype)
        for k_off, (rows, cs) in enumerate(g.slices()):
            dxt[:, :, rows, cs] += blocks[k_off]
        return np.ascontiguousarray(dxt[:, :, g.pt:g.pt + h, g.pl:g.pl + w].transpose(1, 2, 3, 0))
    blocks = dcols_of(False).reshape(n, g.ho, g.wo, g.kh * g.kw, c)
    dxp = np.zeros((n, hp, wp, c), blocks.dtype)
    for k_off, (rows, cs) in enumerate(g.slices()):
        dxp[:, rows, cs] += blocks[:, :, :, k_off]
    return _crop(dxp, g, h, w)


def _conv2d_infer(shapes, dts, attrs):
    _floats("conv2d", dts, 2)
    xs, fs = shapes
    g = _conv_geometry("conv2d", xs, fs, attrs)
    return [(_conv_out_shape(xs, fs, g), dts[0])]


def _conv2d_kernel(x, filters, strides, padding, dilations):
    g = _kernel_conv_geometry("conv2d", x.shape, filters.shape, strides, padding, dilations)
    kh, kw, c, o = filters.shape
    out = _im2col(x, g) @ filters.reshape(kh * kw * c, o)
    return out.reshape(x.shape[0], g.ho, g.wo, o)


def _conv2d_grad(op, g):
    x, w = op.inputs
    skip = skip_input_indices(op)
    return [None if 0 in skip else run_op(_BACKPROP_INPUT, (x, w, g), op.attrs),
            None if 1 in skip else run_op(_BACKPROP_FILTER, (x, w, g), op.attrs)]


def _backprop_infer(op_name, like):
    """Inference of a backprop op: inputs (x, filters, dy), output shaped as input `like`."""
    def infer(shapes, dts, attrs):
        _floats(op_name, dts, 3)
        xs, fs, dy = shapes
        g = _conv_geometry(op_name, xs, fs, attrs)
        _check_dy(op_name, dy, _conv_out_shape(xs, fs, g))
        return [(tuple(shapes[like]), dts[0])]
    return infer


def _backprop_input_kernel(like, filters, dy, strides, padding, dilations):
    g = _kernel_conv_geometry("conv2d_backprop_input", like.shape, filters.shape, strides, padding, dilations)
    _check_dy("conv2d_backprop_input", dy.shape, _conv_out_shape(like.shape, filters.shape, g))
    kh, kw, c, o = filters.shape
    w2 = filters.reshape(kh * kw * c, o)
    dy2 = dy.reshape(dy.shape[0] * g.ho * g.wo, o)
    return _col2im(lambda channel_major: w2 @ dy2.T if channel_major else dy2 @ w2.T, like.shape, g)


def _backprop_input_grad(op, g):
    # z = conv^T(dy; w) is bilinear in (w, dy): <g, z> = <conv2d(g, w), dy>
    _, w, dy = op.inputs
    skip = skip_input_indices(op)
    return [None,
            None if 1 in skip else run_op(_BACKPROP_FILTER, (g, w, dy), op.attrs),
            None if 2 in skip else run_op(_CONV, (g, w), op.attrs)]


def _backprop_filter_kernel(x, like, dy, strides, padding, dilations):
    g = _kernel_conv_geometry("conv2d_backprop_filter", x.shape, like.shape, strides, padding, dilations)
    _check_dy("conv2d_backprop_filter", dy.shape, _conv_out_shape(x.shape, like.shape, g))
    dw = _im2col(x, g).T @ dy.reshape(dy.shape[0] * g.ho * g.wo, like.shape[3])
    return dw.reshape(like.shape)


def _backprop_filter_grad(op, g):
    # dw = B(x)^T dy is bilinear in (x, dy): <g, dw> = <conv2d(x, g), dy>
    x, _, dy = op.inputs
    skip = skip_input_indices(op)
    return [None if 0 in skip else run_op(_BACKPROP_INPUT, (x, g, dy), op.attrs),
            None,
            None if 2 in skip else run_op(_CONV, (x, g), op.attrs)]


# ------------------------------------------------------------------ ONNX forms
# ONNX convolves and pools NCHW: transposes around Conv / MaxPool / AveragePool. TensorFlow's
# SAME padding becomes explicit pads when the spatial sizes are static, else auto_pad
# SAME_UPPER (the same rule: the odd pixel at the end).
def _onnx_window_attrs(op_name, x_shape, kh, kw, strides, dilations, padding):
    if padding == "VALID":
        return {}
    if None in (x_shape[1], x_shape[2], kh, kw):
        return {"auto_pad": "SAME_UPPER"}
    g = _Geometry(op_name, x_shape[1], x_shape[2], kh, kw, strides, dilations, padding)
    return {"pads": [g.pt, g.pl, g.pb, g.pr]}


def _nchw(e, x):
    return e.op("Transpose", x, perm=[0, 3, 1, 2])


def _nhwc(e, x):
    return e.op("Transpose", x, perm=[0, 2, 3, 1])


def _taps(e, f, i, j):
    """filters[i, j]: (in channels, out channels)."""
    return e.op("Gather", e.op("Gather", f, i), j)


def _conv_windows(e, node, ins, x_at, f_at):
    x, f, a = node.inputs[x_at], node.inputs[f_at], node.attrs
    kh, kw = (e.dim(ins[f_at], k, f.shape) for k in (0, 1))
    return Windows(e, ins[x_at], x.shape, kh, kw, a["strides"], a["dilations"], a["padding"])


def _conv2d_onnx(e, node, ins):
    a, dt = node.attrs, node.outputs[0].dtype
    if dt.name == "float64":
        w = _conv_windows(e, node, ins, 0, 1)
        xp = w.pad(ins[0], 0, dt)
        zeros = e.op("Expand", e.scalar(0, dt), w.shape(e.dim(ins[1], 3, node.inputs[1].shape)))
        return w.loop([(zeros, dt, 4)], lambda window, i, j, acc: [
            e.op("Add", acc[0], e.op("MatMul", window(xp), _taps(e, ins[1], i, j)))])[0]
    kh, kw = node.inputs[1].shape[:2]
    window = _onnx_window_attrs("conv2d", node.inputs[0].shape, kh, kw, a["strides"], a["dilations"], a["padding"])
    w = e.op("Transpose", ins[1], perm=[3, 2, 0, 1])   # HWIO -> OIHW
    return _nhwc(e, e.op("Conv", _nchw(e, ins[0]), w, strides=list(a["strides"]),
                         dilations=list(a["dilations"]), **window))


def _backprop_input_onnx(e, node, ins):
    """dy @ filters[i, j]^T added back where window (i, j) read the input."""
    w = _conv_windows(e, node, ins, 0, 1)
    return w.scatter(node.outputs[0].dtype, lambda window, i, j, rest: (
        e.op("MatMul", ins[2], e.op("Transpose", _taps(e, ins[1], i, j))), rest))


def _backprop_filter_onnx(e, node, ins):
    """filters'[i, j] = window (i, j) of x, (n ho wo, in)^T @ dy (n ho wo, out)."""
    dt, f = node.outputs[0].dtype, node.inputs[1]
    w = _conv_windows(e, node, ins, 0, 1)
    xp = w.pad(ins[0], 0, dt)
    rows = lambda t, c: e.op("Reshape", t, e.op("Concat", e.ints([-1]), c, axis=0))  # noqa: E731
    dy = rows(ins[2], e.dim(ins[1], 3, f.shape))

    def body(window, i, j, acc):
        tap = e.op("MatMul", e.op("Transpose", rows(window(xp), e.dim(ins[1], 2, f.shape))), dy)
        at = e.op("Reshape", e.op("Concat", e.op("Unsqueeze", i, e.ints([0])), e.op("Unsqueeze", j, e.ints([0])),
                                  axis=0), e.ints([1, 2]))
        return [e.op("ScatterND", acc[0], at, e.op("Unsqueeze", tap, e.ints([0])))]
    zeros = e.op("Expand", e.scalar(0, dt), e.op("Shape", ins[1]))
    return w.loop([(zeros, dt, 4)], body)[0]


def _backprop_filter_batch(ctx, node, inputs, batched):
    """Each example's filter gradient: per window offset (i, j), the sum over its N, H, W of
    its input at that offset times its output gradient: kh * kw einsums on the batch."""
    x, _, dy = bt.materialize_all(ctx, node, inputs, batched, (0, 2))
    n, h, w, c = node.inputs[0].shape          # N may be unknown: the einsums sum over it
    if None in (h, w, c):
        bt.static_shape(node, node.inputs[0])   # (raises: the windows need H, W and C)
    kh, kw, _, o = bt.static_shape(node, node.inputs[1])
    a = node.attrs
    g = _Geometry(node.op.name, h, w, kh, kw, a.get("strides", (1, 1)), a.get("dilations", (1, 1)),
                  a.get("padding", "VALID"))
    if g.padded:
        x = bt.op("pad", [x, 0.0], paddings=(0, 0, 0, 0, g.pt, g.pb, g.pl, g.pr, 0, 0), mode="CONSTANT")
    keep = 0b10011          # the batch, N and channel axes: whole
    per_offset = []
    for rows, cols in g.slices():
        patch = bt.op("strided_slice", [x], begin=(0, 0, rows.start, cols.start, 0),
                      end=(0, 0, rows.stop, cols.stop, 0), strides=(1, 1, rows.step, cols.step, 1),
                      begin_mask=keep, end_mask=keep, shrink_axis_mask=0, new_axis=())
        per_offset.append(bt.op("einsum", [patch, dy], equation="bnhwc,bnhwo->bco"))
    out = bt.op("stack", per_offset, axis=1)
    return [bt.reshape_batch(ctx, out, (kh, kw, c, o))], [True]      # (B may be known only when run)


_CONV_ATTRS = {"strides": "ints", "padding": one_of(*_PADDINGS), "dilations": "ints"}
_CONV_DEFAULTS = {"strides": (1, 1), "padding": "VALID", "dilations": (1, 1)}


def _patches(windows, filters):
    """Entries of the patch matrix: one row per output pixel (N Ho Wo of `windows`, a 4-D
    shape), kh kw C columns (of `filters`, HWIO)."""
    return math.prod(windows[:3]) * math.prod(filters[:3])


def _conv_cost(windows_at, filters_at):
    """The Cost of a convolution kernel: the patch matrix (or its gradient), with 20% slack
    for the blocks in flight, and the padded image twice; a multiply-add per patch entry and
    output channel. `windows_at`: where the output-pixel shape is (-1: the output)."""
    def shapes_of(shapes, out_shapes):
        return (out_shapes[0] if windows_at < 0 else shapes[windows_at]), shapes[filters_at]

    def scratch(shapes, out_shapes, attrs):
        windows, filters = shapes_of(shapes, out_shapes)
        return int(1.2 * _patches(windows, filters)) + 2 * max(math.prod(s) for s in list(shapes) + out_shapes)

    def work(shapes, out_shapes, attrs):
        windows, filters = shapes_of(shapes, out_shapes)
        return _patches(windows, filters) * (filters[3] if len(filters) == 4 else 1)
    return Cost(scratch=scratch, work=work)


_CONV = register(
    name="conv2d",
    kernel=_conv2d_kernel,
    infer=_conv2d_infer,
    grad=_conv2d_grad,
    num_inputs=2,
    attrs=_CONV_ATTRS,
    defaults=_CONV_DEFAULTS,
    same_dtype=(0, 1),
    kinds=shape_rules.float_kinds,
    onnx=_conv2d_onnx,
    batch=bt.fold_leading(0),
    cost=_conv_cost(-1, 1),
)
_BACKPROP_INPUT = register(
    name="conv2d_backprop_input",
    kernel=_backprop_input_kernel,
    infer=_backprop_infer("conv2d_backprop_input", 0),
    grad=_backprop_input_grad,
    num_inputs=3,
    attrs=_CONV_ATTRS,
    defaults=_CONV_DEFAULTS,
    same_dtype=(0, 1, 2),
    kinds=shape_rules.float_kinds,
    onnx=_backprop_input_onnx,
    batch=bt.fold_leading(0, 2),
    cost=_conv_cost(2, 1),
)
_BACKPROP_FILTER = register(
    name="conv2d_backprop_filter",
    kernel=_backprop_filter_kernel,
    infer=_backprop_infer("conv2d_backprop_filter", 1),
    grad=_backprop_filter_grad,
    num_inputs=3,
    attrs=_CONV_ATTRS,
    defaults=_CONV_DEFAULTS,
    same_dtype=(0, 1, 2),
    kinds=shape_rules.float_kinds,
    onnx=_backprop_filter_onnx,
    batch=_backprop_filter_batch,
    cost=_conv_cost(2, 1),
)


def conv2d(x, filters, strides=1, padding="VALID", dilations=1, data_format="NHWC", name=None):
    """2-D convolution (cross-correlation, as TensorFlow) of NHWC `x` with HWIO `filters`;
    the contract's order (API.md: `dilations` fifth), TF's other names (`tf.nn.conv2d`).

    `strides` and `dilations` are an int, a pair (height, width) or [1, h, w, 1];
    `padding` is "VALID" (windows inside the input) or "SAME" (output size ceil(in / stride)).

    >>> df.conv2d(df.ones([1, 4, 4, 1]), df.ones([3, 3, 1, 2]), padding="SAME").shape
    (1, 4, 4, 2)
    """
    _check_format("conv2d", data_format)
    attrs = {"strides": _pair("conv2d", "strides", strides), "padding": _padding("conv2d", padding),
             "dilations": _pair("conv2d", "dilations", dilations)}
    return run_op(_CONV, (x, filters), attrs, name)
