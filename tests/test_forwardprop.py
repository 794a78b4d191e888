"""df.ForwardAccumulator: forward mode derived from each op's registered gradient.

Checked on every differentiable row of the op table (tests/test_ops.py ROWS, float64):
the JVP equals central finite differences of the op in the tangent's direction, and equals
reverse mode through the identity <w, J t> = <J^T w, t>; traced inside a defun it equals the
eager JVP. Then composed programs (an MLP), defun calls as one op, control flow, variables,
nesting with GradientTape (Hessian-vector products against the dense Hessian) and with
another accumulator, and the errors.
"""
import numpy as np
import pytest

import defun as df
from defun_helpers import nested_gradients
from opcheck import as_list, as_numpy, configuration, make_inputs, recording
from op_table import ROWS, float_inputs

f64 = df.float64


def _rows():
    return [pytest.param(row, v, id=f"{row.op}-{k}") for row in ROWS for k, v in enumerate(row.variants)
            if row.grad is True and v.grad and float_inputs(v)]


def _float_outputs(outs):
    return [k for k, o in enumerate(outs) if o.dtype.is_floating]


def _tangents(xs, wrt, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=xs[i].shape) for i in wrt]


def _accumulated(fn, xs, wrt, tangents):
    ts = [df.constant(x) for x in xs]
    with df.ForwardAccumulator([ts[i] for i in wrt], [df.constant(t) for t in tangents]) as acc:
        outs = as_list(fn(*ts))
    return outs, [as_numpy(j) for j in acc.jvp(outs, unconnected_gradients="zero")]


def _finite_difference_jvp(fn, xs, wrt, tangents, eps=1e-6):
    def at(sign):
        args = [x.copy() for x in xs]
        for i, t in zip(wrt, tangents):
            args[i] = args[i] + sign * eps * t
        return [as_numpy(o) for o in as_list(fn(*[df.constant(a) for a in args]))]
    hi, lo = at(1), at(-1)
    with np.errstate(invalid="ignore"):     # inf - inf where an output is not finite
        return [(h - l) / (2 * eps) for h, l in zip(hi, lo)]


@pytest.mark.parametrize("row,v", _rows())
def test_jvp_matches_finite_differences_reverse_mode_and_traced(row, v):
    """One item per row variant (each item costs CI time): the eager JVP against finite
    differences and reverse mode, then the traced JVP against the eager one."""
    fn = lambda *ts: row.fn(*ts, **v.kw)  # noqa: E731
    xs = make_inputs(v.args, f64)
    wrt = float_inputs(v)
    tangents = _tangents(xs, wrt)
    outs, jvps = _accumulated(fn, xs, wrt, tangents)
    with configuration(f"{row.op}{v!r} eagerly"):
        _jvp_matches_finite_differences_and_reverse_mode(row, v, fn, xs, wrt, tangents, outs, jvps)
    with configuration(f"{row.op}{v!r} in a defun"):
        _jvp_traced_matches_eager(row, v, fn, xs, wrt, tangents, outs, jvps)


def _jvp_matches_finite_differences_and_reverse_mode(row, v, fn, xs, wrt, tangents, outs, jvps):
    floats = _float_outputs(outs)
    if not floats:   # e.g. a cast to int32: no tangent at all
        assert all(not np.any(j) for j in jvps), f"{row.op}: an integer output got a tangent"
        return
    numeric = _finite_difference_jvp(fn, xs, wrt, tangents)
    for k in floats:
        assert jvps[k].shape == tuple(outs[k].shape), f"{row.op}: jvp {k} has shape {jvps[k].shape}"
        # where the output itself is not finite (logsumexp of nothing is -inf) differences say nothing
        finite = np.isfinite(as_numpy(outs[k]))
        np.testing.assert_allclose(jvps[k][finite], numeric[k][finite], rtol=1e-5, atol=1e-6,
                                   err_msg=f"{row.op}{v!r}: jvp of output {k} vs finite differences")
    # reverse mode: <w, J t> == sum_i <J_i^T w, t_i> for a random cotangent w
    rng = np.random.default_rng(5)
    ws = [rng.normal(size=tuple(outs[k].shape)) for k in floats]
    ts = [df.constant(x) for x in xs]
    with df.GradientTape() as tape:
        for i in wrt:
            tape.watch(ts[i])
        again = as_list(fn(*ts))
    vjps = tape.gradient([again[k] for k in floats], [ts[i] for i in wrt],
                         output_gradients=[df.constant(w) for w in ws])
    forward = sum(float(np.sum(w * jvps[k])) for w, k in zip(ws, floats))
    reverse = sum(float(np.sum(as_numpy(g) * t)) for g, t in zip(vjps, tangents) if g is not None)
    np.testing.assert_allclose(forward, reverse, rtol=1e-9, atol=1e-9,
                               err_msg=f"{row.op}{v!r}: <w, J t> vs <J^T w, t>")


