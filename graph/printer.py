"""Three views of a graph: readable text (one line per node), Graphviz DOT, networkx."""
import os

import numpy as np

from defun.runtime.dtypes import DType, from_numpy
from defun.graph.input_gradients import DenseGrad

__all__ = ["format_graph", "format_node", "format_attr", "numbering", "to_dot", "render_dot", "to_networkx"]


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


def format_attr(v, functions=None):
    """Deterministic, compact text for one attr value (`functions`: {id(graph): the name a
    function attr is printed with}, default the graph's own name)."""
    if isinstance(v, np.ndarray):
        if v.size <= 6:
            body = np.array2string(v, separator=", ").replace("\n", "")
            return f"{body}" if v.ndim else repr(v.item())
        return f"<{_type_dtype(v)}[{','.join(map(str, v.shape))}] array>"
    if isinstance(v, DType):
        return v.name
    if _is_graph(v):   # a function attr
        return f"@{functions.get(id(v), v.name) if functions else v.name}"
    if isinstance(v, tuple) and v and all(hasattr(x, "nodes") for x in v):
        return "(" + ", ".join(format_attr(x, functions) for x in v) + ")"
    if callable(v):
        return "<python function>"
    return repr(v)


def _type_dtype(a):
    return _SHORT.get(a.dtype.name, a.dtype.name)


def _is_graph(v):
    return hasattr(v, "all_inputs") and hasattr(v, "nodes")


def numbering(graph):
    """{id(node): the number `%k` it is printed with}: the inputs first (arguments, then
    captures), then the other nodes in program order. So two equal graphs print alike,
    whatever ids their nodes were given (captures are made when first used; copies keep
    their original's ids; views and retraces number from where their graph is)."""
    numbers = {}
    for t in graph.all_inputs:
        numbers[id(t.node)] = len(numbers)
    for node in graph.nodes:
        if id(node) not in numbers:
            numbers[id(node)] = len(numbers)
    return numbers


def _node_name(node, numbers):
    k = numbers.get(id(node)) if numbers is not None else None
    return node.name if k is None else f"%{k}"


def _tensor_name(t, numbers):
    if numbers is None:
        return t.name
    n = _node_name(t.node, numbers)
    return n if t.index == 0 and len(t.node.outputs) <= 1 else f"{n}:{t.index}"


def format_node(node, numbers=None, functions=None):
    """`%3: f32[4] = add(%1, %2) {attr=...} [after %0]`; `%5 = assign_variable(...)` without outputs.

    Nodes are named by `numbers` (`numbering(graph)`) when given, else by their ids;
    `functions` names function attrs (see `format_attr`)."""
    outs = node.outputs
    name = _node_name(node, numbers)
    if not outs:
        lhs = f"{name} = "   # named even without outputs: control edges refer to it
    elif len(outs) == 1:
        lhs = f"{name}: {_type(outs[0])} = "
    else:
        lhs = f"{name}: ({', '.join(_type(o) for o in outs)}) = "
    args = ", ".join(_tensor_name(t, numbers) for t in node.inputs)
    attrs = ""
    if node.attrs:
        attrs = " {" + ", ".join(f"{k}={format_attr(node.attrs[k], functions)}"
                                 for k in sorted(node.attrs)) + "}"
    ctrl = ""
    if node.control_inputs:
        ctrl = " [after " + ", ".join(_node_name(c, numbers) for c in node.control_inputs) + "]"
    return f"{lhs}{node.op.name}({args}){attrs}{ctrl}"


def format_graph(graph, include_library=True, sites=False):
    """The function as text: signature, one line per node, return; then called functions.
    `sites=True` ends each node's line with its source site (`  # model.py:14`, the file's
    base name), where it has one.

    Printed by content only: nodes numbered in program order (`numbering`), functions
    named by their base names (`loss`, not the process's `loss_3`; a second function of
    the same name gets `_1`, ...), so equal graphs print alike in any process."""
    graphs = _print_order(graph)
    functions = _function_names(graphs)
    lines = []
    for g in graphs if include_library else graphs[:1]:
        if lines:
            lines.append("")
        _format_function(g, lines, functions, sites)
    return "\n".join(lines)


