"""df.scan, df.map_fn, df.foldl: TF's semantics (the examples of TF's docs, nests, reverse,
the first row as initializer), against a Python loop of the same fn, eager == traced ==
reloaded; one `scan` node however long the sequence; gradients against finite differences
(float16/32/64, second order, both modes) read from what the forward saved; JSON with
backward, numpy source run without defun, ONNX in onnxruntime; errors that name the problem."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import defun as df
from defun.graph.functionalize import replay_reading
from defun.graph.gradients import saving_of
from defun.graph.passes import optimize
from defun.graph.printer import to_dot
from defun.graph.verify import verify
from defun.runtime import errors
from isolated import run_without_defun
from schema_check import assert_valid

f32, f64 = df.float32, df.float64
RS = np.random.RandomState(7)


def np_of(x):
    if isinstance(x, (list, tuple)):
        return type(x)(np_of(v) for v in x)
    if isinstance(x, dict):
        return {k: np_of(v) for k, v in x.items()}
    return np.asarray(x.numpy())


def three_ways(fn, *args):
    """fn(*args) eagerly, in a defun, and from the defun's JSON document (flat numpy lists)."""
    eager = np_of(fn(*args))
    d = df.defun(fn)
    traced = np_of(d(*args))
    cf = d.get_concrete_function(*args)
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    reloaded = np_of(loaded(*[a.numpy() for a in args]))
    return eager, traced, reloaded


def assert_all(results, expected, rtol=1e-12, atol=0.0):
    exp = [np.asarray(e) for e in (expected if isinstance(expected, list) else [expected])]
    for got in results:
        flat = _flat(got)
        assert len(flat) == len(exp)
        for g, e in zip(flat, exp):
            assert g.shape == e.shape, (g.shape, e.shape)
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def _flat(x):
    if isinstance(x, (list, tuple)):
        return [z for y in x for z in _flat(y)]
    if isinstance(x, dict):
        return [z for k in sorted(x) for z in _flat(x[k])]
    return [np.asarray(x)]


# ---------------------------------------------------------------------------------------
# TF semantics: the examples of tf.scan / tf.foldl / tf.map_fn's documentation

ELEMS = df.constant(np.array([1, 2, 3, 4, 5, 6], np.int64))


def test_scan_sums_with_the_first_element_as_initializer():
    assert_all(three_ways(lambda e: df.scan(lambda a, x: a + x, e), ELEMS), [[1, 3, 6, 10, 15, 21]])


def test_scan_in_reverse_keeps_result_t_at_position_t():
    assert_all(three_ways(lambda e: df.scan(lambda a, x: a + x, e, reverse=True), ELEMS),
               [[21, 20, 18, 15, 11, 6]])


def test_scan_over_a_tuple_of_elems_with_an_initializer():
    fn = lambda e: df.scan(lambda a, x: x[0] - x[1] + a, (e + 1, e), df.constant(np.int64(0)))  # noqa: E731
    assert_all(three_ways(fn, ELEMS), [[1, 2, 3, 4, 5, 6]])


def test_scan_with_a_tuple_accumulator_gives_fibonacci():
    init = (df.constant(np.int64(0)), df.constant(np.int64(1)))
    fn = lambda e: df.scan(lambda a, _: (a[1], a[0] + a[1]), e, init)  # noqa: E731
    for got in three_ways(fn, df.constant(np.array([1, 0, 0, 0, 0, 0], np.int64))):
        assert isinstance(got, tuple) and len(got) == 2
    assert_all(three_ways(fn, df.constant(np.array([1, 0, 0, 0, 0, 0], np.int64))),
               [[1, 1, 2, 3, 5, 8], [1, 2, 3, 5, 8, 13]])


def test_foldl_sums_and_takes_the_first_row_without_initializer():
    assert_all(three_ways(lambda e: df.foldl(lambda a, x: a + x, e), ELEMS), [np.int64(21)])
    assert_all(three_ways(lambda e: df.foldl(lambda a, x: a * 10 + x, e, df.constant(np.int64(0))), ELEMS),
               [np.int64(123456)])


def test_map_fn_squares_and_maps_nests_to_nests():
    assert_all(three_ways(lambda e: df.map_fn(lambda x: x * x, e), ELEMS), [[1, 4, 9, 16, 25, 36]])
    neg = df.constant(np.array([-1, 1, -1], np.int64))
    fn = lambda a, b: df.map_fn(lambda x: {"prod": x[0] * x[1], "sum": x[0] + x[1]}, (a, b))  # noqa: E731
    results = three_ways(fn, df.constant(np.array([1, 2, 3], np.int64)), neg)
    for got in results:
        assert set(got) == {"prod", "sum"}
        np.testing.assert_array_equal(got["prod"], [-1, 2, -3])
        np.testing.assert_array_equal(got["sum"], [0, 3, 2])


