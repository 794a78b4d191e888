"""Complex numbers (issue 22): dtypes and weak typing, the ops that take complex values
(values against numpy), TF's gradient convention (against torch, which uses it, against jax
conjugated, and against finite differences), ops that refuse complex, and every exit
(eager vs defun vs reloaded JSON, numpy source, ONNX refusing, the printed IR)."""
import numpy as np
import pytest
import torch

import defun as df
from isolated import run_without_defun
from defun_helpers import nested_gradients

IAE = df.errors.InvalidArgumentError
C64, C128 = df.complex64, df.complex128
_TOL = {C64: dict(rtol=2e-4, atol=2e-5), C128: dict(rtol=1e-9, atol=1e-11)}


def _z(shape, dtype, seed=0, lo=0.5):
    """Complex values with moduli in [lo, 2) (away from 0, where abs/log/angle are singular)."""
    rng = np.random.default_rng(seed)
    r = rng.uniform(lo, 2.0, size=shape)
    phi = rng.uniform(-3.0, 3.0, size=shape)
    return (r * np.exp(1j * phi)).astype(dtype.np)


# ---------------------------------------------------------------------------------------
# dtypes and conversion

def test_complex_dtypes_and_their_parts():
    assert df.complex64.is_complex and not df.complex64.is_floating and not df.complex64.is_integer
    assert df.complex64.real_dtype is df.float32 and df.complex128.real_dtype is df.float64
    assert df.float32.real_dtype is df.float32
    assert df.as_dtype("complex64") is C64 and df.as_dtype(np.complex128) is C128
    assert df.as_dtype(complex) is C128
    assert {"complex64", "complex128", "signal", "complex", "real", "imag", "conj", "angle"} <= set(dir(df))


def test_a_python_complex_alone_is_complex128_beside_a_tensor_takes_its_dtype():
    assert df.constant(1j).dtype is C128
    assert df.constant([1 + 2j, 3]).dtype is C128
    z = df.constant(np.array([1 + 1j], np.complex64))
    for y in (z * 2j, 2j * z, z + 1.5, z - 2, df.add(z, 3j)):
        assert y.dtype is C64
    np.testing.assert_allclose((z * 2j).numpy(), [-2 + 2j])
    assert df.constant([1.5, 2], C64).dtype is C64


def test_a_python_complex_beside_a_real_tensor_raises_naming_both():
    with pytest.raises(IAE) as info:
        df.constant([1.0]) * 1j
    assert "complex" in str(info.value) and "float32" in str(info.value)
    with pytest.raises(IAE, match="complex"):
        df.constant([1.0, 2.0]) + df.constant([1j, 1j])


def test_complex_builds_from_parts_and_refuses_float16():
    z = df.complex(df.constant([1.0, 2.0]), df.constant([3.0]))      # broadcasts
    assert z.dtype is C64
    np.testing.assert_array_equal(z.numpy(), [1 + 3j, 2 + 3j])
    assert df.complex(np.ones(2), np.zeros(2)).dtype is C128
    with pytest.raises(IAE, match="complex.*float16"):
        df.complex(np.ones(2, np.float16), np.ones(2, np.float16))
    with pytest.raises(IAE, match="complex"):
        df.complex(df.constant([1, 2]), df.constant([1, 2]))


def test_real_imag_conj_angle_of_real_inputs_as_tf():
    x = df.constant([-1.5, 2.0])
    assert df.real(x) is x and df.conj(x) is x
    np.testing.assert_array_equal(df.imag(x).numpy(), [0, 0])
    np.testing.assert_allclose(df.angle(x).numpy(), [np.pi, 0])


# ---------------------------------------------------------------------------------------
# Values: every complex-taking op against numpy, eagerly, traced and reloaded

