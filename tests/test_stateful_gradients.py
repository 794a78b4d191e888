"""Gradients of stateful code: the backward consumes what the forward saved, never re-runs it.

The table: each stateful construct (cond, while_loop, a nested defun call, custom_gradient,
a tape inside the function) x (a variable read and then assigned later in the same
function; an assignment and a df.print inside the construct) x (first, second and third
order) x (eager; through a defun; through a rematerializing defun; tapes inside the
defun; one persistent tape asked inside its own block). Every construct computes
y = c * x**3 from a variable read (c = v, or v**3 for the loop), so the derivatives are
known by hand; the variables and the printed lines must be exactly what the forward
alone leaves, whatever the order.
"""
import numpy as np
import pytest

import defun as df
from defun.graph_function import GraphFunction

X = 1.3
V0 = 3.0
f64 = df.float64


class State:
    """The variables of one case: `v` read by the construct, `count` bumped inside it."""

    def __init__(self, assign_in_body):
        self.v = df.Variable(V0, dtype=f64, name="v")
        self.count = df.Variable(0.0, dtype=f64, name="count")
        self.assign_in_body = assign_in_body

    def effect(self):
        if self.assign_in_body:
            self.count.assign_add(1.0)
            df.print("tick")


# ---------------------------------------------------------------------------------------
# the constructs: each returns (function of x computing c * x**3, c, forward effects per run)
def _cond(s):
    def f(x):
        def taken():
            s.effect()
            return x * x * x * s.v          # reads v inside the branch
        return df.cond(x > 0.0, taken, lambda: x)
    return f, V0, 1


def _while(s):
    def f(x):
        def body(i, p):
            s.effect()
            return i + 1, p * x * s.v       # reads v in every iteration
        return df.while_loop(lambda i, p: i < 3, body, (0, df.ones_like(x)))[1]
    return f, V0 ** 3, 3


def _call(s):
    @df.defun
    def inner(x):
        s.effect()
        return x * x * x * s.v
    return inner, V0, 1


def _custom(s):
    @df.custom_gradient
    def cube_v(x, scale=1.0):
        s.effect()
        w = s.v.read_value()
        y = x * x * x * w * scale

        def grad_fn(dy, variables=None):   # uses the forward's intermediates: differentiable
            return [dy * 3.0 * x * x * w * scale], [dy * x * x * x * scale]
        return y, grad_fn
    return (lambda x: cube_v(x, scale=1.0)), V0, 1


def _tape(s):
    def f(x):
        with df.GradientTape() as tape:
            tape.watch(x)
            s.effect()
            z = x * x * x * x * s.v * 0.25
        return tape.gradient(z, x)          # = v * x**3
    return f, V0, 1


CONSTRUCTS = {"cond": _cond, "while": _while, "call": _call, "custom_gradient": _custom,
              "tape_in_defun": _tape}


def _program(construct, s, assign_after):
    f, c, runs = construct(s)

    def program(x):
        y = f(x)
        if assign_after:
            s.v.assign(100.0)               # after the read: the gradient must not see it
        return y
    return program, c, runs


# ---------------------------------------------------------------------------------------
# the ways of taking `order` derivatives of `program` at x
def _nested_tapes(fn, x, order):
    tapes = [df.GradientTape() for _ in range(order)]
    for t in tapes:
        t.__enter__()
        t.watch(x)
    d = fn(x)
    out = []
    for t in reversed(tapes):
        t.__exit__(None, None, None)
        d = t.gradient(d, x)
        out.append(d)
    return out


def _persistent_tape(fn, x, order):
    out = []
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        d = fn(x)
        for _ in range(order):
            d = tape.gradient(d, x)        # recorded: the next one differentiates it
            out.append(d)
    return out


def _eager(program, x, order):
    return _nested_tapes(program, x, order)


def _defun(program, x, order):
    return _nested_tapes(df.defun(program), x, order)


def _remat(program, x, order):
    return _nested_tapes(df.defun(program, rematerialize=True), x, order)


def _inside(program, x, order):
    return list(df.defun(lambda x: _nested_tapes(program, x, order))(x))


def _persistent_inside(program, x, order):
    return list(df.defun(lambda x: _persistent_tape(program, x, order))(x))


def _persistent_eager(program, x, order):
    return _persistent_tape(program, x, order)


def _persistent_outside(program, x, order):
    return _persistent_tape(df.defun(program), x, order)


