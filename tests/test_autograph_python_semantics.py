"""Converted code means what the same Python means (issue 29's gaps): each case compares the
converted function with the Python run eagerly, then its gradients, df.vmap and the
exports where the case puts a graph op in the way."""
import json
import math
import operator as op

import numpy as np
import pytest

import defun as df
from defun_helpers import numeric_grads

X5 = np.array([0.5, -1.25, 2.0, 0.75, -0.3])


def f64(a):
    return df.constant(np.asarray(a, np.float64))


def body_ops(graph):
    """Every op name of `graph` and of the functions its nodes call (loop bodies, branches)."""
    names = []
    for n in graph.nodes:
        names.append(n.op.name)
        for v in n.attrs.values():
            if hasattr(v, "nodes"):
                names += body_ops(v)
    return names


def exported_agree(cf, args, want, rtol=1e-12):
    """JSON export + reload, numpy source and ONNX (onnxruntime) of concrete function `cf`
    give `want` on numpy `args`."""
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    np.testing.assert_allclose(np.asarray(loaded(*args)), want, rtol=rtol)
    ns = {}
    exec(compile(df.export_numpy_source(cf), "<semantics>", "exec"), ns)
    np.testing.assert_allclose(ns["forward"](*args)[0], want, rtol=rtol)
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(df.export_onnx(cf).SerializeToString(), providers=["CPUExecutionProvider"])
    out = sess.run(None, {i.name: v for i, v in zip(sess.get_inputs(), args)})[0]
    np.testing.assert_allclose(out, want, rtol=rtol)


# ------------------------------------------------------------------ 1. negative tensor indices
def ring(x):
    """x[i - 1] * x[i] around the ring: i = 0 reads x[-1], as Python does."""
    s = df.zeros([], x.dtype)
    for i in range(df.shape(x)[0]):
        s = s + x[i - 1] * x[i] * df.cast(i + 1, x.dtype)
    return s


def ring_numpy(x):
    return sum(x[i - 1] * x[i] * (i + 1) for i in range(len(x)))


def test_a_negative_loop_index_counts_from_the_end_as_in_python():
    g = df.defun(ring)
    want = ring_numpy(X5)
    np.testing.assert_allclose(g(f64(X5)).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(ring(f64(X5)).numpy(), want, rtol=1e-12)      # the Python itself
    ops = body_ops(g.get_concrete_function(f64(X5)).graph)
    assert ops.count("gather") == 2 and ops.count("where") == 1     # x[i] (a counter) is not wrapped
    x = f64(X5)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = g(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), numeric_grads(ring_numpy, [X5])[0], rtol=1e-6)
    with df.ForwardAccumulator(x, f64(np.ones(5))) as acc:
        y = g(x)
    np.testing.assert_allclose(acc.jvp(y).numpy(), numeric_grads(ring_numpy, [X5])[0].sum(), rtol=1e-6)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_negative_index_in_every_export_and_backend(backend):
    if backend == "numba":
        pytest.importorskip("numba")
    x32 = X5.astype(np.float32)
    g = df.defun(ring, backend=backend)
    np.testing.assert_allclose(g(df.constant(x32)).numpy(), ring_numpy(x32), rtol=1e-5)
    if backend == "numpy":
        exported_agree(g.get_concrete_function(df.constant(x32)), [x32], ring_numpy(x32), rtol=1e-5)


def pick(x, j):
    return x[j] * 2.0


def test_a_symbolic_index_argument_wraps_in_range_and_is_refused_outside_it():
    g = df.defun(pick)
    x = f64(X5)
    for j in range(-5, 5):
        np.testing.assert_allclose(g(x, df.constant(j)).numpy(), X5[j] * 2.0)
        np.testing.assert_allclose(pick(x, df.constant(j)).numpy(), X5[j] * 2.0)     # eager agrees
    for j in (-6, 5):
        with pytest.raises(df.errors.InvalidArgumentError, match=r"index -?\d+ is out of range \[0, 5\)"):
            g(x, df.constant(j))
    js = np.array([-1, 0, -5, 4], np.int32)
    np.testing.assert_allclose(df.vmap(g, in_axes=(None, 0))(x, df.constant(js)).numpy(), X5[js] * 2.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = g(x, df.constant(-2))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [0, 0, 0, 2.0, 0])


