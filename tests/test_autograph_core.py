"""AutoGraph core: Python `if`/`while`/`for` on tensors in a defun become cond/while nodes,
and each converted function gives what the same Python gives run eagerly."""
import numpy as np
import pytest

import defun as df


def both(fn, *args):
    """(the defun's result, the same Python run eagerly), as numpy."""
    got = df.defun(fn)(*args)
    want = fn(*args)
    conv = (lambda r: [np.asarray(t) for t in r]) if isinstance(want, (list, tuple)) else np.asarray
    return conv(got), conv(want)


def check(fn, *args):
    got, want = both(fn, *args)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    return got


def ops_of(f, *args):
    return [n.op.name for n in f.get_concrete_function(*args).graph.nodes]


def sign_step(x):
    if df.reduce_sum(x) > 0:
        y = x * 2.0
    elif df.reduce_sum(x) < -5.0:
        y = x - 1.0
    else:
        y = -x
    return y


@pytest.mark.parametrize("x", [[1.0, 2.0], [-1.0, -2.0], [-4.0, -3.0]])
def test_if_elif_else_on_a_tensor_is_one_cond_per_if(x):
    check(sign_step, df.constant(x))
    assert ops_of(df.defun(sign_step), df.constant(x)).count("cond") == 1   # the elif is inside it


def test_if_on_a_python_value_stays_out_of_the_graph():
    def f(x, flag):
        if flag:
            x = x + 1.0
        return x
    check(f, df.constant(1.0), True)
    assert "cond" not in ops_of(df.defun(f), df.constant(1.0), True)


def test_while_on_a_tensor_is_one_while_node():
    def f(n):
        i = 0
        acc = 1.0
        while i < n:
            acc = acc * 2.0
            i += 1
        return acc, i
    check(f, df.constant(10))
    assert ops_of(df.defun(f), df.constant(10)).count("while") == 1


@pytest.mark.parametrize("n", [1, 10, 200])
def test_for_over_rows_is_one_loop_node_whatever_the_length(n):
    def f(x):
        s = df.zeros([3])
        for row in x:
            s = s + row * row
        return s
    x = df.constant(np.arange(3.0 * n, dtype=np.float32).reshape(n, 3))
    check(f, x)
    names = ops_of(df.defun(f), x)
    assert names.count("while") == 1 and len(names) < 20


def test_for_over_rows_of_unknown_length():
    def f(x):
        s = 0.0
        for row in x:
            s = s + df.reduce_sum(row)
        return s
    g = df.defun(f, input_signature=[df.TensorSpec([None, 2], df.float32)])
    for n in (0, 1, 5):
        x = df.constant(np.ones([n, 2], np.float32))
        np.testing.assert_allclose(g(x).numpy(), np.asarray(f(x)))


def test_for_over_range_of_a_tensor():
    def f(n, x):
        for i in range(n):
            x = x + df.cast(i, df.float32)
        return x
    check(f, df.constant(5), df.constant(0.5))
    check(f, df.constant(0), df.constant(0.5))

    def g(n, x):
        for i in range(1, n, 2):
            x = x * df.cast(i, df.float32)
        return x
    check(g, df.constant(8), df.constant(1.0))


def test_for_over_df_range():
    def f(n):
        s = 0
        for i in df.range(n):
            s = s + i * i
        return s
    check(f, df.constant(6))


def test_for_over_python_range_unrolls():
    def f(x):
        for _ in range(3):
            x = x * 2.0
        return x
    check(f, df.constant(1.5))
    assert "while" not in ops_of(df.defun(f), df.constant(1.5))


def test_autograph_false_traces_as_written():
    g = df.defun(sign_step, autograph=False)
    with pytest.raises(df.errors.TracingError, match="df.cond"):
        g(df.constant([1.0]))


def test_to_code_shows_the_converted_source():
    code = df.autograph.to_code(sign_step)
    assert "ag__.if_stmt" in code and "def sign_step(x):" in code
    assert df.autograph.to_code(df.defun(sign_step)) == code


def test_enumerate_and_zip_over_tensors_are_one_loop_node():
    def f(x, y):
        s = 0.0
        for i, row in enumerate(x):
            s = s + df.cast(i, df.float32) * df.reduce_sum(row)
        for a, b in zip(x, y):
            s = s + df.reduce_sum(a * b)
        return s
    x = df.constant(np.arange(12.0, dtype=np.float32).reshape(4, 3))
    y = df.constant(np.ones([3, 3], np.float32))       # zip stops at the shorter
    check(f, x, y)
    assert ops_of(df.defun(f), x, y).count("while") == 2

    def g(x):
        total = 0
        for i, _ in enumerate(x, 5):
            total = total + i
        return total
    check(g, x)


class _Model:
    def __init__(self):
        self.w = df.Variable([2.0, 3.0])

    @df.defun
    def step(self, x):
        if df.reduce_sum(x) > 0:
            return x * self.w
        return x - self.w


def test_a_defun_method_converts():
    m = _Model()
    np.testing.assert_allclose(m.step(df.constant([1.0, 1.0])).numpy(), [2.0, 3.0])
    np.testing.assert_allclose(m.step(df.constant([-1.0, -1.0])).numpy(), [-3.0, -4.0])


def _flatten_depth(xs):
    """A recursive user function: its reference to itself is a global (the converted code
    closes over it)."""
    out = []
    for x in xs:
        if isinstance(x, (list, tuple)):
            out.extend(_flatten_depth(x))
        else:
            out.append(x * 2.0)
    return out


def test_a_recursive_user_function_converts():
    f = df.defun(lambda a, b: df.add_n(_flatten_depth([a, [b, [a]]])))
    a, b = df.constant([1.0, 2.0]), df.constant([3.0, 4.0])
    np.testing.assert_allclose(f(a, b).numpy(), 2 * (2 * a.numpy() + b.numpy()))
