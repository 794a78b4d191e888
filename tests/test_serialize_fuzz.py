"""Fuzzing: mutated documents load cleanly or fail with GraphFormatError."""
import base64
import copy
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import defun as df
from defun.graph.functions import call_graph
from defun.graph.ir import Graph
from defun.graph.serialize import dumps_document, from_document, to_document
from defun.runtime.errors import GraphFormatError, InvalidArgumentError
from serialize_helpers import F32, leaves_of


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
    for o in leaves_of(outs):
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
