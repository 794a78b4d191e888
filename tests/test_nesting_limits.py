"""Deeply nested control flow: 99 loops nested in each other run, reload and export to
numpy source; gradients go through at most 32 levels and ONNX holds at most 30 (documented
in docs/guide.md), deeper is a typed error naming the limit, never a RecursionError or a
protobuf error."""
import json

import numpy as np
import pytest

import defun as df
from defun.graph.gradients import MAX_NESTING
from defun.graph.onnx_export import MAX_SUBGRAPH_NESTING


def _nested(depth):
    """x * 1.01 inside `depth` while loops nested in each other (each runs once)."""
    def level(d, x):
        if d == 0:
            return x * 1.01

        def body(i, y):
            return i + 1, level(d - 1, y)
        return df.while_loop(lambda i, y: i < 1, body, [df.constant(0), x])[1]
    return lambda x: level(depth, x)


def _gradient(f, x):
    with df.GradientTape() as tape:
        tape.watch(x)
        y = df.reduce_sum(f(x))
    return tape.gradient(y, x)


def test_99_nested_loops_run_reload_and_export_to_numpy():
    x = df.constant(np.array([1.0, -2.0]))
    cf = df.defun(_nested(99)).get_concrete_function(x)
    want = np.array([1.0, -2.0]) * 1.01
    np.testing.assert_array_equal(cf(x).numpy(), want)
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    np.testing.assert_array_equal(loaded(x).numpy(), want)
    ns = {}
    exec(compile(df.export_numpy_source(cf), "<nested>", "exec"), ns)
    np.testing.assert_array_equal(ns["forward"](np.array([1.0, -2.0]))[0], want)
    # past the limits: typed errors naming them
    with pytest.raises(df.errors.UnimplementedError, match=f"at most {MAX_NESTING} levels"):
        _gradient(cf, x)
    with pytest.raises(df.errors.UnimplementedError, match=f"at most {MAX_NESTING} levels"):
        df.export_numpy_source(cf, include_backward=True)
    with pytest.raises(df.errors.UnimplementedError, match=f"at most {MAX_SUBGRAPH_NESTING} levels"):
        df.export_onnx(cf)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_gradients_through_loops_nested_to_the_limit(dtype):
    x = df.constant(np.array([1.0, -2.0], dtype))
    f = _nested(MAX_NESTING)
    eager = _gradient(f, x)
    traced = _gradient(df.defun(f), x)
    assert traced.dtype == eager.dtype == x.dtype
    np.testing.assert_array_equal(traced.numpy(), eager.numpy())
    np.testing.assert_allclose(traced.numpy(), np.full(2, 1.01, dtype), rtol=1e-3)
    with pytest.raises(df.errors.UnimplementedError, match=f"nested more than {MAX_NESTING} deep"):
        _gradient(df.defun(_nested(MAX_NESTING + 1)), x)


def test_onnx_holds_loops_nested_to_its_limit():
    onnx = pytest.importorskip("onnx")
    x = df.constant(np.array([1.0, -2.0], np.float32))
    ort = pytest.importorskip("onnxruntime")
    model = df.export_onnx(df.defun(_nested(MAX_SUBGRAPH_NESTING)).get_concrete_function(x))
    again = onnx.load_from_string(model.SerializeToString())   # parses: within protobuf's depth
    onnx.checker.check_model(again)
    got, = ort.InferenceSession(model.SerializeToString()).run(None, {again.graph.input[0].name: x.numpy()})
    np.testing.assert_allclose(got, x.numpy() * np.float32(1.01), rtol=1e-6)
    with pytest.raises(df.errors.UnimplementedError, match=f"more than {MAX_SUBGRAPH_NESTING} deep"):
        df.export_onnx(df.defun(_nested(MAX_SUBGRAPH_NESTING + 1)).get_concrete_function(x))


def test_tracing_raises_the_recursion_limit_only_while_it_runs():
    import sys
    before = sys.getrecursionlimit()
    seen = []

    def f(x):
        seen.append(sys.getrecursionlimit())
        return x * 2.0
    df.defun(f).get_concrete_function(df.constant([1.0]))
    assert seen == [max(before, 4000)] and sys.getrecursionlimit() == before

    def broken(x):
        raise ValueError("the user's own error")
    with pytest.raises(ValueError, match="the user's own error"):
        df.defun(broken)(df.constant([1.0]))
    assert sys.getrecursionlimit() == before
