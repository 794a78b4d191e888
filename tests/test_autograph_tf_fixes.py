"""AutoGraph gaps found by running TensorFlow's own reference tests through
tests/tf_reference (each compared with the same Python run eagerly)."""
import functools

import numpy as np
import pytest

import defun as df
from autograph_reference_helpers import matches_eager, tensor


def _raises():
    raise ValueError("used for control flow")


def return_of_a_call_that_raises():
    try:
        return _raises()
    except ValueError:
        pass
    return 1


def return_that_raises_after_a_tensor_if(c):
    if c:
        return 2
    try:
        return _raises()
    except ValueError:
        pass
    return 1


def test_a_return_whose_value_raises_has_not_returned():
    # the returned value is computed before the function counts as returned: the
    # `except` that catches its error goes on to the next return, as in Python
    matches_eager(return_of_a_call_that_raises)
    for c in (True, False):
        matches_eager(return_that_raises_after_a_tensor_if, tensor(c))
        matches_eager(return_that_raises_after_a_tensor_if, c)


def _scaled(x, n):
    for i in range(n):
        yield x * i


def _counted(x, n):
    i = 0
    while i < n:
        i += 1
        yield x + i


def consumes_generators(x):
    s = 0.0
    for v in _scaled(x, 3):
        s = s + v
    return s, list(_counted(x, 2)), sum(_scaled(x, 4))


def test_generators_called_in_a_defun_run_as_in_python():
    matches_eager(consumes_generators, df.constant(2.0))


def _a_generator(x):
    yield x


def test_a_defun_of_a_generator_function_says_generators_are_not_traced():
    with pytest.raises(NotImplementedError, match="generator function, and generators cannot be traced") as e:
        df.defun(_a_generator)(df.constant(1.0))
    assert isinstance(e.value, df.errors.UnimplementedError)


@functools.lru_cache(maxsize=None)
def _cached_branch(x):
    if df.reduce_sum(x) > 0:
        return x * 2.0
    return -x


def _forwarding(f):
    @functools.wraps(f)
    def wrapper(*args):
        return f(*args)
    return wrapper


@_forwarding
def _wrapped_branch(x):
    if df.reduce_sum(x) > 0:
        return x * 3.0
    return -x


class _Model:
    @functools.lru_cache(maxsize=None)
    def branch(self, x):
        if df.reduce_sum(x) > 0:
            return x + 1.0
        return x - 1.0


def calls_decorated(x):
    return _cached_branch(x), _wrapped_branch(x), _Model().branch(x)


@pytest.mark.parametrize("v", [[1.0, 2.0], [-1.0, -2.0]])
def test_functions_under_decorators_that_keep_wrapped_are_converted(v):
    x = df.constant(v)
    matches_eager(calls_decorated, x)
    matches_eager(_cached_branch, x)      # the defun's own function under lru_cache
    matches_eager(_wrapped_branch, x)


@functools.singledispatch
def _dispatched(x):
    return x * 2.0


@_dispatched.register(int)
def _(x):
    return x + 100


def calls_dispatched(x):
    return _dispatched(x), _dispatched(3)


def test_singledispatch_still_dispatches_by_type():
    matches_eager(calls_dispatched, df.constant(1.5))


def prints_a_dict_beside_a_tensor(x):
    print("x is", x, {"foo": "bar", "n": [1.5, "s", None]}, ("t",))


def test_print_shows_strings_inside_containers_as_python_does(capsys):
    x = df.constant([1, 2, 3])
    df.defun(prints_a_dict_beside_a_tensor)(x)
    got = capsys.readouterr().out
    prints_a_dict_beside_a_tensor(x.numpy())
    assert got == capsys.readouterr().out == "x is [1 2 3] {'foo': 'bar', 'n': [1.5, 's', None]} ('t',)\n"


def python_loop_creates_var(n):
    i = 0
    while i < n:
        v = i * 2
        i += 1
    return v


def python_if_creates_var(c):
    if c:
        j = 1
    return j


def test_a_variable_a_python_path_leaves_unassigned_is_an_unbound_local_error():
    # as Python raises it (and still a TracingError naming the variable and the line)
    for fn, arg in ((python_loop_creates_var, 0), (python_if_creates_var, False)):
        with pytest.raises(UnboundLocalError):
            fn(arg)
        with pytest.raises(UnboundLocalError, match=r"'[vj]' is used before assignment at .*fixes.py:\d+") as e:
            df.defun(fn)(arg)
        assert isinstance(e.value, df.errors.TracingError)
    matches_eager(python_loop_creates_var, 2)


def returns_on_some_paths(x):
    if x > 0:
        if x < 5:
            return x
    else:
        return x * x * x


def test_a_return_missing_on_a_path_of_a_tensor_if_is_said_in_the_users_words():
    matches_eager(returns_on_some_paths, 3)
    with pytest.raises(df.errors.TracingError, match=r"the function returns different kinds of value on the "
                       r"two paths of the tensor if at .*fixes.py:\d+: an int32\[\] tensor when true but a Python "
                       r"NoneType \(None\) when false \(a path that ends without `return` returns None\)") as e:
        df.defun(returns_on_some_paths)(df.constant(3))
    assert "retval__" not in str(e.value)


def dtype_changes_in_a_loop(n):
    v = df.constant(0, df.int32)
    for _ in df.range(n):
        v = df.constant(0.0, df.float32)
    return v


