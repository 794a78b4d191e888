"""The functional gradient helpers, stop_recording, custom_gradient and record_operation."""
import numpy as np
import pytest

import defun as df
from defun_helpers import val


# ------------------------------------------------------------------ functional helpers
def test_same_tensor_passed_twice_is_differentiated_per_position():
    one = df.constant(1.0)
    grads = df.gradients_function(lambda x, y: x * y)(one, one)
    assert [float(g) for g in grads] == [1.0, 1.0]
    two = df.constant(2.0)
    grads = df.gradients_function(lambda x, y: x * y * y)(two, two)
    assert [float(g) for g in grads] == [4.0, 8.0]


def test_gradients_function_with_params_selects_arguments():
    f = lambda x, y, z: x * y * y * z
    grads = df.gradients_function(f, params=[1, 2])(2.0, 3.0, 5.0)
    assert len(grads) == 2
    assert float(grads[0]) == pytest.approx(2 * 2.0 * 3.0 * 5.0)
    assert float(grads[1]) == pytest.approx(2.0 * 9.0)


def test_value_and_gradients_function():
    value, grads = df.value_and_gradients_function(lambda x, y: x * y + x)(2.0, 5.0)
    assert float(value) == pytest.approx(12.0)
    assert [float(g) for g in grads] == [6.0, 2.0]


def test_gradients_function_names_the_unconnected_argument():
    def f(alpha, beta):
        return alpha * 2.0
    with pytest.raises(ValueError, match="beta"):
        df.gradients_function(f)(1.0, 2.0)


def test_differentiated_function_returning_none_raises():
    def f(x):
        x * 2.0
    with pytest.raises(ValueError, match="None"):
        df.gradients_function(f)(1.0)
    with pytest.raises(ValueError, match="None"):
        df.value_and_gradients_function(f)(1.0)


def test_gradients_function_does_not_leave_a_tape_active():
    from defun.runtime.context import state
    df.gradients_function(lambda x: x * x)(1.0)
    with pytest.raises(ValueError):
        df.gradients_function(lambda x, y: x)(1.0, 2.0)
    assert state.tapes == []


def test_implicit_gradients_on_variables():
    v = df.Variable([1.0, 2.0])
    w = df.Variable(3.0)
    frozen = df.Variable(10.0, trainable=False)

    def loss(scale):
        return df.reduce_sum(v * v) * w * scale + frozen
    pairs = df.implicit_gradients(loss)(2.0)
    assert [p[1] for p in pairs] == [v, w]
    np.testing.assert_allclose(val(pairs[0][0]), 2 * np.array([1.0, 2.0]) * 3.0 * 2.0)
    assert float(pairs[1][0]) == pytest.approx(5.0 * 2.0)

    value, pairs = df.implicit_value_and_gradients(loss)(1.0)
    assert float(value) == pytest.approx(5.0 * 3.0 + 10.0)
    assert [p[1] for p in pairs] == [v, w]


def test_implicit_gradients_without_variables_raises():
    with pytest.raises(ValueError):
        df.implicit_gradients(lambda x: x * 2.0)(1.0)


def test_watch_accessed_variables_false_ignores_unwatched_variables():
    v = df.Variable(2.0)
    u = df.Variable(5.0)
    with df.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(u)
        y = v * v + u * v
    gv, gu = tape.gradient(y, [v, u])
    assert gv is None
    assert float(gu) == pytest.approx(2.0)
    assert tape.watched_variables() == (u,)


def test_accessed_variables_are_watched_by_default():
    v = df.Variable(2.0)
    with df.GradientTape() as tape:
        y = v * v
    assert tape.watched_variables() == (v,)
    assert float(tape.gradient(y, v)) == pytest.approx(4.0)


# ------------------------------------------------------------------ stop_recording
def test_tape_stop_recording_blocks_gradient():
    x = df.constant(3.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        with tape.stop_recording():
            y = x * x
        z = y * x
    assert float(tape.gradient(z, x)) == pytest.approx(9.0)   # y is a constant for the tape


def test_module_stop_recording_blocks_every_tape():
    x = df.constant(3.0)
    with df.GradientTape() as outer, df.GradientTape() as inner:
        outer.watch(x)
        inner.watch(x)
        with df.stop_recording():
            y = x * x
    assert inner.gradient(y, x) is None
    assert outer.gradient(y, x) is None


def test_stop_gradient_cuts_the_path():
    x = df.constant(3.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = df.stop_gradient(x * x) * x
    assert float(tape.gradient(y, x)) == pytest.approx(9.0)


# ------------------------------------------------------------------ custom_gradient, record_operation
def test_custom_gradient_replaces_the_true_gradient():
    @df.custom_gradient
    def clip_gradient(x):
        def grad(dy):
            return df.minimum(dy, 1.0)
        return df.identity(x), grad

    x = df.constant(3.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = clip_gradient(x) * 5.0
    assert float(y) == pytest.approx(15.0)
    assert float(tape.gradient(y, x)) == pytest.approx(1.0)   # the true gradient is 5


def test_custom_gradient_forward_ops_do_not_add_to_its_gradient():
    @df.custom_gradient
    def wrong_square(x):
        return x * x, lambda dy: dy * 100.0

    x = df.constant(2.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = wrong_square(x)
    assert float(y) == pytest.approx(4.0)
    assert float(tape.gradient(y, x)) == pytest.approx(100.0)


def test_custom_gradient_with_two_inputs_and_second_order():
    @df.custom_gradient
    def mul(a, b):
        return a * b, lambda dy: (dy * b, dy * a)

    a, b = df.constant(2.0), df.constant(5.0)
    with df.GradientTape() as outer:
        outer.watch(a)
        with df.GradientTape() as inner:
            inner.watch([a, b])
            y = mul(a, a) * b
        ga, gb = inner.gradient(y, [a, b])
    assert float(ga) == pytest.approx(2 * 2.0 * 5.0)
    assert float(gb) == pytest.approx(4.0)
    assert float(outer.gradient(ga, a)) == pytest.approx(2 * 5.0)


def test_record_operation_registers_a_backward_function():
    x = df.constant(3.0)
    calls = []

    def backward(dy):
        calls.append(float(dy))
        return [dy * 3.0 * x * x]
    with df.GradientTape() as tape:
        tape.watch(x)
        y = df.constant(float(np.asarray(x)) ** 3)     # computed outside the registry
        df.record_operation("cube", [y], [x], backward)
        z = y * 2.0
    assert float(tape.gradient(z, x)) == pytest.approx(2.0 * 27.0)
    assert calls == [2.0]


def test_record_operation_backward_may_return_a_bare_tensor_for_one_input():
    x = df.constant(3.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = df.constant(6.0)
        df.record_operation("double", [y], [x], lambda dy: dy * 2.0)
    assert float(tape.gradient(y, x)) == pytest.approx(2.0)


def test_record_operation_without_watched_input_records_nothing():
    x = df.constant(3.0)
    with df.GradientTape() as tape:
        y = df.constant(6.0)
        df.record_operation("double", [y], [x], lambda dy: [dy * 2.0])
    assert tape._tape.entries == []
