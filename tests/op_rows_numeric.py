"""Op-table rows of the numeric-breadth elementwise and array functions (issue 15):
asin ... squared_difference, repeat, roll, reverse, linspace, meshgrid.

`outer` is a composite of reshape and multiply (no op of its own): tests/test_linalg.py.
"""
import numpy as np

import defun as df
from opcheck import A, FLOATS, NUMERIC, Row, V, adjoint_of, internal_op, bin_, un

f64 = df.float64


def uniform(shape, lo, hi, seed=0):
    """Fixed values drawn from [lo, hi) (a domain the row's function needs, e.g. acosh's x > 1)."""
    return A(value=np.random.default_rng(seed).uniform(lo, hi, size=shape))


def _flip_ref(x, axis):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return np.flip(x, axes) if axes else x.copy()


def _repeat_grad_ref(g, like, repeats, axis):
    reps = repeats[0] if len(repeats) == 1 else list(repeats)
    return adjoint_of(lambda x: np.repeat(x, reps, axis), like.shape, g)


def _linspace_ref(start, stop, num, axis=0):
    return np.linspace(start, stop, num, axis=axis).astype(start.dtype)


ROWS = [
    # ------------------------------------------------------------- inverse trigonometric
    Row("asin", df.asin, np.arcsin, un("unit"), second=True),
    Row("acos", df.acos, np.arccos, un("unit"), second=True),
    Row("atan", df.atan, np.arctan, un(), second=True),
    Row("atan2", df.atan2, np.arctan2, bin_("nonzero", "nonzero") +
        [V([A(value=[1., -1., 0., 0.5, -1.]), A(value=[1., -1., 1., -1., 0.])])], second=True),
    # ------------------------------------------------------------- hyperbolic
    Row("sinh", df.sinh, np.sinh, un(), second=True),
    Row("cosh", df.cosh, np.cosh, un(), second=True),
    Row("asinh", df.asinh, np.arcsinh, un(), second=True),
    Row("acosh", df.acosh, np.arccosh, [V([uniform((), 1.2, 3.)]), V([uniform((5,), 1.2, 3.)]),
                                        V([uniform((3, 4), 1.2, 3.)])], second=True),
    Row("atanh", df.atanh, np.arctanh, un("unit"), second=True),
    # ------------------------------------------------------------- logarithms, hypot, logaddexp
    Row("log2", df.log2, np.log2, un("positive") + [V([A(value=[1., 2., 0.5, 1024.])], grad=False)],
        second=True),
    Row("log10", df.log10, np.log10, un("positive") + [V([A(value=[1., 10., 0.01, 1e5])], grad=False)],
        second=True),
    Row("hypot", df.hypot, np.hypot, bin_("nonzero", "nonzero") +
        [V([A(value=[3e200, 1e-300]), A(value=[4e200, 1e-300])], dtypes=(f64,), grad=False)], second=True),
    Row("logaddexp", df.logaddexp, np.logaddexp, bin_() +
        [V([A(value=[30., -30., 0.5]), A(value=[29., -31., 0.5])]),
         V([A(value=[1000., -1000., 0.]), A(value=[1000., -1000., -1000.])], grad=False)], second=True),
    # ------------------------------------------------------------- reciprocal, ceil, squared_difference
    Row("reciprocal", df.reciprocal, np.reciprocal, un("nonzero"), second=True),
    Row("ceil", df.ceil, np.ceil, un() + [V([A(value=[-1.5, -0.5, 0., 0.5, 2.])])], grad=False),
    Row("squared_difference", df.squared_difference, lambda x, y: np.square(x - y), bin_(), NUMERIC,
        second=True),
    # ------------------------------------------------------------- arrays
    Row("repeat", df.repeat, lambda x, repeats, axis=None: np.repeat(x, repeats, axis),
        [V([A((3,))], dict(repeats=2)), V([A((2, 3))], dict(repeats=[1, 0, 2], axis=1)),
         V([A((2, 3))], dict(repeats=2)), V([A((2, 3))], dict(repeats=3, axis=-2)),
         V([A((2,))], dict(repeats=[2, 3], axis=0)), V([A(())], dict(repeats=3)),
         V([A((2, 2))], dict(repeats=[1, 2, 0, 1]))], NUMERIC, also=("repeat_grad",), second=True),
    Row("repeat_grad", internal_op("repeat_grad"), _repeat_grad_ref,
        [V([A((6,)), A((3,))], dict(repeats=(2,), axis=0)),
         V([A((2, 3)), A((2, 2))], dict(repeats=(1, 2), axis=1)),
         V([A((8,)), A((2, 2))], dict(repeats=(2,), axis=None)),
         V([A((3, 2)), A((3, 2))], dict(repeats=(1, 0, 2), axis=0))], NUMERIC, also=("repeat",), second=True),
    Row("roll", df.roll, lambda x, shift, axis: np.roll(x, shift, axis),
        [V([A((5,))], dict(shift=2, axis=0)), V([A((3, 4))], dict(shift=[1, -1], axis=[0, 1])),
         V([A((3, 4))], dict(shift=[1, 2], axis=[1, 1])), V([A((2, 3, 4))], dict(shift=-5, axis=-1)),
         V([A((3,))], dict(shift=[], axis=[]))], NUMERIC, second=True),
    Row("reverse", df.reverse, _flip_ref,
        [V([A((4,))], dict(axis=[0])), V([A((2, 3))], dict(axis=[1])), V([A((2, 3, 4))], dict(axis=[0, -1])),
         V([A((2, 3))], dict(axis=[])), V([A((3,))], dict(axis=0)), V([A(())], dict(axis=[]))],
        NUMERIC, second=True),
    Row("linspace", df.linspace, _linspace_ref,
        [V([A(()), A(())], dict(num=5)), V([A((3,)), A((3,))], dict(num=4)),
         V([A((2,)), A((3, 1))], dict(num=3)), V([A((2,)), A((2,))], dict(num=3, axis=-1)),
         V([A(()), A(())], dict(num=1)), V([A((2, 2)), A(())], dict(num=2, axis=1))], FLOATS, second=True),
    Row("meshgrid", lambda *xs, indexing="xy": df.meshgrid(*xs, indexing=indexing),
        lambda *xs, indexing="xy": list(np.meshgrid(*xs, indexing=indexing)),
        [V([A((3,)), A((2,))]), V([A((3,)), A((2,)), A((4,))], dict(indexing="ij")),
         V([A((3,)), A((2,)), A((4,))]), V([A((4,))]), V([A((2,)), A((3,))], dict(indexing="ij"))],
        NUMERIC, second=True),
]

API_ND = {"ceil"}
