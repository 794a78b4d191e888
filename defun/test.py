"""`df.test`: gradient checks, TensorFlow's `tf.test.compute_gradient` and a checker like
`torch.autograd.gradcheck`, in reverse mode (tapes) and forward mode (ForwardAccumulator).

    theoretical, numerical = df.test.compute_gradient(f, [x, w])
    df.test.check_gradients(f, [x, w], order=2)      # AssertionError naming what is wrong

Each Jacobian is a numpy array of shape (y.size, x.size): row i is output element i (in C
order), column j input element j, as TensorFlow lays them out. The numerical Jacobian is
central differences evaluated in the input's dtype, divided by the step actually taken
(x + delta and x - delta rounded to that dtype); the step is a power of two per dtype so it
is exact for moderate values.
"""
import inspect

import numpy as np

from defun.runtime.backprop import GradientTape
from defun.runtime.forwardprop import ForwardAccumulator
from defun.runtime.nest import flatten
from defun.runtime.ops.array_ops import concat, reshape
from defun.runtime.ops.math_ops import multiply, reduce_sum
from defun.runtime.tensor import Tensor, constant, convert_to_tensor
from defun.runtime.variables import Variable

__all__ = ["compute_gradient", "check_gradients"]

# per dtype: the finite-difference step, and the default (rtol, atol) of check_gradients
_DELTA = {"float16": 2.0 ** -5, "float32": 2.0 ** -10, "float64": 2.0 ** -16}
_TOLERANCE = {"float16": (5e-2, 5e-2), "float32": (1e-2, 1e-3), "float64": (1e-5, 1e-6)}
_MODES = ("rev", "fwd")


def _inputs(xs, what):
    if not isinstance(xs, (list, tuple)):
        raise TypeError(f"{what}: the inputs must be a list (or tuple) of tensors, as in TensorFlow, "
                        f"got {type(xs).__name__}; write [x] for one input")
    out = []
    for k, x in enumerate(xs):
        if isinstance(x, Variable):
            x = x.read_value()
        t = x if isinstance(x, Tensor) else convert_to_tensor(x)
        if not hasattr(t, "numpy"):
            raise TypeError(f"{what}: input {k} is a traced tensor; call it eagerly, outside a defun")
        out.append(constant(t.numpy()))
    return out


def _output(f, args, what):
    y = f(*args)
    if isinstance(y, Variable):
        y = y.read_value()
    if not isinstance(y, Tensor):
        leaves = flatten(y) if isinstance(y, (list, tuple, dict)) else None
        if leaves is not None and len(leaves) == 1 and isinstance(leaves[0], Tensor):
            y = leaves[0]
        else:
            raise TypeError(f"{what}: f must return one tensor, got {type(y).__name__}")
    if not y.dtype.is_floating:
        raise TypeError(f"{what}: f returns {y.dtype.name}; a gradient check needs a floating-point "
                        f"result")
    return y


def _theoretical_rev(f, args, k, ysize):
    x = args[k]
    with GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = _output(f, args, "compute_gradient")
    jac = tape.jacobian(y, x, unconnected_gradients="zero")
    return np.asarray(jac.numpy(), np.float64).reshape(ysize, -1)


def _theoretical_fwd(f, args, k, ysize):
    x = args[k]
    size = int(np.prod(x.shape, dtype=np.int64))
    cols = np.zeros((ysize, size))
    for j in range(size):
        tangent = np.zeros(size, x.dtype.np)
        tangent[j] = 1
        with ForwardAccumulator(x, constant(tangent.reshape(tuple(x.shape)))) as acc:
            y = _output(f, args, "compute_gradient")
        t = acc.jvp(y, unconnected_gradients="zero")
        cols[:, j] = np.asarray(t.numpy(), np.float64).reshape(-1)
    return cols


def _numerical(f, args, k, ysize, delta):
    x = args[k].numpy()
    flat = x.reshape(-1)
    out = np.zeros((ysize, flat.size))
    step = delta if delta is not None else _DELTA.get(x.dtype.name, 2.0 ** -10)
    for j in range(flat.size):
        hi, lo = flat.copy(), flat.copy()
        hi[j] = flat[j] + step
        lo[j] = flat[j] - step
        taken = float(hi[j]) - float(lo[j])     # the step after rounding to x's dtype
        values = []
        for v in (hi, lo):
            moved = list(args)
            moved[k] = constant(v.reshape(x.shape))
            values.append(np.asarray(_output(f, moved, "compute_gradient").numpy(), np.float64))
        out[:, j] = (values[0] - values[1]).reshape(-1) / taken
    return out


def _jacobians(f, args, mode, delta, positions):
    y = _output(f, args, "compute_gradient")
    ysize = int(np.prod(y.shape, dtype=np.int64))
    theoretical = _theoretical_rev if mode == "rev" else _theoretical_fwd
    theo = tuple(theoretical(f, args, k, ysize) for k in positions)
    num = tuple(_numerical(f, args, k, ysize, delta) for k in positions)
    return theo, num


