"""Shared helpers for the defun and equivalence tests: dense values, finite differences,
float64 constants and the source line of a marked statement."""
import inspect

import numpy as np

import defun as df

F64 = np.float64


def f64(x):
    return df.constant(np.asarray(x, dtype=np.float64))


def val(t):
    """A numpy array for a tensor, variable, IndexedSlices or plain value."""
    if t is None:
        return None
    if isinstance(t, df.IndexedSlices):
        return np.asarray(df.convert_to_tensor(t))
    if isinstance(t, df.Variable):
        return t.numpy()
    return np.asarray(t)


def numeric_grads(f, arrays, eps=1e-6):
    """Central finite differences of a scalar function of float64 numpy arrays.

    `f(*arrays)` must return something `float()` accepts; one gradient array per input.
    """
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    grads = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a)
        flat = a.reshape(-1)
        gflat = g.reshape(-1)
        for j in range(flat.size):
            orig = flat[j]
            flat[j] = orig + eps
            hi = float(f(*arrays))
            flat[j] = orig - eps
            lo = float(f(*arrays))
            flat[j] = orig
            gflat[j] = (hi - lo) / (2 * eps)
        grads.append(g)
    return grads


def assert_close(actual, expected, rtol=1e-6, atol=1e-8, msg=""):
    np.testing.assert_allclose(val(actual), val(expected), rtol=rtol, atol=atol, err_msg=msg)


def line_of(fn, marker):
    """The line number, in its file, of the first line of `fn`'s source containing `marker`."""
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(src) if marker in s)


def nested_gradients(f, x, combine=None, persistent=False, jacobian=False):
    """(first, second): the gradient of `f(x)` with respect to `x`, taken on an inner tape,
    and the gradient of `combine(first)` (default: `first` itself, so its sum) taken on an
    outer tape watching the same `x` -- the nested-tape block of the second-order tests.
    `x` is a tensor or a list of them; `persistent` makes the inner tape persistent;
    `jacobian`: the second is the outer tape's jacobian of `combine(first)` (the Hessian)."""
    with df.GradientTape() as outer:
        outer.watch(x)
        with df.GradientTape(persistent=persistent) as inner:
            inner.watch(x)
            y = f(x)
        first = inner.gradient(y, x)
        target = first if combine is None else combine(first)
    return first, (outer.jacobian if jacobian else outer.gradient)(target, x)