def _ops():
    return {
        "add": (lambda a, b: a + b, np.add, 2),
        "subtract": (lambda a, b: a - b, np.subtract, 2),
        "multiply": (lambda a, b: a * b, np.multiply, 2),
        "divide": (lambda a, b: a / b, np.divide, 2),
        "pow": (lambda a, b: a ** b + a ** 2, lambda a, b: a ** b + a ** 2, 2),
        "negative": (lambda a: -a, np.negative, 1),
        "square": (df.square, np.square, 1),
        "sqrt": (df.sqrt, np.sqrt, 1),
        "exp": (df.exp, np.exp, 1),
        "log": (df.log, np.log, 1),
        "sin": (df.sin, np.sin, 1),
        "cos": (df.cos, np.cos, 1),
        "tanh": (df.tanh, np.tanh, 1),
        "abs": (df.abs, np.abs, 1),
        "real": (df.real, np.real, 1),
        "imag": (df.imag, np.imag, 1),
        "conj": (df.conj, np.conj, 1),
        "angle": (df.angle, np.angle, 1),
        "reduce_sum": (lambda a: df.reduce_sum(a, axis=0), lambda a: a.sum(0), 1),
        "reduce_mean": (lambda a: df.reduce_mean(a, axis=1), lambda a: a.mean(1), 1),
        "reduce_prod": (lambda a: df.reduce_prod(a, axis=1), lambda a: a.prod(1), 1),
        "matmul": (lambda a, b: a @ df.transpose(b), lambda a, b: a @ b.T, 2),
        "einsum": (lambda a, b: df.einsum("ij,kj->ik", a, b), lambda a, b: np.einsum("ij,kj->ik", a, b), 2),
        "add_n": (lambda a, b: df.add_n([a, b, a]), lambda a, b: a + b + a, 2),
        "cast": (lambda a: df.cast(df.real(a), a.dtype) + df.cast(df.cast(a, a.dtype.real_dtype), a.dtype),
                 lambda a: 2 * a.real.astype(a.dtype), 1),
    }


OPS = _ops()


@pytest.mark.parametrize("dtype", [C64, C128], ids=["c64", "c128"])
def test_values_eager_traced_and_reloaded_agree_with_numpy(dtype):
    a, b = _z((3, 4), dtype, 1), _z((3, 4), dtype, 2)
    for name, (fn, ref, arity) in OPS.items():
        args = (a, b)[:arity]
        want = ref(*args)
        eager = fn(*[df.constant(x) for x in args])
        assert eager.dtype.np == want.dtype, (name, eager.dtype, want.dtype)
        np.testing.assert_allclose(eager.numpy(), want, **_TOL[dtype], err_msg=name)
        f = df.defun(fn)
        cf = f.get_concrete_function(*[df.TensorSpec(x.shape, dtype) for x in args])
        np.testing.assert_array_equal(np.asarray(cf(*args)), eager.numpy(), err_msg=name)
        loaded = df.load_json(df.export_json(cf))
        np.testing.assert_array_equal(np.asarray(loaded(*args)), eager.numpy(), err_msg=name)


def test_linalg_takes_complex_matrices():
    a = _z((2, 3, 3), C128, 3) + 3 * np.eye(3)
    b = _z((2, 3, 2), C128, 4)
    np.testing.assert_allclose(df.linalg.solve(a, b).numpy(), np.linalg.solve(a, b), rtol=1e-10)
    np.testing.assert_allclose(df.linalg.solve(a, b, adjoint=True).numpy(),
                               np.linalg.solve(np.conj(a).swapaxes(-1, -2), b), rtol=1e-10)
    np.testing.assert_allclose(df.linalg.inv(a).numpy(), np.linalg.inv(a), rtol=1e-10)
    np.testing.assert_allclose(df.linalg.det(a).numpy(), np.linalg.det(a), rtol=1e-10)
    assert df.linalg.det(a.astype(np.complex64)).dtype is C64
    with pytest.raises(IAE, match="cholesky.*complex128"):
        df.linalg.cholesky(a)


# ---------------------------------------------------------------------------------------
# Gradients: TF's convention, 2 dL/d conj(z)

def test_abs_squared_at_3_plus_4j_is_6_plus_8j_and_jax_gives_the_conjugate():
    import jax
    z = df.constant(3 + 4j)
    with df.GradientTape() as tape:
        tape.watch(z)
        loss = df.abs(z) ** 2
    g = tape.gradient(loss, z)
    assert g.dtype is C128
    assert complex(g.numpy()) == pytest.approx(6 + 8j)
    assert complex(jax.grad(lambda v: jax.numpy.abs(v) ** 2)(3 + 4j)) == pytest.approx(6 - 8j)


