"""Ops along an axis: transpose (the axes permuted), concat and its gradient split_like,
stack, unstack and split; declarations and public functions, re-exported by array_ops (the
place op functions are found). Lists of tensors given to any op are packed with `stack`.
Python's builtin `range` is spelled `_pyrange`, as in array_ops (which defines the op `range`).
"""
import builtins

import numpy as np

from defun.runtime import batching as bt
from defun.runtime import convert, dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops.index_ops import _norm_axis, _rank
from defun.runtime.registry import register
from defun.runtime.tensor import Tensor

__all__ = ["transpose", "concat", "stack", "unstack", "split"]

_pyrange = builtins.range


# Helpers for the ops below.

def _check_same_arrays(op_name, arrays):
    """Variadic kernels: numpy would silently promote mixed dtypes, so refuse them here."""
    d0 = arrays[0].dtype
    for a in arrays:
        if a.dtype != d0:
            raise errors.InvalidArgumentError(
                f"{op_name}: inputs must have the same dtype, got "
                f"{', '.join(str(v.dtype) for v in arrays)}; use df.cast to convert")


def _merge_dim(op_name, a, b, shapes):
    """Two sizes that must agree (None is unknown)."""
    if a is None:
        return b
    if b is not None and a != b:
        raise errors.InvalidArgumentError(
            f"{op_name}: inputs must have the same shape (except along the axis), got "
            f"{', '.join(shape_rules.shape_str(s) for s in shapes)}")
    return a


# ------------------------------------------------------------------ transpose
def _transpose_infer(shapes, dts, attrs):
    s, perm = shapes[0], attrs["perm"]
    if sorted(perm) != list(_pyrange(len(s))):
        raise errors.InvalidArgumentError(
            f"transpose: perm {perm} is not a permutation of the axes of shape {shape_rules.shape_str(s)}")
    return [(tuple(s[p] for p in perm), dts[0])]


def _transpose_grad(op, g):
    return [transpose(g, tuple(int(i) for i in np.argsort(op.attrs["perm"])))]


def _transpose_batch(ctx, node, inputs, batched):
    return bt.all_batched(bt.emit(node, inputs, {"perm": (0,) + tuple(p + 1 for p in node.attrs["perm"])}))


_TRANSPOSE = register(
    name="transpose",
    kernel=lambda x, perm: x.transpose(perm),
    infer=_transpose_infer,
    grad=_transpose_grad,
    num_inputs=1,
    attrs={"perm": "ints"},
    defaults={},
    bind=lambda attrs: _bind_transpose(attrs["perm"]),
    onnx=lambda e, node, ins: e.op("Transpose", ins[0], perm=list(node.attrs["perm"])),
    batch=_transpose_batch,
)


def _bind_transpose(perm):
    return lambda x: x.transpose(perm)


def transpose(x, perm=None, name=None):
    """Permute the axes of `x` (reverse them by default): `df.transpose(m)` is `m.T`."""
    rank = _rank(x)
    if perm is None:
        perm = tuple(_pyrange(rank - 1, -1, -1))
    else:
        perm = tuple(p % rank if -rank <= p < rank else p for p in _args.int_list_arg("transpose", perm, "perm"))
    return run_op(_TRANSPOSE, (x,), {"perm": perm}, name)


# ------------------------------------------------------------------ concat, split_like
def _concat_infer(shapes, dts, attrs):
    shape_rules.check_same("concat", dts)
    axis, rank = attrs["axis"], len(shapes[0])
    if rank == 0 or any(len(s) != rank for s in shapes):
        raise errors.InvalidArgumentError(
            f"concat: inputs must all have the same rank >= 1, got shapes "
            f"{', '.join(shape_rules.shape_str(s) for s in shapes)}")
    axis = _norm_axis("concat", axis, rank)
    out = list(shapes[0])
    for s in shapes[1:]:
        for d in _pyrange(rank):
            if d == axis:
                out[d] = None if out[d] is None or s[d] is None else out[d] + s[d]
            else:
                out[d] = _merge_dim("concat", out[d], s[d], shapes)
    return [(tuple(out), dts[0])]


