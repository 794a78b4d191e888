"""README's first example runs as printed, and its promise holds: the Python `if` on a tensor
is one cond node of the traced graph (AutoGraph), and the exported function reloads."""
import pathlib
import re
import runpy

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _first_python_block():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.search(r"^```python\n(.*?)^```", text, re.S | re.M).group(1)


def test_the_first_example_runs_and_its_if_is_one_cond_node(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)          # it writes loss.json where it runs
    script = tmp_path / "readme_example.py"      # as a user runs it: from a file (AutoGraph reads it)
    script.write_text(_first_python_block(), encoding="utf-8")
    scope = runpy.run_path(str(script))
    printed = capsys.readouterr().out
    assert "cond" in printed and "Tensor" in printed
    df, loss, x, y = scope["df"], scope["loss"], scope["x"], scope["y"]
    graph = loss.get_concrete_function(x, y).graph
    ops = [n.op.name for n in graph.nodes]
    assert ops.count("cond") == 1, ops
    assert (tmp_path / "loss.json").exists()
    err = x.numpy() @ scope["w"].numpy() - y.numpy()
    want = np.mean(np.abs(err)) if np.max(np.abs(err)) > 1.0 else np.mean(err ** 2)
    np.testing.assert_allclose(loss(x, y).numpy(), want, rtol=1e-6)
    big = df.constant([[10., 2.]])
    err = big.numpy() @ scope["w"].numpy() - y.numpy()
    np.testing.assert_allclose(loss(big, y).numpy(), np.mean(np.abs(err)), rtol=1e-6)
    np.testing.assert_allclose(df.load_json(tmp_path / "loss.json")(big.numpy(), y.numpy()),
                               np.mean(np.abs(err)), rtol=1e-6)