def test_negative_multi_indices_agree_with_numpy():
    m = np.arange(12.0).reshape(3, 4)

    @df.defun
    def rows_and_cells(m):
        s, c = df.zeros([2], m.dtype), df.zeros([], m.dtype)
        for i in range(df.shape(m)[0]):
            s = s + m[i - 1, 1:3]
            c = c + m[i - 1, i - 2]
        return s, c
    s, c = rows_and_cells(f64(m))
    np.testing.assert_allclose(s.numpy(), sum(m[i - 1, 1:3] for i in range(3)))
    np.testing.assert_allclose(c.numpy(), sum(m[i - 1, i - 2] for i in range(3)))


# ------------------------------------------------------------------ 2. Python numbers joined by a tensor if
def numbers(x, y):
    """`a` is a Python number on each path: it takes y's dtype, as the Python number does."""
    if df.reduce_sum(x) > 0:
        a = 2.0
    else:
        a = 3.0
    b = a + 1.0           # Python arithmetic with a Python number: still a Python number's kind
    return a * y, y * b - a, df.exp(a), b


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_python_numbers_joined_by_a_tensor_if_take_the_dtype_they_meet(dtype, sign):
    g = df.defun(numbers)
    x, y = f64(sign * X5), df.constant(np.array([0.5, -2.0], dtype))
    got, want = g(x, y), numbers(x, y)
    assert [t.dtype for t in got] == [y.dtype, y.dtype, df.float32, df.float32]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), np.asarray(b), rtol=1e-3 if dtype is np.float16 else 1e-6)
    with df.GradientTape() as tape:
        tape.watch(y)
        out = g(x, y)
        loss = df.reduce_sum(out[0]) + df.reduce_sum(out[1])
    a = 2.0 if sign > 0 else 3.0
    np.testing.assert_allclose(tape.gradient(loss, y).numpy(), [2 * a + 1] * 2, rtol=1e-3)


def weighted(x, y):
    if x[0] > 0.0:
        a = 2.0
    else:
        a = -0.5
    s = a           # enters a loop as a Python number would, and becomes y's dtype there
    for r in x:
        s = s * y[0] + r
    return a * y + s


def test_joined_numbers_in_a_loop_vmap_and_every_export():
    g = df.defun(weighted)
    xs = np.array([[1.0, 2.0, -1.0], [-1.0, 0.5, 3.0]])
    y = np.array([0.5, 1.5])
    for row in xs:
        np.testing.assert_allclose(g(f64(row), f64(y)).numpy(), weighted(f64(row), f64(y)).numpy(), rtol=1e-12)
    got = df.vmap(g, in_axes=(0, None))(f64(xs), f64(y)).numpy()
    np.testing.assert_allclose(got, [weighted(f64(r), f64(y)).numpy() for r in xs], rtol=1e-12)
    cf = g.get_concrete_function(f64(xs[0]), f64(y))
    for row in xs:
        exported_agree(cf, [row, y], weighted(f64(row), f64(y)).numpy())
    pytest.importorskip("numba")
    h = df.defun(weighted, backend="numba")
    np.testing.assert_allclose(h(f64(xs[1]), f64(y)).numpy(), weighted(f64(xs[1]), f64(y)).numpy(), rtol=1e-12)


def test_joined_floats_meeting_an_integer_tensor_is_an_error_naming_the_variable():
    def f(x, k):
        if df.reduce_sum(x) > 0:
            a = 2.5
        else:
            a = 3.0
        return a * k
    with pytest.raises(df.errors.InvalidArgumentError, match=r"'a' holds the Python floats the tensor if at .*"
                       r"test_autograph_python_semantics.py:\d+ .* an int64 tensor; use df.cast"):
        df.defun(f)(f64(X5), df.constant([1, 2], df.int64))
    with pytest.raises(df.errors.InvalidArgumentError, match="cannot use Python float"):
        f(f64(X5), df.constant([1, 2], df.int64))       # as eagerly


