"""sort, argsort and top_k: declarations and public functions.

Orders are stable with ties to the lower index in both directions (TensorFlow's top_k, and its
argsort with stable=True). Gradients put each output's gradient back at the position its value
came from: `scatter_along_axis`, an internal op whose gradient is `take_along_axis` (and the
reverse), so sorting is differentiable to any order.
"""
import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, _costs, shape_rules
from defun.runtime.ops._onnx import scatter_adjoint, shape_of
from defun.runtime.ops.index_ops import _norm_axis, _rank
from defun.runtime.registry import one_of, register
from defun.runtime import batching as bt

__all__ = ["sort", "argsort", "top_k"]

_DIRECTIONS = ("ASCENDING", "DESCENDING")


def _stable_order(x, axis, descending):
    """Indices sorting `x` along `axis`, ties in index order (also when descending)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    # stably sort the reversed array and reverse the result: descending values, and equal
    # values in increasing original index (no negation: it would overflow the smallest int)
    n = x.shape[axis]
    flipped = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return (n - 1) - np.flip(flipped, axis)


def _check_direction(op_name, direction):
    if direction not in _DIRECTIONS:
        raise errors.InvalidArgumentError(
            f"{op_name}: direction must be 'ASCENDING' or 'DESCENDING', got {direction!r}")


def _sort_infer(op_name, out_dtype=None):
    def infer(shapes, dts, attrs):
        shape_rules.check_kinds(op_name, dts[0], shape_rules.numeric_kinds)
        if not shapes[0]:
            raise errors.InvalidArgumentError(f"{op_name}: input must have rank >= 1, got a scalar")
        _norm_axis(op_name, attrs["axis"], len(shapes[0]))
        _check_direction(op_name, attrs["direction"])
        return [(tuple(shapes[0]), out_dtype or dts[0])]
    return infer


def _sort_kernel(x, axis, direction):
    _check_direction("sort", direction)
    if direction == "ASCENDING":
        return np.sort(x, axis=axis, kind="stable")
    return np.flip(np.sort(x, axis=axis), axis)


def _argsort_kernel(x, axis, direction):
    _check_direction("argsort", direction)
    return _stable_order(x, axis, direction == "DESCENDING").astype(np.int32)


def _sort_grad(op, g):
    x = op.inputs[0]
    axis, direction = op.attrs["axis"], op.attrs["direction"]
    order = run_op(_ARGSORT, (x,), {"axis": axis, "direction": direction})
    return [run_op(_SCATTER_ALONG_AXIS, (g, order, x), {"axis": axis})]


def _sorted_onnx(e, node, x):
    """(values, int64 indices) of a full TopK along the axis: ONNX's TopK orders ties by
    the lower index in both directions, as these ops do."""
    axis = node.attrs["axis"] % len(node.inputs[0].shape)
    return e.op("TopK", x, e.dim(x, axis, node.inputs[0].shape), n=2, axis=axis,
                largest=int(node.attrs["direction"] == "DESCENDING"), sorted=1)


_SORT_ATTRS = {"axis": "int", "direction": one_of(*_DIRECTIONS)}
_SORT = register(
    name="sort",
    kernel=_sort_kernel,
    infer=_sort_infer("sort"),
    grad=_sort_grad,
    num_inputs=1,
    attrs=_SORT_ATTRS,
    defaults={"direction": "ASCENDING"},
    kinds=shape_rules.numeric_kinds,
    onnx=lambda e, node, ins: _sorted_onnx(e, node, ins[0])[0],
    batch=bt.axes("axis"),
    cost=_costs.n_log_n(5, "axis"),
)
_ARGSORT = register(
    name="argsort",
    kernel=_argsort_kernel,
    infer=_sort_infer("argsort", dtypes.int32),
    grad=None,
    num_inputs=1,
    attrs=_SORT_ATTRS,
    defaults={"direction": "ASCENDING"},
    kinds=shape_rules.numeric_kinds,
    onnx=lambda e, node, ins: e.cast(_sorted_onnx(e, node, ins[0])[1], dtypes.int32),
    batch=bt.axes("axis"),
    cost=_costs.n_log_n(8, "axis", scratch=2.25),
)


def _sort_attrs(op_name, values, axis, direction):
    rank = _rank(values)
    if rank == 0:
        raise _args.error(f"{op_name}: input must have rank >= 1, got a scalar")
    d = direction.upper() if isinstance(direction, str) else direction
    if d not in _DIRECTIONS:
        raise _args.error(f"{op_name}: direction must be 'ASCENDING' or 'DESCENDING', got {direction!r}")
    return {"axis": _args.axis_arg(op_name, axis, rank), "direction": d}


def sort(values, axis=-1, direction="ASCENDING", name=None):
    """`values` sorted along `axis`: `df.sort([3, 1, 2], direction="DESCENDING") -> [3, 2, 1]`."""
    return run_op(_SORT, (values,), _sort_attrs("sort", values, axis, direction), name)


def argsort(values, axis=-1, direction="ASCENDING", stable=True, name=None):
    """int32 indices sorting `values` along `axis`; always stable (ties keep index order).

    >>> df.argsort([3, 1, 3, 2], direction="DESCENDING")   # [0, 2, 3, 1]  (not differentiable)
    """
    _args.bool_arg("argsort", stable, "stable")     # ties keep index order either way
    return run_op(_ARGSORT, (values,), _sort_attrs("argsort", values, axis, direction), name)


# ------------------------------------------------------------------ top_k
def _top_k_infer(shapes, dts, attrs):
    shape_rules.check_kinds("top_k", dts[0], shape_rules.numeric_kinds)
    s, k = tuple(shapes[0]), attrs["k"]
    if not s:
        raise errors.InvalidArgumentError("top_k: input must have rank >= 1, got a scalar")
    if k < 0 or (s[-1] is not None and k > s[-1]):
        raise errors.InvalidArgumentError(
            f"top_k: k={k} must be between 0 and the size of the last axis of {shape_rules.shape_str(s)}")
    out = s[:-1] + (k,)
    return [(out, dts[0]), (out, dtypes.int32)]


def _top_k_kernel(x, k):
    if x.ndim == 0 or not 0 <= k <= x.shape[-1]:
        raise errors.InvalidArgumentError(
            f"top_k: k={k} must be between 0 and the size of the last axis of shape {x.shape}")
    order = _stable_order(x, -1, True)[..., :k].astype(np.int32)
    return np.take_along_axis(x, order, -1), order


def _top_k_grad(op, g_values, g_indices):
    if g_values is None:
        return [None]
    x = op.inputs[0]
    return [run_op(_SCATTER_ALONG_AXIS, (g_values, op.outputs[1], x), {"axis": len(x.shape) - 1})]


def _top_k_onnx(e, node, ins):
    values, indices = e.op("TopK", ins[0], e.ints([node.attrs["k"]]), n=2, axis=-1, largest=1, sorted=1)
    return values, e.cast(indices, dtypes.int32)


_TOP_K = register(
    name="top_k",
    kernel=_top_k_kernel,
    infer=_top_k_infer,
    grad=_top_k_grad,
    num_inputs=1,
    attrs={"k": "int"},
    defaults={},
    num_outputs=2,
    none_grads=True,
    kinds=shape_rules.numeric_kinds,
    onnx=_top_k_onnx,
    batch=bt.leading,
    cost=_costs.n_log_n(8, scratch=4.5),
)


def top_k(input, k=1, sorted=True, name=None):
    """(values, indices) of the k largest entries along the last axis, largest first; equal
    values come in index order. (`sorted=False` is accepted; the result is sorted anyway.)

    >>> values, indices = df.top_k([1., 3., 2., 3.], 2)   # [3., 3.], [1, 3]
    """
    _args.bool_arg("top_k", sorted, "sorted")
    return run_op(_TOP_K, (input,), {"k": _args.count_arg("top_k", k, "k")}, name)


# ------------------------------------------------------------------ internal: along an axis
def _along_axis_index(indices, axis):
    """The index tuple addressing, for each entry of `indices`, position indices[...] along
    `axis` and its own position on the other axes."""
    idx = []
    for d, n in enumerate(indices.shape):
        if d == axis:
            idx.append(indices)
        else:
            shape = [1] * indices.ndim
            shape[d] = n
            idx.append(np.arange(n).reshape(shape))
    return tuple(idx)


def _along_infer(op_name, like):
    """take_along_axis gives the shape of its indices (input 1), scatter_along_axis that of its
    input 2; off the axis, the two agree (sizes known in either are known in the result)."""
    def infer(shapes, dts, attrs):
        if not dts[1].is_integer:
            raise errors.InvalidArgumentError(f"{op_name}: indices must be int32 or int64, got {dts[1].name}")
        if len({len(s) for s in shapes}) != 1:
            raise errors.InvalidArgumentError(
                f"{op_name}: the inputs must have one rank, got {', '.join(shape_rules.shape_str(s) for s in shapes)}")
        axis = _norm_axis(op_name, attrs["axis"], len(shapes[1]))
        main, other = tuple(shapes[like]), tuple(shapes[1 if like == 2 else 0])
        if like == 2:   # scatter_along_axis(updates, indices, like): one update per index
            shape_rules.check_compatible(op_name, "updates", shapes[0], "indices", shapes[1])
        if any(a != axis and d is not None and o is not None and d != o
               for a, (d, o) in enumerate(zip(main, other))):
            raise errors.InvalidArgumentError(
                f"{op_name}: off axis {axis}, {shape_rules.shape_str(shapes[0])} and "
                f"{shape_rules.shape_str(shapes[1])} must have the same sizes")
        out = tuple(d if d is not None or a == axis else o for a, (d, o) in enumerate(zip(main, other)))
        return [(out, dts[0])]
    return infer


def _take_along_axis_kernel(x, indices, axis):
    return np.take_along_axis(x, indices, axis)


def _scatter_along_axis_kernel(updates, indices, like, axis):
    """Zeros shaped like `like` with each update added at its index along `axis`."""
    out = np.zeros(like.shape, updates.dtype)
    np.add.at(out, _along_axis_index(indices, axis % indices.ndim), updates)
    return out


# Internal: np.take_along_axis (the gradient of scatter_along_axis), and its adjoint (the
# gradient of sort, top_k and take_along_axis).
def _take_along_onnx(e, x, indices, axis):
    return e.op("GatherElements", x, e.cast(indices, dtypes.int64), axis=axis)


_TAKE_ALONG_AXIS = register(
    name="take_along_axis",
    kernel=_take_along_axis_kernel,
    infer=_along_infer("take_along_axis", 1),
    grad=lambda op, g: [run_op(_SCATTER_ALONG_AXIS, (g, op.inputs[1], op.inputs[0]), op.attrs), None],
    num_inputs=2,
    attrs={"axis": "int"},
    defaults={},
    onnx=lambda e, node, ins: _take_along_onnx(e, ins[0], ins[1], node.attrs["axis"]),
    batch=bt.axes("axis"),
)
_SCATTER_ALONG_AXIS = register(
    name="scatter_along_axis",
    kernel=_scatter_along_axis_kernel,
    infer=_along_infer("scatter_along_axis", 2),
    grad=lambda op, g: [run_op(_TAKE_ALONG_AXIS, (g, op.inputs[1]), op.attrs), None, None],
    num_inputs=3,
    attrs={"axis": "int"},
    defaults={},
    onnx=lambda e, node, ins: scatter_adjoint(e, ins[0], shape_of(e, ins[2], node.inputs[2]), node.outputs[0].dtype,
        lambda idx: _take_along_onnx(e, idx, ins[1], node.attrs["axis"])),
    batch=bt.axes("axis"),
)
