"""The three views of a graph: golden text (`str(graph)`), Graphviz DOT, and networkx."""
import os
import re
import subprocess
import sys

import numpy as np

import defun as df
from graph_helpers import F32, F64, I32, build, golden  # noqa: F401
from defun.graph.functions import call_graph
from defun.graph.ir import Graph
from defun.graph.printer import format_attr, format_node, numbering, to_dot, to_networkx







# ---------------------------------------------------------------------------------------
# str(graph)

def _loss(x, w):
    return df.reduce_mean(df.tanh(x @ w), axis=1, keepdims=True)


def test_str_of_a_small_function():
    g = build("loss", [((None, 3), F32), ((3, 2), F32)], _loss)
    assert str(g) == golden("""
        func @loss(%0: f32[?,3], %1: f32[3,2]) -> (f32[?,1]):
          %2: f32[?,2] = matmul(%0, %1)
          %3: f32[?,2] = tanh(%2)
          %4: f32[?,1] = reduce_mean(%3) {axis=1, keepdims=True}
          return (%4)
    """)


def test_str_sorts_attrs_and_abbreviates_big_constants():
    def body(x):
        return (x + df.constant(np.ones((10, 10))), df.cast(x > 0.0, I32),
                df.argmax(x, axis=0, output_type=df.int32), df.matmul(x, x, transpose_b=True),
                x[1:, 2])
    g = build("big", [((10, 10), F64)], body)
    assert str(g) == golden("""
        func @big(%0: f64[10,10]) -> (f64[10,10], i32[10,10], i32[10], f64[10,10], f64[9]):
          %1: f64[10,10] = const() {value=<f64[10,10] array>}
          %2: f64[10,10] = add(%0, %1)
          %3: f64[] = const() {value=0.0}
          %4: bool[10,10] = greater(%0, %3)
          %5: i32[10,10] = cast(%4) {dtype=int32}
          %6: i32[10] = argmax(%0) {axis=0, output_type=int32}
          %7: f64[10,10] = matmul(%0, %0) {transpose_a=False, transpose_b=True}
          %8: f64[9] = strided_slice(%0) {begin=(1, 2), begin_mask=0, end=(0, 3), end_mask=1, new_axis=(), shrink_axis_mask=2, strides=(1, 1)}
          return (%2, %5, %6, %7, %8)
    """)


def test_str_of_multi_output_nodes_names_each_output():
    g = build("parts", [((None, 3), F32)], lambda x: [p * 2.0 for p in df.split(x, [1, 2], axis=1)])
    assert str(g) == golden("""
        func @parts(%0: f32[?,3]) -> (f32[?,1], f32[?,2]):
          %1: (f32[?,1], f32[?,2]) = split(%0) {axis=1, num_split=2, size_splits=(1, 2)}
          %2: f32[] = const() {value=2.0}
          %3: f32[?,1] = multiply(%1:0, %2)
          %4: f32[?,2] = multiply(%1:1, %2)
          return (%3, %4)
    """)


def _step_graph():
    v = df.Variable(np.zeros(2, np.float32))
    c = df.constant([1.0, 2.0])

    def body(x):
        r = v.read_value()
        v.assign_add(x * c)
        return r + v.read_value()
    return build("step", [((2,), F32)], body)


def test_str_shows_captures_and_control_edges_of_stateful_ops():
    assert str(_step_graph()) == golden("""
        func @step(%0: f32[2]) captures (%1: resource[], %2: f32[2]) -> (f32[2]):
          %3: f32[2] = read_variable(%1) {dtype=float32, shape=(2,)}
          %4: f32[2] = multiply(%0, %2)
          %5 = assign_add_variable(%1, %4) {dtype=float32, shape=(2,)} [after %3]
          %6: f32[2] = read_variable(%1) {dtype=float32, shape=(2,)} [after %5]
          %7: f32[2] = add(%3, %6)
          return (%7)
    """)


def test_str_prints_called_functions_once_after_the_caller():
    inner = build("inner", [((None,), F32)], lambda x: (df.sin(x), df.cos(x)))
    g = build("outer", [((4,), F32)],
              lambda x: call_graph(inner, [x])[1] + call_graph(inner, [x * 2.0])[0])
    assert str(g) == golden("""
        func @outer(%0: f32[4]) -> (f32[?]):
          %1: (f32[?], f32[?]) = call(%0) {f=@inner}
          %2: f32[] = const() {value=2.0}
          %3: f32[4] = multiply(%0, %2)
          %4: (f32[?], f32[?]) = call(%3) {f=@inner}
          %5: f32[?] = add(%1:1, %4:0)
          return (%5)

        func @inner(%0: f32[?]) -> (f32[?], f32[?]):
          %1: f32[?] = sin(%0)
          %2: f32[?] = cos(%0)
          return (%1, %2)
    """)