def test_joined_numbers_compare_by_value_as_python_numbers_do():
    def f(x):
        if df.reduce_sum(x) > 0:
            a = 2.0
        else:
            a = 3.0
        if a == 2.0:        # a Python number's ==, not a tensor's identity
            return x * 10.0
        return x
    g = df.defun(f)
    for v in (1.0, -1.0):
        np.testing.assert_allclose(g(f64([v])).numpy(), f(f64([v])).numpy())



def test_joined_numbers_used_inside_a_later_branch_of_their_dtype():
    def f(x, y):
        if x[0] > 0:
            a = 2.0
        else:
            a = 0.5
        if x[1] > 0:
            return y * a        # a float64 y: the joined value itself, captured into the branch
        return y
    g = df.defun(f)
    for x in ([1.0, 1.0], [-1.0, 1.0], [1.0, -1.0]):
        np.testing.assert_allclose(g(f64(x), f64([3.0])).numpy(), f(f64(x), f64([3.0])).numpy())



def joined(x):
    if df.reduce_sum(x) > 0:
        a = 2.0
    else:
        a = 3.0
    return a


def test_joined_numbers_returned_to_functions_taking_functions():
    z = f64(Z)
    want = [joined(f64(r)) for r in Z]                  # Python floats
    carried = df.defun(lambda z: df.scan(lambda acc, r: joined(r), z, df.zeros([], df.float64)))
    for got, dtype in [(df.vmap(joined)(z), df.float32), (df.defun(lambda z: df.map_fn(joined, z))(z), df.float32),
                       (carried(z), df.float64)]:
        assert got.dtype == dtype
        np.testing.assert_allclose(got.numpy(), want)
    picked = df.defun(lambda x: df.cond(x[0] > 0, lambda: joined(x), lambda: x[1]))     # the other branch's dtype
    for row in Z:
        np.testing.assert_allclose(picked(f64(row)).numpy(), joined(f64(row)) if row[0] > 0 else row[1])
        assert picked(f64(row)).dtype == df.float64



def shown(x):
    if df.reduce_sum(x) > 0:
        a = 2.5
    else:
        a = 3.0
    print("a is", a, [a])
    df.print("df", a)
    return x


def test_joined_numbers_print_on_every_call_as_python_prints_them(capsys):
    g = df.defun(shown)
    for v in (1.0, -1.0, 1.0):
        g(f64([v]))
        traced = capsys.readouterr().out
        shown(f64([v]))
        assert traced == capsys.readouterr().out == ("a is 2.5 [2.5]\ndf 2.5\n" if v > 0 else "a is 3.0 [3.0]\ndf 3.0\n")



def made_tensors(x):
    a = joined(x)
    return df.constant(a), df.constant(a, df.float64), df.convert_to_tensor(a, df.float64), df.cast(a, df.float16)


def test_joined_numbers_made_tensors_as_python_numbers_are():
    for row in Z:
        got, want = df.defun(made_tensors)(f64(row)), made_tensors(f64(row))
        assert [t.dtype for t in got] == [t.dtype for t in want] == [df.float32, df.float64, df.float64, df.float16]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b.numpy())



def in_lists(x, v):
    """Joined numbers in lists given to ops (alone, with numbers, nested, with tensors)."""
    if df.reduce_sum(x) > 0:
        a = v
    else:
        a = v + v
    y = x[:2]
    return (df.reduce_sum([a, a]), df.add_n([a, a]), df.stack([[a, 1.0], [2.0, a]]), df.reduce_sum([a, True]),
            df.concat([[a * 1.0, a], df.cast(y, df.float32)], 0), df.convert_to_tensor([a, y[0]]),
            df.constant([[a], [1.5]]), df.constant((a, 2), df.float16), df.convert_to_tensor([a, a], df.float64), y * [a, a],
            df.constant([a, 2 ** 40]), df.reduce_sum(df.convert_to_tensor([a, y[0]]) * y))


