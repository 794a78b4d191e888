"""Elementwise math, matmul, reductions, casts and logic: declarations and public functions.

Each op is declared once with `register(...)`: kernel (numpy), inference, gradient, and its
fused (numba) and ONNX forms. The gradients are written with the public functions below, so
the same rule runs eagerly and builds graph nodes while tracing. The module is long because
those rows stay whole, one per op.
"""
import math

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.fast_dispatch import op_function
from defun.runtime.fused import Elementwise as Ew, Kernel, Reduction
from defun.runtime.ops import _args, elementwise, shape_rules
from defun.runtime.ops._onnx import chain, exact_sum, reduce_form, reduced_axes, wide_int_mean
from defun.runtime.ops.complex_ops import complex, conj, imag, real  # noqa: F401
from defun.runtime.ops.prod_ops import PROD_OTHERS
from defun.runtime.ops.base_ops import (_broadcast_back, _keepdims_grad, _mask, cast,  # noqa: F401
                                        ones_like, reducer, reduce_sum, size, unbroadcast, where,
                                        zeros_like)
from defun.runtime.registry import Cost, register
from defun.runtime.tape import skip_input_indices
from defun.runtime.tensor import EagerTensor, convert_to_tensor, weak_scalar_tensor
from defun.runtime import batching as bt

__all__ = ["add", "subtract", "multiply", "divide", "floordiv", "mod", "pow", "maximum", "minimum",
           "negative", "square", "sqrt", "rsqrt", "exp", "log", "log1p", "tanh", "sigmoid", "relu",
           "abs", "sign", "sin", "cos", "floor", "round", "equal", "not_equal", "less", "less_equal",
           "greater", "greater_equal", "logical_and", "logical_or", "logical_not", "cast", "add_n",
           "matmul", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
           "argmax", "argmin", "unbroadcast", "complex", "real", "imag", "conj", "angle"]

_EMPTY = {}


# A public function `f(x, name=None)` / `f(x, y, name=None)` for an op without attrs: its
# plain eager calls are dispatched by the function itself (runtime.fast_dispatch.op_function).
_public = op_function
_NC, _FC = shape_rules.numeric_complex_kinds, shape_rules.inexact_kinds


# the elementwise ops' definer (runtime/ops/elementwise.py), defaulting to numeric kinds
_unary, _binary = elementwise.unary, elementwise.binary



# ------------------------------------------------------------------ binary arithmetic
# Binary gradients return None for an input in `skip_input_indices(op)` (one no source
# flows into, e.g. the Python constant of `x * 1.01`) instead of computing a gradient the
# tape would drop: for `x * c` that is a multiply and a reduce_sum less.

def _add_grad(op, g):
    x, y = op.inputs
    skip = skip_input_indices(op)
    return [None if 0 in skip else unbroadcast(g, x),
            None if 1 in skip else unbroadcast(g, y)]


def _subtract_grad(op, g):
    x, y = op.inputs
    skip = skip_input_indices(op)
    return [None if 0 in skip else unbroadcast(g, x),
            None if 1 in skip else unbroadcast(negative(g), y)]


def _multiply_grad(op, g):
    # (conj: a complex factor's gradient is conjugated, complex_ops says why; a no-op on reals)
    x, y = op.inputs
    skip = skip_input_indices(op)
    return [None if 0 in skip else unbroadcast(multiply(g, conj(y)), x),
            None if 1 in skip else unbroadcast(multiply(g, conj(x)), y)]


add = _binary("add", np.add, _add_grad, fused=Ew("{0} + {1}"), onnx="Add", kinds=_NC,
              doc="x + y elementwise, with broadcasting. `df.add([1., 2.], 1.) -> [2., 3.]`")
subtract = _binary("subtract", np.subtract, _subtract_grad, fused=Ew("{0} - {1}"),
                   onnx="Sub", kinds=_NC,
                   doc="x - y elementwise, with broadcasting.")
multiply = _binary("multiply", np.multiply, _multiply_grad, fused=Ew("{0} * {1}"),
                   onnx="Mul", kinds=_NC,
                   doc="x * y elementwise, with broadcasting.")


def _divide_kernel(x, y):
    if x.dtype.kind in "iu":
        return np.true_divide(x, y, dtype=np.float64)
    return np.true_divide(x, y)


def _divide_infer(shapes, dts, attrs):
    shape_rules.check_same("divide", dts)
    shape_rules.check_kinds("divide", dts[0], _NC)
    out = dtypes.float64 if dts[0].is_integer else dts[0]
    return [(shape_rules.broadcast_shapes("divide", shapes[0], shapes[1]), out)]


def _divide_grad(op, g):
    x, y = op.inputs
    if not x.dtype.is_inexact:
        return [None, None]
    skip = skip_input_indices(op)
    x, y = conj(x), conj(y)
    return [None if 0 in skip else unbroadcast(divide(g, y), op.inputs[0]),
            None if 1 in skip else unbroadcast(negative(divide(multiply(g, x), multiply(y, y))), op.inputs[1])]


