"""df.test.compute_gradient (TF's layout: one (y.size, x.size) Jacobian per input) and
df.test.check_gradients: passes on correct rules in every float dtype, order 1 and 2, both
modes; FAILS, naming the argument and the worst entry, on a deliberately wrong
custom_gradient in reverse mode, forward mode and at second order only."""
import numpy as np
import pytest

import defun as df

RS = np.random.RandomState(11)


def test_compute_gradient_has_tf_layout_and_the_analytic_values():
    x = RS.randn(2, 3)
    w = RS.randn(3, 4)
    theo, num = df.test.compute_gradient(lambda x, w: df.matmul(x, w), [x, w])
    assert len(theo) == len(num) == 2
    assert theo[0].shape == num[0].shape == (8, 6) and theo[1].shape == num[1].shape == (8, 12)
    # y[i, k] = sum_j x[i, j] w[j, k]: row (i, k), column (i', j) holds w[j, k] if i == i'
    jx = np.zeros((2, 4, 2, 3))
    jw = np.zeros((2, 4, 3, 4))
    for i in range(2):
        for k in range(4):
            jx[i, k, i, :] = w[:, k]
            jw[i, k, :, k] = x[i, :]
    np.testing.assert_allclose(theo[0], jx.reshape(8, 6), rtol=1e-14)
    np.testing.assert_allclose(theo[1], jw.reshape(8, 12), rtol=1e-14)
    np.testing.assert_allclose(num[0], jx.reshape(8, 6), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(num[1], jw.reshape(8, 12), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("shape", [(0,), (2, 0), (1,)])
def test_jacobians_of_no_elements(dtype, shape):
    # the reverse Jacobian was reshaped to (y.size, -1), which no size fits when y or x is
    # empty (a numpy ValueError): an x or a y of 0 elements has a Jacobian of 0 rows or columns
    x = df.constant(np.ones(shape, dtype))
    xsize = int(np.prod(shape)) * (2 if dtype == np.complex128 else 1)
    for f, ysize in ((lambda a: df.sin(a), xsize), (lambda a: df.sin(a)[:0], 0)):
        theo, num = df.test.compute_gradient(f, [x])
        assert theo[0].shape == num[0].shape == (ysize, xsize)
        np.testing.assert_allclose(theo[0], num[0], rtol=5e-2, atol=5e-2)
    df.test.check_gradients(lambda a: df.reduce_sum(df.sin(a)), [x], order=2)


def test_compute_gradient_of_an_elementwise_function_is_diagonal():
    x = df.constant(np.array([0.5, -1.0, 2.0], np.float32))
    theo, num = df.test.compute_gradient(lambda x: df.sin(x), [x])
    np.testing.assert_allclose(theo[0], np.diag(np.cos(x.numpy())), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(num[0], np.diag(np.cos(x.numpy())), rtol=1e-3, atol=1e-4)


def _net(x, w, b):
    return df.softmax(df.tanh(df.matmul(x, w) + b))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_check_gradients_passes_on_correct_rules(dtype):
    args = [(RS.randn(2, 3) * 0.5).astype(dtype), (RS.randn(3, 2) * 0.5).astype(dtype),
            (RS.randn(2) * 0.1).astype(dtype)]
    df.test.check_gradients(_net, args, order=2)
    df.test.check_gradients(df.defun(_net), args)


def test_integer_arguments_pass_through_unchecked():
    def f(x, k):
        return x * df.cast(k, df.float64)
    df.test.check_gradients(f, [RS.randn(3), np.array(3, np.int32)])


@df.custom_gradient
def _wrong_sin(x):
    return df.sin(x), lambda dy: dy * df.cos(x) * 1.5


@df.custom_gradient
def _sin_right_once(x):
    # right first derivative; its own derivative is lost (cos of a constant): wrong at order 2
    return df.sin(x), lambda dy: dy * df.cos(df.stop_gradient(x))


@pytest.mark.parametrize("mode,text", [("rev", "reverse mode"), ("fwd", "forward mode")])
def test_a_wrong_rule_fails_naming_the_argument_and_the_worst_entry(mode, text):
    def f(w, x):
        return df.reduce_sum(w) * _wrong_sin(x)
    with pytest.raises(AssertionError) as info:
        df.test.check_gradients(f, [RS.randn(2), RS.randn(3)], modes=(mode,))
    message = str(info.value)
    assert "argument 1 ('x')" in message and text in message and "worst" in message
    assert "argument 0" not in message


def test_a_rule_wrong_only_at_second_order_passes_order_1_and_fails_order_2():
    x = [RS.randn(3)]
    df.test.check_gradients(_sin_right_once, x, order=1)
    for mode in ("rev", "fwd"):
        with pytest.raises(AssertionError, match=r"second derivative .* argument 0 \('x'\)"):
            df.test.check_gradients(_sin_right_once, x, order=2, modes=(mode,))


def test_tolerances_can_be_given():
    def f(x):
        return _wrong_sin(x)
    df.test.check_gradients(f, [np.array([0.1, 0.2])], rtol=1.0, atol=1.0)
    with pytest.raises(AssertionError):
        df.test.check_gradients(f, [np.array([0.1, 0.2])], rtol=0.1, atol=0.0)


def test_bad_arguments_are_typed_errors():
    with pytest.raises(ValueError, match="order"):
        df.test.check_gradients(df.sin, [np.ones(2)], order=3)
    with pytest.raises(ValueError, match="modes"):
        df.test.check_gradients(df.sin, [np.ones(2)], modes=("backward",))
    with pytest.raises(TypeError, match="list"):
        df.test.compute_gradient(df.sin, np.ones(2))
    with pytest.raises(TypeError, match="floating-point"):
        df.test.compute_gradient(lambda k: df.cast(k, df.float32), [np.ones(2, np.int32)])
    assert "test" in dir(df) and {"compute_gradient", "check_gradients"} <= set(dir(df.test))


def test_compute_gradient_equals_torchs_jacobian_reshaped():
    torch = pytest.importorskip("torch")
    args = [RS.randn(2, 3), RS.randn(3, 2), RS.randn(2)]
    theo, num = df.test.compute_gradient(_net, args)
    ref = torch.autograd.functional.jacobian(
        lambda x, w, b: torch.softmax(torch.tanh(x @ w + b), -1), tuple(torch.tensor(a) for a in args))
    for t, n, r, a in zip(theo, num, ref, args):
        r = r.numpy().reshape(4, a.size)        # (y.size, x.size)
        np.testing.assert_allclose(t, r, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(n, r, rtol=1e-7, atol=1e-9)
