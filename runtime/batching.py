"""Batching rules: how an op row says what it does on a batch (`register(..., batch=rule)`).

A rule is `rule(ctx, node, inputs, batched) -> (outputs, batched)`: `node` is the op's node
in the per-example graph (its `.attrs`, and `.inputs` / `.outputs` with per-example shapes),
`inputs` the values to compute on, each either batched (the batch at axis 0, `ctx.size`
long) or not (`batched[i]`), and at least one is. A rule emits ordinary ops (so the same
rule runs eagerly and builds graph nodes) and returns one value and one flag per output;
it raises UnimplementedError for a case it does not cover. The walker is graph/vectorize.py.

The shared rules and the helpers rules are written with are here; an op-specific rule sits
in its op's stanza, just above the `register(...)` naming it (`_matmul_batch` in
runtime/ops/math_ops.py, `_cond_batch` in graph/control_flow.py). The shared rules:
    elementwise       broadcasting ops (`add`, `exp`, `where`): ranks aligned, op run as is
    leading           ops whose leading dimensions are batch dimensions already (`cholesky`)
    axes(...)         ops with axis attrs (`reduce_sum`, `concat`): the axes moved past the batch
    fold_leading(...) NHWC ops (`conv2d`, pools): the batch folded into N and out again
    dynamic_shape(...) ops taking a shape tensor (`dynamic_reshape`, `dynamic_tile`): the batch
                      size prefixed to it
"""
import math

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.registry import get as get_op

__all__ = ["elementwise", "leading", "axes", "fold_leading", "dynamic_shape", "materialize", "materialize_all",
           "expand_rank", "op", "norm_axis", "static_shape", "emit", "batch_size", "batch_shape",
           "reshape_batch", "broadcast_batch", "all_batched", "flat_rows", "iota", "example_like",
           "batched_shape"]


def op(name, inputs, **attrs):
    """Registered op `name` run on `inputs` with `attrs` (rules name the ops they emit)."""
    return run_op(get_op(name), list(inputs), attrs)


def emit(node, inputs, attrs=None):
    """`node`'s op run on `inputs` (with `attrs`, by default the node's): a list of outputs."""
    out = run_op(node.op, list(inputs), node.attrs if attrs is None else attrs)
    if out is None:
        return []
    return list(out) if isinstance(out, tuple) else [out]


def batch_size(ctx, dtype=None):
    """The batch size: an int when known while tracing, else a scalar int32 tensor
    (`ctx.size_t`, computed from a mapped argument's shape when the batch runs); `dtype`:
    as a scalar tensor of that dtype."""
    n = ctx.size if ctx.size is not None else ctx.size_t
    return n if dtype is None else op("cast", [n], dtype=dtype)


def batch_shape(ctx, rest):
    """(B,) + `rest` for a reshape or broadcast: a tuple when B is known, else an int32 tensor."""
    if ctx.size is not None:
        return (ctx.size,) + tuple(rest)
    return op("concat", [op("reshape", [ctx.size_t], shape=(1,)), np.asarray(rest, np.int32).reshape(-1)], axis=0)


def reshape_batch(ctx, x, rest):
    """Batched `x` reshaped to (B,) + `rest` (per-example sizes, all known; one may be -1
    when B is known), also when B is known only when the batch runs."""
    rest = tuple(rest)
    if ctx.size is not None and (-1 not in rest or ctx.size * math.prod(rest)):
        return op("reshape", [x], shape=(ctx.size,) + rest)
    if -1 not in rest and math.prod(rest):      # B alone unknown: a -1 stands for it
        return op("reshape", [x], shape=(-1,) + rest)
    if -1 in rest:      # the -1 from x's size per example when the batch runs (B unknown or 0)
        per = op("reduce_prod", [op("shape", [x], out_type=dtypes.int32)[1:]], axis=None, keepdims=False)
        fill = op("reshape", [op("floordiv", [per, max(1, -math.prod(rest))])], shape=(1,))
        parts = [np.asarray([d], np.int32) if d != -1 else fill for d in rest]
        lead = np.asarray([ctx.size], np.int32) if ctx.size is not None else op("reshape", [ctx.size_t], shape=(1,))
        dims = op("concat", [lead] + parts, axis=0)
        return op("dynamic_reshape", [x, dims], shape=(ctx.size,) + tuple(None if d == -1 else d for d in rest))
    return op("dynamic_reshape", [x, batch_shape(ctx, rest)], shape=(None,) + rest)


def broadcast_batch(ctx, x, rest):
    """`x` broadcast to (B,) + `rest`, also when B is known only when the batch runs. A
    size of `rest` unknown while tracing (None) is x's own there (x: (1,) + rest)."""
    rest = tuple(rest)
    if None in rest:
        n = np.asarray([ctx.size], np.int32) if ctx.size is not None else op("reshape", [ctx.size_t], shape=(1,))
        dims = op("concat", [n, op("shape", [x], out_type=dtypes.int32)[1:]], axis=0)
        return op("dynamic_broadcast_to", [x, dims], shape=(ctx.size,) + rest)
    if ctx.size is not None:
        return op("broadcast_to", [x], shape=(ctx.size,) + rest)
    return op("dynamic_broadcast_to", [x, batch_shape(ctx, rest)], shape=(None,) + rest)


