"""The public vocabulary between modules, and the public accessors the docs use.

- graph/serialize/schema.py's checkers are public (`__all__`, documented) and what
  validate.py imports of it is only those;
- gradient records are `DenseGrad` / `SlicesGrad`, the same from a trace, from a
  document, in the JSON and in the numpy module, and gradients through them equal eager;
- `Backward` is built by one constructor, which works out `side_source`;
- `cf.backward_function()`, `cf.to_dot()`, `cf.to_networkx()` give what the internals give;
- `df.Backend`, `df.NumpyBackend`, `df.register_backend` are the backends module's own.
"""
import ast
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import defun as df
from defun.graph import backends
from defun.graph.executor import compile_graph
from defun.graph.gradients import Backward, build_backward, saving_from
from defun.graph.input_gradients import DenseGrad, SlicesGrad
from defun.graph.printer import to_dot, to_networkx
from defun.graph.serialize import schema, validate
from defun.graph_function import GraphFunction

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------
# schema's checkers: public and documented; validate imports nothing private of it

def test_schema_names_are_public_and_documented():
    for name in schema.__all__:
        assert not name.startswith("_") and hasattr(schema, name), name
        value = getattr(schema, name)
        if callable(value):
            assert (value.__doc__ or "").strip(), f"schema.{name} has no docstring"


@pytest.mark.parametrize("module", ["validate", "export", "build", "loaded"])
def test_serialize_modules_import_only_public_schema_names(module):
    path = os.path.join(ROOT, "graph", "serialize", f"{module}.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    imported = [a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module in ("defun.graph.serialize.schema", "defun.graph.serialize.validate")
                for a in node.names]
    assert not [n for n in imported if n.startswith("_")], imported
    assert all(n in schema.__all__ or n in validate.__all__ for n in imported), imported


def test_a_checker_names_the_field_it_refuses():
    assert schema.check_int(3, "a.b", 0, 5) == 3
    with pytest.raises(df.errors.GraphFormatError, match=r"^a\.b: expected int, got bool"):
        schema.check_int(True, "a.b")
    with pytest.raises(df.errors.GraphFormatError, match=r"^f\[0\]\.name: expected a Python identifier"):
        schema.check_identifier("class", "f[0].name")
    assert schema.check_shape([2, None], "s") == (2, None)
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(schema.check_array(schema.encode_array(arr), "t", [0]), arr)


# ---------------------------------------------------------------------------------------
# Gradient records

def _sparse(p, ids):
    return df.reduce_sum(df.gather(p, ids) * 2.0)


def _dense(x):
    return df.reduce_sum(df.tanh(x) * x)


P = np.arange(6.0).reshape(3, 2)
IDS = np.array([0, 2, 0], np.int32)


def test_a_trace_records_dense_and_slices_gradients_by_type():
    cf = df.defun(_sparse).get_concrete_function(df.constant(P), df.constant(IDS))
    bw = build_backward(cf.graph)
    assert bw.input_grads == [SlicesGrad(0, 1, (3, 2)), None]
    assert type(bw.input_grads[0]) is SlicesGrad
    cd = df.defun(_dense).get_concrete_function(df.constant(P))
    [g] = build_backward(cd.graph).input_grads
    assert type(g) is DenseGrad and g.output == 0


def test_records_round_trip_through_json_and_gradients_equal_eager(tmp_path):
    p, ids = df.constant(P), df.constant(IDS)
    cf = df.defun(_sparse).get_concrete_function(p, ids)
    path = tmp_path / "f.json"
    df.export_json(cf, str(path), include_backward=True)
    [record] = json.loads(path.read_text())["gradients"]
    assert record["input_gradients"] == [{"slices": [0, 1], "dense_shape": [3, 2]}, None]
    loaded = df.load_json(str(path))
    assert GraphFunction.of(loaded.graph).backward().input_grads == [SlicesGrad(0, 1, (3, 2)), None]
    grads = []
    for fn in (_sparse, df.defun(_sparse), loaded):
        with df.GradientTape() as tape:
            tape.watch(p)
            y = fn(p, ids)
        g = tape.gradient(y, p)
        assert isinstance(g, df.IndexedSlices)
        grads.append(df.convert_to_tensor(g).numpy())
    for g in grads[1:]:
        np.testing.assert_array_equal(g, grads[0])
    np.testing.assert_array_equal(grads[0], [[4.0, 4.0], [0.0, 0.0], [2.0, 2.0]])


def test_the_numpy_module_densifies_a_slices_record_like_the_tape():
    p, ids = df.constant(P), df.constant(IDS)
    cf = df.defun(_sparse).get_concrete_function(p, ids)
    scope = {}
    exec(compile(df.export_numpy_source(cf, include_backward=True), "m.py", "exec"), scope)
    outputs, saved = scope["forward_with_side_outputs"](P, IDS)
    grads = scope["backward"]([np.float64(1.0)], saved)
    with df.GradientTape() as tape:
        tape.watch(p)
        y = _sparse(p, ids)
    np.testing.assert_array_equal(grads[0], df.convert_to_tensor(tape.gradient(y, p)).numpy())
    assert grads[1] is None and outputs[0] == y.numpy()


# ---------------------------------------------------------------------------------------
# One constructor for a backward

