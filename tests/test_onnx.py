"""df.export_onnx beyond the op table: which ops have a form (and the documented list of
those without), errors naming the op, variables as initializers, cond as If, while_loop as
Loop (captured tensors, nesting, per-iteration history), symbolic sizes and names, loaded
functions, determinism, and the example models (the digits MLP and a small CNN) in
onnxruntime against the graph."""
import importlib.util
import pathlib
import re
import sys

import numpy as np
import pytest

import defun as df
from defun.graph.onnx_export import NO_FORM
from defun.runtime import registry

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

ROOT = pathlib.Path(__file__).resolve().parent.parent
f32 = df.float32


def run(model, *xs):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: np.asarray(x) for i, x in zip(sess.get_inputs(), xs)})


def close(actual, expected, rtol=1e-5, atol=1e-6):
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        e = np.asarray(e)
        assert np.asarray(a).shape == e.shape and np.asarray(a).dtype == e.dtype, (a, e)
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------
# Which ops have a form: the registry, NO_FORM and the guide agree

def test_every_op_has_a_form_or_a_documented_reason():
    # (placeholders have none: they are the graph's inputs, bound by the exporter)
    without = {op.name for op in registry.all_ops() if op.onnx is None} - {"placeholder"}
    assert without == set(NO_FORM), (f"ops without an ONNX form but no reason in NO_FORM: "
                                     f"{sorted(without - set(NO_FORM))}; NO_FORM names ops that have one: "
                                     f"{sorted(set(NO_FORM) - without)}")


def test_the_guide_lists_the_ops_without_a_form():
    guide = (ROOT / "docs" / "guide.md").read_text()
    section = guide[guide.index("Ops without an ONNX form"):]
    listed = set(re.findall(r"^- `([a-z0-9_]+)`", section, re.M))
    assert listed == set(NO_FORM), (f"docs/guide.md lists {sorted(listed - set(NO_FORM))} that have a form "
                                    f"and misses {sorted(set(NO_FORM) - listed)}")


# ---------------------------------------------------------------------------------------
# Errors

def test_an_op_without_a_form_raises_naming_it():
    @df.defun
    def f(a):
        return df.linalg.eigh(a)[0]
    cf = f.get_concrete_function(df.TensorSpec([3, 3], df.float64))
    with pytest.raises(df.errors.UnimplementedError, match=r"'eigh' \(traced at .*\) has no ONNX form: ONNX has no eig"):
        df.export_onnx(cf)


def test_a_variable_assignment_raises_naming_it():
    v = df.Variable(np.zeros(3, np.float32), name="counter")

    @df.defun
    def step(x):
        v.assign_add(x)
        return v.read_value() * 2.0
    cf = step.get_concrete_function(df.TensorSpec([3], f32))
    with pytest.raises(df.errors.UnimplementedError, match="'assign_add_variable'.*no mutable state"):
        df.export_onnx(cf)


def test_random_ops_raise_and_say_why():
    @df.defun
    def noise(x, seed):
        return x + df.random.normal([3], seed=seed)
    cf = noise.get_concrete_function(df.TensorSpec([3], f32), df.TensorSpec([2], df.int64))
    with pytest.raises(df.errors.UnimplementedError, match="stateless_random_normal.*seed-compatible"):
        df.export_onnx(cf)


def test_arguments_that_are_not_exportable():
    @df.defun
    def f(x):
        return x * 2.0
    with pytest.raises(TypeError, match="ConcreteFunction"):
        df.export_onnx(f)
    with pytest.raises(TypeError, match="expects a ConcreteFunction or a loaded function"):
        df.export_onnx(lambda x: x)
    with pytest.raises(ValueError, match="opset must be an int from 17"):
        df.export_onnx(f.get_concrete_function(df.TensorSpec([2], f32)), opset=11)
    v = df.Variable(np.ones(2, np.float32))

    @df.defun
    def g(var, x):
        return var.read_value() + x
    with pytest.raises(TypeError, match="argument 'var'.*is a variable"):
        df.export_onnx(g.get_concrete_function(v, df.TensorSpec([2], f32)))


