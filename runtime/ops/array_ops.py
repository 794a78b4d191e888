"""Shape, indexing and creation ops: declarations and public functions.

This module defines `range` (the op), so Python's builtin is spelled `_pyrange` here.
"""
import builtins
import math
import operator

import numpy as np

from runtime import dtypes, errors, sites
from runtime.execute import run_op
from runtime.indexed_slices import IndexedSlices
from runtime.ops import _infer as inf
from runtime.ops.math_ops import unbroadcast, reduce_sum, cast, subtract
from runtime.registry import register
from runtime.tensor import EagerTensor, Tensor, convert_to_tensor

__all__ = ["identity", "stop_gradient", "zeros_like", "ones_like", "reshape", "expand_dims", "squeeze",
           "broadcast_to", "shape", "size", "where", "transpose", "concat", "stack", "unstack", "split",
           "tile", "pad", "gather", "one_hot", "zeros", "ones", "fill", "range"]

_pyrange = builtins.range

_EMPTY = {}


def _static_shape(shape, op_name):
    """A static shape argument (tuple/list/array/eager tensor) as a tuple of ints.

    While tracing, a symbolic tensor (or list entry) counts when its value is known then
    (`df.zeros(df.shape(x))` with x's shape static); otherwise the error says so.
    """
    shape = _known(shape, op_name)
    if hasattr(shape, "numpy"):
        shape = np.asarray(shape)
    try:
        return tuple(int(_known(d, op_name)) for d in
                     (shape.tolist() if isinstance(shape, np.ndarray) else shape))
    except TypeError:
        raise TypeError(f"{op_name}: shape must be a list of ints, got {shape!r}") from None


def _known(x, op_name):
    static = getattr(x, "static_value", None)
    if static is None:
        return x
    value = static()
    if value is None:
        raise errors.InvalidArgumentError(
            f"{op_name}: the shape argument {x.name} is only known when the graph runs (it "
            f"depends on sizes unknown while tracing); pass a static shape (e.g. an "
            f"input_signature without None there), or use -1 / an op sized like a tensor "
            f"(df.zeros_like, df.ones_like) (while tracing, at {sites.format_site(sites.user_site())})")
    return value


# ------------------------------------------------------------------ identity, stop_gradient
_IDENTITY = register("identity", lambda x: x, inf.unary_same("identity"), lambda op, g: [g])
_STOP_GRADIENT = register("stop_gradient", lambda x: x, inf.unary_same("stop_gradient"), None)


def identity(x, name=None):
    """The same value as a new tensor (a node of its own while tracing)."""
    return run_op(_IDENTITY, (x,), _EMPTY, name)


def stop_gradient(x, name=None):
    """The same value, with no gradient flowing back through it."""
    return run_op(_STOP_GRADIENT, (x,), _EMPTY, name)


# ------------------------------------------------------------------ zeros_like / ones_like
def _filled_like(value):
    """np.zeros_like / np.ones_like (same layout, an array even for a numpy scalar) without
    their Python wrapper: -1 us per call (a gradient's seed is one)."""
    def kernel(x):
        out = _empty_like(x)
        out.fill(value)
        return out
    return kernel


_empty_like = np.empty_like
_ZEROS_LIKE = register("zeros_like", _filled_like(0), inf.unary_same("zeros_like", None), lambda op, g: [None])
_ONES_LIKE = register("ones_like", _filled_like(1), inf.unary_same("ones_like", None), lambda op, g: [None])


def zeros_like(x, dtype=None, name=None):
    """Zeros with the shape (and dtype) of `x`."""
    out = run_op(_ZEROS_LIKE, (x,), _EMPTY, name)
    return cast(out, dtype) if dtype is not None and dtypes.as_dtype(dtype) is not out.dtype else out


def ones_like(x, dtype=None, name=None):
    """Ones with the shape (and dtype) of `x`."""
    out = run_op(_ONES_LIKE, (x,), _EMPTY, name)
    return cast(out, dtype) if dtype is not None and dtypes.as_dtype(dtype) is not out.dtype else out


