"""Draw the pictures in the docs: the digits MLP's training loss, forward and backward.

    python docs/pictures.py          # rewrites docs/digits_mlp_step.svg

The model is examples/train_mlp.py's MLP (64-32-10, as the tests train it); its loss is
exported to a JSON document and loaded back, so every name in the picture comes from the
document (the same in every process). The SVG carries the SHA-256 of the DOT text it was
drawn from; tests/test_cli.py checks it against a fresh drawing, so the picture cannot
fall behind the code that draws it (Graphviz versions may lay it out differently).
"""
import hashlib
import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SVG = os.path.join(HERE, "digits_mlp_step.svg")
sys.path.insert(0, ROOT)

import defun as df  # noqa: E402
from defun.graph_function import GraphFunction  # noqa: E402
from defun.graph.printer import render_dot, to_dot  # noqa: E402


def _example():
    spec = importlib.util.spec_from_file_location("train_mlp", os.path.join(ROOT, "examples", "train_mlp.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step_dot():
    """DOT text of the digits MLP's loss and its backward (side outputs, captures marked)."""
    ex = _example()
    model = ex.MLP([64, 32, 10], seed=0)
    loss = df.defun(model.loss)
    cf = loss.get_concrete_function(df.TensorSpec([None, 64], df.float32), df.TensorSpec([None], df.int32))
    loaded = df.load_json(df.export_json(cf))
    return to_dot(loaded.graph, GraphFunction.of(loaded.graph).backward(),
                  input_names=[s.name for s in loaded.signature], output_names=loaded.output_names)


def digest(dot):
    return hashlib.sha256(dot.encode("utf-8")).hexdigest()


def recorded_digest(path=SVG):
    """The DOT digest an SVG written by this script records, or None."""
    with open(path, encoding="utf-8") as f:
        m = re.search(r"<!-- drawn from DOT sha256 ([0-9a-f]{64})\b", f.read())
    return m.group(1) if m else None


def write(path=SVG):
    dot = step_dot()
    svg = render_dot(dot, "svg").decode("utf-8")
    head, sep, rest = svg.partition("<svg")
    svg = f"{head}<!-- drawn from DOT sha256 {digest(dot)} by docs/pictures.py -->\n{sep}{rest}"
    with open(path, "w", encoding="utf-8") as f:
        f.write(svg)
    return path


if __name__ == "__main__":
    print(write())
