"""JSON export/import: round trips, canonical bytes, atomic writes, hostile documents, fuzzing."""
import base64
import copy
import json
import math
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import defun as df
from defun.graph import serialize as ser
from defun.graph.executor import compile_graph
from defun.graph.functions import call_graph
from defun.graph.ir import Graph
from defun.graph.serialize import (describe_structure, dumps_document, from_document, to_document,
                                   write_document)
from defun.runtime import attr_types
from defun.runtime.errors import GraphFormatError, InvalidArgumentError

F32 = np.float32


# ---------------------------------------------------------------------------------------
# Hand-built graphs

def _leaf():
    """A small library function; named "f" like the inner one, to test unique naming."""
    g = Graph("f")
    with g.building():
        a = g.placeholder((None, 4), df.float32)
        y = df.relu(a) * 0.5
    return g.finalize([y])


def _inner(leaf, v):
    """Calls `leaf` and reads variable `v` (a resource input of this library function)."""
    g = Graph("f")
    with g.building():
        a = g.placeholder((None, 4), df.float32)
        b = g.placeholder((4,), df.float32)
        h = call_graph(leaf, [a])[0]
        y = h + b * df.reduce_sum(v.read_value(), axis=0)
        m = df.reduce_max(y, axis=1)
    return g.finalize([y, m])


def build_rich():
    """(graph, feeds): many op kinds, a multi-output op, consts, a captured eager tensor,
    variables read and assigned, nested calls, a custom gradient and strided slicing."""
    v = df.Variable(np.arange(12, dtype=F32).reshape(3, 4) / 10, name="w")
    u = df.Variable(np.ones(4, F32), name="scale")
    bias = df.constant(np.linspace(-1, 1, 4).astype(F32))   # captured eager tensor

    @df.custom_gradient
    def clip(t):
        return df.identity(t), lambda dy: df.minimum(dy, 1.0)

    leaf = _leaf()
    inner = _inner(leaf, u)
    g = Graph("rich")
    with g.building():
        x = g.placeholder((None, 3), df.float32)
        labels = g.placeholder((None,), df.int32)
        h = df.tanh(df.matmul(x, v.read_value()) + bias)                 # [?, 4]
        h2, m = call_graph(inner, [h, df.constant(np.full(4, 0.25, F32))] + inner.captured_values)
        parts = df.split(h2, 2, axis=1)                                   # multi-output
        joined = df.concat([parts[1], parts[0]], axis=1)
        t = df.transpose(df.reshape(joined, [-1, 2, 2]), [0, 2, 1])
        s = df.reduce_sum(t, axis=(1, 2))
        oh = df.one_hot(labels, 4, on_value=2.0, off_value=-0.5)
        xent = df.softmax_cross_entropy_with_logits(oh, joined)
        sl = clip(h[:, 1:3])
        idx = df.argmax(h, axis=1)
        c = df.cast(idx, df.float32) + df.reduce_mean(sl) + df.where(m > 0.1, m, -m)
        v.assign_add(df.fill([3, 4], np.float32(0.5)))
        r = df.range(0.0, 2.0, 0.5)
        outs = [s, xent, c, r, df.squeeze(df.expand_dims(m, 1), [1])]
    g.finalize(outs)
    feeds = [np.linspace(-1, 1, 15, dtype=F32).reshape(5, 3), np.array([0, 3, 1, 2, 3], np.int32)]
    return g, feeds, [v, u]


def in_memory_run(g, feeds):
    plan = compile_graph(g)
    caps = [c._value for c in g.captured_values]
    return [np.asarray(r) for r in plan(*feeds, *caps)]


def simple_graph():
    v = df.Variable(np.ones((3, 2), F32), name="w")
    g = Graph("simple")
    with g.building():
        x = g.placeholder((None, 3), df.float32)
        y = df.reduce_sum(df.tanh(x @ v) * 2.0, axis=1)
    return g.finalize([y]), v


# ---------------------------------------------------------------------------------------
# Round trips

def test_round_trip_runs_equal_to_in_memory_run_and_keeps_state():
    g, feeds, (v, u) = build_rich()
    doc = to_document(g, input_names=["x", "labels"])   # exports the variables' current values
    loaded = from_document(json.loads(dumps_document(doc)))
    for _ in range(2):   # the second call sees the assign_add of the first, in both
        want = in_memory_run(g, feeds)
        got = loaded(*feeds)
        assert isinstance(got, tuple) and len(got) == len(want) == 5
        for a, b in zip(got, want):
            assert isinstance(a, df.Tensor)
            assert a.numpy().dtype == b.dtype and a.numpy().shape == b.shape
            np.testing.assert_allclose(a.numpy(), b, rtol=1e-6)
    np.testing.assert_array_equal(loaded.variables["w"], v.numpy())
    assert [f["name"] for f in doc["functions"]] == ["rich", "f", "f_1"]
    assert sorted(x["name"] for x in doc["variables"]) == ["scale", "w"]


