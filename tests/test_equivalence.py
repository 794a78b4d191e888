"""The equivalence suite: eager == defun == export/load, for values and gradients.

Composed programs are checked against a plain-numpy reference, eagerly, through defun
and (when the JSON export has landed) after `export_json` -> `load_json`; gradients are
checked eager vs defun vs central finite differences in float64. A hypothesis test
builds random programs from a table of ops and checks the same agreements.
"""
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import defun as df
from defun_helpers import assert_close, nested_gradients, numeric_grads, val

needs_export = pytest.mark.skipif(not (hasattr(df, "export_json") and hasattr(df, "load_json")),
                                  reason="df.export_json / df.load_json not landed yet")
needs_cond = pytest.mark.skipif(not hasattr(df, "cond"), reason="df.cond not landed yet")
needs_while = pytest.mark.skipif(not hasattr(df, "while_loop"), reason="df.while_loop not landed yet")

RNG = np.random.RandomState(1234)


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _log_softmax(z):
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


# ====================================================================== composed programs
# Each entry: (df function, numpy reference, argument arrays, positions to differentiate).
def mlp_loss(x, w1, b1, w2, b2, labels):
    hidden = df.tanh(df.matmul(x, w1) + b1)
    logits = df.matmul(hidden, w2) + b2
    return df.reduce_mean(df.softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def mlp_loss_np(x, w1, b1, w2, b2, labels):
    logits = np.tanh(x @ w1 + b1) @ w2 + b2
    return np.mean(-(labels * _log_softmax(logits)).sum(axis=-1))


def xent(logits, labels):
    return df.softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def xent_np(logits, labels):
    return -(labels * _log_softmax(logits)).sum(axis=-1)


def sparse_xent(logits, labels):
    return df.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def sparse_xent_np(logits, labels):
    return -_log_softmax(logits)[np.arange(len(labels)), labels]


def slicing(x):
    return x[1:, ::2] * 2.0 + x[0][None, :1] - x[1:, -1:] * x[-1, 1]


def slicing_np(x):
    return x[1:, ::2] * 2.0 + x[0][None, :1] - x[1:, -1:] * x[-1, 1]


def slicing_neg_step(x):
    return x[::-1, 1:3] * x[:, ::-2][:, :2]


def slicing_neg_step_np(x):
    return x[::-1, 1:3] * x[:, ::-2][:, :2]


def gather_rows(params, idx):
    return df.gather(params, idx) * df.gather(params, idx[:2], axis=0)[:1]


def gather_rows_np(params, idx):
    return params[idx] * params[idx[:2]][:1]


def gather_cols(params, idx):
    return df.gather(params, idx, axis=1)


def gather_cols_np(params, idx):
    return params[:, idx]


def broadcasting(a, b, c):
    return (a * b + c) / (1.0 + b * b) - df.maximum(a, c) ** 2


def broadcasting_np(a, b, c):
    return (a * b + c) / (1.0 + b * b) - np.maximum(a, c) ** 2


def reductions(x):
    return (df.reduce_sum(x, axis=0) + df.reduce_mean(x, axis=1, keepdims=True)
            + df.reduce_max(x, axis=(0, 1)) * df.reduce_min(x, axis=-1)[:, None]
            + df.reduce_prod(x, axis=0) + df.reduce_sum(x))


def reductions_np(x):
    return (x.sum(axis=0) + x.mean(axis=1, keepdims=True)
            + x.max(axis=(0, 1)) * x.min(axis=-1)[:, None]
            + x.prod(axis=0) + x.sum())


def shapes(x, y):
    z = df.concat([df.reshape(x, [3, 4]), df.transpose(y)], axis=0)
    s = df.stack([z, z * 2.0], axis=1)
    return df.reduce_sum(df.expand_dims(s, 0) * df.tile(x[:1, :1], [1, 1]), axis=2)


def shapes_np(x, y):
    z = np.concatenate([x.reshape(3, 4), y.T], axis=0)
    s = np.stack([z, z * 2.0], axis=1)
    return (s[None] * x[:1, :1]).sum(axis=2)


def softmaxes(x):
    return df.softmax(x) * df.log_softmax(x, axis=0) + df.sigmoid(x) * df.where(x > 0.0, x, -x)


def softmaxes_np(x):
    return (_softmax(x) * (x - np.log(np.exp(x).sum(axis=0, keepdims=True)))
            + 1 / (1 + np.exp(-x)) * np.where(x > 0, x, -x))


def elementwise(x, y):
    return df.exp(x) * df.log1p(df.square(y)) + df.sqrt(df.square(x) + 1.0) * df.rsqrt(df.square(y) + 2.0) \
        - df.pow(df.square(x) + 0.5, 1.5) + df.sin(x) * df.cos(y) + df.log(df.abs(y) + 1.0)


def elementwise_np(x, y):
    return (np.exp(x) * np.log1p(y * y) + np.sqrt(x * x + 1) / np.sqrt(y * y + 2)
            - (x * x + 0.5) ** 1.5 + np.sin(x) * np.cos(y) + np.log(np.abs(y) + 1))


def batched_matmul(a, b):
    return df.matmul(a, b, transpose_b=True) + df.matmul(a[0], a[1], transpose_a=True)[0, 0]


def batched_matmul_np(a, b):
    return a @ np.swapaxes(b, -1, -2) + (a[0].T @ a[1])[0, 0]


def _labels_onehot(n, k, seed):
    return np.eye(k)[np.random.RandomState(seed).randint(0, k, n)]


R = np.random.RandomState(7)
PROGRAMS = {
    "mlp_loss": (mlp_loss, mlp_loss_np,
                 [R.randn(5, 4), R.randn(4, 6) * 0.5, R.randn(6) * 0.1, R.randn(6, 3) * 0.5, R.randn(3) * 0.1,
                  _labels_onehot(5, 3, 0)], [0, 1, 2, 3, 4]),
    "softmax_xent": (xent, xent_np, [R.randn(4, 5) * 2.0, _labels_onehot(4, 5, 1)], [0, 1]),
    "sparse_softmax_xent": (sparse_xent, sparse_xent_np,
                            [R.randn(4, 5) * 2.0, np.array([0, 4, 2, 2], dtype=np.int32)], [0]),
    "slicing": (slicing, slicing_np, [R.randn(4, 5)], [0]),
    "slicing_negative_step": (slicing_neg_step, slicing_neg_step_np, [R.randn(4, 5)], [0]),
    "gather_rows": (gather_rows, gather_rows_np, [R.randn(5, 3), np.array([4, 0, 4, 2], dtype=np.int32)], [0]),
    "gather_cols": (gather_cols, gather_cols_np, [R.randn(3, 4), np.array([3, 3, 1], dtype=np.int32)], [0]),
    "broadcasting": (broadcasting, broadcasting_np, [R.randn(3, 1), R.randn(4), R.randn(3, 4)], [0, 1, 2]),
    "reductions": (reductions, reductions_np, [R.randn(3, 4)], [0]),
    "shapes": (shapes, shapes_np, [R.randn(2, 6), R.randn(4, 2)], [0, 1]),
    "softmaxes": (softmaxes, softmaxes_np, [R.randn(3, 4)], [0]),
    "elementwise": (elementwise, elementwise_np, [R.randn(2, 3), R.randn(2, 3)], [0, 1]),
    "batched_matmul": (batched_matmul, batched_matmul_np, [R.randn(2, 3, 4), R.randn(2, 5, 4)], [0, 1]),
}


def _scalarize(fn, out_weight):
    """fn's output contracted with fixed weights: a scalar whose gradient covers every output."""
    def loss(*args):
        return df.reduce_sum(fn(*args) * out_weight)
    return loss


def _weights_for(fn, np_fn, arrays):
    shape = np.shape(np_fn(*arrays))
    return np.random.RandomState(99).uniform(0.5, 1.5, size=shape)


def _tensors(arrays):
    return [df.constant(a) for a in arrays]


def _grads(loss, arrays, positions, wrap=None):
    """Gradients of a scalar `loss` w.r.t. the listed positions, via a tape (zeros if unconnected)."""
    args = _tensors(arrays)
    fn = wrap(loss) if wrap else loss
    with df.GradientTape() as tape:
        for p in positions:
            tape.watch(args[p])
        y = fn(*args)
    return float(y), tape.gradient(y, [args[p] for p in positions], unconnected_gradients="zero")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_eager_and_defun_match_numpy(name):
    fn, np_fn, arrays, _ = PROGRAMS[name]
    expected = np_fn(*arrays)
    eager = fn(*_tensors(arrays))
    f = df.defun(fn)
    traced = f(*_tensors(arrays))
    assert val(eager).shape == np.shape(expected)
    assert val(traced).shape == np.shape(expected)
    assert traced.dtype is eager.dtype
    assert_close(eager, expected, rtol=1e-10, atol=1e-12)
    assert_close(traced, eager, rtol=1e-12, atol=1e-12)
    # A second call with new values reuses the trace and is still right.
    arrays2 = [a * 0.9 if a.dtype.kind == "f" else a for a in arrays]
    assert_close(f(*_tensors(arrays2)), np_fn(*arrays2), rtol=1e-10, atol=1e-12)
    assert f.trace_count == 1


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gradients_eager_defun_and_finite_differences(name):
    fn, np_fn, arrays, positions = PROGRAMS[name]
    weight = _weights_for(fn, np_fn, arrays)
    loss = _scalarize(fn, weight)
    y_e, g_e = _grads(loss, arrays, positions)
    y_d, g_d = _grads(loss, arrays, positions, wrap=df.defun)

    def np_loss(*diff_arrays):
        full = list(arrays)
        for p, a in zip(positions, diff_arrays):
            full[p] = a
        return np.sum(np_fn(*full) * weight)

    g_n = numeric_grads(np_loss, [arrays[p] for p in positions])
    assert y_d == pytest.approx(y_e, rel=1e-12)
    for p, ge, gd, gn in zip(positions, g_e, g_d, g_n):
        assert_close(gd, ge, rtol=1e-10, atol=1e-12, msg=f"defun vs eager, argument {p}")
        assert_close(ge, gn, rtol=1e-5, atol=1e-6, msg=f"eager vs finite differences, argument {p}")


@pytest.mark.parametrize("name", ["mlp_loss", "gather_rows", "broadcasting", "reductions"])
def test_whole_gradient_computation_traced_matches_eager(name):
    fn, np_fn, arrays, positions = PROGRAMS[name]
    loss = _scalarize(fn, _weights_for(fn, np_fn, arrays))
    vg = df.value_and_gradients_function(loss, params=positions)
    y_e, g_e = vg(*_tensors(arrays))
    traced = df.defun(vg)
    y_d, g_d = traced(*_tensors(arrays))
    assert float(y_d) == pytest.approx(float(y_e), rel=1e-12)
    for ge, gd in zip(g_e, g_d):
        assert_close(gd, ge, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["mlp_loss", "elementwise", "softmaxes"])
def test_second_order_eager_equals_defun(name):
    fn, np_fn, arrays, positions = PROGRAMS[name]
    loss = _scalarize(fn, _weights_for(fn, np_fn, arrays))
    p = positions[0]

    def grad_sum(wrap):
        args = _tensors(arrays)
        f = wrap(loss) if wrap else loss
        return nested_gradients(lambda _: f(*args), args[p], lambda g: df.reduce_sum(df.square(g)))[1]

    h_e = grad_sum(None)
    h_d = grad_sum(df.defun)
    assert_close(h_d, h_e, rtol=1e-9, atol=1e-12)


def test_mlp_with_variables_eager_equals_defun():
    fn, np_fn, arrays, _ = PROGRAMS["mlp_loss"]
    variables = [df.Variable(a) for a in arrays[1:5]]
    x, labels = df.constant(arrays[0]), df.constant(arrays[5])

    def loss(x, labels):
        return fn(x, *variables, labels)

    v_e, g_e = df.implicit_value_and_gradients(loss)(x, labels)
    v_d, g_d = df.implicit_value_and_gradients(df.defun(loss))(x, labels)
    assert float(v_e) == pytest.approx(mlp_loss_np(*arrays), rel=1e-12)
    assert float(v_d) == pytest.approx(float(v_e), rel=1e-12)
    assert [id(v) for _, v in g_d] == [id(v) for _, v in g_e]
    for (ge, _), (gd, _) in zip(g_e, g_d):
        assert_close(gd, ge, rtol=1e-10, atol=1e-12)


# ====================================================================== control flow
def cond_program(x, y):
    return df.cond(df.reduce_sum(x) > 0.0, lambda: df.sin(x) * y, lambda: df.square(x) - y)


def cond_program_np(x, y):
    return np.sin(x) * y if x.sum() > 0 else x * x - y


def while_program(x):
    _, h = df.while_loop(lambda i, h: i < 4, lambda i, h: (i + 1, df.tanh(h) * 1.5 + 0.1),
                         [df.constant(0), x])
    return h


def while_program_np(x):
    for _ in range(4):
        x = np.tanh(x) * 1.5 + 0.1
    return x


CONTROL = {
    "cond_true": (cond_program, cond_program_np, [np.abs(R.randn(3)) + 0.1, R.randn(3)], [0, 1], needs_cond),
    "cond_false": (cond_program, cond_program_np, [-np.abs(R.randn(3)) - 0.1, R.randn(3)], [0, 1], needs_cond),
    "while_loop": (while_program, while_program_np, [R.randn(2, 2)], [0], needs_while),
}


@pytest.mark.parametrize("name", [pytest.param(k, marks=v[4]) for k, v in sorted(CONTROL.items())])
def test_control_flow_values_and_gradients(name):
    fn, np_fn, arrays, positions, _ = CONTROL[name]
    expected = np_fn(*arrays)
    assert_close(fn(*_tensors(arrays)), expected, rtol=1e-10)
    f = df.defun(fn)
    assert_close(f(*_tensors(arrays)), expected, rtol=1e-10)
    weight = _weights_for(fn, np_fn, arrays)
    loss = _scalarize(fn, weight)
    _, g_e = _grads(loss, arrays, positions)
    _, g_d = _grads(loss, arrays, positions, wrap=df.defun)

    def np_loss(*diff):
        full = list(arrays)
        for p, a in zip(positions, diff):
            full[p] = a
        return np.sum(np_fn(*full) * weight)

    g_n = numeric_grads(np_loss, [arrays[p] for p in positions])
    for ge, gd, gn in zip(g_e, g_d, g_n):
        assert_close(gd, ge, rtol=1e-10, atol=1e-12)
        assert_close(ge, gn, rtol=1e-5, atol=1e-6)


def test_cond_inside_defun_takes_the_branch_at_run_time():
    if not hasattr(df, "cond"):
        pytest.skip("df.cond not landed yet")
    f = df.defun(cond_program)
    xp, xn, y = np.array([1.0, 2.0]), np.array([-1.0, -2.0]), np.array([0.5, 0.5])
    assert_close(f(xp, y), cond_program_np(xp, y))
    assert_close(f(xn, y), cond_program_np(xn, y))
    assert f.trace_count == 1


# ====================================================================== export -> load
def _roundtrip(fn, arrays, tmp_path=None):
    f = df.defun(fn)
    cf = f.get_concrete_function(*_tensors(arrays))
    doc = df.export_json(cf)
    if tmp_path is not None:
        path = tmp_path / "fn.json"
        df.export_json(cf, path=str(path))
        loaded = df.load_json(str(path))
    else:
        loaded = df.load_json(json.loads(json.dumps(doc)))
    return f, cf, doc, loaded


@needs_export
@pytest.mark.parametrize("name", sorted(PROGRAMS) + [pytest.param(k, marks=v[4]) for k, v in sorted(CONTROL.items())])
def test_export_load_values_match(name, tmp_path):
    spec = PROGRAMS.get(name) or CONTROL[name]
    fn, np_fn, arrays = spec[0], spec[1], spec[2]
    _, _, _, loaded = _roundtrip(fn, arrays, tmp_path)
    eager = fn(*_tensors(arrays))
    from_arrays = loaded(*arrays)
    from_tensors = loaded(*_tensors(arrays))
    assert_close(from_arrays, eager, rtol=1e-12, atol=1e-12)
    assert_close(from_tensors, np_fn(*arrays), rtol=1e-10, atol=1e-12)
    assert val(from_arrays).dtype == val(eager).dtype


@needs_export
def test_export_of_gradient_step_and_variables_by_value():
    fn, np_fn, arrays, _ = PROGRAMS["mlp_loss"]
    variables = [df.Variable(a) for a in arrays[1:5]]

    def step(x, labels):
        value, grads = df.implicit_value_and_gradients(lambda x, l: fn(x, *variables, l))(x, labels)
        return value, [g for g, _ in grads]

    x, labels = _tensors([arrays[0], arrays[5]])
    value, grads = df.defun(step)(x, labels)
    cf = df.defun(step).get_concrete_function(x, labels)
    loaded = df.load_json(df.export_json(cf))
    l_value, l_grads = loaded(arrays[0], arrays[5])
    assert float(l_value) == pytest.approx(float(value), rel=1e-12)
    assert len(l_grads) == len(grads) == 4
    for g, lg in zip(grads, l_grads):
        assert_close(lg, g, rtol=1e-10, atol=1e-12)
    # Exported by value: a later assignment does not change the loaded graph.
    variables[0].assign(np.zeros_like(arrays[1]))
    l_value2, _ = loaded(arrays[0], arrays[5])
    assert float(l_value2) == pytest.approx(float(value), rel=1e-12)


@needs_export
def test_export_is_deterministic(tmp_path):
    fn, _, arrays, _ = PROGRAMS["mlp_loss"]
    cf = df.defun(fn).get_concrete_function(*_tensors(arrays))
    doc1, doc2 = df.export_json(cf), df.export_json(cf)
    assert json.dumps(doc1, sort_keys=True) == json.dumps(doc2, sort_keys=True)
    df.export_json(cf, path=str(tmp_path / "a.json"))
    df.export_json(cf, path=str(tmp_path / "b.json"))
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


@needs_export
def test_export_with_nested_defun_carries_the_library():
    inner = df.defun(lambda x: df.tanh(x) * 2.0)
    outer = df.defun(lambda x: inner(x) + inner(x * 0.5))
    x = RNG.randn(3)
    loaded = df.load_json(json.loads(json.dumps(df.export_json(outer.get_concrete_function(df.constant(x))))))
    assert_close(loaded(x), np.tanh(x) * 2 + np.tanh(x * 0.5) * 2, rtol=1e-12)


# ====================================================================== random programs
UNARY = {
    "tanh": (df.tanh, np.tanh),
    "sin": (df.sin, np.sin),
    "cos": (df.cos, np.cos),
    "sigmoid": (df.sigmoid, lambda a: 1.0 / (1.0 + np.exp(-a))),
    "square": (df.square, np.square),
    "negative": (df.negative, np.negative),
    "exp_tanh": (lambda t: df.exp(df.tanh(t)), lambda a: np.exp(np.tanh(a))),
    "log1p_sq": (lambda t: df.log1p(df.square(t)), lambda a: np.log1p(a * a)),
    "sqrt_sq1": (lambda t: df.sqrt(df.square(t) + 1.0), lambda a: np.sqrt(a * a + 1.0)),
}
BINARY = {
    "add": (df.add, np.add),
    "subtract": (df.subtract, np.subtract),
    "multiply": (df.multiply, np.multiply),
    "safe_divide": (lambda a, b: a / (df.square(b) + 1.0), lambda a, b: a / (b * b + 1.0)),
    "op_add": (lambda a, b: a + b * 0.5, lambda a, b: a + b * 0.5),
}
REDUCE = {
    "sum": (df.reduce_sum, np.sum),
    "mean": (df.reduce_mean, np.mean),
    "max": (df.reduce_max, np.max),
}


def _broadcastable(s1, s2):
    try:
        np.broadcast_shapes(s1, s2)
        return True
    except ValueError:
        return False


@st.composite
def programs(draw):
    """A random program: input shapes and a list of steps over a current value `h`."""
    a = draw(st.integers(1, 3))
    b = draw(st.integers(1, 3))
    c = draw(st.integers(1, 3))
    y_shape = draw(st.sampled_from([(), (b,), (a, 1), (1, b), (a, b)]))
    shapes_ = [(a, b), y_shape, (b, c)]
    steps = []
    shape = (a, b)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["unary", "binary", "reduce", "matmul", "reshape", "transpose"]))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(sorted(UNARY)))))
        elif kind == "binary":
            operand = draw(st.sampled_from([0, 1, 2]))
            if not _broadcastable(shape, shapes_[operand]):
                continue
            swap = draw(st.booleans())
            steps.append(("binary", draw(st.sampled_from(sorted(BINARY))), operand, swap))
            shape = np.broadcast_shapes(shape, shapes_[operand])
        elif kind == "reduce":
            if len(shape) == 0:
                continue
            axis = draw(st.sampled_from([None] + list(range(-len(shape), len(shape)))))
            keep = draw(st.booleans())
            steps.append(("reduce", draw(st.sampled_from(sorted(REDUCE))), axis, keep))
            shape = np.sum(np.zeros(shape), axis=axis, keepdims=keep).shape
        elif kind == "matmul":
            if len(shape) != 2:
                continue
            if shape[1] == shapes_[2][0]:
                steps.append(("matmul_w",))
                shape = (shape[0], shapes_[2][1])
            else:
                steps.append(("matmul_self_t",))
                shape = (shape[0], shape[0])
        elif kind == "reshape":
            target = draw(st.sampled_from(["flat", "column", "row"]))
            steps.append(("reshape", target))
            n = int(np.prod(shape))
            shape = {"flat": (n,), "column": (n, 1), "row": (1, n)}[target]
        elif kind == "transpose":
            if len(shape) < 2:
                continue
            steps.append(("transpose",))
            shape = shape[::-1]
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.RandomState(seed)
    arrays = [rng.uniform(-1.5, 1.5, size=s) for s in shapes_]
    return steps, arrays


