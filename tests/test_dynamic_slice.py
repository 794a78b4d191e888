"""`t[a:b]` whose bounds are symbolic integer scalars (a loop counter, a function argument)
is one dynamic_strided_slice whose sliced sizes are unknown while tracing.

A generated sweep of bounds and steps (negative, past either end, empty results, both step
signs, int32 and int64 bounds) is compared with numpy's own slicing of the same values, for
the defun, its reloaded JSON document, its numpy source, its ONNX model (onnxruntime) and the
numba backend, all from one trace; gradients against finite differences in float16, float32
and float64 (first and second order, reverse and forward mode); `x[i:i + 2]` inside a
converted `for`/`while` with its gradient; `df.vmap` with bounds shared or per example; and
bounds of the wrong kind refused with a TypeError naming them.
"""
import itertools
import json

import numpy as np
import pytest

import defun as df
from defun.runtime import registry
from defun.runtime.execute import run_op

BOUNDS = (-7, -5, -4, -1, 0, 1, 2, 4, 5, 7)
STEPS = (-3, -2, -1, 1, 2, 3)

# name -> (the slice written with bounds a, b and step s, which of them are used)
PATTERNS = {
    "a:b": (lambda x, a, b, s: x[a:b], "ab"),
    "a:": (lambda x, a, b, s: x[a:], "a"),
    ":b": (lambda x, a, b, s: x[:b], "b"),
    "a:b:s": (lambda x, a, b, s: x[a:b:s], "abs"),
    "::s": (lambda x, a, b, s: x[::s], "s"),
    "a::s": (lambda x, a, b, s: x[a::s], "as"),
    ":b:s": (lambda x, a, b, s: x[:b:s], "bs"),
    "a:3": (lambda x, a, b, s: x[a:3], "a"),
    "a:b:-2": (lambda x, a, b, s: x[a:b:-2], "ab"),
    "1:b:s": (lambda x, a, b, s: x[1:b:s], "bs"),
}


