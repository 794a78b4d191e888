"""Elementwise functions beside math_ops' core ones: inverse trigonometric and hyperbolic
functions, log2/log10, hypot, atan2, logaddexp, reciprocal, ceil, squared_difference.

Declared through the elementwise definer (runtime/ops/elementwise.py), like math_ops;
gradients written with public ops (so they build graph nodes while tracing, and second order
works).
"""
from functools import partial

import numpy as np

from defun.runtime.fused import Elementwise as Ew
from defun.runtime.ops import elementwise, shape_rules
from defun.runtime.ops import math_ops as m
from defun.runtime.ops import _onnx_float64 as f64
from defun.runtime.ops._onnx import with_float64
from defun.runtime.registry import Cost
from defun.runtime.tape import skip_input_indices

__all__ = ["asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "hypot",
           "log2", "log10", "logaddexp", "reciprocal", "ceil", "squared_difference"]


# the elementwise ops' definer (runtime/ops/elementwise.py), defaulting to float kinds here
_unary = partial(elementwise.unary, kinds="f")
_binary = partial(elementwise.binary, kinds="f")


def _pair_grad(partials):
    """A binary gradient from partials(op, g, want_x, want_y) -> (dx, dy) before broadcasting
    is undone; an input no source flows into is not wanted (its entry may be None)."""
    def grad(op, g):
        x, y = op.inputs
        skip = skip_input_indices(op)
        dx, dy = partials(op, g, 0 not in skip, 1 not in skip)
        return [None if 0 in skip else m.unbroadcast(dx, x), None if 1 in skip else m.unbroadcast(dy, y)]
    return grad


def _x(op):
    return op.inputs[0]


# ------------------------------------------------------------------ inverse trigonometric
asin = _unary("asin", np.arcsin, lambda op, g: [m.divide(g, m.sqrt(m.subtract(1, m.square(_x(op)))))],
              doc="Elementwise arcsine, in [-pi/2, pi/2]: `df.asin(1.) -> 1.5708`.",
              onnx=with_float64("Asin", f64.asin),
              fused=Ew("np.arcsin({0})"))
acos = _unary("acos", np.arccos, 
              lambda op, g: [m.negative(m.divide(g, m.sqrt(m.subtract(1, m.square(_x(op))))))],
              doc="Elementwise arccosine, in [0, pi]: `df.acos(1.) -> 0.`.", onnx=with_float64("Acos", f64.acos),
              fused=Ew("np.arccos({0})"))
atan = _unary("atan", np.arctan, lambda op, g: [m.divide(g, m.add(1, m.square(_x(op))))],
              doc="Elementwise arctangent, in (-pi/2, pi/2).", onnx=with_float64("Atan", f64.atan),
              fused=Ew("np.arctan({0})"))


def _atan2_partials(op, g, want_y, want_x):
    y, x = op.inputs
    scale = m.divide(g, m.add(m.square(x), m.square(y)))   # d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)
    return (m.multiply(scale, x) if want_y else None), (m.negative(m.multiply(scale, y)) if want_x else None)


def _atan2_onnx(e, node, ins):
    """atan(y / x), moved by pi into the left half plane; 0 at the origin (numpy's)."""
    y, x = ins
    dt = node.inputs[0].dtype
    zero, pi = e.scalar(0, dt), e.scalar(np.pi, dt)
    ratio = e.op("Div", y, x)
    r = f64.atan(e, ratio) if dt.name == "float64" else e.op("Atan", ratio)
    left = e.op("Where", e.op("Less", y, zero), e.op("Sub", r, pi), e.op("Add", r, pi))
    r = e.op("Where", e.op("Less", x, zero), left, r)
    origin = e.op("And", e.op("Equal", x, zero), e.op("Equal", y, zero))
    return e.op("Where", origin, zero, r)


atan2 = _binary("atan2", np.arctan2, _pair_grad(_atan2_partials), onnx=_atan2_onnx, names=("y", "x"),
                fused=Ew("np.arctan2({0}, {1})"),
                doc="""Elementwise angle of the point (x, y), in [-pi, pi]: y first, as TF's `tf.math.atan2(y, x)`
    and numpy's arctan2: `df.atan2(y=1., x=-1.) -> 2.3562`.""")

# ------------------------------------------------------------------ hyperbolic
sinh = _unary("sinh", np.sinh, lambda op, g: [m.multiply(g, cosh(_x(op)))], doc="Elementwise sinh.",
              onnx=with_float64("Sinh", f64.sinh),
              fused=Ew("np.sinh({0})"))
cosh = _unary("cosh", np.cosh, lambda op, g: [m.multiply(g, sinh(_x(op)))], doc="Elementwise cosh.",
              onnx=with_float64("Cosh", f64.cosh),
              fused=Ew("np.cosh({0})"))
asinh = _unary("asinh", np.arcsinh, lambda op, g: [m.divide(g, m.sqrt(m.add(m.square(_x(op)), 1)))],
               doc="Elementwise inverse hyperbolic sine.", onnx=with_float64("Asinh", f64.asinh),
               fused=Ew("np.arcsinh({0})"))