def _divide_onnx(e, node, ins):
    if node.inputs[0].dtype.is_integer:
        return e.op("Div", e.cast(ins[0], dtypes.float64), e.cast(ins[1], dtypes.float64))
    return e.op("Div", *ins)


def _floordiv_onnx(e, node, ins):
    x, y = ins
    if node.inputs[0].dtype.is_integer:   # x - x mod y is a multiple of y: Div is exact on it
        return e.op("Div", e.op("Sub", x, e.op("Mod", x, y)), y)
    return e.op("Floor", e.op("Div", x, y))


def _mod_onnx(e, node, ins):
    x, y = ins
    if node.inputs[0].dtype.is_integer:
        return e.op("Mod", x, y)          # fmod=0: the sign of the divisor, as Python's %
    r = e.op("Mod", x, y, fmod=1)         # C's fmod (sign of x), moved into y's sign as numpy
    zero = e.scalar(0, node.inputs[0].dtype)
    fix = e.op("And", e.op("Not", e.op("Equal", r, zero)),
               e.op("Xor", e.op("Less", r, zero), e.op("Less", y, zero)))
    return e.op("Where", fix, e.op("Add", r, y), r)


_DIVIDE = register(
    name="divide",
    kernel=_divide_kernel,
    infer=_divide_infer,
    grad=_divide_grad,
    num_inputs=2,
    attrs={},
    defaults={},
    same_dtype=(0, 1),
    kinds=_NC,
    fused=Ew("{0} / {1}"),
    onnx=_divide_onnx,
    batch=bt.elementwise,
)
divide = _public(_DIVIDE, "x / y elementwise (true division; integers give float64).")
def _int_division(name, ufunc):
    """`ufunc` (floor_divide, remainder), refusing an integer division by zero as TensorFlow
    does (numpy would warn and give 0); floats divide by zero to inf or nan as usual."""
    def kernel(x, y):
        if y.dtype.kind in "iu" and not np.all(y):
            raise errors.InvalidArgumentError(
                f"{name}: integer division by zero ({x.dtype.name} x {name} y with a 0 in y); "
                f"guard the divisor, e.g. df.where(df.equal(y, 0), df.ones_like(y), y)")
        return ufunc(x, y)
    return kernel


# Fused only for floats: an integer division by zero must raise, which a fused loop cannot.
floordiv = _binary("floordiv", _int_division("floordiv", np.floor_divide), None,
                   fused=Ew("np.floor_divide({0}, {1})", kinds="f"),
                   onnx=_floordiv_onnx, cost=Cost(per_element=20),     # measured 19x an add
                   doc="x // y elementwise (not differentiable); an integer y of 0 raises.")


def _mod_grad(op, g):
    """x mod y = x - floor(x / y) * y, floor's derivative 0 (as TF and jax): d/dx = 1,
    d/dy = -floor(x / y)."""
    x, y = op.inputs
    if not x.dtype.is_floating:
        return [None, None]
    skip = skip_input_indices(op)
    return [None if 0 in skip else unbroadcast(g, x),
            None if 1 in skip else unbroadcast(negative(multiply(g, floordiv(x, y))), y)]


mod = _binary("mod", _int_division("mod", np.mod), _mod_grad, fused=Ew("np.remainder({0}, {1})", kinds="f"),
              onnx=_mod_onnx, cost=Cost(per_element=12),       # measured 11x an add
              doc="x % y elementwise, sign of y as in Python; d/dx = 1, d/dy = -floor(x / y); an integer "
                  "y of 0 raises.")


def _pow_grad(op, g):
    x, y = op.inputs
    skip = skip_input_indices(op)
    if x.dtype.is_complex:
        return _complex_pow_grad(op, g, skip)
    dx = dy = None
    if 0 not in skip:
        # y x^(y - 1), with the exponent 1 where y = 0: d x^0 = 0 also at x = 0, where
        # 0 * 0^-1 would be nan (torch and autograd give 0), and nothing divides by zero
        exponent = where(equal(y, 0), ones_like(y), subtract(y, 1))
        dx = multiply(g, multiply(y, pow(x, exponent)))
    if 1 not in skip:  # `x ** 2` needs no log of x
        safe_log = log(where(greater(x, 0), x, ones_like(x)))
        dy = multiply(g, multiply(op.outputs[0], where(greater(x, 0), safe_log, zeros_like(x))))
    return [None if dx is None else unbroadcast(dx, x), None if dy is None else unbroadcast(dy, y)]


def _complex_pow_grad(op, g, skip):
    # the real rule conjugated; log(0) is taken as 0 (0 ** y has no y-derivative there, as TF)
    x, y = op.inputs
    dx = dy = None
    if 0 not in skip:
        dx = multiply(g, conj(multiply(y, pow(x, subtract(y, 1)))))
    if 1 not in skip:
        zero = equal(x, zeros_like(x))
        safe_log = where(zero, zeros_like(x), log(where(zero, ones_like(x), x)))
        dy = multiply(g, conj(multiply(op.outputs[0], safe_log)))
    return [None if dx is None else unbroadcast(dx, x), None if dy is None else unbroadcast(dy, y)]


