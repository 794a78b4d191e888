"""ONNX export against eager, for every row of the op table whose op has an ONNX form:
trace the row's call with df.defun (static sizes, and every size unknown), export it with
df.export_onnx (which runs onnx.checker's full check), run the model in onnxruntime and
compare with the eager result (float tolerance per dtype; integers and bools exactly).
Every dtype of a row is exported with static sizes; the row's first dtype with None sizes."""
import numpy as np
import pytest

import defun as df
from defun.runtime import registry
from opcheck import as_numpy, make_inputs
from op_table import ROWS, documented_refusal, graph_dtype, input_signature_of

ort = pytest.importorskip("onnxruntime")

# (rtol, atol) per float dtype: onnxruntime's kernels round differently from numpy's
TOL = {np.dtype(np.float16): (1e-2, 1e-2), np.dtype(np.float32): (1e-4, 1e-5),
       np.dtype(np.float64): (1e-9, 1e-10)}


# ops whose integer forms need a newer opset than the default 17 (ONNX BitwiseAnd/Or/Xor: 18)
OPSET = {"bitwise_and": 18, "bitwise_or": 18, "bitwise_xor": 18}


def has_form(name):
    return registry.get(name).onnx is not None


def run_onnx(model, xs):
    """The model's outputs on numpy inputs `xs` (in the order of its graph inputs)."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: np.asarray(x) for i, x in zip(sess.get_inputs(), xs)})


def assert_close(actual, expected, what):
    expected = [as_numpy(e) for e in (expected if isinstance(expected, (list, tuple)) else [expected])]
    assert len(actual) == len(expected), f"{what}: {len(actual)} outputs, expected {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a)
        assert a.shape == e.shape, f"{what}[{k}]: shape {a.shape}, expected {e.shape}"
        assert a.dtype == e.dtype, f"{what}[{k}]: dtype {a.dtype}, expected {e.dtype}"
        if e.dtype.kind == "f":
            rtol, atol = TOL[e.dtype]
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"{what}[{k}]")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"{what}[{k}]")


def _cases():
    """One case per row variant; each runs its dtypes with static sizes, then unknown sizes
    (one pytest item, not one per configuration: the CI run's time)."""
    out = []
    for row in ROWS:
        if not has_form(row.op):
            continue
        for k, v in enumerate(row.variants):
            out.append(pytest.param(row, v, id=f"{row.op}-{k}"))
    return out


@pytest.mark.parametrize("row,v", _cases())
def test_onnx_matches_eager(row, v):
    first = graph_dtype(row, v)
    for dt in dict.fromkeys([first] + list(row.dtypes_of(v))):
        _onnx_matches_eager(row, v, dt, False)
    _onnx_matches_eager(row, v, first, True)


def _onnx_matches_eager(row, v, dt, unknown):
    xs = make_inputs(v.args, dt)
    eager = row.fn(*[df.constant(x) for x in xs], **v.kw)
    traced = df.defun(lambda *a: row.fn(*a, **v.kw), input_signature=input_signature_of(xs, unknown))
    try:
        cf = traced.get_concrete_function()
    except df.errors.InvalidArgumentError as e:
        if documented_refusal(row, e, unknown):
            return  # tracing refuses (tests/test_ops_graph.py checks the message)
        raise
    sizes = "unknown sizes" if unknown else getattr(dt, "name", dt)
    assert_close(run_onnx(df.export_onnx(cf, opset=OPSET.get(row.op, 17)), xs), eager, f"{row.op}{v!r} ({sizes}) onnx vs eager")
