"""Graph-level gradients: the backward part of a function, built by the tape's own algorithm.

The forward graph's nodes, in order, form a tape (each entry's backward calls the op's
registered gradient on the node); `imperative_grad` then runs with a new graph as the
builder, so every gradient op becomes a node there. Forward tensors the gradient code
reads are captured into the backward graph: those captures are the side outputs.
"""
from runtime import tape as tape_mod
from runtime.autodiff import imperative_grad
from runtime.indexed_slices import IndexedSlices
from runtime.execute import run_op
from runtime.tensor import constant
from graph.executor import live_nodes
from graph.ir import Graph

__all__ = ["build_backward", "Backward", "replay"]


class Backward:
    """A backward function and how to feed it.

    graph: inputs are one gradient placeholder per differentiable forward output
        (`grad_outputs` gives their forward output positions), then captures.
    capture_sources: per backward capture, ("input", k) for the forward function's k-th
        input, ("side", k) for its k-th side output, or ("value", v) for an outer value.
    side_outputs: forward tensors the forward function must also return.
    input_grads: per forward input: None (no gradient), ("dense", j) for backward output j,
        or ("slices", jv, ji, dense_shape) for an IndexedSlices gradient.
    """

    __slots__ = ("graph", "grad_outputs", "capture_sources", "side_outputs", "input_grads")


def build_backward(forward, name=None):
    """Build the backward function of finalized graph `forward` (w.r.t. all its inputs)."""
    bwd = Graph(name or f"{forward.name}_grad", outer=forward,
                base_name=f"{forward.base_name}_grad")
    sources = forward.all_inputs
    diff_pos = [k for k, t in enumerate(forward.outputs) if t.dtype.is_floating]
    tape = tape_mod.Tape(persistent=True)
    for s in sources:
        tape.watch(s)
    for node in forward.nodes:
        if node.op.grad is None or not node.outputs:
            continue
        ids = [t._id for t in node.inputs]
        if not tape.should_record(ids):
            continue
        tape.add(tape_mod.TapeEntry(node.op.name, ids, tuple(node.outputs), node.op.grad,
                                    node.op.none_grads, node))
    with bwd.building():
        seeds = [bwd.placeholder(forward.outputs[k].shape, forward.outputs[k].dtype) for k in diff_pos]
        targets = [forward.outputs[k] for k in diff_pos]
        grads = imperative_grad(tape, targets, sources, seeds) if targets else [None] * len(sources)
    outputs = []
    input_grads = []
    for g in grads:
        if g is None:
            input_grads.append(None)
        elif isinstance(g, IndexedSlices):
            input_grads.append(("slices", len(outputs), len(outputs) + 1, g.dense_shape))
            outputs += [_own(bwd, g.values), _own(bwd, g.indices)]
        else:
            input_grads.append(("dense", len(outputs)))
            outputs.append(_own(bwd, g))
    bwd.finalize(outputs)

    pos_of_input = {t._id: k for k, t in enumerate(sources)}
    side_outputs = []
    side_pos = {}
    capture_sources = []
    for tid in bwd.capture_order:
        outer, _ = bwd.captures[tid]
        if getattr(outer, "node", None) is not None and outer.node.graph is forward:
            if tid in pos_of_input:
                capture_sources.append(("input", pos_of_input[tid]))
            else:
                if tid not in side_pos:
                    side_pos[tid] = len(side_outputs)
                    side_outputs.append(outer)
                capture_sources.append(("side", side_pos[tid]))
        else:
            capture_sources.append(("value", outer))
    b = Backward()
    b.graph = bwd
    b.grad_outputs = diff_pos
    b.capture_sources = capture_sources
    b.side_outputs = side_outputs
    b.input_grads = input_grads
    return b


def _own(graph, t):
    """`t` as a tensor of `graph` (a forward tensor passed straight through is captured)."""
    with graph.building():
        return graph.capture(t) if t.node.graph is not graph else t


def replay(graph, inputs, outputs=None):
    """Run `graph`'s nodes again through the current builder (eager, or another graph).

    `inputs` stand for graph.all_inputs; returns the values of `outputs` (default the
    graph's outputs). Inside a trace this inlines the function; under a tape it records.
    """
    outputs = graph.outputs if outputs is None else outputs
    env = {id(t): v for t, v in zip(graph.all_inputs, inputs)}
    for node in live_nodes(graph, outputs):
        if node.op.name == "placeholder":
            if id(node.outputs[0]) not in env:
                raise ValueError(f"replay: no value for input {node.name} of {graph.name}")
            continue
        if node.op.name == "const":
            env[id(node.outputs[0])] = constant(node.attrs["value"])
            continue
        out = run_op(node.op, [env[id(t)] for t in node.inputs], node.attrs)
        if out is None:
            continue
        outs = out if isinstance(out, tuple) else (out,)
        for t, v in zip(node.outputs, outs):
            env[id(t)] = v
    return [env[id(t)] for t in outputs]
