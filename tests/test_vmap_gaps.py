"""vmap over a batch size unknown while tracing, where the previous round stopped: scatter_nd,
unsorted_segment_sum and the per-example fallback of vectorized_map (their static attributes
needed the batch size), mapped sizes that differ when every size is unknown (refused, as jax
refuses them), and eager vmap at batch 0 over a while loop differentiated. References: jax.vmap
and a Python loop of eager calls."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import defun as df
from defun.runtime import errors

jax.config.update("jax_enable_x64", True)

rng = np.random.default_rng(30)


def _np(t):
    return np.asarray(t.numpy() if isinstance(t, df.Tensor) else t)


def _close(a, b, tol=1e-12):
    a, b = _np(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _signature(*shapes):
    """The input signature with the batch size unknown (a relaxed trace's)."""
    return [df.TensorSpec((None,) + s, dt) for s, dt in shapes]


def _scatter(idx, u):
    return df.scatter_nd(idx, u, [5, 2])


def _segments(x, ids):
    return df.unsorted_segment_sum(x, ids, 4)


def _jax_scatter(idx, u):
    return jnp.zeros((5, 2), u.dtype).at[idx[:, 0]].add(u)


def _jax_segments(x, ids):
    return jax.ops.segment_sum(jnp.where((ids >= 0)[:, None], x, 0.0), jnp.where(ids >= 0, ids, 4), 5)[:4]


@pytest.mark.parametrize("fn,ref,make", [
    (_scatter, _jax_scatter, lambda b: (rng.integers(0, 5, size=(b, 3, 1)).astype(np.int32), rng.normal(size=(b, 3, 2)))),
    (_segments, _jax_segments, lambda b: (rng.normal(size=(b, 6, 2)), rng.integers(-1, 4, size=(b, 6)).astype(np.int32))),
], ids=["scatter_nd", "unsorted_segment_sum"])
def test_scatter_and_segment_sum_over_an_unknown_batch_size(fn, ref, make):
    """One trace for batches 0, 1 and 4; values against jax.vmap, the gradient of the float
    argument against jax's per-example gradients."""
    a, b = make(4)
    shapes = [(a.shape[1:], df.int32 if a.dtype == np.int32 else df.float64),
              (b.shape[1:], df.int32 if b.dtype == np.int32 else df.float64)]
    fl = 1 if fn is _scatter else 0
    want = jax.vmap(ref)(a, b)
    c = rng.normal(size=want.shape)
    sig = _signature(*shapes)
    f = df.defun(df.vmap(fn), input_signature=sig)
    g = df.defun(df.vmap(df.gradients_function(lambda p, q, c: df.reduce_sum(df.sin(fn(p, q)) * c), params=[fl])),
                 input_signature=sig + [df.TensorSpec((None,) + c.shape[1:], df.float64)])
    for n in (0, 1, 4):
        _close(f(a[:n], b[:n]), want[:n])
        per = jax.vmap(jax.grad(lambda p, q, c: jnp.sum(jnp.sin(ref(p, q)) * c), argnums=fl))(a[:n], b[:n], c[:n]) \
            if n else np.zeros((0,) + (a, b)[fl].shape[1:])
        _close(g(a[:n], b[:n], c[:n])[0], per)
    assert f.trace_count == 1 and g.trace_count == 1


def _per_example_segments(e):
    return df.sin(df.segment_sum(e[0] * e[0], e[1])) * 2.0      # segment_sum: no batching rule


def test_fallback_over_an_unknown_batch_size_runs_once_per_example_when_the_batch_runs():
    """defun(vectorized_map(..., fallback_to_while_loop=True)) with the batch size unknown:
    one trace, warned once; values and gradients against a loop of eager calls and tapes."""
    data = rng.normal(size=(3, 4))
    ids = np.array([[0, 0, 1, 2], [0, 1, 1, 2], [0, 1, 2, 2]], np.int32)
    sig = [df.TensorSpec([None, 4], df.float64), df.TensorSpec([None, 4], df.int32)]

    def loss(d, i):
        return df.reduce_sum(df.vectorized_map(_per_example_segments, (d, i), fallback_to_while_loop=True))
    f = df.defun(lambda d, i: df.vectorized_map(_per_example_segments, (d, i), fallback_to_while_loop=True),
                 input_signature=sig)
    g = df.defun(df.gradients_function(loss, params=[0]), input_signature=sig)
    with pytest.warns(df.VectorizationFallbackWarning, match=r"segment_sum at .*test_vmap_gaps.py:\d+"):
        f(data[:1], ids[:1])
    with pytest.warns(df.VectorizationFallbackWarning, match="segment_sum"):
        g(data[:1], ids[:1])
    for n in (0, 1, 3):
        want, want_g = [], []
        for k in range(n):
            d = df.constant(data[k])
            with df.GradientTape() as tape:
                tape.watch(d)
                y = _per_example_segments((d, df.constant(ids[k])))
                s = df.reduce_sum(y)
            want.append(_np(y))
            want_g.append(_np(tape.gradient(s, d)))
        # no example at batch 0 says how many segments there are (a data-dependent size): 0
        _close(f(data[:n], ids[:n]), np.stack(want) if n else np.zeros((0, 0)))
        _close(g(data[:n], ids[:n])[0], np.stack(want_g) if n else np.zeros((0, 4)))
    assert f.trace_count == 1 and g.trace_count == 1


@pytest.mark.parametrize("every", [False, True], ids=["batch-size-unknown", "every-size-unknown"])
def test_mapped_batch_sizes_that_differ_are_refused_when_the_batch_runs(every):
    """A second mapped argument of 1 example against 2 broadcast silently when every size was
    unknown; jax refuses mismatched mapped sizes (ValueError), we refuse them naming both."""
    a, b = rng.normal(size=(2, 3)), rng.normal(size=(1, 3))
    with pytest.raises(ValueError, match="inconsistent sizes"):
        jax.vmap(lambda p, q: p * q)(a, b)
    spec = df.TensorSpec([None, None] if every else [None, 3], df.float64)
    f = df.defun(df.vmap(lambda p, q: p * q), input_signature=[spec, spec])
    _close(f(a, a), jax.vmap(lambda p, q: p * q)(a, a))
    for x, y, got, want in ((a, b, 1, 2), (b, a, 2, 1), (a, np.zeros((0, 3)), 0, 2)):
        with pytest.raises(errors.InvalidArgumentError,
                           match=f"argument leaf 1 has {got} examples along its mapped axis, argument leaf 0 "
                                 f"has {want}; every mapped argument must have the same batch size"):
            f(x, y)
    g = df.defun(df.vmap(lambda p, q: p * q, in_axes=(0, 1)),
                 input_signature=[spec, df.TensorSpec([None, None] if every else [3, None], df.float64)])
    with pytest.raises(errors.InvalidArgumentError, match="argument leaf 1 has 1 examples"):
        g(a, b.T)
    _close(g(a, a.T), a * a)


def _loop_through(x, w):
    """w reaches the result only through a loop whose trip count is per example."""
    n = df.cast(df.reduce_sum(df.abs(x)) * 2.0, df.int32) + 1
    return df.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, df.sin(a) * w), (0, df.ones_like(x)))[1]


@pytest.mark.parametrize("b", [0, 1, 3])
def test_gradient_of_eager_vmap_over_a_per_example_loop_at_every_batch_size(b):
    """The tape's gradient for w: zeros of (0, 3) at batch 0 (was None), each example's
    own tape gradient otherwise; eager and defun(vmap) alike."""
    x, w, c = rng.normal(size=(b, 3)), rng.normal(size=(b, 3)), rng.normal(size=(b, 3))
    want = []
    for k in range(b):
        wk = df.constant(w[k])
        with df.GradientTape() as tape:
            tape.watch(wk)
            y = df.reduce_sum(_loop_through(df.constant(x[k]), wk) * c[k])
        want.append(_np(tape.gradient(y, wk)))
    want = np.stack(want) if b else np.zeros((0, 3))
    for vm in (df.vmap(_loop_through), df.defun(df.vmap(_loop_through))):
        ws = df.constant(w)
        with df.GradientTape() as tape:
            tape.watch(ws)
            y = df.reduce_sum(vm(df.constant(x), ws) * c)
        got = tape.gradient(y, ws)
        assert got is not None
        _close(got, want)
