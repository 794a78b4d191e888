"""Optimization passes and verify(): each pass alone on hand-built graphs (golden before/after
text, equal results on random inputs, input graph untouched), stateful ops kept in order,
the pipeline, and verify() rejecting hand-corrupted graphs with a message naming the node."""
import textwrap

import numpy as np
import pytest

import defun as df
from graph_helpers import F32, F64, I32, build, golden  # noqa: F401
from defun.graph import passes
from defun.graph.executor import compile_graph
from defun.graph.functions import CALL, call_graph, plan_of
from defun.graph.ir import Graph
from defun.graph.printer import format_node
from defun.graph.verify import VerifyError, verify
from defun.runtime import attr_types
from defun.runtime.attr_types import check as check_attr
from defun.runtime import errors, registry
from defun.runtime.registry import OpDef


ALL_PASSES = [passes.eliminate_dead_code, passes.eliminate_common_subexpressions,
              passes.fold_constants, passes.simplify_algebra, passes.inline_calls, passes.optimize]


# ---------------------------------------------------------------------------------------
# helpers



def random_args(g, rng, size=3):
    """Random arrays for g's argument placeholders (unknown sizes become `size`)."""
    out = []
    for t in g.inputs:
        shape = tuple(size if d is None else d for d in t.shape)
        if t.dtype.is_floating:
            out.append(rng.standard_normal(shape).astype(t.dtype.np))
        elif t.dtype.is_integer:
            out.append(rng.integers(-5, 6, shape).astype(t.dtype.np))
        else:
            out.append(rng.random(shape) > 0.5)
    return out


def feed(g, args):
    """args followed by the raw values of g's captures (resource handles -> their stores)."""
    return list(args) + [getattr(v, "_value", v) for v in g.captured_values]


def run(g, args):
    return compile_graph(g)(*feed(g, args))


def assert_same_results(before, after, args):
    want, got = run(before, args), run(after, args)
    assert len(want) == len(got)
    for w, a in zip(want, got):
        assert np.asarray(a).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(a, w)


def assert_same_convention(before, after):
    assert after is not before
    assert len(after.all_inputs) == len(before.all_inputs)
    for a, b in zip(after.all_inputs, before.all_inputs):
        assert (a.shape, a.dtype) == (b.shape, b.dtype)
        assert a.node.graph is after
    assert after.capture_order == before.capture_order
    assert after.captured_values == before.captured_values
    assert [(t.shape, t.dtype) for t in after.outputs] == [(t.shape, t.dtype) for t in before.outputs]


def check_pass(pass_fn, g, expected, seeds=(0, 1, 2)):
    """Run pass_fn on g: golden text, convention kept, g untouched, results equal."""
    text_before, nodes_before = str(g), list(g.nodes)
    h = pass_fn(g)
    assert str(g) == text_before and g.nodes == nodes_before, "a pass mutated its input"
    verify(h)
    assert_same_convention(g, h)
    assert str(h) == textwrap.dedent(expected).strip()
    for seed in seeds:
        assert_same_results(g, h, random_args(g, np.random.default_rng(seed)))
    return h


def op_names(g):
    return [n.op.name for n in g.nodes if n.op.name != "placeholder"]


# ---------------------------------------------------------------------------------------
# dead code elimination

def test_dce_removes_unused_nodes():
    g = build("f", [((3,), F32)], lambda x: (df.exp(x), df.tanh(x))[1])
    check_pass(passes.eliminate_dead_code, g, """
        func @f(%0: f32[3]) -> (f32[3]):
          %2: f32[3] = tanh(%0)
          return (%2)
    """)