def _pow_kernel(x, y):
    if x.dtype.kind in "iu" and np.any(np.asarray(y) < 0):
        raise errors.InvalidArgumentError("pow: integers to negative integer powers are not allowed; cast the "
                                          "base to a float dtype first")
    return np.power(x, y)


pow = _binary("pow", _pow_kernel, _pow_grad, onnx="Pow",  # noqa: A001
              fused=Ew("np.power({0}, {1})", kinds="f"), kinds=_NC,
              cost=Cost(per_element={"c": 100}),    # complex: exp and log per element, measured 37x an add
              doc="x ** y elementwise.")


def _select_grad(x_wins, y_wins):
    """Gradient of maximum/minimum: g flows to x where x_wins(x, y), to y where y_wins(x, y)."""
    def grad(op, g):
        x, y = op.inputs
        skip = skip_input_indices(op)
        return [None if 0 in skip else unbroadcast(multiply(g, _mask(x_wins(x, y), g)), x),
                None if 1 in skip else unbroadcast(multiply(g, _mask(y_wins(x, y), g)), y)]
    return grad


# (the comparison functions are defined below; the lambdas look them up when called)
maximum = _binary("maximum", np.maximum, _select_grad(lambda x, y: greater_equal(x, y), lambda x, y: less(x, y)),
                  fused=Ew("np.maximum({0}, {1})"), onnx="Max", doc="Elementwise maximum; ties send the gradient to x.")
minimum = _binary("minimum", np.minimum, _select_grad(lambda x, y: less_equal(x, y), lambda x, y: greater(x, y)),
                  fused=Ew("np.minimum({0}, {1})"), onnx="Min", doc="Elementwise minimum; ties send the gradient to x.")

# ------------------------------------------------------------------ unary
negative = _unary("negative", np.negative, lambda op, g: [negative(g)], doc="-x elementwise.", onnx="Neg",
                  fused=Ew("-{0}"), kinds=_NC)
square = _unary("square", np.square, lambda op, g: [multiply(g, multiply(conj(op.inputs[0]), 2))],
                fused=Ew("{0} * {0}"), kinds=_NC,
                onnx=lambda e, node, ins: e.op("Mul", ins[0], ins[0]))
sqrt = _unary("sqrt", np.sqrt, lambda op, g: [divide(multiply(g, 0.5), conj(op.outputs[0]))], kinds=_FC,
              fused=Ew("np.sqrt({0})"),
              onnx="Sqrt")
rsqrt = _unary("rsqrt", lambda x: 1 / np.sqrt(x),
               lambda op, g: [multiply(multiply(g, -0.5), pow(op.outputs[0], 3))], kinds="f",
               doc="1 / sqrt(x) elementwise.", fused=Ew("1.0 / np.sqrt({0})"), onnx=chain("Sqrt", "Reciprocal"))
exp = _unary("exp", np.exp, lambda op, g: [multiply(g, conj(op.outputs[0]))], kinds=_FC,
             fused=Ew("np.exp({0})"), onnx="Exp")
log = _unary("log", np.log, lambda op, g: [divide(g, conj(op.inputs[0]))], kinds=_FC, onnx="Log",
             fused=Ew("np.log({0})"))
log1p = _unary("log1p", np.log1p, lambda op, g: [divide(g, add(op.inputs[0], 1))], kinds="f",
               fused=Ew("np.log1p({0})"),
               onnx=lambda e, node, ins: e.op("Log", e.op("Add", ins[0], e.scalar(1, node.inputs[0].dtype))))
tanh = _unary("tanh", np.tanh,
              lambda op, g: [multiply(g, conj(subtract(1, square(op.outputs[0]))))], kinds=_FC,
              fused=Ew("np.tanh({0})"), onnx="Tanh")


def _sigmoid(x):
    # 0.5 * (1 + tanh(x / 2)): stable for large |x| and keeps the dtype.
    return (np.tanh(x * x.dtype.type(0.5)) + x.dtype.type(1)) * x.dtype.type(0.5)


sigmoid = _unary("sigmoid", _sigmoid,
                 lambda op, g: [multiply(g, multiply(op.outputs[0], subtract(1, op.outputs[0])))], kinds="f",
                 fused=Ew("(np.tanh({0} * 0.5) + 1.0) * 0.5"),
                 onnx="Sigmoid", cost=Cost(per_element=10))     # measured 9x an add
relu = _unary("relu", lambda x: np.maximum(x, x.dtype.type(0)),
              lambda op, g: [multiply(g, _mask(greater(op.inputs[0], 0), g))], doc="max(features, 0) elementwise.",
              fused=Ew("np.maximum({0}, 0)"), names=("features",),
              onnx=lambda e, node, ins: e.op("Max", ins[0], e.scalar(0, node.inputs[0].dtype)))