MODES = {"eager": _eager, "defun": _defun, "rematerialize": _remat, "tapes_in_defun": _inside,
         "persistent_eager": _persistent_eager, "persistent_in_defun": _persistent_inside,
         "persistent_tape": _persistent_outside}


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("state", ["read_then_assign", "assign_in_body"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("construct", list(CONSTRUCTS))
def test_stateful_gradient_table(construct, state, mode, order, capsys):
    s = State(assign_in_body=state == "assign_in_body")
    program, c, runs = _program(CONSTRUCTS[construct], s, assign_after=state == "read_then_assign")
    x = df.constant(X, f64)
    got = MODES[mode](program, x, order)
    want = [3 * c * X ** 2, 6 * c * X, 6 * c][:order]
    assert len(got) == order
    for k, (g, w) in enumerate(zip(got, want)):
        assert g is not None, f"order {k + 1}: no gradient"
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, err_msg=f"order {k + 1}")
    # the variables hold what one forward run leaves, and it printed once per run
    assert float(s.v.numpy()) == (100.0 if state == "read_then_assign" else V0)
    expected_runs = runs if s.assign_in_body else 0
    assert float(s.count.numpy()) == expected_runs
    assert capsys.readouterr().out.count("tick") == expected_runs


# ---------------------------------------------------------------------------------------
# the same programs, exported with their tapes inside and loaded back
@pytest.mark.parametrize("construct", [c for c in CONSTRUCTS if c != "custom_gradient"])
def test_tapes_in_defun_survive_json_export(construct, capsys):
    import json
    s = State(assign_in_body=True)
    program, c, runs = _program(CONSTRUCTS[construct], s, assign_after=False)
    f = df.defun(lambda x: _nested_tapes(program, x, 3))
    x = df.constant(X, f64)
    loaded = df.load_json(json.loads(json.dumps(df.export_json(f.get_concrete_function(x)))))
    got = loaded(np.float64(X))
    np.testing.assert_allclose([float(g) for g in got], [3 * c * X ** 2, 6 * c * X, 6 * c], rtol=1e-12)
    assert loaded.variables["count"] == runs          # the document's own copy, bumped once per run
    assert capsys.readouterr().out.count("tick") == runs


# ---------------------------------------------------------------------------------------
# single behaviours the table relies on
def test_a_tape_in_a_defun_watching_a_captured_tensor_gets_its_gradient():
    c = df.constant(3.0, f64)
    v = df.Variable(2.0, dtype=f64)

    @df.defun
    def f(x):
        with df.GradientTape() as tape:
            tape.watch(c)                   # an outer eager tensor: watched as its capture
            y = c * c * x * v
        return tape.gradient(y, [c, v])

    gc, gv = f(df.constant(5.0, f64))
    assert float(gc) == pytest.approx(2 * 3.0 * 5.0 * 2.0)
    assert float(gv) == pytest.approx(9.0 * 5.0)

    @df.defun
    def outer(x):
        inner_y = x * 2.0

        @df.defun
        def inner(z):
            with df.GradientTape() as tape:
                tape.watch(inner_y)         # a tensor of the enclosing trace
                w = inner_y * inner_y * z
            return tape.gradient(w, inner_y)
        return inner(x)

    assert float(outer(df.constant(1.5, f64))) == pytest.approx(2 * 3.0 * 1.5)


def test_a_persistent_tape_records_its_own_gradient_only_inside_its_block():
    x = df.constant(2.0, f64)
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x * x
        g = tape.gradient(y, x)             # recorded
    assert float(tape.gradient(g, x)) == pytest.approx(12.0)
    h = tape.gradient(y, x)                 # outside the block: not recorded
    assert float(h) == pytest.approx(12.0)
    assert tape.gradient(h, x) is None


def test_custom_gradient_takes_keyword_arguments_and_leaves_them_undifferentiated():
    @df.custom_gradient
    def scaled(x, *, scale, shift=0.0):
        def grad_fn(dy):
            return dy * scale * 10.0        # deliberately not the true gradient
        return x * scale + shift, grad_fn

    x, k = df.constant(2.0, f64), df.constant(3.0, f64)
    for fn in (lambda x: scaled(x, scale=k, shift=1.0), df.defun(lambda x: scaled(x, scale=k, shift=1.0))):
        with df.GradientTape() as tape:
            tape.watch([x, k])
            y = fn(x)
        assert float(y) == pytest.approx(7.0)
        gx, gk = tape.gradient(y, [x, k])
        assert float(gx) == pytest.approx(30.0) and gk is None


def test_custom_gradient_closing_over_a_forward_intermediate_second_order_in_a_defun():
    """The round-one limit: grad_fn reads `y`, a forward tensor of the defun's graph."""
    @df.custom_gradient
    def cube(x):
        y = x * x * x

        def grad_fn(dy):
            return dy * 3.0 * y / x         # 3 x**2 through the forward's y
        return y, grad_fn

    f = df.defun(lambda x: cube(x) * 2.0)
    g1, g2, g3 = _nested_tapes(f, df.constant(1.5, f64), 3)
    np.testing.assert_allclose([float(g1), float(g2), float(g3)], [6 * 1.5 ** 2, 12 * 1.5, 12.0],
                               rtol=1e-12)     # of 2 x**3


def test_a_branch_not_taken_saves_nothing_and_shapes_may_differ():
    """Each branch returns empty stand-ins for the other's side outputs."""
    v = df.Variable(np.array([1.0, 2.0, 3.0]))

    @df.defun
    def f(x, flag):
        def big():
            m = df.reshape(x, (3, 1)) * df.reshape(v, (1, 3))     # a [3, 3] side output
            return df.reduce_sum(df.sin(m), axis=0)
        return df.cond(flag, big, lambda: df.exp(x) * v)

    x = df.constant(np.array([0.1, 0.2, 0.3]))
    for flag in (True, False):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = df.reduce_sum(f(x, df.constant(flag)))
        got = tape.gradient(y, [x, v])
        xv, vv = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0])
        if flag:
            c = np.cos(xv[:, None] * vv[None, :])
            want = [(c * vv[None, :]).sum(1), (c * xv[:, None]).sum(0)]
        else:
            want = [np.exp(xv) * vv, np.exp(xv)]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-12)
    forward = GraphFunction.of(f.get_concrete_function(x, df.constant(True)).graph).backward().forward
    cond, = [n for n in forward.nodes if n.op.name == "cond"]
    saved = [t.shape for t in cond.outputs[1:]]
    assert saved and all(None in s or s == () for s in saved), saved   # stand-ins have no size


