"""defun semantics: tracing and the cache, input signatures, captures, stateful order,
gradients through defun, concrete functions, errors, concurrency and retracing warnings."""
import threading
import warnings

import numpy as np
import pytest

import defun as df
from defun_helpers import assert_close, numeric_grads, val

F64 = np.float64


def f64(x):
    return df.constant(np.asarray(x, dtype=np.float64))


# ====================================================================== tracing and the cache
def test_cache_hit_does_not_rerun_python():
    calls = []

    @df.defun
    def f(x):
        calls.append(1)
        return x * 2.0 + 1.0

    a = f(df.constant([1.0, 2.0]))
    b = f(df.constant([5.0, -3.0]))
    c = f(df.constant([0.5, 0.25]))
    assert len(calls) == 1
    assert f.trace_count == 1
    assert_close(a, [3.0, 5.0])
    assert_close(b, [11.0, -5.0])
    assert_close(c, [2.0, 1.5])


@pytest.mark.filterwarnings("ignore::defun.function.RetracingWarning")
def test_retrace_on_new_shape_dtype_static_value_and_structure():
    calls = []

    @df.defun
    def f(x, k=1.0):
        calls.append(1)
        if isinstance(x, (list, tuple)):
            return df.add_n(list(x)) * k
        return x * k

    f(df.constant([1.0, 2.0]))
    assert f.trace_count == 1
    f(df.constant([3.0, 4.0]))                      # new values: no retrace
    assert f.trace_count == 1
    out = f(df.constant([1.0, 2.0, 3.0]))           # new shape
    assert f.trace_count == 2
    assert_close(out, [1.0, 2.0, 3.0])
    out = f(f64([1.0, 2.0]))                        # new dtype
    assert f.trace_count == 3
    assert out.dtype is df.float64
    out = f(df.constant([1.0, 2.0]), 3.0)           # new static Python value
    assert f.trace_count == 4
    assert_close(out, [3.0, 6.0])
    f(df.constant([1.0, 2.0]), 3.0)                 # same static value: hit
    assert f.trace_count == 4
    out = f([df.constant([1.0, 2.0]), df.constant([1.0, 1.0])])   # new structure
    assert f.trace_count == 5
    assert_close(out, [2.0, 3.0])
    out = f((df.constant([1.0, 2.0]), df.constant([1.0, 1.0])))   # tuple vs list differs
    assert f.trace_count == 6
    assert len(calls) == 6


def test_kwargs_and_defaults_bind_like_a_normal_call():
    @df.defun
    def f(x, scale=1.0):
        return x * scale

    x = df.constant([1.0, 2.0])
    a = f(x, 2.0)
    n = f.trace_count
    b = f(x, scale=2.0)
    c = f(scale=2.0, x=x)
    assert f.trace_count == n == 1
    assert_close(a, [2.0, 4.0])
    assert_close(b, [2.0, 4.0])
    assert_close(c, [2.0, 4.0])
    d = f(x)                       # default 1.0, bound explicitly -> same as f(x, 1.0)
    e = f(x, 1.0)
    assert f.trace_count == 2
    assert_close(d, [1.0, 2.0])
    assert_close(e, [1.0, 2.0])


def test_kwarg_tensor_is_a_placeholder_not_static():
    @df.defun
    def f(x, y=None):
        return x if y is None else x + y

    x = df.constant([1.0, 2.0])
    assert_close(f(x, y=df.constant([1.0, 1.0])), [2.0, 3.0])
    assert_close(f(x, y=df.constant([10.0, 20.0])), [11.0, 22.0])
    assert f.trace_count == 1
    assert_close(f(x), [1.0, 2.0])
    assert f.trace_count == 2


def test_nested_arguments_and_outputs_rebuilt_each_call():
    @df.defun
    def f(inputs):
        a, (b, c) = inputs["pair"]
        return {"sum": a + b, "items": [a * c, (b - c, None)], "neg": -inputs["x"]}

    def args(s):
        return {"pair": [df.constant([1.0, 2.0]) * s, (df.constant([3.0, 4.0]) * s, df.constant(2.0) * s)],
                "x": df.constant([[1.0]]) * s}

    out1 = f(args(1.0))
    out2 = f(args(2.0))
    assert f.trace_count == 1
    for out, s in ((out1, 1.0), (out2, 2.0)):
        assert set(out) == {"sum", "items", "neg"}
        assert isinstance(out["items"], list) and isinstance(out["items"][1], tuple)
        assert out["items"][1][1] is None
        assert isinstance(out["sum"], df.Tensor) and not isinstance(out["sum"], type(None))
        assert_close(out["sum"], np.array([4.0, 6.0]) * s)
        assert_close(out["items"][0], np.array([2.0, 4.0]) * s * s)
        assert_close(out["items"][1][0], np.array([1.0, 2.0]) * s)
        assert_close(out["neg"], [[-s]])
    assert out1["sum"] is not out2["sum"]
    assert out1 is not out2 and out1["items"] is not out2["items"]


