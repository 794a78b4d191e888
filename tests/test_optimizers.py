"""df.optimizers.SGD / Adam: Keras' update rules step by step against hand computation, dense and
sparse (IndexedSlices) gradients, eager == defun bit for bit, slots made outside traces (no
retrace, captured by handle), validation, a regression problem that converges; df.init_scope."""
import json

import numpy as np
import pytest

import defun as df

f32, f64 = df.float32, df.float64
GRADS = [np.array([0.5, -1.0, 2.0]), np.array([-0.25, 0.5, 1.0]), np.array([1.5, 0.0, -3.0]),
         np.array([0.1, 0.2, 0.3])]
W0 = np.array([1.0, -2.0, 0.5])


def run(opt, grads, dtype=np.float64, w0=W0):
    w = df.Variable(w0.astype(dtype), name="w")
    history = []
    for g in grads:
        opt.apply_gradients([(df.constant(g.astype(dtype)), w)])
        history.append(w.numpy())
    return w, history


# ---------------------------------------------------------------------------------------
# The update rules, by hand (textbook forms of Keras' formulas)

def sgd_by_hand(lr, momentum=0.0, nesterov=False, grads=GRADS):
    w, m, out = W0.copy(), np.zeros(3), []
    for g in grads:
        if momentum == 0.0:
            w = w - lr * g
        else:
            m = momentum * m - lr * g
            w = w + (momentum * m - lr * g if nesterov else m)
        out.append(w.copy())
    return out, m


def adam_by_hand(lr, b1=0.9, b2=0.999, eps=1e-7, grads=GRADS):
    w, m, v, out = W0.copy(), np.zeros(3), np.zeros(3), []
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        w = w - alpha * m / (np.sqrt(v) + eps)
        out.append(w.copy())
    return out, m, v


@pytest.mark.parametrize("momentum,nesterov", [(0.0, False), (0.9, False), (0.5, True)])
def test_sgd_matches_hand_computation(momentum, nesterov):
    opt = df.optimizers.SGD(0.1, momentum=momentum, nesterov=nesterov)
    w, history = run(opt, GRADS)
    want, m = sgd_by_hand(0.1, momentum, nesterov)
    for step, (got, exp) in enumerate(zip(history, want)):
        np.testing.assert_allclose(got, exp, rtol=1e-14, atol=1e-15, err_msg=f"step {step}")
    if momentum:
        np.testing.assert_allclose(opt.get_slot(w, "momentum").numpy(), m, rtol=1e-14)
    else:
        assert [v.name for v in opt.variables()] == ["SGD/iterations"]
    assert int(opt.iterations.numpy()) == len(GRADS)


@pytest.mark.parametrize("hyper", [dict(), dict(learning_rate=0.05, beta_1=0.5, beta_2=0.9, epsilon=1e-3)])
def test_adam_matches_hand_computation_with_bias_correction(hyper):
    opt = df.optimizers.Adam(**hyper)
    w, history = run(opt, GRADS)
    lr = hyper.get("learning_rate", 1e-3)
    want, m, v = adam_by_hand(lr, hyper.get("beta_1", 0.9), hyper.get("beta_2", 0.999), hyper.get("epsilon", 1e-7))
    for step, (got, exp) in enumerate(zip(history, want)):
        np.testing.assert_allclose(got, exp, rtol=1e-13, atol=1e-15, err_msg=f"step {step}")
    np.testing.assert_allclose(opt.get_slot(w, "m").numpy(), m, rtol=1e-13)
    np.testing.assert_allclose(opt.get_slot(w, "v").numpy(), v, rtol=1e-13)
    # the first step moves each weight by about lr (bias correction), whatever the gradient's size
    np.testing.assert_allclose(np.abs(history[0] - W0), lr, rtol=1e-3 if not hyper else 0.1)


def test_float32_variables_follow_the_rule_in_float32():
    opt = df.optimizers.Adam(0.01)
    w, history = run(opt, GRADS, np.float32)
    assert w.dtype is f32 and opt.get_slot(w, "m").dtype is f32
    want, _, _ = adam_by_hand(0.01)
    np.testing.assert_allclose(history[-1], want[-1], rtol=2e-6)


# ---------------------------------------------------------------------------------------
# Sparse gradients

TABLE = np.arange(15, dtype=np.float64).reshape(5, 3) / 10.0
IDS = np.array([3, 0, 3], np.int32)       # row 3 twice: its gradients add up


def sparse_loss(table, ids, weights):
    return df.reduce_sum(df.gather(table, ids) * weights)


WEIGHTS = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5], [-1.0, 0.0, 4.0]])


def row_gradients():
    g = np.zeros((5, 3))
    np.add.at(g, IDS, WEIGHTS)
    return g


