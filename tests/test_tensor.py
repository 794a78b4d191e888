"""Data types, eager tensors, operators, conversion, execute, callbacks and the execution trace."""
import operator

import numpy as np
import pytest

import defun as df
from defun.runtime import context


def val(t):
    return np.asarray(t)


# ------------------------------------------------------------------ dtypes
@pytest.mark.parametrize("name, np_type, floating, integer", [
    ("float16", np.float16, True, False), ("float32", np.float32, True, False),
    ("float64", np.float64, True, False), ("int32", np.int32, False, True),
    ("int64", np.int64, False, True), ("bool", np.bool_, False, False),
    ("complex64", np.complex64, False, False), ("complex128", np.complex128, False, False),
    ("int8", np.int8, False, True), ("int16", np.int16, False, True), ("uint8", np.uint8, False, True),
    ("uint16", np.uint16, False, True), ("uint32", np.uint32, False, True), ("uint64", np.uint64, False, True),
])
def test_dtype_properties_and_as_dtype(name, np_type, floating, integer):
    d = getattr(df, name)
    assert d.name == name
    assert d.as_numpy_dtype is np_type
    assert d.is_floating is floating
    assert d.is_integer is integer
    assert df.as_dtype(d) is d
    assert df.as_dtype(name) is d
    assert df.as_dtype(np_type) is d
    assert df.as_dtype(np.dtype(np_type)) is d


def test_resource_dtype():
    assert df.resource.name == "resource"
    assert not df.resource.is_floating and not df.resource.is_integer
    assert df.as_dtype("resource") is df.resource


def test_as_dtype_python_types_follow_the_defaults():
    assert df.as_dtype(float) is df.float32
    assert df.as_dtype(int) is df.int32
    assert df.as_dtype(bool) is df.bool


def test_dtype_compares_with_numpy_and_names():
    assert df.float32 == np.float32
    assert df.float32 == "float32"
    assert df.float32 != df.float64
    assert df.int32 != np.int64
    assert df.float32 != "not a dtype"
    assert len({df.float32, df.as_dtype("float32")}) == 1


@pytest.mark.parametrize("bad", ["complex256", np.clongdouble, np.longdouble, "floaty", np.str_, object()])
def test_as_dtype_rejects_unsupported(bad):
    with pytest.raises(TypeError):
        df.as_dtype(bad)


@pytest.mark.parametrize("value, dtype", [
    (1.5, df.float32), (2, df.int32), (True, df.bool),
    ([1.0, 2.0], df.float32), ([[1, 2], [3, 4]], df.int32), ([True, False], df.bool),
    (np.ones(2), df.float64), (np.ones(2, np.float16), df.float16),
    (np.ones(2, np.int64), df.int64), (np.float64(1.0), df.float64), (np.int32(3), df.int32),
])
def test_default_dtypes(value, dtype):
    t = df.constant(value)
    assert t.dtype is dtype
    np.testing.assert_array_equal(val(t), np.asarray(value))
    assert df.convert_to_tensor(value).dtype is dtype


def test_python_int_too_large_for_int32_becomes_int64():
    assert df.constant(2 ** 40).dtype is df.int64
    t = df.constant([1, 2 ** 40])
    assert t.dtype is df.int64
    np.testing.assert_array_equal(val(t), [1, 2 ** 40])


def test_python_int_out_of_range_for_requested_dtype_raises():
    with pytest.raises(df.errors.InvalidArgumentError, match="int32"):
        df.constant([2 ** 40], df.int32)
    with pytest.raises(df.errors.InvalidArgumentError, match="int32"):
        df.constant([1, 2]) * (2 ** 40)


def test_unsupported_numpy_dtype_raises():
    with pytest.raises(df.errors.InvalidArgumentError, match="longdouble|float128"):
        df.constant(np.ones(2, np.longdouble))


# ------------------------------------------------------------------ constant / convert_to_tensor
def test_constant_with_dtype_casts():
    t = df.constant([1, 2], df.float64)
    assert t.dtype is df.float64
    np.testing.assert_array_equal(val(t), [1.0, 2.0])
    assert df.constant(np.arange(3), "float32").dtype is df.float32


def test_constant_copies_its_input():
    a = np.zeros(3)
    t = df.constant(a)
    a[0] = 7.0
    np.testing.assert_array_equal(val(t), [0.0, 0.0, 0.0])


