"""The optimization pipeline; random programs through every pass and the pipeline keep their
results bit for bit; the before/after examples in the pass docstrings are true."""
import textwrap

import numpy as np
import pytest

import defun as df
from graph_helpers import (ALL_PASSES, F32, F64, assert_same_convention, assert_same_results, build,
                           check_pass, op_names, random_args, run)
from defun.graph import passes
from defun.graph.executor import compile_graph
from defun.graph.functions import call_graph, plan_of
from defun.graph.ir import Graph
from defun.graph.verify import VerifyError, verify
from defun.runtime import registry


# ---------------------------------------------------------------------------------------
# the pipeline

def _mlp(x, w1, b1, w2):
    h = df.tanh(df.identity(x @ w1 + b1) * 1.0)
    logits = h @ w2
    scale = df.reduce_sum(df.constant(np.ones((2, 2), np.float32)))   # folds to 4.0
    return df.reduce_mean(df.softmax(logits * scale) + df.softmax(logits * scale), axis=1)


def test_optimize_runs_the_pipeline():
    g = build("mlp", [((None, 3), F32), ((3, 4), F32), ((4,), F32), ((4, 2), F32)], _mlp)
    check_pass(passes.optimize, g, """
        func @mlp(%0: f32[?,3], %1: f32[3,4], %2: f32[4], %3: f32[4,2]) -> (f32[?]):
          %4: f32[?,4] = matmul(%0, %1)
          %5: f32[?,4] = add(%4, %2)
          %6: f32[?,4] = tanh(%5)
          %7: f32[?,2] = matmul(%6, %3)
          %8: f32[] = const() {value=4.0}
          %9: f32[?,2] = multiply(%7, %8)
          %10: f32[?,2] = softmax(%9) {axis=1}
          %11: f32[?,2] = add(%10, %10)
          %12: f32[?] = reduce_mean(%11) {axis=1, keepdims=False}
          return (%12)
    """)


def _reversing(graph):
    """A copy of `graph` with its first two ops swapped: invalid (an op before its input)."""
    h = passes.GraphCopy(graph)
    for n in graph.nodes:
        if n.op.name != "placeholder":
            h.copy(n)
    out = h.finish()
    out.nodes[1], out.nodes[2] = out.nodes[2], out.nodes[1]
    return out


def test_optimize_calls_verify_after_every_pass_and_names_the_pass():
    g = build("f", [((3,), F32)], lambda x: df.exp(df.tanh(x)))

    def reversing_pass(graph):
        return _reversing(graph)

    with pytest.raises(VerifyError, match="pass reversing_pass produced an invalid graph"):
        passes.optimize(g, pipeline=(passes.simplify_algebra, reversing_pass))


def test_a_pass_failing_on_what_an_earlier_pass_broke_names_the_earlier_pass():
    """optimize verifies only its input and result; a failure (here a later pass raising on
    the invalid graph an earlier one made) re-runs the pipeline verifying every pass."""
    g = build("f", [((3,), F32)], lambda x: df.exp(df.tanh(x)))
    calls = []

    def breaking_pass(graph):
        calls.append("breaking")
        return _reversing(graph)

    def strict_pass(graph):
        calls.append("strict")
        if [n.op.name for n in graph.nodes[1:3]] != ["tanh", "exp"]:
            raise KeyError("strict_pass cannot read this graph")
        return graph

    with pytest.raises(VerifyError, match="pass breaking_pass produced an invalid graph"):
        passes.optimize(g, pipeline=(breaking_pass, strict_pass))
    assert calls == ["breaking", "strict", "breaking"]      # the checked run stops at the culprit


def test_a_valid_pipeline_runs_each_pass_once():
    g = build("f", [((3,), F32)], lambda x: df.exp(df.tanh(x)))
    calls = []

    def counting_pass(graph):
        calls.append(1)
        return passes.simplify_algebra(graph)
    h = passes.optimize(g, pipeline=(counting_pass,))
    assert calls == [1] and str(h) == str(passes.simplify_algebra(g))


def test_a_graph_no_pass_changes_is_verified_once(monkeypatch):
    """optimize returns such a graph itself: its input verify was the result's."""
    g = build("f", [((3,), F32)], lambda x: df.exp(df.tanh(x)))
    checked = []

    def counting_verify(graph, recursive=True):
        checked.append(graph)
        return verify(graph, recursive)
    monkeypatch.setattr(passes, "verify", counting_verify)
    assert passes.optimize(g) is g and checked == [g]
    h = build("f", [((3,), F32)], lambda x: df.exp(df.identity(x)))
    checked.clear()
    out = passes.optimize(h)
    assert out is not h and checked == [h, out]       # a changed graph: its result too


def test_optimize_rejects_an_invalid_input_graph():
    g = build("f", [((3,), F32)], lambda x: df.exp(df.tanh(x)))
    g.nodes[1], g.nodes[2] = g.nodes[2], g.nodes[1]
    with pytest.raises(VerifyError, match="the input function is invalid"):
        passes.optimize(g)