def _abs_infer(shapes, dts, attrs):
    shape_rules.check_kinds("abs", dts[0], _NC)
    return [(tuple(shapes[0]), dts[0].real_dtype)]   # |z| of a complex z is real


def _abs_grad(op, g):
    x = op.inputs[0]
    if not x.dtype.is_complex:
        return [multiply(g, sign(x))]
    # g z / |z| (0 at z = 0, as TF): the real gradient times the unit vector of z
    a = op.outputs[0]
    safe = where(equal(a, 0), ones_like(a), a)
    return [multiply(cast(divide(g, safe), x.dtype), x)]


_ABS = register(
    name="abs",
    kernel=np.abs,
    infer=_abs_infer,
    grad=_abs_grad,
    num_inputs=1,
    attrs={},
    defaults={},
    kinds=_NC,
    fused=Ew("np.abs({0})"),
    onnx="Abs",
    batch=bt.elementwise,
)
abs = _public(_ABS, "|x| elementwise (the modulus of a complex x, a real tensor).")  # noqa: A001
def _angle_infer(shapes, dts, attrs):
    shape_rules.check_kinds("angle", dts[0], _FC)
    return [(tuple(shapes[0]), dts[0].real_dtype)]


def _angle_grad(op, g):
    z = op.inputs[0]
    if not z.dtype.is_complex:
        return [None]     # 0 or pi: piecewise constant on the reals
    # d angle = (x dy - y dx) / |z|^2, so the gradient is i g / conj(z)
    return [divide(complex(zeros_like(g), g), conj(z))]


_ANGLE = register(
    name="angle",
    kernel=lambda x: np.angle(x).astype(x.real.dtype, copy=False),
    infer=_angle_infer,
    grad=_angle_grad,
    num_inputs=1,
    attrs={},
    defaults={},
    kinds=_FC,
    batch=bt.elementwise,
)
angle = _public(_ANGLE, "The argument of a complex input in (-pi, pi] (real: 0 or pi, as TF).", names=("input",))
sign = _unary("sign", np.sign, None, doc="Sign of x (-1, 0, 1); not differentiable.",
              fused=Ew("np.sign({0})"), onnx="Sign")
sin = _unary("sin", np.sin, lambda op, g: [multiply(g, conj(cos(op.inputs[0])))], kinds=_FC, onnx="Sin",
             fused=Ew("np.sin({0})"), cost=Cost(per_element=12))    # measured 8-12x an add
cos = _unary("cos", np.cos, lambda op, g: [negative(multiply(g, conj(sin(op.inputs[0]))))], kinds=_FC,
             fused=Ew("np.cos({0})"), onnx="Cos", cost=Cost(per_element=12))
floor = _unary("floor", np.floor, None, kinds="f", doc="Floor of x; not differentiable.",
               fused=Ew("np.floor({0})"), onnx="Floor")
round = _unary("round", np.round, None, kinds="f",  # noqa: A001
               doc="Round half to even, as numpy and TensorFlow; not differentiable.",
               fused=Ew("np.rint({0})"), onnx="Round")

# ------------------------------------------------------------------ comparison and logic


def _compare(name, kernel, expr, onnx, kinds=shape_rules.ordered_kinds):
    op = register(
        name=name,
        kernel=kernel,
        infer=shape_rules.binary_broadcast(name, kinds, dtypes.bool),
        grad=None,
        num_inputs=2,
        attrs={},
        defaults={},
        same_dtype=(0, 1),
        kinds=kinds,
        fused=Ew(expr),
        onnx=onnx,
        batch=bt.elementwise,
    )
    return _public(op, f"Elementwise {name}(x, y) -> bool (not differentiable).")


# (equal and not_equal take every dtype; the orderings refuse complex values, which have none)
equal = _compare("equal", np.equal, "{0} == {1}", "Equal", None)
not_equal = _compare("not_equal", np.not_equal, "{0} != {1}", lambda e, node, ins: e.op("Not", e.op("Equal", *ins)),
                     None)
less = _compare("less", np.less, "{0} < {1}", "Less")
less_equal = _compare("less_equal", np.less_equal, "{0} <= {1}", "LessOrEqual")
greater = _compare("greater", np.greater, "{0} > {1}", "Greater")
greater_equal = _compare("greater_equal", np.greater_equal, "{0} >= {1}", "GreaterOrEqual")
logical_and = _binary("logical_and", np.logical_and, None, kinds="b", onnx="And", fused=Ew("{0} and {1}"))
logical_or = _binary("logical_or", np.logical_or, None, kinds="b", fused=Ew("{0} or {1}"), onnx="Or")
logical_not = _unary("logical_not", np.logical_not, None, kinds="b", fused=Ew("not {0}"), onnx="Not")