def test_convert_to_tensor_does_not_alias_a_users_array():
    a = np.zeros(3)
    t = df.convert_to_tensor(a)
    a[0] = 7.0
    np.testing.assert_array_equal(val(t), [0.0, 0.0, 0.0])


def test_op_on_a_numpy_array_does_not_alias_it():
    a = np.zeros(3)
    t = df.identity(a)
    a[0] = 7.0
    np.testing.assert_array_equal(val(t), [0.0, 0.0, 0.0])


def test_tensor_value_cannot_be_mutated_through_numpy():
    t = df.constant([1.0, 2.0])
    with pytest.raises(ValueError):
        t.numpy()[0] = 5.0
    with pytest.raises(ValueError):
        np.asarray(t)[0] = 5.0
    np.testing.assert_array_equal(val(t), [1.0, 2.0])
    copy = np.array(t)                       # an explicit copy is the user's to change
    copy[0] = 5.0
    np.testing.assert_array_equal(val(t), [1.0, 2.0])


def test_convert_to_tensor_passes_tensors_through_and_checks_dtype():
    t = df.constant([1.0])
    assert df.convert_to_tensor(t) is t
    assert df.convert_to_tensor(t, df.float32) is t
    with pytest.raises(df.errors.InvalidArgumentError, match="float64"):
        df.convert_to_tensor(t, df.float64)
    assert df.convert_to_tensor(1, df.float64).dtype is df.float64
    with pytest.raises(df.errors.InvalidArgumentError):
        df.convert_to_tensor(1.5, df.int32)


def test_convert_to_tensor_reads_variables():
    v = df.Variable([1.0, 2.0])
    t = df.convert_to_tensor(v)
    assert isinstance(t, df.Tensor)
    np.testing.assert_array_equal(val(t), [1.0, 2.0])


def test_convert_rejects_non_numeric_values():
    with pytest.raises(TypeError):
        df.constant("text")
    with pytest.raises(TypeError):
        df.convert_to_tensor(object())


def test_constant_from_list_of_tensors():
    t = df.constant([df.constant(1.0), df.constant(2.0)])
    np.testing.assert_array_equal(val(t), [1.0, 2.0])


def test_ragged_list_raises():
    with pytest.raises(df.errors.InvalidArgumentError):
        df.constant([[1.0], [1.0, 2.0]])


# ------------------------------------------------------------------ operators vs numpy
A = np.array([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]], np.float32)
B = np.array([[2.0, 0.5, -3.0], [1.0, -2.0, 4.0]], np.float32)
IA = np.array([7, -7, 9, 0], np.int32)
IB = np.array([2, 3, -4, 5], np.int32)


@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.truediv,
                                operator.pow, operator.lt, operator.le, operator.gt, operator.ge])
def test_binary_float_operators_match_numpy(op):
    x, y = df.constant(A), df.constant(B)
    a, b = (np.abs(A), B) if op is operator.pow else (A, B)
    x = df.constant(a) if op is operator.pow else x
    got = op(x, y)
    want = op(a, b)
    assert isinstance(got, df.Tensor)
    assert got.dtype.as_numpy_dtype == want.dtype.type
    np.testing.assert_allclose(val(got), want, rtol=1e-6)


@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.floordiv,
                                operator.mod, operator.lt, operator.ge])
def test_binary_int_operators_match_numpy(op):
    got = op(df.constant(IA), df.constant(IB))
    want = op(IA, IB)
    assert got.dtype.as_numpy_dtype == want.dtype.type
    np.testing.assert_array_equal(val(got), want)


