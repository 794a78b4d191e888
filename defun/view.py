"""`df.view` and `defun view`: a function's forward and backward graphs as one HTML page.

    page = df.view(cf)                      # writes an .html file, opens it in the browser
    df.view(loss, x, y, profile=True)       # a defun traced for these arguments, its time per node

The page is one self-contained file (no network): the graph as JSON, the layout library
(dagre, vendored in defun/viewer/ with its licence and pinned version) and the page's own
script, which lays out each top-level group, draws it as SVG and lets groups open and close:
the functions a `call`, `cond`, `while` or `scan` node runs, and the forward and backward.
Each node shows its op, output type and notes (its output's name, side output, gradient);
clicking it shows its IR line, attributes and the user's source line. Side outputs and the
backward inputs reading them are marked (selecting one marks the other); a `df.profile`
result lays each node's time over it, a SideOutputs table (`df.debugging.side_outputs`) the
actual bytes of the side outputs (else their static size, when known).
"""
import html
import json
import os
import re
import sys

import numpy as np

from defun.runtime import errors, sites
from defun.graph.printer import (Naming, body_inputs, bracket_shape, format_attr, function_bodies,
                                 gradient_names, type_str, types_str, used_inputs)
from defun.graph.serialize import LoadedFunction
from defun.graph_function import GraphFunction
from defun.concrete import ConcreteFunction, SideOutputs, input_names, output_names_of, side_output_row
from defun.function import Function
from defun.profile import Profile, _duration, profile as run_profile
from defun.debugging import side_outputs as recorded_side_outputs
from defun.runtime.backprop import GradientTape
from defun.runtime.tensor import Tensor, constant

__all__ = ["view", "page_html", "measure_side_outputs", "Page"]

_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "viewer")
_MAX_NESTING = 8      # functions opened inside each other at most this deep
_GROUP_KINDS = {"cond": "cond", "while": "loop", "scan": "loop", "call": "call"}


class Page:
    """A written graph page: `path` (also `os.fspath(page)`); in a notebook it shows itself."""

    def __init__(self, path, text):
        self.path, self.html = path, text

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return f"<df.view page {self.path}>"

    def _repr_html_(self):
        """The page in an iframe (its own document: its script and styles stay inside)."""
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" style="width:100%;height:640px;'
                f'border:1px solid #ccc" sandbox="allow-scripts"></iframe>')


def view(f, *args, path=None, backward=True, profile=None, side_outputs=None, browser=None, **kwargs):
    """Write `f`'s graph page to `path` (default: the temp folder, `defun-<name>.html`) and
    open it in the browser (`browser`: default True, but False in a notebook, where the
    returned Page shows itself inline). Returns the Page.

    `f`: a ConcreteFunction, a loaded function (df.load_json), or a df.defun: the trace for
    `*args, **kwargs`, or its only trace when none are given. `backward`: draw its backward
    too. `profile`: a df.profile result to lay over the nodes, or True to profile the call
    on `args` now. `side_outputs`: SideOutputs rows (cf.side_outputs(),
    df.debugging.side_outputs(step, ...)) giving the side outputs' actual bytes, or True to
    measure them by one call on `args` under a tape.
    """
    cf = _concrete(f, args, kwargs)
    for name, value in (("profile", profile), ("side_outputs", side_outputs)):
        if value is True and not args and not kwargs:
            raise ValueError(f"view({name}=True) runs the function: give its arguments too")
    if profile is True:
        profile = run_profile(f, *args, **kwargs)
    if side_outputs is True:
        side_outputs = measure_side_outputs(f, *args, **kwargs)
    if profile is not None and not isinstance(profile, Profile):
        raise TypeError(f"view: profile must be a df.profile result or True, got {type(profile).__name__}")
    text = page_html(cf, backward=backward, profile=profile, side_outputs=side_outputs)
    if path is None:
        import tempfile    # only where a page is written without a path
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", cf.graph.name)
        path = os.path.join(tempfile.gettempdir(), f"defun-{safe}.html")
    path = os.path.abspath(os.fspath(path))
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
    if browser is None:
        browser = "ipykernel" not in sys.modules
    if browser:
        import webbrowser    # only when a page is opened
        webbrowser.open("file://" + path)
    return Page(path, text)


def measure_side_outputs(f, *args, **kwargs):
    """The side outputs one call of `f` on these arguments saves under a tape watching its
    floating inputs (SideOutputs rows with their actual shapes and bytes). The call runs."""
    tensors = [constant(a) if isinstance(a, np.ndarray) and a.dtype.kind in "fc" else a for a in args]

    def step():
        with GradientTape() as tape:
            for t in tensors:
                if isinstance(t, Tensor) and t.dtype.is_floating:
                    tape.watch(t)
            return f(*tensors, **kwargs)
    return recorded_side_outputs(step)


