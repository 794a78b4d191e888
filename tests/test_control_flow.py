"""df.cond and df.while_loop: eager Python vs one traced op, structures, captures, state,
errors, and gradients (defun vs eager vs central finite differences, float64)."""
import json

import numpy as np
import pytest

import defun as df
from defun_helpers import assert_close, nested_gradients, numeric_grads, val


def f64(x):
    return df.constant(np.asarray(x, dtype=np.float64))


def node_types(concrete):
    return [n.type for n in concrete.graph.nodes]


def stateful_types(concrete):
    """Types of the nodes flagged stateful (an op with effects, or functions containing one)."""
    return [n.type for n in concrete.graph.nodes if n.stateful]


def grads_of(fn, *args):
    """Gradients of the scalar fn(*args) w.r.t. each arg, through a GradientTape."""
    xs = [f64(a) for a in args]
    with df.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        y = fn(*xs)
    return [val(g) for g in tape.gradient(y, xs)]


def fd(fn, *args):
    return numeric_grads(lambda *a: val(fn(*[f64(x) for x in a])), args)


# ====================================================================== cond
def piecewise(x):
    return df.cond(df.reduce_sum(x) > 0.0, lambda: x * x * 3.0, lambda: df.sin(x) - x)


def test_cond_eager_runs_python_and_picks_the_branch():
    assert_close(piecewise(f64([1.0, 2.0])), [3.0, 12.0])
    assert_close(piecewise(f64([-1.0, -2.0])), np.sin([-1.0, -2.0]) + [1.0, 2.0])
    assert piecewise(f64([1.0])).dtype is df.float64


def test_cond_traced_once_takes_both_branches_at_call_time():
    f = df.defun(piecewise)
    pos, neg = f64([1.0, 2.0]), f64([-1.0, -0.5])
    assert_close(f(pos), piecewise(pos))
    assert_close(f(neg), piecewise(neg))
    assert f.trace_count == 1
    types = node_types(f.get_concrete_function(pos))
    assert types.count("cond") == 1
    # the branch ops live in the branch functions, not in the outer graph
    assert "sin" not in types and "multiply" not in types


def test_cond_structure_and_python_numbers_in_a_branch():
    def f(x):
        return df.cond(x[0] > 0.0, lambda: {"a": x + 1.0, "b": (x * 2.0, 7.0)},
                       lambda: {"a": x - 1.0, "b": (x * 0.0, x[1])})

    g = df.defun(f)
    for v in ([1.0, 5.0], [-1.0, 5.0]):
        want, got = f(f64(v)), g(f64(v))
        assert set(got) == {"a", "b"} and isinstance(got["b"], tuple)
        assert_close(got["a"], want["a"])
        assert_close(got["b"][0], want["b"][0])
        assert_close(got["b"][1], want["b"][1])
        assert got["b"][1].dtype is df.float64   # the 7.0 took the other branch's dtype


def test_nested_cond():
    def f(x):
        s = df.reduce_sum(x)
        return df.cond(s > 0.0,
                       lambda: df.cond(s > 10.0, lambda: x * 10.0, lambda: x * 2.0),
                       lambda: df.cond(s < -10.0, lambda: x - 100.0, lambda: -x))

    g = df.defun(f)
    for v in ([20.0, 1.0], [1.0, 2.0], [-1.0, -2.0], [-20.0, 0.0]):
        assert_close(g(f64(v)), f(f64(v)))
    assert g.trace_count == 1
    assert node_types(g.get_concrete_function(f64([1.0, 1.0]))).count("cond") == 1


def test_cond_captures_outer_tensor_and_variable():
    w = df.constant(np.array([2.0, 3.0]))          # outer eager tensor
    v = df.Variable(np.array([10.0, 20.0]))

    @df.defun
    def f(x):
        return df.cond(x[0] > 0.0, lambda: x * w, lambda: x + v)

    assert_close(f(f64([1.0, 1.0])), [2.0, 3.0])
    assert_close(f(f64([-1.0, 1.0])), [9.0, 21.0])
    v.assign(np.array([0.5, 0.25]))                 # read by handle: seen without retracing
    assert_close(f(f64([-1.0, 1.0])), [-0.5, 1.25])
    assert f.trace_count == 1
    cf = f.get_concrete_function(f64([1.0, 1.0]))
    assert "cond" in stateful_types(cf)              # a variable read keeps program order


