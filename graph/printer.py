"""Three views of a graph: readable text (one line per node), Graphviz DOT, networkx."""
import numpy as np

from defun.runtime.dtypes import DType

__all__ = ["format_graph", "format_node", "format_attr", "to_dot", "render_dot", "to_networkx"]


def bracket_shape(shape):
    """`[2,?]`: a static shape as the IR prints it (? is an unknown size)."""
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


_SHORT = {"float16": "f16", "float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64",
          "complex64": "c64", "complex128": "c128", "int8": "i8", "int16": "i16", "uint8": "u8",
          "uint16": "u16", "uint32": "u32", "uint64": "u64",
          "bool": "bool", "resource": "resource", "variant": "variant"}


def type_str(shape, dtype):
    """`f32[2,?]`: a tensor type as the IR prints it."""
    return f"{_SHORT.get(dtype.name, dtype.name)}{bracket_shape(shape)}"


def _type(t):
    return type_str(t.shape, t.dtype)


def format_attr(v):
    """Deterministic, compact text for one attr value."""
    if isinstance(v, np.ndarray):
        if v.size <= 6:
            body = np.array2string(v, separator=", ").replace("\n", "")
            return f"{body}" if v.ndim else repr(v.item())
        return f"<{_type_dtype(v)}[{','.join(map(str, v.shape))}] array>"
    if isinstance(v, DType):
        return v.name
    if hasattr(v, "all_inputs") and hasattr(v, "nodes"):   # a Graph (function attr)
        return f"@{v.name}"
    if isinstance(v, tuple) and v and all(hasattr(x, "nodes") for x in v):
        return "(" + ", ".join(f"@{x.name}" for x in v) + ")"
    if callable(v):
        return "<python function>"
    return repr(v)


def _type_dtype(a):
    return _SHORT.get(a.dtype.name, a.dtype.name)


def format_node(node):
    """`%3: f32[4] = add(%1, %2) {attr=...} [after %0]`; `%5 = assign_variable(...)` without outputs."""
    outs = node.outputs
    if not outs:
        lhs = f"{node.name} = "   # named even without outputs: control edges refer to it
    elif len(outs) == 1:
        lhs = f"{node.name}: {_type(outs[0])} = "
    else:
        lhs = f"{node.name}: ({', '.join(_type(o) for o in outs)}) = "
    args = ", ".join(t.name for t in node.inputs)
    attrs = ""
    if node.attrs:
        attrs = " {" + ", ".join(f"{k}={format_attr(node.attrs[k])}" for k in sorted(node.attrs)) + "}"
    ctrl = ""
    if node.control_inputs:
        ctrl = " [after " + ", ".join(c.name for c in node.control_inputs) + "]"
    return f"{lhs}{node.op.name}({args}){attrs}{ctrl}"


def format_graph(graph, include_library=True):
    """The function as text: signature, one line per node, return; then called functions."""
    lines = []
    seen = set()
    _format_into(graph, lines, seen, include_library)
    return "\n".join(lines)


def _format_into(graph, lines, seen, include_library):
    seen.add(id(graph))
    params = ", ".join(f"{t.name}: {_type(t)}" for t in graph.inputs)
    caps = graph.captured_placeholders
    cap_txt = f" captures ({', '.join(f'{t.name}: {_type(t)}' for t in caps)})" if caps else ""
    rets = ", ".join(_type(t) for t in graph.outputs)
    lines.append(f"func @{graph.name}({params}){cap_txt} -> ({rets}):")
    placeholders = {id(t.node) for t in graph.all_inputs}
    callees = []
    for node in graph.nodes:
        if id(node) in placeholders:
            continue
        lines.append("  " + format_node(node))
        for v in node.attrs.values():
            for g in (v if isinstance(v, tuple) else (v,)):
                if hasattr(g, "nodes") and hasattr(g, "all_inputs") and id(g) not in seen:
                    callees.append(g)
                    seen.add(id(g))
    lines.append("  return (" + ", ".join(t.name for t in graph.outputs) + ")")
    if include_library:
        for g in callees:
            lines.append("")
            _format_into(g, lines, seen, include_library)


def to_networkx(graph):
    """A networkx MultiDiGraph: one vertex per node (attrs: op, label), edges data and control."""
    import networkx as nx
    g = nx.MultiDiGraph(name=graph.name)
    for node in graph.nodes:
        g.add_node(node.name, op=node.op.name, label=format_node(node),
                   outputs=[_type(o) for o in node.outputs])
    for node in graph.nodes:
        for k, t in enumerate(node.inputs):
            g.add_edge(t.node.name, node.name, kind="data", src_index=t.index, dst_index=k)
        for c in node.control_inputs:
            g.add_edge(c.name, node.name, kind="control")
    return g


def _q(s):
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _capture_text(value):
    """What a captured value is, for a picture: a variable (by name) or a constant."""
    if value.dtype.name == "resource":
        store = getattr(value, "_value", None)
        return f"captured variable {getattr(store, 'name', '?')}"
    if getattr(value, "node", None) is not None:
        return f"captured {value.name} of @{value.node.graph.name}"
    return f"captured constant {_type(value)}"


