"""Shape arguments computed when the graph runs: with None sizes in the input signature,
`reshape`, `fill`, `zeros`, `ones`, `broadcast_to`, `tile` and `range` take `df.shape(x)` /
`df.size(x)` results. Each function is checked eager == traced == JSON-loaded, for inputs of
two different sizes through one trace, the static shapes keep what the trace knows, and the
gradients through reshape, broadcast_to and tile match the eager ones (and finite
differences).
"""
import json

import numpy as np
import pytest

import defun as df
from opcheck import check_gradient
from defun_helpers import nested_gradients

IAE = df.errors.InvalidArgumentError
rng = np.random.default_rng(0)


def _x(*shape):
    return rng.normal(size=shape).astype(np.float32)


# (name, function of x, input signature shape, the static output shape traced, x shapes to run)
CASES = [
    ("reshape_to_shape", lambda x: df.reshape(df.transpose(x), df.shape(x)), (None, 3), (None, 3), [(2, 3), (5, 3)]),
    ("reshape_flat_size", lambda x: df.reshape(x, [df.size(x)]), (None, 3), (None,), [(2, 3), (4, 3)]),
    ("reshape_mixed_minus_one", lambda x: df.reshape(x, [df.shape(x)[0], -1, 1]), (None, 2, 3), (None, None, 1),
     [(2, 2, 3), (3, 2, 3)]),
    ("reshape_swapped", lambda x: df.reshape(x, df.shape(x)[::-1]), (None, 4), (4, None), [(2, 4), (3, 4)]),
    ("zeros", lambda x: df.zeros(df.shape(x)) + x, (None, 3), (None, 3), [(2, 3), (1, 3)]),
    ("ones_int", lambda x: df.ones([df.shape(x)[0], 2], df.int32), (None, 3), (None, 2), [(2, 3), (4, 3)]),
    ("fill", lambda x: df.fill(df.shape(x), 2.5), (None, None), (None, None), [(2, 3), (3, 1)]),
    ("fill_tensor_value", lambda x: df.fill([df.size(x)], df.reduce_sum(x)), (None,), (None,), [(3,), (5,)]),
    ("broadcast_to", lambda x: df.broadcast_to(df.reduce_sum(x, 0), df.shape(x)), (None, 3), (None, 3),
     [(2, 3), (4, 3)]),
    ("broadcast_to_new_axis", lambda x: df.broadcast_to(x, [2, df.shape(x)[0]]), (None,), (2, None), [(3,), (1,)]),
    ("tile", lambda x: df.tile(x, [df.shape(x)[0], 1]), (None, 2), (None, 2), [(2, 2), (3, 2)]),
    ("tile_by_shape", lambda x: df.tile(x, df.shape(x)), (None,), (None,), [(2,), (3,)]),
    ("range_size", lambda x: df.range(df.size(x)), (None,), (None,), [(4,), (0,)]),
    ("range_float", lambda x: df.range(0.0, df.cast(df.size(x), df.float32), 0.5), (None,), (None,), [(2,), (3,)]),
    ("range_start_delta", lambda x: df.range(df.size(x), 0, -2), (None, 2), (None,), [(3, 2), (1, 2)]),
    ("random", lambda x: df.random.normal(df.shape(x), (1, 2)), (None, 3), (None, 3), [(2, 3)]),
]


def _numpy_of(f, x):
    return np.asarray(f(df.constant(x)))


@pytest.mark.parametrize("name,f,sig,static,shapes", CASES, ids=[c[0] for c in CASES])
def test_eager_traced_and_loaded_agree(name, f, sig, static, shapes):
    traced = df.defun(f, input_signature=[df.TensorSpec(sig)])
    cf = traced.get_concrete_function()
    assert tuple(cf.graph.outputs[0].shape) == static
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    for shape in shapes:
        x = _x(*shape)
        eager = _numpy_of(f, x)
        for got in (np.asarray(traced(x)), np.asarray(loaded(x)[0] if isinstance(loaded(x), list) else loaded(x))):
            assert got.shape == eager.shape and got.dtype == eager.dtype
            np.testing.assert_allclose(got, eager, rtol=1e-6)
    assert traced.trace_count == 1


def test_a_known_shape_keeps_the_static_ops():
    cf = df.defun(lambda x: df.reshape(x, df.shape(x)[::-1])).get_concrete_function(df.TensorSpec([2, 3]))
    assert {n.op.name for n in cf.graph.nodes} >= {"reshape"}
    assert not any(n.op.name.startswith("dynamic_") for n in cf.graph.nodes)
    assert tuple(cf.graph.outputs[0].shape) == (3, 2)