def test_cond_branch_assignment_runs_only_when_taken():
    v = df.Variable(np.array(0.0))

    @df.defun
    def bump(x):
        def yes():
            v.assign_add(x)
            return x * 1.0

        return df.cond(x > 0.0, yes, lambda: x * 0.0)

    bump(f64(2.0))
    bump(f64(-5.0))
    bump(f64(3.0))
    assert_close(v, 5.0)


def test_cond_python_predicate_inside_defun_is_static():
    @df.defun
    def f(x, flag):
        return df.cond(flag, lambda: x + 1.0, lambda: x - 1.0)

    assert_close(f(f64(1.0), True), 2.0)
    assert_close(f(f64(1.0), False), 0.0)
    assert "cond" not in node_types(f.get_concrete_function(f64(1.0), True))


def test_if_on_tensor_inside_defun_suggests_cond():
    @df.defun(autograph=False)      # with autograph (the default) the `if` converts
    def f(x):
        if df.reduce_sum(x) > 0.0:
            return x
        return -x

    with pytest.raises(df.errors.TracingError, match="df.cond"):
        f(f64([1.0]))


def test_cond_mismatched_structure_is_a_clear_error():
    @df.defun
    def f(x):
        return df.cond(x > 0.0, lambda: (x, x), lambda: x)

    with pytest.raises(df.errors.InvalidArgumentError, match=r"cond: .*same structure"):
        f(f64(1.0))


def test_cond_mismatched_dtype_and_rank_are_clear_errors():
    @df.defun
    def f(x):
        return df.cond(x > 0.0, lambda: x, lambda: df.cast(x, df.float32))

    with pytest.raises(df.errors.InvalidArgumentError, match=r"cond: output 0 .*float64.*float32"):
        f(f64(1.0))

    @df.defun
    def g(x):
        return df.cond(x[0] > 0.0, lambda: x, lambda: df.reduce_sum(x))

    with pytest.raises(df.errors.InvalidArgumentError, match=r"cond: output 0 .*rank"):
        g(f64([1.0, 2.0]))


def test_cond_non_bool_predicate_is_an_error():
    @df.defun
    def f(x):
        return df.cond(x, lambda: x, lambda: -x)

    with pytest.raises(df.errors.InvalidArgumentError, match="scalar bool"):
        f(f64(1.0))


def test_cond_branch_shapes_may_differ_in_size():
    @df.defun
    def f(x):
        return df.cond(x[0] > 0.0, lambda: x, lambda: df.concat([x, x], 0))

    c = f.get_concrete_function(f64([1.0, 2.0]))
    assert c.outputs[0].shape == (None,)
    assert_close(f(f64([1.0, 2.0])), [1.0, 2.0])
    assert_close(f(f64([-1.0, 2.0])), [-1.0, 2.0, -1.0, 2.0])


# ---------------------------------------------------------------------- cond gradients
def loss_cond(x, w):
    y = df.cond(df.reduce_sum(x) > 0.0, lambda: df.tanh(x * w) * 2.0, lambda: x * x + df.exp(w))
    return df.reduce_sum(y * y)


@pytest.mark.parametrize("x", [[0.3, 0.7], [-0.3, -0.2]])
def test_cond_gradient_defun_vs_eager_vs_finite_differences(x):
    w = [0.5, -1.5]
    g = df.defun(loss_cond)
    got = grads_of(g, x, w)
    eager = grads_of(loss_cond, x, w)
    num = fd(loss_cond, x, w)
    for a, b, c in zip(got, eager, num):
        assert_close(a, b, rtol=1e-10)
        assert_close(a, c, rtol=1e-5, atol=1e-7)