def test_dce_keeps_unused_arguments_and_everything_outputs_need():
    def body(x, unused, w):
        h = x @ w
        df.reduce_sum(h * h)                     # dead
        return df.reduce_mean(h, axis=1), df.shape(x)
    g = build("f", [((None, 2), F64), ((5,), F32), ((2, 2), F64)], body)
    h = check_pass(passes.eliminate_dead_code, g, """
        func @f(%0: f64[?,2], %1: f32[5], %2: f64[2,2]) -> (f64[?], i32[2]):
          %3: f64[?,2] = matmul(%0, %2)
          %6: f64[?] = reduce_mean(%3) {axis=1, keepdims=False}
          %7: i32[2] = shape(%0) {out_type=int32}
          return (%6, %7)
    """)
    assert len(h.inputs) == 3


def test_dce_keeps_stateful_ops_and_their_inputs():
    v = df.Variable(np.zeros(3, np.float32))

    def body(x):
        r = v.read_value()
        df.tanh(r)                               # dead, though it reads a stateful result
        v.assign_add(x * 2.0)                    # no outputs, must stay
        return x
    g = build("f", [((3,), F32)], body)
    check_pass(passes.eliminate_dead_code, g, """
        func @f(%0: f32[3]) captures (%1: resource[]) -> (f32[3]):
          %2: f32[3] = read_variable(%1) {dtype=float32, shape=(3,)}
          %4: f32[] = const() {value=2.0}
          %5: f32[3] = multiply(%0, %4)
          %6 = assign_add_variable(%1, %5) {dtype=float32, shape=(3,)} [after %2]
          return (%0)
    """, seeds=())
    before = v.numpy()
    run(passes.eliminate_dead_code(g), [np.ones(3, np.float32)])
    np.testing.assert_array_equal(v.numpy(), before + 2.0)


def _bump_function(v, shape=(2,)):
    h = Graph("bump")
    with h.building():
        x = h.placeholder(shape, F32)
        v.assign_add(x)
        y = x + 1.0
    return h.finalize([y])


def test_dce_keeps_a_call_whose_function_assigns_a_variable():
    v = df.Variable(np.zeros(2, np.float32))
    bump = _bump_function(v)
    pure = build("pure", [((2,), F32)], df.exp)

    def body(x):
        call_graph(bump, [x] + bump.captured_values)   # a stateful call: result unused
        call_graph(pure, [x])                          # unused and pure: dead
        return x * 3.0
    g = build("f", [((2,), F32)], body)
    h = passes.eliminate_dead_code(g)
    calls = [(n.op.name, n.attrs["f"].name, n.stateful) for n in h.nodes if "f" in n.attrs]
    assert calls == [("call", "bump", True)]
    run(h, [np.ones(2, np.float32)])
    np.testing.assert_array_equal(v.numpy(), [1.0, 1.0])


def test_is_effectful_looks_into_called_functions():
    v = df.Variable(np.zeros(2, np.float32))
    bump = _bump_function(v)
    outer = build("outer", [((2,), F32)], lambda x: call_graph(bump, [x] + bump.captured_values))
    pure = build("pure", [((2,), F32)], df.exp)
    g = Graph("f")
    with g.building():
        x = g.placeholder((2,), F32)
        plain_bump = g._new_node(CALL, [x, g.capture(v.handle)], {"f": bump}, [((2,), F32)], None)
        plain_outer = g._new_node(CALL, [x, g.capture(v.handle)], {"f": outer}, [((2,), F32)], None)
        plain_pure = g._new_node(CALL, [x], {"f": pure}, [((2,), F32)], None)
    assert plain_bump.stateful and plain_outer.stateful
    assert not plain_pure.stateful
    # such plain calls exist (the gradient of a call reads variables through one): passes
    # must treat them as stateful even though their op is not
    g.finalize([plain_pure.outputs[0]])
    h = passes.optimize(g)
    assert [n.op.name for n in h.nodes if n.op.stateful] == ["assign_add_variable"] * 2


# ---------------------------------------------------------------------------------------
# common subexpression elimination

def test_cse_merges_equal_nodes():
    g = build("f", [((3,), F32)], lambda x: df.tanh(x) + df.tanh(x))
    check_pass(passes.eliminate_common_subexpressions, g, """
        func @f(%0: f32[3]) -> (f32[3]):
          %1: f32[3] = tanh(%0)
          %3: f32[3] = add(%1, %1)
          return (%3)
    """)


