"""Recording: tapes, their entries, and `record_op` (called by the dispatcher for watched inputs).

A tape maps each watched or produced tensor id to the entry that produced it (-1 for a
watched source). Every entry has one layout, a flat plain tuple (see "Entries" below):
an eager op's holds no tensor or function, so the garbage collector does not track it.
Below the ops; the reverse walk over a tape is `runtime.autodiff`.
"""
from operator import itemgetter

from defun.runtime.context import state
from defun.runtime.tensor import EagerTensor, Tensor

__all__ = ["Tape", "EntryGradient", "tape_entry", "record_op", "record_unary", "record_binary",
           "claim", "expand_entry", "is_eager_entry", "input_ids", "output_ids", "entry_outputs",
           "OP_TYPE", "NUM_INPUTS", "OUTPUT_ID", "HOW", "INPUT_IDS", "record_operation",
           "record_more_outputs", "more_outputs_entry", "skip_input_indices", "stop_recording",
           "push_tape", "pop_tape"]


_tuple_new = tuple.__new__


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
        for i in output_ids(entry):
            tt[i] = idx


class _OpView(tuple):
    """The `op` a gradient function sees for an eager op: (type, inputs, outputs, attrs, skip).

    A tuple so that building one costs a C-level allocation, not an `__init__` call: it is
    built for every differentiated eager op. `skip_input_indices` lists the inputs whose gradient nobody needs (see
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


# ------------------------------------------------------------------ entries
# Every entry is one flat plain tuple, for an op of `n` inputs:
#     (op_type, n, output_id, how, *input_ids, *inputs, *outputs)
# `output_id` is an int (one output) or a tuple of them. `how` says where the gradient
# comes from: for an eager op of a registered OpDef, its attrs (their items, or None),
# the op found again by name in `_COMPACT`, where an op claims its name on first use;
# otherwise an EntryGradient (a backward function, a graph node's gradient, an
# unregistered OpDef reusing a taken name). An eager op's inputs and outputs are stored
# as their numpy values (an input that is no plain eager tensor, a variable's handle, as
# itself); others' as the tensors themselves.
# numpy arrays, ints and strings are not tracked by the garbage collector, so the collector
# stops tracking an eager op's entry the first or second time it sees it, and a tape of
# 100k entries adds nothing to what later collections scan. Entries holding tensors, views
# and the gradient function made every full collection visit ~6 objects per entry (an add
# under a 100k-entry tape cost 3.7 us); and every tuple recording leaves alive costs ~0.1 us
# in the young collections it triggers, more than building it: one tuple per entry, not
# five. `expand_entry` rebuilds the tensors (same ids and values) and the op's view when a
# gradient needs them.
# The positions of an entry's fields, the names every reader of an entry uses (the
# inputs' ids start at INPUT_IDS; then come the inputs, then the outputs):
OP_TYPE, NUM_INPUTS, OUTPUT_ID, HOW, INPUT_IDS = 0, 1, 2, 3, 4

_COMPACT = {}
_EMPTY = {}
_new_object = object.__new__


class EntryGradient:
    """The `how` of an entry with its own gradient: `backward(*output_grads)` returning one
    gradient (or None) per input, or with `op` (a graph node, or an eager op's view) a
    registered gradient function called as `backward(op, *grads)`; `none_grads`: it takes
    None for an output with no gradient (else zeros)."""

    __slots__ = ("backward", "none_grads", "op")

    def __init__(self, backward, none_grads=False, op=None):
        self.backward = backward
        self.none_grads = none_grads
        self.op = op


def tape_entry(op_type, input_ids, outputs, backward, none_grads=False, op=None, inputs=None):
    """The entry of a computation recorded with its own gradient (see EntryGradient):
    `input_ids` (None for an input that is no tensor), the output tensors, and optionally
    the inputs themselves (kept only for reading the entry: `expand_entry` never needs them)."""
    ids = tuple(input_ids)
    kept = tuple(inputs) if inputs is not None else (None,) * len(ids)
    outputs = tuple(outputs)
    out_ids = outputs[0]._id if len(outputs) == 1 else tuple(o._id for o in outputs)
    return (op_type, len(ids), out_ids, EntryGradient(backward, none_grads, op)) + ids + kept + outputs


def claim(op):
    """True if eager entries of `op` may name it by its name (the first OpDef of that name)."""
    return _COMPACT.setdefault(op.name, op) is op


def _rebuilt(values, ids):
    out = []
    for v, i in zip(values, ids):
        if not isinstance(v, Tensor):
            t = _new_object(EagerTensor)
            t._value = v
            t._id = i
            v = t
        out.append(v)
    return tuple(out)


def input_ids(entry):
    """The ids of a tape entry's inputs."""
    return entry[INPUT_IDS:INPUT_IDS + entry[NUM_INPUTS]]


def is_eager_entry(entry):
    """True for the entry of an eager op of a registered OpDef (stored as values)."""
    return type(entry[HOW]) is not EntryGradient


def output_ids(entry):
    """The ids of a tape entry's outputs."""
    out = entry[OUTPUT_ID]
    return (out,) if type(out) is int else out


def entry_outputs(entry):
    """The output tensors of a tape entry (an eager op's rebuilt: same ids and values)."""
    return _rebuilt(entry[INPUT_IDS + 2 * entry[NUM_INPUTS]:], output_ids(entry))


def expand_entry(entry, skip=()):
    """(op_type, input_ids, outputs, backward, none_grads, view) of a tape entry: the output
    tensors, the function to call with the output gradients (after the view if not None),
    and the view it gets, with `skip` as its `skip_input_indices`.

    An eager op's entry gets its tensors rebuilt (same ids and values) and its view built.
    """
    name, n, _, how = entry[:INPUT_IDS]
    ids = entry[INPUT_IDS:INPUT_IDS + n]
    outputs = _rebuilt(entry[INPUT_IDS + 2 * n:], output_ids(entry))
    if type(how) is EntryGradient:
        view = how.op
        if skip and view is not None:   # a graph node or view: the same skip
            view = _tuple_new(_OpView, (view.type, view.inputs, view.outputs, view.attrs, skip))
        return (name, ids, outputs, how.backward, how.none_grads, view)
    op = _COMPACT[name]
    attrs = dict(how) if how is not None else _EMPTY
    view = _tuple_new(_OpView, (name, _rebuilt(entry[INPUT_IDS + n:INPUT_IDS + 2 * n], ids), outputs, attrs, skip))
    return (name, ids, outputs, op.grad, op.none_grads, view)


def record_unary(tapes, name, xid, x, rid, result):
    """Record claimed op `name` (one plain eager input, no attrs, one output) run eagerly:
    the array `result` (tensor id `rid`) = op(array `x`, tensor id `xid`). The elementwise
    public functions' own recording path: ids and arrays, not tensors (they hold both)."""
    if len(tapes) == 1:     # the common case: no loop, and the entry only if recorded
        tt = tapes[0].tensor_tape
        if xid in tt:
            entries = tapes[0].entries
            entries.append((name, 1, rid, None, xid, x, result))
            tt[rid] = len(entries) - 1
        return
    entry = (name, 1, rid, None, xid, x, result)
    for tape in tapes:
        tt = tape.tensor_tape
        if xid in tt:
            entries = tape.entries
            entries.append(entry)
            tt[rid] = len(entries) - 1


def record_binary(tapes, name, xid, yid, x, y, rid, result):
    """`record_unary` of a two-input op: `result` = op(`x`, `y`)."""
    if len(tapes) == 1:
        tt = tapes[0].tensor_tape
        if xid in tt or yid in tt:
            entries = tapes[0].entries
            entries.append((name, 2, rid, None, xid, yid, x, y, result))
            tt[rid] = len(entries) - 1
        return
    entry = (name, 2, rid, None, xid, yid, x, y, result)
    for tape in tapes:
        tt = tape.tensor_tape
        if xid in tt or yid in tt:
            entries = tape.entries
            entries.append(entry)
            tt[rid] = len(entries) - 1


def record_op(tapes, op, inputs, outputs, attrs, node=None):
    """Record registered op `op` on every tape that watches one of `inputs`.

    `node` is the graph node while tracing (the gradient function's `op`, in its EntryGradient);
    eagerly the entry holds values (see "Entries" above), one entry shared by all tapes.
    """
    entry = None
    for tape in tapes:
        tt = tape.tensor_tape
        for x in inputs:
            if x._id in tt:
                break
        else:
            continue  # this tape watches none of the inputs
        if entry is None:
            entry = _entry(op, inputs, outputs, attrs, node)
        entries = tape.entries
        idx = len(entries)
        entries.append(entry)
        for o in outputs:
            tt[o._id] = idx


def _entry(op, inputs, outputs, attrs, node):
    outputs = tuple(outputs)
    if node is None and (_COMPACT.get(op.name) is op or claim(op)):
        # loops, not comprehensions: a comprehension is a call of its own (~0.2 us) before
        # Python 3.12, and this runs per recorded op
        entry = [op.name, len(inputs), None, tuple(attrs.items()) if attrs else None]
        for x in inputs:
            entry.append(x._id)
        for x in inputs:
            entry.append(x._value if type(x) is EagerTensor else x)
        if len(outputs) == 1:
            o = outputs[0]
            entry[OUTPUT_ID] = o._id
            entry.append(o._value)
        else:
            ids = []
            for o in outputs:
                ids.append(o._id)
                entry.append(o._value)
            entry[OUTPUT_ID] = tuple(ids)
        return tuple(entry)
    view = node if node is not None else _tuple_new(_OpView, (op.name, tuple(inputs), outputs, attrs, ()))
    return tape_entry(op.name, [x._id for x in inputs], outputs, op.grad, op.none_grads, view, inputs)


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
            tape.add(tape_entry(op_type, ids, outs, backward_function, none_grads))


def record_more_outputs(node, old_outputs, new_outputs):
    """Graph node `node` gained `new_outputs` after `old_outputs` (a function node raised to
    return side outputs): each active tape that recorded the node records them as one more
    entry of it, so gradients flowing into them reach the node's inputs.

    A gradient is linear in the output gradients, so the node's gradient called for the
    old outputs plus called again for the new ones (the old ones None) is its gradient.
    """
    tapes = state.tapes
    if not tapes or not new_outputs or not old_outputs:
        return
    first = old_outputs[0]._id
    entry = None
    for tape in tapes:
        if tape.tensor_tape.get(first, -1) >= 0:
            if entry is None:
                entry = more_outputs_entry(node, len(old_outputs), new_outputs)
            tape.add(entry)


def more_outputs_entry(node, k, new_outputs):
    """The tape entry of `node`'s outputs after its first `k` (see record_more_outputs)."""
    grad = node.op.grad

    def backward(*grads):
        return grad(node, *([None] * k), *grads)
    return tape_entry(node.op.name, [t._id for t in node.inputs], new_outputs, backward, True)


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
