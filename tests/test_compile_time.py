"""Compile-time shortcuts keep their answers: the loader's fast path for plainly valid
nodes accepts exactly what the field-by-field checks accept (and makes the same spec), the
collector is paused only while compiling or loading, the kept live-node answer follows
the outputs asked for, and plans written over dead temporaries compute the same values."""
import copy
import gc
import json

import numpy as np
import pytest

import defun as df
from defun.graph.executor import compile_graph
from defun.graph.analysis import live_node_ids
from defun.runtime.collector import paused_gc
from defun.graph.serialize import from_document
from defun.graph.serialize.validate import _Context, _checked_node, _plain_node
from graph_helpers import F32, build
from defun.runtime.errors import GraphFormatError

_TANH = {"op": "tanh", "inputs": ["0:0"], "attrs": {}, "control_inputs": [],
         "outputs": [{"dtype": "float32", "shape": [4]}]}


def _variant(**changes):
    doc = copy.deepcopy(_TANH)
    for key, value in changes.items():
        if value is KeyError:
            del doc[key]
        else:
            doc[key] = value
    return doc


def _output(shape=(4,), dtype="float32", **extra):
    return [{"dtype": dtype, "shape": list(shape), **extra}]


class _IntLike(int):
    pass


class _Dict(dict):
    pass


NODE_DOCS = [
    _TANH,
    _variant(stateful=False), _variant(stateful=True), _variant(stateful="no"), _variant(stateful=None),
    _variant(site=["f.py", 3]), _variant(site=["f.py", 0]), _variant(site=["a/f.py", 3]),
    _variant(site=["f\x1b.py", 3]), _variant(site="f.py:3"), _variant(site=["f.py", True]),
    _variant(site=["f.py", 3], stateful=True), _variant(site=None),
    _variant(extra=1), _variant(attrs=KeyError), _variant(control_inputs=KeyError),
    _variant(op=5), _variant(op="x" * 65), _variant(op="no_such_op"), _variant(op="placeholder"),
    _variant(op="stateful_call"), _variant(op="read_variable"),
    _variant(inputs="0:0"), _variant(inputs=[0]), _variant(inputs=["01:0"]), _variant(inputs=["0:x"]),
    _variant(inputs=["9:0"]), _variant(inputs=["1:0"]), _variant(inputs=["0:0", "0:0"]),
    _variant(inputs=[]), _variant(inputs=["0:0 "]),
    _variant(attrs=[]), _variant(attrs={"axis": 1}), _variant(attrs=_Dict()),
    {"op": "reduce_sum", "inputs": ["0:0"], "attrs": {"axis": [0], "keepdims": True},
     "control_inputs": [], "outputs": [{"dtype": "float32", "shape": [1]}]},
    {"op": "reduce_sum", "inputs": ["0:0"], "attrs": {"axis": "0"}, "control_inputs": [],
     "outputs": [{"dtype": "float32", "shape": []}]},
    {"op": "argmax", "inputs": ["0:0"], "attrs": {}, "control_inputs": [],
     "outputs": [{"dtype": "int64", "shape": []}]},
    _variant(outputs=_output([True])), _variant(outputs=_output([-1])), _variant(outputs=_output([None])),
    _variant(outputs=_output([1.0])), _variant(outputs=_output([[4]])), _variant(outputs=_output([_IntLike(4)])),
    _variant(outputs=_output([1 << 28])), _variant(outputs=_output([(1 << 28) + 1])),
    _variant(outputs=_output([1 << 14, 1 << 15])), _variant(outputs=_output([1] * 33)),
    _variant(outputs=_output([])), _variant(outputs=_output(dtype="float33")),
    _variant(outputs=_output(dtype=5)), _variant(outputs=_output(dtype="resource")),
    _variant(outputs=_output(extra=1)), _variant(outputs=[{"dtype": "float32"}]),
    _variant(outputs=[{"dtype": "float32", "shapes": [4]}]), _variant(outputs={}), _variant(outputs=[]),
    _variant(outputs=[_Dict(dtype="float32", shape=[4])]),
    _variant(control_inputs=[1]), _variant(control_inputs=[0]), _variant(control_inputs="1"),
    _variant(control_inputs={}),
    [], "tanh", None,
]