def _build(steps, lib):
    """The program over `lib` ("df" or "np"): a function of (x, y, w) returning a tensor."""
    use_df = lib == "df"

    def run(x, y, w):
        inputs = [x, y, w]
        h = x
        for step in steps:
            kind = step[0]
            if kind == "unary":
                h = UNARY[step[1]][0 if use_df else 1](h)
            elif kind == "binary":
                op = BINARY[step[1]][0 if use_df else 1]
                other = inputs[step[2]]
                h = op(other, h) if step[3] else op(h, other)
            elif kind == "reduce":
                op = REDUCE[step[1]][0 if use_df else 1]
                h = op(h, axis=step[2], keepdims=step[3])
            elif kind == "matmul_w":
                h = df.matmul(h, w) if use_df else h @ w
            elif kind == "matmul_self_t":
                # h @ tanh(h).T, not h @ h.T: a symmetric result would tie in reduce_max.
                h = df.matmul(h, df.tanh(h), transpose_b=True) if use_df else h @ np.tanh(h).T
            elif kind == "reshape":
                n = int(np.prod(h.shape))
                target = {"flat": [n], "column": [n, 1], "row": [1, n]}[step[1]]
                h = df.reshape(h, target) if use_df else np.reshape(h, target)
            elif kind == "transpose":
                h = df.transpose(h) if use_df else np.transpose(h)
        return h
    return run


