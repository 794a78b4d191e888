"""What a compiled plan needs to know about a graph before it runs: which nodes are live
(the outputs or an effect depend on them) and which nodes assign variables (directly or
through the functions they run). Computed at compile time, never per call.
"""
from defun.runtime.ops.resource_ops import ASSIGN_OPS
from defun.graph.verify import functions_of

__all__ = ["live_node_ids", "live_nodes", "assigns_variables"]


def live_node_ids(graph, outputs=None):
    """ids of the nodes `outputs` (default: the graph's) or an effect depends on.

    Effects are stateful ops and ops running a function that contains one (a call of a
    function that assigns a variable runs even when its outputs are unused). For a
    finalized graph the last answer is kept (`graph.derived.live`): it is shared, never
    modify it.
    """
    outputs = graph.outputs if outputs is None else outputs
    key = None
    if graph.finalized:
        key = (len(graph.nodes), tuple([id(t) for t in outputs]))
        known = graph.derived.live
        if known is not None and known[0] == key:
            return known[1]
    live = {id(t.node) for t in outputs}
    add = live.add
    # one sweep from the last node back: creation order is topological, so every user of
    # a node is seen before it (a third faster than a depth-first walk from the outputs)
    for n in reversed(graph.nodes):
        if id(n) in live or n.stateful:
            add(id(n))
            for t in n.inputs:
                add(id(t.node))
            for c in n.control_inputs:
                add(id(c))
    if key is not None:
        graph.derived.live = (key, live)
    return live


def live_nodes(graph, outputs=None):
    """The nodes of `live_node_ids`, in program order."""
    live = live_node_ids(graph, outputs)
    return [n for n in graph.nodes if id(n) in live]


def assigns_variables(node, memo=None):
    """True if `node` assigns a variable, or runs a function that does (calls, branches).

    `memo` ({id(function graph): bool}) keeps answers across calls. A walk over the
    functions reachable from the node, not a recursion: a chain of 1000 calls is fine.
    """
    if node.op.name in ASSIGN_OPS:
        return True
    if not node.op.function_attrs:
        return False
    memo = {} if memo is None else memo
    todo, seen = list(functions_of(node)), set()
    while todo:
        g = todo.pop()
        if id(g) in seen:
            continue
        known = memo.get(id(g))
        if known:
            return True
        seen.add(id(g))
        if known is None:
            for n in g.nodes:
                if n.op.name in ASSIGN_OPS:
                    memo[id(g)] = True
                    return True
                if n.op.function_attrs:
                    todo.extend(functions_of(n))
    for gid in seen:    # none of them reaches an assignment
        memo[gid] = False
    return False
