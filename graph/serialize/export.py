"""Export: a function graph (and every function it reaches) as a canonical JSON document."""
import copy
import json
import re

import numpy as np

from defun.runtime import attr_types, dtypes, errors, numerics
from defun.runtime.files import write_atomically
from defun.runtime.tensor import EagerTensor, ResourceHandle
from defun.runtime.variables import values_as_one_step
from defun.graph.input_gradients import DenseGrad
from defun.graph.serialize import schema as limits
from defun.graph.serialize.schema import (FORMAT, VERSION, encode_array, site_doc,
                                          encode_float, shape_doc)
from defun.graph.serialize.validate import check_structure

# =======================================================================================
# Export

def to_document(graph, output_structure=None, input_names=None, backward=0, sites=True):
    """The JSON-ready document of function `graph` (and every function it calls).

        doc = to_document(g, describe_structure(result), ["x", "y"])

    Captured eager tensors become constants; captured variables are exported by their
    current value. `output_structure` (see `describe_structure`) says how the flat outputs
    nest; by default a call returns a tuple. `input_names` name the arguments.

    `backward=k` (k >= 1) also writes the backward function of `graph`, the backward
    function of that one, and so on, k levels deep: each level's forward function is
    written with its side outputs after its results, and a `gradients` record says how to
    feed its backward. Each level must be built already (`graph.derived.backward`, which
    the defun layer fills).

    `sites=True` writes each node's source site as `"site": [base name, line]` (the file's
    directories are never written); `sites=False` leaves them out.
    """
    levels = _gradient_levels(graph, backward)
    # written functions with a role: the entry, then per level the backward function (with
    # its own side outputs when a deeper level follows)
    roots = [lv.view for lv in levels] + [levels[-1].backward.graph] if levels else [graph]
    functions = _reachable_functions(roots)
    own_name = {id(roots[0]): graph}
    own_name.update((id(r), lv.backward.graph) for r, lv in zip(roots[1:], levels))
    names = _unique([_sanitize(getattr(own_name.get(id(g), g), "base_name", g.name), "f")
                     for g in functions])
    fname_of = {id(g): n for g, n in zip(functions, names)}
    variables = _VariableTable(values_as_one_step(roots[0].captured_values))   # one step
    written = {}     # id(root) -> (function doc, Written)
    fdocs = []
    for g in functions:
        where = f"cannot export @{g.name}"
        feeds = None
        if g is roots[0]:
            params = _entry_params(g, input_names, variables, where)
        elif any(g is r for r in roots[1:]):
            k = next(i for i, r in enumerate(roots[1:]) if r is g)
            params, feeds = _backward_params(g, levels[k].backward, written[id(roots[k])][1], where)
        else:
            params = [("input", f"arg{k}") for k in range(len(g.all_inputs))]
        fdoc, info = _export_function(g, fname_of, params, variables, where, entry=(g is roots[0]),
                                      sites=sites)
        info.feeds = feeds
        written[id(g)] = (fdoc, info)
        fdocs.append(fdoc)
    n_out = len(graph.outputs)
    if output_structure is None:
        output_structure = {"tuple": [{"output": k} for k in range(n_out)]}
    check_structure(output_structure, "output_structure", n_out, 0, [0])
    doc = {"format": FORMAT, "version": VERSION, "entry": names[0], "functions": fdocs,
           "variables": variables.docs, "output_structure": copy.deepcopy(output_structure)}
    if levels:
        doc["gradients"] = [_record_doc(lv, fname_of[id(roots[k])], fname_of[id(roots[k + 1])],
                                        written[id(roots[k])][1], written[id(roots[k + 1])][1])
                            for k, lv in enumerate(levels)]
    return doc


class _Level:
    """One level of exported gradients: `forward` (a function graph), its `backward`
    (graph/gradients.py's Backward record) and `view` (forward with its side outputs)."""

    __slots__ = ("forward", "backward", "view")

    def __init__(self, forward, backward, view):
        self.forward, self.backward, self.view = forward, backward, view


