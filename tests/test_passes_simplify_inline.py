"""Algebraic simplification and call inlining, each pass alone on hand-built graphs (golden
before/after text, equal results), and stateful ops kept in order by every pass."""
import textwrap

import numpy as np
import pytest

import defun as df
from graph_helpers import (ALL_PASSES, F32, F64, I32, assert_same_convention, assert_same_results,
                           build, bump_function, check_pass, op_names, random_args, run)
from defun.graph import passes
from defun.graph.functions import CALL, call_graph
from defun.graph.ir import Graph
from defun.graph.verify import verify


# ---------------------------------------------------------------------------------------
# algebraic simplification

def test_simplify_removes_multiply_by_one_and_identity():
    g = build("f", [((3,), F32)], lambda x: df.tanh(df.identity(x * 1.0)))
    check_pass(passes.simplify_algebra, g, """
        func @f(%0: f32[3]) -> (f32[3]):
          %1: f32[] = const() {value=1.0}
          %2: f32[3] = tanh(%0)
          return (%2)
    """)


def _neg0(dtype=np.float32):
    return df.constant(np.array(-0.0, dtype))


SIMPLIFY_CASES = [
    # name, argument types, body, number of op nodes left (consts not counted) after + DCE
    ("x*1", [((2, 3), F32)], lambda x: x * 1.0, 0),
    ("1*x", [((2, 3), F32)], lambda x: 1.0 * x, 0),
    ("x*ones(same shape)", [((2, 3), F32)], lambda x: x * df.constant(np.ones((2, 3), np.float32)), 0),
    ("x*ones(1,3)", [((2, 3), F32)], lambda x: x * df.constant(np.ones((1, 3), np.float32)), 0),
    ("x*ones broadcasts up", [((3,), F32)], lambda x: x * df.constant(np.ones((2, 3), np.float32)), 1),
    ("x*1 of unknown size", [((None,), F32)], lambda x: x * df.constant(np.ones(3, np.float32)), 1),
    ("x*2", [((3,), F32)], lambda x: x * 2.0, 1),
    ("x+0 int", [((3,), I32)], lambda x: x + 0, 0),
    ("0+x int", [((3,), I32)], lambda x: 0 + x, 0),
    ("x-0 int", [((3,), I32)], lambda x: x - 0, 0),
    ("x+0.0 float (not exact)", [((3,), F32)], lambda x: x + 0.0, 1),
    ("x+(-0.0) float", [((3,), F32)], lambda x: x + _neg0(), 0),
    ("(-0.0)+x float", [((3,), F32)], lambda x: _neg0() + x, 0),
    ("x-0.0 float", [((3,), F32)], lambda x: x - 0.0, 0),
    ("x-(-0.0) float (not exact)", [((3,), F32)], lambda x: x - _neg0(), 1),
    ("x/1 float", [((3,), F64)], lambda x: x / 1.0, 0),
    ("x/1 int (dtype changes)", [((3,), I32)], lambda x: x / 1, 1),
    ("identity chain", [((3,), F32)], lambda x: df.identity(df.identity(df.identity(x))), 0),
    ("stop_gradient kept", [((3,), F32)], lambda x: df.stop_gradient(x), 1),
    ("stop_gradient twice", [((3,), F32)], lambda x: df.stop_gradient(df.stop_gradient(x)), 1),
    ("cast to own dtype", [((None,), F32)], lambda x: df.cast(x, F32), 0),
    ("cast to other dtype", [((3,), F32)], lambda x: df.cast(x, F64), 1),
    ("reshape to own shape", [((2, 3), F32)], lambda x: df.reshape(x, (2, 3)), 0),
    ("reshape changes shape", [((2, 3), F32)], lambda x: df.reshape(x, (3, 2)), 1),
    ("transpose twice = identity", [((2, 3, 4), F32)],
     lambda x: df.transpose(df.transpose(x, (1, 0, 2)), (1, 0, 2)), 0),
    ("transpose twice composes", [((2, 3, 4), F32)],
     lambda x: df.transpose(df.transpose(x, (1, 2, 0)), (1, 2, 0)), 1),
    ("transpose by identity perm", [((2, 3), F32)], lambda x: df.transpose(x, (0, 1)), 0),
    ("matrix transpose twice", [((None, 3), F32)], lambda x: df.transpose(df.transpose(x)), 0),
]


