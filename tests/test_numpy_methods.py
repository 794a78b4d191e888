"""numpy-style tensor methods (`t.T`, `t.reshape`, `t.sum`, `t.mean`, `t.max`, `t.astype`,
`t.size`, `t.flatten`, `t.squeeze`): numpy's results, gradients, traced as df ops, on
variables; plus the argument checks of the numeric-breadth array functions (their values
and gradients are in the op table, tests/op_rows_numeric.py)."""
import numpy as np
import pytest

import defun as df
from opcheck import as_numpy, assert_same, check_gradient, recording

IAE = df.errors.InvalidArgumentError
rng = np.random.default_rng(3)
X = rng.normal(size=(2, 3, 4))

# (method call on a tensor, the same on a numpy array): numpy is the reference
CALLS = [
    ("T", lambda t: t.T),
    ("reshape_ints", lambda t: t.reshape(4, 6)),
    ("reshape_tuple", lambda t: t.reshape((6, -1))),
    ("reshape_list", lambda t: t.reshape([24])),
    ("reshape_one_int", lambda t: t.reshape(-1)),
    ("flatten", lambda t: t.flatten()),
    ("sum", lambda t: t.sum()),
    ("sum_axis", lambda t: t.sum(1)),
    ("sum_axes_keepdims", lambda t: t.sum(axis=(0, 2), keepdims=True)),
    ("mean", lambda t: t.mean()),
    ("mean_axis", lambda t: t.mean(axis=-1)),
    ("max", lambda t: t.max()),
    ("max_axis_keepdims", lambda t: t.max(axis=0, keepdims=True)),
    ("squeeze", lambda t: t[:1, :, 2:3].squeeze()),
    ("squeeze_axis", lambda t: t[:1].squeeze(0)),
    ("chain", lambda t: (t.T.reshape(4, 6) * 2.0).sum(axis=0).max()),
]


@pytest.mark.parametrize("call", [pytest.param(c, id=c[0]) for c in CALLS])
def test_methods_match_numpy(call):
    _, f = call
    assert_same(f(df.constant(X)), np.asarray(f(X)))
    assert_same(f(df.constant(X.astype(np.float32))), np.asarray(f(X.astype(np.float32))))


@pytest.mark.parametrize("call", [pytest.param(c, id=c[0]) for c in CALLS])
def test_methods_are_differentiable(call):
    _, f = call
    check_gradient(f, [X], [0])


@pytest.mark.parametrize("call", [pytest.param(c, id=c[0]) for c in CALLS])
def test_methods_trace_to_df_ops(call):
    _, f = call
    eager = as_numpy(f(df.constant(X)))
    for shape in (X.shape, (None, None, None)):
        traced = df.defun(f, input_signature=[df.TensorSpec(shape, df.float64)])
        if call[0] == "squeeze" and None in shape:   # squeeze(axis=None) needs known sizes
            with pytest.raises(IAE, match="squeeze: axis=None .* unknown"):
                traced(X)
            continue
        np.testing.assert_array_equal(as_numpy(traced(X)), eager)
    ops = {n.op.name for n in df.defun(f).get_concrete_function(df.constant(X)).graph.nodes}
    assert ops & {"transpose", "reshape", "reduce_sum", "reduce_mean", "reduce_max", "squeeze"}


def test_methods_run_the_ops_of_the_same_meaning():
    t = df.constant(X)
    with recording() as calls:
        t.T, t.reshape(24), t.sum(), t.mean(), t.max(), t.astype(df.float32), t.flatten(), t[:1].squeeze()
    assert [c.op for c in calls] == ["transpose", "reshape", "reduce_sum", "reduce_mean", "reduce_max",
                                     "cast", "reshape", "strided_slice", "squeeze"]


def test_astype_and_dtype_arguments():
    t = df.constant(X.astype(np.float32))
    assert t.astype(df.float64).dtype is df.float64
    assert t.astype("int32").dtype is df.int32
    assert_same(t.astype(np.int64), X.astype(np.float32).astype(np.int64))
    assert t.sum(dtype=df.float64).dtype is df.float64
    np.testing.assert_allclose(float(t.mean(dtype=np.float64)), X.astype(np.float32).mean(dtype=np.float64))
    # df's dtype rules (TensorFlow's): an integer sum keeps its dtype, an integer mean truncates
    i = df.constant(np.array([1, 2, 2], np.int32))
    assert i.sum().dtype is df.int32 and int(i.mean()) == 1
    assert float(i.mean(dtype=df.float64)) == pytest.approx(5 / 3)


def test_size_is_an_int_when_known_and_an_error_when_not():
    t = df.constant(X)
    assert t.size == 24 and type(t.size) is int
    assert df.Variable(X).size == 24
    sizes = []

    @df.defun
    def static(x):
        sizes.append(x.size)
        return x.reshape(x.size)
    assert static(X).shape == (24,) and sizes == [24]

    unknown = df.defun(lambda x: x.size, input_signature=[df.TensorSpec([None, 3, 4], df.float64)])
    with pytest.raises(df.errors.TracingError, match=r"Tensor.size.*\(\?, 3, 4\).*df.size\(t\)"):
        unknown(X)
    dynamic = df.defun(lambda x: df.size(x), input_signature=[df.TensorSpec([None, 3, 4], df.float64)])
    assert int(dynamic(X)) == 24


