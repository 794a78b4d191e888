"""The compiled executor: plans equal eager results, values are freed after their last use,
kernel failures name the node, and a failed call leaves variables unchanged."""
import re

import numpy as np
import pytest

import defun as df
from graph_helpers import F32, F64, I32, build, golden  # noqa: F401
from defun.graph.executor import compile_graph
from defun.graph.analysis import live_nodes
from defun.graph.functions import call_graph, plan_of
from defun.graph.ir import Graph
from defun.graph.printer import format_node
from defun.runtime import errors





def feed(g, args):
    return list(args) + [getattr(v, "_value", v) for v in g.captured_values]


# ---------------------------------------------------------------------------------------
# composed programs: compiled plan == eager, exactly (the same kernels run)

def _mlp(x, labels, w1, b1, w2):
    h = df.tanh(x @ w1 + b1)
    logits = h @ w2
    loss = df.reduce_mean(df.sparse_softmax_cross_entropy_with_logits(labels, logits))
    return loss, df.argmax(logits, axis=1), df.softmax(logits)


def _normalize(x):
    mean = df.reduce_mean(x, axis=0, keepdims=True)
    centered = x - mean
    var = df.reduce_mean(df.square(centered), axis=0, keepdims=True)
    return centered * df.rsqrt(var + 1e-5), df.reduce_max(x, axis=1) - df.reduce_min(x)


def _reshape_and_join(x):
    t = df.transpose(df.reshape(x, (3, 4)))                 # (4, 3)
    a, b = df.split(t, [1, 2], axis=1)
    stacked = df.stack([df.reduce_sum(a, axis=1), df.reduce_sum(b, axis=1)], axis=0)
    return df.concat([t, df.expand_dims(stacked[0], 1)], axis=1), stacked


def _select_and_index(x, idx):
    leaky = df.where(x > 0.0, x, x * 0.1)
    picked = df.gather(leaky, idx, axis=0)
    return picked[::2, 1], df.maximum(leaky, df.abs(x) - 1.0), df.cast(x < 0.0, I32)


def _integers(i, j):
    k = (i * 3) // 2 % 5
    return k, df.cast(k, F32) / 2.0, df.reduce_sum(i * j, axis=0), df.logical_and(i > 0, j > 0)


def _chain(x):
    for _ in range(100):
        x = df.tanh(x) * 1.01 + 0.1
    return df.reduce_sum(x), x


def rng_args(rng):
    return {
        "mlp": [rng.standard_normal((5, 4)).astype(np.float32), np.array([0, 2, 1, 1, 0], np.int32),
                rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32),
                rng.standard_normal((8, 3)).astype(np.float32)],
        "normalize": [rng.standard_normal((6, 3))],
        "reshape_and_join": [rng.standard_normal(12).astype(np.float32)],
        "select_and_index": [rng.standard_normal((4, 3)).astype(np.float32),
                             np.array([3, 0, 0, 2], np.int32)],
        "integers": [rng.integers(-9, 9, (3, 4)).astype(np.int32),
                     rng.integers(-9, 9, (3, 4)).astype(np.int32)],
        "chain": [rng.standard_normal(16)],
    }


