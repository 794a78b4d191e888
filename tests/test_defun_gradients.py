"""Gradients through defun: tapes outside and inside a traced function, against finite differences."""
import numpy as np
import pytest

import defun as df
from defun_helpers import F64, assert_close, f64, nested_gradients, numeric_grads, val


# ====================================================================== gradients through defun
def _loss(x, w):
    return df.reduce_sum(df.tanh(x @ w) * x[:, :1])


def test_gradient_wrt_arguments_matches_eager_and_finite_differences():
    rng = np.random.RandomState(0)
    x = rng.randn(3, 2)
    w = rng.randn(2, 4)
    g_defun = df.gradients_function(df.defun(_loss))(f64(x), f64(w))
    g_eager = df.gradients_function(_loss)(f64(x), f64(w))
    g_num = numeric_grads(lambda a, b: _loss(f64(a), f64(b)), [x, w])
    for gd, ge, gn in zip(g_defun, g_eager, g_num):
        assert_close(gd, ge, rtol=1e-10)
        assert_close(gd, gn, rtol=1e-5, atol=1e-7)


def test_gradient_with_tape_through_defun():
    f = df.defun(lambda x: df.reduce_sum(df.exp(x) * df.sin(x)))
    x = f64([0.1, -0.7, 1.3])
    with df.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    g = tape.gradient(y, x)
    xs = val(x)
    assert_close(g, np.exp(xs) * (np.sin(xs) + np.cos(xs)), rtol=1e-10)


def test_gradient_wrt_captured_tensor():
    c = f64([1.0, 2.0, 3.0])
    f = df.defun(lambda x: df.reduce_sum(df.square(x * c)))
    x = f64([0.5, -1.0, 2.0])
    with df.GradientTape() as tape:
        tape.watch(c)
        y = f(x)
    g = tape.gradient(y, c)
    assert g is not None
    assert_close(g, 2 * val(x) ** 2 * val(c), rtol=1e-10)


def test_gradient_wrt_captured_variable_implicit_gradients():
    rng = np.random.RandomState(1)
    w = df.Variable(rng.randn(3, 2))
    b = df.Variable(rng.randn(2))
    x = f64(rng.randn(4, 3))

    def loss(x):
        return df.reduce_mean(df.square(df.tanh(x @ w + b)))

    eager = df.implicit_gradients(loss)(x)
    traced = df.implicit_gradients(df.defun(loss))(x)
    assert len(traced) == 2
    by_var = {id(v): g for g, v in traced}
    for g, v in eager:
        assert id(v) in by_var
        assert_close(by_var[id(v)], g, rtol=1e-10)

    w0, b0 = w.numpy().copy(), b.numpy().copy()

    def np_loss(wa, ba):
        w.assign(wa)
        b.assign(ba)
        return loss(x)

    gw, gb = numeric_grads(np_loss, [w0, b0])
    w.assign(w0)
    b.assign(b0)
    assert_close(by_var[id(w)], gw, rtol=1e-5, atol=1e-8)
    assert_close(by_var[id(b)], gb, rtol=1e-5, atol=1e-8)


def test_gradient_of_gather_on_variable_through_defun():
    table = df.Variable(np.arange(12, dtype=F64).reshape(4, 3))
    idx = df.constant(np.array([0, 2, 2], dtype=np.int32))

    def loss(i):
        return df.reduce_sum(df.square(df.gather(table, i)))

    eager = df.implicit_gradients(loss)(idx)
    traced = df.implicit_gradients(df.defun(loss))(idx)
    expected = np.zeros((4, 3))
    t = table.numpy()
    for i in (0, 2, 2):
        expected[i] += 2 * t[i]
    assert_close(eager[0][0], expected)
    assert_close(traced[0][0], expected)
    assert traced[0][1] is table


def test_same_tensor_passed_twice_is_differentiated_per_position():
    f = df.defun(lambda x, y: x * y * y)
    one = df.constant(2.0)
    g = df.gradients_function(f)(one, one)
    assert [float(t) for t in g] == [4.0, 8.0]


def test_second_and_third_order_gradients_through_defun():
    f = df.defun(lambda x: df.sin(x) * x)
    x = f64(0.7)
    with df.GradientTape() as t3:
        t3.watch(x)
        with df.GradientTape() as t2:
            t2.watch(x)
            with df.GradientTape() as t1:
                t1.watch(x)
                y = f(x)
            d1 = t1.gradient(y, x)
        d2 = t2.gradient(d1, x)
    d3 = t3.gradient(d2, x)
    s, c = np.sin(0.7), np.cos(0.7)
    assert float(d1) == pytest.approx(c * 0.7 + s, rel=1e-10)
    assert float(d2) == pytest.approx(-s * 0.7 + 2 * c, rel=1e-10)
    assert float(d3) == pytest.approx(-c * 0.7 - 3 * s, rel=1e-10)


