"""Malformed and hostile documents fail with GraphFormatError naming the place, running nothing."""
import copy
import json
import os
import tempfile

import pytest

from defun.graph import serialize as ser
from defun.graph.serialize import dumps_document, from_document, to_document
from defun.runtime.errors import GraphFormatError
from serialize_helpers import build_rich


# ---------------------------------------------------------------------------------------
# Malformed and hostile documents

def _base():
    g, _, _ = build_rich()
    return to_document(g, input_names=["x", "labels"])


BASE = None


def base_doc():
    global BASE
    if BASE is None:
        BASE = _base()
    return copy.deepcopy(BASE)


def _node(doc, op, fn=0):
    nodes = doc["functions"][fn]["nodes"]
    return next(n for n in nodes if n["op"] == op)


def _call(doc, fn=0):
    """The call node of function `fn` (`stateful_call` when the callee has stateful ops)."""
    return next(n for n in doc["functions"][fn]["nodes"] if n["op"] in ("call", "stateful_call"))


def _node_index(doc, op, fn=0):
    nodes = doc["functions"][fn]["nodes"]
    return next(j for j, n in enumerate(nodes) if n["op"] == op)


def _set(path_fn):
    def mutate(doc):
        path_fn(doc)
        return doc
    return mutate


def _cycle(doc):
    f = doc["functions"][0]
    n_in = len(f["inputs"])
    j = _node_index(doc, "tanh")
    f["nodes"][j]["inputs"][0] = f"{n_in + j + 1}:0"   # tanh reads the node after it, which reads tanh
    f["nodes"][j + 1]["inputs"] = [f"{n_in + j}:0"]


def _forward_ref(doc):
    f = doc["functions"][0]
    later = len(f["inputs"]) + _node_index(doc, "range")   # after tanh, and not depending on it
    _node(doc, "tanh")["inputs"][0] = f"{later}:0"


def _call_cycle(doc):
    # the inner function ("f") calls the entry instead of its leaf: rich -> f -> rich
    _call(doc, fn=1)["attrs"]["f"] = "rich"


def _huge_payload(doc):
    _node(doc, "const")["attrs"]["value"] = {"dtype": "float64", "shape": [1 << 14, 1 << 13], "data": "AAAA"}


def _long_base64(doc):
    _node(doc, "const")["attrs"]["value"]["data"] = "A" * 5_000_000


def _drop(*keys):
    def mutate(doc):
        target = doc
        for k in keys[:-1]:
            target = target[k]
        del target[keys[-1]]
        return doc
    return mutate


CODE = "__import__('os').system('x')"

