"""vmap where it meets other features (issue 28's vmap items, issue 30's unknown batch size).

Each case is compared with a reference: jax.vmap / jax.grad, numpy, a Python loop of eager
calls, or finite differences. Cases: in_axes/out_axes nests that do not match the arguments
(jax raises; so do we, naming the mismatch), a parameter default under defun(vmap(f)), reshape
to -1 at batch 0, rules at sizes 0 and 1 with B or an example's sizes unknown (conv2d and its
gradients, pools, repeat, norms, mirror pads, reshapes to a shape tensor), a Python scalar
under in_axes=None (weakly typed), a tape around eager vmap reading a variable,
custom_gradient through every vmap/defun composition, eager vmap over scan differentiated,
nested while loops, and vmap inside a defun whose batch size is unknown. The generated
composition sweep is tests/test_vmap_sweep.py.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import defun as df
from defun.runtime import errors

jax.config.update("jax_enable_x64", True)

rng = np.random.default_rng(28)


def _np(t):
    return np.asarray(t.numpy() if isinstance(t, df.Tensor) else t)


def _close(a, b, tol=1e-6):
    a, b = _np(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------
# in_axes / out_axes nests that do not match (jax raises ValueError)

def _jax_raises(fn, in_axes, args, out_axes=0):
    with pytest.raises(ValueError):
        jax.vmap(fn, in_axes=in_axes, out_axes=out_axes)(*args)


def test_in_axes_dict_key_mistyped_is_refused_naming_the_key():
    p = {"a": np.ones((3, 2)), "b": np.ones((2,))}
    spec = ({"a": 0, "bb": None},)
    _jax_raises(lambda p: p["a"] * p["b"], spec, (p,))
    with pytest.raises(errors.InvalidArgumentError, match=r"argument 0.*'b'.*'bb'"):
        df.vmap(lambda p: p["a"] * p["b"], in_axes=spec)(p)
    assert issubclass(errors.InvalidArgumentError, ValueError)


@pytest.mark.parametrize("spec, args", [
    (((0, None),), ((np.ones((3, 2)),),)),                           # 2 entries for a 1-tuple
    (((0,),), (np.ones((3, 2)),)),                                   # a tuple for a tensor
    (({"a": 0},), ((np.ones((3, 2)),),)),                            # a dict for a tuple
    ((({"a": 0}, 0),), (({"a": np.ones(3), "b": np.ones(3)}, np.ones(3)),)),   # missing key
])
def test_in_axes_structure_mismatch_is_refused(spec, args):
    _jax_raises(lambda a: jax.tree_util.tree_leaves(a)[0], spec, args)
    with pytest.raises(errors.InvalidArgumentError, match="in_axes"):
        df.vmap(lambda a: a, in_axes=spec)(*args)


def test_in_axes_prefix_still_covers_a_subtree():
    p = {"a": rng.normal(size=(3, 2)), "b": rng.normal(size=(3,))}
    got = df.vmap(lambda p, w: p["a"][0] * p["b"] + w, in_axes=(0, None))(p, 2.0)
    want = jax.vmap(lambda p, w: p["a"][0] * p["b"] + w, in_axes=(0, None))(p, 2.0)
    _close(got, want)


def test_out_axes_structure_mismatch_is_refused():
    x = np.ones((3, 2))
    fn = lambda v: (v, {"s": v * 2})        # noqa: E731
    _jax_raises(lambda v: (v, {"s": v * 2}), 0, (x,), out_axes=(0, {"t": 0}))
    with pytest.raises(errors.InvalidArgumentError, match=r"out_axes.*'s'.*'t'"):
        df.vmap(fn, out_axes=(0, {"t": 0}))(x)
    with pytest.raises(errors.InvalidArgumentError, match="out_axes gives 3 entries"):
        df.vmap(fn, out_axes=(0, 1, 0))(x)
    got = df.vmap(fn, out_axes=(1, {"s": 1}))(x)
    want = jax.vmap(lambda v: (v, {"s": v * 2}), out_axes=(1, {"s": 1}))(x)
    _close(got[0], want[0])
    _close(got[1]["s"], want[1]["s"])


# ---------------------------------------------------------------------------------------
# defun(vmap(f)) with a parameter default; df.softmax has one (axis=-1)

def test_defun_of_vmap_keeps_parameter_defaults_out_of_the_mapped_arguments():
    x = rng.normal(size=(4, 5)).astype(np.float32)
    want = jax.vmap(jax.nn.softmax)(x)
    _close(df.defun(df.vmap(df.softmax))(x), want)
    _close(df.vmap(df.softmax)(x), want)

    def scaled(v, k=3.0):
        return v * k
    _close(df.defun(df.vmap(scaled))(x), x * 3.0)
    _close(df.defun(df.vmap(scaled))(x, np.float32(2.0) * np.ones(4, np.float32)), x * 2.0)


# ---------------------------------------------------------------------------------------
# reshape to -1 at batch size 0 (and 1)

@pytest.mark.parametrize("b", [0, 1, 3])
def test_reshape_minus_one_at_every_batch_size(b):
    x = rng.normal(size=(b, 2, 3))
    want = jax.vmap(lambda v: jnp.reshape(v, [-1]))(x)
    f = lambda v: df.reshape(v, [-1])       # noqa: E731
    _close(df.vmap(f)(x), want)
    _close(df.defun(df.vmap(f))(x), want)
    g = lambda v: df.repeat(v, 2)           # noqa: E731  (axis None: flattened)
    _close(df.vmap(g)(x), jax.vmap(lambda v: jnp.repeat(v, 2))(x))
    n = lambda v: df.norm(v, ord=1)         # noqa: E731  (a vector norm of the flattened tensor)
    _close(df.vmap(n)(x), np.abs(x).reshape(b, 6).sum(axis=1))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("b", [0, 1, 3])
def test_reshape_minus_one_of_examples_of_unknown_size(dtype, b):
    # mapped over axis 1 of a relaxed tensor: B is known, an example's sizes are not, and
    # (0, -1) or (0, 2, -1) is no shape for a batch of 0; with the gradient, cos(x)
    x = rng.normal(size=(2, b, 3)).astype(dtype)
    relaxed = [df.TensorSpec([None, b, None], dtype)]
    for shape, each in (([-1], (6,)), ([2, -1], (2, 3)), ([-1, 2, 1], (3, 2, 1))):
        f = df.vmap(lambda v: df.reshape(v, shape), in_axes=1)
        loss = lambda v: df.reduce_sum(df.sin(f(v)))      # noqa: E731
        want, want_g = np.moveaxis(x, 1, 0).reshape((b,) + each), np.cos(x.astype(np.float64))
        got = df.defun(f, input_signature=relaxed)(x)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), want)
        for fn in (df.gradients_function(loss), df.defun(df.gradients_function(loss), input_signature=relaxed)):
            (g,) = fn(x)
            assert g.dtype == dtype
            _close(g.numpy().astype(np.float64), want_g, 2e-3 if dtype == np.float16 else 1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("b", [0, 1, 3])
def test_a_reshape_to_a_shape_tensor_with_minus_one_at_every_batch_size(dtype, b):
    # the shared shape tensor was prefixed with B as it was: (0, 3, -1) fits no batch of 0
    # examples (a reshape error when the traced batch ran); with the gradient, cos(x)
    def f(x, dims):
        return df.vmap(lambda v: df.reshape(v, dims))(x)
    loss = df.gradients_function(lambda x, dims: df.reduce_sum(df.sin(f(x, dims))), params=[0])
    relaxed = [df.TensorSpec([None, 2, 3], dtype), df.TensorSpec([2], df.int32)]
    x = rng.normal(size=(b, 2, 3)).astype(dtype)
    for dims, each in (([3, -1], (3, 2)), ([-1, 1], (6, 1)), ([6, 1], (6, 1))):
        got = df.defun(f, input_signature=relaxed)(x, np.asarray(dims, np.int32))
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), x.reshape((b,) + each))
        (g,) = df.defun(loss, input_signature=relaxed)(x, np.asarray(dims, np.int32))
        assert g.dtype == dtype
        _close(g.numpy().astype(np.float64), np.cos(x.astype(np.float64)), 2e-3 if dtype == np.float16 else 1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("mode", ["REFLECT", "SYMMETRIC"])
@pytest.mark.parametrize("b", [0, 1])
def test_a_mirror_pad_at_batch_size_0(dtype, mode, b):
    # the batch axis is padded by [0, 0], which REFLECT refused for an axis of size 0 (at
    # most -1): vmap of a reflect pad at B = 0 raised, eagerly, in a defun, relaxed
    x = rng.normal(size=(b, 4)).astype(dtype)
    f = df.vmap(lambda v: df.pad(v, [[1, 2]], mode=mode))
    loss = df.gradients_function(lambda v: df.reduce_sum(f(v) * np.arange(7, dtype=dtype)))
    want = np.pad(x, [(0, 0), (1, 2)], mode=mode.lower())
    relaxed = [df.TensorSpec([None, 4], dtype)]
    for fn in (f, df.defun(f), df.defun(f, input_signature=relaxed)):
        got = fn(x)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), want)
    want_g = np.zeros((b, 4))     # each padded entry's weight added to the entry it mirrors
    np.add.at(want_g, (slice(None), np.pad(np.arange(4), (1, 2), mode=mode.lower())), np.arange(7.0))
    for fn in (loss, df.defun(loss, input_signature=relaxed)):
        (g,) = fn(x)
        assert g.dtype == dtype
        np.testing.assert_array_equal(g.numpy(), want_g.astype(dtype))
    # an empty axis takes no padding but 0 (nothing to mirror), as numpy
    np.testing.assert_array_equal(df.pad(x[:0], [[0, 0], [1, 2]], mode=mode).numpy(), want[:0])
    with pytest.raises(errors.InvalidArgumentError, match=f"{mode} padding \\[1, 0\\] is too large .* size 0 "
                                                          f"\\(at most 0\\)"):
        df.pad(x[:0], [[1, 0], [0, 0]], mode=mode)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("b", [0, 1, 2])
def test_flattened_examples_of_no_elements_at_an_unknown_size(dtype, b):
    # repeat (axis None) and a vector norm flatten each example to (B, -1) or (-1, n): no
    # size fits the -1 for an example of no elements with B unknown, or for B = 0 with the
    # example's size unknown (mapped over axis 1 of a relaxed tensor); with the gradient
    rep = lambda v: df.repeat(v, 2)                 # noqa: E731
    norm = lambda v: df.norm(v, ord=1)              # noqa: E731
    for x, sig, axis in [(rng.normal(size=(b, 3, 0)), [None, 3, 0], 0), (rng.normal(size=(3, b, 0)), [None, b, None], 1),
                         (rng.normal(size=(3, b, 2)), [None, b, None], 1)]:
        x = x.astype(dtype)
        relaxed = [df.TensorSpec(sig, dtype)]
        ex = np.moveaxis(x, axis, 0).reshape(b, int(np.prod(np.delete(x.shape, axis))))
        loss = lambda v: df.reduce_sum(df.vmap(rep, in_axes=axis)(v) ** 2)    # noqa: E731
        for fn, want in [(rep, np.repeat(ex, 2, axis=1)), (norm, np.abs(ex.astype(np.float64)).sum(axis=1))]:
            for f in (df.vmap(fn, in_axes=axis), df.defun(df.vmap(fn, in_axes=axis), input_signature=relaxed)):
                got = f(x)
                assert got.dtype == dtype
                _close(got.numpy().astype(np.float64), want, 2e-3 if dtype == np.float16 else 1e-6)
        for f in (df.gradients_function(loss), df.defun(df.gradients_function(loss), input_signature=relaxed)):
            (g,) = f(x)
            assert g.dtype == dtype
            np.testing.assert_array_equal(g.numpy(), 4 * x)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("b, n, k", [(0, 0, 0), (2, 0, 0), (2, 3, 0), (0, 2, 2)])
def test_a_batched_matmul_by_a_shared_matrix_with_a_contraction_of_0(dtype, b, n, k):
    # found by tests/test_relaxed_sweep.py (df.vmap at sizes 0): the rows folded into
    # reshape(-1, k) of no elements, which no size fits for k = 0
    x, w = rng.normal(size=(b, n, k)).astype(dtype), rng.normal(size=(k, 3)).astype(dtype)
    f = df.vmap(lambda a, w: df.matmul(a, w), in_axes=(0, None))
    for got in (f(x, w), df.defun(f)(x, w)):
        assert got.shape == (b, n, 3) and got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), x @ w)
    loss = lambda a, w: df.reduce_sum(f(a, w))     # noqa: E731
    grads = df.gradients_function(loss)(x, w)
    assert [g.shape for g in grads] == [x.shape, w.shape]


def _conv_ref(x, w):
    """A batch of NHWC images (B, N, H, W, C) convolved with a 3x3 HWIO filter, SAME, stride 1,
    and the gradients of sum(sin(y)) (x, w), by numpy sums over the nine offsets."""
    h, wd = x.shape[2:4]
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1), (0, 0)])
    taps = [(i, j, xp[:, :, i:i + h, j:j + wd]) for i in range(3) for j in range(3)]
    y = sum(np.einsum("bnhwc,co->bnhwo", t, w[i, j]) for i, j, t in taps)
    gy, gxp, gw = np.cos(y), np.zeros_like(xp), np.zeros_like(w)
    for i, j, t in taps:
        gw[i, j] = np.einsum("bnhwc,bnhwo->co", t, gy)
        gxp[:, :, i:i + h, j:j + wd] += np.einsum("bnhwo,co->bnhwc", gy, w[i, j])
    return y, (gxp[:, :, 1:h + 1, 1:wd + 1], gw)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("b, n, h, c, o", [(0, 2, 3, 2, 2), (1, 2, 3, 2, 0), (2, 0, 3, 2, 2), (2, 1, 0, 2, 2),
                                           (0, 1, 3, 0, 2), (1, 2, 3, 2, 2)])
def test_a_batched_conv_of_images_of_no_elements_at_an_unknown_batch_size(dtype, b, n, h, c, o):
    # the folded rule reshaped [B, N, H, W, C] to [-1, H, W, C], which no size fits when an
    # image holds no elements (H or C of 0) and B is known only when the batch runs; an
    # unknown N was refused (one trace per N)
    x, w = rng.normal(size=(b, n, h, 3, c)).astype(dtype), rng.normal(size=(3, 3, c, o)).astype(dtype)
    f = df.vmap(lambda a, w: df.conv2d(a, w, strides=1, padding="SAME"), in_axes=(0, None))
    loss = lambda a, w: df.reduce_sum(df.sin(f(a, w)))     # noqa: E731
    relaxed = [df.TensorSpec([None, n, h, 3, c], dtype), df.TensorSpec([3, 3, c, o], dtype)]
    relaxed_n = [df.TensorSpec([None, None, h, 3, c], dtype), relaxed[1]]
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want, want_grads = _conv_ref(x64, w64)
    tol = 2e-2 if dtype == np.float16 else 1e-5
    for fn in (f, df.defun(f), df.defun(f, input_signature=relaxed), df.defun(f, input_signature=relaxed_n)):
        got = fn(x, w)
        assert got.dtype == dtype
        _close(got.numpy().astype(np.float64), want, tol)
    for fn in (df.gradients_function(loss), df.defun(df.gradients_function(loss), input_signature=relaxed),
               df.defun(df.gradients_function(loss), input_signature=relaxed_n)):
        for g, ref in zip(fn(x, w), want_grads):
            assert g.dtype == dtype
            _close(g.numpy().astype(np.float64), ref, tol * 5)


def test_batched_conv_and_pool_of_unknown_image_sizes_trace_once():
    # B, N, H and W unknown while tracing: the folded rule reads them when the batch runs
    # (they were refused); against eager vmap (sizes known), the gradient too, sizes 0 and 1
    f = df.vmap(lambda a, w: df.nn.max_pool2d(df.conv2d(a, w, strides=1, padding="SAME"), 2, 2, "SAME"),
                in_axes=(0, None))
    loss = df.gradients_function(lambda a, w: df.reduce_sum(df.sin(f(a, w))))
    sig = [df.TensorSpec([None, None, None, None, 2], df.float64), df.TensorSpec([3, 3, 2, 2], df.float64)]
    traced, traced_loss = df.defun(f, input_signature=sig), df.defun(loss, input_signature=sig)
    w = rng.normal(size=(3, 3, 2, 2))
    for shape in ((2, 1, 4, 5), (0, 2, 3, 3), (1, 0, 2, 2), (2, 2, 0, 3), (1, 1, 1, 1)):
        x = rng.normal(size=shape + (2,))
        _close(traced(x, w), f(x, w).numpy(), 1e-12)
        for got, want in zip(traced_loss(x, w), loss(x, w)):
            _close(got, want.numpy(), 1e-12)
    assert traced.trace_count == traced_loss.trace_count == 1


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("b, n, h, c", [(0, 1, 4, 2), (1, 1, 4, 2), (2, 0, 4, 2), (2, 1, 4, 0)])
def test_per_example_filter_gradients_at_an_unknown_batch_size(dtype, b, n, h, c):
    # the filter gradient's rule reshaped its stacked offsets to (B, kh, kw, C, O) with B
    # unknown while tracing (a TypeError), and refused an unknown N; against a loop of
    # unbatched gradients (the kernel)
    x, w = rng.normal(size=(b, n, h, 3, c)).astype(dtype), rng.normal(size=(3, 3, c, 2)).astype(dtype)
    loss = lambda w, e: df.reduce_sum(df.sin(df.conv2d(e, w, strides=1, padding="SAME")))    # noqa: E731
    each = lambda x, w: df.vmap(lambda e: df.gradients_function(loss)(w, e)[0])(x)             # noqa: E731
    relaxed = [df.TensorSpec([None, n, h, 3, c], dtype), df.TensorSpec([3, 3, c, 2], dtype)]
    want = np.array([df.gradients_function(loss)(w, e)[0].numpy() for e in x], np.float64).reshape((b,) + w.shape)
    relaxed_n = [df.TensorSpec([None, None, h, 3, c], dtype), relaxed[1]]
    for fn in (each, df.defun(each, input_signature=relaxed), df.defun(each, input_signature=relaxed_n)):
        got = fn(x, w)
        assert got.dtype == dtype
        _close(got.numpy().astype(np.float64), want, 5e-2 if dtype == np.float16 else 1e-6)


# ---------------------------------------------------------------------------------------
# a Python scalar under in_axes=None keeps its weak type

@pytest.mark.parametrize("a", [2, 2.0, True])
def test_python_scalar_unmapped_stays_weakly_typed(a):
    x = rng.normal(size=(3, 4)).astype(np.float32)
    got = df.vmap(lambda v, a: v * a ** 3, in_axes=(0, None))(x, a)
    want = jax.vmap(lambda v, a: v * a ** 3, in_axes=(0, None))(x, a)
    assert got.dtype == df.float32 and want.dtype == jnp.float32
    _close(got, want)
    _close(df.defun(df.vmap(lambda v, a: v * a ** 3, in_axes=(0, None)))(x, a), want)


# ---------------------------------------------------------------------------------------
# a tape around eager vmap reading a variable

@pytest.mark.parametrize("wrap", ["eager", "defun(vmap)", "vmap(defun)"])
def test_tape_around_vmap_reading_a_variable(wrap):
    x = rng.normal(size=(4, 3))
    w0 = rng.normal(size=(3,))
    w = df.Variable(w0)

    def f(v):
        return df.reduce_sum(df.sin(v * w)) * df.reduce_sum(w.read_value())
    fn = {"eager": lambda: df.vmap(f), "defun(vmap)": lambda: df.defun(df.vmap(f)),
          "vmap(defun)": lambda: df.vmap(df.defun(f))}[wrap]()
    with df.GradientTape() as tape:
        y = df.reduce_sum(fn(x) * np.arange(1.0, 5.0))
    got = tape.gradient(y, w)
    ref = jax.grad(lambda w: jnp.sum(jax.vmap(lambda v: jnp.sum(jnp.sin(v * w)) * jnp.sum(w))(x)
                                     * jnp.arange(1.0, 5.0)))(w0)
    _close(got, ref, 1e-10)


# ---------------------------------------------------------------------------------------
# custom_gradient inside a vmapped function: the rule's gradient in every composition

@df.custom_gradient
def _clipped(x, w):
    y = x * x * w
    return y, lambda dy: (df.clip_by_value(dy * 2.0 * x * w, -1.0, 1.0), dy * x * x)


@jax.custom_vjp
def _jclipped(x, w):
    return x * x * w


_jclipped.defvjp(lambda x, w: (x * x * w, (x, w)),
                 lambda res, dy: (jnp.clip(dy * 2.0 * res[0] * res[1], -1.0, 1.0), dy * res[0] * res[0]))


def _cg_loss(vm, c):
    return lambda x, w: df.reduce_sum(vm(lambda a, b: df.sin(_clipped(a, b)), in_axes=(0, None))(x, w) * c)


_CG_WRAPS = {
    "eager": lambda f: f,
    "defun(vmap)": lambda f: lambda g, in_axes: df.defun(df.vmap(g, in_axes=in_axes)),
    "vmap(defun)": lambda f: lambda g, in_axes: df.vmap(df.defun(g), in_axes=in_axes),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("wrap", ["eager", "defun(vmap)", "vmap(defun)"])
@pytest.mark.parametrize("outer", ["tape", "defun(grad)"])
def test_custom_gradient_inside_vmap_is_used_by_every_composition(wrap, outer, dtype):
    x = rng.normal(size=(5, 3)).astype(dtype)
    w = rng.normal(size=(3,)).astype(dtype)
    c = rng.normal(size=(5, 3)).astype(dtype)
    vm = _CG_WRAPS[wrap](df.vmap)
    loss = _cg_loss(vm, c)
    jloss = lambda x, w: jnp.sum(jax.vmap(lambda a, b: jnp.sin(_jclipped(a, b)), (0, None))(x, w) * c)  # noqa
    want = jax.grad(jloss, argnums=(0, 1))(x, w)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    _close(loss(x, w), jloss(x, w), tol)
    if outer == "tape":
        xt, wt = df.constant(x), df.constant(w)
        with df.GradientTape() as tape:
            tape.watch([xt, wt])
            y = loss(xt, wt)
        got = tape.gradient(y, [xt, wt])
    else:
        got = df.defun(df.gradients_function(loss))(x, w)
    _close(got[0], want[0], tol)
    _close(got[1], want[1], tol)


@pytest.mark.parametrize("wrap", ["eager", "defun(vmap)", "vmap(defun)"])
def test_custom_gradient_per_example_gradients(wrap):
    x = rng.normal(size=(4, 3))
    w = rng.normal(size=(3,))
    per = lambda a, b: df.reduce_sum(df.sin(_clipped(a, b)))      # noqa: E731
    g = df.gradients_function(per)
    fn = {"eager": lambda: df.vmap(g, in_axes=(0, None)),
          "defun(vmap)": lambda: df.defun(df.vmap(g, in_axes=(0, None))),
          "vmap(defun)": lambda: df.vmap(df.defun(g), in_axes=(0, None))}[wrap]()
    got = fn(x, w)
    want = jax.vmap(jax.grad(lambda a, b: jnp.sum(jnp.sin(_jclipped(a, b))), argnums=(0, 1)), (0, None))(x, w)
    _close(got[0], want[0], 1e-12)
    _close(got[1], want[1], 1e-12)


def test_custom_gradient_reading_a_variable_inside_vmap():
    v = df.Variable(np.array([0.5, -1.5, 2.0]))

    @df.custom_gradient
    def scaled(x):
        y = x * v
        return y, lambda dy, variables: ([dy * 3.0], [df.reduce_sum(dy * x, axis=None) * df.ones_like(v)])

    x = rng.normal(size=(4, 3))
    c = rng.normal(size=(4, 3))
    for fn in (df.vmap(scaled), df.defun(df.vmap(scaled))):
        with df.GradientTape() as tape:
            xt = df.constant(x)
            tape.watch(xt)
            y = df.reduce_sum(fn(xt) * c)
        gx, gv = tape.gradient(y, [xt, v])
        _close(gx, 3.0 * c, 1e-12)
        # per example, grad_fn gives sum(dy * x) in every entry; summed over the examples
        _close(gv, np.full(3, np.sum(c * x)), 1e-12)


# ---------------------------------------------------------------------------------------
# eager vmap over scan / map_fn / foldl, differentiated by a tape

def _jscan(f, init, xs, reverse=False):
    return jax.lax.scan(lambda a, x: (f(a, x), f(a, x)), init, xs, reverse=reverse)[1]


_SCANS = {
    "scan": (lambda v, w: df.scan(lambda a, e: a * e + w, v, initializer=df.constant(1.0, v.dtype)),
             lambda v, w: _jscan(lambda a, e: a * e + w, jnp.ones((), v.dtype), v)),
    "scan_reverse_no_init": (lambda v, w: df.scan(lambda a, e: df.sin(a) * e, v, reverse=True),
                             lambda v, w: jnp.concatenate(
                                 [_jscan(lambda a, e: jnp.sin(a) * e, v[-1], v[:-1], reverse=True), v[-1:]])),
    "foldl": (lambda v, w: df.foldl(lambda a, e: a + e * e * w, v, initializer=df.zeros([], v.dtype)),
              lambda v, w: jax.lax.scan(lambda a, e: (a + e * e * w, None), jnp.zeros((), v.dtype), v)[0]),
    "map_fn": (lambda v, w: df.map_fn(lambda e: df.exp(e * w), v), lambda v, w: jax.vmap(lambda e: jnp.exp(e * w))(v)),
}


@pytest.mark.parametrize("b", [0, 1, 3])
@pytest.mark.parametrize("kind", sorted(_SCANS))
def test_gradient_of_eager_vmap_over_scan(kind, b):
    ours, theirs = _SCANS[kind]
    x = rng.normal(size=(b, 4)) * 0.5
    w = 0.7
    c = rng.normal(size=np.shape(jax.vmap(lambda v: theirs(v, w))(x)))
    want = jax.grad(lambda x, w: jnp.sum(jax.vmap(theirs, (0, None))(x, w) * c), argnums=(0, 1))(x, w)
    for wrap in ("eager", "defun"):
        xt, wt = df.constant(x), df.constant(w, df.float64)
        with df.GradientTape() as tape:
            tape.watch([xt, wt])
            fn = df.vmap(ours, in_axes=(0, None))
            y = df.reduce_sum((fn(xt, wt) if wrap == "eager" else df.defun(fn)(xt, wt)) * c)
        gx, gw = tape.gradient(y, [xt, wt])
        _close(y, np.sum(jax.vmap(theirs, (0, None))(x, w) * c), 1e-12)
        _close(gx, want[0], 1e-12)
        if b:       # (w unused: None, where jax gives 0)
            _close(np.float64(0.0) if gw is None else gw, want[1], 1e-12)


# ---------------------------------------------------------------------------------------
# nested while loops whose inner trip count changes (per outer iteration and per example)

def _inner_count_grows(v):
    """acc *= v, (v + i) times in outer iteration i of 3 (the inner loop keeps its per-
    iteration values, so the outer loop keeps stacks of changing length)."""
    def outer_body(i, acc):
        _, acc = df.while_loop(lambda j, a: j < v + df.cast(i, v.dtype), lambda j, a: (j + 1.0, a * v),
                               (df.zeros([], v.dtype), acc))
        return i + 1, acc
    return df.while_loop(lambda i, a: i < 3, outer_body, (df.constant(0), df.ones([], v.dtype)))[1]


def _outer_count_per_example(v):
    """acc += v * sin(v), i times in outer iteration i, while i < v."""
    def outer_body(i, acc):
        _, acc = df.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a + v * df.sin(v)), (df.constant(0), acc))
        return i + 1, acc
    return df.while_loop(lambda i, a: df.cast(i, v.dtype) < v, outer_body, (df.constant(0), df.zeros([], v.dtype)))[1]


@pytest.mark.parametrize("f", [_inner_count_grows, _outer_count_per_example], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nested_while_with_changing_inner_trip_count(f, dtype):
    x = np.array([2.3, 1.4, 3.6], dtype)      # off the integers: the trip counts are locally constant
    c = np.array([0.5, -1.0, 2.0], dtype)
    want = np.stack([_np(f(df.constant(v))) for v in x])
    want_g = np.stack([_np(df.gradients_function(f)(df.constant(v))[0]) for v in x])
    # finite differences of the loop (the trip counts are integers: locally constant)
    h = 1e-6
    fd = np.array([(_np(f(df.constant(np.float64(v) + h))) - _np(f(df.constant(np.float64(v) - h)))) / (2 * h)
                   for v in x])
    tol = 2e-6 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(want_g, fd, rtol=1e-5)
    for fn in (df.vmap(f), df.defun(df.vmap(f)), df.vmap(df.defun(f))):
        _close(fn(x), want, tol)
        xt = df.constant(x)
        with df.GradientTape() as tape:
            tape.watch(xt)
            y = df.reduce_sum(fn(xt) * c)
        _close(tape.gradient(y, xt), want_g * c, tol)
    per = df.gradients_function(f)
    for fn in (df.vmap(per), df.defun(df.vmap(per)), df.vmap(df.defun(per))):
        _close(fn(x)[0], want_g, tol)
    _close(df.defun(df.gradients_function(lambda v: df.reduce_sum(df.vmap(f)(v) * c)))(x)[0], want_g * c, tol)
    _close(df.defun(df.gradients_function(f))(x[2])[0], want_g[2], tol)


# ---------------------------------------------------------------------------------------
# vmap inside a defun whose batch size is unknown while tracing (issue 30): one trace
# serves every batch size, 0 and 1 included; TF's vectorized_map does the same

def _per_example_mlp(x, w1, w2):
    h = df.tanh(df.matmul(df.reshape(x, [1, -1]), w1))
    return df.reduce_sum(df.softmax(df.matmul(h, w2)) * df.reshape(x, [1, -1])[:, :2])


def _jax_per_example_mlp(x, w1, w2):
    h = jnp.tanh(jnp.reshape(x, (1, -1)) @ w1)
    return jnp.sum(jax.nn.softmax(h @ w2) * jnp.reshape(x, (1, -1))[:, :2])


_SIG = [df.TensorSpec([None, 2, 3], df.float64), df.TensorSpec([6, 4], df.float64), df.TensorSpec([4, 2], df.float64)]
_W1, _W2, _X5, _C5 = rng.normal(size=(6, 4)), rng.normal(size=(4, 2)), rng.normal(size=(5, 2, 3)), rng.normal(size=5)


def test_vmap_over_an_unknown_batch_size_one_trace_every_size():
    """Values and per-example gradients; batch b is the first b examples of one jax reference."""
    value = df.defun(df.vmap(_per_example_mlp, in_axes=(0, None, None)), input_signature=_SIG)
    grads = df.defun(df.vmap(df.gradients_function(_per_example_mlp, params=[0, 1]), in_axes=(0, None, None)),
                     input_signature=_SIG)
    want = jax.vmap(_jax_per_example_mlp, (0, None, None))(_X5, _W1, _W2)
    want_g = jax.vmap(jax.grad(_jax_per_example_mlp, argnums=(0, 1)), (0, None, None))(_X5, _W1, _W2)
    for b in (0, 1, 5):
        _close(value(_X5[:b], _W1, _W2), want[:b], 1e-12)
        got = grads(_X5[:b], _W1, _W2)
        _close(got[0], want_g[0][:b], 1e-12)
        _close(got[1], want_g[1][:b], 1e-12)
    assert value.trace_count == 1 and grads.trace_count == 1


def test_gradient_through_vmap_over_an_unknown_batch_size():
    """defun(gradient of a loss over vmap) and a tape around defun(vmap), one trace each;
    the reference: jax's per-example gradients, weighted and summed over the first b."""
    def loss(x, w1, w2, c):
        return df.reduce_sum(df.vmap(_per_example_mlp, in_axes=(0, None, None))(x, w1, w2) * c)
    sig = _SIG + [df.TensorSpec([None], df.float64)]
    whole = df.defun(df.gradients_function(loss, params=[0, 1, 2]), input_signature=sig)
    inner = df.defun(lambda x, w1, w2: df.vmap(_per_example_mlp, in_axes=(0, None, None))(x, w1, w2),
                     input_signature=_SIG)
    per = jax.vmap(jax.grad(_jax_per_example_mlp, argnums=(0, 1, 2)), (0, None, None))(_X5, _W1, _W2)
    for b in (0, 1, 5):
        c = _C5[:b]
        want = [per[0][:b] * c[:, None, None], np.einsum("b,bij->ij", c, per[1][:b]),
                np.einsum("b,bij->ij", c, per[2][:b])]
        for g, w in zip(whole(_X5[:b], _W1, _W2, c), want):
            _close(g, w, 1e-12)
        ts = [df.constant(v) for v in (_X5[:b], _W1, _W2)]
        with df.GradientTape() as tape:
            tape.watch(ts)
            y = df.reduce_sum(inner(*ts) * c)
        for g, w in zip(tape.gradient(y, ts), want):
            _close(g, w, 1e-12)
    assert whole.trace_count == 1 and inner.trace_count == 1