def test_reexport_of_loaded_graph_is_byte_identical():
    g, feeds, _ = build_rich()
    text = dumps_document(to_document(g, input_names=["x", "labels"]))
    loaded = from_document(json.loads(text))
    assert dumps_document(loaded.to_document()) == text
    again = from_document(loaded.to_document())
    assert dumps_document(again.to_document()) == text
    assert str(again.graph) == str(loaded.graph)


def test_export_is_deterministic_across_builds():
    g1, _, _ = build_rich()
    g2, _, _ = build_rich()
    a = dumps_document(to_document(g1))
    assert a == dumps_document(to_document(g1))
    assert a == dumps_document(to_document(g2))   # fresh node ids and graph objects, same bytes


def test_document_layout():
    g, v = simple_graph()
    doc = to_document(g, input_names=["x"])
    assert doc["format"] == "defun.graph" and doc["version"] == 2 and doc["entry"] == "simple"
    f, = doc["functions"]
    assert f["inputs"] == [{"name": "x", "dtype": "float32", "shape": [None, 3]},
                           {"name": "w", "dtype": "resource", "shape": [], "variable": "w"}]
    read = f["nodes"][0]
    assert read == {"op": "read_variable", "inputs": ["1:0"], "attrs": {"dtype": "float32", "shape": [3, 2]},
                    "outputs": [{"dtype": "float32", "shape": [3, 2]}], "control_inputs": [],
                    "stateful": True}
    assert f["nodes"][1]["inputs"] == ["0:0", "2:0"] and f["nodes"][1]["op"] == "matmul"
    assert "stateful" not in f["nodes"][1]      # false is left out
    assert f["outputs"] == [{"ref": "7:0", "dtype": "float32", "shape": [None]}]
    var, = doc["variables"]
    assert var["name"] == "w" and var["shape"] == [3, 2] and var["dtype"] == "float32"
    raw = np.frombuffer(base64.b64decode(var["data"]), "<f4")
    np.testing.assert_array_equal(raw, np.ones(6))
    assert doc["output_structure"] == {"tuple": [{"output": 0}]}
    # the canonical text has sorted keys and no spaces
    text = dumps_document(doc)
    assert text.startswith('{"entry":"simple","format":"defun.graph","functions":[')
    assert " " not in text


def test_variables_exported_by_current_value():
    g, v = simple_graph()
    v.assign(np.full((3, 2), 2.0, F32))
    loaded = from_document(to_document(g))
    np.testing.assert_array_equal(loaded.variables["w"], np.full((3, 2), 2.0))
    v.assign(np.zeros((3, 2), F32))   # later changes do not reach the loaded copy
    x = np.ones((2, 3), F32)
    np.testing.assert_allclose(loaded(x)[0].numpy(), np.full(2, 4 * np.tanh(6.0)), rtol=1e-6)


def test_output_structure_and_defun_concrete_function():
    w = df.Variable(np.ones(3, F32), name="w")

    @df.defun
    def f(a, b):
        return {"sum": df.reduce_sum(a * b), "pair": [a + w, None], "t": (b,)}

    a, b = np.arange(3, dtype=F32), np.full(3, 2.0, F32)
    cf = f.get_concrete_function(a, b)
    idx = [k if isinstance(k, int) else None for k in cf._out_index]
    doc = to_document(cf.graph, describe_structure(cf._out_structure, idx), ["a", "b"])
    loaded = from_document(doc)
    got, want = loaded(a, b), f(a, b)
    assert set(got) == {"sum", "pair", "t"} and isinstance(got["pair"], list) and got["pair"][1] is None
    assert isinstance(got["t"], tuple)
    np.testing.assert_allclose(got["sum"].numpy(), want["sum"].numpy())
    np.testing.assert_allclose(got["pair"][0].numpy(), want["pair"][0].numpy())
    assert [s.name for s in loaded.signature] == ["a", "b"]
    assert loaded.signature[0].shape == (3,) and loaded.signature[0].dtype is df.float32


def test_describe_structure():
    assert describe_structure([1, (2, None), {"b": 3, "a": 4}]) == {"list": [
        {"output": 0}, {"tuple": [{"output": 1}, {"none": True}]},
        {"dict": [["a", {"output": 2}], ["b", {"output": 3}]]}]}
    assert describe_structure("leaf") == {"output": 0}
    assert describe_structure(None) == {"none": True}
    assert describe_structure((1, 2), out_index=[1, None]) == {"tuple": [{"output": 1}, {"none": True}]}
    with pytest.raises(InvalidArgumentError):
        describe_structure({(1, 2): 0})


def test_function_returning_none_keeps_its_side_effects():
    v = df.Variable(np.zeros(2, F32), name="counter")
    g = Graph("step")
    with g.building():
        x = g.placeholder((2,), df.float32)
        v.assign_add(x * 2.0)
    g.finalize([])
    loaded = from_document(to_document(g, describe_structure(None)))
    assert loaded(np.ones(2, F32)) is None and loaded(np.ones(2, F32)) is None
    np.testing.assert_array_equal(loaded.variables["counter"], [4.0, 4.0])
    np.testing.assert_array_equal(v.numpy(), [0.0, 0.0])   # the original is untouched


