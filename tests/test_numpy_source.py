"""df.export_numpy_source: every op row, forward and backward, run where defun cannot be
imported, gives the graph's results bit for bit; control flow, variables, errors."""
import numpy as np
import pytest

import defun as df
from defun.graph.functions import plan_of
from isolated import one_blas_thread, run_without_defun, same_bits
from opcheck import as_numpy, make_inputs
from op_table import ROWS, float_inputs

f64 = df.float64


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    """Every expected result of this module computed on one BLAS thread, as the defun-free
    subprocess computes its results (bit for bit holds at the same thread count)."""
    with one_blas_thread():
        yield


def _flat(out):
    if isinstance(out, (list, tuple)):
        return [y for x in out for y in _flat(x)]
    return [out]


def _graph_outputs(cf, xs):
    """The flat outputs of the graph's own compiled plan."""
    captured = [v._value for v in cf.graph.captured_values]
    return [np.asarray(o) for o in plan_of(cf.graph).run(*xs, *captured)]


def _tape_gradients(cf, xs, cotangents):
    """The gradients of the graph's recorded call (its backward function), per input."""
    ts = [df.constant(x) for x in xs]
    with df.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        outs = _flat(cf(*ts))
    seeds = [None if w is None else df.constant(w) for w in cotangents]
    grads = tape.gradient(outs, ts, output_gradients=seeds)
    return [None if g is None else as_numpy(g) for g in grads]


def _cases():
    out = []
    for row in ROWS:
        if row.op in ("custom_gradient",):   # a Python gradient: tested eagerly only
            continue
        for k, v in enumerate(row.variants):
            out.append(pytest.param(row, v, id=f"{row.op}-{k}"))
    return out


CASES = _cases()


def _differentiable(row, v):
    return row.grad is True and v.grad and bool(float_inputs(v))


@pytest.fixture(scope="module")
def op_results(tmp_path_factory):
    """Every row variant exported, run in one defun-free process; (expected, got) per id."""
    modules, cases, expected = {}, [], {}
    for param in CASES:
        row, v = param.values
        key = param.id
        backward = _differentiable(row, v)
        dt = f64 if backward else row.dtypes_of(v)[0]
        xs = make_inputs(v.args, dt)
        fn = df.defun(lambda *a, row=row, v=v: row.fn(*a, **v.kw),
                      input_signature=[df.TensorSpec(np.shape(x), df.as_dtype(np.asarray(x).dtype))
                                       for x in xs])
        try:
            cf = fn.get_concrete_function(*[df.TensorSpec(np.shape(x), df.as_dtype(x.dtype)) for x in xs])
            source = df.export_numpy_source(cf, include_backward=backward)
        except Exception as e:   # reported by the row's test
            expected[key] = ("export", f"{type(e).__name__}: {e}")
            continue
        name = "m_" + "".join(c if c.isalnum() else "_" for c in key)
        modules[name] = source
        outs = _graph_outputs(cf, xs)
        entry = {"module": name, "inputs": xs, "call": "forward"}
        exp = {"outputs": outs}
        if backward:
            rng = np.random.default_rng(1)
            ws = [rng.normal(size=o.shape).astype(o.dtype) if o.dtype.kind == "f" else None for o in outs]
            entry.update(call="backward", output_gradients=ws)
            exp["gradients"] = _tape_gradients(cf, xs, ws)
        expected[key] = ("ok", exp, len(cases))
        cases.append(entry)
    got = run_without_defun(modules, cases, tmp_path_factory.mktemp("numpy_source"))
    return expected, got


@pytest.mark.parametrize("row,v", CASES)
def test_op_row_matches_graph_without_defun(row, v, op_results, request):
    expected, got = op_results
    key = request.node.callspec.id
    status, *rest = expected[key]
    assert status == "ok", f"{row.op}{v!r}: export failed: {rest[0]}"
    exp, k = rest
    result = got[k]
    assert "error" not in result, f"{row.op}{v!r}: the numpy module failed: {result['error']}"
    assert len(result["outputs"]) == len(exp["outputs"])
    for j, (a, e) in enumerate(zip(result["outputs"], exp["outputs"])):
        why = same_bits(a, e)
        assert why is None, f"{row.op}{v!r} output {j}: {why}"
    for j, (a, e) in enumerate(zip(result.get("gradients", []), exp.get("gradients", []))):
        why = same_bits(a, e)
        assert why is None, f"{row.op}{v!r} gradient of input {j}: {why}"


