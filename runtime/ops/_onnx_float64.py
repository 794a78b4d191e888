"""ONNX forms in float64 of ops whose ONNX op onnxruntime computes in float32 only
(Atan, Asin, Sinh, Erf, ...; Conv and AveragePool: runtime/ops/_onnx_windows.py, Det:
runtime/ops/_onnx_linalg.py): written with ops it runs in double
(exp, log, sqrt, sin, cos, MatMul, Slice), refined by Newton steps from a float32 seed,
or as a Loop. Used by the ops' forms (runtime/ops/*: `onnx=` of their rows); nothing here
imports onnx. Each is checked against the op's kernel by tests/test_onnx_ops.py.
"""
import numpy as np

__all__ = ["newton", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "erf_parts"]

_SQRT_PI = np.sqrt(np.pi)


def newton(e, x, seed_type, residual):
    """A float64 value from onnxruntime's float32 `seed_type(x)` and two Newton steps on
    `residual(y) -> (r, dr/dy)` (each step doubles the correct digits: 7 -> 14 -> 16)."""
    y = e.cast(e.op(seed_type, e.cast(x, "float32")), "float64")
    for _ in range(2):
        r, dr = residual(y)
        y = e.op("Sub", y, e.op("Div", r, dr))
    return y


# ------------------------------------------------------------------ inverse trigonometric, hyperbolic
def atan(e, x):
    # tan(y) = x: r = sin(y) - x cos(y), dr = cos(y) + x sin(y); +-pi/2 at +-inf
    y = newton(e, x, "Atan", lambda y: (
        e.op("Sub", e.op("Sin", y), e.op("Mul", x, e.op("Cos", y))),
        e.op("Add", e.op("Cos", y), e.op("Mul", x, e.op("Sin", y)))))
    return e.op("Where", e.op("IsInf", x), e.op("Mul", e.op("Sign", x), e.scalar(np.pi / 2, "float64")), y)


def asin(e, x):
    return newton(e, x, "Asin", lambda y: (e.op("Sub", e.op("Sin", y), x), e.op("Cos", y)))


def acos(e, x):
    return e.op("Sub", e.scalar(np.pi / 2, "float64"), asin(e, x))


def _half(e, x):
    return e.op("Mul", x, e.scalar(0.5, "float64"))


def sinh(e, x):
    return _half(e, e.op("Sub", e.op("Exp", x), e.op("Exp", e.op("Neg", x))))


def cosh(e, x):
    return _half(e, e.op("Add", e.op("Exp", x), e.op("Exp", e.op("Neg", x))))


def asinh(e, x):   # sign(x) log(|x| + sqrt(x^2 + 1)): no cancellation for x < 0
    root = e.op("Sqrt", e.op("Add", e.op("Mul", x, x), e.scalar(1, "float64")))
    return e.op("Mul", e.op("Sign", x), e.op("Log", e.op("Add", e.op("Abs", x), root)))


def acosh(e, x):
    return e.op("Log", e.op("Add", x, e.op("Sqrt", e.op("Sub", e.op("Mul", x, x), e.scalar(1, "float64")))))


def atanh(e, x):
    one = e.scalar(1, "float64")
    return _half(e, e.op("Log", e.op("Div", e.op("Add", one, x), e.op("Sub", one, x))))


# ------------------------------------------------------------------ erf
# ONNX forms in float64 (onnxruntime's Erf is float32 only): below |x| = 2.5 the positive
# series of the kernel (runtime/ops/special_math_ops.py; 40 terms, Horner in x^2), beyond it
# erfc by the continued fraction (40 terms); both within ~1e-15 of the kernel (checked against it over 0..27).
_SERIES = np.cumprod([1.0] + [2 / (2 * n + 1) for n in range(1, 40)])


def erf_parts(e, x):
    """(erf(x), erfc(x)) of a float64 ONNX value, erfc keeping its relative accuracy for x >= 2.5."""
    f64 = "float64"
    a = e.op("Abs", x)
    a2 = e.op("Mul", a, a)
    total = e.scalar(_SERIES[-1], f64)
    for c in _SERIES[-2::-1]:
        total = e.op("Add", e.op("Mul", total, a2), e.scalar(c, f64))
    gauss = e.op("Exp", e.op("Neg", a2))
    series = e.op("Mul", e.op("Mul", e.scalar(2 / _SQRT_PI, f64), gauss), e.op("Mul", a, total))
    far = e.op("Max", a, e.scalar(2.5, f64))    # the fraction only where it converges fast
    frac = far
    for k in range(40, 0, -1):
        frac = e.op("Add", far, e.op("Div", e.scalar(k / 2, f64), frac))
    tail = e.op("Div", e.op("Exp", e.op("Neg", e.op("Mul", far, far))), e.op("Mul", e.scalar(_SQRT_PI, f64), frac))
    near = e.op("Less", a, e.scalar(2.5, f64))
    one = e.scalar(1, f64)
    erf_a = e.op("Where", near, series, e.op("Sub", one, tail))
    erfc_a = e.op("Where", near, e.op("Sub", one, series), tail)
    negative = e.op("Less", x, e.scalar(0, f64))
    return (e.op("Mul", e.op("Sign", x), erf_a),
            e.op("Where", negative, e.op("Add", one, erf_a), erfc_a))