def test_single_output_structure_returns_the_tensor():
    g, _ = simple_graph()
    loaded = from_document(to_document(g, {"output": 0}))
    assert isinstance(loaded(np.ones((1, 3), F32)), df.Tensor)


def test_call_checks_arguments_against_the_signature():
    g, _ = simple_graph()
    loaded = from_document(to_document(g, input_names=["x"]))
    ok = loaded(df.constant(np.ones((2, 3), F32)))[0]
    np.testing.assert_allclose(loaded([[1.0, 1.0, 1.0]])[0].numpy(), ok.numpy()[:1])   # weak typing
    with pytest.raises(InvalidArgumentError, match="expected 1 arguments"):
        loaded()
    with pytest.raises(InvalidArgumentError, match="dtype float64, expected float32"):
        loaded(np.ones((2, 3)))
    with pytest.raises(InvalidArgumentError, match=r"shape \(2, 4\), expected \(\?, 3\)"):
        loaded(np.ones((2, 4), F32))
    with pytest.raises(InvalidArgumentError, match=r"shape \(3,\), expected"):
        loaded(np.ones(3, F32))
    with pytest.raises(InvalidArgumentError):
        loaded("not a tensor")
    assert "x: float32[None, 3]" in repr(loaded)


def test_transient_attrs_are_dropped_and_loaded_as_none():
    g, feeds, _ = build_rich()
    doc = to_document(g)
    cg = [n for n in doc["functions"][0]["nodes"] if n["op"] == "custom_gradient"]
    assert cg and cg[0]["attrs"] == {"num_outputs": 1}
    loaded = from_document(doc)
    node, = [n for n in loaded.graph.nodes if n.op.name == "custom_gradient"]
    assert node.attrs["grad_fn"] is None


def test_names_are_data_only():
    g, _ = simple_graph()
    doc = to_document(g)
    doc["functions"][0]["name"] = doc["entry"] = "__import__"
    doc["functions"][0]["inputs"][0]["name"] = "exec"
    loaded = from_document(doc)
    assert loaded.graph.name == "__import__" and loaded.signature[0].name == "exec"
    assert loaded(np.ones((1, 3), F32))[0].shape == (1,)
    assert "__import__" not in compile_graph(loaded.graph).source   # the executor names things itself


def test_export_sanitizes_and_uniquifies_names():
    g = Graph("<lambda>")
    with g.building():
        a = g.placeholder((2,), df.float32)
        b = g.placeholder((2,), df.float32)
        y = a + b
    g.finalize([y])
    doc = to_document(g, input_names=["a b", "a_b"])
    assert doc["entry"] == "_lambda_"
    assert [i["name"] for i in doc["functions"][0]["inputs"]] == ["a_b", "a_b_1"]
    assert from_document(doc).graph.name == "_lambda_"


def test_export_refuses_unexportable_graphs():
    g = Graph("open")
    with g.building():
        g.placeholder((2,), df.float32)
    with pytest.raises(InvalidArgumentError, match="not finalized"):
        to_document(g)
    g, _ = simple_graph()
    with pytest.raises(InvalidArgumentError, match="2 input names for 1 inputs"):
        to_document(g, input_names=["a", "b"])
    with pytest.raises(GraphFormatError, match="output_structure.output"):
        to_document(g, {"output": 3})


def test_float_attrs_keep_non_finite_values_and_exact_bits():
    g = Graph("hot")
    with g.building():
        i = g.placeholder((None,), df.int32)
        y = df.one_hot(i, 3, on_value=math.inf, off_value=0.1)
    g.finalize([y])
    doc = to_document(g)
    attrs = doc["functions"][0]["nodes"][0]["attrs"]
    assert attrs["on_value"] == "inf" and attrs["off_value"] == 0.1
    loaded = from_document(json.loads(dumps_document(doc)))
    np.testing.assert_array_equal(loaded(np.array([2, 0], np.int32))[0].numpy(),
                                  np.array([[0.1, 0.1, np.inf], [np.inf, 0.1, 0.1]], F32))
    assert dumps_document(loaded.to_document()) == dumps_document(doc)


@pytest.mark.parametrize("kind, value, encoded", [
    ("int", -3, -3), ("float", 1.5, 1.5), ("float", -math.inf, "-inf"), ("bool", True, True),
    ("str", "REFLECT", "REFLECT"), ("ints", (1, -1), [1, -1]), ("shape", (None, 3), [None, 3]),
    ("dtype", df.int64, "int64"), ("dtypes", (df.bool, df.float16), ["bool", "float16"]),
    ("opt_int", None, None), ("opt_ints", 2, 2), ("opt_ints", (0, 2), [0, 2]), ("opt_ints", None, None),
    ("slices", (1, slice(None, 3, 2), None, Ellipsis), [1, [None, 3, 2], None, "..."]),
])
def test_attr_codec_round_trips(kind, value, encoded):
    doc = attr_types.TYPES[kind].encode(value, ser.export._Writer({}))
    assert doc == encoded
    back = attr_types.TYPES[kind].decode(json.loads(json.dumps(doc)), "a", ser.validate._Context({}))
    assert back == value and type(back) is type(value)


