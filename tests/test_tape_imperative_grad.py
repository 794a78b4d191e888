"""imperative_grad: the cost of a backward pass, input gradients it skips, and the entries the
garbage collector skips."""
import numpy as np
import pytest

import defun as df
from defun.runtime import registry, tape as tape_mod
from defun.runtime.autodiff import imperative_grad
from defun_helpers import val


# ------------------------------------------------------------------ cost of imperative_grad
def test_backward_of_a_2000_op_chain_runs_a_bounded_number_of_ops_per_entry():
    n = 2000
    x = df.constant(np.float64(1.0))
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x
        for _ in range(n):
            y = y * 1.0001
    assert len(tape._tape.entries) == n
    executed = []
    cb = lambda op_name, *rest: executed.append(op_name)
    df.add_execution_callback(cb)
    try:
        g = tape.gradient(y, x)
    finally:
        df.remove_execution_callback(cb)
    # multiply's gradient runs a couple of ops per entry: linear, not quadratic
    assert n <= len(executed) <= 3 * n + 5
    assert float(g) == pytest.approx(1.0001 ** n)


def test_long_chain_gradient_value_and_call_count():
    n = 2000
    calls = []
    x = df.constant(np.float64(1.0))

    def backward_of(i):
        def backward(dy):
            calls.append(i)
            return [dy * 1.0005]
        return backward
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x
        for i in range(n):
            out = df.constant(np.float64(float(np.asarray(y)) * 1.0005))
            df.record_operation("scale", [out], [y], backward_of(i))
            y = out
    g = tape.gradient(y, x)
    assert calls == list(range(n - 1, -1, -1))       # each once, in reverse order
    assert float(g) == pytest.approx(1.0005 ** n)


def test_imperative_grad_visits_only_entries_between_target_and_sources():
    x = df.constant(1.0)
    unrelated_calls = []
    with df.GradientTape() as tape:
        tape.watch(x)
        side = df.constant(0.0)
        df.record_operation("unrelated", [side], [x],
                            lambda dy: unrelated_calls.append(1) or [dy])
        y = x * 2.0
    assert float(tape.gradient(y, x)) == pytest.approx(2.0)
    assert unrelated_calls == []


def test_imperative_grad_direct_use():
    x = df.constant(2.0)
    tape = tape_mod.Tape()
    tape_mod.push_tape(tape)
    try:
        tape.watch(x)
        y = x * x * x
    finally:
        tape_mod.pop_tape(tape)
    g, = imperative_grad(tape, [y], [x])
    assert float(g) == pytest.approx(12.0)


def test_tapes_are_per_thread():
    import threading
    x = df.constant(2.0)
    results = {}
    with df.GradientTape() as tape:
        tape.watch(x)

        def other():
            results["y"] = x * x        # another thread: not on this thread's tape
        th = threading.Thread(target=other)
        th.start()
        th.join()
        z = x * 3.0
    assert tape.gradient(results["y"], x) is None
    assert len(tape._tape.entries) == 1
    assert float(z) == 6.0


def test_indexed_slices_with_int32_and_int64_indices_aggregate():
    params = df.constant(np.ones((4, 2)))
    with df.GradientTape() as tape:
        tape.watch(params)
        y = (df.reduce_sum(df.gather(params, [0, 2]))                    # int32 indices
             + df.reduce_sum(df.gather(params, np.array([1, 2])) * 3.0))  # int64 indices
    g = tape.gradient(y, params)
    assert isinstance(g, df.IndexedSlices)
    expected = np.zeros((4, 2))
    expected[[0, 2]] += 1.0
    expected[[1, 2]] += 3.0
    np.testing.assert_allclose(np.asarray(g), expected)


