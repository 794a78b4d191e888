"""Per-example gradients through a `while_loop` whose trip count differs per example.

`df.vmap(df.gradients_function(f))` with a `while_loop` in `f`: the batched loop runs until
every example is done, keeps each iteration's values for the whole batch and counts each
example's own iterations; the gradient's reverse loop is masked per example by that count.
Every case is compared with a Python loop over examples of tape gradients AND with central
finite differences (float64), eagerly, inside a defun, and reloaded from the defun's JSON
document: trip counts differing (one example running no iteration), loop variables batched
and shared, a shared count, a variable read in the body, maximum_iterations, a cond in the
body, second order, forward mode (ForwardAccumulator), float32 and float64.
"""
import types

import numpy as np
import pytest

import defun as df
from defun_helpers import numeric_grads

MODES = ["eager", "defun", "json"]
DTYPES = [np.float32, np.float64]


def _run(fn, mode, args):
    """`fn(*args)` eagerly, in a defun, or loaded from the defun's exported JSON."""
    if mode == "eager":
        return fn(*args)
    f = df.defun(fn)
    if mode == "defun":
        return f(*args)
    return df.load_json(df.export_json(f.get_concrete_function(*args)))(*args)


def _examples(args, in_axes):
    """The examples of `args` (numpy arrays), one list of arguments each."""
    n = next(np.shape(a)[0] for a, ax in zip(args, in_axes) if ax is not None)
    return [[a[i] if ax is not None else a for a, ax in zip(args, in_axes)] for i in range(n)]


def _leaves(x):
    return [np.asarray(v) for v in (x if isinstance(x, (list, tuple)) else [x])]


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)


def _check(f, args, in_axes, dtype, mode, params=None, fd=True):
    """vmap of f's gradients (w.r.t. `params`) == the loop over examples of tape gradients
    == central differences of f on each example (in float64)."""
    args = [np.asarray(a, dtype) for a in args]
    g = df.gradients_function(f, params=params)
    got = _leaves(_run(df.vmap(g, in_axes=in_axes), mode, [df.constant(a) for a in args]))
    per = [_leaves(g(*[df.constant(a) for a in ex])) for ex in _examples(args, in_axes)]
    for k, arr in enumerate(got):
        want = np.stack([p[k] for p in per])
        assert arr.shape == want.shape and arr.dtype == dtype, (arr.shape, arr.dtype, want.shape)
        np.testing.assert_allclose(arr, want, **_tol(dtype))
    if not fd:
        return got
    wrt = list(range(len(args))) if params is None else list(params)
    for i, ex in enumerate(_examples([a.astype(np.float64) for a in args], in_axes)):
        def scalar(*xs, ex=ex):
            full = list(ex)
            for j, x in zip(wrt, xs):
                full[j] = x
            return float(f(*[df.constant(a) for a in full]).numpy())
        num = numeric_grads(scalar, [ex[j] for j in wrt])
        for k, want in enumerate(num):
            np.testing.assert_allclose(got[k][i], want, rtol=1e-4 if dtype == np.float32 else 1e-6,
                                       atol=1e-4 if dtype == np.float32 else 1e-7)
    return got


def _grow(x, limit):
    """x * 1.5 (and a touch of sin) until it reaches limit: a trip count per example."""
    return df.while_loop(lambda y: y < limit, lambda y: (y * 1.5 + 0.05 * df.sin(y),), (x,))[0]