def test_cond_gradient_reaches_captured_tensor_and_variable():
    c = f64([1.5, -0.5])
    v = df.Variable(np.array([0.2, 0.4]))

    @df.defun
    def f(x):
        return df.reduce_sum(df.cond(x[0] > 0.0, lambda: x * c, lambda: x * v * v))

    for xv, want_c, want_v in (([1.0, 2.0], [1.0, 2.0], [0.0, 0.0]),
                               ([-1.0, 2.0], None, [2 * -1.0 * 0.2, 2 * 2.0 * 0.4])):
        x = f64(xv)
        with df.GradientTape(persistent=True) as tape:
            tape.watch(c)
            y = f(x)
        gc, gv = tape.gradient(y, [c, v])
        if want_c is None:
            assert gc is None or np.all(val(gc) == 0.0)
        else:
            assert_close(gc, want_c)
        assert_close(gv, want_v)


def test_cond_gradient_with_gradients_function_and_one_untaken_input():
    # y depends on b only in the false branch: the true branch gives zeros for b
    f = df.defun(lambda a, b: df.cond(a > 0.0, lambda: a * a, lambda: a * b))
    ga, gb = df.gradients_function(f)(f64(3.0), f64(5.0))
    assert_close(ga, 6.0)
    assert_close(gb, 0.0)
    ga, gb = df.gradients_function(f)(f64(-3.0), f64(5.0))
    assert_close(ga, 5.0)
    assert_close(gb, -3.0)


def test_cond_second_order():
    f = df.defun(lambda x: df.cond(x > 0.0, lambda: x * x * x, lambda: df.sin(x)))
    for xv, want in ((2.0, 12.0), (-1.0, -np.sin(-1.0))):
        assert_close(nested_gradients(f, f64(xv))[1], want, rtol=1e-10)


# ====================================================================== while_loop
def grow(x):
    return df.while_loop(lambda x: df.reduce_sum(x) < 10.0, lambda x: x * 1.5, [x])[0]


def test_while_eager_runs_python():
    out = grow(f64([1.0, 2.0]))
    assert_close(out, np.array([1.0, 2.0]) * 1.5 ** 3)


def test_while_traced_once_runs_to_data_dependent_count():
    g = df.defun(grow)
    for v in ([1.0, 2.0], [0.1, 0.1], [20.0, 0.0]):
        assert_close(g(f64(v)), grow(f64(v)))
    assert g.trace_count == 1
    types = node_types(g.get_concrete_function(f64([1.0, 2.0])))
    assert types.count("while") == 1 and "multiply" not in types


def test_while_counter_and_tensor_and_single_var():
    def f(x, n):
        i, y = df.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 2.0 + 1.0), (0, x))
        single = df.while_loop(lambda k: k < 100, lambda k: k * 3, df.constant(1))
        return i, y, single

    g = df.defun(f)
    x = f64([0.0, 1.0])
    for n in (0, 3):
        ei, ey, es = f(x, df.constant(n))
        gi, gy, gs = g(x, df.constant(n))
        assert int(gi) == n == int(ei)
        assert gi.dtype is df.int32
        assert_close(gy, ey)
        assert int(gs) == int(es) == 243


def test_while_maximum_iterations():
    def f(x):
        return df.while_loop(lambda x: df.reduce_sum(x) < 1e9, lambda x: x * 2.0, (x,),
                             maximum_iterations=4)[0]

    assert_close(f(f64([1.0])), [16.0])
    assert_close(df.defun(f)(f64([1.0])), [16.0])
    assert_close(df.defun(f)(f64([1e9])), [1e9])


def test_while_nested_structure_and_captures():
    scale = f64([1.0, 2.0])
    v = df.Variable(np.array(0.5))

    def f(x):
        out = df.while_loop(lambda s: s["n"] < 3,
                            lambda s: {"n": s["n"] + 1, "acc": [s["acc"][0] + x * scale * v]},
                            {"n": df.constant(0), "acc": [df.zeros_like(x)]})
        return out["acc"][0]

    g = df.defun(f)
    assert_close(g(f64([1.0, 1.0])), f(f64([1.0, 1.0])))
    assert_close(g(f64([1.0, 1.0])), [1.5, 3.0])
    v.assign(np.array(1.0))
    assert_close(g(f64([1.0, 1.0])), [3.0, 6.0])
    assert "while" in stateful_types(g.get_concrete_function(f64([1.0, 1.0])))


