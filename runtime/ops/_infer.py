"""Static shape/dtype inference helpers shared by op declarations (sizes may be None)."""
from runtime import dtypes, errors

float_kinds = "f"
numeric_kinds = "fiu"
int_kinds = "iu"


def broadcast_shapes(op_name, a, b):
    """numpy broadcasting of two static shapes; None is an unknown size."""
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None:
            out.append(y)
        elif y is None:
            out.append(x)
        elif x == y:
            out.append(x)
        else:
            raise errors.InvalidArgumentError(
                f"{op_name}: shapes {shape_str(a)} and {shape_str(b)} cannot be broadcast together")
    return tuple(out)


def shape_str(s):
    return "(" + ", ".join("?" if d is None else str(d) for d in s) + ("," if len(s) == 1 else "") + ")"


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


def normalize_axis(op_name, axis, ndim):
    if not -ndim <= axis < max(ndim, 1) and not (ndim == 0 and axis in (0, -1)):
        raise errors.InvalidArgumentError(
            f"{op_name}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim if ndim else 0


def reduced_shape(op_name, shape, axis, keepdims):
    """Shape after reducing `axis` (None, int or tuple)."""
    nd = len(shape)
    if axis is None:
        axes = set(range(nd))
    else:
        axes = {normalize_axis(op_name, a, nd) for a in (axis if isinstance(axis, tuple) else (axis,))}
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def num_elements(shape):
    n = 1
    for d in shape:
        if d is None:
            return None
        n *= d
    return n


def as_dtype(d):
    return dtypes.as_dtype(d)