# ------------------------------------------------------------------ reshape
def _reshape_infer(shapes, dts, attrs):
    shape = attrs["shape"]
    n_in = inf.num_elements(shapes[0])
    if shape.count(-1) > 1:
        raise errors.InvalidArgumentError(f"reshape: at most one -1 in shape {shape}")
    known = 1
    for d in shape:
        if d != -1:
            if d < 0:
                raise errors.InvalidArgumentError(f"reshape: negative size in shape {shape}")
            known *= d
    if -1 in shape:
        if n_in is None:
            out = tuple(None if d == -1 else d for d in shape)
        else:
            if known == 0 or n_in % known:
                raise errors.InvalidArgumentError(
                    f"reshape: cannot reshape {inf.shape_str(shapes[0])} ({n_in} elements) into {shape}")
            out = tuple(n_in // known if d == -1 else d for d in shape)
    else:
        if n_in is not None and n_in != known:
            raise errors.InvalidArgumentError(
                f"reshape: cannot reshape {inf.shape_str(shapes[0])} ({n_in} elements) into {shape} ({known} elements)")
        out = tuple(shape)
    return [(out, dts[0])]


def _reshape_grad(op, g):
    x = op.inputs[0]
    if None in tuple(x.shape):
        return [run_op(_RESHAPE_LIKE, (g, x))]
    return [reshape(g, x.shape)]


# The method x.reshape is what np.reshape calls, without its ~0.5 us of Python wrapping.
_RESHAPE = register("reshape", lambda x, shape: x.reshape(shape), _reshape_infer, _reshape_grad,
                    attrs={"shape": "ints"}, bind=lambda attrs: _bind_reshape(attrs["shape"]))


def _bind_reshape(shape):
    return lambda x: x.reshape(shape)


_RESHAPE_LIKE = register("reshape_like", lambda x, like: np.reshape(x, np.shape(like)),
                         lambda s, d, a: [(tuple(s[1]), d[0])],
                         lambda op, g: [run_op(_RESHAPE_LIKE, (g, op.inputs[0])), None])


def reshape(tensor, shape, name=None):
    """`tensor` with a new shape (one size may be -1): `df.reshape(x, [2, -1])`."""
    return run_op(_RESHAPE, (tensor,), {"shape": _static_shape(shape, "reshape")}, name)


# ------------------------------------------------------------------ expand_dims
def _expand_infer(shapes, dts, attrs):
    s = list(shapes[0])
    a = attrs["axis"]
    nd = len(s) + 1
    if not -nd <= a < nd:
        raise errors.InvalidArgumentError(f"expand_dims: axis {a} out of range for rank {len(s)}")
    s.insert(a % nd, 1)
    return [(tuple(s), dts[0])]


def _expand_key(axis):
    """The index inserting a size-1 axis at `axis` of the result: x[_expand_key(-1)] is
    x[..., None]. Indexing is np.expand_dims' view without its ~1.5 us of Python; an axis
    out of range leaves too many indices, which numpy refuses."""
    if axis >= 0:
        return (slice(None),) * axis + (None, Ellipsis)
    return (Ellipsis, None) + (slice(None),) * (-axis - 1)


def _expand_dims_kernel(x, axis):
    nd = x.ndim + 1
    if not -nd <= axis < nd:
        raise errors.InvalidArgumentError(f"expand_dims: axis {axis} out of range for rank {x.ndim}")
    return x[_expand_key(axis)]


def _bind_expand_dims(attrs):
    key = _expand_key(attrs["axis"])  # the rank is static: inference checked the axis
    return lambda x: x[key]


_EXPAND_DIMS = register("expand_dims", _expand_dims_kernel, _expand_infer,
                        lambda op, g: [squeeze(g, [op.attrs["axis"] % (len(op.inputs[0].shape) + 1)])],
                        attrs={"axis": "int"}, bind=_bind_expand_dims)


def expand_dims(input, axis, name=None):
    """Insert a size-1 dimension at `axis`."""
    return run_op(_EXPAND_DIMS, (input,), {"axis": int(axis)}, name)


# ------------------------------------------------------------------ squeeze
def _squeeze_axes(shape, axis):
    nd = len(shape)
    if axis is None:
        if None in shape:  # the output rank would depend on run-time sizes
            raise errors.InvalidArgumentError(
                f"squeeze: axis=None on shape {inf.shape_str(shape)} with unknown sizes leaves the rank "
                f"unknown; pass the axes to squeeze explicitly")
        return tuple(i for i, d in enumerate(shape) if d == 1)
    axes = tuple(sorted(inf.normalize_axis("squeeze", a, nd) for a in axis))
    for a in axes:
        if shape[a] is not None and shape[a] != 1:
            raise errors.InvalidArgumentError(
                f"squeeze: cannot squeeze axis {a} of size {shape[a]} (shape {inf.shape_str(shape)})")
    return axes


def _squeeze_infer(shapes, dts, attrs):
    axes = _squeeze_axes(shapes[0], attrs.get("axis"))
    return [(tuple(d for i, d in enumerate(shapes[0]) if i not in axes), dts[0])]


def _squeeze_kernel(x, axis=None):
    return np.squeeze(x, axis=axis) if axis is None else np.squeeze(x, axis=tuple(axis))


_SQUEEZE = register("squeeze", _squeeze_kernel, _squeeze_infer,
                    lambda op, g: [_reshape_grad(op, g)[0]], attrs={"axis": "opt_ints"})


def squeeze(input, axis=None, name=None):
    """Remove size-1 dimensions (all, or those in `axis`)."""
    if axis is not None:
        axis = (int(axis),) if isinstance(axis, (int, np.integer)) else tuple(int(a) for a in axis)
    return run_op(_SQUEEZE, (input,), {"axis": axis}, name)


# ------------------------------------------------------------------ broadcast_to
def _broadcast_to_infer(shapes, dts, attrs):
    target = attrs["shape"]
    out = inf.broadcast_shapes("broadcast_to", shapes[0], target)
    if out != tuple(target):
        raise errors.InvalidArgumentError(
            f"broadcast_to: cannot broadcast {inf.shape_str(shapes[0])} to {inf.shape_str(target)}")
    return [(tuple(target), dts[0])]


# Up to this many elements broadcast_to fills a new array instead of returning
# np.broadcast_to's read-only view: the same values, ~0.3 us instead of ~2.5 us of Python
# (a mean's gradient broadcasts a scalar). Larger results stay views: no copy.
_BROADCAST_COPY_MAX = 4096


def _broadcast_to_kernel(x, shape):
    return _bind_broadcast_to({"shape": shape})(x)


def _bind_broadcast_to(attrs):
    shape = tuple(attrs["shape"])
    if _prod(shape) > _BROADCAST_COPY_MAX:
        return lambda x: np.broadcast_to(x, shape)
    rank = len(shape)

    def broadcast_small(x):
        if x.ndim > rank:  # assignment would drop leading 1s; broadcast_to refuses them
            return np.broadcast_to(x, shape)
        out = _empty(shape, x.dtype)
        out[...] = x
        return out
    return broadcast_small


_prod, _empty = math.prod, np.empty
_BROADCAST_TO = register("broadcast_to", _broadcast_to_kernel, _broadcast_to_infer,
                         lambda op, g: [unbroadcast(g, op.inputs[0])], attrs={"shape": "ints"},
                         bind=_bind_broadcast_to)


def broadcast_to(input, shape, name=None):
    """`input` broadcast to `shape` (numpy rules)."""
    return run_op(_BROADCAST_TO, (input,), {"shape": _static_shape(shape, "broadcast_to")}, name)


# ------------------------------------------------------------------ shape, size
_SHAPE = register("shape", lambda x, out_type=dtypes.int32: np.asarray(np.shape(x), out_type.np),
                  lambda s, d, a: [((len(s[0]),), a.get("out_type", dtypes.int32))], None,
                  attrs={"out_type": "dtype"})
_SIZE = register("size", lambda x, out_type=dtypes.int32: np.asarray(np.size(x), out_type.np),
                 lambda s, d, a: [((), a.get("out_type", dtypes.int32))], None, attrs={"out_type": "dtype"})


def shape(input, out_type=dtypes.int32, name=None):
    """The shape of `input` as a 1-D int tensor (dynamic while tracing)."""
    return run_op(_SHAPE, (input,), {"out_type": dtypes.as_dtype(out_type)}, name)


def size(input, out_type=dtypes.int32, name=None):
    """The number of elements of `input` as a scalar int tensor."""
    return run_op(_SIZE, (input,), {"out_type": dtypes.as_dtype(out_type)}, name)


# ------------------------------------------------------------------ where
def _where_infer(shapes, dts, attrs):
    if dts[0] is not dtypes.bool:
        raise errors.InvalidArgumentError(f"where: condition must be bool, got {dts[0].name}")
    inf.check_same("where", dts[1:])
    s = inf.broadcast_shapes("where", shapes[0], shapes[1])
    return [(inf.broadcast_shapes("where", s, shapes[2]), dts[1])]


def _where_grad(op, g):
    c, x, y = op.inputs
    z = zeros_like(g)
    return [None, unbroadcast(where(c, g, z), x), unbroadcast(where(c, z, g), y)]


def _where_kernel(c, x, y):
    if c.dtype != np.bool_:
        raise errors.InvalidArgumentError(f"where: condition must be bool, got {c.dtype.name}")
    return np.where(c, x, y)


_WHERE = register("where", _where_kernel, _where_infer, _where_grad, same_dtype=(1, 2))


def where(condition, x, y, name=None):
    """Elementwise `x if condition else y`, with broadcasting."""
    return run_op(_WHERE, (condition, x, y), _EMPTY, name)


# ---------------------------------------------------------------------------------------
# Helpers for the ops below.

def _rank(x):
    """Static rank of a tensor, variable, array or nested list (always known, even traced)."""
    s = getattr(x, "shape", None)
    return len(s) if s is not None else np.ndim(x)


def _norm_axis(op_name, axis, rank):
    """`axis` as a non-negative int for a tensor of `rank` (raises naming `op_name`)."""
    axis = operator.index(axis)
    if not -rank <= axis < rank:
        raise errors.InvalidArgumentError(
            f"{op_name}: axis {axis} is out of range for a tensor of rank {rank} "
            f"(expected {-rank} <= axis < {rank})")
    return axis % rank


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
            f"{', '.join(inf.shape_str(s) for s in shapes)}")
    return a


