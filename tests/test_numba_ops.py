"""The op table on the numba backend: every row traced with backend="numba" gives the
numpy backend's values (forward, and gradients for the differentiable rows) within float
rounding, with static sizes and with every size unknown.

Single ops form regions here (the backend's minimum is lowered to one node), so every op
with a fused form runs through the generated loops, not its numpy kernel; no region may fall
back to numpy. CI runs a representative subset: each fused op's first variant (all variants
of the reductions, whose axes and keepdims change the loops), unknown sizes for every
other of them; DEFUN_NUMBA_EXHAUSTIVE=1 runs every variant of every row both ways.
"""
import os

import numpy as np
import pytest

pytest.importorskip("numba")

import defun as df  # noqa: E402
import defun.graph.numba_backend as nb  # noqa: E402
from defun.graph.backends import get_backend  # noqa: E402
from opcheck import as_list, as_numpy, make_inputs, random_cotangents, tape_vjp  # noqa: E402
from op_table import (ROWS, documented_refusal, float_inputs, graph_dtype, graph_rows,  # noqa: E402
                      input_signature_of)
from defun.graph.functions import plan_of  # noqa: E402
from defun.graph.numba_backend.plan import fused_form  # noqa: E402
from defun.graph.passes import optimize  # noqa: E402
from defun.runtime import registry  # noqa: E402
from defun.runtime.fused import Reduction  # noqa: E402

EXHAUSTIVE = bool(os.environ.get("DEFUN_NUMBA_EXHAUSTIVE"))
f64 = df.float64


def _fused(name):
    return registry.exists(name) and registry.get(name).fused is not None


def _cases(grad):
    cases, k = [], 0
    for row in ROWS:
        if not graph_rows(row, None) or not (EXHAUSTIVE or _fused(row.op)):
            continue
        every = EXHAUSTIVE or isinstance(registry.get(row.op).fused, Reduction)
        for j, v in enumerate(row.variants):
            if (j and not every) or (grad and not (row.grad is True and v.grad and float_inputs(v))):
                continue
            for unknown in (False, True):
                if unknown and not EXHAUSTIVE and k % 2:
                    continue
                cases.append(pytest.param(row, v, unknown,
                                          id=f"{row.op}-{j}-{'unknown' if unknown else 'static'}"))
            k += 1
    return cases


@pytest.fixture(autouse=True)
def single_op_regions(monkeypatch):
    monkeypatch.setattr(get_backend("numba"), "MIN_REGION", 1)


def _tol(dtype):
    return (3e-6, 1e-6) if dtype == df.float32 else (1e-12, 1e-12)


def _compare(got, want, what, dtype):
    rtol, atol = _tol(dtype)
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = as_numpy(g), as_numpy(w)
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} output {k}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{what} output {k}")
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what} output {k}")


def _traced(row, v, xs, unknown, backend):
    return df.defun(lambda *a: row.fn(*a, **v.kw), input_signature=input_signature_of(xs, unknown), backend=backend)


@pytest.mark.parametrize("row,v,unknown", _cases(grad=False))
def test_numba_forward_equals_numpy_backend(row, v, unknown):
    dtype = graph_dtype(row, v)
    xs = make_inputs(v.args, dtype)
    ts = [df.constant(x) for x in xs]
    try:
        want = as_list(_traced(row, v, xs, unknown, "numpy")(*ts))
    except df.errors.InvalidArgumentError as e:
        if documented_refusal(row, e, unknown):
            return
        raise
    fallbacks = nb.stats["fallbacks"]
    traced = _traced(row, v, xs, unknown, "numba")
    got = as_list(traced(*ts))
    _compare(got, want, f"{row.op}{v!r}", dtype)
    assert nb.stats["fallbacks"] == fallbacks, f"{row.op}{v!r}: a region fell back to numpy"
    graph = traced.get_concrete_function(*ts).graph
    if any(fused_form(n) for n in optimize(graph).nodes):   # (a cast to its own dtype is no node)
        assert "r_0" in plan_of(graph, "numba").source, f"{row.op}{v!r}: no fused region was made"


@pytest.mark.parametrize("row,v,unknown", _cases(grad=True))
def test_numba_gradient_equals_numpy_backend(row, v, unknown):
    xs = make_inputs(v.args, f64)
    wrt = float_inputs(v)
    ws = random_cotangents(lambda *a: row.fn(*a, **v.kw), xs)

    def grads(fn):
        return tape_vjp(fn, xs, ws, wrt)
    try:
        want = grads(_traced(row, v, xs, unknown, "numpy"))
    except df.errors.InvalidArgumentError as e:
        if documented_refusal(row, e, unknown):
            return
        raise
    fallbacks = nb.stats["fallbacks"]
    got = grads(_traced(row, v, xs, unknown, "numba"))
    _compare(got, want, f"{row.op}{v!r} gradient", f64)
    assert nb.stats["fallbacks"] == fallbacks, f"{row.op}{v!r}: a region fell back to numpy"
