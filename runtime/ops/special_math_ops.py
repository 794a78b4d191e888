"""More elementwise math, clipping, log-sum-exp, logical and norm reductions, and `eye`:
declarations and public functions (cumulative sums and products: cumulative_ops.py).

Each op is declared once with its kernel, inference and gradient; gradients are written with
the public functions, so they build graph nodes while tracing and differentiate again.

(This module is long because each op keeps its kernel, inference, gradient and ONNX form together.)
"""
from functools import partial

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.fused import Elementwise as Ew
from defun.runtime.ops import _args, _costs, elementwise, shape_rules
from defun.runtime.ops import _onnx_float64 as f64
from defun.runtime.ops._onnx import reduced_axes, with_float64
from defun.runtime.ops.array_ops import ones_like, where, zeros_like
from defun.runtime.ops.base_ops import _keepdims_grad, _reduce_infer
from defun.runtime.ops.math_ops import (abs, add, cast,
                                        divide, equal, exp, greater, less, less_equal, logical_and, logical_not,
                                        minimum, multiply, negative, pow, reduce_sum, sigmoid, sign,
                                        square, subtract, tanh, unbroadcast)
from defun.runtime.registry import Cost, register
from defun.runtime.tape import skip_input_indices
from defun.runtime import batching as bt

__all__ = ["tan", "expm1", "erf", "softplus", "elu", "leaky_relu", "gelu", "is_nan", "is_finite",
           "clip_by_value", "reduce_logsumexp", "reduce_any", "reduce_all", "norm", "eye"]

_EMPTY = {}


# the elementwise ops' definer (runtime/ops/elementwise.py), defaulting to float kinds here
_unary = partial(elementwise.unary, kinds=shape_rules.float_kinds)


# ------------------------------------------------------------------ erf
# numpy has no erf. By |x|: below 0.5 the Maclaurin series (alternating, terms shrink fast);
# up to 2 the series erf(x) = 2/sqrt(pi) exp(-x^2) sum 2^n x^(2n+1) / (2n+1)!!, whose terms are
# all positive (no cancellation); beyond, erfc by its continued fraction. Each range runs as
# many terms as its worst case needs (fewer further out); every loop runs over terms, each
# step vectorized over the elements of that range. Within ~1e-15 relative of the true value
# in float64 (tests/test_ops_math.py checks it against scipy over 1e-300..30).
_SQRT_PI = np.sqrt(np.pi)
_TAYLOR = [(-1) ** n / (np.prod(np.arange(1.0, n + 1)) * (2 * n + 1)) for n in range(14)]
_POSITIVE = 2.0 / (2 * np.arange(40) + 1)


def _exp_neg_square(x):
    """exp(-x*x) with x*x taken exactly as hi + lo (Dekker's split): the rounding of x*x
    would otherwise cost up to x^2 * 1.1e-16 relative (4e-15 at x = 6)."""
    c = 134217729.0 * x  # 2^27 + 1
    xh = c - (c - x)
    xl = x - xh
    hi = x * x
    lo = ((xh * xh - hi) + 2 * xh * xl) + xl * xl
    return np.exp(-hi) * (1 - lo)


def _erf_small(a, terms):
    a2 = a * a
    total = np.zeros_like(a)
    for c in reversed(_TAYLOR[:terms]):
        total *= a2
        total += c
    return (2 / _SQRT_PI) * a * total


def _erf_middle(a, terms):
    a2 = a * a
    total = np.ones_like(a)
    for c in _POSITIVE[terms - 1:0:-1]:
        total *= a2
        total *= c
        total += 1
    return (2 / _SQRT_PI) * _exp_neg_square(a) * a * total


def _erfc_large(a, terms):
    """erfc(a) for a >= 2: exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + ...))))."""
    f = a.copy()
    for k in range(terms, 0, -1):
        f = a + (k / 2) / f
    return _exp_neg_square(a) / (_SQRT_PI * f)


# (upper end of the |x| range, evaluation, terms for 1e-16 there); past 6 erf is 1 in float64
# and only erfc is computed; past 27 erfc underflows to 0.
_ERF_RANGES = ((0.5, _erf_small, 14), (1.0, _erf_middle, 20), (1.5, _erf_middle, 26), (2.0, _erf_middle, 32),
               (3.0, _erfc_large, 52), (4.0, _erfc_large, 30), (6.0, _erfc_large, 22), (10.0, _erfc_large, 14),
               (27.0, _erfc_large, 10))
