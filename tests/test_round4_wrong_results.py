"""Silent wrong results of issue 28 (round 4), each checked against an outside reference's
numbers: torch or jax computed here where installed, exact integer arithmetic, finite
differences, and the literal numbers the reference gives in comments and messages."""
import json

import numpy as np
import pytest

import defun as df
from defun_helpers import nested_gradients

torch = pytest.importorskip("torch")


def _tape_grads(fn, xs, sources=()):
    """The gradients of `fn(*xs)` (a real scalar) w.r.t. every x, then every source."""
    ts = [df.constant(x) for x in xs]
    with df.GradientTape() as tape:
        tape.watch(ts)
        out = fn(*ts)
    return [None if g is None else g.numpy() for g in tape.gradient(out, ts + list(sources))]


def _loaded(fn, xs):
    """`fn` traced for `xs`, exported with its backward and loaded back."""
    sig = [df.TensorSpec(np.shape(x), df.as_dtype(np.asarray(x).dtype)) for x in xs]
    traced = df.defun(fn, input_signature=sig)
    doc = json.loads(json.dumps(df.export_json(traced.get_concrete_function(), include_backward=True)))
    return df.load_json(doc)


# ---------------------------------------------------------------------------------------
# Item 2: gradients through scan / map_fn / foldl over complex values inside a defun
# (None, or the part through the carries only, before; eager, torch and TF agree).

_Z = np.array([1 + 2j, 3 - 1j, 0.5 + 0.5j])


def _scan_loss(x):
    ys = df.scan(lambda a, e: a * e + e, x, initializer=df.ones([], x.dtype))
    return df.reduce_sum(df.real(ys * df.conj(ys)))


def _map_loss(x):
    ys = df.map_fn(lambda e: e * e, x)
    return df.reduce_sum(df.real(ys * df.conj(ys)))


def _foldl_loss(x):
    y = df.foldl(lambda a, e: a * e, x, initializer=df.ones([], x.dtype))
    return df.real(y * df.conj(y))


def _torch_loop(x, kind):
    if kind == "map":
        ys = x * x
        return (ys * ys.conj()).real.sum()
    a, ys = torch.ones((), dtype=x.dtype), []
    for e in x:
        a = a * e + e if kind == "scan" else a * e
        ys.append(a)
    ys = torch.stack(ys) if kind == "scan" else a
    return (ys * ys.conj()).real.sum()


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("kind,fn", [("scan", _scan_loss), ("map", _map_loss), ("foldl", _foldl_loss)])
def test_complex_loop_gradients_in_a_defun_match_torch(kind, fn, dtype):
    # torch, complex128: scan [194+258j, 228-79j, 277+277j], map_fn [20+40j, 120-40j, 1+1j],
    # foldl [10+20j, 15-5j, 50+50j] (TF's tape gives the same); the defun gave None.
    x = _Z.astype(dtype)
    t = torch.tensor(x, requires_grad=True)
    _torch_loop(t, kind).backward()
    want = t.grad.numpy()
    tol = dict(rtol=1e-5) if dtype == np.complex64 else dict(rtol=1e-12)
    for name, f in (("eager", fn), ("defun", df.defun(fn)), ("loaded", _loaded(fn, [x]))):
        (got,) = _tape_grads(f, [x])
        assert got is not None, f"{kind} {name}: no gradient (torch: {want})"
        np.testing.assert_allclose(got, want, **tol, err_msg=f"{kind} {name}")


def test_complex_rows_into_a_real_carry_and_a_captured_complex_variable_in_a_defun():
    # torch: d/dx [8.75+17.5j, 18.75-6.25j, 1.875+1.875j], d/dw 62.625-86.5j; the defun gave
    # [7.5+15j, 15-5j, 1.25+1.25j] and 54.875-71j (the real carry's part through the rows lost).
    x = _Z.astype(np.complex64)
    w = df.Variable(np.complex64(0.5 - 1j))

    def f(x):
        acc = df.scan(lambda a, e: a + df.real(e * w * df.conj(e * w)), x,
                      initializer=df.zeros([], df.float32))
        ys = df.map_fn(lambda e: e * w, x)
        return df.reduce_sum(acc) + df.reduce_sum(df.real(ys * df.conj(ys) * w))
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(np.complex64(0.5 - 1j), requires_grad=True)
    ys = xt * wt
    (torch.cumsum((ys * ys.conj()).real, 0).sum() + (ys * ys.conj() * wt).real.sum()).backward()
    for name, fn in (("eager", f), ("defun", df.defun(f))):
        gx, gw = _tape_grads(fn, [x], [w])
        np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(gw, wt.grad.numpy(), rtol=1e-5, err_msg=name)