def _print_order(graph):
    """`graph`, then the functions it calls, each followed by those it calls (first use first)."""
    order, seen = [], {id(graph)}
    stack = [graph]
    while stack:
        g = stack.pop()
        order.append(g)
        callees = []
        for node in g.nodes:
            for v in node.attrs.values():
                for c in (v if isinstance(v, tuple) else (v,)):
                    if _is_graph(c) and id(c) not in seen:
                        seen.add(id(c))
                        callees.append(c)
        stack.extend(reversed(callees))
    return order


def _function_names(graphs):
    """{id(graph): its base name, made unique in order with a suffix `_1`, `_2`, ...}."""
    names, taken = {}, set()
    for g in graphs:
        base = getattr(g, "base_name", None) or g.name
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        names[id(g)] = name
    return names


def _format_function(graph, lines, functions, sites=False):
    numbers = numbering(graph)
    params = ", ".join(f"{_tensor_name(t, numbers)}: {_type(t)}" for t in graph.inputs)
    caps = graph.captured_placeholders
    cap_txt = f" captures ({', '.join(f'{_tensor_name(t, numbers)}: {_type(t)}' for t in caps)})" \
        if caps else ""
    rets = ", ".join(_type(t) for t in graph.outputs)
    lines.append(f"func @{functions[id(graph)]}({params}){cap_txt} -> ({rets}):")
    placeholders = {id(t.node) for t in graph.all_inputs}
    for node in graph.nodes:
        if id(node) not in placeholders:
            site = node.site if sites else None
            lines.append("  " + format_node(node, numbers, functions) +
                         (f"  # {os.path.basename(site[0])}:{site[1]}" if site else ""))
    lines.append("  return (" + ", ".join(_tensor_name(t, numbers) for t in graph.outputs) + ")")


def to_networkx(graph):
    """A networkx MultiDiGraph: one vertex per node (attrs: op, label), edges data and control."""
    import networkx as nx    # slow to import; only for this view
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


# Picture style: compact boxes (op over shape), small type, tight ranks, so a graph of a few
# dozen nodes reads at a page's width. What a node is in full (its IR line, attrs and the
# user's line) is its tooltip.
_HEAD = ['  rankdir=TB;', '  graph [fontname="Helvetica", fontsize=10, nodesep=0.18, ranksep=0.28];',
         '  node [shape=box, fontname="Helvetica", fontsize=9, height=0.3, margin="0.06,0.03"];',
         '  edge [arrowsize=0.5, color="#555555"];', '  compound=true;']
_ARG = 'shape=ellipse, style=filled, fillcolor="#dbe9f7"'
_CAPTURE = 'shape=ellipse, style=dashed'
_SIDE = 'fillcolor="#fff2b3"'
_MAX_NESTING = 4     # cond branches / while bodies drawn inside each other, at most this deep
# What each mark means, said in the picture's legend when the picture has one.
_LEGEND = [("argument", "blue: argument, body input"),
           ("capture", "dashed: variable read"),
           ("constant", "grey dashed: constant"),
           ("output", "bold: output (→ name)"),
           ("side", "yellow: side output (saved)"),
           ("feed", "dotted yellow: saved → backward"),
           ("control", "dashed arrow: runs after"),
           ("runs", "dotted arrow ○: runs function")]


def types_str(tensors):
    """The output types of a node, short: `f32[2], i32[]`, `no outputs`, `5 outputs`."""
    if not tensors:
        return "no outputs"
    if len(tensors) > 3:
        return f"{len(tensors)} outputs"
    return ", ".join(_type(t) for t in tensors)


def _const_label(node):
    v = node.attrs.get("value")
    out = node.outputs[0]
    if isinstance(v, np.ndarray) and v.size == 1:
        return f"{format_attr(v.reshape(()) if v.ndim else v)}\n{_type(out)}"
    return f"const\n{_type(out)}"


def body_inputs(node, body):
    """The outer tensors feeding `body`'s inputs (arguments, then captures), one per input,
    for a function `node` runs: a cond's branches take its inputs after the predicate, a
    call, while or scan body its inputs in order. None when the counts do not agree."""
    feed = node.inputs[1:] if node.op.name == "cond" else node.inputs
    ins = body.all_inputs
    return list(feed[:len(ins)]) if len(feed) >= len(ins) else None