def test_while_with_cond_inside_and_while_inside_cond():
    def collatz_steps(n):
        def body(i, n):
            return i + 1, df.cond(df.equal(n % 2, 0), lambda: n // 2, lambda: 3 * n + 1)
        return df.while_loop(lambda i, n: n > 1, body, (0, n))[0]

    def f(x, n):
        return df.cond(n > 5, lambda: grow(x), lambda: x), collatz_steps(n)

    g = df.defun(f)
    for n in (6, 27, 3):
        ea, ec = f(f64([1.0, 2.0]), df.constant(n))
        ga, gc = g(f64([1.0, 2.0]), df.constant(n))
        assert_close(ga, ea)
        assert int(gc) == int(ec)
    assert int(g(f64([1.0, 2.0]), df.constant(27))[1]) == 111


def test_while_body_changing_shape_relaxes_and_changing_dtype_is_a_clear_error():
    # a size that changes becomes unknown in the loop (API.md, fourth round), as eagerly
    def grow(x):
        return df.while_loop(lambda x: df.reduce_sum(x) < 10.0, lambda x: df.concat([x, x], 0), [x])[0]
    np.testing.assert_allclose(df.defun(grow)(f64([1.0, 2.0])).numpy(), grow(f64([1.0, 2.0])).numpy())
    assert grow(f64([1.0, 2.0])).shape == (8,)

    @df.defun
    def f(x):
        return df.while_loop(lambda x: df.reduce_sum(x) < 10.0, lambda x: df.stack([x, x]), [x])

    with pytest.raises(df.errors.InvalidArgumentError, match=r"loop variable 0 .*shape \(2,\).*\(2, 2\).*rank"):
        f(f64([1.0, 2.0]))

    @df.defun
    def g(x):
        return df.while_loop(lambda x: df.reduce_sum(x) < 10.0, lambda x: df.cast(x, df.float32), [x])

    with pytest.raises(df.errors.InvalidArgumentError, match=r"loop variable 0 .*float64.*float32"):
        g(f64([1.0, 2.0]))

    @df.defun
    def h(x):
        return df.while_loop(lambda x: x < 10.0, lambda x: (x, x), [x])

    with pytest.raises(df.errors.InvalidArgumentError, match="structure of loop_vars"):
        h(f64(1.0))


# ---------------------------------------------------------------------- while gradients
def loss_while(x, w):
    def body(i, y):
        return i + 1, df.tanh(y * w) + y * 0.5
    _, y = df.while_loop(lambda i, y: i < 4, body, (0, x))
    return df.reduce_sum(y * y)


def loss_while_data_dependent(x, w):
    y = df.while_loop(lambda y: df.reduce_sum(y * y) < 25.0, lambda y: y * w + 0.1, [x])[0]
    return df.reduce_sum(df.sin(y))


@pytest.mark.parametrize("fn,x,w", [(loss_while, [0.3, -0.8], [1.2, 0.7]),
                                    (loss_while_data_dependent, [0.5, 1.0], [1.3, 1.1])])
def test_while_gradient_defun_vs_eager_vs_finite_differences(fn, x, w):
    g = df.defun(fn)
    got = grads_of(g, x, w)
    eager = grads_of(fn, x, w)
    num = fd(fn, x, w)
    for a, b, c in zip(got, eager, num):
        assert_close(a, b, rtol=1e-9)
        assert_close(a, c, rtol=1e-5, atol=1e-7)


def test_while_gradient_zero_iterations_passes_the_seed_through():
    g = df.defun(lambda x: df.reduce_sum(grow(x) * 3.0))
    (gx,) = grads_of(g, [20.0, 1.0])
    assert_close(gx, [3.0, 3.0])


def test_while_gradient_reaches_captured_variable():
    v = df.Variable(np.array([0.9, 1.1]))

    def f(x):
        y = df.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * v), (0, x))[1]
        return df.reduce_sum(y)

    g = df.defun(f)
    x = f64([2.0, 3.0])
    for fn in (f, g):
        with df.GradientTape() as tape:
            y = fn(x)
        gv = tape.gradient(y, v)
        assert_close(gv, 3.0 * np.array([2.0, 3.0]) * np.array([0.9, 1.1]) ** 2)


