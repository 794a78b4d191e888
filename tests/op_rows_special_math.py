"""Op table rows: elementwise special functions, clip_by_value, logsumexp / any / all / norm
reductions, cumsum / cumprod, eye (runtime/ops/special_math_ops.py). Gathered by test_ops.py."""
import numpy as np
import scipy.special

import defun as df
from opcheck import A, FLOATS, NUMERIC, Row, V, internal_op, via_float64, red, un

f32, f64, i32, i64, b = df.float32, df.float64, df.int32, df.int64, df.bool


def _gelu_ref(x, approximate=False):
    x64 = x.astype(np.float64)
    if approximate:
        out = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    else:
        out = 0.5 * x64 * scipy.special.erfc(-x64 / np.sqrt(2))
    return out.astype(x.dtype)


def _logsumexp_ref(x, axis=None, keepdims=False):
    if axis == ():
        return x.copy()
    return np.asarray(scipy.special.logsumexp(x.astype(np.float64), axis=axis, keepdims=keepdims)).astype(x.dtype)


def _norm_ref(x, ord="euclidean", axis=None, keepdims=False):
    x64 = x.astype(np.float64)
    matrix = isinstance(axis, (tuple, list)) and len(axis) == 2
    if ord == "euclidean":
        ord = "fro" if matrix else None
    if axis is None:
        out = np.linalg.norm(x64.reshape(-1), ord)
        out = np.reshape(out, (1,) * x.ndim) if keepdims else out
    else:
        out = np.linalg.norm(x64, ord, axis=tuple(axis) if matrix else axis, keepdims=keepdims)
    return np.asarray(out).astype(x.dtype)


def _cumulative_ref(fn, identity):
    def ref(x, axis=0, exclusive=False, reverse=False):
        y = np.flip(x, axis) if reverse else x
        out = fn(y, axis=axis, dtype=x.dtype)
        if exclusive:
            out = np.concatenate([np.full_like(np.take(out, [0], axis), identity), np.delete(out, -1, axis)], axis) \
                if out.shape[axis] else out
        return np.flip(out, axis) if reverse else out
    return ref


def _linear_scan_ref(b, a, axis, reverse):
    bs, cs = np.moveaxis(b, axis, -1).astype(np.float64), np.moveaxis(a, axis, -1).astype(np.float64)
    out = np.zeros_like(bs)
    n = bs.shape[-1]
    order = range(n - 1, -1, -1) if reverse else range(n)
    prev = np.zeros(bs.shape[:-1])
    for i in order:
        prev = bs[..., i] + cs[..., i] * prev
        out[..., i] = prev
    return np.moveaxis(out, -1, axis).astype(b.dtype)


def _clip_ref(x, lo, hi):
    return np.maximum(np.minimum(x, hi), lo)


WIDE = [-30., -6., -3.5, -2., -1.2, -0.5, -1e-8, 0., 3e-9, 0.3, 0.7, 1.9, 2.5, 4., 5.9, 6.1, 27.]
ZEROS = [[2., 0., 3., 0., 5.], [0., 1.5, -2., 1., 0.]]