def _concrete(f, args, kwargs):
    if isinstance(f, (ConcreteFunction, LoadedFunction)):
        if args or kwargs:
            raise TypeError("view: arguments pick a trace of a df.defun; a concrete or loaded "
                            "function has one graph (give no arguments)")
        return f
    if isinstance(f, Function):
        if args or kwargs:
            return f.get_concrete_function(*args, **kwargs)
        traces = list(dict.fromkeys(f._cache.values()))
        if len(traces) == 1:
            return traces[0]
        raise TypeError(f"view: {f.python_function.__name__} has {len(traces)} traces: give example "
                        f"arguments (or TensorSpecs), or a concrete function")
    raise TypeError(f"view expects a df.defun, a ConcreteFunction or a loaded function "
                    f"(df.load_json), got {type(f).__name__}")


def page_html(f, backward=True, profile=None, side_outputs=None):
    """The page of a ConcreteFunction or loaded function as HTML text (see `view`)."""
    if isinstance(f, LoadedFunction):
        graph, names, outs = f.graph, [s.name for s in f.signature], f.output_names
    else:
        graph, names = f.graph, input_names(f)
        outs = output_names_of(f)
    note = ""
    bw = None
    if backward:
        try:
            bw = GraphFunction.of(graph).backward() if isinstance(f, LoadedFunction) else f._fn.backward()
        except errors.DefunError as e:      # nothing differentiable: the forward alone
            note = f"; no backward ({str(e).splitlines()[0]})"
    data = page_data(graph, bw, names, outs, profile=profile, side_outputs=side_outputs)
    data["summary"] += note
    return _fill(data)


def _fill(data):
    def read(name):
        with open(os.path.join(_HERE, name), encoding="utf-8") as src:
            return src.read()
    dagre = re.sub(r"\n//# sourceMappingURL=\S+\s*$", "\n", read("dagre.min.js"))
    from defun import __version__    # the package, not loaded when this module is imported
    parts = {"version": html.escape(__version__), "title": html.escape(data["title"]), "css": read("page.css"),
             "data": json.dumps(data, separators=(",", ":")).replace("<", "\\u003c"),
             "dagre": dagre, "page": read("page.js")}
    return re.sub(r"\{(version|title|css|data|dagre|page)\}", lambda m: parts[m.group(1)], read("page.html"))


def page_data(graph, backward=None, input_names=None, output_names=None, profile=None, side_outputs=None):
    """The page's graph as plain data: groups, nodes and edges (what page.js draws)."""
    p = _Page([graph] if backward is None else [graph, backward.graph])
    names = {id(t): input_names[k] for k, t in enumerate(graph.inputs)
             if input_names is not None and k < len(input_names)}
    outs = output_names if output_names is not None else [f"output {j}" for j in range(len(graph.outputs))]
    for j, t in enumerate(graph.outputs):
        if id(t) not in names or t.node.op.name != "placeholder":
            names.setdefault(id(t), outs[j])
    fname = p.function_name(graph)
    if backward is None:
        p.group("forward", f"@{fname}", None, "forward")
        p.function(graph, "forward", "forward/", names, top=True)
    else:
        _forward_and_backward(p, graph, backward, names, input_names, outs, side_outputs)
    steps = _lay_profile(p, profile)
    kind = "forward and backward" if backward is not None else "graph"
    summary = f"{kind} of @{fname}: {len(p.nodes)} nodes"
    if backward is not None:
        summary += f", {len(backward.side_outputs)} side outputs"
    if profile is not None:
        summary += (f"; profile: {_duration(profile.total_seconds / max(profile.repeat, 1))} per call "
                    f"in kernels over {profile.repeat} calls, {steps} of {len(profile)} steps on this graph")
    return {"title": fname, "summary": summary, "groups": p.groups, "nodes": p.nodes, "edges": p.edges}


