"""AutoGraph against the behaviours of TensorFlow's own AutoGraph reference tests
(tensorflow/python/autograph/tests: conditionals, loops, early returns, break/continue,
logical expressions, nested control flow, loop scoping, illegal cases), written anew for
df with the names mapped (tf.constant -> df.constant, tf.range -> df.range, tf.greater ->
df.greater, tf.Variable -> df.Variable, tf.TensorArray -> a list appended to, tf.name_scope
-> a context manager). Each function runs through df.defun and eagerly with the same
inputs (Python values or int32 tensors) and must give the same values; where TF refuses a
case at run time ("loop must iterate at least once"), df refuses it while tracing with a
TracingError that says why. Two TF refusals df supports: for/else and while/else, and a
tensor `break`/`return` inside a Python loop (both compared with the eager run here).
"""
from itertools import permutations as _permutations

import numpy as np  # noqa: F401
import pytest

import defun as df
from autograph_reference_helpers import KINDS, _product, matches_eager, refused, same, scope, tensor  # noqa: F401


# ---------------------------------------------------------------------------------------
# conditionals
def bump_if_below(n):
    k = 0
    if k < n:
        k += 1
    return k


def bump_either_way(n):
    k = 0
    if k < n:
        k += 1
    else:
        k += 2
    return k


def two_vars(n):
    a, b = 0, 1
    if a < n:
        a += 1
        b *= 10
    else:
        a += 2
        b *= 20
    return a, b


def local_in_branch(c):
    k = 0
    if c:
        t = 5
        k = t * 2
    return k


def local_modified_in_branch(c):
    k, t = 0, 3
    if c:
        t = t + 1
        k = t * 2
    return k


def successive(n1, n2):
    s, k = 0, 0
    if k < n1:
        s = s * 10 + 7
        k += 1
    k = 0
    if k < n2:
        s = s * 10 + 3
    else:
        s = s * 11 + 5
    return s


def nested(n1, n2):
    out = 0
    if n1 > 0:
        inner = 1
        if n2 > 0:
            inner = inner * 10 + 2
        else:
            inner = inner * 10 + 4
        out = out * 1000 + inner
    else:
        out = -1
    return out


@pytest.mark.parametrize("fn,n,kind", _product(
    [bump_if_below, bump_either_way, two_vars], [0, 1], KINDS))
def test_conditionals_with_several_vars(fn, n, kind):
    matches_eager(fn, KINDS[kind](n))


@pytest.mark.parametrize("fn,c,kind", _product([local_in_branch, local_modified_in_branch],
                                                        [True, False], ["py", "bool"]))
def test_conditionals_with_local_vars(fn, c, kind):
    matches_eager(fn, c if kind == "py" else df.constant(c))


@pytest.mark.parametrize("fn,n1,k1,n2,k2", _product([successive, nested], [0, 1], KINDS, [0, 1], KINDS))
def test_conditionals_composed(fn, n1, k1, n2, k2):
    matches_eager(fn, KINDS[k1](n1), KINDS[k2](n2))


def assigns_variable(c, v):
    v.assign(0)
    if c:
        v.assign_add(1)
    else:
        v.assign_add(2)
    return v.read_value()


@pytest.mark.parametrize("c,kind", _product([True, False], ["py", "bool"]))
def test_conditionals_with_no_vars_but_a_variable(c, kind):
    c = c if kind == "py" else df.constant(c)
    same(df.defun(assigns_variable)(c, df.Variable(7)), assigns_variable(c, df.Variable(7)))


def creates_in_if(c):
    if c:
        k = 1
    return k


def creates_in_else(c):
    if c:
        pass
    else:
        k = 2
    return k


creates_else_path = creates_in_else      # False runs the else branch (the one assigning k)


def creates_in_both(c):
    if c:
        k = 1
    else:
        k = 2
    return k


def none_in_one_branch(c):
    a, b = 0, 1
    if c:
        a = None
        b = 2
    return a, b


def none_in_both_branches(c):
    if c:
        a, b = None, 1
    else:
        a, b = None, 2
    return a, b


def test_var_created_on_the_path_taken_is_legal_on_python_values():
    matches_eager(creates_in_if, True)
    matches_eager(creates_in_else, False)
    matches_eager(none_in_one_branch, True)
    matches_eager(none_in_both_branches, False)
    for c in (True, False):
        matches_eager(creates_in_both, c)
        matches_eager(creates_in_both, df.constant(c))
        matches_eager(none_in_both_branches, df.constant(c))


