"""reduce_retracing (the default): a defun whose tensors change size only traces once more
with those sizes unknown, and that trace does everything an exact one does (gradients of
any order, control flow, rematerialize, vmap, the numba backend, every export); sizes 0
and 1 are ordinary sizes there. A function that needs static sizes keeps one trace per
shape and says so once."""
import warnings

import numpy as np
import pytest

import defun as df

f32, f64 = np.float32, np.float64


def _rows(n, k=3, seed=0, dtype=f32):
    return np.random.default_rng(seed + n).normal(size=(n, k)).astype(dtype)


def _mlp(x, w, b):
    return df.reduce_sum(df.tanh(x @ w + b), axis=1)


def _mlp_np(x, w, b):
    return np.tanh(x @ w + b).sum(axis=1)


W = np.random.default_rng(7).normal(size=(3, 4)).astype(f32)
B = np.random.default_rng(8).normal(size=(4,)).astype(f32)


# ====================================================================== how many traces
def test_one_hundred_batch_sizes_take_two_traces_and_give_numpys_values():
    f = df.defun(_mlp)
    w, b = df.constant(W), df.constant(B)
    sizes = [5] + [n for n in range(100) if n != 5]       # 0 and 1 among them
    for n in sizes:
        x = _rows(n)
        np.testing.assert_allclose(f(df.constant(x), w, b).numpy(), _mlp_np(x, W, B), rtol=1e-5, atol=1e-6)
    assert f.trace_count == 2
    (reason,) = f.retrace_reasons()
    assert reason.relaxed and reason.trace == 2 and reason.closest == 1
    assert reason.changes == ("x: float32[5, 3] -> float32[None, 3]",)
    assert str(reason) == ("trace 2 relaxes trace 1 to unknown sizes (one trace for any size there): "
                           "x: float32[5, 3] -> float32[None, 3]")
    shapes = [tuple(cf.graph.inputs[0].shape) for cf in f._cache.values()]
    assert shapes == [(5, 3), (None, 3)]


@pytest.mark.parametrize("first, second", [(1, 5), (0, 4), (5, 1), (4, 0), (1, 0)])
def test_sizes_zero_and_one_are_ordinary_sizes_of_the_relaxed_trace(first, second):
    f = df.defun(_mlp)
    w, b = df.constant(W), df.constant(B)
    for n in (first, second, 0, 1, 2, first, second):
        x = _rows(n)
        np.testing.assert_allclose(f(df.constant(x), w, b).numpy(), _mlp_np(x, W, B), rtol=1e-5, atol=1e-6)
    assert f.trace_count == 2


def test_only_the_sizes_that_changed_are_relaxed_and_a_later_change_relaxes_more():
    @df.defun
    def f(x, y):
        return df.reduce_sum(x, axis=1) * df.reduce_sum(y)

    y = df.constant(np.ones(2, f32))
    f(df.constant(np.ones((2, 3), f32)), y)
    f(df.constant(np.ones((4, 3), f32)), y)          # x's rows
    f(df.constant(np.ones((7, 3), f32)), y)          # served
    out = f(df.constant(np.ones((7, 5), f32)), y)    # x's columns too: relaxed once more
    np.testing.assert_allclose(out.numpy(), np.full(7, 10.0))
    f(df.constant(np.ones((3, 1), f32)), y)          # served
    assert f.trace_count == 3
    assert [r.changes for r in f.retrace_reasons()] == [
        ("x: float32[2, 3] -> float32[None, 3]",), ("x: float32[None, 3] -> float32[None, None]",)]
    # y kept its static size in every trace
    assert all(cf.graph.inputs[1].shape == (2,) for cf in f._cache.values())


def test_a_relaxed_trace_refuses_what_does_not_fit_its_known_sizes():
    # the relaxed trace takes [None, 3]; its fast path must not run a [4, 5] or a float64 call
    f = df.defun(lambda x: df.reduce_sum(x * df.constant(np.arange(3, dtype=f32)), axis=1))
    f(df.constant(np.ones((2, 3), f32)))
    f(df.constant(np.ones((4, 3), f32)))
    f(df.constant(np.ones((6, 3), f32)))
    with pytest.raises(df.errors.InvalidArgumentError):
        f(df.constant(np.ones((6, 5), f32)))     # relaxes x's columns, then cannot multiply
    g = df.defun(lambda x: x * 2.0)
    g(df.constant(np.ones((2, 3), f32)))
    g(df.constant(np.ones((4, 3), f32)))
    out = g(df.constant(np.ones((4, 3), f64)))
    assert out.dtype is df.float64 and g.trace_count == 3
    out = g(df.constant(np.ones((4, 3, 1), f32)))
    assert out.shape == (4, 3, 1) and g.trace_count == 4