def test_without_onnx_the_error_names_the_extra(monkeypatch):
    @df.defun
    def f(x):
        return x + 1.0
    cf = f.get_concrete_function(df.TensorSpec([2], f32))
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r"defun\[onnx\]"):
        df.export_onnx(cf)


# ---------------------------------------------------------------------------------------
# The model: inputs, outputs, initializers, determinism; nothing runs

def test_names_symbolic_sizes_and_a_written_file(tmp_path):
    @df.defun
    def affine(points, scale):
        return {"moved": points * scale + 1.0, "norm": df.reduce_sum(points * points, axis=1)}
    cf = affine.get_concrete_function(df.TensorSpec([None, 3], f32), df.TensorSpec([3], f32))
    path = tmp_path / "affine.onnx"
    model = df.export_onnx(cf, str(path))
    assert [i.name for i in model.graph.input] == ["points", "scale"]
    assert [o.name for o in model.graph.output] == ["moved", "norm"]      # the dict keys, exactly
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "moved_0"
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "points_0" and dims[1].dim_value == 3
    assert onnx.load(str(path)) == model
    x, s = np.arange(15, dtype=np.float32).reshape(5, 3), np.array([1, 2, 3], np.float32)
    out = cf(df.constant(x), df.constant(s))
    close(run(model, x, s), [out["moved"].numpy(), out["norm"].numpy()])
    close(run(model, x[:2], s), [x[:2] * s + 1, (x[:2] ** 2).sum(1)])   # another batch size


def test_variables_become_initializers_with_their_value_and_exporting_runs_nothing():
    w = df.Variable(np.arange(6, dtype=np.float32).reshape(3, 2), name="weights")
    seen = []

    def callback(op, *rest):
        seen.append(op)

    @df.defun
    def predict(x):
        return df.matmul(x, w)
    cf = predict.get_concrete_function(df.TensorSpec([None, 3], f32))
    df.add_execution_callback(callback)
    try:
        model = df.export_onnx(cf)
    finally:
        df.remove_execution_callback(callback)
    assert not seen and not cf.graph.derived.plans, "exporting ran the function"
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    np.testing.assert_array_equal(inits["weights"], w.numpy())
    x = np.ones((2, 3), np.float32)
    w.assign(w.numpy() * 0)                  # later changes do not reach the exported model
    close(run(model, x), [x @ np.arange(6, dtype=np.float32).reshape(3, 2)])


def test_the_same_function_gives_the_same_bytes():
    b = df.Variable(np.array([0.5, -1.0], np.float32))

    @df.defun
    def f(x):
        return df.cond(df.reduce_sum(x) > 0, lambda: df.tanh(x) + b, lambda: x * 2.0)
    cf = f.get_concrete_function(df.TensorSpec([2], f32))
    assert df.export_onnx(cf).SerializeToString() == df.export_onnx(cf).SerializeToString()


def test_a_newer_opset_gives_the_same_results():
    @df.defun
    def f(x):
        return (df.reduce_mean(x, axis=1), df.reduce_max(x, axis=0, keepdims=True), df.split(x, 2, axis=1)[0],
                df.reduce_logsumexp(x))
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    cf = f.get_concrete_function(df.TensorSpec([None, 4], f32))
    expected = [t.numpy() for t in cf(df.constant(x))]
    for opset in (17, 18, 20):
        model = df.export_onnx(cf, opset=opset)
        assert model.opset_import[0].version == opset
        close(run(model, x), expected)


def test_a_loaded_function_exports_too(tmp_path):
    w = df.Variable(np.array([[1.0, -1.0], [0.5, 2.0]], np.float32), name="w")

    @df.defun
    def f(x):
        return df.softmax(df.matmul(x, w))
    cf = f.get_concrete_function(df.TensorSpec([None, 2], f32))
    loaded = df.load_json(df.export_json(cf))
    model = df.export_onnx(loaded)
    assert [i.name for i in model.graph.input] == ["x"]
    x = np.array([[1, 2], [3, -4], [0, 0]], np.float32)
    close(run(model, x), [loaded(x).numpy()])


# ---------------------------------------------------------------------------------------
# Control flow: cond -> If, while_loop -> Loop

def _has(model, op_type):
    def walk(graph):
        for n in graph.node:
            yield n.op_type
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    yield from walk(a.g)
    return op_type in set(walk(model.graph))


