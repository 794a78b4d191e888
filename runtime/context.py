"""Per-thread execution state: the graph builder (None when eager), the tape stack, traces.

Everything the eager hot path needs is one attribute of one thread-local object
(`state.quiet`, or `state.eager_tapes` for the elementwise public functions), so plain
eager dispatch pays a single thread-local lookup per op, and none while `busy_threads`
says that no thread records or traces.
"""
import operator
import threading
from threading import get_ident

__all__ = ["state", "busy_threads", "DEVICE", "add_execution_callback", "remove_execution_callback",
           "execution_callbacks", "active_trace", "ExecutionTrace", "executing_eagerly", "init_scope"]

DEVICE = "/cpu:0"


def _updating(attr):
    """The setter of a _ThreadState property: stores the value, then updates the flags."""
    def setter(self, value):
        setattr(self, attr, value)
        self._update()
    return setter


class _ThreadState(threading.local):
    """What one thread is doing: eager or building `graph`, which tapes record, tracing.

    `quiet` is True while the thread runs eagerly with no tape and no trace: the eager
    dispatcher reads only it (one thread-local read instead of three: -70 ns per op).
    `eager_tapes` is the tape list while the thread runs eagerly with no trace (empty when
    quiet), None otherwise: the public functions of elementwise ops read only it, quiet
    or taped (see runtime.fast_dispatch.op_function), and not even that while `busy_threads`
    is empty. Assigning `graph`, `tapes` or `trace` keeps all three current; `tapes` is
    replaced by a new list, never changed in place.
    """

    # (forward op name, its first output) while the reverse walk runs that op's gradient
    # function, if noted (runtime/numerics.py); None otherwise
    grad_of = None
    # the user's site of the node whose batching rule runs (graph/vectorize.py), None
    # otherwise: the line the ops it runs or traces are at (not the line calling df.vmap)
    node_site = None

    def __init__(self):
        self._graph = None     # innermost graph builder; None means execute eagerly
        self._tapes = []       # active GradientTape internals, innermost last
        self._trace = None     # ExecutionTrace while one is active
        self.quiet = True
        self.eager_tapes = self._tapes

    def _update(self):
        eager = self._graph is None and self._trace is None
        quiet = self.quiet = eager and not self._tapes
        self.eager_tapes = self._tapes if eager else None
        # set.add/discard are atomic: no lock; only this thread changes its own entry
        if quiet:
            busy_threads.discard(get_ident())
        else:
            busy_threads.add(get_ident())

    # reads are plain attribute reads (attrgetter: faster than a Python getter); an
    # assignment keeps `quiet` and `eager_tapes` current
    graph = property(operator.attrgetter("_graph"), _updating("_graph"))
    tapes = property(operator.attrgetter("_tapes"), _updating("_tapes"))
    trace = property(operator.attrgetter("_trace"), _updating("_trace"))


# The idents of the threads whose state is not quiet. While it is empty every thread is
# quiet, so the elementwise public functions skip the thread-local read (-40 ns per op).
# A thread adds itself before it may record and removes itself once quiet again, so a
# thread that reads it empty is quiet itself; a thread ending while not quiet leaves its
# ident behind, which only sends every op to the thread-local read.
busy_threads = set()

state = _ThreadState()

# Callbacks are process-wide (a profiler or checker sees every thread). The list object is
# never replaced, so the dispatcher can hold a reference and test it for emptiness.
execution_callbacks = []


def add_execution_callback(fn):
    """Call `fn(op_name, name, attrs, inputs, outputs)` after every eager op."""
    if not callable(fn):
        raise TypeError(f"execution callback must be callable, got {type(fn).__name__}")
    execution_callbacks.append(fn)


def remove_execution_callback(fn):
    """Stop calling `fn`; raises ValueError if it was not added."""
    try:
        execution_callbacks.remove(fn)
    except ValueError:
        raise ValueError(f"{fn!r} is not a registered execution callback") from None


def executing_eagerly():
    """True unless this thread is building a graph."""
    return state.graph is None


class TraceRecord(tuple):
    """(op_name, output_ids, device, output_element_counts) for one executed op."""

    __slots__ = ()
    op_name = property(lambda self: self[0])
    output_ids = property(lambda self: self[1])
    device = property(lambda self: self[2])
    element_counts = property(lambda self: self[3])


class ExecutionTrace:
    """Records every eager op of this thread while active (for memory profiling)."""

    def __init__(self):
        self.records = []
        self._prev = None

    def __enter__(self):
        self._prev = state.trace
        state.trace = self
        return self

    def __exit__(self, *exc):
        state.trace = self._prev
        return False

    def add(self, op_name, outputs):
        ids = tuple(t._id for t in outputs)
        counts = tuple(int(getattr(t._value, "size", 1)) for t in outputs)
        self.records.append(TraceRecord((op_name, ids, DEVICE, counts)))

    def total_elements(self):
        return sum(sum(r.element_counts) for r in self.records)


def active_trace():
    """Context manager: `with active_trace() as tr: ...` then read `tr.records`."""
    return ExecutionTrace()


class init_scope:
    """Context manager: run eagerly, outside any graph being traced, with tapes paused.

    What `tf.init_scope` does: state made inside (an optimizer's slot variables) is created
    once, eagerly, even when first needed while a function is traced; the trace then
    captures it by handle like any outer variable.

    >>> with init_scope():
    ...     slot = df.Variable(np.zeros(3))   # allowed inside a trace
    """

    __slots__ = ("_saved",)

    def __enter__(self):
        self._saved = (state.graph, state.tapes)
        state.graph = None
        state.tapes = []
        return self

    def __exit__(self, *exc):
        state.graph, state.tapes = self._saved
        return False