HOSTILE = [
    # (case, mutation of the base document or raw text, fragment of the error message)
    ("not a dict", lambda d: [d], "expected a JSON object"),
    ("null top level", lambda d: None, "expected a JSON object"),
    ("wrong format", _set(lambda d: d.update(format="onnx")), "format: expected 'defun.graph'"),
    ("wrong version", _set(lambda d: d.update(version=4)), "version: this loader reads versions 1, 2, 3"),
    ("stateful flag not a bool", _set(lambda d: d["functions"][0]["nodes"][0].update(stateful=1)),
     "functions[0].nodes[0].stateful: expected true or false"),
    ("stateful flag wrong", _set(lambda d: d["functions"][0]["nodes"][0].update(stateful=False)),
     "functions[0].nodes[0].stateful: the node says false"),
    ("version as str", _set(lambda d: d.update(version="1")), "version"),
    ("version as bool", _set(lambda d: d.update(version=True)), "version"),
    ("missing format", _drop("format"), "missing field 'format'"),
    ("missing functions", _drop("functions"), "missing field 'functions'"),
    ("missing variables", _drop("variables"), "missing field 'variables'"),
    ("missing structure", _drop("output_structure"), "missing field 'output_structure'"),
    ("missing node op", _drop("functions", 0, "nodes", 0, "op"), "functions[0].nodes[0]: missing field 'op'"),
    ("missing input shape", _drop("functions", 0, "inputs", 0, "shape"), "functions[0].inputs[0]: missing field"),
    ("extra field", _set(lambda d: d.update(code="print(1)")), "unknown field 'code'"),
    ("unknown op", _set(lambda d: d["functions"][0]["nodes"][0].update(op="system")), "nodes[0].op: unknown op"),
    ("op looks like code", _set(lambda d: d["functions"][0]["nodes"][0].update(op=CODE)), "unknown op"),
    ("placeholder op", _set(lambda d: d["functions"][0]["nodes"][0].update(op="placeholder")), "unknown op"),
    ("dangling reference", _set(lambda d: _node(d, "tanh")["inputs"].__setitem__(0, "999:0")),
     "there is no node 999"),
    ("missing output index", _set(lambda d: _node(d, "tanh")["inputs"].__setitem__(0, "0:3")),
     "has 1 outputs, there is no output 3"),
    ("reference looks like code", _set(lambda d: _node(d, "tanh")["inputs"].__setitem__(0, CODE)),
     "is not a reference 'node:index'"),
    ("reference not a str", _set(lambda d: _node(d, "tanh")["inputs"].__setitem__(0, [2, 0])),
     "expected str, got list"),
    ("forward reference", _set(_forward_ref), "comes after it"),
    ("cycle", _set(_cycle), "the nodes form a cycle"),
    ("function call cycle", _set(_call_cycle), "function calls form a cycle"),
    ("call of a missing function", _set(lambda d: _call(d)["attrs"].update(f="nope")),
     "no function named 'nope'"),
    ("unreachable function", _set(lambda d: d["functions"].append(dict(d["functions"][2], name="extra"))),
     "not called from the entry"),
    ("duplicate function", _set(lambda d: d["functions"][2].update(name="f")), "already exists"),
    ("function name looks like code", _set(lambda d: d["functions"][0].update(name=CODE)),
     "functions[0].name: \"__import__('os').system('x')\" is not a valid name"),
    ("entry looks like code", _set(lambda d: d.update(entry=CODE)), "entry: "),
    ("input name looks like code", _set(lambda d: d["functions"][0]["inputs"][0].update(name=CODE)),
     "functions[0].inputs[0].name"),
    ("variable name looks like code", _set(lambda d: d["variables"][0].update(name=CODE)), "variables[0].name"),
    ("attr key looks like code", _set(lambda d: _node(d, "tanh")["attrs"].update({CODE: 1})), "has no attr"),
    ("attr int as str", _set(lambda d: _node(d, "expand_dims")["attrs"].update(axis="1")),
     "attrs.axis: expected int, got str"),
    ("attr bool as int", _set(lambda d: _node(d, "reduce_sum")["attrs"].update(keepdims=1)),
     "attrs.keepdims: expected bool, got int"),
    ("attr int as bool", _set(lambda d: _node(d, "split")["attrs"].update(num_split=True)),
     "attrs.num_split: expected int, got bool"),
    ("attr ints as int", _set(lambda d: _node(d, "transpose")["attrs"].update(perm=3)),
     "attrs.perm: expected list, got int"),
    ("attr float as str", _set(lambda d: _node(d, "one_hot")["attrs"].update(on_value="1.0")),
     "attrs.on_value: expected number, got str"),
    ("attr dtype unknown", _set(lambda d: _node(d, "cast")["attrs"].update(dtype="complex256")),
     "unsupported dtype 'complex256'"),
    ("attr func as list", _set(lambda d: _call(d)["attrs"].update(f=["f"])), "expected str, got list"),
    ("unknown attr", _set(lambda d: _node(d, "tanh")["attrs"].update(axis=0)), "op 'tanh' has no attr 'axis'"),
    ("transient attr present", _set(lambda d: _node(d, "custom_gradient")["attrs"].update(grad_fn="lambda: 0")),
     "transient attr is never exported"),
    ("missing required attr", _set(lambda d: _node(d, "reshape")["attrs"].pop("shape")), "needs attr 'shape'"),
    ("attr value infers other shape", _set(lambda d: _node(d, "reshape")["attrs"].update(shape=[-1, 4, 1])),
     "infers float32[None, 4, 1]"),
    ("output count for split", _set(lambda d: _node(d, "split")["attrs"].update(num_split=10 ** 9)),
     "makes 1000000000 outputs here"),
    ("dtype object", _set(lambda d: d["functions"][0]["inputs"][0].update(dtype="object")),
     "inputs[0].dtype: unsupported dtype 'object'"),
    ("dtype object in data", _set(lambda d: _node(d, "const")["attrs"]["value"].update(dtype="object")),
     "unsupported dtype 'object'"),
    ("dtype as code", _set(lambda d: d["functions"][0]["inputs"][0].update(dtype=CODE)), "unsupported dtype"),
    ("10^12-element shape", _set(lambda d: d["functions"][0]["inputs"][0].update(shape=[10 ** 6, 10 ** 6])),
     "1000000000000 elements, more than the limit"),
    ("10^12-element const", _set(lambda d: _node(d, "const")["attrs"]["value"].update(shape=[10 ** 6, 10 ** 6])),
     "more than the limit"),
    ("negative size", _set(lambda d: d["functions"][0]["inputs"][0].update(shape=[-1, 3])), "out of range"),
    ("rank too high", _set(lambda d: d["functions"][0]["inputs"][0].update(shape=[1] * 40)), "more than the limit of 32"),
    ("huge base64 payload", _set(_huge_payload), "bytes of data, more than the limit"),
    ("long base64 text", _set(_long_base64), "base64 characters"),
    ("bad base64", _set(lambda d: _node(d, "const")["attrs"]["value"].update(data="!" * 24)), "not valid base64"),
    ("recorded shape wrong", _set(lambda d: _node(d, "tanh")["outputs"][0].update(shape=[None, 5])),
     "recorded as float32[None, 5]"),
    ("recorded dtype wrong", _set(lambda d: _node(d, "tanh")["outputs"][0].update(dtype="float64")),
     "recorded as float64"),
    ("output declared wrong", _set(lambda d: d["functions"][0]["outputs"][0].update(dtype="int32")),
     "functions[0].outputs[0]: declared int32"),
    ("control input is later", _set(lambda d: _node(d, "read_variable")["control_inputs"].append(60)),
     "there is no node 60"),
    ("control input is an input", _set(lambda d: _node(d, "read_variable")["control_inputs"].append(0)),
     "is an input"),
    ("unused variable", _set(lambda d: d["variables"].append(dict(d["variables"][0], name="extra"))),
     "not used by the entry"),
    ("variable bound twice", _set(lambda d: d["functions"][0]["inputs"][3].update(variable="w")),
     "already bound"),
    ("variable data short", _set(lambda d: d["variables"][0].update(data="AAAA")), "base64 characters"),
    ("variable read with wrong shape", _set(lambda d: _node(d, "read_variable")["attrs"].update(shape=[4, 3])),
     "the variable holds float32[3, 4]"),
    ("resource argument", _set(lambda d: d["functions"][0]["inputs"][0].update(dtype="resource", shape=[])),
     "cannot be a resource"),
    ("bad output structure", _set(lambda d: d.update(output_structure={"output": 9})),
     "output_structure.output: 9 is out of range"),
    ("structure kind as code", _set(lambda d: d.update(output_structure={CODE: []})), "unknown structure kind"),
]


