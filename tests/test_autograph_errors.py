"""AutoGraph errors that teach: each a df.errors.TracingError naming the variable, the
statement's line and the line that differs, pointing at the user's file; tracebacks show
the user's lines, never generated code; unconvertible functions say why."""
import inspect
import linecache
import traceback
import types

import numpy as np
import pytest

import defun as df

HERE = __file__


def line_of(fn, marker):
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, text in enumerate(lines) if marker in text)


def trace_error(fn, *args):
    with pytest.raises(df.errors.TracingError) as info:
        df.defun(fn)(*args)
    return str(info.value), info


def test_a_variable_defined_on_one_path_only():
    def f(x):
        if df.reduce_sum(x) > 0:     # MARK-if
            y = x * 2.0              # MARK-y
        return y
    msg, _ = trace_error(f, df.constant([1.0]))
    assert "'y'" in msg and f"{HERE}:{line_of(f, 'MARK-if')}" in msg and f"line {line_of(f, 'MARK-y')}" in msg


def test_a_dtype_that_differs_between_branches():
    def f(x):
        if df.reduce_sum(x) > 0:                 # MARK-if
            y = x
        else:
            y = df.cast(x, df.int32)             # MARK-else
        return y
    msg, _ = trace_error(f, df.constant([1.0]))
    assert "'y'" in msg and "float32" in msg and "int32" in msg
    assert f"{HERE}:{line_of(f, 'MARK-if')}" in msg and f"line {line_of(f, 'MARK-else')}" in msg


def test_a_structure_that_differs_between_branches():
    def f(x):
        if df.reduce_sum(x) > 0:     # MARK-if
            y = (x, x)
        else:
            y = x
        return y
    msg, _ = trace_error(f, df.constant([1.0]))
    assert "'y'" in msg and "structure" in msg and f":{line_of(f, 'MARK-if')}" in msg


def test_a_python_value_and_a_string_cannot_join():
    def f(x):
        if df.reduce_sum(x) > 0:
            mode = "a"
        else:
            mode = "b"
        return x if mode == "a" else -x
    msg, _ = trace_error(f, df.constant([1.0]))
    assert "'mode'" in msg and "str" in msg


def test_a_dtype_that_changes_across_iterations():
    def f(x, n):
        y = x                                   # float32
        i = 0
        while i < n:                            # MARK-while
            y = df.cast(y, df.float64) * 2.0    # MARK-y
            i += 1
        return y
    msg, _ = trace_error(f, df.constant(1.0), df.constant(3))
    assert "'y'" in msg and "float32" in msg and "float64" in msg
    assert f":{line_of(f, 'MARK-while')}" in msg and f"line {line_of(f, 'MARK-y')}" in msg


def test_a_rank_that_changes_across_iterations():
    def f(x):
        for _ in df.range(3):        # MARK-for
            x = df.expand_dims(x, 0)
        return x
    msg, _ = trace_error(f, df.constant([1.0]))
    assert "'x'" in msg and "rank" in msg and f":{line_of(f, 'MARK-for')}" in msg


@pytest.mark.parametrize("op", ["==", "!="])
def test_equality_on_a_tensor_in_a_condition(op):
    def g(x):
        if x == 1.0:        # MARK-eq
            x = x + 1.0
        return x

    def h(x):
        while x != 1.0:     # MARK-ne
            x = x + 1.0
        return x
    fn, mark, fix = (g, "MARK-eq", "df.equal") if op == "==" else (h, "MARK-ne", "df.not_equal")
    msg, _ = trace_error(fn, df.constant(0.0))
    assert fix in msg and f"{HERE}:{line_of(fn, mark)}" in msg


def test_equality_of_python_values_in_conditions_is_python_s():
    """`==` / `!=` on Python values (ints, floats, strings, None, bools, numpy scalars) in
    a converted condition answer as Python does; a tensor on either side is refused."""
    def f(x, a, b):
        if a == b:
            x = x + 1.0
        if a != b:
            x = x * 3.0
        return x
    cases = [(1, 1), (1, 2), (1, 1.0), ("s", "s"), ("s", "t"), (None, None), (None, 0), (True, 1),
             (np.float32(2), 2), (np.int64(3), 4)]
    for a, b in cases:
        got = df.defun(lambda x: f(x, a, b))(df.constant(1.0)).numpy()
        assert got == ((1.0 + 1.0) if a == b else 3.0), (a, b)

    def g(x):
        if 1.0 == x:
            x = x + 1.0
        return x
    msg, _ = trace_error(g, df.constant(0.0))
    assert "df.equal" in msg