PROGRAMS = {
    "mlp": (_mlp, [((None, 4), F32), ((None,), I32), ((4, 8), F32), ((8,), F32), ((8, 3), F32)]),
    "normalize": (_normalize, [((None, 3), F64)]),
    "reshape_and_join": (_reshape_and_join, [((12,), F32)]),
    "select_and_index": (_select_and_index, [((4, 3), F32), ((None,), I32)]),
    "integers": (_integers, [((3, 4), I32), ((3, 4), I32)]),
    "chain": (_chain, [((16,), F64)]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_plan_equals_eager(name):
    fn, types = PROGRAMS[name]
    g = build(name, types, fn)
    plan = compile_graph(g)
    for seed in range(3):
        args = rng_args(np.random.default_rng(seed))[name]
        eager = fn(*[df.constant(a) for a in args])
        eager = eager if isinstance(eager, tuple) else (eager,)
        got = plan(*args)
        assert len(got) == len(eager) == plan.num_outputs
        for e, a in zip(eager, got):
            want = np.asarray(e)
            assert a.dtype == want.dtype and a.shape == want.shape
            np.testing.assert_array_equal(a, want)
        for t, a in zip(g.outputs, got):                       # inferred types hold at run time
            assert t.dtype.np == a.dtype and len(t.shape) == a.ndim
            assert all(d is None or d == s for d, s in zip(t.shape, a.shape))


def test_plan_runs_again_with_the_same_results():
    g = build("normalize", PROGRAMS["normalize"][1], _normalize)
    plan = compile_graph(g)
    x = np.random.default_rng(3).standard_normal((5, 3))
    first = [a.copy() for a in plan(x)]
    for a, b in zip(first, plan(x)):
        np.testing.assert_array_equal(a, b)


def test_outputs_may_be_inputs_constants_or_repeated():
    def body(x):
        y = df.tanh(x)
        return x, y, y, df.constant([7.0])
    g = build("f", [((2,), F32)], body)
    x = np.array([0.5, -0.5], np.float32)
    out = compile_graph(g)(x)
    assert len(out) == 4 and out[0] is x and out[1] is out[2]
    np.testing.assert_array_equal(out[1], np.tanh(x))
    np.testing.assert_array_equal(out[3], [7.0])


# ---------------------------------------------------------------------------------------
# liveness: each intermediate value is deleted right after its last use

_WRITES = re.compile(r"\s+(?:(v\d+) = |k\d+\(.*\b(v\d+)\)$)")


def _written(line):
    """The name a plan line makes a new value of: `v1 = ...`, or the buffer a kernel
    writes over (`v1 = k3(v1, c2, out=v1)`, `k3(v1, c2, v1)`), else None."""
    m = _WRITES.match(line)
    return None if m is None else next(g for g in m.groups() if g)


def _value_lives(lines):
    """Each value a plan line makes: (name, line made, lines reading it, line ending it
    or None, how: "del", "overwritten" (the next line making the name writes over it, its
    last reader) or "kept" (returned))."""
    events = [(k, _written(line)) for k, line in enumerate(lines) if _written(line)]
    lives = []
    for e, (k, name) in enumerate(events):
        nxt = next((j for j, n in events[e + 1:] if n == name), len(lines))
        uses = [j for j in range(k + 1, min(nxt + 1, len(lines))) if re.search(rf"\b{name}\b", lines[j])]
        dels = [j for j in uses if lines[j].strip().startswith("del ")]
        if dels:
            lives.append((name, k, [j for j in uses if j < dels[0]], dels, "del"))
        elif nxt < len(lines):
            lives.append((name, k, uses, [nxt], "overwritten"))
        else:
            lives.append((name, k, uses, [], "kept"))
    return lives


def test_values_are_freed_after_their_last_use():
    g = build("chain", [((16,), F64)], lambda x: _chain(x)[0])
    plan = compile_graph(g)
    lines = plan.source.splitlines()
    assert any(line.strip().startswith("del ") for line in lines)
    (out_name,) = re.search(r"return \((\w+),\)", plan.source).groups()
    lives = _value_lives(lines)
    assert len(lives) == 301                                   # 300 chain ops + the sum
    hows = [how for *_, how in lives]
    # the chain's results are written over by the op reading them (one array throughout);
    # the last is deleted after the sum reads it; the sum is returned
    assert hows == ["overwritten"] * 299 + ["del", "kept"]
    for name, k, uses, ends, how in lives:
        if how == "kept":
            assert name == out_name and not any(lines[j].strip().startswith("del ") for j in uses)
            continue
        assert len(ends) == 1, name
        if how == "del":
            assert ends[0] == max(uses) + 1, f"{name} (line {k}) lives past its last use"
        else:
            end = ends[0]
            assert lines[end].endswith((f"out={name})", f", {name})")), \
                f"{name} (line {k}) is overwritten, not reused"
            assert max(uses) == end, f"{name} (line {k}) is read after it was overwritten"


def test_a_value_written_over_takes_its_name_and_is_not_deleted():
    """`k(v1, v1)` (numpy ufuncs take `out` positionally): the result is the dead
    temporary's array, so it takes its name and no `del` follows; a value read elsewhere
    keeps its own name and is deleted."""
    def body(x):
        y = df.tanh(x)            # read by the multiply and by the add: no reuse by multiply
        z = y * 2.0
        return df.reduce_sum(z + y)
    g = build("f", [((8,), F64)], body)
    plan = compile_graph(g)
    lines = [line.strip() for line in plan.source.splitlines()]
    assert lines[2:8] == ["v1 = k1(a0)",
                          "v3 = k3(v1, c2)",            # y is read again: a fresh result
                          "k4(v3, v1, v3)",             # z is dead: the add writes over it
                          "del v1",
                          "v5 = k5(v3)",                # reduce_sum: no out=
                          "del v3"]
    x = np.linspace(-1.0, 1.0, 8)
    t = np.tanh(x)
    np.testing.assert_allclose(plan(x)[0], np.sum(t * 2.0 + t), rtol=1e-12)


def test_a_value_read_twice_by_one_node_is_not_written_over():
    """`y * y`: a dead temporary that a node reads twice keeps its array (the result is
    fresh); one that a node reads once is written over."""
    def body(x):
        y = df.tanh(x)
        z = y * y                 # y is dead after, but read twice here: a fresh result
        w = df.add(z, df.tanh(z))  # both dead after the add, each read once: it writes over z
        return df.reduce_sum(w)
    g = build("f", [((8,), F64)], body)
    plan = compile_graph(g)
    lines = [line.strip() for line in plan.source.splitlines()]
    assert lines[2:5] == ["v1 = k1(a0)", "v2 = k2(v1, v1)", "del v1"], lines
    assert "k4(v2, v3, v2)" in lines, lines
    x = np.linspace(-1.0, 1.0, 8)
    t = np.tanh(x)
    np.testing.assert_allclose(plan(x)[0], np.sum(t * t + np.tanh(t * t)), rtol=1e-12)


def test_dead_nodes_are_not_compiled_but_stateful_ones_are():
    v = df.Variable(np.zeros(2, np.float32))

    def body(x):
        df.exp(x)                       # dead
        v.assign_add(x)                 # no output, kept
        return x * 2.0
    g = build("f", [((2,), F32)], body)
    names = [n.op.name for n in live_nodes(g)]
    assert "exp" not in names and "assign_add_variable" in names
    assert "exp" not in compile_graph(g).source.replace("np.exp", "")
    compile_graph(g)(*feed(g, [np.ones(2, np.float32)]))
    np.testing.assert_array_equal(v.numpy(), [1.0, 1.0])


# ---------------------------------------------------------------------------------------
# failures name the node

def test_kernel_failure_names_the_node_and_the_source_line():
    g = build("f", [((None, 3), F32), ((3, 2), F32)], lambda x, w: df.tanh(x @ w))
    matmul = g.nodes[2]
    plan = compile_graph(g)
    with pytest.raises(errors.InvalidArgumentError) as info:
        plan(np.ones((4, 5), np.float32), np.ones((3, 2), np.float32))   # 5 != 3 at run time
    msg = str(info.value)
    assert f"while executing {format_node(matmul)}" in msg
    assert "%2: f32[?,2] = matmul(%0, %1)" in msg
    assert f"traced at {__file__}" in msg
    assert info.value.__cause__ is not None


def test_failure_of_a_defun_error_keeps_its_type():
    g = build("f", [((None,), I32), ((None,), I32)], lambda a, b: df.pow(a, b) + 1)
    with pytest.raises(errors.InvalidArgumentError, match=r"while executing %2: i32\[\?\] = pow"):
        compile_graph(g)(np.array([2], np.int32), np.array([-1], np.int32))


def test_a_placeholder_that_is_not_an_input_is_rejected():
    g = build("f", [((2,), F32)], lambda x: x + 1.0)
    with g.building():
        stray = g._placeholder((2,), F32, None)
        y = g.outputs[0] + stray
    g.outputs = [y]
    with pytest.raises(errors.InvalidArgumentError, match="is not one of its inputs"):
        compile_graph(g)


# ---------------------------------------------------------------------------------------
# stateful ops: program order, and the undo log on failure

def test_stateful_ops_run_in_program_order():
    v = df.Variable(np.array([1.0, 1.0], np.float32))

    def body(x):
        a = v.read_value()
        v.assign_add(x)
        b = v.read_value()
        v.assign(b * 10.0)
        return a, b, v.read_value()
    g = build("f", [((2,), F32)], body)
    a, b, c = compile_graph(g)(*feed(g, [np.array([1.0, 2.0], np.float32)]))
    np.testing.assert_array_equal(a, [1.0, 1.0])
    np.testing.assert_array_equal(b, [2.0, 3.0])
    np.testing.assert_array_equal(c, [20.0, 30.0])
    np.testing.assert_array_equal(v.numpy(), [20.0, 30.0])


def _assign_then_fail(v):
    def body(x, w):
        v.assign_add(x[0])
        v.assign(v.read_value() * 3.0)
        return df.tanh(x @ w)           # fails at run time for mismatched inner sizes
    return build("f", [((None, None), F32), ((None, 2), F32)], body)


def test_a_failed_call_leaves_variables_unchanged():
    v = df.Variable(np.array([1.0, 2.0], np.float32))
    g = _assign_then_fail(v)
    plan = compile_graph(g)
    with pytest.raises(errors.InvalidArgumentError, match="while executing .*matmul"):
        plan(*feed(g, [np.ones((1, 2), np.float32), np.ones((3, 2), np.float32)]))
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])
    plan(*feed(g, [np.ones((1, 2), np.float32), np.ones((2, 2), np.float32)]))  # succeeds
    np.testing.assert_array_equal(v.numpy(), [6.0, 9.0])


