"""Export: a function graph (and every function it reaches) as a canonical JSON document."""
import copy
import json
import os
import re
import tempfile

import numpy as np

from runtime import attr_types, dtypes, errors
from runtime.tensor import EagerTensor, ResourceHandle
from graph.serialize import schema as limits
from graph.serialize.schema import (FORMAT, VERSION, _encode_array,
                                    _encode_float, _shape_doc)
from graph.serialize.validate import _check_structure

# =======================================================================================
# Export

def to_document(graph, output_structure=None, input_names=None):
    """The JSON-ready document of function `graph` (and every function it calls).

        doc = to_document(g, describe_structure(result), ["x", "y"])

    Captured eager tensors become constants; captured variables are exported by their
    current value. `output_structure` (see `describe_structure`) says how the flat outputs
    nest; by default a call returns a tuple. `input_names` name the arguments.
    """
    functions = _reachable_functions(graph)
    names = _unique([_sanitize(getattr(g, "base_name", g.name), "f") for g in functions])
    fname_of = {id(g): n for g, n in zip(functions, names)}
    variables = _VariableTable()
    fdocs = [_export_function(g, fname_of, variables, entry=(g is graph), input_names=input_names)
             for g in functions]
    n_out = len(graph.outputs)
    if output_structure is None:
        output_structure = {"tuple": [{"output": k} for k in range(n_out)]}
    _check_structure(output_structure, "output_structure", n_out, 0, [0])
    return {"format": FORMAT, "version": VERSION, "entry": names[0], "functions": fdocs,
            "variables": variables.docs, "output_structure": copy.deepcopy(output_structure)}


def describe_structure(structure, out_index=None):
    """The `output_structure` description of a nested result (list/tuple/dict of leaves).

    Leaves are numbered in flatten order (dict keys sorted); `out_index` gives each leaf's
    flat output index instead (an int, or None for a None leaf). Namedtuples become tuples.

        describe_structure((y, {"a": z}))  # {"tuple": [{"output": 0}, {"dict": [["a", {"output": 1}]]}]}
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


def _reachable_functions(graph):
    """`graph` and every function reachable through func/funcs attrs, breadth first."""
    found, seen = [graph], {id(graph)}
    for g in found:   # grows while iterating
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
        raise errors.InvalidArgumentError(f"cannot export @{graph.name}: it reaches {len(found)} "
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

    def __init__(self):
        self.docs = []
        self._by_store = {}
        self._taken = set()

    def name_of(self, store):
        name = self._by_store.get(id(store))
        if name is None:
            name, = _unique([_sanitize(store.name, "variable")], self._taken)
            self._by_store[id(store)] = name
            doc = _encode_array(np.asarray(store.value))
            doc["name"] = name
            self.docs.append(doc)
        return name


def _export_function(g, fname_of, variables, entry, input_names):
    where = f"cannot export @{g.name}"
    if not g.finalized:
        raise errors.InvalidArgumentError(f"{where}: it is not finalized; call graph.finalize(outputs)")
    ids = {}
    inputs = []
    frozen = {}   # placeholder node id -> captured eager value (becomes a const node)
    params = g.inputs if entry else g.all_inputs
    if entry and input_names is not None:
        input_names = list(input_names)
        if len(input_names) != len(g.inputs):
            raise errors.InvalidArgumentError(
                f"{where}: {len(input_names)} input names for {len(g.inputs)} inputs")
        arg_names = [_sanitize(n, f"arg{k}") for k, n in enumerate(input_names)]
    else:
        arg_names = [f"arg{k}" for k in range(len(params))]
    taken = set()
    arg_names = _unique(arg_names, taken)
    for k, t in enumerate(params):
        if entry and t.dtype is dtypes.resource:
            raise errors.InvalidArgumentError(
                f"{where}: argument {k} is a resource handle; capture the variable instead of "
                f"passing its handle")
        ids[id(t.node)] = len(inputs)
        inputs.append({"name": arg_names[k], "dtype": t.dtype.name, "shape": _shape_doc(t.shape)})
    if entry:
        for outer, ph in (g.captures[i] for i in g.capture_order):
            if isinstance(outer, ResourceHandle):
                name = variables.name_of(outer._value)
                ids[id(ph.node)] = len(inputs)
                inputs.append({"name": _unique([name], taken)[0], "dtype": "resource", "shape": [],
                               "variable": name})
            elif isinstance(outer, EagerTensor):
                frozen[id(ph.node)] = np.asarray(outer._value)
            else:
                raise errors.InvalidArgumentError(
                    f"{where}: it captures {getattr(outer, 'name', outer)!r} of an enclosing "
                    f"function; only top-level functions can be exported")
    nodes = []
    for node in g.nodes:
        if id(node) in ids:
            continue
        if id(node) in frozen:
            value = frozen[id(node)]
            ndoc = {"op": "const", "inputs": [], "attrs": {"value": _encode_array(value)},
                    "control_inputs": [],
                    "outputs": [{"dtype": dtypes.from_numpy(value.dtype).name,
                                 "shape": list(value.shape)}]}
        elif node.op.name == "placeholder":
            raise errors.InvalidArgumentError(
                f"{where}: placeholder {node.name} is neither an argument nor a capture")
        else:
            ndoc = _export_node(node, ids, fname_of, where)
        ids[id(node)] = len(inputs) + len(nodes)
        nodes.append(ndoc)
    outputs = []
    for t in g.outputs:
        if entry and t.dtype is dtypes.resource:
            raise errors.InvalidArgumentError(f"{where}: it returns a resource handle")
        outputs.append({"ref": _ref_doc(t, ids, where), "dtype": t.dtype.name,
                        "shape": _shape_doc(t.shape)})
    return {"name": fname_of[id(g)], "inputs": inputs, "nodes": nodes, "outputs": outputs}


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
           "outputs": [{"dtype": t.dtype.name, "shape": _shape_doc(t.shape)} for t in node.outputs]}
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

    float = staticmethod(_encode_float)
    array = staticmethod(_encode_array)

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
    """Write `doc`'s canonical bytes to `path` atomically (temp file + rename).

    On any failure the previous file (if any) is untouched and no temp file remains.
    """
    data = dumps_document(doc).encode("ascii")
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".json.tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


