"""JSON export and import of function graphs: a versioned, canonical, validated document.

    doc = to_document(graph)                 # JSON-ready dict
    write_document(doc, "f.json")            # canonical bytes, atomic
    f = from_document("f.json")              # validate everything, then build and compile
    f(np.ones((4, 3), np.float32))           # -> tuple of eager tensors (or the saved structure)

Layout (version 1; every key shown is required, except an input's `variable`):

    {"format": "defun.graph", "version": 1,
     "entry": "f",                           # name of the function a call runs
     "functions": [                          # the entry first, then every function reachable
       {"name": "f",                         #   through func/funcs attrs (names unique)
        "inputs": [{"name": "x", "dtype": "float32", "shape": [null, 3]},
                   {"name": "w", "dtype": "resource", "shape": [], "variable": "w"}],
        "nodes": [{"op": "read_variable", "inputs": ["1:0"],
                   "attrs": {"dtype": "float32", "shape": [3, 2]},
                   "outputs": [{"dtype": "float32", "shape": [3, 2]}],
                   "control_inputs": []}, ...],
        "outputs": [{"ref": "5:0", "dtype": "float32", "shape": [null]}]}],
     "variables": [{"name": "w", "dtype": "float32", "shape": [3, 2], "data": "<base64>"}],
     "output_structure": {"tuple": [{"output": 0}]}}

A reference "k:i" is output i of node k, where a function's inputs are numbered 0..n-1 and
its nodes n, n+1, ... in list order (the printer's %k numbering). Inputs bound to a
`variable` (entry function only, after the arguments) are fed from the `variables` section;
captured eager tensors are frozen into `const` nodes. Arrays ({dtype, shape, data}) hold
little-endian C-order bytes in base64. Attr values are typed by the op's schema (an attr
left out takes the op's default):

    int/opt_int: int | null      float: number | "nan" | "inf" | "-inf"     bool, str
    ints/shape: [int | null]     dtype: "float32"     dtypes: ["int32", ...]   tensor: array
    func: "name"                 funcs: ["name", ...]                       opt_ints: null | int | [int]
    slices: [int | null (new axis) | "..." | [start, stop, step]]           transient: never written

`output_structure` rebuilds nested results: {"output": k} | {"none": true} (a None leaf) |
{"list": [...]} | {"tuple": [...]} | {"dict": [[key, value], ...]} (keys str or int).

The loader validates the whole document before it builds anything: field names and types,
format and version, names (a plain pattern, unique), ops (registered), attrs (declared by the
op, typed by its schema, no transient ones), dtypes (the supported set), shapes and sizes (the
MAX_* limits below), array payloads (length checked before decoding), references (existing,
earlier, valid output index), acyclicity of nodes and of calls (networkx), variables (bound
once, read with their own dtype and shape) and the output structure. Building then re-runs
each op's inference, which must give the recorded outputs exactly. Any problem raises
GraphFormatError naming the field: `functions[0].nodes[3].attrs.axis: expected int, got str`.
Nothing from the file is evaluated as code: names are data, ops are looked up in the registry,
and the executor names everything in the Python it generates.
"""
import base64
import binascii
import copy
import json
import math
import os
import re
import tempfile
from collections import namedtuple

import numpy as np

from graph import control_flow as _control_flow  # noqa: F401  (registers `cond`, `while`)
from graph import functions as _functions  # noqa: F401  (registers `call`)
from runtime import custom_gradient as _custom_gradient  # noqa: F401  (registers its op)
from runtime import attr_types, dtypes, errors, registry
from runtime import ops as _ops  # noqa: F401  (registers the ops a document may name)
from runtime.ops.resource_ops import ASSIGN_OPS, VariableStore
from runtime.tensor import EagerTensor, HandleData, ResourceHandle, Tensor, to_array
from graph.ir import Graph
from graph.executor import compile_graph
from graph.verify import verify
from runtime.ops._infer import check_kinds

__all__ = ["FORMAT", "VERSION", "to_document", "write_document", "from_document", "dumps_document",
           "describe_structure", "LoadedFunction", "InputSpec"]

FORMAT = "defun.graph"
VERSION = 2
READABLE_VERSIONS = (1, 2)
# Version 1 named a node whose functions have effects by a second op; version 2 flags the
# node (`"stateful": true`) and has one op each.
_V1_STATEFUL_TWINS = {"stateful_call": "call", "stateful_cond": "cond", "stateful_while": "while"}