def _jvp_traced_matches_eager(row, v, fn, xs, wrt, tangents, outs, eager):
    """The accumulator inside a defun builds the same JVP as nodes of the graph."""
    @df.defun
    def traced(args, tans):
        with df.ForwardAccumulator([args[i] for i in wrt], tans) as acc:
            out = as_list(fn(*args))
        return acc.jvp(out, unconnected_gradients="zero")
    graph = traced([df.constant(x) for x in xs], [df.constant(t) for t in tangents])
    for k in _float_outputs(outs):
        np.testing.assert_allclose(as_numpy(graph[k]), eager[k], rtol=1e-12, atol=1e-12,
                                   err_msg=f"{row.op}{v!r}: traced jvp of output {k} vs eager")


# ---------------------------------------------------------------------------------------
# Composed programs

def _mlp_params(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(4, 5)) * 0.5, rng.normal(size=5) * 0.1, rng.normal(size=(5, 3)) * 0.5,
            rng.normal(size=3) * 0.1]


def _mlp_loss(x, labels, w1, b1, w2, b2):
    h = df.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    return df.reduce_mean(df.sparse_softmax_cross_entropy_with_logits(labels, logits))


def _mlp_data():
    rng = np.random.default_rng(1)
    return rng.normal(size=(6, 4)), rng.integers(0, 3, size=6).astype(np.int32)


def test_mlp_jvp_matches_finite_differences_and_the_gradient():
    params = _mlp_params()
    x, labels = _mlp_data()
    tangents = _tangents(params, range(4), seed=7)
    ps = [df.constant(p) for p in params]
    with df.ForwardAccumulator(ps, [df.constant(t) for t in tangents]) as acc:
        loss = _mlp_loss(x, labels, *ps)
    jvp = float(acc.jvp(loss))
    eps = 1e-6
    hi = float(_mlp_loss(x, labels, *[p + eps * t for p, t in zip(params, tangents)]))
    lo = float(_mlp_loss(x, labels, *[p - eps * t for p, t in zip(params, tangents)]))
    np.testing.assert_allclose(jvp, (hi - lo) / (2 * eps), rtol=1e-6)
    grads = df.gradients_function(lambda *p: _mlp_loss(x, labels, *p))(*params)
    np.testing.assert_allclose(jvp, sum(float(np.sum(g.numpy() * t)) for g, t in zip(grads, tangents)),
                               rtol=1e-10)


def test_mlp_on_variables_eager_and_in_a_defun_step():
    params = _mlp_params()
    x, labels = _mlp_data()
    vs = [df.Variable(p, name=f"p{k}") for k, p in enumerate(params)]
    tangents = [df.constant(t) for t in _tangents(params, range(4), seed=8)]
    with df.ForwardAccumulator(vs, tangents) as acc:
        loss = _mlp_loss(x, labels, *vs)
    eager = float(acc.jvp(loss))

    @df.defun
    def step(x, labels):
        with df.ForwardAccumulator(vs, tangents) as acc:
            loss = _mlp_loss(x, labels, *vs)
        return loss, acc.jvp(loss)
    loss_g, jvp_g = step(df.constant(x), df.constant(labels))
    np.testing.assert_allclose(float(jvp_g), eager, rtol=1e-12)
    np.testing.assert_allclose(float(loss_g), float(loss), rtol=1e-12)
    grads = df.gradients_function(lambda *p: _mlp_loss(x, labels, *p))(*params)
    np.testing.assert_allclose(eager, sum(float(np.sum(g.numpy() * t.numpy()))
                                          for g, t in zip(grads, tangents)), rtol=1e-10)