def function_bodies(node):
    """[(attr name, k or None, function graph)] of the functions `node` runs, by attr name."""
    found = []
    for key in sorted(node.op.function_attrs):
        value = node.attrs.get(key)
        for k, g in enumerate(value if isinstance(value, tuple) else (value,)):
            if g is not None and hasattr(g, "nodes"):
                found.append((key, k if isinstance(value, tuple) else None, g))
    return found


def used_inputs(graph):
    """Ids of `graph`'s input tensors that a node reads or the graph returns."""
    used = {id(t) for node in graph.nodes for t in node.inputs}
    return used | {id(t) for t in graph.outputs}


class Naming:
    """How pictures and pages name things: nodes as the listing numbers them (`numbering` of
    their graph), functions as `format_graph` names them, a node's line as `file.py:12`."""

    def __init__(self, graphs):
        order, seen = [], set()
        for g in graphs:
            for h in _print_order(g):
                if id(h) not in seen:
                    seen.add(id(h))
                    order.append(h)
        self.functions = _function_names(order)
        self._numbers = {}      # id(graph) -> numbering(graph)

    def function_name(self, g):
        return self.functions.get(id(g), g.name)

    def numbers(self, g):
        numbers = self._numbers.get(id(g))
        if numbers is None:
            numbers = self._numbers[id(g)] = numbering(g)
        return numbers

    def node_name(self, node):
        return _node_name(node, self.numbers(node.graph))

    def tensor_name(self, t):
        return _tensor_name(t, self.numbers(t.node.graph))

    def ir_line(self, node):
        return format_node(node, self.numbers(node.graph), self.functions)

    def tooltip(self, node):
        site = getattr(node, "site", None)
        # the file's name, not its path: a picture is the same wherever the code is checked out
        text = self.ir_line(node)
        return f"{text}\n{os.path.basename(site[0])}:{site[1]}" if site else text

    def captured_text(self, value, outer):
        """(label, tooltip) of a captured value: a variable by name with its value's type, a
        constant by its type, a value of an enclosing function by its name there (`outer`:
        id(tensor) -> the name it is drawn with)."""
        if value.dtype.name == "resource":
            store = getattr(value, "_value", None)
            name = getattr(store, "name", "?")
            held = getattr(store, "value", None)
            kind = type_str(held.shape, from_numpy(held.dtype)) if held is not None else "resource"
            return f"{name}\n{kind}", f"captured variable {name} {kind}"
        if getattr(value, "node", None) is not None:
            name = self.tensor_name(value)
            return (f"{outer.get(id(value), name)}\n{_type(value)}",
                    f"captured {name} of @{self.function_name(value.node.graph)}")
        return f"constant\n{_type(value)}", f"captured constant {_type(value)}"

    def body_input_names(self, node, body, shown):
        """{id(input of body): (its label, the outer tensor feeding it)}: an input fed by an
        outer tensor drawn with a name (`shown`: id(tensor) -> name; an argument, a
        variable) takes that name, any other `input k ← %j`, the outer tensor it is fed; a
        loop's carried values say so (`carry: h0`), a scan's rows what they are rows of."""
        feed = body_inputs(node, body)
        if feed is None:
            return {}
        carries, sliced = _loop_inputs(node)
        labels = {}
        for k, (t, src) in enumerate(zip(body.all_inputs, feed)):
            name = shown.get(id(src))
            if k < carries:
                label = f"carry: {name}" if name else f"carry {k} ← {self.tensor_name(src)}"
            elif k < carries + sliced:
                label = f"row of {name or self.tensor_name(src)}"
            else:
                label = name or f"input {k} ← {self.tensor_name(src)}"
            labels[id(t)] = (label, src)
        return labels


def _loop_inputs(node):
    """(carried, sliced) input counts of a loop node's functions (0, 0 for others)."""
    if node.op.name == "scan":
        return node.attrs.get("carries", 0), node.attrs.get("sliced", 0)
    if node.op.name == "while":
        body = node.attrs.get("body")
        return (len(body.outputs) if hasattr(body, "outputs") else 0), 0
    return 0, 0


