"""What the op table cannot say about the math, reduction, sorting, einsum and scatter ops:
error messages naming the op (eagerly, traced, and when a loaded graph runs), einsum's
equation variety and shape inference, tie orders, erf's accuracy, stability at +-1000,
gradients at zeros and at the bounds, and gather with batch_dims through defun."""
import json

import numpy as np
import pytest
import scipy.special

import defun as df
from opcheck import check_gradient, check_second_order, infer_of
from op_rows_scatter import batch_gather_ref
from defun_helpers import nested_gradients

IAE = df.errors.InvalidArgumentError
f32, f64, i32, i64 = df.float32, df.float64, df.int32, df.int64


def grad_of(fn, *xs):
    ts = [df.constant(x) for x in xs]
    with df.GradientTape() as tape:
        tape.watch(ts)
        y = fn(*ts)
    return [None if g is None else np.asarray(g) for g in tape.gradient(y, ts)]


def loaded(fn, *signature):
    """fn traced with `signature`, exported to JSON text and loaded back."""
    cf = df.defun(fn, input_signature=list(signature)).get_concrete_function()
    return df.load_json(json.loads(json.dumps(df.export_json(cf))))


# ---------------------------------------------------------------------------------------
# Errors: typed, naming the op (and for einsum the equation), never a numpy message

ONES = np.ones((2, 3), np.float32)

TRACE_TIME = [  # (fn, inputs, strings the message holds); raised eagerly and while tracing alike
    (lambda a, b: df.einsum("ij,jk->ik", a, b), [ONES, np.ones((4, 2), np.float32)],
     ["einsum", "'ij,jk->ik'", "label 'j'", "size 3", "size 4"]),
    (lambda a: df.einsum("i2->i", a), [ONES], ["einsum", "'i2->i'", "'2'"]),
    (lambda a: df.einsum("ij,jk->ik", a), [ONES], ["einsum", "2 input subscripts but 1 operand"]),
    (lambda a: df.einsum("ijk->i", a), [ONES], ["einsum", "'ijk->i'", "rank 2", "3 axes"]),
    (lambda a: df.einsum("ij->ik", a), [ONES], ["einsum", "'k' does not appear"]),
    (lambda a: df.einsum("ij->ii", a), [ONES], ["einsum", "'i' appears more than once"]),
    (lambda a: df.einsum("...j->j", a), [ONES], ["einsum", "'...' axes", "output"]),
    (lambda a, b: df.einsum("...i,...i->...", a, b), [ONES, np.ones((4, 3), np.float32)],
     ["einsum", "do not broadcast"]),
    (lambda a, b: df.einsum("ij,jk->ik", a, b), [ONES, np.ones((3, 2))], ["einsum", "float32", "float64"]),
    (lambda a: df.einsum("ij->i->j", a), [ONES], ["einsum", "more than one '->'"]),
    (lambda a, b: df.tensordot(a, b, [[1], [1]]), [ONES, np.ones((2, 2), np.float32)],
     ["tensordot", "axis 1", "size 3", "size 2"]),
    (lambda a, b: df.tensordot(a, b, 3), [ONES, ONES], ["tensordot", "axes=3"]),
    (lambda a: df.top_k(a, 4), [ONES], ["top_k", "k=4"]),
    (lambda a: df.sort(a, direction="UP"), [ONES], ["sort", "'UP'"]),
    (lambda a: df.argsort(a, axis=2), [ONES], ["argsort", "axis 2"]),
    (lambda a: df.cumsum(a, axis=-3), [ONES], ["cumsum", "axis -3"]),
    (lambda a: df.cumprod(a), [np.float32(1)], ["cumprod", "scalar"]),
    (lambda a: df.norm(a, ord="fro"), [ONES], ["norm", "'fro'", "vectors"]),
    (lambda a: df.norm(a, ord=-1, axis=1), [ONES], ["norm", "positive"]),
    (lambda a: df.norm(a, axis=(0, 0)), [ONES], ["norm", "must differ"]),
    (lambda a: df.reduce_logsumexp(a), [np.ones(3, np.int32)], ["reduce_logsumexp", "int32"]),
    (lambda a: df.reduce_any(a), [ONES], ["reduce_any", "float32", "bool"]),
    (lambda a: df.erf(a), [np.ones(3, np.int32)], ["erf", "int32"]),
    (lambda a, lo: df.clip_by_value(a, lo, 1.0), [np.ones(3, np.float32), np.zeros((2, 3), np.float32)],
     ["clip_by_value", "(2, 3)", "(3,)"]),
    (lambda a, i: df.gather_nd(a, i), [ONES, np.zeros((2, 3), np.int32)], ["gather_nd", "3 axes", "only 2"]),
    (lambda a, i: df.gather_nd(a, i), [ONES, np.zeros((2, 1), np.float32)], ["gather_nd", "indices", "float32"]),
    (lambda i, u: df.scatter_nd(i, u, [4, 3]), [np.zeros((2, 1), np.int32), np.ones((2, 2), np.float32)],
     ["scatter_nd", "(2, 3)", "(2, 2)"]),
    (lambda d, s: df.segment_sum(d, s), [ONES, np.zeros(3, np.int32)], ["segment_sum", "(3,)", "(2, 3)"]),
    (lambda d, s: df.unsorted_segment_sum(d, s, 2), [ONES, np.zeros((3,), np.int32)],
     ["unsorted_segment_sum", "prefix"]),
    (lambda p, i: df.gather(p, i, axis=1, batch_dims=1), [ONES, np.zeros((3, 1), np.int32)],
     ["gather", "batch_dims=1", "first 1 sizes"]),
    (lambda p, i: df.gather(p, i, axis=0, batch_dims=1), [ONES, np.zeros((2, 1), np.int32)],
     ["gather", "batch_dims=1", "axis (0)"]),
]