def _check_int_dtype(op_name, what, dtype):
    if not dtype.is_integer:
        raise errors.InvalidArgumentError(f"{op_name}: {what} must be int32 or int64, got {dtype.name}")


# ------------------------------------------------------------------ transpose
def _transpose_infer(shapes, dts, attrs):
    s, perm = shapes[0], attrs["perm"]
    if sorted(perm) != list(_pyrange(len(s))):
        raise errors.InvalidArgumentError(
            f"transpose: perm {perm} is not a permutation of the axes of shape {inf.shape_str(s)}")
    return [(tuple(s[p] for p in perm), dts[0])]


def _transpose_grad(op, g):
    return [transpose(g, tuple(int(i) for i in np.argsort(op.attrs["perm"])))]


_TRANSPOSE = register("transpose", lambda x, perm: x.transpose(perm), _transpose_infer,
                      _transpose_grad, attrs={"perm": "ints"},
                      bind=lambda attrs: _bind_transpose(attrs["perm"]))


def _bind_transpose(perm):
    return lambda x: x.transpose(perm)


def transpose(x, perm=None, name=None):
    """Permute the axes of `x` (reverse them by default): `df.transpose(m)` is `m.T`."""
    rank = _rank(x)
    if perm is None:
        perm = tuple(_pyrange(rank - 1, -1, -1))
    else:
        perm = tuple(p % rank if -rank <= p < rank else p for p in _static_shape(perm, "transpose"))
    return run_op(_TRANSPOSE, (x,), {"perm": perm}, name)


# ------------------------------------------------------------------ concat, split_like
def _concat_infer(shapes, dts, attrs):
    inf.check_same("concat", dts)
    axis, rank = attrs["axis"], len(shapes[0])
    if rank == 0 or any(len(s) != rank for s in shapes):
        raise errors.InvalidArgumentError(
            f"concat: inputs must all have the same rank >= 1, got shapes "
            f"{', '.join(inf.shape_str(s) for s in shapes)}")
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


_CONCAT = register("concat", _concat_kernel, _concat_infer, _concat_grad, attrs={"axis": "int"})


def concat(values, axis, name=None):
    """Join tensors along an existing `axis`: `df.concat([a, b], 0)`."""
    values = list(values)
    if not values:
        raise errors.InvalidArgumentError("concat: needs at least one input tensor")
    rank = _rank(values[0])
    if rank:
        axis = _norm_axis("concat", axis, rank)
    return run_op(_CONCAT, values, {"axis": int(axis)}, name)


def _split_like_kernel(g, *likes, axis):
    ends = np.cumsum([np.shape(x)[axis] for x in likes])[:-1]
    return tuple(np.split(g, ends, axis))


def _split_like_infer(shapes, dts, attrs):
    axis = attrs["axis"]
    out = []
    for s in shapes[1:]:
        o = list(shapes[0])
        o[axis] = s[axis]
        out.append((tuple(o), dts[0]))
    return out


