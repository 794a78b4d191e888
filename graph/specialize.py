"""A graph with unknown sizes made static for one call's shapes, without tracing again.

    fast = specialize(relaxed_graph, [(8, 32), (8,)])    # argument shapes, in input order
    plan_of(fast).run(*arrays)                           # same results, fewer nodes

A relaxed trace (defun's reduce_retracing) has unknown sizes, so what its sizes decide is
left to run time: a gradient sums to its input's shape (`sum_to_like`), a mean divides by
a size read then (`size`). Copied node by node with the argument placeholders' sizes known
and every node's types inferred again, the graph tells the optimization passes what they
need to fold those away (graph/passes.py: `sum_to_like` and `broadcast_like` to a known
shape, `size` and `shape` of a known shape): its plan runs what an exact trace's runs.
Captures keep their placeholders, so the graph is called as the original is.

A call at a size not yet hot runs the graph with its sizes unknown, but with which of them
are equal known (`sizes_plan`: one plan per pattern of equal sizes, torch's "duck sizing"
without its guard on 0 and 1): graph/size_labels.py then proves sizes equal that the graph
cannot say are, so a gradient's `sum_to_like` of a value already of its input's shape goes
away, a mean's gradient multiplies by its scalar instead of broadcasting it first, and the
executor writes results over dead temporaries of the same shape.
"""
from defun.runtime import registry
from defun.graph.executor import compile_graph
from defun.graph.nodes import CONST, PLACEHOLDER, infer_types
from defun.graph.passes import optimize
from defun.graph.rewrite import GraphCopy
from defun.graph.size_labels import size_labels

__all__ = ["specialize", "sizes_plan", "unify_sizes"]

_REDUCE_SUM = registry.get("reduce_sum")
_SCALAR_FILL = ("expand_dims", "reshape", "broadcast_like")   # x of scalar `s`: s everywhere


def specialize(graph, shapes):
    """A copy of finalized `graph` whose argument placeholders have `shapes` (each fitting
    the placeholder's own), every node's types inferred again. Raises what inference
    raises when a size contradicts the graph (the caller keeps the original then)."""
    cp = GraphCopy(graph)
    for t, shape in zip(cp.graph.inputs, shapes):
        t.shape = tuple(shape)
        t.node.attrs["shape"] = tuple(shape)
    for node in graph.nodes:
        if node.op is PLACEHOLDER:
            continue
        inputs = cp.inputs_of(node)
        if node.op is CONST:
            cp.copy(node, inputs)
            continue
        types = infer_types(node.op, inputs, node.attrs)
        new = cp.emit(node.op, inputs, dict(node.attrs), types, node.site, cp.controls_of(node), node.id)
        cp.replace(node, new.outputs, (new,))
    new = cp.graph
    new.outputs = [cp.tensors[id(t)] for t in graph.outputs]
    new.finalized = graph.finalized
    new.structured_outputs = graph.structured_outputs
    return new


def sizes_plan(graph, classes, backend):
    """The plan of finalized relaxed `graph` for calls whose unknown argument sizes (in
    size_labels' order) are equal as `classes` says (size_labels.size_classes of them)."""
    return compile_graph(optimize(unify_sizes(graph, classes)), backend=backend, sizes=classes)


def unify_sizes(graph, classes):
    """A copy of `graph` computing the same for calls whose unknown sizes fit `classes`:
    sum_to_like / broadcast_like of a value of the same shape as `like` -> the value;
    sum_to_like of [..., d] to `like` [d] -> reduce_sum over the leading axes; x * s' where s'
    is a scalar `s` made x's shape (broadcast_like, expand_dims) -> x * s, leaving out the
    nodes making s' when nothing else reads them (dead code elimination has nothing left)."""
    labels = size_labels(graph, classes)
    plans = {}
    for node in graph.nodes:
        if node.op.name in _UNIFIED and not node.control_inputs:
            plan = _unified(node, labels)
            if plan is not None:
                plans[id(node)] = plan
    dropped = _unread_fills(graph, plans) if plans else ()
    cp = GraphCopy(graph)
    for node in graph.nodes:
        if node.op is PLACEHOLDER or id(node) in dropped:
            continue
        plan = plans.get(id(node))
        if plan is None:
            cp.copy(node)
            continue
        out, (kind, ins) = node.outputs[0], plan
        ins = [cp.tensors[id(t)] for t in ins]
        if kind == "same":
            cp.replace(node, ins)
        elif kind == "sum":
            attrs = {"axis": tuple(range(len(node.inputs[0].shape) - len(out.shape))), "keepdims": False}
            cp.replace(node, cp.emit(_REDUCE_SUM, ins, attrs, [(out.shape, out.dtype)], node.site).outputs)
        else:
            cp.replace(node, cp.emit(node.op, ins, {}, [(out.shape, out.dtype)], node.site).outputs)
    return cp.finish()


_UNIFIED = ("sum_to_like", "broadcast_like", "multiply")


def _unified(node, labels):
    """How `node` is rewritten, from its tensors' labels: ("same", [x]): it is x; ("sum", [x]):
    x summed over its leading axes; ("scalar", [a, b]): multiply(a, b), one of them the scalar
    of a fill. None: copied as it is."""
    ins, out = node.inputs, node.outputs[0]
    if node.op.name != "multiply":
        x, like = ins
        lx, ll = labels.get(id(x)), labels.get(id(like))
        if lx is None or ll is None or x.dtype is not out.dtype:
            return None
        if lx == ll and tuple(x.shape) == tuple(out.shape):
            return "same", [x]
        lead = len(lx) - len(ll)
        if node.op.name == "sum_to_like" and lead > 0 and lx[lead:] == ll and None not in out.shape:
            return "sum", [x]
        return None
    for k in (0, 1):
        s, other = _scalar_filled(ins[k]), ins[1 - k]
        if s is not None and s.dtype is out.dtype and other.dtype is out.dtype and \
                labels.get(id(other)) == labels.get(id(out)) is not None and tuple(other.shape) == tuple(out.shape):
            return "scalar", [s, other] if k == 0 else [other, s]
    return None


def _unread_fills(graph, plans):
    """ids of the fill nodes (broadcast_like, expand_dims, reshape) that only rewritten
    multiplies read: left out of the copy."""
    reads = {}
    for node in graph.nodes:
        for t in node.inputs:
            reads[id(t)] = reads.get(id(t), 0) + 1
        for c in node.control_inputs:       # a control input stays
            reads[id(c.outputs[0]) if c.outputs else id(c)] = 1 << 30
    for t in graph.outputs:
        reads[id(t)] = 1 << 30
    dropped = set()
    for node in graph.nodes:
        plan = plans.get(id(node))
        if plan is None or plan[0] != "scalar":
            continue
        t = next((u for u in node.inputs if all(u is not v for v in plan[1])), None)
        while t is not None and t.node.op.name in _SCALAR_FILL and not t.node.stateful and len(t.node.outputs) == 1:
            reads[id(t)] -= 1
            if reads[id(t)]:
                break
            dropped.add(id(t.node))
            if t.node.op.name == "broadcast_like":
                break
            t = t.node.inputs[0]
    return dropped


def _scalar_filled(t):
    """The scalar `s` when tensor `t` is s broadcast (broadcast_like, then any expand_dims or
    reshape): every element of t is s. Else None."""
    while t.node.op.name in _SCALAR_FILL and not t.node.control_inputs:
        if t.node.op.name == "broadcast_like":
            s = t.node.inputs[0]
            return s if s.shape is not None and tuple(s.shape) == () else None
        t = t.node.inputs[0]
    return None