def _concat_kernel(*xs, axis):
    _check_same_arrays("concat", xs)
    return np.concatenate(xs, axis)


def _concat_grad(op, g):
    axis = op.attrs["axis"]
    sizes = [x.shape[axis] for x in op.inputs]
    if None in sizes:  # traced with unknown sizes: split by the inputs' runtime shapes
        parts = run_op(_SPLIT_LIKE, (g,) + tuple(op.inputs), {"axis": axis})
    else:
        parts = split(g, sizes, axis)
    return list(parts)


_CONCAT = register(
    name="concat",
    kernel=_concat_kernel,
    infer=_concat_infer,
    grad=_concat_grad,
    num_inputs=None,
    attrs={"axis": "int"},
    defaults={},
    onnx="Concat",
    batch=bt.axes("axis"),
)


def concat(values, axis, name=None):
    """Join tensors along an existing `axis`: `df.concat([a, b], 0)`."""
    values = _values_list("concat", values)
    rank = _rank(values[0])
    axis = _args.axis_arg("concat", axis, rank) if rank else _args.int_arg("concat", axis, "axis")
    return run_op(_CONCAT, values, {"axis": axis}, name)


def _values_list(op_name, values):
    """The tensors of a variadic op's `values`: a list or tuple, not empty."""
    if not isinstance(values, (list, tuple)):
        if not isinstance(values, Tensor) or not len(values.shape) or values.shape[0] is None:
            raise _args.error(f"{op_name}: values must be a list of tensors, got {_args.describe(values)}",
                              TypeError)
        values = unstack(values)
    if not values:
        raise _args.error(f"{op_name}: needs at least one input tensor")
    return list(values)


def _split_like_kernel(g, *likes, axis):
    ends = np.cumsum([np.shape(x)[axis] for x in likes])[:-1]
    return tuple(np.split(g, ends, axis))


def _split_like_infer(shapes, dts, attrs):
    axis = _norm_axis("split_like", attrs["axis"], len(shapes[0]))
    sizes = [s[axis] if len(s) == len(shapes[0]) else -1 for s in shapes[1:]]
    if -1 in sizes or (None not in sizes and shapes[0][axis] is not None and sum(sizes) != shapes[0][axis]):
        raise errors.InvalidArgumentError(
            f"split_like: the parts {', '.join(shape_rules.shape_str(s) for s in shapes[1:])} do not split "
            f"{shape_rules.shape_str(shapes[0])} along axis {axis}")
    out = []
    for s in shapes[1:]:
        o = list(shapes[0])
        o[axis] = s[axis]
        out.append((tuple(o), dts[0]))
    return out


def _split_onnx(e, x, axis, sizes, n):
    """ONNX Split of `x` along `axis` into `n` parts of `sizes` (a list, None entries unknown;
    or an int64 vector name), equal parts when `sizes` is None."""
    if n == 1:
        return [e.op("Identity", x)]
    if sizes is None:
        return e.op("Split", x, n=n, axis=axis, num_outputs=n if e.opset >= 18 else None)
    return e.op("Split", x, sizes if isinstance(sizes, str) else e.ints(sizes), n=n, axis=axis)


def _split_like_onnx(e, node, ins):
    axis = node.attrs["axis"]
    sizes = [t.shape[axis] for t in node.inputs[1:]]
    if None in sizes:
        sizes = e.op("Concat", *[e.dim(x, axis) for x in ins[1:]], axis=0)
    return _split_onnx(e, ins[0], axis, sizes, len(node.outputs))


# Internal: the gradient of a traced concat whose input sizes are unknown until run time.
_SPLIT_LIKE = register(
    name="split_like",
    kernel=_split_like_kernel,
    infer=_split_like_infer,
    grad=lambda op, *gs: [concat(gs, op.attrs["axis"])] + [None] * (len(op.inputs) - 1),
    num_inputs=None,
    attrs={"axis": "int"},
    defaults={},
    num_outputs=lambda attrs, n: n - 1,
    onnx=_split_like_onnx,
    batch=bt.axes("axis"),
)


