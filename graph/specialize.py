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
    is a scalar `s` made x's shape (broadcast_like, expand_dims) -> x * s."""
    labels = size_labels(graph, classes)
    cp = GraphCopy(graph)
    for node in graph.nodes:
        if node.op is PLACEHOLDER:
            continue
        new = None if node.control_inputs else _unified(cp, node, labels)
        if new is not None:
            cp.replace(node, new)
        else:
            cp.copy(node)
    return cp.finish()


def _unified(cp, node, labels):
    """The new tensors standing for `node`'s outputs, or None (copy it)."""
    name, ins, out = node.op.name, node.inputs, node.outputs[0] if node.outputs else None
    if name in ("sum_to_like", "broadcast_like"):
        x, like = ins
        lx, ll = labels.get(id(x)), labels.get(id(like))
        if lx is None or ll is None or x.dtype is not out.dtype:
            return None
        if lx == ll and tuple(x.shape) == tuple(out.shape):
            return [cp.tensors[id(x)]]
        lead = len(lx) - len(ll)
        if name == "sum_to_like" and lead > 0 and lx[lead:] == ll and None not in out.shape:
            attrs = {"axis": tuple(range(lead)), "keepdims": False}
            return cp.emit(_REDUCE_SUM, (cp.tensors[id(x)],), attrs, [(out.shape, out.dtype)], node.site).outputs
        return None
    if name == "multiply" and len(ins) == 2:
        for k in (0, 1):
            s, other = _scalar_filled(ins[k]), ins[1 - k]
            if s is not None and s.dtype is out.dtype and other.dtype is out.dtype and \
                    labels.get(id(other)) == labels.get(id(out)) is not None and \
                    tuple(other.shape) == tuple(out.shape):
                pair = [cp.tensors[id(s)], cp.tensors[id(other)]]
                return cp.emit(node.op, pair if k == 0 else pair[::-1], {}, [(out.shape, out.dtype)],
                               node.site).outputs
    return None


def _scalar_filled(t):
    """The scalar `s` when tensor `t` is s broadcast (broadcast_like, then any expand_dims or
    reshape): every element of t is s. Else None."""
    while t.node.op.name in _SCALAR_FILL and not t.node.control_inputs:
        if t.node.op.name == "broadcast_like":
            s = t.node.inputs[0]
            return s if s.shape is not None and tuple(s.shape) == () else None
        t = t.node.inputs[0]
    return None
