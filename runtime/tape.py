"""The tape: recording ops on watched tensors, and `imperative_grad` (reverse walk).

A tape maps each watched or produced tensor id to the entry that produced it (-1 for a
watched source). `imperative_grad` keeps the entries between targets and sources, walks
them in reverse recording order (recording order is a topological order), aggregates
incoming gradients and zero-fills missing ones. Cost is linear in the tape's length.
"""
from operator import itemgetter

from runtime import errors
from runtime.context import state

__all__ = ["Tape", "TapeEntry", "record_op", "record_operation", "imperative_grad",
           "stop_recording", "push_tape", "pop_tape"]


_tuple_new = tuple.__new__


class TapeEntry(tuple):
    """One recorded op: (op_type, input_ids, outputs, backward, none_grads, op).

    Without `op`, `backward(*output_grads)` returns one gradient (or None) per input; with
    it, `backward` is a registered gradient function called as `backward(op, *grads)`.
    A tuple so that recording one costs a C-level allocation, not an `__init__` call.
    """

    __slots__ = ()

    def __new__(cls, op_type, input_ids, outputs, backward, none_grads=False, op=None):
        return _tuple_new(cls, (op_type, input_ids, tuple(outputs), backward, none_grads, op))

    op_type = property(itemgetter(0))
    input_ids = property(itemgetter(1))
    outputs = property(itemgetter(2))
    backward = property(itemgetter(3))
    none_grads = property(itemgetter(4))
    op = property(itemgetter(5))

    def run_backward(self, output_grads):
        """Gradients for the inputs, as a list with one entry (or None) per input."""
        op = self[5]
        grads = self[3](*output_grads) if op is None else self[3](op, *output_grads)
        if not isinstance(grads, (list, tuple)):
            grads = [grads]  # a backward function of one input may return a bare gradient
        return grads

    def __repr__(self):
        return f"<TapeEntry {self[0]} in={list(self[1])} out={[o._id for o in self[2]]}>"


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


class _OpView(tuple):
    """The `op` a gradient function sees for an eager op: (type, inputs, outputs, attrs).

    A tuple for the same reason as TapeEntry: it is built for every recorded eager op.
    """

    __slots__ = ()
    type = property(itemgetter(0))
    inputs = property(itemgetter(1))
    outputs = property(itemgetter(2))
    attrs = property(itemgetter(3))

    def get_attr(self, name):
        return self[3][name]

    def __repr__(self):
        return f"<op {self[0]}>"


def record_op(tapes, op, inputs, outputs, attrs, node=None):
    """Record registered op `op` on every tape that watches one of `inputs`.

    `node` is the graph node while tracing (the gradient function's `op`); eagerly the
    gradient sees an _OpView of inputs, outputs and attrs.
    """
    # Inlined Tape.should_record / Tape.add, one entry shared by all tapes, tuples for the
    # entry and the view, and the op's gradient stored next to its view instead of a new
    # closure: together -0.5 us per recorded op (benchmarks/dispatch.py, taped add).
    entry = None
    for tape in tapes:
        tt = tape.tensor_tape
        for x in inputs:
            if x._id in tt:
                break
        else:
            continue  # this tape watches none of the inputs
        if entry is None:
            inputs = tuple(inputs)
            outputs = tuple(outputs)
            view = node if node is not None else _tuple_new(_OpView, (op.name, inputs, outputs, attrs))
            # unrolled for binary ops, like run_op's values (a comprehension frame: ~75 ns)
            ids = [inputs[0]._id, inputs[1]._id] if len(inputs) == 2 else [x._id for x in inputs]
            entry = _tuple_new(TapeEntry, (op.name, ids, outputs, op.grad, op.none_grads, view))
        entries = tape.entries
        idx = len(entries)
        entries.append(entry)
        for o in outputs:
            tt[o._id] = idx


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
    # Only watched (or recorded) sources receive gradients: an unwatched variable that merely
    # feeds a recorded op (e.g. a defun call's captured handle) stays unconnected, as eagerly.
    flows = {i for i in source_ids if i in tt}
    relevant = []
    # Recording order is topological. When much of the tape is reachable, scanning it in
    # order is linear in its length; a small reachable set is cheaper to sort.
    order = range(len(entries)) if 4 * len(reachable) > len(entries) else sorted(reachable)
    for e in order:
        if e not in reachable:
            continue
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
        in_grads = entry.run_backward(out_grads)
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
