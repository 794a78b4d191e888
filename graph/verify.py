"""`verify(graph)`: the IR's invariants, checked after every pass and on every import.

A graph is valid when:
- every node belongs to it, has a unique id and a registered op;
- every input and control input is a node *earlier* in `graph.nodes` (define before use;
  this also rules out cycles, and a cycle is named when one is found);
- its placeholders are exactly `graph.all_inputs` (arguments, then captures);
- attr names and value types match the op's schema (runtime/attr_types.py says what each type means);
- its stateful flag is what its op and the functions it runs make it;
- the op's inference, re-run on the input shapes/dtypes, gives the recorded outputs
  (same count and dtypes; shapes agree where both sizes are known);
- the outputs are tensors of this graph;
- and the same holds for every function an attr refers to (call bodies, branches).

    >>> verify(g)          # returns g, or raises VerifyError printing the failing node
"""
from defun.runtime import attr_types, errors, registry
from defun.runtime.shapes import shapes_compatible
from defun.graph.nodes import Node, SymbolicTensor, functions_in, has_effects, infer_types
from defun.graph.printer import format_node, type_str

__all__ = ["verify", "VerifyError", "functions_of", "reaches"]


class VerifyError(errors.InvalidArgumentError):
    """A graph breaks an IR invariant; the message names the node and how to fix it."""


# ---------------------------------------------------------------------------------------
# What a node or the functions it runs do

def functions_of(node):
    """The function graphs `node`'s attrs refer to (call bodies, branches, loop bodies)."""
    return functions_in(node.op, node.attrs)


def reaches(node, test, memo=None):
    """True if `test(node.op)`, or `node` runs a function (call, branch, loop body) that
    has a node passing `reaches` (recursively).

    `memo` (a dict, one per `test`) caches the answer per function graph across calls.
    """
    if test(node.op):
        return True
    if not node.op.function_attrs:
        return False
    memo = {} if memo is None else memo
    for g in functions_of(node):
        known = memo.get(id(g))
        if known is None:
            memo[id(g)] = False     # a function calling itself adds nothing new
            known = memo[id(g)] = any(reaches(n, test, memo) for n in g.nodes)
        if known:
            return True
    return False


# ---------------------------------------------------------------------------------------

def verify(graph, recursive=True):
    """Check `graph`'s invariants; returns it, or raises VerifyError naming the node.

        g = Graph("f")
        with g.building():
            x = g.placeholder((2,), df.float32)
            y = df.tanh(x)
        verify(g.finalize([y]))   # -> g

    `recursive=False` skips the functions that attrs refer to (already verified ones).
    """
    _Verifier(recursive).check(graph)
    return graph


def _fail(graph, node, problem, fix):
    where = f"node `{format_node(node)}`" if node is not None else "the function signature"
    raise VerifyError(f"invalid graph @{graph.name}: {where}: {problem}. {fix}")


