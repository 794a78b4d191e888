"""The graph page (df.view, `defun view`): its data (groups, nodes, marks, profile), the file
it writes (self-contained, the vendored layout library pinned), the command. The page in a
real browser: tests/test_view_browser.py."""
import fnmatch
import hashlib
import importlib.util
import json
import os
import re
import tomllib

import numpy as np
import pytest

import defun as df
from defun.view import Page, measure_side_outputs, page_data, page_html
from test_cli import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VIEWER = os.path.join(ROOT, "defun", "viewer")
DAGRE_SHA256 = "413e0ebe0fe7bfe47140ad029d7ebf9296f6867d181e1d4a12db87b99feaaf61"    # @dagrejs/dagre 3.1.4


def page_json(text):
    """The graph data a page carries."""
    m = re.search(r'<script id="graph-data" type="application/json">(.*?)</script>', text, re.S)
    return json.loads(m.group(1))


def mlp_loss():
    spec = importlib.util.spec_from_file_location("train_mlp", os.path.join(ROOT, "examples", "train_mlp.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.MLP([64, 32, 10], seed=0)
    return df.defun(model.loss)


def rnn_loss():
    """A tanh RNN cell run by df.scan over the time steps; the loss, the mean squared state."""
    rng = np.random.default_rng(0)
    w = df.Variable(rng.normal(0, .2, (16, 32)).astype(np.float32), name="W")
    u = df.Variable(rng.normal(0, .2, (32, 32)).astype(np.float32), name="U")
    b = df.Variable(np.zeros(32, np.float32), name="b")

    @df.defun
    def loss(xs, h0):
        hs = df.scan(lambda h, x: df.tanh(x @ w + h @ u + b), xs, initializer=h0)
        return df.reduce_mean(df.square(hs))
    return loss.get_concrete_function(df.TensorSpec([None, None, 16], df.float32),
                                      df.TensorSpec([None, 32], df.float32))


def mlp_inputs(n=20):
    rng = np.random.default_rng(1)
    return rng.random((n, 64), np.float32), (np.arange(n) % 10).astype(np.int32)


def test_the_vendored_layout_library_is_the_pinned_one_with_its_licence():
    with open(os.path.join(VIEWER, "dagre.min.js"), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == DAGRE_SHA256
    with open(os.path.join(VIEWER, "dagre.LICENSE"), encoding="utf-8") as f:
        assert "Permission is hereby granted" in f.read()
    with open(os.path.join(VIEWER, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert "@dagrejs/dagre` **3.1.4**" in readme and DAGRE_SHA256 in readme and "npm pack" in readme
    # every file of the folder is package data (the page is built from them when installed)
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        patterns = tomllib.load(f)["tool"]["setuptools"]["package-data"]["defun"]
    for name in os.listdir(VIEWER):
        assert any(fnmatch.fnmatch(f"viewer/{name}", p) for p in patterns), name


def test_the_page_is_one_file_needing_no_network(tmp_path):
    page = df.view(rnn_loss(), path=tmp_path / "rnn.html", browser=False)
    assert isinstance(page, Page) and os.fspath(page) == str(tmp_path / "rnn.html")
    text = (tmp_path / "rnn.html").read_text(encoding="utf-8")
    assert text == page.html and text.startswith("<!DOCTYPE html>")
    assert "<script src" not in text and "<link" not in text and "@import" not in text
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", text))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls      # a namespace name, never fetched
    assert "sourceMappingURL" not in text
    assert text.count("</script>") == 3                      # data, dagre, the page: nothing ends early
    # in a notebook the page shows itself in an iframe of its own
    assert page._repr_html_().startswith('<iframe srcdoc="&lt;!DOCTYPE html&gt;')


def test_the_mlp_page_marks_side_outputs_their_readers_and_gradients():
    loss = mlp_loss()
    x, y = mlp_inputs()
    cf = loss.get_concrete_function(df.TensorSpec([None, 64], df.float32), df.TensorSpec([None], df.int32))
    data = page_json(page_html(cf))
    nodes = {n["id"]: n for n in data["nodes"]}
    assert [g["id"] for g in data["groups"]] == ["forward", "backward"]
    assert all(g["open"] for g in data["groups"])
    # every node of both graphs, inputs by name, variables with their value's type
    bw = cf._fn.backward()
    assert {n["name"] for n in data["nodes"] if n["g"] == "forward"} == {f"%{k}" for k in range(len(cf.graph.nodes))}
    titles = {n["title"]: n for n in data["nodes"] if n["g"] == "forward" and n["kind"] != "op"}
    assert titles["x"]["type"] == "f32[?,64]" and titles["labels"]["type"] == "i32[?]"
    assert titles["w0"]["kind"] == "var" and titles["w0"]["type"] == "f32[64,32]"
    # side outputs: marked in the forward, their readers in the backward, the same count
    side = sorted(k for n in data["nodes"] for k in n["side"])
    reads = sorted(k for n in data["nodes"] for k in n["reads"])
    assert side == reads == list(range(len(bw.side_outputs)))
    assert all(nodes[i]["g"] == "forward" for i in nodes if nodes[i]["side"])
    assert all(nodes[i]["g"] == "backward" for i in nodes if nodes[i]["reads"])
    # a side output's note says its size when it is known (w0's value: 64 * 32 float32)
    read_w0 = [n for n in data["nodes"] if n["op"] == "read_variable" and n["type"] == "f32[64,32]"][0]
    assert any(t.startswith("side output") and t.endswith("· 8.0 KB") for t in read_w0["notes"])
    grads = sorted(t[2:] for n in data["nodes"] for t in n["notes"] if t.startswith("→ d/d"))
    assert grads == ["d/db0", "d/db1", "d/dw0", "d/dw1", "d/dx"]
    # a node's details: IR line, attributes, the user's line and its source
    mm = [n for n in data["nodes"] if n["g"] == "forward" and n["op"] == "matmul"][0]
    assert mm["ir"].startswith(mm["name"] + ": f32[?,32] = matmul(")
    assert mm["site"] == "train_mlp.py:69" and "h @ w + b" in mm["src"]
    assert ["shape", "(64, 32)"] in read_w0["attrs"] and ["dtype", "float32"] in read_w0["attrs"]
    assert mm["outputs"] == [{"shape": "[?,32]", "dtype": "float32"}]
    # every edge joins drawn nodes
    assert all(e["s"] in nodes and e["t"] in nodes for e in data["edges"])


def test_a_profile_and_actual_side_output_bytes_are_laid_over_the_nodes():
    loss = mlp_loss()
    x, y = mlp_inputs(20)
    rows = df.profile(loss, x, y, repeat=3)
    cf = loss.get_concrete_function(x, y)
    saved = cf.side_outputs()
    data = page_json(page_html(cf, profile=rows, side_outputs=saved))
    timed = {n["graph_name"]: n["prof"] for n in data["nodes"] if n.get("prof")}
    assert set(timed) == {r.node for r in rows}           # every step of this plan is a node here
    for r in rows:
        assert timed[r.node]["share"] == pytest.approx(r.seconds / rows.total_seconds)
        assert f"{100 * r.share:.1f}%" in timed[r.node]["text"] and f"{r.calls} calls" in timed[r.node]["detail"]
    assert f"{len(rows)} of {len(rows)} steps on this graph" in data["summary"]
    # the actual sizes: the logits' softmax saved for 20 rows of 10 float32
    assert sorted(b for n in data["nodes"] for b in n["saved_bytes"]) == sorted(r.bytes for r in saved)
    softmax = [n for n in data["nodes"] if n["op"] == "sparse_softmax_cross_entropy_with_logits"][0]
    assert 20 * 10 * 4 in softmax["saved_bytes"] and "side output 0 · 800 B" in softmax["notes"]


def test_loop_bodies_are_closed_groups_their_inputs_named():
    data = page_json(page_html(rnn_loss()))
    groups = {g["id"]: g for g in data["groups"]}
    nodes = {n["id"]: n for n in data["nodes"]}
    scan = [n for n in data["nodes"] if n["g"] == "forward" and n["op"] == "scan"][0]
    group = groups[scan["opens"]]
    assert group["owner"] == scan["id"] and not group["open"] and group["kind"] == "loop"
    body = [g for g in data["groups"] if g["parent"] == group["id"]]
    assert [g["label"] for g in body] == ["body @scan_body"] and body[0]["open"]
    inside = {n["title"]: n for n in data["nodes"] if n["g"] == body[0]["id"]}
    # the carried state, a row of the sliced input, the variables by name with their types
    assert inside["carry: h0"]["type"] == "f32[?,32]" and inside["row of xs"]["type"] == "f32[?,16]"
    assert inside["W"]["kind"] == "var" and inside["W"]["type"] == "f32[16,32]"
    assert not any(n["title"].startswith("input ") for n in inside.values())
    # the scan node runs the body: `runs` edges to the nodes it starts from (the layout hangs it below)
    starts = {e["t"] for e in data["edges"] if e["kind"] == "runs" and e["s"] == scan["id"]}
    assert {n["title"] for n in inside.values() if n["id"] in starts} == {"carry: h0", "row of xs", "W", "U", "b"}
    # the backward's scan has its own body group
    assert any(g["parent"] == "backward" and g["kind"] == "loop" for g in data["groups"])


def test_view_picks_the_trace_and_refuses_what_it_cannot_show(tmp_path):
    loss = mlp_loss()
    x, y = mlp_inputs()
    with pytest.raises(TypeError, match="0 traces: give example arguments"):
        df.view(loss, path=tmp_path / "a.html", browser=False)
    page = df.view(loss, x, y, path=tmp_path / "a.html", browser=False)
    assert "f32[20,64]" in page.html
    page = df.view(loss, path=tmp_path / "b.html", browser=False)        # its only trace
    assert page_json(page.html)["title"] == "loss"
    with pytest.raises(ValueError, match="give its arguments"):
        df.view(loss, path=tmp_path / "c.html", browser=False, profile=True)
    with pytest.raises(TypeError, match="expects a df.defun"):
        df.view(lambda v: v, browser=False)
    with pytest.raises(TypeError, match="profile must be"):
        df.view(loss, x, y, profile="yes", browser=False)


def test_the_view_command_writes_the_page_of_a_document(tmp_path):
    loss = mlp_loss()
    cf = loss.get_concrete_function(df.TensorSpec([None, 64], df.float32), df.TensorSpec([None], df.int32))
    df.export_json(cf, str(tmp_path / "digits.json"))
    proc = cli("view", "digits.json", "--no-open", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("wrote digits.html (")
    data = page_json((tmp_path / "digits.html").read_text(encoding="utf-8"))
    assert {g["id"] for g in data["groups"]} == {"forward", "backward"}
    assert {"x", "labels", "w0", "b1"} <= {n["title"] for n in data["nodes"]}
    proc = cli("view", "digits.json", "--no-open", "--no-backward", "--profile", "--size", "5",
               "-o", "f.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = page_json((tmp_path / "f.html").read_text(encoding="utf-8"))
    assert [g["id"] for g in data["groups"]] == ["forward"] and "profile:" in data["summary"]
    assert any(n.get("prof") for n in data["nodes"]) and "f32[?,64]" in (tmp_path / "f.html").read_text()
    proc = cli("view", "digits.json", "-o", "page.svg", "--no-open", cwd=tmp_path)
    assert proc.returncode == 2 and "name it .html" in proc.stderr


def test_page_data_of_a_graph_without_backward_has_one_group():
    @df.defun
    def f(x):
        return df.cond(df.reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0)
    cf = f.get_concrete_function(df.TensorSpec([3], df.float32))
    data = page_data(cf.graph, input_names=["x"])
    assert [g["id"] for g in data["groups"] if g["parent"] is None] == ["forward"]
    branches = sorted(g["label"] for g in data["groups"] if g["kind"] == "branch")
    assert [b.split(" @")[0] for b in branches] == ["else_branch", "then_branch"]


def test_view_opens_the_written_page_in_the_browser(tmp_path, monkeypatch):
    import webbrowser
    opened = []
    monkeypatch.setattr(webbrowser, "open", opened.append)
    page = df.view(rnn_loss(), path=tmp_path / "rnn.html")
    assert opened == ["file://" + str(tmp_path / "rnn.html")] and page.path == str(tmp_path / "rnn.html")
    df.view(rnn_loss(), path=tmp_path / "quiet.html", browser=False)
    assert len(opened) == 1


def test_a_called_defun_is_a_closed_group_of_its_call_node():
    @df.defun
    def inner(a, b):
        return df.tanh(a * b)

    @df.defun
    def outer(x):
        return inner(x, x + 1.0) * 2.0
    cf = outer.get_concrete_function(df.TensorSpec([3], df.float32))
    data = page_json(page_html(cf, backward=False))
    (call,) = [n for n in data["nodes"] if n["op"] == "call"]
    assert call["title"] == "call @inner" and call["opens"] == call["id"] + "/"
    (group,) = [g for g in data["groups"] if g["id"] == call["opens"]]
    assert group["kind"] == "call" and group["owner"] == call["id"] and not group["open"]
    (body,) = [g for g in data["groups"] if g["parent"] == group["id"]]
    inside = {n["title"]: n for n in data["nodes"] if n["g"] == body["id"]}
    # the callee's parameters named by what feeds them: x, and the unnamed x + 1.0
    assert "x" in inside and any(t.startswith("input 1 ← %") for t in inside)
    assert inside["tanh"]["notes"] == ["→ out 0"] and inside["tanh"]["site"].startswith("test_view.py:")


def test_measured_side_output_bytes_of_a_document(tmp_path):
    loss = mlp_loss()
    cf = loss.get_concrete_function(df.TensorSpec([None, 64], df.float32), df.TensorSpec([None], df.int32))
    df.export_json(cf, str(tmp_path / "digits.json"))
    proc = cli("view", "digits.json", "--no-open", "--profile", "--size", "7", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = page_json((tmp_path / "digits.html").read_text(encoding="utf-8"))
    softmax = [n for n in data["nodes"] if n["op"] == "sparse_softmax_cross_entropy_with_logits"][0]
    assert sorted(softmax["saved_bytes"]) == [7 * 4, 7 * 10 * 4]     # per-example losses, softmax: 7 rows
    assert all(b is not None for n in data["nodes"] for b in n["saved_bytes"])
    # from Python: measured by one call on the arguments
    loaded = df.load_json(str(tmp_path / "digits.json"))
    x, y = mlp_inputs(5)
    data = page_json(df.view(loaded, path=tmp_path / "l.html", browser=False,
                             side_outputs=measure_side_outputs(loaded, x, y)).html)
    softmax = [n for n in data["nodes"] if n["op"] == "sparse_softmax_cross_entropy_with_logits"][0]
    assert sorted(softmax["saved_bytes"]) == [5 * 4, 5 * 10 * 4]
    page = df.view(loss, x, y, path=tmp_path / "m.html", browser=False, side_outputs=True)
    softmax = [n for n in page_json(page.html)["nodes"] if n["op"] == "sparse_softmax_cross_entropy_with_logits"][0]
    # the call runs the trace of unknown batch size made above (it serves every size), which
    # keeps the per-example losses too; each measured on the 5 rows
    assert sorted(softmax["saved_bytes"]) == [5 * 4, 5 * 10 * 4]
