"""Op rows: conv2d, max_pool2d, avg_pool2d and their gradient ops, against loop references.

The references below are slow on purpose: one output pixel (or one window) at a time,
with TensorFlow's SAME padding written out, so they are easy to check by reading. The
convolution gradients' references visit the same taps transposed; the pooling gradients'
are the exact adjoint of the average (`adjoint_of` builds the Jacobian column by column) or
a loop routing to each window's first maximum (test_conv_ops.py checks the convolution
loops against `adjoint_of` of conv2d_ref).
Comparisons with torch.nn.functional are in test_conv_ops.py.
"""
import numpy as np

import defun as df
from opcheck import A, Row, V, adjoint_of, internal_op

__all__ = ["ROWS", "conv2d_ref", "conv2d_backprop_input_ref", "conv2d_backprop_filter_ref", "max_pool2d_ref", "avg_pool2d_ref", "max_pool2d_grad_ref",
           "max_pool2d_grad_grad_ref", "same_padding", "pair"]


def pair(v):
    if isinstance(v, int):
        return v, v
    v = list(v)
    return tuple(v[1:3]) if len(v) == 4 else tuple(v)


def same_padding(size, k, stride, dilation=1):
    """TensorFlow's SAME: (output size, padding before); the odd pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return out, total // 2


def _geometry(size, k, stride, dilation, padding):
    if padding == "SAME":
        return same_padding(size, k, stride, dilation)
    return (size - ((k - 1) * dilation + 1)) // stride + 1, 0


def _taps(x_shape, w_shape, strides, padding, dilations):
    """Yield (b, i, j, a, e, r, s): output pixel (b, i, j) meets filter tap (a, e) at input
    pixel (r, s), for every tap that falls inside the input (TensorFlow's padding)."""
    (sh, sw), (dh, dw) = pair(strides), pair(dilations)
    n, h, wd, _ = x_shape
    kh, kw = w_shape[:2]
    ho, top = _geometry(h, kh, sh, dh, padding.upper())
    wo, left = _geometry(wd, kw, sw, dw, padding.upper())
    for b in range(n):
        for i in range(ho):
            for j in range(wo):
                for a in range(kh):
                    for e in range(kw):
                        r, s = i * sh - top + a * dh, j * sw - left + e * dw
                        if 0 <= r < h and 0 <= s < wd:
                            yield b, i, j, a, e, r, s


def conv2d_ref(x, w, strides=1, padding="VALID", dilations=1):
    """out[b, i, j, :] = sum over the taps of x[b, r, s, :] @ w[a, e]."""
    (sh, sw), (dh, dw) = pair(strides), pair(dilations)
    out = np.zeros((x.shape[0], _geometry(x.shape[1], w.shape[0], sh, dh, padding.upper())[0],
                    _geometry(x.shape[2], w.shape[1], sw, dw, padding.upper())[0], w.shape[3]))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    for b, i, j, a, e, r, s in _taps(x.shape, w.shape, strides, padding, dilations):
        out[b, i, j] += x64[b, r, s] @ w64[a, e]
    return out.astype(x.dtype)


def conv2d_backprop_input_ref(like, w, dy, strides=1, padding="VALID", dilations=1):
    """The same taps, transposed: dx[b, r, s, :] += w[a, e] @ dy[b, i, j, :]."""
    dx = np.zeros(like.shape)
    for b, i, j, a, e, r, s in _taps(like.shape, w.shape, strides, padding, dilations):
        dx[b, r, s] += w[a, e].astype(np.float64) @ dy[b, i, j]
    return dx.astype(dy.dtype)


def conv2d_backprop_filter_ref(x, like, dy, strides=1, padding="VALID", dilations=1):
    """The same taps: dw[a, e] += outer(x[b, r, s, :], dy[b, i, j, :])."""
    dw = np.zeros(like.shape)
    for b, i, j, a, e, r, s in _taps(x.shape, like.shape, strides, padding, dilations):
        dw[a, e] += np.outer(x[b, r, s], dy[b, i, j])
    return dw.astype(dy.dtype)


def _windows(x, ksize, strides, padding):
    """Yield (i, j, rows, cols): each output position and the input part of its window."""
    (kh, kw), (sh, sw) = pair(ksize), pair(strides)
    h, w = x.shape[1:3]
    ho, top = _geometry(h, kh, sh, 1, padding.upper())
    wo, left = _geometry(w, kw, sw, 1, padding.upper())
    for i in range(ho):
        for j in range(wo):
            r0, c0 = i * sh - top, j * sw - left
            yield i, j, range(max(r0, 0), min(r0 + kh, h)), range(max(c0, 0), min(c0 + kw, w))


def _pooled_shape(x, ksize, strides, padding):
    (kh, kw), (sh, sw) = pair(ksize), pair(strides)
    ho = _geometry(x.shape[1], kh, sh, 1, padding.upper())[0]
    wo = _geometry(x.shape[2], kw, sw, 1, padding.upper())[0]
    return (x.shape[0], ho, wo, x.shape[3])


def max_pool2d_ref(x, ksize, strides, padding):
    out = np.zeros(_pooled_shape(x, ksize, strides, padding), x.dtype)
    for i, j, rows, cols in _windows(x, ksize, strides, padding):
        out[:, i, j] = x[:, rows.start:rows.stop, cols.start:cols.stop].max(axis=(1, 2))
    return out


def avg_pool2d_ref(x, ksize, strides, padding):
    """The mean over the window's pixels inside the input (padding is not counted)."""
    out = np.zeros(_pooled_shape(x, ksize, strides, padding))
    for i, j, rows, cols in _windows(x, ksize, strides, padding):
        out[:, i, j] = x[:, rows.start:rows.stop, cols.start:cols.stop].astype(np.float64).mean(axis=(1, 2))
    return out.astype(x.dtype)


def _first_max(x, b, c, rows, cols):
    """(row, col) of the first maximum of x[b, rows, cols, c], row-major (ties: the first)."""
    best = None
    for r in rows:
        for s in cols:
            if best is None or x[b, r, s, c] > x[b, best[0], best[1], c]:
                best = (r, s)
    return best


def max_pool2d_grad_ref(x, g, ksize, strides, padding):
    """Each window's gradient added to its first maximum."""
    dx = np.zeros(x.shape, np.float64)
    for i, j, rows, cols in _windows(x, ksize, strides, padding):
        for b in range(x.shape[0]):
            for c in range(x.shape[3]):
                r, s = _first_max(x, b, c, rows, cols)
                dx[b, r, s, c] += g[b, i, j, c]
    return dx.astype(g.dtype)


def max_pool2d_grad_grad_ref(x, gg, ksize, strides, padding):
    """gg read at each window's first maximum."""
    out = np.zeros(_pooled_shape(x, ksize, strides, padding), gg.dtype)
    for i, j, rows, cols in _windows(x, ksize, strides, padding):
        for b in range(x.shape[0]):
            for c in range(x.shape[3]):
                r, s = _first_max(x, b, c, rows, cols)
                out[b, i, j, c] = gg[b, r, s, c]
    return out


# ---------------------------------------------------------------------------------------
# Calling the gradient ops directly

def _conv_attrs(strides=1, padding="VALID", dilations=1):
    return {"strides": pair(strides), "padding": padding, "dilations": pair(dilations)}


def _pool_attrs(ksize, strides, padding):
    return {"ksize": pair(ksize), "strides": pair(strides), "padding": padding}


def _conv_out(xs, ws, strides=1, padding="VALID", dilations=1):
    (sh, sw), (dh, dw) = pair(strides), pair(dilations)
    return (xs[0], _geometry(xs[1], ws[0], sh, dh, padding)[0], _geometry(xs[2], ws[1], sw, dw, padding)[0],
            ws[3])


def _backprop_input(like, w, dy, **kw):
    return internal_op("conv2d_backprop_input")(like, w, dy, **_conv_attrs(**kw))


def _backprop_filter(x, like, dy, **kw):
    return internal_op("conv2d_backprop_filter")(x, like, dy, **_conv_attrs(**kw))


def max_pool_grad(x, g, **kw):
    return internal_op("max_pool2d_grad")(x, df.max_pool2d(x, **kw), g, **_pool_attrs(**kw))


def max_pool_grad_grad(x, gg, **kw):
    return internal_op("max_pool2d_grad_grad")(x, df.max_pool2d(x, **kw), gg, **_pool_attrs(**kw))


def _avg_pool_grad(like, g, **kw):
    return internal_op("avg_pool2d_grad")(like, g, **_pool_attrs(**kw))


# ---------------------------------------------------------------------------------------
# Variants: strides 1 and 2, dilations, SAME and VALID, odd sizes, batch and channels > 1,
# both patch-matrix layouts (channel-major up to 4 input channels, pixel-major above).

CONV_CASES = [
    ((1, 5, 5, 1), (3, 3, 1, 1), {}),
    ((2, 6, 5, 3), (3, 3, 3, 2), dict(padding="SAME")),
    ((2, 7, 6, 2), (3, 2, 2, 3), dict(strides=2, padding="SAME")),
    ((2, 7, 8, 2), (3, 3, 2, 2), dict(padding="SAME", dilations=2)),
    ((1, 8, 7, 5), (3, 3, 5, 2), dict(strides=2, padding="SAME")),
    ((2, 9, 7, 6), (2, 3, 6, 2), dict(strides=[1, 2, 1, 1], padding="VALID", dilations=(2, 1))),
    ((2, 5, 4, 3), (1, 1, 3, 4), dict(strides=2)),
    ((1, 5, 6, 2), (2, 2, 2, 1), dict(strides=(2, 3), padding="SAME")),
    ((2, 4, 4, 1), (3, 3, 1, 2), dict(strides=3, padding="SAME", dilations=1)),
]

POOL_CASES = [
    ((1, 4, 4, 1), dict(ksize=2, strides=2, padding="VALID")),
    ((2, 5, 7, 3), dict(ksize=3, strides=2, padding="SAME")),
    ((2, 6, 6, 2), dict(ksize=(2, 3), strides=(1, 2), padding="VALID")),
    ((1, 5, 5, 2), dict(ksize=2, strides=3, padding="VALID")),
    ((2, 5, 6, 1), dict(ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")),
    ((1, 3, 4, 2), dict(ksize=3, strides=1, padding="SAME")),
]


ROWS = [
    Row("conv2d", df.conv2d, conv2d_ref,
        [V([A(xs), A(ws)], kw) for xs, ws, kw in CONV_CASES],
        also=("conv2d_backprop_input", "conv2d_backprop_filter"), second=True, tol=(1e-5, 1e-5)),
    Row("conv2d_backprop_input", _backprop_input,
        conv2d_backprop_input_ref,
        [V([A(xs), A(ws), A(_conv_out(xs, ws, **kw))], kw)
         for xs, ws, kw in CONV_CASES[1:5] + CONV_CASES[7:]],
        also=("conv2d_backprop_filter", "conv2d"), second=True, tol=(1e-5, 1e-5)),
    Row("conv2d_backprop_filter", _backprop_filter,
        conv2d_backprop_filter_ref,
        [V([A(xs), A(ws), A(_conv_out(xs, ws, **kw))], kw)
         for xs, ws, kw in [CONV_CASES[0]] + CONV_CASES[2:5] + [CONV_CASES[6]]],
        also=("conv2d_backprop_input", "conv2d"), second=True, tol=(1e-5, 1e-5)),
    Row("max_pool2d", df.max_pool2d, max_pool2d_ref,
        [V([A(xs, "distinct")], kw) for xs, kw in POOL_CASES],
        also=("max_pool2d_grad",), second=True),
    Row("max_pool2d_grad", max_pool_grad,
        lambda x, g, **kw: max_pool2d_grad_ref(x, g, **kw),
        [V([A(xs, "distinct"), A(_pooled_shape(np.zeros(xs), **kw))], kw) for xs, kw in POOL_CASES[:4]],
        also=("max_pool2d", "max_pool2d_grad_grad"), second=True),
    Row("max_pool2d_grad_grad", max_pool_grad_grad,
        lambda x, gg, **kw: max_pool2d_grad_grad_ref(x, gg, **kw),
        [V([A(xs, "distinct"), A(xs)], kw) for xs, kw in POOL_CASES[1:5]],
        also=("max_pool2d", "max_pool2d_grad"), second=True),
    Row("avg_pool2d", df.avg_pool2d, avg_pool2d_ref,
        [V([A(xs)], kw) for xs, kw in POOL_CASES],
        also=("avg_pool2d_grad",), second=True),
    Row("avg_pool2d_grad", _avg_pool_grad,
        lambda like, g, **kw: adjoint_of(lambda x: avg_pool2d_ref(x, **kw), like.shape, g),
        [V([A(xs), A(_pooled_shape(np.zeros(xs), **kw))], kw) for xs, kw in POOL_CASES[1:]],
        also=("avg_pool2d",), second=True),
]