_ERF_EDGES = np.array([r[0] for r in _ERF_RANGES])


def _erf_parts(x, tails=False):
    """(erf(|x|), erfc(|x|) where |x| >= 2 (0 elsewhere), that mask), in float64; erfc only
    up to |x| = 6 unless `tails`."""
    a = np.abs(x.astype(np.float64, copy=False)).reshape(-1)
    out = np.ones_like(a)
    out[np.isnan(a)] = np.nan
    tail = np.zeros_like(a)
    where_ = np.searchsorted(_ERF_EDGES, a, side="right")  # nan and inf: past the last range
    for k, (edge, fn, terms) in enumerate(_ERF_RANGES):
        if edge > 6 and not tails:
            break
        at = np.flatnonzero(where_ == k)
        if not at.size:
            continue
        if fn is _erfc_large:
            tail[at] = t = fn(a[at], terms)
            out[at] = 1 - t
        else:
            out[at] = fn(a[at], terms)
    return out.reshape(x.shape), tail.reshape(x.shape), (a >= 2).reshape(x.shape)


def _erf_kernel(x):
    return np.copysign(_erf_parts(x)[0], x).astype(x.dtype, copy=False)


def _erfc(x):
    """erfc(x) = 1 - erf(x) in float64, keeping its relative accuracy where it is tiny (x >= 2)."""
    e, tail, big = _erf_parts(x, tails=True)
    pos = np.where(big, tail, 1 - e)
    return np.where(x < 0, 1 + e, pos)


# Constants in gradient rules are Python floats: weakly typed, they take the gradient's dtype
# (a numpy float64 scalar is strongly typed and a float32 rule would refuse it).
_TWO_OVER_SQRT_PI = float(2 / _SQRT_PI)
erf = _unary("erf", _erf_kernel,
             lambda op, g: [multiply(g, multiply(exp(negative(square(op.inputs[0]))), _TWO_OVER_SQRT_PI))],
             doc="The error function: `df.erf(0.5) -> 0.5205`.",
             onnx=with_float64("Erf", lambda e, x: f64.erf_parts(e, x)[0]),
             cost=Cost(per_element=40))     # a series per range of |x|: measured 18x an add


def _expm1_onnx(e, x, dt):
    """exp(x) - 1, accurate near 0: (u - 1) x / log(u) with u = exp(x) where |x| < 0.5 (the
    rounding of u cancels), exactly x where u rounds to 1."""
    u = e.op("Exp", x)
    um1 = e.op("Sub", u, e.scalar(1, dt))
    near = e.op("Div", e.op("Mul", um1, x), e.op("Log", u))
    near = e.op("Where", e.op("Equal", um1, e.scalar(0, dt)), x, near)
    return e.op("Where", e.op("Less", e.op("Abs", x), e.scalar(0.5, dt)), near, um1)


# ------------------------------------------------------------------ elementwise
tan = _unary("tan", np.tan, lambda op, g: [multiply(g, add(square(op.outputs[0]), 1))],
             doc="Elementwise tangent; the gradient is 1 + tan(x)^2.",
             onnx=with_float64("Tan", lambda e, x: e.op("Div", e.op("Sin", x), e.op("Cos", x))),
             fused=Ew("np.tan({0})"))
expm1 = _unary("expm1", np.expm1, lambda op, g: [multiply(g, exp(op.inputs[0]))],
               doc="exp(x) - 1, accurate near 0: `df.expm1(1e-10) -> 1e-10`.",
               onnx=lambda e, node, ins: _expm1_onnx(e, ins[0], node.inputs[0].dtype),
               fused=Ew("np.expm1({0})"))