@pytest.mark.parametrize("mode", ["eager", "traced"])
@pytest.mark.parametrize("k", range(len(TRACE_TIME)))
def test_errors_name_the_op(k, mode):
    fn, inputs, says = TRACE_TIME[k]
    with pytest.raises(IAE) as info:
        if mode == "eager":
            fn(*[df.constant(x) for x in inputs])
        else:  # static shapes: inference refuses while tracing, before anything runs
            sig = [df.TensorSpec(np.shape(x), df.as_dtype(np.asarray(x).dtype)) for x in inputs]
            df.defun(fn, input_signature=sig).get_concrete_function()
    for s in says:
        assert s in str(info.value), f"{str(info.value)!r} should mention {s!r}"


def test_norm_of_a_matrix_with_ord_2_is_unimplemented():
    with pytest.raises(df.errors.UnimplementedError, match="norm: ord=2 of a matrix"):
        df.norm(ONES, ord=2, axis=(0, 1))


RUN_TIME = [  # values only a kernel sees: raised eagerly, by the traced graph and by the loaded one
    ("gather_nd", lambda p, i: df.gather_nd(p, i), [ONES, np.array([[1, 0], [2, 1]], np.int32)],
     ["gather_nd", "[2, 1]", "indices[1]", "(2, 3)"]),
    ("gather_nd_negative", lambda p, i: df.gather_nd(p, i), [ONES, np.array([[-1]], np.int64)],
     ["gather_nd", "[-1]", "out of range"]),
    ("scatter_nd", lambda i, u: df.scatter_nd(i, u, [4]), [np.array([[1], [4]], np.int32), np.ones(2, np.float32)],
     ["scatter_nd", "[4]", "indices[1]", "(4,)"]),
    ("segment_sum_unsorted", lambda d, s: df.segment_sum(d, s), [np.ones(3, np.float32), np.array([0, 2, 1], np.int32)],
     ["segment_sum", "sorted", "segment_ids[2] = 1", "unsorted_segment_sum"]),
    ("segment_sum_negative", lambda d, s: df.segment_sum(d, s), [np.ones(2, np.float32), np.array([-1, 0], np.int32)],
     ["segment_sum", "-1", "negative"]),
    ("unsorted_segment_sum", lambda d, s: df.unsorted_segment_sum(d, s, 2),
     [np.ones(3, np.float32), np.array([0, 2, 1], np.int32)], ["unsorted_segment_sum", "segment id 2", "[0, 2)"]),
    ("batch_gather", lambda p, i: df.gather(p, i, axis=1, batch_dims=1), [ONES, np.array([[0], [3]], np.int32)],
     ["gather", "index 3", "[0, 3)"]),
    ("einsum_sizes", lambda a, b: df.einsum("ij,jk->ik", a, b), [ONES, np.ones((4, 2), np.float32)],
     ["einsum", "label 'j'"]),
    ("top_k", lambda a: df.top_k(a, 4)[0], [ONES], ["top_k", "k=4"]),
]