def test_map_fn_checks_and_applies_fn_output_signature():
    e = df.constant(np.array([1.0, 2.0], np.float32))
    # a Python number returned takes the signature's dtype
    for got in three_ways(lambda e: df.map_fn(lambda x: 3, e, fn_output_signature=df.int64), e):
        assert got.dtype == np.int64 and got.tolist() == [3, 3]
    spec = df.TensorSpec([2], df.float32)
    for got in three_ways(lambda e: df.map_fn(lambda x: df.stack([x, -x]), e, fn_output_signature=spec), e):
        np.testing.assert_array_equal(got, [[1, -1], [2, -2]])
    for wrap in (df.defun, lambda f: f):
        with pytest.raises(errors.InvalidArgumentError, match="fn_output_signature says int32"):
            wrap(lambda e: df.map_fn(lambda x: x, e, fn_output_signature=df.int32))(e)


def test_rows_are_slices_of_matrices_and_results_stack_matrices():
    m = df.constant(RS.randn(5, 2, 2))
    acc, expect = None, []
    for r in m.numpy():
        acc = r if acc is None else acc @ r
        expect.append(acc)
    assert_all(three_ways(lambda m: df.scan(lambda a, r: df.matmul(a, r), m), m), [np.stack(expect)],
               rtol=1e-12, atol=1e-12)


def test_an_rnn_cell_agrees_with_a_python_loop_of_the_same_fn():
    w = df.constant(RS.randn(3, 4) * 0.5)
    u = df.constant(RS.randn(4, 4) * 0.5)
    xs = df.constant(RS.randn(9, 2, 3))         # 9 steps, batch 2
    h0 = df.constant(np.zeros((2, 4)))

    def cell(h, x):
        return df.tanh(df.matmul(x, w) + df.matmul(h, u))
    h, loop = h0, []
    for x in df.unstack(xs):
        h = cell(h, x)
        loop.append(h.numpy())
    assert_all(three_ways(lambda xs, h0: df.scan(cell, xs, h0), xs, h0), [np.stack(loop)], rtol=1e-12)
    assert_all(three_ways(lambda xs, h0: df.foldl(cell, xs, h0), xs, h0), [loop[-1]], rtol=1e-12)
    rev, h = [None] * 9, h0
    for t in reversed(range(9)):
        h = cell(h, xs[t])
        rev[t] = h.numpy()
    assert_all(three_ways(lambda xs, h0: df.scan(cell, xs, h0, reverse=True), xs, h0), [np.stack(rev)],
               rtol=1e-12)


def test_empty_elems_with_an_initializer():
    e = df.constant(np.zeros((0, 3)))
    init = df.constant(np.ones(3))
    for fn, expect in [(lambda e: df.scan(lambda a, x: a + x, e, init), np.zeros((0, 3))),
                       (lambda e: df.foldl(lambda a, x: a + x, e, init), np.ones(3)),
                       (lambda e: df.map_fn(lambda x: x * 2.0, e), np.zeros((0, 3)))]:
        assert_all(three_ways(fn, e), [expect])


# ---------------------------------------------------------------------------------------
# One node, whatever the length

def _node_counts(fn):
    """Sorted (function name, node count) of graph `fn` (or a concrete function's graph) and
    of every function it reaches."""
    seen, todo, counts = set(), [getattr(fn, "graph", fn)], []
    while todo:
        g = todo.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        counts.append((g.base_name, len(g.nodes)))
        for node in g.nodes:
            for v in node.attrs.values():
                if hasattr(v, "nodes") and hasattr(v, "all_inputs"):
                    todo.append(v)
    return sorted(counts)


def _ops_reached(graph):
    """Op names of the nodes of `graph` and of every function it reaches."""
    seen, todo, ops = set(), [graph], set()
    while todo:
        g = todo.pop()
        if id(g) not in seen:
            seen.add(id(g))
            for node in g.nodes:
                ops.add(node.op.name)
                todo.extend(v for v in node.attrs.values() if hasattr(v, "nodes") and hasattr(v, "all_inputs"))
    return ops