def _runners(fn, specs, onnx=True, autograph=True):
    """The function run eagerly and traced once (x of unknown size), as the defun, its reloaded JSON
    document, its numpy source, its ONNX model and the numba backend: name -> f(*arrays).
    (`autograph=False`: a bare `t[i]` stays a slice; converted code gathers the row.)"""
    traced = df.defun(fn, input_signature=specs, autograph=autograph)
    cf = traced.get_concrete_function()
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    ns = {}
    exec(compile(df.export_numpy_source(cf), "<dynamic slice>", "exec"), ns)
    runners = {"eager": lambda *xs: fn(*map(df.constant, xs)).numpy(), "defun": lambda *xs: traced(*xs).numpy(),
               "json": lambda *xs: np.asarray(loaded(*xs)),
               "numpy source": lambda *xs: np.asarray(ns["forward"](*xs)[0])}
    numba = df.defun(fn, input_signature=specs, backend="numba", autograph=autograph)
    runners["numba"] = lambda *xs: numba(*xs).numpy()
    if onnx:
        ort = pytest.importorskip("onnxruntime")
        sess = ort.InferenceSession(df.export_onnx(cf).SerializeToString(), providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        runners["onnx"] = lambda *xs: sess.run(None, dict(zip(names, map(np.asarray, xs))))[0]
    return cf, runners


def _args_of(used, a, b, s, x, dt):
    return [x] + [np.asarray(v, dt) for k, v in zip("abs", (a, b, s)) if k in used]


def _sliced(pattern, used):
    """`pattern` as a function of x and only the bounds it uses."""
    def fn(x, *bounds):
        named = dict(zip(used, bounds))
        return pattern(x, named.get("a"), named.get("b"), named.get("s"))
    return fn


@pytest.mark.parametrize("name", list(PATTERNS))
@pytest.mark.parametrize("dt", [np.int32, np.int64])
def test_sweep_matches_numpy_in_every_form(name, dt):
    pattern, used = PATTERNS[name]
    specs = [df.TensorSpec([None], df.float32)] + [df.TensorSpec([], df.as_dtype(dt))] * len(used)
    cf, runners = _runners(_sliced(pattern, used), specs)
    assert "dynamic_strided_slice" in [n.op.name for n in cf.graph.nodes]
    assert tuple(cf.graph.outputs[0].shape) == (None,)
    values = list(itertools.product(BOUNDS if "a" in used else [None], BOUNDS if "b" in used else [None],
                                    STEPS if "s" in used else [None]))
    for n, every in ((5, 1), (0, 7)):       # (an empty x: every 7th case)
        x = np.arange(n, dtype=np.float32) + 10
        for a, b, s in values[::every]:
            want = pattern(x, a, b, s)
            args = _args_of(used, a, b, s, x, dt)
            for form, run in runners.items():
                got = run(*args)
                assert got.dtype == np.float32 and got.shape == want.shape and np.array_equal(got, want), \
                    f"{form}: x[{name}] with a={a}, b={b}, s={s} on {n} elements gave {got}, numpy {want}"


# 2-D keys: an int index that is a tensor (the axis goes), with slices, None and ...
KEYS_2D = {
    "i, a:b": lambda m, i, a, b: m[i, a:b],
    "a:b, i": lambda m, i, a, b: m[a:b, i],
    "None, a:, i": lambda m, i, a, b: m[None, a:, i],
    "..., a:b:-1": lambda m, i, a, b: m[..., b:a:-1],
    "i": lambda m, i, a, b: m[i],
    "a:b:2, i, None": lambda m, i, a, b: m[a:b:2, i, None],
}


@pytest.mark.parametrize("name", list(KEYS_2D))
def test_keys_with_tensor_indices_match_numpy(name):
    key = KEYS_2D[name]
    specs = [df.TensorSpec([None, None], df.float64), df.TensorSpec([], df.int64), df.TensorSpec([], df.int32),
             df.TensorSpec([], df.int32)]
    _, runners = _runners(key, specs, autograph=False)
    m = np.arange(12.).reshape(3, 4)
    for i, a, b in itertools.product(range(-2, 2), (-5, -1, 0, 2, 4), (-4, 1, 3, 9)):
        want = np.asarray(key(m, i, a, b))
        for form, run in runners.items():
            got = run(m, np.int64(i), np.int32(a), np.int32(b))
            assert got.shape == want.shape and np.array_equal(got, want), f"{form}: m[{name}] i={i} a={a} b={b}"


def test_an_index_out_of_range_and_a_zero_step_are_refused_when_the_graph_runs():
    specs = [df.TensorSpec([None], df.float32), df.TensorSpec([], df.int32)]
    _, index = _runners(lambda x, i: x[i], specs, onnx=False, autograph=False)
    _, step = _runners(lambda x, s: x[1::s], specs, onnx=False)
    x = np.arange(3, dtype=np.float32)
    for form in index:      # (numpy source raises its own copy of the error class)
        with pytest.raises(Exception, match="index 3 is out of range for axis 0") as info:
            index[form](x, np.int32(3))
        assert type(info.value).__name__ == "InvalidArgumentError", form
        with pytest.raises(Exception, match="step cannot be zero") as info:
            step[form](x, np.int32(0))
        assert type(info.value).__name__ == "InvalidArgumentError", form
        assert index[form](x, np.int32(-3)) == 0.


# ------------------------------------------------------------------ gradients
TOL = {df.float16: 2e-2, df.float32: 1e-5, df.float64: 1e-10}


def _numeric(f, x, eps=1e-6):
    out = np.zeros_like(x)
    for k in range(x.size):
        d = np.zeros_like(x)
        d.flat[k] = eps
        out.flat[k] = (f(x + d) - f(x - d)) / (2 * eps)
    return out


def _loss(x, a, b, s):
    return df.reduce_sum(df.sin(x[a:b:s]) * df.sin(x[a:b:s]))


def _grad_of(f):
    def grad(x, a, b, s):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = f(x, a, b, s)
        return tape.gradient(y, x)
    return grad


@pytest.mark.parametrize("dtype", [df.float16, df.float32, df.float64], ids=lambda d: d.name)
def test_gradients_match_finite_differences(dtype):
    specs = [df.TensorSpec([None], dtype)] + [df.TensorSpec([], df.int32)] * 3
    f = df.defun(_loss, input_signature=specs)
    g = df.defun(_grad_of(f), input_signature=specs)
    g64 = df.defun(_grad_of(_loss), input_signature=[df.TensorSpec([None], df.float64)] + specs[1:])
    x64 = np.linspace(-1.2, 1.4, 7).astype(dtype.np).astype(np.float64)    # the values dtype holds
    tol = TOL[dtype]
    for a, b, s in [(1, 5, 1), (-2, 0, -1), (6, -9, -2), (0, 100, 3), (4, 4, 1), (-100, 2, 1)]:
        x = df.constant(x64.astype(dtype.np))
        got = g(x, a, b, s)
        assert got.dtype is dtype
        want = _numeric(lambda v: np.sum(np.sin(v[a:b:s]) ** 2), x64)
        np.testing.assert_allclose(got.numpy().astype(np.float64), want, atol=tol * 10, rtol=tol)
        # second order: the gradient of the gradient's sum, against differences of the gradient
        with df.GradientTape() as tape:
            tape.watch(x)
            total = df.reduce_sum(g(x, a, b, s))
        want2 = _numeric(lambda v: float(df.reduce_sum(g64(v, a, b, s)).numpy()), x64)
        np.testing.assert_allclose(tape.gradient(total, x).numpy().astype(np.float64), want2,
                                   atol=tol * 20, rtol=tol * 10)
        # forward mode: the directional derivative along t
        t = np.cos(np.arange(7.))
        with df.ForwardAccumulator(x, df.constant(t.astype(dtype.np))) as acc:
            y = f(x, a, b, s)
        np.testing.assert_allclose(float(acc.jvp(y).numpy()), float(want @ t), atol=tol * 20, rtol=tol * 10)


def test_the_gradient_scatters_into_zeros_of_the_input_shape_in_every_form():
    def grad_of(m, i, a):
        with df.GradientTape() as tape:
            tape.watch(m)
            y = df.reduce_sum(m[i, a:] * df.cast(df.range(df.shape(m[i, a:])[0]) + 1, m.dtype))
        return tape.gradient(y, m)
    specs = [df.TensorSpec([None, None], df.float32), df.TensorSpec([], df.int32), df.TensorSpec([], df.int64)]
    _, runners = _runners(grad_of, specs)
    m = np.ones((3, 4), np.float32)
    for i, a in itertools.product((-3, 0, 2), (-2, 0, 1, 5)):
        want = np.zeros((3, 4), np.float32)
        want[i, a:] = np.arange(1, len(want[i, a:]) + 1)
        for form, run in runners.items():
            np.testing.assert_array_equal(run(m, np.int32(i), np.int64(a)), want, err_msg=f"{form} i={i} a={a}")


# ------------------------------------------------------------------ converted loops
def windows(x):
    """The sum of squares of every window of two rows: x[i:i + 2] with a loop counter i."""
    acc = df.zeros([], x.dtype)
    for i in range(df.shape(x)[0] - 1):
        acc += df.reduce_sum(x[i:i + 2] * x[i:i + 2])
    return acc


def running_max(x, k):
    """The sum of the maxima of the windows of k rows (k a tensor), in a tensor `while`."""
    i = 0
    acc = df.zeros([], x.dtype)
    while i + k <= df.shape(x)[0]:
        acc += df.reduce_max(x[i:i + k])
        i += 1
    return acc


def _windows_np(x):
    return sum(np.sum(x[i:i + 2] ** 2) for i in range(len(x) - 1))


def _running_max_np(x, k):
    return sum(np.max(x[i:i + k]) for i in range(len(x) - k + 1))


def test_a_window_in_a_converted_for_loop_is_one_loop_node_with_its_gradient():
    f = df.defun(windows)
    for n in (1, 2, 6):
        x = np.linspace(-1., 2., n)
        assert abs(f(df.constant(x)).numpy() - _windows_np(x)) < 1e-12
        xt = df.constant(x)
        with df.GradientTape() as tape:
            tape.watch(xt)
            y = f(xt)
        np.testing.assert_allclose(tape.gradient(y, xt).numpy(), _numeric(_windows_np, x), atol=1e-7)
    big = f.get_concrete_function(df.ones([1000]))
    ops = [n.op.name for n in big.graph.nodes]
    assert ops.count("while") == 1 and len(ops) < 20


def test_a_window_of_tensor_size_in_a_converted_while_loop():
    f = df.defun(running_max)
    x = np.array([0.5, -1., 3., 2., -0.5, 1.])
    for k in (1, 2, 4, 6, 7):
        got = f(df.constant(x), df.constant(k)).numpy()
        assert abs(got - _running_max_np(x, k)) < 1e-12, k
        xt = df.constant(x)
        with df.GradientTape() as tape:
            tape.watch(xt)
            y = f(xt, df.constant(k))
        np.testing.assert_allclose(tape.gradient(y, xt).numpy(), _numeric(lambda v: _running_max_np(v, k), x),
                                   atol=1e-7)


def test_the_converted_loop_in_every_export():
    cf = df.defun(windows).get_concrete_function(df.TensorSpec([None], df.float64))
    x = np.linspace(-1., 2., 5)
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    ns = {}
    exec(compile(df.export_numpy_source(cf), "<windows>", "exec"), ns)
    assert abs(float(np.asarray(loaded(x))) - _windows_np(x)) < 1e-12
    assert abs(float(ns["forward"](x)[0]) - _windows_np(x)) < 1e-12
    assert abs(df.defun(windows, backend="numba")(df.constant(x)).numpy() - _windows_np(x)) < 1e-12
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(df.export_onnx(cf).SerializeToString(), providers=["CPUExecutionProvider"])
    assert abs(float(sess.run(None, {sess.get_inputs()[0].name: x})[0]) - _windows_np(x)) < 1e-12


# ------------------------------------------------------------------ vmap
def test_vmap_with_shared_bounds_is_one_batched_slice():
    def f(x, a, b):
        return x[a:b] * 2.
    xs = np.arange(12.).reshape(3, 4)
    for a, b in [(1, 3), (-3, 100), (3, 1)]:
        got = df.vmap(df.defun(f), in_axes=(0, None, None))(df.constant(xs), df.constant(a), df.constant(b))
        np.testing.assert_array_equal(got.numpy(), xs[:, a:b] * 2.)

    @df.defun
    def batched_in_a_defun(xs, a, b):
        return df.vmap(f, in_axes=(0, None, None))(xs, a, b)
    cf = batched_in_a_defun.get_concrete_function(df.constant(xs), df.constant(1), df.constant(3))
    assert [n.op.name for n in cf.graph.nodes].count("dynamic_strided_slice") == 1
    np.testing.assert_array_equal(batched_in_a_defun(df.constant(xs), df.constant(-2), df.constant(4)).numpy(),
                                  xs[:, -2:4] * 2.)


def test_vmap_per_example_gradients_with_shared_bounds():
    def loss(x, a):
        return df.reduce_sum(x[a:] * x[a:])
    xs = np.arange(12.).reshape(3, 4)
    got = df.vmap(df.gradients_function(loss, [0]), in_axes=(0, None))(df.constant(xs), df.constant(1))
    want = np.where(np.arange(4) >= 1, 2 * xs, 0.)
    np.testing.assert_array_equal(np.asarray(got[0] if isinstance(got, (list, tuple)) else got), want)


def _equal_count_batches(n, size=5):
    """Batches of (a, b, s) per example whose slices of n elements are as long in every example."""
    by_count = {}
    for a, b, s in itertools.product(BOUNDS, BOUNDS, STEPS):
        by_count.setdefault(len(range(*slice(a, b, s).indices(n))), []).append((a, b, s))
    rng = np.random.default_rng(1)
    return [[group[k] for k in rng.choice(len(group), size)] for _, group in sorted(by_count.items())]


def test_vmap_with_bounds_per_example_matches_numpy_in_every_form():
    def per_example(x, a, b, s):
        return df.vmap(lambda x, a, b, s: x[a:b:s] * 2.)(x, a, b, s)
    specs = [df.TensorSpec([None, None], df.float64)] + [df.TensorSpec([None], df.int32)] * 3
    _, runners = _runners(per_example, specs)
    runners["vmap, eager"] = lambda *xs: per_example(*[df.constant(x) for x in xs]).numpy()
    rng = np.random.default_rng(0)
    for batch in _equal_count_batches(6):
        xs = rng.normal(size=(len(batch), 6))
        a, b, s = (np.array(v, np.int32) for v in zip(*batch))
        want = np.stack([x[slice(*k)] * 2. for x, k in zip(xs, batch)])
        for form, run in runners.items():
            got = run(xs, a, b, s)
            assert got.shape == want.shape and np.allclose(got, want), f"{form}: {batch}"


def test_vmap_with_an_index_per_example_and_a_shared_bound():
    def f(m, i, a):
        return m[i, a:], m[1:, i]
    ms = np.arange(24.).reshape(2, 3, 4)
    got = df.vmap(f, in_axes=(0, 0, None))(df.constant(ms), df.constant(np.array([0, -1])), df.constant(1))
    np.testing.assert_array_equal(got[0].numpy(), [ms[0][0, 1:], ms[1][-1, 1:]])
    np.testing.assert_array_equal(got[1].numpy(), [ms[0][1:, 0], ms[1][1:, -1]])


def test_vmap_per_example_gradients_with_bounds_per_example():
    def loss(x, a, b):
        return df.reduce_sum(df.sin(x[a:b]) * x[a:b])
    xs = np.random.default_rng(2).normal(size=(4, 5))
    starts, stops = np.array([0, 3, -2, 1], np.int32), np.array([2, 5, 100, -2], np.int32)

    def per_example(xs, a, b):
        return df.vmap(df.gradients_function(loss, [0]))(xs, a, b)[0]
    want = np.stack([_numeric(lambda v: np.sum(np.sin(v[a:b]) * v[a:b]), x) for x, a, b in zip(xs, starts, stops)])
    for run in (per_example, df.defun(per_example)):
        np.testing.assert_allclose(run(df.constant(xs), df.constant(starts), df.constant(stops)).numpy(), want,
                                   atol=1e-8)


def test_vmap_refuses_examples_whose_slices_differ_in_size():
    def f(x, a):
        return x[a:a + 2]
    xs = np.arange(12.).reshape(3, 4)
    ragged = np.array([0, 3, 1], np.int32)     # x[3:5] of 4 elements has one
    for run in (df.vmap(f), df.defun(df.vmap(f))):
        with pytest.raises(df.errors.InvalidArgumentError, match=r"vmap: the slice at .*test_dynamic_slice.py:\d+ "
                           r"\(return x\[a:a \+ 2\]\) takes a different number .* \(only 2 of the 3 .*ragged"):
            run(df.constant(xs), df.constant(ragged))
    got = df.vectorized_map(lambda e: f(*e), (df.constant(xs), df.constant(np.array([0, 2, 1], np.int32))))
    np.testing.assert_array_equal(got.numpy(), [xs[0, 0:2], xs[1, 2:4], xs[2, 1:3]])


# ------------------------------------------------------------------ bad bounds
@pytest.mark.parametrize("key,words", [
    (lambda x, t: x[t:], "float32 tensor of shape ()"),
    (lambda x, t: x[:df.reshape(df.cast(t, df.int32), [1])], "int32 tensor of shape (1,)"),
    (lambda x, t: x[::df.cast(t, df.bool)], "bool tensor of shape ()"),
    (lambda x, t: x[df.cast(t, df.int32) * df.ones([2], df.int32)], "int32 tensor of shape (2,)"),
])
def test_a_bound_that_is_not_an_integer_scalar_is_a_type_error_naming_it(key, words):
    f = df.defun(key, input_signature=[df.TensorSpec([None], df.float32), df.TensorSpec([], df.float32)])
    with pytest.raises(TypeError) as info:
        f(df.constant([1., 2., 3.]), df.constant(1.))
    msg = str(info.value)
    assert "strided_slice" in msg and "integer scalars" in msg and words in msg and "test_dynamic_slice.py" in msg, msg


@pytest.mark.parametrize("known", [True, False], ids=["known size", "unknown size"])
def test_static_slices_in_onnx_match_numpy_before_the_start(known):
    """The static strided_slice's ONNX form: a negative-step start before the first element
    (x[-7::-1] of 5 elements) is empty, as in Python (ONNX's Slice alone gives x[0])."""
    ort = pytest.importorskip("onnxruntime")
    x = np.arange(5, dtype=np.float32)
    keys = [slice(a, b, s) for a, b, s in itertools.product((-9, -6, -5, -1, 2, None), (-8, -6, 0, None), (-2, -1, 1))]

    def f(x):
        return df.concat([df.reshape(x[k], [-1]) for k in keys] + [df.reshape(x[-6:, None][-7::-1], [-1])], 0)
    spec = df.TensorSpec([5] if known else [None], df.float32)
    cf = df.defun(f, input_signature=[spec]).get_concrete_function()
    sess = ort.InferenceSession(df.export_onnx(cf).SerializeToString(), providers=["CPUExecutionProvider"])
    want = np.concatenate([x[k] for k in keys] + [x[-6:, None][-7::-1].reshape(-1)])
    np.testing.assert_array_equal(sess.run(None, {sess.get_inputs()[0].name: x})[0], want)


def test_a_document_naming_bounds_the_slice_does_not_have_is_refused():
    x, a = df.constant(np.arange(4.)), df.constant(1)
    for operands, masks in (((3,), (0, 0, 0)), ((0, 0), (0, 0, 0)), ((-1,), (0, 0, 0)), ((1,), (0, 1, 0)),
                            ((2,), (0, 0, 1))):
        bounds = (a,) * len(operands)
        attrs = dict(begin=(0,), end=(0,), strides=(1,), begin_mask=masks[0], end_mask=masks[1],
                     shrink_axis_mask=masks[2], new_axis=(), operands=operands, shape=())
        with pytest.raises(df.errors.InvalidArgumentError, match="operands .* must be distinct codes"):
            run_op(registry.get("dynamic_strided_slice"), (x,) + bounds, attrs)
    cf = df.defun(lambda x, a: x[a:]).get_concrete_function(df.TensorSpec([None]), df.TensorSpec([], df.int32))
    text = json.dumps(df.export_json(cf))
    assert text.count('"operands": [0]') == 1
    with pytest.raises(df.errors.GraphFormatError, match="operands .* must be distinct codes"):
        df.load_json(json.loads(text.replace('"operands": [0]', '"operands": [7]')))
