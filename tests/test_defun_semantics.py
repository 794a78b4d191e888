"""More defun semantics: variables as arguments, leaked symbolic tensors, mixed outputs, methods,
callbacks and static values while tracing."""
import numpy as np
import pytest

import defun as df
from defun_helpers import assert_close, f64, line_of, nested_gradients, val


# ====================================================================== more semantics
def test_runtime_error_after_assign_leaves_variable_unchanged():
    v = df.Variable(1.0)
    params = df.constant(np.arange(6.0).reshape(3, 2))

    @df.defun
    def f(i):
        v.assign_add(1.0)
        return df.gather(params, i)

    assert_close(f(np.array([2, 0], dtype=np.int32)), [[4.0, 5.0], [0.0, 1.0]])
    assert float(v) == 2.0
    with pytest.raises(df.errors.InvalidArgumentError, match="gather"):
        f(np.array([0, 7], dtype=np.int32))
    assert float(v) == 2.0


def test_passthrough_and_repeated_outputs_and_their_gradient():
    f = df.defun(lambda x: (x, x, x * 2.0))
    x = df.constant(3.0)
    a, b, c = f(x)
    assert [float(a), float(b), float(c)] == [3.0, 3.0, 6.0]
    g = df.gradients_function(lambda x: df.add_n(list(f(x))))(x)[0]
    assert float(g) == 4.0


def test_namedtuple_arguments_and_outputs():
    import collections
    Pair = collections.namedtuple("Pair", "a b")
    f = df.defun(lambda p: Pair(p.b, p.a * 2.0))
    out = f(Pair(df.constant(1.0), df.constant(5.0)))
    assert isinstance(out, Pair)
    assert float(out.a) == 5.0 and float(out.b) == 2.0


def test_defun_method_uses_instance_variables():
    class Scale:
        def __init__(self, k):
            self.k = df.Variable(k)

        @df.defun
        def __call__(self, x):
            return x * self.k

    s2, s3 = Scale(2.0), Scale(3.0)
    assert float(s2(df.constant(2.0))) == 4.0
    assert float(s3(df.constant(2.0))) == 6.0
    s2.k.assign(10.0)
    assert float(s2(df.constant(2.0))) == 20.0


def test_unconnected_argument_gets_none_through_defun():
    f = df.defun(lambda x, y: x * 2.0)
    a, b = df.constant(1.0), df.constant(2.0)
    with df.GradientTape() as tape:
        tape.watch([a, b])
        y = f(a, b)
    ga, gb = tape.gradient(y, [a, b])
    assert float(ga) == 2.0
    assert gb is None


def test_gradient_of_one_output_among_several():
    f = df.defun(lambda x: (x * 2.0, x * x))
    a = df.constant(3.0)
    with df.GradientTape(persistent=True) as tape:
        tape.watch(a)
        y1, y2 = f(a)
    assert float(tape.gradient(y2, a)) == 6.0
    assert float(tape.gradient(y1, a)) == 2.0
    assert float(tape.gradient([y1, y2], a)) == 8.0


def test_gather_gradient_on_variable_through_defun_is_indexed_slices_or_dense():
    table = df.Variable(np.ones((4, 2)))
    f = df.defun(lambda i: df.reduce_sum(df.gather(table, i) * 3.0))
    with df.GradientTape() as tape:
        y = f(df.constant(np.array([1, 1, 3], dtype=np.int32)))
    g = tape.gradient(y, table)
    assert isinstance(g, (df.IndexedSlices, df.Tensor))
    assert_close(g, [[0, 0], [6, 6], [0, 0], [3, 3]])