def test_tensor_codec_is_little_endian_and_typed():
    for arr in [np.arange(6, dtype=">i4").reshape(2, 3), np.array([True, False]), np.float16(1.5),
                np.zeros((0, 2), np.float64)]:
        doc = ser.schema._encode_array(arr)
        back = ser.schema._check_array(doc, "t", [0])
        assert back.dtype == np.asarray(arr).dtype.newbyteorder("=") and back.shape == np.shape(arr)
        np.testing.assert_array_equal(back, arr)
        assert not back.flags.writeable


# ---------------------------------------------------------------------------------------
# Files: canonical bytes, atomic writes

def test_write_document_writes_canonical_bytes_atomically(tmp_path):
    g, feeds, _ = build_rich()
    doc = to_document(g)
    path = tmp_path / "rich.json"
    write_document(doc, path)
    assert path.read_bytes() == dumps_document(doc).encode()
    assert os.listdir(tmp_path) == ["rich.json"]
    loaded = from_document(str(path))
    assert dumps_document(loaded.to_document()) == dumps_document(doc)
    write_document({"b": 1, "a": [1.5]}, path)   # overwrite in place
    assert path.read_bytes() == b'{"a":[1.5],"b":1}'


def test_write_document_failure_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    path.write_bytes(b"old")

    def broken_replace(src, dst):
        raise OSError("disk on fire")
    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        write_document({"a": 1}, path)
    monkeypatch.undo()
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.json"]
    with pytest.raises(GraphFormatError, match="not JSON-serializable"):
        write_document({"a": object()}, path)
    with pytest.raises(GraphFormatError, match="not JSON-serializable"):
        write_document({"a": math.nan}, path)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.json"]


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
    ("wrong version", _set(lambda d: d.update(version=3)), "version: this loader reads versions 1, 2"),
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


# ---------------------------------------------------------------------------------------
# Fuzzing: mutated documents load cleanly or fail with GraphFormatError

def _fuzz_base():
    v = df.Variable(np.array([[0.5, -1.0], [2.0, 0.25]], F32), name="v")
    inner = Graph("inner")
    with inner.building():
        a = inner.placeholder((2, 2), df.float32)
        y = df.reduce_sum(df.sigmoid(a) * 3.0, axis=0, keepdims=True)
    inner.finalize([y])
    g = Graph("fuzz")
    with g.building():
        x = g.placeholder((2, 2), df.float32)
        k = g.placeholder((2,), df.int32)
        h = df.matmul(x, v.read_value(), transpose_b=True)
        s, = call_graph(inner, [h])
        parts = df.split(h, 2, axis=1)
        z = df.concat([parts[1], s[:, :1]], axis=0) + df.cast(df.reshape(k, [1, 2]), df.float32)
        v.assign_sub(df.ones([2, 2]) * 0.125)
        outs = [df.reduce_mean(z, axis=1), df.exp(s)]
    g.finalize(outs)
    feeds = [np.array([[1.0, 2.0], [-0.5, 0.75]], F32), np.array([3, -2], np.int32)]
    return to_document(g, input_names=["x", "k"]), feeds


FUZZ_DOC, FUZZ_FEEDS = _fuzz_base()
FUZZ_TEXT = dumps_document(FUZZ_DOC)


def _expected():
    return [t.numpy() for t in from_document(FUZZ_DOC)(*FUZZ_FEEDS)]


FUZZ_WANT = _expected()


def _locations(doc):
    """Every (container, key) in the document tree, in a fixed order."""
    out = []
    stack = [doc]
    while stack:
        c = stack.pop()
        keys = sorted(c) if isinstance(c, dict) else range(len(c))
        for k in keys:
            out.append((c, k))
            if isinstance(c[k], (dict, list)):
                stack.append(c[k])
    return out


REPLACEMENTS = [None, True, False, 0, 1, 2, -1, 3, 7, 2 ** 31, 10 ** 12, 0.5, -2.0, "", "x", "0:0", "1:0",
                "3:1", "9:0", "float32", "float64", "int32", "object", "resource", "nan", "...", "inner",
                "fuzz", "v", "add", "identity", "call", [], [0], [None, 2], ["0:0"], {}, {"output": 0},
                {"none": True}]
KINDS = ["drop", "replace", "swap", "number", "string", "flip", "data", "noop"]


