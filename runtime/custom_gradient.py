"""`custom_gradient`: a function supplies its own gradient, eagerly and while tracing.

As in TensorFlow, the function's own ops are recorded like any others (they are simply
not on the way back from its results), so what `grad_fn` computes from the forward's
intermediates is differentiable too: gradients of custom gradients, to any order.
"""
import functools
import inspect

from defun.runtime import errors
from defun.runtime import tape as tape_mod
from defun.runtime.variables import handle_in_context, watch_reads
from defun.runtime.execute import run_op
from defun.runtime.nest import flatten, pack_as
from defun.runtime.registry import register
from defun.runtime.tensor import Tensor, convert_to_tensor
from defun.runtime import batching as bt

__all__ = ["custom_gradient"]

# The op passes the outputs through; its gradient calls the user's grad_fn. Inputs are
# (*outputs, *positional inputs, *handles of variables f read); gradient to the outputs' own
# producers is cut (None), so the only way back to the inputs is grad_fn. `grad_fn` and the
# variables are transient attrs: exported graphs keep the forward pass (an identity) and
# drop the Python gradient.


def _kernel(*vals, num_outputs, num_variables=0, grad_fn=None, variables=None):
    return tuple(vals[:num_outputs])


def _infer(shapes, dts, attrs):
    n = attrs["num_outputs"]
    return [(tuple(s), d) for s, d in zip(shapes[:n], dts[:n])]


def _grad(op, *grads):
    n = op.attrs["num_outputs"]
    nv = op.attrs.get("num_variables", 0)
    xs = op.inputs[n:len(op.inputs) - nv]
    grad_fn = op.attrs["grad_fn"]
    if grad_fn is None:
        raise errors.UnimplementedError(
            "custom_gradient: this graph was loaded from a document, which holds no Python "
            "gradient function: through it, only the gradients of the backward functions the "
            "document holds exist (export with include_backward=True, or k levels); this one "
            "needs a level the document does not have")
    if nv:
        variables = list(op.attrs["variables"])
        try:
            dxs, dvars = grad_fn(*grads, variables=variables)
        except (TypeError, ValueError) as e:
            if "unpack" not in str(e):
                raise
            raise ValueError("custom_gradient: with variables, grad_fn must return "
                             "(input gradients, variable gradients)") from None
        dvars = list(dvars)
        if len(dvars) != nv:
            raise ValueError(f"custom_gradient: grad_fn returned {len(dvars)} variable gradients "
                             f"for {nv} variables")
    else:
        dxs, dvars = grad_fn(*grads), []
    dxs = list(dxs) if isinstance(dxs, (list, tuple)) else [dxs]
    if len(dxs) != len(xs):
        raise ValueError(f"custom_gradient: grad_fn returned {len(dxs)} gradients for {len(xs)} inputs")
    return [None] * n + dxs + dvars


def _batched_grad_fn(ctx, node, x_flags, scope):
    n, nv = node.attrs["num_outputs"], node.attrs.get("num_variables", 0)
    grad_fn, k = node.attrs["grad_fn"], len(x_flags)

    def one_example(*dys):
        if not nv:
            dxs = grad_fn(*dys)
            return list(dxs) if isinstance(dxs, (list, tuple)) else [dxs]
        dxs, dvars = grad_fn(*dys, variables=list(node.attrs["variables"]))
        return (list(dxs) if isinstance(dxs, (list, tuple)) else [dxs]) + list(dvars)

    def batched_grad_fn(*dys, variables=None):
        got, flags = ctx.call_batched(one_example, node.outputs[:n], dys, scope, node.graph)
        if len(got) != k + nv:       # the op's own gradient names the mismatch
            return got if not nv else (got[:k], got[k:])
        res = []
        for i, (g, f) in enumerate(zip(got, flags)):
            if g is None:
                res.append(None)
            elif i < k and x_flags[i]:
                res.append(g if f else bt.materialize(ctx, node, g, node.inputs[n + i]))
            else:           # shared by every example: the examples' gradients summed
                res.append(bt.op("reduce_sum", [g], axis=(0,), keepdims=False) if f else
                           bt.op("multiply", [g, bt.batch_size(ctx, g.dtype)]))
        return res[:k] if not nv else (res[:k], res[k:])
    return batched_grad_fn