def _add_n_infer(shapes, dts, attrs):
    """One dtype and one shape (sizes unknown while tracing merge): add_n does not broadcast,
    as in TF."""
    shape_rules.check_same("add_n", dts)
    out = tuple(shapes[0])
    for k, s in enumerate(shapes[1:], 1):
        if not shape_rules.shapes_compatible(out, s):
            raise errors.InvalidArgumentError(
                f"add_n: inputs must have the same shape (add_n does not broadcast; use df.add), got "
                f"{', '.join(shape_rules.shape_str(x) for x in shapes)}")
        out = tuple(b if a is None else a for a, b in zip(out, s))
    return [(out, dts[0])]


def _add_n_kernel(*xs):
    d0, s0 = xs[0].dtype, xs[0].shape
    for x in xs:
        if x.dtype != d0:
            raise errors.InvalidArgumentError(
                f"add_n: inputs must have the same dtype, got {', '.join(v.dtype.name for v in xs)}")
        if x.shape != s0:
            raise errors.InvalidArgumentError(
                f"add_n: inputs must have the same shape (add_n does not broadcast; use df.add), got "
                f"{', '.join(str(v.shape) for v in xs)}")
    acc = xs[0]
    for x in xs[1:]:
        acc = acc + x
    return acc


def _add_n_onnx(e, node, ins):
    acc = ins[0]
    for x in ins[1:]:
        acc = e.op("Add", acc, x)   # (ONNX Sum takes floats only)
    return acc


_ADD_N = register(
    name="add_n",
    kernel=_add_n_kernel,
    infer=_add_n_infer,
    grad=lambda op, g: [unbroadcast(g, x) for x in op.inputs],
    num_inputs=None,
    attrs={},
    defaults={},
    kinds=_NC,
    fused=Ew(lambda n: " + ".join(f"{{{k}}}" for k in range(n))),
    onnx=_add_n_onnx,
    # unbatched inputs materialized: the shapes stay equal
    batch=bt.leading,
)     # unbatched inputs materialized: the shapes stay equal


def add_n(inputs, name=None):
    """Sum of a list of tensors (used to aggregate gradients)."""
    inputs = list(inputs)
    if not inputs:
        raise _args.error("add_n needs at least one input")
    if len(inputs) == 1:
        return inputs[0]
    return run_op(_ADD_N, inputs, _EMPTY, name)


# ------------------------------------------------------------------ matmul
def _matmul_kernel(a, b, transpose_a=False, transpose_b=False):
    if a.ndim < 2 or b.ndim < 2:  # numpy would take vectors; inference (and TF) do not
        raise errors.InvalidArgumentError(
            f"matmul: inputs must have rank >= 2, got shapes {a.shape} and {b.shape}")
    # the method `x.swapaxes`, not np.swapaxes: the same view, -0.3 us per transpose
    if transpose_a:
        a = a.swapaxes(-1, -2)
    if transpose_b:
        b = b.swapaxes(-1, -2)
    return _np_matmul(a, b)


def _bind_matmul(attrs):
    """The graph kernel: `_matmul_kernel` with its transposes chosen at compile time (the
    ranks are static, checked by inference); -1.2 us per call against the keyword kernel."""
    ta, tb = attrs.get("transpose_a", False), attrs.get("transpose_b", False)
    if ta and tb:
        return lambda a, b: _np_matmul(a.swapaxes(-1, -2), b.swapaxes(-1, -2))
    if ta:
        return lambda a, b: _np_matmul(a.swapaxes(-1, -2), b)
    if tb:
        return lambda a, b: _np_matmul(a, b.swapaxes(-1, -2))
    return _np_matmul


_np_matmul = np.matmul


def _matmul_infer(shapes, dts, attrs):
    shape_rules.check_same("matmul", dts)
    shape_rules.check_kinds("matmul", dts[0], _NC)
    a, b = shapes
    if len(a) < 2 or len(b) < 2:
        raise errors.InvalidArgumentError(
            f"matmul: inputs must have rank >= 2, got shapes {shape_rules.shape_str(a)} and {shape_rules.shape_str(b)}")
    m, k1 = (a[-1], a[-2]) if attrs.get("transpose_a") else (a[-2], a[-1])
    k2, n = (b[-1], b[-2]) if attrs.get("transpose_b") else (b[-2], b[-1])
    if k1 is not None and k2 is not None and k1 != k2:
        raise errors.InvalidArgumentError(
            f"matmul: inner dimensions differ: {shape_rules.shape_str(a)} x {shape_rules.shape_str(b)} "
            f"(transpose_a={attrs.get('transpose_a', False)}, transpose_b={attrs.get('transpose_b', False)})")
    batch = shape_rules.broadcast_shapes("matmul", a[:-2], b[:-2])
    return [(batch + (m, n), dts[0])]