def test_cse_merges_chains_and_equal_constants():
    def body(x):
        a = df.exp(x * df.constant([1.0, 2.0], F32))
        b = df.exp(x * df.constant([1.0, 2.0], F32))    # a separate const node, same bytes
        return a - b, df.reduce_sum(a, axis=0)
    g = build("f", [((None, 2), F32)], body)
    check_pass(passes.eliminate_common_subexpressions, g, """
        func @f(%0: f32[?,2]) -> (f32[?,2], f32[2]):
          %1: f32[2] = const() {value=[1., 2.]}
          %2: f32[?,2] = multiply(%0, %1)
          %3: f32[?,2] = exp(%2)
          %7: f32[?,2] = subtract(%3, %3)
          %8: f32[2] = reduce_sum(%3) {axis=0, keepdims=False}
          return (%7, %8)
    """)


def test_cse_respects_attrs_dtypes_and_signed_zero():
    def body(x):
        return [df.reduce_sum(x, axis=0), df.reduce_sum(x, axis=1),          # attrs differ
                df.matmul(x, x), df.matmul(x, x, transpose_b=True),
                x + df.constant(np.float32(0.0)), x + df.constant(np.float32(-0.0)),
                df.cast(x, F64), df.cast(x, I32)]
    g = build("f", [((2, 2), F32)], body)
    h = passes.eliminate_common_subexpressions(g)
    assert op_names(h) == op_names(g)
    assert_same_results(g, h, random_args(g, np.random.default_rng(0)))


def test_cse_never_merges_stateful_reads():
    v = df.Variable(np.ones(2, np.float32))

    def body(x):
        a = v.read_value()
        b = v.read_value()                    # same op, same input: still a separate read
        v.assign_add(x)
        c = v.read_value()
        return a + b, c
    g = build("f", [((2,), F32)], body)
    h = passes.eliminate_common_subexpressions(g)
    assert op_names(h).count("read_variable") == 3
    x = np.array([1.0, 2.0], np.float32)
    v.assign(np.ones(2, np.float32))
    want = run(g, [x])
    v.assign(np.ones(2, np.float32))
    got = run(h, [x])
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], [2.0, 3.0])
    np.testing.assert_array_equal(got[1], want[1])


# ---------------------------------------------------------------------------------------
# constant folding

def test_fold_replaces_constant_expressions():
    g = build("f", [((2,), F32)], lambda x: x + df.constant([1.0, 2.0]) * 2.0)
    check_pass(passes.fold_constants, g, """
        func @f(%0: f32[2]) -> (f32[2]):
          %1: f32[2] = const() {value=[1., 2.]}
          %2: f32[] = const() {value=2.0}
          %3: f32[2] = const() {value=[2., 4.]}
          %4: f32[2] = add(%0, %3)
          return (%4)
    """)


def test_fold_goes_through_chains_and_multi_output_ops():
    def body(x):
        c = df.constant(np.arange(6, dtype=np.float64).reshape(2, 3))
        a, b = df.split(c, 2, axis=0)              # two outputs, both folded
        s = df.reduce_sum(df.tanh(a) * b, axis=1)
        return x * s
    g = build("f", [((1,), F64)], body)
    h = passes.eliminate_dead_code(passes.fold_constants(g))
    assert op_names(h) == ["const", "multiply"]
    folded = h.nodes[1].attrs["value"]
    np.testing.assert_array_equal(folded, np.sum(np.tanh([[0., 1., 2.]]) * [[3., 4., 5.]], axis=1))
    assert not folded.flags.writeable
    assert_same_results(g, h, [np.array([2.0])])


