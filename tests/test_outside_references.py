"""Wrong results users found against outside references (issue 19, items 1, 7 and 9), each
checked against that reference's numbers: torch (installed) computed here, the exact
float64 values where the reference is exact to rounding (jax's logsumexp and det), and the
literal numbers the reference gives, in the assertions' messages and comments.

Each gradient is taken three ways: eagerly, through a defun, and from a document exported
with `include_backward=True` and loaded back."""
import json

import numpy as np
import pytest

import defun as df

torch = pytest.importorskip("torch")

f16, f32, f64 = df.float16, df.float32, df.float64


def _three_ways(fn, *xs):
    """The gradient of sum(fn(*xs)) w.r.t. every x: eager, through a defun, loaded."""
    def grads(callable_):
        ts = [df.constant(x) for x in xs]
        with df.GradientTape() as tape:
            tape.watch(ts)
            out = df.reduce_sum(callable_(*ts))
        return [g.numpy() for g in tape.gradient(out, ts)]
    traced = df.defun(fn, input_signature=[df.TensorSpec(np.shape(x), df.as_dtype(np.asarray(x).dtype))
                                           for x in xs])
    doc = json.loads(json.dumps(df.export_json(traced.get_concrete_function(), include_backward=True)))
    return {"eager": grads(fn), "defun": grads(traced), "loaded": grads(df.load_json(doc))}


def _torch_grad(fn, x, dtype=torch.float32):
    t = torch.tensor(np.asarray(x, np.float64), dtype=dtype, requires_grad=True)
    fn(t).sum().backward()
    return t.grad.double().numpy()


# ---------------------------------------------------------------------------------------
# 1. erf and gelu gradients in float16 and float32 (the rules multiplied by numpy float64
#    constants: "multiply: input 1: cannot convert a float64 array to float32")

X = [-2.0, -0.5, 0.0, 0.5, 1.0, 3.0]
_TOL = {f16: 2e-3, f32: 2e-6}


@pytest.mark.parametrize("dt", [f16, f32], ids=["float16", "float32"])
@pytest.mark.parametrize("name, fn, reference", [
    ("erf", df.erf, torch.erf),
    ("gelu", df.gelu, lambda t: torch.nn.functional.gelu(t, approximate="none")),
    ("gelu_tanh", lambda x: df.gelu(x, approximate=True), lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
])
def test_erf_and_gelu_gradients_in_float16_and_float32_are_torchs(name, fn, reference, dt):
    x = np.array(X, dt.np)
    expected = _torch_grad(reference, x.astype(np.float32))        # torch in float32
    for how, (g,) in _three_ways(fn, x).items():
        assert g.dtype == dt.np, f"{name} {how}: gradient {g.dtype}"
        np.testing.assert_allclose(g.astype(np.float64), expected, rtol=_TOL[dt], atol=_TOL[dt],
                                   err_msg=f"{name} {how} in {dt.name} vs torch")


def test_erf_and_gelu_gradient_numbers():
    # torch: erf'(0.5) = 0.8787826, gelu'(1) = 1.0833154 (exact), 1.0829641 (tanh form)
    x = np.array([0.5, 1.0], np.float32)
    for fn, want in ((df.erf, 0.8787826), (df.gelu, 1.0833154),
                     (lambda t: df.gelu(t, approximate=True), 1.0829641)):
        g = _three_ways(fn, x)["loaded"][0]
        np.testing.assert_allclose(g[0 if fn is df.erf else 1], want, rtol=1e-6)


# ---------------------------------------------------------------------------------------
# 7. atan2's keyword names are TF's: tf.math.atan2(y, x)

def test_atan2_takes_y_then_x_by_keyword_as_tf():
    # TF: tf.math.atan2(y=1.0, x=-1.0) = 2.3561945 (3 pi / 4); the swapped names gave -0.785
    assert float(df.atan2(y=1.0, x=-1.0)) == pytest.approx(2.3561945, abs=1e-6)
    assert float(df.atan2(x=-1.0, y=1.0)) == pytest.approx(2.3561945, abs=1e-6)
    assert float(df.atan2(1.0, -1.0)) == pytest.approx(np.arctan2(1.0, -1.0), abs=1e-6)
    traced = df.defun(lambda a, b: df.atan2(y=a, x=b))
    assert float(traced(df.constant(1.0), df.constant(-1.0))) == pytest.approx(2.3561945, abs=1e-6)
    # d atan2(y, x) / dy = x / (x^2 + y^2) = -0.5, / dx = -y / (x^2 + y^2) = -0.5 at (1, -1)
    for how, (gy, gx) in _three_ways(lambda y, x: df.atan2(y=y, x=x), np.float32(1.0), np.float32(-1.0)).items():
        np.testing.assert_allclose([gy, gx], [-0.5, -0.5], rtol=1e-6, err_msg=how)


# ---------------------------------------------------------------------------------------
# 9. reduce_logsumexp's gradient at |x| ~ 1000, pow(x, 0) at 0, linspace's dtype, det at a
#    singular matrix

@pytest.mark.parametrize("shift", [1000.0, -1000.0])
def test_logsumexp_gradient_at_large_inputs_is_exact_to_rounding_in_float32(shift):
    # jax (max-subtraction): the softmax rounded once, [0.24472848, 0.66524094, 0.09003057]
    # for shift 1000; exp(x - logsumexp(x)) was off by 2e-5 relative (torch's float32 still is)
    x = np.array([0.0, 1.0, -1.0], np.float32) + np.float32(shift)
    e = np.exp(x.astype(np.float64) - np.max(x.astype(np.float64)))
    exact = e / e.sum()
    for how, (g,) in _three_ways(df.reduce_logsumexp, x).items():
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, exact, rtol=2.5e-7, atol=0, err_msg=how)    # within 2 ulp
    np.testing.assert_allclose(exact.astype(np.float32), [0.24472848, 0.66524094, 0.09003057], rtol=1e-7)


