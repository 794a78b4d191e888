"""df.vmap and df.vectorized_map as programs use them (the per-op sweep is test_vmap_ops.py).

Each result is compared with the function applied to every example and stacked (numpy
loops), or with jax.vmap: in_axes/out_axes nests, cond with a batched and a shared
predicate, while_loop with a per-example trip count, nested vmap, variables, tapes (the
batched function's gradient vs finite differences in float16/32/64), per-example
gradients, defun (one node per op; JSON, numpy source and ONNX exports), and the errors:
an op without a rule (named, with the user's line), the fallback's warning, assignments.
"""
import importlib.util
import types
import warnings

import numpy as np
import pytest

import defun as df
from defun.runtime import errors

f16, f32, f64 = df.float16, df.float32, df.float64
rng = np.random.default_rng(0)


def _loop(fn, *args, in_axes=0):
    """numpy reference: fn on each example, stacked (leaves of tuple results stacked apart)."""
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    n = [np.shape(a)[ax] for a, ax in zip(args, axes) if ax is not None][0]
    outs = []
    for i in range(n):
        ex = [df.constant(np.take(a, i, axis=ax)) if ax is not None else df.constant(a)
              for a, ax in zip(args, axes)]
        outs.append(fn(*ex))
    if isinstance(outs[0], (tuple, list)):
        return [np.stack([o[k].numpy() for o in outs]) for k in range(len(outs[0]))]
    return np.stack([o.numpy() for o in outs])


def _close(a, b, tol=1e-10):
    a = a.numpy() if isinstance(a, df.Tensor) else np.asarray(a)
    assert a.shape == np.shape(b), (a.shape, np.shape(b))
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _mlp(dtype=np.float64):
    return [rng.normal(size=s).astype(dtype) for s in [(4, 5), (5,), (5, 3), (3,)]]


# ---------------------------------------------------------------------------------------
# semantics: in_axes, out_axes, vectorized_map

def test_in_axes_nests_and_out_axes():
    x = rng.normal(size=(3, 4))
    w = rng.normal(size=(4,))
    pair = {"a": rng.normal(size=(4, 3)), "b": rng.normal(size=(2,))}

    def f(x, w, p):
        return df.reduce_sum(x * w * df.reduce_sum(p["a"])) + df.reduce_sum(p["b"]), x * 2.0

    got = df.vmap(f, in_axes=(0, None, {"a": 1, "b": None}), out_axes=(0, 1))(x, w, pair)
    want0 = [np.sum(x[i] * w * pair["a"][:, i].sum()) + pair["b"].sum() for i in range(3)]
    _close(got[0], np.array(want0))
    _close(got[1], (x * 2.0).T)          # out_axes 1: the batch is the second axis
    # in_axes on a later axis
    _close(df.vmap(lambda t: df.reduce_max(t), in_axes=1)(x), x.max(axis=0))


def test_vectorized_map_maps_axis_zero_of_every_element():
    a, b = rng.normal(size=(5, 3)), rng.normal(size=(5, 3, 2))
    got = df.vectorized_map(lambda e: df.matmul(df.reshape(e[0], (1, 3)), e[1]), (a, b))
    _close(got, np.stack([a[i][None] @ b[i] for i in range(5)]))


def test_bad_arguments_are_typed_errors():
    x = np.ones((3, 2))
    with pytest.raises(errors.InvalidArgumentError, match="same batch size"):
        df.vmap(lambda a, b: a + b)(x, np.ones((4, 2)))
    with pytest.raises(errors.InvalidArgumentError, match="in_axes has 1 entries for 2"):
        df.vmap(lambda a, b: a + b, in_axes=(0,))(x, x)
    with pytest.raises(errors.InvalidArgumentError, match="no argument is mapped"):
        df.vmap(lambda a: a, in_axes=None)(x)
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        df.vmap(lambda a: a, in_axes=2)(x)
    with pytest.raises(TypeError, match="ints or None"):
        df.vmap(lambda a: a, in_axes="0")


def test_unbatched_outputs_are_broadcast():
    x = rng.normal(size=(4, 2))
    w = rng.normal(size=(2,))
    out = df.vmap(lambda x, w: (x + w, w * 3.0), in_axes=(0, None))(x, w)
    _close(out[1], np.broadcast_to(w * 3.0, (4, 2)))


# ---------------------------------------------------------------------------------------
# control flow

def _piecewise(x):
    return df.cond(df.reduce_sum(x) > 0.0, lambda: df.square(x), lambda: -x * 3.0)