def test_lists_holding_joined_numbers_convert_as_lists_of_python_numbers():
    for v in (2.5, 3):
        g = df.defun(in_lists)
        for row in (X5[:3], -X5[:3]):
            got, want = g(f64(row), v), in_lists(f64(row), v)
            assert [t.dtype for t in got] == [t.dtype for t in want]
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a.numpy(), b.numpy())
            x = f64(row)
            with df.GradientTape() as tape:
                tape.watch(x)
                y = g(x, v)[-1]
            want_grad = [(v if row.sum() > 0 else 2 * v) + row[1], row[0], 0.0]     # of a y0 + y0 y1
            np.testing.assert_allclose(tape.gradient(y, x).numpy(), want_grad)
    # floats made integers: eagerly refused unless whole, so refused here, where their values are unknown
    with pytest.raises(df.errors.InvalidArgumentError, match="'a' holds the Python floats .* use df.cast"):
        df.defun(lambda x: df.constant([1, joined(x)], df.int32))(f64(X5))


BINARY = {"+": op.add, "-": op.sub, "*": op.mul, "/": op.truediv, "//": op.floordiv, "%": op.mod, "**": op.pow,
          "<": op.lt, "<=": op.le, ">": op.gt, ">=": op.ge, "==": op.eq, "!=": op.ne, "&": op.and_, "|": op.or_,
          "^": op.xor, "<<": op.lshift, ">>": op.rshift, "@": op.matmul, "divmod": divmod}
UNARY = {"-": op.neg, "+": op.pos, "abs": abs, "~": op.invert, "round": round, "round1": lambda v: round(v, 1),
         "floor": math.floor, "ceil": math.ceil, "trunc": math.trunc, "pow3": lambda v: pow(v, 2, 5)}
JOINED = {"bool": (True, False), "int": (2, 3), "float": (2.5, -3.0), "complex": (2 + 1j, 3 - 1j)}
# (numbers of two kinds are a TracingError: tests/test_autograph_joined_values.py)


def operands():
    """Every kind of operand a Python number meets: numbers, numpy scalars, tensors, joined numbers."""
    t = {d: df.constant(np.array([1 + 2j, 3] if d[0] == "c" else [True, False] if d == "bool" else [3, 1], d))
         for d in ("float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool", "complex64",
                   "complex128")}
    return [True, 3, -2, 1.5, 1 + 2j, np.float16(1.5), np.float32(1.5), np.float64(1.5), np.int8(3), np.int32(3),
            np.int64(3), np.uint8(3), np.bool_(True), np.complex64(1 + 2j), *t.values(), *JOINED]


def protocol_cases():
    return [(f, o, how) for o in operands() for f in BINARY.values() for how in (0, 1)] + \
        [(f, None, 2) for f in UNARY.values()]


def apply_all(cases, a, joined, errors=None):
    """Each case on `a`: its result, or the class of its error (kept in `errors`, as a graph
    returns tensors only)."""
    out = []
    for f, o, how in cases:
        o = joined[o] if isinstance(o, str) else o
        try:
            out.append(f(a, o) if how == 0 else f(o, a) if how == 1 else f(a))
        except Exception as e:      # noqa: BLE001 - which error is what is compared
            out.append(type(e))
    if errors is None:
        return out
    errors[:] = out
    return {k: v for k, v in enumerate(out) if not isinstance(v, type)}


def protocol(x, kind, cases, errors):
    pair = JOINED[kind]
    if df.reduce_sum(x) > 0:
        a, joined = pair[0], {k: v[0] for k, v in JOINED.items()}
    else:
        a, joined = pair[1], {k: v[1] for k, v in JOINED.items()}
    return apply_all(cases, a, joined, errors)


