"""Python values a tensor `if` joins (issue 29's leftovers): bools that compute as Python's do
(ints in arithmetic, bools in logic), compared with the same Python run eagerly, with
gradients, df.vmap and the exports. (The numeric-protocol table, with joined bools as an
operand kind: tests/test_autograph_python_semantics.py.)"""
import numpy as np
import pytest

import defun as df
from test_autograph_python_semantics import exported_agree, f64

X3 = np.array([0.5, -1.25, 2.0])


def flagged(x):
    """Joined bools in arithmetic, logic, conditions and returned."""
    if df.reduce_sum(x) > 0:
        flag = True
    else:
        flag = False
    n = flag + 1                            # an int: 2 or 1
    s = flag * 2.5 + x * flag               # a float and a float tensor
    off = not flag
    both = flag and off                     # False on both paths: a bool
    either = flag or off                    # True on both paths
    if flag:                                # a tensor if
        y = x * 2.0
    else:
        y = x - 1.0
    if off:
        y = y * 3.0
    return y * n + s + (-flag) + (~flag) * 0.5 + abs(flag) + (flag ^ True) + both + either * 2, off


def test_joined_bools_compute_as_python_bools_do():
    g = df.defun(flagged)
    for row in (X3, -X3):
        got, want = g(f64(row)), flagged(f64(row))
        np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-12)
        assert got[1].dtype is df.bool and bool(got[1].numpy()) is bool(want[1])
        assert want[1] is bool(row.sum() <= 0)          # (eagerly a Python bool)
    x = f64(X3)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = df.reduce_sum(g(x)[0])
    with df.GradientTape() as tape2:
        tape2.watch(x)
        y2 = df.reduce_sum(flagged(x)[0])
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), tape2.gradient(y2, x).numpy())
    np.testing.assert_allclose(y.numpy(), y2.numpy())
    rows = np.stack([X3, -X3, X3 * 0.5])
    want = np.stack([flagged(f64(r))[0].numpy() for r in rows])
    np.testing.assert_allclose(df.vmap(lambda r: flagged(r)[0])(f64(rows)).numpy(), want, rtol=1e-12)
    cf = df.defun(lambda r: flagged(r)[0]).get_concrete_function(f64(-X3))
    exported_agree(cf, [-X3], flagged(f64(-X3))[0].numpy())


def joined_flag(x):
    if df.reduce_sum(x) > 0:
        flag = True
    else:
        flag = False
    return flag


def picks(x):
    """`and`/`or` give an operand, as Python's do: `flag and 2.5` is False or 2.5."""
    flag = joined_flag(x)
    return (flag and 2.5) + 1, (flag or 3) * 1.5, (not flag) + 0, flag & (x[0] > 0), True ^ flag


def test_and_or_not_of_joined_bools_give_what_python_gives():
    """The values Python gives; where its type differs between the paths (`flag and 2.5`: the
    int 1 or the float 3.5) the wider kind's: an operator's value, as JAX's weak types join (a
    variable an `if` assigns must have one kind on both paths: below)."""
    g = df.defun(picks)
    for row in (X3, -X3):
        got, want = g(f64(row)), picks(f64(row))
        assert [t.dtype for t in got] == [df.float32, df.float32, df.int32, df.bool, df.bool]
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.numpy(), df.convert_to_tensor(b).numpy())


def test_uses_that_need_the_value_are_typed_errors():
    x = f64(X3)
    for needs_value in (int, float, lambda v: [1, 2][v], lambda v: "ab" * v):
        with pytest.raises(df.errors.TracingError, match="needs the value of 'flag'.*Python bools the tensor if"):
            df.defun(lambda t: needs_value(joined_flag(t)))(x)
        with pytest.raises(TypeError):      # (UnknownValueError is a TypeError, as Python's for a non-number)
            df.defun(lambda t: needs_value(joined_flag(t)))(x)
    # a tensor's bool index: the error a Python bool gives there
    with pytest.raises(TypeError, match="boolean index True is not supported"):
        x[True]
    with pytest.raises(TypeError, match="boolean index 'flag' .* is not supported"):
        df.defun(lambda t: t[joined_flag(t)])(x)


