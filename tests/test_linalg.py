"""df.linalg beyond the op table: the composite functions (trace, matrix_transpose, and the
numeric `outer`), typed errors for singular / non-square / non-SPD input (eagerly, at trace
time and when a traced function runs), gradient limits, and the decompositions' defining
properties. The ops' values, inference, gradients (first and second order), graphs and JSON
are checked by the op table (tests/op_rows_linalg.py).
"""
import json

import numpy as np
import pytest

import defun as df
from opcheck import (SymbolicBuilder, SymbolicTensor, as_numpy, assert_same, check_gradient,
                     check_second_order)
from defun.runtime import dtypes

IAE = df.errors.InvalidArgumentError
la = df.linalg
rng = np.random.default_rng(0)


def _signature(xs, unknown):
    return [df.TensorSpec([None] * x.ndim if unknown else x.shape, df.as_dtype(x.dtype)) for x in xs]


def check_composite(fn, ref, xs, second=True):
    """What the op table checks for an op, for a function composed of other ops: numpy
    reference (float32 and float64), gradients against finite differences (first and second
    order), defun against eager (static and unknown sizes), the JSON round trip."""
    for dt in (np.float32, np.float64):
        args = [x.astype(dt) for x in xs]
        assert_same(fn(*[df.constant(a) for a in args]), ref(*args), f"{fn} {dt.__name__}")
    x64 = [x.astype(np.float64) for x in xs]
    wrt = list(range(len(xs)))
    check_gradient(fn, x64, wrt)
    if second:
        check_second_order(fn, x64, wrt, rtol=1e-4, atol=1e-5)
    eager = as_numpy(fn(*[df.constant(x) for x in x64]))
    for unknown in (False, True):
        traced = df.defun(fn, input_signature=_signature(x64, unknown))
        np.testing.assert_array_equal(as_numpy(traced(*x64)), eager)
        doc = json.loads(json.dumps(df.export_json(traced.get_concrete_function())))
        np.testing.assert_array_equal(as_numpy(df.load_json(doc)(*x64)), eager)


# ---------------------------------------------------------------------------------------
# Composites

@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 4), (2, 1, 4, 2)])
def test_trace(shape):
    check_composite(la.trace, lambda a: np.trace(a, axis1=-2, axis2=-1), [rng.normal(size=shape)])


@pytest.mark.parametrize("shape", [(3, 3), (2, 3), (2, 3, 4), (2, 1, 4, 2)])
def test_matrix_transpose(shape):
    check_composite(la.matrix_transpose, lambda a: np.swapaxes(a, -1, -2), [rng.normal(size=shape)])


@pytest.mark.parametrize("sa,sb", [((3,), (4,)), ((2, 2), (3,)), ((), (2,)), ((1,), (1,))])
def test_outer_flattens_like_numpy(sa, sb):
    check_composite(df.outer, np.outer, [rng.normal(size=sa), rng.normal(size=sb)])


def test_matrix_transpose_needs_a_matrix():
    with pytest.raises(IAE, match="matrix_transpose.*rank >= 2"):
        la.matrix_transpose(df.constant([1., 2.]))


# ---------------------------------------------------------------------------------------
# Typed errors: eagerly, at trace time (inference) and inside a running graph

def _singular(*batch):
    a = np.tile(np.array([[1., 2.], [2., 4.]]), batch + (1, 1))
    return a


def _batch_with_one_bad(good, bad, index=1):
    out = np.stack([good] * 3)
    out[index] = bad
    return out


SPD = np.array([[2., 0.5], [0.5, 1.]])
NOT_SPD = np.array([[1., 2.], [2., 1.]])    # eigenvalues 3 and -1