def test_complex_scan_forward_mode_and_second_order_in_a_defun():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    v = np.array([0.5 - 1j, 1j, 2.0])
    with jax.enable_x64(True):
        step = lambda a, e: (a * e + e, a * e + e)    # noqa: E731
        jvp = np.asarray(jax.jvp(lambda x: jax.lax.scan(step, jnp.complex128(1), x)[1], (_Z,), (v,))[1])
    # jax: [1-2j, -3-4j, 28.5+14.5j]

    def ys(x):
        return df.scan(lambda a, e: a * e + e, x, initializer=df.ones([], x.dtype))
    x = df.constant(_Z)
    for name, fn in (("eager", ys), ("defun", df.defun(ys))):
        with df.ForwardAccumulator(x, df.constant(v)) as acc:
            out = fn(x)
        np.testing.assert_allclose(acc.jvp(out).numpy(), jvp, rtol=1e-12, err_msg=name)
    # the gradient of <Re(grad), v>: torch's double backward gives [364+506j, 511-259j, 1396+288j]
    xt = torch.tensor(_Z, requires_grad=True)
    (g,) = torch.autograd.grad(_torch_loop(xt, "scan"), xt, create_graph=True)
    (g * torch.tensor(v)).real.sum().backward()
    for name, fn in (("eager", _scan_loss), ("defun", df.defun(_scan_loss))):
        _, second = nested_gradients(fn, x, combine=lambda g: df.reduce_sum(df.real(g * df.constant(v))))
        np.testing.assert_allclose(second.numpy(), xt.grad.numpy(), rtol=1e-12, err_msg=name)


# ---------------------------------------------------------------------------------------
# Item 5: the integer mean, exact (Python integers) and truncated toward zero as TF's; the
# uint64 sum went through int64 and came back negated.