@pytest.mark.parametrize("case", RUN_TIME, ids=[c[0] for c in RUN_TIME])
def test_run_time_errors_name_the_op_eagerly_traced_and_loaded(case):
    _, fn, inputs, says = case
    unknown = [df.TensorSpec([None] * np.ndim(x), df.as_dtype(np.asarray(x).dtype)) for x in inputs]
    if "gather_nd" in case[0] or case[0] == "scatter_nd":   # the index depth stays static
        unknown = [df.TensorSpec([None] * (np.ndim(x) - 1) + [np.shape(x)[-1]], df.as_dtype(np.asarray(x).dtype))
                   if np.asarray(x).dtype.kind == "i" else s for x, s in zip(inputs, unknown)]
    runs = {"eager": lambda: fn(*[df.constant(x) for x in inputs]),
            "traced": lambda: df.defun(fn, input_signature=unknown)(*inputs),
            "loaded": lambda: loaded(fn, *unknown)(*inputs)}
    for mode, run in runs.items():
        with pytest.raises(IAE) as info:
            run()
        msg = str(info.value)
        for s in says:
            assert s in msg, f"{mode}: {msg!r} should mention {s!r}"
        if mode != "eager":
            assert "while executing" in msg, msg
        assert "IndexError" not in msg and not isinstance(info.value.__cause__, IndexError), msg


def test_gather_nd_needs_a_static_index_depth_while_tracing():
    fn = df.defun(df.gather_nd, input_signature=[df.TensorSpec([None, None], f32), df.TensorSpec([None, None], i32)])
    with pytest.raises(IAE, match="gather_nd: the last axis of indices .* is unknown while tracing"):
        fn.get_concrete_function()
    fn = df.defun(df.gather_nd, input_signature=[df.TensorSpec([None, None], f32), df.TensorSpec([None, 2], i32)])
    cf = fn.get_concrete_function()
    assert tuple(cf.outputs[0].shape) == (None,)
    params = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(fn(params, np.array([[1, 2], [0, 0], [1, 0]], np.int32)), [5., 0., 3.])


# ---------------------------------------------------------------------------------------
# einsum