# (id, function, inputs, strings the message must hold)
VALUE_ERRORS = [
    ("inv_singular", la.inv, [_singular()], ["inv", "singular"]),
    ("inv_singular_in_batch", la.inv, [_batch_with_one_bad(np.eye(2), _singular())],
     ["inv", "batch index (1,)", "singular"]),
    ("solve_singular", la.solve, [_singular(), np.ones((2, 1))], ["solve", "singular"]),
    ("solve_singular_in_batch", la.solve, [_batch_with_one_bad(np.eye(2), _singular(), 2), np.ones((2, 1))],
     ["solve", "batch index (2,)", "singular"]),
    ("triangular_solve_zero_diagonal", la.triangular_solve, [np.array([[1., 0.], [3., 0.]]), np.ones((2, 1))],
     ["triangular_solve", "singular", "diagonal entry 1"]),
    ("triangular_solve_zero_diagonal_batch", lambda a, b: la.triangular_solve(a, b, lower=False),
     [_batch_with_one_bad(np.eye(2), np.array([[0., 5.], [0., 1.]]), 0), np.ones((3, 2, 1))],
     ["triangular_solve", "batch index (0,)", "diagonal entry 0"]),
    ("cholesky_not_spd", la.cholesky, [NOT_SPD], ["cholesky", "not symmetric positive definite"]),
    ("cholesky_not_spd_in_batch", la.cholesky, [_batch_with_one_bad(SPD, NOT_SPD)],
     ["cholesky", "batch index (1,)", "positive definite", "jitter"]),
]

SHAPE_ERRORS = [
    ("inv_non_square", la.inv, [np.ones((2, 3))], ["inv", "square", "(2, 3)"]),
    ("inv_vector", la.inv, [np.ones(3)], ["inv", "rank >= 2", "(3,)"]),
    ("cholesky_non_square", la.cholesky, [np.ones((2, 3, 2))], ["cholesky", "square", "(2, 3, 2)"]),
    ("det_non_square", la.det, [np.ones((3, 2))], ["det", "square"]),
    ("slogdet_non_square", la.slogdet, [np.ones((3, 2))], ["slogdet", "square"]),
    ("eigh_non_square", la.eigh, [np.ones((3, 2))], ["eigh", "square"]),
    ("solve_non_square", la.solve, [np.ones((2, 3)), np.ones((2, 1))], ["solve", "square", "(2, 3)"]),
    ("solve_rows", la.solve, [np.eye(3), np.ones((2, 1))], ["solve", "rows", "3", "2"]),
    ("solve_rhs_vector", la.solve, [np.eye(2), np.ones(2)], ["solve", "rhs", "rank >= 2"]),
    ("solve_batch", la.solve, [np.ones((2, 3, 3)), np.ones((4, 3, 1))], ["solve", "broadcast"]),
    ("triangular_solve_rows", la.triangular_solve, [np.eye(3), np.ones((4, 1))],
     ["triangular_solve", "rows"]),
    ("svd_vector", la.svd, [np.ones(3)], ["svd", "rank >= 2"]),
    ("qr_vector", la.qr, [np.ones(3)], ["qr", "rank >= 2"]),
    ("diag_scalar", la.diag, [np.float64(1.)], ["diag", "scalar"]),
    ("diag_part_vector", la.diag_part, [np.ones(3)], ["diag_part", "rank >= 2"]),
    ("band_part_vector", lambda x: la.band_part(x, 0, 0), [np.ones(3)], ["band_part", "rank >= 2"]),
    ("inv_float16", la.inv, [np.eye(2, dtype=np.float16)], ["inv", "float16", "float32 or float64"]),
    ("cholesky_int", la.cholesky, [np.eye(2, dtype=np.int32)], ["cholesky", "int32"]),
    ("solve_dtypes", la.solve, [np.eye(2), np.ones((2, 1), np.float32)], ["solve", "float64", "float32"]),
]


def _says(exc, says):
    msg = str(exc)
    for s in says:
        assert s in msg, f"error message {msg!r} should mention {s!r}"
    assert "LinAlgError" not in msg and not isinstance(exc.__cause__, np.linalg.LinAlgError), \
        f"numpy's LinAlgError leaked: {msg!r}"


@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in VALUE_ERRORS + SHAPE_ERRORS])
def test_eager_error_names_the_op(case):
    _, fn, inputs, says = case
    with pytest.raises(IAE) as info:
        fn(*[df.constant(x) for x in inputs])
    _says(info.value, says)


@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in SHAPE_ERRORS])
def test_trace_time_error_names_the_op(case):
    """Shapes and dtypes are refused by inference, as a trace builds the node."""
    _, fn, inputs, says = case
    builder = SymbolicBuilder()
    with builder.building():
        args = [SymbolicTensor(np.shape(x), dtypes.from_numpy(np.asarray(x).dtype)) for x in inputs]
        with pytest.raises(IAE) as info:
            fn(*args)
    _says(info.value, says)