def test_floordiv_and_mod_follow_python_signs():
    x = df.constant([7.0, -7.0, 7.5])
    np.testing.assert_array_equal(val(x // 2.0), [3.0, -4.0, 3.0])
    np.testing.assert_array_equal(val(x % 3.0), [1.0, 2.0, 1.5])
    np.testing.assert_array_equal(val(df.constant([-7]) % 3), [2])


def test_integer_true_division_gives_float64():
    got = df.constant(IA) / df.constant(IB)
    assert got.dtype is df.float64
    np.testing.assert_allclose(val(got), IA / IB)


def test_matmul_operator_matches_numpy():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    got = df.constant(x) @ df.constant(w)
    assert got.shape == (2, 4)
    np.testing.assert_allclose(val(got), x @ w)
    np.testing.assert_allclose(val(x @ df.constant(w)), x @ w)       # ndarray @ tensor
    batch = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_allclose(val(df.constant(batch) @ df.constant(w.T)), batch @ w.T)


def test_unary_operators_match_numpy():
    x = df.constant(A)
    np.testing.assert_array_equal(val(-x), -A)
    np.testing.assert_array_equal(val(abs(x)), np.abs(A))
    np.testing.assert_array_equal(val(-df.constant(IA)), -IA)
    np.testing.assert_array_equal(val(abs(df.constant(IA))), np.abs(IA))


def test_reflected_operators_with_python_scalars():
    x = df.constant([1.0, 2.0, 4.0])
    np.testing.assert_allclose(val(1.0 + x), [2.0, 3.0, 5.0])
    np.testing.assert_allclose(val(1.0 - x), [0.0, -1.0, -3.0])
    np.testing.assert_allclose(val(2.0 * x), [2.0, 4.0, 8.0])
    np.testing.assert_allclose(val(1.0 / x), [1.0, 0.5, 0.25])
    np.testing.assert_allclose(val(2.0 ** x), [2.0, 4.0, 16.0])
    np.testing.assert_allclose(val(9.0 // x), [9.0, 4.0, 2.0])
    np.testing.assert_allclose(val(9.0 % x), [0.0, 1.0, 1.0])


def test_broadcasting_operators():
    x = df.constant(np.ones((2, 3), np.float32))
    y = df.constant(np.array([1.0, 2.0, 3.0], np.float32))
    np.testing.assert_array_equal(val(x * y), np.ones((2, 3)) * [1, 2, 3])
    with pytest.raises(df.errors.InvalidArgumentError, match="add"):
        df.constant([1.0, 2.0]) + df.constant([1.0, 2.0, 3.0])


def test_getitem_matches_numpy():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = df.constant(x)
    for key in [0, -1, slice(None, None, 2), (1, slice(0, 2)), (Ellipsis, 1), (None, 0),
                (slice(None), None, slice(1, 3))]:
        np.testing.assert_array_equal(val(t[key]), x[key])


# ------------------------------------------------------------------ weak typing
def test_python_scalar_takes_the_tensor_dtype():
    x64 = df.constant(np.ones(2))
    assert (x64 * 2).dtype is df.float64
    assert (2 * x64).dtype is df.float64
    assert (x64 + 0.1).dtype is df.float64
    np.testing.assert_allclose(val(x64 + 0.1), np.ones(2) + 0.1)     # not rounded to float32
    assert (df.constant(np.ones(2, np.float16)) * 3.0).dtype is df.float16
    assert (df.constant(np.ones(2, np.int64)) * 3).dtype is df.int64


def test_python_float_with_int_tensor_raises_naming_both():
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        df.constant([1, 2]) * 1.5
    msg = str(info.value)
    assert "int32" in msg and "float" in msg and "cast" in msg


def test_two_tensors_of_different_dtypes_raise_naming_both():
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        df.constant([1.0]) + df.constant(np.ones(1))
    msg = str(info.value)
    assert "float32" in msg and "float64" in msg and "add" in msg


def test_tensor_and_array_of_different_dtypes_raise_naming_both():
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        df.constant([1.0]) * np.ones(1)
    assert "float32" in str(info.value) and "float64" in str(info.value)
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        np.ones(1, np.int64) + df.constant([1])
    assert "int32" in str(info.value) and "int64" in str(info.value)


# ------------------------------------------------------------------ identity, numpy interop
def test_eq_and_hash_are_identity():
    a, b = df.constant([1.0, 2.0]), df.constant([1.0, 2.0])
    assert (a == a) is True
    assert (a == b) is False
    assert (a != b) is True
    d = {a: "a", b: "b"}
    assert d[a] == "a" and d[b] == "b"
    np.testing.assert_array_equal(val(df.equal(a, b)), [True, True])


def test_numpy_interop():
    t = df.constant([1.0, 2.0])
    arr = np.asarray(t)
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float32
    np.testing.assert_array_equal(arr, [1.0, 2.0])
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    out = np.array([10.0, 20.0], np.float32) + t
    assert isinstance(out, df.Tensor)
    np.testing.assert_array_equal(val(out), [11.0, 22.0])
    out = np.array([10.0, 20.0], np.float32) - t
    assert isinstance(out, df.Tensor)
    np.testing.assert_array_equal(val(out), [9.0, 18.0])
    assert isinstance(np.float32(2.0) * t, df.Tensor)
    assert np.sum(np.asarray(t)) == 3.0


def test_python_conversions():
    assert float(df.constant(2.5)) == 2.5
    assert int(df.constant(7)) == 7
    assert bool(df.constant(0.0)) is False
    assert bool(df.constant(True)) is True
    assert len(df.constant([[1, 2], [3, 4], [5, 6]])) == 3
    with pytest.raises(TypeError):
        len(df.constant(1.0))
    assert [1, 2, 3][df.constant(1)] == 2       # __index__
    with pytest.raises(TypeError):
        [1, 2][df.constant(1.0)]


def test_iteration_yields_rows():
    rows = list(df.constant([[1, 2], [3, 4]]))
    assert len(rows) == 2
    assert all(isinstance(r, df.Tensor) for r in rows)
    np.testing.assert_array_equal(val(rows[1]), [3, 4])
    with pytest.raises(TypeError):
        iter(df.constant(1.0))


def test_properties():
    t = df.constant(np.zeros((2, 3), np.float64))
    assert t.shape == (2, 3)
    assert isinstance(t.shape, tuple)
    assert t.ndim == 2
    assert t.dtype is df.float64
    assert t.device == "/cpu:0"
    assert isinstance(t, df.Tensor)


def test_repr_shows_shape_dtype_and_values():
    r = repr(df.constant([1, 2, 3]))
    assert "shape=(3,)" in r and "int32" in r and "1, 2, 3" in r
    assert "float32" in repr(df.constant(2.5)) and "2.5" in repr(df.constant(2.5))
    assert "..." in repr(df.constant(np.zeros(1000)))      # long values are summarized


def test_tensor_id_is_stable_and_unique():
    a, b = df.constant(1.0), df.constant(1.0)
    assert df.tensor_id(a) == df.tensor_id(a)
    assert df.tensor_id(a) != df.tensor_id(b)
    ids = {df.tensor_id(df.constant(float(i))) for i in range(100)}
    assert len(ids) == 100         # ids of dead tensors are not reused
    c = a + b
    assert df.tensor_id(c) not in (df.tensor_id(a), df.tensor_id(b))


# ------------------------------------------------------------------ execute
def test_execute_runs_a_registered_op():
    out = df.execute("add", 1, [df.constant([1.0, 2.0]), df.constant([3.0, 4.0])])
    assert isinstance(out, list) and len(out) == 1
    np.testing.assert_array_equal(val(out[0]), [4.0, 6.0])
    out = df.execute("reduce_sum", 1, [df.constant([[1.0, 2.0], [3.0, 4.0]])],
                     {"axis": 0, "keepdims": False})
    np.testing.assert_array_equal(val(out[0]), [4.0, 6.0])


def test_execute_multiple_and_zero_outputs():
    parts = df.execute("split", 2, [df.constant([1.0, 2.0, 3.0, 4.0])],
                       {"num_split": 2, "size_splits": None, "axis": 0})
    assert [val(p).tolist() for p in parts] == [[1.0, 2.0], [3.0, 4.0]]
    v = df.Variable([1.0, 2.0])
    out = df.execute("assign_add_variable", 0, [v.handle, df.constant([1.0, 1.0])],
                     {"dtype": df.float32, "shape": (2,)})
    assert out == []
    np.testing.assert_array_equal(v.numpy(), [2.0, 3.0])


def test_execute_errors():
    with pytest.raises(df.errors.NotFoundError, match="add"):
        df.execute("addd", 1, [df.constant(1.0), df.constant(2.0)])
    with pytest.raises(df.errors.InvalidArgumentError, match="num_outputs"):
        df.execute("add", 2, [df.constant(1.0), df.constant(2.0)])


def test_kernel_failure_names_op_shapes_and_dtypes():
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        df.matmul(df.constant(np.ones((2, 3), np.float32)), df.constant(np.ones((2, 3), np.float32)))
    msg = str(info.value)
    assert "matmul" in msg and "float32" in msg and "3" in msg


def test_unsupported_input_dtype_names_op():
    with pytest.raises(df.errors.InvalidArgumentError, match="exp"):
        df.exp(df.constant([1, 2]))


# ------------------------------------------------------------------ execution callbacks
def test_execution_callback_sees_op_inputs_and_outputs():
    seen = []

    def cb(op_name, name, attrs, inputs, outputs):
        seen.append((op_name, name, dict(attrs), list(inputs), list(outputs)))
    x, y = df.constant([1.0]), df.constant([2.0])
    df.add_execution_callback(cb)
    try:
        z = df.add(x, y, name="my_add")
        s = df.reduce_sum(z, axis=0)
    finally:
        df.remove_execution_callback(cb)
    assert [s_[0] for s_ in seen] == ["add", "reduce_sum"]
    op_name, name, attrs, inputs, outputs = seen[0]
    assert name == "my_add"
    assert inputs[0] is x and inputs[1] is y
    assert outputs[0] is z
    assert seen[1][2] == {"axis": 0, "keepdims": False}
    assert seen[1][4][0] is s


def test_execution_callback_sees_converted_inputs():
    seen = []
    cb = lambda *a: seen.append(a)
    df.add_execution_callback(cb)
    try:
        df.add(df.constant([1.0]), 2.0)
    finally:
        df.remove_execution_callback(cb)
    inputs = seen[0][3]
    assert all(isinstance(t, df.Tensor) for t in inputs)
    assert float(inputs[1]) == 2.0


def test_removed_callback_is_not_called():
    calls = []
    cb = lambda *a: calls.append(a[0])
    df.add_execution_callback(cb)
    df.constant(1.0) + 1.0
    df.remove_execution_callback(cb)
    df.constant(1.0) + 1.0
    assert calls == ["add"]
    with pytest.raises(ValueError):
        df.remove_execution_callback(cb)
    with pytest.raises(TypeError):
        df.add_execution_callback("not callable")


def test_callbacks_run_under_a_tape_too():
    calls = []
    cb = lambda *a: calls.append(a[0])
    x = df.constant(2.0)
    df.add_execution_callback(cb)
    try:
        with df.GradientTape() as tape:
            tape.watch(x)
            y = x * x
    finally:
        df.remove_execution_callback(cb)
    assert calls == ["multiply"]
    assert float(tape.gradient(y, x)) == 4.0


# ------------------------------------------------------------------ execution trace
def test_active_trace_records_ops():
    x = df.constant(np.ones((2, 3), np.float32))
    with df.active_trace() as trace:
        y = x * 2.0
        parts = df.split(y, 3, axis=1)
        s = df.reduce_sum(y)
    names = [r.op_name for r in trace.records]
    assert names == ["multiply", "split", "reduce_sum"]
    rec = trace.records[0]
    assert rec.output_ids == (df.tensor_id(y),)
    assert rec.device == "/cpu:0"
    assert rec.element_counts == (6,)
    assert trace.records[1].output_ids == tuple(df.tensor_id(p) for p in parts)
    assert trace.records[1].element_counts == (2, 2, 2)
    assert trace.records[2].element_counts == (1,)
    assert trace.records[2].output_ids == (df.tensor_id(s),)
    assert trace.total_elements() == 6 + 6 + 1


def test_trace_is_off_outside_and_per_thread():
    import threading
    with df.active_trace() as trace:
        th = threading.Thread(target=lambda: df.constant(1.0) + 1.0)
        th.start()
        th.join()
    df.constant(1.0) + 1.0
    assert trace.records == []
    assert context.state.trace is None


def test_trace_costs_nothing_when_off(monkeypatch):
    # With no trace active the dispatcher must not touch the trace machinery at all.
    def boom(*a, **k):
        raise AssertionError("trace recorded while off")
    monkeypatch.setattr(context.ExecutionTrace, "add", boom)
    df.constant([1.0]) * 3.0
    df.split(df.constant([1.0, 2.0]), 2)
    with pytest.raises(AssertionError):
        with df.active_trace():
            df.constant([1.0]) * 3.0


def test_constant_refuses_python_floats_it_would_truncate():
    assert df.constant(2.0, df.int32).numpy() == 2
    with pytest.raises(df.errors.InvalidArgumentError, match="int32"):
        df.constant(1.5, df.int32)
    with pytest.raises(df.errors.InvalidArgumentError, match="df.cast"):
        df.constant([1.0, 2.5], df.int64)
    np.testing.assert_array_equal(df.constant(np.array([1.5]), df.int32).numpy(), [1])  # arrays cast


# ------------------------------------------------------------------ cached Python number operands
def _inputs_of_ops(fn):
    seen = []
    cb = lambda op_name, name, attrs, inputs, outputs: seen.append(inputs)  # noqa: E731
    df.add_execution_callback(cb)
    try:
        fn()
    finally:
        df.remove_execution_callback(cb)
    return seen


def test_a_python_number_operand_is_converted_once_per_dtype():
    x32, x64 = df.constant(np.ones(2, np.float32)), df.constant(np.ones(2))
    seen = _inputs_of_ops(lambda: [x32 * 1.01, x32 * 1.01, 1.01 - x32, x64 * 1.01])
    c32 = seen[0][1]
    assert seen[1][1] is c32 and seen[2][0] is c32        # one tensor for 1.01 as float32
    assert c32.dtype == df.float32 and seen[3][1].dtype == df.float64
    assert seen[3][1] is not c32
    assert val(c32) == np.float32(1.01) and val(seen[3][1]) == 1.01
    with pytest.raises(ValueError):
        np.asarray(c32._value)[...] = 5.0                 # shared, so read-only
    np.testing.assert_array_equal(val(x32 * 1.01), np.ones(2, np.float32) * np.float32(1.01))


def test_cached_numbers_keep_python_types_and_signs_apart():
    xi = df.constant(np.array([3, 4], np.int32))
    np.testing.assert_array_equal(val(xi * 2), [6, 8])
    with pytest.raises(df.errors.InvalidArgumentError, match="Python float"):
        xi * 2.0                                          # not the cached int 2
    with pytest.raises(df.errors.InvalidArgumentError, match="Python float"):
        xi * 2.0                                          # and not cached after failing
    xb = df.constant([True, False])
    with pytest.raises(df.errors.InvalidArgumentError, match="Python int"):
        df.logical_and(xb, 1)
    x = df.constant([1.0])
    for _ in range(2):                                    # -0.0 == 0.0, but not the same constant
        assert np.signbit(val(x * -0.0))[0]
        assert not np.signbit(val(x * 0.0))[0]
    with pytest.raises(df.errors.InvalidArgumentError, match="does not fit"):
        xi * 2 ** 40


def test_the_number_cache_is_bounded():
    from defun.runtime import tensor as tensor_mod
    x = df.constant(np.zeros(1))
    for i in range(tensor_mod._WEAK_SCALARS_MAX + 10):
        x + float(i + 1)
    assert len(tensor_mod._weak_scalars) <= tensor_mod._WEAK_SCALARS_MAX
    np.testing.assert_array_equal(val(x + 7.0), [7.0])


def test_execute_fills_in_declared_attr_defaults():
    x = df.constant([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(df.execute("reduce_sum", 1, [x], {"axis": 0})[0].numpy(), [4.0, 6.0])
    out, = df.execute("argmax", 1, [df.constant([1.0, 3.0, 2.0])], {"axis": 0})
    assert out.dtype is df.int64 and int(out) == 1
    assert df.execute("shape", 1, [x])[0].numpy().tolist() == [2, 2]


def test_big_endian_arrays_are_taken_converted_everywhere():
    """A big-endian array is the same values: eager ops, variables, defuns, loaded functions
    and the numpy-source module take it (converted to the machine's order)."""
    x = np.arange(6.0).reshape(3, 2)
    big = x.astype(">f8")
    assert big.dtype != x.dtype and (big == x).all()
    t = df.constant(big)
    assert t.dtype is df.float64 and t.numpy().dtype == np.float64
    np.testing.assert_array_equal(t.numpy(), x)
    np.testing.assert_array_equal(df.add(big, 1.0).numpy(), x + 1)
    np.testing.assert_array_equal(df.add(1.0, big).numpy(), x + 1)
    np.testing.assert_array_equal(df.Variable(big).numpy(), x)
    np.testing.assert_array_equal(df.constant(np.array(7, ">i4")).numpy(), 7)
    f = df.defun(lambda a: a * 2.0)
    np.testing.assert_array_equal(f(big).numpy(), 2 * x)
    cf = f.get_concrete_function(df.TensorSpec([None, 2], df.float64))
    np.testing.assert_array_equal(df.load_json(df.export_json(cf))(big).numpy(), 2 * x)
    ns = {}
    exec(compile(df.export_numpy_source(cf), "<big>", "exec"), ns)
    np.testing.assert_array_equal(ns["forward"](big)[0], 2 * x)
    assert df.as_dtype(np.dtype(">f4")) is df.float32          # a dtype names its type