EQUATIONS = [  # (equation, shapes): against np.einsum, forward and gradients
    ("ij,jk->ik", [(3, 4), (4, 2)]), ("ij,jk", [(3, 4), (4, 2)]), (" ij , jk -> ki ", [(3, 4), (4, 2)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("...ij->...ji", [(2, 1, 3, 4)]), ("ii->", [(4, 4)]), ("ii->i", [(4, 4)]),
    ("ii", [(3, 3)]), ("i,j->ij", [(3,), (4,)]), ("i,j", [(3,), (4,)]), ("ba", [(3, 4)]), ("Ba,aB", [(3, 4), (4, 3)]),
    ("...ij,...jk->...ik", [(4, 1, 3, 2), (5, 2, 3)]), ("...ij,...jk", [(1, 3, 2), (4, 2, 3)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("ab,bc,cd,de->ae", [(2, 3), (3, 4), (4, 3), (3, 2)]),
    ("i,i,i->i", [(5,), (5,), (5,)]), ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 3)]), ("iij,jk->ik", [(3, 3, 2), (2, 4)]),
    ("i...,...i->...", [(3, 2), (2, 3)]), ("...,...->...", [(2, 3), (3,)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ijij->ij", [(2, 3, 2, 3)]), ("", [()]), ("i->", [(0,)]), ("ij,jk->ik", [(3, 0), (0, 2)]),
]


@pytest.mark.parametrize("equation,shapes", EQUATIONS, ids=[e or "scalar" for e, _ in EQUATIONS])
def test_einsum_matches_numpy_with_gradients(equation, shapes):
    rng = np.random.default_rng(7)
    xs = [rng.normal(size=s) for s in shapes]
    out = df.einsum(equation, *[df.constant(x) for x in xs])
    want = np.einsum(equation, *xs)
    assert out.shape == want.shape
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)
    if sum(x.size for x in xs) <= 40:
        check_gradient(lambda *ts: df.einsum(equation, *ts), xs, list(range(len(xs))))


def test_einsum_second_order_through_a_trace_and_broadcast_batch():
    rng = np.random.default_rng(3)
    check_second_order(lambda a: df.einsum("ii->", df.einsum("ij,kj->ik", a, a)), [rng.normal(size=(2, 3))], [0])
    check_second_order(lambda a, b: df.einsum("...ij,...jk->...ik", a, b),
                       [rng.normal(size=(1, 2, 2)), rng.normal(size=(2, 2, 2))], [0, 1])


def test_einsum_static_inference_with_unknown_sizes():
    eq = "...ij,...jk->...ik"
    assert infer_of("einsum", [((None, 2, 3), f32), ((4, 3, None), f32)], {"equation": eq}) == [((4, 2, None), f32)]
    assert infer_of("einsum", [((None, None), f32), ((None, 5), f32)], {"equation": "ij,jk->ik"}) == [((None, 5), f32)]
    assert infer_of("einsum", [((None, 3), f64)], {"equation": "ii->i"}) == [((3,), f64)]
    # a size known in one operand fixes the label everywhere; a contradiction is an error
    with pytest.raises(IAE, match="label 'j' has size 3"):
        infer_of("einsum", [((None, 3), f32), ((4, None), f32)], {"equation": "ij,jk->ik"})


def test_einsum_traced_with_unknown_sizes_broadcasts_at_run_time():
    """'...' axes of size 1 against 3 are only seen when the graph runs; values and
    gradients still match eager ones (the gradient sums the broadcast axis)."""
    spec = df.TensorSpec([None, None, None], f64)
    a, b = np.random.default_rng(0).normal(size=(1, 2, 3)), np.random.default_rng(1).normal(size=(3, 3, 2))

    def f(x, y):
        with df.GradientTape() as tape:
            tape.watch([x, y])
            z = df.einsum("...ij,...jk->...ik", x, y)
            loss = df.reduce_sum(df.square(z))
        return [z] + tape.gradient(loss, [x, y])
    traced = df.defun(f, input_signature=[spec, spec])
    eager = f(df.constant(a), df.constant(b))
    for t, e in zip(traced(a, b), eager):
        np.testing.assert_allclose(np.asarray(t), np.asarray(e), rtol=1e-12)
    assert np.asarray(eager[1]).shape == (1, 2, 3)
    assert tuple(traced.get_concrete_function(a, b).outputs[0].shape) == (None, None, None)


def test_einsum_canonical_equation_is_explicit_and_exported():
    cf = df.defun(lambda a, b: df.einsum("ij,jk", a, b)).get_concrete_function(ONES, ONES.T)
    doc = df.export_json(cf)
    assert '"ij,jk->ik"' in json.dumps(doc)
    np.testing.assert_allclose(np.asarray(df.load_json(doc)(ONES, ONES.T)), ONES @ ONES.T)
    # implicit output: the labels used once, in alphabetical (ASCII: upper case first) order
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(df.einsum("ba", x), x.T)
    np.testing.assert_array_equal(df.einsum("bB", x), np.einsum("bB", x))


TENSORDOTS = [((2, 3, 4), (3, 4, 2), 2), ((2, 3, 4), (4, 2), 1), ((2, 3, 4), (3,), 0),
              ((2, 3, 4), (4, 3, 2), [[1, 2], [1, 0]]), ((2, 3, 4), (3, 3), [1, 0]), ((2, 3, 4), (2, 5), ([0], [0])),
              ((2, 3, 4), (4, 3, 2), np.array([[2], [0]]))]


@pytest.mark.parametrize("sa,sb,axes", TENSORDOTS)
def test_tensordot_matches_numpy(sa, sb, axes):
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=sa), rng.normal(size=sb)
    want = np.tensordot(a, b, axes.tolist() if isinstance(axes, np.ndarray) else axes)
    np.testing.assert_allclose(df.tensordot(a, b, axes).numpy(), want, rtol=1e-12)


# ---------------------------------------------------------------------------------------
# sorting: ties and gradients

def test_top_k_ties_go_to_the_lower_index():
    x = np.array([[1., 3., 3., 2., 3.], [0., 0., 0., 0., 0.]])
    values, indices = df.top_k(x, 3)
    np.testing.assert_array_equal(indices.numpy(), [[1, 2, 4], [0, 1, 2]])
    np.testing.assert_array_equal(values.numpy(), [[3., 3., 3.], [0., 0., 0.]])
    assert indices.dtype is i32
    # ints, including the smallest int32 (descending order never negates)
    small = np.array([np.iinfo(np.int32).min, 5, np.iinfo(np.int32).min, 7], np.int32)
    np.testing.assert_array_equal(df.top_k(small, 4)[1].numpy(), [3, 1, 0, 2])
    # the gradient reaches exactly the selected positions
    g = grad_of(lambda t: df.reduce_sum(df.top_k(t, 2)[0] * df.constant([[10., 1.], [10., 1.]], f64)), x)[0]
    np.testing.assert_array_equal(g, [[0., 10., 1., 0., 0.], [10., 1., 0., 0., 0.]])


def test_argsort_and_sort_are_stable_both_ways():
    x = np.array([2, 1, 2, 0, 1, 2], np.int64)
    np.testing.assert_array_equal(df.argsort(x).numpy(), [3, 1, 4, 0, 2, 5])
    np.testing.assert_array_equal(df.argsort(x, direction="DESCENDING").numpy(), [0, 2, 5, 1, 4, 3])
    np.testing.assert_array_equal(df.sort(x, direction="DESCENDING").numpy(), [2, 2, 2, 1, 1, 0])
    m = np.array([[3., 1.], [1., 2.], [2., 0.]])
    np.testing.assert_array_equal(df.sort(m, axis=0).numpy(), np.sort(m, axis=0))
    g = grad_of(lambda t: df.reduce_sum(df.sort(t, axis=0) * df.constant([[1.], [2.], [3.]], f64)), m)[0]
    np.testing.assert_array_equal(g, [[3., 2.], [1., 3.], [2., 1.]])


def test_top_k_checks_k_when_the_size_is_unknown_until_run_time():
    f = df.defun(lambda x: df.top_k(x, 3), input_signature=[df.TensorSpec([None, None], f32)])
    v, i = f(np.ones((2, 4), np.float32))
    assert v.shape == (2, 3) and tuple(f.get_concrete_function().outputs[0].shape) == (None, 3)
    with pytest.raises(IAE, match="top_k: k=3"):
        f(np.ones((2, 2), np.float32))


# ---------------------------------------------------------------------------------------
# accuracy and stability

def test_erf_is_accurate_over_a_wide_range():
    rng = np.random.default_rng(0)
    mags = np.concatenate([10.0 ** rng.uniform(-300, 1.5, 20000), rng.uniform(0, 6, 20000)])
    x = mags * rng.choice([-1, 1], size=mags.size)
    got = df.erf(x).numpy()
    want = scipy.special.erf(x)
    rel = np.abs(got - want) / np.abs(want)
    assert rel.max() < 2e-15, f"max relative error {rel.max():.3g} at x={x[np.argmax(rel)]!r}"
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(df.erf(x32).numpy(), scipy.special.erf(x32.astype(np.float64)).astype(np.float32),
                               rtol=1e-6, atol=1e-45)
    special = df.erf(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310])).numpy()
    np.testing.assert_array_equal(special[:4], [0.0, -0.0, 1.0, -1.0])
    assert np.signbit(special[1]) and np.isnan(special[4])
    assert special[5] == scipy.special.erf(1e-310)