def _dot_body(graph, prefix, lines, marks, indent="  ", fed=frozenset()):
    """Node and edge lines of `graph` (node ids prefixed); `marks`: id(tensor) -> note;
    `fed`: ids of capture placeholders the forward feeds (their note says from what)."""
    outputs = {id(t) for t in graph.outputs}
    captured = {id(ph): value for value, ph in graph.captures.values() if id(ph) not in fed}
    for node in graph.nodes:
        attrs = []
        label = format_node(node)
        notes = [marks[id(t)] for t in node.outputs if id(t) in marks]
        if node.op.name == "placeholder":
            attrs.append("shape=ellipse")
            value = captured.get(id(node.outputs[0]))
            if value is not None:
                notes.insert(0, _capture_text(value))
                attrs.append('style=dashed')
        else:
            attrs.append("shape=box")
        styles = []
        if any(id(t) in outputs for t in node.outputs):
            styles.append("bold")
        if notes and node.op.name != "placeholder":
            styles.append("filled")
            attrs.append('fillcolor="#fff2b3"')
        if styles:
            attrs.append(f"style={','.join(styles)}" if len(styles) == 1 else f'style="{",".join(styles)}"')
        text = label + "".join("\n" + n for n in notes)
        lines.append(f"{indent}{_q(prefix + node.name)} [label={_q(text)}, {', '.join(attrs)}];")
    for node in graph.nodes:
        for t in node.inputs:
            lines.append(f"{indent}{_q(prefix + t.node.name)} -> {_q(prefix + node.name)} [label={_q(_type(t))}];")
        for c in node.control_inputs:
            lines.append(f"{indent}{_q(prefix + c.name)} -> {_q(prefix + node.name)} [style=dashed];")


def to_dot(graph, backward=None):
    """Graphviz DOT text of `graph`; render it with `render_dot` (or `dot -Tsvg`).

    Captured values (variables, constants) are dashed ellipses saying what they capture.
    With `backward` (a graph.gradients.Backward of `graph`), the forward and backward
    functions are drawn side by side: forward tensors the backward reads (the side outputs)
    are filled and joined by dotted edges to the backward inputs they feed; the backward's
    inputs say which output's gradient they are.
    """
    lines = [f"digraph {_q(graph.name)} {{", "  rankdir=TB;", "  node [shape=box, fontname=monospace];"]
    if backward is None:
        _dot_body(graph, "", lines, {})
        lines.append("}")
        return "\n".join(lines) + "\n"
    bw = backward.graph
    side = {id(t): k for k, t in enumerate(backward.side_outputs)}
    marks = {tid: f"side output {k}" for tid, k in side.items()}
    lines.append("  newrank=true;")
    lines += ["  subgraph \"cluster_forward\" {", f"    label={_q('forward @' + graph.name)};"]
    _dot_body(graph, "f", lines, marks, "    ")
    lines.append("  }")
    bmarks = {}
    for k, (t, j) in enumerate(zip(bw.inputs, backward.grad_outputs)):
        bmarks[id(t)] = f"gradient of output {j}"
    feeds = []
    for (kind, v), ph in zip(backward.capture_sources, bw.captured_placeholders):
        if kind == "side":
            t = backward.side_outputs[v]
            bmarks[id(ph)] = f"side output {v}"
            feeds.append((t.node.name, ph.node.name, f"side output {v}"))
        elif kind == "input":
            t = graph.all_inputs[v]
            bmarks[id(ph)] = f"forward input {t.name}"
            feeds.append((t.node.name, ph.node.name, "input"))
    lines += ["  subgraph \"cluster_backward\" {", f"    label={_q('backward @' + bw.name)};"]
    fed = {id(ph) for ph in bw.captured_placeholders if id(ph) in bmarks}   # fed by the forward
    _dot_body(bw, "b", lines, bmarks, "    ", fed)
    lines.append("  }")
    for src, dst, label in feeds:    # both ends' notes say which side output: no edge label
        lines.append(f"  {_q('f' + src)} -> {_q('b' + dst)} [style=dotted, color=\"#b08800\", "
                     f"tooltip={_q(label)}, constraint=false];")
    for t, j in zip(bw.inputs, backward.grad_outputs):   # lays the backward out after the forward
        lines.append(f"  {_q('f' + graph.outputs[j].node.name)} -> {_q('b' + t.node.name)} [style=invis];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_dot(dot, fmt="svg"):
    """`dot` text rendered by Graphviz as bytes of format `fmt` ("svg", "png", ...).

    Needs the `graphviz` Python package (the `[viz]` extra) and Graphviz's `dot` program;
    raises RuntimeError saying what to install when either is missing.
    """
    try:
        import graphviz
    except ImportError:
        raise RuntimeError("drawing graphs needs the graphviz package: pip install 'defun[viz]' "
                           "(and Graphviz itself, e.g. apt-get install graphviz)") from None
    try:
        return graphviz.Source(dot).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise RuntimeError("Graphviz's `dot` program was not found on PATH: install Graphviz "
                           "(e.g. apt-get install graphviz, brew install graphviz)") from None