def test_cond_with_a_batched_predicate_selects_per_example():
    x = rng.normal(size=(8, 3))
    want = _loop(_piecewise, x)
    assert (x.sum(1) > 0).any() and (x.sum(1) <= 0).any()
    _close(df.vmap(_piecewise)(x), want)
    _close(df.defun(df.vmap(_piecewise))(x), want)


def test_cond_with_a_shared_predicate_stays_one_cond():
    x = rng.normal(size=(5, 3))
    f = lambda x, flag: df.cond(flag, lambda: x * 2.0, lambda: x - 1.0)    # noqa: E731
    for flag in (True, False):
        _close(df.vmap(f, in_axes=(0, None))(x, np.array(flag)), _loop(f, x, np.array(flag), in_axes=(0, None)))
    g = df.defun(df.vmap(f, in_axes=(0, None)))
    _close(g(x, np.array(False)), x - 1.0)
    graph = g.get_concrete_function(x, np.array(False)).graph
    assert [n.type for n in graph.nodes].count("cond") == 1


def _collatz_steps(n):
    """Iterations of x -> x/2 or 3x+1 until 1: a per-example trip count."""
    def body(i, x):
        odd = df.equal(df.mod(x, 2.0), 1.0)
        return i + 1.0, df.where(odd, 3.0 * x + 1.0, x / 2.0)
    return df.while_loop(lambda i, x: x > 1.0, body, (df.zeros_like(n), n))[0]


def test_while_loop_runs_until_every_example_is_done():
    n = np.array([1.0, 6.0, 7.0, 27.0, 2.0])
    want = _loop(_collatz_steps, n)
    np.testing.assert_array_equal(want, [0, 8, 16, 111, 1])
    _close(df.vmap(_collatz_steps)(n), want)
    _close(df.defun(df.vmap(_collatz_steps))(n), want)


def test_while_loop_with_a_shared_count_and_batched_state():
    x = rng.normal(size=(4, 3))
    f = lambda x: df.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, df.sin(y) + y), (0, x))[1]  # noqa: E731
    _close(df.vmap(f)(x), _loop(f, x))


# ---------------------------------------------------------------------------------------
# composition: nested, defun inside, variables, tapes, gradient functions

def test_nested_vmap_is_a_double_loop():
    x = rng.normal(size=(3, 4, 5))
    w = rng.normal(size=(5,))
    f = lambda row, w: df.reduce_sum(df.exp(row) * w)     # noqa: E731
    got = df.vmap(df.vmap(f, in_axes=(0, None)), in_axes=(0, None))(x, w)
    _close(got, np.exp(x) @ w)


def test_a_defun_inside_and_outside():
    inner = df.defun(lambda x: df.reduce_mean(df.tanh(x), axis=0))
    x = rng.normal(size=(6, 4, 3))
    want = np.tanh(x).mean(axis=1)
    _close(df.vmap(inner)(x), want)
    outer = df.defun(df.vmap(inner))
    _close(outer(x), want)


def test_variables_are_read_unbatched_and_cannot_be_assigned():
    v = df.Variable(rng.normal(size=(3,)))
    x = rng.normal(size=(4, 3))
    _close(df.vmap(lambda x: x * v)(x), x * v.numpy())
    _close(df.vmap(lambda x, v: x * v, in_axes=(0, None))(x, v), x * v.numpy())
    # in a defun: read by handle at each call, and differentiable with respect to it
    f = df.defun(lambda x: df.reduce_sum(df.vmap(lambda r: df.reduce_sum(r * v))(x)))
    with df.GradientTape() as tape:
        y = f(x)
    _close(y, np.sum(x * v.numpy()))
    _close(tape.gradient(y, v), x.sum(axis=0))
    v.assign(v.numpy() * 2.0)
    _close(f(x), np.sum(x * v.numpy()))
    with pytest.raises(errors.InvalidArgumentError, match="assign_add_variable assigns a variable"):
        df.vmap(lambda x: v.assign_add(x))(x)
    with pytest.raises(errors.InvalidArgumentError, match="shared by every example"):
        df.vmap(lambda v: v * 2.0)(v)