# logaddexp(0, x) = max(x, 0) + log1p(exp(-|x|)): no overflow at +-1000
softplus = _unary("softplus", lambda x: np.logaddexp(x.dtype.type(0), x),
                  lambda op, g: [multiply(g, sigmoid(op.inputs[0]))],
                  doc="log(1 + exp(features)), stable for large |x|: `df.softplus(1000.) -> 1000.`.",
                  names=("features",), cost=Cost(per_element=30),    # measured 17x an add
                  onnx=lambda e, node, ins: e.op(
                      "Add", e.op("Max", ins[0], e.scalar(0, node.inputs[0].dtype)),
                      e.op("Log", e.op("Add", e.scalar(1, node.inputs[0].dtype),
                                       e.op("Exp", e.op("Neg", e.op("Abs", ins[0])))))))
# the gradient uses y + 1 (= exp(x) where x <= 0): its own derivative is then elu' again, and
# nothing overflows where x is large (exp(x) would, and 0 * inf is nan in second order)
elu = _unary("elu", lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, x.dtype.type(0)))),
             lambda op, g: [where(greater(op.inputs[0], 0), g, multiply(g, add(op.outputs[0], 1)))],
             doc="x where x > 0, else exp(x) - 1 (x: `features`, TF's name).", names=("features",),
             cost=Cost(per_element=15),     # measured 9x an add
             onnx=lambda e, node, ins: e.op("Where", e.op("Greater", ins[0], e.scalar(0, node.inputs[0].dtype)), ins[0],
                                            _expm1_onnx(e, e.op("Min", ins[0], e.scalar(0, node.inputs[0].dtype)),
                                                        node.inputs[0].dtype)))
is_nan = _unary("is_nan", np.isnan, None, out_dtype=dtypes.bool,
                doc="Elementwise x != x -> bool (not differentiable).", onnx="IsNaN")
# x - x is 0 exactly when x is finite (onnxruntime has no float16 IsInf)
is_finite = _unary("is_finite", np.isfinite, None, out_dtype=dtypes.bool,
                   doc="Elementwise: neither inf nor nan -> bool (not differentiable).",
                   onnx=lambda e, node, ins: e.op("Equal", e.op("Sub", ins[0], ins[0]),
                                                  e.scalar(0, node.inputs[0].dtype)))


def _leaky_relu_kernel(x, alpha):
    return np.where(x > 0, x, x * x.dtype.type(alpha))


def _leaky_relu_grad(op, g):
    return [where(greater(op.inputs[0], 0), g, multiply(g, op.attrs["alpha"]))]


_LEAKY_RELU = register(
    name="leaky_relu",
    kernel=_leaky_relu_kernel,
    infer=shape_rules.unary_same("leaky_relu", shape_rules.float_kinds),
    grad=_leaky_relu_grad,
    num_inputs=1,
    attrs={"alpha": "float"},
    defaults={"alpha": 0.2},
    kinds=shape_rules.float_kinds,
    # (not LeakyRelu: an ONNX float attr is float32, alpha here has the input's dtype)
    onnx=lambda e, node, ins: e.op("Where", e.op("Greater", ins[0], e.scalar(0, node.inputs[0].dtype)),
                                   ins[0], e.op("Mul", ins[0], e.scalar(node.attrs["alpha"], node.inputs[0].dtype))),
    batch=bt.elementwise,
)


def leaky_relu(features, alpha=0.2, name=None):
    """x where x > 0, else alpha * x: `df.leaky_relu([-1., 2.]) -> [-0.2, 2.]`."""
    alpha = _args.float_arg("leaky_relu", alpha, "alpha")
    if not np.isfinite(alpha):
        raise _args.error(f"leaky_relu: alpha must be a finite number, got {alpha}")
    return run_op(_LEAKY_RELU, (features,), {"alpha": alpha}, name)


_GELU_C = float(np.sqrt(2 / np.pi))        # Python floats: the gradient rule's constants
_GELU_K = 0.044715
_SQRT_HALF = float(np.sqrt(0.5))
_INV_SQRT_2PI = float(1 / np.sqrt(2 * np.pi))


def _gelu_kernel(x, approximate):
    t = x.dtype.type
    if approximate:
        return t(0.5) * x * (t(1) + np.tanh(t(_GELU_C) * (x + t(_GELU_K) * x * x * x)))
    # x * P(N(0,1) < x) = 0.5 x erfc(-x/sqrt(2)): erfc keeps the tail where x << 0
    return (0.5 * x * _erfc(-x * np.sqrt(0.5))).astype(x.dtype, copy=False)