def _flow(x, w):
    y = df.cond(df.reduce_sum(x) > 0.0, lambda: x * w, lambda: x - w)
    n = df.cast(df.reduce_sum(df.abs(x)), df.int32) + 1
    y = df.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, df.sin(a) + w), (0, y))[1]
    return df.scan(lambda a, e: a * 0.5 + e, y, initializer=df.zeros([], x.dtype))


@pytest.mark.parametrize("b", [0, 1, 4])
def test_control_flow_under_vmap_over_an_unknown_batch_size(b):
    w = rng.normal(size=(3,))
    x = rng.normal(size=(b, 3))
    sig = [df.TensorSpec([None, 3], df.float64), df.TensorSpec([3], df.float64)]
    want = np.stack([_np(_flow(df.constant(v), df.constant(w))) for v in x]) if b else np.zeros((0, 3))
    _close(df.defun(df.vmap(_flow, in_axes=(0, None)), input_signature=sig)(x, w), want, 1e-12)
    per = df.gradients_function(lambda x, w: df.reduce_sum(_flow(x, w)))
    want_g = [np.stack([_np(per(df.constant(v), df.constant(w))[k]) for v in x]) if b else np.zeros((0, 3))
              for k in range(2)]
    got = df.defun(df.vmap(per, in_axes=(0, None)), input_signature=sig)(x, w)
    _close(got[0], want_g[0], 1e-12)
    _close(got[1], want_g[1], 1e-12)


