"""The special functions `tf.math` keeps (df.math): lgamma, digamma, polygamma, erfc, erfinv,
xlogy, xlog1py, the regularized incomplete gamma and beta functions, and the exponentially
scaled modified Bessel functions of order 0 and 1; declarations and public functions.

numpy has none of them, and scipy is not a run-time dependency, so each kernel is written
here with numpy, in float64 whatever the input dtype (rounded back), from series,
recurrences, asymptotic expansions and continued fractions chosen per range of the input;
tests/test_special_functions.py checks each against scipy.special over its domain. The
gradients are the closed forms with respect to x; with respect to the parameters (polygamma's
order, igamma's and igammac's a, betainc's a and b) there is none here, as in TensorFlow for
all but igamma's a: the tape gives None for them (the guide's df.math section says so).
"""
import math

import numpy as np

from defun.runtime.execute import run_op
from defun.runtime.ops import shape_rules
from defun.runtime.ops import math_ops as m
from defun.runtime.ops.array_ops import where, zeros_like
from defun.runtime.ops.elementwise_ops import _binary, _pair_grad, _unary
from defun.runtime.ops.special_math_ops import _erf_kernel, _erfc
from defun.runtime.registry import Cost, register
from defun.runtime import batching as bt

__all__ = ["lgamma", "digamma", "polygamma", "erfc", "erfinv", "xlogy", "xlog1py", "igamma", "igammac",
           "betainc", "bessel_i0e", "bessel_i1e"]

_EMPTY = {}


def _f64(kernel):
    """A kernel computed in float64 on arrays of at least one dimension (the kernels assign
    through masks), reshaped to the broadcast shape and rounded back to the inputs' dtype."""
    def run(*xs):
        shape = np.broadcast_shapes(*(np.shape(x) for x in xs))
        with np.errstate(all="ignore"):     # poles and range ends give inf and NaN by design
            out = kernel(*(np.atleast_1d(np.asarray(x, np.float64)) for x in xs))
        return np.asarray(out).reshape(shape).astype(np.result_type(*xs), copy=False)
    run.__name__ = kernel.__name__
    return run


def _per_element(n):
    """Cost: `n` operations per output element (the kernels' series and fractions)."""
    return Cost(work=lambda shapes, out_shapes, attrs: n * math.prod(out_shapes[0]))


# ------------------------------------------------------------------ lgamma
# Taylor series of log Gamma around 1 and 2 (coefficients from zeta values), Stirling's
# series beyond 10 after shifting up, the reflection formula below 0.5.
def _zeta(k):
    """Riemann zeta(k) for an integer k >= 2 in float64: a direct sum and the Euler-Maclaurin tail."""
    n = 64
    head = sum(j ** -float(k) for j in range(1, n))
    return (head + n ** (1.0 - k) / (k - 1) + 0.5 * n ** -float(k) + k * n ** (-k - 1.0) / 12
            - k * (k + 1) * (k + 2) * n ** (-k - 3.0) / 720
            + k * (k + 1) * (k + 2) * (k + 3) * (k + 4) * n ** (-k - 5.0) / 30240)


_EULER = 0.5772156649015329
_ZETA = {k: _zeta(k) for k in range(2, 64)}
_AT1 = [(-1) ** k * _ZETA[k] / k for k in range(2, 64)]          # lgamma(1 + e) = -gamma e + sum c e^k
_AT2 = [(-1) ** k * (_ZETA[k] - 1) / k for k in range(2, 64)]    # lgamma(2 + e) = (1 - gamma) e + sum
_BERN = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510]   # B2, B4, ..., B16
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _series(e, coefficients, linear):
    total = np.zeros_like(e)
    for c in reversed(coefficients):
        total = (total + c) * e
    return (total + linear) * e


def _stirling(z):
    """log Gamma(z) for z >= 10."""
    inv, inv2 = 1 / z, 1 / (z * z)
    tail = np.zeros_like(z)
    for k in range(len(_BERN), 0, -1):
        tail = tail * inv2 + _BERN[k - 1] / (2 * k * (2 * k - 1))
    return (z - 0.5) * np.log(z) - z + _HALF_LOG_2PI + tail * inv