def _gelu_grad(op, g):
    x = op.inputs[0]
    if op.attrs["approximate"]:
        inner = multiply(add(x, multiply(multiply(square(x), x), _GELU_K)), _GELU_C)
        t = tanh(inner)
        d_inner = multiply(add(multiply(square(x), 3 * _GELU_K), 1), _GELU_C)
        dy = add(multiply(add(t, 1), 0.5), multiply(multiply(multiply(x, 0.5), subtract(1, square(t))), d_inner))
        return [multiply(g, dy)]
    cdf = add(multiply(erf(multiply(x, _SQRT_HALF)), 0.5), 0.5)
    pdf = multiply(exp(multiply(square(x), -0.5)), _INV_SQRT_2PI)
    return [multiply(g, add(cdf, multiply(x, pdf)))]


def _gelu_onnx(e, node, ins):
    x, dt = ins[0], node.inputs[0].dtype
    c = lambda v: e.scalar(v, dt)  # noqa: E731
    half_x = e.op("Mul", x, c(0.5))
    if node.attrs["approximate"]:
        inner = e.op("Mul", e.op("Add", x, e.op("Mul", e.op("Mul", e.op("Mul", x, x), x), c(_GELU_K))), c(_GELU_C))
        return e.op("Mul", half_x, e.op("Add", c(1), e.op("Tanh", inner)))
    z = e.op("Mul", x, c(-np.sqrt(0.5)))
    if dt.name == "float64":     # 0.5 x erfc(-x / sqrt(2)), keeping the tail where x << 0
        return e.op("Mul", half_x, f64.erf_parts(e, z)[1])
    return e.op("Mul", half_x, e.op("Sub", c(1), e.op("Erf", z)))


_GELU = register(
    name="gelu",
    kernel=_gelu_kernel,
    infer=shape_rules.unary_same("gelu", shape_rules.float_kinds),
    grad=_gelu_grad,
    num_inputs=1,
    attrs={"approximate": "bool"},
    defaults={"approximate": False},
    kinds=shape_rules.float_kinds,
    onnx=_gelu_onnx,
    batch=bt.elementwise,
    # erf's series: 81x an add
    cost=Cost(per_element=160),
)


def gelu(features, approximate=False, name=None):
    """x * Phi(x) (Phi: the standard normal CDF); `approximate=True` uses the tanh form.

    >>> df.gelu([-1., 0., 1.])   # [-0.1587, 0., 0.8413]
    """
    return run_op(_GELU, (features,), {"approximate": _args.bool_arg("gelu", approximate, "approximate")}, name)


# ------------------------------------------------------------------ clip_by_value
def _clip_infer(shapes, dts, attrs):
    shape_rules.check_same("clip_by_value", dts)
    shape_rules.check_kinds("clip_by_value", dts[0], shape_rules.numeric_kinds)
    x = tuple(shapes[0])
    out = shape_rules.broadcast_shapes("clip_by_value", shape_rules.broadcast_shapes("clip_by_value", x, shapes[1]),
                                       shapes[2])
    if len(out) != len(x) or any(d is not None and d != o for d, o in zip(x, out)):
        raise errors.InvalidArgumentError(
            f"clip_by_value: the bounds (shapes {shape_rules.shape_str(shapes[1])} and "
            f"{shape_rules.shape_str(shapes[2])}) "
            f"must broadcast to the shape of t {shape_rules.shape_str(x)}")
    return [(out, dts[0])]


def _clip_kernel(x, lo, hi):
    out = np.maximum(np.minimum(x, hi), lo)
    if out.shape != x.shape:
        raise errors.InvalidArgumentError(
            f"clip_by_value: the bounds (shapes {lo.shape} and {hi.shape}) must broadcast to the shape of "
            f"t {x.shape}")
    return out


def _clip_grad(op, g):
    # the kernel is maximum(minimum(x, hi), lo); ties keep the gradient on x, as TF's does
    x, lo, hi = op.inputs
    skip = skip_input_indices(op)
    low = less(minimum(x, hi), lo)          # lo is the result
    kept = logical_not(low)
    dx = multiply(g, cast(logical_and(kept, less_equal(x, hi)), g.dtype))
    d_lo = None if 1 in skip else unbroadcast(multiply(g, cast(low, g.dtype)), lo)
    d_hi = None if 2 in skip else unbroadcast(
        multiply(g, cast(logical_and(kept, greater(x, hi)), g.dtype)), hi)
    return [dx, d_lo, d_hi]


