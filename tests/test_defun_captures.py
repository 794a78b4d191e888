"""defun captures (tensors, variables, closures) and the order of stateful operations in a trace."""
import pytest

import defun as df
from defun_helpers import assert_close


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
    assert "test_defun_captures.py" in msg
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
