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
           "skip_input_indices", "stop_recording", "push_tape", "pop_tape"]


_tuple_new = tuple.__new__


class TapeEntry(tuple):
    """One recorded op: (op_type, input_ids, outputs, backward, none_grads, op).

    Without `op`, `backward(*output_grads)` returns one gradient (or None) per input; with
    it, `backward` is a registered gradient function called as `backward(op, *grads)`.
    A tuple so that recording one costs a C-level allocation, not an `__init__` call.
    `record_op` stores plain tuples of the same layout: creating an instance of a tuple
    subclass costs ~0.1 us more, and `imperative_grad` only indexes entries.
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
    """The `op` a gradient function sees for an eager op: (type, inputs, outputs, attrs, skip).

    A tuple for the same reason as TapeEntry: it is built for every differentiated eager
    op. `skip_input_indices` lists the inputs whose gradient nobody needs (see
    `skip_input_indices(op)`), as `imperative_grad` found them.
    """

    __slots__ = ()
    type = property(itemgetter(0))
    inputs = property(itemgetter(1))
    outputs = property(itemgetter(2))
    attrs = property(itemgetter(3))
    skip_input_indices = property(itemgetter(4))

    def get_attr(self, name):
        return self[3][name]

    def __repr__(self):
        return f"<op {self[0]}>"


def _differentiable_source(t):
    dtype = t.dtype
    if dtype.is_floating:
        return True
    hd = getattr(t, "handle_data", None)
    return hd is not None and hd.shape_and_type[0][1].is_floating


def skip_input_indices(op):
    """Positions of `op`'s inputs that need no gradient, for a gradient function to skip.

    An input needs none when no source of the gradient being computed flows into it, e.g.
    the constant of `x * 1.01` (TensorFlow passes the same as `op.skip_input_indices`).
    `imperative_grad` knows them, eagerly and for graph nodes alike (it hands the gradient
    function a view carrying them); a bare op outside a backward pass gives (). Skipping the
    constant's gradient saves a multiply and a reduce_sum per `x * 1.01` in the backward pass,
    and keeps those nodes out of traced backward graphs.
    """
    return op[4] if type(op) is _OpView else ()


def record_op(tapes, op, inputs, outputs, attrs, node=None):
    """Record registered op `op` on every tape that watches one of `inputs`.

    `node` is the graph node while tracing (the gradient function's `op`); eagerly the
    gradient sees an _OpView of inputs, outputs and attrs, stored as a plain tuple
    (type, inputs, outputs, attrs) and made an _OpView by `imperative_grad` when needed.
    """
    # Inlined Tape.should_record / Tape.add, one entry shared by all tapes, tuples for the
    # entry and the view, and the op's gradient stored next to its view instead of a new
    # closure: together -0.5 us per recorded op (benchmarks/dispatch.py, taped add). Plain
    # tuples rather than TapeEntry/_OpView instances: another -0.2 us.
    entry = None
    for tape in tapes:
        tt = tape.tensor_tape
        for x in inputs:
            if x._id in tt:
                break
        else:
            continue  # this tape watches none of the inputs
        if entry is None:
            if type(inputs) is not tuple:
                inputs = tuple(inputs)
            if type(outputs) is not tuple:
                outputs = tuple(outputs)
            view = node if node is not None else (op.name, inputs, outputs, attrs)
            # unrolled for unary and binary ops, like run_op's values (a comprehension
            # frame: ~0.2 us with its setup)
            n = len(inputs)
            if n == 1:
                ids = [inputs[0]._id]
            elif n == 2:
                ids = [inputs[0]._id, inputs[1]._id]
            else:
                ids = [x._id for x in inputs]
            entry = (op.name, ids, outputs, op.grad, op.none_grads, view)
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
    from runtime.ops import array_ops
    tt = tape.tensor_tape
    entries = tape.entries
    source_ids = {s._id for s in sources}

    # 1. Entries reachable backwards from the targets (a bytearray of flags: cheaper to
    # test and set than a set of indices).
    reachable = bytearray(len(entries))
    stack = [tt[t._id] for t in targets if tt.get(t._id, -1) >= 0]
    while stack:
        e = stack.pop()
        if reachable[e]:
            continue
        reachable[e] = 1
        for iid in entries[e][1]:
            j = tt.get(iid, -1)
            if j >= 0 and not reachable[j]:
                stack.append(j)
    # 2. Of those, the ones a source flows into (forward in recording order), each with the
    # positions of its inputs no source flows into: their gradients are never used, so the
    # gradient function is told to skip them (`skip_input_indices`).
    # Only watched (or recorded) sources receive gradients: an unwatched variable that merely
    # feeds a recorded op (e.g. a defun call's captured handle) stays unconnected, as eagerly.
    # Integer and bool sources get no gradient (None), as in TensorFlow: their values are
    # not continuous. A variable counts by the dtype of the value its handle points at.
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
        ids = entry[1]
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
        for o in entry[2]:
            flows.add(o._id)

    # 3. Seed and walk in reverse.
    gmap = {}  # tensor id -> its gradient, or _Several gradients not summed yet
    for k, t in enumerate(targets):
        seed = output_gradients[k] if output_gradients is not None else None
        if seed is None:
            seed = array_ops.ones_like(t)
        _accumulate(gmap, t._id, seed)
    for entry, skip in reversed(relevant):
        op_type, input_ids, outputs, backward, none_grads, view = entry
        if type(view) is tuple:  # an eager op's (type, inputs, outputs, attrs): see record_op
            view = _tuple_new(_OpView, (view[0], view[1], view[2], view[3], skip))
        elif skip and view is not None:  # a graph node: the same skip, so unused gradient
            view = _tuple_new(_OpView, (view.type, view.inputs, view.outputs, view.attrs, skip))
        if len(outputs) == 1:  # the common case, called without building a list of grads
            oid = outputs[0]._id
            g = gmap.get(oid) if oid in source_ids else gmap.pop(oid, None)
            if g is None:
                continue
            if type(g) is _Several:
                g = _aggregate(g)
            in_grads = backward(g) if view is None else backward(view, g)
        else:
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
                continue
            if not none_grads:
                for k, g in enumerate(out_grads):
                    if g is None:
                        out_grads[k] = array_ops.zeros_like(outputs[k])
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

    result = []
    for s in sources:
        g = gmap.get(s._id)
        result.append(_aggregate(g) if type(g) is _Several else g)
    return result