def _custom_gradient_batch(ctx, node, inputs, batched):
    """The batched op passes its outputs through (every one batched) and keeps a gradient:
    the user's grad_fn, which speaks of one example, run on the batch (traced on one
    example's cotangents, reading the batched values of what it closes over; ctx.call_batched).
    Gradients of unbatched inputs and of variables are summed over the examples."""
    n, nv = node.attrs["num_outputs"], node.attrs.get("num_variables", 0)
    k = len(inputs) - n - nv
    outs = bt.materialize_all(ctx, node, inputs[:n], batched[:n])
    # a loaded document's custom_gradient has no Python grad_fn: batched, it has none either
    # (differentiating it is then the loaded op's own typed refusal, not a call of None)
    grad_fn = node.attrs["grad_fn"] and _batched_grad_fn(ctx, node, list(batched[n:n + k]), ctx.scope())
    attrs = dict(node.attrs, grad_fn=grad_fn)
    return bt.all_batched(bt.emit(node, outs + list(inputs[n:]), attrs))


_OP = register(
    name="custom_gradient",
    kernel=_kernel,
    infer=_infer,
    grad=_grad,
    num_inputs=None,
    attrs={"num_outputs": "int", "num_variables": "int", "grad_fn": "transient",
        "variables": "transient"},
    defaults={"num_variables": 0},
    num_outputs=lambda attrs, n: attrs["num_outputs"],
    # forward: the first num_outputs inputs pass through (the gradient is Python only)
    onnx=lambda e, node, ins: [e.op("Identity", x) for x in ins[:node.attrs["num_outputs"]]],
    batch=_custom_gradient_batch,
)


def custom_gradient(f):
    """Decorator: `f(*xs, **kwargs)` returns `(y, grad_fn)`; `grad_fn(dy)` returns one
    gradient per positional x (keyword arguments are passed through, not differentiated).

    >>> @df.custom_gradient
    ... def clip_grad(x):
    ...     return df.identity(x), lambda dy: df.minimum(dy, 1.0)

    If `f` reads trainable variables, `grad_fn(dy, variables=...)` gets them and returns
    `(input gradients, one gradient per variable)`, as in TensorFlow. The ops `grad_fn`
    runs are recorded, so a custom gradient has gradients of its own.
    """
    @functools.wraps(f)
    def decorated(*args, **kwargs):
        xs = [a if isinstance(a, Tensor) else convert_to_tensor(a) for a in args]
        # f runs under the active tapes (its intermediates stay differentiable for what
        # grad_fn computes from them) and a probe that only learns which variables it reads
        probe = tape_mod.Tape(persistent=False, watch_accessed_variables=True)
        tape_mod.push_tape(probe)
        try:
            result, grad_fn = f(*xs, **kwargs)
        finally:
            tape_mod.pop_tape(probe)
        variables = [v for v in probe.variables.values() if v.trainable]
        if variables and not _takes_variables(grad_fn):
            names = ", ".join(v.name for v in variables)
            raise TypeError(f"custom_gradient: {getattr(f, '__name__', 'the function')} reads variables "
                            f"({names}), so its grad_fn must accept a keyword argument `variables` "
                            f"and return (input gradients, variable gradients)")
        watch_reads(variables)   # the op stands for f's reads (tapes recording only it see them)
        flat = [convert_to_tensor(y) for y in flatten(result)]
        handles = [handle_in_context(v) for v in variables]
        attrs = {"num_outputs": len(flat), "grad_fn": grad_fn}
        if variables:
            attrs.update(num_variables=len(variables), variables=tuple(variables))
        outs = run_op(_OP, tuple(flat) + tuple(xs) + tuple(handles), attrs)
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        return pack_as(result, outs)
    return decorated


def _takes_variables(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "variables" or p.kind is p.VAR_KEYWORD for p in params)