def static_shape(node, t, what="input"):
    """`t`'s per-example shape, which a rule needs in full; UnimplementedError if a size is unknown."""
    shape = tuple(t.shape)
    if None in shape:
        raise errors.UnimplementedError(
            f"{node.op.name}: batching needs the per-example shape of its {what}, got {list(shape)} "
            f"with unknown sizes")
    return shape


def norm_axis(node, a, rank):
    """Per-example axis `a` (negative counts from the end of `rank`) moved past the batch axis."""
    if not -rank <= a < max(rank, 1):
        raise errors.InvalidArgumentError(f"{node.op.name}: axis {a} is out of range for rank {rank}")
    return (a % rank if rank else 0) + 1


def expand_rank(x, have, want):
    """Batched `x` of per-example rank `have` with size-1 axes after the batch up to `want`."""
    for _ in range(want - have):
        x = op("expand_dims", [x], axis=1)
    return x


def materialize(ctx, node, x, t):
    """Unbatched `x` (per-example tensor `t` of the node) repeated along a new batch axis 0."""
    return broadcast_batch(ctx, op("expand_dims", [x], axis=0), tuple(t.shape))


def materialize_all(ctx, node, inputs, batched, which=None):
    """`inputs` with the unbatched ones among `which` (default: all) materialized."""
    out = list(inputs)
    for i, (x, b) in enumerate(zip(inputs, batched)):
        if not b and (which is None or i in which):
            out[i] = materialize(ctx, node, x, node.inputs[i])
    return out


def all_batched(outs):
    """A rule's return for outputs `outs` that are all batched."""
    return outs, [True] * len(outs)


def flat_rows(ctx, x, t):
    """Batched `x` (one example: `t`) as (B, elements of one example), no -1 standing for a
    size of an empty batch (B or an example of 0 elements): sizes unknown while tracing come
    from x's shape when the batch runs."""
    shape = tuple(t.shape)
    if None not in shape:
        return reshape_batch(ctx, x, (int(np.prod(shape, dtype=np.int64)),))
    dims = op("shape", [x], out_type=dtypes.int32)
    per = op("reshape", [op("reduce_prod", [dims[1:]], axis=None, keepdims=False)], shape=(1,))
    return op("dynamic_reshape", [x, op("concat", [dims[:1], per], axis=0)], shape=(ctx.size, None))


def iota(ctx, dtype):
    """[0, 1, ..., B - 1] of `dtype`."""
    if ctx.size is None:
        return op("dynamic_range", [np.zeros((), dtype.np), batch_size(ctx, dtype), np.ones((), dtype.np)])
    return op("range", [], start=0.0, limit=float(ctx.size), delta=1.0, dtype=dtype)


def example_like(ctx, node, like, like_batched):
    """A tensor of one example's shape of `like` (batched or not; `node.inputs[1]` per example)
    for an op that reads only its shape: zeros of the per-example shape (the shape is all they
    say; a batch may be empty)."""
    t = node.inputs[1]
    if not like_batched:
        return like
    if None not in tuple(t.shape):
        return np.zeros(tuple(t.shape), t.dtype.np)
    return op("dynamic_fill", [op("shape", [like], out_type=dtypes.int32)[1:], np.zeros((), t.dtype.np)],
              shape=tuple(t.shape))


def batched_shape(ctx, like, like_batched):
    """The run-time shape of `like` with the batch first (B prefixed when it is unbatched)."""
    s = op("shape", [like], out_type=dtypes.int32)
    if like_batched:
        return s
    return op("concat", [op("reshape", [batch_size(ctx, dtypes.int32)], shape=(1,)), s], axis=0)


def elementwise(ctx, node, inputs, batched):
    """A broadcasting op: each batched input gets size-1 axes after the batch up to the
    largest per-example rank, so the batch axis lines up; unbatched inputs broadcast."""
    r = max(len(t.shape) for t in node.inputs)
    xs = [expand_rank(x, len(t.shape), r) if b else x
          for x, t, b in zip(inputs, node.inputs, batched)]
    outs = emit(node, xs)
    return outs, [True] * len(outs)


def leading(ctx, node, inputs, batched):
    """An op computing on its innermost axes with every leading axis a batch axis."""
    outs = emit(node, materialize_all(ctx, node, inputs, batched))
    return outs, [True] * len(outs)


