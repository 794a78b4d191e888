"""Import, steps 1 and 2: parse the text, then validate the whole document (nothing built).

Validation checks every field before anything is built: names, ops, attrs (through the
attr-type table), references, acyclicity of nodes and calls, variables, output structure.
The walk is all here, top down (document, gradient records, functions, nodes, calls,
output structure); the checks of one value each are schema.py's.
The module is long because it is that one pass over every field of the format.
"""
import heapq
import json
import os
from collections import namedtuple

from defun.runtime import attr_types, dtypes, errors, registry
from defun.runtime.ops.resource_ops import ASSIGN_OPS
from defun.graph.input_gradients import DenseGrad, SlicesGrad
from defun.graph.serialize import schema as limits     # the limits, read when used (tests lower them)
from defun.graph.serialize.schema import (ALL_DTYPES, FORMAT, READABLE_VERSIONS, REF_PATTERN,
                                          V1_STATEFUL_TWINS, VERSION, FuncRef, attr_path, check_site,
                                          check_array, check_dtype, check_fields, check_identifier,
                                          check_int, check_list, check_name, check_ref, check_shape,
                                          check_str, decode_array, decode_float, format_error,
                                          kind_of, quote)

__all__ = ["read_document", "validate_document", "check_structure", "callees_first", "call_graph_of"]

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
    except MemoryError:
        raise errors.GraphFormatError("document: too large to parse in memory") from None
    except ValueError as e:   # JSONDecodeError, NaN/Infinity, integers too long to convert
        raise errors.GraphFormatError(f"document: not valid JSON: {e}") from None


def read_document(path):
    """The parsed JSON of the file at `path` (at most MAX_DOCUMENT_BYTES of UTF-8 text)."""
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
_NodeSpec = namedtuple("_NodeSpec", "path op inputs attrs outputs control stateful site")
_FunctionSpec = namedtuple("_FunctionSpec", "path name inputs nodes outputs output_types callees")
# A `gradients` record (docs/format.md, "Gradients"): feeds are ("input", k) / ("side", j);
# input_grads per input of `function`: None, DenseGrad(j) or SlicesGrad(jv, ji, dense_shape).
_GradientSpec = namedtuple("_GradientSpec", "path function results side_names backward seeds feeds input_grads")


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
    error = staticmethod(format_error)
    kind = staticmethod(kind_of)
    int = staticmethod(check_int)
    float = staticmethod(decode_float)
    str = staticmethod(check_str)
    list = staticmethod(check_list)
    dtype = staticmethod(check_dtype)
    shape = staticmethod(check_shape)

    def array(self, x, path):
        return check_array(x, path, self.budget)

    def func(self, x, path):
        name = check_name(x, path)
        self.callees.append((name, path))
        return FuncRef(name)