def test_str_is_deterministic_across_builds():
    texts = {str(build("loss", [((None, 3), F32), ((3, 2), F32)], _loss)) for _ in range(3)}
    assert len(texts) == 1
    assert len({str(_step_graph()) for _ in range(2)}) == 1


def test_format_attr_values():
    assert format_attr(np.array(2.5, np.float32)) == "2.5"
    assert format_attr(np.array([1, 2], np.int32)) == "[1, 2]"
    assert format_attr(np.zeros((3, 4), np.float16)) == "<f16[3,4] array>"
    assert format_attr(F32) == "float32"
    assert format_attr((1, None)) == "(1, None)"
    assert format_attr("SAME") == "'SAME'"
    assert format_attr(Graph("body")) == "@body"
    assert format_attr((Graph("a"), Graph("b"))) == "(@a, @b)"


# ---------------------------------------------------------------------------------------
# Printed by content: numbered in program order, functions by their base names

_OFFSET = df.constant([10.0, 20.0])
_GAIN = df.Variable([1.0, 1.0], name="gain")


def _looped(x):
    """Captures made mid-trace (a constant, a variable), a cond, a while and a scan whose
    bodies capture too: raw ids out of program order everywhere."""
    y = df.tanh(x) * 2.0 + _OFFSET
    z = df.cond(df.reduce_sum(y) > 0.0, lambda: y * _GAIN, lambda: y - _OFFSET)
    w = df.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 0.5 + y), [df.constant(0), z])[1]
    return df.scan(lambda acc, row: acc + row * _OFFSET[0], df.stack([w, z]), initializer=w)


def _defined_numbers(text):
    """Per printed function: the numbers it defines (parameters, captures, node results) in
    the order they appear."""
    out = []
    for block in text.split("\n\n"):
        head, *body = block.split("\n")
        out.append([int(n) for n in re.findall(r"%(\d+): ", head)] +
                   [int(re.match(r"  %(\d+)", ln).group(1)) for ln in body if ln.startswith("  %")])
    return out


def test_the_same_function_traced_twice_prints_alike():
    first = df.defun(_looped).get_concrete_function(df.TensorSpec([2], F32))
    # other tensors, variables and traces in between: ids and names move on
    noise = [df.constant(np.ones(3)) * 2.0 for _ in range(5)] + [df.Variable(1.0)]
    df.defun(lambda a: df.cond(a > 0.0, lambda: a, lambda: -a))(df.constant(1.0))
    second = df.defun(_looped).get_concrete_function(df.TensorSpec([2], F32))
    assert first.graph.name != second.graph.name and noise
    assert str(first) == str(second) == str(first.graph) == str(second.graph)
    assert to_dot(first.graph) == to_dot(second.graph)     # pictures too
    text = str(first)
    assert text.startswith("func @_looped(%0: f32[2]) captures (%1: f32[2], %2: resource[]) -> ")
    assert not re.search(r"@\w+_\d+\b", text)        # no process counter in any name
    # every function (entry, branches, loop and scan bodies) numbered 0, 1, 2, ... in order
    numbers = _defined_numbers(text)
    assert len(numbers) == 1 + 2 + 2 + 1 and all(ns == list(range(len(ns))) for ns in numbers)


def test_printed_numbers_are_not_the_node_ids():
    g = _step_graph()          # the constant is captured after the variable was read
    ids = [t.node.id for t in g.all_inputs]
    assert ids == [0, 1, 3]    # raw ids: the capture of c came after node 2
    assert "captures (%1: resource[], %2: f32[2])" in str(g)
    numbers = numbering(g)
    assert [numbers[id(t.node)] for t in g.all_inputs] == [0, 1, 2]
    lines = [ln.strip() for ln in str(g).split("\n")[1:-1]]
    assert lines == [format_node(n, numbers) for n in g.nodes if n.op.name != "placeholder"]


def test_an_optimized_graph_and_a_call_tree_renumber_too():
    cf = df.defun(lambda x: df.tanh(x) * 1.0 + df.exp(x) * 0.0 + df.tanh(x)).get_concrete_function(
        df.TensorSpec([2], F32))
    opt = cf.optimized_graph()
    assert [n.id for n in opt.nodes] != list(range(len(opt.nodes)))     # the passes kept ids
    assert _defined_numbers(str(opt)) == [list(range(len(opt.nodes)))]