class _Drawing(Naming):
    """The lines of one picture; node ids are a path per function drawn plus node names
    (`forward/%6/body/%2`), also the SVG ids of the drawn nodes."""

    def __init__(self, graphs):
        super().__init__(graphs)
        self.lines = [f"digraph {_q(self.function_name(graphs[0]))} {{", *_HEAD]
        self.clusters = 0
        self.shown = {}         # id(tensor) -> the name its input node is drawn with
        self.variables = {}     # id(tensor) -> (label, tooltip) of a variable's handle drawn
        self.used = set()       # what the picture shows, for the legend

    def vertex(self, graph, node, names, captured, inputs):
        """(label, tooltip, style, names still to add) of a node other than an op's."""
        t0 = node.outputs[0]
        tooltip = self.tooltip(node)
        label_name = [names[id(t)] for t in node.outputs if id(t) in names]
        if node.op.name == "const":
            self.used.add("constant")
            return _const_label(node), tooltip, 'shape=ellipse, style=dashed, color="#888888"', label_name
        value = captured.get(id(t0))
        if value is not None:
            label, what = self.captured_text(value, self.shown)
            self.shown[id(t0)] = label.split("\n")[0]
            self.used.add("capture")
            if value.dtype.name == "resource":
                self.variables[id(t0)] = (label, what)
            return label, f"{what}\n{tooltip}", _CAPTURE, label_name
        if id(t0) in inputs:
            what, src = inputs[id(t0)]
            if id(src) in self.variables:     # the variable passed in: drawn as where it is captured
                label, what = self.variables[id(t0)] = self.variables[id(src)]
                self.shown[id(t0)] = label.split("\n")[0]
                return label, f"{what}\n{tooltip}", _CAPTURE, label_name
            rest = label_name
            if id(src) in self.shown:        # a body inside this one names it as this one does
                self.shown[id(t0)] = self.shown[id(src)]
        else:
            what = label_name[0] if label_name else (f"input {graph.all_inputs.index(t0)}"
                                                     if t0 in graph.inputs else self.tensor_name(t0))
            rest = label_name[1:]
            if not what.startswith("input "):
                self.shown[id(t0)] = what
        self.used.add("argument")
        return f"{what}\n{_type(t0)}", tooltip, _ARG, rest

    def function(self, graph, prefix, indent, names=None, notes=None, fed=frozenset(), depth=0,
                 inputs=None, top=False):
        """Nodes and edges of `graph`; `names`: id(tensor) -> a name (parameters, outputs);
        `notes`: id(tensor) -> a note (side outputs, gradients) filling its node; `fed`: ids
        of capture placeholders fed from elsewhere (their note says from what); `inputs`:
        id(input) -> its label (a body's inputs, named by what feeds them). An input nothing
        reads is left out, but for the arguments of the function drawn (`top`)."""
        names, notes, inputs = names or {}, notes or {}, inputs or {}
        lines, vid = self.lines, lambda n: _q(prefix + self.node_name(n))
        outputs = {id(t) for t in graph.outputs}
        captured = {id(ph): value for value, ph in graph.captures.values() if id(ph) not in fed}
        used, arguments = used_inputs(graph), {id(t) for t in graph.inputs} if top else set()
        nested = []
        for node in graph.nodes:
            op = node.op.name
            if op == "placeholder" and id(node.outputs[0]) not in used | arguments:
                continue
            note = [notes[id(t)] for t in node.outputs if id(t) in notes]
            if op in ("placeholder", "const"):
                label, tooltip, style, label_name = self.vertex(graph, node, names, captured, inputs)
            else:
                tooltip, label_name = self.tooltip(node), [names[id(t)] for t in node.outputs
                                                           if id(t) in names]
                funcs = [node.attrs[k] for k in node.op.function_attrs if k in node.attrs]
                head = f"call @{self.function_name(funcs[0])}" if op == "call" and funcs else op
                label, style = f"{head}\n{types_str(node.outputs)}", "shape=box"
                if op != "call" and funcs and depth < _MAX_NESTING:
                    nested.append(node)
            extra = [f"→ {n}" for n in label_name] + note
            if extra:
                label += "\n" + "\n".join(extra)
            if any(id(t) in outputs for t in node.outputs):
                style += ", penwidth=2"
                self.used.add("output")
            if note:
                style = style.replace("style=filled, ", "").replace(", style=dashed", "")
                style += f", style=filled, {_SIDE}"
            tip = tooltip + "".join("\n" + n for n in note)
            lines.append(f"{indent}{vid(node)} [label={_q(label)}, tooltip={_q(tip)}, {style}, id={vid(node)}];")
        for node in graph.nodes:
            for t in node.inputs:
                lines.append(f"{indent}{vid(t.node)} -> {vid(node)} [tooltip={_q(_type(t))}];")
            for c in node.control_inputs:
                self.used.add("control")
                lines.append(f"{indent}{vid(c)} -> {vid(node)} [style=dashed, tooltip=\"runs after\"];")
        for node in nested:
            self.bodies(node, prefix, indent, depth)

    def bodies(self, node, prefix, indent, depth):
        """The functions a cond or while node runs, each a cluster joined to the node."""
        here = self.node_name(node)
        for key, k, g in function_bodies(node):
            self.clusters += 1
            cid = f"cluster_{self.clusters}"
            sub = f"{prefix}{here}/{key}{'' if k is None else k}/"
            what = key if k is None else f"{key} {k}"
            self.lines += [f"{indent}subgraph {_q(cid)} {{",
                           f'{indent}  label={_q(f"{node.op.name} {here}: {what} @{self.function_name(g)}")}; '
                           f'style="rounded,dashed"; color="#7a7a7a";']
            names = {}
            for j, t in enumerate(g.outputs):     # a value returned twice: out 0, 1
                names[id(t)] = f"{names[id(t)]}, {j}" if id(t) in names else f"out {j}"
            start = len(self.lines)
            self.function(g, sub, indent + "  ", names=names, depth=depth + 1,
                          inputs=self.body_input_names(node, g, self.shown))
            anchor = next((line.split(" [", 1)[0].strip() for line in self.lines[start:]
                           if line.startswith(indent + "  \"") and " -> " not in line), None)
            self.lines.append(f"{indent}}}")
            if anchor is not None:
                self.used.add("runs")
                self.lines.append(f"{indent}{_q(prefix + here)} -> {anchor} "
                                  f"[lhead={_q(cid)}, style=dotted, arrowhead=odot, tooltip=\"runs\"];")

    def legend(self):
        """A box saying what the picture's marks mean (those it uses), when it uses one that
        does not explain itself (a dashed or dotted line, a fill, a variable)."""
        rows = [(k, text) for k, text in _LEGEND if k in self.used]
        if self.used & {"capture", "side", "feed", "control", "runs"}:
            cells = "".join(f'<tr><td align="left">{text}</td></tr>' for _, text in rows)
            self.lines.append(f'  "legend" [id="legend", shape=plaintext, fontsize=8, label=<<table border="0" '
                              f'cellborder="0" cellspacing="0" cellpadding="1">{cells}</table>>];')

    def text(self):
        return "\n".join(self.lines + ["}"]) + "\n"