def _checked(ndoc, ctx):
    try:
        return _checked_node(ndoc, "f.nodes[0]", ctx, 2, 1, {}), None
    except GraphFormatError as e:
        return None, str(e)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_the_fast_path_accepts_what_the_full_checks_accept_and_makes_the_same_spec(version):
    fast_specs = 0
    for ndoc in NODE_DOCS:
        ctx = _Context({})
        ctx.version = version
        want, error = _checked(copy.deepcopy(ndoc), ctx)
        ctx = _Context({})
        ctx.version = version
        try:
            got = _plain_node(copy.deepcopy(ndoc), "f.nodes[0]", ctx, 2)
        except GraphFormatError as e:     # only an attr the full checks refuse the same way
            assert error == str(e), ndoc
            continue
        if got is None:
            continue
        fast_specs += 1
        assert error is None, (ndoc, error)
        assert got == want, ndoc
        assert [type(d) for s, _ in got.outputs for d in s] == [type(d) for s, _ in want.outputs for d in s]
    assert fast_specs >= 5        # the plain nodes did take the fast path


def test_a_document_loads_the_same_through_either_path(monkeypatch):
    from defun.graph.serialize import validate
    nodes = [dict(_TANH, inputs=[f"{k}:0"]) for k in range(30)]
    nodes[7] = dict(nodes[7], control_inputs=[3])           # the full checks for this one
    doc = {"format": "defun.graph", "version": 2, "entry": "f", "variables": [],
           "output_structure": {"output": 0},
           "functions": [{"name": "f", "inputs": [{"name": "x", "dtype": "float32", "shape": [4]}],
                          "nodes": nodes, "outputs": [{"ref": "30:0", "dtype": "float32", "shape": [4]}]}]}
    x = np.linspace(-1.0, 1.0, 4).astype(np.float32)
    fast = from_document(copy.deepcopy(doc))
    monkeypatch.setattr(validate, "_plain_node", lambda *a: None)
    slow = from_document(copy.deepcopy(doc))
    assert json.dumps(fast.to_document()) == json.dumps(slow.to_document())
    expected = x
    for _ in range(30):
        expected = np.tanh(expected)
    np.testing.assert_allclose(fast(x), expected, rtol=1e-6)
    np.testing.assert_array_equal(fast(x), slow(x))


@pytest.mark.parametrize("enabled", [True, False])
def test_compiling_and_loading_leave_the_collector_as_they_found_it(enabled):
    g = build("f", [((4,), F32)], lambda x: df.tanh(x) * 2.0)
    bad = {"format": "defun.graph", "version": 2, "entry": "f", "functions": []}
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        compile_graph(g)
        assert gc.isenabled() is enabled
        with pytest.raises(GraphFormatError):
            from_document(bad)
        assert gc.isenabled() is enabled
        with paused_gc():
            assert not gc.isenabled()
            with paused_gc():
                pass
            assert not gc.isenabled()    # an inner pause leaves it to the outer one
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_overlapping_pauses_in_two_threads_end_with_the_last():
    """Thread A pauses, B pauses, A ends: the collector stays off until B ends too."""
    import threading
    was = gc.isenabled()
    gc.enable()
    a_in, b_in, a_out, b_may_end = (threading.Event() for _ in range(4))
    seen = {}

    def a():
        with paused_gc():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b():
        a_in.wait(5)
        with paused_gc():
            b_in.set()
            a_out.wait(5)
            seen["after A ended"] = gc.isenabled()
            b_may_end.wait(5)
    try:
        ts = [threading.Thread(target=a), threading.Thread(target=b)]
        for t in ts:
            t.start()
        a_out.wait(5)
        b_may_end.set()
        for t in ts:
            t.join(5)
        assert seen == {"after A ended": False} and gc.isenabled()
    finally:
        gc.enable() if was else gc.disable()


def test_the_kept_live_nodes_follow_the_outputs_asked_for():
    def body(x):
        a = df.tanh(x)
        b = df.exp(x)
        return a, b
    g = build("f", [((4,), F32)], body)
    a, b = g.outputs
    both = live_node_ids(g)
    only_a = live_node_ids(g, [a])
    only_b = live_node_ids(g, [b])
    assert id(a.node) in both and id(b.node) in both
    assert id(a.node) in only_a and id(b.node) not in only_a
    assert id(b.node) in only_b and id(a.node) not in only_b
    assert live_node_ids(g, [a]) == only_a and live_node_ids(g) == both
    x = np.linspace(-1.0, 1.0, 4).astype(np.float32)
    (got,) = compile_graph(g, [b])(x)
    np.testing.assert_allclose(got, np.exp(x), rtol=1e-6)


