"""Pictures: the docs' SVG of the digits MLP's loss (forward and backward) is drawn from the
current code; concrete functions draw themselves in notebooks when Graphviz is there."""
import importlib.util
import os
import re
import struct
import sys

import numpy as np

import defun as df
from defun.graph.printer import render_dot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pictures():
    spec = importlib.util.spec_from_file_location("pictures", os.path.join(ROOT, "docs", "pictures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_picture_is_drawn_from_the_current_code():
    pictures = _pictures()
    dot = pictures.step_dot()
    assert pictures.recorded_digest() == pictures.digest(dot), \
        "docs/digits_mlp_step.svg is out of date: run python docs/pictures.py"
    # forward and backward, the side outputs and the captured variables marked
    assert "forward @loss" in dot and "backward @loss_grad" in dot
    assert dot.count("captured variable") == 4 and "side output 0" in dot
    # names everywhere: the parameters, the variables with their shapes, which gradient is which
    for label in ("x\\nf32[?,64]", "labels\\ni32[?]", "w0\\nf32[64,32]", "b1\\nf32[10]"):
        assert f'label="{label}"' in dot, label
    assert sorted(re.findall(r"→ (d/d\w+)", dot)) == ["d/db0", "d/db1", "d/dw0", "d/dw1", "d/dx"]
    assert render_dot(dot, "svg").lstrip().startswith(b"<?xml")
    with open(pictures.SVG, encoding="utf-8") as f:
        svg = f.read()
    width, height = (float(v) for v in re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())
    assert width <= 850 and height <= 1000, (width, height)    # reads at README width (~800 px)
    for doc in ("README.md", os.path.join("docs", "guide.md")):
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            assert "digits_mlp_step.svg" in f.read(), f"{doc} shows the picture"


def _cf():
    w = df.Variable(np.ones((3, 2), np.float32), name="weights")

    @df.defun
    def f(x):
        return df.tanh(x @ w)
    return f.get_concrete_function(df.TensorSpec([None, 3], df.float32))


def test_a_concrete_function_is_svg_in_a_notebook():
    svg = _cf()._repr_svg_()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert "tanh" in svg and "captured variable weights" in svg


def test_without_graphviz_a_notebook_shows_text(monkeypatch):
    cf = _cf()
    monkeypatch.setitem(sys.modules, "graphviz", None)        # the package is not installed
    assert cf._repr_svg_() is None
    monkeypatch.delitem(sys.modules, "graphviz")
    import graphviz.backend.dot_command as dot_command    # (graphviz is installed by now)
    # no `dot` program: graphviz runs the binary it names (changing PATH would set os.environ)
    monkeypatch.setattr(dot_command, "DOT_BINARY", dot_command.DOT_BINARY.with_name("no-such-dot"))
    assert cf._repr_svg_() is None


def _png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])      # the IHDR chunk: width, height


def test_a_loaded_function_draws_itself_with_its_names(tmp_path):
    w = df.Variable(np.ones((3, 2), np.float32), name="weights")

    @df.defun
    def f(x):
        h = x @ w
        return {"probs": df.tanh(h), "norm": df.reduce_sum(h * h)}
    cf = f.get_concrete_function(df.TensorSpec([None, 3], df.float32))
    loaded = df.load_json(df.export_json(cf))
    for fn in (loaded, cf):
        svg = fn._repr_svg_()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg
        assert "captured variable weights" in svg and "→ probs" in svg and "→ norm" in svg
        assert ">x</text>" in svg and ">f32[3,2]</text>" in svg       # the input's name, the variable's shape


def test_control_flow_is_drawn_in_clusters_and_rendered(tmp_path):
    from test_cli import cli
    @df.defun
    def f(x, n):
        y = df.cond(df.reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0)
        return df.while_loop(lambda i, z: i < n, lambda i, z: (i + 1, z * 0.5), [df.constant(0), y])[1]
    cf = f.get_concrete_function(df.TensorSpec([3], df.float32), df.TensorSpec([], df.int32))
    df.export_json(cf, str(tmp_path / "loop.json"))
    for ext in ("png", "svg"):
        proc = cli("dot", "loop.json", "-o", f"loop.{ext}", "--backward", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    width, height = _png_size((tmp_path / "loop.png").read_bytes())
    assert 200 < width < 4000 and 100 < height < 2000, (width, height)
    svg = (tmp_path / "loop.svg").read_text()
    titles = re.findall(r"<text[^>]*>((?:cond|while) %\d+: [^<]+)</text>", svg)
    kinds = sorted(t.split(": ")[1].split(" @")[0] for t in titles)
    # forward and backward each have their cond (two branches) and while (cond and body)
    assert kinds.count("then_branch") >= 2 and kinds.count("body") >= 2, kinds


def test_inside_cond_and_while_inputs_are_named_by_what_feeds_them(tmp_path):
    from test_cli import cli
    w = df.Variable(np.ones((3,), np.float32), name="scale")

    @df.defun
    def f(x, n):
        y = df.cond(df.reduce_sum(x) > 0, lambda: x * w, lambda: x - 1.0)
        return df.while_loop(lambda i, z: i < n, lambda i, z: (i + 1, z * w), [df.constant(0), y])[1]
    cf = f.get_concrete_function(df.TensorSpec([3], df.float32), df.TensorSpec([], df.int32))
    df.export_json(cf, str(tmp_path / "loop.json"))
    proc = cli("dot", "loop.json", "-o", "loop.dot", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    dot = (tmp_path / "loop.dot").read_text()
    nodes = re.findall(r'^\s*"([^"]+)" \[label="([^"]*)"', dot, re.M)
    # the variable, passed into the then-branch and the loop body, is drawn there by its name
    inside = [label for name, label in nodes if "/" in name and label.startswith("scale\\n")]
    assert len(inside) == 2 and all(label == "scale\\nf32[3]" for label in inside), inside
    assert not any(label.endswith("resource[]") for _, label in nodes)
    # the else-branch reads only x: its unread inputs (the variable) are left out
    assert [label for name, label in nodes if "/else_branch/" in name and "input" in label] == []
    assert any(label.startswith("x\\n") for name, label in nodes if "/else_branch/" in name)
    # each node's SVG id is its path of listing names; a legend says what the marks mean
    assert '"%4/then_branch/%' not in dot and re.search(r'id="%\d+/then_branch/%\d+"', dot)
    assert "dotted arrow ○: runs function" in dot and "dashed: variable read" in dot
    svg = render_dot(dot, "svg").decode()
    assert re.search(r'<g id="%\d+/body/%\d+" class="node">', svg)
