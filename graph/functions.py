"""Calling graph functions: the `call` op, cached compiled plans, raising a node a level,
and the rematerializing backward.

A `call` node runs another function graph (attr `f`). Its gradient is a call of `f`'s
backward function, fed with what the call saved: the first time, the node is raised in
place to call `f`'s forward with side outputs instead (graph/gradients.py), so the
callee's side outputs become outputs of the call, side outputs of the caller in turn.
The callee never runs again for a gradient; the backward is itself a graph function, so
gradients of any order work through nested calls.
"""
import numpy as np

from defun.runtime import errors
from defun.runtime import tape as tape_mod
from defun.runtime.execute import run_op
from defun.runtime.indexed_slices import IndexedSlices
from defun.runtime.ops.array_ops import zeros_like
from defun.runtime.registry import register
from defun.runtime.shapes import shape_str, shapes_compatible
from defun.graph.backends import get_backend
from defun.graph.executor import compile_graph
from defun.graph.gradients import LOCK, Backward, Source, levels_of, pick_level, saving_of
from defun.graph.input_gradients import DenseGrad
from defun.graph.ir import Graph
from defun.graph.nodes import Node, SymbolicTensor, infer_types
from defun.graph.passes import optimize

__all__ = ["CALL", "plan_of", "call_graph", "add_side_outputs", "node_of", "input_grads",
           "rematerialize", "CHEAP_OPS"]

_lock = LOCK     # plans and rematerialized backwards are built once, like savings


def plan_of(graph, backend=None):
    """The compiled plan of `graph` on `backend` (default numpy): optimized and compiled once
    per (graph, backend), kept in graph.derived.plans."""
    backend = get_backend(backend)
    plans = graph.derived.plans
    plan = plans.get(backend.name)
    if plan is None:
        with _lock:
            plan = plans.get(backend.name)
            if plan is None:
                plan = plans[backend.name] = compile_graph(optimize(graph), backend=backend)
    return plan


def _call_kernel(*vals, f):
    budget = f.derived.budget     # a loaded document's function: within its budgets
    return (plan_of(f).run if budget is None else budget.runner(f))(*vals)


def _call_bind(attrs, backend):
    # the callee is compiled, for the caller's backend, when the caller is compiled; a loaded
    # document's function keeps its own backend (its budgets) whoever calls it
    f = attrs["f"]
    budget = f.derived.budget
    if budget is not None and budget is not backend and budget is not getattr(backend, "checked_base", None):
        return budget.runner(f)     # (the budget's checking twin keeps its budgets: graph/checking.py)
    return plan_of(f, backend).run


def _call_infer(shapes, dts, attrs):
    f = attrs["f"]
    params = f.all_inputs
    if len(shapes) != len(params):
        raise errors.InvalidArgumentError(
            f"call @{f.name}: expected {len(params)} inputs, got {len(shapes)}")
    for k, (s, d, p) in enumerate(zip(shapes, dts, params)):
        if d is not p.dtype:
            raise errors.InvalidArgumentError(
                f"call @{f.name}: input {k} has dtype {d.name}, expected {p.dtype.name}")
        if not shapes_compatible(s, p.shape):
            raise errors.InvalidArgumentError(
                f"call @{f.name}: input {k} has shape {shape_str(s)}, expected {shape_str(p.shape)}")
    return [(t.shape, t.dtype) for t in f.outputs]


def _call_grad(op, *grads):
    chain = levels_of(op.attrs["f"])
    level = pick_level([len(g.outputs) for g in chain], grads)
    if level is None:
        return [None] * len(op.inputs)
    fn = chain[level]
    s = saving_of(fn)
    outs = op.outputs
    if s.next is not fn and level == len(chain) - 1:
        outs = add_side_outputs(op, {"f": s.next})      # the callee's side outputs: outputs of the call
    bw = s.backward
    feed = [grads[k] if k < len(grads) and grads[k] is not None else zeros_like(outs[k])
            for k in bw.grad_outputs]
    return input_grads(bw, call_graph(bw.graph, feed + s.feed(list(op.inputs), outs)))


def _call_batch(ctx, node, inputs, batched):
    """A call is batched inline: the callee's nodes are batched one by one."""
    return ctx.run_graph(node.attrs["f"], inputs, batched)


CALL = register(
    name="call",
    kernel=_call_kernel,
    infer=_call_infer,
    grad=_call_grad,
    num_inputs=None,
    attrs={"f": "func"},
    defaults={},
    num_outputs=lambda attrs, n: len(attrs["f"].outputs),
    none_grads=True,
    bind=_call_bind,
    # (exports inline calls)
    onnx=lambda e, node, ins: e.inline(node.attrs["f"], ins),
    batch=_call_batch,
)


def call_graph(graph, inputs):
    """Call function `graph` on `inputs` (all_inputs order): eagerly runs, or adds a call node."""
    out = run_op(CALL, list(inputs), {"f": graph})    # stateful when `graph` has effects
    if out is None:
        return []
    # (a forward accumulator recording the node may have raised it already: more outputs)
    return list(out[:len(graph.outputs)]) if isinstance(out, tuple) else [out]