def complex_order(case, kind):
    """Where the joined numbers differ from Python's by design: numpy's order of complex
    scalars (df.less refuses complex)."""
    f, o, how = case
    complex_pair = isinstance(o, np.complexfloating) or (kind == "complex" and isinstance(o, np.generic))
    return complex_pair and f in (op.lt, op.le, op.gt, op.ge)


def by_a_joined_false(case, kind):
    """A case dividing by (or raising to a negative power) joined bools, False on one path:
    Python's ZeroDivisionError there is inf (or an integer division's error when the graph
    runs), as for a tensor 0 (tested on its own below)."""
    f, o, how = case
    divides = f in (op.truediv, op.floordiv, op.mod, divmod)
    return divides and ((how == 0 and o == "bool") or (how == 1 and kind == "bool")) or \
        (f is op.pow and ((how == 0 and kind == "bool" and not isinstance(o, df.Tensor)) or (how == 1 and o == "bool")))


def numpy_bool_pair(case, kind):
    """numpy's arithmetic of two bools (np.True_ + True is True: `or`) is not Python's: a
    joined bool computes as the int it is (True + 1 is 2) also with a numpy bool."""
    f, o, how = case
    return kind == "bool" and isinstance(o, np.bool_) and f not in (op.and_, op.or_, op.xor, op.eq, op.ne)


@pytest.mark.parametrize("kind", JOINED)
def test_joined_numbers_follow_the_numeric_protocol_of_python_numbers(kind):
    """Every operator with every kind of operand: the value and dtype the same Python gives
    (made a tensor as a returned number is), or the same kind of error."""
    cases = [c for c in protocol_cases() if not by_a_joined_false(c, kind) and not numpy_bool_pair(c, kind)]
    errors = []
    g = df.defun(lambda x: protocol(x, kind, cases, errors))
    for sign, k in ((1, 0), (-1, 1)):
        got = g(f64([sign]))
        got = [got.get(i, e) for i, e in enumerate(errors)]
        with np.errstate(all="ignore"):     # np.int8(3) - 2 ... overflow warnings of the Python run
            want = apply_all(cases, JOINED[kind][k], {j: v[k] for j, v in JOINED.items()})
        for case, r, w in zip(cases, got, want):
            if case[0] is op.pow and isinstance(w, complex) and r.dtype.is_floating:
                continue        # (-2) ** 2.5: Python's complex number is nan in a float dtype, as in numpy
            if isinstance(w, type) or isinstance(r, type):
                if complex_order(case, kind) and r is TypeError:
                    continue
                assert isinstance(r, type) and isinstance(w, type) and issubclass(r, w), (case, r, w)
                continue
            for rt, wt in zip(*[v if isinstance(v, tuple) else (v,) for v in (r, w)]):
                wt = df.convert_to_tensor(wt) if not isinstance(wt, df.Tensor) else wt
                assert rt.dtype == wt.dtype, (case, rt, wt)
                rtol = {"float16": 1e-3, "float32": 1e-6, "complex64": 1e-6}.get(rt.dtype.name, 1e-12)
                np.testing.assert_allclose(rt.numpy(), wt.numpy(), rtol=rtol, err_msg=str(case))
    for needs_value in (float, int, complex, lambda v: [0] * round(v)):     # a TracingError and a TypeError
        with pytest.raises(df.errors.TracingError, match="needs the value of 'a'.*known only when the graph runs"):
            df.defun(lambda x: needs_value(joined(x)))(f64([1.0]))


def indexed_by_joined_ints(x):
    if df.reduce_sum(x) > 0:
        k = 1
    else:
        k = -1
    s = x[k]                        # an index known when the graph runs (-1: the last)
    for i in range(k + 2):          # a range of them: one loop node
        s = s + x[i]
    return s