def test_logsumexp_gradient_over_an_axis_and_with_minus_infinity():
    x = np.array([[1000.0, 1001.0, -np.inf], [-3.0, 0.0, 2.0]], np.float32)
    xt = df.constant(x)
    with df.GradientTape() as tape:
        tape.watch(xt)
        y = df.reduce_logsumexp(xt, axis=1)
    g = tape.gradient(y, xt).numpy()
    expected = _torch_grad(lambda t: torch.logsumexp(t, 1), x, torch.float64)
    np.testing.assert_allclose(g, expected, rtol=4e-7, atol=1e-12)          # a few float32 roundings
    assert g[0, 2] == 0.0


@pytest.mark.parametrize("dt", [f32, f64], ids=["float32", "float64"])
def test_pow_to_the_zero_has_gradient_zero_at_zero_as_torch(dt):
    x = np.array([0.0, 2.0, -1.5], dt.np)
    expected = _torch_grad(lambda t: torch.pow(t, 0.0), x)      # torch: [0., 0., 0.] (was nan at 0)
    for how, (g,) in _three_ways(lambda t: df.pow(t, 0.0), x).items():
        np.testing.assert_array_equal(g, expected.astype(dt.np), err_msg=how)
    # an exponent tensor that is 0 in places: the base's gradient there is 0, elsewhere y x^(y - 1)
    y = np.array([0.0, 3.0, 2.0], dt.np)
    grads = _three_ways(df.pow, x, y)
    tx = torch.tensor(x.astype(np.float64), requires_grad=True)
    torch.pow(tx, torch.tensor(y.astype(np.float64))).sum().backward()
    for how, (gx, _) in grads.items():
        np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-6, err_msg=how)


def test_linspace_keeps_numpy_float64_scalars_float64():
    out = df.linspace(np.float64(0.0), np.float64(1.0), 7)
    assert out.dtype is f64
    np.testing.assert_array_equal(out.numpy(), np.linspace(0.0, 1.0, 7))
    assert df.linspace(np.float64(0.1), 1.0, 3).dtype is f64            # a Python float follows it
    assert df.linspace(np.float32(0.0), np.float32(1.0), 3).dtype is f32
    assert df.linspace(0.0, 1.0, 3).dtype is f32                          # Python numbers: float32
    assert df.linspace(0, 1, 3).dtype is f32


@pytest.mark.parametrize("a, cofactors", [
    # jax.grad(jnp.linalg.det) at the singular [[1, 2], [2, 4]]: [[4, -2], [-2, 1]]
    ([[1.0, 2.0], [2.0, 4.0]], [[4.0, -2.0], [-2.0, 1.0]]),
    ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], [[-3.0, 6.0, -3.0], [6.0, -12.0, 6.0], [-3.0, 6.0, -3.0]]),
    ([[0.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]),
    ([[2.0, 1.0], [1.0, 3.0]], [[3.0, -1.0], [-1.0, 2.0]]),         # invertible: det A^-T
])
@pytest.mark.parametrize("dt", [f32, f64], ids=["float32", "float64"])
def test_det_gradient_is_the_adjugate_also_at_a_singular_matrix(a, cofactors, dt):
    for how, (g,) in _three_ways(df.linalg.det, np.array(a, dt.np)).items():
        assert g.dtype == dt.np
        np.testing.assert_allclose(g, cofactors, rtol=1e-5 if dt is f32 else 1e-12, atol=1e-5 if dt is f32 else 1e-12,
                                   err_msg=f"{how}: the gradient of det is the cofactor matrix")


def test_det_gradient_of_a_batch_matches_torch_where_invertible():
    a = np.random.default_rng(3).normal(size=(4, 3, 3))
    expected = _torch_grad(torch.linalg.det, a, torch.float64)
    for how, (g,) in _three_ways(df.linalg.det, a).items():
        np.testing.assert_allclose(g, expected, rtol=1e-10, atol=1e-12, err_msg=how)