# Internal: the gradient of a traced concat whose input sizes are unknown until run time.
_SPLIT_LIKE = register("split_like", _split_like_kernel, _split_like_infer,
                       lambda op, *gs: [concat(gs, op.attrs["axis"])] + [None] * (len(op.inputs) - 1),
                       attrs={"axis": "int"}, num_outputs=lambda attrs, n: n - 1)


# ------------------------------------------------------------------ stack, unstack
def _stack_infer(shapes, dts, attrs):
    inf.check_same("stack", dts)
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        raise errors.InvalidArgumentError(
            f"stack: inputs must have the same shape, got {', '.join(inf.shape_str(s) for s in shapes)}")
    out = list(shapes[0])
    for s in shapes[1:]:
        out = [_merge_dim("stack", a, b, shapes) for a, b in zip(out, s)]
    out.insert(_norm_axis("stack", attrs["axis"], rank + 1), len(shapes))
    return [(tuple(out), dts[0])]


def _stack_kernel(*xs, axis):
    _check_same_arrays("stack", xs)
    return np.stack(xs, axis)


_STACK = register("stack", _stack_kernel, _stack_infer,
                  lambda op, g: list(unstack(g, len(op.inputs), op.attrs["axis"])), attrs={"axis": "int"})


def stack(values, axis=0, name=None):
    """Join same-shaped tensors along a new `axis`: `df.stack([a, b])` has shape (2,) + a.shape."""
    values = list(values)
    if not values:
        raise errors.InvalidArgumentError("stack: needs at least one input tensor")
    axis = _norm_axis("stack", axis, _rank(values[0]) + 1)
    return run_op(_STACK, values, {"axis": axis}, name)


def _unstack_infer(shapes, dts, attrs):
    s, axis, num = list(shapes[0]), attrs["axis"], attrs["num"]
    if s[axis] is not None and s[axis] != num:
        raise errors.InvalidArgumentError(
            f"unstack: num={num} but axis {axis} of shape {inf.shape_str(shapes[0])} has size {s[axis]}")
    del s[axis]
    return [(tuple(s), dts[0])] * num


def _unstack_kernel(x, num, axis):
    if x.shape[axis] != num:
        raise errors.InvalidArgumentError(f"unstack: num={num} but axis {axis} has size {x.shape[axis]}")
    lead = (slice(None),) * axis
    return tuple(x[lead + (i,)] for i in _pyrange(num))


_UNSTACK = register("unstack", _unstack_kernel, _unstack_infer,
                    lambda op, *gs: [stack(gs, op.attrs["axis"])],
                    attrs={"num": "int", "axis": "int"}, num_outputs=lambda attrs, n: attrs["num"])


def unstack(value, num=None, axis=0, name=None):
    """The slices of `value` along `axis`, as a tuple (the inverse of `stack`)."""
    rank = _rank(value)
    if rank == 0:
        raise errors.InvalidArgumentError("unstack: cannot unstack a scalar")
    axis = _norm_axis("unstack", axis, rank)
    if num is None:
        num = value.shape[axis] if hasattr(value, "shape") else np.shape(value)[axis]
        if num is None:
            raise errors.InvalidArgumentError(
                f"unstack: the size of axis {axis} is unknown while tracing; pass num=")
    return run_op(_UNSTACK, (value,), {"num": int(num), "axis": axis}, name)


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
                f"split: axis {axis} of shape {inf.shape_str(s)} (size {dim}) does not divide into {num} "
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


_SPLIT = register("split", _split_kernel, _split_infer, lambda op, *gs: [concat(gs, op.attrs["axis"])],
                  attrs={"num_split": "int", "size_splits": "opt_ints", "axis": "int"},
                  num_outputs=_split_count)


def split(value, num_or_size_splits, axis=0, name=None):
    """Split along `axis` into n equal parts or parts of the given sizes (one may be -1).

    >>> a, b = df.split(df.range(5), [2, 3])   # [0, 1] and [2, 3, 4]
    """
    axis = _norm_axis("split", axis, _rank(value))
    if isinstance(num_or_size_splits, (int, np.integer)) or (
            isinstance(num_or_size_splits, EagerTensor) and num_or_size_splits.ndim == 0):
        num = int(num_or_size_splits)
        if num <= 0:
            raise errors.InvalidArgumentError(f"split: the number of splits must be positive, got {num}")
        attrs = {"num_split": num, "size_splits": None, "axis": axis}
    else:
        sizes = _static_shape(num_or_size_splits, "split")
        attrs = {"num_split": len(sizes), "size_splits": sizes, "axis": axis}
    return run_op(_SPLIT, (value,), attrs, name)