def test_joined_ints_index_and_count_as_python_ints_do():
    g = df.defun(indexed_by_joined_ints)
    for row in (X5[:3], -X5[:3]):
        np.testing.assert_allclose(g(f64(row)).numpy(), indexed_by_joined_ints(f64(row)).numpy())


# ------------------------------------------------------------------ 4. functions given to df.vmap and friends
def signed(x):
    """A tensor `if` in a function df.vmap traces (or a function taking functions is given)."""
    if df.reduce_sum(x) > 0:
        return x * x
    return -x


Z = np.array([[1.0, 2.0], [-3.0, -4.0], [0.5, -0.25]])


def per_example(fn, z):
    return np.stack([np.asarray(fn(f64(r))) for r in z])


def test_vmap_converts_its_function_and_selects_per_example():
    want = per_example(signed, Z)
    np.testing.assert_allclose(df.vmap(signed)(f64(Z)).numpy(), want)
    np.testing.assert_allclose(df.vectorized_map(signed, f64(Z)).numpy(), want)
    g = df.defun(lambda z: df.vmap(signed)(z))
    np.testing.assert_allclose(g(f64(Z)).numpy(), want)
    z = f64(Z)
    with df.GradientTape() as tape:
        tape.watch(z)
        y = df.reduce_sum(df.vmap(signed)(z))
    np.testing.assert_allclose(tape.gradient(y, z).numpy(), np.where(Z.sum(1, keepdims=True) > 0, 2 * Z, -1.0))
    exported_agree(g.get_concrete_function(f64(Z)), [Z], want)
    pytest.importorskip("numba")
    np.testing.assert_allclose(df.defun(lambda z: df.vmap(signed)(z), backend="numba")(f64(Z)).numpy(), want)


def test_vmap_in_a_defun_with_autograph_off_runs_its_function_as_written():
    """autograph=False reaches the functions df.vmap traces in that defun (the tensor `if`
    is then the error it is there), not the defuns it calls nor an eager df.vmap."""
    off = df.defun(lambda z: df.vmap(signed)(z), autograph=False)
    with pytest.raises(df.errors.TracingError, match="df.cond"):
        off(f64(Z))
    want = per_example(signed, Z)
    on_inside = df.defun(lambda z: df.defun(lambda w: df.vmap(signed)(w))(z), autograph=False)
    np.testing.assert_allclose(on_inside(f64(Z)).numpy(), want)
    np.testing.assert_allclose(df.vmap(signed)(f64(Z)).numpy(), want)     # eager, after the failed trace


def total(x):
    return df.reduce_sum(signed(x))


@df.custom_gradient
def doubled_gradient(x):
    if df.reduce_sum(x) > 0:
        y = x
    else:
        y = -x

    def grad(dy):
        return dy * 2.0
    return y, grad


def keep_going(i, a):
    return i < 2


def step(i, a):
    return i + 1, signed(a) * 0.5


def accumulate(acc, row):
    return acc + signed(row)


def functions_taking_functions(z):
    """Each of defun's functions that take the user's functions, given module-level ones."""
    return [df.gradients_function(total)(z)[0], df.value_and_gradients_function(total)(z)[0],
            doubled_gradient(z), df.while_loop(keep_going, step, [0, z])[1], df.map_fn(signed, z),
            df.scan(accumulate, z, df.zeros_like(z[0])), df.foldl(accumulate, z, df.zeros_like(z[0])),
            df.cond(df.reduce_sum(z) > 0, lambda: signed(z), lambda: total(z) * z)]


def test_functions_given_to_functions_taking_functions_convert_in_a_defun():
    g = df.defun(functions_taking_functions)
    for z in (Z, -Z):
        for got, want in zip(g(f64(z)), functions_taking_functions(f64(z))):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


GRADIENT_FUNCTIONS = [df.gradients_function(total), df.value_and_gradients_function(total, [0])]


def gradient_functions_made_outside(z):
    """Gradient functions made outside any defun, called from converted code."""
    return [GRADIENT_FUNCTIONS[0](z)[0], *GRADIENT_FUNCTIONS[1](z)[1]]