def _clip_batch(ctx, node, inputs, batched):
    """The bounds broadcast to t, so t is batched whenever a bound is."""
    xs = bt.materialize_all(ctx, node, inputs, batched, (0,))
    return bt.elementwise(ctx, node, xs, [True] + list(batched[1:]))


_CLIP = register(
    name="clip_by_value",
    kernel=_clip_kernel,
    infer=_clip_infer,
    grad=_clip_grad,
    num_inputs=3,
    attrs={},
    defaults={},
    same_dtype=(0, 1, 2),
    kinds=shape_rules.numeric_kinds,
    onnx=lambda e, node, ins: e.op("Max", e.op("Min", ins[0], ins[2]), ins[1]),
    batch=_clip_batch,
)


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """t clipped to [clip_value_min, clip_value_max] (the bounds broadcast to t's shape).

    >>> df.clip_by_value([-2., 0.5, 3.], 0., 1.)   # [0., 0.5, 1.]
    """
    return run_op(_CLIP, (t, clip_value_min, clip_value_max), _EMPTY, name)


# ------------------------------------------------------------------ reductions
_RED_ATTRS = {"axis": "opt_ints", "keepdims": "bool"}
_RED_DEFAULTS = {"axis": None, "keepdims": False}


def _axes(ndim, axis, op_name="reduction"):
    """The reduced axes, non-negative (a scalar has none to reduce, whatever `axis` says)."""
    if axis is None or not ndim:
        return tuple(range(ndim))
    return shape_rules.normalize_axes(op_name, axis, ndim)


def _logsumexp_kernel(x, axis, keepdims):
    axes = _axes(x.ndim, axis, "reduce_logsumexp")
    m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, x.dtype.type(0))  # all -inf (or an inf): nothing to shift
    with np.errstate(divide="ignore"):  # log(0) = -inf for an empty or all -inf group
        out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True, dtype=x.dtype)) + m
    return out if keepdims else out.reshape([d for i, d in enumerate(x.shape) if i not in axes])


def _logsumexp_grad(op, g):
    # softmax of x over the reduced axes, times g: e / sum(e) with e = exp(x - y). exp(x - y)
    # alone carries the rounding of y (|y| ~ 1000: 3e-5 relative in float32); dividing by the
    # sum of e cancels it, as max-subtraction does, and e <= 1 (an empty group stays empty).
    x = op.inputs[0]
    e = exp(subtract(x, _keepdims_grad(op.outputs[0], op)))
    total = reduce_sum(e, axis=op.attrs["axis"], keepdims=True)
    return [multiply(_keepdims_grad(g, op), divide(e, total))]


def _reduction(name, kernel, grad, kinds, doc, onnx=None, cost=None):
    op = register(
        name=name,
        kernel=kernel,
        infer=_reduce_infer(name, kinds),
        grad=grad,
        num_inputs=1,
        attrs=_RED_ATTRS,
        defaults=_RED_DEFAULTS,
        kinds=kinds,
        onnx=onnx,
        batch=bt.axes("axis"),
        cost=cost,
    )

    def f(input_tensor, axis=None, keepdims=False, name=None):
        return run_op(op, (input_tensor,), {"axis": _axis_tuple(op.name, axis),
                                            "keepdims": _args.bool_arg(op.name, keepdims, "keepdims")},
                      name)
    f.__name__ = f.__qualname__ = op.name
    f.__doc__ = doc
    return f


def _axis_tuple(op_name, axis):
    a = _args.axes_arg(op_name, axis)
    return (a,) if isinstance(a, int) else a