def test_unknown_batch_sizes_that_differ_are_refused_when_the_batch_runs():
    sig = [df.TensorSpec([None, 3], df.float64)] * 2
    f = df.defun(df.vmap(lambda a, b: a * b), input_signature=sig)
    _close(f(np.ones((2, 3)), np.ones((2, 3))), np.ones((2, 3)))
    with pytest.raises(errors.InvalidArgumentError):
        f(np.ones((2, 3)), np.ones((1, 3)))     # would broadcast silently without the check
    with pytest.raises(errors.InvalidArgumentError):
        f(np.ones((2, 3)), np.ones((3, 3)))


def test_unknown_batch_size_with_out_axes_in_axes_custom_gradient_and_variables():
    v = df.Variable(rng.normal(size=(3,)))
    sig = [df.TensorSpec([3, None], df.float64)]

    def per(x):
        return df.reduce_sum(_clipped(x, v.read_value()) * x), df.expand_dims(x, 0) * 2.0
    f = df.defun(df.vmap(per, in_axes=1, out_axes=(0, 2)), input_signature=sig)
    x5 = rng.normal(size=(3, 5))
    jl = lambda r, w: jnp.sin(jnp.sum(_jclipped(r, w) * r))      # noqa: E731
    want = jax.vmap(jax.grad(jl, argnums=(0, 1)), in_axes=(1, None))(x5, v.numpy())
    for b in (0, 1, 5):
        x = x5[:, :b]
        with df.GradientTape() as tape:
            xt = df.constant(x)
            tape.watch(xt)
            s, e = f(xt)
            y = df.reduce_sum(df.sin(s))
        gx, gv = tape.gradient(y, [xt, v])
        _close(e, np.expand_dims(x, 0) * 2.0, 1e-12)
        _close(gx, want[0][:b].T, 1e-12)
        _close(gv, want[1][:b].sum(axis=0), 1e-12)
    assert f.trace_count == 1


