"""AutoGraph's caches (defun/autograph/conversion.py): a def parsed from its own lines, what
converted code calls for each function (kept per function object and its code), and
nothing stale after a file is edited, a function redefined or its code replaced."""
import functools
import gc
import importlib
import json
import linecache
import os
import sys
import textwrap
import types
import weakref

import numpy as np
import pytest

import defun as df
from defun.autograph import conversion

POS, NEG = df.constant([1.0, 2.0]), df.constant([-1.0, -3.0])


def agree(f, *args):
    """The defun of `f` gives what `f` gives run eagerly (so it was converted: each case
    here has an `if` on a tensor, which fails to trace as written)."""
    np.testing.assert_allclose(df.defun(f)(*args).numpy(), np.asarray(f(*args)), rtol=1e-6)


@pytest.fixture
def module_dir(tmp_path):
    sys.path.insert(0, str(tmp_path))
    made = []

    def write(name, source):
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        st = path.stat()        # a later write of the same size in the same second is still seen as changed
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9 * (1 + len(made))))
        made.append(name)
        importlib.invalidate_caches()
        return path
    yield write
    sys.path.remove(str(tmp_path))
    for name in made:
        sys.modules.pop(name, None)


def test_two_defs_of_one_name_on_different_lines_each_convert_their_own(module_dir):
    module_dir("ag_twice", """
        import defun as df

        def f(x):
            if df.reduce_sum(x) > 0:
                return x * 2.0
            return -x
        first = f

        def f(x):
            if df.reduce_sum(x) > 0:
                return x * 3.0
            return x - 1.0
        """)
    import ag_twice
    for x in (POS, NEG):
        agree(ag_twice.first, x)
        agree(ag_twice.f, x)
    assert "2.0" in df.autograph.to_code(ag_twice.first) and "3.0" not in df.autograph.to_code(ag_twice.first)
    assert "3.0" in df.autograph.to_code(ag_twice.f)


def test_methods_closures_decorators_and_odd_layouts_convert(module_dir):
    module_dir("ag_layouts", '''
        import functools
        import defun as df


        def keep(f):
            @functools.wraps(f)
            def wrapper(*args, **kwargs):
                return f(*args, **kwargs)
            return wrapper


        class Model:
            scale = 2.0

            @keep
            def step(self, x,
        y=1.0):          # a parameter on a line less indented than the def
                note = """a string going on
        at column 0"""
                if df.reduce_sum(x) > 0:
                    x = x * self.scale + y
                else:
                    x = -x
                # a comment at the end, then a blank line

                return x

            def plain(self, x):
                if df.reduce_sum(x) > 0:
                    return x * self.scale
                return x

            @staticmethod
            def last(x): return x * 4.0 if df.reduce_sum(x) > 0 else x    # one line, last in the class


        def doc_last(x):
            if df.reduce_sum(x) > 0:
                x = x * 2.0
            return x + float(len("""a string ending
        at column 0, after the def's last instruction line"""))


        def outer(k):
            def inner(x):
                if df.reduce_sum(x) > 0:
                    return x * k
                return x + k
            return inner
        ''')
    import ag_layouts
    m = ag_layouts.Model()

    def use(x):             # converted, calling the methods: the user's wrapper and step convert
        return m.step(x) + m.plain(x)
    for x in (POS, NEG):
        agree(use, x)
        agree(m.plain, x)       # df.defun of a bound method: its function converts (traced as written before)
        agree(m.step, x)
        agree(ag_layouts.Model.last, x)
        agree(ag_layouts.outer(5.0), x)
        agree(ag_layouts.outer(-2.0), x)     # another closure of the same code: its own cell
        agree(ag_layouts.doc_last, x)
    assert ag_layouts.__file__ in conversion._FILES     # doc_last's lines alone are cut short: the file was read
    assert "def step(self, x, y=1.0):" in df.autograph.to_code(ag_layouts.Model.step.__wrapped__)


def test_a_file_edited_and_reloaded_converts_its_new_source(module_dir):
    module_dir("ag_edited", """
        import defun as df

        def f(x):
            if df.reduce_sum(x) > 0:
                return x * 2.0
            return -x
        """)
    import ag_edited
    old = ag_edited.f
    agree(old, POS)
    module_dir("ag_edited", """
        import defun as df
        # the def moved down a line, and its body changed

        def f(x):
            if df.reduce_sum(x) > 0:
                return x * 3.0
            return x - 1.0
        """)
    importlib.reload(ag_edited)
    assert ag_edited.f is not old
    for x in (POS, NEG):
        agree(ag_edited.f, x)       # the new source, not the lines read before the edit
        agree(old, x)               # converted before the edit: its code as it was
    assert "3.0" in df.autograph.to_code(ag_edited.f) and "3.0" not in df.autograph.to_code(old)


def test_a_function_first_converted_after_its_file_changed_is_not_given_other_source(module_dir):
    module_dir("ag_moved", """
        import defun as df

        def f(x, y):
            if df.reduce_sum(x) > 0:
                return x * y
            return -x
        """)
    import ag_moved
    f = ag_moved.f
    module_dir("ag_moved", """
        import defun as df

        def f(x):
            if df.reduce_sum(x) > 0:
                return x * 100.0
            return x
        """)
    linecache.checkcache()
    why = conversion.reason_not_converted(f)      # the lines at its line now hold another def
    assert why is not None and "changed" in why
    with pytest.raises(df.errors.TracingError, match="not converted by autograph"):
        df.defun(f)(POS, 2.0)