def _f(x):
    return df.reduce_sum(df.sin(x) * x) + df.reduce_prod(x) * 0.5


def _grad_f(x):          # d/dx of _f
    return np.cos(x) * x + np.sin(x) + 0.5 * np.array([np.prod(np.delete(x, i)) for i in range(len(x))])


def _hessian_f(x):
    n = len(x)
    h = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i == j:
                h[i, i] = -np.sin(x[i]) * x[i] + 2 * np.cos(x[i])
            else:
                h[i, j] = 0.5 * np.prod(np.delete(x, [i, j]))
    return h


X = np.array([0.3, -1.2, 0.8, 1.5])
V1 = np.array([1.0, -0.5, 0.25, 2.0])
V2 = np.array([-0.3, 0.7, 1.1, 0.2])


def test_hessian_vector_product_forward_over_reverse_equals_the_dense_hessian():
    x = df.constant(X)
    with df.ForwardAccumulator(x, df.constant(V1)) as acc:
        with df.GradientTape() as tape:
            tape.watch(x)
            y = _f(x)
        g = tape.gradient(y, x)
    np.testing.assert_allclose(g.numpy(), _grad_f(X), rtol=1e-12)
    hvp = acc.jvp(g).numpy()
    np.testing.assert_allclose(hvp, _hessian_f(X) @ V1, rtol=1e-10)
    # and against the jacobian of the gradient (reverse over reverse)
    np.testing.assert_allclose(nested_gradients(_f, x, jacobian=True)[1].numpy() @ V1, hvp, rtol=1e-10)


def _smooth(x):       # no reduce_prod: its derivatives stop at the second order, and a graph's
    return df.reduce_sum(df.sin(x) * x) + df.reduce_sum(x * x * x) * 0.5   # backward needs a third


def _hessian_smooth(x):
    return np.diag(-np.sin(x) * x + 2 * np.cos(x) + 3 * x)


def test_hessian_vector_product_in_a_defun_and_through_a_defun_call():
    f = df.defun(_smooth)

    @df.defun
    def hvp(x, v):
        with df.ForwardAccumulator(x, v) as acc:
            with df.GradientTape() as tape:
                tape.watch(x)
                y = f(x)        # a nested call: one call node
            g = tape.gradient(y, x)
        return acc.jvp(g)
    np.testing.assert_allclose(hvp(df.constant(X), df.constant(V1)).numpy(), _hessian_smooth(X) @ V1,
                               rtol=1e-10)
    # eagerly, the tape records the defun call as one op and the accumulator sees its gradient
    x = df.constant(X)
    with df.ForwardAccumulator(x, df.constant(V2)) as acc:
        with df.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        g = tape.gradient(y, x)
    np.testing.assert_allclose(acc.jvp(g).numpy(), _hessian_smooth(X) @ V2, rtol=1e-10)


def test_reverse_over_forward():
    x = df.constant(X)
    with df.GradientTape() as tape:
        tape.watch(x)
        with df.ForwardAccumulator(x, df.constant(V1)) as acc:
            y = _f(x)
        jvp = acc.jvp(y)
    np.testing.assert_allclose(float(jvp), _grad_f(X) @ V1, rtol=1e-12)
    np.testing.assert_allclose(tape.gradient(jvp, x).numpy(), _hessian_f(X) @ V1, rtol=1e-10)


def test_forward_over_forward():
    x = df.constant(X)
    with df.ForwardAccumulator(x, df.constant(V1)) as outer:
        with df.ForwardAccumulator(x, df.constant(V2)) as inner:
            y = _f(x)
        j2 = inner.jvp(y)
    np.testing.assert_allclose(float(j2), _grad_f(X) @ V2, rtol=1e-12)
    np.testing.assert_allclose(float(outer.jvp(j2)), V1 @ _hessian_f(X) @ V2, rtol=1e-10)
    assert float(outer.jvp(y)) == pytest.approx(_grad_f(X) @ V1, rel=1e-12)


