"""tape.jacobian / tape.batch_jacobian: TensorFlow's shapes, against float64 finite differences
and against reverse-mode gradients row by row; eagerly, inside a defun, and exported."""
import json

import numpy as np
import pytest

import defun as df
from defun_helpers import nested_gradients

f64 = df.float64
RNG = np.random.default_rng(0)
A = RNG.normal(size=(3, 4))
X = RNG.normal(size=(2, 3))


def numeric_jacobian(fn, x, eps=1e-6):
    """d fn(x) / d x by central differences: shape fn(x).shape + x.shape."""
    y = np.asarray(fn(x))
    jac = np.zeros(y.shape + x.shape)
    for j in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[j] += eps
        lo[j] -= eps
        jac[(Ellipsis,) + j] = (np.asarray(fn(hi)) - np.asarray(fn(lo))) / (2 * eps)
    return jac


def model(x):
    return df.tanh(x @ df.constant(A)) * 2.0 + df.reduce_sum(x * x, axis=1, keepdims=True)


def model_np(x):
    return np.tanh(x @ A) * 2.0 + np.sum(x * x, axis=1, keepdims=True)


def taped(fn, *xs, persistent=False):
    ts = [df.constant(x) for x in xs]
    with df.GradientTape(persistent=persistent) as tape:
        for t in ts:
            tape.watch(t)
        y = fn(*ts)
    return tape, y, ts


def test_jacobian_shape_and_values():
    tape, y, (x,) = taped(model, X)
    jac = tape.jacobian(y, x)
    assert jac.shape == (2, 4, 2, 3) and jac.dtype is f64
    np.testing.assert_allclose(jac.numpy(), numeric_jacobian(model_np, X), rtol=1e-6, atol=1e-8)


def test_jacobian_rows_are_reverse_mode_gradients():
    tape, y, (x,) = taped(model, X, persistent=True)
    jac = tape.jacobian(y, x).numpy()
    for i in np.ndindex(y.shape):
        seed = np.zeros(y.shape)
        seed[i] = 1.0
        np.testing.assert_array_equal(jac[i], tape.gradient(y, x, output_gradients=df.constant(seed)).numpy())


def test_jacobian_of_a_scalar_is_the_gradient_and_of_a_vector_wrt_a_scalar_is_a_vector():
    tape, y, (x,) = taped(lambda x: df.reduce_sum(df.sin(x)), X, persistent=True)
    np.testing.assert_allclose(tape.jacobian(y, x).numpy(), np.cos(X), rtol=1e-12)
    tape, y, (s,) = taped(lambda s: df.stack([s, s * s, df.exp(s)]), np.float64(0.5))
    np.testing.assert_allclose(tape.jacobian(y, s).numpy(), [1.0, 1.0, np.exp(0.5)], rtol=1e-12)