def test_mutating_a_python_object_in_a_tensor_loop():
    def f(x):
        seen = {}
        for row in x:
            seen["last"] = row       # MARK-mut
        return x
    msg, _ = trace_error(f, df.ones([3, 2]))
    assert "'seen'" in msg and f"{HERE}:{line_of(f, 'MARK-mut')}" in msg

    class Box:
        pass
    box = Box()

    def g(x):
        for row in x:
            box.value = row          # MARK-attr
        return x
    msg, _ = trace_error(g, df.ones([3, 2]))
    assert "'box'" in msg and f":{line_of(g, 'MARK-attr')}" in msg


def test_mutating_python_objects_in_python_loops_is_fine():
    def f(x):
        seen = {}
        for k in range(3):
            seen[k] = x * k
        return seen[2]
    np.testing.assert_allclose(df.defun(f)(df.constant(2.0)).numpy(), 4.0)


def test_a_variable_assigned_only_inside_a_tensor_loop_used_after_it():
    def f(x):
        for row in x:            # MARK-for
            last = row           # MARK-last
        return last
    msg, _ = trace_error(f, df.ones([3, 2]))
    assert "'last'" in msg and f":{line_of(f, 'MARK-for')}" in msg and f"line {line_of(f, 'MARK-last')}" in msg


def test_no_traceback_frame_shows_generated_code():
    def f(x):
        for row in x:
            if df.reduce_sum(row) > 0:
                y = row + undefined_name      # noqa: F821  MARK-bad
        return x
    with pytest.raises(NameError) as info:
        df.defun(f)(df.ones([2, 2]))
    frames = traceback.extract_tb(info.value.__traceback__)
    mine = [fr for fr in frames if fr.filename == HERE]
    assert mine[-1].lineno == line_of(f, "MARK-bad")
    for fr in frames:
        assert "__ag" not in fr.name and "ag__" not in (fr.line or "")


def test_unreadable_source_is_traced_as_written_and_says_why():
    ns = {"df": df}
    exec("def g(x):\n    if df.reduce_sum(x) > 0:\n        return x\n    return -x\n", ns)
    with pytest.raises(df.errors.TracingError, match=r"not converted by autograph: its source cannot be read"):
        df.defun(ns["g"])(df.ones([2]))

    # a lambda sharing its line with another converts by its columns (Python >= 3.11); where
    # the columns cannot tell (older Pythons) it runs as written and says why
    from defun.autograph import conversion
    two = [lambda x: x if df.reduce_sum(x) > 0 else -x, lambda x: x]
    no_columns = types.SimpleNamespace(co_name="<lambda>", co_filename=HERE, co_firstlineno=line_of(
        test_unreadable_source_is_traced_as_written_and_says_why, "two = ["))
    with pytest.raises(conversion._NoSource, match="lambda whose line does not hold it alone"):
        conversion._parse(linecache.getlines(HERE), no_columns)
    np.testing.assert_allclose(df.defun(two[0])(-df.ones([2])).numpy(), [1.0, 1.0])


def test_a_lambda_alone_on_its_line_converts():
    h = df.defun(lambda x: x * 2.0 if df.reduce_sum(x) > 0 else -x)
    np.testing.assert_allclose(h(df.ones([2])).numpy(), [2.0, 2.0])
    np.testing.assert_allclose(h(-df.ones([2])).numpy(), [1.0, 1.0])


def test_library_functions_are_not_converted():
    import json
    from defun.autograph.conversion import reason_not_converted, converted
    assert converted(json.dumps) is json.dumps
    assert converted(df.control_flow.cond) is df.control_flow.cond
    assert reason_not_converted(json.dumps) is None        # nothing to say: it is a library's


def test_conversion_happens_once_per_function():
    from defun.autograph.conversion import converted

    def f(x):
        return x if x > 0 else -x
    assert converted(f) is converted(f)
    g = converted(f)
    assert converted(g) is g          # converted code is not converted again