def _gradient_levels(graph, depth):
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise errors.InvalidArgumentError(f"backward must be an int >= 0 (the levels of backward "
                                          f"functions to write), got {depth!r}")
    levels, g = [], graph
    for k in range(depth):
        pair = g.derived.backward
        if pair is None:
            raise errors.InvalidArgumentError(
                f"cannot export the backward of @{g.name}: it is not built (level {k + 1}); the "
                f"defun layer builds it (df.export_json(cf, include_backward=...))")
        b, view = pair
        levels.append(_Level(g, b, view))
        g = b.graph
    return levels


class _Written:
    """How a function was written: `positions[k]` is the document input standing for its
    k-th input (None when frozen into a const node); `items` maps id(node) to its item number;
    `feeds` (backward functions) says where each input after the seeds comes from."""

    __slots__ = ("positions", "items", "feeds", "frozen")

    def __init__(self, positions, items, frozen, feeds=None):
        self.positions, self.items, self.frozen, self.feeds = positions, items, frozen, feeds


def _entry_params(g, input_names, variables, where):
    """The entry's inputs: its arguments, then its captures (variables bound, eager tensors
    frozen into constants)."""
    if input_names is not None:
        input_names = list(input_names)
        if len(input_names) != len(g.inputs):
            raise errors.InvalidArgumentError(
                f"{where}: {len(input_names)} input names for {len(g.inputs)} inputs")
        names = [_sanitize(n, f"arg{k}") for k, n in enumerate(input_names)]
    else:
        names = [f"arg{k}" for k in range(len(g.inputs))]
    params = []
    for k, (t, name) in enumerate(zip(g.inputs, names)):
        if t.dtype is dtypes.resource:
            raise errors.InvalidArgumentError(
                f"{where}: argument {k} is a resource handle; capture the variable instead of "
                f"passing its handle")
        params.append(("input", name))
    for outer in g.captured_values:
        if isinstance(outer, ResourceHandle):
            params.append(("variable", variables.name_of(outer._value)))
        elif isinstance(outer, EagerTensor):
            params.append(("const", np.asarray(outer._value)))
        else:
            raise errors.InvalidArgumentError(
                f"{where}: it captures {getattr(outer, 'name', outer)!r} of an enclosing "
                f"function; only top-level functions can be exported")
    return params


def _backward_params(g, b, forward, where):
    """A backward function's inputs: one gradient per seeded result, then what it reads of
    its forward function (an input, or a side output), or of the world (frozen)."""
    params = [("input", f"grad_{k}") for k in b.grad_outputs]
    feeds = []
    for kind, v in b.capture_sources:
        if kind == "input" and forward.positions[v] is None:
            params.append(("const", forward.frozen[v]))   # a constant of the forward: frozen too
        elif kind in ("input", "side"):
            params.append(("input", f"{kind}_{v}"))
            feeds.append({kind: forward.positions[v] if kind == "input" else v})
        elif isinstance(v, EagerTensor) and not isinstance(v, ResourceHandle):
            params.append(("const", np.asarray(v._value)))
        else:
            raise errors.InvalidArgumentError(
                f"{where}: the backward function reads {getattr(v, 'name', type(v).__name__)!r}, "
                f"which is neither its forward function's input or side output nor a constant")
    if len(params) != len(g.all_inputs):
        raise errors.InvalidArgumentError(f"{where}: {len(g.all_inputs)} inputs, but its record "
                                          f"feeds {len(params)}")
    return params, feeds


def _record_doc(lv, fname, bname, fwd, bwd):
    """The `gradients` record of one level (the format is docs/format.md's "Gradients")."""
    b, n = lv.backward, len(lv.forward.outputs)
    side = _unique([f"{t.node.op.name}_{fwd.items[id(t.node)]}_{t.index}" for t in lv.view.outputs[n:]])
    grads = []
    for k, g in enumerate(b.input_grads):
        if fwd.positions[k] is None:
            continue        # a frozen constant: nobody asks for its gradient
        if g is None:
            grads.append(None)
        elif isinstance(g, DenseGrad):
            grads.append({"output": g.output})
        else:
            grads.append({"slices": [g.values, g.indices], "dense_shape": shape_doc(g.dense_shape)})
    return {"function": fname, "results": n, "side_outputs": side, "backward": bname,
            "seeds": list(b.grad_outputs), "feeds": bwd.feeds, "input_gradients": grads}