def test_a_gather_after_a_defun_call_feeds_its_backward_an_indexed_slices_gradient():
    # TensorFlow's backprop_test testFunctionIndexedSlicesGradient: d gather(f(x), [0]) / dx
    # is [1.0] for f(x) = x + 1. Before: "cannot convert IndexedSlices ... to a tensor"
    f = df.defun(lambda x: x + 1)
    x = df.constant([1.0])
    with df.GradientTape() as t:
        t.watch(x)
        y = df.gather(f(x), [0])
    assert val(t.gradient(y, x)).tolist() == [1.0]
    # every route a call's backward runs: one tape, a persistent one, nested tapes, in a
    # trace (call node), through cond/while gradients, and a loaded document
    g = df.defun(lambda x: x * x + 1.0)
    xs = np.array([1.0, 2.0, 3.0])
    want = np.array([2.0, 0.0, 6.0])     # rows 0 and 2 of d(x^2)/dx; row 2 twice below
    loaded = df.load_json(df.export_json(g.get_concrete_function(f64(xs)), include_backward=True))

    def gathered(fn):
        def run(x):
            with df.GradientTape() as t:
                t.watch(x)
                y = df.reduce_sum(df.gather(fn(x), [0, 2]) * [1.0, 2.0])
            return t.gradient(y, x)
        return run

    def in_loop(x):
        return df.while_loop(lambda i, y: i < 1, lambda i, y: (i + 1, g(y)), (0, x))[1]

    routes = {"tape": gathered(g), "defun": df.defun(gathered(g)), "loaded": gathered(loaded),
              "loaded in a defun": df.defun(gathered(loaded)),
              "cond": df.defun(gathered(lambda x: df.cond(x[0] > 0.0, lambda: g(x), lambda: x))),
              "while": df.defun(gathered(in_loop))}
    for name, run in routes.items():
        assert_close(run(f64(xs)), want * [1.0, 1.0, 2.0], msg=name)
    first, second = nested_gradients(lambda x: df.reduce_sum(df.gather(g(x), [0, 2])), f64(xs),
                                     combine=df.reduce_sum, persistent=True)
    assert_close(first, want)
    assert_close(second, [2.0, 0.0, 2.0])


@pytest.mark.parametrize("use", ["float", "numpy", "asarray"])
def test_leaked_symbolic_tensor_converted_after_trace_names_creation_site(use):
    leaked = []

    def body(x):
        y = x + 1.0  # MARK-leak2
        leaked.append(y)
        return y

    df.defun(body)(df.constant(1.0))
    convert = {"float": float, "numpy": lambda t: t.numpy(), "asarray": np.asarray}[use]
    with pytest.raises(df.errors.TracingError) as info:
        convert(leaked[0])
    msg = str(info.value)
    assert str(line_of(body, "MARK-leak2")) in msg, msg
    assert "while tracing" not in msg, msg   # the trace has ended


def test_python_number_and_variable_outputs():
    w = df.Variable(2.0)
    out = df.defun(lambda x: (x, 3, w))(df.constant(1.0))
    assert float(out[1]) == 3.0
    assert out[2] is w


def test_failed_trace_is_not_cached_and_leaves_eager_mode():
    calls = []

    @df.defun
    def bad(x):
        calls.append(1)
        y = x * 2.0
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        bad(df.constant(1.0))
    assert df.executing_eagerly()
    assert float(df.constant(1.0) + 1.0) == 2.0
    with pytest.raises(RuntimeError, match="boom"):
        bad(df.constant(1.0))
    assert len(calls) == 2
    assert bad.trace_count == 0


def test_watch_accessed_variables_false_is_respected_through_defun():
    w = df.Variable(3.0)
    x = df.constant(2.0)
    for fn in (lambda x: x * w, df.defun(lambda x: x * w)):
        with df.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(x)
            y = fn(x)
        gx, gw = tape.gradient(y, [x, w])
        assert float(gx) == 3.0
        assert gw is None


def test_gradient_wrt_variable_passed_as_argument():
    v = df.Variable(2.0)
    g = df.defun(lambda var, x: var * x * x)
    with df.GradientTape() as tape:
        y = g(v, df.constant(3.0))
    assert float(tape.gradient(y, v)) == 9.0


def test_stop_gradient_and_custom_gradient_inside_defun():
    h = df.defun(lambda x: x * df.stop_gradient(x))
    assert float(df.gradients_function(h)(df.constant(3.0))[0]) == 3.0

    @df.custom_gradient
    def half_grad(x):
        return df.identity(x), lambda dy: dy * 0.5

    k = df.defun(lambda x: half_grad(x) * 2.0)
    assert float(k(df.constant(3.0))) == 6.0
    assert float(df.gradients_function(k)(df.constant(3.0))[0]) == 1.0


def test_persistent_tape_with_chained_defun_calls():
    k = df.defun(lambda x: x * x * x)
    x = f64(2.0)
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = k(x)
        z = k(y)
    assert float(tape.gradient(y, x)) == 12.0
    assert float(tape.gradient(z, x)) == 9 * 2.0 ** 8
    assert len(tape._tape.entries) == 2