class _Torch:
    """The df names the gradient cases use, in torch."""
    exp, log, sqrt, sin, cos, tanh, abs, real, imag, conj, angle = (
        torch.exp, torch.log, torch.sqrt, torch.sin, torch.cos, torch.tanh, torch.abs, torch.real,
        torch.imag, torch.conj, torch.angle)
    square = staticmethod(lambda x: x * x)
    complex = staticmethod(torch.complex)
    matmul = staticmethod(torch.matmul)
    einsum = staticmethod(torch.einsum)
    reduce_sum = staticmethod(lambda x, axis=None: x.sum() if axis is None else x.sum(axis))
    reduce_mean = staticmethod(lambda x, axis=None: x.mean() if axis is None else x.mean(axis))
    reduce_prod = staticmethod(lambda x, axis: x.prod(axis))
    transpose = staticmethod(lambda x: x.T)
    linalg = type("linalg", (), {"solve": staticmethod(torch.linalg.solve), "inv": staticmethod(torch.linalg.inv),
                                 "det": staticmethod(torch.linalg.det)})
    cast_real = staticmethod(lambda x: x.real)


class _Jax:
    """The same names in jax.numpy (float32/complex64: the process keeps jax's defaults)."""
    def __init__(self):
        import jax.numpy as jnp
        self.exp, self.log, self.sqrt, self.sin, self.cos, self.tanh, self.abs = (
            jnp.exp, jnp.log, jnp.sqrt, jnp.sin, jnp.cos, jnp.tanh, jnp.abs)
        self.real, self.imag, self.conj, self.angle = jnp.real, jnp.imag, jnp.conj, jnp.angle
        self.square = lambda x: x * x
        self.complex = lambda a, b: a + 1j * b
        self.matmul, self.einsum = jnp.matmul, jnp.einsum
        self.reduce_sum = lambda x, axis=None: jnp.sum(x, axis)
        self.reduce_mean = lambda x, axis=None: jnp.mean(x, axis)
        self.reduce_prod = lambda x, axis: jnp.prod(x, axis)
        self.transpose = lambda x: x.T
        self.linalg = type("linalg", (), {"solve": staticmethod(jnp.linalg.solve), "inv": staticmethod(jnp.linalg.inv),
                                          "det": staticmethod(jnp.linalg.det)})
        self.cast_real = jnp.real


class _Df:
    """df itself, with the one name torch spells differently."""
    def __getattr__(self, name):
        return getattr(df, name)
    cast_real = staticmethod(lambda x: df.cast(x, x.dtype.real_dtype))


# Real losses of complex inputs: (name, loss(M, *zs), number of complex inputs). Each is the
# sum of weighted real and imaginary parts (or a modulus) so every path of the rule counts.
def _parts(M, y, k=1.0):
    return M.reduce_sum(M.real(y) * 0.7 * k) + M.reduce_sum(M.imag(y) * -1.3)


GRAD_CASES = [
    ("multiply", lambda M, a, b: _parts(M, a * b), 2),
    ("divide", lambda M, a, b: _parts(M, a / b), 2),
    ("pow", lambda M, a, b: _parts(M, a ** b + a ** 2), 2),
    ("add_sub", lambda M, a, b: _parts(M, a + b - a * a), 2),
    ("square_sqrt", lambda M, a: _parts(M, M.square(a) + M.sqrt(a)), 1),
    ("exp_log", lambda M, a: _parts(M, M.exp(a) * M.log(a)), 1),
    ("trig", lambda M, a: _parts(M, M.sin(a) + M.cos(a) * M.tanh(a * 0.3)), 1),
    ("abs", lambda M, a: M.reduce_sum(M.abs(a) * M.abs(a * a)), 1),
    ("conj_angle", lambda M, a: _parts(M, M.conj(a) * a) + M.reduce_sum(M.angle(a)), 1),
    ("reductions", lambda M, a: _parts(M, M.reduce_prod(a, 1)) + _parts(M, M.reduce_mean(a, 0) * a), 1),
    ("matmul", lambda M, a, b: _parts(M, M.matmul(a, M.transpose(b))), 2),
    ("einsum", lambda M, a, b: _parts(M, M.einsum("ij,kj->ik", a, b)), 2),
    ("cast", lambda M, a: M.reduce_sum(M.cast_real(a * a)), 1),
    ("solve_inv_det", lambda M, a, b: _parts(M, M.linalg.solve(a, b)) + _parts(M, M.linalg.inv(a))
     + _parts(M, M.linalg.det(a)), 2),
]


