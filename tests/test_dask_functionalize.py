"""graph.functionalize.replay_reading: a graph replayed with variable handles given as values.

This is how df.dask makes the pure step it ships (no dask needed here).
"""
import numpy as np
import pytest

import defun as df
from defun.graph.functionalize import replay_reading
from defun.graph.verify import functions_of


def all_nodes(graph, seen=None):
    seen = set() if seen is None else seen
    if id(graph) in seen:
        return
    seen.add(id(graph))
    for node in graph.nodes:
        yield node
        for g in functions_of(node):
            yield from all_nodes(g, seen)


def pure_version(cf, variables):
    """A defun of (arguments..., variable values...) replaying cf with the reads replaced."""
    graph = cf.graph
    position = {v.handle._id: k for k, v in enumerate(variables)}
    n = len(graph.inputs)

    def pure(*args):
        values = args[n:]
        return replay_reading(graph, list(args[:n]) + [values[position[c._id]] if c._id in position else c
                                                        for c in graph.captured_values])
    specs = [df.TensorSpec(t.shape, t.dtype) for t in graph.inputs] + \
            [df.TensorSpec(v.shape, v.dtype) for v in variables]
    return df.defun(pure).get_concrete_function(*specs)


def test_reads_through_calls_conds_and_loops_become_value_inputs():
    w = df.Variable(np.array([[0.5, -1.0], [2.0, 0.25]], np.float32), name="w")
    b = df.Variable(np.array([0.1, -0.2], np.float32), name="b")

    @df.defun
    def inner(x):
        return df.tanh(x @ w)

    @df.defun
    def f(x):
        h = inner(x) + b
        h = df.cond(df.reduce_sum(b) < 0, lambda: h * b, lambda: h - b)
        _, h = df.while_loop(lambda i, h: i < 2, lambda i, h: (i + 1, h * w[0]), (0, h))
        return h

    cf = f.get_concrete_function(df.TensorSpec([None, 2], df.float32))
    assert any(n.op.name == "read_variable" for n in all_nodes(cf.graph))
    pure = pure_version(cf, [w, b])
    ops = [n.op.name for n in all_nodes(pure.graph)]
    assert "read_variable" not in ops and "call" not in ops and "stateful_call" not in ops   # inlined
    assert "cond" in ops and "while" in ops                  # no longer stateful: nothing reads state
    assert "stateful_cond" not in ops and "stateful_while" not in ops
    assert all(t.dtype is not df.resource for t in pure.graph.all_inputs)

    x = np.array([[1.0, 2.0], [-0.5, 0.3], [0.0, 1.0]], np.float32)
    expected = f(x).numpy()
    new_w, new_b = np.full((2, 2), 0.3, np.float32), np.array([-0.4, 0.2], np.float32)
    np.testing.assert_allclose(pure(x, w.numpy(), b.numpy())[0].numpy(), expected, rtol=1e-6)
    # the values are arguments now: other values give f's result for those variables
    w.assign(new_w)
    b.assign(new_b)
    np.testing.assert_allclose(pure(x, new_w, new_b)[0].numpy(), f(x).numpy(), rtol=1e-6)


def test_an_assignment_to_a_value_is_refused():
    v = df.Variable(np.zeros(2, np.float32), name="v")

    @df.defun
    def bump(x):
        v.assign_add(x)
        return v.read_value() * 2.0

    cf = bump.get_concrete_function(df.TensorSpec([2], df.float32))
    with pytest.raises(df.errors.InvalidArgumentError, match="assign_add_variable writes a variable .* cannot assign"):
        pure_version(cf, [v])


def test_unlisted_variables_stay_handles():
    w = df.Variable(np.ones(2, np.float32), name="w")
    kept = df.Variable(np.full(2, 3.0, np.float32), name="kept")

    @df.defun
    def f(x):
        return x * w + kept

    cf = f.get_concrete_function(df.TensorSpec([2], df.float32))
    pure = pure_version(cf, [w])
    ops = [n.op.name for n in pure.graph.nodes]
    assert ops.count("read_variable") == 1          # kept is still read from its handle
    np.testing.assert_allclose(pure(np.ones(2, np.float32), np.full(2, 2.0, np.float32))[0].numpy(), [5.0, 5.0])