def test_outputs_are_eager_tensors_usable_eagerly():
    @df.defun
    def f(x):
        return x * 3.0, df.reduce_sum(x)

    a, s = f(df.constant([1.0, 2.0]))
    assert float(s) == pytest.approx(3.0)
    assert_close(a + 1.0, [4.0, 7.0])
    assert isinstance(val(a), np.ndarray)


def test_numpy_array_arguments_are_placeholders_keyed_by_shape_and_dtype():
    calls = []

    @df.defun
    def f(x):
        calls.append(1)
        return x * 2

    assert_close(f(np.array([1.0, 2.0])), [2.0, 4.0])
    out = f(np.array([5.0, 7.0]))
    assert_close(out, [10.0, 14.0])
    assert out.dtype is df.float64          # numpy arrays keep their dtype
    assert len(calls) == 1
    out = f(np.array([1, 2], dtype=np.int32))
    assert out.dtype is df.int32
    assert_close(out, [2, 4])
    assert len(calls) == 2
    # A numpy array and an eager tensor of the same shape/dtype share a trace.
    assert_close(f(f64([3.0, 4.0])), [6.0, 8.0])
    assert len(calls) == 2


def test_static_string_and_none_arguments_are_in_the_key():
    @df.defun
    def f(x, mode):
        if mode == "double":
            return x * 2.0
        if mode is None:
            return x
        return x * 3.0

    x = df.constant([1.0])
    assert_close(f(x, "double"), [2.0])
    assert_close(f(x, "triple"), [3.0])
    assert_close(f(x, None), [1.0])
    assert_close(f(x, "double"), [2.0])
    assert f.trace_count == 3


def test_unhashable_python_argument_raises_clear_type_error():
    @df.defun
    def f(x, opts):
        return x

    with pytest.raises(TypeError, match="hashable"):
        f(df.constant(1.0), {1, 2})


# ====================================================================== input_signature
def test_input_signature_with_none_sizes_traces_once():
    @df.defun(input_signature=[df.TensorSpec([None, 3], df.float32)])
    def f(x):
        return df.reduce_sum(x, axis=1)

    for n in (1, 4, 7):
        arr = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        assert_close(f(df.constant(arr)), arr.sum(axis=1))
    assert f.trace_count == 1
    cf = f.get_concrete_function()
    assert cf.inputs[0].shape == (None, 3)
    assert f.trace_count == 1


def test_input_signature_as_function_argument():
    f = df.defun(lambda x, y: x @ y, input_signature=[df.TensorSpec([None, 2], df.float64),
                                                      df.TensorSpec([2, None], df.float64)])
    a = np.arange(6, dtype=F64).reshape(3, 2)
    b = np.arange(8, dtype=F64).reshape(2, 4)
    assert_close(f(a, b), a @ b)
    assert_close(f(a[:1], b[:, :1]), a[:1] @ b[:, :1])
    assert f.trace_count == 1


def _signature_fn_with_variable():
    v = df.Variable(5.0)

    @df.defun(input_signature=[df.TensorSpec([None, 3], df.float32)])
    def bump(inputs):
        v.assign_add(1.0)
        return df.reduce_sum(inputs) + v

    return v, bump


def test_input_signature_wrong_shape_raises_value_error_naming_argument_before_running():
    v, bump = _signature_fn_with_variable()
    bump(df.ones([2, 3]))
    assert float(v) == 6.0
    with pytest.raises(ValueError, match="inputs"):
        bump(df.ones([2, 4]))
    with pytest.raises(ValueError, match="inputs"):
        bump(df.ones([3]))                 # wrong rank
    assert float(v) == 6.0
    assert bump.trace_count == 1