def test_a_failed_call_in_a_called_function_rolls_back_the_caller():
    v = df.Variable(np.array([1.0, 2.0], np.float32))
    inner = build("inner", [((None, None), F32), ((None, 2), F32)], lambda x, w: df.tanh(x @ w))

    def body(x, w):
        v.assign_add(x[0])
        return call_graph(inner, [x, w])[0]
    g = build("f", [((None, None), F32), ((None, 2), F32)], body)
    with pytest.raises(errors.InvalidArgumentError, match="matmul"):
        compile_graph(g)(*feed(g, [np.ones((1, 2), np.float32), np.ones((3, 2), np.float32)]))
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


def _call_then_fail(v):
    bump = build("bump", [((2,), F32)], lambda x: (v.assign_add(x), x)[1])

    def body(x, w):
        call_graph(bump, [x[0]] + bump.captured_values)   # the assignment is in the callee
        return df.tanh(x @ w)
    return build("f", [((None, None), F32), ((None, 2), F32)], body)


def test_a_failed_call_rolls_back_assignments_of_inlined_functions():
    from defun.graph.functions import plan_of
    v = df.Variable(np.array([1.0, 2.0], np.float32))
    g = _call_then_fail(v)
    with pytest.raises(errors.InvalidArgumentError, match="matmul"):
        plan_of(g)(*feed(g, [np.ones((1, 2), np.float32), np.ones((3, 2), np.float32)]))
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


