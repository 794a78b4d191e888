"""Jacobians from a GradientTape: one reverse-mode gradient per element of the target.

`jacobian(tape, y, x)[i..., j...] = d y[i...] / d x[j...]` (shape y.shape + x.shape), row by
row: the gradient of `y` seeded with the one-hot tensor of element i. `batch_jacobian`
seeds the same element of every batch row at once, so it needs one gradient per element of
`y.shape[1:]`; that sums over the batch, which is right only when row b of `y` depends on
row b of `x` alone (as for a network applied per example).

The rows are ordinary gradient calls, so inside a defun they become nodes of the traced
graph (one backward per row). Their number must then be known while tracing: a target with
unknown sizes (except batch_jacobian's batch dimension) is refused with a message saying so.
"""
import numpy as np

from defun.runtime import errors
from defun.runtime.nest import flatten, pack_as
from defun.runtime.ops import shape_rules
from defun.runtime.ops.array_ops import expand_dims, stack, zeros, zeros_like
from defun.runtime.tape import stop_recording
from defun.runtime.tensor import Tensor, constant, convert_to_tensor
from defun.runtime.variables import Variable

__all__ = ["jacobian", "batch_jacobian", "unconnected_mode"]

_UNCONNECTED = ("none", "zero")


def jacobian(tape, target, sources, unconnected_gradients="none"):
    """d target / d sources, each of shape target.shape + source.shape, in the structure of `sources`."""
    mode = unconnected_mode(unconnected_gradients)
    target = _one_target(tape, target, "jacobian")
    tshape = tuple(target.shape)
    if None in tshape:
        raise errors.InvalidArgumentError(
            f"jacobian: the target has shape {shape_rules.shape_str(tshape)} while tracing; the jacobian "
            f"takes one gradient per target element, so the target's size must be known when the "
            f"function is traced. Give static sizes (input_signature without None) for the "
            f"dimensions the target depends on, or use batch_jacobian if the unknown size is a "
            f"batch dimension.")
    flat = flatten(sources)
    n = int(np.prod(tshape, dtype=np.int64))
    rows = [[] for _ in flat]
    for i, grads in enumerate(_gradient_rows(tape, target, flat, _one_hot_seeds(target, n))):
        for k, g in enumerate(grads):
            rows[k].append(g)
    result = [_assemble(r, tshape, s, 0, mode) for r, s in zip(rows, flat)]
    return pack_as(sources, result) if isinstance(sources, (list, tuple, dict)) else result[0]


def batch_jacobian(tape, target, source, unconnected_gradients="none"):
    """d target[b] / d source[b] for every b: shape [b] + target.shape[1:] + source.shape[1:].

    Requires row b of `target` to depend only on row b of `source`.
    """
    mode = unconnected_mode(unconnected_gradients)
    target = _one_target(tape, target, "batch_jacobian")
    src_shape = tuple(source.shape)
    tshape = tuple(target.shape)
    if not tshape or not src_shape:
        raise errors.InvalidArgumentError(
            f"batch_jacobian: target and source need a batch dimension (rank >= 1), got shapes "
            f"{shape_rules.shape_str(tshape)} and {shape_rules.shape_str(src_shape)}")
    if tshape[0] is not None and src_shape[0] is not None and tshape[0] != src_shape[0]:
        raise errors.InvalidArgumentError(
            f"batch_jacobian: the target's batch size {tshape[0]} differs from the source's "
            f"{src_shape[0]} (shapes {shape_rules.shape_str(tshape)} and {shape_rules.shape_str(src_shape)})")
    inner = tshape[1:]
    if None in inner:
        raise errors.InvalidArgumentError(
            f"batch_jacobian: the target has shape {shape_rules.shape_str(tshape)} while tracing; it takes "
            f"one gradient per element of a target row, so every size but the batch (first) one "
            f"must be known when the function is traced")
    m = int(np.prod(inner, dtype=np.int64))
    rows = [g for g, in _gradient_rows(tape, target, [source], _column_seeds(target, inner, m))]
    return _assemble(rows, inner, source, 1, mode)


def unconnected_mode(unconnected_gradients):
    """'none' or 'zero' (a string or an enum with that value); ValueError otherwise."""
    mode = getattr(unconnected_gradients, "value", unconnected_gradients)
    if mode not in _UNCONNECTED:
        raise ValueError(f"unconnected_gradients must be 'none' or 'zero', got {unconnected_gradients!r}")
    return mode


def _one_target(tape, target, what):
    tape._ensure()
    if isinstance(target, (list, tuple, dict)):
        raise TypeError(f"{what}: the target must be one tensor, got a {type(target).__name__}")
    if target is None:
        raise ValueError(f"{what}: target is None (did the function return a value?)")
    return convert_to_tensor(target)


def _gradient_rows(tape, target, sources, seeds):
    """tape.gradient(target, sources) per seed; a non-persistent tape counts it as one use."""
    persistent = tape._persistent
    for k, seed in enumerate(seeds):
        if k and not persistent:
            tape._used = False      # the rows together are the tape's one gradient
        yield tape.gradient(target, sources, output_gradients=seed)


def _one_hot_seeds(target, n):
    dtype, shape = target.dtype.np, tuple(target.shape)
    for i in range(n):
        seed = np.zeros(n, dtype)
        seed[i] = 1
        yield constant(seed.reshape(shape))


def _column_seeds(target, inner, m):
    """Seeds of the target's shape holding 1 at element j of every batch row."""
    dtype = target.dtype.np
    batch = target.shape[0]
    for j in range(m):
        e = np.zeros(m, dtype)
        e[j] = 1
        if batch is not None:
            yield constant(np.broadcast_to(e.reshape((1,) + inner), (batch,) + inner).copy())
        else:   # unknown batch size while tracing: broadcast against the target itself
            with stop_recording():
                yield zeros_like(target) + constant(e.reshape((1,) + inner))


def _zeros_like_source(source):
    if isinstance(source, Variable):
        return zeros(source.shape, source.dtype)
    return zeros_like(source)


def _assemble(rows, shape, source, axis, mode):
    """Stack one gradient per element of `shape` (C order) into `shape` at `axis`."""
    if not rows:        # a target without elements
        return _zeros_block(source, shape, axis)
    if all(r is None for r in rows):
        if mode == "none":
            return None
        return _zeros_block(source, shape, axis)
    zero = None
    dense = []
    for r in rows:
        if r is None:
            zero = _zeros_like_source(source) if zero is None else zero
            r = zero
        dense.append(r if isinstance(r, Tensor) else convert_to_tensor(r))
    return _nest_stack(dense, shape, axis)


def _nest_stack(rows, shape, axis):
    if not shape:
        return rows[0]
    step = len(rows) // shape[0]
    if len(shape) == 1:
        return stack(rows, axis)
    return stack([_nest_stack(rows[j * step:(j + 1) * step], shape[1:], axis)
                  for j in range(shape[0])], axis)


def _zeros_block(source, shape, axis):
    """Zeros of the source's shape with `shape` inserted at `axis` (sizes may be unknown)."""
    z = _zeros_like_source(source)
    for _ in shape:
        z = expand_dims(z, axis)
    rank = len(z.shape)
    pad = (1,) * axis + tuple(shape) + (1,) * (rank - axis - len(shape))
    return z + zeros(pad, source.dtype)
