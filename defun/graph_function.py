"""GraphFunction: a function graph called eagerly, nested in a trace, or under a tape.

Three call routes, chosen per call: the compiled plan (eager, nobody listening); a `call`
node (inside another trace); under a tape that watches an input, the forward with side
outputs plus ONE tape entry whose backward runs the backward graph function on what that
run saved (it never runs the forward again). The backward is built lazily, the first
time a gradient is needed.

When a gradient of that gradient may follow (several tapes record the call, or a
persistent one, which may record its own gradient), the call saves what every order
needs: the levels (graph/gradients.py) are raised until the backward of the top one reads
nothing new, and that function runs.
"""
from defun.runtime import dtypes, errors, numerics
from defun.runtime.context import execution_callbacks, state
from defun.runtime.ops.array_ops import zeros_like
from defun.runtime.ops.base_ops import ones_like
from defun.runtime.indexed_slices import IndexedSlices, dense
from defun.runtime.tape import tape_entry
from defun.runtime.tensor import EagerTensor, next_tensor_id, to_array
from defun.runtime.variables import watch_read_handles
from defun.graph.backends import DEFAULT_BACKEND
from defun.graph.checking import CheckingBackend, checking_backend
from defun.graph.functions import call_graph, input_grads, plan_of, rematerialize
from defun.graph.gradients import LOCK, MAX_LEVELS, Source, pick_level, saving_from, saving_of
from defun.graph.input_gradients import DenseGrad
from defun.graph.nodes import SymbolicTensor

__all__ = ["GraphFunction"]


