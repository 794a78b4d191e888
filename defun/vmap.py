"""`df.vmap` and `df.vectorized_map`: a function of one example run on a batch, as one graph.

The function is traced once with per-example shapes (a function graph, as defun traces),
then graph/vectorize.py rewrites it node by node with each op row's batching rule into
ordinary batched ops, emitted where the call is: eagerly (under the tapes listening), or
into the graph a defun is tracing (one node per op, exported like any other). Nothing
loops per example unless `vectorized_map(..., fallback_to_while_loop=True)` was asked to,
and then it warns, naming each op and line.

>>> per_example = df.vmap(df.gradients_function(loss), in_axes=(None, 0, 0))
>>> grads = per_example(w, x_batch, y_batch)       # each of shape (B,) + w.shape
"""
import functools
import inspect
import warnings

import numpy as np

from defun.runtime import errors, sites
from defun.runtime.context import state
from defun.runtime.batching import batch_shape, broadcast_batch
from defun.runtime.execute import run_op
from defun.runtime.indexed_slices import IndexedSlices
from defun.runtime.ops.base_ops import shape
from defun.runtime.nest import flatten, is_nested, pack_as, sorted_keys
from defun.runtime.registry import get as get_op
from defun.runtime.tensor import Tensor, convert_to_tensor
from defun.runtime.variables import Variable, watch_read_handles
from defun.graph.vectorize import BatchContext
from defun.graph.ir import Graph, unique_name
from defun.graph.nodes import SymbolicTensor
from defun.autograph import conversion as _autograph

__all__ = ["vmap", "vectorized_map", "VectorizationFallbackWarning"]


class VectorizationFallbackWarning(UserWarning):
    """An op without a batching rule ran once per example (fallback_to_while_loop=True)."""


def vmap(fn, in_axes=0, out_axes=0):
    """`fn` of one example mapped over axis `in_axes` of its arguments (JAX's semantics).

    >>> df.vmap(lambda x, w: df.reduce_sum(x * w), in_axes=(0, None))(xs, w)   # shape (B,)

    `in_axes`: an int (every argument's axis), None (not mapped), or a tuple with one entry
    per positional argument, each an int, None or a nest matching that argument. `out_axes`:
    where the batch goes in each output (an int, or a nest matching the outputs).
    """
    return _batched(fn, in_axes, out_axes, fallback=False, name="vmap")


def vectorized_map(fn, elems, fallback_to_while_loop=False):
    """`fn(elems[i])` for every i along axis 0 of every tensor in `elems`, stacked (TF's semantics).

    >>> df.vectorized_map(lambda row: df.reduce_sum(row * row), x)     # shape (x.shape[0],)

    With `fallback_to_while_loop=True`, an op without a batching rule runs once per
    example instead of raising, with a df.VectorizationFallbackWarning naming it and its line.
    """
    return _batched(fn, (0,), 0, fallback=bool(fallback_to_while_loop), name="vectorized_map")(elems)


def _batched(fn, in_axes, out_axes, fallback, name):
    if not callable(fn):
        raise TypeError(f"{name}: fn must be callable, got {type(fn).__name__}")
    _check_axes_spec(in_axes, name, "in_axes")
    _check_axes_spec(out_axes, name, "out_axes")

    @functools.wraps(fn)
    def batched(*args):
        return _call(fn, args, in_axes, out_axes, fallback, name, sites.user_site(2))
    batched.__signature__ = _positional_signature(fn)
    return batched


_PY_SCALARS = (int, float, complex, bool)


def _positional_signature(fn):
    """The batched function's signature: fn's leading parameters without defaults (their
    names, for a defun's inputs and exports), then *args. It takes positional arguments
    only, and none has a default: a caller binding it (a defun) must not pass fn's defaults
    as mapped arguments (`df.defun(df.vmap(df.softmax))`: axis stays fn's own default)."""
    P = inspect.Parameter
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    lead = []
    for p in params:
        if p.kind not in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD) or p.default is not P.empty:
            break
        lead.append(P(p.name, P.POSITIONAL_ONLY))
    rest = "args" if "args" not in {p.name for p in lead} else "more_args"
    return inspect.Signature(lead + [P(rest, P.VAR_POSITIONAL)])


def _check_axes_spec(spec, name, what):
    for a in flatten(spec) if is_nested(spec) else [spec]:
        if a is not None and (isinstance(a, bool) or not isinstance(a, (int, np.integer))):
            raise TypeError(f"{name}: {what} entries must be ints or None, got {a!r}")


