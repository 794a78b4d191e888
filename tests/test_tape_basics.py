"""GradientTape semantics: nesting, persistence and re-entry, unconnected sources, targets,
sources and seeds, and gradient aggregation."""
import numpy as np
import pytest

import defun as df
from defun_helpers import nested_gradients, val


# ------------------------------------------------------------------ basics and nesting
def test_gradient_of_polynomial_matches_hand_derivative():
    x = df.constant([1.0, -2.0, 3.0])
    with df.GradientTape() as tape:
        tape.watch(x)
        y = df.reduce_sum(x * x * x - 2.0 * x)
    np.testing.assert_allclose(val(tape.gradient(y, x)), 3 * val(x) ** 2 - 2, rtol=1e-6)


def test_nested_tapes_give_second_derivative():
    dy, d2y = nested_gradients(lambda x: x * x * x, df.constant(3.0))
    assert float(dy) == pytest.approx(27.0)    # 3 x^2
    assert float(d2y) == pytest.approx(18.0)   # 6 x


def test_third_derivative_with_three_tapes():
    x = df.constant(np.float64(0.5))
    with df.GradientTape() as t3:
        t3.watch(x)
        with df.GradientTape() as t2:
            t2.watch(x)
            with df.GradientTape() as t1:
                t1.watch(x)
                y = df.sin(x)
            dy = t1.gradient(y, x)
        d2y = t2.gradient(dy, x)
    d3y = t3.gradient(d2y, x)
    assert float(dy) == pytest.approx(np.cos(0.5))
    assert float(d2y) == pytest.approx(-np.sin(0.5))
    assert float(d3y) == pytest.approx(-np.cos(0.5))


def test_inner_tape_does_not_see_ops_before_it_started():
    x = df.constant(2.0)
    with df.GradientTape() as outer:
        outer.watch(x)
        y = x * x
        with df.GradientTape() as inner:
            inner.watch(y)
            z = y * 3.0
    assert float(inner.gradient(z, y)) == pytest.approx(3.0)
    assert float(outer.gradient(z, x)) == pytest.approx(12.0)   # 3 * 2x


def test_nested_gradients_function_gives_second_derivative():
    def f(x):
        return x * x * x
    df_dx = lambda x: df.gradients_function(f)(x)[0]
    d2f = df.gradients_function(df_dx)
    assert float(d2f(3.0)[0]) == pytest.approx(18.0)
    assert float(d2f(-1.0)[0]) == pytest.approx(-6.0)


def test_second_order_through_exp_and_tanh():
    x = df.constant(np.array([0.3, -1.2]))
    g, h = nested_gradients(lambda x: df.reduce_sum(df.tanh(x) * df.exp(x)), x)
    xs = val(x)
    th, e = np.tanh(xs), np.exp(xs)
    d1 = (1 - th ** 2) * e + th * e
    d2 = -2 * th * (1 - th ** 2) * e + 2 * (1 - th ** 2) * e + th * e
    np.testing.assert_allclose(val(g), d1, rtol=1e-10)
    np.testing.assert_allclose(val(h), d2, rtol=1e-10)


# ------------------------------------------------------------------ persistence and re-entry
def test_persistent_tape_answers_twice():
    x = df.constant(3.0)
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
        z = y * x
    assert float(tape.gradient(y, x)) == pytest.approx(6.0)
    assert float(tape.gradient(z, x)) == pytest.approx(27.0)
    assert float(tape.gradient(y, x)) == pytest.approx(6.0)


