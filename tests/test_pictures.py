"""Pictures: the docs' SVG of the digits MLP's loss (forward and backward) is drawn from the
current code; concrete functions draw themselves in notebooks when Graphviz is there."""
import importlib.util
import os
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
    assert render_dot(dot, "svg").lstrip().startswith(b"<?xml")
    with open(pictures.SVG, encoding="utf-8") as f:
        assert "<svg" in f.read()
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
    monkeypatch.setenv("PATH", os.path.join(ROOT, "no-such-directory"))   # no `dot` program
    assert cf._repr_svg_() is None