def test_plan_of_compiles_the_optimized_graph():
    g = build("f", [((3,), F32)], lambda x: df.tanh(x * 1.0) + df.tanh(x * 1.0))
    plan = plan_of(g)
    assert plan.graph is not g
    assert op_names(plan.graph) == ["tanh", "add"]
    x = np.array([0.5, -1.0, 2.0], np.float32)
    np.testing.assert_array_equal(plan(x)[0], run(g, [x])[0])


def test_optimize_handles_a_10000_node_chain():
    g = Graph("chain")
    with g.building():
        x = g.placeholder((4,), F64)
        for _ in range(3333):
            x = df.tanh(x) * 1.01 + 0.1
    g.finalize([x])
    h = passes.optimize(g)
    assert len(h.nodes) == len(g.nodes) == 10002
    assert_same_results(g, h, [np.linspace(-1, 1, 4)])


def _graphs_for_skip_tests():
    """name -> (graph, passes that change it)."""
    v = df.Variable(np.ones(2, np.float32))
    callee = build("g", [((2,), F32)], df.tanh)

    def stateful(x):
        r = v.read_value()
        v.assign_add(x * 1.0)
        return r + v.read_value()

    def chain(x):
        for _ in range(20):
            x = df.tanh(x) * 1.01 + 0.1
        return x
    s, f, c, d, i = (passes.simplify_algebra, passes.fold_constants,
                     passes.eliminate_common_subexpressions, passes.eliminate_dead_code,
                     passes.inline_calls)
    return {
        "chain": (build("f", [((2,), F32)], chain), ()),
        "mlp": (build("mlp", [((None, 3), F32), ((3, 4), F32), ((4,), F32), ((4, 2), F32)], _mlp),
                (s, f, c)),
        "cse": (build("f", [((2,), F32)], lambda x: df.tanh(x) + df.tanh(x)), (c,)),
        "fold": (build("f", [((2,), F32)], lambda x: x + df.constant([1.0, 2.0]) * 2.0), (f,)),
        "simplify": (build("f", [((2,), F32)], lambda x: df.tanh(df.identity(x))), (s,)),
        "transpose": (build("f", [((2, 3, 4), F32)],
                            lambda x: df.transpose(df.transpose(x, (1, 2, 0)), (1, 2, 0))), (s,)),
        "dead": (build("f", [((2,), F32)], lambda x: (df.exp(x), df.tanh(x))[1]), (d,)),
        "call": (build("f", [((2,), F32)], lambda x: call_graph(callee, [x])[0] * 2.0), (i,)),
        "stateful": (build("f", [((2,), F32)], stateful), (s,)),
    }


@pytest.mark.parametrize("name", sorted(_graphs_for_skip_tests()))
def test_optimize_skips_only_passes_that_would_change_nothing(name):
    g, changed_by = _graphs_for_skip_tests()[name]
    for step, applies in passes._APPLIES.items():
        changes = str(step(g)) != str(g)
        assert changes == (step in changed_by), step.__name__
        if changes:
            assert applies(g), f"optimize would skip {step.__name__}, which changes the graph"
        elif step is not passes.fold_constants:     # fold may try a node and keep it
            assert not applies(g), f"optimize would run {step.__name__} for nothing"
    unskipped = g
    for step in passes.DEFAULT_PIPELINE:
        unskipped = verify(step(unskipped))
    assert str(passes.optimize(g)) == str(unskipped)


# ---------------------------------------------------------------------------------------
# random programs: every pass and the pipeline keep the results, bit for bit

def _random_program(rng, n_ops=40):
    consts = [np.float32(1.0), np.float32(0.0), np.float32(-0.0), np.float32(2.0), np.float32(0.5),
              np.ones((1, 3), np.float32), rng.standard_normal((2, 3)).astype(np.float32)]

    def body(x, y):
        values = [x, y]

        def pick():
            return values[rng.integers(len(values))]

        def const():
            return df.constant(consts[rng.integers(len(consts))])
        unary = [df.tanh, df.identity, df.stop_gradient, lambda a: df.cast(a, F32),
                 lambda a: df.reshape(a, (2, 3)), lambda a: df.transpose(df.transpose(a)),
                 lambda a: a / 1.0, lambda a: df.tanh(const() * const()) + a]
        binary = [df.add, df.multiply, df.subtract, df.maximum]
        for _ in range(n_ops):
            r = rng.random()
            if r < 0.3:
                v = unary[rng.integers(len(unary))](pick())
            elif r < 0.6:
                v = binary[rng.integers(len(binary))](pick(), pick())
            else:
                a = pick()
                c = const()
                v = binary[rng.integers(3)](*((a, c) if rng.random() < 0.5 else (c, a)))
            values.append(df.tanh(v) if rng.random() < 0.2 else v)
        k = int(rng.integers(1, 4))
        return [values[-1]] + [values[i] for i in rng.integers(2, len(values), k)]
    return build("rand", [((2, 3), F32), ((2, 3), F32)], body)