class GraphFunction:
    """A function graph that can be called eagerly, nested, and differentiated.

    The backward function is built lazily on the first call that needs a gradient.
    `rematerialize`: its backward recomputes what cheap pure ops give instead of saving it
    (graph.functions.rematerialize).
    """

    def __init__(self, graph, backend=DEFAULT_BACKEND, rematerialize=False):
        self.graph = graph
        self.backend = backend      # the name of the backend its plans run on
        self.rematerialize = rematerialize
        # positions of resource inputs (variable arguments and captured variables): a call under
        # a tape that watches accessed variables watches these variables
        self._resource_positions = [k for k, t in enumerate(graph.all_inputs) if t.dtype is dtypes.resource]
        self._run = None
        self._run_first = None    # the _FirstOrder of a call recorded for one gradient
        # [Saving] per level (level 0: this graph's; level k+1: that of level k's `next`), the
        # number of outputs each level's backward is seeded for; `_closed` once the top
        # level's backward reads nothing new (every order can be taken from one run)
        self._levels = None
        self._fns = None          # per level, the function it differentiates
        self._sizes = None
        self._closed = False
        self._beyond = None       # why no level past the last can be built (raised when one is needed)

    @staticmethod
    def of(graph, backend=DEFAULT_BACKEND, rematerialize=False):
        """The GraphFunction of `graph` on `backend` (one per pair and mode, kept in graph.derived)."""
        key = (backend, True) if rematerialize else backend
        gf = graph.derived.functions.get(key)
        if gf is None:
            gf = graph.derived.functions[key] = GraphFunction(graph, backend, rematerialize)
        return gf

    @property
    def plan(self):
        return plan_of(self.graph, self.backend)

    def backward(self):
        """The Backward (graph/gradients.py) of this function, built once per graph."""
        return self._first_level()[0].backward

    def _backward_pair(self):
        """(Backward, forward-with-side-outputs view)."""
        bw = self.backward()
        return bw, bw.forward

    def _first_level(self):
        levels = self._levels
        if levels is None:
            with LOCK:
                if self._levels is None:
                    g = self.graph
                    first = saving_from(g, rematerialize(g)) if self.rematerialize else saving_of(g)
                    self._fns = [g]
                    self._sizes = [len(g.outputs)]
                    self._levels = [first]
                levels = self._levels
        return levels

    def _all_levels(self):
        """Levels up to the first whose function already returns all its backward reads."""
        levels = self._first_level()
        if not self._closed:
            with LOCK:
                while not self._closed:
                    top = levels[-1]
                    if top.next is self._fns[-1]:
                        self._closed = True
                    elif len(levels) >= MAX_LEVELS:
                        raise errors.UnimplementedError(
                            f"{self.graph.name}: its backward keeps needing new side outputs "
                            f"after {MAX_LEVELS} levels of differentiation")
                    else:
                        try:
                            nxt = saving_of(top.next)
                        except errors.UnimplementedError as e:
                            # no higher order here (a loaded custom_gradient past the
                            # document's levels): the orders below still work; one that
                            # needs this level raises `e` when it is asked for
                            self._closed, self._beyond = True, e
                            break
                        self._fns.append(top.next)
                        self._sizes.append(len(top.next.outputs))
                        levels.append(nxt)
        return levels

    def call_flat(self, inputs):
        """Run on `inputs` (tensors in all_inputs order); returns a list of output tensors.

        Eagerly one op: the compiled plan (or, under a watching tape, the forward function
        with side outputs and one tape entry); while tracing, a call node.
        """
        st = state
        if st.quiet and not execution_callbacks:  # eager, nobody listening: straight to the plan
            return self._run_plan(inputs)
        if st._graph is not None:
            if st._tapes and self._resource_positions:  # a tape in the enclosing trace sees the reads
                self._watch_variables(inputs)
            return call_graph(self.graph, inputs)
        if numerics.ON and not isinstance(self.backend, CheckingBackend):
            # checking numerics (its callback makes every call take this route): the same call
            # on the checking backend, whose plans and backward check every node
            checking = checking_backend(self.backend)
            return GraphFunction.of(self.graph, checking, self.rematerialize).call_flat(inputs)
        tapes = st._tapes
        order = 0
        if tapes:
            order, ids, recording = self._recording_tapes(tapes, inputs)
        if order:
            outs = self._call_recorded(inputs, order, ids, recording)
        else:
            outs = self._run_plan(inputs)
        if execution_callbacks:   # a defun call is one op to callbacks and traces
            for cb in tuple(execution_callbacks):
                cb(self.graph.name, None, {}, list(inputs), tuple(outs))
        if st._trace is not None:
            st._trace.add(self.graph.name, outs)
        return outs

    def plan_run(self):
        """The compiled plan's function (`run(*arrays) -> tuple of arrays`), compiled once."""
        run = self._run
        if run is None:
            run = self._run = plan_of(self.graph, self.backend).run
        return run

    def _run_plan(self, inputs):
        run = self._run
        if run is None:
            run = self.plan_run()
        try:
            vals = [t._value for t in inputs]
        except AttributeError:
            vals = [_eager_value(t) for t in inputs]
        return _wrap(run(*vals))

    def _watch_variables(self, inputs):
        watch_read_handles([inputs[k] for k in self._resource_positions])

    def _recording_tapes(self, tapes, inputs):
        """(order, the tapes that record this call): order 0, none does; 1, one
        non-persistent tape does (a first-order gradient); 2, a gradient of the gradient may
        follow (several tapes, or a persistent one, which may record its own gradient)."""
        if self._resource_positions:
            self._watch_variables(inputs)
        try:
            ids = [t._id for t in inputs]
        except AttributeError:
            ids = [getattr(t, "_id", None) for t in inputs]
        recording = [tape for tape in tapes if tape.should_record(ids)]
        if not recording:
            return 0, ids, recording
        return (1 if len(recording) == 1 and not recording[0].persistent else 2), ids, recording

    def _call_recorded(self, inputs, order, ids, recording):
        """Run the forward with side outputs and record ONE entry on the `recording` tapes,
        whose backward runs the backward function on what this run saved."""
        try:
            vals = [t._value for t in inputs]
        except AttributeError:
            vals = [_eager_value(t) for t in inputs]
        inputs = list(inputs)
        if order == 1:     # level 0 only (`_levels` may hold more, for other calls)
            first = self.first_order()
            saved = first.forward(vals)
            backward = first.backward_of(inputs, saved)
        else:
            saved, backward = self._call_any_order(inputs, vals)
        entry = tape_entry(self.graph.name, ids, saved, backward, True, inputs=inputs)
        for tape in recording:
            tape.add(entry)
        return saved[:len(self.graph.outputs)]

    def first_order(self):
        """The _FirstOrder of this function: what a call recorded for one gradient runs."""
        first = self._run_first
        if first is None:
            first = self._run_first = _FirstOrder(self, self._first_level()[0])
        return first

    def _call_any_order(self, inputs, vals):
        levels = self._all_levels()
        # per level, the outputs its backward is seeded for; past the last: not saved
        sizes = self._sizes + [len(levels[-1].next.outputs)]
        run = plan_of(levels[-1].next, self.backend).run
        saved = _wrap(run(*vals))
        backend, name = self.backend, self.graph.name

        def backward(*grads):
            level = pick_level(sizes, grads)
            if level is None:
                return [None] * len(inputs)
            if level >= len(levels):
                raise self._beyond or _one_gradient_only(name)
            return _run_backward(levels[level], backend, grads, inputs, saved)
        return saved, backward