def _lgamma_positive(x):
    out = np.empty_like(x)
    low, near1, near2 = x < 0.5, (x >= 0.5) & (x < 1.5), (x >= 1.5) & (x < 2.5)
    out[near1] = _series(x[near1] - 1, _AT1, -_EULER)
    out[near2] = _series(x[near2] - 2, _AT2, 1 - _EULER)
    out[low] = _series(x[low], _AT1, -_EULER) - np.log(x[low])
    big = x >= 2.5
    z = x[big]
    shift = np.maximum(np.ceil(10 - z), 0)
    prod = np.ones_like(z)
    for k in range(8):
        prod *= np.where(k < shift, z + k, 1.0)
    out[big] = _stirling(z + shift) - np.log(prod)
    return out


def _lgamma_kernel(x):
    x = np.asarray(x, np.float64)
    out = np.full_like(x, np.inf)
    pos = x > 0
    out[pos] = _lgamma_positive(x[pos])
    neg = (x < 0) & (x != np.floor(x))
    xn = x[neg]
    sin = np.abs(np.sin(np.pi * (xn - np.round(xn))))      # exact reduction of pi x near integers
    out[neg] = np.log(np.pi / sin) - _lgamma_positive(1 - xn)
    out[np.isnan(x)] = np.nan
    out[x == -np.inf] = np.inf
    return out


# ------------------------------------------------------------------ digamma, polygamma
def _digamma_kernel(x):
    x = np.asarray(x, np.float64)
    out = np.full_like(x, np.nan)
    reflect = x < 0.5
    z = np.where(reflect, 1 - x, x)
    total = np.zeros_like(z)
    shift = np.maximum(np.ceil(10 - z), 0)
    for k in range(10):
        total -= np.where(k < shift, 1 / np.where(k < shift, z + k, 1.0), 0.0)
    w = z + shift
    inv2 = 1 / (w * w)
    tail = np.zeros_like(w)
    for k in range(len(_BERN), 0, -1):
        tail = tail * inv2 + _BERN[k - 1] / (2 * k)
    psi = total + np.log(w) - 0.5 / w - tail * inv2
    frac = x - np.round(x)
    out[:] = np.where(reflect, psi - np.pi / np.tan(np.pi * frac), psi)
    out[(x <= 0) & (frac == 0)] = np.nan
    at_zero = x == 0
    out[at_zero] = -np.copysign(np.inf, x[at_zero])      # scipy's: -inf at +0, +inf at -0
    out[x == np.inf] = np.inf
    return out


def _polygamma_kernel(n, x):
    """psi^(n)(x) for a whole number n >= 0: the recurrence up to 20 + n, then the asymptotic
    series. Below -1000 (where the recurrence would run too long) it is NaN; at the poles
    (0, -1, ...) it is (-1)^(n+1) inf, as scipy gives."""
    n, x = np.broadcast_arrays(np.asarray(n, np.float64), np.asarray(x, np.float64))
    out = np.full(x.shape, np.nan)
    whole = (n >= 1) & (n == np.floor(n))
    pole = whole & (x <= 0) & (x == np.floor(x))
    ok = whole & ~pole & (x > -1000) & np.isfinite(x)
    out[n == 0] = _digamma_kernel(x[n == 0])
    out[pole] = np.where(n[pole] % 2 == 1, np.inf, -np.inf)
    out[whole & (x == np.inf)] = 0.0
    if not ok.any():
        return out
    nn, z = n[ok], x[ok]
    sign = np.where(nn % 2 == 1, 1.0, -1.0)
    fact = np.exp(_lgamma_kernel(nn + 1))
    reach = np.maximum(np.ceil(20 + nn - z), 0)
    total = np.zeros_like(z)
    for k in range(int(reach.max(initial=0))):
        active = k < reach
        total += np.where(active, np.where(active, z + k, 1.0) ** -(nn + 1), 0.0)
    w = z + reach
    tail = np.exp(_lgamma_kernel(nn)) / w ** nn + fact / (2 * w ** (nn + 1))
    for k in range(1, len(_BERN) + 1):
        log_term = _lgamma_kernel(2 * k + nn) - _lgamma_kernel(2 * k + 1) - (2 * k + nn) * np.log(w)
        tail += _BERN[k - 1] * np.exp(log_term)
    out[ok] = sign * (fact * total + tail)
    return out