@pytest.mark.parametrize("make", [lambda: df.optimizers.SGD(0.1), lambda: df.optimizers.SGD(0.1, momentum=0.9),
                                  lambda: df.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
                                  lambda: df.optimizers.Adam(0.1)], ids=["sgd", "momentum", "nesterov", "adam"])
def test_sparse_gradients_update_only_their_rows(make):
    table = df.Variable(TABLE, name="table")
    opt = make()
    for _ in range(3):
        with df.GradientTape() as tape:
            loss = sparse_loss(table, IDS, WEIGHTS)
        g = tape.gradient(loss, table)
        assert isinstance(g, df.IndexedSlices)
        opt.apply_gradients([(g, table)])
    # the touched rows follow the dense rule on the summed row gradient, step by step
    rows = sorted(set(IDS.tolist()))
    dense = df.Variable(TABLE[rows], name="rows")
    twin = make()
    for _ in range(3):
        twin.apply_gradients([(df.constant(row_gradients()[rows]), dense)])
    np.testing.assert_allclose(table.numpy()[rows], dense.numpy(), rtol=1e-14, atol=1e-15)
    untouched = [r for r in range(5) if r not in rows]
    np.testing.assert_array_equal(table.numpy()[untouched], TABLE[untouched])
    for slot in opt.variables()[1:]:
        assert not slot.numpy()[untouched].any(), f"slot {slot.name} changed untouched rows"
        np.testing.assert_allclose(slot.numpy()[rows], twin.variables()[opt.variables().index(slot)].numpy(),
                                   rtol=1e-14, atol=1e-15)


def test_sparse_sgd_equals_dense_sgd():
    a, b = df.Variable(TABLE), df.Variable(TABLE)
    with df.GradientTape() as tape:
        loss = sparse_loss(a, IDS, WEIGHTS)
    df.optimizers.SGD(0.3).apply_gradients([(tape.gradient(loss, a), a)])
    df.optimizers.SGD(0.3).apply_gradients([(df.constant(row_gradients()), b)])
    np.testing.assert_array_equal(a.numpy(), b.numpy())



def _sparse_step(table, opt):
    def step(ids):
        with df.GradientTape() as tape:
            loss = df.reduce_sum(df.gather(table, ids) * 2.0)
        opt.apply_gradients([(tape.gradient(loss, table), table)])
    return step


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape, ids", [((5, 0), [1, 2]), ((5, 3, 0), [[1, 2]]), ((5, 0), []), ((5, 3), []),
                                        ((5, 3), [[3, 0], [3, 1]])])
def test_sparse_steps_of_no_ids_or_rows_of_no_elements(dtype, shape, ids):
    # the IndexedSlices' values were reshaped to [-1, *row], which no size fits for a row of
    # no elements (an embedding of width 0): eagerly, in a defun and in a relaxed trace
    ids = np.asarray(ids, np.int32).reshape((-1,) if not ids else np.shape(ids))
    table0 = np.arange(np.prod(shape)).reshape(shape).astype(dtype) / 8
    dense = np.zeros(shape, dtype)
    np.add.at(dense, ids, 2.0)
    relaxed = [df.TensorSpec([None] * ids.ndim, df.int32)]
    for make in (lambda: df.optimizers.SGD(0.5, momentum=0.5), lambda: df.optimizers.Adam(0.25)):
        twin, twin_opt = df.Variable(table0), make()
        twin_opt.apply_gradients([(df.constant(dense), twin)])
        for wrap in (lambda f: f, df.defun, lambda f: df.defun(f, input_signature=relaxed)):
            table, opt = df.Variable(table0), make()
            wrap(_sparse_step(table, opt))(ids)
            assert int(opt.iterations.numpy()) == 1
            for a, b in zip([table] + opt.variables()[1:], [twin] + twin_opt.variables()[1:]):
                assert a.numpy().shape == shape and a.numpy().dtype == dtype
                np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("rows", [0, 1, 3])
def test_sparse_slices_of_unknown_nd_indices_in_a_relaxed_trace(rows):
    # indices [None, None]: their count is known only when the step runs
    for width in (0, 2):
        table, opt = df.Variable(np.ones((4, width))), df.optimizers.SGD(1.0)
        spec = [df.TensorSpec([None, None, width], df.float64), df.TensorSpec([None, None], df.int32)]
        step = df.defun(lambda v, i: opt.apply_gradients([(df.IndexedSlices(v, i, (4, width)), table)]),
                        input_signature=spec)
        ids = np.arange(rows * 2, dtype=np.int32).reshape(rows, 2) % 4
        values = np.full((rows, 2, width), 0.5)
        step(values, ids)
        want = np.ones((4, width))
        np.subtract.at(want, ids, values)
        np.testing.assert_array_equal(table.numpy(), want)