def gradient_names(graph, backward, input_names, tensor_name):
    """id(backward output) -> `d/dx` for the gradient of input x, `d/dw` of variable w."""
    bw = backward.graph
    names = {}
    n_args = len(graph.inputs)
    captured = {id(ph): value for value, ph in graph.captures.values()}
    for k, spec in enumerate(backward.input_grads):
        if spec is None or k >= len(graph.all_inputs):
            continue
        t = graph.all_inputs[k]
        if k < n_args:
            what = input_names[k] if input_names and k < len(input_names) else tensor_name(t)
        else:
            value = captured.get(id(t))
            store = getattr(value, "_value", None) if value is not None else None
            what = getattr(store, "name", None) if value is not None and value.dtype.name == "resource" \
                else "constant"
            what = what or tensor_name(t)
        if isinstance(spec, DenseGrad):
            names[id(bw.outputs[spec.output])] = f"d/d{what}"
        else:
            names[id(bw.outputs[spec.values])] = f"d/d{what} (values)"
            names[id(bw.outputs[spec.indices])] = f"d/d{what} (indices)"
    return names


def to_dot(graph, backward=None, input_names=None, output_names=None):
    """Graphviz DOT text of `graph`; render it with `render_dot` (or `dot -Tsvg`).

    A node is a box with its op and output type (its IR line, attrs and the user's line are
    the tooltip); the arguments are filled ellipses named `input_names` (default: their
    position), captured variables dashed ellipses with their name and value's type, constants
    dashed ellipses with their value (a scalar) or type; outputs are bold, named
    `output_names`. The branches of a `cond` and the cond and body of a `while` are clusters
    joined to their node. With `backward` (a graph.gradients.Backward of `graph`), the
    forward and backward functions are drawn side by side: forward tensors the backward
    reads (the side outputs) are filled and joined by dotted edges to the backward inputs
    they feed; the backward's inputs say which output's gradient they are, its outputs which
    gradient they are (`d/dx` for argument x, `d/dw` for variable w). Nodes and functions
    are named as `format_graph` prints them.

        svg = render_dot(to_dot(cf.graph, input_names=["x"], output_names=["loss"]), "svg")
    """
    d = _Drawing([graph] if backward is None else [graph, backward.graph])
    names = {}
    for k, t in enumerate(graph.inputs):
        if input_names is not None and k < len(input_names):
            names[id(t)] = input_names[k]
    out_names = output_names if output_names is not None else \
        [f"output {j}" for j in range(len(graph.outputs))]
    for j, t in enumerate(graph.outputs):
        if id(t) not in names or t.node.op.name != "placeholder":
            names.setdefault(id(t), out_names[j])
    if backward is None:
        d.function(graph, "", "  ", names, top=True)
    else:
        _forward_and_backward(d, graph, backward, names, input_names, out_names)
    d.legend()
    return d.text()


