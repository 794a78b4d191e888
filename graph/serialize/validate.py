"""Import, steps 1 and 2: parse the text, then validate the whole document (nothing built).

Validation checks every field before anything is built: names, ops, attrs (through the
attr-type table), references, acyclicity of nodes and calls, variables, output structure.
"""
import json
import os
from collections import namedtuple

from runtime import attr_types, dtypes, errors, registry
from runtime.ops.resource_ops import ASSIGN_OPS
from graph.serialize import schema as limits
from graph.serialize.schema import (FORMAT, READABLE_VERSIONS, VERSION, _FuncRef, _V1_STATEFUL_TWINS,
                                    _attr_path, _check_array, _check_dtype, _check_int,
                                    _check_list, _check_name, _check_ref, _check_shape,
                                    _check_str, _decode_array, _decode_float, _fields,
                                    _format_error, _kind, _show)

# =======================================================================================
# Import, step 1: parse

class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def _parse_text(text):
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except _DuplicateKey as e:
        raise errors.GraphFormatError(f"document: key {str(e)[:80]!r} appears twice in one object") from None
    except RecursionError:
        raise errors.GraphFormatError("document: JSON nested too deeply") from None
    except ValueError as e:   # JSONDecodeError, NaN/Infinity, integers too long to convert
        raise errors.GraphFormatError(f"document: not valid JSON: {e}") from None


