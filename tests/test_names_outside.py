"""Names all the way out: a function returning a dict or a namedtuple keeps its output names
in the document, the loaded function, the numpy module and the ONNX model; loaded functions
and the module take inputs by keyword; load_json's backend; what runs (the optimized graph,
the plan's source); df.profile on every kind of function and backend."""
import collections
import json

import numpy as np
import pytest

import defun as df
from isolated import same_bits
from schema_check import assert_valid

Stats = collections.namedtuple("Stats", "mean spread")
F32 = df.float32


def _model():
    w = df.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2), name="w")

    @df.defun
    def predict(x, scale):
        logits = df.matmul(x, w) * scale
        h = df.tanh(logits)
        return {"logits": logits, "stats": Stats(df.reduce_mean(h, axis=1), df.reduce_max(h) - df.reduce_min(h))}
    cf = predict.get_concrete_function(df.TensorSpec([None, 3], F32), df.TensorSpec([], F32))
    return predict, cf


X = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)
S = np.float32(1.5)
NAMES = ["logits", "stats.mean", "stats.spread"]


def _expected(x=X, s=S):
    """The same computation in numpy."""
    w = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
    logits = (x @ w) * s
    h = np.tanh(logits)
    return [logits, h.mean(axis=1), h.max() - h.min()]


def _flat(result):
    return [result["logits"], result["stats"].mean, result["stats"].spread]


def test_the_document_and_the_loaded_function_keep_dict_keys_and_namedtuple_fields():
    _, cf = _model()
    doc = df.export_json(cf)
    assert_valid(doc)
    assert doc["output_structure"] == {"dict": [
        ["logits", {"output": 0}],
        ["stats", {"namedtuple": {"name": "Stats", "fields": [["mean", {"output": 1}], ["spread", {"output": 2}]]}}]]}
    f = df.load_json(json.loads(json.dumps(doc)))
    assert f.output_names == NAMES
    out = f(X, S)
    assert set(out) == {"logits", "stats"}
    stats = out["stats"]
    assert type(stats).__name__ == "Stats" and stats._fields == ("mean", "spread") and isinstance(stats, tuple)
    for got, want in zip(_flat(out), _expected()):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    assert f.to_document() == doc                          # loads back to the same document
    # the eager defun returns the user's own namedtuple; the loaded one a namedtuple alike
    eager = cf(df.constant(X), df.constant(S))
    assert type(eager["stats"]) is Stats
    assert all(same_bits(a.numpy(), b.numpy()) is None for a, b in zip(_flat(eager), _flat(out)))


def test_output_names_follow_keys_and_fields_and_stay_unique():
    from defun.graph.serialize import describe_structure, output_names
    a = object()
    assert output_names(describe_structure(a), 1) == ["output_0"]
    assert output_names(describe_structure((a, a)), 2) == ["output_0", "output_1"]
    assert output_names(describe_structure((a, {"aux": a})), 2) == ["output_0", "output_1.aux"]
    assert output_names(describe_structure({"p": [a, a]}), 2) == ["p.0", "p.1"]
    assert output_names(describe_structure({"a.b": a, "a": {"b": a}}), 2) == ["a.b", "a.b_1"]
    # an output returned twice is named where it first appears
    assert output_names({"dict": [["x", {"output": 0}], ["y", {"output": 0}]]}, 1) == ["x"]


@pytest.mark.parametrize("structure, message", [
    ({"namedtuple": {"name": "not valid", "fields": []}}, "output_structure.namedtuple.name: expected a Python identifier"),
    ({"namedtuple": {"name": "P", "fields": [["_x", {"output": 0}]]}}, "fields[0][0]: field '_x' starts with _"),
    ({"namedtuple": {"name": "P", "fields": [["x", {"output": 0}], ["x", {"output": 0}]]}}, "field 'x' repeats"),
    ({"namedtuple": {"name": "class", "fields": []}}, "expected a Python identifier, got 'class'"),
    ({"namedtuple": {"name": "P"}}, "missing field 'fields'"),
])
def test_a_bad_namedtuple_structure_is_a_format_error(structure, message):
    _, cf = _model()
    doc = df.export_json(cf)
    doc["output_structure"] = structure
    with pytest.raises(df.errors.GraphFormatError, match=None) as caught:
        df.load_json(doc)
    assert message in str(caught.value)