def test_methods_on_variables_read_and_differentiate():
    v = df.Variable(X)
    assert_same(v.T, X.T)
    assert_same(v.reshape(6, 4), X.reshape(6, 4))
    with df.GradientTape() as tape:
        loss = (v.T * v.T).sum() + v.mean()
    np.testing.assert_allclose(as_numpy(tape.gradient(loss, v)), 2 * X + 1 / X.size)


def test_numpy_functions_that_defer_to_the_methods_give_tensors():
    t = df.constant(X)
    for got, want in [(np.sum(t), X.sum()), (np.mean(t, axis=0), X.mean(axis=0)),
                      (np.max(t, axis=1, keepdims=True), X.max(axis=1, keepdims=True)),
                      (np.reshape(t, (6, 4)), X.reshape(6, 4)), (np.squeeze(t[:1]), X[:1].squeeze())]:
        assert isinstance(got, df.Tensor)
        assert_same(got, np.asarray(want))
    assert np.size(t) == 24


def test_method_argument_errors():
    t = df.constant(X)
    with pytest.raises(IAE, match="Tensor.sum: out= is not supported"):
        t.sum(out=np.empty(()))
    with pytest.raises(IAE, match="order='C'"):
        t.reshape(24, order="F")
    with pytest.raises(IAE, match="reshape"):
        t.reshape(5, 5)
    with pytest.raises(IAE, match="squeeze"):
        t.squeeze(0)


# ---------------------------------------------------------------------------------------
# Argument checks of repeat, roll, reverse, linspace, meshgrid

def test_linspace_of_python_numbers_is_float32_and_broadcasts_tensors():
    assert_same(df.linspace(0, 1, 5), np.linspace(0, 1, 5).astype(np.float32))
    start, stop = np.array([0., 1.]), np.array([[1.], [3.], [5.]])
    assert_same(df.linspace(start, stop, 4, axis=-1), np.linspace(start, stop, 4, axis=-1))
    assert_same(df.linspace(df.constant(2.0, df.float64), 3.0, 3), np.linspace(2., 3., 3))
    with pytest.raises(IAE, match="linspace.*int32"):
        df.linspace(df.constant(0), df.constant(1), 3)
    with pytest.raises(IAE, match="linspace: num must be >= 0"):
        df.linspace(0., 1., -1)


@pytest.mark.parametrize("fn,says", [
    (lambda: df.repeat([1., 2., 3.], [1, 2]), ["repeat", "2 entries", "size 3"]),
    (lambda: df.repeat([1., 2.], -1), ["repeat", ">= 0"]),
    (lambda: df.repeat(1., 2, axis=0), ["repeat", "scalar", "axis=None"]),
    (lambda: df.roll([1., 2.], [1, 2], 0), ["roll", "same length"]),
    (lambda: df.roll([1., 2.], 1, 1), ["roll", "axis 1", "rank 1"]),
    (lambda: df.reverse([[1., 2.]], [0, -2]), ["reverse", "twice"]),
    (lambda: df.reverse([1., 2.], [3]), ["reverse", "axis 3"]),
    (lambda: df.meshgrid([[1., 2.]], [1., 2.]), ["meshgrid", "1-D", "reshape"]),
    (lambda: df.meshgrid([1., 2.], [1, 2]), ["meshgrid", "same dtype"]),
    (lambda: df.meshgrid([1., 2.], indexing="xz"), ["meshgrid", "'xy' or 'ij'"]),
    (lambda: df.meshgrid(), ["meshgrid", "at least one"]),
])
def test_array_function_errors_name_the_function(fn, says):
    with pytest.raises(IAE) as info:
        fn()
    for s in says:
        assert s in str(info.value), f"{info.value!r} should mention {s!r}"


def test_repeat_counts_must_be_ints():
    with pytest.raises(TypeError, match="repeat: repeats must be an int, got the float 1.5"):
        df.repeat([1., 2.], 1.5)


def test_repeat_counts_must_be_known_while_tracing():
    f = df.defun(lambda x, r: df.repeat(x, r))
    with pytest.raises(IAE, match="repeat: repeats must be known while tracing"):
        f(df.constant([1., 2.]), df.constant(2))


def test_repeat_with_unknown_sizes_infers_what_it_can():
    f = df.defun(lambda x: (df.repeat(x, 2, axis=1), df.repeat(x, [1, 2, 0], axis=1)),
                 input_signature=[df.TensorSpec([None, 3], df.float32)])
    a, b = f.get_concrete_function().graph.outputs
    assert tuple(a.shape) == (None, 6) and tuple(b.shape) == (None, 3)
