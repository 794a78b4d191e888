"""Shape and creation ops (transpose, concat, split, tile, pad, zeros, range...): declarations
and public functions; the indexing ops (gather, one_hot, slicing) are in index_ops, re-exported.

This module defines `range` (the op), so Python's builtin is spelled `_pyrange` here.

(This module is long because each op keeps its kernel, inference, gradient and ONNX form together.)
"""
import builtins

import numpy as np

from defun.runtime import convert, dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops._onnx import BIG, scatter_adjoint, shape_of
from defun.runtime.ops.base_ops import (broadcast_to, cast, expand_dims, identity, ones_like,  # noqa: F401
                                        reduce_sum, reshape, shape, size, squeeze, stop_gradient, where,
                                        zeros_like)
from defun.runtime.ops.dynamic_shape_ops import dynamic_fill, dynamic_range, dynamic_tile, slice_helper  # noqa: F401
from defun.runtime.ops.dynamic_shape_ops import range_length as _range_length
from defun.runtime.ops.index_ops import _norm_axis, _rank, gather, one_hot, strided_slice  # noqa: F401
from defun.runtime.ops.math_ops import subtract
from defun.runtime.registry import one_of, register
from defun.runtime.tensor import EagerTensor, Tensor, convert_to_tensor
from defun.runtime import batching as bt
from defun.runtime.ops import _batch as vb

__all__ = ["identity", "stop_gradient", "zeros_like", "ones_like", "reshape", "expand_dims", "squeeze",
           "broadcast_to", "shape", "size", "where", "transpose", "concat", "stack", "unstack", "split",
           "tile", "pad", "gather", "one_hot", "zeros", "ones", "fill", "range"]

_pyrange = builtins.range

_EMPTY = {}


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


_TRANSPOSE = register("transpose", lambda x, perm: x.transpose(perm), _transpose_infer,
                      _transpose_grad, attrs={"perm": "ints"},
                      bind=lambda attrs: _bind_transpose(attrs["perm"]), num_inputs=1, defaults={},
                      onnx=lambda e, node, ins: e.op("Transpose", ins[0], perm=list(node.attrs["perm"])), batch=vb.transpose)


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


_CONCAT = register("concat", _concat_kernel, _concat_infer, _concat_grad, attrs={"axis": "int"},
                   num_inputs=None, defaults={}, onnx="Concat", batch=bt.axes("axis"))


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
_SPLIT_LIKE = register("split_like", _split_like_kernel, _split_like_infer,
                       lambda op, *gs: [concat(gs, op.attrs["axis"])] + [None] * (len(op.inputs) - 1),
                       attrs={"axis": "int"}, num_outputs=lambda attrs, n: n - 1, num_inputs=None,
                       defaults={}, onnx=_split_like_onnx, batch=bt.axes("axis"))


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


_STACK = register("stack", _stack_kernel, _stack_infer,
                  lambda op, g: list(unstack(g, len(op.inputs), op.attrs["axis"])),
                  attrs={"axis": "int"}, num_inputs=None, defaults={},
                  onnx=lambda e, node, ins: e.op("Concat", *[e.unsqueeze(x, [node.attrs["axis"]]) for x in ins],
                                                 axis=node.attrs["axis"]), batch=bt.axes("axis", rank_of="output"))


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


_UNSTACK = register("unstack", _unstack_kernel, _unstack_infer,
                    lambda op, *gs: [stack(gs, op.attrs["axis"])],
                    attrs={"num": "int", "axis": "int"}, num_outputs=lambda attrs, n: attrs["num"],
                    num_inputs=1, defaults={},
                    onnx=lambda e, node, ins: [e.op("Gather", ins[0], e.scalar(i, dtypes.int64), axis=node.attrs["axis"])
                                               for i in _pyrange(node.attrs["num"])], batch=bt.axes("axis"))


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