@pytest.mark.parametrize("op", ["scan", "foldl", "map_fn"])
def test_a_traced_loop_is_one_node_whatever_the_length(op):
    w = df.constant(RS.randn(4, 4) * 0.3)

    def f(xs):
        if op == "map_fn":
            return df.map_fn(lambda x: df.tanh(df.matmul(x[None], w))[0], xs)
        fn = getattr(df, op)
        return fn(lambda h, x: df.tanh(df.matmul(h[None], w)[0] + x), xs, df.zeros([4], f64))
    d = df.defun(f)
    short = d.get_concrete_function(df.TensorSpec([10, 4], f64))
    long = d.get_concrete_function(df.TensorSpec([1000, 4], f64))
    assert _node_counts(short) == _node_counts(long)
    ops = [n.op.name for n in long.graph.nodes]
    assert ops.count("scan") == 1 and "while" not in ops
    verify(long.graph)
    assert "scan(" in str(long.graph)


def test_the_gradient_is_one_reverse_scan_too():
    w = df.constant(RS.randn(4, 4) * 0.3)

    def loss(xs):
        return df.reduce_sum(df.scan(lambda h, x: df.tanh(df.matmul(h[None], w)[0] + x), xs,
                                     df.zeros([4], f64)))
    shapes = []
    for n in (10, 1000):
        cf = df.defun(loss).get_concrete_function(df.TensorSpec([n, 4], f64))
        saving = saving_of(cf.graph)
        bw, fwd = saving.backward.graph, saving.next
        shapes.append((_node_counts(bw), _node_counts(fwd)))
        ops = [node.op.name for node in bw.nodes]
        assert ops.count("scan") == 1, ops
        reverse = [node.attrs["reverse"] for node in bw.nodes if node.op.name == "scan"]
        assert reverse == [True]
        # nothing of the forward runs again: the backward reads tanh's saved results
        assert not any(name.startswith(("scan_body_saves", "scan_body_forward")) for name, _ in _node_counts(bw))
        assert "tanh" not in _ops_reached(bw) and "matmul" in _ops_reached(bw)
    assert shapes[0] == shapes[1]


# ---------------------------------------------------------------------------------------
# Gradients

def _rnn_loss(reverse=False):
    def loss(w, u, xs, h0):
        def cell(h, x):
            return df.tanh(df.matmul(x[None], w)[0] + df.matmul(h[None], u)[0])
        hs = df.scan(cell, xs, h0, reverse=reverse)
        last = df.foldl(lambda a, x: a * 0.5 + x, xs, h0[:2])
        mapped = df.map_fn(lambda x: df.sin(x) * x[0], xs)
        return df.reduce_sum(hs * hs) + df.reduce_sum(last * last) + df.reduce_sum(mapped)
    return loss


def _rnn_args(dtype, steps=5):
    rs = np.random.RandomState(3)
    return [rs.randn(2, 3) * 0.5, rs.randn(3, 3) * 0.5, rs.randn(steps, 2), rs.randn(3) * 0.5]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_gradients_match_finite_differences_in_every_float_dtype(dtype):
    args = [a.astype(dtype) for a in _rnn_args(dtype)]
    kw = {"rtol": 0.1, "atol": 0.1} if dtype == np.float16 else {}
    for reverse in (False, True):
        df.test.check_gradients(df.defun(_rnn_loss(reverse)), args, **kw)
    df.test.check_gradients(_rnn_loss(), args, **kw)     # eagerly: the tape, the accumulator


def test_second_order_in_both_modes():
    args = _rnn_args(np.float64, steps=3)
    df.test.check_gradients(df.defun(_rnn_loss()), args, order=2)


