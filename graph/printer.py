"""Three views of a graph: readable text (one line per node), Graphviz DOT, networkx."""
import numpy as np

from runtime.dtypes import DType

__all__ = ["format_graph", "format_node", "format_attr", "to_dot", "to_networkx"]


def bracket_shape(shape):
    """`[2,?]`: a static shape as the IR prints it (? is an unknown size)."""
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


_SHORT = {"float16": "f16", "float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64",
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


def to_dot(graph):
    """Graphviz DOT text; render with `dot -Tpng`."""
    def q(s):
        return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'
    lines = [f"digraph {q(graph.name)} {{", "  rankdir=TB;", "  node [shape=box, fontname=monospace];"]
    outputs = {id(t.node) for t in graph.outputs}
    for node in graph.nodes:
        shape = "ellipse" if node.op.name == "placeholder" else "box"
        style = ", style=bold" if id(node) in outputs else ""
        lines.append(f"  {q(node.name)} [label={q(format_node(node))}, shape={shape}{style}];")
    for node in graph.nodes:
        for t in node.inputs:
            lines.append(f"  {q(t.node.name)} -> {q(node.name)} [label={q(_type(t))}];")
        for c in node.control_inputs:
            lines.append(f"  {q(c.name)} -> {q(node.name)} [style=dashed];")
    lines.append("}")
    return "\n".join(lines) + "\n"