def test_gelu_keeps_its_tail_and_expm1_its_small_values():
    x = np.array([-30., -12., -5.])
    want = 0.5 * x * scipy.special.erfc(-x / np.sqrt(2))
    np.testing.assert_allclose(df.gelu(x).numpy(), want, rtol=1e-12)   # 1 + erf(x) would give 0
    tiny = np.array([1e-10, -3e-14, 1e-300])
    np.testing.assert_allclose(df.expm1(tiny).numpy(), tiny + tiny ** 2 / 2, rtol=1e-15)  # exp(x) - 1 is 1e-7 off
    assert df.expm1(np.float32(1e-8)).numpy() == np.float32(1e-8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softplus_and_logsumexp_are_stable_at_1000(dtype):
    x = np.array([-1000., 1000.], dtype)
    np.testing.assert_array_equal(df.softplus(x).numpy(), np.array([0., 1000.], dtype))
    np.testing.assert_array_equal(grad_of(df.softplus, x.astype(np.float64))[0], [0., 1.])
    big = np.array([[1000., 1000.], [-1000., -1000.], [1000., -1000.]], dtype)
    lse = df.reduce_logsumexp(big, axis=1).numpy()
    np.testing.assert_allclose(lse, np.array([1000 + np.log(2), -1000 + np.log(2), 1000.], dtype), rtol=1e-6)
    g = grad_of(lambda t: df.reduce_logsumexp(t, axis=1), big.astype(np.float64))[0]
    np.testing.assert_allclose(g, [[.5, .5], [.5, .5], [1., 0.]], atol=1e-15)
    assert df.reduce_logsumexp(np.array([-np.inf, -np.inf], dtype)).numpy() == -np.inf
    assert df.reduce_logsumexp(np.zeros((0,), dtype)).numpy() == -np.inf


def test_elu_and_softplus_second_order_is_finite_at_1000():
    x = np.array([-1000., 1000.])
    for f in (df.elu, df.softplus, df.gelu):
        t = df.constant(x)
        assert np.isfinite(np.asarray(nested_gradients(f, t)[1])).all(), f.__name__


# ---------------------------------------------------------------------------------------
# gradients at the awkward points

def test_cumprod_gradient_is_exact_with_zeros():
    x = np.array([2., 0., 3., 0., 5.])
    # d/dx_j sum_i prod_{k<=i} x_k, by brute force
    want = [sum(np.prod([x[k] for k in range(i + 1) if k != j]) for i in range(j, 5)) for j in range(5)]
    np.testing.assert_array_equal(grad_of(df.cumprod, x)[0], want)
    for kw in (dict(exclusive=True), dict(reverse=True), dict(exclusive=True, reverse=True)):
        check_gradient(lambda t: df.cumprod(t, **kw), [x], [0])
        check_second_order(lambda t: df.cumprod(t, **kw), [x], [0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ord,axis", [("euclidean", None), (1, None), (np.inf, None), (3, 1),
                                      ("fro", (0, 1)), (1, (0, 1)), (np.inf, (0, 1)), ("euclidean", 0)])
def test_norm_gradient_at_zero_is_zero(ord, axis):
    g = grad_of(lambda t: df.norm(t, ord=ord, axis=axis), np.zeros((2, 3)))[0]
    np.testing.assert_array_equal(g, np.zeros((2, 3)))


def test_clip_by_value_sends_the_gradient_to_whoever_is_the_result():
    x = np.array([-2., 0., 0.5, 1., 3.])
    lo, hi = np.array(0.), np.array([1., 1., 1., 1., 1.])
    w = df.constant([1., 2., 3., 4., 5.], f64)
    gx, glo, ghi = grad_of(lambda a, b, c: df.clip_by_value(a, b, c) * w, x, lo, hi)
    np.testing.assert_array_equal(gx, [0., 2., 3., 4., 0.])      # ties at the bounds stay with x
    np.testing.assert_array_equal(glo, 1.)                        # a broadcast bound sums its share
    np.testing.assert_array_equal(ghi, [0., 0., 0., 0., 5.])


def test_segment_sum_size_is_known_when_it_runs():
    f = df.defun(lambda d, s: df.segment_sum(d, s))
    cf = f.get_concrete_function(np.ones((4, 3), np.float32), np.array([0, 0, 1, 3], np.int32))
    assert tuple(cf.outputs[0].shape) == (None, 3)
    out = f(np.ones((4, 3), np.float32), np.array([0, 0, 1, 3], np.int32))
    np.testing.assert_array_equal(out.numpy(), [[2.] * 3, [1.] * 3, [0.] * 3, [1.] * 3])
    g = grad_of(lambda d: df.segment_sum(d, df.constant([0, 0, 2])) * df.constant([[1.], [2.], [3.]], f64),
                np.ones((3, 2)))[0]
    np.testing.assert_array_equal(g, [[1., 1.], [1., 1.], [3., 3.]])


def test_unsorted_segment_sum_drops_negative_ids_and_their_gradient():
    data = np.arange(8.).reshape(4, 2)
    out = df.unsorted_segment_sum(data, [1, -1, 1, 0], 3).numpy()
    np.testing.assert_array_equal(out, [[6., 7.], [4., 6.], [0., 0.]])
    w = df.constant([[1.], [2.], [3.]], f64)
    g = grad_of(lambda d: df.unsorted_segment_sum(d, df.constant([1, -1, 1, 0]), 3) * w, data)[0]
    np.testing.assert_array_equal(g, [[2., 2.], [0., 0.], [2., 2.], [1., 1.]])


def test_scatter_nd_adds_duplicates_and_its_gradient_gathers():
    out = df.scatter_nd([[1, 0], [1, 0], [0, 2]], [1., 2., 5.], [2, 3]).numpy()
    np.testing.assert_array_equal(out, [[0., 0., 5.], [3., 0., 0.]])
    w = df.constant([[1., 2.], [3., 4.]], f64)
    g = grad_of(lambda u: df.scatter_nd(df.constant([[1], [1], [0]]), u, [2, 2]) * w, np.ones((3, 2)))[0]
    np.testing.assert_array_equal(g, [[3., 4.], [3., 4.], [1., 2.]])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 0), (0,), (2,)])