def test_eager_traced_and_reloaded_gradients_agree():
    args = [df.constant(a) for a in _rnn_args(np.float64)]
    d = df.defun(_rnn_loss())
    cf = d.get_concrete_function(*args)
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf, include_backward=2))))
    results = []
    for fn in (_rnn_loss(), d, loaded):
        with df.GradientTape() as tape:
            for a in args:
                tape.watch(a)
            y = fn(*args)
        results.append([g.numpy() for g in tape.gradient(y, args)])
    for got in results[1:]:
        for a, b in zip(got, results[0]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_gradients_of_integer_carries_and_unused_outputs_are_none_or_zero():
    xs = df.constant(RS.randn(4))

    @df.defun
    def f(xs):
        count, total = df.foldl(lambda a, x: (a[0] + 1, a[1] + x * x), xs,
                                (df.constant(0), df.constant(np.float64(0.0))))
        return total, count
    with df.GradientTape() as tape:
        tape.watch(xs)
        total, count = f(xs)
    assert int(count.numpy()) == 4
    np.testing.assert_allclose(tape.gradient(total, xs).numpy(), 2 * xs.numpy())


def test_the_backward_reads_the_values_the_forward_saved_not_the_variables_now():
    v = df.Variable(np.array([0.5, -1.5]))

    @df.defun
    def f(xs):
        return df.reduce_sum(df.scan(lambda h, x: df.tanh(h * v + x), xs, df.zeros([2], f64)))
    xs = df.constant(RS.randn(6, 2))
    with df.GradientTape() as tape:
        tape.watch(xs)
        y = f(xs)
    with df.GradientTape() as t2:
        t2.watch(xs)
        y2 = f(xs)
    expected = t2.gradient(y2, [xs, v])
    v.assign(np.array([3.0, 4.0]))      # after the forward: the backward must not see it
    got = tape.gradient(y, [xs, v])
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-14)
    # and the variable's gradient is right (finite differences at the old value)
    base = np.array([0.5, -1.5])
    for k in range(2):
        num = []
        for s in (1e-6, -1e-6):
            step = base.copy()
            step[k] += s
            v.assign(step)
            num.append(f(xs).numpy())
        np.testing.assert_allclose(expected[1].numpy()[k], (num[0] - num[1]) / 2e-6, rtol=1e-6)


def test_gradients_through_captured_values_sum_over_rows():
    c = df.constant(np.array([0.3, -0.2]))

    def f(c, xs):
        return df.reduce_sum(df.map_fn(lambda x: df.exp(x * c), xs))
    df.test.check_gradients(df.defun(f), [c.numpy(), RS.randn(5, 2)])


# ---------------------------------------------------------------------------------------
# Exits: JSON (schema), numpy source without defun, ONNX

def _export_case():
    w, u, xs, h0 = [df.constant(a) for a in _rnn_args(np.float64)]

    def f(xs, h0):
        return _rnn_loss(reverse=True)(w, u, xs, h0)
    return df.defun(f), [xs, h0]


def test_the_json_document_validates_and_holds_the_scan_nodes():
    d, args = _export_case()
    doc = df.export_json(d.get_concrete_function(*args), include_backward=True)
    assert_valid(doc)
    ops = [n["op"] for fn in doc["functions"] for n in fn["nodes"]]
    assert ops.count("scan") >= 3 and "while" not in ops


def test_the_numpy_module_runs_forward_and_backward_without_defun(tmp_path):
    d, args = _export_case()
    cf = d.get_concrete_function(*args)
    src = df.export_numpy_source(cf, include_backward=True)
    with df.GradientTape() as tape:
        for a in args:
            tape.watch(a)
        y = d(*args)
    grads = tape.gradient(y, args)
    inputs = [a.numpy() for a in args]
    got = run_without_defun({"scanmod": src}, [
        {"module": "scanmod", "call": "forward", "inputs": inputs},
        {"module": "scanmod", "call": "backward", "inputs": inputs, "output_gradients": [np.float64(1.0)]},
    ], tmp_path)
    assert "error" not in got[0] and "error" not in got[1], got
    np.testing.assert_allclose(got[0]["outputs"][0], y.numpy(), rtol=1e-14)
    for a, b in zip(got[1]["gradients"], grads):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-12)


