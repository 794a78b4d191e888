"""Arguments of the public op functions: one validator per kind, used by every op.

- `int_arg` / `count_arg`: one int (a count, a depth, a size); bools, floats and strings
  are refused (TypeError), negatives where counts must not be (InvalidArgumentError).
- `axes_arg` (reductions: None, an int or a list of ints, range and duplicates checked by
  inference) and `axis_arg` (one axis of a tensor of known rank, normalized here).
- `shape_arg`: a static shape (ints; -1 only where the op allows one).
- `shape_operand`: a shape that may be a tensor computed at run time (`df.shape(x)`): the
  static sizes known while tracing, and the tensor the op then takes as an input; the
  kernels check its run-time value with `shape_value`.

A failure names the op and the argument, says what was expected, and, while tracing,
ends with the user's source line (the place the op was called), as inference errors do.
"""
import numpy as np

from defun.runtime import dtypes, errors, sites
from defun.runtime.context import state
from defun.runtime.execute import run_op
from defun.runtime.registry import get as get_op
from defun.runtime.shapes import shape_str
from defun.runtime.tensor import EagerTensor, Tensor

__all__ = ["error", "describe", "value_now", "is_tensor_arg", "int_arg", "count_arg", "float_arg",
           "bool_arg", "int_list_arg", "axes_arg", "axis_arg", "shape_arg", "shape_operand", "shape_value",
           "partial_shape", "partial_scalar"]


def error(message, cls=errors.InvalidArgumentError):
    """`cls(message)`, ending with the user's source line while tracing."""
    if state.graph is not None:
        site = sites.user_site(2)
        line = sites.source_line(site)
        message = f"{message} (while tracing, at {sites.format_site(site)}{': ' + line if line else ''})"
    return cls(message)


def describe(v):
    """Words for a bad argument: "the str '0'", "the float 1.5", "a float32 tensor of shape (2,)"."""
    if isinstance(v, Tensor):
        return f"a {v.dtype.name} tensor of shape {shape_str(v.shape)}"
    if isinstance(v, np.ndarray):
        return f"a {v.dtype.name} array of shape {shape_str(v.shape)}"
    return f"the {type(v).__name__} {v!r:.60}"


def value_now(op_name, x, what):
    """The numpy value of a tensor argument, known now (eagerly, or while tracing from
    constants and static shapes); raises when it is known only when the graph runs."""
    if isinstance(x, EagerTensor):
        return np.asarray(x._value)
    if hasattr(x, "_as_tensor") and not isinstance(x, Tensor):     # a variable: its value now
        x = x._as_tensor()
        if isinstance(x, EagerTensor):
            return np.asarray(x._value)
    static = getattr(x, "static_value", None)
    value = static() if static is not None else None
    if value is None:
        raise error(f"{op_name}: {what} must be known while tracing, got the symbolic tensor "
                    f"{getattr(x, 'name', x)} whose value is computed only when the graph runs; "
                    f"pass Python ints")
    return np.asarray(value)


def is_tensor_arg(x):
    return isinstance(x, Tensor) or (hasattr(x, "_as_tensor") and not isinstance(x, (list, tuple)))


# ------------------------------------------------------------------ ints, counts
def int_arg(op_name, value, what):
    """One Python int from an int, a numpy integer or an integer scalar tensor known now."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)):
        raise error(f"{op_name}: {what} must be an int, got the bool {value!r}", TypeError)
    if isinstance(value, np.integer):
        return int(value)
    if is_tensor_arg(value) or isinstance(value, np.ndarray):
        v = value if isinstance(value, np.ndarray) else value_now(op_name, value, what)
        if v.ndim == 0 and v.dtype.kind in "iu":
            return int(v)
    raise error(f"{op_name}: {what} must be an int, got {describe(value)}", TypeError)


def bool_arg(op_name, value, what):
    """A Python bool from a bool (or a numpy bool): a flag given anything else ("no", 0, None)
    is refused rather than read by its truth."""
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise error(f"{op_name}: {what} must be a bool (True or False), got {describe(value)}", TypeError)


def float_arg(op_name, value, what):
    """A Python float from a number (or a numeric scalar tensor known now); bools and strings
    are refused."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        return float(value)
    if is_tensor_arg(value):
        arr = value_now(op_name, value, what)
        if arr.ndim == 0 and arr.dtype.kind in "iuf":
            return float(arr)
    raise error(f"{op_name}: {what} must be a number, got {describe(value)}", TypeError)


def count_arg(op_name, value, what, minimum=0):
    """An int >= `minimum` (a size, a depth, a number of parts)."""
    n = int_arg(op_name, value, what)
    if n < minimum:
        raise error(f"{op_name}: {what} must be >= {minimum}, got {n}")
    return n