@st.composite
def mutations(draw):
    """(document, preserving): 1-3 mutations; `preserving` if none can change the results."""
    doc = json.loads(FUZZ_TEXT)
    for arg in doc["functions"][0]["inputs"][:2]:   # argument names are data only
        arg["name"] = draw(st.sampled_from([arg["name"], "a", "b_2", "x.y", "n/m"]))
    preserving = True
    for _ in range(draw(st.integers(1, 3))):
        locs = _locations(doc)
        container, key = locs[draw(st.integers(0, len(locs) - 1))]
        kind = draw(st.sampled_from(KINDS))
        value = container[key]
        if kind == "noop":     # the same value, freshly built
            container[key] = copy.deepcopy(value)
            continue
        preserving = False
        if kind == "drop":
            del container[key]
        elif kind == "swap" and isinstance(value, str) and ":" in value:
            refs = [(c, k) for c, k in locs if isinstance(c[k], str) and ":" in c[k]]
            c2, k2 = refs[draw(st.integers(0, len(refs) - 1))]
            container[key], c2[k2] = c2[k2], value
        elif kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            container[key] = value + draw(st.sampled_from([-2, -1, 1, 2, 0.5, 2 ** 31]))
        elif kind == "string" and isinstance(value, str):
            container[key] = draw(st.sampled_from([value[:-1], value + "x", value.upper(), value[::-1]]))
        elif kind == "flip" and isinstance(value, bool):
            container[key] = not value
        elif kind == "data":   # other bytes of the same length in some array
            arrays = [c[k] for c, k in locs if isinstance(c[k], dict) and isinstance(c[k].get("data"), str)]
            if arrays:
                arr = arrays[draw(st.integers(0, len(arrays) - 1))]
                try:   # an earlier mutation may already have broken this payload
                    n = len(base64.b64decode(arr["data"]))
                except ValueError:
                    n = 8
                arr["data"] = base64.b64encode(draw(st.binary(min_size=n, max_size=n))).decode()
        else:
            container[key] = copy.deepcopy(draw(st.sampled_from(REPLACEMENTS)))
    return doc, preserving


def _leaves(x):
    if isinstance(x, dict):
        return [v for item in x.values() for v in _leaves(item)]
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in _leaves(item)]
    return [] if x is None else [x]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_mutated_documents_load_and_run_cleanly_or_raise_graph_format_error(case):
    doc, preserving = case
    try:
        loaded = from_document(doc)
    except GraphFormatError:
        return
    text = dumps_document(loaded.to_document())
    assert dumps_document(from_document(json.loads(text)).to_document()) == text   # stable from now on
    try:
        with np.errstate(all="ignore"):   # changed data may overflow
            outs = loaded(*FUZZ_FEEDS)
    except (GraphFormatError, InvalidArgumentError):
        return
    declared = {(t.dtype.np, len(t.shape)) for t in loaded.graph.outputs}
    for o in _leaves(outs):
        assert isinstance(o, df.Tensor)
        assert (o.numpy().dtype, o.numpy().ndim) in declared
    if preserving or text == FUZZ_TEXT:   # nothing that matters changed: the same results
        assert isinstance(outs, tuple) and len(outs) == len(FUZZ_WANT)
        for o, w in zip(outs, FUZZ_WANT):
            np.testing.assert_array_equal(o.numpy(), w)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)


@settings(max_examples=100, deadline=None)
@given(JSON.filter(lambda v: not isinstance(v, str)))   # a str is a path
def test_arbitrary_json_raises_graph_format_error(value):
    with pytest.raises(GraphFormatError):
        from_document(value)


def test_an_extra_input_in_a_document_is_refused_not_used_as_an_output_buffer():
    import defun as df
    f = df.defun(lambda x, y: (x * x, y))
    x = df.constant(np.array([1.0, 2.0, 3.0]))
    y = df.constant(np.array([7.0, 7.0, 7.0]))
    doc = df.export_json(f.get_concrete_function(x, y))
    entry = doc["functions"][0]
    mul = next(n for n in entry["nodes"] if n["op"] == "multiply")
    mul["inputs"].append("1:0")
    with pytest.raises(df.errors.GraphFormatError, match="multiply"):
        df.load_json(doc)
    np.testing.assert_array_equal(np.asarray(y), [7.0, 7.0, 7.0])


def test_execute_checks_the_input_count():
    import defun as df
    x = df.constant([1.0, 2.0])
    with pytest.raises(df.errors.InvalidArgumentError, match="add takes 2 inputs, got 3"):
        df.execute("add", 1, [x, x, x])


def test_a_loaded_function_does_not_alias_the_callers_array():
    f = df.defun(lambda x: df.identity(x))
    arr = np.array([1.0, 2.0])
    loaded = df.load_json(df.export_json(f.get_concrete_function(arr)))
    out = loaded(arr)
    arr[0] = 5.0
    np.testing.assert_array_equal(np.asarray(out), [1.0, 2.0])