@pytest.mark.parametrize("name,types,body,left", SIMPLIFY_CASES, ids=[c[0] for c in SIMPLIFY_CASES])
def test_simplify_rules(name, types, body, left):
    g = build("f", types, body)
    h = passes.simplify_algebra(g)
    verify(h)
    assert_same_convention(g, h)
    kept = [n for n in op_names(passes.eliminate_dead_code(h)) if n != "const"]
    assert len(kept) == left, f"{name}: {kept}"
    for seed in range(3):
        assert_same_results(g, h, random_args(g, np.random.default_rng(seed)))


def test_simplify_keeps_the_sign_of_zero():
    g = build("f", [((2,), F32)], lambda x: (x + 0.0, x - 0.0, x + _neg0()))
    h = passes.optimize(g)
    x = np.array([-0.0, 0.0], np.float32)
    for want, got in zip(run(g, [x]), run(h, [x])):
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert list(np.signbit(run(h, [x])[0])) == [False, False]    # -0.0 + 0.0 is +0.0


def test_simplify_composes_transposes_into_one():
    g = build("f", [((2, 3, 4), F32)], lambda x: df.transpose(df.transpose(x, (1, 2, 0)), (1, 2, 0)))
    h = passes.eliminate_dead_code(passes.simplify_algebra(g))
    assert str(h) == textwrap.dedent("""
        func @f(%0: f32[2,3,4]) -> (f32[4,2,3]):
          %1: f32[4,2,3] = transpose(%0) {perm=(2, 0, 1)}
          return (%1)
    """).strip()
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(run(h, [x])[0], np.transpose(np.transpose(x, (1, 2, 0)), (1, 2, 0)))


def test_simplify_never_touches_stateful_ops():
    v = df.Variable(np.ones(3, np.float32))

    def body(x):
        r = df.identity(v.read_value())
        v.assign(x * 1.0)                           # the multiply goes, the assign stays
        return r
    g = build("f", [((3,), F32)], body)
    h = passes.eliminate_dead_code(passes.simplify_algebra(g))
    assert op_names(h) == ["read_variable", "assign_variable"]
    assign = h.nodes[-1]
    assert assign.inputs[1] is h.inputs[0] and assign.control_inputs == [h.nodes[2]]
    out, = run(h, [np.full(3, 5.0, np.float32)])
    np.testing.assert_array_equal(out, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(v.numpy(), [5.0, 5.0, 5.0])


# ---------------------------------------------------------------------------------------
# call inlining

def test_inline_replaces_a_call_by_the_function_body():
    callee = build("g", [((3,), F32)], df.tanh)
    g = build("f", [((3,), F32)], lambda x: call_graph(callee, [x])[0])
    assert str(g).count("func @") == 2
    check_pass(passes.inline_calls, g, """
        func @f(%0: f32[3]) -> (f32[3]):
          %1: f32[3] = tanh(%0)
          return (%1)
    """)


def test_inline_nested_calls_with_captures_and_several_outputs():
    w = df.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    inner = build("inner", [((None, 3), F32)], lambda x: (x @ w, df.reduce_sum(x)))  # captures w
    middle = build("middle", [((None, 3), F32)],
                   lambda x: [df.tanh(t) for t in call_graph(inner, [x] + inner.captured_values)])
    g = build("f", [((None, 3), F32)],
              lambda x: call_graph(middle, [x] + middle.captured_values)[0] * 2.0)
    assert len(g.captured_values) == 1 and g.captured_values[0] is w
    h = check_pass(passes.inline_calls, g, """
        func @f(%0: f32[?,3]) captures (%1: f32[3,2]) -> (f32[?,2]):
          %2: f32[?,2] = matmul(%0, %1)
          %3: f32[] = reduce_sum(%0) {axis=None, keepdims=False}
          %4: f32[?,2] = tanh(%2)
          %5: f32[] = tanh(%3)
          %6: f32[] = const() {value=2.0}
          %7: f32[?,2] = multiply(%4, %6)
          return (%7)
    """)
    assert "call" not in op_names(h)


def test_inline_keeps_stateful_order_and_control_edges():
    v = df.Variable(np.zeros(2, np.float32))
    bump = bump_function(v)

    def body(x):
        before = v.read_value()
        y, = call_graph(bump, [x] + bump.captured_values)
        after = v.read_value()
        return before, y, after
    g = build("f", [((2,), F32)], body)
    h = passes.inline_calls(g)
    stateful = [n for n in h.nodes if n.op.stateful]
    assert [n.op.name for n in stateful] == ["read_variable", "assign_add_variable", "read_variable"]
    assert stateful[0] in stateful[1].control_inputs     # inlined write after the caller's read
    assert stateful[1] in stateful[2].control_inputs     # caller's next read after the write
    x = np.array([1.0, 2.0], np.float32)
    want = run(g, [x])
    v.assign(np.zeros(2, np.float32))
    got = run(h, [x])
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[0], [0.0, 0.0])
    np.testing.assert_array_equal(got[2], [1.0, 2.0])