def test_onnx_loops_agree_with_the_graph():
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    w = df.constant(RS.randn(3, 4).astype(np.float32))

    def f(xs, h0):
        def cell(h, x):
            return df.tanh(df.matmul(x[None], w)[0] + h)
        return (df.scan(cell, xs, h0), df.scan(cell, xs, h0, reverse=True), df.foldl(cell, xs, h0),
                df.map_fn(lambda x: df.reduce_sum(x * x), xs), df.scan(lambda a, x: a + x, xs))
    d = df.defun(f)
    cf = d.get_concrete_function(df.TensorSpec([None, 3], f32), df.TensorSpec([4], f32))
    model = df.export_onnx(cf)
    assert "Loop" in [n.op_type for n in model.graph.node]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for steps in (1, 6):
        xs = RS.randn(steps, 3).astype(np.float32)
        h0 = RS.randn(4).astype(np.float32)
        got = sess.run(None, {i.name: v for i, v in zip(sess.get_inputs(), [xs, h0])})
        expect = d(df.constant(xs), df.constant(h0))
        for a, b in zip(got, expect):
            assert a.shape == tuple(b.shape)
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-6)
    # no rows: empty stacks and the initial carry
    g = df.defun(lambda xs, h0: (df.scan(lambda h, x: h + x, xs, h0, reverse=True),
                                 df.foldl(lambda h, x: h * x, xs, h0)))
    model = df.export_onnx(g.get_concrete_function(df.TensorSpec([None, 3], f32), df.TensorSpec([3], f32)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = [np.zeros((0, 3), np.float32), np.ones(3, np.float32)]
    stacked, last = sess.run(None, {i.name: v for i, v in zip(sess.get_inputs(), feeds)})
    assert stacked.shape == (0, 3) and last.tolist() == [1.0, 1.0, 1.0]


# ---------------------------------------------------------------------------------------
# Errors

@pytest.mark.parametrize("traced", [False, True])
def test_bad_inputs_are_typed_errors_naming_the_problem(traced):
    wrap = df.defun if traced else (lambda f: f)
    e = df.constant(np.arange(4.0))
    cases = [
        (lambda e: df.scan(lambda a, x: a + x, (e, e[:3])), "same size in dimension 0"),
        (lambda e: df.scan(lambda a, x: (a, a), e), "structure of the accumulator"),
        (lambda e: df.scan(lambda a, x: a + x, df.reduce_sum(e)), "rank >= 1"),
        (lambda e: df.foldl(lambda a, x: a + x, e[:0]), "no rows and no initializer"),
    ]
    cases.append((lambda e: df.foldl(lambda a, x: df.cast(a, f32), e), "keeps its dtype"))
    cases.append((lambda e: df.foldl(lambda a, x: df.stack([a, x]), e), "keeps its shape"))
    cases.append((lambda e: df.map_fn(lambda x: x, e, fn_output_signature=(f64, f64)), "structure"))
    for fn, message in cases:
        with pytest.raises(errors.InvalidArgumentError, match=message):
            wrap(fn)(e)
    with pytest.raises(TypeError, match="callable"):
        df.scan(3, e)


def test_a_loaded_scan_keeps_to_the_budgets():
    d = df.defun(lambda xs: df.scan(lambda a, x: a + x, xs, df.zeros([1000], f64)))
    cf = d.get_concrete_function(df.TensorSpec([None, 1000], f64))
    doc = json.loads(json.dumps(df.export_json(cf)))
    xs = RS.randn(5, 1000)
    np.testing.assert_allclose(df.load_json(doc, max_iterations=5)(xs).numpy(), np.cumsum(xs, 0))
    with pytest.raises(errors.ResourceExhaustedError, match="scan: more than 4 rows"):
        df.load_json(doc, max_iterations=4)(xs)
    # each row stacks 8 kB: a budget of 40 kB refuses before the fifth row's stack is built
    with pytest.raises(errors.ResourceExhaustedError):
        df.load_json(doc, max_bytes=40_000)(xs)
    np.testing.assert_allclose(df.load_json(doc, max_bytes=200_000)(xs).numpy(), np.cumsum(xs, 0))


def test_a_scan_reading_variables_replays_with_their_values_as_inputs():
    # what df.dask ships: the graph replayed with variable handles given as values
    w = df.Variable(np.array([0.5, -0.25]), name="w")

    @df.defun
    def f(xs):
        return df.scan(lambda h, x: df.tanh(h * w + x), xs, df.zeros([2], f64))
    cf = f.get_concrete_function(df.TensorSpec([None, 2], f64))
    graph = cf.graph

    def pure(xs, value):
        return replay_reading(graph, [xs] + [value if c._id == w.handle._id else c
                                             for c in graph.captured_values])
    pure_cf = df.defun(pure).get_concrete_function(df.TensorSpec([None, 2], f64), df.TensorSpec([2], f64))
    assert all(t.dtype is not df.resource for t in pure_cf.graph.all_inputs)
    xs = RS.randn(4, 2)
    other = np.array([1.5, 0.75])
    got = pure_cf(xs, other)[0].numpy()
    w.assign(other)
    np.testing.assert_allclose(got, f(xs).numpy(), rtol=1e-14)


def test_printed_and_drawn_with_its_body():
    cf = df.defun(lambda xs: df.foldl(lambda a, x: a * x, xs)).get_concrete_function(df.TensorSpec([5], f64))
    text = str(cf.graph)
    assert re.search(r"^  %\d+: f64\[\] = scan\(%1, %2\) \{body=@foldl_body, carries=1, "
                     r"reverse=False, sliced=1\}$", text, re.M), text
    assert "func @foldl_body(" in text and "multiply(%0, %1)" in text
    assert "scan" in to_dot(cf.graph)


def test_nested_scans_loops_inside_and_around_and_rematerialized():
    def nested(xs, c):
        def inner(row):
            return df.reduce_sum(df.scan(lambda b, y: df.sin(b * y + c), row, df.constant(0.3, f64)))
        return df.reduce_sum(df.scan(lambda a, row: a + inner(row), xs, df.constant(0.0, f64)))

    def mixed(xs):
        def body(a, x):
            _, y = df.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, df.tanh(y * x)), (0, a + x))
            return y
        s = df.scan(body, xs, df.constant(0.5, f64))
        _, z = df.while_loop(lambda i, z: i < 2,
                             lambda i, z: (i + 1, df.reduce_sum(df.map_fn(lambda r: df.sin(r * z), xs))),
                             (0, df.constant(0.2, f64)))
        return df.reduce_sum(s) + z
    df.test.check_gradients(df.defun(nested), [RS.randn(3, 4), np.array(0.7)], order=2, modes=("rev",))
    df.test.check_gradients(df.defun(mixed), [RS.randn(4)])
    df.test.check_gradients(df.defun(_rnn_loss(), rematerialize=True), _rnn_args(np.float64), modes=("rev",))