def test_python_values_still_key_exactly():
    f = df.defun(lambda x, n: x * n)
    f(df.constant(np.ones(2, f32)), 2.0)
    f(df.constant(np.ones(3, f32)), 3.0)      # a new value and a new size: an exact trace
    assert f.trace_count == 2 and not any(r.relaxed for r in f.retrace_reasons())
    np.testing.assert_allclose(f(df.constant(np.ones(5, f32)), 3.0).numpy(), np.full(5, 3.0))
    assert f.trace_count == 3 and f.retrace_reasons()[-1].relaxed


def test_nested_arguments_keywords_and_numpy_arrays_relax():
    @df.defun
    def f(xs, *, scale=None):
        return df.reduce_sum(xs["a"]) + df.reduce_sum(xs["b"][0]) * scale

    for n in (2, 3, 0, 1):
        a, b = np.ones(n, f32), np.ones((n, 2), f32)
        out = f({"a": a, "b": [b]}, scale=np.float32(2.0))
        np.testing.assert_allclose(out.numpy(), n + 4.0 * n)
    assert f.trace_count == 2
    assert f.retrace_reasons()[0].changes == ("xs['a']: float32[2] -> float32[None]",
                                              "xs['b'][0]: float32[2, 2] -> float32[None, 2]")


def test_reduce_retracing_false_and_input_signature():
    f = df.defun(lambda x: x + 1.0, reduce_retracing=False)
    for n in (1, 2, 3, 0):
        f(df.constant(np.ones(n, f32)))
    assert f.trace_count == 4 and not any(r.relaxed for r in f.retrace_reasons())
    g = df.defun(lambda x: x + 1.0, input_signature=[df.TensorSpec([2], df.float32)])
    g(df.constant(np.ones(2, f32)))
    with pytest.raises(ValueError):
        g(df.constant(np.ones(3, f32)))          # the signature wins: no relaxing
    assert g.trace_count == 1


def test_get_concrete_function_gives_the_trace_a_call_runs():
    f = df.defun(_mlp)
    w, b = df.constant(W), df.constant(B)
    f(df.constant(_rows(2)), w, b)
    f(df.constant(_rows(3)), w, b)
    cf = f.get_concrete_function(df.constant(_rows(9)), w, b)
    assert cf.graph.inputs[0].shape == (None, 3) and f.trace_count == 2
    # a TensorSpec with unknown sizes traces a trace that later calls of that rank use
    g = df.defun(lambda x: x * 3.0)
    g.get_concrete_function(df.TensorSpec([None], df.float32))
    np.testing.assert_allclose(g(df.constant(np.ones(4, f32))).numpy(), np.full(4, 3.0))
    assert g.trace_count == 1


def test_a_method_relaxes_per_instance():
    class Model:
        def __init__(self):
            self.w = df.Variable(W)

        @df.defun
        def __call__(self, x):
            return x @ self.w

    m = Model()
    for n in (2, 3, 4, 0):
        x = _rows(n)
        np.testing.assert_allclose(m(df.constant(x)).numpy(), x @ W, rtol=1e-5)
    assert Model.__call__.__get__(m, Model).trace_count == 2