def test_a_gather_on_a_variable_in_a_nested_call_still_gives_indexed_slices():
    table = df.Variable(np.arange(8.0).reshape(4, 2))

    @df.defun
    def lookup(ids):
        return df.reduce_sum(df.gather(table, ids) ** 2)

    @df.defun
    def outer(ids):
        return lookup(ids) * 3.0

    [(g, var)] = df.implicit_gradients(outer)(df.constant([0, 3]))
    assert var is table
    np.testing.assert_allclose(np.asarray(df.convert_to_tensor(g)),
                               [[0.0, 6.0], [0.0, 0.0], [0.0, 0.0], [36.0, 42.0]])


def test_hessian_vector_product_through_cond_and_while_in_a_defun():
    v = df.Variable(np.array([0.5, -1.0]))

    def loss(x):
        y = df.cond(df.reduce_sum(x) > 0.0, lambda: df.sin(x) * v, lambda: x)
        _, z = df.while_loop(lambda i, z: i < 2, lambda i, z: (i + 1, z * x), (0, y))
        return df.reduce_sum(z)             # sum(sin(x) v x**2)

    @df.defun
    def hvp(x, t):
        with df.ForwardAccumulator(x, t) as acc:
            with df.GradientTape() as tape:
                tape.watch(x)
                y = loss(x)
            g = tape.gradient(y, x)
        return acc.jvp(g)

    xv, tv, vv = np.array([0.3, 0.8]), np.array([1.0, -2.0]), np.array([0.5, -1.0])
    h = vv * (-np.sin(xv) * xv ** 2 + 4 * np.cos(xv) * xv + 2 * np.sin(xv))
    np.testing.assert_allclose(hvp(df.constant(xv), df.constant(tv)).numpy(), h * tv, rtol=1e-12)


def test_nested_loops_and_branches_to_third_order_agree_everywhere():
    """A cond inside a while inside a while, reading a variable: eager, defun, a
    rematerializing defun and tapes inside a defun give the same three derivatives, and the
    second one matches finite differences of the first."""
    v = df.Variable(np.array([0.7, -0.4]))

    def prog(x):
        def outer_body(i, y):
            def inner_body(j, z):
                z = df.cond(df.reduce_sum(z) > 0.0, lambda: df.sin(z) * v + z, lambda: z * z * 0.5 + v)
                return j + 1, z
            _, y2 = df.while_loop(lambda j, z: j < 2, inner_body, (0, y))
            return i + 1, y2 * x
        _, y = df.while_loop(lambda i, y: i < 3, outer_body, (0, x))
        return df.reduce_sum(y * y)

    def derivatives(fn, x):
        with df.GradientTape() as t3:
            t3.watch(x)
            with df.GradientTape() as t2:
                t2.watch(x)
                with df.GradientTape() as t1:
                    t1.watch(x)
                    y = fn(x)
                g = t1.gradient(y, x)
                sg = df.reduce_sum(g)
            h = t2.gradient(sg, x)
            sh = df.reduce_sum(h)
        return y, g, h, t3.gradient(sh, x)

    x0 = np.array([0.3, 0.5])
    runs = [derivatives(prog, df.constant(x0)), derivatives(df.defun(prog), df.constant(x0)),
            derivatives(df.defun(prog, rematerialize=True), df.constant(x0)),
            df.defun(lambda x: derivatives(prog, x))(df.constant(x0))]
    want = [np.asarray(t) for t in runs[0]]
    for run in runs[1:]:
        for got, w in zip(run, want):
            np.testing.assert_allclose(np.asarray(got), w, rtol=1e-12)
    eps = 1e-6

    def first(xv):
        x = df.constant(xv)
        with df.GradientTape() as tape:
            tape.watch(x)
            y = prog(x)
        return np.asarray(tape.gradient(y, x))
    fd = [(first(x0 + eps * e).sum() - first(x0 - eps * e).sum()) / (2 * eps) for e in np.eye(2)]
    np.testing.assert_allclose(want[2], fd, rtol=1e-6)
