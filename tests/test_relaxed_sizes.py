"""A relaxed trace at a size not yet hot runs its plan for which of the call's unknown sizes
are equal (defun/trace_calls.py, graph/specialize.py's sizes_plan, graph/size_labels.py):
a gradient's sum to an equal shape goes away, a mean's gradient multiplies by its scalar,
and results are written over dead temporaries of provably the same shape. Sizes that
differ (0 and 1 among them, broadcast against each other) are never taken for equal."""
import re

import numpy as np
import pytest

import defun as df
from defun.graph.executor import compile_graph
from defun.graph.size_labels import LABEL_BASE, size_classes, size_labels
from defun.graph.specialize import sizes_plan
from defun.trace_calls import HOT_CALLS

f16, f32, f64 = np.float16, np.float32, np.float64
SIZES = [(1, 5), (5, 1), (0, 1), (1, 0), (0, 0), (1, 1), (3, 3), (4, 1), (1, 4), (2, 2)]
_REUSE = re.compile(r"^\s+(?:(v\d+) = )?k\d+\((v\d+)(?:, \w+)*?, (?:out=)?\2\)$", re.M)


def _relaxed(fn, *calls):
    """`fn` defun'd and called with each argument list of `calls`; its last trace."""
    f = df.defun(fn)
    for args in calls:
        f(*[df.constant(a) for a in args])
    return f, list(f._cache.values())[-1]


def _vec(n, seed=0, dtype=f32):
    return np.random.default_rng(seed * 101 + n).normal(size=(n,)).astype(dtype)


def _reused_lines(plan):
    return _REUSE.findall(plan.source)


def _two(a, b):
    return df.tanh(a) + df.tanh(b)


# ====================================================================== the labels
def test_classes_are_the_first_equal_sizes_positions():
    assert size_classes((5, 5, 3)) == (0, 0, 2)
    assert size_classes((0, 1, 1, 0)) == (0, 1, 1, 0)
    assert size_classes(()) == ()


def test_labels_follow_sizes_through_matmul_and_broadcasting_but_never_join_two():
    _, trace = _relaxed(lambda x, w, y: (df.tanh(x @ w) + 1.0, x @ w + y[:, None]),
                        (np.ones((2, 3), f32), np.ones((3, 4), f32), np.ones(2, f32)),
                        (np.ones((3, 3), f32), np.ones((3, 4), f32), np.ones(3, f32)))
    g = trace.graph
    x, y = g.inputs[0], g.inputs[2]
    same = size_labels(g, (0, 0))
    apart = size_labels(g, (0, 1))
    first, second = g.outputs
    assert same[id(x)][0] == same[id(y)][0] >= LABEL_BASE
    assert same[id(first)] == same[id(second)] == (same[id(x)][0], 4)
    # x's size and y's are two sizes: their broadcast is a size of its own (either could be 1)
    assert apart[id(first)] == (apart[id(x)][0], 4)
    assert apart[id(second)][0] not in (apart[id(x)][0], apart[id(y)][0])
    assert apart[id(x)][0] != apart[id(y)][0]


def test_a_size_computed_from_a_label_is_not_that_label():
    _, trace = _relaxed(lambda a: df.concat([a, a[:1]], axis=0) * 2.0, (_vec(3),), (_vec(4),))
    labels = size_labels(trace.graph, (0,))
    a, out = trace.graph.inputs[0], trace.graph.outputs[0]
    assert labels[id(out)][0] != labels[id(a)][0]


# ====================================================================== reuse, never aliasing
def test_results_are_written_over_temporaries_only_of_provably_equal_sizes():
    _, trace = _relaxed(_two, (_vec(2), _vec(2, 1)), (_vec(3), _vec(3, 1)))
    equal, apart = (compile_graph(trace.graph, sizes=c) for c in ((0, 0), (0, 1)))
    general = compile_graph(trace.graph)
    assert _reused_lines(equal) and not _reused_lines(apart) and not _reused_lines(general)
    for n, m in SIZES:
        a, b = _vec(n), _vec(m, 1)
        plan = equal if n == m else apart
        (got,) = plan.run(a, b)
        np.testing.assert_allclose(got, np.tanh(a) + np.tanh(b), rtol=1e-6)
        assert got.shape == np.broadcast_shapes(a.shape, b.shape)