def _logsumexp_onnx(e, node, ins):
    """log(sum(exp(x - m))) + m with m the (finite) maximum of each group, as the kernel."""
    x, dt = ins[0], node.inputs[0].dtype
    axes, keep = reduced_axes(node), node.attrs["keepdims"]
    m = e.reduce("ReduceMax", x, axes, True)
    m = e.op("Where", e.op("Equal", e.op("Sub", m, m), e.scalar(0, dt)), m, e.scalar(0, dt))
    out = e.op("Add", e.op("Log", e.reduce("ReduceSum", e.op("Exp", e.op("Sub", x, m)), axes, True)), m)
    return out if keep else e.squeeze(out, axes)


def _logical_reduce_onnx(any_):
    """any: the count of True is > 0; all: the count of False is 0 (so empty groups agree)."""
    def form(e, node, ins):
        x = ins[0] if any_ else e.op("Not", ins[0])
        count = e.reduce("ReduceSum", e.cast(x, dtypes.int64), reduced_axes(node), node.attrs["keepdims"])
        zero = e.scalar(0, dtypes.int64)
        return e.op("Greater", count, zero) if any_ else e.op("Equal", count, zero)
    return form


reduce_logsumexp = _reduction(
    "reduce_logsumexp", _logsumexp_kernel, _logsumexp_grad, shape_rules.float_kinds,
    "log(sum(exp(x))) over `axis`, without overflow: `df.reduce_logsumexp([1000., 1000.]) -> 1000.6931`.",
    onnx=_logsumexp_onnx,     # scratch measured 2.0x: x - max and its exp; work 14x an add per element
    cost=_costs.per_input_element(30, scratch=2.25))
reduce_any = _reduction(
    "reduce_any", lambda x, axis, keepdims: np.logical_or.reduce(x, axis=_axes(x.ndim, axis, "reduce_any"),
                                                               keepdims=keepdims),
    None, "b", "Logical or over `axis` of a bool tensor (not differentiable).", onnx=_logical_reduce_onnx(True))
reduce_all = _reduction(
    "reduce_all", lambda x, axis, keepdims: np.logical_and.reduce(x, axis=_axes(x.ndim, axis, "reduce_all"),
                                                                keepdims=keepdims),
    None, "b", "Logical and over `axis` of a bool tensor (not differentiable).", onnx=_logical_reduce_onnx(False))


# ------------------------------------------------------------------ norm
# `ord` attr: "euclidean" (2-norm of vectors, Frobenius of matrices), "1", "inf", or the
# decimal text of another positive p (vectors only). A 2-entry `axis` names a matrix.
def _ord_attr(ord, matrix):
    if isinstance(ord, str):
        key = ord.lower()
        if key == "fro" and matrix:
            return "euclidean"
        if key == "euclidean":
            return "euclidean"
        if key in ("inf", "np.inf"):
            return "inf"
        choices = "'euclidean' ('fro'), 1 or np.inf" if matrix else "'euclidean', 1, np.inf or a positive number"
        raise _args.error(
            f"norm: ord={ord!r} is not supported for {'matrices' if matrix else 'vectors'}; use {choices}")
    if isinstance(ord, (bool, np.bool_)):
        raise _args.error(f"norm: ord must be a number or 'euclidean', got the bool {ord!r}", TypeError)
    try:
        p = float(ord)
    except (TypeError, ValueError):
        raise _args.error(f"norm: ord must be a number or 'euclidean', got {ord!r}") from None
    if p == np.inf:
        return "inf"
    if p == 1:
        return "1"
    if matrix:
        if p == 2:
            raise _args.error(
                "norm: ord=2 of a matrix (its largest singular value) is not implemented; use "
                "ord='fro', 1 or np.inf, or the singular values of df.linalg.svd", errors.UnimplementedError)
        raise _args.error(
            f"norm: ord={ord!r} is not supported for matrices; use 'euclidean' ('fro'), 1 or np.inf")
    if p == 2:
        return "euclidean"
    if not p > 0:
        raise _args.error(f"norm: ord must be positive, got {ord!r}")
    return repr(p)