def test_structured_sources_variables_and_sparse_rows():
    w = df.Variable(A, name="w")
    table = df.Variable(RNG.normal(size=(5, 3)), name="table")
    x = df.constant(X)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = df.tanh(x @ w) + df.reduce_sum(df.gather(table, [4, 0]), axis=1, keepdims=True)
    jac = tape.jacobian(y, {"x": x, "params": [w, table]})
    assert set(jac) == {"x", "params"} and jac["params"][0].shape == (2, 4, 3, 4)
    np.testing.assert_allclose(jac["x"].numpy(), numeric_jacobian(lambda v: np.tanh(v @ A), X), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(jac["params"][0].numpy(), numeric_jacobian(lambda a: np.tanh(X @ a), A),
                               rtol=1e-6, atol=1e-8)
    t = table.numpy()
    np.testing.assert_allclose(
        jac["params"][1].numpy(),
        numeric_jacobian(lambda tb: np.broadcast_to(tb[[4, 0]].sum(1, keepdims=True), (2, 4)), t),
        rtol=1e-6, atol=1e-8)   # the gather gradient (IndexedSlices) is made dense per row


def test_unconnected_sources():
    c = df.constant([1.0, 2.0], f64)
    tape, y, (x,) = taped(lambda x: x * 3.0, np.array([1.0, 2.0, 3.0]), persistent=True)
    assert tape.jacobian(y, c) is None
    z = tape.jacobian(y, [x, c], unconnected_gradients="zero")
    np.testing.assert_array_equal(z[0].numpy(), 3 * np.eye(3))
    assert z[1].shape == (3, 2) and not z[1].numpy().any()
    with pytest.raises(ValueError, match="unconnected_gradients must be"):
        tape.jacobian(y, x, unconnected_gradients="zeros")
    # a row that does not depend on x is a zero row
    tape, y, (x,) = taped(lambda x: df.stack([x[0] * 2.0, df.constant(1.0, f64)]), np.array([1.0, 2.0]))
    np.testing.assert_array_equal(tape.jacobian(y, x).numpy(), [[2.0, 0.0], [0.0, 0.0]])


def test_an_empty_target_gives_an_empty_jacobian():
    tape, y, (x,) = taped(lambda x: x[:0] * 2.0, np.array([1.0, 2.0]))
    jac = tape.jacobian(y, x)
    assert jac.shape == (0, 2)


def test_non_persistent_tape_gives_one_jacobian():
    tape, y, (x,) = taped(model, X)
    tape.jacobian(y, x)
    with pytest.raises(RuntimeError, match="only once"):
        tape.gradient(y, x)
    with pytest.raises(TypeError, match="one tensor"):
        taped(model, X)[0].jacobian([y], x)


def test_hessian_as_the_jacobian_of_a_gradient():
    x = df.constant(X[0])
    hess = nested_gradients(lambda t: df.reduce_sum(df.sin(t) * t * t), x, jacobian=True)[1].numpy()
    v = X[0]
    np.testing.assert_allclose(hess, np.diag(-np.sin(v) * v * v + 4 * np.cos(v) * v + 2 * np.sin(v)),
                               rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------
# batch_jacobian

def test_batch_jacobian_is_the_diagonal_blocks():
    tape, y, (x,) = taped(model, X, persistent=True)
    bj = tape.batch_jacobian(y, x)
    assert bj.shape == (2, 4, 3)
    full = tape.jacobian(y, x).numpy()
    np.testing.assert_allclose(bj.numpy(), np.stack([full[b, :, b, :] for b in range(2)]), rtol=1e-12)
    np.testing.assert_allclose(bj.numpy()[1], numeric_jacobian(lambda r: model_np(r[None])[0], X[1]),
                               rtol=1e-6, atol=1e-8)


def test_batch_jacobian_of_higher_rank_rows_and_a_vector_target():
    x3 = RNG.normal(size=(3, 2, 2))
    tape, y, (x,) = taped(lambda x: df.transpose(df.sin(x), (0, 2, 1)) * 2.0, x3, persistent=True)
    bj = tape.batch_jacobian(y, x)
    assert bj.shape == (3, 2, 2, 2, 2)
    np.testing.assert_allclose(bj.numpy()[2], numeric_jacobian(lambda r: np.sin(r).T * 2.0, x3[2]),
                               rtol=1e-6, atol=1e-8)
    tape, y, (x,) = taped(lambda x: df.reduce_sum(x * x, axis=1), X)
    np.testing.assert_allclose(tape.batch_jacobian(y, x).numpy(), 2 * X, rtol=1e-12)


def test_batch_jacobian_errors_and_unconnected():
    tape, y, (x,) = taped(model, X, persistent=True)
    with pytest.raises(df.errors.InvalidArgumentError, match="batch size 2 differs from the source's 3"):
        tape.batch_jacobian(y, df.constant(np.ones((3, 3))))
    with pytest.raises(df.errors.InvalidArgumentError, match="need a batch dimension"):
        tape.batch_jacobian(df.reduce_sum(y), x)
    other = df.constant(np.ones((2, 5)))
    assert tape.batch_jacobian(y, other) is None
    z = tape.batch_jacobian(y, other, unconnected_gradients="zero")
    assert z.shape == (2, 4, 5) and not z.numpy().any()


# ---------------------------------------------------------------------------------------
# Inside a defun

def test_traced_jacobians_equal_eager_ones_and_export():
    @df.defun
    def both(x):
        with df.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y = model(x)
        return tape.jacobian(y, x), tape.batch_jacobian(y, x)
    x = df.constant(X)
    tape, y, (xe,) = taped(model, X, persistent=True)
    jac, bj = both(x)
    np.testing.assert_allclose(jac.numpy(), tape.jacobian(y, xe).numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(bj.numpy(), tape.batch_jacobian(y, xe).numpy(), rtol=1e-12, atol=1e-15)
    loaded = df.load_json(json.loads(json.dumps(df.export_json(both.get_concrete_function(x)))))
    again = loaded(X)
    np.testing.assert_allclose(again[0].numpy(), jac.numpy(), rtol=1e-12, atol=1e-15)


def test_traced_batch_jacobian_with_an_unknown_batch_size():
    @df.defun(input_signature=[df.TensorSpec([None, 3], f64)])
    def per_example(x):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = model(x)
        return tape.batch_jacobian(y, x)
    for n in (1, 5):
        xs = RNG.normal(size=(n, 3))
        tape, y, (x,) = taped(model, xs)
        np.testing.assert_allclose(per_example(xs).numpy(), tape.batch_jacobian(y, x).numpy(), rtol=1e-12)
    assert per_example.trace_count == 1


def test_traced_jacobian_with_unknown_sizes_says_what_must_be_static():
    @df.defun(input_signature=[df.TensorSpec([None, 3], f64)])
    def full(x):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = model(x)
        return tape.jacobian(y, x)
    with pytest.raises(df.errors.InvalidArgumentError, match=r"target has shape \(\?, 4\).*size must be known"):
        full(X)

    @df.defun(input_signature=[df.TensorSpec([2, None], f64)])
    def rows(x):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = df.sin(x)
        return tape.batch_jacobian(y, x)
    with pytest.raises(df.errors.InvalidArgumentError, match="every size but the batch"):
        rows(X)