def _read_document(path):
    with open(path, "rb") as f:
        raw = f.read(limits.MAX_DOCUMENT_BYTES + 1)
    if len(raw) > limits.MAX_DOCUMENT_BYTES:
        raise errors.GraphFormatError(f"document: {os.fspath(path)!r} is larger than "
                                      f"{limits.MAX_DOCUMENT_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise errors.GraphFormatError(f"document: not UTF-8 text: {e}") from None
    return _parse_text(text)



_InputSpec = namedtuple("_InputSpec", "name dtype shape variable value")
_NodeSpec = namedtuple("_NodeSpec", "path op inputs attrs outputs control stateful")
_FunctionSpec = namedtuple("_FunctionSpec", "path name inputs nodes outputs callees")


class _Context:
    """The validation state of one document; also the reader attr_types decodes with."""

    version = VERSION

    def __init__(self, variables):
        self.variables = variables   # name -> validated array
        self.bound = {}              # variable name -> input path
        self.budget = [0]            # bytes of array data so far
        self.total_nodes = 0
        self.callees = []            # (name, path) of func attrs in the current function

    # -- the reader's primitives (runtime/attr_types.py composes them)
    error = staticmethod(_format_error)
    kind = staticmethod(_kind)
    int = staticmethod(_check_int)
    float = staticmethod(_decode_float)
    str = staticmethod(_check_str)
    list = staticmethod(_check_list)
    dtype = staticmethod(_check_dtype)
    shape = staticmethod(_check_shape)

    def array(self, x, path):
        return _check_array(x, path, self.budget)

    def func(self, x, path):
        name = _check_name(x, path)
        self.callees.append((name, path))
        return _FuncRef(name)


def _validate(doc):
    """Check the whole document; returns (entry name, function specs by name, structure)."""
    if not isinstance(doc, dict):
        raise errors.GraphFormatError(f"document: expected a JSON object at the top level, got {_kind(doc)}")
    if "format" not in doc:
        raise _format_error("document", "missing field 'format'")
    if doc["format"] != FORMAT:
        raise _format_error("format", f"expected {FORMAT!r}, got {_show(doc['format'])}")
    if "version" not in doc:
        raise _format_error("document", "missing field 'version'")
    version = doc["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE_VERSIONS:
        raise _format_error("version", f"this loader reads versions "
                            f"{', '.join(map(str, READABLE_VERSIONS))}, got {_show(version)}")
    _fields(doc, "document", ("format", "version", "entry", "functions", "variables", "output_structure"))
    entry = _check_name(doc["entry"], "entry")

    ctx = _Context({})
    ctx.version = version
    for k, vdoc in enumerate(_check_list(doc["variables"], "variables")):
        path = f"variables[{k}]"
        _fields(vdoc, path, ("name", "dtype", "shape", "data"))
        name = _check_name(vdoc["name"], path + ".name")
        if name in ctx.variables:
            raise _format_error(path + ".name", f"a variable named {name!r} already exists")
        ctx.variables[name] = _decode_array(vdoc, path, ctx.budget)

    fdocs = _check_list(doc["functions"], "functions", limits.MAX_FUNCTIONS)
    names = {}
    for k, fdoc in enumerate(fdocs):
        _fields(fdoc, f"functions[{k}]", ("name", "inputs", "nodes", "outputs"))
        name = _check_name(fdoc["name"], f"functions[{k}].name")
        if name in names:
            raise _format_error(f"functions[{k}].name", f"a function named {name!r} already exists "
                                f"(functions[{names[name]}])")
        names[name] = k
    if entry not in names:
        raise _format_error("entry", f"no function named {entry!r}")
    specs = {}
    for k, fdoc in enumerate(fdocs):
        spec = _validate_function(fdoc, f"functions[{k}]", ctx, fdoc["name"] == entry)
        for callee, path in spec.callees:
            if callee not in names:
                raise _format_error(path, f"no function named {callee!r}")
        specs[spec.name] = spec
    for name in ctx.variables:
        if name not in ctx.bound:
            raise _format_error("variables", f"variable {name!r} is not used by the entry function")
    _check_calls(specs, entry)
    n_out = len(specs[entry].outputs)
    structure = doc["output_structure"]
    _check_structure(structure, "output_structure", n_out, 0, [0])
    return entry, specs, structure


def _validate_function(fdoc, path, ctx, is_entry):
    name = fdoc["name"]
    inputs, input_names = [], set()
    bound = {}   # input id -> the bound variable's value
    for k, idoc in enumerate(_check_list(fdoc["inputs"], path + ".inputs")):
        p = f"{path}.inputs[{k}]"
        _fields(idoc, p, ("name", "dtype", "shape"), ("variable",))
        iname = _check_name(idoc["name"], p + ".name")
        if iname in input_names:
            raise _format_error(p + ".name", f"an input named {iname!r} already exists")
        input_names.add(iname)
        dtype = _check_dtype(idoc["dtype"], p + ".dtype", allow_resource=True)
        shape = _check_shape(idoc["shape"], p + ".shape")
        var = value = None
        if "variable" in idoc:
            if not is_entry:
                raise _format_error(p + ".variable", "only the entry function binds variables; a "
                                    "called function receives them as inputs")
            var = _check_name(idoc["variable"], p + ".variable")
            if var not in ctx.variables:
                raise _format_error(p + ".variable", f"no variable named {var!r}")
            if var in ctx.bound:
                raise _format_error(p + ".variable", f"variable {var!r} is already bound by {ctx.bound[var]}")
            if dtype is not dtypes.resource or shape != ():
                raise _format_error(p, "an input bound to a variable has dtype \"resource\" and shape []")
            ctx.bound[var] = p
            bound[k] = value = ctx.variables[var]
        elif inputs and inputs[-1].variable is not None:
            raise _format_error(p, "arguments come before the inputs bound to variables")
        elif is_entry and dtype is dtypes.resource:
            raise _format_error(p + ".dtype", "an entry function argument cannot be a resource; "
                                "bind the input to a variable")
        inputs.append(_InputSpec(iname, dtype, shape, var, value))

    ndocs = _check_list(fdoc["nodes"], path + ".nodes", limits.MAX_NODES)
    ctx.total_nodes += len(ndocs)
    if ctx.total_nodes > limits.MAX_TOTAL_NODES:
        raise _format_error(path + ".nodes", f"the document has more than {limits.MAX_TOTAL_NODES} nodes")
    n_in = len(inputs)
    total = n_in + len(ndocs)
    ctx.callees = []
    nodes = []
    for j, ndoc in enumerate(ndocs):
        p = f"{path}.nodes[{j}]"
        _fields(ndoc, p, ("op", "inputs", "attrs", "outputs", "control_inputs"),
                ("stateful",) if ctx.version >= 2 else ())
        opname = _check_str(ndoc["op"], p + ".op", 64)
        if ctx.version == 1:
            opname = _V1_STATEFUL_TWINS.get(opname, opname)
        stateful = None     # version 1: whatever the op and its functions make it
        if ctx.version >= 2:
            stateful = ndoc.get("stateful", False)
            if stateful is not True and stateful is not False:
                raise _format_error(p + ".stateful", f"expected true or false, got {_kind(stateful)}")
        if opname == "placeholder" or not registry.exists(opname):
            raise _format_error(p + ".op", f"unknown op {_show(opname)}")
        op = registry.get(opname)
        refs = [_check_ref(r, f"{p}.inputs[{i}]", total)
                for i, r in enumerate(_check_list(ndoc["inputs"], p + ".inputs"))]
        adoc = ndoc["attrs"]
        if not isinstance(adoc, dict):
            raise _format_error(p + ".attrs", f"expected object, got {_kind(adoc)}")
        attrs = {}
        for key in adoc:
            kind = op.attrs.get(key) if isinstance(key, str) else None
            ap = _attr_path(p + ".attrs", key)
            if kind is None:
                declared = ", ".join(sorted(op.attrs)) or "none"
                raise _format_error(ap, f"op {opname!r} has no attr {_show(key)} (it declares: {declared})")
            if kind == "transient":
                raise _format_error(ap, "a transient attr is never exported; remove it")
            attrs[key] = attr_types.TYPES[kind].decode(adoc[key], ap, ctx)
        for key in sorted(op.required_attrs - attrs.keys()):
            raise _format_error(p + ".attrs", f"op {opname!r} needs attr {key!r} "
                                f"({op.attrs[key]}), which is missing")
        outputs = []
        for i, odoc in enumerate(_check_list(ndoc["outputs"], p + ".outputs")):
            op_ = f"{p}.outputs[{i}]"
            _fields(odoc, op_, ("dtype", "shape"))
            outputs.append((_check_shape(odoc["shape"], op_ + ".shape"),
                            _check_dtype(odoc["dtype"], op_ + ".dtype", allow_resource=True)))
        controls = {}   # ordered, with O(1) repeats check
        for i, c in enumerate(_check_list(ndoc["control_inputs"], p + ".control_inputs")):
            cp = f"{p}.control_inputs[{i}]"
            c = _check_int(c, cp, 0)
            if c >= total:
                raise _format_error(cp, f"there is no node {c}")
            if c < n_in:
                raise _format_error(cp, f"{c} is an input; control inputs are nodes")
            if c in controls:
                raise _format_error(cp, f"node {c} is listed twice")
            controls[c] = None
        if opname == "read_variable" or opname in ASSIGN_OPS:
            _check_variable_attrs(refs, attrs, bound, p)
        nodes.append(_NodeSpec(p, op, refs, attrs, outputs, list(controls), stateful))

    _check_acyclic(nodes, n_in, path)
    counts = [1] * n_in + [len(n.outputs) for n in nodes]
    types = [[(s.shape, s.dtype)] for s in inputs] + [n.outputs for n in nodes]
    for j, node in enumerate(nodes):
        for i, (k, idx) in enumerate(node.inputs):
            if idx >= counts[k]:
                raise _format_error(f"{node.path}.inputs[{i}]", f"node {k} has {counts[k]} outputs, "
                                    f"there is no output {idx}")
    outputs = []
    for i, odoc in enumerate(_check_list(fdoc["outputs"], path + ".outputs")):
        p = f"{path}.outputs[{i}]"
        _fields(odoc, p, ("ref", "dtype", "shape"))
        k, idx = _check_ref(odoc["ref"], p + ".ref", total)
        if idx >= counts[k]:
            raise _format_error(p + ".ref", f"node {k} has {counts[k]} outputs, there is no output {idx}")
        dtype = _check_dtype(odoc["dtype"], p + ".dtype", allow_resource=not is_entry)
        shape = _check_shape(odoc["shape"], p + ".shape")
        if types[k][idx] != (shape, dtype):
            raise _format_error(p, f"declared {dtype.name}{list(shape)} but {odoc['ref']!r} is "
                                f"{types[k][idx][1].name}{list(types[k][idx][0])}")
        outputs.append((k, idx))
    return _FunctionSpec(path, name, inputs, nodes, outputs, list(ctx.callees))


def _check_variable_attrs(refs, attrs, bound, path):
    """A read/assign of a variable-bound input must declare the variable's dtype and shape."""
    if not refs or refs[0][0] not in bound:
        return
    value = bound[refs[0][0]]
    want = (dtypes.from_numpy(value.dtype), tuple(value.shape))
    got = (attrs.get("dtype"), attrs.get("shape"))
    if got != want:
        raise _format_error(path + ".attrs", f"the variable holds {want[0].name}{list(want[1])}, the "
                            f"node declares dtype {getattr(got[0], 'name', None)} and shape {got[1]}")


def _check_acyclic(nodes, n_in, path):
    """Every reference points to an earlier node; a cycle is named (networkx) when found."""
    forward = [(k, n_in + j) for j, n in enumerate(nodes)
               for k in [r[0] for r in n.inputs] + n.control if k >= n_in + j]
    if not forward:
        return
    import networkx as nx
    g = nx.DiGraph()
    for j, n in enumerate(nodes):
        for k in [r[0] for r in n.inputs] + n.control:
            g.add_edge(k, n_in + j)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        k, me = forward[0]
        raise _format_error(nodes[me - n_in].path, f"refers to node {k}, which comes after it; nodes "
                            f"are listed in topological order") from None
    text = " -> ".join(str(u) for u, _ in cycle) + f" -> {cycle[0][0]}"
    raise _format_error(path + ".nodes", f"the nodes form a cycle: {text}")


def call_graph_of(specs):
    """The networkx DiGraph of function calls: an edge from each caller to each callee."""
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(specs)
    for name, spec in specs.items():
        for callee, _ in spec.callees:
            g.add_edge(name, callee)
    return g


def _check_calls(specs, entry):
    """Function calls form no cycle, and every function is reachable from the entry."""
    import networkx as nx
    g = call_graph_of(specs)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        text = " -> ".join(u for u, _ in cycle) + f" -> {cycle[0][0]}"
        raise _format_error("functions", f"function calls form a cycle: {text}")
    reachable = nx.descendants(g, entry) | {entry}
    for name, spec in specs.items():
        if name not in reachable:
            raise _format_error(spec.path, f"function {name!r} is not called from the entry {entry!r}")


def _check_structure(s, path, n_out, depth, leaves):
    if depth > limits.MAX_STRUCTURE_DEPTH:
        raise _format_error(path, f"nested deeper than {limits.MAX_STRUCTURE_DEPTH}")
    leaves[0] += 1
    if leaves[0] > limits.MAX_LIST:
        raise _format_error(path, f"more than {limits.MAX_LIST} entries")
    if not isinstance(s, dict) or len(s) != 1:
        raise _format_error(path, "expected an object with one key: 'output', 'none', 'list', "
                            "'tuple' or 'dict'")
    (key, value), = s.items()
    if key == "none":
        if value is not True:
            raise _format_error(path + ".none", f"expected true, got {_kind(value)}")
    elif key == "output":
        if n_out == 0:
            raise _format_error(path + ".output", "the function has no outputs")
        _check_int(value, path + ".output", 0, n_out - 1)
    elif key in ("list", "tuple"):
        for k, v in enumerate(_check_list(value, f"{path}.{key}")):
            _check_structure(v, f"{path}.{key}[{k}]", n_out, depth + 1, leaves)
    elif key == "dict":
        seen = set()
        for k, item in enumerate(_check_list(value, path + ".dict")):
            p = f"{path}.dict[{k}]"
            if not isinstance(item, list) or len(item) != 2:
                raise _format_error(p, "expected [key, value]")
            if isinstance(item[0], bool) or not isinstance(item[0], (str, int)):
                raise _format_error(p, f"a key is a str or int, got {_kind(item[0])}")
            if isinstance(item[0], str):
                _check_str(item[0], p, limits.MAX_NAME)
            if item[0] in seen:
                raise _format_error(p, f"key {_show(item[0])} repeats")
            seen.add(item[0])
            _check_structure(item[1], p + "[1]", n_out, depth + 1, leaves)
    else:
        raise _format_error(path, f"unknown structure kind {_show(key)}")


# =======================================================================================
# Import, step 3: build graphs (callees first), verify, compile