# ---------------------------------------------------------------------------------------
# defun: eager == traced bit for bit, no retrace, slots captured by handle

def _model_vars(tag):
    rng = np.random.default_rng(0)
    return [df.Variable(rng.normal(size=(4, 3)).astype(np.float32), name=f"{tag}_w"),
            df.Variable(np.zeros(3, np.float32), name=f"{tag}_b"),
            df.Variable(rng.normal(size=(6, 4)).astype(np.float32), name=f"{tag}_emb")]


def _loss(vs, ids, y):
    w, b, emb = vs
    h = df.gather(emb, ids)           # sparse gradient for emb
    return df.reduce_mean(df.square(df.tanh(h @ w + b) - y))


def _step_fn(vs, opt):
    def step(ids, y):
        with df.GradientTape() as tape:
            loss = _loss(vs, ids, y)
        grads = tape.gradient(loss, vs)
        opt.apply_gradients(zip(grads, vs))
        return loss
    return step


DATA = [(np.array([1, 4, 1, 0], np.int32), np.random.default_rng(k).normal(size=(4, 3)).astype(np.float32))
        for k in range(4)]


@pytest.mark.parametrize("make", [lambda: df.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
                                  lambda: df.optimizers.Adam(0.01)], ids=["nesterov", "adam"])
def test_eager_and_defun_steps_agree_bit_for_bit(make):
    eager_vars, graph_vars = _model_vars("e"), _model_vars("g")
    eager_opt, graph_opt = make(), make()
    eager_step = _step_fn(eager_vars, eager_opt)
    graph_step = df.defun(_step_fn(graph_vars, graph_opt))
    for ids, y in DATA:
        le = eager_step(df.constant(ids), df.constant(y))
        lg = graph_step(df.constant(ids), df.constant(y))
        np.testing.assert_array_equal(lg.numpy(), le.numpy())
    for a, b in zip(eager_vars + eager_opt.variables(), graph_vars + graph_opt.variables()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=f"{a.name} vs {b.name}")
    assert graph_step.trace_count == 1
    cf = graph_step.get_concrete_function(df.constant(DATA[0][0]), df.constant(DATA[0][1]))
    captured = {id(t) for t in cf.captured_inputs}
    for v in graph_opt.variables():      # counter and slots: eager variables, captured by handle
        assert id(v.handle) in captured, f"{v.name} is not captured"
    assert int(graph_opt.iterations.numpy()) == len(DATA)


def test_an_exported_training_step_updates_its_own_variables():
    vs = _model_vars("x")
    opt = df.optimizers.Adam(0.01)
    step = df.defun(_step_fn(vs, opt))
    ids, y = DATA[0]
    cf = step.get_concrete_function(df.constant(ids), df.constant(y))
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))   # frozen copies of vs and slots
    twin_vars = _model_vars("t")
    twin = _step_fn(twin_vars, df.optimizers.Adam(0.01))
    for ids, y in DATA:
        np.testing.assert_array_equal(loaded(ids, y).numpy(), twin(df.constant(ids), df.constant(y)).numpy())


def test_a_variable_learning_rate_changes_without_retracing():
    w = df.Variable(W0, name="w")
    lr = df.Variable(0.1, dtype=f64, name="lr")
    opt = df.optimizers.SGD(lr)
    step = df.defun(lambda g: opt.apply_gradients([(g, w)]))
    step(df.constant(GRADS[0]))
    lr.assign(0.0)
    before = w.numpy()
    step(df.constant(GRADS[1]))
    np.testing.assert_array_equal(w.numpy(), before)
    np.testing.assert_allclose(before, W0 - 0.1 * GRADS[0], rtol=1e-15)
    assert step.trace_count == 1


def test_regression_converges():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64, 3))
    w_true, b_true = np.array([[2.0], [-1.0], [0.5]]), 0.3
    y = x @ w_true + b_true + 0.01 * rng.normal(size=(64, 1))
    for opt in (df.optimizers.SGD(0.1, momentum=0.9), df.optimizers.Adam(0.1)):
        w = df.Variable(np.zeros((3, 1)), name="w")
        b = df.Variable(np.zeros(()), name="b")

        @df.defun
        def step(x, y):
            with df.GradientTape() as tape:
                loss = df.reduce_mean(df.square(x @ w + b - y))
            opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
            return loss
        first = float(step(x, y))
        for _ in range(300):
            last = float(step(x, y))
        assert last < 2e-4 < first, f"{opt}: loss {first} -> {last}"
        np.testing.assert_allclose(w.numpy(), w_true, atol=0.01)
        np.testing.assert_allclose(float(b.numpy()), b_true, atol=0.01)