def _inputs(name, k, dtype):
    if name == "solve_inv_det":
        return [_z((3, 3), dtype, 5) + 3 * np.eye(3, dtype=dtype.np), _z((3, 3), dtype, 6)][:k]
    return [_z((3, 3), dtype, 7 + j) for j in range(k)]


def _df_grads(loss, zs):
    ts = [df.constant(z) for z in zs]
    with df.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        value = loss(_Df(), *ts)
    assert value.dtype.is_floating
    return [g.numpy() for g in tape.gradient(value, ts)]


def _torch_grads(loss, zs):
    ts = [torch.tensor(z, requires_grad=True) for z in zs]
    loss(_Torch, *ts).backward()
    return [t.grad.numpy() for t in ts]


def _numeric_grads(loss, zs, eps=1e-6):
    """dL/d(re z) + i dL/d(im z) by central differences of the float64 loss."""
    out = []
    for j, z in enumerate(zs):
        g = np.zeros_like(z)
        for idx in np.ndindex(z.shape):
            parts = []
            for step in (eps, 1j * eps):
                hi, lo = [w.copy() for w in zs], [w.copy() for w in zs]
                hi[j][idx] += step
                lo[j][idx] -= step
                f = [float(loss(_Df(), *[df.constant(w) for w in v]).numpy()) for v in (hi, lo)]
                parts.append((f[0] - f[1]) / (2 * eps))
            g[idx] = parts[0] + 1j * parts[1]
        out.append(g)
    return out