# ====================================================================== static sizes
def test_a_function_that_needs_a_static_size_keeps_one_trace_per_shape_and_says_so_once():
    @df.defun
    def f(x):
        n = x.shape[0]                       # a Python int: no trace with an unknown size
        return df.reshape(x, [n * x.shape[1]]) * float(n)

    for n in (2, 3, 4, 0, 1, 3):
        x = _rows(n)
        np.testing.assert_allclose(f(df.constant(x)).numpy(), x.reshape(-1) * n, rtol=1e-6)
    assert f.trace_count == 5
    reasons = f.retrace_reasons()
    noted = [r for r in reasons if r.note]
    assert len(noted) == 1 and noted[0] is reasons[0]
    assert "'f' needs static sizes: a trace with x: float32[2, 3] -> float32[None, 3] failed at " \
        f"{__file__}:" in str(reasons[0]) and "so it keeps one trace per shape" in str(reasons[0])
    assert str(reasons[1]) == "trace 3 differs from trace 2 in x: tensor float32[3, 3] -> tensor float32[4, 3]"
    assert not any(r.relaxed for r in reasons)


def test_an_error_of_the_function_itself_is_raised_as_the_exact_trace_raises_it():
    @df.defun
    def f(x):
        if x.shape[0] is not None and x.shape[0] > 2:
            raise ValueError("too long")
        return x * 2.0

    f(df.constant(np.ones(1, f32)))
    f(df.constant(np.ones(2, f32)))          # relaxed: the check sees None
    np.testing.assert_allclose(f(df.constant(np.ones(5, f32))).numpy(), np.full(5, 2.0))
    h = df.defun(lambda x: x.shape[0] + "a")     # fails for every size
    with pytest.raises(TypeError):
        h(df.constant(np.ones(1, f32)))
    with pytest.raises(TypeError):
        h(df.constant(np.ones(2, f32)))
    assert h.trace_count == 0


def test_a_recursive_defun_falls_back_to_static_sizes():
    @df.defun
    def total(x):
        if x.shape[0] == 0:
            return df.constant(0.0)
        return x[0] + total(x[1:])

    for n in (3, 4):
        np.testing.assert_allclose(total(df.constant(np.arange(n, dtype=f32))).numpy(), n * (n - 1) / 2)
    assert any(r.note for r in total.retrace_reasons())


