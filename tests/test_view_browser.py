"""The graph page in a real browser: headless Chromium (Debian's `chromium`; .ci/run installs
it) loads the page with every network request refused, its script runs, and the DOM it
leaves holds the nodes of a known model; a group named in the URL fragment opens."""
import html
import os
import re
import shutil
import subprocess

import pytest

import defun as df
from test_view import mlp_loss, page_json, rnn_loss
from test_cli import cli

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs a headless Chromium (apt-get install chromium)")


def rendered(tmp_path, page, fragment=""):
    """The DOM of `page` after its script ran, in headless Chromium with no network."""
    profile = tmp_path / f"chromium-profile-{len(os.listdir(tmp_path))}"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           f"--user-data-dir={profile}",
           # no network: every host resolves to nothing, every request goes to a dead proxy
           "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
           "--dump-dom", f"file://{page}{fragment}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert 'data-ready="1"' in dom, "the page's script did not finish: " + proc.stderr[-2000:]
    return dom


def drawn_nodes(dom):
    return {html.unescape(v) for v in re.findall(r'<g class="node[^"]*" [^>]*data-id="([^"]+)"', dom)}


def test_the_digits_mlp_page_shows_every_node_of_its_forward_and_backward(tmp_path):
    cf = mlp_loss().get_concrete_function(df.TensorSpec([None, 64], df.float32),
                                          df.TensorSpec([None], df.int32))
    df.export_json(cf, str(tmp_path / "digits.json"))
    proc = cli("view", "digits.json", "--no-open", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    page = tmp_path / "digits.html"
    data = page_json(page.read_text(encoding="utf-8"))
    dom = rendered(tmp_path, page)
    assert drawn_nodes(dom) == {n["id"] for n in data["nodes"]}
    assert f'data-shown="{len(data["nodes"])}"' in dom
    # the names a user looks for are on the page, as SVG text
    texts = set(re.findall(r"<text[^>]*>([^<]+)</text>", dom))
    assert {"x", "labels", "w0", "b1", "sparse_softmax_cross_entropy_with_logits", "→ d/dw0"} <= texts
    assert "▾ forward @loss" in texts and "▾ backward @loss_grad" in texts
    # edges are drawn with their arrows; side outputs and their readers are marked
    assert dom.count('class="edge kind-data"') >= len(data["nodes"])
    assert 'class="node kind-op side"' in dom and re.search(r'class="node kind-arg reads"', dom)


def test_a_loop_body_opens_from_the_url_fragment(tmp_path):
    page = df.view(rnn_loss(), path=tmp_path / "rnn.html", browser=False)
    data = page_json(page.html)
    scan = [n for n in data["nodes"] if n["g"] == "forward" and n["op"] == "scan"][0]
    body = {n["id"] for n in data["nodes"] if n["g"].startswith(scan["opens"])}
    assert len(body) >= 8
    closed = drawn_nodes(rendered(tmp_path, page.path))
    assert scan["id"] in closed and not body & closed        # the loop's body starts closed
    dom = rendered(tmp_path, page.path, "#open=" + scan["opens"].replace("%", "%25"))
    opened = drawn_nodes(dom)
    assert body <= opened and closed <= opened               # opened: its nodes join the rest
    labels = set(re.findall(r'<text[^>]*class="glabel"[^>]*>([^<]+)</text>', dom))
    assert f"▾ scan {scan['name']} · body @scan_body" in labels
    assert "▾ scan" in dom and re.search(r'class="edge kind-runs"', dom)    # a line from scan to its body
    # closing the forward leaves one box standing for it
    dom = rendered(tmp_path, page.path, "#closed=forward")
    assert not any(i.startswith("forward/") for i in drawn_nodes(dom))
    assert re.search(r'<g class="node proxy"[^>]*data-group="forward"', dom)


def test_a_variable_read_in_many_places_gets_a_copy_beside_each_reader(tmp_path):
    w = df.Variable([1.0, 2.0, 3.0], name="scale")

    @df.defun
    def f(x):
        return df.reduce_sum(x * w + df.sin(x * w) + df.cos(x * w) + df.exp(x * w) + df.tanh(x * w))
    page = df.view(f.get_concrete_function(df.TensorSpec([3], df.float32)), path=tmp_path / "f.html",
                   backward=False, browser=False)
    data = page_json(page.html)
    (var,) = [n for n in data["nodes"] if n["title"] == "scale"]
    readers = {e["t"] for e in data["edges"] if e["s"] == var["id"]}
    assert len(readers) == 5
    dom = rendered(tmp_path, page.path)
    refs = re.findall(r'<g class="node kind-var ref"[^>]*data-ref="([^"]+)"', dom)
    assert [html.unescape(r) for r in refs] == [var["id"]] * 5        # one copy per reader
    assert var["id"] in drawn_nodes(dom)                               # and the variable itself
    assert not re.search(r'data-from="%s"' % re.escape(var["id"]), dom)  # no edge crosses from it


def test_the_fragment_sets_the_scale_and_the_selected_node(tmp_path):
    page = df.view(rnn_loss(), path=tmp_path / "rnn.html", browser=False)
    data = page_json(page.html)
    svg = re.compile(r'<svg id="graph"[^>]*data-width="([\d.]+)"[^>]*width="(\d+)"')
    full, shown = map(float, svg.search(rendered(tmp_path, page.path)).groups())
    assert abs(full - shown) <= 1
    fitted = float(svg.search(rendered(tmp_path, page.path, "#zoom=fit")).group(2))
    half = float(svg.search(rendered(tmp_path, page.path, "#zoom=0.5")).group(2))
    assert fitted < full and abs(half - full / 2) <= 1
    # a node selected by the fragment: marked, its details shown (inside a closed body: opened)
    inner = [n for n in data["nodes"] if n["g"].startswith("forward/") and n["op"] == "tanh"][0]
    dom = rendered(tmp_path, page.path, "#select=" + inner["id"].replace("%", "%25"))
    assert re.search(r'<g class="node kind-op[^"]* sel"[^>]*data-id="%s"' % re.escape(html.escape(inner["id"])), dom)
    assert "<h2>%s  tanh</h2>" % inner["name"] in dom and html.escape(inner["ir"]) in dom


def test_find_marks_the_nodes_whose_op_name_or_line_has_the_text(tmp_path):
    page = df.view(rnn_loss(), path=tmp_path / "rnn.html", browser=False)
    data = page_json(page.html)
    dom = rendered(tmp_path, page.path, "#open=all&find=matmul")
    hits = {html.unescape(i) for i in re.findall(r'<g class="node[^"]* hit"[^>]*data-id="([^"]+)"', dom)}
    assert hits == {n["id"] for n in data["nodes"] if "matmul" in n["title"]} and len(hits) >= 4