def test_fold_respects_the_size_cap():
    def body(x):
        big = df.ones((10, 10), F32)              # zero-input op: all of its inputs are consts
        return x + df.reduce_sum(big + 1.0, axis=0)
    g = build("f", [((10,), F32)], body)
    capped = passes.fold_constants(g, max_elements=50)
    assert op_names(capped) == op_names(g)        # 100-element results exceed the cap
    small = passes.fold_constants(g, max_elements=100)
    assert op_names(passes.eliminate_dead_code(small)) == ["const", "add"]
    assert_same_results(g, capped, [np.ones(10, np.float32)])
    assert_same_results(g, small, [np.ones(10, np.float32)])


def test_fold_leaves_failing_and_warning_kernels_for_call_time():
    def body(x):
        bad = df.pow(df.constant([2], I32), df.constant([-1], I32))  # raises in the kernel
        nan = df.log(df.constant([-1.0]))                            # warns (invalid value)
        return x + nan, bad
    g = build("f", [((1,), F32)], body)
    h = passes.fold_constants(g)
    assert "pow" in op_names(h) and "log" in op_names(h)
    with pytest.raises(errors.InvalidArgumentError, match="while executing .*pow"):
        run(h, [np.ones(1, np.float32)])


def test_fold_keeps_function_outputs_and_stateful_ops():
    v = df.Variable(np.zeros(2, np.float32))

    def body():
        v.assign(df.constant([1.0, 2.0]) + 1.0)     # the add folds, the assignment stays
        return df.constant([3.0]) * 2.0               # an output: each call returns a fresh array
    g = build("f", [], body)
    h = passes.fold_constants(g)
    assert op_names(passes.eliminate_dead_code(h)) == ["const", "assign_variable", "const",
                                                       "const", "multiply"]
    run(h, [])
    np.testing.assert_array_equal(v.numpy(), [2.0, 3.0])
    a, = run(h, [])
    b, = run(h, [])
    assert a is not b


# ---------------------------------------------------------------------------------------
# algebraic simplification

def test_simplify_removes_multiply_by_one_and_identity():
    g = build("f", [((3,), F32)], lambda x: df.tanh(df.identity(x * 1.0)))
    check_pass(passes.simplify_algebra, g, """
        func @f(%0: f32[3]) -> (f32[3]):
          %1: f32[] = const() {value=1.0}
          %4: f32[3] = tanh(%0)
          return (%4)
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
          %3: f32[4,2,3] = transpose(%0) {perm=(2, 0, 1)}
          return (%3)
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
          %2: f32[3] = tanh(%0)
          return (%2)
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
          %5: f32[?,2] = matmul(%0, %1)
          %6: f32[] = reduce_sum(%0) {axis=None, keepdims=False}
          %7: f32[?,2] = tanh(%5)
          %8: f32[] = tanh(%6)
          %3: f32[] = const() {value=2.0}
          %4: f32[?,2] = multiply(%7, %3)
          return (%4)
    """)
    assert "call" not in op_names(h)


