"""conv2d and pooling beyond the op table: against torch.nn.functional and scipy, random
geometries against the loop references, ties, static shapes with unknown sizes, errors,
and higher-order gradients through a traced function."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import defun as df
from op_rows_conv import (avg_pool2d_ref, conv2d_backprop_filter_ref, conv2d_backprop_input_ref, conv2d_ref,
                          max_pool2d_grad_grad_ref, max_pool2d_grad_ref, max_pool2d_ref, pair, same_padding)
from op_rows_conv import max_pool_grad, max_pool_grad_grad
from opcheck import adjoint_of

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _tf_pads(x_hw, k_hw, strides, dilations, padding):
    """(top, bottom, left, right) of TensorFlow's padding."""
    if padding == "VALID":
        return 0, 0, 0, 0
    pads = []
    for size, k, s, d in zip(x_hw, k_hw, pair(strides), pair(dilations)):
        out, before = same_padding(size, k, s, d)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        pads += [before, total - before]
    return tuple(pads)


def _torch_conv(x, w, strides, padding, dilations):
    """torch's conv2d on NCHW/OIHW, padded explicitly as TensorFlow pads (maybe asymmetric)."""
    t, b, l, r = _tf_pads(x.shape[1:3], w.shape[:2], strides, dilations, padding)
    xt = F.pad(x.permute(0, 3, 1, 2), (l, r, t, b))
    return F.conv2d(xt, w.permute(3, 2, 0, 1), stride=pair(strides), dilation=pair(dilations)).permute(0, 2, 3, 1)


CONV_CASES = [
    ((4, 28, 28, 1), (3, 3, 1, 16), 1, "SAME", 1),
    ((2, 15, 13, 3), (5, 5, 3, 8), 2, "SAME", 1),
    ((2, 16, 16, 8), (3, 3, 8, 4), (2, 1), "VALID", (1, 2)),
    ((3, 11, 9, 12), (3, 2, 12, 5), 1, "SAME", 3),
    ((1, 10, 10, 4), (4, 4, 4, 2), 3, "SAME", 1),
    ((2, 9, 9, 5), (1, 1, 5, 7), 2, "VALID", 1),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,ws,strides,padding,dilations", CONV_CASES)
def test_conv2d_and_gradients_match_torch(xs, ws, strides, padding, dilations, dtype):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    yt = _torch_conv(xt, wt, strides, padding, dilations)
    gy = rng.standard_normal(tuple(yt.shape)).astype(dtype)
    gxt, gwt = torch.autograd.grad(yt, (xt, wt), torch.tensor(gy))

    tx, tw = df.constant(x), df.constant(w)
    with df.GradientTape() as tape:
        tape.watch([tx, tw])
        y = df.conv2d(tx, tw, strides, padding, dilations=dilations)
    gx, gw = tape.gradient(y, [tx, tw], output_gradients=df.constant(gy))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    assert y.dtype.np == dtype and gx.dtype.np == dtype and gw.dtype.np == dtype
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), **tol)
    np.testing.assert_allclose(gx.numpy(), gxt.numpy(), **tol)
    np.testing.assert_allclose(gw.numpy(), gwt.numpy(), **tol)


def test_single_channel_conv_matches_scipy_correlate():
    from scipy import signal
    rng = np.random.default_rng(1)
    img, k = rng.standard_normal((9, 11)), rng.standard_normal((3, 4))
    out = df.conv2d(img[None, :, :, None], k[:, :, None, None]).numpy()[0, :, :, 0]
    np.testing.assert_allclose(out, signal.correlate2d(img, k, mode="valid"), rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2), h=st.integers(1, 7), w=st.integers(1, 7), c=st.integers(1, 6),
       kh=st.integers(1, 3), kw=st.integers(1, 3), o=st.integers(1, 3), sh=st.integers(1, 3),
       sw=st.integers(1, 3), dh=st.integers(1, 2), dw=st.integers(1, 2), same=st.booleans())
