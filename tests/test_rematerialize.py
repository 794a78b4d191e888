"""`df.defun(f, rematerialize=True)`: the backward recomputes what cheap pure ops give.

Its gradients equal the default mode's for every differentiable row of the op table (and
the stateful table in test_stateful_gradients.py runs a rematerializing defun too); it
saves only inputs and what cheap pure ops cannot recompute, and never recomputes a
stateful op, a variable read or a call.
"""
import numpy as np
import pytest

import defun as df
from defun.graph_function import GraphFunction
from defun.runtime import tape as tape_mod
from opcheck import make_inputs, random_cotangents, tape_vjp
from op_table import float_inputs, graph_rows, op_cases

f64 = df.float64


def _grads(fn, xs, wrt, ws):
    return tape_vjp(fn, xs, ws, wrt)


@pytest.mark.parametrize("row,v", op_cases(lambda r, v: graph_rows(r, v) and r.grad is True and v.grad
                                            and float_inputs(v)))
def test_rematerialized_gradient_equals_the_default_mode(row, v):
    xs = make_inputs(v.args, f64)
    wrt = float_inputs(v)
    fn = lambda *a: row.fn(*a, **v.kw)   # noqa: E731
    ws = random_cotangents(fn, xs)
    default = _grads(df.defun(fn), xs, wrt, ws)
    remat = _grads(df.defun(fn, rematerialize=True), xs, wrt, ws)
    for k, (r, d) in enumerate(zip(remat, default)):
        np.testing.assert_allclose(r, d, rtol=1e-12, atol=1e-12, err_msg=f"{row.op}{v!r} input {wrt[k]}")


def _chain(x):
    for _ in range(20):
        x = df.tanh(x) * 1.01 + 0.1
    return df.reduce_sum(x)


def _backwards(fn, *args):
    cf = fn.get_concrete_function(*args)
    return cf._fn.backward(), GraphFunction.of(cf.graph).backward()


def test_an_elementwise_chain_saves_nothing_but_its_input():
    x = df.constant(np.linspace(-1.0, 1.0, 16))
    remat, default = _backwards(df.defun(_chain, rematerialize=True), x)
    assert len(default.side_outputs) == 20          # every tanh result
    assert remat.side_outputs == [] and remat.capture_sources == [("input", 0)]
    [g] = df.gradients_function(df.defun(_chain, rematerialize=True))(x)
    [want] = df.gradients_function(_chain)(x)
    np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-12)


def test_matmuls_and_variable_reads_are_saved_not_recomputed():
    w = df.Variable(np.ones((3, 3)) * 0.1, name="w")

    def layer(x):
        h = df.tanh(x @ w)          # matmul of a variable read: saved; tanh: recomputed
        w.assign(np.zeros((3, 3)))  # assigned after the read: the read's value is what counts
        return df.reduce_sum(df.sin(h) * h)

    x = df.constant(np.arange(6.0).reshape(2, 3) / 6.0)
    remat, default = _backwards(df.defun(layer, rematerialize=True), x)
    assert sorted(t.node.op.name for t in remat.side_outputs) == ["matmul", "read_variable"]
    recomputed = [n.op.name for n in remat.graph.nodes if n.op.name not in ("placeholder", "const", "call")]
    assert recomputed == ["tanh", "sin"]            # only cheap pure ops run again
    assert {t.node.op.name for t in default.side_outputs} >= {"tanh", "sin"}
    results = []
    for remat_flag in (False, True):
        w.assign(np.ones((3, 3)) * 0.1)
        f = df.defun(layer, rematerialize=remat_flag)
        with df.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        results.append(tape.gradient(y, [x, w]))
        np.testing.assert_array_equal(w.numpy(), np.zeros((3, 3)))   # one assignment, no replay
    for a, b in zip(*results):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def test_many_calls_under_one_tape_keep_only_their_inputs():
    """The case rematerialization is for: forward results held until one backward."""
    f_default, f_remat = df.defun(_chain), df.defun(_chain, rematerialize=True)
    xs = [df.constant(np.full(8, k / 10.0)) for k in range(5)]
    for f in (f_default, f_remat):
        with df.GradientTape() as tape:
            tape.watch(xs)
            total = df.add_n([f(x) for x in xs])
        saved = sum(len(tape_mod.output_ids(e)) - 1 for e in tape._tape.entries if e[0].startswith("_chain"))
        grads = tape.gradient(total, xs)
        assert saved == (100 if f is f_default else 0)
        for x, g in zip(xs, grads):
            [want] = df.gradients_function(_chain)(x)
            np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-12)


def test_rematerialize_is_off_by_default_and_kept_per_function():
    assert df.defun(_chain).rematerialize is False
    f = df.defun(rematerialize=True)(_chain)
    assert f.rematerialize is True
    x = df.constant(np.zeros(2))
    assert f.get_concrete_function(x)._fn.rematerialize is True