@pytest.mark.parametrize("unknown", [False, True], ids=["static", "unknown_sizes"])
@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in VALUE_ERRORS])
def test_running_graph_error_names_the_op(case, unknown):
    """Values only a kernel sees: the trace succeeds, running the graph raises the typed error
    naming the node's op (and with unknown sizes the kernel's own shape checks do too)."""
    _, fn, inputs, says = case
    traced = df.defun(fn, input_signature=_signature([np.asarray(x) for x in inputs], unknown))
    with pytest.raises(IAE) as info:
        traced(*inputs)
    assert "while executing" in str(info.value)
    _says(info.value, says)


@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in SHAPE_ERRORS
                                  if "square" in c[3] or "rows" in c[3]])
def test_kernel_checks_shapes_unknown_while_tracing(case):
    """Traced with every size unknown, a bad shape reaches the kernel, which names the op."""
    _, fn, inputs, says = case
    traced = df.defun(fn, input_signature=_signature([np.asarray(x) for x in inputs], True))
    with pytest.raises(IAE) as info:
        traced(*inputs)
    _says(info.value, says)


def test_singular_matrix_gradients_fail_typed():
    """det of a singular matrix is 0 (no error) and has a gradient, the adjugate (issue 19;
    tests/test_outside_references.py); log|det| is -inf there and its gradient, which needs
    the inverse, fails typed."""
    a = df.constant(_singular())
    assert float(la.det(a)) == 0.0
    sign, logdet = la.slogdet(a)
    assert float(sign) == 0.0 and float(logdet) == -np.inf
    with df.GradientTape(persistent=True) as tape:
        tape.watch(a)
        d = la.det(a)
        _, logdet = la.slogdet(a)
    g = as_numpy(tape.gradient(d, a))
    assert np.all(np.isfinite(g)) and np.allclose(g @ _singular().T, 0.0, atol=1e-9)   # A adj(A) = det(A) I = 0
    with pytest.raises(IAE, match="inv: the matrix is singular"):
        tape.gradient(logdet, a)


def test_full_matrices_gradients_of_non_square_factors_are_unimplemented():
    x = df.constant(rng.normal(size=(4, 2)))
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        s, u, v = la.svd(x, full_matrices=True)
        q, r = la.qr(x, full_matrices=True)
        sum_u, sum_q, sum_s = df.reduce_sum(u), df.reduce_sum(q), df.reduce_sum(s)
    with pytest.raises(df.errors.UnimplementedError, match="svd.*full_matrices=True"):
        tape.gradient(sum_u, x)
    with pytest.raises(df.errors.UnimplementedError, match="qr.*full_matrices=True"):
        tape.gradient(sum_q, x)
    # the singular values alone do not depend on the extra columns: their gradient exists
    np.testing.assert_allclose(as_numpy(tape.gradient(sum_s, x)),
                               as_numpy(_grad_of_sum_of_singular_values(x)), rtol=1e-12)


def _grad_of_sum_of_singular_values(x):
    with df.GradientTape() as tape:
        tape.watch(x)
        total = df.reduce_sum(la.svd(x, compute_uv=False))
    return tape.gradient(total, x)


# ---------------------------------------------------------------------------------------
# Defining properties of the results (beyond agreeing with numpy)

def test_decompositions_reconstruct_their_input():
    a = rng.normal(size=(2, 4, 3))
    s, u, v = (as_numpy(t) for t in la.svd(a))
    np.testing.assert_allclose(u @ (s[..., :, None] * np.swapaxes(v, -1, -2)), a, atol=1e-12)
    assert np.all(np.diff(s, axis=-1) <= 0), "singular values are descending"
    q, r = (as_numpy(t) for t in la.qr(a))
    np.testing.assert_allclose(q @ r, a, atol=1e-12)
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(3), (2, 3, 3)), atol=1e-12)
    assert np.allclose(np.tril(r, -1), 0)
    sym = a @ np.swapaxes(a, -1, -2) + np.eye(4)
    e, vecs = (as_numpy(t) for t in la.eigh(sym))
    assert np.all(np.diff(e, axis=-1) > 0), "eigenvalues are ascending"
    np.testing.assert_allclose(vecs @ (e[..., :, None] * np.swapaxes(vecs, -1, -2)), sym, atol=1e-10)
    low = as_numpy(la.cholesky(sym))
    np.testing.assert_allclose(low @ np.swapaxes(low, -1, -2), sym, atol=1e-12)
    assert np.allclose(np.triu(low, 1), 0)
    sign, logdet = (as_numpy(t) for t in la.slogdet(sym))
    np.testing.assert_allclose(sign * np.exp(logdet), as_numpy(la.det(sym)), rtol=1e-10)