def test_input_signature_wrong_dtype_raises_type_error_naming_argument_before_running():
    v, bump = _signature_fn_with_variable()
    with pytest.raises(TypeError, match="inputs"):
        bump(df.ones([2, 3], dtype=df.float64))
    assert float(v) == 5.0
    assert bump.trace_count == 0


def test_input_signature_wrong_structure_raises_type_error():
    v = df.Variable(0.0)

    @df.defun(input_signature=[[df.TensorSpec([2]), df.TensorSpec([2])]])
    def f(pair):
        v.assign_add(1.0)
        return pair[0] + pair[1]

    assert_close(f([df.ones([2]), df.ones([2])]), [2.0, 2.0])
    with pytest.raises(TypeError, match="pair"):
        f([df.ones([2])])
    with pytest.raises(TypeError):
        f(df.ones([2]), df.ones([2]))       # wrong number of arguments
    assert float(v) == 1.0


# ====================================================================== captures
def test_outer_eager_tensor_is_captured_by_value_at_trace_time():
    c = df.constant([1.0, 2.0])

    @df.defun
    def f(x):
        return x + c

    assert_close(f(df.constant([10.0, 10.0])), [11.0, 12.0])
    c = df.constant([100.0, 100.0])   # rebinding the name does not change the trace
    with pytest.warns(df.StaleCaptureWarning, match="closure name 'c'"):
        assert_close(f(df.constant([10.0, 10.0])), [11.0, 12.0])
    assert f.trace_count == 1
    cf = f.get_concrete_function(df.constant([0.0, 0.0]))
    assert len(cf.captured_inputs) == 1
    assert_close(cf.captured_inputs[0], [1.0, 2.0])


def test_variable_captured_by_handle_assignments_visible_both_ways():
    v = df.Variable([1.0, 2.0])

    @df.defun
    def f(x):
        v.assign(v * x)
        return v.read_value() + 0.0

    out = f(df.constant([2.0, 3.0]))
    assert_close(out, [2.0, 6.0])
    assert_close(v, [2.0, 6.0])               # inside -> outside
    v.assign([10.0, 10.0])                    # outside -> inside
    out = f(df.constant([0.5, 0.1]))
    assert_close(out, [5.0, 1.0], rtol=1e-6)
    assert_close(v, [5.0, 1.0], rtol=1e-6)
    assert f.trace_count == 1
    cf = f.get_concrete_function(df.constant([0.0, 0.0]))
    handles = [t for t in cf.captured_inputs if t.dtype is df.resource]
    assert len(handles) == 1


def test_variable_read_inside_sees_outside_assignment_without_retrace():
    v = df.Variable(3.0)

    @df.defun
    def f():
        return v * 2.0

    assert float(f()) == 6.0
    v.assign(4.0)
    assert float(f()) == 8.0
    v.assign_sub(1.0)
    assert float(f()) == 6.0
    assert f.trace_count == 1


def test_variable_passed_as_argument():
    v = df.Variable([1.0, 2.0])
    w = df.Variable([3.0, 4.0])

    @df.defun
    def f(var, x):
        var.assign_add(x)
        return var.read_value() * 1.0

    assert_close(f(v, df.constant([1.0, 1.0])), [2.0, 3.0])
    assert_close(f(w, df.constant([1.0, 1.0])), [4.0, 5.0])
    assert_close(v, [2.0, 3.0])
    assert_close(w, [4.0, 5.0])


def test_creating_variable_inside_defun_raises_tracing_error_naming_line():
    @df.defun
    def f(x):
        v = df.Variable(1.0)  # MARK-create-variable
        return x * v

    with pytest.raises(df.errors.TracingError) as info:
        f(df.constant(1.0))
    msg = str(info.value)
    assert "test_defun.py" in msg
    import inspect
    src, start = inspect.getsourcelines(f.python_function)
    line = start + next(i for i, s in enumerate(src) if "MARK-create-variable" in s)
    assert str(line) in msg


def test_captured_inputs_lists_tensors_and_handles():
    a = df.constant(2.0)
    v = df.Variable(3.0)

    @df.defun
    def f(x):
        return x * a + v

    cf = f.get_concrete_function(df.constant(1.0))
    caps = cf.captured_inputs
    assert len(caps) == 2
    assert sum(1 for t in caps if t.dtype is df.resource) == 1
    values = [float(t) for t in caps if t.dtype is not df.resource]
    assert values == [2.0]
    assert len(cf.inputs) == 1
    assert_close(cf(df.constant(4.0)), 11.0)