def test_loaded_functions_take_inputs_by_keyword():
    _, cf = _model()
    f = df.load_json(df.export_json(cf))
    by_position = _flat(f(X, S))
    for call in (lambda: f(x=X, scale=S), lambda: f(scale=S, x=X), lambda: f(X, scale=S)):
        assert all(same_bits(a.numpy(), b.numpy()) is None for a, b in zip(_flat(call()), by_position))
    with pytest.raises(TypeError, match="unexpected keyword argument 'bias'; its arguments are x, scale"):
        f(X, S, bias=S)
    with pytest.raises(TypeError, match="several values for argument 'x'"):
        f(X, x=X)
    with pytest.raises(TypeError, match="missing argument 'scale'"):
        f(x=X)

    @df.defun
    def outer(x):                            # inside a trace: one call node, bound the same way
        return f(scale=df.constant(2.0), x=x)["logits"]
    np.testing.assert_allclose(outer(df.constant(X)).numpy(), _expected(s=np.float32(2.0))[0], rtol=1e-6)


def test_the_numpy_module_names_its_outputs_and_takes_keywords():
    _, cf = _model()
    for source in (df.export_numpy_source(cf), df.export_numpy_source(df.load_json(df.export_json(cf)))):
        module = {}
        exec(compile(source, "predict_numpy.py", "exec"), module)      # the module needs numpy only
        assert module["OUTPUT_NAMES"] == tuple(NAMES) and module["INPUT_NAMES"] == ("x", "scale")
        for got, want in zip(module["forward"](scale=S, x=X), _expected()):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert all(same_bits(a, b) is None for a, b in zip(module["forward"](X, S), module["forward"](X, scale=S)))
        with pytest.raises(TypeError, match="forward\\(\\) got an unexpected keyword argument 'y'"):
            module["forward"](X, y=S)
        with pytest.raises(TypeError, match="missing argument"):
            module["forward"](X)


def test_onnx_output_names_are_the_names_exactly():
    ort = pytest.importorskip("onnxruntime")
    _, cf = _model()
    for fn in (cf, df.load_json(df.export_json(cf))):
        model = df.export_onnx(fn)
        assert [o.name for o in model.graph.output] == NAMES
        assert [i.name for i in model.graph.input] == ["x", "scale"]
        dims = model.graph.output[0].type.tensor_type.shape.dim
        assert dims[0].dim_param == "logits_0" and dims[1].dim_value == 2
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": X, "scale": np.asarray(S)})))
        for name, want in zip(NAMES, _expected()):
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------
# load_json(backend=...)

def test_load_json_runs_on_a_chosen_backend():
    _, cf = _model()
    doc = df.export_json(cf)
    with pytest.raises(ValueError, match="unknown backend 'fortran'; installed backends"):
        df.load_json(doc, backend="fortran")
    with pytest.raises(TypeError, match="backend is the name of an installed backend"):
        df.load_json(doc, backend=3)
    if "numba" not in df.backends():
        return
    metered = df.load_json(doc, backend="numba")     # keeps its budgets: regions metered where they start
    assert metered.backend.base.name == "numba" and metered.backend.max_bytes == 1 << 30
    for got, want in zip(_flat(metered(X, S)), _expected()):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    fast = df.load_json(doc, backend="numba", max_bytes=None, max_iterations=None, max_operations=None)
    assert fast.backend.name == "numba"
    for got, want in zip(_flat(fast(X, S)), _expected()):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    # differentiable there too, and equal to the numpy backend's gradient
    x = df.constant(X)
    grads = []
    for f in (fast, df.load_json(doc)):
        with df.GradientTape() as tape:
            tape.watch(x)
            loss = df.reduce_sum(f(x, S)["logits"])
        grads.append(tape.gradient(loss, x).numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)


# ---------------------------------------------------------------------------------------
# What runs: the optimized graph and the plan

