"""Calling graph functions: the `call` op, cached compiled plans, rematerialized backward.

A `call` node runs another function graph (attr `f`) (a function attr). Its gradient is a
call of `f`'s rematerializing backward function (recompute forward, then backprop), which
is itself a graph function, so gradients of any order work through nested calls.
"""
import threading

from runtime import errors
from runtime.backprop import GradientTape
from runtime.execute import run_op
from runtime.indexed_slices import IndexedSlices
from runtime.ops.array_ops import identity, zeros_like
from runtime.registry import register
from runtime.shapes import shape_str, shapes_compatible
from graph.backends import get_backend
from graph.executor import compile_graph
from graph.gradients import replay
from graph.ir import Graph
from graph.passes import optimize

__all__ = ["CALL", "plan_of", "remat_backward", "call_graph"]

_lock = threading.RLock()


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
    return plan_of(f).run(*vals)


def _call_bind(attrs, backend):
    # the callee is compiled, for the caller's backend, when the caller is compiled
    return plan_of(attrs["f"], backend).run


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
    f = op.attrs["f"]
    n_in = len(op.inputs)
    diff = [k for k, t in enumerate(f.outputs) if t.dtype.is_floating]
    feed = list(op.inputs)
    for k in diff:
        g = grads[k]
        feed.append(g if g is not None else zeros_like(op.outputs[k]))
    rb, spec = remat_backward(f)
    out = call_graph(rb, feed)
    result = []
    for k in range(n_in):
        j = spec[k]
        result.append(None if j is None else out[j])
    return result


CALL = register("call", _call_kernel, _call_infer, _call_grad,
                num_outputs=lambda attrs, n: len(attrs["f"].outputs), none_grads=True,
                attrs={"f": "func"}, bind=_call_bind, num_inputs=None, defaults={},
                onnx=lambda e, node, ins: e.inline(node.attrs["f"], ins))   # (exports inline calls)
def call_graph(graph, inputs):
    """Call function `graph` on `inputs` (all_inputs order): eagerly runs, or adds a call node."""
    out = run_op(CALL, list(inputs), {"f": graph})    # stateful when `graph` has effects
    if out is None:
        return []
    return list(out) if isinstance(out, tuple) else [out]


def remat_backward(graph):
    """(backward graph, spec): inputs = graph inputs + grads of its float outputs.

    Recomputes the forward pass inside (no side outputs), so it can stand anywhere a
    gradient of a call is needed. spec[k] is the output index of input k's gradient or None.
    """
    cached = graph.derived.remat
    if cached is not None:
        return cached
    with _lock:
        cached = graph.derived.remat
        if cached is not None:
            return cached
        bwd = Graph(f"{graph.name}_remat_grad",
                    base_name=f"{graph.base_name}_remat_grad")
        diff = [k for k, t in enumerate(graph.outputs) if t.dtype.is_floating]
        with bwd.building():
            xs = [bwd.placeholder(t.shape, t.dtype, t.handle_data) for t in graph.all_inputs]
            gs = [bwd.placeholder(graph.outputs[k].shape, graph.outputs[k].dtype) for k in diff]
            with GradientTape(persistent=True) as tape:
                for x in xs:
                    tape.watch(x)
                outs = replay(graph, xs)
            targets = [outs[k] for k in diff]
            grads = tape.gradient(targets, xs, output_gradients=gs) if targets else [None] * len(xs)
            outputs, spec = [], []
            for g in grads:
                if g is None:
                    spec.append(None)
                    continue
                if isinstance(g, IndexedSlices):
                    g = g._as_tensor()
                if getattr(g, "node", None) is None or g.node.graph is not bwd:
                    g = identity(g)
                spec.append(len(outputs))
                outputs.append(g)
        bwd.finalize(outputs)
        graph.derived.remat = (bwd, spec)
        return graph.derived.remat

