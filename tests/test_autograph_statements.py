"""AutoGraph: break, continue, early return, conditional expressions, and/or/not, assert,
print, lists that grow in tensor loops, and the user's helpers converted too -- each
compared with the same Python run eagerly."""
import numpy as np
import pytest

import defun as df


def check(fn, *args):
    got, want = df.defun(fn)(*args), fn(*args)
    if isinstance(want, (list, tuple)):
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)
    else:
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
    return got


def rows(*shape):
    return df.constant(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 3.0)


def early_return(x):
    if df.reduce_sum(x) > 0:
        return x * 2.0
    return -x


@pytest.mark.parametrize("x", [[1.0, 2.0], [-1.0, -2.0]])
def test_early_return_on_a_tensor(x):
    check(early_return, df.constant(x))


def test_return_inside_a_tensor_loop():
    def first_big_row(x):
        for row in x:
            if df.reduce_sum(row) > 5.0:
                return row
        return x[0] * 0.0
    check(first_big_row, rows(4, 3))
    check(first_big_row, rows(1, 3))


def test_break_and_continue_in_a_for_over_rows():
    def f(x):
        s = 0.0
        for row in x:
            if df.reduce_sum(row) < 0.0:
                continue
            if df.reduce_sum(row) > 20.0:
                break
            s = s + df.reduce_sum(row)
        return s
    check(f, rows(5, 3))


def test_while_true_with_a_tensor_break():
    def f(n):
        i = 0
        while True:
            i += 1
            if i >= n:
                break
        return i
    check(f, df.constant(7))


def test_while_else_runs_only_without_break():
    def f(n, limit):
        i = 0
        hit = 0
        while i < n:
            i += 1
            if i > limit:
                break
        else:
            hit = 1
        return i, hit
    check(f, 5, 10)
    check(f, 5, 2)


def test_break_in_a_python_loop_on_a_tensor_condition():
    def f(x):
        s = 0.0
        for i in range(4):
            if x[i] > 2.0:
                break
            s = s + x[i]
        return s
    check(f, df.constant([1.0, 2.0, 3.0, 4.0]))
    check(f, df.constant([1.0, 1.0, 1.0, 1.0]))


def test_conditional_expression_and_logical_operators():
    def f(x):
        big = df.reduce_sum(x) > 0 and df.reduce_max(x) < 10.0
        y = x * 2.0 if big or df.reduce_min(x) > 100.0 else x - 1.0
        return y if not df.reduce_sum(y) > 1000.0 else y * 0.0
    check(f, df.constant([1.0, 2.0]))
    check(f, df.constant([-1.0, -2.0]))


def test_and_or_short_circuit_on_python_values():
    calls = []

    def side(v):
        calls.append(v)
        return v

    def f(x, flag):
        if flag and side(True):
            x = x + 1.0
        if flag or side(False):
            x = x * 3.0
        return x
    check(f, df.constant(1.0), False)
    assert calls == [False, False]     # `flag and ...` never called side; `or` did (twice: defun + eager)


def test_assert_on_a_tensor_is_a_check_op():
    def f(x):
        assert df.reduce_sum(x) > 0, "needs a positive sum"
        return x * 2.0
    g = df.defun(f)
    check(f, df.constant([1.0]))
    assert "assert" in [n.op.name for n in g.get_concrete_function(df.constant([1.0])).graph.nodes]
    with pytest.raises(df.errors.InvalidArgumentError, match="needs a positive sum") as info:
        g(df.constant([-1.0]))
    assert f"{__file__}:" in str(info.value)


def test_print_of_a_tensor_prints_on_every_call(capsys):
    @df.defun
    def f(x):
        print("x is", x)
        return x + 1.0
    f(df.constant([1.0, 2.0]))
    f(df.constant([3.0, 4.0]))
    out = capsys.readouterr().out
    assert "x is [1. 2.]" in out and "x is [3. 4.]" in out


def test_list_append_in_a_tensor_loop_collects_rows():
    def f(x):
        out = []
        for row in x:
            out.append(row * 2.0)
        return df.stack(out)
    check(f, rows(4, 3))


def test_list_append_in_a_while_with_a_condition():
    def f(n):
        kept = []
        i = 0
        while i < n:
            if df.equal(i % 2, 0):
                kept.append(df.cast(i, df.float32))
            i += 1
        return df.stack(kept)
    check(f, df.constant(7))


def _helper(x):
    if x > 0:
        return x
    return -x


class Scaler:
    def __init__(self, k):
        self.k = k

    def apply(self, x):
        if df.reduce_sum(x) > 0:
            return x * self.k
        return x


def test_the_users_helpers_methods_and_closures_are_converted():
    s = Scaler(3.0)
    k = 2.0

    def closure(x):
        if df.reduce_sum(x) > 1.0:
            return x * k
        return x

    def f(x):
        return _helper(df.reduce_sum(x)) + df.reduce_sum(s.apply(x)) + df.reduce_sum(closure(x))
    check(f, df.constant([-1.0, -2.0]))
    check(f, df.constant([1.0, 2.0]))


def test_nested_functions_and_decorators_keeping_wrapped():
    import functools

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*a):
            return fn(*a) + 1.0
        return wrapper

    @deco
    def g(x):
        if df.reduce_sum(x) > 0:
            return x
        return -x

    def f(x):
        def inner(y):
            while df.reduce_sum(y) < 10.0:
                y = y * 2.0
            return y
        return inner(g(x))
    check(f, df.constant([1.0, 0.5]))


class _Gain:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        if df.reduce_sum(x) > 0:
            return x * self.k
        return x


class _ShiftedGain(_Gain):
    def __call__(self, x):
        return super().__call__(x) + 1.0      # zero-argument super() in converted code


def test_callable_objects_super_and_nonlocal_are_converted():
    gain = _ShiftedGain(2.0)

    def f(x):
        total = x

        def add(y):
            nonlocal total
            if df.reduce_sum(y) > 0:
                total = total + y
        add(x)
        return gain(total)
    check(f, df.constant([1.0, 2.0]))
    check(f, df.constant([-1.0, -2.0]))


def test_a_walrus_in_a_branch_assigns_the_functions_variable():
    def f(x):
        y = x
        if df.reduce_sum(x) > 0:
            z = (y := x * 3.0) + 1.0
        else:
            z = y - 1.0
        return y + z
    check(f, df.constant([1.0, 2.0]))
    check(f, df.constant([-1.0, -2.0]))


def _row_sign(row):
    if df.reduce_sum(row) > 0:
        return row
    return -row


def test_functions_given_to_df_control_flow_are_converted():
    def f(x):
        return df.map_fn(_row_sign, x), df.cond(df.reduce_sum(x) > 0, lambda: _row_sign(x[0]), lambda: x[1])
    check(f, df.constant([[1.0, 2.0], [-3.0, 1.0]]))