ROWS = [
    # ------------------------------------------------------------- elementwise
    Row("tan", df.tan, np.tan, un("unit"), second=True),
    Row("expm1", df.expm1, np.expm1, un() + [V([A(value=[1e-10, -1e-12, 0., 5e-6])])], second=True),
    Row("erf", df.erf, via_float64(scipy.special.erf), un() + [V([A(value=WIDE)])], second=True),
    Row("softplus", df.softplus, via_float64(lambda x: np.logaddexp(0, x)),
        un() + [V([A(value=[-1000., -30., 0., 30., 1000.])])], FLOATS + (df.float16,), second=True),
    Row("elu", df.elu, via_float64(lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0)))),
        un("nonzero") + [V([A(value=[-1000., -2., 3., 1000.])])], second=True),
    Row("leaky_relu", df.leaky_relu, lambda x, alpha=0.2: np.where(x > 0, x, x * x.dtype.type(alpha)),
        un("nonzero") + [V([A((2, 3), "nonzero")], dict(alpha=0.05))], second=True),
    Row("gelu", df.gelu, _gelu_ref,
        un() + [V([A((2, 3))], dict(approximate=True)), V([A(value=[-40., -8., -1., 0., 2., 9.])]),
                V([A(value=[-8., -1., 0., 2., 9.])], dict(approximate=True))], second=True),
    Row("is_nan", df.is_nan, np.isnan, un() + [V([A(value=[1., np.nan, np.inf, -np.inf, 0.])])], FLOATS + (df.float16,),
        grad=False),
    Row("is_finite", df.is_finite, np.isfinite, un() + [V([A(value=[1., np.nan, np.inf, -np.inf, 0.])])], grad=False),
    Row("clip_by_value", df.clip_by_value, _clip_ref,
        [V([A((), "distinct"), A(value=-0.2), A(value=0.6)]), V([A((7,), "distinct"), A(value=-0.2), A(value=0.6)]),
         V([A((2, 3), "distinct"), A(value=[-0.2, -1., 0.1]), A(value=0.6)]),
         V([A((2, 3), "distinct"), A(value=[[-0.2], [-0.6]]), A(value=[[0.6], [0.2]])]),
         V([A((2, 0)), A(value=0.), A(value=1.)])], NUMERIC, second=True),
    # ------------------------------------------------------------- reductions
    Row("reduce_logsumexp", df.reduce_logsumexp, _logsumexp_ref,
        red() + [V([A(value=[[1000., 1000.], [-1000., 0.], [-1000., -1000.]])], dict(axis=1)),
                 V([A(value=[[-np.inf, -np.inf], [np.inf, 0.], [-np.inf, 2.]])], dict(axis=-1), grad=False),
                 V([A((0, 3))], dict(axis=0))], second=True),
    Row("reduce_any", df.reduce_any, lambda x, axis=None, keepdims=False: np.any(x, axis=axis, keepdims=keepdims),
        red("bool") + [V([A((0, 2), "bool")], dict(axis=0))], (b,), grad=False),
    Row("reduce_all", df.reduce_all, lambda x, axis=None, keepdims=False: np.all(x, axis=axis, keepdims=keepdims),
        red("bool") + [V([A((0, 2), "bool")], dict(axis=0))], (b,), grad=False),
    Row("norm", df.norm, _norm_ref,
        [V([A(())]), V([A((5,))]), V([A((2, 3))]), V([A((2, 3))], dict(axis=1, ord=1)),
         V([A((2, 3, 4), "distinct")], dict(axis=-1, ord=np.inf, keepdims=True)),
         V([A((2, 3))], dict(axis=0, ord=3)), V([A((3, 2), "positive")], dict(axis=1, ord=0.5)),
         V([A((3, 4))], dict(axis=(0, 1), ord="fro")), V([A((2, 3, 4), "distinct")], dict(axis=(1, 2), ord=1)),
         V([A((2, 3, 4), "distinct")], dict(axis=[-1, -3], ord=np.inf, keepdims=True)),
         V([A((2, 3))], dict(keepdims=True)), V([A((3, 0))], dict(axis=1))], second=True),
    # ------------------------------------------------------------- cumulative
    Row("cumsum", df.cumsum, _cumulative_ref(np.cumsum, 0),
        [V([A((5,))]), V([A((2, 3))], dict(axis=1)), V([A((2, 3))], dict(exclusive=True)),
         V([A((2, 3, 2))], dict(axis=-2, reverse=True)), V([A((4,))], dict(exclusive=True, reverse=True)),
         V([A((2, 0))], dict(axis=1, exclusive=True)), V([A((1,))], dict(exclusive=True))], NUMERIC, second=True),
    Row("cumprod", df.cumprod, _cumulative_ref(np.cumprod, 1),
        [V([A((5,), "nonzero")]), V([A((2, 3))], dict(axis=1)), V([A((2, 3))], dict(exclusive=True)),
         V([A((2, 3, 2))], dict(axis=-2, reverse=True)), V([A((4,))], dict(exclusive=True, reverse=True)),
         V([A(value=ZEROS[0])]), V([A(value=ZEROS[0])], dict(reverse=True)),
         V([A(value=ZEROS)], dict(axis=1, exclusive=True)),
         V([A(value=ZEROS)], dict(axis=-1, exclusive=True, reverse=True)),
         V([A(value=[[0., 0., 2.], [3., 0., 0.]])], dict(axis=1)),
         V([A((2, 0))], dict(axis=1)), V([A((1,))], dict(exclusive=True))], NUMERIC,
        also=("linear_scan",), second=True),
    Row("linear_scan", internal_op("linear_scan"), _linear_scan_ref,
        [V([A((5,)), A((5,))], dict(axis=0, reverse=False)), V([A((2, 3)), A((2, 3))], dict(axis=1, reverse=True)),
         V([A((4, 2)), A(value=[[0., 1.], [2., 0.], [-1., 3.], [0.5, 0.]])], dict(axis=0, reverse=True)),
         V([A((2, 7)), A((2, 7))], dict(axis=-1, reverse=False)),
         V([A((0, 2)), A((0, 2))], dict(axis=0, reverse=False)),
         V([A((1, 2)), A((1, 2))], dict(axis=0, reverse=True))], second=True),
    # ------------------------------------------------------------- creation
    Row("eye", df.eye, lambda num_rows, num_columns=None, dtype=f32: np.eye(num_rows, num_columns, dtype=dtype.np),
        [V([], dict(num_rows=3)), V([], dict(num_rows=2, num_columns=4, dtype=i32)), V([], dict(num_rows=0)),
         V([], dict(num_rows=3, num_columns=1, dtype=f64)), V([], dict(num_rows=2, dtype=b))], (None,), grad=False),
]

# Ops API.md marks (nd).
API_ND = {"is_nan", "is_finite", "reduce_any", "reduce_all"}
