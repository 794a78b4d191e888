"""Format version 3: each node may carry its source site `[base name, line]`, so a loaded
document's pictures, page and profile name the user's line as a traced function's do; older
versions still load; a hostile site is refused before anything is built."""
import copy
import json
import os

import numpy as np
import pytest

import defun as df
from defun.graph.serialize import dumps_document
from defun.runtime import sites
from defun.runtime.errors import GraphFormatError
from serialize_helpers import as_version_1, as_version_2
from test_cli import cli
from test_view import page_json

HERE = os.path.basename(__file__)


def _model():
    w = df.Variable(np.array([[1.0], [2.0]], np.float32), name="w")

    @df.defun
    def model(x):
        h = df.tanh(x @ w)
        return df.reduce_sum(h * h, axis=0)
    cf = model.get_concrete_function(df.TensorSpec([None, 2], df.float32))
    lines = {n.op.name: n.site[1] for n in cf.graph.nodes if n.site}
    return model, cf, lines


def _doc(**kw):
    _, cf, lines = _model()
    return json.loads(json.dumps(df.export_json(cf, **kw))), lines


def test_export_writes_base_name_and_line_and_a_round_trip_keeps_them():
    doc, lines = _doc()
    assert doc["version"] == 3
    nodes = doc["functions"][0]["nodes"]
    by_op = {n["op"]: n["site"] for n in nodes if "site" in n}
    assert by_op["tanh"] == [HERE, lines["tanh"]] and by_op["reduce_sum"] == [HERE, lines["reduce_sum"]]
    assert by_op["tanh"][1] + 1 == by_op["reduce_sum"][1]
    assert {n["site"][0] for n in nodes if "site" in n} == {HERE}     # no directory, ever
    loaded = df.load_json(doc)
    got = {n.op.name: n.site for n in loaded.graph.nodes if n.site}
    assert got["tanh"] == (HERE, lines["tanh"]) and isinstance(got["tanh"], sites.DocumentSite)
    assert dumps_document(loaded.to_document()) == dumps_document(doc)     # the same bytes back
    x = np.array([[1.0, -1.0], [0.5, 2.0]], np.float32)
    np.testing.assert_array_equal(loaded(x).numpy(), _model()[0](x).numpy())


def test_sites_false_leaves_them_out_and_the_rest_is_the_same():
    with_sites, _ = _doc()
    without, _ = _doc(sites=False)
    assert not any("site" in n for f in without["functions"] for n in f["nodes"])
    assert without == as_version_2(with_sites) | {"version": 3}
    assert all(n.site is None for n in df.load_json(without).graph.nodes)


def test_a_document_site_is_never_read_from_this_machine(tmp_path, monkeypatch):
    doc, lines = _doc()
    # a file of the same name here is another file: its lines must not be shown as the source
    (tmp_path / HERE).write_text("SECRET\n" * (max(lines.values()) + 1))
    monkeypatch.chdir(tmp_path)
    loaded = df.load_json(doc)
    node = next(n for n in loaded.graph.nodes if n.op.name == "tanh")
    assert sites.source_line(node.site) == "" and sites.format_site(node.site) == f"{HERE}:{lines['tanh']}"
    assert sites.source_line((str(tmp_path / HERE), 1)) == "SECRET"       # a traced site is read


def test_version_1_and_2_documents_still_load_without_sites():
    doc, _ = _doc()
    x = np.array([[1.0, 2.0]], np.float32)
    want = df.load_json(doc)(x).numpy()
    for old in (as_version_2(doc), as_version_1(doc)):
        loaded = df.load_json(old)
        np.testing.assert_array_equal(loaded(x).numpy(), want)
        assert all(n.site is None for n in loaded.graph.nodes)
    bad = as_version_2(doc)
    bad["functions"][0]["nodes"][0]["site"] = [HERE, 3]       # version 2 had no sites
    with pytest.raises(GraphFormatError, match=r"nodes\[0\]: unknown field 'site'"):
        df.load_json(bad)