def test_a_gathered_row_of_a_captured_table_gets_its_gradient():
    table = df.constant(RS.randn(6, 3))
    ids = df.constant(np.array([[1, 2], [3, 1], [0, 5]]))

    def emb(t):
        return df.reduce_sum(df.map_fn(lambda i: df.gather(t, i) * 2.0, ids) ** 2)
    grads = []
    for fn in (emb, df.defun(emb)):
        with df.GradientTape() as tape:
            tape.watch(table)
            y = fn(table)
        grads.append(df.convert_to_tensor(tape.gradient(y, table)).numpy())
    expect = np.zeros((6, 3))
    for i in ids.numpy().reshape(-1):
        expect[i] += 8.0 * table.numpy()[i]
    for g in grads:
        np.testing.assert_allclose(g, expect, rtol=1e-14)


def test_assignments_in_the_body_run_once_per_row_in_order():
    v = df.Variable(np.float64(0.0))

    @df.defun
    def running(xs):
        def body(a, x):
            v.assign(v * 10.0 + x)
            return a + x
        return df.scan(body, xs, df.constant(0.0, f64))
    xs = df.constant(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(running(xs).numpy(), [1.0, 3.0, 6.0])
    assert v.numpy() == 123.0
    assert [n.stateful for n in running.get_concrete_function(xs).graph.nodes if n.op.name == "scan"] == [True]


def test_the_graph_layer_alone_loads_and_runs_a_scan_document(tmp_path):
    from serialize_helpers import GRAPH_ONLY_LOADER  # (here: the module is only needed by this test)
    x = np.array([1.0, -3.0])
    f = df.defun(lambda x: df.scan(lambda a, r: a * 2.0 + df.sin(r), x, df.constant(0.5, f64), reverse=True))
    doc = df.export_json(f.get_concrete_function(df.constant(x)))
    path = tmp_path / "scan.json"
    path.write_text(json.dumps(doc))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, "-c", GRAPH_ONLY_LOADER, root, str(path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    values, defun_modules = res.stdout.strip().split("\n")
    a1 = 0.5 * 2.0 + np.sin(-3.0)
    np.testing.assert_allclose(json.loads(values), [a1 * 2.0 + np.sin(1.0), a1], rtol=1e-12)
    assert json.loads(defun_modules) == []


def test_stacked_values_nobody_reads_are_not_kept():
    f = df.defun(lambda xs: df.scan(lambda a, x: (a[0] + x, a[1] * x), xs,
                                    (df.constant(0.0, f64), df.constant(1.0, f64)))[0])
    xs = df.constant(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(f(xs).numpy(), [1.0, 3.0, 6.0])
    graph = f.get_concrete_function(xs).graph
    traced = [n for n in graph.nodes if n.op.name == "scan"][0]
    fast = [n for n in optimize(graph).nodes if n.op.name == "scan"][0]
    assert len(traced.outputs) == 4 and len(fast.outputs) == 3     # the products' stack is gone
    assert len(fast.attrs["body"].outputs) == 3


def test_traced_shapes_are_tf_shapes_static_where_the_length_is_known():
    def shapes(n):
        out = {}

        def f(xs):
            out["scan"] = df.scan(lambda a, x: a + x, xs, df.zeros([2], f64))
            out["first"] = df.scan(lambda a, x: a * x, xs)
            out["reverse"] = df.scan(lambda a, x: a * x, xs, reverse=True)
            out["foldl"] = df.foldl(lambda a, x: a + x, xs)
            out["map_fn"] = df.map_fn(lambda x: (df.reduce_sum(x), x[None]), xs)
            return out["scan"]
        df.defun(f).get_concrete_function(df.TensorSpec([n, 2], f64))
        return {k: tuple(v.shape) if not isinstance(v, tuple) else tuple(tuple(t.shape) for t in v)
                for k, v in out.items()}
    assert shapes(6) == {"scan": (6, 2), "first": (6, 2), "reverse": (6, 2), "foldl": (2,),
                         "map_fn": ((6,), (6, 1, 2))}
    assert shapes(None) == {"scan": (None, 2), "first": (None, 2), "reverse": (None, 2), "foldl": (2,),
                            "map_fn": ((None,), (None, 1, 2))}


@pytest.mark.parametrize("attr,value,message", [
    ("sliced", 0, "carries=1 and sliced=0"), ("carries", 3, "carries=3 and sliced=2"),
    ("carries", -1, "carries=-1"), ("carries", 0, "expects rows of float64")])
def test_an_edited_scan_document_is_refused_naming_the_node(attr, value, message):
    f = df.defun(lambda xs, y: df.scan(lambda a, x: a + x[0] * x[1], (xs, y), df.zeros([2], f64)))
    doc = df.export_json(f.get_concrete_function(df.TensorSpec([None, 2], f64), df.TensorSpec([None, 2], f64)))
    node = [n for fd in doc["functions"] for n in fd["nodes"] if n["op"] == "scan"][0]
    loaded = df.load_json(doc)
    with pytest.raises(errors.InvalidArgumentError,
                       match="same size in dimension 0; input 0 has 4 rows, input 1 has 3"):
        loaded(np.ones((4, 2)), np.ones((3, 2)))
    node["attrs"][attr] = value
    with pytest.raises(errors.GraphFormatError, match=f"op 'scan' rejects .*{re.escape(message)}"):
        df.load_json(doc)


def test_a_cond_switching_branches_inside_the_body_differentiates(tmp_path):
    # raised, each row keeps the side outputs of the branch that ran and empty stand-ins
    # for the other's: stacked, the stand-ins take the real rows' shape
    def f(xs, h0):
        def cell(h, x):
            return df.cond(df.reduce_sum(x) > 0.0, lambda: df.tanh(h * x), lambda: df.sin(h + x) * x)
        return df.reduce_sum(df.scan(cell, xs, h0))
    xs = np.array([[0.5, 0.2], [-0.7, -0.3], [0.4, 0.9], [-0.2, -0.1]])
    h0 = np.array([0.3, -0.4])
    d = df.defun(f, input_signature=[df.TensorSpec([None, None], f64), df.TensorSpec([None], f64)])
    df.test.check_gradients(d, [xs, h0], modes=("rev",))
    cf = d.get_concrete_function()
    args = [df.constant(xs), df.constant(h0)]
    with df.GradientTape() as tape:
        for a in args:
            tape.watch(a)
        y = d(*args)
    grads = tape.gradient(y, args)
    got = run_without_defun({"condscan": df.export_numpy_source(cf, include_backward=True)}, [
        {"module": "condscan", "call": "backward", "inputs": [xs, h0], "output_gradients": [np.float64(1.0)]},
    ], tmp_path)
    assert "error" not in got[0], got
    for a, b in zip(got[0]["gradients"], grads):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-12)


def test_an_outer_eager_initializer_and_elems_in_a_defun():
    h0 = df.constant(np.array([1.0, 2.0]))
    xs = df.constant(np.arange(6.0).reshape(3, 2))
    d = df.defun(lambda: (df.scan(lambda a, x: a * x, xs, h0), df.foldl(lambda a, x: a + x, xs, h0)))
    stacked, last = d()
    np.testing.assert_array_equal(stacked.numpy(), [[0.0, 2.0], [0.0, 6.0], [0.0, 30.0]])
    np.testing.assert_array_equal(last.numpy(), [7.0, 11.0])


def test_the_numba_backend_runs_the_body_and_its_backward():
    pytest.importorskip("numba")
    args = [df.constant(RS.randn(5, 3)), df.constant(RS.randn(3))]

    def loss(xs, w):
        return df.reduce_sum(df.scan(lambda h, x: df.tanh(h * w + x), xs, df.zeros([3], f64)))
    results = []
    for backend in ("numpy", "numba"):
        d = df.defun(loss, backend=backend)
        with df.GradientTape() as tape:
            for a in args:
                tape.watch(a)
            y = d(*args)
        results.append([y.numpy()] + [g.numpy() for g in tape.gradient(y, args)])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ no rows (found by tests/test_relaxed_sweep.py)
def decay(x):
    return df.scan(lambda acc, row: acc * 0.5 + df.sin(row), x, initializer=df.reduce_sum(x, axis=0) * 0.0)


def decay_loss(x, w):
    return df.reduce_sum(df.square(decay(x * w))) + df.reduce_sum(df.map_fn(lambda r: df.tanh(r) * 2.0, x))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_a_relaxed_scan_of_no_rows_stacks_rows_of_the_accumulators_shape(dtype):
    # a relaxed trace's scan of 0 rows stacked rows of [0, 0] for its [?, ?] (a [0, 0, 0] result
    # where eager gives [0, 2, 3]), and so did its backward (add_n then refused [0, 0, 0] and
    # [0, 2, 3]); eagerly, w (read only through the scan) was 'not connected' at 0 rows
    vg, fwd = df.defun(df.value_and_gradients_function(decay_loss)), df.defun(decay)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == np.float16 else dict(rtol=1e-5, atol=1e-6)
    for shape in [(2, 2, 2), (3, 3, 3), (0, 1, 1), (0, 2, 3), (1, 2, 3)]:
        x, w = RS.normal(size=shape).astype(dtype), RS.normal(size=shape[1:]).astype(dtype)
        want = df.value_and_gradients_function(decay_loss)(x, w)
        got = vg(x, w)
        for g, e in zip([got[0], *got[1]], [want[0], *want[1]]):
            assert g.shape == e.shape and g.dtype == e.dtype
            np.testing.assert_allclose(g.numpy(), e.numpy(), **tol)
        assert fwd(x).shape == decay(df.constant(x)).shape == shape
        if not shape[0]:
            assert float(got[0]) == 0.0 and not np.any(got[1][1].numpy())
    assert vg.trace_count == fwd.trace_count == 2
    cf = list(vg._cache.values())[-1]
    module = {}
    exec(df.export_numpy_source(cf), module)    # noqa: S102 - the exported module
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    x, w = np.zeros((0, 2, 3), dtype), np.ones((2, 3), dtype)
    assert [np.shape(v) for v in module["forward"](x, w)] == [(), (0, 2, 3), (2, 3)]
    assert [tuple(v.shape) for v in loaded(x, w)[1]] == [(0, 2, 3), (2, 3)]
    module = {}
    exec(df.export_numpy_source(list(fwd._cache.values())[-1]), module)    # noqa: S102
    assert np.shape(module["forward"](x)[0]) == (0, 2, 3)


def test_an_eager_scan_of_no_rows_is_connected_to_its_rows():
    def total(x):
        return df.reduce_sum(df.scan(lambda a, r: a + r, x, initializer=df.zeros([2], x.dtype)))
    x = np.zeros((0, 2))
    want = df.defun(df.gradients_function(total))(x)[0]
    got = df.gradients_function(total)(x)[0]
    assert got.shape == want.shape == (0, 2)


@pytest.mark.parametrize("batch", [0, 2])
def test_an_eager_vmap_of_a_scan_of_no_rows_is_connected_to_its_initializer(batch):
    # found by tests/test_relaxed_sweep.py: the batched scan's stacks of no rows were zeros made
    # anew, so an argument read only through the initializer was 'not connected' eagerly
    def total(x, w):
        per = df.vmap(lambda r: decay(r + w))(x)
        return df.reduce_sum(per)
    x, w = np.ones((batch, 0, 3)), np.ones(3)
    want = df.defun(df.gradients_function(total))(x, w)
    got = df.gradients_function(total)(x, w)
    assert [g.shape for g in got] == [g.shape for g in want] == [x.shape, w.shape]
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())


def test_a_relaxed_scan_of_no_rows_in_onnxruntime_stacks_rows_of_the_accumulators_shape():
    # found by tests/test_relaxed_sweep.py: the ONNX Loop's stacks of no rows were [0, 0, 0]
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    cf = df.defun(decay).get_concrete_function(df.TensorSpec([None, None, None], f64))
    sess = ort.InferenceSession(df.export_onnx(cf).SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in [(0, 2, 3), (4, 2, 3), (0, 1, 0)]:
        x = RS.randn(*shape)
        [got] = sess.run(None, {sess.get_inputs()[0].name: x})
        np.testing.assert_allclose(got, decay(df.constant(x)).numpy(), rtol=1e-12)
        assert got.shape == shape