def compute_gradient(f, xs, delta=None):
    """(theoretical, numerical): per input, the Jacobian of `f(*xs)` with respect to it,
    a numpy array of shape (y.size, x.size); theoretical from reverse mode, numerical by
    central differences with step `delta` (default: 2**-5, 2**-10, 2**-16 for float16,
    float32, float64).

    >>> theo, num = df.test.compute_gradient(lambda x: x * x, [df.constant([1., 2.])])
    >>> theo[0]          # [[2., 0.], [0., 4.]]
    """
    args = _inputs(xs, "compute_gradient")
    for k, a in enumerate(args):
        if not a.dtype.is_floating:
            raise TypeError(f"compute_gradient: input {k} is {a.dtype.name}; gradients are taken "
                            f"with respect to floating-point inputs")
    return _jacobians(f, args, "rev", delta, range(len(args)))


def _names(f, n):
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for k in range(n):
        if k < len(params) and params[k].kind in (params[k].POSITIONAL_ONLY, params[k].POSITIONAL_OR_KEYWORD):
            names.append(f"argument {k} ({params[k].name!r})")
        else:
            names.append(f"argument {k}")
    return names


def _gradient_of(f, args, positions):
    """The function of `args` returning the gradients of <f(args), v> for a fixed random v,
    flattened and concatenated: its Jacobian is the second derivative of f."""
    y = _output(f, args, "check_gradients")
    v = np.random.RandomState(0).uniform(0.5, 1.5, tuple(y.shape)).astype(y.dtype.np)

    def gradient(*xs):
        with GradientTape() as tape:
            for k in positions:
                tape.watch(xs[k])
            out = reduce_sum(multiply(_output(f, xs, "check_gradients"), constant(v)))
        grads = tape.gradient(out, [xs[k] for k in positions], unconnected_gradients="zero")
        return concat([reshape(g, [-1]) for g in grads], 0)
    return gradient


def check_gradients(f, args, order=1, modes=("rev", "fwd"), rtol=None, atol=None):
    """Check the gradients of `f(*args)` against finite differences, up to `order` (1 or 2),
    in each of `modes` ("rev": tapes, "fwd": ForwardAccumulator); raise AssertionError
    naming the argument, the mode, the order and the worst entry if they disagree.

    >>> df.test.check_gradients(lambda x, w: df.tanh(x @ w), [x, w], order=2)

    Order 2 checks the gradient of the gradient: the Jacobian of x -> d<f(x), v>/dx (v fixed,
    random) in each mode. Only floating-point arguments are checked; the others are passed
    as they are. `rtol`/`atol` default by dtype (float16 5e-2/5e-2, float32 1e-2/1e-3,
    float64 1e-5/1e-6); an entry fails when |theoretical - numerical| > atol + rtol*|numerical|.
    """
    if isinstance(order, bool) or order not in (1, 2):
        raise ValueError(f"check_gradients: order must be 1 or 2, got {order!r}")
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    bad = [m for m in modes if m not in _MODES]
    if bad or not modes:
        raise ValueError(f"check_gradients: modes must be a non-empty tuple of 'rev' and 'fwd', got {modes!r}")
    args = _inputs(args, "check_gradients")
    positions = [k for k, a in enumerate(args) if a.dtype.is_floating]
    if not positions:
        raise TypeError("check_gradients: no argument is floating-point; nothing to differentiate")
    names = _names(f, len(args))
    funcs = [(1, f)]
    if order == 2:
        funcs.append((2, _gradient_of(f, args, positions)))
    for level, fn in funcs:
        for mode in modes:
            theo, num = _jacobians(fn, args, mode, None, positions)
            for k, t, n in zip(positions, theo, num):
                _compare(t, n, args[k], names[k], mode, level, rtol, atol)


def _compare(theo, num, x, name, mode, level, rtol, atol):
    default_rtol, default_atol = _TOLERANCE.get(x.dtype.name, _TOLERANCE["float32"])
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    excess = np.abs(theo - num) - (atol + rtol * np.abs(num))
    bad = ~(excess <= 0)        # NaN counts as a failure
    if not bad.any():
        return
    flat = np.where(np.isnan(excess), np.inf, excess)
    i, j = np.unravel_index(int(np.argmax(flat)), flat.shape)
    where = np.unravel_index(j, tuple(x.shape)) if x.shape else ()
    what = "gradient" if level == 1 else "second derivative (gradient of the gradient)"
    mode_text = "reverse mode" if mode == "rev" else "forward mode"
    raise AssertionError(
        f"check_gradients: the {mode_text} {what} with respect to {name} "
        f"({x.dtype.name}{list(x.shape)}) disagrees with finite differences at "
        f"{int(bad.sum())} of {bad.size} entries; worst: d y[{i}] / d x{list(int(w) for w in where)} "
        f"is {float(theo[i, j])!r}, finite differences give {float(num[i, j])!r} "
        f"(|difference| {abs(theo[i, j] - num[i, j]):.3g} > atol {atol:g} + rtol {rtol:g} * "
        f"|numerical|)")