# ------------------------------------------------------------------ erfinv
def _erfinv_kernel(y):
    """Winitzki's closed form to ~2e-3, then three Halley steps on erf (on erfc past 0.5)."""
    y = np.asarray(y, np.float64)
    a = 0.147
    w = np.log((1 - y) * (1 + y))
    t = 2 / (np.pi * a) + w / 2
    x = np.copysign(np.sqrt(np.sqrt(t * t - w / a) - t), y)
    tail = np.abs(y) > 0.5
    for _ in range(3):
        ax = np.abs(x)
        # erf(x) - y; past |y| = 0.5 as sign(y) ((1 - |y|) - erfc(|x|)), exact where erf rounds to +-1
        f = np.where(tail, np.sign(y) * ((1 - np.abs(y)) - _erfc(ax)), _erf_kernel(x) - y)
        slope = (2 / math.sqrt(math.pi)) * np.exp(-x * x)
        x = x - f / (slope + x * f)
    x = np.where(np.abs(y) == 1, np.copysign(np.inf, y), x)
    return np.where((np.abs(y) > 1) | np.isnan(y), np.nan, x)


# ------------------------------------------------------------------ Bessel i0e, i1e
def _bessel_ie(x, order):
    """exp(-|x|) I_order(|x|) for order 0 or 1: the power series up to 30 (all terms positive),
    the asymptotic series beyond (its terms shrink below 1e-25 before they grow)."""
    a = np.abs(np.asarray(x, np.float64))
    out = np.empty_like(a)
    small = a <= 30
    s = a[small]
    q = s * s / 4
    term = np.ones_like(s) if order == 0 else s / 2
    total = term.copy()
    for k in range(1, 80):
        term = term * q / (k * (k + order))
        total += term
    out[small] = total * np.exp(-s)
    b = a[~small]
    mu = 4.0 * order * order
    term = np.ones_like(b)
    total = term.copy()
    for k in range(1, 60):
        term = term * -(mu - (2 * k - 1) ** 2) / (k * 8 * b)
        total += term
    out[~small] = total / np.sqrt(2 * np.pi * b)
    return out


def _i0e_kernel(x):
    return _bessel_ie(x, 0)


def _i1e_kernel(x):
    return np.copysign(_bessel_ie(x, 1), x)


# ------------------------------------------------------------------ incomplete gamma and beta
_MAX_TERMS = 2000


def _gamma_series(a, x):
    """P(a, x) by its power series (x < a + 1)."""
    term = 1 / a
    total = term.copy()
    denom = a.copy()
    for _ in range(_MAX_TERMS):
        denom += 1
        term = term * x / denom
        total += term
        if np.all(np.abs(term) <= np.abs(total) * 1e-17):
            break
    return total * np.exp(a * np.log(x) - x - _lgamma_kernel(a))


def _lentz(step, first):
    """The continued fraction b0 + a1/(b1 + a2/(b2 + ...)) by Lentz's method, with `step(i)`
    giving (a_i, b_i) arrays; `first` is b0."""
    tiny = 1e-300
    f = np.where(first == 0, tiny, first)
    c, d = f.copy(), np.zeros_like(f)
    for i in range(1, _MAX_TERMS):
        a_i, b_i = step(i)
        d = b_i + a_i * d
        d = np.where(d == 0, tiny, d)
        c = b_i + a_i / c
        c = np.where(c == 0, tiny, c)
        d = 1 / d
        delta = c * d
        f = f * delta
        if np.all(np.abs(delta - 1) <= 1e-16):
            break
    return f


def _gamma_fraction(a, x):
    """Q(a, x) by its continued fraction (x >= a + 1)."""
    b = x + 1 - a
    frac = _lentz(lambda i: (-i * (i - a), b + 2 * i), b)
    return np.exp(a * np.log(x) - x - _lgamma_kernel(a)) / frac