# ====================================================================== the warning
def test_retracing_warning_names_the_relaxed_dimension_at_the_callers_line():
    f = df.defun(lambda x, n: x * n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(6):
            f(df.constant(np.ones(2, f32)), n)
        f(df.constant(np.ones(3, f32)), 5)
    retrace = [w for w in caught if issubclass(w.category, df.RetracingWarning)]
    assert len(retrace) == 2
    assert "relaxes trace 6 to unknown sizes (one trace for any size there): x: float32[2] -> float32[None]" \
        in str(retrace[-1].message)
    assert retrace[-1].filename == __file__


# ====================================================================== what a relaxed trace does
def _relaxed(fn, n0=2, n1=3, k=3, **options):
    """`fn` as a defun with a relaxed trace (called at sizes n0, n1)."""
    f = df.defun(fn, **options)
    f(df.constant(_rows(n0, k)))
    f(df.constant(_rows(n1, k)))
    assert f.retrace_reasons()[-1].relaxed
    return f


@pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")    # the mean of 0 rows
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("remat", [False, True])
def test_gradients_first_and_second_order_through_a_relaxed_trace(dtype, remat):
    w0 = np.random.default_rng(3).normal(size=(3, 2)).astype(dtype)
    w = df.Variable(w0)

    def loss(x):
        h = df.tanh(x @ w)
        return df.reduce_sum(h * h) + df.reduce_mean(x)

    f = df.defun(loss, rematerialize=remat)
    for n in (2, 5, 1, 0, 4):
        x0 = _rows(n, dtype=dtype)
        x = df.constant(x0)
        with df.GradientTape(persistent=True) as outer:
            outer.watch(x)
            with df.GradientTape() as inner:
                inner.watch(x)
                y = f(x)
            gx, gw = inner.gradient(y, [x, w])
            s = df.reduce_sum(gx)
        ggx = outer.gradient(s, x)
        # references in float64
        xd, wd = x0.astype(f64), w0.astype(f64)
        h = np.tanh(xd @ wd)
        d = 2 * h * (1 - h * h)
        mean = 1.0 / xd.size if n else 0.0
        want_y = (h * h).sum() + (xd.mean() if n else np.nan)
        tol = dict(rtol=2e-2, atol=2e-2) if dtype == np.float16 else dict(rtol=1e-5, atol=1e-6)
        if n:
            np.testing.assert_allclose(y.numpy().astype(f64), want_y, **tol)
        np.testing.assert_allclose(gx.numpy().astype(f64), d @ wd.T + mean, **tol)
        np.testing.assert_allclose(gw.numpy().astype(f64), xd.T @ d, **tol)
        # d/dx of sum(dL/dx): finite differences in float64 of the same function
        if dtype == np.float64 and n:
            def s_of(xv):
                hv = np.tanh(xv @ wd)
                return (2 * hv * (1 - hv * hv) @ wd.T).sum()
            eps = 1e-6
            fd = np.zeros_like(xd)
            for idx in np.ndindex(*xd.shape):
                e = np.zeros_like(xd)
                e[idx] = eps
                fd[idx] = (s_of(xd + e) - s_of(xd - e)) / (2 * eps)
            np.testing.assert_allclose(ggx.numpy(), fd, rtol=1e-4, atol=1e-6)
        else:
            assert ggx.shape == x0.shape
    assert f.trace_count == 2


def test_broadcasting_by_a_size_one_argument_in_a_relaxed_trace_reduces_its_gradient():
    @df.defun
    def f(x, y):
        return df.reduce_sum(x * y * y)

    for n, m in [(3, 3), (1, 4), (4, 1), (0, 1), (1, 0), (1, 1)]:
        x0, y0 = np.arange(n, dtype=f64) + 1.0, np.arange(m, dtype=f64) + 2.0
        x, y = df.constant(x0), df.constant(y0)
        with df.GradientTape(persistent=True) as outer:
            outer.watch(y)
            with df.GradientTape() as inner:
                inner.watch([x, y])
                z = f(x, y)
            gx, gy = inner.gradient(z, [x, y])
        ggy = outer.gradient(gy, y)
        bx, by = np.broadcast_arrays(x0, y0)
        np.testing.assert_allclose(z.numpy(), (bx * by * by).sum())
        want_gx = (by * by).sum(keepdims=True) if n == 1 and m != 1 else by * by
        want_gy = (2 * bx * by).sum(keepdims=True) if m == 1 and n != 1 else 2 * bx * by
        np.testing.assert_allclose(gx.numpy(), want_gx.reshape(x0.shape))
        np.testing.assert_allclose(gy.numpy(), want_gy.reshape(y0.shape))
        want_ggy = (2 * bx).sum(keepdims=True) if m == 1 and n != 1 else 2 * bx
        np.testing.assert_allclose(ggy.numpy(), want_ggy.reshape(y0.shape))
    assert f.trace_count == 2


def test_control_flow_in_a_relaxed_trace():
    def fn(x):
        s = df.reduce_sum(x)
        y = df.cond(s > 0.0, lambda: x * 2.0, lambda: x - 1.0)
        i, acc = df.while_loop(lambda i, a: i < df.shape(x)[0], lambda i, a: (i + 1, a + df.reduce_sum(df.gather(x, i))),
                               (df.constant(0), df.constant(0.0)))
        return y, acc

    f = _relaxed(fn)
    for n in (4, 0, 1):
        x0 = _rows(n)
        x = df.constant(x0)
        with df.GradientTape() as tape:
            tape.watch(x)
            y, acc = f(x)
            total = df.reduce_sum(y) + acc
        want = x0 * 2.0 if x0.sum() > 0 else x0 - 1.0
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(acc.numpy(), x0.sum(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tape.gradient(total, x).numpy(),
                                   np.full(x0.shape, (2.0 if x0.sum() > 0 else 1.0) + 1.0))
    assert f.trace_count == 2


def test_vmap_over_an_unknown_batch_size_inside_a_relaxed_trace():
    w = df.constant(np.arange(3, dtype=f32))
    f = _relaxed(lambda x: df.vmap(lambda r: df.reduce_sum(df.tanh(r) * w))(x))
    for n in (5, 1, 0):
        x0 = _rows(n)
        np.testing.assert_allclose(f(df.constant(x0)).numpy(), (np.tanh(x0) * np.arange(3)).sum(axis=1), rtol=1e-5)
    assert f.trace_count == 2


def test_the_numba_backend_runs_a_relaxed_trace():
    pytest.importorskip("numba")
    fn = lambda x: df.reduce_sum(df.tanh(x * 2.0) + df.exp(-x * x), axis=1)    # noqa: E731
    f = _relaxed(fn, backend="numba")
    for n in (6, 1, 0):
        x0 = _rows(n)
        np.testing.assert_allclose(f(df.constant(x0)).numpy(), (np.tanh(x0 * 2) + np.exp(-x0 * x0)).sum(axis=1),
                                   rtol=1e-5)
    assert f.trace_count == 2
    cf = f.get_concrete_function(df.constant(_rows(7)))
    assert cf.graph.inputs[0].shape == (None, 3)


def test_every_export_of_a_relaxed_trace_has_a_symbolic_size():
    f = df.defun(_mlp)
    w, b = df.constant(W), df.constant(B)
    f(df.constant(_rows(2)), w, b)
    cf = f.get_concrete_function(df.constant(_rows(5)), w, b)
    assert cf.graph.inputs[0].shape == (None, 3)
    loaded = df.load_json(df.export_json(cf))
    assert loaded.signature[0].shape == (None, 3)
    ns = {}
    exec(compile(df.export_numpy_source(cf), "<exported>", "exec"), ns)   # noqa: S102 - our own export
    for n in (0, 1, 6):
        x = _rows(n)
        want = _mlp_np(x, W, B)
        np.testing.assert_allclose(loaded(x, W, B).numpy(), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ns["forward"](x, W, B)[0], want, rtol=1e-5, atol=1e-6)
    ort = pytest.importorskip("onnxruntime")
    model = df.export_onnx(cf)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and dims[1].dim_value == 3
    sess = ort.InferenceSession(model.SerializeToString())
    names = [i.name for i in sess.get_inputs()]
    for n in (1, 6):
        x = _rows(n)
        (got,) = sess.run(None, dict(zip(names, [x, W, B])))
        np.testing.assert_allclose(got, _mlp_np(x, W, B), rtol=1e-5, atol=1e-6)


def test_a_relaxed_trace_calling_a_defun_and_assigning_a_variable():
    inner = df.defun(lambda x: df.tanh(x) * 2.0)
    v = df.Variable(0.0)

    @df.defun
    def outer(x):
        y = inner(x)
        v.assign_add(df.reduce_sum(y))
        return y

    total = 0.0
    for n in (2, 3, 0, 1, 5):
        x0 = _rows(n)
        np.testing.assert_allclose(outer(df.constant(x0)).numpy(), np.tanh(x0) * 2.0, rtol=1e-6)
        total += (np.tanh(x0) * 2.0).sum()
    np.testing.assert_allclose(v.numpy(), total, rtol=1e-5)
    assert outer.trace_count == 2


# ====================================================================== hot shapes
def test_a_relaxed_trace_runs_a_static_plan_for_shapes_it_sees_often():
    from defun.trace_calls import HOT_CALLS
    from defun.graph.passes import optimize
    from defun.graph.specialize import specialize

    def loss(w, b, x, y):
        h = df.tanh(x @ w + b)
        return df.reduce_mean(df.square(df.reduce_sum(h, axis=1) - y))

    step = df.defun(df.value_and_gradients_function(loss, [0, 1]))
    w, b = df.constant(W), df.constant(B)

    def check(n):
        x, y = _rows(n), np.arange(n, dtype=f32)
        value, (gw, gb) = step(w, b, df.constant(x), df.constant(y))
        h = np.tanh(x.astype(np.float64) @ W + B)
        r = h.sum(axis=1) - y
        d = (2 * r / max(n, 1))[:, None] * (1 - h * h)
        if n:
            np.testing.assert_allclose(value.numpy(), (r * r).mean(), rtol=1e-5)
        np.testing.assert_allclose(gw.numpy(), x.T @ d, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(gb.numpy(), d.sum(axis=0), rtol=1e-4, atol=1e-6)

    for n in [2] + [5] * (HOT_CALLS + 2) + [1] * (HOT_CALLS + 2) + [3, 7]:
        check(n)
    relaxed = list(step._cache.values())[1]
    shapes = {relaxed._calls.shapes_of(s)[2] for s in relaxed._calls._specialized}
    assert shapes == {(5, 3), (1, 3)} and step.trace_count == 2
    # the static plan is what an exact trace's is: no size read, no sum to an equal shape
    fast = optimize(specialize(relaxed.graph, ((3, 4), (4,), (5, 3), (5,))))
    assert not {n.op.name for n in fast.nodes} & {"size", "shape", "broadcast_like"}
    assert sum(n.op.name == "sum_to_like" for n in fast.nodes) < \
        sum(n.op.name == "sum_to_like" for n in optimize(relaxed.graph).nodes)
    assert len(fast.nodes) <= len(optimize(list(step._cache.values())[0].graph).nodes)


def test_simplify_folds_like_ops_and_sizes_of_known_shapes():
    from defun.graph.passes import optimize, simplify_algebra
    from defun.runtime.execute import run_op
    from defun.runtime.registry import get

    @df.defun(input_signature=[df.TensorSpec([3, 2]), df.TensorSpec([3, 2]), df.TensorSpec([2])])
    def h(g, like, b):
        n = df.cast(df.size(like), df.float32)
        s = run_op(get("sum_to_like"), [g, like])
        return s / n + run_op(get("broadcast_like"), [b, like])

    graph = h.get_concrete_function().graph
    ops = {n.op.name for n in optimize(graph).nodes}
    assert not ops & {"size", "sum_to_like", "broadcast_like"}, ops
    assert simplify_algebra(graph) is not graph
    g0 = np.arange(6, dtype=f32).reshape(3, 2)
    out = h(df.constant(g0), df.constant(np.ones((3, 2), f32)), df.constant(np.array([1.0, 2.0], f32)))
    np.testing.assert_allclose(out.numpy(), g0 / 6.0 + np.array([1.0, 2.0]))


def test_get_concrete_function_of_tensor_specs_traces_exactly_them():
    f = df.defun(lambda x: x * 2.0)
    relaxed = f.get_concrete_function(df.TensorSpec([None, 5], df.float32))
    fixed = f.get_concrete_function(df.TensorSpec([40, 5], df.float32))
    assert fixed is not relaxed and fixed.graph.inputs[0].shape == (40, 5)
    assert f.get_concrete_function(df.constant(np.ones((7, 5), f32))) is relaxed


def test_a_new_size_runs_the_relaxed_trace_without_a_cache_lookup():
    """After its first call, a relaxed trace is the one the next call tries first: a new size
    runs it without computing a cache key (sizes never seen before take the short path)."""
    f = _relaxed(lambda x: df.reduce_sum(df.tanh(x), axis=1))
    lookups = []
    plain = f._key_and_tensors
    f._key_and_tensors = lambda *a: lookups.append(a) or plain(*a)
    for n in (5, 1, 0, 9):
        x0 = _rows(n)
        np.testing.assert_allclose(f(df.constant(x0)).numpy(), np.tanh(x0).sum(axis=1), rtol=1e-6)
    assert lookups == [] and f.trace_count == 2
    f(df.constant(np.ones((2, 2, 2), np.float32)))      # another rank: a lookup and a trace of its own
    assert len(lookups) == 1 and f.trace_count == 3


@pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")    # the mean of 0 rows
def test_a_relaxed_steps_gradients_at_sizes_zero_one_seven_and_past_the_small_broadcast():
    """The relaxed trace's own plan (a size's first calls) broadcasts a mean's gradient and
    sums a bias's: a filled array up to 4,096 elements, a view past them (5,000 rows)."""
    def loss(w, b, x):
        return df.reduce_mean(df.reduce_sum(df.tanh(x @ w + b), axis=1))

    step = df.defun(df.value_and_gradients_function(loss, [0, 1]))
    w, b = df.constant(W), df.constant(B)
    for n in (2, 3, 0, 1, 7, 5000):
        x = _rows(n)
        value, (gw, gb) = step(w, b, df.constant(x))
        h = np.tanh(x.astype(f64) @ W + B)
        d = (1 - h * h) / max(n, 1)
        if n:
            np.testing.assert_allclose(value.numpy(), h.sum(axis=1).mean(), rtol=1e-5)
        np.testing.assert_allclose(gw.numpy(), x.T @ d, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(gb.numpy(), d.sum(axis=0), rtol=1e-4, atol=1e-6)
    assert step.trace_count == 2