# Limits: a document beyond them is refused before anything is decoded or built.
MAX_DOCUMENT_BYTES = 1 << 30        # file size
MAX_FUNCTIONS = 1000
MAX_NODES = 100_000                 # per function
MAX_TOTAL_NODES = 1_000_000
MAX_LIST = 100_000                  # inputs of a node, items of an ints attr, ...
MAX_RANK = 32
MAX_ELEMENTS = 1 << 28              # of any declared shape (unknown sizes count as 1)
MAX_TENSOR_BYTES = 1 << 28          # one array's payload
MAX_TOTAL_TENSOR_BYTES = 1 << 30    # all payloads together
MAX_NAME = 128
MAX_STRING = 4096                   # str attrs
MAX_STRUCTURE_DEPTH = 64
_INT64 = (-(1 << 63), (1 << 63) - 1)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*\Z")
_REF = re.compile(r"(0|[1-9][0-9]{0,8}):(0|[1-9][0-9]{0,5})\Z")
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
# dtypes an array or attr may have; `resource` only types inputs, outputs and variable handles
_DATA_DTYPES = {d.name: d for d in dtypes.ALL if d is not dtypes.resource}
_ALL_DTYPES = dict(_DATA_DTYPES, resource=dtypes.resource)


def _format_error(path, message):
    return errors.GraphFormatError(f"{path}: {message}")


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
    if len(found) > MAX_FUNCTIONS:
        raise errors.InvalidArgumentError(f"cannot export @{graph.name}: it reaches {len(found)} "
                                          f"functions, more than the format's {MAX_FUNCTIONS}")
    return found


def _sanitize(name, default):
    """A name matching the format's name pattern (deterministic; valid names are unchanged)."""
    s = re.sub(r"[^A-Za-z0-9_./-]", "_", str(name) if name else default)
    if not re.match(r"[A-Za-z_]", s):
        s = "_" + s
    return s[:MAX_NAME]


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
            cand = n[:MAX_NAME - len(suffix)] + suffix
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


def _shape_doc(shape):
    return [None if d is None else int(d) for d in shape]


def _encode_array(value):
    arr = np.asarray(value)
    arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)
    d = dtypes.from_numpy(arr.dtype)
    raw = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return {"dtype": d.name, "shape": list(arr.shape), "data": base64.b64encode(raw).decode("ascii")}