def structure_changes_in_a_loop(n):
    s = {"a": df.constant(0)}
    for _ in df.range(n):
        s = df.constant(7.0)
    return s


def test_a_loop_variable_that_changes_says_what_it_was_before_the_loop_and_after():
    with pytest.raises(TypeError, match=r"'v' has dtype int32 before the loop, but dtype float32 after an "
                                        r"iteration \(the tensor loop at .*fixes.py:\d+; assigned at line \d+\)"):
        df.defun(dtype_changes_in_a_loop)(df.constant(2))
    with pytest.raises(TypeError, match=r"'s' does not have the same nested structure before the loop "
                                        r"\(\{'a': tensor\}\) and after an iteration \(tensor\)"):
        df.defun(structure_changes_in_a_loop)(df.constant(2))


def dict_item_set_in_both_branches(a):
    x = {"a": {"a": a}}
    alias = x["a"]
    if x["a"]["a"] > 0:
        x["a"]["b"] = 1
    else:
        x["a"]["b"] = -1
    return x, alias["b"]


def list_item_set_and_appended_in_both_branches(a):
    x = [a, 0]
    if x[0] > 0:
        x[1] = 1
        x.append(a * 2)
    else:
        x[1] = -1
        x.append(a * 3)
    return x


def dict_item_set_in_one_branch(a):
    x = {"a": a}
    if x["a"] > 0:
        x["b"] = 1
    return x


@pytest.mark.parametrize("a", [2, -2])
def test_objects_changed_in_place_in_the_branches_of_a_tensor_if(a):
    # each branch changes its own copy (one branch's change used to leak into the other,
    # the last traced winning), and the object is still the same object after the if
    matches_eager(dict_item_set_in_both_branches, tensor(a))
    matches_eager(list_item_set_and_appended_in_both_branches, tensor(a))
    matches_eager(dict_item_set_in_one_branch, a)
    with pytest.raises(df.errors.TracingError, match="'x' differs between the branches of the tensor if"):
        df.defun(dict_item_set_in_one_branch)(tensor(a))


def imbalanced_conditional_expression(x):
    parts = df.unstack(x) if df.size(x) > 0 else []
    return x * 2.0 + len(parts)


def balanced_conditional_expressions(x):
    y = -x if df.reduce_sum(x) < 5.0 else x
    return (2.0 * y if df.reduce_sum(y) < 5.0 else y), ((x, 1.0) if df.reduce_sum(x) > 0 else (-x, 1.0))


def test_a_conditional_expression_whose_branches_differ_names_its_line():
    with pytest.raises(ValueError, match=r"the conditional expression at .*fixes.py:\d+ must return the same nested "
                                         r"structure in both branches .*: \(tensor,\) when true but \[\] when false"):
        df.defun(imbalanced_conditional_expression)(df.constant([1.0]))
    for v in ([1.0, 2.0], [-4.0, 1.0], [3.0, 4.0]):
        matches_eager(balanced_conditional_expressions, df.constant(v))


def deletes_in_both_branches(c):
    i = 1
    j = 2
    if c:
        del i
        j = 3
    else:
        del i
    return j


def deletes_on_one_path(c):
    i = 1
    if c:
        del i
    return i


def deletes_then_reads(c):
    i = 1
    if c:
        del i
    else:
        del i
    return i


def test_del_in_the_branches_of_an_if_deletes_the_functions_variable():
    # `del i` in a branch used to delete a variable of the branch's own function
    # (UnboundLocalError at the `del`, whatever the condition)
    for c in (True, False):
        matches_eager(deletes_in_both_branches, c)
        matches_eager(deletes_in_both_branches, tensor(c))
    matches_eager(deletes_on_one_path, False)
    with pytest.raises(df.errors.TracingError, match="'i' is assigned only when the tensor condition of the if at "
                                                     r".*fixes.py:\d+ is false"):
        df.defun(deletes_on_one_path)(tensor(False))
    with pytest.raises(UnboundLocalError):        # as Python raises it
        df.defun(deletes_then_reads)(True)
    with pytest.raises(UnboundLocalError, match=r"'i' is used before assignment at .*fixes.py:\d+"):
        df.defun(deletes_then_reads)(tensor(True))


def state_dict_set_in_a_tensor_if(x):
    state = {"y": x, "k": x}
    if df.reduce_sum(x) > 0:
        state["y"] = x * x
        state["k"] = 2.0 * x
    else:
        state["y"] = -3.0 * x
    return df.reduce_sum(state["y"] * state["k"])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("v", [[1.0, 2.0], [-1.0, 0.5]])
def test_gradients_through_a_dict_changed_in_a_tensor_if(v, dtype):
    def grad(fn, x):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return y, tape.gradient(y, x)
    x = df.constant(np.asarray(v, dtype))
    (y, g), (y0, g0) = grad(df.defun(state_dict_set_in_a_tensor_if), x), grad(state_dict_set_in_a_tensor_if, x)
    want = 6.0 * np.asarray(v) ** 2 if sum(v) > 0 else -6.0 * np.asarray(v)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-3)
    np.testing.assert_allclose(g.numpy(), g0.numpy(), rtol=1e-3)
    np.testing.assert_allclose(y.numpy(), y0.numpy(), rtol=1e-3)