def test_a_defun_call_is_one_op_under_the_accumulator():
    f = df.defun(lambda x: df.sin(x) * x)
    x = df.constant(X)
    f(x)   # traced before: the call below runs graphs only
    with recording() as calls:
        with df.ForwardAccumulator(x, df.constant(V1)) as acc:
            y = f(x)
    assert "sin" not in {c.op for c in calls}, "the call ran its ops eagerly"
    np.testing.assert_allclose(acc.jvp(y).numpy(), (np.cos(X) * X + np.sin(X)) * V1, rtol=1e-12)
    assert f.trace_count == 1


def test_control_flow_in_a_defun():
    @df.defun
    def fn(x, v):
        with df.ForwardAccumulator(x, v) as acc:
            y = df.cond(df.reduce_sum(x) > 0.0, lambda: df.exp(x), lambda: x * x)
            _, z = df.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, df.sin(z) * 1.5), (0, y))
        return acc.jvp(z)

    def reference(x, v):
        y, dy = (np.exp(x), np.exp(x) * v) if x.sum() > 0 else (x * x, 2 * x * v)
        for _ in range(3):
            y, dy = np.sin(y) * 1.5, np.cos(y) * 1.5 * dy
        return dy
    for xv in (X, -X):
        np.testing.assert_allclose(fn(df.constant(xv), df.constant(V1)).numpy(), reference(xv, V1), rtol=1e-12)


def test_variable_primals_and_captured_variables():
    v = df.Variable(X, name="v")
    f = df.defun(lambda: df.reduce_sum(v * v))
    with df.ForwardAccumulator(v, df.constant(V1)) as acc:
        y = v * 3.0
        z = f()                                  # the call reads v through its captured handle
    np.testing.assert_allclose(acc.jvp(y).numpy(), 3 * V1)
    np.testing.assert_allclose(float(acc.jvp(z)), 2 * X @ V1, rtol=1e-12)
    np.testing.assert_allclose(acc.jvp(v).numpy(), V1)


def test_unconnected_and_after_the_block():
    x, c = df.constant(X), df.constant(V2)
    with df.ForwardAccumulator(x, df.constant(V1)) as acc:
        y = c * 2.0
        z = x + 1.0
    after = z * 2.0        # outside the block: not recorded
    assert acc.jvp(y) is None and acc.jvp(after) is None
    np.testing.assert_array_equal(acc.jvp(y, unconnected_gradients="zero").numpy(), np.zeros(4))
    np.testing.assert_array_equal(acc.jvp(x).numpy(), V1)
    assert [None if t is None else t.numpy().tolist() for t in acc.jvp({"a": z, "b": [y]})["b"]] == [None]
    np.testing.assert_array_equal(acc.jvp({"a": z})["a"].numpy(), V1)
    # integer results have no tangent
    with df.ForwardAccumulator(x, df.constant(V1)) as acc:
        i = df.cast(x, df.int32)
    assert acc.jvp(i) is None


def test_errors():
    x = df.constant(X)
    with pytest.raises(ValueError, match="2 primals but 1 tangents"):
        df.ForwardAccumulator([x, x * 2.0], [x])
    with pytest.raises(df.errors.InvalidArgumentError, match="primal 0 is int32; forward-mode"):
        df.ForwardAccumulator(df.constant([1, 2]), df.constant([1, 1]))
    with pytest.raises(df.errors.InvalidArgumentError, match=r"tangent of primal 0 has shape \[3\], the primal \[4\]"):
        df.ForwardAccumulator(x, df.constant(np.ones(3)))
    with pytest.raises(df.errors.InvalidArgumentError, match="tangent of primal 0 is float32, the primal is float64"):
        df.ForwardAccumulator(x, df.constant(np.ones(4, np.float32)))
    with pytest.raises(ValueError, match="given twice"):
        df.ForwardAccumulator([x, x], [V1, V2])
    with pytest.raises(TypeError, match="must be a tensor or a variable"):
        df.ForwardAccumulator(X, V1)
    acc = df.ForwardAccumulator(x, V1)          # a Python/numpy tangent takes the primal's dtype
    with pytest.raises(ValueError, match="unconnected_gradients must be"):
        acc.jvp(x, unconnected_gradients="zeros")
    with acc:
        with pytest.raises(RuntimeError, match="already recording"):
            acc.__enter__()