def test_calls_at_sizes_0_and_1_broadcast_against_others_give_numpys_values_and_gradients():
    def loss(a, b):
        return df.reduce_sum(df.square(df.tanh(a) + df.tanh(b)))

    step = df.defun(df.value_and_gradients_function(loss, [0, 1]))
    for n, m in [(2, 2), (3, 3)] + SIZES + SIZES:
        a, b = _vec(n).astype(f64), _vec(m, 1).astype(f64)
        value, (ga, gb) = step(df.constant(a), df.constant(b))
        s = np.tanh(a) + np.tanh(b)     # broadcast: the gradient sums over the other's size
        d = 2 * s
        da, db = d * (1 - np.tanh(a) ** 2), d * (1 - np.tanh(b) ** 2)
        np.testing.assert_allclose(value.numpy(), (s * s).sum(), rtol=1e-12)
        np.testing.assert_allclose(ga.numpy(), da.sum(axis=0, keepdims=True) if n == 1 and m != 1 else da,
                                   rtol=1e-12)
        np.testing.assert_allclose(gb.numpy(), db.sum(axis=0, keepdims=True) if m == 1 and n != 1 else db,
                                   rtol=1e-12)
    calls = list(step._cache.values())[-1]._calls
    assert step.trace_count == 2 and {(0, 0), (0, 1)} <= set(calls._patterns)


# ====================================================================== what the plan drops
def _mean_loss(w, b, x, y):
    h = df.tanh(x @ w + b)
    return df.reduce_mean(df.square(df.reduce_sum(h, axis=1) - y))


W = np.random.default_rng(7).normal(size=(3, 4)).astype(f32)
B = np.random.default_rng(8).normal(size=(4,)).astype(f32)


def _rows(n, dtype=f32):
    return np.random.default_rng(n).normal(size=(n, 3)).astype(dtype), np.arange(n, dtype=dtype)


def test_the_plan_for_equal_sizes_drops_sums_to_equal_shapes_and_the_broadcast_mean():
    step = df.defun(df.value_and_gradients_function(_mean_loss, [0, 1]))
    for n in (2, 3):
        step(df.constant(W), df.constant(B), *map(df.constant, _rows(n)))
    trace = list(step._cache.values())[-1]
    plan, general = sizes_plan(trace.graph, (0, 0), "numpy"), trace._fn.plan
    def scalar_fills(g):
        return [n for n in g.nodes if n.op.name == "broadcast_like" and tuple(n.inputs[0].shape) == ()]

    assert "sum_to_like" not in {n.op.name for n in plan.graph.nodes} and not scalar_fills(plan.graph)
    assert "sum_to_like" in {n.op.name for n in general.graph.nodes} and scalar_fills(general.graph)
    assert len(_reused_lines(plan)) > len(_reused_lines(general)) == 0
    # a mean of everything divides by its size cast once (no float64 division by 1 first)
    size_users = [n.op.name for n in plan.graph.nodes for t in n.inputs if t.node.op.name == "size"]
    assert size_users == ["cast"]
    for n in (0, 1, 4, 7):
        x, y = _rows(n)
        with np.errstate(all="ignore"):     # the mean of nothing: nan, as numpy's
            want, got = general.run(W, B, x, y), plan.run(W, B, x, y)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [f16, f32, f64])
def test_a_relaxed_mean_gradient_at_new_sizes_matches_numpy(dtype):
    step = df.defun(df.value_and_gradients_function(lambda x: df.reduce_mean(x * x), [0]))
    tol = {f16: 2e-3, f32: 1e-6, f64: 1e-12}[dtype]
    for n in (2, 3, 1, 5, 8, 1, 13):
        x = _vec(n, 3, dtype)
        value, (g,) = step(df.constant(x))
        assert g.dtype == dtype and value.dtype == dtype
        np.testing.assert_allclose(g.numpy(), (2 * x.astype(f64) / n).astype(dtype), rtol=tol, atol=tol)
        np.testing.assert_allclose(value.numpy(), (x.astype(f64) ** 2).mean(), rtol=10 * tol, atol=tol)
    assert step.trace_count == 2


@pytest.mark.filterwarnings("ignore::defun.RetracingWarning")
def test_the_mlp_step_at_new_sizes_runs_the_pattern_plan_and_equals_the_exact_traces():
    def loss(w, b, x, y):
        return df.reduce_mean(df.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x @ w + b))

    relaxed = df.defun(df.value_and_gradients_function(loss, [0, 1]))
    exact = df.defun(df.value_and_gradients_function(loss, [0, 1]), reduce_retracing=False)
    w, b = df.constant(W), df.constant(B)
    for n in (2, 3, 1, 9, 4, 6, 5):
        x = df.constant(_rows(n)[0])
        y = df.constant(np.arange(n, dtype=np.int32) % 4)
        (v1, g1), (v2, g2) = relaxed(w, b, x, y), exact(w, b, x, y)
        for got, want in zip([v1, *g1], [v2, *g2]):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
    calls = list(relaxed._cache.values())[-1]._calls
    assert relaxed.trace_count == 2 and set(calls._patterns) == {(0, 0)} and not calls._specialized
    assert HOT_CALLS > 1