# ------------------------------------------------------------------ stack, unstack
def _stack_infer(shapes, dts, attrs):
    shape_rules.check_same("stack", dts)
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        raise errors.InvalidArgumentError(
            f"stack: inputs must have the same shape, got {', '.join(shape_rules.shape_str(s) for s in shapes)}")
    out = list(shapes[0])
    for s in shapes[1:]:
        out = [_merge_dim("stack", a, b, shapes) for a, b in zip(out, s)]
    out.insert(_norm_axis("stack", attrs["axis"], rank + 1), len(shapes))
    return [(tuple(out), dts[0])]


def _stack_kernel(*xs, axis):
    _check_same_arrays("stack", xs)
    return np.stack(xs, axis)


_STACK = register(
    name="stack",
    kernel=_stack_kernel,
    infer=_stack_infer,
    grad=lambda op, g: list(unstack(g, len(op.inputs), op.attrs["axis"])),
    num_inputs=None,
    attrs={"axis": "int"},
    defaults={},
    onnx=lambda e, node, ins: e.op("Concat", *[e.unsqueeze(x, [node.attrs["axis"]]) for x in ins],
        axis=node.attrs["axis"]),
    batch=bt.axes("axis", rank_of="output"),
)


def stack(values, axis=0, name=None):
    """Join same-shaped tensors along a new `axis`: `df.stack([a, b])` has shape (2,) + a.shape.
    A tensor stands for its rows (a list appended to in a converted tensor loop is one)."""
    if isinstance(values, Tensor) and len(values.shape) and values.shape[0] is None:
        rank = len(values.shape)
        axis = _args.axis_arg("stack", axis, rank)
        return transpose(values, list(_pyrange(1, axis + 1)) + [0] + list(_pyrange(axis + 1, rank)), name)
    values = _values_list("stack", values)
    axis = _args.axis_arg("stack", axis, _rank(values[0]) + 1)
    return run_op(_STACK, values, {"axis": axis}, name)


convert.install_stack(stack)   # lists of tensors given to any op are packed with it


def _unstack_infer(shapes, dts, attrs):
    s, axis, num = list(shapes[0]), attrs["axis"], attrs["num"]
    if s[axis] is not None and s[axis] != num:
        raise errors.InvalidArgumentError(
            f"unstack: num={num} but axis {axis} of shape {shape_rules.shape_str(shapes[0])} has size {s[axis]}")
    del s[axis]
    return [(tuple(s), dts[0])] * num


def _unstack_kernel(x, num, axis):
    if x.shape[axis] != num:
        raise errors.InvalidArgumentError(f"unstack: num={num} but axis {axis} has size {x.shape[axis]}")
    lead = (slice(None),) * axis
    return tuple(x[lead + (i,)] for i in _pyrange(num))


_UNSTACK = register(
    name="unstack",
    kernel=_unstack_kernel,
    infer=_unstack_infer,
    grad=lambda op, *gs: [stack(gs, op.attrs["axis"])],
    num_inputs=1,
    attrs={"num": "int", "axis": "int"},
    defaults={},
    num_outputs=lambda attrs, n: attrs["num"],
    onnx=lambda e, node, ins: [e.op("Gather", ins[0], e.scalar(i, dtypes.int64), axis=node.attrs["axis"])
        for i in _pyrange(node.attrs["num"])],
    batch=bt.axes("axis"),
)


def unstack(value, num=None, axis=0, name=None):
    """The slices of `value` along `axis`, as a tuple (the inverse of `stack`)."""
    rank = _rank(value)
    if rank == 0:
        raise _args.error("unstack: cannot unstack a scalar")
    axis = _args.axis_arg("unstack", axis, rank)
    if num is None:
        num = value.shape[axis] if hasattr(value, "shape") else np.shape(value)[axis]
        if num is None:
            raise _args.error(f"unstack: the size of axis {axis} is unknown while tracing; pass num=")
    return run_op(_UNSTACK, (value,), {"num": _args.count_arg("unstack", num, "num"), "axis": axis}, name)


