"""Replay a function graph with variable handles replaced by values: a pure function of them.

`replay_reading(graph, inputs)` runs `graph`'s nodes again through the current builder (a
graph being traced), except that an input which is a variable
handle in `graph` (dtype resource) may be given as a value tensor of the variable's shape
and dtype instead. Each `read_variable` of it then yields that value; calls are inlined (so a
gradient taken around the replay recomputes nothing), and a cond or while node that
receives a value runs new function graphs built the same way. A loss that
reads variables so becomes a function of (data, variable values), which can be
differentiated with respect to the values and shipped without any state:

    before:  f(%0: f32[?,3]) captures (%1: resource[]):  %2 = read_variable(%1); %3 = matmul(%0, %2)
    after:   g(%0: f32[?,3], %1: f32[3,2]):               %3 = matmul(%0, %1)

Assigning a variable given as a value raises InvalidArgumentError (the result would be
lost); any other op that receives one raises UnimplementedError naming the op.
"""
from defun.runtime import dtypes, errors
from defun.runtime.context import state
from defun.runtime.execute import run_op
from defun.runtime.ops.resource_ops import ASSIGN_OPS
from defun.graph.analysis import live_nodes
from defun.graph.ir import Graph
from defun.graph.verify import functions_of

__all__ = ["replay_reading"]



def replay_reading(graph, inputs):
    """The outputs of `graph` computed again in the current trace from `inputs`.

    `inputs` stand for `graph.all_inputs`; a resource input may be a value tensor instead.
    """
    builder = state.graph
    if builder is None:
        raise errors.InvalidArgumentError("replay_reading builds nodes: call it while a graph is traced")
    env = {id(t): v for t, v in zip(graph.all_inputs, inputs)}
    for node in live_nodes(graph):
        op = node.op
        if op.name == "placeholder":
            continue
        if op.name == "const":
            env[id(node.outputs[0])] = builder.constant(node.attrs["value"])
            continue
        args = [env[id(t)] for t in node.inputs]
        if op.name == "call":
            out = replay_reading(node.attrs["f"], args)
            for t, v in zip(node.outputs, out):
                env[id(t)] = v
            continue
        valued = any(t.dtype is dtypes.resource and a.dtype is not dtypes.resource
                     for t, a in zip(node.inputs, args))
        if not valued:
            out = run_op(op, args, node.attrs)
        elif op.name == "read_variable":
            out = args[0]
        elif op.name in ASSIGN_OPS:
            raise errors.InvalidArgumentError(
                f"{graph.name}: {op.name} writes a variable that is given as a value here; a pure "
                f"function cannot assign. Return the new value instead and assign it outside")
        elif any(True for _ in functions_of(node)):
            out = _rebuild(node, args)
        else:
            raise errors.UnimplementedError(
                f"{graph.name}: op {op.name} takes a variable handle, which is given as a value here; "
                f"only reads (read_variable), calls, conds and while loops can take a variable's value. "
                f"Read the variable first (v.read_value()) and pass the tensor to {op.name}")
        outs = out if isinstance(out, (tuple, list)) else () if out is None else (out,)
        for t, v in zip(node.outputs, outs):
            env[id(t)] = v
    return [env[id(t)] for t in graph.outputs]


def _rebuild(node, args):
    """Run `node` on `args` with each of its functions rebuilt for the value arguments."""
    attrs = dict(node.attrs)
    for name, value in node.attrs.items():
        if isinstance(value, tuple) and any(isinstance(v, Graph) for v in value):
            raise errors.UnimplementedError(
                f"{node.op.name}: a list of functions cannot take a variable's value yet; read the "
                f"variable outside (v.read_value()) and use the tensor inside")
        if isinstance(value, Graph):
            offset = len(args) - len(value.all_inputs)   # a cond passes its predicate first
            attrs[name] = _pure_function(value, args[offset:])
    # the new node is stateful only if a rebuilt function still is (a node flag, from its attrs)
    return run_op(node.op, args, attrs)


def _pure_function(graph, args):
    """A new function graph like `graph`, taking `args`' types (values where it took handles)."""
    g = Graph(f"{graph.name}_pure", outer=state.graph, base_name=f"{graph.base_name}_pure")
    with g.building():
        params = [g.placeholder(a.shape, a.dtype) if t.dtype is dtypes.resource and a.dtype is not dtypes.resource
                  else g.placeholder(t.shape, t.dtype, t.handle_data)
                  for t, a in zip(graph.all_inputs, args)]
        outputs = replay_reading(graph, params)
    return g.finalize(outputs)