def _matmul_grad(op, g):
    a, b = op.inputs
    ta, tb = op.attrs.get("transpose_a", False), op.attrs.get("transpose_b", False)
    skip = skip_input_indices(op)  # e.g. the input batch of `x @ w`: one matmul less
    if a.dtype.is_complex:   # the adjoints: conjugate transposes
        a, b = conj(a), conj(b)
    da = db = None
    if not ta and not tb:
        if 0 not in skip:
            da = matmul(g, b, transpose_b=True)
        if 1 not in skip:
            db = matmul(a, g, transpose_a=True)
    elif ta and not tb:
        if 0 not in skip:
            da = matmul(b, g, transpose_b=True)
        if 1 not in skip:
            db = matmul(a, g)
    elif not ta and tb:
        if 0 not in skip:
            da = matmul(g, b)
        if 1 not in skip:
            db = matmul(g, a, transpose_a=True)
    else:
        if 0 not in skip:
            da = matmul(b, g, transpose_a=True, transpose_b=True)
        if 1 not in skip:
            db = matmul(g, a, transpose_a=True, transpose_b=True)
    return [None if da is None else unbroadcast(da, op.inputs[0]),
            None if db is None else unbroadcast(db, op.inputs[1])]


def _matmul_loops(a, b, transpose_a, transpose_b):
    """The fused form (numba-compilable loops) of a small 2-D float matmul, the innermost
    loop contiguous in `b` and the result (a transposed `b` is copied once: k * n copies
    against m * k * n multiply-adds)."""
    m = a.shape[1] if transpose_a else a.shape[0]
    k = a.shape[0] if transpose_a else a.shape[1]
    n = b.shape[0] if transpose_b else b.shape[1]
    bb = np.ascontiguousarray(b.T) if transpose_b else b
    out = np.zeros((m, n), a.dtype)
    for i in range(m):
        for p in range(k):
            aip = a[p, i] if transpose_a else a[i, p]
            for j in range(n):
                out[i, j] += aip * bb[p, j]
    return out


_SMALL_MATMUL = 1 << 15     # m * k * n up to this: loops in the fused region beat a BLAS call


def _fused_matmul(node):
    """2-D float matmuls run in fused regions (loops, or BLAS: `_matmul_source`)."""
    (a, b), out = node.inputs, node.outputs[0]
    return len(a.shape) == 2 and len(b.shape) == 2 and out.dtype.is_floating


def _matmul_source(node):
    """A large (or unknown-size) matmul in a fused region: numba's `np.dot`, which calls
    BLAS (through scipy's), on the operands as they are laid out (a transpose is a view)."""
    (a, b), out = node.inputs, node.outputs[0]
    k = a.shape[0] if node.attrs.get("transpose_a") else a.shape[1]
    if None not in out.shape and k is not None and out.shape[0] * out.shape[1] * k <= _SMALL_MATMUL:
        return None
    return (f"np.dot({{0}}{'.T' if node.attrs.get('transpose_a') else ''}, "
            f"{{1}}{'.T' if node.attrs.get('transpose_b') else ''})")


def _matmul_onnx(e, node, ins):
    ins = list(ins)
    for k, flag in enumerate(("transpose_a", "transpose_b")):
        if node.attrs.get(flag):
            perm = list(range(len(node.inputs[k].shape)))
            perm[-2:] = perm[-1], perm[-2]
            ins[k] = e.op("Transpose", ins[k], perm=perm)
    return e.op("MatMul", *ins)


def _matmul_work(shapes, out_shapes, attrs):
    """A multiply-add per output entry and entry of the contracted axis."""
    a = shapes[0]
    k = (a[-2] if attrs.get("transpose_a") else a[-1]) if len(a) >= 2 else (a[-1] if a else 1)
    return math.prod(out_shapes[0]) * k


def _matmul_batch(ctx, node, inputs, batched):
    """A batched left operand times a shared matrix is one matrix product of the rows
    (B * rows, k) @ (k, n); anything else broadcasts its leading axes (elementwise)."""
    a, b = node.inputs
    if batched[0] and not batched[1] and len(b.shape) == 2 and not node.attrs.get("transpose_a") \
            and None not in tuple(a.shape) and a.shape[-1]:     # (k of 0: no -1 fits the rows)
        k = a.shape[-1]
        out = bt.emit(node, [bt.op("reshape", [inputs[0]], shape=(-1, k)), inputs[1]])[0]
        return bt.all_batched([bt.reshape_batch(ctx, out, bt.static_shape(node, node.outputs[0], "output"))])
    ta, tb = node.attrs.get("transpose_a"), node.attrs.get("transpose_b")
    ka = a.shape[-2] if ta else a.shape[-1]
    if all(batched) and ka == 1 and None not in tuple(a.shape) + tuple(b.shape):
        # a contraction of size 1 is an outer product: a broadcasting multiply, ~2.5x
        # faster than numpy's stacked matmul of (m, 1) @ (1, n) (per-example weight gradients)
        m, n = (a.shape[-1] if ta else a.shape[-2]), (b.shape[-2] if tb else b.shape[-1])
        r = max(len(a.shape), len(b.shape))
        x = bt.reshape_batch(ctx, inputs[0], tuple(a.shape[:-2]) + (m, 1))
        y = bt.reshape_batch(ctx, inputs[1], tuple(b.shape[:-2]) + (1, n))
        x, y = bt.expand_rank(x, len(a.shape), r), bt.expand_rank(y, len(b.shape), r)
        return bt.all_batched([bt.op("multiply", [x, y])])
    return bt.elementwise(ctx, node, inputs, batched)