def test_conv2d_random_geometry_matches_loop_reference(n, h, w, c, kh, kw, o, sh, sw, dh, dw, same):
    padding = "SAME" if same else "VALID"
    if not same and (h < (kh - 1) * dh + 1 or w < (kw - 1) * dw + 1):
        with pytest.raises(df.errors.InvalidArgumentError, match="conv2d: with padding 'VALID'"):
            df.conv2d(np.zeros((n, h, w, c)), np.zeros((kh, kw, c, o)), (sh, sw), padding, dilations=(dh, dw))
        return
    rng = np.random.default_rng(h * 100 + w)
    x, f = rng.standard_normal((n, h, w, c)), rng.standard_normal((kh, kw, c, o))
    y = df.conv2d(x, f, (sh, sw), padding, dilations=(dh, dw)).numpy()
    np.testing.assert_allclose(y, conv2d_ref(x, f, (sh, sw), padding, (dh, dw)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kw", [dict(strides=2, padding="SAME"), dict(padding="SAME", dilations=2),
                                dict(strides=(1, 2), dilations=(2, 1))])
def test_the_gradient_loop_references_are_the_adjoints_of_the_forward_loop(kw):
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 6, 5, 2)), rng.standard_normal((3, 2, 2, 3))
    dy = rng.standard_normal(conv2d_ref(x, w, **kw).shape)
    np.testing.assert_allclose(conv2d_backprop_input_ref(x, w, dy, **kw),
                               adjoint_of(lambda v: conv2d_ref(v, w, **kw), x.shape, dy), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(conv2d_backprop_filter_ref(x, w, dy, **kw),
                               adjoint_of(lambda v: conv2d_ref(x, v, **kw), w.shape, dy), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------
# Pooling

def _torch_pool(kind, x, ksize, strides, padding):
    t, b, l, r = _tf_pads(x.shape[1:3], pair(ksize), strides, 1, padding)
    xt = x.permute(0, 3, 1, 2)
    if kind == "max":
        y = F.max_pool2d(F.pad(xt, (l, r, t, b), value=-np.inf), pair(ksize), pair(strides))
    else:   # the mean over pixels inside the input: sum of zero-padded windows / their count
        ones = torch.ones_like(xt[:1, :1])
        y = F.avg_pool2d(F.pad(xt, (l, r, t, b)), pair(ksize), pair(strides), divisor_override=1)
        y = y / F.avg_pool2d(F.pad(ones, (l, r, t, b)), pair(ksize), pair(strides), divisor_override=1)
    return y.permute(0, 2, 3, 1)


POOL_CASES = [((32, 28, 28, 16), 2, 2, "VALID"), ((2, 9, 11, 3), 3, 2, "SAME"),
              ((2, 8, 8, 4), (3, 2), (1, 2), "VALID"), ((1, 7, 7, 2), 2, 3, "SAME"),
              ((3, 6, 5, 1), [1, 4, 4, 1], [1, 1, 1, 1], "SAME")]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("xs,ksize,strides,padding", POOL_CASES)
def test_pooling_and_gradient_match_torch(kind, xs, ksize, strides, padding):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(xs)
    xt = torch.tensor(x, requires_grad=True)
    yt = _torch_pool(kind, xt, ksize, strides, padding)
    gy = rng.standard_normal(tuple(yt.shape))
    gxt, = torch.autograd.grad(yt, (xt,), torch.tensor(gy))
    pool = df.max_pool2d if kind == "max" else df.avg_pool2d
    tx = df.constant(x)
    with df.GradientTape() as tape:
        tape.watch(tx)
        y = pool(tx, ksize, strides, padding)
    gx = tape.gradient(y, tx, output_gradients=df.constant(gy))
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx.numpy(), gxt.numpy(), rtol=1e-12, atol=1e-12)


def test_max_pool_gradient_goes_to_the_first_maximum_of_each_window():
    # ties everywhere (relu outputs are often 0): each window's gradient goes to its first max
    x = np.array([[1., 1., 0., 2.],
                  [1., 0., 2., 2.],
                  [0., 0., 3., 0.],
                  [0., 0., 0., 3.]])[None, :, :, None]
    tx = df.constant(x)
    with df.GradientTape() as tape:
        tape.watch(tx)
        y = df.max_pool2d(tx, 2, 2, "VALID")
    g = tape.gradient(y, tx, output_gradients=df.constant(np.array([[1., 2.], [3., 4.]])[None, :, :, None]))
    expected = np.array([[1., 0., 0., 2.],
                         [0., 0., 0., 0.],
                         [3., 0., 4., 0.],
                         [0., 0., 0., 0.]])
    np.testing.assert_array_equal(g.numpy()[0, :, :, 0], expected)
    np.testing.assert_array_equal(g.numpy(), max_pool2d_grad_ref(x, np.array([[1., 2.], [3., 4.]])[None, :, :, None],
                                                                 2, 2, "VALID"))
    xt = torch.tensor(x, requires_grad=True)
    yt = F.max_pool2d(xt.permute(0, 3, 1, 2), 2, 2)
    gt, = torch.autograd.grad(yt, xt, torch.tensor([[[[1., 2.], [3., 4.]]]]))
    np.testing.assert_array_equal(g.numpy(), gt.numpy())


# exact tilings (window = stride, no padding) take the one-multiply fast path; the others
# (padded, overlapping, gaps, a border left over) scatter offset by offset
TIE_POOL_CASES = [
    ((2, 4, 6, 3), (2, 2), (2, 2), "VALID"),    # tiles
    ((2, 6, 6, 2), (2, 3), (2, 3), "VALID"),    # tiles, not square
    ((1, 6, 4, 2), (3, 1), (3, 1), "SAME"),     # SAME with nothing to pad: tiles
    ((1, 3, 5, 1), (1, 1), (1, 1), "VALID"),    # one-pixel windows: tiles, no ties
    ((2, 5, 7, 2), (2, 2), (2, 2), "VALID"),    # a row and a column left over
    ((2, 5, 6, 3), (2, 2), (2, 2), "SAME"),     # padded
    ((1, 6, 7, 2), (3, 3), (2, 2), "SAME"),     # overlapping
    ((1, 7, 7, 2), (2, 2), (3, 3), "VALID"),    # gaps between windows
]


@pytest.mark.parametrize("shape, ksize, strides, padding", TIE_POOL_CASES)
def test_max_pool_gradients_with_ties_and_nan_match_the_first_maximum_loops(shape, ksize, strides, padding):
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(0, 3, shape).astype(np.float32)       # many ties in every window
    kw = dict(ksize=ksize, strides=strides, padding=padding)
    y = df.max_pool2d(x, **kw)
    g = rng.integers(-4, 5, y.shape).astype(np.float32)    # integers: sums in any order are exact
    gg = rng.integers(-4, 5, shape).astype(np.float32)
    np.testing.assert_array_equal(max_pool_grad(x, g, **kw).numpy(), max_pool2d_grad_ref(x, g, **kw))
    np.testing.assert_array_equal(max_pool_grad_grad(x, gg, **kw).numpy(), max_pool2d_grad_grad_ref(x, gg, **kw))


@pytest.mark.parametrize("size", [4, 5])      # an exact tiling, and one with a border left over
def test_a_max_window_holding_nan_passes_no_gradient(size):
    x = np.arange(size * size, dtype=np.float32).reshape(1, size, size, 1)
    x[0, 1, 0, 0] = np.nan
    g = np.arange(1.0, 5.0, dtype=np.float32).reshape(1, 2, 2, 1)
    dx = max_pool_grad(x, g, ksize=2, strides=2, padding="VALID").numpy()
    assert not dx[0, :2, :2].any()
    clean = x.copy()
    clean[0, 1, 0, 0] = 0
    np.testing.assert_array_equal(dx[0, 2:], max_pool2d_grad_ref(clean, g, 2, 2, "VALID")[0, 2:])
    np.testing.assert_array_equal(dx[0, :, 2:], max_pool2d_grad_ref(clean, g, 2, 2, "VALID")[0, :, 2:])


def test_overlapping_max_windows_add_their_gradients():
    x = np.array([[0., 0., 0.], [0., 9., 0.], [0., 0., 0.]])[None, :, :, None]
    tx = df.constant(x)
    with df.GradientTape() as tape:
        tape.watch(tx)
        y = df.reduce_sum(df.max_pool2d(tx, 2, 1, "VALID"))   # all four windows hold the 9
    g = tape.gradient(y, tx).numpy()[0, :, :, 0]
    np.testing.assert_array_equal(g, [[0, 0, 0], [0, 4, 0], [0, 0, 0]])


def test_avg_pool_same_divides_by_the_pixels_inside_the_input():
    y = df.avg_pool2d(df.ones([1, 3, 3, 1]), 2, 1, "SAME").numpy()
    np.testing.assert_array_equal(y, np.ones((1, 3, 3, 1)))   # padding would make the border < 1
    x = np.arange(9.0).reshape(1, 3, 3, 1)
    y = df.avg_pool2d(x, 2, 2, "SAME").numpy()[0, :, :, 0]
    np.testing.assert_array_equal(y, [[(0 + 1 + 3 + 4) / 4, (2 + 5) / 2], [(6 + 7) / 2, 8]])
    np.testing.assert_array_equal(y, avg_pool2d_ref(x, 2, 2, "SAME")[0, :, :, 0])


def test_same_padding_puts_the_odd_pixel_at_the_end():
    # a 2x2 max over a 3x3 input, stride 1, SAME: total padding 1, all of it after
    x = -np.arange(9.0).reshape(1, 3, 3, 1)
    y = df.max_pool2d(x, 2, 1, "SAME").numpy()[0, :, :, 0]
    np.testing.assert_array_equal(y, [[0, -1, -2], [-3, -4, -5], [-6, -7, -8]])
    np.testing.assert_array_equal(y, max_pool2d_ref(x, 2, 1, "SAME")[0, :, :, 0])
    # conv2d: an even 2x2 filter of ones, SAME: each output sums its pixel, right and below
    out = df.conv2d(np.arange(9.0).reshape(1, 3, 3, 1), np.ones((2, 2, 1, 1)), padding="SAME").numpy()
    np.testing.assert_array_equal(out[0, :, :, 0], [[8, 12, 7], [20, 24, 13], [13, 15, 8]])


# ---------------------------------------------------------------------------------------
# Static shapes, traced with unknown sizes

def test_static_shapes_with_unknown_batch_and_spatial_sizes():
    @df.defun
    def net(x, w):
        h = df.conv2d(x, w, strides=2, padding="SAME")
        return h, df.max_pool2d(h, 2, 2, "VALID"), df.avg_pool2d(h, 3, 1, "SAME")

    cf = net.get_concrete_function(df.TensorSpec([None, 28, 28, 3]), df.TensorSpec([3, 3, 3, 8]))
    assert [tuple(t.shape) for t in cf.graph.outputs] == [(None, 14, 14, 8), (None, 7, 7, 8), (None, 14, 14, 8)]
    cf = net.get_concrete_function(df.TensorSpec([None, None, None, 3]), df.TensorSpec([3, 3, 3, None]))
    assert [tuple(t.shape) for t in cf.graph.outputs] == [(None, None, None, None)] * 3
    x = np.random.default_rng(0).standard_normal((2, 9, 7, 3)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((3, 3, 3, 4)).astype(np.float32)
    for got, want in zip(cf(x, w), net.python_function(df.constant(x), df.constant(w))):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_second_order_through_a_traced_conv_net_matches_eager_and_differences():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 6, 2))
    w = rng.standard_normal((3, 3, 2, 3)) * 0.5
    v = rng.standard_normal(w.shape)

    def loss(x, w):
        h = df.tanh(df.conv2d(x, w, strides=2, padding="SAME"))
        return df.reduce_sum(df.square(df.max_pool2d(h, 2, 1, "SAME"))) + \
            df.reduce_sum(df.avg_pool2d(h * h, 2, 2, "VALID"))

    def hvp(x, w):     # d/dw <d loss/dw, v>, and the gradient w.r.t. x of the same
        with df.GradientTape(persistent=True) as outer:
            outer.watch([x, w])
            with df.GradientTape() as inner:
                inner.watch(w)
                value = loss(x, w)
            gw = inner.gradient(value, w)
            dot = df.reduce_sum(gw * v)
        return outer.gradient(dot, w), outer.gradient(dot, x)

    eager = [t.numpy() for t in hvp(df.constant(x), df.constant(w))]
    traced = [t.numpy() for t in df.defun(hvp)(df.constant(x), df.constant(w))]
    for a, b in zip(traced, eager):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)

    def grad_w(wv):
        tw = df.constant(wv)
        with df.GradientTape() as tape:
            tape.watch(tw)
            value = loss(df.constant(x), tw)
        return float(df.reduce_sum(tape.gradient(value, tw) * v))
    eps = 1e-6
    numeric = np.zeros(w.size)
    for k in range(w.size):
        d = np.zeros(w.size)
        d[k] = eps
        numeric[k] = (grad_w(w + d.reshape(w.shape)) - grad_w(w - d.reshape(w.shape))) / (2 * eps)
    np.testing.assert_allclose(eager[0].reshape(-1), numeric, rtol=1e-5, atol=1e-6)


