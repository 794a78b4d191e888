"""Eager versus graph, for every row of the op table: `df.defun` of the row's call gives
the eager values and the eager gradients, with static shapes and with every size unknown
(an input_signature of None sizes, so gradient rules take their dynamic paths)."""
import numpy as np
import pytest

import defun as df
from opcheck import as_numpy, assert_same, make_inputs, random_cotangents, as_list
from test_ops import ROWS, _float_inputs

f64 = df.float64


def _variants(predicate):
    return [pytest.param(row, v, id=f"{row.op}-{k}") for row in ROWS for k, v in enumerate(row.variants)
            if predicate(row, v)]


def _graph_rows(row, v):
    return row.op not in ("custom_gradient",)  # its Python gradient is tested eagerly


def _dtype(row, v):
    return f64 if row.grad is True and v.grad and _float_inputs(v) else row.dtypes_of(v)[0]


def _exact(actual, expected, what):
    """Same shapes, dtypes and values (graph kernels are the eager kernels)."""
    assert_same(actual, [as_numpy(e) for e in expected] if isinstance(expected, (list, tuple))
                else as_numpy(expected), what, tol=(1e-12, 1e-12))


def _signature(xs, unknown):
    return [df.TensorSpec([None] * np.ndim(x) if unknown else np.shape(x), df.as_dtype(np.asarray(x).dtype))
            for x in xs]


def _refuses_unknown(exc):
    return isinstance(exc, df.errors.InvalidArgumentError) and "unknown" in str(exc)


@pytest.mark.parametrize("unknown", [False, True], ids=["static", "unknown_sizes"])
@pytest.mark.parametrize("row,v", _variants(_graph_rows))
def test_graph_matches_eager(row, v, unknown):
    xs = make_inputs(v.args, _dtype(row, v))
    ts = [df.constant(x) for x in xs]
    eager = row.fn(*ts, **v.kw)
    traced = df.defun(lambda *a: row.fn(*a, **v.kw), input_signature=_signature(xs, unknown))
    try:
        graph = traced(*ts)
    except df.errors.InvalidArgumentError as e:
        if unknown and _refuses_unknown(e):
            pytest.skip(f"refuses unknown sizes: {e}")
        raise
    _exact(graph, eager, f"{row.op}{v!r} graph vs eager")


@pytest.mark.parametrize("unknown", [False, True], ids=["static", "unknown_sizes"])
@pytest.mark.parametrize("row,v", _variants(lambda r, v: _graph_rows(r, v) and r.grad is True and v.grad
                                            and _float_inputs(v)))
def test_graph_gradient_matches_eager(row, v, unknown):
    xs = make_inputs(v.args, f64)
    wrt = _float_inputs(v)
    ws = random_cotangents(lambda *a: row.fn(*a, **v.kw), xs)

    def grads(fn):
        ts = [df.constant(x) for x in xs]
        with df.GradientTape() as tape:
            for i in wrt:
                tape.watch(ts[i])
            out = as_list(fn(*ts))
        gs = tape.gradient(out, [ts[i] for i in wrt], output_gradients=[df.constant(w) for w in ws])
        return [np.zeros_like(xs[i]) if g is None else as_numpy(g) for g, i in zip(gs, wrt)]

    eager = grads(lambda *a: row.fn(*a, **v.kw))
    traced = df.defun(lambda *a: row.fn(*a, **v.kw), input_signature=_signature(xs, unknown))
    try:
        graph = grads(traced)
    except df.errors.InvalidArgumentError as e:
        if unknown and _refuses_unknown(e):
            pytest.skip(f"refuses unknown sizes: {e}")
        raise
    for k, (g, e) in enumerate(zip(graph, eager)):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12, err_msg=f"{row.op}{v!r} input {wrt[k]}")
