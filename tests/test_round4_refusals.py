"""Issue 28 (round 4): crashes and refusals where the references work, each checked against
the reference's numbers (torch, jax, numpy's promotion, onnxruntime against the graph)."""
import json

import numpy as np
import pytest

import defun as df

torch = pytest.importorskip("torch")

_A = np.array([[1.0, 2.0, 0.5], [-1.0, 0.25, 3.0], [2.0, -0.5, 1.0]])


# ---------------------------------------------------------------------------------------
# A loaded document's rebuilt gradient of matmul(transpose_b=True) and qr: KeyError
# 'transpose_a' in the budget's matmul cost (a matmul node keeps only the attrs it sets).
# The budget's cost declarations are being reworked elsewhere; the cost reads the default.

def test_a_loaded_documents_gradient_of_matmul_transpose_b_and_qr_matches_torch():
    @df.defun(input_signature=[df.TensorSpec((3, 3), df.float64)])
    def f(a):
        q, r = df.linalg.qr(a)
        return df.reduce_sum(df.matmul(a, a, transpose_b=True) * a) + df.reduce_sum(q * a) + df.reduce_sum(r)
    loaded = df.load_json(json.loads(json.dumps(df.export_json(f.get_concrete_function()))))
    x = df.constant(_A)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = loaded(x)
    got = tape.gradient(y, x).numpy()
    t = torch.tensor(_A, requires_grad=True)
    q, r = torch.linalg.qr(t)
    ((t @ t.T * t).sum() + (q * t).sum() + r.sum()).backward()
    np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------
# int8 + uint64 was refused; API.md promises numpy's promotion among tensors: float64.

def test_a_signed_integer_with_uint64_takes_numpys_float64():
    a = np.array([-3, 5, 127], np.int8)
    b = np.array([2**63 + 1, 7, 2**64 - 1], np.uint64)
    want_sum, want_max = a + b, np.maximum(a, b)       # numpy: float64 [9.223372036854775808e18, 12, ...]
    assert want_sum.dtype == np.float64
    traced = df.defun(lambda p, q: (p + q, df.maximum(p, q), p < q, df.equal(q, p)))
    ta, tb = df.constant(a), df.constant(b)
    for name, run in (("eager", lambda: (ta + tb, df.maximum(ta, tb), ta < tb, df.equal(tb, ta))),
                      ("defun", lambda: traced(a, b))):
        s, m, less, eq = run()
        assert s.dtype is df.float64 and m.dtype is df.float64, name
        np.testing.assert_array_equal(s.numpy(), want_sum, err_msg=name)
        np.testing.assert_array_equal(m.numpy(), want_max, err_msg=name)
        np.testing.assert_array_equal(less.numpy(), a < b, err_msg=name)
        np.testing.assert_array_equal(eq.numpy(), b == a, err_msg=name)
    for small in (np.int16, np.int32):
        got = df.constant(a.astype(small)) * df.constant(b)
        assert got.dtype is df.float64
        np.testing.assert_array_equal(got.numpy(), a.astype(small) * b)
    # int64 with uint64: numpy compares exactly (2**62 + 1 < 2**62 is False, == False); float64
    # cannot, so comparing them asks for a cast, and arithmetic is float64 as numpy's
    x, y = np.array([2**62 + 1], np.int64), np.array([2**62], np.uint64)
    with pytest.raises(df.errors.InvalidArgumentError, match="int64 with uint64"):
        df.equal(df.constant(x), df.constant(y))
    assert (df.constant(x) - df.constant(y)).dtype is df.float64
