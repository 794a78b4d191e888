"""The defun call path: the eager runner made at the first quiet call, and a call recorded
for one gradient (its backward run on arrays when nobody listens), against the general
route (an execution callback forces it) and against the Python function run eagerly."""
import types

import numpy as np
import pytest

import defun as df


class _Listening:
    """An execution callback for the block: every call takes the general route."""

    def __enter__(self):
        self.ops = []
        df.add_execution_callback(self._record)
        return self

    def _record(self, op_name, name, attrs, inputs, outputs):
        self.ops.append(op_name)

    def __exit__(self, *exc):
        df.remove_execution_callback(self._record)


def _leaves(structure):
    if isinstance(structure, dict):
        return [v for k in sorted(structure) for v in _leaves(structure[k])]
    if isinstance(structure, (list, tuple)):
        return [v for s in structure for v in _leaves(s)]
    return [structure]


def _assert_same(got, expected):
    assert type(got) is type(expected)
    g, e = _leaves(got), _leaves(expected)
    assert len(g) == len(e)
    for a, b in zip(g, e):
        if b is None or isinstance(b, df.Variable):
            assert a is b
        else:
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


SCALE = df.constant(np.float32(3.0))
V = df.Variable(np.arange(3, dtype=np.float32))


def _structured(x, y):
    return {"sum": x + y, "pair": (df.tanh(x) * SCALE, None), "read": V * x, "var": V}


def _single(x):
    return df.reduce_sum(x * SCALE)


def _no_inputs():
    return V + SCALE


@pytest.mark.parametrize("fn, args", [
    (_structured, (np.arange(3, dtype=np.float32), np.ones(3, np.float32))),
    (_single, (np.arange(3, dtype=np.float32),)),
    (_no_inputs, ()),
], ids=["structured", "single", "no_inputs"])
def test_eager_runner_matches_the_general_route_and_eager_python(fn, args):
    f = df.defun(fn)
    tensors = [df.constant(a) for a in args]
    expected = fn(*tensors)
    with _Listening() as seen:
        general = f(*tensors)        # traced and run by the general route
    assert len(seen.ops) == 1        # one op: the call
    first, again = f(*tensors), f(*tensors)      # the runner is made, then reused
    for got in (general, first, again):
        _assert_same(got, expected)
    V.assign_add(np.ones(3, np.float32))          # captured values are read at each call
    try:
        _assert_same(f(*tensors), fn(*tensors))
        with _Listening():
            _assert_same(f(*tensors), fn(*tensors))
    finally:
        V.assign_sub(np.ones(3, np.float32))


def test_a_call_inside_a_trace_or_under_a_tape_compiles_no_plan_of_its_own():
    inner = df.defun(lambda x: df.tanh(x) * 2.0)
    x = df.constant(np.linspace(-1.0, 1.0, 4))
    outer = df.defun(lambda x: inner(x) + 1.0)
    outer.get_concrete_function(x)          # traced: the inner call is a call node
    cf = inner.get_concrete_function(x)
    assert cf.graph.derived.plans == {}
    with df.GradientTape() as tape:
        tape.watch(x)
        y = inner(x)                        # runs the forward with side outputs
    np.testing.assert_allclose(np.asarray(tape.gradient(y, x)), 2.0 * (1.0 - np.tanh(np.asarray(x)) ** 2))
    assert cf.graph.derived.plans == {}
    np.testing.assert_allclose(np.asarray(inner(x)), np.tanh(np.asarray(x)) * 2.0)   # now the runner
    assert "numpy" in cf.graph.derived.plans


def test_a_first_call_with_a_callback_then_quiet_calls_keep_reporting_when_listened_to():
    f = df.defun(lambda x: x * 2.0)
    x = df.constant([1.0, 2.0])
    with _Listening() as seen:
        f(x)
    f(x)                            # quiet: the runner
    with _Listening() as again:
        np.testing.assert_allclose(np.asarray(f(x)), [2.0, 4.0])
    assert len(seen.ops) == len(again.ops) == 1


def test_a_symbolic_tensor_passed_eagerly_is_refused_by_name_after_the_runner_exists():
    f = df.defun(lambda x: x + 1.0)
    x = df.constant([1.0])
    f(x)
    leaked = []
    df.defun(lambda t: leaked.append(t) or t)(x)
    with pytest.raises(df.errors.TracingError, match="outside the function trace"):
        f.get_concrete_function(x)._calls.call([leaked[0]])


