"""Bad inputs that passed silently (issue 28): each is now a typed error at the call that
names the argument, eagerly and while tracing, or (a gradient with respect to an integer
tensor) a warning naming the source, as TensorFlow gives.

References: TF's `add_n` refuses inputs of different shapes ("Shapes must be equal"); TF's
`while_loop` converts `maximum_iterations` to an int32 tensor (1.5 is refused); Keras
refuses a learning rate that is not a number when the optimizer is made; TF's tape warns
"The dtype of the source tensor must be floating" and returns None; jax's grad raises for
an integer argument (as df.gradients_function does).
"""
import warnings

import numpy as np
import pytest

import defun as df
from defun.runtime import errors


def _both(fn, *args):
    """`fn(*args)` eagerly, then traced in a defun (the error is raised by both)."""
    yield lambda: fn(*args)
    yield lambda: df.defun(fn)(*args)


@pytest.mark.parametrize("stable", ["no", 0, None, 1.0])
def test_argsort_refuses_a_stable_flag_that_is_not_a_bool(stable):
    x = np.array([3.0, 1.0, 2.0], np.float32)
    for call in _both(lambda v: df.argsort(v, stable=stable), x):
        with pytest.raises(TypeError, match=r"argsort: stable must be a bool \(True or False\), got the "):
            call()
    np.testing.assert_array_equal(df.argsort(x, stable=False).numpy(), [1, 2, 0])
    np.testing.assert_array_equal(df.argsort(x, stable=np.bool_(True)).numpy(), [1, 2, 0])


@pytest.mark.parametrize("bad, kind", [(1.5, "the float 1.5"), ("3", "the str '3'"), (True, "the bool True"),
                                       (np.float64(2.0), "the float64 np.float64")])
def test_while_loop_refuses_a_maximum_iterations_that_is_not_an_int(bad, kind):
    def loop(x):
        return df.while_loop(lambda i: i < 10, lambda i: i + 1, [x], maximum_iterations=bad)
    for call in _both(loop, df.constant(0)):
        with pytest.raises(TypeError, match=f"while_loop: maximum_iterations must be an int, got {kind}"):
            call()


def test_while_loop_takes_int_counts_of_every_kind():
    def loop(m):
        return df.while_loop(lambda i: i < 10, lambda i: i + 1, [df.constant(0)], maximum_iterations=m)[0]
    for m in (3, np.int64(3), df.constant(3), df.constant(np.int64(3))):
        assert int(loop(m)) == 3
    with pytest.raises(errors.InvalidArgumentError, match="maximum_iterations must be >= 0, got -1"):
        loop(-1)
    with pytest.raises(TypeError, match="maximum_iterations must be an int, got a float32 tensor"):
        loop(df.constant(3.0))


@pytest.mark.parametrize("make", [df.optimizers.SGD, df.optimizers.Adam])
@pytest.mark.parametrize("lr, message", [
    ("a", "learning_rate must be a number, got the str 'a'"),
    (None, "learning_rate must be a number, got the NoneType None"),
    (True, "learning_rate must be a number, got the bool True"),
    (df.constant([0.1, 0.2]), "learning_rate must be a number or a float scalar variable or tensor, got a "
                              "float32 EagerTensor of shape \\(2,\\)"),
])
def test_an_optimizer_refuses_a_bad_learning_rate_when_made(make, lr, message):
    with pytest.raises(TypeError, match=f"{make.__name__}: {message}"):
        make(lr)


def test_an_optimizer_refuses_bad_hyperparameters_when_made():
    with pytest.raises(TypeError, match="SGD: momentum must be a number, got the str '0.9'"):
        df.optimizers.SGD(0.1, momentum="0.9")
    with pytest.raises(TypeError, match="SGD: nesterov must be a bool"):
        df.optimizers.SGD(0.1, momentum=0.9, nesterov="yes")
    with pytest.raises(TypeError, match="Adam: beta_1 must be a number, got the str '0.5'"):
        df.optimizers.Adam(0.1, beta_1="0.5")
    with pytest.raises(TypeError, match="Adam: epsilon must be a number"):
        df.optimizers.Adam(0.1, epsilon="1e-7")


def test_an_optimizer_still_takes_numbers_variables_and_scalar_tensors():
    v = df.Variable(np.array([1.0, 2.0], np.float32))
    for lr in (0.5, 1, np.float32(0.5), df.Variable(0.5), df.constant(0.5)):
        opt = df.optimizers.SGD(lr)
        v.assign([1.0, 2.0])
        opt.apply_gradients([(df.constant([1.0, 1.0]), v)])
        np.testing.assert_allclose(v.numpy(), [1.0 - float(np.asarray(lr)), 2.0 - float(np.asarray(lr))])


@pytest.mark.parametrize("shapes", [[(3,), (2, 3)], [(2, 3), ()], [(2, 1), (2, 3)], [(2, 3), (2, 3), (3,)]])
def test_add_n_refuses_inputs_of_different_shapes(shapes):
    """TF: "Shapes must be equal"; numpy's broadcasting used to sum them silently."""
    xs = [np.ones(s, np.float32) for s in shapes]
    for call in _both(lambda *ts: df.add_n(list(ts)), *xs):
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"add_n: inputs must have the same shape \(add_n does not broadcast; use "
                                 r"df.add\), got "):
            call()