def test_non_persistent_tape_asked_twice_raises():
    x = df.constant(3.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    tape.gradient(y, x)
    with pytest.raises(RuntimeError, match="persistent"):
        tape.gradient(y, x)


def test_reentering_tape_continues_recording():
    x = df.constant(2.0)
    tape = df.GradientTape(persistent=True)
    with tape:
        tape.watch(x)
        y = x * x
    w = y * 10.0          # not recorded: outside the block
    with tape:
        z = y * x         # recorded: continues the same tape
    assert float(tape.gradient(z, x)) == pytest.approx(12.0)   # d x^3 = 3 x^2
    assert tape.gradient(w, x) is None


def test_gradient_inside_stop_recording_of_the_same_tape():
    x = df.constant(3.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * x
        with tape.stop_recording():
            g = tape.gradient(y, x)
    assert float(g) == pytest.approx(6.0)


def test_gradient_inside_the_block_is_not_recorded_on_its_own_tape():
    x = df.constant(3.0)
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
        g = tape.gradient(y, x)
        z = y * 2.0
    assert float(g) == pytest.approx(6.0)
    assert float(tape.gradient(z, x)) == pytest.approx(12.0)


# ------------------------------------------------------------------ unconnected sources
def test_unconnected_source_gives_none():
    x, w = df.constant(3.0), df.constant(2.0)
    with df.GradientTape() as tape:
        tape.watch([x, w])
        y = x * x
    gx, gw = tape.gradient(y, [x, w])
    assert float(gx) == pytest.approx(6.0)
    assert gw is None


def test_unwatched_source_gives_none():
    x, w = df.constant(3.0), df.constant(2.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = w * w          # no watched input: not recorded
        z = x * 2.0
    assert tape.gradient(y, w) is None
    assert len(tape._tape.entries) == 1 and float(z) == 6.0


def test_unconnected_zero_gives_zeros_of_source_shape_and_dtype():
    x = df.constant([1.0, 2.0])
    w = df.constant(np.ones((2, 3)))
    with df.GradientTape() as tape:
        tape.watch([x, w])
        y = df.reduce_sum(x * 2.0)
    gx, gw = tape.gradient(y, [x, w], unconnected_gradients="zero")
    np.testing.assert_allclose(val(gx), [2.0, 2.0])
    assert gw.shape == (2, 3) and gw.dtype is df.float64
    np.testing.assert_array_equal(val(gw), np.zeros((2, 3)))


def test_unconnected_zero_for_a_variable():
    v = df.Variable(np.ones((2, 2)))
    x = df.constant(1.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * 3.0
    g = tape.gradient(y, v, unconnected_gradients="zero")
    assert g.shape == (2, 2) and g.dtype is df.float64
    np.testing.assert_array_equal(val(g), np.zeros((2, 2)))


def test_unknown_unconnected_gradients_value_raises_value_error():
    x = df.constant(1.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * 2.0
    with pytest.raises(ValueError, match="unconnected_gradients"):
        tape.gradient(y, x, unconnected_gradients="ones")
    # the failed call did not use up the tape
    assert float(tape.gradient(y, x)) == pytest.approx(2.0)


def test_target_none_raises_value_error():
    x = df.constant(1.0)
    with df.GradientTape() as tape:
        tape.watch(x)
    with pytest.raises(ValueError, match="None"):
        tape.gradient(None, x)


# ------------------------------------------------------------------ targets, sources, seeds
def test_target_list_is_gradient_of_the_sum():
    x, w = df.constant(3.0), df.constant(2.0)
    with df.GradientTape() as tape:
        tape.watch([x, w])
        y = x * x
        z = x * w
    gx, gw = tape.gradient([y, z], [x, w])
    assert float(gx) == pytest.approx(2 * 3.0 + 2.0)
    assert float(gw) == pytest.approx(3.0)


def test_non_scalar_target_is_summed():
    x = df.constant([1.0, 2.0, 3.0])
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    np.testing.assert_allclose(val(tape.gradient(y, x)), [2.0, 4.0, 6.0])


def test_sources_structure_is_preserved():
    a, b, c = df.constant(1.0), df.constant(2.0), df.constant(3.0)
    with df.GradientTape() as tape:
        tape.watch([a, b, c])
        y = a * b * c
    g = tape.gradient(y, {"first": a, "rest": (b, [c, a])})
    assert set(g) == {"first", "rest"}
    assert isinstance(g["rest"], tuple) and isinstance(g["rest"][1], list)
    assert float(g["first"]) == pytest.approx(6.0)
    assert float(g["rest"][0]) == pytest.approx(3.0)
    assert float(g["rest"][1][0]) == pytest.approx(2.0)
    assert float(g["rest"][1][1]) == pytest.approx(6.0)


def test_single_source_gives_single_gradient_and_tuple_gives_tuple():
    x = df.constant(2.0)
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
    assert isinstance(tape.gradient(y, x), df.Tensor)
    g = tape.gradient(y, (x,))
    assert isinstance(g, tuple) and len(g) == 1


def test_output_gradients_weight_the_target():
    x = df.constant(2.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * df.constant([1.0, 2.0])
    g = tape.gradient(y, x, output_gradients=df.constant([10.0, 100.0]))
    assert float(g) == pytest.approx(1.0 * 10 + 2.0 * 100)


def test_output_gradients_per_target_with_none_meaning_ones():
    x = df.constant(2.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * x
        z = x * 3.0
    g = tape.gradient([y, z], x, output_gradients=[df.constant(5.0), None])
    assert float(g) == pytest.approx(5.0 * 4.0 + 3.0)


def test_output_gradients_python_scalar_takes_target_dtype():
    x = df.constant(np.float64(2.0))
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    g = tape.gradient(y, x, output_gradients=3.0)
    assert g.dtype is df.float64
    assert float(g) == pytest.approx(12.0)


def test_gradient_with_respect_to_the_target_itself_is_one():
    x = df.constant([1.0, 2.0])
    with df.GradientTape() as tape:
        tape.watch(x)
    np.testing.assert_array_equal(val(tape.gradient(x, x)), [1.0, 1.0])


def test_gradient_with_respect_to_an_intermediate():
    x = df.constant(2.0)
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
        z = y * y
    gy, gx = tape.gradient(z, [y, x])
    assert float(gy) == pytest.approx(2 * 4.0)           # dz/dy = 2y
    assert float(gx) == pytest.approx(4 * 2.0 ** 3)      # dz/dx = 4x^3


# ------------------------------------------------------------------ aggregation
def test_tensor_used_several_times_aggregates():
    x = df.constant(3.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * x + x + x * 2.0 + df.exp(x * 0.0)
    assert float(tape.gradient(y, x)) == pytest.approx(2 * 3.0 + 1 + 2)


def test_diamond_graph_aggregates_both_paths():
    x = df.constant(np.float64(0.7))
    with df.GradientTape() as tape:
        tape.watch(x)
        a = df.sin(x)
        b = df.cos(x)
        y = a * b + a
    expected = np.cos(1.4) + np.cos(0.7)
    assert float(tape.gradient(y, x)) == pytest.approx(expected)


def test_gather_used_twice_aggregates_indexed_slices_without_densifying():
    params = df.constant(np.arange(12.0).reshape(4, 3))
    with df.GradientTape() as tape:
        tape.watch(params)
        a = df.gather(params, df.constant([0, 2]))
        b = df.gather(params, df.constant([2, 3]))
        y = df.reduce_sum(a * 2.0) + df.reduce_sum(b)
    seen = []
    cb = lambda op_name, *rest: seen.append(op_name)
    df.add_execution_callback(cb)
    try:
        g = tape.gradient(y, params)
    finally:
        df.remove_execution_callback(cb)
    assert isinstance(g, df.IndexedSlices)
    assert "indexed_slices_to_dense" not in seen
    assert sorted(np.asarray(g.indices).tolist()) == [0, 2, 2, 3]
    assert tuple(g.dense_shape) == (4, 3)
    dense = np.zeros((4, 3))
    dense[[0, 2]] += 2.0
    dense[[2, 3]] += 1.0
    np.testing.assert_allclose(np.asarray(g), dense)
    np.testing.assert_allclose(val(df.convert_to_tensor(g)), dense)


def test_gather_and_dense_use_aggregate_to_a_dense_sum():
    params = df.constant(np.ones((3, 2)))
    with df.GradientTape() as tape:
        tape.watch(params)
        y = df.reduce_sum(df.gather(params, df.constant([1]))) + df.reduce_sum(params * 3.0)
    g = tape.gradient(y, params)
    expected = np.full((3, 2), 3.0)
    expected[1] += 1.0
    np.testing.assert_allclose(np.asarray(g), expected)