def _mixed(x, w, ids):
    rows = df.gather(w, ids)                     # an IndexedSlices gradient for w
    h = df.tanh(x @ df.transpose(rows)) * SCALE  # a captured tensor in the backward
    return df.reduce_sum(h * h), df.reduce_mean(h)


def _mixed_args():
    rng = np.random.default_rng(0)
    return [df.constant(rng.standard_normal((2, 3)).astype(np.float32)),
            df.constant(rng.standard_normal((5, 3)).astype(np.float32)),
            df.constant(np.array([4, 0, 4], np.int32))]


def _dense(g):
    return np.asarray(g._as_tensor() if isinstance(g, df.IndexedSlices) else g)


@pytest.mark.parametrize("output", [0, 1, None], ids=["first_output", "second_output", "both"])
def test_the_backward_of_a_recorded_call_matches_the_general_route_and_eager(output):
    f = df.defun(_mixed)
    args = _mixed_args()

    def grads(fn, listen):
        x, w, ids = args
        with df.GradientTape() as tape:
            tape.watch([x, w])
            out = fn(x, w, ids)
            target = out if output is None else out[output]
        if listen:
            with _Listening() as seen:
                g = tape.gradient(target, [x, w])
            assert any(op.endswith("_grad") for op in seen.ops)   # the backward: one call
        else:
            g = tape.gradient(target, [x, w])
        return g

    expected = grads(_mixed, False)
    for got in (grads(f, False), grads(f, True), grads(f, False)):
        assert isinstance(got[1], df.IndexedSlices) == isinstance(expected[1], df.IndexedSlices)
        for a, b in zip(got, expected):
            np.testing.assert_allclose(_dense(a), _dense(b), rtol=2e-5, atol=1e-6)


def test_a_recorded_call_seeded_with_output_gradients_and_a_recording_outer_tape():
    f = df.defun(lambda x: df.tanh(x) * 2.0)
    x = df.constant(np.linspace(-1.0, 1.0, 3))
    seed = df.constant(np.array([1.0, 2.0, 3.0]))
    with df.GradientTape() as outer:
        outer.watch(seed)
        with df.GradientTape() as inner:
            inner.watch(x)
            y = f(x)
        g = inner.gradient(y, x, output_gradients=seed)   # the outer tape records the backward
    t = np.tanh(np.asarray(x))
    np.testing.assert_allclose(np.asarray(g), np.asarray(seed) * 2.0 * (1.0 - t * t))
    np.testing.assert_allclose(np.asarray(outer.gradient(g, seed)), 2.0 * (1.0 - t * t))


def test_value_and_gradients_of_a_defun_match_eager_and_the_whole_step():
    rng = np.random.default_rng(1)
    args = [df.constant(rng.standard_normal(s).astype(np.float32)) for s in ((4, 3), (3,), (5, 4))]

    def loss(w, b, x):
        return df.reduce_mean(df.tanh(x @ w + b) ** 2)

    eager = df.value_and_gradients_function(loss, [0, 1])(*args)
    taped = df.value_and_gradients_function(df.defun(loss), [0, 1])
    whole = df.defun(df.value_and_gradients_function(loss, [0, 1]))
    for got in (taped(*args), taped(*args), whole(*args)):
        np.testing.assert_allclose(np.asarray(got[0]), np.asarray(eager[0]), rtol=1e-5)
        for a, b in zip(got[1], eager[1]):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------------
# value_and_gradients_function(defun): one forward and one backward run when nobody listens

# captured through an attribute: no name to watch for rebinding (a watched trace takes the
# tape route, which checks the names)
_HELD = types.SimpleNamespace(scale=SCALE, v=V)


def _loss(w, x, n):
    return df.reduce_sum(df.tanh(x @ w) * _HELD.scale) + df.reduce_sum(_HELD.v * _HELD.v) + \
        df.cast(df.reduce_sum(n), df.float32)


def _loss_args():
    rng = np.random.default_rng(2)
    return [df.constant(rng.standard_normal((3, 3)).astype(np.float32)),
            df.constant(rng.standard_normal((2, 3)).astype(np.float32)),
            df.constant(np.array([1, 2], np.int32))]