class _Verifier:
    def __init__(self, recursive):
        self.recursive = recursive
        self.done = set()       # ids of graphs already checked in this call (library sharing)
        self.known_ops = set()  # OpDefs found in the registry

    def check(self, graph):
        if id(graph) in self.done:
            return
        self.done.add(id(graph))
        pos = {}
        ids = {}
        for k, node in enumerate(graph.nodes):
            # a view (Graph.view) shares its base graph's node list, and so its nodes
            if not isinstance(node, Node) or (node.graph is not graph and
                                              getattr(node.graph, "nodes", None) is not graph.nodes):
                owner = getattr(getattr(node, "graph", None), "name", "?")
                _fail(graph, node if isinstance(node, Node) else None,
                      f"it belongs to function @{owner}, not to this one",
                      "Copy nodes into a graph with graph._new_node (or a pass's GraphCopy), "
                      "never by appending another graph's node")
            if node.id in ids:
                _fail(graph, node, f"its id {node.id} is also used by an earlier node",
                      "Give each node a unique id (the graph's counter does)")
            ids[node.id] = node
            pos[id(node)] = k
        self._check_signature(graph, pos)
        for k, node in enumerate(graph.nodes):
            self._check_node(graph, node, k, pos)
        for j, t in enumerate(graph.outputs):
            if not isinstance(t, SymbolicTensor) or id(t.node) not in pos:
                shown = t.name if isinstance(t, SymbolicTensor) else repr(t)
                _fail(graph, None, f"output {j} ({shown}) is not a tensor of this "
                      f"function", "Finalize the graph with tensors its own nodes produce")
            if t.index >= len(t.node.outputs) or t.node.outputs[t.index] is not t:
                _fail(graph, t.node, f"output {j} ({t.name}) is not one of this node's outputs",
                      "Use node.outputs[i] for outputs")

    def _check_signature(self, graph, pos):
        params = graph.all_inputs
        if set(graph.captures) != set(graph.capture_order) or \
                len(graph.capture_order) != len(set(graph.capture_order)):
            _fail(graph, None, "`captures` and `capture_order` disagree",
                  "Add captures only with graph.capture(t)")
        seen = set()
        for j, t in enumerate(params):
            if not isinstance(t, SymbolicTensor) or id(t.node) not in pos or \
                    t.node.op.name != "placeholder":
                _fail(graph, getattr(t, "node", None) if id(getattr(t, "node", None)) in pos else None,
                      f"input {j} is not a placeholder of this function",
                      "Make inputs with graph.placeholder(...) and captures with graph.capture(t)")
            if id(t.node) in seen:
                _fail(graph, t.node, f"input {j} repeats an earlier input",
                      "Each input needs its own placeholder")
            seen.add(id(t.node))
        for node in graph.nodes:
            if node.op.name == "placeholder" and id(node) not in seen:
                _fail(graph, node, "this placeholder is neither an argument nor a capture, so no "
                      "call can feed it", "Remove it, or register it in graph.inputs / "
                      "graph.captures (graph.placeholder and graph.capture do that)")

    def _check_node(self, graph, node, k, pos):
        # The fast path tests everything cheaply; _fail and _input_error explain a failure.
        op = node.op
        if op not in self.known_ops:
            if not registry.exists(op.name) or registry.get(op.name) is not op:
                _fail(graph, node, f"op {op.name!r} is not the registered op of that name",
                      "Use ops from defun.runtime.registry (register new ops there first)")
            self.known_ops.add(op)
        inputs = node.inputs
        for t in inputs:
            # one try instead of four tests: a bad input (not a tensor, not of this graph,
            # defined later, not its node's output) raises or fails a comparison here
            try:
                p = pos[id(t.node)]
                ok = p < k and t.__class__ is SymbolicTensor and t.node.outputs[t.index] is t \
                    and t.index >= 0
            except (AttributeError, KeyError, IndexError, TypeError):
                ok = False
            if not ok:
                for j, u in enumerate(inputs):
                    p = pos.get(id(getattr(u, "node", None)))
                    if p is None or p >= k or not isinstance(u, SymbolicTensor) or \
                            u.index >= len(u.node.outputs) or u.node.outputs[u.index] is not u:
                        self._input_error(graph, node, k, j, u, pos)
                break
        if op.num_inputs is not None and len(inputs) != op.num_inputs:
            _fail(graph, node, f"it has {len(inputs)} inputs, op {op.name!r} takes {op.num_inputs}",
                  "Give the node exactly the inputs its op declares")
        for c in node.control_inputs:
            p = pos.get(id(c))
            if p is None:
                _fail(graph, node, f"control input {getattr(c, 'name', c)} is not a node of this "
                      f"function", "Control inputs must be earlier nodes of the same graph")
            if p >= k:
                self._order_error(graph, node, f"control input {c.name}")
        # --- attrs
        if node.attrs:
            self._check_attrs(graph, node, op)
        stateful = op.stateful or (op.function_attrs != () and
                                   any(has_effects(g) for g in functions_of(node)))
        if node.stateful is not stateful:
            _fail(graph, node, f"its stateful flag is {node.stateful}, but its op and the functions "
                  f"it runs make it {stateful}", "Create nodes with graph._new_node, which sets it")
        self._check_outputs(graph, node, op, inputs)

    def _check_outputs(self, graph, node, op, inputs):
        """Its outputs: as many as the op makes, pointing back at it, of the inferred types."""
        if op.single:
            n = 1
        else:
            try:
                n = op.output_count(node.attrs, len(inputs))
            except Exception as e:  # a variadic count reads attrs that may be missing
                _fail(graph, node, f"cannot count its outputs ({type(e).__name__}: {e})",
                      "Give the op the attrs it needs")
        outputs = node.outputs
        if len(outputs) != n:
            _fail(graph, node, f"it has {len(outputs)} outputs, op {op.name!r} makes {n}",
                  "Create nodes through Graph.add_op or with out_types from op.infer")
        # one output (most nodes) is tested without a loop; the loops explain a failure
        single = n == 1 and outputs[0].__class__ is SymbolicTensor
        if not single or outputs[0].node is not node or outputs[0].index != 0:
            for i, t in enumerate(outputs):
                if not isinstance(t, SymbolicTensor) or t.node is not node or t.index != i:
                    _fail(graph, node, f"output {i} does not point back at this node",
                          "Make outputs with SymbolicTensor(node, i, shape, dtype)")
        try:
            inferred = infer_types(op, inputs, node.attrs)
        except Exception as e:
            _fail(graph, node, f"shape inference fails on its inputs ({type(e).__name__}: {e})",
                  "Fix the inputs or attrs (a pass must only substitute tensors of the same "
                  "shape and dtype)")
        if len(inferred) != n:
            _fail(graph, node, f"inference gives {len(inferred)} outputs, the op makes {n}",
                  "Fix the op's infer function in the registry")
        if single:
            t, (shape, dtype) = outputs[0], inferred[0]
            if t.dtype is dtype and (t.shape == shape or shapes_compatible(t.shape, shape)):
                return
        for i, (t, (shape, dtype)) in enumerate(zip(outputs, inferred)):
            if t.dtype is not dtype or (t.shape != shape and not shapes_compatible(t.shape, shape)):
                _fail(graph, node, f"output {i} is recorded as {type_str(t.shape, t.dtype)} but "
                      f"its inputs give {type_str(tuple(shape), dtype)}",
                      "Record the inferred type (Graph.add_op does); a pass must not change an "
                      "input's dtype or make shapes disagree")

    def _check_attrs(self, graph, node, op):
        schema = op.attrs
        for name, value in node.attrs.items():
            kind = schema.get(name)
            if kind is None:
                known = ", ".join(sorted(schema)) or "none"
                _fail(graph, node, f"attr {name!r} is not declared by op {op.name!r} (declared: "
                      f"{known})", "Remove the attr or declare it in the op's register(...) call")
            atype = attr_types.TYPES[kind]    # the registry only accepts types of the table
            if not atype.check(value):
                _fail(graph, node, f"attr {name!r} should be {atype.expected} (type {kind!r}), got "
                      f"{type(value).__name__} {value!r}", "Convert the value where the op is "
                      "called (for example tuple(...) for a list)")
            if self.recursive and (kind == "func" or kind == "funcs"):
                for g in (value if kind == "funcs" else (value,)):
                    self.check(g)

    def _input_error(self, graph, node, k, j, t, pos):
        if not isinstance(t, SymbolicTensor):
            _fail(graph, node, f"input {j} is a {type(t).__name__}, not a symbolic tensor",
                  "Convert values with graph.constant(...) or graph.capture(t)")
        p = pos.get(id(t.node))
        if p is None:
            _fail(graph, node, f"input {j} ({t.name}) is produced outside this function",
                  "Capture outer tensors with graph.capture(t) instead of using them directly")
        if t.index >= len(t.node.outputs) or t.node.outputs[t.index] is not t:
            _fail(graph, node, f"input {j} ({t.name}) is not an output of its node",
                  "Use node.outputs[i] for inputs")
        self._order_error(graph, node, f"input {j} ({t.name})")

    def _order_error(self, graph, node, what):
        cycle = _find_cycle(graph)
        if cycle:
            text = " -> ".join(n.name for n in cycle + [cycle[0]])
            _fail(graph, node, f"{what} depends on itself through the cycle {text}",
                  "A function graph must be acyclic: break the cycle")
        _fail(graph, node, f"{what} is defined after this node",
              "Keep graph.nodes in topological order: a node must come after its inputs")


def _find_cycle(graph):
    """A list of nodes forming a cycle, or [] (networkx; only on the error path)."""
    import networkx as nx    # slow to import; only on the error path
    g = nx.DiGraph()
    known = {id(n): n for n in graph.nodes}
    for n in graph.nodes:
        g.add_node(id(n))
        for t in n.inputs:
            if id(getattr(t, "node", None)) in known:
                g.add_edge(id(t.node), id(n))
        for c in n.control_inputs:
            if id(c) in known:
                g.add_edge(id(c), id(n))
    try:
        edges = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return []
    return [known[u] for u, _ in edges]