def test_cond_becomes_if_with_captured_tensors_and_variables():
    scale = df.constant(np.float32(3.0))
    bias = df.Variable(np.array([1.0, 2.0], np.float32), name="bias")

    @df.defun
    def f(x, flag):
        return df.cond(flag, lambda: df.exp(x) * scale + bias.read_value(), lambda: -x - bias.read_value())
    cf = f.get_concrete_function(df.TensorSpec([None], f32), df.TensorSpec([], df.bool))
    model = df.export_onnx(cf)
    assert _has(model, "If")
    x = np.array([0.5, -1.0], np.float32)
    for flag in (True, False):
        close(run(model, x, np.array(flag)), [cf(df.constant(x), df.constant(flag)).numpy()])


def test_while_becomes_loop_with_maximum_iterations_and_captures():
    step = df.constant(np.float32(0.5))

    @df.defun
    def f(x, n):
        def body(i, acc):
            return i + 1, acc * step + df.cast(i, df.float32)
        return df.while_loop(lambda i, acc: i < n, body, [df.constant(0), x], maximum_iterations=7)
    cf = f.get_concrete_function(df.TensorSpec([None], f32), df.TensorSpec([], df.int32))
    model = df.export_onnx(cf)
    assert _has(model, "Loop")
    x = np.array([1.0, 2.0, 3.0], np.float32)
    for n in (0, 3, 20):     # no iteration, stopped by the condition, by maximum_iterations
        expected = [t.numpy() for t in cf(df.constant(x), df.constant(np.int32(n)))]
        close(run(model, x, np.int32(n)), expected)


def test_cond_inside_while_and_while_inside_cond():
    @df.defun
    def collatz_steps(n):
        def body(k, steps):
            k = df.cond(df.equal(k % 2, 0), lambda: k // 2, lambda: 3 * k + 1)
            return k, steps + 1
        return df.while_loop(lambda k, steps: k > 1, body, [n, df.constant(0)])[1]

    @df.defun
    def either(n, go):
        return df.cond(go, lambda: collatz_steps(n), lambda: df.constant(-1))
    cf = either.get_concrete_function(df.TensorSpec([], df.int32), df.TensorSpec([], df.bool))
    model = df.export_onnx(cf)
    assert _has(model, "If") and _has(model, "Loop")
    for n, go in ((27, True), (6, True), (1, True), (27, False)):
        expected = cf(df.constant(np.int32(n)), df.constant(go)).numpy()
        close(run(model, np.int32(n), np.array(go)), [expected])


def test_a_gradient_through_a_while_loop_exports_its_history():
    """The forward function computes a gradient itself: the loop keeps its per-iteration
    history (an iteration counter and scan outputs in ONNX) for the backward loop."""
    @df.defun
    def value_and_slope(x):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = df.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, df.sin(v) * v), [df.constant(0), x])[1]
        return y, tape.gradient(y, x)
    cf = value_and_slope.get_concrete_function(df.TensorSpec([None], df.float64))
    model = df.export_onnx(cf)
    x = np.array([0.3, -1.2, 2.0])
    close(run(model, x), [t.numpy() for t in cf(df.constant(x))], rtol=1e-12, atol=1e-12)


def test_a_nested_defun_is_inlined():
    @df.defun
    def inner(x):
        return df.tanh(x) * 2.0

    @df.defun
    def outer(x):
        return df.cond(df.reduce_sum(x) > 0, lambda: inner(x), lambda: inner(-x)) + inner(x)
    cf = outer.get_concrete_function(df.TensorSpec([2], f32))
    model = df.export_onnx(cf)
    for x in (np.array([1.0, 2.0], np.float32), np.array([-1.0, -2.0], np.float32)):
        close(run(model, x), [cf(df.constant(x)).numpy()])


# ---------------------------------------------------------------------------------------
# The example models

