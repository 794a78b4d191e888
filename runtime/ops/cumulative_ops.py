"""Cumulative sums and products along an axis, and the linear recurrence (`linear_scan`)
that differentiates cumprod to any order: declarations and public functions."""
import numpy as np

from defun.runtime import batching as bt
from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops._onnx import running
from defun.runtime.ops.array_ops import concat, strided_slice, zeros_like
from defun.runtime.ops.index_ops import _norm_axis, _rank
from defun.runtime.ops.math_ops import multiply
from defun.runtime.registry import Cost, register

__all__ = ["cumsum", "cumprod"]


_CUM_ATTRS = {"axis": "int", "exclusive": "bool", "reverse": "bool"}
_CUM_DEFAULTS = {"exclusive": False, "reverse": False}


def _cum_infer(name):
    def infer(shapes, dts, attrs):
        shape_rules.check_kinds(name, dts[0], shape_rules.numeric_kinds)
        if not shapes[0]:
            raise errors.InvalidArgumentError(f"{name}: input must have rank >= 1, got a scalar")
        _norm_axis(name, attrs["axis"], len(shapes[0]))
        return [(tuple(shapes[0]), dts[0])]
    return infer


def _cum_kernel(name, ufunc, identity):
    def kernel(x, axis, exclusive, reverse):
        if x.ndim == 0:
            raise errors.InvalidArgumentError(f"{name}: input must have rank >= 1, got a scalar")
        axis = _norm_axis(name, axis, x.ndim)
        if reverse:
            x = np.flip(x, axis)
        if exclusive:  # out[0] = identity, out[i] = accumulate(x)[i - 1]
            out = np.empty_like(x)
            lead = (slice(None),) * axis
            out[lead + (slice(0, 1),)] = identity
            ufunc.accumulate(x[lead + (slice(0, -1),)], axis=axis, dtype=x.dtype, out=out[lead + (slice(1, None),)])
        else:
            out = ufunc.accumulate(x, axis=axis, dtype=x.dtype)
        return np.flip(out, axis) if reverse else out
    return kernel


def _cumsum_grad(op, g):
    a = op.attrs
    return [cumsum(g, a["axis"], a["exclusive"], not a["reverse"])]


def _shift_from_next(t, axis, reverse):
    """t[i + 1] at position i along `axis` (t[i - 1] when `reverse`), 0 past the end.

    The missing slot is filled by a zeros slice taken from t itself, so an empty axis stays
    empty and the sizes may be unknown."""
    lead = (slice(None),) * (axis % len(t.shape))
    if reverse:
        return concat([zeros_like(strided_slice(t, lead + (slice(0, 1),))),
                       strided_slice(t, lead + (slice(None, -1),))], axis)
    return concat([strided_slice(t, lead + (slice(1, None),)),
                   zeros_like(strided_slice(t, lead + (slice(0, 1),)))], axis)


def _cumprod_grad(op, g):
    # d/dx_j of sum_i g_i y_i is (product of x before j) * S_j, with S_j = g_j + x_(j+1) S_(j+1)
    # (forward scan; mirrored for reverse): a linear recurrence, so no division by x and zeros
    # in x are exact. Exclusive products see g shifted by one place.
    x = op.inputs[0]
    axis, exclusive, reverse = op.attrs["axis"], op.attrs["exclusive"], op.attrs["reverse"]
    if not x.dtype.is_floating:
        return [None]
    before = cumprod(x, axis, exclusive=True, reverse=reverse)
    seed = _shift_from_next(g, axis, reverse) if exclusive else g
    s = run_op(_LINEAR_SCAN, (seed, _shift_from_next(x, axis, reverse)), {"axis": axis, "reverse": not reverse})
    return [multiply(before, s)]


_CUM_COST = Cost(per_element=20)     # measured 10x an add per element (numpy's accumulate)
_CUMSUM = register(
    name="cumsum",
    kernel=_cum_kernel("cumsum", np.add, 0),
    infer=_cum_infer("cumsum"),
    grad=_cumsum_grad,
    num_inputs=1,
    attrs=_CUM_ATTRS,
    defaults=_CUM_DEFAULTS,
    kinds=shape_rules.numeric_kinds,
    onnx=lambda e, node, ins: e.op("CumSum", ins[0], e.scalar(node.attrs["axis"], dtypes.int64),
        exclusive=int(node.attrs["exclusive"]),
        reverse=int(node.attrs["reverse"])),
    batch=bt.axes("axis"),
    cost=_CUM_COST,
)
_CUMPROD = register(
    name="cumprod",
    kernel=_cum_kernel("cumprod", np.multiply, 1),
    infer=_cum_infer("cumprod"),
    grad=_cumprod_grad,
    num_inputs=1,
    attrs=_CUM_ATTRS,
    defaults=_CUM_DEFAULTS,
    kinds=shape_rules.numeric_kinds,
    # (ONNX has CumSum only: an exact running product in a Loop)
    onnx=lambda e, node, ins: running(
        e, ins, node.attrs["axis"], len(node.inputs[0].shape), node.inputs[0].dtype, 1,
        lambda s, x: e.op("Mul", s, x), node.attrs["exclusive"], node.attrs["reverse"]),
    batch=bt.axes("axis"),
    cost=_CUM_COST,
)