def _axes_per_leaf(args, in_axes, name):
    """One axis (or None) per leaf of `args`, broadcasting `in_axes` as JAX does."""
    if not isinstance(in_axes, (list, tuple)):
        if is_nested(in_axes):
            raise errors.InvalidArgumentError(
                f"{name}: in_axes must be an int, None, or a tuple with one entry per positional "
                f"argument, got {type(in_axes).__name__}")
        return [in_axes] * len(flatten(args))
    if len(in_axes) != len(args):
        raise errors.InvalidArgumentError(
            f"{name}: in_axes has {len(in_axes)} entries for {len(args)} positional arguments; give "
            f"one per argument (an int, None, or a nest matching it), or a single int")
    return [axis for k, (a, spec) in enumerate(zip(args, in_axes))
            for axis in axes_for(a, spec, f"{name}: in_axes", f"argument {k}")]


def axes_for(value, spec, what, where):
    """One axis per leaf of `value` from `spec`: an int or None covers a whole subtree (JAX's
    prefix rule); a list, tuple or dict must match `value` there exactly (dict keys, lengths),
    else InvalidArgumentError naming the first place they differ (`where`: its path)."""
    if not is_nested(spec):
        return [spec] * len(flatten(value))
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise errors.InvalidArgumentError(
                f"{what} gives a dict for {where}, which is a {type(value).__name__}")
        if set(spec) != set(value):
            missing = sorted(map(repr, set(value) - set(spec)))
            extra = sorted(map(repr, set(spec) - set(value)))
            raise errors.InvalidArgumentError(
                f"{what} does not match {where}: its dict keys differ"
                + (f"; no entry for key {', '.join(missing)}" if missing else "")
                + (f"; key {', '.join(extra)} is not in the argument" if extra else ""))
        return [a for k in sorted_keys(spec) for a in axes_for(value[k], spec[k], what, f"{where}[{k!r}]")]
    if not isinstance(value, (list, tuple)):
        raise errors.InvalidArgumentError(
            f"{what} gives a {type(spec).__name__} of {len(spec)} for {where}, which is a "
            f"{type(value).__name__}")
    if len(spec) != len(value):
        raise errors.InvalidArgumentError(
            f"{what} gives {len(spec)} entries for {where}, which has {len(value)}")
    return [a for k, (v, s) in enumerate(zip(value, spec)) for a in axes_for(v, s, what, f"{where}[{k}]")]


def _leaf_tensor(x, name, i):
    if isinstance(x, Tensor):
        return x
    try:
        return convert_to_tensor(x)
    except (errors.InvalidArgumentError, TypeError, ValueError) as e:
        raise TypeError(f"{name}: argument leaf {i} is a {type(x).__name__}, not a tensor: {e}") from None


def _move_axis(x, src, dst, rank):
    """`x` with its axis `src` moved to `dst` (both in range of `rank`)."""
    if src == dst:
        return x
    perm = [i for i in range(rank) if i != src]
    perm.insert(dst, src)
    return run_op(get_op("transpose"), [x], {"perm": tuple(perm)})


def _call(fn, args, in_axes, out_axes, fallback, name, site):
    leaves = flatten(args)
    axes = _axes_per_leaf(args, in_axes, name)
    values, flags, size = _mapped_arguments(leaves, axes, name)
    ctx = _batch_context(values, flags, size, fallback, name)

    # 1. trace fn on one example: placeholders of per-example shapes
    graph, result, out_leaves, outs = _trace_example(fn, args, values, flags, name)
    o_axes = axes_for(result, out_axes, f"{name}: out_axes", "the function's result")

    # 2. rewrite it, node by node, on the batch
    watch_read_handles(graph.captured_values)   # variables read per example are read here
    fed = [v for v in values if isinstance(v, Tensor)]
    fed_flags = [f for v, f in zip(values, flags) if isinstance(v, Tensor)]
    res, res_flags = ctx.run_graph(graph, fed + graph.captured_values,
                                   fed_flags + [False] * len(graph.captured_values))
    for op_name, where, why in ctx.fell_back:
        warnings.warn_explicit(
            f"{name}: op {op_name} at {sites.format_site(where)} ran once per example"
            f"{f' ({size} times)' if size is not None else ''}, as "
            f"fallback_to_while_loop=True asked: {why}",
            VectorizationFallbackWarning, site[0] if site else "<unknown>", site[1] if site else 0)

    # 3. outputs: every one batched, the batch moved to out_axes
    final = _batched_outputs(res, res_flags, outs, o_axes, ctx, name)
    return pack_as(result, final) if out_leaves else result


