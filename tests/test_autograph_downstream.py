"""Converted control flow is ordinary cond/while nodes: gradients (first and second order,
tape and forward mode), df.vmap, rematerialize, the numba backend, JSON export and reload,
numpy source and ONNX all give what the same Python gives run eagerly."""
import json

import numpy as np
import pytest

import defun as df
from defun_helpers import nested_gradients


def model(x, w):
    """A `for` over x's rows, an `if` on a tensor inside it, a `while` and a conditional expression."""
    s = df.zeros([], x.dtype)
    for row in x:
        v = df.reduce_sum(row * w)
        if v > 0.0:
            s = s + v * v
        else:
            s = s - 0.5 * v
    while s > 10.0:
        s = s * 0.5
    return s * 2.0 if df.reduce_sum(w) > 0.0 else s


X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5], [-2.0, 1.0, 0.5], [0.3, 0.3, 0.3]])
W = np.array([0.7, -0.2, 0.4])


def f64(a):
    return df.constant(np.asarray(a, np.float64))


def tape_grads(fn, x, w):
    x, w = f64(x), f64(w)
    with df.GradientTape() as tape:
        tape.watch([x, w])
        y = fn(x, w)
    return [g.numpy() for g in tape.gradient(y, [x, w])]


def test_the_converted_model_is_one_loop_per_loop():
    cf = df.defun(model).get_concrete_function(f64(X), f64(W))
    ops = [n.op.name for n in cf.graph.nodes]
    assert ops.count("while") == 2 and ops.count("cond") == 1


@pytest.mark.parametrize("w", [W, -W])
def test_value_and_first_order_gradients_match_eager(w):
    g = df.defun(model)
    np.testing.assert_allclose(g(f64(X), f64(w)).numpy(), model(f64(X), f64(w)).numpy(), rtol=1e-12)
    for got, want in zip(tape_grads(g, X, w), tape_grads(model, X, w)):
        np.testing.assert_allclose(got, want, rtol=1e-10)
    # and against central differences
    eps, base = 1e-6, tape_grads(g, X, w)[1]
    for k in range(3):
        d = np.zeros(3)
        d[k] = eps
        fd = (model(f64(X), f64(w + d)).numpy() - model(f64(X), f64(w - d)).numpy()) / (2 * eps)
        np.testing.assert_allclose(base[k], fd, rtol=1e-5, atol=1e-8)


def test_second_order_gradients_match_eager():
    def hessian_row_sums(fn):
        x, w = f64(X), f64(W)
        return nested_gradients(lambda w: fn(x, w), w, combine=df.reduce_sum)[1].numpy()
    np.testing.assert_allclose(hessian_row_sums(df.defun(model)), hessian_row_sums(model), rtol=1e-10)


def test_forward_mode_matches_eager():
    def jvp(fn):
        x, w = f64(X), f64(W)
        with df.ForwardAccumulator(w, f64([1.0, -2.0, 0.5])) as acc:
            y = fn(x, w)
        return acc.jvp(y).numpy()
    np.testing.assert_allclose(jvp(df.defun(model)), jvp(model), rtol=1e-10)


def test_vmap_selects_per_example():
    ws = np.stack([W, -W, 3 * W, np.zeros(3)])
    got = df.vmap(df.defun(model), in_axes=(None, 0))(f64(X), f64(ws)).numpy()
    want = [model(f64(X), f64(w)).numpy() for w in ws]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_rematerialize_gives_the_same_gradients():
    got = tape_grads(df.defun(model, rematerialize=True), X, W)
    for a, b in zip(got, tape_grads(model, X, W)):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_numba_backend():
    pytest.importorskip("numba")
    g = df.defun(model, backend="numba")
    for w in (W, -W):
        np.testing.assert_allclose(g(f64(X), f64(w)).numpy(), model(f64(X), f64(w)).numpy(), rtol=1e-12)


def test_json_export_and_reload():
    cf = df.defun(model).get_concrete_function(f64(X), f64(W))
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    for w in (W, -W):
        np.testing.assert_allclose(np.asarray(loaded(X, w)), model(f64(X), f64(w)).numpy(), rtol=1e-12)


def test_numpy_source():
    cf = df.defun(model).get_concrete_function(f64(X), f64(W))
    ns = {}
    exec(compile(df.export_numpy_source(cf), "<model>", "exec"), ns)
    for w in (W, -W):
        np.testing.assert_allclose(ns["forward"](X, w)[0], model(f64(X), f64(w)).numpy(), rtol=1e-12)