def test_unknown_batch_size_per_example_embedding_gradients():
    """A gather's per-example gradient (an IndexedSlices densified per example), repeated ids."""
    emb = rng.normal(size=(5, 2))
    ids5 = np.array([[0, 0, 3], [4, 1, 1], [2, 2, 2], [0, 4, 3], [1, 1, 0]], np.int32)

    def loss(ids, e):
        return df.reduce_sum(df.sin(df.gather(e, ids)))
    f = df.defun(df.vmap(df.gradients_function(loss, params=[1]), in_axes=(0, None)),
                 input_signature=[df.TensorSpec([None, 3], df.int32), df.TensorSpec([5, 2], df.float64)])
    want = jax.vmap(jax.grad(lambda i, e: jnp.sum(jnp.sin(e[i])), argnums=1), in_axes=(0, None))(ids5, emb)
    for b in (0, 1, 5):
        _close(f(ids5[:b], emb)[0], want[:b], 1e-12)
    assert f.trace_count == 1


def test_unknown_batch_size_on_numba_and_through_exports(tmp_path):
    import onnxruntime     # (the ONNX reference runtime; a test dependency)
    w = rng.normal(size=(3, 2))
    sig = [df.TensorSpec([None, 3], df.float64), df.TensorSpec([3, 2], df.float64)]
    g = df.vmap(df.gradients_function(lambda x, w: df.reduce_sum(df.tanh(df.matmul(df.reshape(x, [1, 3]), w)))),
                in_axes=(0, None))
    numpy_fn = df.defun(g, input_signature=sig)
    numba_fn = df.defun(g, input_signature=sig, backend="numba")
    cf = numpy_fn.get_concrete_function()
    df.export_json(cf, str(tmp_path / "g.json"))
    loaded = df.load_json(str(tmp_path / "g.json"))
    df.export_onnx(cf, str(tmp_path / "g.onnx"))
    session = onnxruntime.InferenceSession(str(tmp_path / "g.onnx"))
    assert [i.name for i in session.get_inputs()] == ["x", "w"]      # fn's names, not *args
    x5 = rng.normal(size=(5, 3))
    jl = lambda x, w: jnp.sum(jnp.tanh(jnp.reshape(x, (1, 3)) @ w))    # noqa: E731
    want = jax.vmap(jax.grad(jl, argnums=(0, 1)), in_axes=(0, None))(x5, w)
    for b in (0, 1, 5):
        x = x5[:b]
        for fn in (numpy_fn, numba_fn, loaded):
            got = fn(x, w)
            _close(got[0], want[0][:b], 1e-12)
            _close(got[1], want[1][:b], 1e-12)
        onnx_got = session.run(None, {"x": x, "w": w})
        _close(onnx_got[0], want[0][:b], 1e-12)
    assert numpy_fn.trace_count == 1 and numba_fn.trace_count == 1