def _mapped_arguments(leaves, axes, name):
    """Each argument leaf as the traced example takes it (mapped ones with the batch axis
    moved first), whether it is mapped, and the batch size they agree on."""
    values, flags, size = [], [], None
    for i, (x, a) in enumerate(zip(leaves, axes)):
        if isinstance(x, Variable) or x is None or (a is None and type(x) in _PY_SCALARS):
            # a Python number shared by every example stays one (weakly typed, as in JAX)
            if a is not None and x is not None:
                raise errors.InvalidArgumentError(
                    f"{name}: argument leaf {i} is a variable; a variable is shared by every example, "
                    f"so its in_axes entry must be None")
            values.append(x)
            flags.append(False)
            continue
        t = _leaf_tensor(x, name, i)
        if a is None:
            values.append(t)
            flags.append(False)
            continue
        r = len(t.shape)
        if not -r <= a < r:
            raise errors.InvalidArgumentError(
                f"{name}: in_axes {a} is out of range for argument leaf {i} of shape {list(t.shape)}")
        a %= r
        n = t.shape[a]
        if size is not None and n is not None and n != size:
            raise errors.InvalidArgumentError(
                f"{name}: argument leaf {i} has {n} examples along axis {a}, another has {size}; every "
                f"mapped argument must have the same batch size")
        size = size if n is None else n
        values.append(_move_axis(t, a, 0, r))
        flags.append(True)
    if not any(flags):
        raise errors.InvalidArgumentError(
            f"{name}: no argument is mapped (every in_axes entry is None); map at least one")
    return values, flags, size


def _batch_context(values, flags, size, fallback, name):
    """The BatchContext of a batch of `size` examples (None: known only when it runs, then
    taken from the first mapped argument); a mapped argument whose size is unknown while
    tracing is checked against the batch's when it runs (a size of 1 would broadcast)."""
    mapped = [k for k, (v, f) in enumerate(zip(values, flags)) if f]
    size_t = None
    if size is None:
        first = values[mapped[0]]
        size_t = shape(first)[0]
    ctx = BatchContext(size, fallback, size_t)
    for k in mapped[1 if size is None else 0:]:
        if values[k].shape[0] is not None:
            continue
        other = (f"argument leaf {mapped[0]} has {{want}}" if size is None else
                 f"another has {{want}}")
        values[k] = run_op(get_op("check_batch_size"), [values[k], size_t if size is None else size], {
            "message": f"{name}: argument leaf {k} has {{got}} examples along its mapped axis, {other}; "
                       f"every mapped argument must have the same batch size"})
        rest = tuple(values[k].shape)[1:]
        if size is not None and None not in rest:
            values[k] = run_op(get_op("dynamic_reshape"), [values[k], batch_shape(ctx, rest)],
                               {"shape": (size,) + rest})
    return ctx


def _trace_example(fn, args, values, flags, name):
    """The finalized graph of `fn` on one example; fn's result and its flat leaves, and the
    graph's outputs."""
    graph = Graph(unique_name(name), outer=state.graph, base_name=name)
    with graph.building():
        example = []
        for v, f in zip(values, flags):
            if isinstance(v, Tensor):
                shape = tuple(v.shape)[1:] if f else tuple(v.shape)
                example.append(graph.placeholder(shape, v.dtype, getattr(v, "handle_data", None)))
            else:
                example.append(v)
        result = _autograph.for_tracing(fn)(*pack_as(args, example))     # converted, as df.defun's function
        out_leaves = flatten(result)
        outs = [_own_output(graph, leaf, name, k) for k, leaf in enumerate(out_leaves)]
    graph.finalize(outs)
    return graph, result, out_leaves, outs


def _batched_outputs(res, res_flags, outs, o_axes, ctx, name):
    """The batched graph's results `res` each batched (broadcast where not) and its batch
    axis moved to its out_axes entry (`o_axes`, one per result)."""
    final = []
    for k, (v, f, t, a) in enumerate(zip(res, res_flags, outs, o_axes)):
        if not f:
            v = broadcast_batch(ctx, run_op(get_op("expand_dims"), [v], {"axis": 0}), tuple(t.shape))
        if a is None:
            raise errors.InvalidArgumentError(f"{name}: out_axes None (output {k} not batched) is not supported")
        r = len(t.shape) + 1
        if not -r <= a < r:
            raise errors.InvalidArgumentError(f"{name}: out_axes {a} is out of range for output {k} of rank {r}")
        final.append(_move_axis(v, 0, a % r, r))
    return final


def _own_output(graph, leaf, name, k):
    if isinstance(leaf, Variable):
        leaf = leaf.read_value()
    if hasattr(leaf, "_weak_tensor"):       # numbers an autograph `if` joined: as a returned number
        leaf = leaf._weak_tensor()
    if isinstance(leaf, SymbolicTensor) and leaf.node.graph is graph:
        return leaf
    if isinstance(leaf, Tensor):
        return run_op(get_op("identity"), [leaf])
    if isinstance(leaf, IndexedSlices):     # a gather's gradient: dense per example
        return leaf._as_tensor()
    if isinstance(leaf, (int, float, bool, np.ndarray, np.generic)):
        return graph.constant(np.asarray(leaf))
    raise TypeError(f"{name}: output {k} of the function is a {type(leaf).__name__}; a batched "
                    f"function returns tensors and numbers, in nests of lists, tuples and dicts")