@pytest.mark.parametrize("name,loss,k", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradients_follow_tf_convention_like_torch_and_finite_differences(name, loss, k):
    for dtype in (C64, C128):
        zs = _inputs(name, k, dtype)
        ours = _df_grads(loss, zs)
        for g, z in zip(ours, zs):
            assert g.dtype == z.dtype
        for got, want in zip(ours, _torch_grads(loss, zs)):
            np.testing.assert_allclose(got, want, **_TOL[dtype], err_msg=f"{name} {dtype.name} vs torch")
    zs = _inputs(name, k, C128)
    for got, want in zip(_df_grads(loss, zs), _numeric_grads(loss, zs)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=f"{name} vs finite differences")


@pytest.mark.parametrize("name,loss,k", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradients_are_jax_conjugated(name, loss, k):
    import jax
    zs = _inputs(name, k, C64)
    want = jax.grad(lambda *v: loss(_Jax(), *v), argnums=tuple(range(k)))(*zs)
    for got, w in zip(_df_grads(loss, zs), want):
        np.testing.assert_allclose(got, np.conj(np.asarray(w)), rtol=1e-3, atol=1e-4, err_msg=name)


def test_second_order_through_complex_intermediates():
    # L(x) = sum |exp(i x) x + x^2|^2 for real x: nested tapes against differences of the first
    def loss(M, x):
        z = M.complex(x, M.reduce_sum(x * 0.0, 0) + x * 0.0)
        w = M.exp(z * M.complex(x * 0.0, x * 0.0 + 1.0)) * z + z * z
        return M.reduce_sum(M.real(w * M.conj(w)))
    x0 = np.array([0.3, -0.7, 1.1])

    def first(x):
        t = df.constant(x)
        with df.GradientTape() as tape:
            tape.watch(t)
            value = loss(_Df(), t)
        return tape.gradient(value, t)
    t = df.constant(x0)
    hv = nested_gradients(lambda u: loss(_Df(), u), t,
                          lambda g: df.reduce_sum(g * df.constant(np.array([1.0, 2.0, -1.0]))))[1].numpy()
    eps = 1e-6
    fd = np.array([(float(df.reduce_sum(first(x0 + eps * e) * df.constant(np.array([1.0, 2.0, -1.0]))))
                    - float(df.reduce_sum(first(x0 - eps * e) * df.constant(np.array([1.0, 2.0, -1.0]))))) / (2 * eps)
                   for e in np.eye(3)])
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-6)
    xt = torch.tensor(x0, requires_grad=True)
    assert np.allclose(first(x0).numpy(), torch.autograd.grad(loss(_Torch, xt), xt)[0].numpy())


def test_gradients_of_a_defun_and_a_reloaded_document_agree_with_the_tape():
    def f(a, b):
        return df.reduce_sum(df.abs(df.exp(a) * b + df.conj(a))) + df.reduce_sum(df.real(a @ b))
    a, b = _z((2, 2), C128, 11), _z((2, 2), C128, 12)
    eager = _df_grads(lambda M, x, y: f(x, y), [a, b])
    g = df.defun(f)
    cf = g.get_concrete_function(df.TensorSpec([2, 2], C128), df.TensorSpec([2, 2], C128))
    ts = [df.constant(a), df.constant(b)]
    with df.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        y = cf(*ts)
    for got, want in zip(tape.gradient(y, ts), eager):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    loaded = df.load_json(df.export_json(cf, include_backward=True))
    ts = [df.constant(a), df.constant(b)]
    with df.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        y = loaded(*ts)
    for got, want in zip(tape.gradient(y, ts), eager):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Ops that cannot take complex values refuse them, naming the op

REFUSING = {
    "less": lambda z: z < z, "greater_equal": lambda z: z >= z, "maximum": lambda z: df.maximum(z, z),
    "floor": df.floor, "round": df.round, "relu": df.nn.relu if hasattr(df, "nn") else df.relu,
    "sigmoid": df.sigmoid, "sign": df.sign, "reduce_max": df.reduce_max,
    "argmax": df.argmax, "floordiv": lambda z: z // z, "log1p": df.log1p, "cholesky": df.linalg.cholesky,
    "sort": df.sort,
}


@pytest.mark.parametrize("name", sorted(REFUSING))
def test_ops_without_complex_meaning_refuse_it_naming_the_op(name):
    fn = REFUSING[name]
    z = df.constant(_z((2, 2), C64))
    with pytest.raises(IAE, match=name):
        fn(z)
    with pytest.raises(IAE, match=name):
        df.defun(fn).get_concrete_function(df.TensorSpec([2, 2], C64))


# ---------------------------------------------------------------------------------------
# Exits: numpy source, ONNX, the printed IR

def test_numpy_source_computes_complex_functions_and_their_gradients(tmp_path):
    def f(a, b):
        return df.reduce_sum(df.abs(df.exp(a) * b) + df.real(df.linalg.solve(a, b)) + df.angle(b))
    a, b = _z((3, 3), C128, 13) + 3 * np.eye(3), _z((3, 3), C128, 14)
    cf = df.defun(f).get_concrete_function(df.TensorSpec([3, 3], C128), df.TensorSpec([3, 3], C128))
    source = df.export_numpy_source(cf, include_backward=True)
    got = run_without_defun({"m": source}, [
        {"module": "m", "call": "forward", "inputs": [a, b]},
        {"module": "m", "call": "backward", "inputs": [a, b], "output_gradients": [np.float64(1.0)]}],
        tmp_path)
    np.testing.assert_allclose(got[0]["outputs"][0], cf(a, b).numpy(), rtol=1e-12)
    for g, want in zip(got[1]["gradients"], _df_grads(lambda M, x, y: f(x, y), [a, b])):
        np.testing.assert_allclose(g, want, rtol=1e-10)


def test_onnx_export_of_complex_values_is_unimplemented_naming_the_dtype():
    pytest.importorskip("onnx")
    cf = df.defun(lambda z: df.abs(z)).get_concrete_function(df.TensorSpec([2], C64))
    with pytest.raises(df.errors.UnimplementedError, match="complex64"):
        df.export_onnx(cf)
    cf = df.defun(lambda x: df.abs(df.complex(x, x))).get_concrete_function(df.TensorSpec([2], df.float32))
    with pytest.raises(df.errors.UnimplementedError, match="complex"):
        df.export_onnx(cf)


def test_the_ir_prints_complex_types_short():
    cf = df.defun(lambda x: df.complex(x, x) * 2j).get_concrete_function(df.TensorSpec([2], df.float64))
    text = str(cf.graph)
    assert "c128[2] = complex(" in text and "f64[2]" in text


def test_forward_mode_carries_complex_tangents_like_finite_differences():
    def f(z):   # holomorphic and not (abs, conj, real): the tangent map is only R-linear
        return [df.abs(df.exp(z) * df.conj(z)) + df.real(z * z), df.sqrt(z) * df.conj(z)]
    z0, v = _z((3,), C128, 15), _z((3,), C128, 16)
    zt = df.constant(z0)
    with df.ForwardAccumulator(zt, df.constant(v)) as acc:
        outs = f(zt)
    eps = 1e-6
    for out, hi, lo in zip(outs, f(df.constant(z0 + eps * v)), f(df.constant(z0 - eps * v))):
        np.testing.assert_allclose(acc.jvp(out).numpy(), (hi.numpy() - lo.numpy()) / (2 * eps), rtol=1e-6)
    x0, dx = np.array([0.4, 1.2]), np.array([1.0, -2.0])     # a real primal through complex values
    xt = df.constant(x0)
    with df.ForwardAccumulator(xt, df.constant(dx)) as acc:
        y = df.abs(df.signal.rfft(xt * xt, [4]))
    fd = (np.abs(np.fft.rfft((x0 + eps * dx) ** 2, 4)) - np.abs(np.fft.rfft((x0 - eps * dx) ** 2, 4))) / (2 * eps)
    np.testing.assert_allclose(acc.jvp(y).numpy(), fd, rtol=1e-6)


def test_the_numba_backend_runs_complex_and_small_int_nodes():
    pytest.importorskip("numba")

    def f(z, x, a):
        return df.reduce_sum(df.abs(df.exp(z) * z)) + df.reduce_sum(df.tanh(x) * 2.0), a * a + a
    args = (_z((3,), C64, 17), np.linspace(-1, 1, 4).astype(np.float32), np.array([1, 2, 100], np.int8))
    fast, plain = df.defun(f, backend="numba")(*args), df.defun(f)(*args)
    for a, b in zip(fast, plain):
        assert a.dtype is b.dtype
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(fast[1].numpy(), np.array([2, 6, 100 * 100 + 100], np.int64).astype(np.int8))


def test_dot_labels_and_the_command_line_take_complex_documents(tmp_path):
    from defun.graph.printer import to_dot
    from test_cli import exit_ok, cli
    cf = df.defun(lambda z, a: (df.abs(df.signal.fft(z)), a + a)).get_concrete_function(
        df.TensorSpec([4], C64), df.TensorSpec([2], df.uint8))
    dot = to_dot(cf.graph)
    assert "c64[4]" in dot and "u8[2]" in dot and "f32[4]" in dot
    df.export_json(cf, str(tmp_path / "f.json"))
    z = _z((4,), C64, 18)
    np.save(tmp_path / "z.npy", z)
    np.save(tmp_path / "a.npy", np.array([200, 3], np.uint8))
    out = exit_ok(cli("run", "f.json", "z=z.npy", "a=a.npy", cwd=tmp_path)).stdout
    assert "output_0: float32[4]" in out and "output_1: uint8[2]" in out
    exit_ok(cli("run", "f.json", "z=z.npy", "a=a.npy", "-o", "o.npz", cwd=tmp_path))
    with np.load(tmp_path / "o.npz") as got:
        np.testing.assert_allclose(got["output_0"], np.abs(np.fft.fft(z)), rtol=1e-5)
        np.testing.assert_array_equal(got["output_1"], np.array([144, 6], np.uint8))


def test_df_test_checks_real_functions_with_complex_insides_both_modes_to_order_two():
    def f(x, y):
        z = df.complex(x, y)
        w = df.exp(z * 0.5) * df.conj(z) / (z + 3.0) + df.linalg.det(df.complex(x, x) + 2.0 * df.eye(3, dtype=C64
                                                                                                   if x.dtype is df.float32 else C128))
        return df.abs(w) + df.angle(w * z) + df.real(df.einsum("ij,jk->ik", z, z) ** 2)
    rng = np.random.default_rng(19)
    x, y = rng.uniform(0.5, 1.5, (3, 3)), rng.uniform(0.5, 1.5, (3, 3))
    df.test.check_gradients(f, [x.astype(np.float32), y.astype(np.float32)], order=1)
    df.test.check_gradients(f, [x, y], order=2)    # (float32 differences are too coarse for order 2 here)