def test_optimized_graph_and_plan_source():
    @df.defun
    def f(x):
        two = df.constant(1.0) + df.constant(1.0)          # folded by the passes
        return df.tanh(x * two) + 0.0 * x
    cf = f.get_concrete_function(df.TensorSpec([None], F32))
    optimized = cf.optimized_graph()
    assert len(optimized.nodes) < len(cf.graph.nodes)
    assert "const() {value=2.0}" in str(optimized) and str(cf.graph).count("const()") >= 2
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    from defun.graph.executor import compile_graph
    np.testing.assert_array_equal(compile_graph(optimized).run(x)[0], cf(df.constant(x)).numpy())
    source = cf.plan_source()
    assert source.startswith("def plan(") and source.count("\n") >= 3
    assert source == cf.plan_source("numpy")
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        cf.plan_source("nope")
    if "numba" in df.backends():
        assert cf.plan_source("numba") != source


# ---------------------------------------------------------------------------------------
# df.profile

def _assert_profile(rows, repeat, ops):
    assert isinstance(rows, df.Profile) and rows
    assert all(isinstance(r, df.ProfileRow) for r in rows)
    assert all(r.calls == repeat for r in rows)
    assert [r.seconds for r in rows] == sorted((r.seconds for r in rows), reverse=True)
    # a step no slower than the profiler's own clock counts 0 (graph/profiler.py)
    assert abs(sum(r.share for r in rows) - 1.0) < 1e-9 and all(r.seconds >= 0 for r in rows)
    assert sum(r.seconds for r in rows) > 0
    assert ops <= {r.op.split(" ")[0].split("(")[0] for r in rows} | {op for r in rows for op in _fused(r.op)}
    text = str(rows)
    assert text.splitlines()[1].split() == ["node", "op", "calls", "total", "share", "line"]
    assert len(text.splitlines()) == len(rows) + 2


def _fused(op):
    return op[len("fused("):-1].split(", ") if op.startswith("fused(") else []


def test_profile_a_defun_a_concrete_and_a_loaded_function():
    predict, cf = _model()
    rows = df.profile(predict, X, S, repeat=3)
    _assert_profile(rows, 3, {"matmul", "tanh", "multiply"})
    matmul = next(r for r in rows if r.op == "matmul")
    assert "test_names_outside.py:" in matmul.line and "df.matmul(x, w)" in matmul.line
    _assert_profile(df.profile(cf, df.constant(X), df.constant(S), repeat=2), 2, {"matmul"})
    loaded = df.load_json(df.export_json(cf))
    rows = df.profile(loaded, x=X, scale=S, repeat=4)
    _assert_profile(rows, 4, {"matmul", "tanh"})
    # a document keeps each node's file name and line (format version 3), not the line's text
    assert rows[0].line.startswith("test_names_outside.py:") and "df." not in rows[0].line
    bare = df.load_json(df.export_json(cf, sites=False))
    assert df.profile(bare, x=X, scale=S, repeat=1)[0].line == ""
    assert str(rows).startswith("# @predict: ")
    with pytest.raises(ValueError, match="repeat must be an int >= 1"):
        df.profile(cf, X, S, repeat=0)
    with pytest.raises(TypeError, match="profile expects a df.defun"):
        df.profile(lambda x: x, X)


def test_profile_on_numba_and_through_control_flow():
    if "numba" in df.backends():
        @df.defun(backend="numba")
        def chain(x):
            return df.reduce_sum(df.tanh(df.tanh(x) * 2.0) + 1.0)
        rows = df.profile(chain, np.ones(64, np.float32), repeat=2)
        assert any(r.op.startswith("fused(") and "tanh" in _fused(r.op) for r in rows)
        _assert_profile(rows, 2, set())

    @df.defun
    def loop(x):
        return df.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, v * 0.5), [df.constant(0), x])[1]
    rows = df.profile(loop, np.ones(8, np.float32), repeat=3)
    _assert_profile(rows, 3, {"while"})
    assert any(r.op.startswith("while {") and "body=@" in r.op for r in rows)
