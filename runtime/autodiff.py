"""Autodiff: `imperative_grad`, the reverse walk over a tape, and gradient aggregation.

Above the ops (gradients are ops): it keeps the entries between targets and sources, walks
them in reverse recording order (a topological order), sums incoming gradients and
zero-fills missing ones. Cost is linear in the tape's length. Eager tapes and backward
graphs (graph/gradients.py) both run it.
"""
from defun.runtime import dtypes, errors, numerics
from defun.runtime.context import state
from defun.runtime.indexed_slices import IndexedSlices
from defun.runtime.ops.array_ops import concat
from defun.runtime.ops.base_ops import cast, ones_like, zeros_like
from defun.runtime.ops.math_ops import add_n
from defun.runtime.tape import INPUT_IDS, NUM_INPUTS, OUTPUT_ID, expand_entry

__all__ = ["imperative_grad", "GRADIENT_WALK"]


def _differentiable_source(t):
    dtype = t.dtype
    if dtype.is_inexact:
        return True
    hd = getattr(t, "handle_data", None)
    return hd is not None and hd.shape_and_type[0][1].is_inexact


def _aggregate(grads):
    """Sum a list of gradients; IndexedSlices concatenate without densifying."""
    if len(grads) == 1:
        return grads[0]
    if all(isinstance(g, IndexedSlices) for g in grads):
        return _aggregate_slices(grads)
    dense = [g._as_tensor() if isinstance(g, IndexedSlices) else g for g in grads]
    return add_n(dense)


class _Several(list):
    """Gradients received by one tensor from several consumers, summed when it is reached.

    The gradient map holds a lone gradient as itself and only several in a list: most
    tensors have one consumer, and a list per tensor (plus summing a one-element list)
    cost ~0.3 us per tape entry.
    """

    __slots__ = ()


def _accumulate(gmap, tid, g):
    prev = gmap.get(tid)
    if prev is None:
        gmap[tid] = g
    elif type(prev) is _Several:
        prev.append(g)
    else:
        gmap[tid] = _Several((prev, g))


_SKIP_FIRST, _SKIP_SECOND = (0,), (1,)


def imperative_grad(tape, targets, sources, output_gradients=None):
    """Gradients of sum(targets) w.r.t. each of `sources` (tensors); None if unconnected.

    `output_gradients` optionally gives one seed per target (None entries mean ones).
    """
    reachable = _reachable_from(tape, targets)
    relevant, flows = _entries_sources_flow_into(tape, reachable, sources)
    gmap = {}  # tensor id -> its gradient, or _Several gradients not summed yet
    for k, t in enumerate(targets):
        seed = output_gradients[k] if output_gradients is not None else None
        _accumulate(gmap, t._id, ones_like(t) if seed is None else seed)
    _walk_back(relevant, gmap, flows, {s._id for s in sources})
    result = []
    for s in sources:
        g = gmap.get(s._id)
        result.append(_aggregate(g) if type(g) is _Several else g)
    return result


def _reachable_from(tape, targets):
    """Flags of the entries reachable backwards from the targets (a bytearray: cheaper to
    test and set than a set of indices)."""
    tt, entries = tape.tensor_tape, tape.entries
    reachable = bytearray(len(entries))
    stack = [tt[t._id] for t in targets if tt.get(t._id, -1) >= 0]
    while stack:
        e = stack.pop()
        if reachable[e]:
            continue
        reachable[e] = 1
        entry = entries[e]
        for iid in entry[INPUT_IDS:INPUT_IDS + entry[NUM_INPUTS]]:
            j = tt.get(iid, -1)
            if j >= 0 and not reachable[j]:
                stack.append(j)
    return reachable