def axes(*names, rank_of="input", none="all", only=None, align=False):
    """The rule of an op whose attrs `names` are per-example axes (ints, tuples, or None):
    each moved past the batch axis; the unbatched inputs among `only` (default: all) are
    materialized. `rank_of`: the axes count in the first input's rank or the first output's.
    `none`: what None means: "all" (every axis, as reductions), or "keep" (stays None).
    `align`: the inputs broadcast together (linspace's start and stop): ranks aligned first."""
    def rule(ctx, node, inputs, batched):
        t = (node.inputs if rank_of == "input" else node.outputs)[0]
        r = len(t.shape)
        attrs = dict(node.attrs)
        for name in names:
            v = attrs[name]
            if v is None:
                if none == "all":
                    attrs[name] = tuple(range(1, r + 1))
            elif isinstance(v, (tuple, list)):
                attrs[name] = tuple(norm_axis(node, int(a), r) for a in v)
            else:
                attrs[name] = norm_axis(node, int(v), r)
        xs = materialize_all(ctx, node, inputs, batched, only)
        if align:
            want = max(len(t.shape) for t in node.inputs)
            xs = [expand_rank(x, len(t.shape), want) for x, t in zip(xs, node.inputs)]
        outs = emit(node, xs, attrs)
        return outs, [True] * len(outs)
    return rule


def fold_leading(*folded):
    """The rule of an op whose inputs `folded` (indices) and output have an independent
    leading axis (N of NHWC): the batch is folded into it (B*N) and unfolded from the output;
    the other inputs must be unbatched (a filter shared by all examples). Sizes unknown while
    tracing (B, N, an image's) are read from the inputs' shapes when the batch runs."""
    def rule(ctx, node, inputs, batched):
        if any(b for i, b in enumerate(batched) if i not in folded):
            raise errors.UnimplementedError(
                f"{node.op.name}: batching covers batched data inputs with shared parameters; "
                f"input {[i for i, b in enumerate(batched) if b and i not in folded][0]} is batched")
        xs = materialize_all(ctx, node, inputs, batched, folded)
        lead = xs[folded[0]]        # (B, N, ...): the output's first two sizes
        for i in folded:
            xs[i] = _fold(ctx, xs[i], tuple(node.inputs[i].shape))
        outs = emit(node, xs)
        return [_unfold(ctx, o, tuple(t.shape), lead) for o, t in zip(outs, node.outputs)], [True] * len(outs)
    return rule


def _fold(ctx, x, shape):
    """Batched `x`, (B,) + `shape`, with the batch folded into its first size: (B * shape[0],) +
    shape[1:]; from x's shape when the batch runs if a size is unknown and no -1 fits (B or
    N unknown with the rest holding no elements, or a size of the rest unknown)."""
    rest = shape[1:]
    if None not in shape and ctx.size is not None:
        return op("reshape", [x], shape=(ctx.size * shape[0],) + rest)
    if None not in rest and math.prod(rest):
        return op("reshape", [x], shape=(-1,) + rest)
    dims = op("shape", [x], out_type=dtypes.int32)
    n = op("reshape", [op("reduce_prod", [dims[:2]], axis=None, keepdims=False)], shape=(1,))
    lead = ctx.size * shape[0] if ctx.size is not None and shape[0] is not None else None
    return op("dynamic_reshape", [x, op("concat", [n, dims[2:]], axis=0)], shape=(lead,) + rest)


def _unfold(ctx, out, shape, lead):
    """A folded op's output, (B * N,) + `shape`[1:], as (B,) + `shape`, N (and B) from `lead`."""
    if None not in shape:
        return reshape_batch(ctx, out, shape)
    dims = op("concat", [op("shape", [lead], out_type=dtypes.int32)[:2],
                         op("shape", [out], out_type=dtypes.int32)[1:]], axis=0)
    return op("dynamic_reshape", [out, dims], shape=(ctx.size,) + shape)


def dynamic_shape(pos, lead, align=False):
    """The rule of an op taking a shape tensor at input `pos` (unbatched): `lead` (the batch
    size, or 1 for tile multiples) is prefixed to it and to its static value (the `shape`
    attr); the other inputs are materialized (`align`: x broadcasts to the shape, ranks
    aligned first)."""
    def rule(ctx, node, inputs, batched):
        if batched[pos]:
            raise errors.UnimplementedError(
                f"{node.op.name}: batching covers a shape shared by every example; its shape input is batched")
        xs = materialize_all(ctx, node, inputs, batched, tuple(i for i in range(len(inputs)) if i != pos))
        dims = inputs[pos]
        n = ctx.size if lead == "batch" else lead
        if align:
            xs[0] = expand_rank(xs[0], len(node.inputs[0].shape), len(node.outputs[0].shape))
        dt = node.inputs[pos].dtype
        first = np.asarray([n], dt.np) if n is not None else op("reshape", [batch_size(ctx, dt)], shape=(1,))
        xs[pos] = op("concat", [first, dims], axis=0)
        attrs = dict(node.attrs, shape=(n,) + tuple(node.attrs["shape"]))
        return all_batched(emit(node, xs, attrs))
    return rule