def test_while_gradient_inside_defun_training_step():
    w = df.Variable(np.array([0.5, -0.25]))

    def loss(x):
        y = df.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, df.tanh(y * w)), (0, x))[1]
        return df.reduce_sum(y * y)

    step = df.defun(lambda x: df.implicit_value_and_gradients(loss)(x))
    value, grads = step(f64([1.0, 2.0]))
    e_value, e_grads = df.implicit_value_and_gradients(loss)(f64([1.0, 2.0]))
    assert_close(value, e_value)
    assert_close(grads[0][0], e_grads[0][0], rtol=1e-10)
    assert grads[0][1] is w


def test_while_second_order_defun_vs_eager():
    def loss(x):
        body = lambda i, y: (i + 1, y * y * 0.5 + df.sin(y))  # noqa: E731
        return df.reduce_sum(df.while_loop(lambda i, y: i < 3, body, (0, x))[1])

    def hessian_row_sums(fn, x):
        return nested_gradients(fn, x, combine=df.reduce_sum)[1]

    x = f64([0.3, 0.6])
    got = hessian_row_sums(df.defun(loss), x)
    assert_close(got, hessian_row_sums(loss, x), rtol=1e-10)
    num = numeric_grads(lambda a: np.sum(grads_of(loss, a)[0]), [[0.3, 0.6]])[0]
    assert_close(got, num, rtol=1e-5, atol=1e-7)


# ====================================================================== JSON export
def _export_and_load(concrete):
    if hasattr(df, "export_json") and hasattr(df, "load_json"):
        import json
        return df.load_json(json.loads(json.dumps(df.export_json(concrete))))
    from defun.graph import serialize
    return serialize.from_document(serialize.to_document(concrete.graph))


def test_cond_and_while_survive_json_export():
    v = df.Variable(np.array([0.5, 2.0]))

    @df.defun
    def f(x):
        y = df.cond(x[0] > 0.0, lambda: x * v, lambda: -x)
        return df.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 1.5), (0, y))

    loaded = _export_and_load(f.get_concrete_function(f64([1.0, 2.0])))
    for xv in ([1.0, 2.0], [-1.0, 2.0]):
        want_i, want_y = f(f64(xv))
        got_i, got_y = loaded(np.array(xv))
        assert int(got_i) == int(want_i) == 3
        assert_close(got_y, want_y)


def test_while_keeps_per_iteration_values_only_in_the_forward_that_a_gradient_follows():
    from defun.graph_function import GraphFunction
    from defun.graph.functions import plan_of
    f = df.defun(lambda x: df.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, df.sin(v)), (0, x))[1])
    x = df.constant(np.array([1.0, 2.0]))
    cf = f.get_concrete_function(x)
    (traced,) = [n for n in cf.graph.nodes if n.op.name == "while"]
    assert traced.attrs["saves"] is None and len(traced.outputs) == 2   # the traced loop keeps nothing
    (plain,) = [n for n in plan_of(cf.graph).graph.nodes if n.op.name == "while"]
    assert plain.attrs["saves"] is None
    forward = GraphFunction.of(cf.graph).backward().forward
    (saving,) = [n for n in plan_of(forward).graph.nodes if n.op.name == "while"]
    assert saving.attrs["saves"] == 1      # the body's backward reads cos(v)'s input: v per iteration
    assert traced.attrs["saves"] is None   # the traced graph itself never changes
    want = np.array([1.0, 2.0])
    for _ in range(5):
        want = np.sin(want)
    np.testing.assert_allclose(np.asarray(f(x)), want)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = df.reduce_sum(f(x))
    d, v = np.ones(2), np.array([1.0, 2.0])
    for _ in range(5):
        d, v = d * np.cos(v), np.sin(v)
    np.testing.assert_allclose(np.asarray(tape.gradient(y, x)), d)


