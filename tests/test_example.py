"""The README's main example trains, compiles one step, exports and reloads correctly."""
import importlib.util
import os

import pytest

pytest.importorskip("sklearn")

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                     "train_mlp.py")


def _load_example():
    spec = importlib.util.spec_from_file_location("train_mlp_example", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_mlp_learns_and_round_trips(tmp_path):
    example = _load_example()
    out = tmp_path / "mlp.json"
    result = example.main(epochs=3, timing_repeat=3, out=str(out), verbose=False)
    # Chance is 0.1; three epochs of SGD already classify most digits.
    assert result["test_accuracy"] > 0.85
    # One signature (full batches only), so the step is traced exactly once.
    assert result["step_trace_count"] == 1
    assert out.exists() and out.stat().st_size > 0
    assert result["round_trip_ok"], f"reloaded graph differs by {result['max_diff']}"
    assert result["max_diff"] < 1e-5
    # next to the JSON: the test set (inputs for `defun run`) and the loss/accuracy plot
    import numpy as np
    x, y = np.load(tmp_path / "mlp_x.npy"), np.load(tmp_path / "mlp_y.npy")
    assert x.shape == (len(y), 64) and x.dtype == np.float32 and y.dtype == np.int32
    assert result["plot"] == str(tmp_path / "train_mlp.png")
    assert (tmp_path / "train_mlp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    history = result["history"]
    assert [len(v) for v in history.values()] == [3, 3, 3]
    assert history["loss"][-1] < history["loss"][0] and history["test"][-1] == result["test_accuracy"]
    # the exported model is the one whose accuracy was printed (the timed steps are undone)
    assert result["exported_accuracy"] == result["test_accuracy"]
    reloaded = __import__("defun").load_json(str(out))
    assert float(np.mean(np.argmax(reloaded(x)["logits"].numpy(), 1) == y)) == result["test_accuracy"]
    assert reloaded.output_names == ["logits", "probs"]


@pytest.mark.parametrize("script, flag, bad", [
    ("train_mlp.py", "--out", "m.txt"),
    ("train_cnn.py", "--out", "no/such/dir/c.npz"), ("gaussian_process.py", "--out", "gp.json"),
    ("train_dask.py", "--plot", "no/such/dir/d.png"), ("per_example_gradients.py", "--out", "peg.json"),
])
def test_every_example_checks_its_output_path_before_it_trains(script, flag, bad, tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, os.path.join(os.path.dirname(_PATH), script), flag, bad],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith(f"error: {flag} {bad}: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout == "" and os.listdir(tmp_path) == []      # nothing trained, nothing written


def test_defun_step_matches_eager_step():
    example = _load_example()
    import numpy as np
    import defun as df

    x_train, y_train, _, _ = example.load_data()
    xb, yb = df.constant(x_train[:16]), df.constant(y_train[:16])
    eager_model, graph_model = example.MLP([64, 16, 10], seed=1), example.MLP([64, 16, 10], seed=1)
    eager_step = example.make_train_step(eager_model, 0.5)
    graph_step = df.defun(example.make_train_step(graph_model, 0.5))
    for _ in range(3):
        eager_loss, graph_loss = float(eager_step(xb, yb)), float(graph_step(xb, yb))
        np.testing.assert_allclose(graph_loss, eager_loss, rtol=1e-5)
    for a, b in zip(eager_model.variables, graph_model.variables):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6)
    # The updates happened (the variables moved away from their initial values).
    fresh = example.MLP([64, 16, 10], seed=1)
    assert not np.allclose(graph_model.weights[0].numpy(), fresh.weights[0].numpy())


def test_progress_bar_only_on_a_terminal_and_not_when_quiet(monkeypatch):
    import io
    import sys
    sys.path.insert(0, os.path.dirname(_PATH))
    from reporting import progress, say

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, quiet, shown in ((Terminal(), False, True), (Terminal(), True, False),
                                 (io.StringIO(), False, False)):
        monkeypatch.setattr(sys, "stderr", stream)
        assert list(progress(range(3), desc="steps", quiet=quiet)) == [0, 1, 2]
        assert ("steps" in stream.getvalue()) is shown, (quiet, stream.getvalue())
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    say("epoch 1", quiet=True)
    say("epoch 2")
    assert out.getvalue() == "epoch 2\n"


def test_plot_history_writes_a_png(tmp_path):
    import sys
    sys.path.insert(0, os.path.dirname(_PATH))
    from reporting import plot_history

    path = plot_history(str(tmp_path / "h.png"), {"loss": [1.0, 0.5, 0.3]}, {"test": [0.5, 0.8, 0.9]}, "t")
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
