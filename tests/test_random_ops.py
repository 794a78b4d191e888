"""Stateless random numbers and dropout: reproducible bit for bit from the seed (eagerly,
traced, reloaded, in another process), different for different seeds, statistically sane,
with the seed as a tensor argument of a traced step (no retracing), and typed errors."""
import json
import subprocess
import sys
import os

import numpy as np
import pytest
from scipy import stats

import defun as df
from op_rows_random import ref_dropout, ref_normal, ref_uniform

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bits(t):
    a = t.numpy() if hasattr(t, "numpy") else np.asarray(t)
    return a.dtype, a.shape, a.tobytes()


DRAWS = {
    "normal": lambda seed: df.random.normal([3, 5], seed, mean=1.0, stddev=2.0),
    "normal64": lambda seed: df.random.normal([7], seed, dtype=df.float64),
    "uniform": lambda seed: df.random.uniform([4, 2], seed, minval=-1.0, maxval=3.0),
    "uniform16": lambda seed: df.random.uniform([9], seed, dtype=df.float16),
    "dropout": lambda seed: df.dropout(df.ones([6, 4]), 0.4, seed),
    "dropout_noise_shape": lambda seed: df.dropout(df.ones([6, 4]), 0.5, seed, noise_shape=[6, 1]),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_same_seed_same_bits_eagerly_traced_and_reloaded(name):
    draw = DRAWS[name]
    seed = np.array([12, -7], np.int64)
    eager = draw((12, -7))
    assert _bits(draw(df.constant(seed))) == _bits(eager)
    assert _bits(draw(df.constant(seed.astype(np.int32)))) == _bits(eager)   # int32 seeds: same numbers
    traced = df.defun(draw)
    assert _bits(traced(df.constant(seed))) == _bits(eager)
    cf = traced.get_concrete_function(df.TensorSpec([2], df.int64))
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    assert _bits(loaded(seed)) == _bits(eager)
    assert _bits(df.defun(lambda: draw((12, -7)))()) == _bits(eager)   # the pair as a graph constant


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_different_seeds_give_different_numbers(name):
    draws = [_bits(DRAWS[name](s))[2] for s in [(1, 2), (1, 3), (2, 1), (0, 0), (-1, 2)]]
    assert len(set(draws)) == len(draws)


def test_numbers_do_not_depend_on_process_state():
    code = ("import numpy as np, defun as df\n"
            "np.random.seed(123); np.random.default_rng(5).random(10)\n"
            "print(df.random.normal([5], (3, 4)).numpy().tobytes().hex(),"
            " df.random.uniform([5], (3, 4), dtype=df.float64).numpy().tobytes().hex())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    normal_hex, uniform_hex = out.stdout.split()
    assert bytes.fromhex(normal_hex) == df.random.normal([5], (3, 4)).numpy().tobytes()
    assert bytes.fromhex(uniform_hex) == df.random.uniform([5], (3, 4), dtype=df.float64).numpy().tobytes()


def test_a_traced_step_takes_the_seed_as_an_argument_without_retracing():
    traces = []

    @df.defun
    def step(x, seed):
        traces.append(1)
        return df.dropout(x, 0.5, seed) + df.random.normal(df.shape(x), seed, stddev=0.01)

    x = df.ones([4, 8])
    outs = [step(x, df.constant([0, k])) for k in range(5)]
    assert len(traces) == 1
    assert len({o.numpy().tobytes() for o in outs}) == 5
    for k, o in enumerate(outs):
        expected = df.dropout(x, 0.5, (0, k)) + df.random.normal([4, 8], (0, k), stddev=0.01)
        np.testing.assert_array_equal(o.numpy(), expected.numpy())


def test_reference_recipe_is_what_the_kernels_draw():
    seed = (2 ** 62, -3)
    np.testing.assert_array_equal(df.random.uniform([11], seed).numpy(), ref_uniform(seed, 11, np.float32))
    np.testing.assert_array_equal(df.random.uniform([5], seed, dtype=df.float64).numpy(),
                                  ref_uniform(seed, 5, np.float64))
    np.testing.assert_array_equal(df.random.uniform([3], seed, dtype=df.float16).numpy(),
                                  ref_uniform(seed, 3, np.float16))
    np.testing.assert_allclose(df.random.normal([9], seed, dtype=df.float64).numpy(), ref_normal(seed, 9),
                               rtol=1e-14)
    x = np.arange(1.0, 13.0).reshape(3, 4)
    np.testing.assert_array_equal(df.dropout(x, 0.3, seed).numpy(), ref_dropout(x, seed, 0.3))


# ---------------------------------------------------------------------------------------
# Statistics (deterministic: fixed seeds, so these pass or fail the same way every run)

@pytest.mark.parametrize("dtype", [df.float32, df.float64])
def test_normal_statistics(dtype):
    z = df.random.normal([200_000], (42, 0), dtype=dtype).numpy().astype(np.float64)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert abs(stats.skew(z)) < 0.03 and abs(stats.kurtosis(z)) < 0.05
    assert stats.kstest(z, "norm").pvalue > 1e-3
    shifted = df.random.normal([100_000], (42, 1), mean=-3.0, stddev=0.5, dtype=dtype).numpy()
    assert abs(shifted.mean() + 3) < 0.01 and abs(shifted.std() - 0.5) < 0.01
    # consecutive values (the cos/sin halves of a Box-Muller pair) are uncorrelated
    assert abs(np.corrcoef(z[0::2], z[1::2])[0, 1]) < 0.01


@pytest.mark.parametrize("dtype", [df.float16, df.float32, df.float64])
def test_uniform_statistics_and_range(dtype):
    u = df.random.uniform([200_000], (7, 7), dtype=dtype).numpy()
    assert u.dtype == dtype.np and u.min() >= 0 and u.max() < 1
    u64 = u.astype(np.float64)
    assert abs(u64.mean() - 0.5) < 0.005 and abs(u64.var() - 1 / 12) < 0.002
    if dtype is not df.float16:   # float16 uniforms take 2048 values: too coarse for a KS test
        assert stats.kstest(u64, "uniform").pvalue > 1e-3
    else:
        assert len(np.unique(u)) == 2048
    v = df.random.uniform([50_000], (7, 8), minval=-2.0, maxval=5.0, dtype=dtype).numpy().astype(np.float64)
    assert v.min() >= -2 and v.max() <= 5 and abs(v.mean() - 1.5) < 0.05


def test_dropout_keeps_a_fraction_and_preserves_the_mean():
    x = np.random.default_rng(0).uniform(1, 2, size=(400, 500)).astype(np.float32)
    y = df.dropout(x, 0.3, (5, 5)).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.005
    np.testing.assert_allclose(y[kept], x[kept] / 0.7, rtol=1e-6)
    assert abs(y.mean() / x.mean() - 1) < 0.01


def test_dropout_noise_shape_shares_the_mask_along_size_one_dimensions():
    y = df.dropout(df.ones([5, 6, 3]), 0.5, (1, 1), noise_shape=[5, 1, None]).numpy()
    assert (y == y[:, :1, :]).all()
    assert 0 < (y == 0).mean() < 1


def test_dropout_rate_zero_is_the_identity_and_its_gradient_is_the_mask():
    x = np.random.default_rng(1).standard_normal((3, 4))
    assert df.dropout(x, 0.0, (1, 2)).numpy().tobytes() == x.tobytes()
    tx = df.constant(x)
    g = np.random.default_rng(2).standard_normal((3, 4))
    with df.GradientTape() as tape:
        tape.watch(tx)
        y = df.dropout(tx, 0.5, (3, 9))
    grad = tape.gradient(y, tx, output_gradients=df.constant(g)).numpy()
    mask = y.numpy() / x      # 0 or 2
    assert set(np.unique(mask)) == {0.0, 2.0}
    np.testing.assert_allclose(grad, mask * g, rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Shapes that are tensors

def test_shape_from_a_tensor_with_unknown_sizes():
    @df.defun(input_signature=[df.TensorSpec([None, 3]), df.TensorSpec([2], df.int32)])
    def noise(x, seed):
        return (df.random.normal(df.shape(x), seed), df.random.uniform([df.shape(x)[0], 2], seed),
                df.random.normal(df.shape(x)[::-1], seed))

    cf = noise.get_concrete_function()
    # df.shape(x)[::-1] keeps x's known size: (3, ?)
    assert [tuple(t.shape) for t in cf.graph.outputs] == [(None, 3), (None, 2), (3, None)]
    x = np.zeros((4, 3), np.float32)
    a, b, c = noise(x, np.array([1, 2], np.int32))
    np.testing.assert_array_equal(a.numpy(), df.random.normal([4, 3], (1, 2)).numpy())
    np.testing.assert_array_equal(b.numpy(), df.random.uniform([4, 2], (1, 2)).numpy())
    np.testing.assert_array_equal(c.numpy(), df.random.normal([3, 4], (1, 2)).numpy())
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    for got, want in zip(loaded(np.zeros((6, 3), np.float32), np.array([1, 2], np.int32)),
                         noise(np.zeros((6, 3), np.float32), np.array([1, 2], np.int32))):
        assert _bits(got) == _bits(want)


def test_eager_tensor_shapes_and_mean_stddev_tensors():
    z = df.random.normal(df.constant([2, 3]), (1, 1), mean=df.constant(1.0), stddev=df.constant(2.0))
    np.testing.assert_allclose(z.numpy(), 1 + 2 * df.random.normal([2, 3], (1, 1)).numpy(), rtol=1e-6)
    u = df.random.uniform([3], (1, 1), minval=df.constant(2.0), maxval=df.constant(4.0))
    np.testing.assert_allclose(u.numpy(), 2 + 2 * df.random.uniform([3], (1, 1)).numpy(), rtol=1e-6)


def test_mean_and_stddev_are_differentiable():
    mean, std = df.constant(0.5), df.constant(2.0)
    with df.GradientTape() as tape:
        tape.watch([mean, std])
        y = df.reduce_sum(df.random.normal([10], (4, 4), mean=mean, stddev=std))
    dm, ds = tape.gradient(y, [mean, std])
    assert float(dm) == 10.0
    np.testing.assert_allclose(float(ds), df.reduce_sum(df.random.normal([10], (4, 4))).numpy(), rtol=1e-5)


# ---------------------------------------------------------------------------------------
# Errors

@pytest.mark.parametrize("call,match", [
    (lambda: df.random.normal([2], 5), r"stateless_random_normal: seed must be a pair of ints"),
    (lambda: df.random.normal([2], (1, 2, 3)), r"seed must be a pair of ints"),
    (lambda: df.random.uniform([2], (1.5, 2)), r"stateless_random_uniform: seed must be a pair of ints"),
    (lambda: df.random.uniform([2], df.constant([1.0, 2.0])), r"seed must be int32 or int64, got float32"),
    (lambda: df.random.uniform([2], df.constant([1, 2, 3])), r"seed must have shape \[2\]"),
    (lambda: df.random.normal([2, -1], (1, 2)), r"negative size in shape \[2, -1\]"),
    (lambda: df.random.normal([2], (1, 2), dtype=df.int32), r"dtype must be floating"),
    (lambda: df.dropout(df.ones([3]), 1.0, (1, 2)), r"dropout: rate must be in \[0, 1\).*got 1.0"),
    (lambda: df.dropout(df.ones([3]), -0.1, (1, 2)), r"dropout: rate must be in \[0, 1\)"),
    (lambda: df.dropout(df.ones([3], df.int32), 0.5, (1, 2)), r"dropout: unsupported input dtype int32"),
    (lambda: df.dropout(df.ones([3, 2]), 0.5, (1, 2), noise_shape=[3]),
     r"dropout: noise_shape \[3\] must have one entry per dimension"),
    (lambda: df.dropout(df.ones([3, 2]), 0.5, (1, 2), noise_shape=[2, 2]),
     r"noise_shape \[2, 2\] does not broadcast to x's shape"),
])
def test_errors(call, match):
    with pytest.raises(df.errors.InvalidArgumentError, match=match):
        call()
    with pytest.raises(df.errors.InvalidArgumentError, match=match):
        df.defun(call)()


def test_a_shape_of_lists_is_a_type_error():
    with pytest.raises(TypeError, match=r"stateless_random_normal: shape\[0\] must be an int, got the list \[2\]"):
        df.random.normal([[2]], (1, 2))


def test_a_shape_tensor_of_unknown_length_is_refused_while_tracing():
    @df.defun(input_signature=[df.TensorSpec([None], df.int32)])
    def f(shape):
        return df.random.normal(shape, (1, 2))
    with pytest.raises(df.errors.InvalidArgumentError,
                       match=r"stateless_random_normal: shape must have a length known while tracing"):
        f.get_concrete_function()


def test_a_seed_of_the_wrong_size_fails_when_the_graph_runs():
    f = df.defun(lambda seed: df.random.uniform([2], seed), input_signature=[df.TensorSpec([None], df.int64)])
    with pytest.raises(df.errors.InvalidArgumentError, match=r"stateless_random_uniform.*seed must have shape \[2\]"):
        f(np.array([1, 2, 3]))
