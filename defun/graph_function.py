"""GraphFunction: a function graph called eagerly, nested in a trace, or under a tape.

Three call routes, chosen per call: the compiled plan (eager, nobody listening); a `call`
node (inside another trace); the forward-with-side-outputs plan plus ONE tape entry whose
backward runs the backward graph function (under a tape that watches an input). The
backward is built lazily, the first time a gradient is needed.
"""
import threading

from runtime import dtypes, errors
from runtime.context import execution_callbacks, state
from runtime.indexed_slices import IndexedSlices
from runtime.ops.array_ops import zeros_like
from runtime.tape import record_operation
from runtime.tensor import EagerTensor, to_array
from runtime.variables import watch_read_handles
from graph.backends import DEFAULT_BACKEND
from graph.functions import call_graph, plan_of, remat_backward
from graph.gradients import build_backward
from graph.ir import SymbolicTensor

__all__ = ["GraphFunction"]

_lock = threading.Lock()    # builds each backward once, whichever thread asks first


class GraphFunction:
    """A function graph that can be called eagerly, nested, and differentiated.

    The backward function is built lazily on the first call that needs a gradient.
    """

    def __init__(self, graph, backend=DEFAULT_BACKEND):
        self.graph = graph
        self.backend = backend      # the name of the backend its plans run on
        # positions of resource inputs (variable arguments and captured variables): a call under
        # a tape that watches accessed variables watches these variables
        self._resource_positions = [k for k, t in enumerate(graph.all_inputs) if t.dtype is dtypes.resource]
        self._run = None

    @staticmethod
    def of(graph, backend=DEFAULT_BACKEND):
        """The GraphFunction of `graph` on `backend` (one per pair, kept in graph.derived)."""
        gf = graph.derived.functions.get(backend)
        if gf is None:
            gf = graph.derived.functions[backend] = GraphFunction(graph, backend)
        return gf

    @property
    def plan(self):
        return plan_of(self.graph, self.backend)

    def backward(self):
        """The Backward (graph/gradients.py) of this function, built once per graph."""
        return self._backward_pair()[0]

    def _backward_pair(self):
        """(Backward, forward-with-side-outputs view), kept in graph.derived."""
        derived = self.graph.derived
        if derived.backward is None:
            with _lock:
                if derived.backward is None:
                    g = self.graph
                    bw = build_backward(g)
                    derived.backward = (bw, g.view(g.outputs + bw.side_outputs, f"{g.name}_forward",
                                                   f"{g.base_name}_forward"))
        return derived.backward

    def call_flat(self, inputs):
        """Run on `inputs` (tensors in all_inputs order); returns a list of output tensors.

        Eagerly one op: the compiled plan (or, under a watching tape, the forward function
        with side outputs and one tape entry); while tracing, a call node.
        """
        st = state
        if st.quiet and not execution_callbacks:  # eager, nobody listening: straight to the plan
            return self._run_plan(inputs)
        if st.graph is not None:
            if st.tapes and self._resource_positions:  # a tape in the enclosing trace sees the reads
                self._watch_variables(inputs)
            return call_graph(self.graph, inputs)
        tapes = st.tapes
        if tapes and self._should_record(tapes, inputs):
            outs = self._call_recorded(inputs)
        else:
            outs = self._run_plan(inputs)
        if execution_callbacks:   # a defun call is one op to callbacks and traces
            for cb in tuple(execution_callbacks):
                cb(self.graph.name, None, {}, list(inputs), tuple(outs))
        if st.trace is not None:
            st.trace.add(self.graph.name, outs)
        return outs

    def _run_plan(self, inputs):
        run = self._run
        if run is None:
            run = self._run = plan_of(self.graph, self.backend).run
        try:
            vals = [t._value for t in inputs]
        except AttributeError:
            vals = [_eager_value(t) for t in inputs]
        return [EagerTensor(o) for o in run(*vals)]

    def _watch_variables(self, inputs):
        watch_read_handles([inputs[k] for k in self._resource_positions])

    def _should_record(self, tapes, inputs):
        if self._resource_positions:
            self._watch_variables(inputs)
        ids = [getattr(t, "_id", None) for t in inputs]
        return any(tape.should_record(ids) for tape in tapes)

    def _call_recorded(self, inputs):
        bw, fwd = self._backward_pair()
        outs = plan_of(fwd, self.backend).run(*[_eager_value(t) for t in inputs])
        n = len(self.graph.outputs)
        real = [EagerTensor(o) for o in outs[:n]]
        side = [EagerTensor(o) for o in outs[n:]]
        inputs = list(inputs)

        def backward(*grads):
            g_out, g_side = grads[:n], grads[n:]
            if any(g is not None for g in g_side):
                # Higher order: the side outputs themselves get gradients. Recompute.
                rb, spec = remat_backward(fwd)
                outs_all = real + side
                feed = inputs + [grads[k] if grads[k] is not None else zeros_like(outs_all[k])
                                 for k, t in enumerate(fwd.outputs) if t.dtype.is_floating]
                res = GraphFunction.of(rb, self.backend).call_flat(feed)
                return [None if j is None else res[j] for j in spec]
            feed = [g_out[k] if g_out[k] is not None else zeros_like(real[k]) for k in bw.grad_outputs]
            for kind, v in bw.capture_sources:
                feed.append(inputs[v] if kind == "input" else side[v] if kind == "side" else v)
            res = GraphFunction.of(bw.graph, self.backend).call_flat(feed)
            result = []
            for spec in bw.input_grads:
                if spec is None:
                    result.append(None)
                elif spec[0] == "dense":
                    result.append(res[spec[1]])
                else:
                    result.append(IndexedSlices(res[spec[1]], res[spec[2]], spec[3]))
            return result

        record_operation(self.graph.name, real + side, inputs, backward, none_grads=True)
        return real


def _eager_value(t):
    if isinstance(t, EagerTensor):
        return t._value
    if isinstance(t, SymbolicTensor):
        raise errors.TracingError(f"symbolic tensor {t.name} (created at {t.creation_site}) is used "
                                  f"outside the function trace that created it")
    return to_array(t)