# ---------------------------------------------------------------------------------------
# Validation

def test_none_gradients_are_skipped_and_all_none_is_an_error():
    a, b = df.Variable(W0, name="a"), df.Variable(W0, name="b")
    opt = df.optimizers.SGD(0.1, momentum=0.5)
    opt.apply_gradients([(None, a), (df.constant(GRADS[0]), b)])
    np.testing.assert_array_equal(a.numpy(), W0)
    np.testing.assert_allclose(b.numpy(), W0 - 0.1 * GRADS[0], rtol=1e-15)
    assert [v.name for v in opt.variables()] == ["SGD/iterations", "SGD/b/momentum"]
    with pytest.raises(df.errors.InvalidArgumentError, match="no gradients provided for any variable \\('a', 'b'\\)"):
        opt.apply_gradients([(None, a), (None, b)])
    assert int(opt.iterations.numpy()) == 1


def test_bad_gradients_name_the_variable_and_change_nothing():
    a, b = df.Variable(W0, name="a"), df.Variable(W0, name="b")
    opt = df.optimizers.Adam(0.1)
    cases = [
        (df.constant(np.ones(4)), r"variable 'b' is float64\[4\], the variable is float64\[3\]"),
        (df.constant(np.ones(3, np.float32)), r"variable 'b' is float32\[3\], the variable is float64\[3\]"),
        (df.IndexedSlices(df.constant(np.ones((1, 2))), df.constant([0]), (3, 2)), "sparse gradient for variable 'b'"),
        ("text", "variable 'b' does not convert"),
    ]
    for g, message in cases:
        with pytest.raises(df.errors.InvalidArgumentError, match=message):
            opt.apply_gradients([(df.constant(GRADS[0]), a), (g, b)])
        np.testing.assert_array_equal(a.numpy(), W0)     # validated before anything is applied
    assert opt.variables() == []
    with pytest.raises(TypeError, match="expected a df.Variable"):
        opt.apply_gradients([(df.constant(GRADS[0]), df.constant(W0))])
    with pytest.raises(df.errors.InvalidArgumentError, match="'a' appears twice"):
        opt.apply_gradients([(df.constant(GRADS[0]), a), (df.constant(GRADS[1]), a)])
    with pytest.raises(df.errors.InvalidArgumentError, match="'n' is int32"):
        opt.apply_gradients([(df.constant([1, 2]), df.Variable([1, 2], name="n"))])
    with pytest.raises(TypeError, match="must be a \\(gradient, variable\\) pair"):
        opt.apply_gradients([a])
    with pytest.raises(df.errors.InvalidArgumentError, match="momentum must be in"):
        df.optimizers.SGD(0.1, momentum=1.5)
    with pytest.raises(df.errors.InvalidArgumentError, match="beta_2 must be in"):
        df.optimizers.Adam(beta_2=1.0)
    with pytest.raises(df.errors.NotFoundError, match="no slot 'm' for variable 'a'"):
        opt.get_slot(a, "m")


def test_variable_arguments_of_a_trace_are_refused():
    opt = df.optimizers.SGD(0.1)

    @df.defun
    def step(v, g):
        opt.apply_gradients([(g, v)])
    with pytest.raises(df.errors.TracingError, match="argument of the function being traced"):
        step(df.Variable(W0), df.constant(GRADS[0]))


def test_build_makes_slots_up_front():
    w = df.Variable(W0, name="w")
    opt = df.optimizers.Adam()
    opt.build([w])
    assert [v.name for v in opt.variables()] == ["Adam/iterations", "Adam/w/m", "Adam/w/v"]
    assert not any(v.trainable for v in opt.variables())


# ---------------------------------------------------------------------------------------
# init_scope

def test_init_scope_lifts_creation_out_of_a_trace_and_pauses_tapes():
    made = []

    @df.defun
    def f(x):
        assert not df.executing_eagerly()
        with df.init_scope():
            assert df.executing_eagerly()
            if not made:
                made.append(df.Variable(np.zeros(3), name="lifted"))
        made[0].assign_add(x)
        return made[0].read_value()
    f(df.constant(np.ones(3)))
    f(df.constant(np.ones(3)))
    np.testing.assert_array_equal(made[0].numpy(), [2.0, 2.0, 2.0])
    assert f.trace_count == 1
    x = df.constant(1.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        with df.init_scope():
            y = x * 2.0
    assert tape.gradient(y, x) is None
    with pytest.raises(df.errors.TracingError, match="created inside a traced function"):
        df.defun(lambda: df.Variable(1.0))()