# ------------------------------------------------------------------ tile, tile_reduce
def _tile_infer(shapes, dts, attrs):
    s, m = shapes[0], attrs["multiples"]
    if len(m) != len(s) or any(k < 0 for k in m):
        raise errors.InvalidArgumentError(
            f"tile: multiples {m} must hold one non-negative int per axis of shape {inf.shape_str(s)}")
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
            f"tile_reduce: multiples {m} must hold one positive int per axis of {inf.shape_str(shapes[0])}")
    return [(tuple(None if d is None else d // k for d, k in zip(shapes[0], m)), dts[0])]


def _tile_grad(op, g):
    if 0 in op.attrs["multiples"]:  # the output is empty: nothing flows back
        return [zeros_like(op.inputs[0])]
    return [run_op(_TILE_REDUCE, (g,), op.attrs)]


_TILE = register("tile", _tile_kernel, _tile_infer, _tile_grad, attrs={"multiples": "ints"})
# Internal: the gradient of tile for positive multiples (its own gradient is tile again).
_TILE_REDUCE = register("tile_reduce", _tile_reduce_kernel, _tile_reduce_infer,
                        lambda op, g: [tile(g, op.attrs["multiples"])], attrs={"multiples": "ints"})


def tile(input, multiples, name=None):
    """Repeat `input` `multiples[i]` times along axis i: `df.tile([1, 2], [2]) -> [1, 2, 1, 2]`."""
    return run_op(_TILE, (input,), {"multiples": _static_shape(multiples, "tile")}, name)


# ------------------------------------------------------------------ pad, pad_grad
_PAD_MODES = ("CONSTANT", "REFLECT", "SYMMETRIC")


def _pairs(paddings):
    return [(paddings[i], paddings[i + 1]) for i in _pyrange(0, len(paddings), 2)]


def _check_pad(shape, paddings, mode):
    """Validate flattened `paddings` against a (possibly partial) shape; raises naming pad."""
    if len(paddings) != 2 * len(shape) or min(paddings, default=0) < 0:
        raise errors.InvalidArgumentError(
            f"pad: paddings must be one non-negative [before, after] pair per axis of shape "
            f"{inf.shape_str(shape)}, got {_pairs(paddings)}")
    limit = {"REFLECT": 1, "SYMMETRIC": 0}.get(mode)
    if limit is not None:
        for d, (b, a) in zip(shape, _pairs(paddings)):
            if d is not None and max(b, a) > d - limit:
                raise errors.InvalidArgumentError(
                    f"pad: {mode} padding {[b, a]} is too large for an axis of size {d} "
                    f"(at most {d - limit}) in shape {inf.shape_str(shape)}")


def _pad_infer(shapes, dts, attrs):
    inf.check_same("pad", dts)
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


_PAD = register("pad", _pad_kernel, _pad_infer, _pad_grad, same_dtype=(0, 1),
                attrs={"paddings": "ints", "mode": "str"})
# Internal: the gradient of pad (its own gradient is pad with zeros).
_PAD_GRAD = register("pad_grad", _pad_grad_kernel, _pad_grad_infer,
                     lambda op, g: [pad(g, _pairs(op.attrs["paddings"]), op.attrs["mode"])],
                     attrs={"paddings": "ints", "mode": "str"})


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """Pad each axis by `paddings[i] = [before, after]` (CONSTANT, REFLECT or SYMMETRIC).

    >>> df.pad([[1, 2]], [[0, 0], [1, 1]])   # [[0, 1, 2, 0]]
    """
    m = str(mode).upper()
    if m not in _PAD_MODES:
        raise errors.InvalidArgumentError(f"pad: mode must be one of {', '.join(_PAD_MODES)}, got {mode!r}")
    p = np.asarray(paddings)
    if p.size == 0:  # a scalar has no axes to pad
        p = p.reshape(0, 2)
    if p.ndim != 2 or p.shape[1:] != (2,):
        raise errors.InvalidArgumentError(
            f"pad: paddings must have shape [rank, 2], got {p.tolist()!r}")
    flat = tuple(int(v) for v in p.reshape(-1))
    if not isinstance(tensor, Tensor) and not hasattr(tensor, "_as_tensor"):
        tensor = convert_to_tensor(tensor)  # so a Python constant_values adopts its dtype
    return run_op(_PAD, (tensor, constant_values), {"paddings": flat, "mode": m}, name)


# ------------------------------------------------------------------ gather, gather_grad
def _gather_infer(shapes, dts, attrs):
    _check_int_dtype("gather", "indices", dts[1])
    p, axis = shapes[0], attrs["axis"]
    if not p:
        raise errors.InvalidArgumentError("gather: params must have rank >= 1, got a scalar")
    axis = _norm_axis("gather", axis, len(p))
    return [(tuple(p[:axis]) + tuple(shapes[1]) + tuple(p[axis + 1:]), dts[0])]


def _check_gather_indices(params, indices, axis):
    if indices.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(f"gather: indices must be int32 or int64, got {indices.dtype}")
    n = params.shape[axis]
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        bad = indices[(indices < 0) | (indices >= n)].reshape(-1)[0]
        raise errors.InvalidArgumentError(
            f"gather: index {bad} is out of range [0, {n}) for axis {axis} of params shape {params.shape}")


def _gather_kernel(params, indices, axis):
    _check_gather_indices(params, indices, axis)
    return np.take(params, indices, axis)


def _gather_grad(op, g):
    params, indices = op.inputs
    axis = op.attrs["axis"]
    pshape = tuple(params.shape)
    if axis == 0 and None not in pshape:
        # sparse: row indices[i] of the gradient is values[i]
        if len(indices.shape) == 1:
            return [IndexedSlices(g, indices, pshape), None]
        if None not in tuple(indices.shape):
            return [IndexedSlices(reshape(g, (-1,) + pshape[1:]), reshape(indices, (-1,)), pshape), None]
    return [run_op(_GATHER_GRAD, (g, indices, params), op.attrs), None]


def _gather_grad_kernel(g, indices, params, axis):
    """Dense scatter-add of `g` into zeros shaped like `params` (repeated indices add up)."""
    out = np.zeros(params.shape, g.dtype)
    k = indices.ndim
    rows = np.moveaxis(out, axis, 0)
    vals = np.moveaxis(g, tuple(_pyrange(axis, axis + k)), tuple(_pyrange(k)))
    np.add.at(rows, indices.reshape(-1), vals.reshape((-1,) + rows.shape[1:]))
    return out


_GATHER = register("gather", _gather_kernel, _gather_infer, _gather_grad, attrs={"axis": "int"})
# Internal: the dense gradient of gather (axis != 0, or sizes unknown while tracing).
_GATHER_GRAD = register("gather_grad", _gather_grad_kernel,
                        lambda s, d, a: [(tuple(s[2]), d[0])],
                        lambda op, gg: [gather(gg, op.inputs[1], op.attrs["axis"]), None, None],
                        attrs={"axis": "int"})


# gather with batch_dims=b: the first b axes of params and indices are matched one to one
# (TensorFlow's semantics). Its own op, so plain gathers keep their attrs and sparse gradient.
def _batch_gather_infer(shapes, dts, attrs):
    _check_int_dtype("gather", "indices", dts[1])
    p, i, b = tuple(shapes[0]), tuple(shapes[1]), attrs["batch_dims"]
    axis = _norm_axis("gather", attrs["axis"], max(len(p), 1))
    _check_batch_dims(b, len(i), axis)
    if any(x is not None and y is not None and x != y for x, y in zip(p[:b], i[:b])):
        raise errors.InvalidArgumentError(
            f"gather: with batch_dims={b}, params {inf.shape_str(p)} and indices {inf.shape_str(i)} must agree "
            f"on their first {b} sizes")
    batch = tuple(x if x is not None else y for x, y in zip(p[:b], i[:b]))
    return [(batch + p[b:axis] + i[b:] + p[axis + 1:], dts[0])]


def _check_batch_dims(b, indices_rank, axis):
    if not 0 < b <= min(indices_rank, axis):
        raise errors.InvalidArgumentError(
            f"gather: batch_dims={b} must be at most the rank of indices ({indices_rank}) and the axis ({axis})")


def _batch_gather_index(indices, pshape, axis, batch_dims):
    """The numpy index of a batched gather: one index array per params axis, broadcasting to
    the result's shape (batch, params[b:axis], indices[b:], params[axis+1:])."""
    b, ki = batch_dims, indices.ndim - batch_dims
    index = []
    for d, n in enumerate(pshape):
        if d == axis:
            index.append(indices.reshape(indices.shape[:b] + (1,) * (axis - b) + indices.shape[b:] +
                                         (1,) * (len(pshape) - axis - 1)))
        else:
            shape = [1] * (len(pshape) - 1 + ki)
            shape[d if d < axis else d - 1 + ki] = n
            index.append(np.arange(n).reshape(shape))
    return tuple(index)


def _batch_gather_kernel(params, indices, axis, batch_dims):
    _check_gather_indices(params, indices, axis)
    if params.shape[:batch_dims] != indices.shape[:batch_dims]:
        raise errors.InvalidArgumentError(
            f"gather: with batch_dims={batch_dims}, params {params.shape} and indices {indices.shape} must agree "
            f"on their first {batch_dims} sizes")
    return params[_batch_gather_index(indices, params.shape, axis, batch_dims)]


def _batch_gather_grad_kernel(g, indices, params, axis, batch_dims):
    out = np.zeros(params.shape, g.dtype)
    np.add.at(out, _batch_gather_index(indices, params.shape, axis, batch_dims), g)
    return out


_BATCH_ATTRS = {"axis": "int", "batch_dims": "int"}
_BATCH_GATHER = register(
    "batch_gather", _batch_gather_kernel, _batch_gather_infer,
    lambda op, g: [run_op(_BATCH_GATHER_GRAD, (g, op.inputs[1], op.inputs[0]), op.attrs), None],
    num_inputs=2, attrs=_BATCH_ATTRS, defaults={})
# Internal: the (dense) gradient of batch_gather, whose own gradient is that gather.
_BATCH_GATHER_GRAD = register(
    "batch_gather_grad", _batch_gather_grad_kernel, lambda s, d, a: [(tuple(s[2]), d[0])],
    lambda op, gg: [gather(gg, op.inputs[1], op.attrs["axis"], op.attrs["batch_dims"]), None, None],
    num_inputs=3, attrs=_BATCH_ATTRS, defaults={})


def gather(params, indices, axis=None, batch_dims=0, name=None):
    """Slices of `params` at integer `indices` along `axis`; the gradient is an IndexedSlices.
    With `batch_dims=b` the first b axes of params and indices are batch axes, matched one to
    one (negative b counts from the rank of indices; `axis` defaults to b).

    >>> df.gather([[1, 2], [3, 4], [5, 6]], [2, 0])                    # [[5, 6], [1, 2]]
    >>> df.gather([[1, 2], [3, 4]], [[1], [0]], axis=1, batch_dims=1)  # [[2], [3]]
    """
    rank = _rank(params)
    if rank == 0:
        raise errors.InvalidArgumentError("gather: params must have rank >= 1, got a scalar")
    batch_dims = operator.index(batch_dims)
    if batch_dims < 0:
        batch_dims += _rank(indices)
    axis = _norm_axis("gather", batch_dims if axis is None else axis, rank)
    if batch_dims:
        _check_batch_dims(batch_dims, _rank(indices), axis)
        return run_op(_BATCH_GATHER, (params, indices), {"axis": axis, "batch_dims": batch_dims}, name)
    return run_op(_GATHER, (params, indices), {"axis": axis}, name)


# ------------------------------------------------------------------ one_hot
def _one_hot_infer(shapes, dts, attrs):
    _check_int_dtype("one_hot", "indices", dts[0])
    s = list(shapes[0])
    s.insert(attrs["axis"], attrs["depth"])
    return [(tuple(s), attrs["dtype"])]


def _one_hot_kernel(indices, depth, on_value, off_value, axis, dtype):
    if indices.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(f"one_hot: indices must be int32 or int64, got {indices.dtype}")
    hot = np.expand_dims(indices, -1) == np.arange(depth)
    out = np.where(hot, on_value, off_value).astype(dtype.np)
    return np.moveaxis(out, -1, axis) if axis != indices.ndim else out


_ONE_HOT = register("one_hot", _one_hot_kernel, _one_hot_infer, None,
                    attrs={"depth": "int", "on_value": "float", "off_value": "float", "axis": "int",
                           "dtype": "dtype"})


def one_hot(indices, depth, on_value=1.0, off_value=0.0, axis=-1, dtype=dtypes.float32, name=None):
    """`on_value` where the new axis equals `indices`, else `off_value` (out-of-range: all off).

    >>> df.one_hot([0, 2], 3)   # [[1., 0., 0.], [0., 0., 1.]]  (not differentiable)
    """
    rank = _rank(indices)
    axis = rank if axis == -1 else _norm_axis("one_hot", axis, rank + 1)
    depth = int(depth)
    if depth < 0:
        raise errors.InvalidArgumentError(f"one_hot: depth must be non-negative, got {depth}")
    attrs = {"depth": depth, "on_value": float(on_value), "off_value": float(off_value), "axis": axis,
             "dtype": dtypes.as_dtype(dtype)}
    return run_op(_ONE_HOT, (indices,), attrs, name)


# ------------------------------------------------------------------ strided slicing: t[...]
# Attrs describe every input axis: begin/end/strides, bit d of begin_mask/end_mask set when
# that bound was omitted, bit d of shrink_axis_mask set when axis d is indexed by an int
# (kept in `begin`, the axis disappears); `new_axis` lists output positions of `None`s.
_SLICE_ATTRS = {"begin": "ints", "end": "ints", "strides": "ints", "begin_mask": "int",
                "end_mask": "int", "shrink_axis_mask": "int", "new_axis": "ints"}


def _numpy_key(begin, end, strides, begin_mask, end_mask, shrink_axis_mask):
    key = []
    for d, (b, e, s) in enumerate(zip(begin, end, strides)):
        if shrink_axis_mask >> d & 1:
            key.append(b)
        else:
            key.append(slice(None if begin_mask >> d & 1 else b, None if end_mask >> d & 1 else e, s))
    return tuple(key)


def _strided_slice_kernel(x, begin, end, strides, begin_mask, end_mask, shrink_axis_mask, new_axis):
    if len(begin) != x.ndim:
        raise errors.InvalidArgumentError(
            f"strided_slice: the index covers {len(begin)} axes, the tensor has shape {x.shape}")
    y = x[_numpy_key(begin, end, strides, begin_mask, end_mask, shrink_axis_mask)]
    return np.expand_dims(y, new_axis) if new_axis else y


def _strided_slice_infer(shapes, dts, attrs):
    s = shapes[0]
    begin, end, strides = attrs["begin"], attrs["end"], attrs["strides"]
    if len(begin) != len(s):
        raise errors.InvalidArgumentError(
            f"strided_slice: the index covers {len(begin)} axes, the tensor has shape {inf.shape_str(s)}")
    bm, em, sm = attrs["begin_mask"], attrs["end_mask"], attrs["shrink_axis_mask"]
    out = []
    for d, n in enumerate(s):
        if sm >> d & 1:
            if n is not None and not -n <= begin[d] < n:
                raise errors.InvalidArgumentError(
                    f"strided_slice: index {begin[d]} is out of range for axis {d} of shape "
                    f"{inf.shape_str(s)}")
            continue
        if n is None:
            out.append(None)
        else:
            sl = slice(None if bm >> d & 1 else begin[d], None if em >> d & 1 else end[d], strides[d])
            out.append(len(_pyrange(*sl.indices(n))))
    for p in attrs["new_axis"]:
        out.insert(p, 1)
    return [(tuple(out), dts[0])]


def _strided_slice_grad_kernel(g, like, begin, end, strides, begin_mask, end_mask, shrink_axis_mask,
                               new_axis):
    out = np.zeros(np.shape(like), g.dtype)
    key = _numpy_key(begin, end, strides, begin_mask, end_mask, shrink_axis_mask)
    out[key] = np.squeeze(g, tuple(new_axis)) if new_axis else g
    return out


_STRIDED_SLICE = register("strided_slice", _strided_slice_kernel, _strided_slice_infer,
                          lambda op, g: [run_op(_STRIDED_SLICE_GRAD, (g, op.inputs[0]), op.attrs)],
                          attrs=_SLICE_ATTRS)
# Internal: the gradient of strided_slice, scattering `g` into zeros shaped like the input.
_STRIDED_SLICE_GRAD = register("strided_slice_grad", _strided_slice_grad_kernel,
                               lambda s, d, a: [(tuple(s[1]), d[0])],
                               lambda op, gg: [run_op(_STRIDED_SLICE, (gg,), op.attrs), None],
                               attrs=_SLICE_ATTRS)


def _index_value(k):
    """A static int from a key item (Python/numpy int or an eager integer scalar tensor)."""
    if isinstance(k, (bool, np.bool_)):
        raise TypeError(f"strided_slice: boolean index {k!r} is not supported; use df.where or df.gather")
    if isinstance(k, Tensor) and not isinstance(k, EagerTensor):
        raise TypeError("strided_slice: indices must be static Python ints while tracing, got a symbolic "
                        "tensor; use df.gather(t, index) for a data-dependent index")
    try:
        return operator.index(k)
    except TypeError:
        raise TypeError(f"strided_slice: index {k!r} is not an int, slice, ..., or None; use df.gather "
                        f"for lists or tensors of indices") from None


def _slice_attrs(key, rank):
    """Attrs of the one strided_slice op computing `t[key]` for a tensor of `rank`."""
    key = key if isinstance(key, tuple) else (key,)
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise errors.InvalidArgumentError("strided_slice: an index can hold only one ellipsis (...)")
    if consumed > rank:
        raise errors.InvalidArgumentError(
            f"strided_slice: too many indices ({consumed}) for a tensor of rank {rank}")
    if Ellipsis not in key:
        key = key + (Ellipsis,)
    begin, end, strides, new_axis = [], [], [], []
    bm = em = sm = 0
    out_pos = 0

    def full_axis():
        nonlocal bm, em
        d = len(begin)
        begin.append(0), end.append(0), strides.append(1)
        bm |= 1 << d
        em |= 1 << d

    for k in key:
        d = len(begin)
        if k is Ellipsis:
            for _ in _pyrange(rank - consumed):
                full_axis()
                out_pos += 1
        elif k is None:
            new_axis.append(out_pos)
            out_pos += 1
        elif isinstance(k, slice):
            step = 1 if k.step is None else _index_value(k.step)
            if step == 0:
                raise errors.InvalidArgumentError("strided_slice: slice step cannot be zero")
            begin.append(0 if k.start is None else _index_value(k.start))
            end.append(0 if k.stop is None else _index_value(k.stop))
            strides.append(step)
            bm |= (k.start is None) << d
            em |= (k.stop is None) << d
            out_pos += 1
        else:
            i = _index_value(k)
            begin.append(i), end.append(i + 1), strides.append(1)
            sm |= 1 << d
    return {"begin": tuple(begin), "end": tuple(end), "strides": tuple(strides), "begin_mask": bm,
            "end_mask": em, "shrink_axis_mask": sm, "new_axis": tuple(new_axis)}


def strided_slice(input, key, name=None):
    """`input[key]` as one op: `key` holds ints, slices (any step), `...` and `None`."""
    return run_op(_STRIDED_SLICE, (input,), _slice_attrs(key, _rank(input)), name)


def slice_helper(tensor, key):
    """`Tensor.__getitem__`: `t[1:, ::-1, None, ..., 0]` is one differentiable strided_slice."""
    return strided_slice(tensor, key)


# ------------------------------------------------------------------ zeros, ones, fill, range
def _shape_attr_infer(op_name):
    def infer(shapes, dts, attrs):
        if min(attrs["shape"], default=0) < 0:
            raise errors.InvalidArgumentError(f"{op_name}: negative size in shape {attrs['shape']}")
        return [(tuple(attrs["shape"]), attrs["dtype"])]
    return infer


_ZEROS = register("zeros", lambda shape, dtype: np.zeros(shape, dtype.np), _shape_attr_infer("zeros"), None,
                  attrs={"shape": "ints", "dtype": "dtype"})
_ONES = register("ones", lambda shape, dtype: np.ones(shape, dtype.np), _shape_attr_infer("ones"), None,
                 attrs={"shape": "ints", "dtype": "dtype"})


def zeros(shape, dtype=dtypes.float32, name=None):
    """A tensor of zeros: `df.zeros([2, 3])` (float32 unless `dtype` says otherwise)."""
    return run_op(_ZEROS, (), {"shape": _static_shape(shape, "zeros"), "dtype": dtypes.as_dtype(dtype)}, name)


def ones(shape, dtype=dtypes.float32, name=None):
    """A tensor of ones: `df.ones([2, 3], df.int32)`."""
    return run_op(_ONES, (), {"shape": _static_shape(shape, "ones"), "dtype": dtypes.as_dtype(dtype)}, name)


def _fill_infer(shapes, dts, attrs):
    if len(shapes[0]):
        raise errors.InvalidArgumentError(f"fill: value must be a scalar, got shape {inf.shape_str(shapes[0])}")
    if min(attrs["dims"], default=0) < 0:
        raise errors.InvalidArgumentError(f"fill: negative size in dims {attrs['dims']}")
    return [(tuple(attrs["dims"]), dts[0])]


def _fill_kernel(value, dims):
    if value.ndim:
        raise errors.InvalidArgumentError(f"fill: value must be a scalar, got shape {value.shape}")
    return np.full(dims, value, value.dtype)


_FILL = register("fill", _fill_kernel, _fill_infer, lambda op, g: [reduce_sum(g)], attrs={"dims": "ints"})


def fill(dims, value, name=None):
    """A tensor of shape `dims` filled with scalar `value` (its dtype): `df.fill([2], 7) -> [7, 7]`."""
    return run_op(_FILL, (value,), {"dims": _static_shape(dims, "fill")}, name)


def _range_length(start, limit, delta, dtype):
    if delta == 0:
        raise errors.InvalidArgumentError("range: delta must not be 0")
    if (delta > 0 and start > limit) or (delta < 0 and start < limit):
        raise errors.InvalidArgumentError(
            f"range: start={start} must be {'<=' if delta > 0 else '>='} limit={limit} when delta={delta}")
    if dtype.is_integer:
        return len(_pyrange(int(start), int(limit), int(delta)))
    return int(np.ceil((limit - start) / delta))


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


_RANGE = register("range", _range_kernel, _range_infer, None,
                  attrs={"start": "float", "limit": "float", "delta": "float", "dtype": "dtype"})


def _range_arg(x):
    """(Python number, its default dtype) for one range argument."""
    if isinstance(x, Tensor) and not isinstance(x, EagerTensor):
        raise TypeError("range: start, limit and delta must be static numbers while tracing")
    if isinstance(x, (EagerTensor, np.ndarray, np.generic)):
        arr = np.asarray(x)
        if arr.ndim:
            raise errors.InvalidArgumentError(f"range: arguments must be scalars, got shape {arr.shape}")
        return arr.item(), dtypes.from_numpy(arr.dtype)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"range: arguments must be numbers, got {x!r}")
    return x, dtypes.int32 if isinstance(x, int) else dtypes.float32


def range(start, limit=None, delta=1, dtype=None, name=None):  # noqa: A001 - df.range, as in TF
    """`[start, start + delta, ...)` up to `limit` (one argument: `[0, start)`).

    Integers give int32, any float gives float32 (or pass `dtype`): `df.range(3) -> [0, 1, 2]`.
    """
    if limit is None:
        start, limit = 0, start
    args = [_range_arg(v) for v in (start, limit, delta)]
    if dtype is None:
        kinds = [d for _, d in args]
        floats = [d for d in kinds if d.is_floating]
        pool = floats or kinds
        dtype = max(pool, key=lambda d: d.np.itemsize)
    dtype = dtypes.as_dtype(dtype)
    if not dtype.is_numeric:
        raise errors.InvalidArgumentError(f"range: dtype must be numeric, got {dtype.name}")
    s, l, d = (float(v) for v, _ in args)
    return run_op(_RANGE, (), {"start": s, "limit": l, "delta": d, "dtype": dtype}, name)