def test_exported_conv_net_reloads_with_the_same_values():
    rng = np.random.default_rng(4)
    w = df.Variable(rng.standard_normal((3, 3, 1, 4)).astype(np.float32))

    @df.defun
    def net(x):
        return df.avg_pool2d(df.relu(df.max_pool2d(df.conv2d(x, w, 1, "SAME"), 2, 2, "SAME")), 2, 1, "VALID")
    cf = net.get_concrete_function(df.TensorSpec([None, 9, 9, 1]))
    doc = json.loads(json.dumps(df.export_json(cf)))
    assert {"conv2d", "max_pool2d", "avg_pool2d"} <= {n["op"] for n in doc["functions"][0]["nodes"]}
    x = rng.standard_normal((3, 9, 9, 1)).astype(np.float32)
    np.testing.assert_array_equal(df.load_json(doc)(x).numpy(), net(x).numpy())


# ---------------------------------------------------------------------------------------
# Errors: typed, naming the op, the same words eagerly and while tracing

@pytest.mark.parametrize("call,match", [
    (lambda: df.conv2d(np.zeros((1, 5, 5, 3)), np.zeros((3, 3, 2, 4))),
     r"conv2d: the input has 3 channels but the filters expect 2"),
    (lambda: df.conv2d(np.zeros((1, 2, 5, 1)), np.zeros((3, 3, 1, 1))),
     r"conv2d: with padding 'VALID' the input height 2 is smaller than the window height 3"),
    (lambda: df.conv2d(np.zeros((1, 5, 5, 1)), np.zeros((3, 3, 1, 1)), dilations=3),
     r"the input height 5 is smaller than the dilated window height 7"),
    (lambda: df.conv2d(np.zeros((5, 5, 1)), np.zeros((3, 3, 1, 1))), r"conv2d: the input must have rank 4"),
    (lambda: df.conv2d(np.zeros((1, 5, 5, 1)), np.zeros((3, 3, 1))), r"conv2d: the filters must have rank 4"),
    (lambda: df.conv2d(np.zeros((1, 5, 5, 1)), np.zeros((3, 3, 1, 1)), padding="FULL"),
     r"conv2d: padding must be 'SAME' or 'VALID', got 'FULL'"),
    (lambda: df.conv2d(np.zeros((1, 5, 5, 1)), np.zeros((3, 3, 1, 1)), strides=[2, 1, 1, 1]),
     r"conv2d: strides \[2, 1, 1, 1\] step along the batch or channel dimension"),
    (lambda: df.conv2d(np.zeros((1, 5, 5, 1)), np.zeros((3, 3, 1, 1)), strides=0), r"strides must be positive"),
    (lambda: df.conv2d(np.zeros((1, 5, 5, 1)), np.zeros((3, 3, 1, 1)), strides=(1, 2, 3)),
     r"conv2d: strides must be an int, a pair or a list of 4"),
    (lambda: df.conv2d(np.zeros((1, 5, 5, 1), np.int32), np.zeros((3, 3, 1, 1), np.int32)),
     r"conv2d: unsupported input dtype int32 \(expected floating\)"),
    (lambda: df.conv2d(df.constant(np.zeros((1, 5, 5, 1))), df.constant(np.zeros((3, 3, 1, 1), np.float32))),
     r"conv2d: inputs must have the same dtype"),
    (lambda: df.max_pool2d(np.zeros((1, 1, 5, 1)), 2, 2, "VALID"),
     r"max_pool2d: with padding 'VALID' the input height 1 is smaller than the window height 2"),
    (lambda: df.avg_pool2d(np.zeros((1, 4, 4)), 2, 2, "VALID"), r"avg_pool2d: the input must have rank 4"),
    (lambda: df.max_pool2d(np.zeros((1, 4, 4, 1)), 2, 2, "same!"), r"max_pool2d: padding must be"),
])
def test_errors_name_the_op_eagerly_and_traced(call, match):
    with pytest.raises(df.errors.InvalidArgumentError, match=match):
        call()
    with pytest.raises(df.errors.InvalidArgumentError, match=match):
        df.defun(call)()