@pytest.mark.parametrize("remat", [False, True], ids=["saving", "rematerialize"])
def test_fused_value_and_gradients_match_the_tape_route_and_eager(remat, monkeypatch):
    args = _loss_args()
    f = df.defun(_loss, rematerialize=remat)
    vg = df.value_and_gradients_function(f, [0, 1])
    eager = df.value_and_gradients_function(_loss, [0, 1])(*args)
    with _Listening():
        listened = vg(*args)                 # the tape route (traces, fills the fast cache)
    entered = []
    enter = df.GradientTape.__enter__
    monkeypatch.setattr(df.GradientTape, "__enter__", lambda tape: entered.append(tape) or enter(tape))
    fused = vg(*args), vg(*args)
    assert not entered                       # no tape: one forward and one backward run
    with df.GradientTape() as outer:         # an active tape: the tape route
        taped = vg(*args)
    assert len(entered) == 2
    del outer
    for got in (listened, *fused, taped):
        np.testing.assert_allclose(np.asarray(got[0]), np.asarray(eager[0]), rtol=1e-5)
        assert isinstance(got[1], list) and len(got[1]) == 2
        for a, b in zip(got[1], eager[1]):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_fused_value_and_gradients_refuse_as_the_tape_route_does():
    args = _loss_args()
    f = df.defun(_loss)
    f(*args)                                  # in the fast cache
    with pytest.raises(ValueError, match="argument 'n' .position 2. of _loss is an int32 tensor"):
        df.value_and_gradients_function(f, [0, 2])(*args)
    unused = df.defun(lambda w, x, n: df.reduce_sum(x * 2.0))
    unused(*args)
    with pytest.raises(ValueError, match="position 0.*is not connected to its result"):
        df.value_and_gradients_function(unused, [0, 1])(*args)
    # a position given twice: two sources, chained as the tape route chains them
    twice = df.value_and_gradients_function(f, [0, 0])(*args)[1]
    expected = df.value_and_gradients_function(_loss, [0, 0])(*args)[1]
    for a, b in zip(twice, expected):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_fused_value_and_gradients_of_a_structured_or_integer_result_take_the_tape_route():
    x = df.constant(np.array([0.5, -1.0], np.float32))
    pair = df.defun(lambda x: (df.reduce_sum(x * x), df.reduce_sum(x)))
    pair(x)
    value, (g,) = df.value_and_gradients_function(pair)(x)    # d(sum of both)/dx
    np.testing.assert_allclose(np.asarray(g), 2.0 * np.asarray(x) + 1.0)
    assert isinstance(value, tuple)


def test_gradients_of_fused_gradients_through_an_outer_tape():
    x = df.constant(np.array([0.3, -0.7]))
    f = df.defun(lambda x: df.reduce_sum(df.tanh(x) ** 2))
    vg = df.value_and_gradients_function(f)
    vg(x)
    with df.GradientTape() as outer:
        outer.watch(x)
        _, (g,) = vg(x)
    t = np.tanh(np.asarray(x))
    np.testing.assert_allclose(np.asarray(g), 2.0 * t * (1.0 - t * t))
    np.testing.assert_allclose(np.asarray(outer.gradient(g, x)), 2.0 * (1.0 - t * t) * (1.0 - 3.0 * t * t))


def test_fused_value_and_gradients_keep_the_stale_capture_check():
    scale = df.constant(2.0)
    f = df.defun(lambda x: x * scale)
    vg = df.value_and_gradients_function(f)
    x = df.constant(1.0)
    vg(x)
    scale = df.constant(5.0)  # noqa: F841  (rebinding the captured name)
    with pytest.warns(df.StaleCaptureWarning, match="closure name 'scale'"):
        value, (g,) = vg(x)
    assert float(np.asarray(value)) == 2.0 and float(np.asarray(g)) == 2.0


def test_traces_of_one_layout_share_their_runner_code_and_each_checks_its_own_sizes():
    """The runner's source names each trace's sizes and writes none, so it is compiled once
    per layout; each trace's `last_call` still takes only its own known sizes."""
    from defun.trace_calls import MISS

    def relaxed(columns):
        f = df.defun(lambda x: df.reduce_sum(df.tanh(x), axis=1))
        for n in (2, 3):
            f(df.constant(np.ones((n, columns), np.float32)))
        return list(f._cache.values())[-1]

    three, five = relaxed(3), relaxed(5)
    assert three.graph.inputs[0].shape == (None, 3) and five.graph.inputs[0].shape == (None, 5)
    assert three._calls.run.__code__ is five._calls.run.__code__
    for concrete, columns, other in ((three, 3, 5), (five, 5, 3)):
        x0 = np.random.default_rng(columns).normal(size=(4, columns)).astype(np.float32)
        out = concrete._calls.last_call((df.constant(x0),))
        np.testing.assert_allclose(out.numpy(), np.tanh(x0).sum(axis=1), rtol=1e-6)
        assert concrete._calls.last_call((df.constant(np.ones((4, other), np.float32)),)) is MISS
        assert concrete._calls.last_call((df.constant(np.ones((4, columns), np.float64)),)) is MISS
        assert concrete._calls.last_call((df.constant(np.ones(columns, np.float32)),)) is MISS


