"""examples/train_cnn.py (a short run): the CNN learns the digits with one trace of its step,
its checkpoint restores into a fresh model exactly, and the defun step equals the eager one."""
import importlib.util
import os

import numpy as np
import pytest

pytest.importorskip("sklearn")

import defun as df  # noqa: E402

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                     "train_cnn.py")


def _load_example():
    spec = importlib.util.spec_from_file_location("train_cnn_example", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_cnn_learns_checkpoints_restores_and_plots(tmp_path):
    example = _load_example()
    out = tmp_path / "cnn.npz"
    result = example.main(epochs=2, timing_repeat=2, out=str(out), verbose=False)
    # chance is 0.1; two epochs of Adam already classify most digits (the full run: 0.98)
    assert result["test_accuracy"] > 0.9
    assert result["history"]["loss"][1] < result["history"]["loss"][0]
    # a new dropout seed per step is a tensor argument: 88 steps, one trace
    assert result["step_trace_count"] == 1
    assert result["restored_ok"]
    assert out.exists()
    with np.load(out) as saved:
        assert {"conv1", "bias1", "conv2", "bias2", "dense", "bias3"} <= set(saved.files)
    plot = tmp_path / "train_cnn.png"                    # named after the example, next to --out
    assert result["plot"] == str(plot) and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    history = result["history"]
    assert history["test"][-1] == result["test_accuracy"] and len(history["train"]) == 2


def test_cnn_defun_step_matches_the_eager_step_with_the_same_dropout_seeds():
    example = _load_example()
    x_train, y_train, _, _ = example.load_data()
    xb, yb = df.constant(x_train[:16]), df.constant(y_train[:16])
    eager_model, graph_model = example.CNN(seed=3), example.CNN(seed=3)
    eager_step = example.make_train_step(eager_model, df.optimizers.Adam(3e-3))
    graph_step = df.defun(example.make_train_step(graph_model, df.optimizers.Adam(3e-3)))
    for k in range(3):
        seed = df.constant([7, k], df.int32)
        np.testing.assert_allclose(float(graph_step(xb, yb, seed)), float(eager_step(xb, yb, seed)),
                                   rtol=1e-5)
    for a, b in zip(eager_model.variables, graph_model.variables):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-6)
    assert not np.allclose(graph_model.conv1.numpy(), example.CNN(seed=3).conv1.numpy())
    # the dropout mask depends on the seed: another seed gives another loss
    loss = example.CNN(seed=3).loss
    assert float(loss(xb, yb, df.constant([1, 2], df.int32))) != float(loss(xb, yb, df.constant([1, 3], df.int32)))
