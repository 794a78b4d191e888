"""Op table rows: the special functions of df.math (runtime/ops/special_functions.py),
against scipy.special. Gathered by test_ops.py. The parameters igamma, igammac, polygamma
and betainc take no gradient (an UnimplementedError when one is asked for: see
test_special_functions.py); their rows pass them as constants and differentiate x."""
import numpy as np
import scipy.special as sp

import defun as df
from opcheck import A, Row, V, via_float64, un

POSITIVE = [V([A(s, "positive")]) for s in [(), (5,), (3, 4)]]
LGAMMA = [-4.5, -2.7, -0.3, 0.05, 0.2, 0.99, 1.0, 1.01, 1.7, 2.0, 2.4, 3.9, 12.0, 171.3]
# values where finite differences cannot follow (poles, kinks, cliffs): values only
EDGES = [V([A(value=[-2.5, 1e-6, 1e-300, 1e15])], grad=False)]


def _like_x(value, x):
    """A float64 constant cast to x's dtype (to a bool too: the op itself then refuses it)."""
    return df.cast(df.constant(value, dtype=df.float64), x.dtype)


def _pair(fn, ref):
    """A row function of x with its first operand a constant `a` of x's dtype."""
    run = lambda x, a: fn(_like_x(a, x), x)  # noqa: E731
    check = lambda x, a: np.asarray(ref(a, x.astype(np.float64))).astype(x.dtype)  # noqa: E731
    return run, check


_POLY = _pair(df.math.polygamma, sp.polygamma)
_IGAMMA = _pair(df.math.igamma, sp.gammainc)
_IGAMMAC = _pair(df.math.igammac, sp.gammaincc)


def _betainc(x, a, b):
    return df.math.betainc(_like_x(a, x), _like_x(b, x), x)


def _betainc_ref(x, a, b):
    return sp.betainc(a, b, x.astype(np.float64)).astype(x.dtype)


def _in_unit(shape):
    return A(value=np.linspace(0.05, 0.95, int(np.prod(shape)) or 0).reshape(shape))


ROWS = [
    Row("lgamma", df.math.lgamma, via_float64(sp.gammaln), POSITIVE + [V([A(value=LGAMMA[:-1])])] + EDGES, second=True),
    Row("digamma", df.math.digamma, via_float64(sp.psi), POSITIVE + [V([A(value=LGAMMA)])] + EDGES, second=True),
    Row("polygamma", _POLY[0], _POLY[1],
        [V([A((5,), "positive")], dict(a=1.0)), V([A((3, 4), "positive")], dict(a=2.0)),
         V([A(value=[0.3, 1.0, 7.5, 40.0])], dict(a=3.0)), V([A(value=[0.3, 2.0])], dict(a=0.0)),
         V([A(value=[-2.5, -0.3, -17.2])], dict(a=1.0))], second=True),
    Row("erfc", df.math.erfc, via_float64(sp.erfc), un() + [V([A(value=[-6., -1., 0., 0.5, 3., 9., 26.])])],
        second=True),
    Row("erfinv", df.math.erfinv, via_float64(sp.erfinv), un("unit") + [V([A(value=[-0.9, -1e-9, 0., 0.3, 0.95])]),
                                          V([A(value=[-1., -0.999999, 0.9999999999, 1.])], grad=False)],
        second=True),
    Row("xlogy", df.math.xlogy, lambda x, y: sp.xlogy(x.astype(np.float64), y).astype(x.dtype),
        [V([A((4,)), A((4,), "positive")]), V([A((2, 3)), A((3,), "positive")]),
         V([A(value=[0., 0., 2.]), A(value=[0.5, 3., 4.])], grad=False)], second=True),
    Row("xlog1py", df.math.xlog1py, lambda x, y: sp.xlog1py(x.astype(np.float64), y).astype(x.dtype),
        [V([A((4,)), A((4,), "positive")]), V([A((2, 3)), A((3,), "unit")]),
         V([A(value=[0., 1.5]), A(value=[-0.5, 1e-9])], grad=False)], second=True),
    Row("igamma", _IGAMMA[0], _IGAMMA[1],
        [V([A((5,), "positive")], dict(a=0.7)), V([A((3, 4), "positive")], dict(a=2.5)),
         V([A(value=[0.5, 3.0, 30.0])], dict(a=4.0)), V([A(value=[0., 1e-300])], dict(a=4.0), grad=False)],
        second=True),
    Row("igammac", _IGAMMAC[0], _IGAMMAC[1],
        [V([A((5,), "positive")], dict(a=0.7)), V([A(value=[0.5, 3.0, 9.0])], dict(a=4.0))], second=True),
    Row("betainc", _betainc, _betainc_ref,
        [V([_in_unit((5,))], dict(a=0.5, b=2.0)), V([_in_unit((2, 3))], dict(a=3.0, b=1.5))], second=True),
    Row("bessel_i0e", df.math.bessel_i0e, via_float64(sp.i0e), un() + [V([A(value=[-40., -3., 0.5, 29.9, 30.1, 700.])]),
                                                              V([A(value=[0., 1e-8])], grad=False)], second=True),
    Row("bessel_i1e", df.math.bessel_i1e, via_float64(sp.i1e),
        un() + [V([A(value=[-40., -3., 0.005, 29.9, 30.1, 700.])]),
                V([A(value=[0., 1e-8])], grad=False)], second=True),
]