@pytest.mark.parametrize("site, message", [
    ("model.py:3", r"site: expected \[file, line\], got 'model.py:3'"),
    (["model.py"], r"site: expected \[file, line\]"),
    (["model.py", 3, 4], r"site: expected \[file, line\]"),
    ({"file": "model.py", "line": 3}, r"site: expected \[file, line\]"),
    (None, r"site: expected \[file, line\], got None"),
    ([3, "model.py"], r"site\[0\]: expected str, got int"),
    (["model.py", "3"], r"site\[1\]: expected int, got str"),
    (["model.py", True], r"site\[1\]: expected int, got bool"),
    (["model.py", 3.0], r"site\[1\]: expected int, got float"),
    (["model.py", 0], r"site\[1\]: 0 is out of range \[1, 2147483647\]"),
    (["model.py", -5], r"site\[1\]: -5 is out of range"),
    (["model.py", 1 << 31], r"site\[1\]: 2147483648 is out of range"),
    (["x" * 256, 3], r"site\[0\]: string longer than 255 characters"),
    (["x" * 10 ** 6, 3], r"site\[0\]: string longer than 255 characters"),
    (["", 3], r"site\[0\]: '' is not a file's base name"),
    (["/home/alice/model.py", 3], r"site\[0\]: .* is not a file's base name"),
    (["C:\\Users\\alice\\model.py", 3], r"site\[0\]: .* is not a file's base name"),
    (["\x1b]0;pwned\x07model.py", 3], r"site\[0\]: .* is not a file's base name"),
    (["model\x1b[2J.py", 3], r"site\[0\]: .* is not a file's base name"),
    (["model\r.py", 3], r"site\[0\]: .* is not a file's base name"),
    (["model\x9b31m.py", 3], r"site\[0\]: .* is not a file's base name"),     # C1 CSI
    (["\u202emodel.py", 3], r"site\[0\]: .* is not a file's base name"),      # bidi override
    (["model\u2028.py", 3], r"site\[0\]: .* is not a file's base name"),      # line separator
])
def test_hostile_sites_are_refused_naming_the_field(site, message):
    doc, _ = _doc()
    for k in (0, 1):     # the fast path (a plain node) and the full checks (the variable read)
        bad = copy.deepcopy(doc)
        nodes = bad["functions"][0]["nodes"]
        target = next(i for i, n in enumerate(nodes) if (n["op"] == "read_variable") == (k == 1))
        nodes[target]["site"] = site
        with pytest.raises(GraphFormatError, match=rf"^functions\[0\]\.nodes\[{target}\]\.{message}"):
            df.load_json(bad)


def test_names_the_exporter_cannot_write_are_left_out():
    from defun.graph.serialize.schema import site_doc    # the one encoder, tested directly
    assert site_doc(("/home/alice/work/model.py", 12)) == ["model.py", 12]
    assert site_doc(("C:\\Users\\alice\\model.py", 12)) == ["model.py", 12]
    assert site_doc(("<stdin>", 1)) == ["<stdin>", 1]
    assert site_doc(None) is None and site_doc(("x" * 300 + ".py", 1)) is None
    assert site_doc(("a\x1b.py", 1)) is None and site_doc(("a.py", 0)) is None


def test_defun_dot_tooltips_show_the_line_of_a_loaded_document(tmp_path):
    doc, lines = _doc()
    (tmp_path / "f.json").write_text(json.dumps(doc))
    proc = cli("dot", "f.json", "-o", "f.svg", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    svg = (tmp_path / "f.svg").read_text()
    for op in ("tanh", "reduce_sum"):
        assert f"{HERE}:{lines[op]}" in svg, op
    (tmp_path / "g.json").write_text(json.dumps(_doc(sites=False)[0]))
    assert cli("dot", "g.json", "-o", "g.svg", cwd=tmp_path).returncode == 0
    assert f"{HERE}:" not in (tmp_path / "g.svg").read_text()


def test_defun_view_page_shows_the_line_of_a_loaded_document(tmp_path):
    doc, lines = _doc()
    (tmp_path / "f.json").write_text(json.dumps(doc))
    proc = cli("view", "f.json", "--no-open", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = page_json((tmp_path / "f.html").read_text(encoding="utf-8"))
    forward = [n for n in data["nodes"] if n["g"] == "forward"]
    shown = {n["op"]: n["site"] for n in forward if n.get("site")}
    assert shown["tanh"] == f"{HERE}:{lines['tanh']}" and shown["reduce_sum"] == f"{HERE}:{lines['reduce_sum']}"
    assert not any(n.get("src") for n in forward)     # the document's lines: no text read here


def test_defun_show_sites_ends_each_node_line_with_its_line(tmp_path):
    doc, lines = _doc()
    (tmp_path / "f.json").write_text(json.dumps(doc))
    proc = cli("show", "f.json", "--sites", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = [ln for ln in proc.stdout.splitlines() if " = tanh(" in ln or " = reduce_sum(" in ln]
    assert shown[0].endswith(f"  # {HERE}:{lines['tanh']}") and shown[1].endswith(f"  # {HERE}:{lines['reduce_sum']}")
    plain = cli("show", "f.json", cwd=tmp_path).stdout
    assert f"# {HERE}:" not in plain
    assert [ln.split("  # ")[0] for ln in proc.stdout.splitlines()] == plain.splitlines()


def test_the_cli_shows_a_hostile_site_escaped_in_its_refusal(tmp_path):
    doc, _ = _doc()
    doc["functions"][0]["nodes"][1]["site"] = ["\x1b]0;owned\x07\x1b[2J.py", 3]
    (tmp_path / "f.json").write_text(json.dumps(doc))
    for command in (["show", "f.json", "--sites"], ["dot", "f.json", "-o", "f.svg"], ["view", "f.json", "--no-open"]):
        proc = cli(*command, cwd=tmp_path)
        assert proc.returncode == 2 and "nodes[1].site[0]" in proc.stderr, (command, proc.stderr)
        assert "\x1b" not in proc.stderr + proc.stdout and "\\x1b" in proc.stderr