_SPLIT = register("split", _split_kernel, _split_infer,
                  lambda op, *gs: [concat(gs, op.attrs["axis"])],
                  attrs={"num_split": "int", "size_splits": "opt_ints", "axis": "int"},
                  num_outputs=_split_count, num_inputs=1, defaults={}, onnx=_split_form, batch=bt.axes("axis"))


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


# ------------------------------------------------------------------ tile, tile_reduce
def _tile_infer(shapes, dts, attrs):
    s, m = shapes[0], attrs["multiples"]
    if len(m) != len(s) or any(k < 0 for k in m):
        raise errors.InvalidArgumentError(
            f"tile: multiples {m} must hold one non-negative int per axis of shape {shape_rules.shape_str(s)}")
    return [(tuple(None if d is None else d * k for d, k in zip(s, m)), dts[0])]


def _tile_kernel(x, multiples):
    if len(multiples) != x.ndim or min(multiples, default=0) < 0:
        raise errors.InvalidArgumentError(
            f"tile: multiples {multiples} must hold one non-negative int per axis of shape {x.shape}")
    return np.tile(x, multiples)


def _tile_reduce_kernel(g, multiples):
    """Sum the tiles of `g` back into one: the adjoint of tile."""
    split_shape = []
    for d, k in zip(g.shape, multiples):
        split_shape += [k, d // k]
    r = g.reshape(split_shape)
    return np.sum(r, axis=tuple(_pyrange(0, 2 * g.ndim, 2)), dtype=g.dtype)


def _tile_reduce_infer(shapes, dts, attrs):
    m = attrs["multiples"]
    if len(m) != len(shapes[0]) or min(m, default=1) <= 0:
        raise errors.InvalidArgumentError(
            f"tile_reduce: multiples {m} must hold one positive int per axis of {shape_rules.shape_str(shapes[0])}")
    return [(tuple(None if d is None else d // k for d, k in zip(shapes[0], m)), dts[0])]


def _tile_grad(op, g):
    if 0 in op.attrs["multiples"]:  # the output is empty: nothing flows back
        return [zeros_like(op.inputs[0])]
    return [run_op(_TILE_REDUCE, (g,), op.attrs)]


def _tile_onnx(e, node, ins):
    m = node.attrs["multiples"]
    return e.op("Tile", ins[0], e.ints(m)) if m else e.op("Identity", ins[0])


def _tile_reduce_onnx(e, node, ins):
    """Reshape (d0 * k0, ...) into (k0, d0, k1, d1, ...) and sum the k axes."""
    m = node.attrs["multiples"]
    if not m:
        return e.op("Identity", ins[0])
    out = shape_of(e, None, node.outputs[0]) if None not in node.outputs[0].shape else \
        e.op("Div", e.op("Shape", ins[0]), e.ints(m))
    pairs = e.op("Concat", e.op("Unsqueeze", e.ints(m), e.ints([1])), e.op("Unsqueeze", out, e.ints([1])), axis=1)
    split = e.op("Reshape", ins[0], e.op("Reshape", pairs, e.ints([-1])))
    return e.reduce("ReduceSum", split, tuple(_pyrange(0, 2 * len(m), 2)), False)


_TILE = register("tile", _tile_kernel, _tile_infer, _tile_grad, attrs={"multiples": "ints"},
                 num_inputs=1, defaults={}, onnx=_tile_onnx, batch=vb.tile)
# Internal: the gradient of tile for positive multiples (its own gradient is tile again).
_TILE_REDUCE = register("tile_reduce", _tile_reduce_kernel, _tile_reduce_infer,
                        lambda op, g: [tile(g, op.attrs["multiples"])], attrs={"multiples": "ints"},
                        num_inputs=1, defaults={}, onnx=_tile_reduce_onnx, batch=vb.tile)


def tile(input, multiples, name=None):
    """Repeat `input` `multiples[i]` times along axis i: `df.tile([1, 2], [2]) -> [1, 2, 1, 2]`;
    `multiples` may be a tensor computed when the graph runs."""
    static, operand = _args.shape_operand("tile", multiples, "multiples")
    if operand is None:
        return run_op(_TILE, (input,), {"multiples": static}, name)
    return dynamic_tile(input, operand, static, name)


# ------------------------------------------------------------------ pad, pad_grad
_PAD_MODES = ("CONSTANT", "REFLECT", "SYMMETRIC")


def _pairs(paddings):
    return [(paddings[i], paddings[i + 1]) for i in _pyrange(0, len(paddings), 2)]


def _check_pad(shape, paddings, mode):
    """Validate flattened `paddings` against a (possibly partial) shape; raises naming pad."""
    if len(paddings) != 2 * len(shape) or min(paddings, default=0) < 0:
        raise errors.InvalidArgumentError(
            f"pad: paddings must be one non-negative [before, after] pair per axis of shape "
            f"{shape_rules.shape_str(shape)}, got {_pairs(paddings)}")
    limit = {"REFLECT": 1, "SYMMETRIC": 0}.get(mode)
    if limit is not None:
        for d, (b, a) in zip(shape, _pairs(paddings)):
            if d is not None and max(b, a) > d - limit:
                raise errors.InvalidArgumentError(
                    f"pad: {mode} padding {[b, a]} is too large for an axis of size {d} "
                    f"(at most {d - limit}) in shape {shape_rules.shape_str(shape)}")


def _pad_infer(shapes, dts, attrs):
    shape_rules.check_same("pad", dts)
    if len(shapes[1]):
        raise errors.InvalidArgumentError(f"pad: constant_values must be a scalar, got shape {shapes[1]}")
    p = attrs["paddings"]
    _check_pad(shapes[0], p, attrs["mode"])
    return [(tuple(None if d is None else d + b + a for d, (b, a) in zip(shapes[0], _pairs(p))), dts[0])]


def _pad_kernel(x, constant_values, paddings, mode):
    _check_pad(x.shape, paddings, mode)
    if np.ndim(constant_values):
        raise errors.InvalidArgumentError(
            f"pad: constant_values must be a scalar, got shape {np.shape(constant_values)}")
    if not x.ndim:
        return x
    if mode == "CONSTANT":
        return np.pad(x, _pairs(paddings), mode="constant", constant_values=constant_values)
    return np.pad(x, _pairs(paddings), mode=mode.lower())


def _pad_grad_kernel(g, paddings, mode):
    """The adjoint of pad: crop, and for REFLECT/SYMMETRIC fold the mirrored borders back in."""
    pairs = _pairs(paddings)
    if mode == "CONSTANT":
        return g[tuple(slice(b, d - a) for d, (b, a) in zip(g.shape, pairs))]
    out = g
    for axis, (b, a) in enumerate(pairs):
        if not b and not a:
            continue
        moved = np.moveaxis(out, axis, 0)
        n = moved.shape[0] - b - a
        core = moved[b:b + n].copy()
        if mode == "REFLECT":       # padded row b-k mirrors row k; row b+n-1+k mirrors n-1-k
            core[1:b + 1] += moved[:b][::-1]
            core[n - 1 - a:n - 1] += moved[b + n:][::-1]
        else:                       # SYMMETRIC: the edge row itself is repeated
            core[:b] += moved[:b][::-1]
            core[n - a:] += moved[b + n:][::-1]
        out = np.moveaxis(core, 0, axis)
    return out


def _pad_grad_infer(shapes, dts, attrs):
    p = _pairs(attrs["paddings"])
    return [(tuple(None if d is None else d - b - a for d, (b, a) in zip(shapes[0], p)), dts[0])]


def _pad_grad(op, g):
    dx = run_op(_PAD_GRAD, (g,), op.attrs)
    if op.attrs["mode"] != "CONSTANT":
        return [dx, None]
    # every padded element is a copy of constant_values
    return [dx, subtract(reduce_sum(g), reduce_sum(dx))]


def _pad_onnx_of(e, x, paddings, mode, value=None):
    """ONNX of pad: Pad for CONSTANT and REFLECT; SYMMETRIC (edge rows repeated, which ONNX
    has no mode for) concatenates reversed slices of the borders, axis by axis."""
    pairs = _pairs(paddings)
    if not pairs:
        return e.op("Identity", x)
    if mode == "CONSTANT":
        return e.op("Pad", x, e.ints([b for b, _ in pairs] + [a for _, a in pairs]), value)
    if mode == "REFLECT":
        return e.op("Pad", x, e.ints([b for b, _ in pairs] + [a for _, a in pairs]), mode="reflect")
    for axis, (b, a) in enumerate(pairs):
        parts = [x]
        if b:
            parts.insert(0, e.op("Slice", x, e.ints([b - 1]), e.ints([-BIG]), e.ints([axis]), e.ints([-1])))
        if a:
            parts.append(e.op("Slice", x, e.ints([-1]), e.ints([-a - 1]), e.ints([axis]), e.ints([-1])))
        x = e.op("Concat", *parts, axis=axis) if len(parts) > 1 else x
    return x


def _pad_grad_onnx(e, node, ins):
    pairs = _pairs(node.attrs["paddings"])
    if not pairs:
        return e.op("Identity", ins[0])
    if node.attrs["mode"] == "CONSTANT":
        return e.op("Slice", ins[0], e.ints([b for b, _ in pairs]), e.ints([-a if a else BIG for _, a in pairs]),
                    e.ints(_pyrange(len(pairs))))
    out = node.outputs[0]
    shape = shape_of(e, None, out) if None not in out.shape else \
        e.op("Sub", e.op("Shape", ins[0]), e.ints([b + a for b, a in pairs]))
    return scatter_adjoint(e, ins[0], shape, out.dtype,
                           lambda idx: _pad_onnx_of(e, idx, node.attrs["paddings"], node.attrs["mode"]))


_PAD = register("pad", _pad_kernel, _pad_infer, _pad_grad, same_dtype=(0, 1),
                attrs={"paddings": "ints", "mode": one_of(*_PAD_MODES)}, num_inputs=2, defaults={},
                onnx=lambda e, node, ins: _pad_onnx_of(e, ins[0], node.attrs["paddings"], node.attrs["mode"], ins[1]), batch=vb.pad)
# Internal: the gradient of pad (its own gradient is pad with zeros).
_PAD_GRAD = register("pad_grad", _pad_grad_kernel, _pad_grad_infer,
                     lambda op, g: [pad(g, _pairs(op.attrs["paddings"]), op.attrs["mode"])],
                     attrs={"paddings": "ints", "mode": one_of(*_PAD_MODES)}, num_inputs=1, defaults={},
                     onnx=_pad_grad_onnx, batch=vb.pad)


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """Pad each axis by `paddings[i] = [before, after]` (CONSTANT, REFLECT or SYMMETRIC).

    >>> df.pad([[1, 2]], [[0, 0], [1, 1]])   # [[0, 1, 2, 0]]
    """
    m = mode.upper() if isinstance(mode, str) else mode
    if m not in _PAD_MODES:
        raise _args.error(f"pad: mode must be one of {', '.join(_PAD_MODES)}, got {mode!r}")
    try:
        p = np.asarray(_args.value_now("pad", paddings, "paddings") if _args.is_tensor_arg(paddings) else paddings)
    except ValueError:      # ragged
        p = np.asarray(None)
    if p.size == 0:  # a scalar has no axes to pad
        p = p.reshape(0, 2)
    if p.ndim != 2 or p.shape[1:] != (2,) or (p.size and p.dtype.kind not in "iu"):
        raise _args.error(f"pad: paddings must be a [rank, 2] list of ints ([before, after] per axis), "
                          f"got {paddings!r:.80}")
    flat = tuple(int(v) for v in p.reshape(-1))
    if not isinstance(tensor, Tensor) and not hasattr(tensor, "_as_tensor"):
        tensor = convert_to_tensor(tensor)  # so a Python constant_values adopts its dtype
    return run_op(_PAD, (tensor, constant_values), {"paddings": flat, "mode": m}, name)


# ------------------------------------------------------------------ zeros, ones, fill, range
def _shape_attr_infer(op_name):
    def infer(shapes, dts, attrs):
        if min(attrs["shape"], default=0) < 0:
            raise errors.InvalidArgumentError(f"{op_name}: negative size in shape {attrs['shape']}")
        return [(tuple(attrs["shape"]), attrs["dtype"])]
    return infer


def _filled_onnx(value):
    return lambda e, node, ins: e.op("Expand", e.scalar(value, node.attrs["dtype"]), e.ints(node.attrs["shape"]))


_ZEROS = register("zeros", lambda shape, dtype: np.zeros(shape, dtype.np),
                  _shape_attr_infer("zeros"), None, attrs={"shape": "ints", "dtype": "dtype"},
                  num_inputs=0, defaults={}, onnx=_filled_onnx(0))
_ONES = register("ones", lambda shape, dtype: np.ones(shape, dtype.np), _shape_attr_infer("ones"),
                 None, attrs={"shape": "ints", "dtype": "dtype"}, num_inputs=0, defaults={},
                 onnx=_filled_onnx(1))


def zeros(shape, dtype=dtypes.float32, name=None):
    """A tensor of zeros: `df.zeros([2, 3])` (float32 unless `dtype` says otherwise); the shape
    may be a tensor computed when the graph runs (`df.zeros(df.shape(x))`)."""
    return _filled(_ZEROS, 0, shape, dtype, name)


def ones(shape, dtype=dtypes.float32, name=None):
    """A tensor of ones: `df.ones([2, 3], df.int32)`."""
    return _filled(_ONES, 1, shape, dtype, name)


def _filled(op, value, shape, dtype, name):
    dtype = _values_dtype(op.name, dtype)
    static, operand = _args.shape_operand(op.name, shape)
    if operand is None:
        return run_op(op, (), {"shape": static, "dtype": dtype}, name)
    return dynamic_fill(operand, np.asarray(value, dtype.np), static, name)


def _values_dtype(op_name, dtype):
    dt = dtypes.as_dtype(dtype)
    if dt is dtypes.resource:
        raise _args.error(f"{op_name}: dtype resource has no values; pass a numeric or bool dtype", TypeError)
    return dt


def _fill_infer(shapes, dts, attrs):
    if len(shapes[0]):
        raise errors.InvalidArgumentError(f"fill: value must be a scalar, got shape {shape_rules.shape_str(shapes[0])}")
    if min(attrs["dims"], default=0) < 0:
        raise errors.InvalidArgumentError(f"fill: negative size in dims {attrs['dims']}")
    return [(tuple(attrs["dims"]), dts[0])]


def _fill_kernel(value, dims):
    if value.ndim:
        raise errors.InvalidArgumentError(f"fill: value must be a scalar, got shape {value.shape}")
    return np.full(dims, value, value.dtype)


_FILL = register("fill", _fill_kernel, _fill_infer, lambda op, g: [reduce_sum(g)],
                 attrs={"dims": "ints"}, num_inputs=1, defaults={},
                 onnx=lambda e, node, ins: e.op("Expand", ins[0], e.ints(node.attrs["dims"])), batch=vb.fill)


def fill(dims, value, name=None):
    """A tensor of shape `dims` filled with scalar `value` (its dtype): `df.fill([2], 7) -> [7, 7]`."""
    static, operand = _args.shape_operand("fill", dims, "dims")
    if operand is None:
        return run_op(_FILL, (value,), {"dims": static}, name)
    return dynamic_fill(operand, value, static, name)


def _range_kernel(start, limit, delta, dtype):
    n = _range_length(start, limit, delta, dtype)
    if dtype.is_integer:
        return np.arange(int(start), int(limit), int(delta), dtype=dtype.np)
    # start + i * delta in float64, rounded once to the dtype
    return (start + np.arange(n, dtype=np.float64) * delta).astype(dtype.np)


def _range_infer(shapes, dts, attrs):
    a = attrs
    if not a["dtype"].is_numeric:
        raise errors.InvalidArgumentError(f"range: dtype must be numeric, got {a['dtype'].name}")
    return [((_range_length(a["start"], a["limit"], a["delta"], a["dtype"]),), a["dtype"])]


def _range_onnx(e, node, ins):
    a = node.attrs
    if a["dtype"].is_integer:
        args = [e.scalar(int(a[k]), a["dtype"]) for k in ("start", "limit", "delta")]
        return e.op("Range", *args)
    # start + i * delta in float64, rounded once to the dtype (as the kernel)
    n = node.outputs[0].shape[0]
    steps = e.op("Range", *[e.scalar(v, dtypes.float64) for v in (0, n, 1)])
    values = e.op("Add", e.scalar(a["start"], dtypes.float64), e.op("Mul", steps, e.scalar(a["delta"], dtypes.float64)))
    return e.cast(values, a["dtype"])


_RANGE = register("range", _range_kernel, _range_infer, None,
                  attrs={"start": "float", "limit": "float", "delta": "float", "dtype": "dtype"},
                  num_inputs=0, defaults={}, onnx=_range_onnx)


def _range_arg(x):
    """(Python number or None, its default dtype, the tensor when known only at run time)."""
    if isinstance(x, Tensor) and not isinstance(x, EagerTensor):
        if len(x.shape):
            raise _args.error(f"range: arguments must be scalars, got {_args.describe(x)}")
        known = x.static_value() if hasattr(x, "static_value") else None
        if known is None:
            if not x.dtype.is_numeric:
                raise _args.error(f"range: arguments must be numbers, got {_args.describe(x)}", TypeError)
            return None, x.dtype, x
        x = np.asarray(known)
    if isinstance(x, (EagerTensor, np.ndarray, np.generic)):
        arr = np.asarray(x)
        if arr.ndim:
            raise _args.error(f"range: arguments must be scalars, got shape {arr.shape}")
        if arr.dtype.kind not in "iuf":
            raise _args.error(f"range: arguments must be numbers, got {_args.describe(arr)}", TypeError)
        return arr.item(), dtypes.from_numpy(arr.dtype), None
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise _args.error(f"range: arguments must be numbers, got {_args.describe(x)}", TypeError)
    return x, dtypes.int32 if isinstance(x, int) else dtypes.float32, None


def range(start, limit=None, delta=1, dtype=None, name=None):  # noqa: A001 - df.range, as in TF
    """`[start, start + delta, ...)` up to `limit` (one argument: `[0, start)`).

    Integers give int32, any float gives float32 (or pass `dtype`): `df.range(3) -> [0, 1, 2]`.
    While tracing the bounds may be scalar tensors computed when the graph runs
    (`df.range(df.size(x))`); the length is then unknown while tracing.
    """
    if limit is None:
        start, limit = 0, start
    args = [_range_arg(v) for v in (start, limit, delta)]
    if dtype is None:
        kinds = [d for _, d, _ in args]
        floats = [d for d in kinds if d.is_floating]
        pool = floats or kinds
        dtype = max(pool, key=lambda d: d.np.itemsize)
    dtype = dtypes.as_dtype(dtype)
    if not dtype.is_numeric:
        raise _args.error(f"range: dtype must be numeric, got {dtype.name}")
    if any(t is not None for _, _, t in args):
        return dynamic_range(*[np.asarray(v, dtype.np) if t is None else
                               (t if t.dtype is dtype else cast(t, dtype)) for v, _, t in args], name=name)
    s, l, d = (float(v) for v, _, _ in args)
    return run_op(_RANGE, (), {"start": s, "limit": l, "delta": d, "dtype": dtype}, name)