def test_missing_output_gradient_is_zero_filled():
    x = df.constant([1.0, 2.0, 3.0, 4.0])
    received = []

    def backward(da, db):
        received.append((da, db))
        return [df.concat([da, db], 0)]
    with df.GradientTape() as tape:
        tape.watch(x)
        a, b = df.constant([1.0, 2.0]), df.constant([3.0, 4.0])
        df.record_operation("split_in_two", [a, b], [x], backward)
        y = df.reduce_sum(a * 5.0)           # b is unused
    g = tape.gradient(y, x)
    np.testing.assert_array_equal(val(g), [5.0, 5.0, 0.0, 0.0])
    (da, db), = received
    assert isinstance(db, df.Tensor)
    np.testing.assert_array_equal(val(db), [0.0, 0.0])


def test_registered_multi_output_op_with_one_output_used():
    x = df.constant([1.0, 2.0, 3.0, 4.0])
    with df.GradientTape() as tape:
        tape.watch(x)
        a, b = df.split(x, 2)
        y = df.reduce_sum(b * b)
    np.testing.assert_array_equal(val(tape.gradient(y, x)), [0.0, 0.0, 6.0, 8.0])


def test_imperative_grad_skips_entries_that_do_not_depend_on_the_sources():
    x, w = df.constant(2.0), df.constant(3.0)
    calls = []
    with df.GradientTape(persistent=True) as tape:
        tape.watch([x, w])
        z = df.constant(9.0)
        df.record_operation("square_w", [z], [w], lambda dz: calls.append(1) or [dz * 2.0 * w])
        y = x * z
    assert float(tape.gradient(y, x)) == pytest.approx(9.0)
    assert calls == []                      # z's entry is reachable from y but not from x
    assert float(tape.gradient(y, w)) == pytest.approx(2.0 * 6.0)
    assert calls == [1]


def test_custom_gradient_gives_variable_gradients_through_grad_fn():
    v = df.Variable(np.array([2.0, 3.0]))
    x = df.constant(np.array([1.0, 4.0]))

    @df.custom_gradient
    def scaled(a):
        y = a * v
        def grad_fn(dy, variables=None):
            assert variables == [v]
            return [dy * v.read_value()], [dy * a * 10.0]   # deliberately not the true dv
        return y, grad_fn

    for fn in (scaled, df.defun(scaled)):
        with df.GradientTape() as tape:
            tape.watch(x)
            loss = df.reduce_sum(fn(x))
        gx, gv = tape.gradient(loss, [x, v])
        np.testing.assert_allclose(np.asarray(gx), [2.0, 3.0])
        np.testing.assert_allclose(np.asarray(gv), [10.0, 40.0])


def test_custom_gradient_reading_variables_needs_a_variables_keyword():
    v = df.Variable(1.0)

    @df.custom_gradient
    def f(a):
        return a * v, lambda dy: dy

    with pytest.raises(TypeError, match="variables"):
        f(df.constant(2.0))


# ------------------------------------------------------------------ skipped input gradients
def _ops_run_by(fn):
    """The names of the eager ops `fn()` runs, and its result."""
    executed = []
    cb = lambda op_name, *rest: executed.append(op_name)  # noqa: E731
    df.add_execution_callback(cb)
    try:
        result = fn()
    finally:
        df.remove_execution_callback(cb)
    return executed, result


def test_gradient_for_an_unwatched_operand_is_never_computed():
    x = df.constant(np.array([1.0, 2.0, 3.0]))
    c = df.constant(np.array([4.0, 5.0, 6.0]))
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * c
    executed, g = _ops_run_by(lambda: tape.gradient(y, x))
    # the seed, then multiply's gradient for x only (for c it would be a second multiply)
    assert executed == ["ones_like", "multiply"]
    np.testing.assert_array_equal(val(g), [4.0, 5.0, 6.0])


def test_python_constants_get_no_gradient_ops():
    x = df.constant(np.array([0.5, -1.0]))
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * 1.01 + 0.1
    executed, g = _ops_run_by(lambda: tape.gradient(y, x))
    # without skipping: a reduce_sum for 0.1, and a multiply and a reduce_sum for 1.01
    assert executed == ["ones_like", "multiply"]
    np.testing.assert_array_equal(val(g), [1.01, 1.01])


