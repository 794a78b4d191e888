"""Every differentiable row of the op table, differentiated in float16, float32 and float64:
eagerly, through a defun's backward function, and loaded from export_json(include_backward=True).
Each gradient has its input's dtype and shape, and no rule raises: a rule that multiplies by
a strongly typed constant (a numpy float64 scalar or array) fails here in float16/float32.

Folded to keep it fast: per row and dtype, one trace runs every differentiable variant of
the row that has its own keyword arguments (variants differing only in shapes are the same
rule), one document is exported and loaded. The three ways of differentiating run the same
kernels, so they must also agree in value, to the dtype's rounding. float64 runs eagerly
here: tests/test_ops_graph.py differentiates every variant in float64 through a defun and
from an exported document with its backward already."""
import json

import numpy as np
import pytest

import defun as df
from defun.runtime import registry
from opcheck import as_list, as_numpy, make_inputs
from op_table import EXCLUDED, ROWS, float_inputs

f16, f32, f64 = df.float16, df.float32, df.float64
DTYPES = (f16, f32, f64)
# eager, traced and loaded gradients run the same kernels, the graph's optimizer may
# regroup a sum: agreement to a few roundings of the dtype
_AGREE = {f16: (2e-2, 2e-2), f32: (1e-4, 1e-5), f64: (1e-10, 1e-12)}


def _differentiable(row):
    return row.grad is True and any(v.grad and float_inputs(v) for v in row.variants)


def _folded_variants(row):
    """One differentiable variant per distinct set of keyword arguments (the last one)."""
    by_kw = {}
    for v in row.variants:
        if v.grad and float_inputs(v):
            by_kw[repr(sorted(v.kw.items()))] = v
    return list(by_kw.values())


SWEPT = [r for r in ROWS if _differentiable(r) and r.op != "custom_gradient"]   # its Python gradient


def _flat_float_outputs(out):
    flat = []
    for o in as_list(out):
        flat.extend(_flat_float_outputs(o) if isinstance(o, (list, tuple)) else [o])
    return [o for o in flat if df.convert_to_tensor(o).dtype.is_floating]


def _accepts(row, v, xs):
    """Whether the op's forward takes inputs of this dtype; a refusal must be a typed error
    naming the dtype (float16 is outside some ops' kinds)."""
    try:
        row.fn(*[df.constant(x) for x in xs], **v.kw)
    except (df.errors.InvalidArgumentError, df.errors.UnimplementedError, TypeError) as e:
        assert "float16" in str(e), f"{row.op}{v!r}: the forward refused float16 without naming it: {e}"
        return False
    return True


def _gradients(fn, xs, wrt):
    ts = [df.constant(x) for x in xs]
    with df.GradientTape() as tape:
        for i in wrt:
            tape.watch(ts[i])
        outs = _flat_float_outputs(fn(*ts))
    return tape.gradient(outs, [ts[i] for i in wrt])


# outputs that do not depend on the input's values: the tape gives None, as TF's
_NO_GRADIENT = {"zeros_like", "ones_like"}


def _check(grads, xs, wrt, what):
    """The gradients as arrays (None where an input does not reach a float output: cast to
    an integer, say); at least one is a gradient."""
    assert any(g is not None for g in grads) or what.split()[0] in _NO_GRADIENT, f"{what}: no gradient at all"
    got = []
    for g, i in zip(grads, wrt):
        if g is None:
            got.append(None)
            continue
        assert g.dtype is df.as_dtype(xs[i].dtype), \
            f"{what}: the gradient of input {i} is {g.dtype.name}, the input {xs[i].dtype}"
        arr = as_numpy(g)
        assert arr.shape == xs[i].shape, f"{what}: gradient {i} has shape {arr.shape}, input {xs[i].shape}"
        got.append(arr)
    return got


def test_every_differentiable_registered_op_is_swept():
    """The registry's differentiable ops all have a swept row (or a reasoned exclusion)."""
    swept = {r.op for r in SWEPT} | {"custom_gradient"}
    missing = sorted(op.name for op in registry.all_ops()
                     if op.grad is not None and op.name not in swept and op.name not in EXCLUDED)
    # rows whose gradient is tested as another op's helper say grad="skip" (note given)
    skipped = {r.op for r in ROWS if r.grad == "skip"}
    assert sorted(set(missing) - skipped) == [], f"differentiable ops outside the dtype sweep: {missing}"


@pytest.mark.parametrize("row", [pytest.param(r, id=r.op) for r in SWEPT])
def test_gradient_has_the_input_dtype_eager_traced_and_loaded(row):
    for dt in DTYPES:
        cases = []
        for v in _folded_variants(row):
            xs = make_inputs(v.args, dt)
            if dt is not f16 or _accepts(row, v, xs):
                cases.append((v, xs))
        if not cases:
            continue
        flat = [x for _, xs in cases for x in xs]
        offsets = np.cumsum([0] + [len(xs) for _, xs in cases])
        wrt = [int(offsets[k]) + i for k, (v, _) in enumerate(cases) for i in float_inputs(v)]

        def all_variants(*ts):
            outs = []
            for k, (v, _) in enumerate(cases):
                outs.extend(_flat_float_outputs(row.fn(*ts[offsets[k]:offsets[k + 1]], **v.kw)))
            return outs

        what = f"{row.op} in {dt.name}"
        eager = _check(_gradients(all_variants, flat, wrt), flat, wrt, f"{what}, eager")
        if dt is f64:       # traced and loaded float64 gradients: every variant in test_ops_graph.py
            continue
        traced_fn = df.defun(all_variants, input_signature=[df.TensorSpec(np.shape(x), df.as_dtype(x.dtype))
                                                             for x in flat])
        traced = _check(_gradients(traced_fn, flat, wrt), flat, wrt, f"{what}, through a defun")
        cf = traced_fn.get_concrete_function()
        doc = json.loads(json.dumps(df.export_json(cf, include_backward=True)))
        loaded = _check(_gradients(df.load_json(doc), flat, wrt), flat, wrt,
                        f"{what}, export_json(include_backward=True) -> load_json")
        rtol, atol = _AGREE[dt]
        for i, e, t, lo in zip(wrt, eager, traced, loaded):
            assert (t is None) == (e is None) == (lo is None), f"{what}: input {i} has a gradient only in some"
            if e is None:
                continue
            scale = max(1.0, float(np.max(np.abs(e.astype(np.float64)), initial=0.0)))
            for got, how in ((t, "traced"), (lo, "loaded")):
                np.testing.assert_allclose(got.astype(np.float64), e.astype(np.float64), rtol=rtol,
                                           atol=atol * scale, err_msg=f"{what}: {how} vs eager, input {i}")