def test_export_bytes_do_not_depend_on_what_the_process_traced_before():
    from defun.graph.serialize import dumps_document

    def make():
        @df.defun
        def model(x):
            return x * 2.0
        return model

    x = df.constant([1.0, 2.0])
    first, second = make(), make()
    first(x)                       # traces `model` once before the second one exists
    a = dumps_document(df.export_json(first.get_concrete_function(x)))
    b = dumps_document(df.export_json(second.get_concrete_function(x)))
    assert a == b and '"entry":"model"' in a


def test_a_missing_required_attr_is_named():
    f = df.defun(lambda x: df.reshape(x, [2, 2]))
    doc = df.export_json(f.get_concrete_function(df.constant(np.ones(4))))
    node = next(n for n in doc["functions"][0]["nodes"] if n["op"] == "reshape")
    del node["attrs"]["shape"]
    with pytest.raises(df.errors.GraphFormatError, match=r"nodes\[0\]\.attrs: op 'reshape' needs attr 'shape'"):
        df.load_json(doc)


def test_too_few_inputs_and_missing_while_attrs_are_named():
    f = df.defun(lambda x, y: x + y)
    x = df.constant(np.ones(2))
    doc = df.export_json(f.get_concrete_function(x, x))
    node = next(n for n in doc["functions"][0]["nodes"] if n["op"] == "add")
    node["inputs"].pop()
    with pytest.raises(df.errors.GraphFormatError, match=r"inputs: op 'add' takes 2 inputs, the document gives 1"):
        df.load_json(doc)
    loop = df.defun(lambda x: df.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2.0), (0, x))[1])
    doc = df.export_json(loop.get_concrete_function(x))
    node = next(n for n in doc["functions"][0]["nodes"] if n["op"] == "while")
    del node["attrs"]["history"]
    with pytest.raises(df.errors.GraphFormatError, match="needs attr 'history'"):
        df.load_json(doc)


# ---------------------------------------------------------------------------------------
# Version 2: statefulness is a node flag; version-1 documents (stateful twins) still load.

def _stateful_control_flow_function():
    """A defun whose call, cond and while all run functions that read or assign `v`."""
    v = df.Variable(np.array([1.0, 2.0]), name="v")

    @df.defun
    def scaled(x):
        return x * v

    @df.defun
    def f(x):
        y = scaled(x)
        y = df.cond(df.reduce_sum(y) > 0.0, lambda: y * v, lambda: y - v)
        _, y = df.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y + v), (0, y))
        v.assign_add(df.constant([0.5, 0.5], df.float64))
        return y
    return f, v


def _as_version_1(doc):
    """`doc` as a version-1 writer would have written it: twin ops, no node flag."""
    old = copy.deepcopy(doc)
    old["version"] = 1
    twins = {"call": "stateful_call", "cond": "stateful_cond", "while": "stateful_while"}
    for fdoc in old["functions"]:
        for ndoc in fdoc["nodes"]:
            if ndoc.pop("stateful", False) and ndoc["op"] in twins:
                ndoc["op"] = twins[ndoc["op"]]
    return old


def test_version_2_flags_stateful_call_cond_and_while_nodes():
    f, v = _stateful_control_flow_function()
    x = np.array([1.0, -3.0])
    doc = df.export_json(f.get_concrete_function(df.constant(x)))
    entry = next(fd for fd in doc["functions"] if fd["name"] == doc["entry"])
    flagged = sorted(n["op"] for n in entry["nodes"] if n.get("stateful"))
    assert flagged == ["assign_add_variable", "call", "cond", "while"]
    assert not any("stateful_" in n["op"] for fd in doc["functions"] for n in fd["nodes"])
    assert all(n.get("stateful", False) is True or "stateful" not in n
               for fd in doc["functions"] for n in fd["nodes"])


def test_version_1_documents_with_stateful_twins_still_load():
    f, v = _stateful_control_flow_function()
    x = np.array([1.0, -3.0])
    doc = df.export_json(f.get_concrete_function(df.constant(x)))
    old = _as_version_1(doc)
    ops = {n["op"] for fd in old["functions"] for n in fd["nodes"]}
    assert {"stateful_call", "stateful_cond", "stateful_while"} <= ops
    start = v.numpy()
    expected = f(df.constant(x)).numpy()        # assigns v once
    v.assign(start)
    for d in (doc, old):
        loaded = df.load_json(json.loads(json.dumps(d)))
        np.testing.assert_allclose(loaded(x).numpy(), expected, rtol=1e-12)
        np.testing.assert_allclose(loaded.variables["v"], start + 0.5)
    # a loaded version-1 document exports as version 2, the flags derived from the ops
    again = df.load_json(old).to_document()
    assert again["version"] == 2
    assert json.loads(dumps_document(again)) == json.loads(dumps_document(
        df.load_json(doc).to_document()))


def test_version_1_has_no_stateful_field():
    f, _ = _stateful_control_flow_function()
    old = _as_version_1(df.export_json(f.get_concrete_function(df.constant([1.0, 1.0], df.float64))))
    old["functions"][0]["nodes"][0]["stateful"] = True
    with pytest.raises(GraphFormatError, match=r"nodes\[0\]: unknown field 'stateful'"):
        df.load_json(old)