def test_gradient_to_variable_captured_by_inner_defun_inside_outer_trace():
    w = df.Variable(np.full((2, 2), 0.5))
    x = df.constant(np.full((2, 2), 0.1))

    @df.defun
    def inner(a):
        return df.reduce_sum(df.tanh(a @ w))

    @df.defun
    def outer(a):
        with df.GradientTape() as t:
            loss = inner(a)
        return t.gradient(loss, [w])[0]

    with df.GradientTape() as t:
        loss = df.reduce_sum(df.tanh(x @ w))
    expected = t.gradient(loss, w)
    got = outer(x)
    assert got is not None
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-12)


def test_equality_with_a_number_while_tracing_warns_and_stays_identity():
    seen = []

    @df.defun
    def f(n):
        seen.append(n == 0)
        return n + 1

    with pytest.warns(UserWarning, match="df.equal"):
        f(df.constant(0))
    assert seen == [False]


def test_variable_arguments_share_one_trace_by_shape_and_dtype():
    @df.defun
    def step(v, x):
        v.assign_add(x)
        return v.read_value() * 2.0

    a, b = df.Variable([1.0, 2.0]), df.Variable([10.0, 20.0])
    np.testing.assert_allclose(np.asarray(step(a, df.constant([1.0, 1.0]))), [4.0, 6.0])
    np.testing.assert_allclose(np.asarray(step(b, df.constant([1.0, 1.0]))), [22.0, 42.0])
    assert step.trace_count == 1
    np.testing.assert_allclose(a.numpy(), [2.0, 3.0])
    np.testing.assert_allclose(b.numpy(), [11.0, 21.0])
    step(df.Variable([1.0, 2.0, 3.0]), df.constant([1.0, 1.0, 1.0]))   # a new shape retraces
    assert step.trace_count == 2


def test_a_variable_passed_twice_is_one_variable_inside():
    @df.defun
    def bump_then_read(v, w):
        v.assign_add([1.0, 1.0])
        return w.read_value()

    a, b = df.Variable([1.0, 2.0]), df.Variable([5.0, 5.0])
    np.testing.assert_allclose(np.asarray(bump_then_read(a, a)), [2.0, 3.0])
    np.testing.assert_allclose(np.asarray(bump_then_read(a, b)), [5.0, 5.0])
    assert bump_then_read.trace_count == 2


def test_gradients_reach_variable_arguments_and_pairs_name_the_real_variable():
    def loss(v, x):
        return df.reduce_sum(v * x)

    a = df.Variable([1.0, 2.0])
    x = df.constant([3.0, 4.0])
    step = df.defun(lambda v, x: df.implicit_value_and_gradients(lambda: loss(v, x))())
    value, pairs = step(a, x)
    (grad, var), = pairs
    assert var is a
    np.testing.assert_allclose(np.asarray(grad), [3.0, 4.0])
    with df.GradientTape() as tape:
        out = df.defun(loss)(a, x)
    np.testing.assert_allclose(np.asarray(tape.gradient(out, a)), [3.0, 4.0])
    with df.GradientTape(watch_accessed_variables=False) as tape:
        out = df.defun(loss)(a, x)
    assert tape.gradient(out, a) is None


def test_a_variable_argument_has_no_numpy_value_while_tracing():
    @df.defun
    def f(v):
        return v.numpy()

    with pytest.raises(df.errors.TracingError, match="no value while tracing"):
        f(df.Variable([1.0]))


def test_export_refuses_variable_arguments_with_a_clear_message():
    f = df.defun(lambda v, x: v * x)
    cf = f.get_concrete_function(df.Variable([1.0, 2.0]), df.constant([1.0, 2.0]))
    with pytest.raises(TypeError, match="argument 'v' .* is a variable"):
        df.export_json(cf)


def test_concrete_function_refuses_other_python_arguments():
    g = df.defun(lambda x, s: x * s)
    x = df.constant([1.0, 2.0])
    cf = g.get_concrete_function(x, 2.0)
    np.testing.assert_allclose(np.asarray(cf(x, 2.0)), [2.0, 4.0])
    with pytest.raises(TypeError, match=r"\(s: Python float 2.0 -> Python float 3.0\)"):
        cf(x, 3.0)


