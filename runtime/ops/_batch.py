"""The batching rules of base_ops' and array_ops' rows (`batch=`), the last ones not yet
beside their rows (every other op-specific rule is in its op's stanza); the shared ones and
the rule contract are in runtime/batching.py."""
import numpy as np

from defun.runtime import dtypes
from defun.runtime.batching import (all_batched, batched_shape, broadcast_batch, emit, example_like, expand_rank,
                                    materialize, norm_axis, op, reshape_batch, static_shape)


# ------------------------------------------------------------------ shapes
def reshape(ctx, node, inputs, batched):
    return all_batched([reshape_batch(ctx, inputs[0], _known(node.attrs["shape"], node.outputs[0]))])


def _known(shape, t):
    """Per-example reshape target `shape` with its -1 resolved from `t`'s inferred shape when
    that is known: (B, -1) cannot be resolved by a reshape of an empty batch (B = 0)."""
    shape = tuple(shape)
    return tuple(t.shape) if -1 in shape and None not in tuple(t.shape) else shape


def broadcast_to(ctx, node, inputs, batched):
    shape = tuple(node.attrs["shape"])
    x = expand_rank(inputs[0], len(node.inputs[0].shape), len(shape))
    return all_batched([broadcast_batch(ctx, x, shape)])


def tile(ctx, node, inputs, batched):
    return all_batched(emit(node, inputs, {"multiples": (1,) + tuple(node.attrs["multiples"])}))


def fill(ctx, node, inputs, batched):
    dims = tuple(node.attrs["dims"])
    v = reshape_batch(ctx, inputs[0], (1,) * len(dims))
    return all_batched([broadcast_batch(ctx, v, dims)])


def transpose(ctx, node, inputs, batched):
    return all_batched(emit(node, inputs, {"perm": (0,) + tuple(p + 1 for p in node.attrs["perm"])}))


def pad(ctx, node, inputs, batched):
    x = inputs[0] if batched[0] else materialize(ctx, node, inputs[0], node.inputs[0])
    attrs = dict(node.attrs, paddings=(0, 0) + tuple(node.attrs["paddings"]))
    if len(batched) == 1 or not batched[1]:
        return all_batched(emit(node, [x] + list(inputs[1:]), attrs))
    # a constant per example: padded with zeros, then each example's constant where the
    # padding is (a mask of the padded region, so x's own entries stay exact)
    c = inputs[1]
    zero = np.zeros((), node.inputs[1].dtype.np)     # (not c[0]: a batch may be empty)
    inside = emit(node, [op("ones_like", [x]), zero], attrs)[0]
    r = len(node.inputs[0].shape)
    c = reshape_batch(ctx, c, (1,) * r)
    padded = emit(node, [x, zero], attrs)[0]
    return all_batched([op("add", [padded, op("multiply", [op("subtract", [op("ones_like", [inside]), inside]), c])])])


def squeeze(ctx, node, inputs, batched):
    axis = node.attrs["axis"]
    r = len(node.inputs[0].shape)
    if axis is None:
        shape = static_shape(node, node.inputs[0])
        axis = tuple(i for i, n in enumerate(shape) if n == 1)
    return all_batched(emit(node, inputs, {"axis": tuple(norm_axis(node, a, r) for a in axis)}))


def reshape_like(ctx, node, inputs, batched):
    """Only the `like` input's shape matters: the result is batched as `x` is."""
    x, like = inputs
    if not batched[0]:
        return [emit(node, [x, example_like(ctx, node, like, batched[1])])[0]], [False]
    shape = tuple(node.outputs[0].shape)
    if None not in shape:
        return all_batched([reshape_batch(ctx, x, shape)])
    dims = batched_shape(ctx, like, batched[1])
    return all_batched([op("dynamic_reshape", [x, dims], shape=(ctx.size,) + shape)])


def broadcast_like(ctx, node, inputs, batched):
    x, like = inputs
    if not batched[0]:
        return [emit(node, [x, example_like(ctx, node, like, batched[1])])[0]], [False]
    shape = tuple(node.outputs[0].shape)
    x = expand_rank(x, len(node.inputs[0].shape), len(shape))
    if None not in shape:
        return all_batched([broadcast_batch(ctx, x, shape)])
    dims = batched_shape(ctx, like, batched[1])
    return all_batched([op("dynamic_broadcast_to", [x, dims], shape=(ctx.size,) + shape)])


def sum_to_like(ctx, node, inputs, batched):
    """Sum batched `g` to `like`'s per-example shape: the broadcast axes, then the size-1 ones."""
    g, like = inputs
    if not batched[0]:
        return [emit(node, [g, example_like(ctx, node, like, batched[1])])[0]], [False]
    gs, ls = tuple(node.inputs[0].shape), tuple(node.inputs[1].shape)
    lead = len(gs) - len(ls)
    if None in gs + ls:     # the leading axes summed here, the size-1 ones by the op (batch against batch)
        if lead:
            g = op("reduce_sum", [g], axis=tuple(range(1, lead + 1)), keepdims=False)
        return all_batched(emit(node, [g, like if batched[1] else materialize(ctx, node, like, node.inputs[1])]))
    axes = tuple(range(1, lead + 1)) + tuple(
        lead + i + 1 for i, n in enumerate(ls) if n == 1 and gs[lead + i] != 1)
    if axes:
        g = op("reduce_sum", [g], axis=axes, keepdims=False)
    return all_batched([reshape_batch(ctx, g, ls)])


def shape_of(ctx, node, inputs, batched):
    """shape/size of a batched tensor: one example's (every example has that shape; the
    batch may be empty), from the batched shape past its first size."""
    dt = node.attrs.get("out_type", dtypes.int32)
    s = op("shape", [inputs[0]], out_type=dt)[1:]
    return [s if node.op.name == "shape" else op("reduce_prod", [s], axis=None, keepdims=False)], [False]