def test_indices_of_depth_0_into_no_elements(dtype, shape):
    # each index of depth 0 names the whole tensor; the updates were summed after a reshape
    # to [-1, *shape], which no size fits for a shape of no elements: eagerly, in a defun and
    # in a relaxed trace, at 0, 1 and 2 indices; gather_nd's gradient is the same scatter-add
    relaxed = [df.TensorSpec([None, 0], i32), df.TensorSpec((None,) + shape, dtype)]
    scatter = lambda i, u: df.scatter_nd(i, u, shape)       # noqa: E731

    def grads(i, u):      # of scatter_nd (a gather_nd) and of gather_nd (a scatter-add)
        p = df.ones(shape, dtype)
        with df.GradientTape() as tape:
            tape.watch([u, p])
            y = df.reduce_sum(scatter(i, u) * 3.0) + df.reduce_sum(df.gather_nd(p, i) * u)
        return tape.gradient(y, [u, p])
    for k in (0, 1, 2):
        i, u = np.zeros((k, 0), np.int32), np.arange(k * np.prod(shape), dtype=dtype).reshape((k,) + shape)
        for fn in (scatter, df.defun(scatter), df.defun(scatter, input_signature=relaxed)):
            got = fn(i, u).numpy()
            assert got.dtype == dtype
            np.testing.assert_array_equal(got, u.sum(axis=0, dtype=dtype))
        for fn in (grads, df.defun(grads), df.defun(grads, input_signature=relaxed)):
            gu, gp = (g.numpy() for g in fn(df.constant(i), df.constant(u)))
            np.testing.assert_array_equal(gu, np.full(u.shape, 4.0, dtype))
            np.testing.assert_array_equal(gp, u.sum(axis=0, dtype=dtype))