def describe_structure(structure, out_index=None):
    """The `output_structure` description of a nested result (list/tuple/dict of leaves).

    Leaves are numbered in flatten order (dict keys sorted); `out_index` gives each leaf's
    flat output index instead (an int, or None for a None leaf). A namedtuple keeps its type
    name and fields (a loaded function returns a namedtuple of that name and fields).

        describe_structure((y, {"a": z}))  # {"tuple": [{"output": 0}, {"dict": [["a", {"output": 1}]]}]}
        describe_structure(Stats(m, v))    # {"namedtuple": {"name": "Stats", "fields": [["mean", ...], ...]}}
        describe_structure(None)           # {"none": true}: the function returns None
    """
    leaves = iter(out_index) if out_index is not None else None
    counter = [0]

    def walk(s):
        if isinstance(s, dict):
            for k in s:
                if isinstance(k, bool) or not isinstance(k, (str, int)):
                    raise errors.InvalidArgumentError(
                        f"describe_structure: dict key {k!r} is not a str or int; JSON cannot hold it")
            return {"dict": [[k, walk(s[k])] for k in sorted(s)]}
        if isinstance(s, tuple) and hasattr(s, "_fields"):
            return {"namedtuple": {"name": type(s).__name__,
                                   "fields": [[f, walk(v)] for f, v in zip(s._fields, s)]}}
        if isinstance(s, (list, tuple)):
            return {"list" if isinstance(s, list) else "tuple": [walk(v) for v in s]}
        if leaves is not None:
            k = next(leaves)
            if k is None:
                return {"none": True}
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
                raise errors.InvalidArgumentError(
                    f"describe_structure: out_index holds {k!r}; expected an output index or None "
                    f"(a non-tensor result such as a Variable cannot be exported)")
            return {"output": int(k)}
        if s is None:
            return {"none": True}
        counter[0] += 1
        return {"output": counter[0] - 1}
    return walk(structure)


def output_names(structure, n_out):
    """A unique name per flat output, from an `output_structure` description: the dict keys
    and namedtuple fields on the way to it, joined by "." (positions in a list or tuple
    count only below a name); `output_k` for output k reached by no name (a lone tensor, a
    tuple of tensors). The JSON, ONNX, numpy-module and command-line names are these.

        output_names(describe_structure({"logits": a, "probs": b}), 2)   # ["logits", "probs"]
        output_names(describe_structure((a, {"aux": b})), 2)             # ["output_0", "output_1.aux"]
    """
    found = {}
    path = []

    def walk(s, named):
        (kind, value), = s.items()
        if kind == "output":
            if value not in found:
                found[value] = ".".join(path) if named else None
            return
        if kind in ("list", "tuple"):
            items = [(str(k), v) for k, v in enumerate(value)]
        elif kind == "dict":
            items, named = [(str(k), v) for k, v in value], True
        elif kind == "namedtuple":
            items, named = value["fields"], True
        else:
            return
        for k, v in items:
            path.append(k)
            walk(v, named)
            path.pop()
    walk(structure, False)
    names, taken, suffix = [], set(), {}
    for k in range(n_out):
        name = found.get(k)
        if name is not None and name[:1].isdigit():      # (a, {"aux": b}): output_1.aux
            name = f"output_{name}"
        name = name or f"output_{k}"
        if name in taken:             # {"a.b": x, "a": {"b": y}}: a.b, a.b_1
            base, j = name, suffix.get(name, 1)
            while name in taken:      # each base's suffixes counted on: linear in the names
                name, j = f"{base}_{j}", j + 1
            suffix[base] = j
        taken.add(name)
        names.append(name)
    return names