# ====================================================================== stateful ordering
def test_assign_then_read_sees_new_value():
    v = df.Variable(1.0)

    @df.defun
    def f():
        before = v.read_value()
        v.assign(5.0)
        after = v.read_value()
        return before, after

    b, a = f()
    assert float(b) == 1.0
    assert float(a) == 5.0


def test_unused_assignment_still_runs():
    v = df.Variable(0.0)

    @df.defun
    def f(x):
        v.assign(x * 2.0)   # result unused
        return x + 1.0

    assert float(f(df.constant(3.0))) == 4.0
    assert float(v) == 6.0
    f(df.constant(-1.0))
    assert float(v) == -2.0


def test_function_with_only_side_effects_and_no_outputs():
    v = df.Variable(0.0)

    @df.defun
    def f():
        v.assign_add(1.0)

    assert f() is None
    assert f() is None
    assert float(v) == 2.0


def test_several_assign_add_in_sequence_all_apply():
    v = df.Variable(0.0)

    @df.defun
    def f(x):
        v.assign_add(x)
        v.assign_add(x * 10.0)
        v.assign_add(x * 100.0)
        return v.read_value()

    assert float(f(df.constant(1.0))) == 111.0
    assert float(f(df.constant(1.0))) == 222.0
    assert float(v) == 222.0


def test_interleaved_assign_and_reads_program_order():
    v = df.Variable(1.0)

    @df.defun
    def f():
        r1 = v.read_value()
        v.assign(v * 3.0)
        r2 = v.read_value()
        v.assign_sub(1.0)
        r3 = v.read_value()
        return [r1, r2, r3]

    assert [float(t) for t in f()] == [1.0, 3.0, 2.0]
    assert [float(t) for t in f()] == [2.0, 6.0, 5.0]


def test_failing_call_leaves_variable_unchanged():
    v = df.Variable(1.0)

    @df.defun(input_signature=[df.TensorSpec([None], df.float32), df.TensorSpec([None], df.float32)])
    def f(a, b):
        v.assign_add(1.0)
        return a + b   # fails at run time when the sizes differ

    assert_close(f(df.ones([2]), df.ones([2])), [2.0, 2.0])
    assert float(v) == 2.0
    with pytest.raises(Exception):
        f(df.ones([2]), df.ones([3]))
    assert float(v) == 2.0


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
        with df.GradientTape() as outer:
            outer.watch(x)
            with df.GradientTape() as inner:
                inner.watch(x)
                y = fn(x)
            dy = inner.gradient(y, x)
            s = df.reduce_sum(dy)
        return dy, outer.gradient(s, x)

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


# ====================================================================== get_concrete_function
def test_get_concrete_function_traces_without_running():
    v = df.Variable(1.0)
    calls = []

    @df.defun
    def f(x):
        calls.append(1)
        v.assign_add(10.0)
        return {"y": x * v, "z": [df.reduce_sum(x)]}

    cf = f.get_concrete_function(df.constant([1.0, 2.0]))
    assert float(v) == 1.0
    assert len(calls) == 1
    assert f.trace_count == 1
    assert len(cf.inputs) >= 1 and cf.inputs[0].shape == (2,)
    assert cf.inputs[0].dtype is df.float32
    assert len(cf.outputs) == 2
    assert set(cf.structured_outputs) == {"y", "z"}
    assert isinstance(cf.structured_outputs["z"], list)
    assert cf.graph is not None
    # Calling the concrete function and the defun use the same trace.
    out = cf(df.constant([1.0, 2.0]))
    assert_close(out["y"], [11.0, 22.0])
    assert float(v) == 11.0
    out = f(df.constant([3.0, 4.0]))
    assert_close(out["z"][0], 7.0)
    assert len(calls) == 1 and f.trace_count == 1
    text = str(cf)
    assert "assign" in text.lower() or "Assign" in text
    assert "mul" in text.lower()
    assert len(text.splitlines()) >= 3


def test_get_concrete_function_accepts_tensor_spec():
    @df.defun
    def f(x):
        return df.reduce_sum(x * x, axis=0)

    cf = f.get_concrete_function(df.TensorSpec([None, 2], df.float64))
    assert cf.inputs[0].shape == (None, 2)
    assert cf.outputs[0].shape == (2,)
    assert_close(cf(f64([[1.0, 2.0], [3.0, 4.0], [0.0, 1.0]])), [10.0, 21.0])