def _norm_infer(shapes, dts, attrs):
    shape_rules.check_kinds("norm", dts[0], shape_rules.float_kinds)
    s, axis, ord = shapes[0], attrs["axis"], attrs["ord"]
    if axis is not None:
        if not 1 <= len(axis) <= 2:
            raise errors.InvalidArgumentError(f"norm: axis must be None, an int or a pair of ints, got {axis}")
        axes = [shape_rules.normalize_axis("norm", a, len(s)) for a in axis]
        if len(set(axes)) != len(axes):
            raise errors.InvalidArgumentError(f"norm: the two axes of a matrix norm must differ, got {axis}")
        if len(axis) == 2 and ord not in ("euclidean", "1", "inf"):
            raise errors.InvalidArgumentError(f"norm: ord={ord} is not supported for matrices")
    if ord not in ("euclidean", "1", "inf"):
        try:
            ok = float(ord) > 0
        except ValueError:
            ok = False
        if not ok:
            raise errors.InvalidArgumentError(f"norm: unknown ord {ord!r}")
    return [(shape_rules.reduced_shape("norm", s, axis, attrs["keepdims"]), dts[0])]


def _norm_kernel(x, ord, axis, keepdims):
    axes = _axes(x.ndim, axis, "norm")
    t = x.dtype.type
    if ord == "euclidean":  # also the Frobenius norm of matrices
        out = np.sqrt(np.sum(x * x, axis=axes, keepdims=True))
    elif axis is not None and len(axes) == 2:
        r, c = axes if ord == "1" else axes[::-1]  # 1: the largest column sum; inf: row sum
        out = np.max(np.sum(np.abs(x), axis=r, keepdims=True), axis=c, keepdims=True, initial=t(0))
    elif ord == "1":
        out = np.sum(np.abs(x), axis=axes, keepdims=True)
    elif ord == "inf":
        out = np.max(np.abs(x), axis=axes, keepdims=True, initial=t(0))
    else:
        p = float(ord)
        out = np.sum(np.abs(x) ** t(p), axis=axes, keepdims=True) ** t(1 / p)
    return out if keepdims else out.reshape([d for i, d in enumerate(x.shape) if i not in axes])


def _norm_grad(op, g):
    # At x = 0 the gradient is 0 (a subgradient), never nan: divisions use a norm of 1 there.
    x = op.inputs[0]
    ord, axis = op.attrs["ord"], op.attrs["axis"]
    gk, n = _keepdims_grad(g, op), _keepdims_grad(op.outputs[0], op)
    safe = where(greater(n, 0), n, ones_like(n))
    if ord == "euclidean":
        return [multiply(gk, divide(x, safe))]
    axes = _axes(len(x.shape), axis)
    if ord in ("1", "inf") and axis is not None and len(axes) == 2:
        r, c = axes if ord == "1" else axes[::-1]
        sums = reduce_sum(abs(x), axis=r, keepdims=True)
        winners = cast(equal(sums, n), x.dtype)  # the columns (rows) reaching the max share g
        share = divide(winners, reduce_sum(winners, axis=c, keepdims=True))
        return [multiply(multiply(gk, share), sign(x))]
    if ord == "1":
        return [multiply(gk, sign(x))]
    if ord == "inf":
        winners = cast(equal(abs(x), n), x.dtype)
        share = divide(winners, reduce_sum(winners, axis=axes, keepdims=True))
        return [multiply(multiply(gk, share), sign(x))]
    p = float(ord)
    dx = multiply(multiply(gk, sign(x)), pow(divide(abs(x), safe), p - 1))
    if p < 1:  # |x|^(p-1) is infinite at 0; the subgradient there is 0
        dx = where(equal(x, 0), zeros_like(dx), dx)
    return [dx]


def _norm_onnx(e, node, ins):
    x, dt = ins[0], node.inputs[0].dtype
    ord, axis = node.attrs["ord"], node.attrs["axis"]
    axes = reduced_axes(node)
    if ord == "euclidean":
        out = e.op("Sqrt", e.reduce("ReduceSum", e.op("Mul", x, x), axes, True))
    elif axis is not None and len(axes) == 2:
        r, c = (a % len(node.inputs[0].shape) for a in ((axis[0], axis[1]) if ord == "1" else (axis[1], axis[0])))
        sums = e.reduce("ReduceSum", e.op("Abs", x), (r,), True)
        out = e.op("Max", e.reduce("ReduceMax", sums, (c,), True), e.scalar(0, dt))
    elif ord == "1":
        out = e.reduce("ReduceSum", e.op("Abs", x), axes, True)
    elif ord == "inf":
        out = e.op("Max", e.reduce("ReduceMax", e.op("Abs", x), axes, True), e.scalar(0, dt))
    else:
        p = float(ord)
        powered = e.reduce("ReduceSum", e.op("Pow", e.op("Abs", x), e.scalar(p, dt)), axes, True)
        out = e.op("Pow", powered, e.scalar(1 / p, dt))
    return out if node.attrs["keepdims"] else e.squeeze(out, axes)