def _reachable_functions(roots):
    """`roots` in order, each followed by every function it reaches through func/funcs
    attrs that is not listed yet, breadth first."""
    found, seen, k = [], set(), 0
    for root in roots:
        if id(root) not in seen:
            seen.add(id(root))
            found.append(root)
        while k < len(found):
            g = found[k]
            k += 1
            for node in g.nodes:
                for name in sorted(node.attrs):
                    kind = node.op.attrs.get(name)
                    value = node.attrs[name]
                    callees = (value,) if kind == "func" else tuple(value) if kind == "funcs" else ()
                    for f in callees:
                        if id(f) not in seen:
                            seen.add(id(f))
                            found.append(f)
    if len(found) > limits.MAX_FUNCTIONS:
        raise errors.InvalidArgumentError(f"cannot export @{roots[0].name}: it reaches {len(found)} "
                                          f"functions, more than the format's {limits.MAX_FUNCTIONS}")
    return found


def _sanitize(name, default):
    """A name matching the format's name pattern (deterministic; valid names are unchanged)."""
    s = re.sub(r"[^A-Za-z0-9_./-]", "_", str(name) if name else default)
    if not re.match(r"[A-Za-z_]", s):
        s = "_" + s
    return s[:limits.MAX_NAME]


def _unique(names, taken=None):
    """`names` made unique in order: a repeat gets the first free suffix `_1`, `_2`, ...

    Adds the results to the set `taken` (names already in use) when given.
    """
    taken = set() if taken is None else taken
    out = []
    for n in names:
        cand, k = n, 1
        while cand in taken:
            suffix = f"_{k}"
            cand = n[:limits.MAX_NAME - len(suffix)] + suffix
            k += 1
        taken.add(cand)
        out.append(cand)
    return out


class _VariableTable:
    """Variables met while exporting: one entry per store, names made unique in order."""

    def __init__(self, values):
        self.docs = []
        self._by_store = {}
        self._taken = set()
        self._values = values       # id(store) -> its array, read as one step

    def name_of(self, store):
        name = self._by_store.get(id(store))
        if name is None:
            name, = _unique([_sanitize(store.name, "variable")], self._taken)
            self._by_store[id(store)] = name
            doc = encode_array(np.asarray(self._values[id(store)]))
            doc["name"] = name
            self.docs.append(doc)
        return name


def _export_function(g, fname_of, params, variables, where, entry, sites):
    """(function doc, _Written) of `g`, whose k-th input is written as `params[k]`:
    ("input", name), ("variable", name) (an input bound to that variable) or ("const",
    array) (frozen into a const node where its placeholder stands)."""
    if not g.finalized:
        raise errors.InvalidArgumentError(f"{where}: it is not finalized; call graph.finalize(outputs)")
    ids, inputs, frozen, positions = {}, [], {}, []
    taken = set()
    names = iter(_unique([p[1] for p in params if p[0] == "input"], taken))   # variables: below
    for t, (kind, value) in zip(g.all_inputs, params):
        if kind == "const":
            frozen[id(t.node)] = value
            positions.append(None)
            continue
        ids[id(t.node)] = len(inputs)
        positions.append(len(inputs))
        if kind == "variable":
            inputs.append({"name": _unique([value], taken)[0], "dtype": "resource", "shape": [],
                           "variable": value})
        else:
            inputs.append({"name": next(names), "dtype": t.dtype.name, "shape": shape_doc(t.shape)})
    nodes = []
    for node in g.nodes:
        if id(node) in ids:
            continue
        if id(node) in frozen:
            value = frozen[id(node)]
            ndoc = {"op": "const", "inputs": [], "attrs": {"value": encode_array(value)},
                    "control_inputs": [],
                    "outputs": [{"dtype": dtypes.from_numpy(value.dtype).name,
                                 "shape": list(value.shape)}]}
        elif node.op.name == "placeholder":
            raise errors.InvalidArgumentError(
                f"{where}: placeholder {node.name} is neither an argument nor a capture")
        else:
            ndoc = _export_node(node, ids, fname_of, where)
            site = site_doc(_user_site(node)) if sites else None
            if site is not None:
                ndoc["site"] = site
        ids[id(node)] = len(inputs) + len(nodes)
        nodes.append(ndoc)
    outputs = []
    for t in g.outputs:
        if entry and t.dtype is dtypes.resource:
            raise errors.InvalidArgumentError(f"{where}: it returns a resource handle")
        outputs.append({"ref": _ref_doc(t, ids, where), "dtype": t.dtype.name,
                        "shape": shape_doc(t.shape)})
    fdoc = {"name": fname_of[id(g)], "inputs": inputs, "nodes": nodes, "outputs": outputs}
    return fdoc, _Written(positions, ids, {k: p[1] for k, p in enumerate(params) if p[0] == "const"})