# ====================================================================== errors
def _line_of(fn, marker):
    import inspect
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(src) if marker in s)


def test_if_on_symbolic_tensor_raises_tracing_error_naming_line_and_cond():
    def body(x):
        if df.reduce_sum(x) > 0:  # MARK-if
            return x
        return -x

    f = df.defun(body)
    with pytest.raises(df.errors.TracingError) as info:
        f(df.constant([1.0]))
    assert isinstance(info.value, TypeError)
    msg = str(info.value)
    assert "cond" in msg
    assert str(_line_of(body, "MARK-if")) in msg


def test_bool_on_symbolic_tensor_raises_type_error():
    @df.defun
    def f(x):
        return x if bool(x) else -x

    with pytest.raises(TypeError, match="cond"):
        f(df.constant(1.0))


def test_leaked_symbolic_tensor_used_later_raises_naming_creation_site():
    leaked = []

    def body(x):
        y = x * 2.0  # MARK-leak
        leaked.append(y)
        return y + 1.0

    df.defun(body)(df.constant(1.0))
    with pytest.raises(df.errors.TracingError) as info:
        leaked[0] + df.constant(1.0)
    msg = str(info.value)
    assert str(_line_of(body, "MARK-leak")) in msg
    with pytest.raises(df.errors.TracingError):
        df.exp(leaked[0])


def test_leaked_symbolic_tensor_used_in_another_trace_raises():
    leaked = []

    @df.defun
    def first(x):
        y = x * 2.0
        leaked.append(y)
        return y

    @df.defun
    def second(x):
        return x + leaked[0]

    first(df.constant(1.0))
    with pytest.raises(df.errors.TracingError):
        second(df.constant(1.0))


@pytest.mark.parametrize("bad", ["a string", object()], ids=["str", "object"])
def test_returning_non_tensor_raises_clear_error(bad):
    @df.defun
    def f(x):
        return x, bad

    with pytest.raises((df.errors.TracingError, TypeError)) as info:
        f(df.constant(1.0))
    msg = str(info.value)
    assert type(bad).__name__ in msg
    assert "f" in msg


def test_shape_error_while_tracing_names_op_and_user_line():
    def body(x, y):
        return df.matmul(x, y)  # MARK-matmul

    f = df.defun(body)
    with pytest.raises(Exception) as info:
        f(df.ones([2, 3]), df.ones([4, 5]))
    msg = str(info.value)
    assert "matmul" in msg.lower() or "MatMul" in msg
    assert str(_line_of(body, "MARK-matmul")) in msg


def test_broadcast_shape_error_while_tracing_is_invalid_argument():
    def body(x, y):
        return x + y  # MARK-add

    with pytest.raises(df.errors.InvalidArgumentError) as info:
        df.defun(body)(df.ones([2, 3]), df.ones([4]))
    assert str(_line_of(body, "MARK-add")) in str(info.value)


# ====================================================================== concurrency
def test_threads_calling_one_defun_with_different_shapes():
    calls = []
    lock = threading.Lock()

    @df.defun
    def f(x, w):
        with lock:
            calls.append(tuple(x.shape))
        return df.reduce_sum(df.tanh(x) * w, axis=-1)

    shapes = [(2,), (3,), (4,), (2, 2)]
    errors_seen = []
    results = {}
    barrier = threading.Barrier(8)

    def worker(k):
        try:
            barrier.wait()
            for rep in range(20):
                shape = shapes[(k + rep) % len(shapes)]
                x = np.random.RandomState(k * 100 + rep).randn(*shape)
                w = float(k + 1)
                out = f(f64(x), f64(w))
                expected = np.sum(np.tanh(x) * w, axis=-1)
                if not np.allclose(val(out), expected, rtol=1e-12):
                    errors_seen.append((k, rep, shape))
            results[k] = True
        except Exception as e:  # pragma: no cover - surfaced below
            errors_seen.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors_seen == []
    assert len(results) == 8
    assert f.trace_count == len(shapes)
    assert sorted(calls) == sorted(shapes)