def test_a_failed_call_rolls_back_assignments_of_called_plans():
    v = df.Variable(np.array([1.0, 2.0], np.float32))
    g = _call_then_fail(v)
    with pytest.raises(errors.InvalidArgumentError, match="matmul"):
        compile_graph(g)(*feed(g, [np.ones((1, 2), np.float32), np.ones((3, 2), np.float32)]))
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


def test_a_failed_call_rolls_back_assignments_two_calls_deep_in_order():
    v = df.Variable(np.array([1.0, 2.0], np.float32))
    inner = build("inner", [((2,), F32)], lambda x: (v.assign(x * 5.0), x)[1])

    def middle_body(x):
        v.assign_add(x)
        call_graph(inner, [x] + inner.captured_values)
        v.assign_add(x)
        return x
    middle = build("middle", [((2,), F32)], middle_body)

    def body(x, w):
        call_graph(middle, [x[0]] + middle.captured_values)
        return df.tanh(x @ w)
    g = build("f", [((None, None), F32), ((None, 2), F32)], body)
    plan = compile_graph(g)
    with pytest.raises(errors.InvalidArgumentError, match="matmul"):
        plan(*feed(g, [np.ones((1, 2), np.float32), np.ones((3, 2), np.float32)]))
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])
    plan(*feed(g, [np.ones((1, 2), np.float32), np.ones((2, 2), np.float32)]))
    np.testing.assert_array_equal(v.numpy(), [6.0, 6.0])      # (x * 5) + x, not rolled back


def test_the_undo_log_is_per_thread_and_released_after_each_call():
    import threading
    from defun.graph import executor
    v = df.Variable(np.array([1.0, 2.0], np.float32))
    g = _call_then_fail(v)
    plan = compile_graph(g)
    good = feed(g, [np.ones((1, 2), np.float32), np.ones((2, 2), np.float32)])
    bad = feed(g, [np.ones((1, 2), np.float32), np.ones((3, 2), np.float32)])
    plan(*good)
    assert executor._undo.log is None
    with pytest.raises(errors.InvalidArgumentError):
        plan(*bad)
    assert executor._undo.log is None
    np.testing.assert_array_equal(v.numpy(), [2.0, 3.0])
    seen = []
    thread = threading.Thread(target=lambda: seen.append((plan(*good), executor._undo.log)))
    thread.start()
    thread.join()
    assert len(seen) == 1 and seen[0][1] is None
    np.testing.assert_array_equal(v.numpy(), [3.0, 4.0])


def test_plans_that_never_assign_keep_no_undo_log():
    v = df.Variable(np.array([1.0, 2.0], np.float32))
    g = build("f", [((2,), F32)], lambda x: x * v.read_value())
    assert "_undo" not in compile_graph(g).source
    assert "_undo" in compile_graph(_call_then_fail(v)).source   # assigns in a callee