def _write_text(tmp_path, text):
    path = tmp_path / "doc.json"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A directory that must stay as it is, used as cwd and as the temp directory."""
    files = tmp_path / "files"
    files.mkdir()
    box = tmp_path / "box"
    box.mkdir()
    monkeypatch.chdir(box)
    monkeypatch.setattr(tempfile, "tempdir", str(box))
    yield files
    assert os.listdir(box) == [], "loading created files"


def _listing(path):
    return sorted((p.name, p.stat().st_size) for p in path.iterdir())


@pytest.mark.parametrize("case, mutate, message", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_documents_raise_graph_format_error(case, mutate, message, sandbox):
    doc = mutate(base_doc())
    with pytest.raises(GraphFormatError) as info:
        from_document(doc)
    assert message in str(info.value)
    text = json.dumps(doc)
    path = _write_text(sandbox, text)
    before = _listing(sandbox)
    with pytest.raises(GraphFormatError) as info2:
        from_document(str(path))
    assert str(info2.value) == str(info.value)
    assert _listing(sandbox) == before


@pytest.mark.parametrize("text, message", [
    (None, "not valid JSON"),   # truncated base document, filled in below
    ("", "not valid JSON"),
    ('{"format": "defun.graph", "format": "x"}', "appears twice"),
    ('{"format": NaN}', "NaN"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('"just a string"', "expected a JSON object"),
    ("1" * 5000, "not valid JSON"),
])
def test_hostile_texts_raise_graph_format_error(text, message, sandbox):
    if text is None:
        full = dumps_document(base_doc())
        text = full[:len(full) // 2]
    path = _write_text(sandbox, text)
    before = _listing(sandbox)
    with pytest.raises(GraphFormatError, match=message):
        from_document(path)
    assert _listing(sandbox) == before


def test_non_utf8_file_and_size_limit(sandbox, monkeypatch):
    path = sandbox / "bin.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(GraphFormatError, match="not UTF-8"):
        from_document(path)
    monkeypatch.setattr(ser.schema, "MAX_DOCUMENT_BYTES", 10)
    path.write_bytes(b'{"format": "defun.graph"}')
    with pytest.raises(GraphFormatError, match="larger than 10 bytes"):
        from_document(path)


def test_node_and_function_count_limits(monkeypatch):
    doc = base_doc()
    monkeypatch.setattr(ser.schema, "MAX_NODES", 5)
    with pytest.raises(GraphFormatError, match=r"functions\[0\].nodes: .* more than the limit of 5"):
        from_document(doc)
    monkeypatch.setattr(ser.schema, "MAX_NODES", 100_000)
    monkeypatch.setattr(ser.schema, "MAX_FUNCTIONS", 2)
    with pytest.raises(GraphFormatError, match="functions: 3 items, more than the limit of 2"):
        from_document(doc)


def test_nothing_is_built_before_validation_finishes(monkeypatch):
    """An error late in the document (the output structure) stops the load before any graph."""
    built = []
    monkeypatch.setattr(ser.build, "_build", lambda *a: built.append(a))
    doc = base_doc()
    doc["output_structure"] = {"tuple": [{"output": 99}]}
    with pytest.raises(GraphFormatError, match=r"output_structure.tuple\[0\].output"):
        from_document(doc)
    assert built == []