@pytest.mark.parametrize("seed", range(25))
def test_passes_keep_results_of_random_programs(seed):
    rng = np.random.default_rng(seed)
    g = _random_program(rng)
    args = random_args(g, rng)
    args[0][0, :] = -0.0                               # signed zeros must survive too
    args[1][1, 1:] = -0.0
    want = run(g, args)
    for p in ALL_PASSES:
        h = p(g)
        verify(h)
        assert_same_convention(g, h)
        got = run(h, args)
        for a, w in zip(got, want):
            assert a.dtype == w.dtype and a.shape == w.shape
            np.testing.assert_array_equal(a, w)
            np.testing.assert_array_equal(np.signbit(a), np.signbit(w))
    assert len(passes.optimize(g).nodes) <= len(g.nodes)


def test_optimize_keeps_results_of_the_executor_programs():
    from test_executor import PROGRAMS, rng_args
    for name, (fn, types) in sorted(PROGRAMS.items()):
        g = build(name, types, fn)
        h = passes.optimize(g)
        for seed in range(2):
            args = rng_args(np.random.default_rng(seed))[name]
            for a, w in zip(run(h, args), run(g, args)):
                assert a.dtype == w.dtype
                np.testing.assert_array_equal(a, w)


# ---------------------------------------------------------------------------------------
# the before/after examples in the pass docstrings are true

def _doc_example(fn):
    """(before, after) texts of the two-column example in fn's docstring."""
    lines = fn.__doc__.splitlines()
    head = next(k for k, line in enumerate(lines) if "Before:" in line)
    left, right = lines[head].index("Before:"), lines[head].index("After:")
    before, after = [], []
    for line in lines[head + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= left:
            break
        before.append(line[left:right].rstrip())
        after.append(line[right:].rstrip())
    text = lambda rows: textwrap.dedent("\n".join(rows)).strip()   # noqa: E731
    return text(before), text(after)


def _callee_g():
    return build("g", [((3,), F32)], df.tanh)


DOC_EXAMPLES = {
    passes.eliminate_dead_code: lambda: build("f", [((3,), F32)], lambda x: (df.tanh(x), df.exp(x))[0]),
    passes.eliminate_common_subexpressions: lambda: build("f", [((3,), F32)],
                                                          lambda x: df.tanh(x) + df.tanh(x)),
    passes.fold_constants: lambda: build("f", [((2,), F32)], lambda x: x + df.constant([1.0, 2.0]) * 2.0),
    passes.simplify_algebra: lambda: build("f", [((3,), F32)], lambda x: df.tanh(df.identity(x * 1.0))),
    passes.inline_calls: lambda: build("f", [((3,), F32)], lambda x: call_graph(_callee_g(), [x])[0]),
}


@pytest.mark.parametrize("pass_fn", list(DOC_EXAMPLES), ids=lambda f: f.__name__)
def test_docstring_examples(pass_fn):
    before, after = _doc_example(pass_fn)
    g = DOC_EXAMPLES[pass_fn]()
    assert str(g) == before
    assert str(pass_fn(g)) == after


def test_fold_shape_only_ops_when_the_static_shape_is_known():
    g = Graph("f")
    with g.building():
        x = g.placeholder((2, 3), df.float32)
        y = g.placeholder((None, 3), df.float32)
        t = df.tanh(x)
        out = df.tanh(x) * df.ones_like(t) + df.cast(df.size(t), df.float32)
        out_y = df.zeros_like(df.tanh(y)) + y
    g.finalize([out, out_y])
    folded = passes.fold_constants(g)
    kinds = [n.op.name for n in folded.nodes]
    assert "ones_like" not in kinds and "size" not in kinds   # known shape: folded
    assert "zeros_like" in kinds                                 # unknown size: kept
    xv = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    yv = np.ones((4, 3), np.float32)
    for a, b in zip(compile_graph(g)(xv, yv), compile_graph(folded)(xv, yv)):
        np.testing.assert_array_equal(a, b)


def test_shape_only_is_one_row_flag_that_folding_and_static_values_read(monkeypatch):
    from defun.runtime import registry
    assert {op.name for op in registry.all_ops() if op.shape_only} == \
        {"shape", "size", "zeros_like", "ones_like"}

    def build():
        g = Graph("f")
        with g.building():
            x = g.placeholder((2, 3), df.float32)
            s = df.size(df.tanh(x))
            out = df.tanh(x) * df.cast(s, df.float32)
        g.finalize([out])
        return g, s
    g, s = build()
    assert s.static_value() == 6
    assert "size" not in [n.op.name for n in passes.fold_constants(g).nodes]
    monkeypatch.setattr(registry.get("size"), "shape_only", False)    # the flag, nothing else
    g, s = build()
    assert s.static_value() is None
    assert "size" in [n.op.name for n in passes.fold_constants(g).nodes]