def test_input_signature_leaves_defaulted_parameters_static():
    @df.defun(input_signature=[df.TensorSpec([2])])
    def h(x, scale=2.0):
        return x * scale

    np.testing.assert_allclose(np.asarray(h(df.constant([1.0, 2.0]))), [2.0, 4.0])


def test_get_concrete_function_checks_arguments_against_the_input_signature():
    f = df.defun(lambda x: x * 2.0, input_signature=[df.TensorSpec([None, 2])])
    with pytest.raises(ValueError, match="does not fit input_signature"):
        f.get_concrete_function(df.TensorSpec([4], df.int32))
    assert f.get_concrete_function(df.TensorSpec([5, 2])) is f.get_concrete_function()


def test_a_defun_method_does_not_keep_its_instance_alive():
    import gc
    import weakref

    class Model:
        def __init__(self):
            self.w = df.Variable([1.0, 2.0])

        @df.defun
        def apply(self, x, scale=1.0):
            return x * self.w * scale

    m = Model()
    x = df.constant([1.0, 1.0])
    np.testing.assert_allclose(np.asarray(m.apply(x, scale=3.0)), [3.0, 6.0])
    np.testing.assert_allclose(np.asarray(m.apply(x)), [1.0, 2.0])
    alive = weakref.ref(m)
    del m
    gc.collect()
    assert alive() is None


def test_a_defun_call_is_one_op_to_callbacks_and_the_execution_trace():
    f = df.defun(lambda x: df.tanh(x) * 2.0)
    x = df.constant(np.ones(1000))
    f(x)
    with df.active_trace() as trace:
        f(x)
    (record,) = trace.records
    assert record.op_name.startswith("lambda") and record.element_counts == (1000,)
    seen = []

    def callback(op_name, name, attrs, inputs, outputs):
        seen.append((op_name, len(inputs), len(outputs)))
    df.add_execution_callback(callback)
    try:
        f(x)
    finally:
        df.remove_execution_callback(callback)
    assert seen == [(record.op_name, 1, 1)]


def test_static_floats_are_keyed_by_bits():
    f = df.defun(lambda x, s: x / s)
    x = df.constant([1.0])
    for _ in range(3):
        f(x, float("nan"))
    assert f.trace_count == 1
    with np.errstate(divide="ignore"):
        assert np.asarray(f(x, 0.0))[0] == np.inf and np.asarray(f(x, -0.0))[0] == -np.inf
    assert f.trace_count == 3


def test_shape_arguments_may_be_tensors_whose_value_is_known_while_tracing():
    @df.defun
    def f(x):
        rows = df.shape(x)[0]
        return df.zeros(df.shape(x)) + df.reshape(df.transpose(x), df.shape(x)) + \
            df.broadcast_to(1.0, [rows, 3]) + df.fill(df.shape(x), 0.5)

    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    expected = x.T.reshape(2, 3) + 1.5
    np.testing.assert_allclose(np.asarray(f(df.constant(x))), expected)

    # known only when the graph runs: the shape becomes an input of the op (test_dynamic_shapes.py)
    g = df.defun(lambda x: df.zeros(df.shape(x)), input_signature=[df.TensorSpec([None, 3])])
    assert tuple(g.get_concrete_function().graph.outputs[0].shape) == (None, 3)
    np.testing.assert_array_equal(np.asarray(g(df.constant(x))), np.zeros((2, 3), np.float32))


def test_static_values_of_deep_and_shared_shape_computations_are_cheap():
    import time

    @df.defun
    def f(x):
        a = df.shape(x)
        for _ in range(24):
            a = df.minimum(a, a)       # shared subexpressions: must not blow up
        b = df.shape(x)
        for _ in range(40):
            b = b + 0                  # deeper than any fixed recursion cap
        return df.reshape(x, a) + df.zeros(b, x.dtype)

    start = time.perf_counter()
    out = f(df.constant(np.ones((2, 3))))
    assert out.shape == (2, 3) and time.perf_counter() - start < 5.0


def test_concrete_function_traced_for_two_variables_refuses_one_variable_twice():
    g = df.defun(lambda a, b: a * b)
    v, w = df.Variable([1.0]), df.Variable([2.0])
    cf = g.get_concrete_function(v, w)
    with pytest.raises(TypeError, match="the variable of flat argument 0 again"):
        cf(v, v)