_MATMUL = register(
    name="matmul",
    kernel=_matmul_kernel,
    infer=_matmul_infer,
    grad=_matmul_grad,
    num_inputs=2,
    attrs={"transpose_a": "bool", "transpose_b": "bool"},
    defaults={"transpose_a": False, "transpose_b": False},
    same_dtype=(0, 1),
    kinds=_NC,
    bind=_bind_matmul,
    fused=Kernel(_matmul_loops, ("transpose_a", "transpose_b"), _fused_matmul, _matmul_source),
    onnx=_matmul_onnx,
    batch=_matmul_batch,
    cost=Cost(work=_matmul_work),
)
_MM_ATTRS = {(False, False): _EMPTY}


def matmul(a, b, transpose_a=False, transpose_b=False, name=None):
    """Matrix product of 2-D or batched inputs: `df.matmul(x, w)` == `x @ w`."""
    key = (_args.bool_arg("matmul", transpose_a, "transpose_a"), _args.bool_arg("matmul", transpose_b, "transpose_b"))
    attrs = _MM_ATTRS.get(key)
    if attrs is None:
        attrs = _MM_ATTRS[key] = {"transpose_a": key[0], "transpose_b": key[1]}
    return run_op(_MATMUL, (a, b), attrs, name)



def _count(op):
    x, y = op.inputs[0], op.outputs[0]
    nx, ny = shape_rules.num_elements(x.shape), shape_rules.num_elements(y.shape)
    if nx is not None and ny is not None:
        return nx // max(ny, 1) if ny else 1
    if ny == 1:     # a relaxed trace's mean of everything: the size alone (exact in float64 first too)
        return cast(size(x), x.dtype)
    return cast(divide(size(x), size(y)), x.dtype)


def _mean_grad(op, g):
    # divide the small gradient before broadcasting it back to the input's size
    n = _count(op)
    if isinstance(n, int) and g.dtype.is_floating:
        # a tensor: the dispatcher's fast path; eagerly a cached one (-1.5 us)
        t = weak_scalar_tensor(n, g._value.dtype) if type(g) is EagerTensor else None
        n = t if t is not None else convert_to_tensor(np.asarray(n, g.dtype.np))
    return [_broadcast_back(divide(_keepdims_grad(g, op), n), op.inputs[0])]


def _extreme_grad(op, g):
    x, y = op.inputs[0], op.outputs[0]
    yk = _keepdims_grad(y, op)
    mask = _mask(equal(x, yk), x)
    counts = reduce_sum(mask, axis=op.attrs.get("axis"), keepdims=True)
    return [divide(multiply(_keepdims_grad(g, op), mask), counts)]


def _prod_grad(op, g):
    # d prod / d x_i = product of the others; computed without dividing by x (zeros safe)
    x = op.inputs[0]
    others = run_op(PROD_OTHERS, (x,), {"axis": op.attrs.get("axis")})
    return [multiply(_broadcast_back(_keepdims_grad(g, op), x), conj(others))]


_max_reduce, _min_reduce, _mul_reduce = np.maximum.reduce, np.minimum.reduce, np.multiply.reduce