# trip counts 8, 5, 3, 1 and 0 (the last is past the limit already)
X = [0.3, 1.0, 2.2, 5.0, 7.0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_trip_count_differs_per_example(mode, dtype):
    f = lambda x, limit: df.square(_grow(x, limit))      # noqa: E731
    _check(f, [X, 6.0], (0, None), dtype, mode, params=[0])
    _check(f, [X, [6.0, 2.0, 9.0, 5.5, 7.5]], (0, 0), dtype, mode, params=[0])   # a limit each


@pytest.mark.parametrize("mode", MODES)
def test_the_counter_and_a_shared_loop_variable(mode):
    """A counter (int), a loop variable no example changes differently (w, shared until the
    masking makes it batched) and a batched one; gradients w.r.t. the shared w and x."""
    def f(w, x):
        i, a, y = df.while_loop(lambda i, a, y: y < 4.0,
                                lambda i, a, y: (i + 1, a * 1.1, y * a + 0.1 * df.cos(y)),
                                (0, w, x))
        return y * df.cast(i, y.dtype) + a
    _check(f, [1.3, [0.5, 1.0, 2.0, 3.9, 4.5]], (None, 0), np.float64, mode)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_a_shared_trip_count_with_batched_values(mode, dtype):
    """The condition reads only the counter: one count for all, the kept values batched."""
    def f(w, x):
        return df.reduce_sum(df.while_loop(lambda i, y: i < 4, lambda i, y: (i + 1, df.tanh(y * w) + y),
                                           (0, x))[1])
    rows = np.random.default_rng(1).normal(size=(3, 2))
    _check(f, [[0.7, -0.4], rows], (None, 0), dtype, mode)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_a_variable_read_in_the_body(mode, dtype):
    """Per-example gradients w.r.t. a variable the body reads (a tape inside the function)."""
    v = df.Variable(np.asarray([1.2, 0.9], dtype))

    def f(x):
        y = df.while_loop(lambda y: df.reduce_sum(y) < 5.0, lambda y: (y * v + 0.2,), (x,))[0]
        return df.reduce_sum(df.square(y))

    def g(x):
        with df.GradientTape() as tape:
            out = f(x)
        return tape.gradient(out, v)
    xs = np.asarray([[0.5, 0.6], [1.0, 2.0], [2.0, 2.5], [0.1, 0.2]], dtype)
    got = _run(df.vmap(g), mode, [df.constant(xs)]).numpy()
    want = np.stack([g(df.constant(x)).numpy() for x in xs])
    np.testing.assert_allclose(got, want, **_tol(dtype))
    v0 = v.numpy().astype(np.float64)
    for x, row in zip(xs.astype(np.float64), got):
        def scalar(vv, x=x):
            v.assign(vv.astype(dtype))
            try:
                y = x
                while y.sum() < 5.0:
                    y = y * vv + 0.2
                return np.sum(y * y)
            finally:
                v.assign(v0.astype(dtype))
        np.testing.assert_allclose(row, numeric_grads(scalar, [v0])[0], rtol=1e-4 if dtype == np.float32 else 1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_maximum_iterations_stops_some_examples(mode):
    def f(x):
        return df.while_loop(lambda y: y < 6.0, lambda y: (y * 1.5 + 0.05 * df.sin(y),), (x,),
                             maximum_iterations=3)[0] ** 2
    _check(f, [X], (0,), np.float64, mode)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_a_cond_in_the_body(mode, dtype):
    """A cond whose predicate differs per example and per iteration (its side outputs kept)."""
    def f(x):
        def body(i, y):
            y = df.cond(df.sin(y * 3.0) > 0.0, lambda: y * y * 0.5 + 1.0, lambda: df.exp(y * 0.3) + y)
            return i + 1, y
        return df.while_loop(lambda i, y: y < 8.0, body, (0, x))[1]
    _check(f, [[0.2, 1.1, 2.5, 6.0, 9.0]], (0,), dtype, mode)


@pytest.mark.parametrize("mode", MODES)
def test_values_past_an_example_s_end_never_reach_its_gradient(mode):
    """log(4 - y) is nan for an example past 4 (here one starting there, running no
    iteration): what the body computes for an example after its end is never read."""
    def f(x):
        return df.while_loop(lambda y: y < 3.0, lambda y: (y + 0.1 * df.log(4.0 - y) + 0.3,), (x,))[0]
    with np.errstate(invalid="ignore"):
        got = _check(f, [[0.1, 1.5, 2.9, 4.5]], (0,), np.float64, mode)
    assert np.all(np.isfinite(got[0]))


@pytest.mark.parametrize("mode", MODES)
def test_second_order(mode):
    """d2f/dx2 per example: the gradient of the reverse loop is batched the same way."""
    f = lambda x: df.square(_grow(x, 6.0))      # noqa: E731
    d1 = df.gradients_function(f)
    xs = np.asarray(X)
    got = _run(df.vmap(df.gradients_function(lambda x: d1(x)[0])), mode, [df.constant(xs)])[0].numpy()
    want = [df.gradients_function(lambda x: d1(x)[0])(df.constant(x))[0].numpy() for x in xs]
    np.testing.assert_allclose(got, want, rtol=1e-9)
    num = [numeric_grads(lambda v: float(d1(df.constant(v))[0].numpy()), [np.asarray(x)])[0] for x in xs]
    np.testing.assert_allclose(got, num, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_forward_mode_through_the_loop(mode):
    """A jvp per example (ForwardAccumulator: the while gradient's VJP differentiated)."""
    def jvp(x):
        with df.ForwardAccumulator(x, df.ones_like(x)) as acc:
            y = df.square(_grow(x, 6.0))
        return acc.jvp(y)
    xs = np.asarray(X)
    got = _run(df.vmap(jvp), mode, [df.constant(xs)]).numpy()
    want = [jvp(df.constant(x)).numpy() for x in xs]
    np.testing.assert_allclose(got, want, rtol=1e-9)
    tape = [df.gradients_function(lambda x: df.square(_grow(x, 6.0)))(df.constant(x))[0].numpy() for x in xs]
    np.testing.assert_allclose(got, tape, rtol=1e-9)


def test_the_batched_graph_keeps_one_loop_each_way_and_counts_per_example():
    """In a defun: one forward while (keeping values) and one reverse while, whatever the
    trip counts; numpy source export runs it too."""
    g = df.gradients_function(lambda x: df.square(_grow(x, 6.0)))
    cf = df.defun(df.vmap(g)).get_concrete_function(df.TensorSpec([5], df.float64))
    whiles = [n for n in cf.graph.nodes if n.type == "while"]
    assert len(whiles) == 2, [n.type for n in cf.graph.nodes]
    assert sorted(n.attrs["saves"] is None for n in whiles) == [False, True]
    xs = np.asarray(X)
    want = [g(df.constant(x))[0].numpy() for x in xs]
    np.testing.assert_allclose(_leaves(cf(xs))[0], want, rtol=1e-9)
    mod = types.ModuleType("vmapped_while_grad")
    exec(compile(df.export_numpy_source(cf), "vmapped_while_grad.py", "exec"), mod.__dict__)
    np.testing.assert_allclose(_leaves(mod.forward(xs))[0], want, rtol=1e-9)