def test_custom_gradient_inside_vmap_second_order_and_forward_mode():
    """The batched rule's gradient is itself differentiable (its ops are recorded), and
    forward mode uses the rule as unbatched (jax.custom_jvp of the same rule as reference)."""
    @df.custom_gradient
    def half(x):
        return x * x * x, lambda dy: dy * 1.5 * x * x      # half the true gradient

    @jax.custom_jvp
    def jhalf(x):
        return x * x * x
    jhalf.defjvp(lambda p, t: (p[0] ** 3, 1.5 * p[0] ** 2 * t[0]))
    x = np.array([1.0, 2.0, -3.0])
    g = df.gradients_function(lambda x: df.reduce_sum(df.vmap(half)(x)))
    jg = jax.grad(lambda x: jnp.sum(jax.vmap(jhalf)(x)))
    _close(g(x)[0], jg(x), 1e-12)
    second = lambda x: df.reduce_sum(g(x)[0])         # noqa: E731
    jsecond = jax.grad(lambda x: jnp.sum(jg(x)))
    _close(df.gradients_function(second)(x)[0], jsecond(x), 1e-12)
    _close(df.defun(df.gradients_function(second))(x)[0], jsecond(x), 1e-12)
    xt = df.constant(x)
    with df.ForwardAccumulator(xt, df.ones_like(xt)) as acc:
        y = df.vmap(half)(xt)
    _close(acc.jvp(y), jax.jvp(jax.vmap(jhalf), (x,), (np.ones(3),))[1], 1e-12)
