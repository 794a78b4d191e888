"""The batching rules of array_ops' rows (`batch=`), the last ones not yet beside their rows
(every other op-specific rule is in its op's stanza); the shared ones and the rule contract
are in runtime/batching.py."""
import numpy as np

from defun.runtime.batching import all_batched, broadcast_batch, emit, materialize, op, reshape_batch


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