acosh = _unary("acosh", np.arccosh, lambda op, g: [m.divide(g, m.sqrt(m.subtract(m.square(_x(op)), 1)))],
               doc="Elementwise inverse hyperbolic cosine (x >= 1; NaN below).", onnx=with_float64("Acosh", f64.acosh),
               fused=Ew("np.arccosh({0})"))
atanh = _unary("atanh", np.arctanh, lambda op, g: [m.divide(g, m.subtract(1, m.square(_x(op))))],
               doc="Elementwise inverse hyperbolic tangent (|x| < 1).", onnx=with_float64("Atanh", f64.atanh),
               fused=Ew("np.arctanh({0})"))

# ------------------------------------------------------------------ logarithms, hypot, logaddexp
_LN2, _LN10 = float(np.log(2.0)), float(np.log(10.0))


def _log_base(ln_base):
    return lambda e, node, ins: e.op("Div", e.op("Log", ins[0]), e.scalar(ln_base, node.inputs[0].dtype))
log2 = _unary("log2", np.log2, lambda op, g: [m.divide(g, m.multiply(_x(op), _LN2))],
              doc="Elementwise base-2 logarithm (exact at powers of two).", onnx=_log_base(_LN2),
              fused=Ew("np.log2({0})"))
log10 = _unary("log10", np.log10, lambda op, g: [m.divide(g, m.multiply(_x(op), _LN10))],
               doc="Elementwise base-10 logarithm.", onnx=_log_base(_LN10),
               fused=Ew("np.log10({0})"))


def _hypot_partials(op, g, want_x, want_y):
    (x, y), out = op.inputs, op.outputs[0]
    return ((m.multiply(g, m.divide(x, out)) if want_x else None),
            (m.multiply(g, m.divide(y, out)) if want_y else None))


def _logaddexp_partials(op, g, want_x, want_y):
    # d/dx log(e^x + e^y) = e^(x - out): at most 1, so stable for large inputs
    (x, y), out = op.inputs, op.outputs[0]
    return ((m.multiply(g, m.exp(m.subtract(x, out))) if want_x else None),
            (m.multiply(g, m.exp(m.subtract(y, out))) if want_y else None))


def _hypot_onnx(e, node, ins):
    """m * sqrt((x/m)^2 + (y/m)^2) with m = max(|x|, |y|) (1 where both are 0): no overflow."""
    dt = node.inputs[0].dtype
    big = e.op("Max", e.op("Abs", ins[0]), e.op("Abs", ins[1]))
    big = e.op("Where", e.op("Equal", big, e.scalar(0, dt)), e.scalar(1, dt), big)
    u, v = e.op("Div", ins[0], big), e.op("Div", ins[1], big)
    return e.op("Mul", big, e.op("Sqrt", e.op("Add", e.op("Mul", u, u), e.op("Mul", v, v))))


def _logaddexp_onnx(e, node, ins):
    """max(x, y) + log(1 + exp(-|x - y|))."""
    x, y = ins
    gap = e.op("Exp", e.op("Neg", e.op("Abs", e.op("Sub", x, y))))
    return e.op("Add", e.op("Max", x, y), e.op("Log", e.op("Add", e.scalar(1, node.inputs[0].dtype), gap)))


hypot = _binary("hypot", np.hypot, _pair_grad(_hypot_partials), onnx=_hypot_onnx,
                doc="Elementwise sqrt(x**2 + y**2) without overflow for large inputs.",
                cost=Cost(per_element=15),
                fused=Ew("np.hypot({0}, {1})"))       # measured 7x an add
logaddexp = _binary("logaddexp", np.logaddexp, _pair_grad(_logaddexp_partials), onnx=_logaddexp_onnx,
                    doc="Elementwise log(exp(x) + exp(y)), stable for large |x|, |y|.",
                    fused=Ew("np.logaddexp({0}, {1})"))

# ------------------------------------------------------------------ reciprocal, ceil, squared_difference
reciprocal = _unary("reciprocal", np.reciprocal,
                    lambda op, g: [m.negative(m.multiply(g, m.square(op.outputs[0])))],
                    doc="Elementwise 1 / x (floats; cast integers first).", onnx="Reciprocal")
ceil = _unary("ceil", np.ceil, None, doc="Smallest integer value >= x, elementwise; not differentiable.",
              onnx="Ceil",
              fused=Ew("np.ceil({0})"))


def _squared_difference_kernel(x, y):
    d = np.subtract(x, y)
    return np.multiply(d, d, out=d if isinstance(d, np.ndarray) else None)


def _squared_difference_partials(op, g, want_x, want_y):
    dx = m.multiply(g, m.multiply(m.subtract(op.inputs[0], op.inputs[1]), 2))
    return dx, (m.negative(dx) if want_y else None)


squared_difference = _binary("squared_difference", _squared_difference_kernel,
                             _pair_grad(_squared_difference_partials), kinds=shape_rules.numeric_kinds,
                             onnx=lambda e, node, ins: e.op("Mul", e.op("Sub", *ins), e.op("Sub", *ins)),
                             doc="Elementwise (x - y)**2 with broadcasting.")