def test_traced_errors_name_the_users_line():
    @df.defun
    def f(x):
        return df.conv2d(x, df.zeros([3, 3, 2, 1]))
    with pytest.raises(df.errors.InvalidArgumentError, match=r"input has 3 channels.*while tracing, at .*test_conv_ops.py"):
        f.get_concrete_function(df.TensorSpec([None, None, None, 3]))


def test_nchw_is_unimplemented_with_a_hint():
    with pytest.raises(df.errors.UnimplementedError, match=r"conv2d: data_format 'NCHW' is not supported.*transpose"):
        df.conv2d(np.zeros((1, 1, 5, 5)), np.zeros((3, 3, 1, 1)), data_format="NCHW")


def test_backprop_ops_check_the_output_gradient_shape():
    from defun.runtime.execute import run_op
    from defun.runtime.registry import get
    attrs = {"strides": (1, 1), "padding": "VALID", "dilations": (1, 1)}
    with pytest.raises(df.errors.InvalidArgumentError,
                       match=r"conv2d_backprop_input: the output gradient has shape \(1, 2, 2, 1\), but the "
                             r"forward output has shape \(1, 3, 3, 1\)"):
        run_op(get("conv2d_backprop_input"), (np.zeros((1, 5, 5, 1)), np.zeros((3, 3, 1, 1)),
                                              np.zeros((1, 2, 2, 1))), attrs)


@pytest.mark.parametrize("xs", [(0, 5, 5, 2), (2, 0, 5, 2), (2, 5, 0, 2)])
def test_empty_batches_and_images(xs):
    x, w = df.constant(np.ones(xs)), df.constant(np.ones((3, 3, 2, 4)))
    with df.GradientTape() as tape:
        tape.watch([x, w])
        outs = [df.conv2d(x, w, 2, "SAME"), df.max_pool2d(x, 2, 2, "SAME"), df.avg_pool2d(x, 3, 1, "SAME")]
    gx, gw = tape.gradient(outs, [x, w])
    n, h, wd, _ = xs
    assert [o.shape for o in outs] == [(n, -(-h // 2), -(-wd // 2), 4), (n, -(-h // 2), -(-wd // 2), 2), xs]
    np.testing.assert_array_equal(gx.numpy(), np.zeros(xs))
    np.testing.assert_array_equal(gw.numpy(), np.zeros((3, 3, 2, 4)))