_GLOBAL_SCALE = df.constant(np.float32(2.0))


def _by_global(x):
    return x * _GLOBAL_SCALE


def test_a_traces_call_states_follow_the_table():
    """FIRST until a quiet call (a call under a tape or a callback leaves it there), then
    QUIET with a guarded runner; WATCHED (a global name) has no guarded runner until the first
    stale name unwatches it; GENERAL when no runner can be made (a variable argument returned,
    or captures of an enclosing trace), each giving the values the Python function gives."""
    from defun.trace_calls import CallState

    global _GLOBAL_SCALE
    x = df.constant(np.arange(3, dtype=np.float32))
    f = df.defun(lambda t: df.tanh(t) * 3.0)
    calls = f.get_concrete_function(x)._calls
    assert (calls.state, calls.watched, calls.last_call) == (CallState.FIRST, False, None)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    with _Listening():
        f(x)
    assert calls.state is CallState.FIRST and calls.call == calls.run
    np.testing.assert_allclose(np.asarray(tape.gradient(y, x)), 3.0 * (1.0 - np.tanh(np.asarray(x)) ** 2), rtol=1e-6)
    for _ in range(2):      # the first quiet call makes the runner, the next one is Function's first try
        np.testing.assert_allclose(np.asarray(f(x)), np.tanh(np.asarray(x)) * 3.0, rtol=1e-6)
    assert calls.state is CallState.QUIET and calls.last_call is not None and f._last_call is calls.last_call

    g = df.defun(_by_global)
    watched = g.get_concrete_function(x)._calls
    assert watched.watched and watched.last_call is None and watched.call != watched.run
    np.testing.assert_allclose(np.asarray(g(x)), np.asarray(x) * 2.0)
    assert watched.state is CallState.QUIET and watched.last_call is None
    old = _GLOBAL_SCALE
    try:
        _GLOBAL_SCALE = df.constant(np.float32(5.0))
        with pytest.warns(df.StaleCaptureWarning, match="_GLOBAL_SCALE"):
            np.testing.assert_allclose(np.asarray(g(x)), np.asarray(x) * 2.0)   # the trace keeps the old one
    finally:
        _GLOBAL_SCALE = old
    assert not watched.watched and watched.call == watched.run and watched.last_call is not None

    v, w = df.Variable(np.ones(3, np.float32)), df.Variable(np.full(3, 2.0, np.float32))
    h = df.defun(lambda var, t: (var, var * t))     # returns the variable it was passed
    h(v, x)
    assert h.get_concrete_function(v, x)._calls.state is CallState.GENERAL
    back, product = h(w, x)
    assert back is w
    np.testing.assert_allclose(np.asarray(product), 2.0 * np.asarray(x))

    inner_calls = []

    @df.defun
    def outer(t):
        scale = df.reduce_sum(t)        # a tensor of this trace, captured by the inner one
        inner = df.defun(lambda u: u * scale)
        out = inner(t)
        inner_calls.append(inner.get_concrete_function(t)._calls)
        return out
    np.testing.assert_allclose(np.asarray(outer(x)), np.asarray(x) * np.asarray(x).sum())
    assert inner_calls[0].state is CallState.FIRST     # only ever called inside the trace


def test_capture_sources_are_one_named_type_shared_by_the_backward_and_the_first_order_call():
    """Backward.capture_sources pairs a Source with an index or value (equal to the
    documented ('input', k) pairs); a loaded document's backward, built from its text, holds
    the same members; the first-order call's feed holds them too."""
    from defun.graph.gradients import Source

    f = df.defun(_mixed)
    args = _mixed_args()
    cf = f.get_concrete_function(*args)
    sources = cf.backward_function().capture_sources
    kinds = {kind for kind, _ in sources}
    assert kinds == {Source.INPUT, Source.SIDE}     # x and the captured SCALE; saved values
    assert all(type(kind) is Source for kind, _ in sources)
    assert [(str(k), v) for k, v in sources if k is not Source.VALUE] == \
        [(k, v) for k, v in sources if k in ("input", "side")]
    first = cf._fn.first_order()
    assert [kind for kind, _ in first.feed] == [kind for kind, _ in sources]
    assert all(isinstance(v, np.ndarray) for kind, v in first.feed if kind is Source.VALUE)
    assert repr(Source.INPUT) == "'input'" and Source("side") is Source.SIDE