def test_eager_cond_refuses_a_non_scalar_or_non_bool_predicate_like_traced_cond():
    x = df.constant([1.0, -1.0])
    with pytest.raises(df.errors.InvalidArgumentError, match="cond: the predicate must be a scalar bool"):
        df.cond(x > 0, lambda: x, lambda: -x)
    with pytest.raises(df.errors.InvalidArgumentError, match="scalar bool"):
        df.cond(df.constant(1.0), lambda: x, lambda: -x)
    np.testing.assert_allclose(np.asarray(df.cond(df.reduce_max(x) > 0, lambda: x, lambda: -x)), [1.0, -1.0])


def test_a_while_node_of_an_earlier_document_keeps_its_history_and_differentiates():
    """`history=True` (how loops were traced before): the node also returns the count and
    the loop variables that entered each iteration; a gradient raises it like any loop."""
    from defun.graph.control_flow import share_captures
    from defun.graph.while_op import WHILE
    from defun.graph.ir import Graph
    from defun.runtime.execute import run_op

    @df.defun
    def f(x):
        def fn(base, make):
            g = Graph(base, outer=x.graph)
            with g.building():
                out = make(*[g.placeholder(t.shape, t.dtype) for t in (i0, x)])
            return g.finalize(out)
        i0 = df.constant(0)
        cond_g = fn("c", lambda i, y: [i < 3])
        body_g = fn("b", lambda i, y: [i + 1, df.sin(y) * 2.0])
        share_captures([cond_g, body_g])
        out = run_op(WHILE, [i0, x], {"cond": cond_g, "body": body_g, "maximum_iterations": None,
                                      "history": True, "saves": None})
        return out[1], out[2], out[4]          # final y, the count, the y of each iteration

    x = f64([0.5, 1.0])
    y, count, hist = f(x)
    want = [np.array([0.5, 1.0])]
    for _ in range(3):
        want.append(np.sin(want[-1]) * 2.0)
    assert int(count) == 3
    assert_close(hist, np.stack(want[:3]))
    assert_close(y, want[3])
    with df.GradientTape() as tape:
        tape.watch(x)
        y, _, hist = f(x)
        total = df.reduce_sum(y) + df.reduce_sum(hist)    # the history itself differentiated too
    # d total / d x: through y_3, plus each kept y_k (k = 0, 1, 2)
    chain = [np.ones(2)]
    for k in range(3):
        chain.append(chain[-1] * 2.0 * np.cos(want[k]))     # d y_{k+1} / d x
    assert_close(tape.gradient(total, x), chain[3] + chain[0] + chain[1] + chain[2], rtol=1e-12)


# ====================================================================== a cond switching branches in a loop
def switching_loop(x):
    """Iteration 0 takes the false branch, iterations 1 and 2 the true one; each branch keeps
    intermediates of its own for the gradient (y * 3, y + 1), so what the loop stacks per
    iteration is, in turn, each branch's real value and its empty stand-in."""
    def body(i, y):
        return i + 1, df.cond(i > 0, lambda: df.sin(y * 3.0), lambda: df.cos(y + 1.0) * y)
    return df.reduce_sum(df.while_loop(lambda i, y: i < 3, body, (0, x))[1])


def switching_loop_gradient(x):
    """d switching_loop / dx by the chain rule, in numpy."""
    d = -np.sin(x + 1.0) * x + np.cos(x + 1.0)         # iteration 0: cos(y + 1) * y
    y = np.cos(x + 1.0) * x
    for _ in range(2):                                  # iterations 1, 2: sin(3 y)
        d, y = d * 3.0 * np.cos(3.0 * y), np.sin(3.0 * y)
    return d


@pytest.mark.parametrize("signature", [None, [df.TensorSpec([None], df.float64)]],
                         ids=["static", "unknown_size"])
