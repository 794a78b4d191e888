"""`df.test`: gradient checks, TensorFlow's `tf.test.compute_gradient` and a checker like
`torch.autograd.gradcheck`, in reverse mode (tapes) and forward mode (ForwardAccumulator).

    theoretical, numerical = df.test.compute_gradient(f, [x, w])
    df.test.check_gradients(f, [x, w], order=2)      # AssertionError naming what is wrong

Each Jacobian is a numpy array of shape (y.size, x.size) in x's real dtype: row i is output
element i (in C order), column j input element j, as TensorFlow lays them out; a complex x
or y counts as twice as many reals, the real and imaginary parts of each element
interleaved (TF's layout too). The numerical Jacobian is
central differences evaluated in the input's dtype, divided by the step actually taken
(x + delta and x - delta rounded to that dtype); the step is a power of two per dtype so it
is exact for moderate values.
"""
import inspect

import numpy as np

from defun.runtime.backprop import GradientTape
from defun.runtime.forwardprop import ForwardAccumulator
from defun.runtime.nest import flatten
from defun.runtime.ops.array_ops import concat, reshape, stack
from defun.runtime.ops.math_ops import imag, multiply, real, reduce_sum
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
    if not y.dtype.is_inexact:
        raise TypeError(f"{what}: f returns {y.dtype.name}; a gradient check needs a floating-point "
                        f"or complex result")
    return y


def _reals(a):
    """Array `a` flattened to float64, a complex one as (real, imaginary) pairs (TF's view)."""
    a = np.asarray(a).reshape(-1)
    return (a.astype(np.complex128).view(np.float64) if a.dtype.kind == "c" else a).astype(np.float64)


def _real_size(t):
    return int(np.prod(t.shape, dtype=np.int64)) * (2 if t.dtype.is_complex else 1)