def int_list_arg(op_name, value, what):
    """A tuple of ints from a list/tuple/array/tensor of ints (each entry as `int_arg`)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") and not is_tensor_arg(value):
        raise error(f"{op_name}: {what} must be a list of ints, got {describe(value)}", TypeError)
    if is_tensor_arg(value) or isinstance(value, np.ndarray):
        arr = value if isinstance(value, np.ndarray) else value_now(op_name, value, what)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise error(f"{op_name}: {what} must be a list of ints or a 1-D int tensor, got "
                        f"{describe(arr)}", TypeError)
        return tuple(int(d) for d in arr)
    return tuple(int_arg(op_name, d, f"{what}[{k}]") for k, d in enumerate(value))


# ------------------------------------------------------------------ axes
def axes_arg(op_name, axis, what="axis"):
    """A reduction's `axis`: None, an int, or a tuple of ints (range and repeats are the
    inference's check, `runtime.shapes.normalize_axes`, which knows the rank)."""
    if axis is None or type(axis) is int:
        return axis
    if isinstance(axis, (list, tuple)) or (isinstance(axis, np.ndarray) and axis.ndim == 1):
        return int_list_arg(op_name, axis, what)
    if is_tensor_arg(axis):
        v = value_now(op_name, axis, what)
        if v.ndim == 1:
            return int_list_arg(op_name, v, what)
    return int_arg(op_name, axis, what)


def axis_arg(op_name, axis, rank, what="axis", scalar_axis=False):
    """One axis of a tensor of `rank`, as a non-negative int (negative counts from the end)."""
    a = int_arg(op_name, axis, what)
    if rank == 0 and scalar_axis and a in (0, -1):
        return 0
    if not -rank <= a < rank:
        raise error(f"{op_name}: {what} {a} is out of range for a tensor of rank {rank} "
                    f"(expected {-rank} <= {what} < {rank})")
    return a % rank


# ------------------------------------------------------------------ static shapes
def shape_arg(op_name, shape, what="shape", minus_one=False):
    """A static shape as a tuple of ints: non-negative, or one -1 where `minus_one` (reshape)."""
    dims = _plain_dims(shape, minus_one)
    if dims is not None:
        return dims
    dims = int_list_arg(op_name, shape, what)
    _check_dims(op_name, dims, what, minus_one)
    return dims


def _plain_dims(shape, minus_one):
    """The common case, checked fast (~0.3 us): a tuple or list of valid Python ints."""
    t = type(shape)
    if t is not tuple and t is not list:
        return None
    for d in shape:
        if type(d) is not int:
            return None
    if not shape:
        return ()
    low = min(shape)
    if low >= 0 or (minus_one and low == -1 and shape.count(-1) == 1):
        return tuple(shape)
    return None


def _check_dims(op_name, dims, what, minus_one):
    shown = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"   # ?: known at run time
    if minus_one:
        if sum(1 for d in dims if d == -1) > 1:
            raise error(f"{op_name}: {what} {shown} has more than one -1; at most one size may be "
                        f"inferred")
        bad = [d for d in dims if d is not None and d < -1]
        if bad:
            raise error(f"{op_name}: {what} {shown} has the size {bad[0]}; sizes must be "
                        f">= 0, or -1 for one size inferred from the others")
    elif any(d is not None and d < 0 for d in dims):
        raise error(f"{op_name}: negative size in {what} {shown}; sizes must be >= 0")


# ------------------------------------------------------------------ shapes known at run time
def shape_operand(op_name, shape, what="shape", minus_one=False):
    """(static, operand) for a shape argument that may be computed at run time.

    `operand` is None when the shape is known now; `static` is then the shape (as
    `shape_arg`). Otherwise `operand` is a 1-D int32/int64 tensor (a list mixing ints and
    scalar tensors is stacked into one) and `static` holds the sizes known while tracing
    (None elsewhere, and for a -1), e.g. x's known sizes for `df.shape(x)`.
    """
    dims = _plain_dims(shape, minus_one)
    if dims is not None:
        return dims, None
    if isinstance(shape, Tensor):
        if _known(shape) is None:
            return _dynamic_static(op_name, shape, what, minus_one), shape
    elif isinstance(shape, (list, tuple)) and any(isinstance(d, Tensor) and _known(d) is None
                                                  for d in shape):
        return _mixed(op_name, shape, what, minus_one)
    return shape_arg(op_name, shape, what, minus_one), None


def _dynamic_static(op_name, t, what, minus_one):
    if not t.dtype.is_integer or len(t.shape) != 1:
        raise error(f"{op_name}: {what} must be a 1-D int32 or int64 tensor, got {describe(t)}", TypeError)
    if t.shape[0] is None:
        raise error(f"{op_name}: {what} must have a length known while tracing (the result's rank), "
                    f"got a tensor of shape {shape_str(t.shape)}: its length is unknown")
    dims = partial_shape(t)
    _check_dims(op_name, dims, what, minus_one)
    return tuple(None if d == -1 else d for d in dims)