# ---------------------------------------------------------------------------------------
# gather with batch_dims, as TensorFlow defines it

def test_gather_with_batch_dims_matches_a_loop_and_differentiates():
    rng = np.random.default_rng(5)
    params = rng.normal(size=(2, 3, 4))
    idx = np.array([[0, 2], [1, 1]], np.int32)
    for axis in (1, 2):
        idx_a = idx if axis == 1 else np.array([[3, 0], [1, 1]], np.int32)
        got = df.gather(params, idx_a, axis=axis, batch_dims=1).numpy()
        np.testing.assert_array_equal(got, batch_gather_ref(params, idx_a, axis, 1))
        check_gradient(lambda p: df.gather(p, df.constant(idx_a), axis=axis, batch_dims=1), [params], [0])
    # axis defaults to batch_dims; batch_dims=-1 counts from the rank of indices
    np.testing.assert_array_equal(df.gather(params, idx, batch_dims=-1).numpy(), batch_gather_ref(params, idx, 1, 1))
    # the gradient is dense (there are no whole rows to hand back)
    g = grad_of(lambda p: df.gather(p, df.constant(idx), batch_dims=1), params)[0]
    assert isinstance(g, np.ndarray) and g[0, 2].tolist() == [1.] * 4 and g[1, 1].tolist() == [2.] * 4