def test_onnx_if_and_loop():
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    x32, w32 = X.astype(np.float32), W.astype(np.float32)
    cf = df.defun(model).get_concrete_function(df.constant(x32), df.constant(w32))
    proto = df.export_onnx(cf)
    kinds = {n.op_type for n in proto.graph.node}
    assert {"Loop", "If"} <= kinds
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for w in (w32, -w32):
        out = sess.run(None, {i.name: v for i, v in zip(sess.get_inputs(), (x32, w))})[0]
        np.testing.assert_allclose(out, model(df.constant(x32), df.constant(w)).numpy(), rtol=1e-5)


def collect(x, w):
    """A list appended to once per row (on either branch), stacked after the loop."""
    out = []
    for row in x:
        if df.reduce_sum(row * w) > 0:
            out.append(row * w)
        else:
            out.append(-row)
    return df.reduce_sum(df.stack(out) * df.stack(out))


def test_a_collected_list_is_one_loop_node_and_differentiable():
    cf = df.defun(collect).get_concrete_function(f64(X), f64(W))
    assert [n.op.name for n in cf.graph.nodes].count("while") == 1
    for got, want in zip(tape_grads(df.defun(collect), X, W), tape_grads(collect, X, W)):
        np.testing.assert_allclose(got, want, rtol=1e-10)


def test_a_collected_list_in_every_export_and_vmap():
    want = [collect(f64(X), f64(w)).numpy() for w in (W, -W)]
    cf = df.defun(collect).get_concrete_function(f64(X), f64(W))
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    ns = {}
    exec(compile(df.export_numpy_source(cf), "<collect>", "exec"), ns)
    for w, expected in zip((W, -W), want):
        np.testing.assert_allclose(np.asarray(loaded(X, w)), expected, rtol=1e-12)
        np.testing.assert_allclose(ns["forward"](X, w)[0], expected, rtol=1e-12)
    got = df.vmap(df.defun(collect), in_axes=(None, 0))(f64(X), f64(np.stack([W, -W]))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    if pytest.importorskip("numba"):
        np.testing.assert_allclose(df.defun(collect, backend="numba")(f64(X), f64(W)).numpy(), want[0], rtol=1e-12)


def test_a_list_collected_in_a_while_is_differentiable():
    def f(x, n):
        out = []
        i = 0
        while i < n:
            out.append(x * df.cast(i, x.dtype))
            i += 1
        return df.reduce_sum(df.stack(out) ** 2)
    x, n = f64([1.0, 2.0]), df.constant(4)

    def grad(fn):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = fn(x, n)
        return y.numpy(), tape.gradient(y, x).numpy()
    (got_y, got_g), (want_y, want_g) = grad(df.defun(f)), grad(f)
    np.testing.assert_allclose(got_y, want_y, rtol=1e-12)
    np.testing.assert_allclose(got_g, want_g, rtol=1e-12)


def test_vmap_over_the_rows_a_loop_walks():
    def f(x):
        s = df.zeros([], x.dtype)
        for row in x:
            if df.reduce_sum(row) > 0:          # differs per example and per row
                s = s + df.reduce_sum(row * row)
        while s > 5.0:                           # a trip count per example
            s = s * 0.5
        return s
    xs = np.random.default_rng(0).standard_normal((5, 4, 2))
    got = df.vmap(df.defun(f))(f64(xs)).numpy()
    np.testing.assert_allclose(got, [f(f64(x)).numpy() for x in xs], rtol=1e-12)


def checked(x):
    assert df.reduce_sum(x) > 0, "needs a positive sum"
    return x * 2.0


def test_a_converted_assert_checks_on_every_backend_and_export():
    cf = df.defun(checked).get_concrete_function(f64([1.0]))
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    ns = {}
    exec(compile(df.export_numpy_source(cf), "<checked>", "exec"), ns)
    runs = [lambda v: df.defun(checked)(f64(v)), lambda v: loaded(np.asarray(v)),
            lambda v: ns["forward"](np.asarray(v))[0]]
    if pytest.importorskip("numba"):
        runs.append(lambda v: df.defun(checked, backend="numba")(f64(v)))
    for run in runs:
        np.testing.assert_allclose(np.asarray(run([1.5])), [3.0])
        with pytest.raises(Exception, match="needs a positive sum") as info:   # numpy source: its own class
            run([-1.5])
        assert type(info.value).__name__ == "InvalidArgumentError"