# The graph layer alone: `defun` stands in as a bare package whose path holds only the
# repository's folders (so defun/__init__.py, which imports the decorator layer, never runs)
# and any module of the decorator layer is refused.
GRAPH_ONLY_LOADER = r"""
import importlib.abc, json, sys, types
import numpy as np
bare = types.ModuleType("defun")
bare.__path__ = [sys.argv[1]]
sys.modules["defun"] = bare

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        parts = name.split(".")
        if parts[0] == "defun" and len(parts) > 1 and parts[1] not in ("runtime", "graph"):
            raise ImportError(f"{name} is blocked: the graph layer must not need it")
        return None

sys.meta_path.insert(0, Blocker())
from defun.graph import serialize
doc = json.load(open(sys.argv[2]))
loaded = serialize.from_document(doc)
out = loaded(np.array([1.0, -3.0]))
print(json.dumps(np.asarray(out.numpy() if hasattr(out, "numpy") else out).tolist()))
print(json.dumps(sorted(m for m in sys.modules if m.startswith("defun.")
                        and m.split(".")[1] not in ("runtime", "graph"))))
"""


def test_graph_package_loads_cond_and_while_documents_without_defun(tmp_path):
    import subprocess
    import sys
    f, v = _stateful_control_flow_function()
    x = np.array([1.0, -3.0])
    doc = df.export_json(f.get_concrete_function(df.constant(x)))
    ops = {n["op"] for fd in doc["functions"] for n in fd["nodes"]}
    assert {"cond", "while", "call"} <= ops
    expected = f(df.constant(x)).numpy()
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, "-c", GRAPH_ONLY_LOADER, root, str(path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    values, defun_modules = res.stdout.strip().split("\n")
    np.testing.assert_allclose(json.loads(values), expected, rtol=1e-12)
    assert json.loads(defun_modules) == []


# ---------------------------------------------------------------------------------------
# Files: permissions and directories

def test_an_export_keeps_an_existing_files_mode_and_new_files_honour_the_umask(tmp_path):
    path = tmp_path / "f.json"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    write_document({"a": 1}, path)
    assert path.read_bytes() == b'{"a":1}' and (os.stat(path).st_mode & 0o777) == 0o640
    old = os.umask(0o027)
    try:
        write_document({"a": 2}, tmp_path / "new.json")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "new.json").st_mode & 0o777 == 0o640     # 0o666 & ~0o027
    old = os.umask(0o022)
    try:
        write_document({"a": 3}, tmp_path / "other.json")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "other.json").st_mode & 0o777 == 0o644
    assert sorted(os.listdir(tmp_path)) == ["f.json", "new.json", "other.json"]


def test_an_export_into_a_missing_directory_names_the_directory(tmp_path):
    import defun as df
    cf = df.defun(lambda x: x * 2.0).get_concrete_function(df.constant([1.0]))
    missing = tmp_path / "no" / "such"
    with pytest.raises(FileNotFoundError) as info:
        df.export_json(cf, missing / "f.json")
    assert str(missing) in str(info.value) and "does not exist" in str(info.value)
    assert ".tmp" not in str(info.value)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------
# A loaded function's gradient comes from the document's backward (docs/format.md)

def _with_constant(doc, function, old, new):
    """`doc` with the float64 constant `old` of function `function` replaced by `new`."""
    doc = copy.deepcopy(doc)
    (fd,) = [f for f in doc["functions"] if f["name"] == function]
    hits = [n for n in fd["nodes"] if n["op"] == "const" and
            base64.b64decode(n["attrs"]["value"]["data"]) == np.float64(old).tobytes()]
    assert len(hits) == 1, hits
    hits[0]["attrs"]["value"]["data"] = base64.b64encode(np.float64(new).tobytes()).decode()
    return doc


def _gradients(fn, x, persistent=False):
    t = df.constant(x)
    with df.GradientTape(persistent=persistent) as tape:
        tape.watch(t)
        y = fn(t)
    return y, tape.gradient(y, t)


def test_a_loaded_function_is_differentiated_by_the_backward_in_its_document():
    # before: the gradient was derived from the forward, whatever the backward said
    x = np.array([0.1, 0.2, 0.7])
    cf = df.defun(lambda x: df.reduce_sum(df.sin(x) * 3.0)).get_concrete_function(df.constant(x))
    doc = json.loads(json.dumps(df.export_json(cf, include_backward=True)))
    edited = df.load_json(_with_constant(doc, "lambda_grad", 3.0, 4.0))   # d/dx: 4 cos x now
    for route in ("tape", "persistent tape", "inside a defun"):
        if route == "inside a defun":
            y, g = _gradients(df.defun(lambda t: edited(t) * 1.0), x)
        else:
            y, g = _gradients(edited, x, persistent=route == "persistent tape")
        np.testing.assert_allclose(y.numpy(), 3.0 * np.sin(x).sum(), rtol=1e-12)   # forward as written
        np.testing.assert_allclose(g.numpy(), 4.0 * np.cos(x), rtol=1e-12, err_msg=route)
    np.testing.assert_allclose(_gradients(df.load_json(doc), x)[1].numpy(), 3.0 * np.cos(x), rtol=1e-12)
    # a document without a backward: the gradient is derived from its forward, as before
    plain = df.load_json(df.export_json(cf))
    np.testing.assert_allclose(_gradients(plain, x)[1].numpy(), 3.0 * np.cos(x), rtol=1e-12)