def test_backward_constructor_works_out_side_source():
    cf = df.defun(lambda x: df.tanh(x)).get_concrete_function(df.constant(P))
    bw = build_backward(cf.graph)
    # tanh's gradient reads tanh(x), the function's own output 0: no extra output needed
    assert bw.side_source == [0] and bw.capture_sources == [("side", 0)]
    assert saving_from(cf.graph, bw).next is cf.graph
    again = Backward(bw.graph, bw.forward, bw.grad_outputs, bw.capture_sources, bw.side_outputs,
                     bw.input_grads, cf.graph.outputs)
    assert again.side_source == [0]
    loaded_like = Backward(bw.graph, bw.forward, bw.grad_outputs, bw.capture_sources,
                           bw.side_outputs, bw.input_grads)
    assert loaded_like.side_source == [None]


def test_rematerialized_and_loaded_backwards_are_backwards(tmp_path):
    x = df.constant(np.linspace(-1.0, 1.0, 5))
    remat = df.defun(lambda v: df.reduce_sum(df.tanh(df.tanh(v))), rematerialize=True)
    bw = GraphFunction.of(remat.get_concrete_function(x).graph, rematerialize=True).backward()
    assert type(bw) is Backward and bw.side_outputs == [] and bw.side_source == []
    assert bw.capture_sources == [("input", 0)]
    df.export_json(df.defun(_dense).get_concrete_function(x), str(tmp_path / "d.json"),
                   include_backward=True)
    loaded = df.load_json(str(tmp_path / "d.json"))
    lb = GraphFunction.of(loaded.graph).backward()
    assert type(lb) is Backward and lb.side_source == [None] * len(lb.side_outputs)


# ---------------------------------------------------------------------------------------
# The public accessors the guide uses

def _energy(x):
    return df.reduce_sum(df.tanh(x) * x)


@pytest.mark.parametrize("remat", [False, True])
def test_backward_function_is_the_internal_backward_and_runs_like_the_tape(remat):
    x = df.constant(np.linspace(-1.0, 1.0, 4))
    f = df.defun(_energy, rematerialize=remat)
    cf = f.get_concrete_function(x)
    bf = cf.backward_function()
    bw = GraphFunction.of(cf.graph, rematerialize=remat).backward()
    assert bf.graph is bw.graph and bf.forward is bw.forward
    assert bf.side_outputs == bw.side_outputs and bf.capture_sources == bw.capture_sources
    assert bf.capture_sources == ([("input", 0)] if remat else [("input", 0), ("side", 0)])
    # run it by hand: the forward with side outputs, then the backward fed as it says
    outs = compile_graph(bf.forward)(x.numpy())
    n = len(cf.graph.outputs)
    feed = [np.float64(1.0)] + [x.numpy() if kind == "input" else outs[n + v] if kind == "side"
                                else np.asarray(v) for kind, v in bf.capture_sources]
    [by_hand] = compile_graph(bf.graph)(*feed)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = _energy(x)
    np.testing.assert_allclose(by_hand, tape.gradient(y, x).numpy(), rtol=1e-12)
    np.testing.assert_allclose(outs[0], y.numpy(), rtol=1e-12)


def test_to_dot_and_to_networkx_draw_the_graph_with_its_names():
    w = df.Variable(np.ones((2, 2), np.float32), name="w")

    @df.defun
    def layer(x):
        return {"score": df.reduce_sum(df.tanh(x @ w), axis=1)}

    cf = layer.get_concrete_function(df.TensorSpec([None, 2], df.float32))
    dot = cf.to_dot()
    assert dot == to_dot(cf.graph, input_names=["x"], output_names=["score"])
    assert "→ score" in dot and 'label="x\\n' in dot and "d/dx" not in dot
    with_backward = cf.to_dot(backward=True)
    assert with_backward == to_dot(cf.graph, GraphFunction.of(cf.graph).backward(),
                                   input_names=["x"], output_names=["score"])
    assert "d/dx" in with_backward and "d/dw" in with_backward
    g, want = cf.to_networkx(), to_networkx(cf.graph)
    assert sorted(g.nodes(data="op")) == sorted(want.nodes(data="op"))
    assert sorted(g.edges(data="kind")) == sorted(want.edges(data="kind"))
    assert "matmul" in dict(g.nodes(data="op")).values()


def test_the_backends_api_is_public():
    assert df.Backend is backends.Backend and df.NumpyBackend is backends.NumpyBackend
    assert df.register_backend is backends.register_backend
    assert {"Backend", "NumpyBackend", "register_backend"} <= set(df.__all__)


def test_a_backend_registered_by_its_public_name_runs_a_defun():
    # in a fresh interpreter: a registered backend stays installed for the process
    code = (
        "import numpy as np, defun as df\n"
        "class Doubling(df.NumpyBackend):\n"
        "    name = 'doubling'\n"
        "    def kernel(self, node):\n"
        "        if node.op.name == 'tanh':\n"
        "            return (lambda a: 2 * np.tanh(a)), False\n"
        "        return super().kernel(node)\n"
        "df.register_backend(Doubling())\n"
        "x = df.constant([0.5, -1.0])\n"
        "f = lambda v: df.tanh(v)\n"
        "print(list(df.backends()).count('doubling'),\n"
        "      np.array_equal(df.defun(f, backend='doubling')(x).numpy(), 2 * np.tanh(x.numpy())),\n"
        "      np.array_equal(df.defun(f)(x).numpy(), df.tanh(x).numpy()))\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "True", "True"]