def test_gather_with_batch_dims_through_defun_with_unknown_sizes():
    spec = [df.TensorSpec([None, None, None], f64), df.TensorSpec([None, None], i32)]
    params, idx = np.arange(24.).reshape(2, 3, 4), np.array([[2], [0]], np.int32)

    def f(p, i):
        with df.GradientTape() as tape:
            tape.watch(p)
            y = df.gather(p, i, axis=2, batch_dims=1)
        return y, tape.gradient(df.reduce_sum(df.square(y)), p)
    traced, eager = df.defun(f, input_signature=spec)(params, idx), f(df.constant(params), df.constant(idx))
    for t, e in zip(traced, eager):
        np.testing.assert_array_equal(np.asarray(t), np.asarray(e))
    assert tuple(df.defun(f, input_signature=spec).get_concrete_function().outputs[0].shape) == (None, None, None)
    np.testing.assert_array_equal(loaded(lambda p, i: df.gather(p, i, axis=2, batch_dims=1), *spec)(params, idx),
                                  eager[0])


def test_plain_gather_keeps_its_op_and_sparse_gradient():
    with df.GradientTape() as tape:
        p = df.constant(np.ones((3, 2)))
        tape.watch(p)
        y = df.gather(p, [2, 0])
    assert isinstance(tape.gradient(y, p), df.IndexedSlices)
    cf = df.defun(lambda p: df.gather(p, [1], axis=None)).get_concrete_function(np.ones((3, 2)))
    assert "gather(" in str(cf) and "batch" not in str(cf)