def test_a_scalar_broadcast_to_one_size_is_not_multiplied_as_a_scalar_into_another():
    # d/da sum(a * b) is sum_to_like(fill(1, a * b) * b, a): the fill has the broadcast's
    # size, which is b's only when a's is 1 or equal
    step = df.defun(df.value_and_gradients_function(lambda a, b: df.reduce_sum(a * b), [0, 1]))
    for n, m in [(2, 2), (3, 3)] + SIZES:
        a, b = _vec(n).astype(f64), _vec(m, 1).astype(f64)
        value, (ga, gb) = step(df.constant(a), df.constant(b))
        ones = np.ones(np.broadcast_shapes(a.shape, b.shape))
        np.testing.assert_allclose(value.numpy(), (a * b).sum(), rtol=1e-12)
        np.testing.assert_allclose(ga.numpy(), (ones * b).sum(axis=0, keepdims=True) if n == 1 and m != 1
                                   else ones * b, rtol=1e-12)
        np.testing.assert_allclose(gb.numpy(), (ones * a).sum(axis=0, keepdims=True) if m == 1 and n != 1
                                   else ones * a, rtol=1e-12)


def test_the_numba_backend_runs_the_plans_for_equal_and_unequal_sizes():
    pytest.importorskip("numba")

    def loss(a, b):
        return df.reduce_mean(df.square(df.tanh(a) * 2.0 + df.exp(-b)))

    fast = df.defun(df.value_and_gradients_function(loss, [0, 1]), backend="numba")
    plain = df.defun(df.value_and_gradients_function(loss, [0, 1]))
    for n, m in [(2, 2), (3, 3)] + SIZES:
        a, b = df.constant(_vec(n).astype(f64)), df.constant(_vec(m, 1).astype(f64))
        (v1, g1), (v2, g2) = fast(a, b), plain(a, b)
        for got, want in zip([v1, *g1], [v2, *g2]):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-300)
    calls = list(fast._cache.values())[-1]._calls
    assert fast.trace_count == 2 and {(0, 0), (0, 1)} <= set(calls._patterns)


def test_a_fill_read_by_more_than_the_multiplies_rewritten_stays_in_the_plan():
    from defun.runtime.execute import run_op
    from defun.runtime.registry import get

    def f(x, y):
        fill = df.expand_dims(run_op(get("broadcast_like"), [df.reduce_sum(x) * 0.5, x]), 1)
        return fill * y[:, None], fill + 1.0     # the multiply is rewritten, the add keeps the fill

    g = df.defun(f)
    for n in (2, 3):
        g(df.constant(_vec(n)), df.constant(_vec(n, 1)))
    trace = list(g._cache.values())[-1]
    plan = sizes_plan(trace.graph, (0, 0), "numpy")
    ops = [n.op.name for n in plan.graph.nodes]
    assert ops.count("broadcast_like") == 1
    assert any(n.op.name == "multiply" and tuple(n.outputs[0].shape) == (None, 1) and
               () in [tuple(t.shape) for t in n.inputs] for n in plan.graph.nodes)    # by the scalar
    for n in (0, 1, 4):
        x, y = _vec(n), _vec(n, 1)
        product, plus = plan.run(x, y)
        fill = np.full((n, 1), np.float32(x.sum()) * np.float32(0.5))
        np.testing.assert_allclose(product, fill * y[:, None], rtol=1e-6)
        np.testing.assert_allclose(plus, fill + 1, rtol=1e-6)
        assert product.shape == plus.shape == (n, 1)


def test_past_max_patterns_of_equal_sizes_the_traces_own_plan_runs():
    from itertools import product

    from defun.trace_calls import MAX_PATTERNS

    def f(a, b, c, d):
        return df.reduce_sum(df.tanh(a)) + df.reduce_sum(b * 2.0) + df.reduce_sum(c) - df.reduce_sum(d)

    g = df.defun(f)
    sizes = [s for s in product((1, 2, 3, 4), repeat=4)]       # 15 patterns of equal sizes
    for s in [(5, 6, 7, 8)] + sizes:
        args = [_vec(n, k) for k, n in enumerate(s)]
        np.testing.assert_allclose(g(*map(df.constant, args)).numpy(),
                                   np.tanh(args[0]).sum() + (args[1] * 2).sum() + args[2].sum() - args[3].sum(),
                                   rtol=1e-5, atol=1e-6)
    calls = list(g._cache.values())[-1]._calls
    assert g.trace_count == 2 and len(calls._patterns) == MAX_PATTERNS
    assert len({size_classes(s) for s in sizes}) == 15 and calls.fn._run is not None