@pytest.mark.parametrize("make", [df.gradients_function, df.value_and_gradients_function])
def test_a_gradient_function_made_outside_converts_its_function(make):
    # found by tests/test_relaxed_sweep.py: df.defun(df.value_and_gradients_function(loss)) traced
    # the library's wrapper as it is, so loss's tensor `if` was a TracingError (and a `for row in x`
    # over an unknown size made the relaxed trace fail: one trace per shape)
    made = df.defun(make(total))
    for z in (Z, -Z, Z[:1]):
        got, want = made(f64(z)), make(total)(f64(z))
        for g, w in zip(nest_flat(got), nest_flat(want)):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)
    assert made.trace_count == 2    # z of 2 rows: one relaxed trace
    inside = df.defun(gradient_functions_made_outside)
    for z in (Z, -Z):
        for g, w in zip(inside(f64(z)), gradient_functions_made_outside(f64(z))):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)


def nest_flat(x):
    return [y for v in x for y in nest_flat(v)] if isinstance(x, (list, tuple)) else [x]


# ------------------------------------------------------------------ 3. the user's classes made in converted code
class Signed:
    """__init__ and __call__ with tensor ifs, attributes set in the branches."""

    def __init__(self, x):
        if df.reduce_sum(x) > 0:
            self.s = x
            self.scale = 2.0
        else:
            self.s = -x
            self.scale = 0.5

    def __call__(self, y):
        if df.reduce_sum(y) > 0:
            return self.s * y * self.scale
        return self.s - y


class Shifted(Signed):
    def __init__(self, x, shift):
        super().__init__(x)
        if shift > 0.0:
            self.s = self.s + shift


def made_in_converted_code(x, y):
    return Signed(x)(y) + Shifted(x, df.reduce_max(y)).s


def test_a_class_made_in_converted_code_has_its_init_and_call_converted():
    g = df.defun(made_in_converted_code)
    cases = [(X5[:3], np.array([1.0, 0.5, -0.25])), (-X5[:3], np.array([-1.0, 0.5, -0.25]))]
    for x, y in cases:
        np.testing.assert_allclose(g(f64(x), f64(y)).numpy(), made_in_converted_code(f64(x), f64(y)).numpy(),
                                   rtol=1e-12)
        xt, yt = f64(x), f64(y)
        with df.GradientTape() as tape:
            tape.watch([xt, yt])
            out = df.reduce_sum(g(xt, yt))
        got = [t.numpy() for t in tape.gradient(out, [xt, yt])]
        want = numeric_grads(lambda a, b: made_in_converted_code(f64(a), f64(b)).numpy().sum(), [x, y])
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    xs, ys = np.stack([c[0] for c in cases]), np.stack([c[1] for c in cases])
    want = np.stack([made_in_converted_code(f64(x), f64(y)).numpy() for x, y in cases])
    np.testing.assert_allclose(df.vmap(g)(f64(xs), f64(ys)).numpy(), want, rtol=1e-12)
    cf = g.get_concrete_function(f64(cases[0][0]), f64(cases[0][1]))
    for (x, y), w in zip(cases, want):
        exported_agree(cf, [x, y], w)


def test_an_attribute_set_on_one_path_only_is_an_error_where_it_is_used():
    class Half:
        def __init__(self, x):
            if df.reduce_sum(x) > 0:
                self.s = x

    @df.defun
    def f(x):
        return Half(x).s * 2.0
    with pytest.raises(df.errors.TracingError, match=r"'self.s' is assigned only when the tensor condition"):
        f(f64(X5))


def test_classes_of_installed_packages_and_generated_inits_are_made_as_they_are():
    import collections      # (a class of the standard library, made in converted code)
    import dataclasses      # (a generated __init__: no source to convert)

    @dataclasses.dataclass
    class Pair:
        a: object
        b: object

    @df.defun
    def f(x):
        d = collections.OrderedDict(x=x)
        p = Pair(d["x"], 2.0)
        return p.a * p.b
    np.testing.assert_allclose(f(f64(X5)).numpy(), X5 * 2.0)