def _user_site(node):
    """A node's site as a document records it: for a node traced as a gradient, the site of
    the forward op whose gradient it computes (the line a user wrote; its own is where the
    backward was built, e.g. the export_json call), which check numerics names after loading."""
    forward = numerics.forward_site(node.graph.name, node.id)
    return forward[1] if forward is not None and forward[1] is not None else node.site


def _export_node(node, ids, fname_of, where):
    attrs = {}
    for name in sorted(node.attrs):
        kind = node.op.attrs.get(name)
        if kind is None:
            raise errors.InvalidArgumentError(
                f"{where}: node {node.name} ({node.op.name}) has attr {name!r}, which op "
                f"{node.op.name!r} does not declare, so it has no exported type")
        if kind == "transient" or _is_default(node.op, name, node.attrs[name]):
            continue    # a default is left out: the loader fills it in (canonical bytes)
        try:
            attrs[name] = attr_types.TYPES[kind].encode(node.attrs[name], _Writer(fname_of))
        except (TypeError, ValueError, KeyError) as e:
            raise errors.InvalidArgumentError(
                f"{where}: node {node.name} ({node.op.name}) attr {name!r} is not a valid "
                f"{kind}: {e}") from None
    controls = []
    for c in node.control_inputs:
        if id(c) not in ids:
            raise errors.InvalidArgumentError(f"{where}: node {node.name} has control input "
                                              f"{c.name}, which is not an earlier node")
        controls.append(ids[id(c)])
    doc = {"op": node.op.name, "inputs": [_ref_doc(t, ids, where) for t in node.inputs],
           "attrs": attrs, "control_inputs": controls,
           "outputs": [{"dtype": t.dtype.name, "shape": shape_doc(t.shape)} for t in node.outputs]}
    if node.stateful:
        doc["stateful"] = True     # left out when false
    return doc


def _is_default(op, name, value):
    if name not in op.defaults:
        return False
    d = op.defaults[name]
    return value is d or (type(value) is type(d) and value == d)


def _ref_doc(t, ids, where):
    k = ids.get(id(t.node))
    if k is None:
        raise errors.InvalidArgumentError(f"{where}: tensor {t.name} is not produced by an earlier "
                                          f"node of this function")
    return f"{k}:{t.index}"



class _Writer:
    """What attr_types needs from the exporter: floats, arrays and function names."""

    __slots__ = ("fname_of",)

    def __init__(self, fname_of):
        self.fname_of = fname_of

    float = staticmethod(encode_float)
    array = staticmethod(encode_array)

    def func(self, g):
        return self.fname_of[id(g)]


def dumps_document(doc):
    """The canonical text of `doc`: sorted keys, no spaces, ASCII; equal docs give equal text."""
    try:
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise errors.GraphFormatError(f"the document is not JSON-serializable: {e}") from None


def write_document(doc, path):
    """Write `doc`'s canonical bytes to `path` atomically (runtime/files.py: the old file
    untouched on failure, an existing file's mode kept, a missing directory named)."""
    return write_atomically(path, dumps_document(doc).encode("ascii"))