def _unit(t, j):
    """The array shaped like tensor `t` with real entry j (of its real view) 1, the rest 0."""
    u = np.zeros(int(np.prod(t.shape, dtype=np.int64)), t.dtype.np)
    u[j // 2 if t.dtype.is_complex else j] = 1j if t.dtype.is_complex and j % 2 else 1
    return u.reshape(tuple(t.shape))


def _theoretical_rev(f, args, k, ysize):
    x = args[k]
    with GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = _output(f, args, "compute_gradient")
    if not (x.dtype.is_complex or y.dtype.is_complex):
        jac = tape.jacobian(y, x, unconnected_gradients="zero")
        return np.asarray(jac.numpy(), np.float64).reshape(ysize, _real_size(x))    # (no -1: y or x may be empty)
    rows = np.zeros((ysize, _real_size(x)))
    for r in range(ysize):      # the output gradient 1 (or 1j) on one real part of y
        g = tape.gradient(y, x, output_gradients=constant(_unit(y, r)), unconnected_gradients="zero")
        rows[r] = _reals(g.numpy())
    return rows


def _theoretical_fwd(f, args, k, ysize):
    x = args[k]
    cols = np.zeros((ysize, _real_size(x)))
    for j in range(cols.shape[1]):
        with ForwardAccumulator(x, constant(_unit(x, j))) as acc:
            y = _output(f, args, "compute_gradient")
        cols[:, j] = _reals(acc.jvp(y, unconnected_gradients="zero").numpy())
    return cols


def _numerical(f, args, k, ysize, delta):
    x = args[k].numpy()
    flat = x.reshape(-1).copy()
    real = flat.view(flat.real.dtype) if x.dtype.kind == "c" else flat    # complex: (re, im) pairs
    out = np.zeros((ysize, real.size))
    step = delta if delta is not None else _DELTA.get(real.dtype.name, 2.0 ** -10)
    for j in range(real.size):
        hi, lo = real.copy(), real.copy()
        hi[j] = real[j] + step
        lo[j] = real[j] - step
        taken = float(hi[j]) - float(lo[j])     # the step after rounding to x's dtype
        values = []
        for v in (hi, lo):
            moved = list(args)
            moved[k] = constant(v.view(x.dtype).reshape(x.shape))
            values.append(_reals(_output(f, moved, "compute_gradient").numpy()))
        out[:, j] = (values[0] - values[1]) / taken
    return out


def _jacobians(f, args, mode, delta, positions):
    ysize = _real_size(_output(f, args, "compute_gradient"))
    theoretical = _theoretical_rev if mode == "rev" else _theoretical_fwd
    theo = tuple(theoretical(f, args, k, ysize) for k in positions)
    num = tuple(_numerical(f, args, k, ysize, delta) for k in positions)
    return theo, num


def compute_gradient(f, xs, delta=None):
    """(theoretical, numerical): per input, the Jacobian of `f(*xs)` with respect to it,
    a numpy array of shape (y.size, x.size) in x's real dtype (a complex x or y: twice as
    many reals, real and imaginary parts interleaved, as TF); theoretical from reverse mode,
    numerical by central differences with step `delta` (default: 2**-5, 2**-10, 2**-16 for
    float16, float32, float64 and their complex pairs).

    >>> theo, num = df.test.compute_gradient(lambda x: x * x, [df.constant([1., 2.])])
    >>> theo[0]          # [[2., 0.], [0., 4.]]
    """
    args = _inputs(xs, "compute_gradient")
    for k, a in enumerate(args):
        if not a.dtype.is_inexact:
            raise TypeError(f"compute_gradient: input {k} is {a.dtype.name}; gradients are taken "
                            f"with respect to floating-point or complex inputs")
    theo, num = _jacobians(f, args, "rev", delta, range(len(args)))
    real = [np.zeros((), a.dtype.np).real.dtype for a in args]
    return tuple(t.astype(d) for t, d in zip(theo, real)), tuple(n.astype(d) for n, d in zip(num, real))


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
        if len({g.dtype.is_complex for g in grads}) > 1:     # complex beside real: (re, im) pairs
            grads = [stack([real(g), imag(g)], -1) if g.dtype.is_complex else g for g in grads]
        return concat([reshape(g, [-1]) for g in grads], 0)
    return gradient


def check_gradients(f, args, order=1, modes=("rev", "fwd"), rtol=None, atol=None):
    """Check the gradients of `f(*args)` against finite differences, up to `order` (1 or 2),
    in each of `modes` ("rev": tapes, "fwd": ForwardAccumulator); raise AssertionError
    naming the argument, the mode, the order and the worst entry if they disagree.

    >>> df.test.check_gradients(lambda x, w: df.tanh(x @ w), [x, w], order=2)

    Order 2 checks the gradient of the gradient: the Jacobian of x -> d<f(x), v>/dx (v fixed,
    random) in each mode. Only floating-point and complex arguments are checked (a complex
    one as its real and imaginary parts); the others are passed as they are. `rtol`/`atol`
    default by dtype (float16 5e-2/5e-2, float32 1e-2/1e-3, float64 1e-5/1e-6); an entry
    fails when |theoretical - numerical| > atol + rtol*|numerical|.
    """
    if isinstance(order, bool) or order not in (1, 2):
        raise ValueError(f"check_gradients: order must be 1 or 2, got {order!r}")
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    bad = [m for m in modes if m not in _MODES]
    if bad or not modes:
        raise ValueError(f"check_gradients: modes must be a non-empty tuple of 'rev' and 'fwd', got {modes!r}")
    args = _inputs(args, "check_gradients")
    positions = [k for k, a in enumerate(args) if a.dtype.is_inexact]
    if not positions:
        raise TypeError("check_gradients: no argument is floating-point or complex; nothing to differentiate")
    names = _names(f, len(args))
    funcs = [(1, f)]
    if order == 2:
        funcs.append((2, _gradient_of(f, args, positions)))
    for level, fn in funcs:
        for mode in modes:
            theo, num = _jacobians(fn, args, mode, None, positions)
            y_complex = _output(fn, args, "check_gradients").dtype.is_complex   # rows: (re, im) pairs
            for k, t, n in zip(positions, theo, num):
                _compare(t, n, args[k], names[k], mode, level, (rtol, atol), y_complex)


def _compare(theo, num, x, name, mode, level, tolerances, y_complex):
    rtol, atol = tolerances
    default_rtol, default_atol = _TOLERANCE.get(x.dtype.name, _TOLERANCE["float32"])
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    excess = np.abs(theo - num) - (atol + rtol * np.abs(num))
    bad = ~(excess <= 0)        # NaN counts as a failure
    if not bad.any():
        return
    flat = np.where(np.isnan(excess), np.inf, excess)
    i, j = np.unravel_index(int(np.argmax(flat)), flat.shape)
    part = ("", " (real part)", " (imaginary part)")[x.dtype.is_complex and 1 + j % 2]
    row = f"y[{i // 2}]{(' (real part)', ' (imaginary part)')[i % 2]}" if y_complex else f"y[{i}]"
    where = np.unravel_index(j // 2 if part else j, tuple(x.shape)) if x.shape else ()
    what = "gradient" if level == 1 else "second derivative (gradient of the gradient)"
    mode_text = "reverse mode" if mode == "rev" else "forward mode"
    raise AssertionError(
        f"check_gradients: the {mode_text} {what} with respect to {name} "
        f"({x.dtype.name}{list(x.shape)}) disagrees with finite differences at "
        f"{int(bad.sum())} of {bad.size} entries; worst: d {row} / d x{list(int(w) for w in where)}{part} "
        f"is {float(theo[i, j])!r}, finite differences give {float(num[i, j])!r} "
        f"(|difference| {abs(theo[i, j] - num[i, j]):.3g} > atol {atol:g} + rtol {rtol:g} * "
        f"|numerical|)")