def _norm_batch(ctx, node, inputs, batched):
    attrs = dict(node.attrs)
    r = len(node.inputs[0].shape)
    x = inputs[0]
    if attrs["axis"] is None:
        if (attrs["ord"] != "euclidean" and r > 1) or r == 0:   # a vector norm of the flattened tensor
            rows = bt.flat_rows(ctx, x, node.inputs[0])
            out = bt.op("norm", [rows], ord=attrs["ord"], axis=(1,), keepdims=False)
            if attrs["keepdims"]:
                out = bt.reshape_batch(ctx, out, (1,) * r)
            return bt.all_batched([out])
        attrs["axis"] = tuple(range(1, r + 1))
    else:
        attrs["axis"] = tuple(bt.norm_axis(node, a, r) for a in attrs["axis"])
    return bt.all_batched(bt.emit(node, [x], attrs))


_NORM = register(
    name="norm",
    kernel=_norm_kernel,
    infer=_norm_infer,
    grad=_norm_grad,
    num_inputs=1,
    attrs={"ord": "str", "axis": "opt_ints", "keepdims": "bool"},
    defaults={"ord": "euclidean", "axis": None, "keepdims": False},
    kinds=shape_rules.float_kinds,
    onnx=_norm_onnx,
    batch=_norm_batch,
    cost=Cost(scratch=1.25),
)


def norm(tensor, ord="euclidean", axis=None, keepdims=False, name=None):
    """Vector or matrix norm, as tf.norm: axis=None is the vector norm of all entries, an int
    a batch of vectors, a pair of ints a batch of matrices (ord 'fro'/'euclidean', 1, np.inf).

    >>> df.norm([3., 4.])   # 5.
    >>> df.norm([[1., -2.], [3., 4.]], ord=1, axis=(0, 1))   # 6. (largest column sum)
    """
    axis = _axis_tuple("norm", axis)
    if axis is not None and len(axis) not in (1, 2):
        raise _args.error(f"norm: axis must be None, an int or a pair of ints, got {axis}")
    matrix = axis is not None and len(axis) == 2
    return run_op(_NORM, (tensor,), {"ord": _ord_attr(ord, matrix), "axis": axis,
                                     "keepdims": _args.bool_arg("norm", keepdims, "keepdims")},
                  name)


# ------------------------------------------------------------------ eye
def _eye_infer(shapes, dts, attrs):
    n, m = attrs["num_rows"], attrs["num_columns"]
    if n < 0 or m < 0:
        raise errors.InvalidArgumentError(f"eye: sizes must be non-negative, got {n} x {m}")
    return [((n, m), attrs["dtype"])]


_EYE = register(
    name="eye",
    kernel=lambda num_rows, num_columns, dtype: np.eye(num_rows, num_columns, dtype=dtype.np),
    infer=_eye_infer,
    grad=None,
    num_inputs=0,
    attrs={"num_rows": "int", "num_columns": "int", "dtype": "dtype"},
    defaults={},
    onnx=lambda e, node, ins: e.cast(e.op("EyeLike", e.op(
        "Expand", e.scalar(0, dtypes.float32), e.ints([node.attrs["num_rows"], node.attrs["num_columns"]]))),
        node.attrs["dtype"]),
)


def eye(num_rows, num_columns=None, dtype=dtypes.float32, name=None):
    """The identity matrix (ones on the diagonal): `df.eye(2) -> [[1., 0.], [0., 1.]]`."""
    n = _args.count_arg("eye", num_rows, "num_rows")
    m = n if num_columns is None else _args.count_arg("eye", num_columns, "num_columns")
    attrs = {"num_rows": n, "num_columns": m, "dtype": dtypes.as_dtype(dtype)}
    _eye_infer((), (), attrs)
    return run_op(_EYE, (), attrs, name)