def test_add_n_checks_unknown_sizes_when_it_runs():
    f = df.defun(lambda a, b: df.add_n([a, b]))
    cf = f.get_concrete_function(df.TensorSpec([None, 3], df.float32), df.TensorSpec([2, None], df.float32))
    assert tuple(cf.graph.outputs[0].shape) == (2, 3)
    np.testing.assert_array_equal(cf(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)).numpy(),
                                  np.full((2, 3), 2.0))
    loaded = df.load_json(df.export_json(cf))
    with pytest.raises(errors.InvalidArgumentError, match="add_n: inputs must have the same shape"):
        loaded(np.ones((1, 3), np.float32), np.ones((2, 3), np.float32))


def test_add_n_under_vmap_with_an_unbatched_input():
    xs = np.arange(12, dtype=np.float32).reshape(4, 3)
    c = np.array([1.0, 2.0, 3.0], np.float32)
    got = df.vmap(lambda x: df.add_n([x, df.constant(c), x]))(xs)
    np.testing.assert_array_equal(got.numpy(), 2 * xs + c)


@pytest.mark.parametrize("x", [np.ones(3, np.float32), np.float32(2.0), [1.0, 2.0]])
def test_trace_of_a_vector_names_trace(x):
    for call in _both(df.linalg.trace, x):
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"^trace: input must be a matrix or a batch of matrices \(rank >= 2\), got "
                                 r"shape \("):
            call()
    m = np.arange(9, dtype=np.float32).reshape(3, 3)
    assert float(df.linalg.trace(m)) == np.trace(m) == 12.0


# ---------------------------------------------------------------------------------------
# Gradients with respect to integers

def _integer_warnings(record):
    return [str(w.message) for w in record if "an integer or bool source gets no gradient" in str(w.message)]


def test_tape_gradient_warns_naming_an_integer_source():
    x, y = df.constant([1, 2, 3]), df.constant([1.0, 2.0])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with df.GradientTape() as tape:
            tape.watch(x)
            tape.watch(y)
            z = df.reduce_sum(df.cast(x, df.float32)) + df.reduce_sum(y * y)
        gx, gy = tape.gradient(z, [x, y])
    assert gx is None and gy.numpy().tolist() == [2.0, 4.0]
    found = _integer_warnings(record)
    assert len(found) == 1 and found[0].startswith("GradientTape.gradient: source 0 is an int32 tensor of "
                                                   "shape (3,); ")
    assert record[0].filename == __file__      # the user's line, not the library's


def test_tape_gradient_warns_naming_an_integer_variable_and_is_quiet_for_floats():
    count = df.Variable(np.int64(3), name="count")
    w = df.Variable(np.float32(2.0), name="w")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with df.GradientTape() as tape:
            z = df.cast(count, df.float32) * w
        g_count, g_w = tape.gradient(z, [count, w])
    assert g_count is None and float(g_w) == 3.0
    assert _integer_warnings(record) == [
        "GradientTape.gradient: variable 'count' is an int64 variable of shape (); an integer or bool source "
        "gets no gradient (None), its values not being continuous: df.cast it to a float dtype before the tape "
        "watches it to differentiate with respect to it"]


def test_tape_gradient_inside_a_defun_warns_when_traced():
    @df.defun
    def f(x, n):
        with df.GradientTape() as tape:
            tape.watch(n)
            y = x * df.cast(n, df.float32)
        return tape.gradient(y, n)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert f(np.float32(2.0), np.int32(3)) is None
    assert len(_integer_warnings(record)) == 1


@pytest.mark.parametrize("form", [df.gradients_function, df.value_and_gradients_function])
def test_functional_forms_refuse_an_integer_argument_without_the_tapes_warning(form):
    """As jax's grad: an integer argument is an error naming it (the tape's warning would be
    a second word on the same thing)."""
    def scaled(x, n):
        return x * df.cast(n, df.float32)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match=r"argument 'n' \(position 1\) of scaled is an int32 tensor; "
                                             r"gradients are defined for floating-point arguments"):
            form(scaled)(np.float32(2.0), 3)
        result = form(scaled, params=[0])(np.float32(2.0), 3)
        grads = result if form is df.gradients_function else result[1]
        assert float(grads[0]) == 3.0
    assert _integer_warnings(record) == []


def test_implicit_gradients_warn_naming_an_integer_variable():
    count = df.Variable(np.int32(3), name="steps")
    w = df.Variable(np.float32(2.0), name="w")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        pairs = df.implicit_gradients(lambda: df.cast(count, df.float32) * w)()
    grads = {v.name: g for g, v in pairs}
    assert grads["steps"] is None and float(grads["w"]) == 3.0
    found = _integer_warnings(record)
    assert len(found) == 1 and "variable 'steps' is an int32 variable" in found[0]
