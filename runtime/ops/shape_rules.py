"""Shape and dtype rules shared by the rows' `infer` functions (static shapes; a size may be None)."""
from defun.runtime import dtypes, errors
from defun.runtime.shapes import (broadcast_shapes, merge_shapes, normalize_axes, normalize_axis,  # noqa: F401
                                  num_elements, shape_fits, shape_str, shapes_compatible)

float_kinds = "f"
numeric_kinds = "fiu"
int_kinds = "iu"
# the ops that also take complex values (issue 22): arithmetic, exp/log/sqrt, sums, matmul
numeric_complex_kinds = "fiuc"
inexact_kinds = "fc"
ordered_kinds = "fiub"   # comparisons: every dtype but complex (which has no order)


def check_kinds(op_name, dtype, kinds):
    if dtype.np.kind not in kinds:
        raise errors.InvalidArgumentError(
            f"{op_name}: unsupported input dtype {dtype.name} (expected {dtypes.kinds_text(kinds)})")


def check_same(op_name, dts):
    d0 = dts[0]
    for d in dts[1:]:
        if d is not d0:
            raise errors.InvalidArgumentError(
                f"{op_name}: inputs must have the same dtype, got "
                f"{', '.join(d.name for d in dts)}; use df.cast to convert")


def check_compatible(op_name, what_a, a, what_b, b):
    """Refuse two static shapes no one tensor could have (ranks differ, or known sizes differ)."""
    if not shapes_compatible(a, b):
        raise errors.InvalidArgumentError(
            f"{op_name}: {what_a} has shape {shape_str(a)} but {what_b} has shape {shape_str(b)}; they "
            f"must agree")


def check_broadcastable(op_name, frm, to):
    """Refuse a static shape `frm` that numpy could not broadcast to `to`."""
    out = broadcast_shapes(op_name, frm, to)
    if len(frm) > len(to) or not shapes_compatible(out, to):
        raise errors.InvalidArgumentError(
            f"{op_name}: cannot broadcast shape {shape_str(frm)} to {shape_str(to)}")


def unary_same(name, kinds=None):
    def infer(shapes, dts, attrs):
        if kinds:
            check_kinds(name, dts[0], kinds)
        return [(tuple(shapes[0]), dts[0])]
    return infer


def binary_broadcast(name, kinds=None, out_dtype=None):
    def infer(shapes, dts, attrs):
        check_same(name, dts)
        if kinds:
            check_kinds(name, dts[0], kinds)
        return [(broadcast_shapes(name, shapes[0], shapes[1]), out_dtype or dts[0])]
    return infer


def reduced_shape(op_name, shape, axis, keepdims):
    """Shape after reducing `axis` (None, int or tuple)."""
    nd = len(shape)
    if axis is None:
        axes = set(range(nd))
    else:
        axes = set(normalize_axes(op_name, axis if isinstance(axis, tuple) else (axis,), nd))
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def as_dtype(d):
    return dtypes.as_dtype(d)