def _mixed(op_name, entries, what, minus_one):
    parts, static = [], []
    for k, d in enumerate(entries):
        if isinstance(d, Tensor):
            if not d.dtype.is_integer or len(d.shape):
                raise error(f"{op_name}: {what}[{k}] must be an int or an int scalar tensor, got "
                            f"{describe(d)}", TypeError)
            parts.append(d)
            static.append(partial_scalar(d))
        else:
            static.append(int_arg(op_name, d, f"{what}[{k}]"))
            parts.append(static[-1])
    _check_dims(op_name, static, what, minus_one)
    wide = any(isinstance(p, Tensor) and p.dtype is dtypes.int64 for p in parts)
    dt = dtypes.int64 if wide else dtypes.int32
    cast, stack = get_op("cast"), get_op("stack")
    parts = [run_op(cast, (p,), {"dtype": dt}) if isinstance(p, Tensor) and p.dtype is not dt else
             (p if isinstance(p, Tensor) else np.asarray(p, dt.np)) for p in parts]
    return tuple(None if d == -1 else d for d in static), run_op(stack, parts, {"axis": 0})


def shape_value(op_name, dims, static, what="shape"):
    """A kernel's check of a run-time shape `dims` (array) against the `static` sizes its
    node was traced with; returns it as a tuple of ints (a -1 is left for numpy)."""
    if dims.ndim != 1 or dims.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(
            f"{op_name}: {what} must be a 1-D int32 or int64 tensor, got a {dims.dtype.name} array "
            f"of shape {shape_str(dims.shape)}")
    out = tuple(int(d) for d in dims)
    if len(out) != len(static) or any(s is not None and s != d for s, d in zip(static, out)):
        raise errors.InvalidArgumentError(
            f"{op_name}: the {what} value {list(out)} does not match the static shape "
            f"{shape_str(static)} the graph was traced with")
    return out


# ------------------------------------------------------------------ what a trace knows of a shape
def partial_shape(t):
    """The entries of a 1-D int tensor of known length that are known while tracing (None
    where not): constants, `df.shape(x)` (x's static sizes), and stacks, concats, slices
    and casts of those."""
    unknown = (None,) * t.shape[0]
    value = _known(t)
    if value is not None:
        return tuple(int(d) for d in np.reshape(value, -1))
    node = getattr(t, "node", None)
    if node is None:
        return unknown
    name, ins = node.op.name, node.inputs
    if name == "shape":
        return tuple(ins[0].shape)
    if name == "cast" and len(ins[0].shape) == 1:
        return partial_shape(ins[0])
    if name == "stack" and node.attrs["axis"] == 0 and all(not len(u.shape) for u in ins):
        return tuple(partial_scalar(u) for u in ins)
    if name == "concat" and all(len(u.shape) == 1 and u.shape[0] is not None for u in ins):
        return sum((partial_shape(u) for u in ins), ())
    if name == "strided_slice" and len(ins[0].shape) == 1 and ins[0].shape[0] is not None \
            and not node.attrs["new_axis"] and not node.attrs["shrink_axis_mask"]:
        return _sliced(partial_shape(ins[0]), node.attrs) or unknown
    return unknown


def partial_scalar(t):
    """An int scalar tensor's value if known while tracing (else None): constants, sizes of
    known dimensions (`df.shape(x)[0]`, `df.size(x)`)."""
    value = _known(t)
    if value is not None:
        return int(value)
    node = getattr(t, "node", None)
    if node is None:
        return None
    name, ins = node.op.name, node.inputs
    if name == "size":
        s = ins[0].shape
        return None if None in s else int(np.prod(s, dtype=np.int64))
    if name == "cast" and not len(ins[0].shape):
        return partial_scalar(ins[0])
    if name == "strided_slice" and len(ins[0].shape) == 1 and ins[0].shape[0] is not None \
            and node.attrs["shrink_axis_mask"] == 1 and not node.attrs["new_axis"]:
        entries = partial_shape(ins[0])
        i = node.attrs["begin"][0]
        return entries[i] if -len(entries) <= i < len(entries) else None
    return None


def _known(t):
    """A tensor's value known now (eager, or a traced one's static value), else None."""
    if isinstance(t, EagerTensor):
        return t._value
    static = getattr(t, "static_value", None)
    return static() if static is not None else None


def _sliced(entries, attrs):
    b, e, s = attrs["begin"][0], attrs["end"][0], attrs["strides"][0]
    key = slice(None if attrs["begin_mask"] & 1 else b, None if attrs["end_mask"] & 1 else e, s)
    return tuple(entries[key])