def _load_example(name):
    spec = importlib.util.spec_from_file_location(f"{name}_example", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_digits_mlp_predicts_the_same_in_onnxruntime():
    pytest.importorskip("sklearn")
    example = _load_example("train_mlp")
    x_train, y_train, x_test, _ = example.load_data()
    model = example.MLP([64, 32, 10], seed=0)
    step = df.defun(example.make_train_step(model, 0.5))
    for k in range(0, 320, 32):
        step(df.constant(x_train[k:k + 32]), df.constant(y_train[k:k + 32]))
    predict = df.defun(model.logits)
    cf = predict.get_concrete_function(df.TensorSpec([None, 64], f32))
    onnx_model = df.export_onnx(cf)
    logits = run(onnx_model, x_test)[0]
    expected = cf(df.constant(x_test)).numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(np.argmax(logits, 1), np.argmax(expected, 1))


def test_a_small_cnn_runs_the_same_in_onnxruntime():
    rng = np.random.default_rng(0)
    k1 = df.Variable(rng.normal(size=(3, 3, 1, 4)).astype(np.float32) * 0.5, name="conv1")
    k2 = df.Variable(rng.normal(size=(3, 3, 4, 8)).astype(np.float32) * 0.3, name="conv2")
    dense = df.Variable(rng.normal(size=(2 * 2 * 8, 10)).astype(np.float32) * 0.2, name="dense")
    bias = df.Variable(np.linspace(-1, 1, 10).astype(np.float32), name="bias")

    @df.defun
    def classify(images):
        h = df.relu(df.conv2d(images, k1, padding="SAME"))
        h = df.max_pool2d(h, 2, 2, "VALID")
        h = df.relu(df.conv2d(h, k2, strides=2, padding="SAME"))
        h = df.avg_pool2d(h, 2, 1, "SAME")
        flat = df.reshape(h, [-1, 2 * 2 * 8])
        return df.softmax(df.matmul(flat, dense) + bias)
    images = rng.normal(size=(5, 8, 8, 1)).astype(np.float32)
    for spec in ([None, 8, 8, 1], [5, 8, 8, 1]):
        cf = classify.get_concrete_function(df.TensorSpec(spec, f32))
        close(run(df.export_onnx(cf), images), [cf(df.constant(images)).numpy()], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_a_mean_over_an_unknown_size_that_is_zero_is_nan_as_numpys(dtype):
    """A relaxed trace's mean over its unknown size: onnxruntime's ReduceMean of nothing is 0
    where numpy's (and the graph's) is NaN, so an unknown (or zero) count exports as the sum
    over the count; a count known and nonzero (axis 1's 3 columns) stays ReduceMean."""
    def f(x):
        return df.reduce_mean(x, axis=0), df.reduce_mean(x), df.reduce_mean(x, axis=1, keepdims=True)

    relaxed = df.defun(f).get_concrete_function(df.TensorSpec([None, 3], df.as_dtype(dtype)))
    model = df.export_onnx(relaxed)
    assert [n.op_type for n in model.graph.node].count("ReduceMean") == 1     # axis 1: 3 columns
    for n in (0, 1, 4):
        x = np.arange(3 * n, dtype=dtype).reshape(n, 3)
        with np.errstate(invalid="ignore"):
            want = [x.mean(axis=0), np.asarray(x.mean(), dtype), x.mean(axis=1, keepdims=True)]
        got = run(model, x)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-3 if dtype is np.float16 else 1e-6)
    exact = df.defun(f).get_concrete_function(df.TensorSpec([4, 3], df.as_dtype(dtype)))
    assert _has(df.export_onnx(exact), "ReduceMean")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("spec", [[None, 2], [0, 2]])
def test_a_mean_of_no_elements_is_nan_as_numpys(dtype, spec):
    # found by tests/test_relaxed_sweep.py: onnxruntime's ReduceMean gives 0 for no elements
    f = df.defun(lambda x: (df.reduce_mean(x), df.reduce_mean(x, axis=0), df.reduce_mean(x, axis=1, keepdims=True)))
    model = df.export_onnx(f.get_concrete_function(df.TensorSpec(spec, df.as_dtype(dtype))))
    for x in [np.zeros((0, 2), dtype)] + ([np.arange(6, dtype=dtype).reshape(3, 2)] if spec[0] is None else []):
        with np.errstate(all="ignore"):
            want = [np.mean(x), np.mean(x, axis=0), np.mean(x, axis=1, keepdims=True)]
        close(run(model, x), [np.asarray(w, dtype) for w in want])