def test_while_gradient_through_a_cond_whose_branch_changes_between_iterations(signature):
    # before: "while: the gradient keeps %6:1 ... its shape changes ([3] in iteration 0,
    # [0] in iteration 1)"; eager (and TensorFlow) differentiate it
    x = np.array([0.1, 0.2, 0.3])
    want = switching_loop_gradient(x)
    eager = grads_of(switching_loop, x)[0]
    assert_close(eager, want, rtol=1e-12)
    assert_close(fd(switching_loop, x)[0], want, rtol=1e-6)
    f = df.defun(switching_loop, input_signature=signature)
    assert_close(grads_of(f, x)[0], want, rtol=1e-12)
    for dtype, rtol in ((np.float32, 1e-5), (np.float16, 2e-2)):     # the same loop in each float
        g = df.defun(switching_loop, input_signature=signature and [df.TensorSpec([None], dtype)])
        t = df.constant(x.astype(dtype))
        with df.GradientTape() as tape:
            tape.watch(t)
            y = g(t)
        got = tape.gradient(y, t)
        assert got.dtype.np == dtype
        assert_close(got, want, rtol=rtol, atol=rtol)
    cf = f.get_concrete_function(f64(x))
    for depth in (True, False):     # the document's backward, or one derived from its forward
        loaded = df.load_json(json.loads(json.dumps(df.export_json(cf, include_backward=depth))))
        assert_close(grads_of(loaded, x)[0], want, rtol=1e-12)
    module = {}
    exec(df.export_numpy_source(cf, include_backward=True), module)
    _, saved = module["forward_with_side_outputs"](x)
    assert_close(module["backward"]([np.float64(1.0)], saved)[0], want, rtol=1e-12)

    def row_sums_of_hessian(fn):
        return nested_gradients(fn, f64(x), combine=df.reduce_sum)[1]
    second = row_sums_of_hessian(f)
    assert_close(second, row_sums_of_hessian(switching_loop), rtol=1e-10)
    num = numeric_grads(lambda a: np.sum(switching_loop_gradient(a)), [x])[0]
    assert_close(second, num, rtol=1e-5, atol=1e-7)


def test_a_loop_keeping_values_of_a_changing_size_still_refuses_them():
    """Only a cond's stand-ins are given the shape of the real rows: a value the body
    keeps whose size really changes per iteration is still an error naming it."""
    def growing(x):
        def body(i, y):
            kept = df.cast(df.range(i + 1), df.float64) * y[0]    # i + 1 values in iteration i
            return i + 1, y * df.reduce_sum(df.sin(kept))
        return df.reduce_sum(df.while_loop(lambda i, y: i < 3, body, (0, x))[1])
    f = df.defun(growing)
    with pytest.raises(df.errors.InvalidArgumentError, match="its shape changes"):
        grads_of(f, np.array([0.1, 0.4, 0.7, 0.9]))


# ====================================================================== captured initial loop values
def test_while_in_a_defun_starts_from_a_captured_eager_tensor():
    # before: "'EagerTensor' object has no attribute 'handle_data'"
    c = f64([1.0, 2.0])

    def f(x):
        _, y = df.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), (0, c))
        return df.reduce_sum(y * y)

    g = df.defun(f)
    assert_close(g(f64(1.5)), np.sum((np.array([1.0, 2.0]) * 1.5 ** 3) ** 2), rtol=1e-12)
    x, cv = f64(1.5), c
    for fn in (f, g):
        with df.GradientTape() as tape:
            tape.watch([x, cv])
            y = fn(x)
        dx, dc = tape.gradient(y, [x, cv])
        # y = sum(c^2) x^6
        assert_close(dx, 6 * 1.5 ** 5 * 5.0, rtol=1e-12)
        assert_close(dc, 2 * np.array([1.0, 2.0]) * 1.5 ** 6, rtol=1e-12)
    # inside a branch too, and through a document
    h = df.defun(lambda x: df.cond(x > 0.0, lambda: f(x), lambda: f(-x)))
    assert_close(h(f64(-1.5)), g(f64(1.5)), rtol=1e-12)
    loaded = df.load_json(df.export_json(h.get_concrete_function(x)))
    assert_close(loaded(np.float64(1.5)), g(f64(1.5)), rtol=1e-12)