@pytest.mark.parametrize("dtype", [f16, f32, f64], ids=lambda d: d.name)
def test_gradient_of_a_vmapped_function_matches_finite_differences(dtype):
    """A tape outside vmap: d/dw sum_i f(x_i, w), batched ops recorded like any others."""
    x = rng.normal(size=(5, 3))
    w0 = rng.normal(size=(3,))

    def total(w):
        y = df.vmap(lambda x, w: df.reduce_sum(df.sin(x * w)) * df.reduce_max(x + w), in_axes=(0, None))(
            df.cast(x, dtype), w)
        return df.reduce_sum(y)
    w = df.constant(w0.astype(dtype.np))
    with df.GradientTape() as tape:
        tape.watch(w)
        y = total(w)
    g = tape.gradient(y, w).numpy().astype(np.float64)
    # central differences in float64 (the function's own dtype rounds too coarsely for them)
    eps = 1e-6
    x64 = df.constant(x)
    exact = lambda w: df.reduce_sum(df.vmap(        # noqa: E731
        lambda x, w: df.reduce_sum(df.sin(x * w)) * df.reduce_max(x + w), in_axes=(0, None))(x64, df.constant(w)))
    fd = [(exact(w0 + eps * e).numpy() - exact(w0 - eps * e).numpy()) / (2 * eps) for e in np.eye(3)]
    if dtype is not f64:      # the inputs as the low-precision run saw them
        x64 = df.constant(x.astype(dtype.np).astype(np.float64))
        w0 = w0.astype(dtype.np).astype(np.float64)
        fd = [(exact(w0 + eps * e).numpy() - exact(w0 - eps * e).numpy()) / (2 * eps) for e in np.eye(3)]
    tol = {f16: 5e-2, f32: 1e-4, f64: 1e-6}[dtype]
    np.testing.assert_allclose(g, fd, rtol=tol, atol=tol)


def test_per_example_gradients_of_an_mlp():
    params = _mlp()
    x = rng.normal(size=(7, 4))
    y = rng.integers(0, 3, size=7).astype(np.int32)

    def loss(w1, b1, w2, b2, x, y):
        h = df.tanh(df.matmul(df.reshape(x, (1, -1)), w1) + b1)
        logits = df.reshape(df.matmul(h, w2) + b2, (-1,))
        return -df.gather(df.log_softmax(logits), y)
    grad = df.gradients_function(loss, params=[0, 1, 2, 3])
    got = df.vmap(grad, in_axes=(None,) * 4 + (0, 0))(*params, x, y)
    want = _loop(grad, *params, x, y, in_axes=(None,) * 4 + (0, 0))
    for g, w in zip(got, want):
        _close(g, w)
    # each example's gradient by central differences, for one entry of w1
    eps = 1e-6
    for i in range(2):
        def f(d):
            p = [q.copy() for q in params]
            p[0][1, 2] += d
            return loss(*[df.constant(q) for q in p], df.constant(x[i]), df.constant(y[i])).numpy()
        np.testing.assert_allclose(got[0].numpy()[i, 1, 2], (f(eps) - f(-eps)) / (2 * eps), rtol=1e-6, atol=1e-8)
    # in a defun: the same values, one graph
    _close(df.defun(df.vmap(grad, in_axes=(None,) * 4 + (0, 0)))(*params, x, y)[2], want[2])


# ---------------------------------------------------------------------------------------
# against jax.vmap

jax = pytest.importorskip("jax") if importlib.util.find_spec("jax") else None


@pytest.mark.skipif(jax is None, reason="jax is the reference here (the test extra installs it)")
def test_against_jax_vmap():
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    x = rng.normal(size=(6, 4))
    m = rng.normal(size=(4, 4))

    def ours(x, m):
        y = df.matmul(df.reshape(x, (1, 4)), m)
        return df.reduce_logsumexp(df.concat([y, df.reshape(df.cumsum(x), (1, 4))], axis=0), axis=0)

    def theirs(x, m):
        y = x[None] @ m
        return jax.scipy.special.logsumexp(jnp.concatenate([y, jnp.cumsum(x)[None]], axis=0), axis=0)
    _close(df.vmap(ours, in_axes=(0, None))(x, m), np.asarray(jax.vmap(theirs, in_axes=(0, None))(x, m)))

    def loss(w, x):
        return df.reduce_sum(df.square(df.tanh(df.matmul(df.reshape(x, (1, 4)), w))))

    def jloss(w, x):
        return jnp.sum(jnp.tanh(x[None] @ w) ** 2)
    ours_g = df.vmap(df.gradients_function(loss, params=[0]), in_axes=(None, 0))(m, x)[0]
    _close(ours_g, np.asarray(jax.vmap(jax.grad(jloss), in_axes=(None, 0))(m, x)))
    nested = df.vmap(df.vmap(lambda a, b: df.reduce_sum(a * b), in_axes=(0, None)), in_axes=(None, 0))(x, m)
    jnested = jax.vmap(jax.vmap(lambda a, b: jnp.sum(a * b), in_axes=(0, None)), in_axes=(None, 0))(x, m)
    _close(nested, np.asarray(jnested))


