"""Matmul layout (graph/matmul_layout.py): every candidate layout equals np.matmul within
rounding; the default kernel itself is kept where nothing is measured (no transpose, tiny or
huge work, unknown sizes, batches, integers) or nothing wins; a chosen layout runs in the
plans of both backends, gives the default's values (eager, numpy and numba backends, and
reloaded from JSON) and is measured once per key."""
import numpy as np
import pytest

import defun as df
from defun.graph import matmul_layout as ml
from defun.graph.backends import get_backend


def _node(shape_a, shape_b, ta=False, tb=False, dtype=np.float32):
    a = df.TensorSpec(shape_a, dtype)
    b = df.TensorSpec(shape_b, dtype)
    f = df.defun(lambda x, y: df.matmul(x, y, transpose_a=ta, transpose_b=tb))
    graph = f.get_concrete_function(a, b).graph
    return next(n for n in graph.nodes if n.op.name == "matmul")


def _assert_within_rounding(got, want, a, b):
    """|got - want| within the rounding bound of a dot product: k eps sum |a_ip b_pj|."""
    k, eps = a.shape[1], np.finfo(got.dtype).eps
    bound = k * eps * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_every_candidate_equals_np_matmul_within_rounding(ta, tb, dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 30) if ta else (30, 40)).astype(dtype)
    b = rng.standard_normal((20, 40) if tb else (40, 20)).astype(dtype)
    A, B = (a.T if ta else a), (b.T if tb else b)
    want = np.matmul(A, B)
    options = ml.candidates(ta, tb)
    assert options
    for name, fn in options.items():
        got = fn(a, b)
        assert got.flags.c_contiguous and got.dtype == dtype, name
        _assert_within_rounding(got, want, A, B)
        # strided (non-contiguous) inputs too
        a2, b2 = np.repeat(a, 2, axis=1)[:, ::2], np.repeat(b, 2, axis=0)[::2]
        _assert_within_rounding(fn(a2, b2), want, A, B)


@pytest.mark.parametrize("shapes", [
    ((64, 256), (256, 256), False, False, np.float32),   # no transpose: nothing to copy
    ((8, 10), (32, 10), False, True, np.float32),        # tiny
    ((1024, 1024), (1024, 1024), False, True, np.float32),   # huge (2**30 multiply-adds)
    ((None, 10), (256, 10), False, True, np.float32),    # unknown size
    ((3, 64, 10), (256, 10), False, True, np.float32),   # batched
    ((64, 10), (256, 10), False, True, np.int32),        # integers
])
def test_nodes_not_measured_keep_the_default_kernel_itself(shapes, monkeypatch):
    calls = []
    monkeypatch.setattr(ml, "_measure", lambda *a: calls.append(a) or "copy B")
    node = _node(*shapes)
    kernel = node.op.bind(node.attrs)
    assert ml.choose(node, kernel) is kernel
    assert calls == []


def test_the_default_kept_when_nothing_wins_and_measured_once(monkeypatch):
    calls = []
    monkeypatch.setattr(ml, "_table", {})
    monkeypatch.setattr(ml, "_measure", lambda *a: calls.append(a) or "default")
    node = _node((64, 10), (256, 10), tb=True)
    kernel = node.op.bind(node.attrs)
    assert ml.choose(node, kernel) is kernel
    assert ml.choose(node, kernel) is kernel
    assert len(calls) == 1 and list(ml.table().values()) == ["default"]


def test_measuring_picks_a_layout_only_under_the_margin(monkeypatch):
    a, b = np.zeros((64, 10), np.float32), np.zeros((256, 10), np.float32)
    slow, fast = (lambda a, b: None), (lambda a, b: None)
    times = {slow: 1.0, fast: 0.5}
    monkeypatch.setattr(ml, "_best_time", lambda fn, a, b: times[fn])
    assert ml._measure(slow, {"copy B": fast}, a, b) == "copy B"
    times[fast] = 0.95      # within the margin: not worth a different kernel
    assert ml._measure(slow, {"copy B": fast}, a, b) == "default"


@pytest.mark.parametrize("layout", ["copy A", "copy B", "copy A and B"])
def test_a_chosen_layout_runs_in_both_backends_with_the_default_values(layout, monkeypatch):
    monkeypatch.setattr(ml, "_table", {})
    monkeypatch.setattr(ml, "_measure", lambda kernel, options, a, b: layout)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    w = rng.standard_normal((80, 64)).astype(np.float32)

    def f(x, w):
        return df.tanh(df.matmul(x, w, transpose_a=True, transpose_b=True)) * 2.0
    want = np.tanh(x.T @ w.T) * 2.0
    eager = f(df.constant(x), df.constant(w)).numpy()
    backends = ["numpy"] + (["numba"] if "numba" in df.backends() else [])
    for backend in backends:
        got = df.defun(f, backend=backend)(df.constant(x), df.constant(w)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    assert list(ml.table().values()) == [layout]
    node = _node((64, 96), (80, 64), True, True)
    chosen = get_backend("numpy").kernel(node)[0]
    assert chosen.__code__ is ml.candidates(True, True)[layout].__code__
    for backend in backends:        # reloaded from JSON
        budgets = {} if backend == "numpy" else {"max_bytes": None, "max_iterations": None,
                                                 "max_operations": None}
        loaded = df.load_json(df.export_json(df.defun(f).get_concrete_function(x, w)), backend=backend,
                              **budgets)
        np.testing.assert_allclose(np.asarray(loaded(x, w)), want, rtol=1e-5, atol=1e-5)