def input_grads(bw, res):
    """The gradient per forward input from backward outputs `res` (None, dense, IndexedSlices)."""
    out = []
    for spec in bw.input_grads:
        if spec is None:
            out.append(None)
        elif isinstance(spec, DenseGrad):
            out.append(res[spec.output])
        else:
            out.append(IndexedSlices(res[spec.values], res[spec.indices], spec.dense_shape))
    return out


def node_of(op):
    """The graph node a gradient function's `op` stands for (the node, or a view of it)."""
    if isinstance(op, Node):
        return op
    outs = op.outputs
    if outs and isinstance(outs[0], SymbolicTensor):
        return outs[0].node
    raise errors.UnimplementedError(
        f"{op.type}: an eagerly run {op.type} op has no saved side outputs to differentiate by; "
        f"call the function through df.defun (or inside a traced function) instead")


def add_side_outputs(op, attrs):
    """Raise function node `op` one level: give it the side outputs its gradient reads. Its
    new function attrs `attrs` compute its outputs first and then more; returns the node's
    outputs (the old ones first, unchanged).

    Only a node of a graph being built changes (a trace, or the working copy
    build_backward differentiates). The new outputs are recorded on every active tape
    that recorded the node, so a gradient of this gradient reaches through them.
    """
    node = node_of(op)
    if node.graph.finalized:
        raise errors.InvalidArgumentError(
            f"{node.op.name} node {node.name} of @{node.graph.name} needs side outputs, but its "
            f"graph is finalized; differentiate the function through its GraphFunction (a bug "
            f"if you did)")
    types = infer_types(node.op, node.inputs, {**node.attrs, **attrs})
    old = list(node.outputs)
    for t, (_, dtype) in zip(old, types):
        if t.dtype is not dtype:
            raise errors.InvalidArgumentError(
                f"add_side_outputs: output {t.name} would change dtype to {dtype.name} (a bug)")
    node.attrs.update(attrs)
    new = [SymbolicTensor(node, i, tuple(shape), dtype)
           for i, (shape, dtype) in enumerate(types) if i >= len(old)]
    node.outputs.extend(new)
    tape_mod.record_more_outputs(node, old, new)
    return node.outputs


# ---------------------------------------------------------------------------------------
# Rematerialization (df.defun(f, rematerialize=True))

# Cheap pure ops a rematerializing backward recomputes instead of saving their results:
# elementwise ops (numpy ufunc kernels and these) and ops that only change a view.
CHEAP_OPS = frozenset([
    "divide", "pow", "sigmoid", "relu", "elu", "leaky_relu", "softplus", "erf", "gelu",
    "rsqrt", "clip_by_value", "squared_difference", "where", "cast", "identity",
    "stop_gradient", "reshape", "expand_dims", "squeeze", "broadcast_to", "zeros_like",
    "ones_like"])


def _cheap(node):
    op = node.op
    return (not node.stateful and op.single and not op.function_attrs and
            (type(op.kernel) is np.ufunc or op.name in CHEAP_OPS))


def rematerialize(f):
    """The Backward of `f` that saves only `f`'s inputs and what cheap pure ops cannot
    recompute (results of matmuls, reductions, variable reads, calls...), recomputing the
    rest inside the backward. Kept in f.derived.remat; stateful ops are never recomputed.
    """
    cached = f.derived.remat
    if cached is not None:
        return cached
    with _lock:
        if f.derived.remat is None:
            f.derived.remat = _rematerialized(f, saving_of(f).backward)
        return f.derived.remat


def _rematerialized(f, bw):
    fwd = bw.forward.view_of               # the graph the side outputs are tensors of
    need = set()                           # ids of the nodes the backward recomputes
    stack = [t.node for t in bw.side_outputs]
    while stack:
        node = stack.pop()
        if id(node) in need or not _cheap(node):
            continue
        need.add(id(node))
        stack.extend(t.node for t in node.inputs)
    rb = Graph(f"{f.name}_remat_grad", outer=fwd, base_name=f"{f.base_name}_remat_grad")
    rb.inline_constants = True
    with rb.building():
        seeds = [rb.placeholder(p.shape, p.dtype) for p in bw.graph.inputs]
        env = {}

        def value(t):
            v = env.get(id(t))
            return rb.capture(t) if v is None else v
        for node in fwd.nodes:         # program order: inputs are recomputed before use
            if id(node) in need:
                env[id(node.outputs[0])] = run_op(node.op, [value(t) for t in node.inputs],
                                                  node.attrs)
        feed = list(seeds)
        for kind, v in bw.capture_sources:
            feed.append(rb.capture(fwd.all_inputs[v]) if kind is Source.INPUT else
                        value(bw.side_outputs[v]) if kind is Source.SIDE else v)
        outs = call_graph(bw.graph, feed)
    rb.finalize(outs)
    return Backward.over(fwd, rb, bw.grad_outputs, bw.input_grads, f"{f.name}_forward_remat",
                         f"{f.base_name}_forward_remat")