def _forward_and_backward(d, graph, backward, names, input_names, out_names):
    d.lines.append("  newrank=true;")
    bw = backward.graph
    side = {id(t): k for k, t in enumerate(backward.side_outputs)}
    notes = {tid: f"side output {k}" for tid, k in side.items()}
    d.lines += ["  subgraph \"cluster_forward\" {",
                f"    label={_q('forward @' + d.function_name(graph))}; color=\"#bbbbbb\";"]
    d.function(graph, "forward/", "    ", names, notes, top=True)
    d.lines.append("  }")
    if notes:
        d.used.add("side")
    bnames = gradient_names(graph, backward, input_names, d.tensor_name)
    for t, j in zip(bw.inputs, backward.grad_outputs):    # seeds: the gradient of output j
        bnames[id(t)] = f"d {out_names[j]}"
    feeds, used = [], used_inputs(bw)
    for (kind, v), ph in zip(backward.capture_sources, bw.captured_placeholders):
        if id(ph) not in used:
            continue
        if kind == "side":
            t = backward.side_outputs[v]
            bnames[id(ph)] = f"side output {v}"
            feeds.append((d.node_name(t.node), d.node_name(ph.node), f"side output {v}"))
        elif kind == "input":
            t = graph.all_inputs[v]
            bnames[id(ph)] = f"forward {names.get(id(t)) or d.shown.get(id(t)) or d.tensor_name(t)}"
            feeds.append((d.node_name(t.node), d.node_name(ph.node), "input"))
    d.lines += ["  subgraph \"cluster_backward\" {",
                f"    label={_q('backward @' + d.function_name(bw))}; color=\"#bbbbbb\";"]
    fed = {id(ph) for ph in bw.captured_placeholders if id(ph) in bnames}   # fed by the forward
    d.function(bw, "backward/", "    ", bnames, {}, fed)
    d.lines.append("  }")
    if feeds:
        d.used.add("feed")
    for src, dst, label in feeds:    # both ends' notes say which side output: no edge label
        d.lines.append(f"  {_q('forward/' + src)} -> {_q('backward/' + dst)} [style=dotted, color=\"#b08800\", "
                       f"tooltip={_q(label)}, constraint=false];")


def render_dot(dot, fmt="svg"):
    """`dot` text rendered by Graphviz as bytes of format `fmt` ("svg", "png", ...).

    Needs the `graphviz` Python package (the `[viz]` extra) and Graphviz's `dot` program;
    raises RuntimeError saying what to install when either is missing.
    """
    try:
        import graphviz    # the optional [viz] extra
    except ImportError:
        raise RuntimeError("drawing graphs needs the graphviz package: pip install 'defun[viz]' "
                           "(and Graphviz itself, e.g. apt-get install graphviz)") from None
    try:
        return graphviz.Source(dot).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise RuntimeError("Graphviz's `dot` program was not found on PATH: install Graphviz "
                           "(e.g. apt-get install graphviz, brew install graphviz)") from None