def _entries_sources_flow_into(tape, reachable, sources):
    """([(entry, skip)], flows): the reachable entries a source flows into (forward in
    recording order), each with the positions of its inputs no source flows into (their
    gradients are never used, so the gradient function is told to skip them); `flows`,
    the ids of the tensors sources flow into.

    Only watched (or recorded) sources receive gradients: an unwatched variable that merely
    feeds a recorded op (e.g. a defun call's captured handle) stays unconnected, as eagerly.
    Integer and bool sources get no gradient (None), as in TensorFlow: their values are
    not continuous. A variable counts by the dtype of the value its handle points at.
    """
    tt, entries = tape.tensor_tape, tape.entries
    flows = {s._id for s in sources if s._id in tt and _differentiable_source(s)}
    relevant = []
    # Recording order is topological. When much of the tape is reachable, scanning it in
    # order is linear in its length; a small reachable set is cheaper to sort.
    count = reachable.count(1)
    if 4 * count > len(entries):
        order = range(len(entries))
    else:
        order = sorted(e for e in range(len(entries)) if reachable[e]) if count else ()
    for e in order:
        if not reachable[e]:
            continue
        entry = entries[e]
        ids = entry[INPUT_IDS:INPUT_IDS + entry[NUM_INPUTS]]
        # unrolled for the common arities: a generator per entry costs ~0.3 us
        if len(ids) == 2:
            first, second = ids[0] in flows, ids[1] in flows
            if first and second:
                skip = ()
            elif first or second:
                skip = _SKIP_SECOND if first else _SKIP_FIRST
            else:
                continue
        elif len(ids) == 1:
            if ids[0] not in flows:
                continue
            skip = ()
        else:
            skip = tuple(k for k, i in enumerate(ids) if i not in flows)
            if len(skip) == len(ids):
                continue
        relevant.append((entry, skip))
        out = entry[OUTPUT_ID]      # its output id, or ids
        if type(out) is int:
            flows.add(out)
        else:
            flows.update(out)
    return relevant, flows


def _walk_back(relevant, gmap, flows, source_ids):
    """Call each relevant entry's gradient, newest first, accumulating into `gmap`.

    A source's gradient stays in the map (it is read at the end); every other tensor's is
    taken out when its producer is reached. One loop, written flat: it runs per entry.
    While tracing, or checking numerics, `state.grad_of` names the entry whose gradient
    function runs (runtime/numerics.py: a backward op's error names its forward op's line).
    """
    st = state
    noting = st.graph is not None or numerics.ON
    outer = st.grad_of
    try:
        _walk_entries(relevant, gmap, flows, source_ids, st if noting else None)
    finally:
        if noting:
            st.grad_of = outer


def _walk_entries(relevant, gmap, flows, source_ids, st):
    for entry, skip in reversed(relevant):
        op_type, input_ids, outputs, backward, none_grads, view = expand_entry(entry, skip)
        if st is not None and outputs:
            st.grad_of = (op_type, outputs[0])
        if len(outputs) == 1:  # the common case, called without building a list of grads
            oid = outputs[0]._id
            g = gmap.get(oid) if oid in source_ids else gmap.pop(oid, None)
            if g is None:
                continue
            if type(g) is _Several:
                g = _aggregate(g)
            in_grads = backward(g) if view is None else backward(view, g)
        else:
            out_grads = _output_grads(gmap, outputs, source_ids, none_grads)
            if out_grads is None:
                continue
            in_grads = backward(*out_grads) if view is None else backward(view, *out_grads)
        if type(in_grads) is not list and not isinstance(in_grads, (list, tuple)):
            in_grads = [in_grads]  # a backward function of one input may return a bare gradient
        if len(in_grads) != len(input_ids):
            raise errors.InvalidArgumentError(
                f"gradient of {op_type} returned {len(in_grads)} values for "
                f"{len(input_ids)} inputs")
        for iid, g in zip(input_ids, in_grads):
            if g is not None and iid in flows:
                prev = gmap.get(iid)
                if prev is None:
                    gmap[iid] = g
                else:
                    _accumulate(gmap, iid, g)


def _output_grads(gmap, outputs, source_ids, none_grads):
    """The gradients of a multi-output entry's outputs (None if none has one); missing ones
    are zeros unless the op accepts None."""
    out_grads = []
    any_grad = False
    for o in outputs:
        oid = o._id
        g = gmap.get(oid) if oid in source_ids else gmap.pop(oid, None)
        if g is not None:
            out_grads.append(_aggregate(g) if type(g) is _Several else g)
            any_grad = True
        else:
            out_grads.append(None)
    if not any_grad:
        return None
    if not none_grads:
        for k, g in enumerate(out_grads):
            if g is None:
                out_grads[k] = zeros_like(outputs[k])
    return out_grads


def _aggregate_slices(slices):
    """Sum of several IndexedSlices, still sparse: values and indices concatenated."""
    indices = [s.indices for s in slices]
    if any(i.dtype is not indices[0].dtype for i in indices):
        # gathers with int32 and int64 indices: concat needs one dtype; int64 holds both
        indices = [i if i.dtype is dtypes.int64 else cast(i, dtypes.int64) for i in indices]
    return IndexedSlices(concat([s.values for s in slices], 0), concat(indices, 0),
                         slices[0].dense_shape)


# the frame calling each entry's gradient function: graph/tracer.py tells a built-in rule's
# nodes (no user frame below it) from a gradient the user wrote
GRADIENT_WALK = _walk_entries.__code__