def test_second_order_gradient_of_vector_function_matches_eager():
    def g(x):
        return df.reduce_sum(df.tanh(x) * df.exp(x * 0.5))

    x = f64([0.3, -0.2, 1.1])

    def hess_diag(fn):
        return nested_gradients(fn, x, df.reduce_sum)

    dy_e, h_e = hess_diag(g)
    dy_d, h_d = hess_diag(df.defun(g))
    assert_close(dy_d, dy_e, rtol=1e-10)
    assert_close(h_d, h_e, rtol=1e-10)


def test_defun_call_is_one_tape_entry():
    def body(x):
        for _ in range(10):
            x = df.tanh(x) * 1.01 + 0.1
        return df.reduce_sum(x)

    f = df.defun(body)
    x = f64([0.1, 0.2])
    with df.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    assert len(tape._tape.entries) == 1
    with df.GradientTape() as eager_tape:
        eager_tape.watch(x)
        y_e = body(x)
    assert len(eager_tape._tape.entries) > 10
    assert_close(tape.gradient(y, x), eager_tape.gradient(y_e, x), rtol=1e-10)
    assert float(y) == pytest.approx(float(y_e), rel=1e-12)


def test_nested_defun_becomes_call_op_and_gradients_flow():
    inner_calls = []

    @df.defun
    def inner(x):
        inner_calls.append(1)
        return df.sin(x) * x

    @df.defun
    def outer(x):
        return df.reduce_sum(inner(x) * 2.0 + inner(x * 0.5))

    x = f64([0.3, 1.2])
    cf = outer.get_concrete_function(x)
    node_ops = [n.op for n in cf.graph.nodes] if hasattr(cf.graph, "nodes") else None
    text = str(cf)
    assert (node_ops is not None and "call" in node_ops) or "call" in text
    g = df.gradients_function(outer)(x)[0]

    def eager_outer(x):
        return df.reduce_sum(df.sin(x) * x * 2.0 + df.sin(x * 0.5) * x * 0.5)

    assert float(outer(x)) == pytest.approx(float(eager_outer(x)), rel=1e-12)
    assert_close(g, df.gradients_function(eager_outer)(x)[0], rtol=1e-10)
    gn = numeric_grads(lambda a: outer(f64(a)), [val(x)])[0]
    assert_close(g, gn, rtol=1e-6)


def test_training_step_defun_equals_eager_step():
    rng = np.random.RandomState(2)
    w0 = rng.randn(4, 3)
    b0 = rng.randn(3)
    x = f64(rng.randn(5, 4))
    y = f64(np.eye(3)[[0, 1, 2, 1, 0]])

    def run(use_defun):
        w = df.Variable(w0.copy())
        b = df.Variable(b0.copy())

        def loss(x, y):
            logits = df.tanh(x @ w + b)
            return df.reduce_mean(df.softmax_cross_entropy_with_logits(labels=y, logits=logits))

        step_vg = df.implicit_value_and_gradients(loss)
        step = df.defun(lambda x, y: step_vg(x, y)) if use_defun else step_vg
        losses = []
        for _ in range(3):
            value, grads = step(x, y)
            losses.append(float(value))
            for g, v in grads:
                v.assign_sub(0.5 * val(g))
        return losses, w.numpy(), b.numpy(), step

    l_e, w_e, b_e, _ = run(False)
    l_d, w_d, b_d, step = run(True)
    assert step.trace_count == 1
    np.testing.assert_allclose(l_d, l_e, rtol=1e-10)
    np.testing.assert_allclose(w_d, w_e, rtol=1e-10)
    np.testing.assert_allclose(b_d, b_e, rtol=1e-10)
    assert l_e[2] < l_e[0]


def test_gradients_taken_inside_traced_function():
    @df.defun
    def with_tape(x):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = df.reduce_sum(x * x * x)
        return tape.gradient(y, x)

    @df.defun
    def with_gradients_function(x, w):
        return df.gradients_function(lambda a, b: df.reduce_sum(df.tanh(a * b)))(x, w)

    x = f64([1.0, -2.0, 0.5])
    assert_close(with_tape(x), 3 * val(x) ** 2, rtol=1e-12)
    w = f64([0.3, 0.4, -0.1])
    gx, gw = with_gradients_function(x, w)
    sech2 = 1 - np.tanh(val(x) * val(w)) ** 2
    assert_close(gx, sech2 * val(w), rtol=1e-10)
    assert_close(gw, sech2 * val(x), rtol=1e-10)
    assert with_tape.trace_count == 1


def test_gradient_of_gradient_computed_inside_defun():
    @df.defun
    def grad_of_cube(x):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = x * x * x
        return tape.gradient(y, x)

    x = f64(1.5)
    with df.GradientTape() as outer:
        outer.watch(x)
        g = grad_of_cube(x)
    assert float(g) == pytest.approx(3 * 1.5 ** 2)
    assert float(outer.gradient(g, x)) == pytest.approx(6 * 1.5)