def _forward_and_backward(p, graph, backward, names, input_names, outs, side_outputs):
    bw = backward.graph
    # by tensor name; a loaded function's rows are numbered (`side output k`), in the same order
    actual = {r.name: r.bytes for r in side_outputs or SideOutputs() if r.bytes is not None}
    side = {}
    for k, t in enumerate(backward.side_outputs):
        size = actual.get(t.name, actual.get(f"side output {k}", side_output_row(t, graph.name).bytes))
        side.setdefault(id(t), []).append((k, f"side output {k}" + (f" · {_bytes(size)}" if size is not None else ""),
                                           size))
    p.group("forward", f"forward @{p.function_name(graph)}", None, "forward")
    p.function(graph, "forward", "forward/", names, top=True, side=side)
    bnames = gradient_names(graph, backward, input_names, p.tensor_name)
    for t, j in zip(bw.inputs, backward.grad_outputs):    # seeds: the gradient of output j
        bnames[id(t)] = f"d {outs[j]}"
    reads = {}
    for (kind, v), ph in zip(backward.capture_sources, bw.captured_placeholders):
        if kind == "side":
            bnames[id(ph)] = f"side output {v}"
            reads[id(ph)] = v
        elif kind == "input":
            t = graph.all_inputs[v]
            bnames[id(ph)] = f"forward {names.get(id(t)) or p.shown.get(id(t)) or p.tensor_name(t)}"
    p.group("backward", f"backward @{p.function_name(bw)}", None, "backward")
    fed = {id(ph) for ph in bw.captured_placeholders if id(ph) in bnames}
    p.function(bw, "backward", "backward/", bnames, fed=fed, reads=reads)


def _lay_profile(p, profile):
    """Put each profile row on the top-level forward node it names; how many found one."""
    if profile is None:
        return 0
    by_name = {n["graph_name"]: n for n in p.nodes if n["g"] == "forward"}
    total = profile.total_seconds or 1.0
    found = 0
    for row in profile:
        n = by_name.get(row.node)
        if n is None:
            continue
        found += 1
        n["prof"] = {"share": row.seconds / total,
                     "text": f"{_duration(row.seconds / max(profile.repeat, 1))} · {100 * row.share:.1f}%",
                     "detail": f"{row.calls} calls, {_duration(row.seconds)} in all, {100 * row.share:.1f}% "
                               f"of the time (the profile's row {row.node}, {row.op})"}
    return found