def test_a_custom_gradient_exported_with_its_backward_is_differentiable_after_loading():
    # before: "custom_gradient: this graph was loaded without its Python gradient"

    @df.custom_gradient
    def scaled(x):
        y = df.sin(x) * 2.0
        return y, lambda dy: dy * y * 5.0          # deliberately not d y / d x: 10 sin(x) dy

    x = np.array([0.1, 0.2, 0.7])
    f = df.defun(lambda x: df.reduce_sum(scaled(x)))
    _, eager = _gradients(lambda t: df.reduce_sum(scaled(t)), x)
    np.testing.assert_allclose(eager.numpy(), 10.0 * np.sin(x), rtol=1e-12)
    cf = f.get_concrete_function(df.constant(x))
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf, include_backward=True))))
    for persistent in (False, True):
        np.testing.assert_allclose(_gradients(loaded, x, persistent)[1].numpy(), 10.0 * np.sin(x),
                                   rtol=1e-12)
    _, inside = _gradients(df.defun(lambda t: loaded(t) * 2.0), x)
    np.testing.assert_allclose(inside.numpy(), 20.0 * np.sin(x), rtol=1e-12)
    # a second order needs the backward of the forward's saved `y`: not in the document
    t = df.constant(x)
    with df.GradientTape() as outer:
        outer.watch(t)
        with df.GradientTape() as inner:
            inner.watch(t)
            y = loaded(t)
        g = df.reduce_sum(inner.gradient(y, t))
    with pytest.raises(df.errors.UnimplementedError, match="custom_gradient: this graph was loaded"):
        outer.gradient(g, t)
    # without the backward in the document there is no gradient to take: a typed error
    bare = df.load_json(df.export_json(cf))
    with pytest.raises(df.errors.UnimplementedError, match="include_backward=True"):
        _gradients(bare, x)


# ---------------------------------------------------------------------------------------
# A function returning a variable returns its value once loaded

def test_a_loaded_function_returns_the_value_of_a_variable_the_defun_returns():
    # before: the loaded function returned None in its place
    v = df.Variable(np.array([1.0, 2.0]))

    @df.defun
    def step(x):
        v.assign_add(x)
        return x * 2.0, v, {"v": v, "y": x}

    x = np.array([0.5, 0.25])
    cf = step.get_concrete_function(df.constant(x))
    for backward in (False, True):
        v.assign(np.array([1.0, 2.0]))      # exported as its value now
        loaded = df.load_json(json.loads(json.dumps(df.export_json(cf, include_backward=backward))))
        want = step(df.constant(x))
        got = loaded(x)
        np.testing.assert_allclose(got[1].numpy(), [1.5, 2.25])     # the value after the assign
        np.testing.assert_allclose(got[1].numpy(), want[1].numpy())
        np.testing.assert_allclose(got[2]["v"].numpy(), [1.5, 2.25])
        np.testing.assert_allclose(got[0].numpy(), [1.0, 0.5])
        np.testing.assert_allclose(got[2]["y"].numpy(), x)
        np.testing.assert_allclose(loaded(x)[1].numpy(), [2.0, 2.5])   # the loaded copy keeps its state
    only = df.defun(lambda: v).get_concrete_function()
    v.assign(np.array([3.0, 4.0]))
    np.testing.assert_allclose(df.load_json(df.export_json(only))().numpy(), [3.0, 4.0])


def test_an_output_dict_mixing_int_and_str_keys_is_refused_at_load():
    """Export refuses such a dict (its leaves are ordered by sorted key); so does load."""
    import json

    @df.defun
    def f(x):
        return {"a": x, "b": x * 2.0}
    text = json.dumps(df.export_json(f.get_concrete_function(df.constant([1.0]))))
    assert '["b", {"output": 1}]' in text
    df.load_json(json.loads(text.replace('["b", {"output": 1}]', '["c", {"output": 1}]')))
    with pytest.raises(df.errors.GraphFormatError, match=r"keys mix str and int \('a', 1\)"):
        df.load_json(json.loads(text.replace('["b", {"output": 1}]', '[1, {"output": 1}]')))
    with pytest.raises(TypeError, match="keys of one sortable kind"):
        df.export_json(df.defun(lambda x: {"a": x, 1: x}).get_concrete_function(df.constant([1.0])))