def test_inline_leaves_a_function_that_calls_itself():
    g = Graph("rec")
    with g.building():
        x = g.placeholder((3,), F32)
        node = g._new_node(CALL, [x], {"f": g}, [((3,), F32)], None)
        y = df.tanh(node.outputs[0])
    g.finalize([y])
    verify(g)
    h = passes.inline_calls(g)
    assert op_names(h) == ["call", "tanh"] and h.nodes[1].attrs["f"] is g


def test_inline_keeps_the_output_signature_when_a_function_returns_its_argument():
    callee = build("same", [((None,), F32)], lambda x: df.identity(x))
    callee_passthrough = Graph("pass")
    with callee_passthrough.building():
        p = callee_passthrough.placeholder((None,), F32)
    callee_passthrough.finalize([p])
    g = build("f", [((4,), F32)], lambda x: call_graph(callee_passthrough, [x])[0])
    h = passes.inline_calls(g)
    verify(h)
    assert h.outputs[0].shape == (None,) and g.outputs[0].shape == (None,)
    assert_same_results(g, h, [np.arange(4, dtype=np.float32)])
    assert callee.outputs[0].shape == (None,)


# ---------------------------------------------------------------------------------------
# stateful ops across every pass

def test_every_pass_keeps_stateful_ops_in_order():
    v = df.Variable(np.ones(2, np.float32))

    def body(x):
        r1 = v.read_value()
        v.assign_add(x * 1.0)
        r2 = v.read_value()
        v.assign(r2 * 2.0)
        r3 = v.read_value()
        df.tanh(r3)                                   # dead
        return r1 + r1, r2 + r2, r3
    g = build("f", [((2,), F32)], body)
    x = np.array([1.0, 3.0], np.float32)
    v.assign(np.ones(2, np.float32))
    want = run(g, [x])
    want_var = v.numpy()
    for p in ALL_PASSES:
        h = p(g)
        verify(h)
        stateful = [n for n in h.nodes if n.op.stateful]
        assert [n.op.name for n in stateful] == ["read_variable", "assign_add_variable",
                                                  "read_variable", "assign_variable",
                                                  "read_variable"], p.__name__
        for prev, nxt in zip(stateful, stateful[1:]):
            assert prev in nxt.control_inputs, p.__name__
        v.assign(np.ones(2, np.float32))
        got = run(h, [x])
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(v.numpy(), want_var)
    np.testing.assert_array_equal(want[2], [4.0, 8.0])
