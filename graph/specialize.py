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
"""
from defun.graph.nodes import CONST, PLACEHOLDER, infer_types
from defun.graph.rewrite import GraphCopy

__all__ = ["specialize"]


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