@pytest.mark.parametrize("which", ["reshape", "broadcast_to", "tile"])
def test_gradients_through_run_time_shapes(which):
    fns = {
        "reshape": lambda x: df.reshape(x, [df.shape(x)[0] * 3]) * df.range(1.0, 7.0, 1.0, df.float64),
        "broadcast_to": lambda x: df.broadcast_to(x, [3, df.shape(x)[0], 2]) * df.reshape(
            df.range(12.0, dtype=df.float64), [3, 2, 2]),
        "tile": lambda x: df.tile(x, [df.shape(x)[0], 2]) ** 2.0,
    }
    f = fns[which]
    sig = {"reshape": [None, 3], "broadcast_to": [None, 2], "tile": [None, 2]}[which]
    x = np.arange(1.0, 7.0).reshape(2, 3)[:, :sig[1]]

    def grad_of(fn):
        def g(t):
            with df.GradientTape() as tape:
                tape.watch(t)
                y = df.reduce_sum(fn(t))
            return tape.gradient(y, t)
        return g
    eager = grad_of(f)(df.constant(x)).numpy()
    traced = df.defun(grad_of(f), input_signature=[df.TensorSpec(sig, df.float64)])
    np.testing.assert_allclose(traced(x).numpy(), eager, rtol=1e-12)
    # the forward as a graph with unknown sizes, differentiated from outside
    g = df.defun(f, input_signature=[df.TensorSpec(sig, df.float64)])
    t = df.constant(x)
    with df.GradientTape() as tape:
        tape.watch(t)
        y = df.reduce_sum(g(t))
    np.testing.assert_allclose(tape.gradient(y, t).numpy(), eager, rtol=1e-12)
    check_gradient(f, [x], [0])


def test_second_order_through_a_run_time_reshape():
    @df.defun(input_signature=[df.TensorSpec([None, 2], df.float64)])
    def hessian_diag(x):
        return nested_gradients(lambda t: df.reduce_sum(df.reshape(t, [df.size(t)]) ** 3.0), x)[1]

    x = np.array([[1.0, 2.0], [3.0, -1.0]])
    np.testing.assert_allclose(hessian_diag(x).numpy(), 6.0 * x)


def test_a_run_time_shape_that_does_not_fit_fails_when_the_graph_runs():
    f = df.defun(lambda x, s: df.reshape(x, s),
                 input_signature=[df.TensorSpec([None]), df.TensorSpec([2], df.int32)])
    np.testing.assert_array_equal(f(np.arange(6.0, dtype=np.float32), np.array([2, 3], np.int32)).numpy(),
                                  np.arange(6.0).reshape(2, 3))
    with pytest.raises(IAE, match=r"reshape: cannot reshape \(5,\) \(5 elements\) into \[2, 3\]"):
        f(np.arange(5.0, dtype=np.float32), np.array([2, 3], np.int32))
    g = df.defun(lambda x, s: df.zeros(s), input_signature=[df.TensorSpec([None]), df.TensorSpec([2], df.int32)])
    with pytest.raises(IAE, match=r"fill: negative size in dims \[2, -1\]"):
        g(np.zeros(1, np.float32), np.array([2, -1], np.int32))


def test_shape_tensors_of_the_wrong_kind_are_refused_while_tracing():
    with pytest.raises(TypeError, match=r"reshape: shape must be a 1-D int32 or int64 tensor, got a float32"):
        df.defun(lambda x: df.reshape(x, df.cast(df.shape(x), df.float32)),
                 input_signature=[df.TensorSpec([None])]).get_concrete_function()
    with pytest.raises(IAE, match=r"zeros: shape must have a length known while tracing"):
        df.defun(lambda s: df.zeros(s), input_signature=[df.TensorSpec([None], df.int32)]).get_concrete_function()
    with pytest.raises(IAE, match=r"reshape: shape \[-1, -1, \?\] has more than one -1"):
        df.defun(lambda x: df.reshape(x, [-1, -1, df.size(x)]),
                 input_signature=[df.TensorSpec([None])]).get_concrete_function()


def test_static_sizes_known_through_slices_stacks_and_casts():
    @df.defun(input_signature=[df.TensorSpec([None, 3, 4])])
    def f(x):
        s = df.shape(x)
        return (df.zeros(s[1:]), df.zeros([s[2], s[0]]), df.zeros(df.cast(s, df.int64)),
                df.zeros(df.concat([s[:1], [5]], 0)))

    outs = f.get_concrete_function().graph.outputs
    assert [tuple(o.shape) for o in outs] == [(3, 4), (4, None), (None, 3, 4), (None, 5)]
    a, b, c, d = f(np.zeros((2, 3, 4), np.float32))
    assert (a.shape, b.shape, c.shape, d.shape) == ((3, 4), (4, 2), (2, 3, 4), (2, 5))