def _igamma_parts(a, x):
    """(P, Q) of the regularized incomplete gamma function, NaN outside a > 0, x >= 0."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    p, q = np.full(a.shape, np.nan), np.full(a.shape, np.nan)
    ok = (a > 0) & (x >= 0)
    zero, inf = ok & (x == 0), ok & (x == np.inf)
    p[zero], q[zero], p[inf], q[inf] = 0.0, 1.0, 1.0, 0.0
    series = ok & (x > 0) & (x < a + 1) & ~inf
    fraction = ok & (x >= a + 1) & ~inf
    p[series] = _gamma_series(a[series], x[series])
    q[series] = 1 - p[series]
    q[fraction] = _gamma_fraction(a[fraction], x[fraction])
    p[fraction] = 1 - q[fraction]
    return p, q


def _igamma_kernel(a, x):
    return _igamma_parts(a, x)[0]


def _igammac_kernel(a, x):
    return _igamma_parts(a, x)[1]


def _beta_fraction(a, b, x):
    """I_x(a, b) for x < (a + 1) / (a + b + 2), by its continued fraction."""
    def step(i):
        k = i // 2
        if i % 2:
            num = -(a + k) * (a + b + k) * x / ((a + 2 * k) * (a + 2 * k + 1))
        else:
            num = k * (b - k) * x / ((a + 2 * k - 1) * (a + 2 * k))
        return num, np.ones_like(x)
    frac = _lentz(step, np.ones_like(x))
    log_front = a * np.log(x) + b * np.log1p(-x) - _lbeta(a, b)
    return np.exp(log_front) / (a * frac)


def _lbeta(a, b):
    return _lgamma_kernel(a) + _lgamma_kernel(b) - _lgamma_kernel(a + b)


def _betainc_kernel(a, b, x):
    a, b, x = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, x)))
    out = np.full(x.shape, np.nan)
    ok = (a > 0) & (b > 0) & (x >= 0) & (x <= 1)
    out[ok & (x == 0)], out[ok & (x == 1)] = 0.0, 1.0
    inside = ok & (x > 0) & (x < 1)
    direct = inside & (x < (a + 1) / (a + b + 2))
    mirror = inside & ~direct
    out[direct] = _beta_fraction(a[direct], b[direct], x[direct])
    out[mirror] = 1 - _beta_fraction(b[mirror], a[mirror], 1 - x[mirror])
    return out


# ------------------------------------------------------------------ gradients
def _ln(t):
    return m.log(t)


def _igamma_grad(sign):
    def grad(op, g):
        a, x = op.inputs
        density = m.exp(m.subtract(m.subtract(m.multiply(m.subtract(a, 1.0), _ln(x)), x), lgamma(a)))
        return [None, m.unbroadcast(m.multiply(g, m.multiply(density, sign)), x)]
    return grad


def _betainc_grad(op, g):
    a, b, x = op.inputs
    log_density = m.add(m.multiply(m.subtract(a, 1.0), _ln(x)), m.multiply(m.subtract(b, 1.0), m.log1p(m.negative(x))))
    log_beta = m.subtract(m.add(lgamma(a), lgamma(b)), lgamma(m.add(a, b)))
    return [None, None, m.unbroadcast(m.multiply(g, m.exp(m.subtract(log_density, log_beta))), x)]


def _polygamma_grad(op, g):
    n, x = op.inputs
    return [None, m.unbroadcast(m.multiply(g, polygamma(m.add(n, 1.0), x)), x)]


def _xlogy_partials(log):
    def partials(op, g, want_x, want_y):
        x, y = op.inputs
        nonzero = m.not_equal(x, zeros_like(x))
        one = m.add(zeros_like(y), 1.0)
        dx = m.multiply(g, where(nonzero, log(where(nonzero, y, one)), zeros_like(y))) if want_x else None
        denominator = y if log is m.log else m.add(y, 1.0)
        dy = m.multiply(g, where(nonzero, m.divide(x, where(nonzero, denominator, one)),
                                 zeros_like(x))) if want_y else None
        return dx, dy
    return partials


def _i1e_grad(op, g):
    """i1e'(x) = i0e(x) - i1e(x) (sign(x) + 1/x); within 1e-2 of 0, I1(x)/x by its series
    (1/2 + x^2/16 + x^4/384), so neither it nor its own derivative cancels there."""
    x = op.inputs[0]
    y = op.outputs[0]
    near = m.less(m.abs(x), 1e-2)
    safe = where(near, m.add(zeros_like(x), 1.0), x)
    square = m.square(where(near, x, zeros_like(x)))
    ratio_series = m.multiply(m.exp(m.negative(m.abs(x))),
                              m.add(0.5, m.multiply(square, m.add(1 / 16, m.divide(square, 384.0)))))
    ratio = where(near, ratio_series, m.divide(y, safe))
    return [m.multiply(g, m.subtract(m.subtract(bessel_i0e(x), m.multiply(y, m.sign(x))), ratio))]


_SQRT_PI_OVER_2 = float(math.sqrt(math.pi) / 2)
_TWO_OVER_SQRT_PI = float(2 / math.sqrt(math.pi))

# ------------------------------------------------------------------ the rows
lgamma = _unary("lgamma", _f64(_lgamma_kernel), lambda op, g: [m.multiply(g, digamma(op.inputs[0]))],
                doc="log |Gamma(x)|: `df.math.lgamma(0.5) -> 0.5724` (inf at 0 and the negative integers).")
digamma = _unary("digamma", _f64(_digamma_kernel),
                 lambda op, g: [m.multiply(g, polygamma(m.add(zeros_like(op.inputs[0]), 1.0), op.inputs[0]))],
                 doc="The derivative of lgamma: `df.math.digamma(1.) -> -0.5772` (NaN at the non-positive integers).")
erfc = _unary("erfc", _f64(_erfc),
              lambda op, g: [m.multiply(g, m.multiply(m.exp(m.negative(m.square(op.inputs[0]))), -_TWO_OVER_SQRT_PI))],
              doc="1 - erf(x), accurate where it is tiny: `df.math.erfc(5.) -> 1.5375e-12`.")
erfinv = _unary("erfinv", _f64(_erfinv_kernel),
                lambda op, g: [m.multiply(g, m.multiply(m.exp(m.square(op.outputs[0])), _SQRT_PI_OVER_2))],
                doc="The inverse of erf on (-1, 1): `df.math.erfinv(0.5) -> 0.4769` (+-inf at +-1).")
bessel_i0e = _unary("bessel_i0e", _f64(_i0e_kernel),
                    lambda op, g: [m.multiply(g, m.subtract(bessel_i1e(op.inputs[0]),
                                                            m.multiply(m.sign(op.inputs[0]), op.outputs[0])))],
                    doc="exp(-|x|) I0(x), the scaled modified Bessel function of order 0.")
bessel_i1e = _unary("bessel_i1e", _f64(_i1e_kernel), _i1e_grad,
                    doc="exp(-|x|) I1(x), the scaled modified Bessel function of order 1.")
def _xlogy_onnx(shift):
    """Where(x == 0, 0, x log(y + shift)) (float64 Log runs in onnxruntime)."""
    def form(e, node, ins):
        x, y = ins
        dt = node.inputs[0].dtype
        zero = e.scalar(0, dt)
        arg = y if shift == 0 else e.op("Add", y, e.scalar(shift, dt))
        return e.op("Where", e.op("Equal", x, zero), e.op("Mul", x, zero), e.op("Mul", x, e.op("Log", arg)))
    return form


xlogy = _binary("xlogy", _f64(lambda x, y: np.where(x == 0, 0.0, x * np.log(np.where(x == 0, 1.0, y)))),
                _pair_grad(_xlogy_partials(m.log)), doc="x * log(y), and 0 where x is 0 (TF's rule).",
                onnx=_xlogy_onnx(0))
xlog1py = _binary("xlog1py", _f64(lambda x, y: np.where(x == 0, 0.0, x * np.log1p(np.where(x == 0, 0.0, y)))),
                  _pair_grad(_xlogy_partials(m.log1p)), doc="x * log1p(y), and 0 where x is 0 (TF's rule).",
                  onnx=_xlogy_onnx(1))


def _ternary_infer(name):
    def infer(shapes, dts, attrs):
        shape_rules.check_same(name, dts)
        shape_rules.check_kinds(name, dts[0], shape_rules.float_kinds)
        out = shape_rules.broadcast_shapes(name, shape_rules.broadcast_shapes(name, shapes[0], shapes[1]), shapes[2])
        return [(out, dts[0])]
    return infer


def _register_pair(name, kernel, grad, work, doc):
    return _binary(name, _f64(kernel), grad, kinds=shape_rules.float_kinds, doc=doc, cost=_per_element(work),
                   names=("a", "x"))


polygamma = _register_pair("polygamma", _polygamma_kernel, _polygamma_grad, 200,
                           "psi^(a)(x), the a-th derivative of digamma (a a whole number >= 0 as a float, x > 0).")
igamma = _register_pair("igamma", _igamma_kernel, _igamma_grad(1.0), 4 * _MAX_TERMS,
                        "P(a, x), the regularized lower incomplete gamma function.")
igammac = _register_pair("igammac", _igammac_kernel, _igamma_grad(-1.0), 4 * _MAX_TERMS,
                         "Q(a, x) = 1 - P(a, x), the regularized upper incomplete gamma function.")
_BETAINC = register(
    name="betainc",
    kernel=_f64(_betainc_kernel),
    infer=_ternary_infer("betainc"),
    grad=_betainc_grad,
    num_inputs=3,
    attrs={},
    defaults={},
    same_dtype=(0, 1, 2),
    kinds=shape_rules.float_kinds,
    batch=bt.elementwise,
    cost=_per_element(8 * _MAX_TERMS),
)


def betainc(a, b, x, name=None):
    """I_x(a, b), the regularized incomplete beta function (a, b > 0; x in [0, 1])."""
    return run_op(_BETAINC, (a, b, x), _EMPTY, name)