def test_cholesky_and_eigh_read_only_the_lower_triangle():
    sym = SPD.copy()
    garbage = sym.copy()
    garbage[0, 1] = 1e6
    assert_same(la.cholesky(garbage), np.linalg.cholesky(sym))
    assert_same(la.eigh(garbage)[0], np.linalg.eigh(sym)[0])


def test_triangular_solve_ignores_the_other_triangle():
    a = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    b = rng.normal(size=(3, 2))
    assert_same(la.triangular_solve(a, b), np.linalg.solve(np.tril(a), b))
    assert_same(la.triangular_solve(a, b, lower=False, adjoint=True), np.linalg.solve(np.triu(a).T, b),
                tol=(1e-12, 1e-12))


def test_gaussian_log_likelihood_gradient_through_cholesky_solve_slogdet():
    """The building blocks of examples/gaussian_process.py, against finite differences:
    -log N(y; 0, K(theta)) with K from a squared-exponential kernel."""
    x = rng.normal(size=(6, 2))
    y = rng.normal(size=(6, 1))

    def nll(log_params):
        ell, sf2, sn2 = df.exp(log_params[0]), df.exp(log_params[1]), df.exp(log_params[2])
        z = df.constant(x) / ell
        sq = df.reduce_sum(z * z, axis=1)
        d2 = df.maximum(sq[:, None] + sq[None, :] - 2.0 * (z @ z.T), 0.0)
        k = sf2 * df.exp(-0.5 * d2) + sn2 * np.eye(6)
        low = la.cholesky(k)
        w = la.triangular_solve(low, df.constant(y))
        return 0.5 * df.reduce_sum(w * w) + 0.5 * la.slogdet(k)[1]

    params = np.log(np.array([1.3, 0.8, 0.2]))
    check_gradient(nll, [params], [0])
    check_second_order(nll, [params], [0], rtol=1e-4, atol=1e-6)
    k = 0.8 * np.exp(-0.5 * ((x[:, None] - x[None]) ** 2).sum(-1) / 1.3 ** 2) + 0.2 * np.eye(6)
    ref = 0.5 * (y.T @ np.linalg.solve(k, y)).item() + 0.5 * np.linalg.slogdet(k)[1]
    np.testing.assert_allclose(float(nll(df.constant(params))), ref, rtol=1e-12)


@pytest.mark.parametrize("n,k,batch", [(200, 3, ()), (150, 150, (2,)), (65, 1, ()), (130, 5, (2, 1))])
def test_blocked_triangular_solve_of_large_matrices_matches_scipy(n, k, batch):
    """Above 64 rows triangular_solve substitutes block by block (the op table's matrices are
    small); against scipy's LAPACK triangular solver, every triangle and transpose."""
    import scipy.linalg
    a = rng.normal(size=batch + (n, n)) + 3 * np.sqrt(n) * np.eye(n)
    b = rng.normal(size=batch + (n, k))
    for lower in (True, False):
        for adjoint in (False, True):
            got = as_numpy(la.triangular_solve(a, b, lower=lower, adjoint=adjoint))
            for idx in np.ndindex(batch):
                want = scipy.linalg.solve_triangular(a[idx], b[idx], lower=lower, trans=1 if adjoint else 0)
                np.testing.assert_allclose(got[idx], want, rtol=1e-10, atol=1e-13)
    low = np.tril(a[(0,) * len(batch)]).astype(np.float32)
    np.testing.assert_allclose(as_numpy(la.triangular_solve(low, b[(0,) * len(batch)].astype(np.float32))),
                               np.linalg.solve(low, b[(0,) * len(batch)]), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("ord,axis", [("euclidean", None), (1, -1), (np.inf, [0, 1]), ("fro", [0, 1])])
def test_linalg_norm_is_tf_norm(ord, axis):
    """df.linalg.norm is df.norm (tf.linalg.norm is tf.norm), against numpy."""
    x = np.array([[3.0, -4.0, 1.0], [0.5, 2.0, -2.0]])
    got = df.linalg.norm(df.constant(x), ord=ord, axis=axis).numpy()
    want = np.linalg.norm(x.reshape(-1)) if axis is None else \
        np.linalg.norm(x, ord, axis=tuple(axis) if isinstance(axis, list) else axis)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert df.linalg.norm is df.norm
