"""Regression tests of the bugs the composition sweep (tests/test_composition_sweep.py) found
and that were fixed where they were: each fails without its fix."""
import numpy as np

import defun as df

# A complex 2x2 matrix and the loss Re det + 2 Im det, whose gradient (TF's convention: jax's
# conjugated), as jax gives it:
_A = np.array([[2.0 + 0.5j, 0.3 - 0.2j], [-0.4 + 0.1j, 1.5 + 0.7j]])
_JAX_GRAD = np.array([[2.9 + 2.3j, 0.2 + 0.9j], [0.1 - 0.8j, 3.0 + 3.5j]])    # conj(jax.grad)


def _det_loss_gradient(x):
    with df.GradientTape() as tape:
        tape.watch(x)
        d = df.linalg.det(x)
        value = df.reduce_sum(df.real(d) + df.imag(d) * 2.0)
    return tape.gradient(value, x)


def test_complex_det_gradient_in_a_defun_and_its_second_order():
    """det's gradient runs the internal op `adjugate`, whose kernel takes complex matrices
    but whose inference refused them, so the gradient of a complex det failed in a defun
    (InvalidArgumentError: adjugate: unsupported input dtype complex128) while eager worked."""
    x = df.constant(_A)
    np.testing.assert_allclose(_det_loss_gradient(x).numpy(), _JAX_GRAD, rtol=1e-12)
    np.testing.assert_allclose(df.defun(_det_loss_gradient)(x).numpy(), _JAX_GRAD, rtol=1e-12)
    # the second order (adjugate's own gradient), forward over reverse, against jax's
    import jax      # the reference, imported by the one test that uses it
    import jax.numpy as jnp     # the same
    t = np.array([[0.3 - 1.0j, 0.5 + 0.2j], [-0.7 + 0.4j, 1.1 - 0.3j]])

    def jvp_of_gradient(x):
        with df.ForwardAccumulator([x], [df.constant(t)]) as acc:
            g = _det_loss_gradient(x)
        return acc.jvp(g)
    with jax.enable_x64(True):
        jgrad = jax.grad(lambda a: jnp.real(jnp.linalg.det(a)) + 2 * jnp.imag(jnp.linalg.det(a)))
        want = np.conj(np.asarray(jax.jvp(jgrad, (jnp.asarray(_A),), (jnp.asarray(t),))[1]))
    np.testing.assert_allclose(jvp_of_gradient(x).numpy(), want, rtol=1e-10)
    np.testing.assert_allclose(df.defun(jvp_of_gradient)(x).numpy(), want, rtol=1e-10)


def test_differentiating_vmap_of_a_loaded_custom_gradient_is_a_typed_refusal(tmp_path):
    """grad(vmap(a loaded document holding a custom_gradient)) called None as the batched
    op's gradient function (a TypeError); it now refuses as the loaded op itself does."""
    import pytest

    @df.custom_gradient
    def halved_exp(t):
        y = df.exp(t)
        return y, lambda dy: dy * y * 0.5

    f = df.defun(halved_exp)
    df.export_json(f.get_concrete_function(df.TensorSpec([2], df.float64)), tmp_path / "f.json")
    loaded = df.load_json(tmp_path / "f.json")
    batched = df.vmap(lambda t: loaded(t))
    xs = df.constant(np.array([[0.5, -1.0], [0.2, 0.3]]))
    np.testing.assert_allclose(batched(xs).numpy(), np.exp(xs.numpy()))
    with df.GradientTape() as tape:
        tape.watch(xs)
        total = df.reduce_sum(batched(xs))
    with pytest.raises(df.errors.UnimplementedError, match="holds no Python gradient function"):
        tape.gradient(total, xs)


def _loaded_with_backward(fn, x):
    import json     # the document goes through text, as a file would
    cf = df.defun(fn).get_concrete_function(df.constant(x))
    return df.load_json(json.loads(json.dumps(df.export_json(cf, include_backward=True))))


def _scaled_exp_or_shift(x):
    """A cond whose first branch has a side output (exp's value, for its gradient) and whose
    second has none: exported with its backward, the second returns an empty stand-in."""
    return df.cond(df.reduce_sum(x) > 1.0, lambda: df.exp(x) * 2.0, lambda: x - 1.0)


def _rows_until_large(x):
    """The same inside a converted loop over rows that breaks on a tensor condition."""
    s = df.zeros_like(x[0])
    for row in x:
        if df.reduce_max(row) > 1.2:
            break
        s = s + df.exp(row * 0.5)
    return s * 2.0 if df.reduce_sum(s) > 1.0 else s - 1.0


def _scaled_by_a_row(x):
    """A cond on a count whose first branch saves a slice at a run-time row (its bound a
    scalar side output: the second branch's stand-in for it is a scalar, not empty)."""
    k = df.reduce_sum(df.cast(x[:, 0] > 0.0, df.int32))
    return df.cond(k > 1, lambda: x * df.exp(x[k - 1]), lambda: x)


def test_vmap_of_a_loaded_cond_with_a_side_output_in_one_branch():
    """vmap over a document exported with its backward, a cond on a per-example predicate
    whose branches save different side outputs: the branch without one returns an empty
    stand-in, which batching takes for the other's value only if it knows it for one, and a
    document records no `saves_for` ('where: shapes (2, 3) and (0,) cannot be broadcast')."""
    xs = np.array([[0.5, 0.6, 0.7], [-0.4, 0.3, -0.5]])
    rows = np.stack([xs, xs[::-1] * 3.0])
    for fn, batch in ((_scaled_exp_or_shift, xs), (_rows_until_large, rows), (_scaled_by_a_row, rows)):
        loaded = _loaded_with_backward(fn, batch[0])
        want = np.stack([fn(df.constant(x)).numpy() for x in batch])
        np.testing.assert_allclose(df.vmap(lambda t: loaded(t))(df.constant(batch)).numpy(), want, rtol=1e-12)
        traced = df.defun(lambda b: df.vmap(lambda t: loaded(t))(b))
        np.testing.assert_allclose(traced(df.constant(batch)).numpy(), want, rtol=1e-12)
        with df.GradientTape() as tape:      # and per-example gradients through it
            b = df.constant(batch)
            tape.watch(b)
            total = df.reduce_sum(df.sin(df.vmap(lambda t: loaded(t))(b)))
        with df.GradientTape() as eager_tape:
            e = df.constant(batch)
            eager_tape.watch(e)
            eager_total = df.reduce_sum(df.sin(df.stack([fn(e[i]) for i in range(len(batch))])))
        np.testing.assert_allclose(tape.gradient(total, b).numpy(), eager_tape.gradient(eager_total, e).numpy(),
                                   rtol=1e-10)


def test_vmap_of_a_loaded_ragged_cond_still_refuses():
    """A cond whose own output is an empty constant in one branch and three values in the
    other has no batched value with a per-example predicate: a typed error, as in a defun,
    not the other branch's value taken for every example."""
    import pytest       # only this test needs it

    def ragged(x):
        return df.cond(df.reduce_sum(x) > 1.0, lambda: df.exp(x) * 2.0, lambda: df.zeros([0], x.dtype))
    xs = np.array([[0.5, 0.6, 0.7], [-0.4, 0.3, -0.5]])
    loaded = _loaded_with_backward(ragged, xs[0])
    with pytest.raises(df.errors.InvalidArgumentError, match="cannot be broadcast"):
        df.vmap(lambda t: loaded(t))(df.constant(xs))