def test_different_graphs_print_differently_and_same_named_functions_apart():
    a = df.defun(lambda x: df.cond(x > 0.0, lambda: x, lambda: -x)).get_concrete_function(
        df.TensorSpec([], F32))
    b = df.defun(lambda x: df.cond(x > 0.0, lambda: x, lambda: x * 2.0)).get_concrete_function(
        df.TensorSpec([], F32))
    assert str(a) != str(b)

    def two_conds(x):
        y = df.cond(x > 0.0, lambda: x, lambda: -x)
        return df.cond(y > 1.0, lambda: y * 3.0, lambda: y)
    text = str(df.defun(two_conds).get_concrete_function(df.TensorSpec([], F32)))
    heads = re.findall(r"^func @(\w+)\(", text, re.M)
    assert heads == ["two_conds", "cond_true", "cond_false", "cond_true_1", "cond_false_1"]
    assert "then_branch=@cond_true}" in text and "then_branch=@cond_true_1}" in text


_IN_A_FRESH_PROCESS = """
import sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import test_printer
import defun as df
print(df.defun(test_printer._looped).get_concrete_function(df.TensorSpec([2], df.float32)))
"""


def test_a_graph_prints_alike_in_another_process():
    here = os.path.dirname(os.path.abspath(__file__))
    for _ in range(3):      # this process has traced other things first
        df.defun(_looped)(df.constant([0.5, -1.0]))
    mine = str(df.defun(_looped).get_concrete_function(df.TensorSpec([2], F32)))
    proc = subprocess.run([sys.executable, "-c", _IN_A_FRESH_PROCESS, os.path.dirname(here), here],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == mine


# ---------------------------------------------------------------------------------------
# DOT

def _node_line(dot, name):
    lines = [ln.strip() for ln in dot.splitlines() if ln.strip().startswith(f'"{name}" [')]
    assert len(lines) == 1, (name, lines)
    return lines[0]


def test_dot_labels_are_op_and_shape_with_the_ir_line_as_tooltip():
    g = _step_graph()
    dot = to_dot(g, input_names=["x"], output_names=["total"])
    assert dot.startswith('digraph "step" {\n') and dot.endswith("}\n")
    numbers = numbering(g)    # nodes named as printed: the capture of c is %2, not its id 3
    for node in g.nodes:      # every node once, its whole IR line in its tooltip
        line = _node_line(dot, f"%{numbers[id(node)]}")
        assert format_node(node, numbers) in line.split('tooltip="')[1]
    assert _node_line(dot, "%0").startswith('"%0" [label="x\\nf32[2]", ')                 # the parameter's name
    assert re.match(r'"%1" \[label="Variable(_\d+)?\\nf32\[2\]", tooltip="captured variable', _node_line(dot, "%1"))
    assert "style=dashed" in _node_line(dot, "%1")                                         # value's shape
    assert _node_line(dot, "%2").startswith('"%2" [label="constant\\nf32[2]"')
    assert _node_line(dot, "%4").startswith('"%4" [label="multiply\\nf32[2]", ')          # op and shape only
    assert _node_line(dot, "%5").startswith('"%5" [label="assign_add_variable\\nno outputs"')
    assert _node_line(dot, "%7").startswith('"%7" [label="add\\nf32[2]\\n→ total", ')    # the output's name
    assert "penwidth=2" in _node_line(dot, "%7")
    assert max(len(part) for ln in dot.splitlines() if 'label="' in ln
               for part in ln.split('label="')[1].split('"')[0].split("\\n")) <= 20     # compact
    data = [ln for ln in dot.splitlines() if "->" in ln and "dashed" not in ln]
    control = [ln for ln in dot.splitlines() if "->" in ln and "dashed" in ln]
    assert len(data) == sum(len(n.inputs) for n in g.nodes) == 8
    assert '  "%0" -> "%4" [tooltip="f32[2]"];' in data
    assert control == ['  "%3" -> "%5" [style=dashed, tooltip="runs after"];',
                       '  "%5" -> "%6" [style=dashed, tooltip="runs after"];']
    # the SVG's node ids are the listing's names; the legend says what dashed arrows are
    assert _node_line(dot, "%4").endswith(', id="%4"];')
    legend = _node_line(dot, "legend")
    assert "dashed arrow: runs after" in legend and "yellow" not in legend


def test_dot_draws_forward_and_backward_with_side_outputs_and_gradient_names():
    from defun.graph_function import GraphFunction
    w = df.Variable(np.ones((3, 2), np.float32), name="w")

    @df.defun
    def loss(x):
        return df.reduce_sum(df.tanh(x @ w))
    cf = loss.get_concrete_function(df.TensorSpec([None, 3], F32))
    bw = GraphFunction.of(cf.graph).backward()
    dot = to_dot(cf.graph, bw, input_names=["x"], output_names=["loss"])
    lines = dot.splitlines()
    assert 'subgraph "cluster_forward" {' in dot and 'subgraph "cluster_backward" {' in dot
    side = [ln for ln in lines if "side output" in ln and 'fillcolor="#fff2b3"' in ln]
    assert len(side) == len(bw.side_outputs) == 2          # forward tensors the backward reads
    assert any('label="tanh\\nf32[?,2]\\nside output' in ln for ln in side)
    assert any('label="w\\nf32[3,2]"' in ln and "style=dashed" in ln for ln in lines)
    feeds = [ln for ln in lines if "style=dotted" in ln]
    # each side output and the forward input the backward reads: an edge into the backward
    assert len(feeds) == 3 and all('-> "backward/%' in ln for ln in feeds)
    assert any('label="d loss\\nf32[]"' in ln for ln in lines)        # the seed: loss's gradient
    grads = [ln for ln in lines if "\\n→ d/d" in ln]
    assert sorted(ln.split("→ ")[1].split('"')[0] for ln in grads) == ["d/dw", "d/dx"]
    # every node of both functions, once
    for prefix, g in (("forward/", cf.graph), ("backward/", bw.graph)):
        for node in g.nodes:
            assert sum(ln.strip().startswith(f'"{prefix}{node.name}" [') for ln in lines) == 1


def test_dot_draws_cond_branches_and_while_bodies_as_clusters():
    @df.defun
    def f(x, n):
        y = df.cond(df.reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0)
        return df.while_loop(lambda i, z: i < n, lambda i, z: (i + 1, z * 0.5), [df.constant(0), y])[1]
    cf = f.get_concrete_function(df.TensorSpec([3], F32), df.TensorSpec([], I32))
    dot = to_dot(cf.graph, input_names=["x", "n"])
    clusters = re.findall(r'label="((?:cond|while) %\d+: \w+ @\w+)"', dot)
    assert [c.split(": ")[1].split(" @")[0] for c in clusters] == ["else_branch", "then_branch", "body", "cond"] \
        or sorted(c.split(": ")[1].split(" @")[0] for c in clusters) == ["body", "cond", "else_branch", "then_branch"]
    assert dot.count("lhead=") == 4
    # the branches' capture of x is drawn with x's name; the bodies' ops are there
    assert dot.count('label="x\\nf32[3]"') == 3
    assert 'label="multiply\\nf32[3]\\n→ out 0"' in dot and 'label="less\\nbool[]\\n→ out 0"' in dot
    from defun.graph.printer import render_dot
    assert render_dot(dot, "svg").count(b'class="cluster"') == 4


def test_dot_renders_to_svg_and_png():
    from defun.graph.printer import render_dot    # the [viz] extra (in the test extra) and Graphviz
    g = _step_graph()
    svg = render_dot(to_dot(g), "svg").decode()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "assign_add_variable" in svg
    assert render_dot(to_dot(g), "png")[:8] == b"\x89PNG\r\n\x1a\n"


def test_dot_quotes_names_and_labels():
    g = build('say "hi"', [((2,), F32)], lambda x: df.pad(x, [[1, 0]], mode="CONSTANT"))
    dot = to_dot(g)
    assert dot.startswith('digraph "say \\"hi\\"" {')
    assert "mode='CONSTANT'" in dot


# ---------------------------------------------------------------------------------------
# networkx

def test_to_networkx_counts_nodes_and_edges():
    import networkx as nx
    g = _step_graph()
    nxg = to_networkx(g)
    assert nxg.number_of_nodes() == len(g.nodes) == 8
    assert nxg.number_of_edges() == 8 + 2
    kinds = sorted(k for _, _, k in nxg.edges(data="kind"))
    assert kinds == ["control"] * 2 + ["data"] * 8
    assert nxg.nodes["%5"]["op"] == "assign_add_variable"
    assert nxg.nodes["%2"]["outputs"] == ["f32[2]"]
    assert nx.is_directed_acyclic_graph(nxg)
    assert list(nx.topological_sort(nxg))[-1] == "%7"


def test_to_networkx_keeps_parallel_edges_of_a_repeated_input():
    g = build("sq", [((3,), F32)], lambda x: x * x)
    nxg = to_networkx(g)
    assert nxg.number_of_edges("%0", "%1") == 2
    assert sorted(d["dst_index"] for _, _, d in nxg.edges(data=True)) == [0, 1]
