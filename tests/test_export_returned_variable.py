"""A function returning a variable exports that variable's value everywhere: the JSON
document (test_serialize_loaded), the numpy module and the ONNX model name it as an output
and give the value after the function ran, as the defun call does."""
import importlib.util

import numpy as np
import pytest

import defun as df


def _module(source, tmp_path):
    path = tmp_path / "exported.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("exported_returning_variable", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stepping():
    v = df.Variable(np.array([1.5, 2.0], np.float32), name="v")

    @df.defun
    def step(x):
        v.assign_add(x)
        return {"y": x * 2.0, "v": v}
    return v, step


def test_the_numpy_module_returns_the_variable_after_the_step(tmp_path):
    v, step = _stepping()
    x = np.array([0.0, 0.25], np.float32)
    cf = step.get_concrete_function(df.constant(x))
    module = _module(df.export_numpy_source(cf), tmp_path)
    assert module.OUTPUT_NAMES == ("y", "v")
    y, value = module.forward(x)
    got = step(df.constant(x))       # the defun itself, from the same start
    np.testing.assert_array_equal(y, got["y"].numpy())
    np.testing.assert_array_equal(value, [1.5, 2.25])
    np.testing.assert_array_equal(got["v"].numpy(), [1.5, 2.25])
    # the module's variable is its own copy: a second call moves it on, not the user's
    np.testing.assert_array_equal(module.forward(x)[1], [1.5, 2.5])
    np.testing.assert_array_equal(v.numpy(), [1.5, 2.25])


def test_the_numpy_module_with_backward_keeps_the_variable_output(tmp_path):
    w = df.Variable(np.array([3.0, -1.0]), name="w")

    @df.defun
    def f(x):
        return {"loss": df.reduce_sum(x * w), "w": w}
    x = np.array([0.5, 2.0])
    module = _module(df.export_numpy_source(f.get_concrete_function(df.constant(x)),
                                            include_backward=True), tmp_path)
    assert module.OUTPUT_NAMES == ("loss", "w")
    (loss, value), side = module.forward_with_side_outputs(x)
    assert loss == pytest.approx(-0.5)
    np.testing.assert_array_equal(value, [3.0, -1.0])
    (dx,) = module.backward([np.float64(1.0), None], side)
    np.testing.assert_array_equal(dx, [3.0, -1.0])


def test_the_onnx_model_names_and_returns_the_variable():
    ort = pytest.importorskip("onnxruntime")
    w = df.Variable(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), name="w")

    @df.defun
    def f(x):
        return {"y": df.matmul(x, w), "w": w}
    x = np.ones((1, 2), np.float32)
    model = df.export_onnx(f.get_concrete_function(df.constant(x)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [o.name for o in sess.get_outputs()] == ["y", "w"]
    y, value = sess.run(None, {sess.get_inputs()[0].name: x})
    np.testing.assert_array_equal(y, [[4.0, 6.0]])
    np.testing.assert_array_equal(value, w.numpy())