def _cum_attrs(name, x, axis, exclusive, reverse):
    rank = _rank(x)
    if rank == 0:
        raise _args.error(f"{name}: input must have rank >= 1, got a scalar")
    return {"axis": _args.axis_arg(name, axis, rank), "exclusive": _args.bool_arg(name, exclusive, "exclusive"),
            "reverse": _args.bool_arg(name, reverse, "reverse")}


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running sums along `axis`: `df.cumsum([1, 2, 3]) -> [1, 3, 6]`; `exclusive` starts from 0,
    `reverse` runs from the end: `df.cumsum([1, 2, 3], exclusive=True, reverse=True) -> [5, 3, 0]`."""
    return run_op(_CUMSUM, (x,), _cum_attrs("cumsum", x, axis, exclusive, reverse), name)


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running products along `axis`: `df.cumprod([1., 2., 3.]) -> [1., 2., 6.]` (flags as cumsum).
    The gradient is exact when x holds zeros (it never divides by x)."""
    return run_op(_CUMPROD, (x,), _cum_attrs("cumprod", x, axis, exclusive, reverse), name)


# Internal: the linear recurrence s_i = b_i + a_i * s_(i-1) along `axis` (s_(i+1) when `reverse`),
# s = 0 before the start; the gradient of cumprod. Its own gradient is the same recurrence run
# the other way: ds/db transposed is the reverse scan with coefficients shifted by one, and
# ds/da_i = (that scan)_i * s_(i-1). So cumprod is differentiable to any order.
def _linear_scan_kernel(b, a, axis, reverse):
    """Hillis-Steele prefix scan of the affine maps s -> b_i + a_i s: log2(n) vectorized steps."""
    bs, cs = np.moveaxis(b, axis, -1), np.moveaxis(a, axis, -1)
    if reverse:
        bs, cs = bs[..., ::-1], cs[..., ::-1]
    bs, cs = bs.copy(), cs.copy()
    n, d = bs.shape[-1], 1
    while d < n:  # element i now composes the maps of (i - 2d, i]
        bs[..., d:] += cs[..., d:] * bs[..., :-d]
        if 2 * d < n:
            cs[..., d:] *= cs[..., :-d].copy()
        d *= 2
    if reverse:
        bs = bs[..., ::-1]
    return np.ascontiguousarray(np.moveaxis(bs, -1, axis))


def _linear_scan_infer(shapes, dts, attrs):
    shape_rules.check_same("linear_scan", dts)
    shape_rules.check_kinds("linear_scan", dts[0], shape_rules.float_kinds)
    if not shape_rules.shapes_compatible(shapes[0], shapes[1]):
        raise errors.InvalidArgumentError(
            f"linear_scan: values and coefficients must have the same shape, got {shape_rules.shape_str(shapes[0])} "
            f"and {shape_rules.shape_str(shapes[1])}")
    out = tuple(a if a is not None else b for a, b in zip(shapes[0], shapes[1]))
    _norm_axis("linear_scan", attrs["axis"], len(out))
    return [(out, dts[0])]


def _linear_scan_grad(op, g):
    b, a = op.inputs
    axis, reverse = op.attrs["axis"], op.attrs["reverse"]
    t = run_op(_LINEAR_SCAN, (g, _shift_from_next(a, axis, reverse)), {"axis": axis, "reverse": not reverse})
    previous = _shift_from_next(op.outputs[0], axis, not reverse)
    return [t, multiply(t, previous)]


_LINEAR_SCAN = register(
    name="linear_scan",
    kernel=_linear_scan_kernel,
    infer=_linear_scan_infer,
    grad=_linear_scan_grad,
    num_inputs=2,
    attrs={"axis": "int", "reverse": "bool"},
    defaults={},
    same_dtype=(0, 1),
    kinds=shape_rules.float_kinds,
    onnx=lambda e, node, ins: running(
        e, ins, node.attrs["axis"] % len(node.outputs[0].shape), len(node.outputs[0].shape),
        node.outputs[0].dtype, 0, lambda s, b, a: e.op("Add", b, e.op("Mul", a, s)),
        reverse=node.attrs["reverse"]),
    batch=bt.axes("axis"),
)
