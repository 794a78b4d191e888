"""The graph IR: a function graph (`Graph`) and what is derived from it (`Derived`).

A `Graph` is one function: placeholder nodes for its inputs (arguments, then captures),
op nodes (graph/nodes.py) in creation order (always a valid topological order), and a
list of outputs. It is built by tracing (graph/tracer.py, whose `Tracing` it inherits:
the graph is the builder the runtime calls), by copying (graph/rewrite.py) or by loading
a document (graph/serialize/build.py).
"""
import itertools
import threading

from defun.graph.nodes import PLACEHOLDER, Node, SymbolicTensor
from defun.graph.printer import format_graph
from defun.graph.tracer import Tracing

__all__ = ["Graph", "Derived", "unique_name"]

_graph_ids = itertools.count(1)


class Derived:
    """What is computed from a finalized graph and kept with it: declared here, in one place.

    plans: {backend name: compiled Plan} (graph.functions.plan_of)
    effectful: whether a node is stateful (has_effects)
    backward: (Backward, forward-with-side-outputs view) (graph.gradients.saving_of)
    saving: the Saving of this function: its Backward and what to run so that the
        backward's side outputs exist (graph.gradients.saving_of)
    saves_for: for a function that is another's forward with side outputs, that other
        function (its outputs come first): how a node finds the levels it was raised through
    remat: the rematerializing Backward (graph.gradients.rematerialize)
    levels: {key: what a cond or while node at this function needs to go one level up}
        (graph.control_flow)
    functions: {backend name: the defun GraphFunction calling this graph}
    live: ((node count, ids of the outputs asked for), ids of the live nodes), the last
        answer of graph.analysis.live_node_ids (a pass's test and then the compiler ask it)
    budget: for a function of a loaded document, the backend keeping its budgets
        (graph/serialize/budget.py): a `call` of it from any graph runs it there, and no
        pass inlines it
    """

    __slots__ = ("plans", "effectful", "backward", "saving", "saves_for", "remat", "levels",
                 "functions", "live", "budget")

    def __init__(self):
        self.plans = {}
        self.effectful = None
        self.backward = None
        self.saving = None
        self.saves_for = None
        self.remat = None
        self.levels = {}
        self.functions = {}
        self.live = None
        self.budget = None


_name_counts = {}
_name_lock = threading.Lock()


def unique_name(base):
    """`base_0`, `base_1`, ...: distinct graph names in one process (library entries)."""
    with _name_lock:
        n = _name_counts.get(base, 0)
        _name_counts[base] = n + 1
    return f"{base}_{n}"


class Graph(Tracing):
    """A function graph: placeholders (arguments, then captures), nodes, outputs.

    `captures` maps an outer tensor's id to `(outer value, placeholder)`; the outer value
    is an eager tensor or a tensor of an enclosing graph, fed as an extra input per call.
    `view_of`: the graph whose nodes a view (`Graph.view`) shares, else None. `aliases`:
    for a copy made to build a backward, {id(old tensor): (old tensor, its copy)}, so a
    gradient closure holding tensors of the original (custom_gradient) captures the copy's.
    `inline_constants`: capture an enclosing graph's constant as a constant of this graph
    (backward graphs: a constant is no side output).
    """

    is_function_graph = True    # what a `func` attr holds (runtime.attr_types.is_function)

    def __init__(self, name="f", outer=None, base_name=None):
        self.name = name
        # the name without a process-wide counter (`loss` for `loss_3`): exports use it, so
        # a function's document does not depend on what else the process traced
        self.base_name = base_name or name
        self.outer = outer
        self.nodes = []
        self.inputs = []          # argument placeholders (SymbolicTensor), in order
        self.outputs = []         # output tensors
        self.captures = {}        # outer tensor id -> (outer value, placeholder)
        self.capture_order = []   # outer tensor ids in capture order
        self.last_stateful = None
        self.finalized = False
        self.structured_outputs = None
        self.view_of = None
        self.aliases = None
        self.inline_constants = False
        self.uid = next(_graph_ids)
        self._ids = itertools.count()
        self._const_cache = {}
        self._scalar_consts = {}  # (type, Python scalar, target np.dtype) -> const tensor
        self.derived = Derived()

    # ------------------------------------------------------------------ nodes
    def _new_node(self, op, inputs, attrs, out_types, site, control_inputs=(), node_id=None):
        """A node appended to this graph (`node_id`: keep a copied node's id; default: the next)."""
        node = Node(self, next(self._ids) if node_id is None else node_id, op, inputs, attrs,
                    list(control_inputs), site)
        if len(out_types) == 1:     # most nodes: no comprehension
            (s, d), = out_types
            node.outputs = [SymbolicTensor(node, 0, s, d)]
        else:
            node.outputs = [SymbolicTensor(node, i, s, d) for i, (s, d) in enumerate(out_types)]
        if node.stateful:
            if self.last_stateful is not None and self.last_stateful not in node.control_inputs:
                node.control_inputs.append(self.last_stateful)
            self.last_stateful = node
        self.nodes.append(node)
        return node

    def placeholder(self, shape, dtype, handle_data=None, name=None):
        """A new argument placeholder (appended to `inputs`)."""
        t = self._placeholder(shape, dtype, handle_data)
        self.inputs.append(t)
        return t

    def _placeholder(self, shape, dtype, handle_data):
        shape = tuple(None if d is None else int(d) for d in shape)
        node = self._new_node(PLACEHOLDER, [], {"shape": shape, "dtype": dtype}, [(shape, dtype)],
                              None)
        t = node.outputs[0]
        t.handle_data = handle_data
        return t

    @property
    def captured_placeholders(self):
        return [self.captures[i][1] for i in self.capture_order]

    @property
    def captured_values(self):
        return [self.captures[i][0] for i in self.capture_order]

    @property
    def all_inputs(self):
        """Argument placeholders followed by capture placeholders: the function signature."""
        return self.inputs + self.captured_placeholders

    # ------------------------------------------------------------------ finishing
    def finalize(self, outputs):
        """Set the outputs (tensors of this graph) and freeze the graph."""
        self.outputs = list(outputs)
        self.finalized = True
        return self

    def view(self, outputs, name=None, base_name=None):
        """A function sharing this graph's nodes and inputs but returning `outputs`."""
        g = Graph.__new__(Graph)
        g.__dict__.update({k: v for k, v in self.__dict__.items() if not k.startswith("_") or
                           k in ("_ids", "_const_cache", "_scalar_consts")})
        g.name = name or self.name
        g.base_name = base_name or (self.base_name if name is None else name)
        g.outputs = list(outputs)
        g.uid = next(_graph_ids)
        g.view_of = self.view_of or self
        g.derived = Derived()     # a view computes its own plan and backward
        return g

    def __str__(self):
        return format_graph(self)

    def __repr__(self):
        return (f"<Graph {self.name}: {len(self.all_inputs)} inputs, {len(self.nodes)} nodes, "
                f"{len(self.outputs)} outputs>")