# ---------------------------------------------------------------------------------------
# errors: no rule, the fallback, its warning

def test_an_op_without_a_rule_is_named_with_the_line():
    data = rng.normal(size=(3, 4))
    ids = np.array([[0, 0, 1, 2]] * 3, np.int32)
    f = lambda d, i: df.math.segment_sum(d, i) if hasattr(df, "math") else df.segment_sum(d, i)  # noqa: E731
    with pytest.raises(errors.UnimplementedError) as e:
        df.vmap(f)(data, ids)
    assert "segment_sum" in str(e.value) and "test_vmap.py" in str(e.value)
    assert "data-dependent" in str(e.value)


def test_fallback_loops_and_warns_by_op_and_line():
    data = rng.normal(size=(3, 4))
    ids = np.array([[0, 0, 1, 2], [0, 1, 1, 2], [0, 1, 2, 2]], np.int32)

    def f(e):
        return df.segment_sum(e[0], e[1]) * 2.0
    with pytest.warns(df.VectorizationFallbackWarning, match=r"segment_sum at .*test_vmap.py:\d+"):
        got = df.vectorized_map(f, (data, ids), fallback_to_while_loop=True)
    _close(got, _loop(lambda d, i: f((d, i)), data, ids))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(errors.UnimplementedError, match="segment_sum"):
            df.vectorized_map(f, (data, ids))


# ---------------------------------------------------------------------------------------
# a vmapped defun is an ordinary graph: exports

def _batched_predict(dtype=np.float64):
    w = rng.normal(size=(4, 3)).astype(dtype)

    def predict(x):
        return df.softmax(df.reshape(df.matmul(df.reshape(x, (1, 4)), w), (-1,)))
    return df.defun(df.vmap(predict)), w


def test_vmapped_defun_is_one_node_per_op_and_exports(tmp_path):
    f, w = _batched_predict()
    x = rng.normal(size=(5, 4))
    want = _loop(lambda x: df.softmax(df.reshape(df.matmul(df.reshape(x, (1, 4)), w), (-1,))), x)
    cf = f.get_concrete_function(df.TensorSpec([5, 4], f64))
    types_ = [n.type for n in cf.graph.nodes if n.type not in ("placeholder", "const")]
    assert types_.count("matmul") == 1 and types_.count("softmax") == 1 and set(types_) <= {
        "reshape", "matmul", "softmax"}, types_
    big = f.get_concrete_function(df.TensorSpec([50, 4], f64)).graph     # the batch size adds nothing
    assert [n.type for n in big.nodes if n.type not in ("placeholder", "const")] == types_
    _close(cf(x), want)
    loaded = df.load_json(df.export_json(cf))
    _close(loaded(x), want)
    src = df.export_numpy_source(cf)
    mod = types.ModuleType("vmapped_predict")
    exec(compile(src, "vmapped_predict.py", "exec"), mod.__dict__)
    _close(mod.forward(x)[0], want)


