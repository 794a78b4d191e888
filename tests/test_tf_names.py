"""TensorFlow's names: df.nn and df.math (aliases and compositions), `@df.function`'s hint,
numpy's ufuncs on tensors. References: torch's functions and autograd, numpy."""
import numpy as np
import pytest
import torch

import defun as df
from defun.runtime.ops import numpy_ufuncs

RNG = np.random.default_rng(7)
TOL = {np.float16: 2e-2, np.float32: 1e-5, np.float64: 1e-12}


def _x(shape=(3, 4), dtype=np.float64, scale=3.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


# (df function, torch reference on tensors, input makers): elementwise compositions
UNARY = [
    (df.nn.log_sigmoid, torch.nn.functional.logsigmoid),
    (df.math.log_sigmoid, torch.nn.functional.logsigmoid),
    (df.nn.softsign, torch.nn.functional.softsign),
    (df.nn.relu6, torch.nn.functional.relu6),
    (df.nn.silu, torch.nn.functional.silu),
    (df.nn.swish, torch.nn.functional.silu),
    (df.nn.selu, torch.selu),
]


def _torch_grad(fn, *arrays):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    out.sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def _df_grad(fn, *arrays):
    ts = [df.constant(a) for a in arrays]
    with df.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        out = fn(*ts)
        total = df.reduce_sum(out)
    return out.numpy(), [g.numpy() for g in tape.gradient(total, ts)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn, ref", UNARY, ids=lambda v: getattr(v, "__name__", ""))
def test_unary_compositions_and_gradients_match_torch(fn, ref, dtype):
    x = _x(dtype=dtype)
    x[0, :2] = [40.0, -40.0]            # saturating tails
    got, (dgot,) = _df_grad(fn, x)
    want, (dwant,) = _torch_grad(ref, x)
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_allclose(dgot, dwant, rtol=TOL[dtype], atol=TOL[dtype])


def test_compositions_in_float16_follow_float64():
    x = _x(dtype=np.float16, scale=2.0)
    for fn, _ in UNARY:
        got, (dgot,) = _df_grad(fn, x)
        want, (dwant,) = _df_grad(fn, x.astype(np.float64))
        assert got.dtype == np.float16 and dgot.dtype == np.float16
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
        np.testing.assert_allclose(dgot, dwant, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_sigmoid_cross_entropy_with_logits_matches_torch(dtype):
    z = RNG.uniform(size=(5, 3)).astype(dtype)
    x = _x((5, 3), dtype=dtype, scale=4.0)
    x[0] = [80.0, -80.0, 0.0]          # where sigmoid rounds to 0 or 1
    f = lambda z_, x_: df.nn.sigmoid_cross_entropy_with_logits(labels=z_, logits=x_)  # noqa: E731
    got, (_, dx) = _df_grad(f, z, x)
    ref = lambda z_, x_: torch.nn.functional.binary_cross_entropy_with_logits(x_, z_, reduction="none")  # noqa: E731
    want, (_, dwant) = _torch_grad(ref, z.astype(np.float64), x.astype(np.float64))
    tol = 3e-2 if dtype == np.float16 else TOL[dtype] * 10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(dx, dwant, rtol=tol, atol=tol)
    assert np.isfinite(got).all()


def test_weighted_cross_entropy_with_logits_matches_torch_pos_weight():
    z = RNG.uniform(size=(4, 3))
    x = _x((4, 3), scale=5.0)
    q = np.array([0.5, 2.0, 3.0])
    got = df.nn.weighted_cross_entropy_with_logits(z, x, q).numpy()
    want = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.tensor(x), torch.tensor(z), pos_weight=torch.tensor(q), reduction="none").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_cross_entropy_refuses_shapes_that_differ():
    with pytest.raises(df.errors.InvalidArgumentError, match=r"same shape, got \[2\] and \[3\]"):
        df.nn.sigmoid_cross_entropy_with_logits(labels=np.zeros(2), logits=np.zeros(3))


def test_reductions_match_numpy():
    x = _x((3, 4, 5))
    np.testing.assert_allclose(df.math.reduce_variance(x, axis=[0, 2]).numpy(), x.var(axis=(0, 2)), rtol=1e-12)
    np.testing.assert_allclose(df.math.reduce_std(x, axis=1, keepdims=True).numpy(),
                               x.std(axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(df.math.reduce_euclidean_norm(x).numpy(), np.linalg.norm(x.ravel()), rtol=1e-12)
    c = x + 1j * _x((3, 4, 5))
    np.testing.assert_allclose(df.math.reduce_variance(c, axis=0).numpy(), c.var(axis=0), rtol=1e-12)
    x[0, 0, :3] = 0
    assert df.math.count_nonzero(x).numpy() == np.count_nonzero(x)
    assert df.math.count_nonzero(x).dtype == df.int64
    mean, var = df.nn.moments(x, axes=[0, 1])
    np.testing.assert_allclose(mean.numpy(), x.mean(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(var.numpy(), x.var(axis=(0, 1)), rtol=1e-12)
    with pytest.raises(df.errors.InvalidArgumentError, match="reduce_variance takes a floating"):
        df.math.reduce_variance(np.arange(3))


def test_l2_loss_l2_normalize_and_bias_add():
    x = _x((2, 3))
    assert df.nn.l2_loss(x).numpy() == pytest.approx((x ** 2).sum() / 2)
    np.testing.assert_allclose(df.nn.l2_normalize(x, axis=1).numpy(),
                               x / np.linalg.norm(x, axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(df.math.l2_normalize(np.zeros(3)).numpy(), np.zeros(3))
    b = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(df.nn.bias_add(x, b).numpy(), x + b)
    img = _x((2, 3, 4, 4))
    np.testing.assert_allclose(df.nn.bias_add(img, b, data_format="NCHW").numpy(), img + b[:, None, None])
    with pytest.raises(df.errors.InvalidArgumentError, match="bias has 2 elements but the channel axis"):
        df.nn.bias_add(x, b[:2])


def test_no_nan_divisions_and_their_gradients():
    x = np.array([1.0, 2.0, 0.0, np.nan])
    y = np.array([0.0, 4.0, 0.0, 0.0])
    np.testing.assert_array_equal(df.math.divide_no_nan(x, y).numpy(), [0.0, 0.5, 0.0, 0.0])
    np.testing.assert_array_equal(df.math.multiply_no_nan(x, y).numpy(), [0.0, 8.0, 0.0, 0.0])
    np.testing.assert_array_equal(df.math.xdivy(np.array([0.0, 3.0]), np.array([0.0, 2.0])).numpy(), [0.0, 1.5])
    _, (dx, dy) = _df_grad(df.math.divide_no_nan, np.array([1.0, 2.0]), np.array([0.0, 4.0]))
    np.testing.assert_array_equal(dx, [0.0, 0.25])
    np.testing.assert_array_equal(dy, [0.0, -2.0 / 16])
    np.testing.assert_array_equal(df.math.is_inf(np.array([np.inf, -np.inf, np.nan, 1.0])).numpy(),
                                  [True, True, False, False])


def test_aliases_are_the_df_functions():
    for space in (df.nn, df.math):
        for name in space.__all__:
            if hasattr(df, name):
                assert getattr(space, name) is getattr(df, name), f"df.{space.__name__}.{name}"
    assert df.math.floormod is df.mod and df.math.truediv is df.divide


def test_a_tensorflow_users_snippet_runs():
    labels = df.constant([[0.0, 1.0], [1.0, 0.0]])
    w = df.Variable([[0.1, -0.2], [0.3, 0.4]])

    def step_eager(x):
        logits = df.nn.bias_add(df.matmul(x, w), df.constant([0.0, 0.1]))
        loss = df.reduce_mean(df.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        return loss + 1e-3 * df.nn.l2_loss(w) + df.math.reduce_std(df.nn.relu6(logits))

    step = df.defun(step_eager)
    x = df.constant([[1.0, 2.0], [3.0, -1.0]])
    with df.GradientTape() as tape:
        loss = step(x)
    grad = tape.gradient(loss, w)
    with df.GradientTape() as tape:
        eager = step_eager(x)
    np.testing.assert_allclose(loss.numpy(), eager.numpy(), rtol=1e-6)
    np.testing.assert_allclose(grad.numpy(), tape.gradient(eager, w).numpy(), rtol=1e-5)


def test_composition_exports_and_reloads(tmp_path):
    f = df.defun(lambda z, x: df.nn.sigmoid_cross_entropy_with_logits(labels=z, logits=x))
    z, x = np.float32([0.0, 1.0, 0.5]), np.float32([3.0, -2.0, 0.1])
    cf = f.get_concrete_function(df.constant(z), df.constant(x))
    df.export_json(cf, tmp_path / "xent.json")
    loaded = df.load_json(tmp_path / "xent.json")
    np.testing.assert_allclose(loaded(z, x), f(z, x).numpy(), rtol=1e-6)


def test_df_function_says_to_use_defun():
    with pytest.raises(TypeError, match=r"decorate with @df\.defun"):
        @df.function
        def f(x):
            return x


def test_missing_names_get_hints():
    with pytest.raises(AttributeError, match=r"use df\.nn\.max_pool2d"):
        df.nn.max_pool  # noqa: B018
    with pytest.raises(AttributeError, match=r"similar names in df\.math: .*reduce_logsumexp"):
        df.math.logsumexp  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'nonsense'"):
        df.nonsense  # noqa: B018


# ---------------------------------------------------------------- numpy ufuncs on tensors

def _inputs_for(ufunc):
    if ufunc in (np.arccosh,):
        return (RNG.uniform(1.1, 3.0, 4),)
    if ufunc in (np.arcsin, np.arccos, np.arctanh):
        return (RNG.uniform(-0.9, 0.9, 4),)
    if ufunc in (np.log, np.log1p, np.log2, np.log10, np.sqrt, np.reciprocal):
        return tuple(RNG.uniform(0.5, 3.0, 4) for _ in range(ufunc.nin))
    if ufunc in (np.logical_and, np.logical_or, np.logical_not):
        return tuple(RNG.uniform(size=4) > 0.5 for _ in range(ufunc.nin))
    if ufunc in (np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.invert, np.left_shift, np.right_shift):
        return tuple(RNG.integers(-40, 40, 4) for _ in range(ufunc.nin))      # (negative shift counts too)
    if ufunc is np.matmul:
        return RNG.standard_normal((2, 3)), RNG.standard_normal((3, 2))
    if ufunc is np.power:
        return RNG.uniform(0.5, 2.0, 4), RNG.uniform(-2.0, 2.0, 4)
    return tuple(RNG.uniform(0.5, 3.0, 4) * RNG.choice([-1, 1], 4) for _ in range(ufunc.nin))


@pytest.mark.parametrize("ufunc", list(numpy_ufuncs.UFUNC_OPS), ids=lambda u: u.__name__)
def test_every_mapped_ufunc_gives_the_df_op_on_tensors(ufunc):
    arrays = _inputs_for(ufunc)
    got = ufunc(*(df.constant(a) for a in arrays))
    assert isinstance(got, df.Tensor)
    np.testing.assert_allclose(got.numpy(), ufunc(*arrays), rtol=1e-12)
    mixed = ufunc(arrays[0], *(df.constant(a) for a in arrays[1:])) if ufunc.nin == 2 else got
    np.testing.assert_allclose(np.asarray(mixed), ufunc(*arrays), rtol=1e-12)


def test_ufuncs_are_taped_and_traced():
    x = df.constant([0.3, 1.2])
    with df.GradientTape() as tape:
        tape.watch(x)
        y = np.sum(np.sin(x) * np.exp(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(),
                               np.cos(x.numpy()) * np.exp(x.numpy()) + np.sin(x.numpy()) * np.exp(x.numpy()),
                               rtol=1e-6)
    f = df.defun(lambda t: np.tanh(t) * 2)
    np.testing.assert_allclose(f(x).numpy(), np.tanh(x.numpy()) * 2, rtol=1e-6)
    v = df.Variable([1.0, 2.0])
    np.testing.assert_allclose(np.exp(v).numpy(), np.exp([1.0, 2.0]), rtol=1e-6)


def test_other_ufuncs_give_numpy_results_eagerly_and_refuse_symbolic_tensors():
    x = df.constant([-0.5, 0.0, 2.0])
    got = np.heaviside(x, 0.5)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, [0.0, 0.5, 1.0])
    assert np.add.reduce(x) == pytest.approx(1.5)
    out = np.zeros(3, np.float32)
    np.add(x, 1.0, out=out)
    np.testing.assert_array_equal(out, [0.5, 1.0, 3.0])
    with pytest.raises(df.errors.TracingError, match=r"np\.heaviside was given a symbolic tensor"):
        df.defun(lambda t: np.heaviside(t, 0.5))(x)
    with pytest.raises(df.errors.TracingError, match=r"np\.add\.reduce .*use df\.add"):
        df.defun(lambda t: np.add.reduce(t))(x)