def test_threads_with_gradients_through_one_defun():
    f = df.defun(lambda x: df.reduce_sum(df.sin(x) * x))
    failures = []

    def worker(k):
        try:
            for rep in range(10):
                x = np.random.RandomState(k + 31 * rep).randn(3 + k % 2)
                g = df.gradients_function(f)(f64(x))[0]
                if not np.allclose(val(g), np.cos(x) * x + np.sin(x), rtol=1e-12):
                    failures.append((k, rep))
        except Exception as e:  # pragma: no cover
            failures.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert f.trace_count == 2


# ====================================================================== retracing warning
def test_retracing_warning_says_what_differed():
    @df.defun
    def f(x, n):
        return x * n

    x = df.constant([1.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(12):
            f(x, float(n))
    retrace = [w for w in caught if issubclass(w.category, df.RetracingWarning)]
    assert retrace, "expected a RetracingWarning after many retraces"
    msg = str(retrace[-1].message)
    assert "10.0" in msg and "11.0" in msg
    assert "n: Python float 10.0 -> Python float 11.0" in msg    # named by the parameter
    assert f.trace_count == 12


def test_no_retracing_warning_for_cache_hits():
    @df.defun
    def f(x):
        return x + 1.0

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(50):
            f(df.constant([float(k)]))
    assert not [w for w in caught if issubclass(w.category, df.RetracingWarning)]
    assert f.trace_count == 1


def test_retracing_warning_names_shape_change():
    @df.defun
    def f(x):
        return x * 2.0

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 10):
            f(df.ones([n]))
    retrace = [w for w in caught if issubclass(w.category, df.RetracingWarning)]
    assert retrace
    msg = str(retrace[-1].message)
    assert "[8]" in msg and "[9]" in msg


def test_retracing_warning_points_at_the_callers_line():
    @df.defun
    def f(x, n):
        return x * n

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(10):
            f(df.constant(1.0), float(n))
    retrace = [w for w in caught if issubclass(w.category, df.RetracingWarning)]
    assert retrace
    assert retrace[-1].filename == __file__


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
    with df.GradientTape() as outer:
        x = f64(xs)
        outer.watch(x)
        with df.GradientTape(persistent=True) as inner:
            inner.watch(x)
            y = df.reduce_sum(df.gather(g(x), [0, 2]))
        first = inner.gradient(y, x)
        total = df.reduce_sum(first)
    assert_close(first, want)
    assert_close(outer.gradient(total, x), [2.0, 0.0, 2.0])


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
    assert str(_line_of(body, "MARK-leak2")) in msg, msg
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


# ====================================================================== the cache key
def test_cache_key_prints_and_names_each_changed_argument():
    from defun.cache_key import CacheKey
    x, v = df.constant([1.0, 2.0]), df.Variable([1.0])
    names = ("x", "n", "cfg", "v")
    old = CacheKey.of((x, 2.0, {"lr": 0.1, "layers": [3, 4]}, v), {}, [], names)
    new = CacheKey.of((df.constant([[1.0]]), 2.0, {"lr": 0.2, "layers": [3, 5]}, v), {"flag": True},
                      [], names)
    assert str(old) == ("x: tensor float32[2], n: Python float 2.0, cfg['layers'][0]: Python int 3, "
                        "cfg['layers'][1]: Python int 4, cfg['lr']: Python float 0.1, "
                        "v: variable float32[1]")
    assert new.changes(old) == ["x: tensor float32[2] -> tensor float32[1, 1]",
                                "cfg['layers'][1]: Python int 4 -> Python int 5",
                                "cfg['lr']: Python float 0.1 -> Python float 0.2",
                                "flag: absent -> Python bool True"]
    assert old == CacheKey.of((x, 2.0, {"lr": 0.1, "layers": [3, 4]}, v), {}, [], names)
    assert hash(old) == hash(CacheKey.of((x, 2.0, {"layers": [3, 4], "lr": 0.1}, v), {}, [], names))
    assert new.static_part() != old.static_part()


def test_cache_key_names_var_positional_and_keyword_arguments():
    @df.defun
    def f(x, *rest, scale=1.0):
        return x * scale

    x = df.constant([1.0])
    f(x, 1, 2, scale=2.0)
    cf = f.get_concrete_function(x, 1, 3, scale=3.0)
    key, old = cf._key, next(k for k in f._cache if k != cf._key)
    assert key.changes(old) == ["rest[1]: Python int 2 -> Python int 3",
                                "scale: Python float 2.0 -> Python float 3.0"]