def test_a_bad_handle_fails_naming_the_assign_node():
    v = df.Variable(np.array([1.0, 2.0], np.float32))
    g = build("f", [((2,), F32)], lambda x: (v.assign_add(x), x * 2.0)[1])
    assign = next(n for n in g.nodes if n.op.name == "assign_add_variable")
    plan = compile_graph(g)
    not_a_handle = np.zeros(2, np.float32)           # has no .value: fails on the undo log line
    with pytest.raises(errors.InvalidArgumentError) as info:
        plan(np.ones(2, np.float32), not_a_handle)
    assert f"while executing {format_node(assign)}" in str(info.value)
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


def test_a_failed_defun_call_rolls_back_assignments_in_cond_and_while_bodies():
    v = df.Variable(np.array([1.0, 2.0], np.float32))

    @df.defun(input_signature=[df.TensorSpec((None, None)), df.TensorSpec((None, 2))])
    def step(x, w):
        df.cond(df.reduce_sum(x) > 0.0, lambda: (v.assign_add(x[0]), x[0])[1], lambda: x[0])
        df.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, (v.assign_add(y), y)[1]),
                      (0, x[0]))
        return df.tanh(x @ w)                # fails at run time for mismatched inner sizes
    with pytest.raises(errors.InvalidArgumentError, match="while executing .*matmul"):
        step(np.ones((1, 2), np.float32), np.ones((3, 2), np.float32))
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])
    step(np.ones((1, 2), np.float32), np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(v.numpy(), [5.0, 6.0])     # 1 (cond) + 3 (loop) each


def test_a_kernel_failure_names_the_shapes_the_node_got():
    f = df.defun(lambda x, w: x @ w, input_signature=[df.TensorSpec([None, None]), df.TensorSpec([3, 2])])
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        f(np.ones((4, 4), np.float32), np.ones((3, 2), np.float32))
    msg = str(info.value)
    assert "while executing" in msg and "matmul" in msg
    assert "on float32[4, 4], float32[3, 2]" in msg


def test_elementwise_chains_reuse_dead_temporaries_and_keep_results_exact():
    def f(x):
        y = df.tanh(x) * 1.01 + 0.1
        view = df.reshape(y, [4, 4])          # a view of y: y must not be overwritten
        z = df.tanh(y) * 2.0
        return df.reduce_sum(z) + df.reduce_sum(view), z

    g = df.defun(f)
    x = df.constant(np.linspace(-1.0, 1.0, 16))
    src = plan_of(g.get_concrete_function(x).graph).source
    assert re.search(r"^\s+k\d+\(v(\d+), c\d+, v\1\)$", src, re.M)     # a multiply over its input
    eager = f(x)
    graph = g(x)
    for a, b in zip(eager, graph):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the returned z is a result, never reused; x (the caller's input) is never written
    np.testing.assert_array_equal(np.asarray(x), np.linspace(-1.0, 1.0, 16))


def test_a_matmul_result_is_written_over_by_the_add_that_reads_it_last():
    """The numpy backend: matmul (a ufunc) makes a fresh array, the bias add keeps no view of
    it, so the add writes over it (`out`) instead of allocating."""
    from graph_helpers import F32, build
    g = build("f", [((4, 3), F32), ((3, 2), F32), ((2,), F32)],
              lambda x, w, b: df.tanh(df.matmul(x, w) + b))
    plan = compile_graph(g)
    add_line = next(line for line in plan.source.splitlines() if "k4(" in line)
    assert add_line.strip() == "k4(v3, a2, v3)"    # the add writes over v3 (ufunc's positional out)
    rng = np.random.default_rng(0)
    x, w, b = (rng.normal(size=s).astype(np.float32) for s in ((4, 3), (3, 2), (2,)))
    np.testing.assert_allclose(plan(x, w, b)[0], np.tanh(x @ w + b), rtol=1e-6)


def test_ufuncs_whose_positional_out_numpy_deprecates_get_it_by_keyword():
    """maximum/minimum written over a dead temporary: `out=` by keyword (numpy deprecates
    a third positional argument for them), so the plan runs with warnings as errors."""
    import warnings
    f = df.defun(lambda x: df.maximum(df.tanh(x), 0.5) * 2.0 + df.minimum(x * 3.0, 1.0))
    x = np.linspace(-1, 1, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = f(df.constant(x)).numpy()
    np.testing.assert_allclose(got, np.maximum(np.tanh(x), 0.5) * 2.0 + np.minimum(x * 3.0, 1.0))