@pytest.mark.parametrize("backend", ["numpy", "loaded"])
def test_chains_written_over_one_buffer_equal_numpy(backend):
    def f(x):
        for i in range(40):
            x = df.tanh(x) if i % 2 == 0 else x * 1.01 + 0.1
        return x
    x = np.linspace(-2.0, 2.0, 8)
    expected = x
    for i in range(40):
        expected = np.tanh(expected) if i % 2 == 0 else expected * 1.01 + 0.1
    fn = df.defun(f)
    if backend == "loaded":
        fn = df.load_json(df.export_json(fn.get_concrete_function(df.constant(x))))
        from defun.graph.functions import plan_of
        lines = plan_of(fn.graph, fn.backend).source.splitlines()
        assert sum(line.strip().startswith("k") for line in lines) >= 50   # written over in place
    got = fn(df.constant(x)) if backend == "numpy" else fn(x)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12)
    np.testing.assert_array_equal(x, np.linspace(-2.0, 2.0, 8))     # the argument is untouched


def test_nodes_sharing_a_budget_wrapper_are_each_named_when_refused():
    """Five tanh nodes of the argument share one wrapper of the loaded plan; the budget
    allows three of their results at once, and the refusal names the fourth node."""
    doc = {"format": "defun.graph", "version": 2, "entry": "f", "variables": [],
           "output_structure": {"list": [{"output": k} for k in range(5)]},
           "functions": [{"name": "f", "inputs": [{"name": "x", "dtype": "float32", "shape": [4]}],
                          "nodes": [dict(_TANH) for _ in range(5)],
                          "outputs": [{"ref": f"{k}:0", "dtype": "float32", "shape": [4]}
                                      for k in range(1, 6)]}]}
    x = np.linspace(-1.0, 1.0, 4).astype(np.float32)
    from defun.graph.functions import plan_of
    f = from_document(copy.deepcopy(doc), max_bytes=3 * 16 + 8)
    tanh_lines = [line for line in plan_of(f.graph, f.backend).source.splitlines() if line.endswith("(a0)")]
    assert len(tanh_lines) == 5 and len({line.split(" = ")[1] for line in tanh_lines}) == 1
    with pytest.raises(df.errors.ResourceExhaustedError, match=r"%4\b") as e:
        f(x)
    assert "%1" not in str(e.value) and "tanh" in str(e.value)
    results = from_document(copy.deepcopy(doc), max_bytes=5 * 16)(x)
    for r in results:
        np.testing.assert_allclose(r, np.tanh(x), rtol=1e-6)


def test_a_backend_taking_out_by_keyword_gets_out_keywords():
    """writes_out without out_positional: the plan passes `out=` and assigns the result."""
    import re
    from defun.graph.backends import NumpyBackend

    calls = []

    def tanh(x, out=None):
        calls.append(out is not None)
        return np.tanh(x, out=out)

    class KeywordOut(NumpyBackend):
        name = "keyword-out-test"

        def kernel(self, node):
            fn, pass_attrs = super().kernel(node)
            return (tanh if fn is np.tanh else fn), pass_attrs

        def writes_out(self, node, fn):
            return fn is tanh or super().writes_out(node, fn)

        def out_positional(self, node, fn):
            return fn is not tanh and super().out_positional(node, fn)

    g = build("f", [((4,), F32)], lambda x: df.tanh(df.tanh(x) * 2.0))
    plan = compile_graph(g, backend=KeywordOut())
    assert re.search(r"^\s+(v\d+) = k\d+\(\1, out=\1\)$", plan.source, re.M), plan.source
    assert re.search(r"^\s+k\d+\((v\d+), c\d+, \1\)$", plan.source, re.M), plan.source
    x = np.linspace(-1.0, 1.0, 4).astype(np.float32)
    np.testing.assert_allclose(plan(x)[0], np.tanh(np.tanh(x) * 2.0), rtol=1e-6)
    assert calls == [False, True]


def test_callees_first_is_networkx_lexicographic_order_of_the_reversed_call_graph():
    import random
    from collections import namedtuple
    import networkx as nx
    from defun.graph.serialize.validate import call_graph_of, callees_first
    Spec = namedtuple("Spec", "callees")
    rng = random.Random(0)
    for trial in range(40):
        names = [f"f{k}" for k in rng.sample(range(100), rng.randint(1, 12))]
        specs = {}
        for k, name in enumerate(names):     # calls only later names (a DAG), some twice
            later = names[k + 1:]
            calls = [rng.choice(later) for _ in range(rng.randint(0, 3))] if later else []
            specs[name] = Spec([(c, "p") for c in calls])
        expected = list(nx.lexicographical_topological_sort(call_graph_of(specs).reverse(copy=False)))
        assert callees_first(specs) == expected
    cyclic = {"a": Spec([("b", "p")]), "b": Spec([("a", "p")]), "c": Spec([]), "d": Spec([("d", "p")])}
    assert callees_first(cyclic) == ["c"]     # functions on a cycle are left out