class _FirstOrder:
    """A call recorded for one gradient, prepared once per function: the forward with side
    outputs, and its backward run straight on the arrays when nobody listens (the feed
    positions, captured values and gradient positions worked out here, not per call)."""

    __slots__ = ("name", "saving", "backend", "n_out", "fwd_run", "bw_run", "grad_pos", "feed",
                 "grads")

    def __init__(self, gf, saving):
        self.name, self.saving, self.backend = gf.graph.name, saving, gf.backend
        self.n_out = len(gf.graph.outputs)
        self.fwd_run = plan_of(saving.next, gf.backend).run
        bw = saving.backward
        self.bw_run = None      # compiled at the first backward
        self.grad_pos = tuple(bw.grad_outputs)
        # per backward capture, its Source and: INPUT, forward input k; SIDE, the position
        # of the saved output in a run's outputs; VALUE, the captured array. None: a value
        # that is no eager tensor (an enclosing trace's), which the general route handles
        feed = []
        for kind, v in bw.capture_sources:
            if kind is Source.SIDE:
                v = saving.side_pos[v]
            elif kind is Source.VALUE:
                if not isinstance(v, EagerTensor):
                    feed = None
                    break
                v = v._value
            feed.append((kind, v))
        self.feed = None if feed is None else tuple(feed)
        self.grads = tuple(bw.input_grads)

    def forward(self, vals):
        return _wrap(self.fwd_run(*vals))

    def backward_of(self, inputs, saved):
        """The tape entry's backward for one recorded call."""
        def backward(*grads):
            if state.quiet and not execution_callbacks:
                res = self.run_backward(grads, inputs, saved)
                if res is not None:
                    return res
            level = pick_level((self.n_out, len(saved)), grads)
            if level is None:
                return [None] * len(inputs)
            if level >= 1:
                raise _one_gradient_only(self.name)
            return _run_backward(self.saving, self.backend, grads, inputs, saved)
        return backward

    def value_and_gradients(self, inputs):
        """(output 0, the gradient of its sum per input) of one call on eager `inputs` with
        nobody listening: the forward with side outputs, then the backward, and no tape
        (none could record it)."""
        try:
            vals = [t._value for t in inputs]
        except AttributeError:
            vals = [_eager_value(t) for t in inputs]
        saved = self.forward(vals)
        value = saved[0]
        grads = [ones_like(value)] + [None] * (len(saved) - 1)
        res = self.run_backward(grads, inputs, saved)
        if res is None:
            res = _run_backward(self.saving, self.backend, grads, inputs, saved)
        return value, res

    def run_backward(self, grads, inputs, saved):
        """The input gradients, computed on arrays; None to take the general route (a
        gradient that is no eager tensor, or one for a side output, or none at all)."""
        n_out, feed = self.n_out, self.feed
        if feed is None:
            return None
        given = False
        for k, g in enumerate(grads):
            if g is not None:
                if k >= n_out or type(g) is not EagerTensor:
                    return None
                given = True
        if not given:
            return None
        vals = [grads[k]._value if grads[k] is not None else zeros_like(saved[k])._value
                for k in self.grad_pos]
        try:
            for kind, v in feed:
                vals.append(inputs[v]._value if kind is _INPUT else saved[v]._value if kind is _SIDE else v)
        except AttributeError:
            return None
        run = self.bw_run
        if run is None:
            run = self.bw_run = plan_of(self.saving.backward.graph, self.backend).run
        res = run(*vals)
        out = []
        for spec in self.grads:
            if spec is None:
                out.append(None)
            elif spec.__class__ is DenseGrad:
                out.append(_tensor(res[spec.output]))
            else:
                out.append(IndexedSlices(_tensor(res[spec.values]), _tensor(res[spec.indices]),
                                         spec.dense_shape))
        return out


def _one_gradient_only(name):
    return errors.UnimplementedError(
        f"{name}: a gradient of its gradient reached a call recorded for one gradient only; "
        f"record it on two tapes (or a persistent one) to differentiate twice")


def _run_backward(s, backend, grads, inputs, saved):
    """Backward of Saving `s` as one call of its function (recorded by tapes that watch the
    gradients, so it can be differentiated again)."""
    bw = s.backward
    feed = [dense(grads[k]) if grads[k] is not None else zeros_like(saved[k]) for k in bw.grad_outputs]
    res = GraphFunction.of(bw.graph, backend).call_flat(feed + s.feed(inputs, saved))
    return input_grads(bw, res)


_new = object.__new__
_INPUT, _SIDE = Source.INPUT, Source.SIDE     # read per backward capture of a recorded call


def _tensor(value):
    """EagerTensor(value) without the __init__ call."""
    t = _new(EagerTensor)
    t._value = value
    t._id = next_tensor_id()
    return t


def _wrap(values):
    return [_tensor(v) for v in values]


def _eager_value(t):
    if isinstance(t, EagerTensor):
        return t._value
    if isinstance(t, SymbolicTensor):
        raise errors.TracingError(f"symbolic tensor {t.name} (created at {t.creation_site}) is used "
                                  f"outside the function trace that created it")
    return to_array(t)
