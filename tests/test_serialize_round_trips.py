"""JSON export/import round trips; version 2 (statefulness a node flag) and version-1 documents;
the graph layer loading a document without the decorator layer."""
import base64
import json
import math
import os

import numpy as np
import pytest

import defun as df
from defun.graph import serialize as ser
from defun.graph.executor import compile_graph
from defun.graph.ir import Graph
from defun.graph.serialize import describe_structure, dumps_document, from_document, to_document
from defun.runtime import attr_types
from defun.runtime.errors import GraphFormatError, InvalidArgumentError
from serialize_helpers import (F32, GRAPH_ONLY_LOADER, as_version_1, as_version_2, build_rich, in_memory_run,
                               simple_graph, stateful_control_flow_function)


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
    assert doc["format"] == "defun.graph" and doc["version"] == 3 and doc["entry"] == "simple"
    f, = doc["functions"]
    assert f["inputs"] == [{"name": "x", "dtype": "float32", "shape": [None, 3]},
                           {"name": "w", "dtype": "resource", "shape": [], "variable": "w"}]
    read = f["nodes"][0]
    site = read.pop("site")     # where simple_graph made it: a base name and a line
    assert site[0] == os.path.basename(simple_graph.__code__.co_filename) and site[1] > 0
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
        doc = ser.schema.encode_array(arr)
        back = ser.schema.check_array(doc, "t", [0])
        assert back.dtype == np.asarray(arr).dtype.newbyteorder("=") and back.shape == np.shape(arr)
        np.testing.assert_array_equal(back, arr)
        assert not back.flags.writeable


# ---------------------------------------------------------------------------------------
# Version 2: statefulness is a node flag; version-1 documents (stateful twins) still load.

def test_version_2_flags_stateful_call_cond_and_while_nodes():
    f, v = stateful_control_flow_function()
    x = np.array([1.0, -3.0])
    doc = df.export_json(f.get_concrete_function(df.constant(x)))
    entry = next(fd for fd in doc["functions"] if fd["name"] == doc["entry"])
    flagged = sorted(n["op"] for n in entry["nodes"] if n.get("stateful"))
    assert flagged == ["assign_add_variable", "call", "cond", "while"]
    assert not any("stateful_" in n["op"] for fd in doc["functions"] for n in fd["nodes"])
    assert all(n.get("stateful", False) is True or "stateful" not in n
               for fd in doc["functions"] for n in fd["nodes"])


def test_version_1_documents_with_stateful_twins_still_load():
    f, v = stateful_control_flow_function()
    x = np.array([1.0, -3.0])
    doc = df.export_json(f.get_concrete_function(df.constant(x)))
    old = as_version_1(doc)
    ops = {n["op"] for fd in old["functions"] for n in fd["nodes"]}
    assert {"stateful_call", "stateful_cond", "stateful_while"} <= ops
    start = v.numpy()
    expected = f(df.constant(x)).numpy()        # assigns v once
    v.assign(start)
    for d in (doc, old):
        loaded = df.load_json(json.loads(json.dumps(d)))
        np.testing.assert_allclose(loaded(x).numpy(), expected, rtol=1e-12)
        np.testing.assert_allclose(loaded.variables["v"], start + 0.5)
    # a loaded version-1 document exports as version 3, the flags derived from the ops
    again = df.load_json(old).to_document()
    assert again["version"] == 3
    assert json.loads(dumps_document(again)) == json.loads(dumps_document(
        df.load_json(as_version_2(doc)).to_document()))


def test_version_1_has_no_stateful_field():
    f, _ = stateful_control_flow_function()
    old = as_version_1(df.export_json(f.get_concrete_function(df.constant([1.0, 1.0], df.float64))))
    old["functions"][0]["nodes"][0]["stateful"] = True
    with pytest.raises(GraphFormatError, match=r"nodes\[0\]: unknown field 'stateful'"):
        df.load_json(old)


def test_graph_package_loads_cond_and_while_documents_without_defun(tmp_path):
    import subprocess
    import sys
    f, v = stateful_control_flow_function()
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