def validate_document(doc):
    """Check the whole document; returns (entry name, function specs by name, structure,
    gradient records)."""
    if not isinstance(doc, dict):
        raise errors.GraphFormatError(f"document: expected a JSON object at the top level, got {kind_of(doc)}")
    if "format" not in doc:
        raise format_error("document", "missing field 'format'")
    if doc["format"] != FORMAT:
        raise format_error("format", f"expected {FORMAT!r}, got {quote(doc['format'])}")
    if "version" not in doc:
        raise format_error("document", "missing field 'version'")
    version = doc["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE_VERSIONS:
        raise format_error("version", f"this loader reads versions "
                           f"{', '.join(map(str, READABLE_VERSIONS))}, got {quote(version)}")
    check_fields(doc, "document", ("format", "version", "entry", "functions", "variables", "output_structure"),
            ("gradients",) if version >= 2 else ())
    entry = check_name(doc["entry"], "entry")

    ctx = _Context({})
    ctx.version = version
    for k, vdoc in enumerate(check_list(doc["variables"], "variables")):
        path = f"variables[{k}]"
        check_fields(vdoc, path, ("name", "dtype", "shape", "data"))
        name = check_name(vdoc["name"], path + ".name")
        if name in ctx.variables:
            raise format_error(path + ".name", f"a variable named {name!r} already exists")
        ctx.variables[name] = decode_array(vdoc, path, ctx.budget)

    fdocs = check_list(doc["functions"], "functions", limits.MAX_FUNCTIONS)
    names = {}
    for k, fdoc in enumerate(fdocs):
        check_fields(fdoc, f"functions[{k}]", ("name", "inputs", "nodes", "outputs"))
        name = check_name(fdoc["name"], f"functions[{k}].name")
        if name in names:
            raise format_error(f"functions[{k}].name", f"a function named {name!r} already exists "
                               f"(functions[{names[name]}])")
        names[name] = k
    if entry not in names:
        raise format_error("entry", f"no function named {entry!r}")
    specs = {}
    for k, fdoc in enumerate(fdocs):
        spec = _validate_function(fdoc, f"functions[{k}]", ctx, fdoc["name"] == entry)
        for callee, path in spec.callees:
            if callee not in names:
                raise format_error(path, f"no function named {callee!r}")
        specs[spec.name] = spec
    for name in ctx.variables:
        if name not in ctx.bound:
            raise format_error("variables", f"variable {name!r} is not used by the entry function")
    gradients = _validate_gradients(doc.get("gradients", []), specs)
    _check_calls(specs, [entry] + [g.backward for g in gradients])
    record = next((g for g in gradients if g.function == entry), None)
    n_out = len(specs[entry].outputs) if record is None else record.results
    structure = doc["output_structure"]
    check_structure(structure, "output_structure", n_out, 0, [0])
    return entry, specs, structure, gradients


# ---------------------------------------------------------------------------------------
# Gradient records: a function's backward and how to feed it

def _validate_gradients(gdocs, specs):
    records = {}
    for k, gdoc in enumerate(check_list(gdocs, "gradients", limits.MAX_FUNCTIONS)):
        p = f"gradients[{k}]"
        check_fields(gdoc, p, ("function", "results", "side_outputs", "backward", "seeds", "feeds",
                               "input_gradients"))
        fname = check_name(gdoc["function"], p + ".function")
        bname = check_name(gdoc["backward"], p + ".backward")
        for name, field in ((fname, "function"), (bname, "backward")):
            if name not in specs:
                raise format_error(f"{p}.{field}", f"no function named {name!r}")
        if fname in records:
            raise format_error(p + ".function", f"function {fname!r} already has a record "
                               f"({records[fname].path})")
        if bname == fname:
            raise format_error(p + ".backward", "a function is not its own backward")
        f, b = specs[fname], specs[bname]
        results = check_int(gdoc["results"], p + ".results", 0, len(f.outputs))
        n_side = len(f.outputs) - results
        sides = check_list(gdoc["side_outputs"], p + ".side_outputs")
        if len(sides) != n_side:
            raise format_error(p + ".side_outputs", f"{len(sides)} names for the {n_side} outputs "
                               f"of {fname!r} after its {results} results")
        side_names = [check_name(x, f"{p}.side_outputs[{j}]") for j, x in enumerate(sides)]
        if len(set(side_names)) != len(side_names):
            raise format_error(p + ".side_outputs", "the names repeat")
        seeds = [check_int(x, f"{p}.seeds[{j}]", 0, results - 1)
                 for j, x in enumerate(check_list(gdoc["seeds"], p + ".seeds", results))]
        if len(set(seeds)) != len(seeds):
            raise format_error(p + ".seeds", "a result is seeded twice")
        feeds = _record_feeds(gdoc["feeds"], p, f, n_side)
        _check_backward_inputs(p, f, b, seeds, feeds, results)
        grads = check_list(gdoc["input_gradients"], p + ".input_gradients")
        if len(grads) != len(f.inputs):
            raise format_error(p + ".input_gradients", f"{len(grads)} entries for the "
                               f"{len(f.inputs)} inputs of {fname!r}")
        input_grads = [_input_gradient(x, f"{p}.input_gradients[{j}]", f.inputs[j], b)
                       for j, x in enumerate(grads)]
        records[fname] = _GradientSpec(p, fname, results, side_names, bname, seeds, feeds, input_grads)
    for r in records.values():       # a backward's gradients are among its results
        inner = records.get(r.backward)
        if inner is not None:
            used = [j for g in r.input_grads if g is not None
                    for j in ((g.output,) if isinstance(g, DenseGrad) else (g.values, g.indices))]
            if any(j >= inner.results for j in used):
                raise format_error(r.path + ".input_gradients", f"refers to an output of "
                                   f"{r.backward!r} past its {inner.results} results")
    return list(records.values())


def _record_feeds(fdocs, p, f, n_side):
    """A gradient record's feeds: ("input", k) of forward `f`, or ("side", j) of its side outputs."""
    feeds = []
    for j, fd in enumerate(check_list(fdocs, p + ".feeds")):
        fp = f"{p}.feeds[{j}]"
        if not isinstance(fd, dict) or len(fd) != 1 or next(iter(fd)) not in ("input", "side"):
            raise format_error(fp, "expected {\"input\": k} or {\"side\": j}")
        (kind, v), = fd.items()
        hi = len(f.inputs) - 1 if kind == "input" else n_side - 1
        feeds.append((kind, check_int(v, f"{fp}.{kind}", 0, hi)))
    return feeds


def _check_backward_inputs(p, f, b, seeds, feeds, results):
    """Backward `b` takes what record `p` gives it: the seeded results' gradients (floating
    results only), then the feeds, each of its type."""
    want = [f.output_types[s] for s in seeds]
    want += [(f.inputs[v].shape, f.inputs[v].dtype) if kind == "input" else f.output_types[results + v]
             for kind, v in feeds]
    if len(b.inputs) != len(want):
        raise format_error(p + ".feeds", f"backward {b.name!r} takes {len(b.inputs)} inputs; "
                           f"the record gives {len(seeds)} gradients and {len(feeds)} feeds")
    for j, ((shape, dtype), s) in enumerate(zip(want, b.inputs)):
        if (s.shape, s.dtype) != (shape, dtype):
            raise format_error(f"{b.path}.inputs[{j}]", f"is {s.dtype.name}{list(s.shape)}, but "
                               f"{p} feeds it {dtype.name}{list(shape)}")
    for s in seeds:
        if not f.output_types[s][1].is_inexact:
            raise format_error(p + ".seeds", f"result {s} of {f.name!r} is not floating; only "
                               f"floating results take gradients")


def _input_gradient(x, path, inp, b):
    """One input's gradient: null, {"output": j} or {"slices": [jv, ji], "dense_shape": [...]}."""
    if x is None:
        return None
    if not isinstance(x, dict) or set(x) not in ({"output"}, {"slices", "dense_shape"}):
        raise format_error(path, "expected null, {\"output\": j} or {\"slices\": [jv, ji], "
                           "\"dense_shape\": [...]}")
    want = None if inp.dtype is dtypes.resource else inp.dtype
    if "output" in x:
        j = check_int(x["output"], path + ".output", 0, len(b.outputs) - 1)
        dtype = b.output_types[j][1]
        if (want is not None and dtype is not want) or not dtype.is_inexact:
            raise format_error(path + ".output", f"output {j} of {b.name!r} is {dtype.name}, not a "
                               f"gradient for a {inp.dtype.name} input")
        return DenseGrad(j)
    pair = check_list(x["slices"], path + ".slices", 2)
    if len(pair) != 2:
        raise format_error(path + ".slices", "expected [values output, indices output]")
    jv, ji = (check_int(v, f"{path}.slices[{i}]", 0, len(b.outputs) - 1) for i, v in enumerate(pair))
    if not b.output_types[jv][1].is_inexact or b.output_types[ji][1] not in (dtypes.int32, dtypes.int64):
        raise format_error(path + ".slices", "expected a floating values output and an int32/int64 "
                           "indices output")
    return SlicesGrad(jv, ji, check_shape(x["dense_shape"], path + ".dense_shape"))


def _function_inputs(fdoc, path, ctx, is_entry):
    """A function's inputs (_InputSpec), and {input position: value} of those bound to
    variables (the entry function's, after its arguments)."""
    inputs, input_names = [], set()
    bound = {}   # input position -> the bound variable's value
    for k, idoc in enumerate(check_list(fdoc["inputs"], path + ".inputs")):
        p = f"{path}.inputs[{k}]"
        check_fields(idoc, p, ("name", "dtype", "shape"), ("variable",))
        iname = check_name(idoc["name"], p + ".name")
        if iname in input_names:
            raise format_error(p + ".name", f"an input named {iname!r} already exists")
        input_names.add(iname)
        dtype = check_dtype(idoc["dtype"], p + ".dtype", allow_resource=True)
        shape = check_shape(idoc["shape"], p + ".shape")
        var = value = None
        if "variable" in idoc:
            if not is_entry:
                raise format_error(p + ".variable", "only the entry function binds variables; a "
                                   "called function receives them as inputs")
            var = check_name(idoc["variable"], p + ".variable")
            if var not in ctx.variables:
                raise format_error(p + ".variable", f"no variable named {var!r}")
            if var in ctx.bound:
                raise format_error(p + ".variable", f"variable {var!r} is already bound by {ctx.bound[var]}")
            if dtype is not dtypes.resource or shape != ():
                raise format_error(p, "an input bound to a variable has dtype \"resource\" and shape []")
            ctx.bound[var] = p
            bound[k] = value = ctx.variables[var]
        elif inputs and inputs[-1].variable is not None:
            raise format_error(p, "arguments come before the inputs bound to variables")
        elif is_entry and dtype is dtypes.resource:
            raise format_error(p + ".dtype", "an entry function argument cannot be a resource; "
                               "bind the input to a variable")
        inputs.append(_InputSpec(iname, dtype, shape, var, value))
    return inputs, bound


def _validate_function(fdoc, path, ctx, is_entry):
    name = fdoc["name"]
    inputs, bound = _function_inputs(fdoc, path, ctx, is_entry)

    ndocs = check_list(fdoc["nodes"], path + ".nodes", limits.MAX_NODES)
    ctx.total_nodes += len(ndocs)
    if ctx.total_nodes > limits.MAX_TOTAL_NODES:
        raise format_error(path + ".nodes", f"the document has more than {limits.MAX_TOTAL_NODES} nodes")
    n_in = len(inputs)
    total = n_in + len(ndocs)
    ctx.callees = []
    nodes = []
    for j, ndoc in enumerate(ndocs):
        p = f"{path}.nodes[{j}]"
        spec = _plain_node(ndoc, p, ctx, total)
        nodes.append(spec if spec is not None else _checked_node(ndoc, p, ctx, total, n_in, bound))

    _check_acyclic(nodes, n_in, path)
    counts = [1] * n_in + [len(n.outputs) for n in nodes]
    types = [[(s.shape, s.dtype)] for s in inputs] + [n.outputs for n in nodes]
    for j, node in enumerate(nodes):
        for i, (k, idx) in enumerate(node.inputs):
            if idx >= counts[k]:
                raise format_error(f"{node.path}.inputs[{i}]", f"node {k} has {counts[k]} outputs, "
                                   f"there is no output {idx}")
    outputs, output_types = [], []
    for i, odoc in enumerate(check_list(fdoc["outputs"], path + ".outputs")):
        p = f"{path}.outputs[{i}]"
        check_fields(odoc, p, ("ref", "dtype", "shape"))
        k, idx = check_ref(odoc["ref"], p + ".ref", total)
        if idx >= counts[k]:
            raise format_error(p + ".ref", f"node {k} has {counts[k]} outputs, there is no output {idx}")
        dtype = check_dtype(odoc["dtype"], p + ".dtype", allow_resource=not is_entry)
        shape = check_shape(odoc["shape"], p + ".shape")
        if types[k][idx] != (shape, dtype):
            raise format_error(p, f"declared {dtype.name}{list(shape)} but {odoc['ref']!r} is "
                               f"{types[k][idx][1].name}{list(types[k][idx][0])}")
        outputs.append((k, idx))
        output_types.append((shape, dtype))
    return _FunctionSpec(path, name, inputs, nodes, outputs, output_types, list(ctx.callees))


_NODE_FIELDS = frozenset(["op", "inputs", "attrs", "outputs", "control_inputs"])
_NODE_FIELDS_V2 = _NODE_FIELDS | {"stateful"}
_NODE_FIELDS_V3 = _NODE_FIELDS_V2 | {"site"}
_OPTIONAL_NODE_FIELDS = {1: (), 2: ("stateful",), 3: ("stateful", "site")}
_REF_MATCH = REF_PATTERN.match
_DTYPE_OF = ALL_DTYPES


def _plain_node(ndoc, p, ctx, total):
    """The spec of a node whose fields are plainly valid, checked without building a path per
    field (a few us per node less); None for anything else (control inputs, a variable op,
    a field to look at closer), which `_checked_node` then checks field by field and
    explains. Accepts only what `_checked_node` accepts, and makes the same spec."""
    if ndoc.__class__ is not dict or not (ndoc.keys() == _NODE_FIELDS or ctx.version >= 2 and (
            ndoc.keys() == _NODE_FIELDS_V2 or ctx.version >= 3 and _NODE_FIELDS <= ndoc.keys() <= _NODE_FIELDS_V3)):
        return None
    opname = ndoc["op"]
    if opname.__class__ is not str or len(opname) > 64 or opname in V1_STATEFUL_TWINS or \
            opname == "read_variable" or opname in ASSIGN_OPS or opname == "placeholder" or \
            not registry.exists(opname):
        return None
    stateful = None
    if ctx.version >= 2:
        stateful = ndoc.get("stateful", False)
        if stateful is not True and stateful is not False:
            return None
    op = registry.get(opname)
    irefs, adoc, odocs, cdoc = ndoc["inputs"], ndoc["attrs"], ndoc["outputs"], ndoc["control_inputs"]
    if irefs.__class__ is not list or len(irefs) > limits.MAX_LIST or adoc.__class__ is not dict or \
            odocs.__class__ is not list or len(odocs) > limits.MAX_LIST or cdoc.__class__ is not list \
            or cdoc:
        return None
    refs = []
    for r in irefs:
        m = _REF_MATCH(r) if r.__class__ is str else None
        if m is None:
            return None
        k = int(m.group(1))
        if k >= total:
            return None
        refs.append((k, int(m.group(2))))
    if adoc:
        attrs = _decoded_attrs(adoc, op, opname, p, ctx)
    elif op.required_attrs:
        return None
    else:
        attrs = {}
    outputs = []
    for odoc in odocs:
        if odoc.__class__ is not dict or len(odoc) != 2:
            return None
        shape, dname = odoc.get("shape"), odoc.get("dtype")
        dtype = _DTYPE_OF.get(dname) if dname.__class__ is str else None
        if dtype is None or shape.__class__ is not list or len(shape) > limits.MAX_RANK:
            return None
        count = 1
        for d in shape:
            if d is not None:
                if d.__class__ is not int or not 0 <= d <= limits.MAX_ELEMENTS:
                    return None
                count *= d
        if count > limits.MAX_ELEMENTS:
            return None
        outputs.append((tuple(shape), dtype))
    site = check_site(ndoc["site"], p + ".site") if "site" in ndoc else None   # the one error left
    return _NodeSpec(p, op, refs, attrs, outputs, [], stateful, site)


def _decoded_attrs(adoc, op, opname, p, ctx):
    """A node's attrs decoded through the attr-type table; the declared ones only, all the
    required ones."""
    attrs = {}
    for key in adoc:
        kind = op.attrs.get(key) if isinstance(key, str) else None
        ap = attr_path(p + ".attrs", key)
        if kind is None:
            declared = ", ".join(sorted(op.attrs)) or "none"
            raise format_error(ap, f"op {opname!r} has no attr {quote(key)} (it declares: {declared})")
        if kind == "transient":
            raise format_error(ap, "a transient attr is never exported; remove it")
        attrs[key] = attr_types.TYPES[kind].decode(adoc[key], ap, ctx)
    for key in sorted(op.required_attrs - attrs.keys()):
        raise format_error(p + ".attrs", f"op {opname!r} needs attr {key!r} "
                           f"({op.attrs[key]}), which is missing")
    return attrs


def _checked_node(ndoc, p, ctx, total, n_in, bound):
    """A node's spec, every field checked with its path (GraphFormatError naming it)."""
    check_fields(ndoc, p, ("op", "inputs", "attrs", "outputs", "control_inputs"),
                 _OPTIONAL_NODE_FIELDS[ctx.version])
    opname = check_str(ndoc["op"], p + ".op", 64)
    if ctx.version == 1:
        opname = V1_STATEFUL_TWINS.get(opname, opname)
    stateful = None     # version 1: whatever the op and its functions make it
    if ctx.version >= 2:
        stateful = ndoc.get("stateful", False)
        if stateful is not True and stateful is not False:
            raise format_error(p + ".stateful", f"expected true or false, got {kind_of(stateful)}")
    if opname == "placeholder" or not registry.exists(opname):
        raise format_error(p + ".op", f"unknown op {quote(opname)}")
    op = registry.get(opname)
    refs = [check_ref(r, f"{p}.inputs[{i}]", total)
            for i, r in enumerate(check_list(ndoc["inputs"], p + ".inputs"))]
    adoc = ndoc["attrs"]
    if not isinstance(adoc, dict):
        raise format_error(p + ".attrs", f"expected object, got {kind_of(adoc)}")
    attrs = _decoded_attrs(adoc, op, opname, p, ctx)
    outputs = []
    for i, odoc in enumerate(check_list(ndoc["outputs"], p + ".outputs")):
        op_ = f"{p}.outputs[{i}]"
        check_fields(odoc, op_, ("dtype", "shape"))
        outputs.append((check_shape(odoc["shape"], op_ + ".shape"),
                        check_dtype(odoc["dtype"], op_ + ".dtype", allow_resource=True)))
    controls = {}   # ordered, with O(1) repeats check
    for i, c in enumerate(check_list(ndoc["control_inputs"], p + ".control_inputs")):
        cp = f"{p}.control_inputs[{i}]"
        c = check_int(c, cp, 0)
        if c >= total:
            raise format_error(cp, f"there is no node {c}")
        if c < n_in:
            raise format_error(cp, f"{c} is an input; control inputs are nodes")
        if c in controls:
            raise format_error(cp, f"node {c} is listed twice")
        controls[c] = None
    if opname == "read_variable" or opname in ASSIGN_OPS:
        _check_variable_attrs(refs, attrs, bound, p)
    site = check_site(ndoc["site"], p + ".site") if "site" in ndoc else None
    return _NodeSpec(p, op, refs, attrs, outputs, list(controls), stateful, site)


def _check_variable_attrs(refs, attrs, bound, path):
    """A read/assign of a variable-bound input must declare the variable's dtype and shape."""
    if not refs or refs[0][0] not in bound:
        return
    value = bound[refs[0][0]]
    want = (dtypes.from_numpy(value.dtype), tuple(value.shape))
    got = (attrs.get("dtype"), attrs.get("shape"))
    if got != want:
        raise format_error(path + ".attrs", f"the variable holds {want[0].name}{list(want[1])}, the "
                           f"node declares dtype {getattr(got[0], 'name', None)} and shape {got[1]}")


def _check_acyclic(nodes, n_in, path):
    """Every reference points to an earlier node; a cycle is named (networkx) when found."""
    forward = [(k, n_in + j) for j, n in enumerate(nodes)
               for k in [r[0] for r in n.inputs] + n.control if k >= n_in + j]
    if not forward:
        return
    import networkx as nx    # slow to import; only when a node refers forward
    g = nx.DiGraph()
    for j, n in enumerate(nodes):
        for k in [r[0] for r in n.inputs] + n.control:
            g.add_edge(k, n_in + j)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        k, me = forward[0]
        raise format_error(nodes[me - n_in].path, f"refers to node {k}, which comes after it; nodes "
                           f"are listed in topological order") from None
    text = " -> ".join(str(u) for u, _ in cycle) + f" -> {cycle[0][0]}"
    raise format_error(path + ".nodes", f"the nodes form a cycle: {text}")


def call_graph_of(specs):
    """The networkx DiGraph of function calls: an edge from each caller to each callee."""
    import networkx as nx    # slow to import; only for this view
    g = nx.DiGraph()
    g.add_nodes_from(specs)
    for name, spec in specs.items():
        for callee, _ in spec.callees:
            g.add_edge(name, callee)
    return g


def callees_first(specs):
    """The function names, each after every function it calls, the smallest ready name
    first (the order of networkx's lexicographical_topological_sort of the reversed call
    graph, without importing networkx); functions on a call cycle are left out."""
    callers = {name: [] for name in specs}
    waiting = {}
    for name, spec in specs.items():
        callees = {callee for callee, _ in spec.callees}
        waiting[name] = len(callees)
        for callee in callees:
            callers[callee].append(name)
    ready = [name for name, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        name = heapq.heappop(ready)
        order.append(name)
        for caller in callers[name]:
            waiting[caller] -= 1
            if waiting[caller] == 0:
                heapq.heappush(ready, caller)
    return order


def _check_calls(specs, roots):
    """Function calls form no cycle, and every function is reachable from `roots` (the entry,
    then the backward functions of the gradient records)."""
    order = callees_first(specs)
    if len(order) < len(specs):     # a cycle: networkx names one
        import networkx as nx    # slow to import; only on the error path
        cycle = nx.find_cycle(call_graph_of(specs))
        text = " -> ".join(u for u, _ in cycle) + f" -> {cycle[0][0]}"
        raise format_error("functions", f"function calls form a cycle: {text}")
    reachable = set(roots)
    todo = list(roots)
    while todo:
        for callee, _ in specs[todo.pop()].callees:
            if callee not in reachable:
                reachable.add(callee)
                todo.append(callee)
    for name, spec in specs.items():
        if name not in reachable:
            raise format_error(spec.path, f"function {name!r} is not called from the entry "
                               f"{roots[0]!r}" + (" or a backward function" if len(roots) > 1 else ""))
    depth = {}      # how many functions run inside each other from here down, callees first
    for name in order:
        depth[name] = 1 + max((depth[c] for c, _ in specs[name].callees), default=0)
        if depth[name] > limits.MAX_CALL_DEPTH:
            raise format_error(specs[name].path, f"function {name!r} runs functions "
                               f"{depth[name]} deep (calls, branches, loop bodies); the limit "
                               f"is {limits.MAX_CALL_DEPTH}")


def check_structure(s, path, n_out, depth, leaves):
    """An `output_structure` over `n_out` outputs, nested `depth` deep so far; `leaves[0]`
    counts its entries (export checks what it writes with this too)."""
    if depth > limits.MAX_STRUCTURE_DEPTH:
        raise format_error(path, f"nested deeper than {limits.MAX_STRUCTURE_DEPTH}")
    leaves[0] += 1
    if leaves[0] > limits.MAX_LIST:
        raise format_error(path, f"more than {limits.MAX_LIST} entries")
    if not isinstance(s, dict) or len(s) != 1:
        raise format_error(path, "expected an object with one key: 'output', 'none', 'list', "
                           "'tuple', 'dict' or 'namedtuple'")
    (key, value), = s.items()
    if key == "none":
        if value is not True:
            raise format_error(path + ".none", f"expected true, got {kind_of(value)}")
    elif key == "output":
        if n_out == 0:
            raise format_error(path + ".output", "the function has no outputs")
        check_int(value, path + ".output", 0, n_out - 1)
    elif key in ("list", "tuple"):
        for k, v in enumerate(check_list(value, f"{path}.{key}")):
            check_structure(v, f"{path}.{key}[{k}]", n_out, depth + 1, leaves)
    elif key == "dict":
        seen = set()
        for k, item in enumerate(check_list(value, path + ".dict")):
            p = f"{path}.dict[{k}]"
            if not isinstance(item, list) or len(item) != 2:
                raise format_error(p, "expected [key, value]")
            if isinstance(item[0], bool) or not isinstance(item[0], (str, int)):
                raise format_error(p, f"a key is a str or int, got {kind_of(item[0])}")
            if isinstance(item[0], str):
                check_str(item[0], p, limits.MAX_NAME)
            if item[0] in seen:
                raise format_error(p, f"key {quote(item[0])} repeats")
            seen.add(item[0])
            check_structure(item[1], p + "[1]", n_out, depth + 1, leaves)
        if len({type(k) for k in seen}) > 1:     # export refuses them (runtime/nest.py)
            keys = ", ".join(quote(item[0]) for item in value[:4])
            raise format_error(path + ".dict", f"keys mix str and int ({keys}); a dict's keys are "
                               f"all str or all int (its leaves are ordered by sorted key)")
    elif key == "namedtuple":
        p = path + ".namedtuple"
        check_fields(value, p, ("name", "fields"))
        check_identifier(value["name"], p + ".name")
        seen = set()
        for k, item in enumerate(check_list(value["fields"], p + ".fields")):
            q = f"{p}.fields[{k}]"
            if not isinstance(item, list) or len(item) != 2:
                raise format_error(q, "expected [field, value]")
            check_identifier(item[0], q + "[0]")
            if item[0].startswith("_") or item[0] in seen:
                raise format_error(q + "[0]", f"field {quote(item[0])} "
                                   f"{'repeats' if item[0] in seen else 'starts with _'}")
            seen.add(item[0])
            check_structure(item[1], q + "[1]", n_out, depth + 1, leaves)
    else:
        raise format_error(path, f"unknown structure kind {quote(key)}")