def test_a_lambda_first_converted_after_its_file_changed_is_not_given_another_lambdas_source(module_dir):
    # found by tests/test_relaxed_sweep.py (its programs' module edited while a sweep ran): the
    # lambda at the line of the code was converted in its place, called with the wrong
    # parameters (a TypeError) or, with the same ones, computing another function
    module_dir("ag_lambdas", """
        import defun as df
        OPS = {"add": lambda a, b: a + b,
               "sub": lambda a, b: a - b,
                "mean": lambda x, axis: df.reduce_mean(x, axis=axis)}
        """)
    import ag_lambdas
    ops = dict(ag_lambdas.OPS)
    module_dir("ag_lambdas", """
        import defun as df
        # a line more: each lambda's line now holds the one before it
        OPS = {"add": lambda a, b: a + b,
               "sub": lambda a, b: a - b,
                "mean": lambda x, axis: df.reduce_mean(x, axis=axis)}
        """)
    linecache.checkcache()
    for name in ("sub", "mean"):
        assert "changed" in conversion.reason_not_converted(ops[name])
    np.testing.assert_allclose(df.defun(lambda x: ops["sub"](x, 1.0))(POS).numpy(), [0.0, 1.0])
    np.testing.assert_allclose(df.defun(lambda x: ops["mean"](x, axis=0))(POS).numpy(), 1.5)


def test_a_function_whose_code_is_replaced_is_converted_again():
    def f(x):
        if df.reduce_sum(x) > 0:
            return x * 2.0
        return -x

    def g(x):
        if df.reduce_sum(x) > 0:
            return x * 5.0
        return x - 7.0

    def caller(x):
        return f(x)
    agree(caller, POS)
    before = conversion.callee(f)
    f.__code__ = g.__code__
    assert conversion.callee(f) is not before and conversion.converted(f) is not before
    for x in (POS, NEG):
        agree(caller, x)        # a fresh defun: the converted g's body, not f's


def test_functions_at_a_reused_address_are_not_confused():
    def make_times(k):
        def times(x):
            if df.reduce_sum(x) > 0:
                return x * k
            return x
        return times
    x = np.array([1.0, 2.0], np.float32)
    library, reused = set(), 0
    for i in range(200):
        # a library's function (json's code), called as it is and remembered so, then gone...
        clone = types.FunctionType(json.dumps.__code__, json.dumps.__globals__, "dumps", json.dumps.__defaults__)
        assert conversion.callee(clone) is clone
        library.add(id(clone))
        del clone
        f = make_times(float(i))    # ...and the user's function made next, often where it was
        reused += id(f) in library
        g = conversion.callee(f)
        assert g is not f
        np.testing.assert_allclose(g(df.constant(x)).numpy(), x * i)
    assert reused       # the case this test is for did happen


def test_library_and_defun_functions_are_called_as_they_are():
    assert conversion.callee(json.dumps) is json.dumps
    assert conversion.callee(df.tanh) is df.tanh
    assert conversion.callee(len) is not len        # the builtins converted code handles itself
    assert conversion.callee(float) is float
    wrapped = functools.lru_cache(None)(json.loads)
    assert conversion.callee(wrapped) is wrapped     # a library's function under the cache: as it is


def test_to_code_of_a_lambda():
    h = lambda x: x * 2.0 if df.reduce_sum(x) > 0 else -x   # noqa: E731
    assert "ag__.if_exp" in df.autograph.to_code(h)
    agree(h, POS)
    agree(h, NEG)


@pytest.mark.parametrize("k, form", list(enumerate(["y + 1.0", "-y", "y * x", "y < 0.0"])))
def test_a_return_without_the_retval_check_still_names_a_variable_with_no_value(module_dir, k, form):
    # `return <arithmetic or comparison>` is converted without ag__.retval: using y raises first
    module_dir(f"ag_unset{k}", f"""
        def f(x, flag):
            if flag:
                y = x * 2.0
            return {form}
        """)
    f = importlib.import_module(f"ag_unset{k}").f
    assert "ag__.retval" not in df.autograph.to_code(f)
    with pytest.raises(UnboundLocalError):
        f(df.constant(1.0), False)
    with pytest.raises(UnboundLocalError, match="'y'"):
        df.defun(f)(df.constant(1.0), False)
    np.testing.assert_allclose(df.defun(f)(df.constant(1.0), True).numpy(), f(df.constant(1.0), True).numpy())


def test_a_recursive_function_calls_its_converted_self():
    def down(x, n):
        if df.reduce_sum(x) > 100.0:        # a tensor condition at every depth
            return x
        return down(x * 2.0, n - 1) if n > 0 else x
    g = conversion.converted(down)
    assert conversion.callee(g) is g and conversion.callee(g) is g     # the second time from the fast path
    for x in (POS, NEG, df.constant([30.0, 40.0])):
        agree(down, x, 5)


def test_a_converted_closure_is_freed_with_its_defun():
    """The cache of converted functions holds them weakly both ways: a defun of a closure made
    in a loop (each with its converted function holding the original) frees them all."""
    def make(k):
        def f(x):
            if df.reduce_sum(x) > 0:
                return helper(x) * k
            return x

        def helper(x):
            if df.reduce_max(x) > 0:
                return x + 1.0
            return x
        return f

    x, refs = df.constant(np.ones(3)), []
    for k in range(20):
        f = make(float(k))
        g = df.defun(f)
        np.testing.assert_allclose(g(x).numpy(), 2.0 * k)
        refs.append(weakref.ref(f))
        del f, g
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def test_a_converted_function_no_one_holds_is_made_again_when_called():
    def helper(x):
        if df.reduce_sum(x) > 0:
            return x * 2.0
        return -x
    first = conversion.callee(helper)
    assert first is not helper and first.__wrapped__ is helper
    del first
    gc.collect()
    again = conversion.callee(helper)
    assert again is not helper and again.__wrapped__ is helper
    np.testing.assert_allclose(df.defun(lambda x: again(x))(df.constant(np.ones(2))).numpy(), [2.0, 2.0])