# ------------------------------------------------------------------ 5. lambdas sharing a line
def branch_lambdas(z):
    return df.cond(z[0, 0] > 0, lambda: signed(z), lambda: z * 3.0)


def test_lambdas_sharing_a_line_convert_by_their_columns():
    g = df.defun(lambda z: df.cond(z[0, 0] > 0, lambda: signed(z), lambda: signed(-z)))
    loop = df.defun(lambda z: df.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, signed(a)), [0, z])[1])
    for z in (Z, -Z):
        want = signed(f64(z)).numpy() if z[0, 0] > 0 else signed(f64(-z)).numpy()
        np.testing.assert_allclose(g(f64(z)).numpy(), want)
        np.testing.assert_allclose(loop(f64(z)).numpy(), signed(signed(f64(z))).numpy())
        np.testing.assert_allclose(df.defun(branch_lambdas)(f64(z)).numpy(), branch_lambdas(f64(z)).numpy())
    pair = [lambda x: x * 2.0 if df.reduce_sum(x) > 0 else -x, lambda x: -x if df.reduce_sum(x) > 0 else x * 3.0]
    for x in (X5, -X5):
        np.testing.assert_allclose(df.defun(pair[0])(f64(x)).numpy(), pair[0](f64(x)).numpy())
        np.testing.assert_allclose(df.defun(pair[1])(f64(x)).numpy(), pair[1](f64(x)).numpy())
    z = f64(Z)
    with df.GradientTape() as tape:
        tape.watch(z)
        y = df.reduce_sum(g(z))
    np.testing.assert_allclose(tape.gradient(y, z).numpy(), 2 * Z if Z.sum() > 0 else -np.ones_like(Z))
    exported_agree(g.get_concrete_function(z), [Z], g(z).numpy())


# ------------------------------------------------------------------ 6. per-example slices of different sizes
def tail_sum(x, k):
    return df.reduce_sum(x[k:])


def test_per_example_slices_of_different_sizes_are_a_clear_error_naming_the_line():
    xs = f64(np.arange(8.0).reshape(2, 4))
    same, ragged = df.constant(np.array([1, 1], np.int32)), df.constant(np.array([1, 2], np.int32))
    g = df.defun(df.vmap(tail_sum))
    np.testing.assert_allclose(g(xs, same).numpy(), [6.0, 18.0])
    line = tail_sum.__code__.co_firstlineno + 1
    msg = (rf"vmap: the slice at .*test_autograph_python_semantics.py:{line} \(return df.reduce_sum\(x\[k:\]\)\) "
           r"takes a different number of elements along axis 0 in different examples \(only 1 of the 2 .*ragged")
    cf = g.get_concrete_function(xs, same)
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    ns = {}
    exec(compile(df.export_numpy_source(cf), "<ragged>", "exec"), ns)
    runs = [df.vmap(tail_sum), g, lambda a, b: loaded(a.numpy(), b.numpy())]
    if pytest.importorskip("numba"):
        runs.append(df.defun(df.vmap(tail_sum), backend="numba"))
    for run in runs:
        np.testing.assert_allclose(np.asarray(run(xs, same)), [6.0, 18.0])
        with pytest.raises(df.errors.InvalidArgumentError, match=msg):
            run(xs, ragged)
    with pytest.raises(Exception, match=msg):
        ns["forward"](xs.numpy(), ragged.numpy())
    ort = pytest.importorskip("onnxruntime")     # ONNX keeps the values (it cannot raise)
    sess = ort.InferenceSession(df.export_onnx(cf).SerializeToString(), providers=["CPUExecutionProvider"])
    out = sess.run(None, {i.name: v for i, v in zip(sess.get_inputs(), (xs.numpy(), same.numpy()))})[0]
    np.testing.assert_allclose(out, [6.0, 18.0])