def test_skipped_inputs_follow_the_requested_sources():
    x, w = df.constant(np.ones((2, 3))), df.constant(np.full((3, 4), 2.0))
    with df.GradientTape(persistent=True) as tape:
        tape.watch([x, w])
        y = df.matmul(x, w)
    executed, gw = _ops_run_by(lambda: tape.gradient(y, w))
    assert executed == ["ones_like", "matmul"]                 # dx is not built
    np.testing.assert_array_equal(val(gw), np.full((3, 4), 2.0))
    executed, gx = _ops_run_by(lambda: tape.gradient(y, x))
    assert executed == ["ones_like", "matmul"]                 # nor dw now
    np.testing.assert_array_equal(val(gx), np.full((2, 3), 8.0))
    executed, (gx2, gw2) = _ops_run_by(lambda: tape.gradient(y, [x, w]))
    assert executed == ["ones_like", "matmul", "matmul"]
    np.testing.assert_array_equal(val(gx2), val(gx))
    np.testing.assert_array_equal(val(gw2), val(gw))


def test_a_tensor_watched_after_its_use_still_gets_its_gradient():
    # which gradients to skip is decided when differentiating, not when recording
    x, c = df.constant(2.0), df.constant(3.0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * c
        tape.watch(c)
    gx, gc = tape.gradient(y, [x, c])
    assert float(gx) == 3.0 and float(gc) == 2.0


def test_gradient_functions_see_skip_input_indices(monkeypatch):
    x, c = df.constant(2.0), df.constant(3.0)
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = df.subtract(c, x)
    subtract = registry.get("subtract")
    subtract_grad, seen = subtract.grad, []

    def spy(op, g):
        seen.append(tape_mod.skip_input_indices(op))
        return subtract_grad(op, g)
    monkeypatch.setattr(subtract, "grad", spy)   # the entry finds its gradient at backward
    assert float(tape.gradient(y, x)) == -1.0
    assert seen == [(0,)]                                      # c is input 0: no gradient
    tape._tape.watch(c)
    gx, gc = tape.gradient(y, [x, c])
    assert (float(gx), float(gc)) == (-1.0, 1.0)
    assert seen == [(0,), ()]


def test_chain_gradient_is_bit_identical_to_the_hand_written_one():
    x0 = np.random.default_rng(0).standard_normal(16)
    x = df.constant(x0)
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x
        for _ in range(20):
            y = df.tanh(y) * 1.01 + 0.1
        loss = df.reduce_sum(y)
    g = tape.gradient(loss, x)
    ts, v = [], x0
    for _ in range(20):
        t = np.tanh(v)
        ts.append(t)
        v = t * 1.01 + 0.1
    expected = np.ones_like(v)
    for t in reversed(ts):
        expected = expected * 1.01 * (1.0 - np.square(t))
    np.testing.assert_array_equal(val(g), expected)


def test_bias_gradient_sums_the_broadcast_axes_every_time():
    # eagerly the reduce_sum attrs per pair of shapes are reused: the second call too
    x = df.constant(np.arange(6.0).reshape(2, 3))
    for b0, expected in ((np.zeros(3), [2.0, 2.0, 2.0]), (np.zeros((1, 3)), [[2.0, 2.0, 2.0]]),
                         (np.zeros(3), [2.0, 2.0, 2.0]), (np.zeros((2, 1)), [[3.0], [3.0]]),
                         (np.zeros((1, 3)), [[2.0, 2.0, 2.0]])):
        b = df.constant(b0)
        with df.GradientTape() as tape:
            tape.watch(b)
            y = x + b
        g = tape.gradient(y, b)
        assert g.shape == b.shape
        np.testing.assert_array_equal(val(g), expected)


def test_integer_sources_get_no_gradient():
    i = df.constant(3)
    with df.GradientTape() as tape:
        tape.watch(i)
        y = i * i
    assert tape.gradient(y, i) is None
    with pytest.raises(ValueError, match="an int32 tensor; gradients are defined for floating-point"):
        df.gradients_function(lambda x: x * x)(3)
    np.testing.assert_allclose(np.asarray(df.gradients_function(lambda x: x * x)(3.0)[0]), 6.0)


# ------------------------------------------------------------------ entries the collector skips
def _record_various(n):
    """n rounds of ops taking each recording path: the public functions' own (binary, unary,
    a Python number), run_op's (attrs, several outputs, a variable's read)."""
    v = df.Variable(np.ones(3))
    x = df.constant(np.arange(3.0))
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        for _ in range(n):
            y = df.exp(x * 2.0) + x
            df.reduce_sum(y, axis=0, keepdims=True)
            df.split(y, 3)
            m = df.multiply(v.read_value(), y)
    return tape, x, v, m


def test_eager_entries_are_not_tracked_by_the_garbage_collector():
    import gc
    tape, x, v, m = _record_various(3)
    entries = tape._tape.entries
    assert len(entries) == 3 * 7
    for _ in range(3):  # a tuple is untracked once its items are: nested ones take a pass each
        gc.collect()
    tracked = [e[0] for e in entries if gc.is_tracked(e)]
    assert tracked == ["read_variable"] * 3   # a variable's handle is kept as itself
    # and the rebuilt tensors still give the right gradients
    gx, gv = tape.gradient(m, [x, v])
    x0 = np.arange(3.0)
    np.testing.assert_allclose(gx.numpy(), 2 * np.exp(2 * x0) + 1)
    np.testing.assert_allclose(gv.numpy(), np.exp(2 * x0) + x0)


def test_a_long_tape_adds_no_tracked_objects_and_constant_bytes_per_entry():
    import gc
    import tracemalloc
    x, y = df.constant(np.ones(4, np.float32)), df.constant(np.ones(4, np.float32))
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        df.add(x, y)
        gc.collect()
        tracked = len(gc.get_objects())
        tracemalloc.start()
        try:
            sizes = []
            for n in (2000, 20000):
                start = tracemalloc.get_traced_memory()[0]
                for _ in range(n):
                    df.add(x, y)
                    df.tanh(x)
                sizes.append((tracemalloc.get_traced_memory()[0] - start) / n)
        finally:
            tracemalloc.stop()
        for _ in range(2):  # an entry is untracked once its inner tuples are: two passes
            gc.collect()
        assert len(gc.get_objects()) - tracked < 100   # not ~5 per entry
        z = df.add(x, y)
    # two entries per round: tuples, ids and the output arrays the gradient needs; the
    # tape's list and dict grow by doubling, hence the slack
    assert 0.7 < sizes[1] / sizes[0] < 1.4, sizes
    assert sizes[1] < 1400, sizes   # ~530 bytes per entry, its output array included
    assert float(df.reduce_sum(tape.gradient(z, x))) == 4.0


def test_an_unregistered_op_reusing_a_registered_name_is_recorded_with_its_own_gradient():
    from defun.runtime.execute import run_op
    from defun.runtime.registry import OpDef, get
    add = get("add")
    twice = OpDef("add", lambda a, b: a + b, add.infer, lambda op, g: [2.0 * g, None],
                  num_inputs=2, same_dtype=(0, 1))
    x, y = df.constant([1.0, 2.0]), df.constant([3.0, 4.0])
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        z = run_op(twice, (x, y))
        w = df.add(x, y)
    assert not tape_mod.is_eager_entry(tape._tape.entries[0])
    assert tape_mod.is_eager_entry(tape._tape.entries[1])
    np.testing.assert_allclose(tape.gradient(z, x).numpy(), [2.0, 2.0])
    np.testing.assert_allclose(tape.gradient(w, x).numpy(), [1.0, 1.0])