# ---------------------------------------------------------------------------------------
# Models, control flow, variables

import importlib.util  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from defun.runtime import errors  # noqa: E402

_EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                        "train_mlp.py")


def _example():
    spec = importlib.util.spec_from_file_location("train_mlp_for_numpy_source", _EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _digits_model(steps=20):
    pytest.importorskip("sklearn")
    ex = _example()
    x_train, y_train, x_test, y_test = ex.load_data()
    model = ex.MLP([64, 32, 10], seed=0)
    step = df.defun(ex.make_train_step(model, 0.5))
    for i in range(steps):
        step(df.constant(x_train[i * 32:(i + 1) * 32]), df.constant(y_train[i * 32:(i + 1) * 32]))
    return ex, model, step, (x_train, y_train, x_test, y_test)


def _check(result, outputs=None, gradients=None, what=""):
    assert "error" not in result, f"{what}: {result['error']}"
    for kind, expected in (("outputs", outputs), ("gradients", gradients)):
        if expected is None:
            continue
        assert len(result[kind]) == len(expected), f"{what}: {kind}"
        for j, (a, e) in enumerate(zip(result[kind], expected)):
            why = same_bits(a, e)
            assert why is None, f"{what}: {kind} {j}: {why}"


def _variable_names(source):
    return re.findall(r"^(\w+) = VariableStore\(", source, re.M)


def test_digits_mlp_predicts_and_trains_the_same_without_defun(tmp_path):
    ex, model, _, (x_train, y_train, x_test, y_test) = _digits_model()
    predict = df.defun(model.logits)
    cf_predict = predict.get_concrete_function(df.TensorSpec([None, 64], df.float32))
    loss = df.defun(model.loss)
    cf_loss = loss.get_concrete_function(df.TensorSpec([None, 64], df.float32),
                                         df.TensorSpec([None], df.int32))
    xb, yb = x_train[:32], y_train[:32]
    fresh = ex.MLP([64, 32, 10], seed=3)
    step = df.defun(ex.make_train_step(fresh, 0.5))
    cf_step = step.get_concrete_function(df.constant(xb), df.constant(yb))
    sources = {"predict": df.export_numpy_source(cf_predict),
               "loss": df.export_numpy_source(cf_loss, include_backward=True),
               "step": df.export_numpy_source(cf_step)}
    assert _variable_names(sources["predict"]) == ["w0", "b0", "w1", "b1"]   # in capture order
    w = np.random.default_rng(0).normal(size=()).astype(np.float32)
    cases = [{"module": "predict", "call": "forward", "inputs": [x_test]},
             {"module": "loss", "call": "backward", "inputs": [xb, yb], "output_gradients": [w]},
             {"module": "step", "call": "forward", "inputs": [xb, yb], "repeat": 3,
              "variables": _variable_names(sources["step"])}]
    got = run_without_defun(sources, cases, tmp_path)

    _check(got[0], [predict(df.constant(x_test)).numpy()], what="predict")
    assert np.mean(np.argmax(got[0]["outputs"][0], 1) == y_test) > 0.7     # it is the trained model
    xt, yt = df.constant(xb), df.constant(yb)
    with df.GradientTape() as tape:
        tape.watch(xt)
        value = loss(xt, yt)
    grad_x = tape.gradient(value, xt, output_gradients=df.constant(w))
    _check(got[1], [value.numpy()], [grad_x.numpy(), None], what="loss backward")
    # the step assigns its variables: three calls there, three here
    for _ in range(3):
        last = step(xt, yt)
    _check(got[2], [last.numpy()], what="train step")
    for name, a in zip(cases[2]["variables"], got[2]["variables"]):
        var = {v.name: v for v in fresh.variables}[name]
        assert same_bits(a, var.numpy()) is None, f"variable {name} after three steps"


def _loop_function():
    @df.defun
    def f(x, n):
        def body(i, y):
            return i + 1, df.cond(df.reduce_sum(y) > 0, lambda: y * 0.9 + 0.1, lambda: df.sin(y) * 1.1)
        _, y = df.while_loop(lambda i, y: i < n, body, [df.constant(0), x], maximum_iterations=7)
        return df.reduce_sum(df.sin(y) * y), y
    return f


def test_cond_and_while_forward_and_backward_without_defun(tmp_path):
    f = _loop_function()
    cf = f.get_concrete_function(df.TensorSpec([3], df.float64), df.TensorSpec([], df.int32))
    source = df.export_numpy_source(cf, include_backward=True)
    assert "while " in source and "if " in source
    x = np.array([0.3, -1.2, 0.5])
    cases, expected = [], []
    for n in (0, 2, 5, 50):       # no iteration, a few, and past maximum_iterations
        xt, nt = df.constant(x), df.constant(np.int32(n))
        with df.GradientTape() as tape:
            tape.watch(xt)
            total, y = f(xt, nt)
        ws = [np.float64(0.7), np.linspace(-1, 1, 3)]
        g = tape.gradient([total, y], xt, output_gradients=[df.constant(w) for w in ws])
        cases.append({"module": "loop", "call": "backward", "inputs": [x, np.int32(n)],
                      "output_gradients": ws})
        expected.append(([total.numpy(), y.numpy()], [g.numpy(), None]))
    got = run_without_defun({"loop": source}, cases, tmp_path)
    for (outs, grads), result, case in zip(expected, got, cases):
        _check(result, outs, grads, what=f"n={case['inputs'][1]}")


def test_a_call_node_is_a_call(monkeypatch):
    # inlining removes calls; without it the plan (and the module) calls the callee
    from defun.graph import functions, passes
    pipeline = [p for p in passes.DEFAULT_PIPELINE if p is not passes.inline_calls]
    monkeypatch.setattr(functions, "optimize", lambda g: passes.optimize(g, pipeline=pipeline))

    @df.defun
    def inner(x):
        return df.tanh(x) * 2.0

    @df.defun
    def outer(x):
        return inner(x) + inner(x * 3.0)

    x = np.linspace(-1, 1, 4).astype(np.float32)
    cf = outer.get_concrete_function(df.constant(x))
    assert any(n.op.name == "call" for n in plan_of(cf.graph).graph.nodes)
    source = df.export_numpy_source(cf, include_backward=True)
    ns = {}
    exec(compile(source, "<outer>", "exec"), ns)
    callee = re.search(r"v\d+_0, = (fn\d+)\(a0\)", source)
    assert callee, source
    assert same_bits(ns["forward"](x)[0], outer(df.constant(x)).numpy()) is None
    xt = df.constant(x)
    with df.GradientTape() as tape:
        tape.watch(xt)
        y = outer(xt)
    outs, saved = ns["forward_with_side_outputs"](x)
    g = ns["backward"]([np.ones(4, np.float32)], saved)
    assert same_bits(g[0], tape.gradient(y, xt).numpy()) is None


def test_a_loaded_document_exports_the_same_module(tmp_path):
    _, model, _, (_, _, x_test, _) = _digits_model(steps=1)
    predict = df.defun(model.logits)
    cf = predict.get_concrete_function(df.TensorSpec([None, 64], df.float32))
    df.export_json(cf, tmp_path / "digits.json")
    loaded = df.load_json(str(tmp_path / "digits.json"))
    source = df.export_numpy_source(loaded, tmp_path / "digits.py")
    assert (tmp_path / "digits.py").read_text() == source
    ns = {}
    exec(compile(source, "digits.py", "exec"), ns)
    assert same_bits(ns["forward"](x_test)[0], loaded(x_test).numpy()) is None
    assert ns["INPUTS"] == [("x", "float32", (None, 64))]


def test_the_same_function_gives_the_same_bytes_in_any_process():
    script = (
        "import sys, numpy as np; sys.path.insert(0, %r); import defun as df\n"
        "%s"
        "w = df.Variable(np.arange(6, dtype=np.float32).reshape(3, 2), name='w')\n"
        "@df.defun\n"
        "def f(x):\n"
        "    return df.reduce_sum(df.tanh(x @ w) * 2.0, axis=1)\n"
        "cf = f.get_concrete_function(df.TensorSpec([None, 3], df.float32))\n"
        "sys.stdout.write(df.export_numpy_source(cf, include_backward=True))\n")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    noise = ("g = df.defun(lambda x: df.exp(x) * 3.0)\n"
             "g(df.constant([1.0])); g(df.constant([[1.0]]))\n"
             "df.einsum('ij,jk->ik', np.ones((2, 3)), np.ones((3, 1)))\n")
    runs = [subprocess.run([sys.executable, "-c", script % (repo, pre)], capture_output=True,
                           text=True, check=True).stdout for pre in ("", noise)]
    assert runs[0] == runs[1]
    assert "def backward(" in runs[0] and "def forward(" in runs[0]


def test_the_module_imports_numpy_only_and_reads_like_the_graph():
    _, model, _, _ = _digits_model(steps=0)
    cf = df.defun(model.logits).get_concrete_function(df.TensorSpec([None, 64], df.float32))
    source = df.export_numpy_source(cf)
    imports = [ln for ln in source.splitlines() if re.match(r"\s*(import|from)\s", ln)]
    assert imports == ["import numpy as np"]
    body = source[source.index("def fn0("):]
    assert "np.tanh(" in body and "_matmul_kernel(" in body and "np.add(" in body
    assert source == df.export_numpy_source(cf)
    compile(source, "<digits>", "exec")


def test_the_module_checks_its_arguments():
    @df.defun
    def f(x):
        return df.reduce_sum(df.square(x), axis=1)
    cf = f.get_concrete_function(df.TensorSpec([None, 3], df.float32))
    ns = {}
    exec(compile(df.export_numpy_source(cf, include_backward=True), "<f>", "exec"), ns)
    with pytest.raises(TypeError, match="input 'x' has dtype float64, expected float32"):
        ns["forward"](np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"input 'x' has shape \[2, 4\], expected \[\?, 3\]"):
        ns["forward"](np.ones((2, 4), np.float32))
    assert ns["forward"]([[1, 2, 3]])[0].tolist() == [14.0]     # Python values are converted
    outs, saved = ns["forward_with_side_outputs"](np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="output 0 has shape"):
        ns["backward"]([None], saved)                           # unknown size: say so
    with pytest.raises(ValueError, match="expected 1 output gradients, got 2"):
        ns["backward"]([None, None], saved)
    with pytest.raises(ValueError, match="side outputs"):
        ns["backward"]([np.ones(2, np.float32)], saved[:-1] if saved else [0])
    g, = ns["backward"]([np.ones(2, np.float32)], saved)
    assert g.tolist() == [[2.0] * 3] * 2


def test_what_cannot_be_exported_is_refused_by_name():
    from defun.graph.numpy_source.writer import SourceWriter
    with pytest.raises(errors.UnimplementedError, match="op 'mine'.*test_numpy_source"):
        SourceWriter().ref(lambda x: x, "mine", "op 'mine'")
    with pytest.raises(errors.UnimplementedError, match="op 'mine'.*object"):
        SourceWriter().ref(object(), "mine", "op 'mine'")
    v = df.Variable([1.0, 2.0])

    @df.defun
    def takes_variable(var):
        return var.read_value() * 2.0
    cf = takes_variable.get_concrete_function(v)
    with pytest.raises(errors.InvalidArgumentError, match="argument 'var'.*is a variable"):
        df.export_numpy_source(cf)
    with pytest.raises(TypeError, match="get_concrete_function"):
        df.export_numpy_source(takes_variable)


def test_variables_named_like_modules_and_builtins_keep_the_module_working():
    """Variable cells never take a name the module's code uses (math, sys, np, dunders)."""
    names = ["math", "sys", "__builtins__", "operator", "np", "__name__", "string", "len"]
    vs = [df.Variable(np.full((2, 3), float(k + 1)), name=n) for k, n in enumerate(names)]

    @df.defun
    def f(x):
        total = x
        for v in vs:
            v.assign_add(x)
            total = total + df.reshape(v.read_value(), [-1, 3]) * 0.5
        return df.reduce_sum(df.reshape(total, [-1]), axis=0), df.reduce_prod(df.shape(x))
    x = np.arange(6.0).reshape(2, 3)
    cf = f.get_concrete_function(df.TensorSpec([None, 3], df.float64))
    source = df.export_numpy_source(cf)
    before = [v.numpy() for v in vs]
    want = [np.asarray(o) for o in f(df.constant(x))]
    ns = {}
    exec(compile(source, "<named>", "exec"), ns)
    got = ns["forward"](x)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.asarray(g), w)
    cells = [value for value in ns.values() if type(value).__name__ == "VariableStore"]
    assert sorted(c.name for c in cells) == sorted(names)
    for c in cells:
        np.testing.assert_array_equal(c.value, before[names.index(c.name)] + x)
