"""df.math's special functions against scipy.special over their domains (dense sweeps, not a
few points), their gradients' edge rules, and the transformations on them. The op table
(tests/op_rows_special_functions.py) adds the per-row checks every op gets."""
import mpmath
import numpy as np
import pytest
import scipy.special as sp

import defun as df
from defun_helpers import nested_gradients

RNG = np.random.default_rng(11)


def _max_rel(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN where the reference has none, or the reverse"
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg="infinities differ")
    return float(np.max(np.abs(got[finite] - want[finite]) / np.maximum(np.abs(want[finite]), 1e-300),
                        initial=0.0))


SWEEPS = [  # (df function, scipy function, inputs, relative tolerance in float64)
    (df.math.lgamma, sp.gammaln,
     (np.concatenate([RNG.uniform(0.5, 3, 3000), RNG.uniform(3, 200, 2000), np.logspace(-300, 305, 400)]),), 1e-12),
    (df.math.lgamma, sp.gammaln, (RNG.uniform(-60, 0, 3000),), 1e-11),
    (df.math.digamma, sp.psi, (np.concatenate([RNG.uniform(-50, 50, 5000), np.logspace(-200, 200, 200)]),), 1e-11),
    (df.math.erfc, sp.erfc, (np.linspace(-8, 26, 5000),), 1e-13),   # past 26: subnormal
    (df.math.erfinv, sp.erfinv, (np.concatenate([RNG.uniform(-1, 1, 5000), 1 - np.logspace(-16, -1, 60),
                                                 -1 + np.logspace(-16, -1, 60), [-1.0, 1.0, 1.5, 0.0]]),), 1e-13),
    (df.math.bessel_i0e, sp.i0e, (np.concatenate([RNG.uniform(-60, 60, 5000), np.logspace(-10, 5, 200)]),), 1e-14),
    (df.math.bessel_i1e, sp.i1e, (np.concatenate([RNG.uniform(-60, 60, 5000), np.logspace(-10, 5, 200)]),), 1e-14),
    (df.math.xlogy, sp.xlogy, (RNG.normal(size=2000), RNG.uniform(0, 5, 2000)), 1e-15),
    (df.math.xlog1py, sp.xlog1py, (RNG.normal(size=2000), RNG.uniform(-1, 5, 2000)), 1e-15),
]


def _gamma_args():
    a = np.concatenate([RNG.uniform(0.01, 5, 2000), RNG.uniform(5, 1000, 2000)])
    return a, a * RNG.uniform(0, 3, a.size)


@pytest.mark.parametrize("fn, ref, args, tol", SWEEPS, ids=lambda v: getattr(v, "__name__", ""))
def test_matches_scipy_over_the_domain(fn, ref, args, tol):
    with np.errstate(all="ignore"):
        assert _max_rel(fn(*args).numpy(), ref(*args)) <= tol


def test_polygamma_matches_scipy():
    x = np.concatenate([RNG.uniform(1e-3, 100, 2000), RNG.uniform(-30, 0, 500)])
    for n in (0, 1, 2, 3, 6, 12):
        assert _max_rel(df.math.polygamma(np.full_like(x, n), x).numpy(), sp.polygamma(n, x)) <= 1e-10, n
    np.testing.assert_array_equal(df.math.polygamma(np.array([1.0, 2.0, 1.5]), np.array([-1.0, 0.0, 2.0])).numpy(),
                                  [np.inf, -np.inf, np.nan])      # poles as scipy; a non-whole order: NaN


