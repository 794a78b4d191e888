"""The tape: recording ops on watched tensors, and `imperative_grad` (reverse walk).

A tape maps each watched or produced tensor id to the entry that produced it (-1 for a
watched source). `imperative_grad` keeps the entries between targets and sources, walks
them in reverse recording order (recording order is a topological order), aggregates
incoming gradients and zero-fills missing ones. Cost is linear in the tape's length.
"""
from runtime import errors
from runtime.context import state

__all__ = ["Tape", "TapeEntry", "record_op", "record_operation", "imperative_grad",
           "stop_recording", "push_tape", "pop_tape"]


class TapeEntry:
    """One recorded op: type, input ids, outputs, backward function."""

    __slots__ = ("op_type", "input_ids", "outputs", "backward", "none_grads")

    def __init__(self, op_type, input_ids, outputs, backward, none_grads=False):
        self.op_type = op_type
        self.input_ids = input_ids
        self.outputs = outputs
        self.backward = backward
        self.none_grads = none_grads

    def __repr__(self):
        return f"<TapeEntry {self.op_type} in={self.input_ids} out={[o._id for o in self.outputs]}>"


class Tape:
    """The recording behind a GradientTape."""

    __slots__ = ("tensor_tape", "entries", "persistent", "watch_accessed_variables",
                 "variables", "__weakref__")

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self.tensor_tape = {}   # tensor id -> index of producing entry, -1 if a watched source
        self.entries = []
        self.persistent = persistent
        self.watch_accessed_variables = watch_accessed_variables
        self.variables = {}     # handle id -> Variable, in watch order

    def watch(self, t):
        self.tensor_tape.setdefault(t._id, -1)

    def should_record(self, ids):
        tt = self.tensor_tape
        for i in ids:
            if i in tt:
                return True
        return False

    def add(self, entry):
        idx = len(self.entries)
        self.entries.append(entry)
        tt = self.tensor_tape
        for o in entry.outputs:
            tt[o._id] = idx


class _OpView:
    """The `op` a gradient function sees for an eager op: inputs, outputs, attrs, type."""

    __slots__ = ("type", "inputs", "outputs", "attrs")

    def __init__(self, type_, inputs, outputs, attrs):
        self.type = type_
        self.inputs = inputs
        self.outputs = outputs
        self.attrs = attrs

    def get_attr(self, name):
        return self.attrs[name]


def record_op(tapes, op, inputs, outputs, attrs):
    """Record registered op `op` on every tape that watches one of `inputs`."""
    ids = [getattr(x, "_id", None) for x in inputs]
    view = None
    for tape in tapes:
        if tape.should_record(ids):
            if view is None:
                node = getattr(outputs[0], "node", None) if outputs else None
                view = node if node is not None else _OpView(op.name, tuple(inputs), outputs, attrs)
                grad_fn = op.grad

                def backward(*grads, _v=view, _g=grad_fn):
                    return _g(_v, *grads)
            tape.add(TapeEntry(op.name, ids, tuple(outputs), backward, op.none_grads))


def record_operation(op_type, output_tensors, input_tensors, backward_function, none_grads=False):
    """Record an arbitrary differentiable computation on the active tapes.

    `backward_function(*output_grads)` returns one gradient (or None) per input.
    """
    tapes = state.tapes
    if not tapes:
        return
    ids = [getattr(x, "_id", None) for x in input_tensors]
    outs = tuple(output_tensors)
    for tape in tapes:
        if tape.should_record(ids):
            tape.add(TapeEntry(op_type, ids, outs, backward_function, none_grads))


class stop_recording:
    """Context manager: no tape records inside (used for custom gradients, tracing)."""

    __slots__ = ("_saved",)

    def __enter__(self):
        self._saved = state.tapes
        state.tapes = []
        return self

    def __exit__(self, *exc):
        state.tapes = self._saved
        return False


def push_tape(tape):
    # A new list each time: a list object captured by a running op stays as it was.
    state.tapes = state.tapes + [tape]


def pop_tape(tape):
    tapes = state.tapes
    for i in range(len(tapes) - 1, -1, -1):
        if tapes[i] is tape:
            state.tapes = tapes[:i] + tapes[i + 1:]
            return
    raise RuntimeError("the tape being exited is not active on this thread")


def _aggregate(grads):
    """Sum a list of gradients; IndexedSlices concatenate without densifying."""
    if len(grads) == 1:
        return grads[0]
    from runtime.indexed_slices import IndexedSlices, aggregate_indexed_slices
    from runtime.ops import math_ops
    if all(isinstance(g, IndexedSlices) for g in grads):
        return aggregate_indexed_slices(grads)
    dense = [g._as_tensor() if isinstance(g, IndexedSlices) else g for g in grads]
    return math_ops.add_n(dense)


def imperative_grad(tape, targets, sources, output_gradients=None):
    """Gradients of sum(targets) w.r.t. each of `sources` (tensors); None if unconnected.

    `output_gradients` optionally gives one seed per target (None entries mean ones).
    """
    from runtime.ops import array_ops
    tt = tape.tensor_tape
    entries = tape.entries
    source_ids = {s._id for s in sources}

    # 1. Entries reachable backwards from the targets.
    reachable = set()
    stack = [tt[t._id] for t in targets if tt.get(t._id, -1) >= 0]
    while stack:
        e = stack.pop()
        if e in reachable:
            continue
        reachable.add(e)
        for iid in entries[e].input_ids:
            j = tt.get(iid, -1)
            if j >= 0 and j not in reachable:
                stack.append(j)
    # 2. Of those, the ones a source flows into (forward in recording order).
    flows = set(source_ids)
    relevant = []
    for e in sorted(reachable):
        entry = entries[e]
        if any(i in flows for i in entry.input_ids):
            relevant.append(entry)
            flows.update(o._id for o in entry.outputs)

    # 3. Seed and walk in reverse.
    gmap = {}
    for k, t in enumerate(targets):
        seed = output_gradients[k] if output_gradients is not None else None
        if seed is None:
            seed = array_ops.ones_like(t)
        gmap.setdefault(t._id, []).append(seed)
    for entry in reversed(relevant):
        out_grads = []
        any_grad = False
        for o in entry.outputs:
            oid = o._id
            lst = gmap.get(oid) if oid in source_ids else gmap.pop(oid, None)
            if lst:
                out_grads.append(_aggregate(lst))
                any_grad = True
            else:
                out_grads.append(None)
        if not any_grad:
            continue
        if not entry.none_grads:
            for k, g in enumerate(out_grads):
                if g is None:
                    out_grads[k] = array_ops.zeros_like(entry.outputs[k])
        in_grads = entry.backward(*out_grads)
        if len(in_grads) != len(entry.input_ids):
            raise errors.InvalidArgumentError(
                f"gradient of {entry.op_type} returned {len(in_grads)} values for "
                f"{len(entry.input_ids)} inputs")
        for iid, g in zip(entry.input_ids, in_grads):
            if g is not None and iid is not None and iid in flows:
                gmap.setdefault(iid, []).append(g)

    result = []
    for s in sources:
        lst = gmap.get(s._id)
        result.append(_aggregate(lst) if lst else None)
    return result