# ------------------------------------------------------------------ split
def _split_sizes(size_splits, dim, op_name="split"):
    """Resolve one -1 in `size_splits` against a known `dim` and check the total."""
    sizes = list(size_splits)
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise errors.InvalidArgumentError(
            f"{op_name}: size_splits {tuple(size_splits)} may hold at most one -1 and no other negatives")
    known = sum(s for s in sizes if s != -1)
    if -1 in sizes:
        if known > dim:
            raise errors.InvalidArgumentError(
                f"{op_name}: size_splits {tuple(size_splits)} exceed the axis size {dim}")
        sizes[sizes.index(-1)] = dim - known
    elif known != dim:
        raise errors.InvalidArgumentError(
            f"{op_name}: size_splits {tuple(size_splits)} sum to {known}, but the axis has size {dim}")
    return sizes


def _split_infer(shapes, dts, attrs):
    s, axis = shapes[0], attrs["axis"]
    axis = _norm_axis("split", axis, len(s))
    dim, num, sizes = s[axis], attrs["num_split"], attrs["size_splits"]
    if sizes is None:
        if dim is not None and (num <= 0 or dim % num):
            raise errors.InvalidArgumentError(
                f"split: axis {axis} of shape {shape_rules.shape_str(s)} (size {dim}) does not divide into {num} "
                f"equal parts")
        sizes = [None if dim is None else dim // num] * num
    elif dim is not None:
        sizes = _split_sizes(sizes, dim)
    else:
        sizes = [None if d == -1 else d for d in sizes]
    return [(s[:axis] + (d,) + s[axis + 1:], dts[0]) for d in sizes]


def _split_kernel(x, num_split, size_splits, axis):
    if size_splits is None:
        if x.shape[axis] % num_split:
            raise errors.InvalidArgumentError(
                f"split: axis {axis} (size {x.shape[axis]}) does not divide into {num_split} equal parts")
        return tuple(np.split(x, num_split, axis))
    sizes = _split_sizes(size_splits, x.shape[axis])
    return tuple(np.split(x, np.cumsum(sizes[:-1]), axis))


def _split_count(attrs, n):
    return attrs["num_split"]


def _split_form(e, node, ins):
    axis, n = node.attrs["axis"], len(node.outputs)
    sizes = [t.shape[axis] for t in node.outputs]
    if None in sizes and node.attrs["size_splits"] is not None:  # the -1 part, by run-time size
        known = sum(d for d in sizes if d is not None)
        rest = e.op("Sub", e.dim(ins[0], axis), e.ints([known]))
        sizes = e.op("Concat", *[rest if d is None else e.ints([d]) for d in sizes], axis=0)
    elif None in sizes:
        sizes = None
    return _split_onnx(e, ins[0], axis, sizes, n)


_SPLIT = register(
    name="split",
    kernel=_split_kernel,
    infer=_split_infer,
    grad=lambda op, *gs: [concat(gs, op.attrs["axis"])],
    num_inputs=1,
    attrs={"num_split": "int", "size_splits": "opt_ints", "axis": "int"},
    defaults={},
    num_outputs=_split_count,
    onnx=_split_form,
    batch=bt.axes("axis"),
)


def split(value, num_or_size_splits, axis=0, name=None):
    """Split along `axis` into n equal parts or parts of the given sizes (one may be -1).

    >>> a, b = df.split(df.range(5), [2, 3])   # [0, 1] and [2, 3, 4]
    """
    axis = _args.axis_arg("split", axis, _rank(value))
    n = num_or_size_splits
    if isinstance(n, (int, np.integer, bool, np.bool_, float, str)) or (isinstance(n, Tensor) and not n.shape):
        num = _args.count_arg("split", n, "the number of splits", minimum=1)
        attrs = {"num_split": num, "size_splits": None, "axis": axis}
    else:
        sizes = _args.int_list_arg("split", n, "size_splits")
        attrs = {"num_split": len(sizes), "size_splits": sizes, "axis": axis}
    return run_op(_SPLIT, (value,), attrs, name)
