"""df.export_numpy_source: every op row, forward and backward, run where defun cannot be
imported, gives the graph's results bit for bit; control flow, variables, errors."""
import numpy as np
import pytest

import defun as df
from graph.functions import plan_of
from isolated import run_without_defun, same_bits
from opcheck import as_numpy, make_inputs
from test_ops import ROWS, _float_inputs

f64 = df.float64


def _flat(out):
    if isinstance(out, (list, tuple)):
        return [y for x in out for y in _flat(x)]
    return [out]


def _graph_outputs(cf, xs):
    """The flat outputs of the graph's own compiled plan."""
    captured = [v._value for v in cf.graph.captured_values]
    return [np.asarray(o) for o in plan_of(cf.graph).run(*xs, *captured)]


def _tape_gradients(cf, xs, cotangents):
    """The gradients of the graph's recorded call (its backward function), per input."""
    ts = [df.constant(x) for x in xs]
    with df.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        outs = _flat(cf(*ts))
    seeds = [None if w is None else df.constant(w) for w in cotangents]
    grads = tape.gradient(outs, ts, output_gradients=seeds)
    return [None if g is None else as_numpy(g) for g in grads]


def _cases():
    out = []
    for row in ROWS:
        if row.op in ("custom_gradient",):   # a Python gradient: tested eagerly only
            continue
        for k, v in enumerate(row.variants):
            out.append(pytest.param(row, v, id=f"{row.op}-{k}"))
    return out


CASES = _cases()


def _differentiable(row, v):
    return row.grad is True and v.grad and bool(_float_inputs(v))


@pytest.fixture(scope="module")
def op_results(tmp_path_factory):
    """Every row variant exported, run in one defun-free process; (expected, got) per id."""
    modules, cases, expected = {}, [], {}
    for param in CASES:
        row, v = param.values
        key = param.id
        backward = _differentiable(row, v)
        dt = f64 if backward else row.dtypes_of(v)[0]
        xs = make_inputs(v.args, dt)
        fn = df.defun(lambda *a, row=row, v=v: row.fn(*a, **v.kw),
                      input_signature=[df.TensorSpec(np.shape(x), df.as_dtype(np.asarray(x).dtype))
                                       for x in xs])
        try:
            cf = fn.get_concrete_function(*[df.TensorSpec(np.shape(x), df.as_dtype(x.dtype)) for x in xs])
            source = df.export_numpy_source(cf, include_backward=backward)
        except Exception as e:   # reported by the row's test
            expected[key] = ("export", f"{type(e).__name__}: {e}")
            continue
        name = "m_" + "".join(c if c.isalnum() else "_" for c in key)
        modules[name] = source
        outs = _graph_outputs(cf, xs)
        entry = {"module": name, "inputs": xs, "call": "forward"}
        exp = {"outputs": outs}
        if backward:
            rng = np.random.default_rng(1)
            ws = [rng.normal(size=o.shape).astype(o.dtype) if o.dtype.kind == "f" else None for o in outs]
            entry.update(call="backward", output_gradients=ws)
            exp["gradients"] = _tape_gradients(cf, xs, ws)
        expected[key] = ("ok", exp, len(cases))
        cases.append(entry)
    got = run_without_defun(modules, cases, tmp_path_factory.mktemp("numpy_source"))
    return expected, got


@pytest.mark.parametrize("row,v", CASES)
def test_op_row_matches_graph_without_defun(row, v, op_results, request):
    expected, got = op_results
    key = request.node.callspec.id
    status, *rest = expected[key]
    assert status == "ok", f"{row.op}{v!r}: export failed: {rest[0]}"
    exp, k = rest
    result = got[k]
    assert "error" not in result, f"{row.op}{v!r}: the numpy module failed: {result['error']}"
    assert len(result["outputs"]) == len(exp["outputs"])
    for j, (a, e) in enumerate(zip(result["outputs"], exp["outputs"])):
        why = same_bits(a, e)
        assert why is None, f"{row.op}{v!r} output {j}: {why}"
    for j, (a, e) in enumerate(zip(result.get("gradients", []), exp.get("gradients", []))):
        why = same_bits(a, e)
        assert why is None, f"{row.op}{v!r} gradient of input {j}: {why}"