def test_vmapped_defun_exports_to_onnx(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    f, w = _batched_predict(np.float32)
    x = rng.normal(size=(5, 4)).astype(np.float32)
    cf = f.get_concrete_function(df.TensorSpec([5, 4], f32))
    model = df.export_onnx(cf, str(tmp_path / "m.onnx"))
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"))
    name = sess.get_inputs()[0].name
    got = sess.run(None, {name: x})[0]
    np.testing.assert_allclose(got, cf(x).numpy(), rtol=1e-5, atol=1e-6)
    assert model is not None


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_rule_cases(ta, tb):
    """The rule's special forms (rows of a shared matrix, outer products) and the general one."""
    def shape(m, k, t):
        return (k, m) if t else (m, k)
    a1, b1 = rng.normal(size=(4,) + shape(3, 1, ta)), rng.normal(size=(4,) + shape(1, 5, tb))   # k = 1
    a2, b2 = rng.normal(size=(4, 2) + shape(3, 6, ta)), rng.normal(size=shape(6, 5, tb))        # shared b
    f = lambda a, b: df.matmul(a, b, transpose_a=ta, transpose_b=tb)      # noqa: E731
    for a, b, axes in ((a1, b1, (0, 0)), (a2, b2, (0, None)), (a2[:, 0], rng.normal(size=(4,) + shape(6, 5, tb)), (0, 0))):
        want = _loop(f, a, b, in_axes=axes)
        _close(df.vmap(f, in_axes=axes)(a, b), want)
        _close(df.defun(df.vmap(f, in_axes=axes))(a, b), want)


def test_per_example_gradients_of_a_cnn():
    """conv2d, its input and filter gradients and max pooling, batched with a shared filter."""
    w = rng.normal(size=(3, 3, 2, 4))
    w2 = rng.normal(size=(4, 3))
    x = rng.normal(size=(5, 1, 6, 6, 2))           # each example is one NHWC image
    y = rng.integers(0, 3, size=5).astype(np.int32)

    def loss(w, w2, x, y):
        h = df.relu(df.conv2d(x, w, strides=1, padding="SAME"))
        h = df.max_pool2d(h, ksize=2, strides=2, padding="VALID")
        logits = df.matmul(df.reduce_mean(h, axis=[1, 2]), w2)
        return df.sparse_softmax_cross_entropy_with_logits(labels=df.reshape(y, (1,)), logits=logits)
    grad = df.gradients_function(loss, params=[0, 1])
    got = df.vmap(grad, in_axes=(None, None, 0, 0))(w, w2, x, y)
    want = _loop(grad, w, w2, x, y, in_axes=(None, None, 0, 0))
    for g, e in zip(got, want):
        _close(g, e, 1e-9)
    # strides 2 with VALID padding: the filter gradient's windows step over the input
    f = lambda w, x: df.reduce_sum(df.sin(df.conv2d(x, w, strides=2, padding="VALID")))   # noqa: E731
    g2 = df.gradients_function(f, params=[0])
    _close(df.vmap(g2, in_axes=(None, 0))(w, x)[0], _loop(lambda w, x: g2(w, x)[0], w, x, in_axes=(None, 0)))


@pytest.mark.parametrize("mode", ["eager", "defun"])
def test_tape_through_batched_cond_and_while(mode):
    """d/dx of the batched result == each example's own derivative (eagerly the masked loop
    is a Python loop of batched ops on the tape; in a defun one while node)."""
    x0 = np.array([-0.5, 2.0, 0.5, 3.0])
    wrap = df.defun if mode == "defun" else (lambda h: h)

    def branchy(x):
        return df.cond(x > 0.0, lambda: df.square(x), lambda: -x * 3.0)

    def loopy(x):
        return df.while_loop(lambda i, y: y < 10.0, lambda i, y: (i + 1, y * 2.0 + 1.0), (0, x))[1]
    for fn in (branchy, loopy):
        x = df.constant(x0)
        with df.GradientTape() as tape:
            tape.watch(x)
            y = df.reduce_sum(wrap(df.vmap(fn))(x))
        want = []
        for v in x0:
            xv = df.constant(v)
            with df.GradientTape() as t2:
                t2.watch(xv)
                out = fn(xv)
            want.append(t2.gradient(out, xv).numpy())
        _close(tape.gradient(y, x), np.array(want))


def test_an_unknown_batch_size_in_a_defun_works_and_a_per_example_loop_is_named():
    f = df.defun(df.vmap(lambda x: x * 2.0), input_signature=[df.TensorSpec([None, 3], f32)])
    for b in (0, 1, 2):
        _close(f(np.ones((b, 3), np.float32)), np.full((b, 3), 2.0, np.float32))
    # the fallback runs an op once per example: one scan node over the examples as they come
    conv = lambda e: df.conv2d(e[0], e[1], strides=1, padding="SAME")      # noqa: E731
    g = df.defun(lambda x, w: df.vectorized_map(conv, (x, w), fallback_to_while_loop=True),
                 input_signature=[df.TensorSpec([None, 1, 5, 5, 2], f64), df.TensorSpec([None, 3, 3, 2, 4], f64)])
    x, w = rng.normal(size=(3, 1, 5, 5, 2)), rng.normal(size=(3, 3, 3, 2, 4))
    with pytest.warns(df.VectorizationFallbackWarning, match="conv2d .*ran once per example, as"):
        _close(g(x, w), _loop(lambda a, b: conv((a, b)), x, w))
    for b in (0, 1):
        _close(g(x[:b], w[:b]), np.zeros((0, 1, 5, 5, 4)) if not b else _loop(lambda a, b: conv((a, b)), x[:1], w[:1]))
    assert g.trace_count == 1


def test_a_case_a_rule_declines_falls_back_with_a_warning():
    """A filter per example: conv2d's rule declines it; the fallback runs it per example."""
    x = rng.normal(size=(3, 1, 5, 5, 2))
    w = rng.normal(size=(3, 3, 3, 2, 4))
    f = lambda e: df.conv2d(e[0], e[1], strides=1, padding="SAME")      # noqa: E731
    with pytest.raises(errors.UnimplementedError, match="conv2d"):
        df.vectorized_map(f, (x, w))
    with pytest.warns(df.VectorizationFallbackWarning, match="conv2d .*rule does not cover"):
        got = df.vectorized_map(f, (x, w), fallback_to_while_loop=True)
    _close(got, _loop(lambda a, b: f((a, b)), x, w))


def test_per_example_gradients_of_an_embedding_lookup_are_dense():
    """A gather's gradient is IndexedSlices per example; batched, each example's is dense."""
    table_ = rng.normal(size=(5, 3))
    ids = np.array([0, 2, 2, 4])

    def f(t, i):
        return df.reduce_sum(df.square(df.gather(t, i)))
    g = df.gradients_function(f, params=[0])
    got = df.vmap(g, in_axes=(None, 0))(table_, ids)[0]
    want = np.zeros((4, 5, 3))
    for k, i in enumerate(ids):
        want[k, i] = 2 * table_[i]
    _close(got, want)
    _close(df.defun(df.vmap(g, in_axes=(None, 0)))(table_, ids)[0], want)


def test_scan_foldl_and_map_fn_batch_per_example():
    """The scan node walks rows of whole batches; its gradient (another scan) batches too."""
    x = rng.normal(size=(4, 5, 3))
    h0 = rng.normal(size=(3,))
    w = rng.normal(size=(3, 3))

    def rnn(xs, h0):
        return df.scan(lambda h, r: df.tanh(df.reshape(df.matmul(df.reshape(h, (1, 3)), w), (3,)) + r),
                       xs, initializer=h0)
    want = _loop(rnn, x, h0, in_axes=(0, None))
    _close(df.vmap(rnn, in_axes=(0, None))(x, h0), want)
    _close(df.defun(df.vmap(rnn, in_axes=(0, None)))(x, h0), want)
    loss = lambda h0, xs: df.reduce_sum(rnn(xs, h0)[-1])      # noqa: E731
    g = df.gradients_function(loss, params=[0])
    _close(df.vmap(g, in_axes=(None, 0))(h0, x)[0], _loop(lambda h, xs: g(h, xs)[0], h0, x, in_axes=(None, 0)))
    fold = lambda xs: df.foldl(lambda a, r: a + df.reduce_sum(r), xs, initializer=np.float64(0.0))  # noqa: E731
    _close(df.vmap(fold)(x), x.sum(axis=(1, 2)))
    _close(df.vmap(lambda xs: df.map_fn(df.reduce_max, xs))(x), x.max(axis=2))


def test_an_op_without_a_rule_inside_a_branch_is_named_once():
    data = rng.normal(size=(3, 4))
    ids = np.array([[0, 0, 1, 2]] * 3, np.int32)

    def f(d, i):
        return df.cond(df.reduce_sum(d) > 0.0, lambda: df.segment_sum(d, i), lambda: df.segment_sum(-d, i))
    with pytest.raises(errors.UnimplementedError) as e:
        df.vmap(f)(data, ids)
    assert str(e.value).count("vmap:") == 1 and "segment_sum" in str(e.value), str(e.value)


def test_complex_ops_and_the_fft_batch_per_example():
    re_, im_ = rng.normal(size=(4, 6)), rng.normal(size=(4, 6))

    def f(a, b):
        z = df.complex(a, b)
        spec = df.signal.fft(z * df.conj(z) + z)
        return df.abs(spec), df.angle(spec), df.real(df.signal.ifft(spec)), df.imag(z), \
            df.signal.irfft(df.signal.rfft(a), fft_length=[6])
    want = _loop(f, re_, im_)
    for got in (df.vmap(f)(re_, im_), df.defun(df.vmap(f))(re_, im_)):
        for g, w in zip(got, want):
            _close(g, w, 1e-9)
    # a real loss through the transforms: per-example gradients
    loss = lambda a: df.reduce_sum(df.abs(df.signal.rfft(df.sin(a))))     # noqa: E731
    grad = df.gradients_function(loss)
    _close(df.vmap(grad)(re_)[0], _loop(lambda a: grad(a)[0], re_), 1e-9)