def _encode_float(v):
    v = float(v)
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


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
        raw = f.read(MAX_DOCUMENT_BYTES + 1)
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise errors.GraphFormatError(f"document: {os.fspath(path)!r} is larger than "
                                      f"{MAX_DOCUMENT_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise errors.GraphFormatError(f"document: not UTF-8 text: {e}") from None
    return _parse_text(text)


# =======================================================================================
# Import, step 2: validate (no graph is built here)

def _kind(x):
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "bool"
    for t, name in ((dict, "object"), (list, "list"), (str, "str"), (int, "int"), (float, "float")):
        if isinstance(x, t):
            return name
    return type(x).__name__


def _fields(x, path, required, optional=()):
    if not isinstance(x, dict):
        raise _format_error(path, f"expected object, got {_kind(x)}")
    for key in required:
        if key not in x:
            raise _format_error(path, f"missing field {key!r}")
    for key in x:
        if key not in required and key not in optional:
            raise _format_error(path, f"unknown field {_show(key)}")
    return x


def _show(s):
    """A value from the file, quoted and shortened for a message (never interpreted)."""
    text = repr(s)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_int(x, path, lo=_INT64[0], hi=_INT64[1]):
    if isinstance(x, bool) or not isinstance(x, int):
        raise _format_error(path, f"expected int, got {_kind(x)}")
    if not lo <= x <= hi:
        raise _format_error(path, f"{x} is out of range [{lo}, {hi}]")
    return int(x)


def _check_str(x, path, limit=MAX_STRING):
    if not isinstance(x, str):
        raise _format_error(path, f"expected str, got {_kind(x)}")
    if len(x) > limit:
        raise _format_error(path, f"string longer than {limit} characters")
    return str(x)


def _check_name(x, path):
    _check_str(x, path, MAX_NAME)
    if not _NAME.match(x):
        raise _format_error(path, f"{_show(x)} is not a valid name (letters, digits, _ . / -; "
                            f"starting with a letter or _)")
    return str(x)


def _check_list(x, path, limit=MAX_LIST):
    if not isinstance(x, list):
        raise _format_error(path, f"expected list, got {_kind(x)}")
    if len(x) > limit:
        raise _format_error(path, f"{len(x)} items, more than the limit of {limit}")
    return x


def _check_dtype(x, path, allow_resource=False):
    _check_str(x, path, 32)
    d = (_ALL_DTYPES if allow_resource else _DATA_DTYPES).get(x)
    if d is None:
        allowed = sorted(_ALL_DTYPES if allow_resource else _DATA_DTYPES)
        raise _format_error(path, f"unsupported dtype {_show(x)}; expected one of {', '.join(allowed)}")
    return d


def _check_shape(x, path, known=False):
    _check_list(x, path, MAX_RANK)
    dims, count = [], 1
    for k, d in enumerate(x):
        if d is None and not known:
            dims.append(None)
            continue
        dims.append(_check_int(d, f"{path}[{k}]", 0, MAX_ELEMENTS))
        count *= dims[-1]
    if count > MAX_ELEMENTS:
        raise _format_error(path, f"{count} elements, more than the limit of {MAX_ELEMENTS}")
    return tuple(dims)


def _check_array(x, path, budget):
    """{dtype, shape, data} -> a read-only numpy array (payload size checked before decoding)."""
    _fields(x, path, ("dtype", "shape", "data"))
    return _decode_array(x, path, budget)


def _decode_array(x, path, budget):
    d = _check_dtype(x["dtype"], path + ".dtype")
    shape = _check_shape(x["shape"], path + ".shape", known=True)
    nbytes = int(np.prod(shape, dtype=np.int64)) * d.np.itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise _format_error(path, f"{nbytes} bytes of data, more than the limit of {MAX_TENSOR_BYTES}")
    budget[0] += nbytes
    if budget[0] > MAX_TOTAL_TENSOR_BYTES:
        raise _format_error(path, f"the document's arrays exceed {MAX_TOTAL_TENSOR_BYTES} bytes in all")
    data = x["data"]
    if not isinstance(data, str):
        raise _format_error(path + ".data", f"expected base64 str, got {_kind(data)}")
    if len(data) != 4 * ((nbytes + 2) // 3):
        raise _format_error(path + ".data", f"{len(data)} base64 characters; {d.name}"
                            f"{list(shape)} needs {nbytes} bytes ({4 * ((nbytes + 2) // 3)} characters)")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise _format_error(path + ".data", "not valid base64") from None
    if len(raw) != nbytes:
        raise _format_error(path + ".data", f"decodes to {len(raw)} bytes, expected {nbytes}")
    if d is dtypes.bool and raw and max(raw) > 1:
        raise _format_error(path + ".data", "bool data must be bytes 0 or 1")
    arr = np.frombuffer(raw, dtype=d.np.newbyteorder("<")).astype(d.np).reshape(shape)
    arr.flags.writeable = False
    return arr


def _check_ref(x, path, total):
    _check_str(x, path)
    m = _REF.match(x)
    if m is None:
        raise _format_error(path, f"{_show(x)} is not a reference 'node:index'")
    k, i = int(m.group(1)), int(m.group(2))
    if k >= total:
        raise _format_error(path, f"reference {x!r}: there is no node {k} (this function numbers "
                            f"its inputs and nodes 0..{total - 1})")
    return k, i


class _FuncRef:
    """A func attr before building: the callee's name."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def _decode_float(x, path):
    if isinstance(x, str) and x in _NONFINITE:
        return _NONFINITE[x]
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise _format_error(path, f"expected number, got {_kind(x)}")
    v = float(x)
    if not math.isfinite(v):
        raise _format_error(path, "non-finite numbers are written as \"nan\", \"inf\" or \"-inf\"")
    return v


def _attr_path(path, key):
    return f"{path}.{key}" if isinstance(key, str) and _NAME.match(key) else f"{path}[{_show(key)}]"


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

    fdocs = _check_list(doc["functions"], "functions", MAX_FUNCTIONS)
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

    ndocs = _check_list(fdoc["nodes"], path + ".nodes", MAX_NODES)
    ctx.total_nodes += len(ndocs)
    if ctx.total_nodes > MAX_TOTAL_NODES:
        raise _format_error(path + ".nodes", f"the document has more than {MAX_TOTAL_NODES} nodes")
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


def _check_calls(specs, entry):
    """Function calls form no cycle, and every function is reachable from the entry."""
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(specs)
    for name, spec in specs.items():
        for callee, _ in spec.callees:
            g.add_edge(name, callee)
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
    if depth > MAX_STRUCTURE_DEPTH:
        raise _format_error(path, f"nested deeper than {MAX_STRUCTURE_DEPTH}")
    leaves[0] += 1
    if leaves[0] > MAX_LIST:
        raise _format_error(path, f"more than {MAX_LIST} entries")
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
                _check_str(item[0], p, MAX_NAME)
            if item[0] in seen:
                raise _format_error(p, f"key {_show(item[0])} repeats")
            seen.add(item[0])
            _check_structure(item[1], p + "[1]", n_out, depth + 1, leaves)
    else:
        raise _format_error(path, f"unknown structure kind {_show(key)}")


# =======================================================================================
# Import, step 3: build graphs (callees first), verify, compile

def _build(entry, specs):
    import networkx as nx
    order = nx.DiGraph()
    order.add_nodes_from(specs)
    for name, spec in specs.items():
        for callee, _ in spec.callees:
            order.add_edge(callee, name)
    library = {}
    for name in nx.lexicographical_topological_sort(order):
        library[name] = _build_function(specs[name], Graph(name, library=library), library)
    return library[entry]


def _build_function(spec, g, library):
    values = []
    for s in spec.inputs:
        if s.variable is None:
            values.append([g.placeholder(s.shape, s.dtype)])
            continue
        value = np.array(s.value, copy=True)   # each load owns its variables
        handle = ResourceHandle(VariableStore(value, s.variable),
                                HandleData(value.shape, dtypes.from_numpy(value.dtype)))
        values.append([g.capture(handle)])
    nodes = {}
    for j, ns in enumerate(spec.nodes):
        attrs = dict(ns.op.defaults)   # attrs a document leaves out take the declared default
        for key, v in ns.attrs.items():
            kind = ns.op.attrs[key]
            attrs[key] = library[v.name] if kind == "func" else \
                tuple(library[f.name] for f in v) if kind == "funcs" else v
        for key, kind in ns.op.attrs.items():
            if kind == "transient":
                attrs[key] = None
        inputs = [values[k][i] for k, i in ns.inputs]
        out_types = _inferred_types(ns, inputs, attrs)
        node = g._new_node(ns.op, inputs, attrs, out_types, None, [nodes[c] for c in ns.control])
        if ns.stateful is not None and ns.stateful is not node.stateful:
            raise _format_error(ns.path + ".stateful", f"the node says {str(ns.stateful).lower()}, but "
                                f"its op and the functions it runs make it {str(node.stateful).lower()}")
        nodes[len(spec.inputs) + j] = node
        values.append(node.outputs)
    return g.finalize([values[k][i] for k, i in spec.outputs])


def _inferred_types(ns, inputs, attrs):
    """The op's inferred output types, which must equal the recorded ones."""
    op = ns.op
    dts = [t.dtype for t in inputs]
    if op.num_inputs is not None and len(inputs) != op.num_inputs:
        raise _format_error(ns.path + ".inputs", f"op {op.name!r} takes {op.num_inputs} "
                            f"input{'s' if op.num_inputs != 1 else ''}, the document gives {len(inputs)}")
    try:
        n = op.output_count(attrs, len(inputs))
    except Exception as e:   # a variadic count reads attrs, which came from the file
        raise _format_error(ns.path, f"op {op.name!r} cannot count its outputs: "
                            f"{type(e).__name__}: {e}") from None
    # checked before inference, so an attr like num_split=10**9 never reaches it
    if n != len(ns.outputs):
        raise _format_error(ns.path + ".outputs", f"op {op.name!r} makes {n} outputs here, the "
                            f"document records {len(ns.outputs)}")
    try:
        if op.kinds is not None and inputs and dts[0].np.kind not in op.kinds:
            check_kinds(op.name, dts[0], op.kinds)
        same = [dts[k] for k in (op.same_dtype or ()) if k < len(dts)]
        if any(d is not same[0] for d in same):
            raise errors.InvalidArgumentError(
                f"inputs must have the same dtype, got {', '.join(d.name for d in same)}")
        inferred = [(tuple(None if d is None else int(d) for d in s), d_)
                    for s, d_ in op.infer([t.shape for t in inputs], dts, attrs)]
    except Exception as e:   # inference is registry code, but the attrs came from the file
        raise _format_error(ns.path, f"op {op.name!r} rejects its inputs or attrs: "
                            f"{type(e).__name__}: {e}") from None
    if len(inferred) != n:
        raise _format_error(ns.path + ".outputs", f"op {op.name!r} infers {len(inferred)} outputs, "
                            f"the document records {n}")
    for i, (got, want) in enumerate(zip(inferred, ns.outputs)):
        if got != want:
            s, d = got
            raise _format_error(f"{ns.path}.outputs[{i}]", f"recorded as {want[1].name}{list(want[0])} but "
                                f"op {op.name!r} infers {getattr(d, 'name', d)}{list(s)} from its inputs")
    return inferred


def from_document(doc_or_path):
    """A LoadedFunction from a document (a dict) or a file path; raises GraphFormatError.

    A path that cannot be read raises the usual OSError. Each load owns fresh copies of the
    document's variables; calls that assign them update those copies (see `.variables`).

        f = from_document("model.json")
        y = f(np.ones((2, 3), np.float32))
    """
    if isinstance(doc_or_path, (str, os.PathLike)):
        doc = _read_document(doc_or_path)
    else:
        doc = doc_or_path
    entry, specs, structure = _validate(doc)
    g = _build(entry, specs)
    try:
        verify(g)
        plan = compile_graph(g)
    except Exception as e:
        raise errors.GraphFormatError(f"functions: the graph does not compile: {type(e).__name__}: {e}") from None
    names = [s.name for s in specs[entry].inputs if s.variable is None]
    return LoadedFunction(g, plan, names, copy.deepcopy(structure))


# =======================================================================================
# The loaded function

InputSpec = namedtuple("InputSpec", "name shape dtype")


class LoadedFunction:
    """A function rebuilt from a graph document: call it on numpy arrays or tensors."""

    def __init__(self, graph, plan, input_names, output_structure):
        self.graph = graph
        self.output_structure = output_structure
        self._plan = plan
        self._names = list(input_names)
        self._captured = [h._value for h in graph.captured_values]

    @property
    def signature(self):
        """The arguments: [InputSpec(name, shape, dtype), ...]."""
        return [InputSpec(n, t.shape, t.dtype) for n, t in zip(self._names, self.graph.inputs)]

    @property
    def variables(self):
        """Current variable values by name (assignments in calls update them)."""
        return {s.name: s.value for s in self._captured}

    def to_document(self):
        """The document of this function (byte-identical to the loaded one if unchanged)."""
        return to_document(self.graph, self.output_structure, self._names)

    def __call__(self, *args):
        params = self.graph.inputs
        if len(args) != len(params):
            raise errors.InvalidArgumentError(
                f"{self.graph.name}: expected {len(params)} arguments "
                f"({', '.join(self._names)}), got {len(args)}")
        feed = [self._argument(k, x, t) for k, (x, t) in enumerate(zip(args, params))]
        results = self._plan.run(*feed, *self._captured)
        outs = []
        for k, (value, t) in enumerate(zip(results, self.graph.outputs)):
            arr = np.asarray(value)
            if arr.dtype != t.dtype.np or not _fits(arr.shape, t.shape):
                raise errors.InvalidArgumentError(
                    f"{self.graph.name}: output {k} came out as {arr.dtype.name}{list(arr.shape)}, "
                    f"the document declares {t.dtype.name}{_shape_doc(t.shape)}")
            outs.append(EagerTensor(arr))
        return _pack(self.output_structure, outs)

    def _argument(self, k, x, t):
        name = self._names[k]
        if hasattr(x, "_as_tensor") and not isinstance(x, Tensor):
            x = x._as_tensor()
        if isinstance(x, EagerTensor) and not isinstance(x, ResourceHandle):
            arr = x._value
        elif isinstance(x, Tensor):
            raise errors.InvalidArgumentError(
                f"{self.graph.name}: argument {k} ({name}) is a {type(x).__name__}; a loaded "
                f"function runs on values (numpy arrays or eager tensors)")
        elif isinstance(x, (np.ndarray, np.generic)):
            arr = np.array(x, copy=True)   # outputs may alias inputs: never the caller's buffer
        else:
            try:
                arr = to_array(x, t.dtype.np)
            except (TypeError, errors.InvalidArgumentError) as e:
                raise errors.InvalidArgumentError(
                    f"{self.graph.name}: argument {k} ({name}): {e}") from None
        if arr.dtype != t.dtype.np:
            raise errors.InvalidArgumentError(
                f"{self.graph.name}: argument {k} ({name}) has dtype {arr.dtype.name}, expected "
                f"{t.dtype.name}; convert it with .astype or df.cast")
        if not _fits(arr.shape, t.shape):
            raise errors.InvalidArgumentError(
                f"{self.graph.name}: argument {k} ({name}) has shape {list(arr.shape)}, expected "
                f"{_shape_doc(t.shape)} (null is any size)")
        return arr

    def __repr__(self):
        args = ", ".join(f"{s.name}: {s.dtype.name}{_shape_doc(s.shape)}" for s in self.signature)
        return f"<LoadedFunction {self.graph.name}({args})>"


def _fits(shape, declared):
    return len(shape) == len(declared) and all(d is None or d == s for s, d in zip(shape, declared))


def _pack(s, outs):
    (key, value), = s.items()
    if key == "none":
        return None
    if key == "output":
        return outs[value]
    if key == "list":
        return [_pack(v, outs) for v in value]
    if key == "tuple":
        return tuple(_pack(v, outs) for v in value)
    return {k: _pack(v, outs) for k, v in value}