@pytest.mark.parametrize("fn,c", _product([creates_in_if, creates_in_else], [True, False]))
def test_var_created_in_one_branch_of_a_tensor_if_is_refused(fn, c):
    refused(fn, df.constant(c), match="'k' is assigned only when")
    with pytest.raises(df.errors.TracingError, match="'k' is used before assignment") as e:
        df.defun(fn)(fn is creates_else_path)
    assert isinstance(e.value, UnboundLocalError)       # Python's error there


@pytest.mark.parametrize("c", [True, False])
def test_none_against_a_number_in_a_tensor_if_is_refused(c):
    refused(none_in_one_branch, df.constant(c), match="'a' differs")


def nested_return(c1, c2):
    if c1:
        if c2:
            return 1
    return 2


@pytest.mark.parametrize("c1,c2", _product([True, False], [True, False]))
def test_nested_if_with_a_return_on_one_path(c1, c2):
    matches_eager(nested_return, c1, c2)
    matches_eager(nested_return, df.constant(c1), df.constant(c2))


# ---------------------------------------------------------------------------------------
# early returns
def return_or_square(x):
    if x > 0:
        return x
    return x * x


def return_local(c):
    t = tensor(1)
    if c:
        return t
    t = df.stack([t, t])
    return df.reduce_sum(t)


def maybe_no_return(x):
    if x > 0:
        if x < 5:
            return x
    else:
        return x * x * x


def three_way(x):
    if x > 0:
        if x < 5:
            return x
        else:
            return x * x
    else:
        return x * x * x


def three_way_in_scopes(x):
    with scope():
        if x > 0:
            if x < 5:
                with scope():
                    return x
            else:
                return x * x
        else:
            return x * x * x
    return x * x * x * x


def return_in_try_finally(x):
    try:
        if x > 0:
            return 1
        return 0
    finally:
        x = x + 1


def return_before_a_loop(c1, c2, n):
    if c1:
        if c2:
            return 1
    for _ in range(n):
        pass
    return 2


@pytest.mark.parametrize("fn,x,kind", _product(
    [return_or_square, three_way, three_way_in_scopes, return_in_try_finally], [-1, 0, 3, 6], KINDS))
def test_early_returns(fn, x, kind):
    matches_eager(fn, KINDS[kind](x))


@pytest.mark.parametrize("c,kind", _product([True, False], ["py", "bool"]))
def test_return_dependent_on_a_local(c, kind):
    matches_eager(return_local, c if kind == "py" else df.constant(c))


@pytest.mark.parametrize("x", [0, 3, 5])
def test_a_path_without_return(x):
    matches_eager(maybe_no_return, x)
    refused(maybe_no_return, tensor(x), match="every path must return|differs")


@pytest.mark.parametrize("c1,c2,n", _product([True, False], [True, False], [0, 1, 2]))
def test_possible_return_before_a_loop(c1, c2, n):
    matches_eager(return_before_a_loop, c1, c2, n)
    matches_eager(return_before_a_loop, df.constant(c1), df.constant(c2), tensor(n))


# ---------------------------------------------------------------------------------------
# logical expressions
def ors(x, y, z):
    return x or y or z


def ands(x, y, z):
    return x and y and z


def mixed(x, y, z):
    return x or y or z and y and z


def ors_with_call(x, y, z):
    late = lambda: z    # noqa: E731
    return x or y or late()


def chained(x, y, z):
    return x < y and y < z


@pytest.mark.parametrize("fn,args,kind", _product(
    [ors, ands, mixed, ors_with_call], _product([False, True], repeat=3), ["py", "bool"]))
def test_logical_expressions(fn, args, kind):
    matches_eager(fn, *(args if kind == "py" else [df.constant(a) for a in args]))


@pytest.mark.parametrize("args,kind", _product(list(_permutations([1, 2, 3])), KINDS))
def test_chained_comparisons(args, kind):
    matches_eager(chained, *[KINDS[kind](a) for a in args])


@pytest.mark.parametrize("args", [(1, 1), (1, 2)])
def test_equality_of_python_values(args):
    matches_eager(lambda x, y: (x == y, x != y), *args)


