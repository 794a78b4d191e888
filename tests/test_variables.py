"""Resource variables: the API of API.md, use as tensors, gradients, failed assignments."""
import numpy as np
import pytest

import defun as df


def val(t):
    return np.asarray(t)


# ------------------------------------------------------------------ API
def test_variable_properties():
    v = df.Variable([[1.0, 2.0, 3.0]], name="weights")
    assert v.name == "weights"
    assert v.shape == (1, 3)
    assert v.dtype is df.float32
    assert v.trainable is True
    assert df.Variable(1.0, trainable=False).trainable is False
    np.testing.assert_array_equal(v.numpy(), [[1.0, 2.0, 3.0]])
    assert isinstance(v.numpy(), np.ndarray)


def test_default_names_are_distinct():
    assert df.Variable(1.0).name != df.Variable(1.0).name


def test_variable_dtype_argument_converts_without_precision_loss():
    v = df.Variable(0.1, dtype=df.float64)
    assert v.dtype is df.float64
    assert v.numpy() == 0.1            # not float32(0.1) widened
    assert df.Variable([1, 2], dtype="float32").dtype is df.float32
    assert df.Variable(np.ones(2), dtype=df.float32).dtype is df.float32


def test_variable_initial_values():
    assert df.Variable(np.ones(3)).dtype is df.float64           # numpy keeps its dtype
    assert df.Variable(3).dtype is df.int32
    t = df.constant([1.0, 2.0])
    np.testing.assert_array_equal(df.Variable(t).numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(df.Variable(lambda: np.zeros(2)).numpy(), [0.0, 0.0])
    a = np.zeros(2)
    v = df.Variable(a)
    a[0] = 5.0                                                    # the variable owns a copy
    np.testing.assert_array_equal(v.numpy(), [0.0, 0.0])


def test_handle_is_a_resource_tensor_with_handle_data():
    v = df.Variable(np.zeros((2, 3), np.float64))
    assert isinstance(v.handle, df.Tensor)
    assert v.handle.dtype is df.resource
    assert v.handle.handle_data.shape_and_type == [((2, 3), df.float64)]


def test_read_value_is_a_tensor_snapshot():
    v = df.Variable([1.0, 2.0])
    r = v.read_value()
    assert isinstance(r, df.Tensor)
    np.testing.assert_array_equal(val(r), [1.0, 2.0])
    v.assign([5.0, 6.0])
    np.testing.assert_array_equal(val(r), [1.0, 2.0])     # an earlier read keeps its value
    np.testing.assert_array_equal(val(v.read_value()), [5.0, 6.0])


def test_earlier_read_keeps_value_after_assign_add_and_sub():
    v = df.Variable([1.0, 2.0])
    r1 = v.read_value()
    v.assign_add([1.0, 1.0])
    r2 = v.read_value()
    v.assign_sub([10.0, 10.0])
    np.testing.assert_array_equal(val(r1), [1.0, 2.0])
    np.testing.assert_array_equal(val(r2), [2.0, 3.0])
    np.testing.assert_array_equal(v.numpy(), [-8.0, -7.0])


def test_assignments_return_the_variable_and_chain():
    v = df.Variable([1.0, 2.0])
    assert v.assign([3.0, 4.0]) is v
    assert v.assign_add([1.0, 1.0]) is v
    assert v.assign_sub(df.constant([0.5, 0.5])) is v
    np.testing.assert_array_equal(v.numpy(), [3.5, 4.5])
    v.assign_add(1.0).assign_sub(0.5)                  # a scalar broadcasts
    np.testing.assert_array_equal(v.numpy(), [4.0, 5.0])


def test_assign_from_another_variable_and_array():
    v = df.Variable([1.0, 2.0])
    w = df.Variable([7.0, 8.0])
    v.assign(w)
    np.testing.assert_array_equal(v.numpy(), [7.0, 8.0])
    a = np.array([3.0, 4.0], np.float32)
    v.assign(a)
    a[0] = 100.0                                        # the variable does not alias `a`
    np.testing.assert_array_equal(v.numpy(), [3.0, 4.0])


def test_numpy_returns_a_copy():
    v = df.Variable([1.0, 2.0])
    a = v.numpy()
    a[0] = 50.0
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


# ------------------------------------------------------------------ bad assignments
@pytest.mark.parametrize("method, value", [
    ("assign", [1.0, 2.0, 3.0]),
    ("assign", [[1.0, 2.0]]),
    ("assign", 1.0),
    ("assign_add", [1.0, 2.0, 3.0]),
    ("assign_add", [[1.0], [2.0]]),
    ("assign_sub", np.ones((3, 2), np.float32)),
])
def test_wrong_shape_raises_and_leaves_value(method, value):
    v = df.Variable([1.0, 2.0])
    with pytest.raises(df.errors.InvalidArgumentError):
        getattr(v, method)(value)
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


@pytest.mark.parametrize("method, value", [
    ("assign", np.array([1.0, 2.0])),                 # float64 array
    ("assign", df.constant([1, 2])),                  # int32 tensor
    ("assign_add", df.constant(np.array([1.0, 2.0]))),
    ("assign_sub", np.array([1, 2], np.int64)),
])
def test_wrong_dtype_raises_naming_dtypes_and_leaves_value(method, value):
    v = df.Variable([1.0, 2.0])
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        getattr(v, method)(value)
    assert "float32" in str(info.value)
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


def test_python_float_to_int_variable_raises():
    v = df.Variable([1, 2])
    with pytest.raises(df.errors.InvalidArgumentError):
        v.assign([1.5, 2.5])
    np.testing.assert_array_equal(v.numpy(), [1, 2])


# ------------------------------------------------------------------ variables as tensors
def test_operators_on_variables():
    v = df.Variable([1.0, 2.0])
    w = df.Variable([3.0, 5.0])
    np.testing.assert_array_equal(val(v + w), [4.0, 7.0])
    np.testing.assert_array_equal(val(v * 2.0), [2.0, 4.0])
    np.testing.assert_array_equal(val(2.0 - v), [1.0, 0.0])
    np.testing.assert_array_equal(val(-v), [-1.0, -2.0])
    np.testing.assert_array_equal(val(v < w), [True, True])
    np.testing.assert_array_equal(val(v[1]), 2.0)
    m = df.Variable(np.eye(2, dtype=np.float32))
    np.testing.assert_array_equal(val(m @ m), np.eye(2))


def test_ops_accept_variables():
    v = df.Variable([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(val(df.reduce_sum(v, axis=0)), [4.0, 6.0])
    np.testing.assert_allclose(val(df.exp(v)), np.exp([[1.0, 2.0], [3.0, 4.0]]), rtol=1e-6)
    np.testing.assert_array_equal(val(df.gather(v, [1])), [[3.0, 4.0]])
    np.testing.assert_array_equal(val(df.matmul(v, v)), np.array([[7.0, 10.0], [15.0, 22.0]]))


def test_python_conversions_on_variables():
    assert float(df.Variable(2.5)) == 2.5
    assert int(df.Variable(3)) == 3
    assert bool(df.Variable(0.0)) is False
    assert len(df.Variable([1, 2, 3])) == 3
    np.testing.assert_array_equal(np.asarray(df.Variable([1.0, 2.0])), [1.0, 2.0])
    assert "Variable" in repr(df.Variable(1.0))


def test_variable_eq_and_hash_are_identity():
    v, w = df.Variable(1.0), df.Variable(1.0)
    assert v == v and v != w
    assert {v: 1, w: 2}[w] == 2


# ------------------------------------------------------------------ gradients
def test_gradient_reaches_variable_dense():
    v = df.Variable([1.0, -2.0, 3.0])
    with df.GradientTape() as tape:
        y = df.reduce_sum(v * v * v)
    g = tape.gradient(y, v)
    np.testing.assert_allclose(val(g), 3 * np.array([1.0, 4.0, 9.0]))


def test_gradient_reaches_variable_through_assign_then_read():
    v = df.Variable(2.0)
    with df.GradientTape() as tape:
        a = v * 3.0
        v.assign_add(1.0)
        b = v * v
    ga = tape.gradient([a, b], v)
    assert float(ga) == pytest.approx(3.0 + 2 * 3.0)


def test_gradient_through_gather_is_indexed_slices():
    v = df.Variable(np.arange(8.0).reshape(4, 2))
    with df.GradientTape() as tape:
        rows = df.gather(v, df.constant([3, 1, 3]))
        y = df.reduce_sum(rows * df.constant([[1.0, 2.0]], df.float64))
    g = tape.gradient(y, v)
    assert isinstance(g, df.IndexedSlices)
    assert tuple(g.dense_shape) == (4, 2)
    np.testing.assert_array_equal(np.asarray(g.indices), [3, 1, 3])
    np.testing.assert_array_equal(np.asarray(g.values), [[1.0, 2.0]] * 3)
    dense = np.zeros((4, 2))
    dense[1] = [1.0, 2.0]
    dense[3] = [2.0, 4.0]
    np.testing.assert_array_equal(np.asarray(g), dense)
    v.assign_sub(np.asarray(g) * 0.5)          # a typical sparse update, applied densely
    np.testing.assert_array_equal(v.numpy(), np.arange(8.0).reshape(4, 2) - 0.5 * dense)


def test_gradient_for_variable_read_before_the_tape_is_none():
    v = df.Variable(2.0)
    r = v.read_value()
    with df.GradientTape() as tape:
        y = r * r
    assert tape.gradient(y, v) is None


def test_non_trainable_variable_not_watched_automatically():
    v = df.Variable(2.0, trainable=False)
    with df.GradientTape() as tape:
        y = v * v
    assert tape.gradient(y, v) is None
    with df.GradientTape() as tape:
        tape.watch(v)
        y = v * v
    assert float(tape.gradient(y, v)) == pytest.approx(4.0)


def test_gradient_step_changes_the_loss():
    w = df.Variable(np.array([0.5, -0.5]))
    x = df.constant(np.array([[1.0, 2.0], [3.0, 4.0]]))
    target = df.constant(np.array([1.0, 2.0]))

    def loss():
        pred = df.reduce_sum(x * w, axis=1)
        return df.reduce_mean(df.square(pred - target))
    first = float(loss())
    for _ in range(20):
        (g, var), = df.implicit_gradients(loss)()
        var.assign_sub(g * 0.02)
    assert float(loss()) < first * 0.5


def test_variable_creation_inside_a_trace_raises():
    f = df.defun(lambda x: df.Variable(1.0) * x)
    with pytest.raises(df.errors.TracingError, match="outside"):
        f(df.constant(1.0))


def test_variable_refuses_python_floats_it_would_truncate():
    assert df.Variable(2.0, dtype=df.int32).numpy() == 2
    with pytest.raises(df.errors.InvalidArgumentError, match="int32"):
        df.Variable(1.5, dtype=df.int32)