# ------------------------------------------------------------------ numbers of two kinds
def two_kinds(x, which):
    """`a` is a Python number of one kind on one path, of another on the other."""
    pairs = {"int|float": (1, 2.5), "int|complex": (2, 1j), "float|complex": (0.5, 1 - 1j),
             "bool|float": (True, 0.5), "bool|int": (True, 3)}
    if df.reduce_sum(x) > 0:     # the join
        a = pairs[which][0]
    else:
        a = pairs[which][1]
    return a * x


@pytest.mark.parametrize("which", ["int|float", "int|complex", "float|complex", "bool|float", "bool|int"])
def test_numbers_of_two_kinds_are_a_tracing_error_naming_the_variable_and_lines(which):
    """API.md: a variable a converted statement assigns has the same dtype on every path, else
    a TracingError naming it, the statement's line and the lines that differ (as TF's, whose
    branches give an int32 and a float32): Python numbers of two kinds are that case."""
    import inspect      # noqa: E402 - the lines of the join, for the message
    start = inspect.getsourcelines(two_kinds)[1]
    first, second = which.split("|")
    with pytest.raises(df.errors.TracingError,
                       match=f"'a' differs between the branches of the tensor if at .*test_autograph_joined_values.py:"
                             f"{start + 4}: a Python {first} when true but a Python {second} when false "
                             rf"\(true: line {start + 5}; false: line {start + 7}\)"):
        df.defun(lambda x: two_kinds(x, which))(f64(X3))


def ternaries(x):
    """Conditional expressions join Python values as an `if` statement does."""
    flag = True if df.reduce_sum(x) > 0 else False
    a = 1.0 if df.reduce_sum(x) > 0 else 2.5
    return flag + 1, not flag, a * x, a


def test_conditional_expressions_join_python_values_as_if_statements_do():
    g = df.defun(ternaries)
    for row in (X3, -X3):
        got, want = g(f64(row)), ternaries(f64(row))
        assert [t.dtype for t in got] == [df.int32, df.bool, df.float64, df.float32]
        for p, q in zip(got, want):
            np.testing.assert_array_equal(p.numpy(), df.convert_to_tensor(q).numpy())
    with pytest.raises(df.errors.TracingError, match="the conditional expression at .* gives a Python int when "
                                                     "true but a Python float when false"):
        df.defun(lambda x: (1 if df.reduce_sum(x) > 0 else 2.5) * x)(f64(X3))


def given_to_ops(x):
    """Joined bools (and comparisons of joined numbers) where df functions take bools."""
    flag = joined_flag(x)
    small = (2.0 if flag else 0.5) < 1
    assert not (flag and small), "never both"
    return (df.cond(flag, lambda: x * 2.0, lambda: x * 3.0), df.cond(small, lambda: x, lambda: -x),
            df.where(flag, x, -x), df.logical_and(small, x > 0), df.cast(flag, df.float32))


def test_joined_bools_are_bools_where_df_takes_them():
    g = df.defun(given_to_ops)
    for row in (X3, -X3):
        for got, want in zip(g(f64(row)), given_to_ops(f64(row))):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got.numpy(), want.numpy())


def returns_two_kinds(x):
    if df.reduce_sum(x) > 0:
        return 1
    return 2.5


def test_early_returns_of_an_int_and_a_float_are_a_tracing_error():
    with pytest.raises(df.errors.TracingError, match="the function returns different kinds of value on the two "
                                                     "paths of the tensor if at .*: a Python int when true but a "
                                                     "Python float when false"):
        df.defun(lambda x: returns_two_kinds(x) * x)(f64(X3))