def test_inline_keeps_stateful_order_and_control_edges():
    v = df.Variable(np.zeros(2, np.float32))
    bump = _bump_function(v)

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
          %9: f32[?,4] = tanh(%5)
          %10: f32[?,2] = matmul(%9, %3)
          %12: f32[] = const() {value=4.0}
          %13: f32[?,2] = multiply(%10, %12)
          %14: f32[?,2] = softmax(%13) {axis=1}
          %17: f32[?,2] = add(%14, %14)
          %18: f32[?] = reduce_mean(%17) {axis=1, keepdims=False}
          return (%18)
    """)


def test_optimize_calls_verify_after_every_pass_and_names_the_pass():
    g = build("f", [((3,), F32)], lambda x: df.exp(df.tanh(x)))

    def reversing_pass(graph):
        h = passes.GraphCopy(graph)
        for n in graph.nodes:
            if n.op.name != "placeholder":
                h.copy(n)
        out = h.finish()
        out.nodes[1], out.nodes[2] = out.nodes[2], out.nodes[1]
        return out

    with pytest.raises(VerifyError, match="pass reversing_pass produced an invalid graph"):
        passes.optimize(g, pipeline=(passes.simplify_algebra, reversing_pass))


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
# verify: valid graphs pass, hand-corrupted graphs fail naming the node and the fix

def test_verify_accepts_graphs_built_by_tracing():
    v = df.Variable(np.ones((2, 2), np.float32))
    g = build("f", [((None, 2), F32), ((3,), I32)],
              lambda x, i: [df.split(x @ v.read_value(), 2, axis=1)[0], df.reduce_max(i),
                            x[:, 1:], df.concat([x, x], axis=0)])
    assert verify(g) is g


def _victim():
    return build("f", [((None, 3), F32)], lambda x: df.reduce_sum(df.tanh(x) * 2.0, axis=1))


def _corrupt_order(g):
    g.nodes[2], g.nodes[3] = g.nodes[3], g.nodes[2]
    return g.nodes[2], "defined after this node"


def _corrupt_cycle(g):
    tanh, mul = g.nodes[1], g.nodes[3]
    tanh.inputs = [mul.outputs[0]]
    return tanh, "depends on itself through the cycle %"


def _corrupt_stray_placeholder(g):
    with g.building():
        t = g._placeholder((2,), F32, None)
    return t.node, "neither an argument nor a capture"


def _corrupt_unknown_op(g):
    n = g.nodes[2]
    n.op = OpDef("mystery_tanh", np.tanh, n.op.infer)
    return n, "'mystery_tanh' is not the registered op"


def _corrupt_attr_name(g):
    n = g.nodes[-1]
    n.attrs["axes"] = (1,)
    return n, "attr 'axes' is not declared by op 'reduce_sum'"


def _corrupt_attr_type(g):
    n = g.nodes[-1]
    n.attrs["keepdims"] = "no"
    return n, "attr 'keepdims' should be True or False"


def _corrupt_attr_list(g):
    with g.building():
        r = df.reshape(g.outputs[0], (-1, 1))
    r.node.attrs["shape"] = [-1, 1]
    return r.node, "attr 'shape' should be a tuple of ints"


def _corrupt_shape(g):
    n = g.nodes[1]
    n.outputs[0].shape = (None, 4)
    return n, "recorded as f32[?,4] but its inputs give f32[?,3]"


def _corrupt_dtype(g):
    n = g.nodes[1]
    n.outputs[0].dtype = F64
    return n, "recorded as f64[?,3]"


def _corrupt_inference(g):
    n = g.nodes[-1]
    n.attrs["axis"] = 5
    return n, "shape inference fails"


def _corrupt_output_count(g):
    with g.building():
        parts = df.split(g.inputs[0], 3, axis=1)
    node = parts[0].node
    node.outputs.pop()
    return node, "it has 2 outputs, op 'split' makes 3"


def _corrupt_foreign_input(g):
    other = build("other", [((None, 3), F32)], df.exp)
    n = g.nodes[2]
    n.inputs = [other.outputs[0]]
    return n, "produced outside this function"


def _corrupt_foreign_output(g):
    other = build("other", [((None,), F32)], df.exp)
    g.outputs = [other.outputs[0]]
    return None, "output 0 (%1) is not a tensor of this function"


def _corrupt_duplicate_id(g):
    g.nodes[3].id = g.nodes[2].id
    return g.nodes[3], "its id 2 is also used by an earlier node"


def _corrupt_stale_tensor(g):
    from defun.graph.ir import SymbolicTensor
    n = g.nodes[3]
    old = n.inputs[0]
    n.inputs = [SymbolicTensor(old.node, 0, old.shape, old.dtype), n.inputs[1]]
    return n, "input 0 (%1) is not an output of its node"


def _corrupt_control_input(g):
    other = build("other", [((3,), F32)], df.exp)
    g.nodes[2].control_inputs.append(other.nodes[1])
    return g.nodes[2], "control input %1 is not a node of this function"


def _corrupt_callee(g):
    callee = build("callee", [((None, 3), F32)], df.exp)
    callee.nodes[1].attrs["bogus"] = 1
    with g.building():
        call_graph(callee, [g.inputs[0]])
    return callee.nodes[1], "invalid graph @callee"


CORRUPTIONS = [_corrupt_order, _corrupt_cycle, _corrupt_stray_placeholder, _corrupt_unknown_op,
               _corrupt_attr_name, _corrupt_attr_type, _corrupt_attr_list, _corrupt_shape,
               _corrupt_dtype, _corrupt_inference, _corrupt_output_count, _corrupt_foreign_input,
               _corrupt_foreign_output, _corrupt_duplicate_id, _corrupt_stale_tensor,
               _corrupt_control_input, _corrupt_callee]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=[c.__name__[9:] for c in CORRUPTIONS])
def test_verify_rejects_corrupted_graphs(corrupt):
    g = _victim()
    verify(g)
    node, expected = corrupt(g)
    with pytest.raises(VerifyError) as info:
        verify(g)
    msg = str(info.value)
    assert isinstance(info.value, errors.InvalidArgumentError)
    assert expected in msg
    if node is not None:
        assert format_node(node) in msg               # prints the failing node
    assert msg.rstrip().endswith(tuple("abcdefghijklmnopqrstuvwxyz)")) and ". " in msg  # a fix


GRAPH = object()       # stands for a function Graph in ATTR_EXAMPLES

ATTR_EXAMPLES = {
    "int": ([0, -3, np.int64(2)], [True, 1.0, "1", None]),
    "float": ([0.5, 2, np.float32(1.5)], [False, "1.0", None]),
    "bool": ([True, False, np.bool_(True)], [1, 0, "yes", None]),
    "str": (["CONSTANT", ""], [b"x", 1]),
    "ints": [((), (1, -1), (np.int32(2),)), ([1, 2], (1.0,), (True,), None, 1)],
    "shape": [((), (2, None), (0,)), ((-1,), [2], (2.0,), None)],
    "dtype": ([F32, df.int64], ["float32", np.float32, None]),
    "tensor": ([np.zeros(2, np.float32), np.array(True), np.zeros(2, np.complex64)],
               [np.array(["a"]), np.zeros(2, np.longdouble), [1.0], 1.0]),
    "func": ([GRAPH], [None, "f", lambda x: x]),
    "funcs": ([(), (GRAPH, GRAPH)], [[GRAPH], (GRAPH, None)]),
    "opt_int": ([None, 3], [1.5, True, (1,)]),
    "opt_ints": ([None, 1, (0, 1), ()], [[0, 1], 1.0, (None,)]),
    "transient": ([None, object(), lambda: 0], []),
    "slices": ([(), (0, slice(None, 2), None, Ellipsis, slice(1, None, -1))],
               [[0], (slice(0.5, 2),), ("a",), 0]),
    "dtypes": ([(), (F32, I32)], [[F32], ("float32",), F32]),
}


@pytest.mark.parametrize("kind", sorted(registry.ATTR_TYPES))
def test_attr_checkers(kind):
    graph = Graph("callee")
    choices = attr_types.choices(kind)   # an enumerated string type: its values, then others
    good, bad = (list(choices), ["", "not one of them", 1, None]) if choices else ATTR_EXAMPLES[kind]

    def sub(v):
        if v is GRAPH:
            return graph
        if isinstance(v, (tuple, list)):
            return type(v)(graph if x is GRAPH else x for x in v)
        return v
    for v in good:
        assert check_attr(kind, sub(v)), (kind, v)
    for v in bad:
        assert not check_attr(kind, sub(v)), (kind, v)
    atype = attr_types.TYPES[kind]      # one row per type: check, words, and the JSON codec
    assert atype.expected and (kind == "transient" or (atype.encode and atype.decode))


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
    from test_executor import PROGRAMS, _rng_args
    for name, (fn, types) in sorted(PROGRAMS.items()):
        g = build(name, types, fn)
        h = passes.optimize(g)
        for seed in range(2):
            args = _rng_args(np.random.default_rng(seed))[name]
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
