"""`custom_gradient`: a function supplies its own gradient, eagerly and while tracing."""
import functools

from runtime import tape as tape_mod
from runtime.execute import run_op
from runtime.nest import flatten, pack_as
from runtime.registry import register
from runtime.tensor import Tensor, convert_to_tensor

__all__ = ["custom_gradient"]

# The op passes the outputs through; its gradient calls the user's grad_fn. Inputs are
# (*outputs, *function inputs); gradient to the outputs' own producers is cut (None), so
# the only way back to the inputs is grad_fn. `grad_fn` is a transient attr: exported
# graphs keep the forward pass (an identity) and drop the Python gradient.


def _kernel(*vals, num_outputs, grad_fn=None):
    return tuple(vals[:num_outputs])


def _infer(shapes, dts, attrs):
    n = attrs["num_outputs"]
    return [(tuple(s), d) for s, d in zip(shapes[:n], dts[:n])]


def _grad(op, *grads):
    n = op.attrs["num_outputs"]
    xs = op.inputs[n:]
    grad_fn = op.attrs["grad_fn"]
    if grad_fn is None:
        raise RuntimeError("custom_gradient: this graph was loaded without its Python gradient")
    dxs = grad_fn(*grads)
    dxs = list(dxs) if isinstance(dxs, (list, tuple)) else [dxs]
    if len(dxs) != len(xs):
        raise ValueError(f"custom_gradient: grad_fn returned {len(dxs)} gradients for {len(xs)} inputs")
    return [None] * n + dxs


_OP = register("custom_gradient", _kernel, _infer, _grad, num_outputs=lambda attrs, n: attrs["num_outputs"],
               attrs={"num_outputs": "int", "grad_fn": "transient"})


def custom_gradient(f):
    """Decorator: `f(*xs)` returns `(y, grad_fn)`; `grad_fn(dy)` returns one gradient per x.

    >>> @df.custom_gradient
    ... def clip_grad(x):
    ...     return df.identity(x), lambda dy: df.minimum(dy, 1.0)
    """
    @functools.wraps(f)
    def decorated(*args):
        xs = [a if isinstance(a, Tensor) else convert_to_tensor(a) for a in args]
        with tape_mod.stop_recording():
            result, grad_fn = f(*xs)
        flat = [convert_to_tensor(y) for y in flatten(result)]
        outs = run_op(_OP, tuple(flat) + tuple(xs), {"num_outputs": len(flat), "grad_fn": grad_fn})
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        return pack_as(result, outs)
    return decorated