def _bytes(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


class _Page(Naming):
    """The groups, nodes and edges of a page; node ids are paths of listing names
    (`forward/%8/body/%2`), as in the pictures."""

    def __init__(self, graphs):
        super().__init__(graphs)
        self.groups, self.nodes, self.edges = [], [], []
        self.shown = {}         # id(tensor) -> the name its input node shows
        self.variables = {}     # id(tensor) -> (title, type) of a variable's handle
        self.paths = {}         # group id -> its labels from the top, for the details panel

    def group(self, gid, label, parent, kind, owner=None, open_=True):
        path = self.paths[gid] = label if parent is None else f"{self.paths[parent]} › {label}"
        self.groups.append({"id": gid, "label": label, "parent": parent, "kind": kind, "owner": owner,
                            "open": open_, "path": path})

    def node(self, node, nid, gid, kind, title, notes, **more):
        site = getattr(node, "site", None)
        rec = {"id": nid, "g": gid, "name": self.node_name(node), "graph_name": node.name, "op": node.op.name,
               "kind": kind, "title": title, "notes": notes,
               "ir": self.ir_line(node), "site": f"{os.path.basename(site[0])}:{site[1]}" if site else None,
               "src": sites.source_line(site) if site else None,
               "attrs": [] if node.op.name == "placeholder" else
               [[k, format_attr(v, self.functions)] for k, v in sorted(node.attrs.items())],
               "outputs": [{"shape": bracket_shape(t.shape), "dtype": t.dtype.name} for t in node.outputs]}
        rec.update(more)
        self.nodes.append(rec)
        return rec

    def input_node(self, graph, node, captured, inputs, names):
        """(kind, title, type) of a placeholder or const node."""
        t0 = node.outputs[0]
        if node.op.name == "const":
            v = node.attrs.get("value")
            small = getattr(v, "size", 2) == 1
            return "const", format_attr(v.reshape(()) if small and v.ndim else v) if small else "const", _type(t0)
        value = captured.get(id(t0))
        if value is not None:
            label, _ = self.captured_text(value, self.shown)
            title, kind = label.split("\n")
            self.shown[id(t0)] = title
            if value.dtype.name == "resource":
                self.variables[id(t0)] = (title, kind)
                return "var", title, kind
            return "const" if getattr(value, "node", None) is None else "arg", title, kind
        if id(t0) in inputs:
            title, src = inputs[id(t0)]
            if id(src) in self.variables:
                self.variables[id(t0)] = self.variables[id(src)]
                self.shown[id(t0)] = self.variables[id(src)][0]
                return ("var",) + self.variables[id(src)]
            if id(src) in self.shown:        # a body inside this one names it as this one does
                self.shown[id(t0)] = self.shown[id(src)]
            return "arg", title, _type(t0)
        title = names.get(id(t0)) or (f"input {graph.all_inputs.index(t0)}" if t0 in graph.all_inputs
                                      else self.tensor_name(t0))
        if not title.startswith("input "):
            self.shown[id(t0)] = title
        return "arg", title, _type(t0)

    def function(self, graph, gid, prefix, names, fed=frozenset(), depth=0, inputs=None, top=False,
                 side=None, reads=None):
        """The nodes and edges of `graph` in group `gid` (see printer.to_dot's `function`)."""
        inputs, side, reads = inputs or {}, side or {}, reads or {}
        outputs = {id(t) for t in graph.outputs}
        captured = {id(ph): value for value, ph in graph.captures.values() if id(ph) not in fed}
        keep = used_inputs(graph) | ({id(t) for t in graph.inputs} if top else set())
        drawn = set()
        for node in graph.nodes:
            t0 = node.outputs[0] if node.outputs else None
            if node.op.name == "placeholder" and id(t0) not in keep:
                continue
            nid = prefix + self.node_name(node)
            drawn.add(id(node))
            notes = [f"→ {names[id(t)]}" for t in node.outputs if id(t) in names and
                     not (node.op.name == "placeholder" and id(t) not in outputs)]
            type_ = types_str(node.outputs)
            if node.op.name in ("placeholder", "const"):
                kind, title, type_ = self.input_node(graph, node, captured, inputs, names)
                if node.op.name == "placeholder" and notes and title == names.get(id(t0)):
                    notes = notes[1:]
            else:
                kind, funcs = "op", [node.attrs[k] for k in node.op.function_attrs if k in node.attrs]
                title = f"call @{self.function_name(funcs[0])}" if node.op.name == "call" and funcs else node.op.name
            saved = [row for t in node.outputs for row in side.get(id(t), ())]
            notes += [text for _, text, _ in saved]
            read = [reads[id(t)] for t in node.outputs if id(t) in reads]
            out = any(id(t) in outputs for t in node.outputs)
            rec = self.node(node, nid, gid, kind, title, notes, type=type_, out=out,
                            side=[k for k, _, _ in saved], saved_bytes=[b for _, _, b in saved], reads=read,
                            opens=None)
            if node.op.name != "placeholder" and function_bodies(node) and depth < _MAX_NESTING:
                rec["opens"] = self.bodies(node, nid, gid, depth)
        for node in graph.nodes:
            if id(node) not in drawn:
                continue
            for t in node.inputs:
                self.edges.append({"s": prefix + self.node_name(t.node), "t": prefix + self.node_name(node),
                                   "kind": "data", "tip": _type(t)})
            for c in node.control_inputs:
                self.edges.append({"s": prefix + self.node_name(c), "t": prefix + self.node_name(node),
                                   "kind": "ctrl", "tip": "runs after"})

    def bodies(self, node, nid, gid, depth):
        """The group of the functions `node` runs (closed at first), one group per function:
        its inputs named by what feeds them; `runs` edges from the node to the nodes that
        start it, which place it below the node (they are not drawn: one line joins them)."""
        here = self.node_name(node)
        group = nid + "/"
        self.group(group, f"{node.op.name} {here}", gid, _GROUP_KINDS.get(node.op.name, "call"),
                   owner=nid, open_=False)
        for key, k, g in function_bodies(node):
            sub = f"{nid}/{key}{'' if k is None else k}/"
            label = f"{key if k is None else f'{key} {k}'} @{self.function_name(g)}"
            self.group(sub, label, group, "branch" if node.op.name == "cond" else "body")
            names = {}
            for j, t in enumerate(g.outputs):     # a value returned twice: out 0, 1
                names[id(t)] = f"{names[id(t)]}, {j}" if id(t) in names else f"out {j}"
            self.function(g, sub, sub, names, depth=depth + 1,
                          inputs=self.body_input_names(node, g, self.shown) if body_inputs(node, g) else {})
            ids = {n["id"] for n in self.nodes if n["g"] == sub}
            fed = {e["t"] for e in self.edges if e["s"] in ids and e["t"] in ids}
            for target in sorted(ids - fed):        # the body hangs below the node running it
                self.edges.append({"s": nid, "t": target, "kind": "runs", "tip": f"{here} runs it"})
        return group


def _type(t):
    return type_str(t.shape, t.dtype)