def _k_mean(x, axis, keepdims):
    if x.dtype.kind in "iu":  # integer mean truncates toward zero, as TensorFlow's does
        return _int_mean(x, axis, keepdims)
    s = np.add.reduce(x, axis, x.dtype, None, keepdims)
    n = s.size  # s is an array or a numpy scalar: both have .size (np.size costs ~0.4 us)
    return s / x.dtype.type(x.size // n if n else 1)


def _int_mean(x, axis, keepdims):
    """The exact mean of integers, truncated toward zero: narrow ones sum in int64; 64-bit ones
    as sum(x // n) + sum(x % n) // n (floor division), which no sum can overflow past (a
    wrap of the first sum by the rounding of its terms is undone by the second, in arrays,
    where integer arithmetic wraps without a warning)."""
    s = np.sum(x, axis=axis, keepdims=True, dtype=np.int64 if x.dtype.itemsize < 8 else x.dtype)
    n = max(x.size // max(s.size, 1), 1)
    if x.dtype.itemsize < 8:
        q = np.abs(s) // n
        m = np.where(s < 0, -q, q)
    else:
        r = np.sum(x % n, axis=axis, keepdims=True, dtype=x.dtype)
        m = np.sum(x // n, axis=axis, keepdims=True, dtype=x.dtype) + r // n
        if x.dtype.kind == "i":     # the floor, moved toward zero when negative and inexact
            m = m + ((r % n != 0) & (m < 0))
    m = m.astype(x.dtype, copy=False)
    return m if keepdims else np.squeeze(m, axis=axis)


def _k_max(x, axis, keepdims):
    return _max_reduce(x, axis, None, None, keepdims)


def _k_min(x, axis, keepdims):
    return _min_reduce(x, axis, None, None, keepdims)


def _k_prod(x, axis, keepdims):
    return _mul_reduce(x, axis, x.dtype, None, keepdims)


def _mean_onnx(e, node, ins):
    x = node.inputs[0]
    axes, keep = reduced_axes(node), node.attrs.get("keepdims", False)
    if x.dtype.is_floating:
        if all(x.shape[a] for a in (range(len(x.shape)) if axes is None else axes)):   # known, not 0
            return e.reduce("ReduceMean", ins[0], axes, keep)
        # a count that may be 0 (an unknown size): the sum over the count, NaN where there is
        # nothing to average, as numpy's (onnxruntime's ReduceMean of nothing is 0)
        s = e.reduce("ReduceSum", ins[0], axes, keep)
        one = e.scalar(1, dtypes.int64)
        return e.op("Div", s, e.cast(e.op("Div", e.op("Size", ins[0]), e.op("Max", e.op("Size", s), one)), x.dtype))
    # integers: the exact mean truncated toward zero, as the kernel's; narrow ones: the int64
    # sum divided by the count (Div truncates); int64 (uint64 has no form): as the kernel
    wide = x.dtype.np.itemsize == 8
    v = ins[0] if wide else e.cast(ins[0], dtypes.int64)

    def total(t):
        return exact_sum(e, t, axes, keep, dtypes.int64, len(x.shape))
    one = e.scalar(1, dtypes.int64)
    dims = [x.shape[a] for a in (range(len(x.shape)) if axes is None else axes)]
    if None not in dims:
        n = e.scalar(max(int(np.prod(dims)), 1), dtypes.int64)
    else:
        s = e.reduce("ReduceSum", v, axes, keep)     # only its size is read
        n = e.op("Max", e.op("Div", e.op("Size", ins[0]), e.op("Max", e.op("Size", s), one)), one)
    if not wide:
        return e.cast(e.op("Div", total(v), n), x.dtype)
    return wide_int_mean(e, v, n, total, dtypes.int64)


reduce_mean = reducer("reduce_mean", _k_mean, _mean_grad, kinds=_NC,
                      fused=Reduction("0", "{acc} + {x}", "{acc} / {n}", kinds="f"), onnx=_mean_onnx)
reduce_max = reducer("reduce_max", _k_max, _extreme_grad, ufunc=_max_reduce,
                     fused=Reduction("lowest", "np.maximum({acc}, {x})", identity=False), onnx=reduce_form("ReduceMax"))
reduce_min = reducer("reduce_min", _k_min, _extreme_grad, ufunc=_min_reduce,
                     fused=Reduction("highest", "np.minimum({acc}, {x})", identity=False),
                     onnx=reduce_form("ReduceMin"))
reduce_prod = reducer("reduce_prod", _k_prod, _prod_grad, ufunc=_mul_reduce, keep_dtype=True, kinds=_NC,
                      fused=Reduction("1", "{acc} * {x}"),
                      onnx=reduce_form("ReduceProd"))


def _arg_infer(name):
    def infer(shapes, dts, attrs):
        shape_rules.check_kinds(name, dts[0], shape_rules.numeric_kinds)
        shape = shape_rules.reduced_shape(name, shapes[0], attrs["axis"], False)
        out = attrs.get("output_type", dtypes.int64)
        if out not in (dtypes.int32, dtypes.int64):
            raise errors.InvalidArgumentError(
                f"{name}: output_type must be int32 or int64 (an index), got {out.name}")
        return [(shape, out)]
    return infer


def _arg_onnx(onnx_type):
    def form(e, node, ins):
        axis = node.attrs["axis"] % max(len(node.inputs[0].shape), 1)
        return e.cast(e.op(onnx_type, ins[0], axis=axis, keepdims=0), node.attrs["output_type"])
    return form


def _arg(name, fn, onnx):
    op = register(
        name=name,
        kernel=lambda x, axis, output_type: fn(x, axis=axis).astype(output_type.np),
        infer=_arg_infer(name),
        grad=None,
        num_inputs=1,
        attrs={"axis": "int", "output_type": "dtype"},
        defaults={"output_type": dtypes.int64},
        kinds=shape_rules.numeric_kinds,
        onnx=onnx,
        batch=bt.axes("axis"),
    )

    def f(input, axis=None, output_type=dtypes.int64, name=None):
        # axis=None means axis 0, as in TensorFlow
        axis = 0 if axis is None else _args.int_arg(op.name, axis, "axis")
        out = dtypes.as_dtype(output_type)
        if out not in (dtypes.int32, dtypes.int64):
            raise _args.error(f"{op.name}: output_type must be int32 or int64 (an index), got {out.name}")
        return run_op(op, (input,), {"axis": axis, "output_type": out}, name)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Index of the {name[3:]}imum along `axis` (int64; not differentiable)."
    return f


argmax = _arg("argmax", np.argmax, _arg_onnx("ArgMax"))
argmin = _arg("argmin", np.argmin, _arg_onnx("ArgMin"))
