"""A Python list of tensors given to an op keeps its gradient: the one conversion routine
(runtime/convert.py) packs it with df.stack, eagerly and traced; Python numbers in the list
take the dtype of its first tensor (weak typing). Gradients are compared with the same
computation written with df.stack, and with finite differences.
"""
import numpy as np
import pytest

import defun as df
from opcheck import check_gradient

IAE = df.errors.InvalidArgumentError

# (name, f(x) with a list operand, the same with df.stack written out)
CASES = [
    ("reduce_sum", lambda x: df.reduce_sum([x, x]), lambda x: df.reduce_sum(df.stack([x, x]))),
    ("reduce_mean", lambda x: df.reduce_mean([x, x + 2.0]), lambda x: df.reduce_mean(df.stack([x, x + 2.0]))),
    ("convert_to_tensor", lambda x: df.convert_to_tensor([x, 3.0 * x]) * 1.0, lambda x: df.stack([x, 3.0 * x])),
    ("numbers_mixed_in", lambda x: df.reduce_sum([x[0], 2.0, x[1] * x[1]]),
     lambda x: df.reduce_sum(df.stack([x[0], df.constant(2.0, x.dtype), x[1] * x[1]]))),
    ("nested", lambda x: df.reduce_prod([[x[0], x[1]], [1.5, x[0]]]),
     lambda x: df.reduce_prod(df.stack([df.stack([x[0], x[1]]), df.stack([df.constant(1.5, x.dtype), x[0]])]))),
    ("binary_operand", lambda x: df.multiply([x, 2.0 * x], x), lambda x: df.multiply(df.stack([x, 2.0 * x]), x)),
    ("python_operator", lambda x: x * [x, x], lambda x: x * df.stack([x, x])),
    ("matmul", lambda x: df.matmul([[x[0], x[1]]], [[x[1]], [1.0]]),
     lambda x: df.matmul(df.stack([df.stack([x[0], x[1]])]),
                         df.stack([df.stack([x[1]]), df.stack([df.constant(1.0, x.dtype)])]))),
]


def _grad(f, x):
    t = df.constant(x)
    with df.GradientTape() as tape:
        tape.watch(t)
        y = f(t)
    return y, tape.gradient(y, t)


@pytest.mark.parametrize("name,f,reference", CASES, ids=[c[0] for c in CASES])
def test_eager_and_traced_gradients_flow_through_the_list(name, f, reference):
    x = np.array([1.5, -2.0])
    y, g = _grad(f, x)
    y_ref, g_ref = _grad(reference, x)
    assert g is not None, f"{name}: the list lost the gradient"
    assert y.dtype is df.float64 and g.dtype is df.float64
    np.testing.assert_allclose(y.numpy(), y_ref.numpy())
    np.testing.assert_allclose(g.numpy(), g_ref.numpy())
    traced = df.defun(lambda t: _grad(f, t), input_signature=[df.TensorSpec([2], df.float64)])
    ty, tg = traced(x)
    np.testing.assert_allclose(ty.numpy(), y_ref.numpy())
    np.testing.assert_allclose(tg.numpy(), g_ref.numpy())
    check_gradient(f, [x], [0])


def test_a_traced_forward_with_a_list_is_differentiable_from_outside():
    f = df.defun(lambda x: df.reduce_sum([x, x * x]), input_signature=[df.TensorSpec([None])])
    t = df.constant([1.0, 2.0, 3.0])
    with df.GradientTape() as tape:
        tape.watch(t)
        y = f(t)
    np.testing.assert_allclose(tape.gradient(y, t).numpy(), 1.0 + 2.0 * t.numpy())


def test_numbers_in_the_list_take_the_tensors_dtype():
    x = df.constant([1, 2], df.int64)
    assert df.convert_to_tensor([x, [3, 4]]).dtype is df.int64
    assert df.convert_to_tensor([df.constant(1.0, df.float64), 2]).dtype is df.float64
    assert df.add([df.constant(1.0, df.float16), 2.0], 1.0).dtype is df.float16
    with pytest.raises(IAE, match="a list of Python floats with an int64 tensor"):
        df.convert_to_tensor([x, [2.5, 1]])


def test_variables_in_a_list_are_read_and_differentiated():
    v = df.Variable([1.0, 2.0])
    with df.GradientTape() as tape:
        y = df.reduce_sum([v, 2.0 * v])
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), [3.0, 3.0])


def test_mismatched_entries_are_refused_by_name():
    with pytest.raises(IAE, match="stack: inputs must have the same dtype"):
        df.reduce_sum([df.constant([1.0]), df.constant([1.0], df.float64)])
    with pytest.raises(IAE, match=r"stack: inputs must have the same shape"):
        df.reduce_sum([df.constant([1.0]), df.constant([1.0, 2.0])])
    with pytest.raises(IAE, match=r"convert_to_tensor|expected float32"):
        df.convert_to_tensor([df.constant([1.0], df.float64)], df.float32)


def test_a_list_without_tensors_is_a_constant_as_before():
    x = df.constant([1.0, 2.0])
    with df.GradientTape() as tape:
        tape.watch(x)
        y = df.reduce_sum([[1.0, 2.0]]) * x
    assert df.reduce_sum([1, 2]).dtype is df.int32
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [3.0, 3.0])