def test_incomplete_gamma_and_beta_match_scipy():
    a, x = _gamma_args()
    assert _max_rel(df.math.igamma(a, x).numpy(), sp.gammainc(a, x)) <= 1e-9
    assert _max_rel(df.math.igammac(a, x).numpy(), sp.gammaincc(a, x)) <= 1e-9
    a, b, x = RNG.uniform(0.05, 60, 3000), RNG.uniform(0.05, 60, 3000), RNG.uniform(0, 1, 3000)
    assert _max_rel(df.math.betainc(a, b, x).numpy(), sp.betainc(a, b, x)) <= 1e-9
    edge = df.math.igamma(np.array([1.0, 1.0, -1.0, 2.0]), np.array([0.0, np.inf, 1.0, -1.0])).numpy()
    np.testing.assert_array_equal(edge, [0.0, 1.0, np.nan, np.nan])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_gradients_in_every_float_dtype_follow_the_closed_forms(dtype):
    x = np.array([0.3, 1.7, 4.2], dtype)
    cases = [(df.math.lgamma, sp.psi(x.astype(np.float64))),
             (df.math.digamma, sp.polygamma(1, x.astype(np.float64))),
             (df.math.erfc, -2 / np.sqrt(np.pi) * np.exp(-x.astype(np.float64) ** 2)),
             (df.math.bessel_i0e, sp.i1e(x.astype(np.float64)) - sp.i0e(x.astype(np.float64)))]
    tol = {np.float16: 1e-2, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    for fn, want in cases:
        t = df.constant(x)
        with df.GradientTape() as tape:
            tape.watch(t)
            y = fn(t)
        g = tape.gradient(y, t)
        assert g.dtype == df.as_dtype(dtype), fn.__name__
        np.testing.assert_allclose(g.numpy().astype(np.float64), want, rtol=tol, atol=tol, err_msg=fn.__name__)


def test_bessel_i1e_derivatives_near_zero_against_mpmath():
    x = df.constant(np.float64([1e-8, -3e-3, 5e-3, 0.0]))
    g, h = nested_gradients(df.math.bessel_i1e, x)
    mpmath.mp.dps = 30
    f = lambda v: mpmath.exp(-abs(v)) * mpmath.besseli(1, v)  # noqa: E731
    for i, v in enumerate([1e-8, -3e-3, 5e-3]):
        assert g.numpy()[i] == pytest.approx(float(mpmath.diff(f, v)), rel=1e-12)
        assert h.numpy()[i] == pytest.approx(float(mpmath.diff(f, v, 2)), rel=1e-8)
    assert g.numpy()[3] == 0.5


def test_parameters_take_no_gradient_as_in_tensorflow_and_x_does():
    a, x = df.constant(np.float64([1.5, 3.0])), df.constant(np.float64([0.7, 2.0]))
    with df.GradientTape() as tape:
        tape.watch([a, x])
        y = df.math.igamma(a, x)
    da, dx = tape.gradient(y, [a, x])
    assert da is None
    want = np.exp(-x.numpy()) * x.numpy() ** (a.numpy() - 1) / sp.gamma(a.numpy())
    np.testing.assert_allclose(dx.numpy(), want, rtol=1e-10)


def test_xlogy_gradient_follows_tensorflows_rule_at_zero():
    x, y = df.constant(np.float64([0.0, 2.0])), df.constant(np.float64([0.0, 3.0]))
    with df.GradientTape() as tape:
        tape.watch([x, y])
        z = df.math.xlogy(x, y)
    dx, dy = tape.gradient(z, [x, y])
    np.testing.assert_array_equal(z.numpy(), [0.0, 2.0 * np.log(3.0)])
    np.testing.assert_array_equal(dx.numpy(), [0.0, np.log(3.0)])
    np.testing.assert_array_equal(dy.numpy(), [0.0, 2.0 / 3.0])


def test_in_a_defun_under_vmap_and_reloaded(tmp_path):
    def f(a, x):
        return df.math.lgamma(x) + df.math.igammac(a, x) * df.math.erfinv(df.tanh(x))
    a = np.float64([[0.5, 2.0], [3.0, 1.0]])
    x = np.float64([[0.7, 1.5], [2.5, 0.2]])
    eager = f(df.constant(a), df.constant(x)).numpy()
    traced = df.defun(f)
    np.testing.assert_allclose(traced(a, x).numpy(), eager, rtol=1e-14)
    np.testing.assert_allclose(df.vmap(f)(a, x).numpy(), eager, rtol=1e-14)
    df.export_json(traced.get_concrete_function(df.constant(a), df.constant(x)), tmp_path / "f.json")
    np.testing.assert_allclose(df.load_json(tmp_path / "f.json")(a, x), eager, rtol=1e-14)