def _exact_mean(x, axis, keepdims):
    s = np.sum(np.asarray(x, dtype=object), axis=axis, keepdims=keepdims)
    n = max(np.size(x) // max(np.size(s), 1), 1)
    trunc = np.vectorize(lambda v: abs(v) // n * (1 if v >= 0 else -1), otypes=[object])
    return trunc(s)


def test_uint64_mean_past_2_to_63_is_exact():
    # TF and exact: 4611686018427387908 (= (2**63 + 8) // 2); it was 13835058055282163716
    x = np.array([2**63 + 8, 0], np.uint64)
    fn = df.defun(lambda x: df.reduce_mean(x), input_signature=[df.TensorSpec((2,), df.uint64)])
    doc = json.loads(json.dumps(df.export_json(fn.get_concrete_function())))
    for name, f in (("eager", df.reduce_mean), ("defun", fn), ("loaded", df.load_json(doc))):
        got = f(x).numpy()
        assert got.dtype == np.uint64 and int(got) == 4611686018427387908, (name, got)
    ns = {}
    exec(df.export_numpy_source(fn.get_concrete_function()), ns)     # noqa: S102 (our own export)
    assert int(ns["forward"](x)[0]) == 4611686018427387908


_INT_TYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@pytest.mark.parametrize("dtype", _INT_TYPES)
def test_integer_means_at_the_ends_of_every_integer_type_are_exact(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(int(info.bits) + int(info.min < 0))
    picks = np.array([info.min, info.max, info.min + 1, info.max - 1, 0, 1], dtype=object)
    for trial in range(60):
        shape = tuple(rng.integers(1, 5, size=2))
        x = np.array(rng.choice(picks, size=shape), dtype=dtype)
        axis = [None, 0, 1, -1, (0, 1)][trial % 5]
        keepdims = bool(trial % 2)
        got = df.reduce_mean(x, axis=axis, keepdims=keepdims).numpy()
        want = _exact_mean(x, axis, keepdims)
        assert got.dtype == dtype and got.shape == np.shape(want), (x, axis, got)
        assert (np.asarray(got).astype(object) == want).all(), (x, axis, keepdims, got, want)
    # -2**63 + (-1) + 5 over 3: exact -3074457345618258601 (truncated toward zero)
    if dtype == np.int64:
        assert int(df.reduce_mean(np.array([-2**63, -1, 5], np.int64)).numpy()) == -3074457345618258601


def test_int64_sums_and_means_exported_to_onnx_are_exact():
    ort = pytest.importorskip("onnxruntime")
    # onnxruntime's ReduceSum sums int64 in double: 2**60 + 1 + 3 gave 2**60 (exact:
    # 1152921504606846980), and the int64 mean of [-2**63, -1, 5] -3074457345618258432
    # (exact: -3074457345618258601)
    cases = [(np.array([2**60 + 1, 3], np.int64), None), (np.array([-2**63, -1, 5], np.int64), None),
             (np.array([[2**60 + 1, 3, -5], [2**61, 2**61, 7]], np.int64), 0),
             (np.array([[2**60 + 1, 3, -5], [2**61, 2**61, 7]], np.int64), 1),
             (np.array([[-2**63, -2**63, -2**63]], np.int64), 1), (np.zeros((0, 3), np.int64), 0)]
    for x, axis in cases:
        for fn in (df.reduce_sum, df.reduce_mean):
            for sig in (x.shape, (None,) * x.ndim):
                f = df.defun(lambda x: fn(x, axis=axis), input_signature=[df.TensorSpec(sig, df.int64)])
                model = df.export_onnx(f.get_concrete_function())
                sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
                got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
                exact = (np.sum(x.astype(object), axis=axis) if fn is df.reduce_sum
                         else _exact_mean(x, axis, False))
                exact = (exact + 2**63) % 2**64 - 2**63       # an int64 sum wraps, as numpy's
                assert (np.asarray(got).astype(object) == exact).all(), (fn, x, axis, sig, got, exact)


# ---------------------------------------------------------------------------------------
# Item 7: mod is differentiable (d/dx = 1, d/dy = -floor(x / y), as TF and jax); it gave None
# in reverse and forward mode.

_MX = np.array([5.5, -5.5, 7.25, -0.75, 3.0])
_MY = np.array([2.0, 2.0, -3.0, 0.5, -1.25])


def _finite_difference_mod(x, y, h=1e-6):
    """Central differences of sum(x mod y) in float64 (no point is within h of a jump)."""
    gx = (np.mod(x + h, y) - np.mod(x - h, y)) / (2 * h)
    gy = (np.mod(x, y + h) - np.mod(x, y - h)) / (2 * h)
    return gx, gy


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_mod_gradients_match_torch_jax_and_finite_differences(dtype):
    # torch.remainder and jax.grad(jnp.mod): d/dx [1, 1, 1, 1, 1], d/dy [-2, 3, 3, 2, 3]
    xt, yt = torch.tensor(_MX, requires_grad=True), torch.tensor(_MY, requires_grad=True)
    torch.remainder(xt, yt).sum().backward()
    fd = _finite_difference_mod(_MX, _MY)
    np.testing.assert_allclose(fd[0], xt.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(fd[1], yt.grad.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(yt.grad.numpy(), [-2, 3, 3, 2, 3])
    x, y = _MX.astype(dtype), _MY.astype(dtype)

    def f(x, y):
        return df.reduce_sum(df.mod(x, y))
    for name, fn in (("eager", f), ("defun", df.defun(f)), ("loaded", _loaded(f, [x, y]))):
        gx, gy = _tape_grads(fn, [x, y])
        assert gx is not None and gy is not None, f"{name}: mod has no gradient"
        assert gx.dtype == dtype and gy.dtype == dtype, name
        np.testing.assert_array_equal(gx, xt.grad.numpy().astype(dtype), err_msg=name)
        np.testing.assert_array_equal(gy, yt.grad.numpy().astype(dtype), err_msg=name)
    for name, fn in (("eager", df.mod), ("defun", df.defun(df.mod))):
        xs, ys = df.constant(x), df.constant(y)
        for k, want in enumerate((xt.grad.numpy(), yt.grad.numpy())):
            tangents = [df.ones_like(xs) if k == 0 else df.zeros_like(xs),
                        df.ones_like(ys) if k == 1 else df.zeros_like(ys)]
            with df.ForwardAccumulator([xs, ys], tangents) as acc:
                out = fn(xs, ys)
            jvp = acc.jvp(out)
            assert jvp is not None, f"{name}: mod has no forward-mode derivative"
            np.testing.assert_array_equal(jvp.numpy(), want.astype(dtype), err_msg=f"{name} fwd {k}")


def test_mod_gradient_broadcasts_and_matches_jax():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = np.array([[5.5, -5.5, 7.25], [1.0, -2.5, 0.75]], np.float32)
    y = np.float32(-1.5)
    gx_j, gy_j = jax.grad(lambda a, b: jnp.sum(jnp.mod(a, b) * a), (0, 1))(x, y)
    # jax: d/dy = sum of -floor(x / y) * x = 79 here
    gx, gy = _tape_grads(lambda a, b: df.reduce_sum(df.mod(a, b) * a), [x, y])
    np.testing.assert_allclose(gx, np.asarray(gx_j), rtol=1e-6)
    np.testing.assert_allclose(gy, np.asarray(gy_j), rtol=1e-6)
    assert gy.shape == () and float(gy) == 79.0


# ---------------------------------------------------------------------------------------
# Item 10: reduce_prod's second derivative on complex input (the product of the others'
# gradient missed a conj: [-9.7185-3.9095j, -10.86+2.46j, 15.1+1.85j]).

_PZ = np.array([1 + 2j, 0.5 - 1j, -1 + 0.3j])
_PV = np.array([0.3 + 0.1j, -0.2 + 0.5j, 1.0 - 0.4j])


def _prod_hvp(fn, z, v):
    """The gradient of Re<grad |prod z|^2, v> (TF's convention for complex gradients)."""
    def squared_modulus(x):
        p = fn(x)
        return df.reduce_sum(df.real(p * df.conj(p)))
    _, second = nested_gradients(squared_modulus, df.constant(z),
                                 combine=lambda g: df.reduce_sum(df.real(g * df.conj(df.constant(v)))))
    return second.numpy()


def _central(fn, z, h):
    """d fn / d re z_k + i d fn / d im z_k per k, by central differences of step h."""
    def d(e):
        return (fn(z + h * e) - fn(z - h * e)) / (2 * h)
    return np.array([d(e) + 1j * d(1j * e) for e in np.eye(len(z))])


def _prod_hvp_finite_differences(z, v):
    def s(w):       # <the gradient of |prod w|^2, v>, the gradient itself by differences
        return np.sum(np.real(_central(lambda u: abs(np.prod(u)) ** 2, w, 1e-6) * np.conj(v)))
    return _central(s, z, 1e-4)


def test_complex_reduce_prod_second_derivative_matches_jax_and_finite_differences():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    with jax.enable_x64(True):
        def loss(a, b):
            p = jnp.prod(a + 1j * b)
            return jnp.real(p * jnp.conj(p))

        def s(a, b):
            ga, gb = jax.grad(loss, (0, 1))(a, b)
            return jnp.sum(jnp.real((ga + 1j * gb) * jnp.conj(_PV)))
        ha, hb = jax.grad(s, (0, 1))(jnp.asarray(_PZ.real), jnp.asarray(_PZ.imag))
        want = np.asarray(ha) + 1j * np.asarray(hb)
    # jax: [-7.3985-16.1595j, -12.29+25.67j, 22-7.85j]
    np.testing.assert_allclose(want, [-7.3985 - 16.1595j, -12.29 + 25.67j, 22 - 7.85j], atol=1e-9)
    np.testing.assert_allclose(_prod_hvp_finite_differences(_PZ, _PV), want, atol=1e-4)
    for name, fn in (("eager", df.reduce_prod), ("defun", df.defun(df.reduce_prod))):
        np.testing.assert_allclose(_prod_hvp(fn, _PZ, _PV), want, rtol=1e-12, err_msg=name)
    # along an axis, with a zero in a row (the products of the others divide by nothing)
    z = np.array([[1 + 2j, 0, -1 + 0.3j], [0.5 - 1j, 2j, 1.5]])
    v = np.array([[0.3 + 0.1j, -0.2 + 0.5j, 1.0 - 0.4j], [1j, 1, -1]])
    got = _prod_hvp(lambda x: df.reduce_prod(x, axis=1), z, v)
    fd = np.stack([_prod_hvp_finite_differences(z[r], v[r]) for r in range(2)])
    np.testing.assert_allclose(got, fd, atol=1e-4)