RANDOM_SETTINGS = settings(deadline=None, max_examples=200, derandomize=True,
                           suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@RANDOM_SETTINGS
@given(programs())
def test_random_programs_values_eager_defun_numpy(program):
    steps, arrays = program
    fn = _build(steps, "df")
    expected = _build(steps, "np")(*arrays)
    eager = fn(*_tensors(arrays))
    traced = df.defun(fn)(*_tensors(arrays))
    assert val(eager).shape == np.shape(expected), steps
    assert val(traced).shape == np.shape(expected), steps
    assert_close(eager, expected, rtol=1e-10, atol=1e-12, msg=str(steps))
    assert_close(traced, eager, rtol=1e-12, atol=1e-12, msg=str(steps))


@RANDOM_SETTINGS
@given(programs())
def test_random_programs_gradients_eager_defun_finite_differences(program):
    steps, arrays = program
    fn = _build(steps, "df")
    np_fn = _build(steps, "np")
    weight = np.random.RandomState(5).uniform(0.5, 1.5, size=np.shape(np_fn(*arrays)))
    loss = _scalarize(fn, weight)
    y_e, g_e = _grads(loss, arrays, [0, 1, 2])
    y_d, g_d = _grads(loss, arrays, [0, 1, 2], wrap=df.defun)
    g_n = numeric_grads(lambda *a: np.sum(np_fn(*a) * weight), arrays)
    assert y_d == pytest.approx(y_e, rel=1e-12, abs=1e-12)
    for k, (ge, gd, gn) in enumerate(zip(g_e, g_d, g_n)):
        assert val(ge).shape == arrays[k].shape, steps
        assert_close(gd, ge, rtol=1e-10, atol=1e-12, msg=f"defun vs eager, input {k}: {steps}")
        scale = 1.0 + np.abs(gn).max()
        assert_close(ge, gn, rtol=1e-5, atol=1e-6 * scale, msg=f"eager vs finite differences, input {k}: {steps}")


@needs_export
@settings(deadline=None, max_examples=40, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_programs_export_load_values(program):
    steps, arrays = program
    fn = _build(steps, "df")
    _, _, _, loaded = _roundtrip(fn, arrays)
    assert_close(loaded(*arrays), fn(*_tensors(arrays)), rtol=1e-12, atol=1e-12, msg=str(steps))
