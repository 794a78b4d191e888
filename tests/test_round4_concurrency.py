"""Round 4's switches and relaxed traces where features meet: `run_functions_eagerly` while a
trace is being built (df.vmap's, a loop's body, an outer function's), relaxed traces called
from several threads at once and while another thread flips the switch, and an interrupt
(KeyboardInterrupt) raised while a relaxed trace is made. Each result is compared with numpy."""
import sys
import threading

import numpy as np
import pytest

import defun as df


@pytest.fixture(autouse=True)
def _switch_off():
    yield
    df.config.run_functions_eagerly(False)


def _branchy():
    """A defun with a tensor `if` (AutoGraph converts it; as written it cannot be traced)."""
    @df.defun
    def inner(x):
        if df.reduce_sum(x) > 0:
            return x * 2.0
        return x - 1.0
    return inner


def _branchy_np(x):
    return x * 2.0 if x.sum() > 0 else x - 1.0


XS = np.array([[1.0, 2.0], [-3.0, -1.0], [0.5, -0.25]])


@pytest.mark.parametrize("where", ["vmap", "while_loop", "scan", "cond", "outer trace"])
def test_run_functions_eagerly_inside_a_trace_calls_the_graph(where):
    """While functions run eagerly, a defun called as a trace is built (df.vmap traces its
    function, a loop its body, get_concrete_function the outer function) cannot run eagerly:
    it is called as a graph, converted as without the switch (it raised a TracingError on
    its tensor `if`, run as written on symbolic tensors)."""
    inner = _branchy()
    xs = df.constant(XS)
    rows = np.stack([_branchy_np(r) for r in XS])
    df.config.run_functions_eagerly(True)
    if where == "vmap":
        got, want = df.vmap(inner)(xs), rows
    elif where == "while_loop":
        _, got = df.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, inner(v)), [df.constant(0), xs[0]])
        want = _branchy_np(_branchy_np(XS[0]))
    elif where == "scan":
        got = df.scan(lambda c, x: c + inner(x), xs, initializer=df.zeros([2], df.float64))
        want = np.cumsum(rows, axis=0)
    elif where == "cond":
        got = df.cond(df.reduce_sum(xs) < 0, lambda: inner(xs[1]), lambda: inner(xs[0]))
        want = rows[1]
    else:
        outer = df.defun(lambda x: inner(x) + 1.0)
        concrete = outer.get_concrete_function(df.TensorSpec([2], df.float64))
        got, want = concrete(xs[1]), rows[1] + 1.0
    np.testing.assert_allclose(got.numpy(), want)
    assert df.config.functions_run_eagerly()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")    # the mean of 0 rows: nan
def test_relaxed_traces_from_several_threads_at_once():
    """Four threads call one defun at sizes 0..39 in random order, Python switching threads
    every microsecond: one exact and one relaxed trace, its pattern plans and static plans
    made while other threads call it; every result as numpy's."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    inner = _branchy()

    @df.defun
    def f(x, w):
        h = df.tanh(df.matmul(x, w))
        return df.reduce_mean(inner(h), axis=0), df.reduce_sum(h)

    failures = []

    def calls(seed):
        r = np.random.default_rng(seed)
        for _ in range(60):
            x = r.standard_normal((int(r.integers(0, 40)), 3)).astype(np.float32)
            mean, total = f(df.constant(x), df.constant(w))
            h = np.tanh(x @ w)
            if len(x) and not (np.allclose(mean.numpy(), _branchy_np(h).mean(0), rtol=1e-4, atol=1e-5)
                               and np.allclose(total.numpy(), h.sum(), rtol=1e-4, atol=1e-4)):
                failures.append(len(x))
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=calls, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not failures
    assert f.trace_count == 2 and f.retrace_reasons()[0].relaxed


def test_the_eager_switch_flipped_by_another_thread_while_relaxed_traces_run():
    """One thread flips run_functions_eagerly on and off while two others call a relaxed
    defun: each call runs eagerly or as a graph, the same results either way."""
    f = _branchy()
    stop = threading.Event()
    failures = []

    def flip():
        on = True
        while not stop.is_set():
            df.config.run_functions_eagerly(on)
            on = not on
        df.config.run_functions_eagerly(False)

    def calls(seed):
        r = np.random.default_rng(seed)
        for _ in range(150):
            x = r.standard_normal(int(r.integers(1, 9)))
            if not np.allclose(f(df.constant(x)).numpy(), _branchy_np(x)):
                failures.append(x)
    flipper = threading.Thread(target=flip)
    workers = [threading.Thread(target=calls, args=(s,)) for s in range(2)]
    flipper.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    flipper.join()
    assert not failures and not df.config.functions_run_eagerly()


def test_an_interrupt_while_the_relaxed_trace_is_made_leaves_nothing_behind():
    """A KeyboardInterrupt raised while a relaxed trace is made reaches the caller, is not
    taken for "this function needs static sizes", and leaves no trace or reason behind: the
    next new size makes the relaxed trace."""
    armed = [True]

    @df.defun
    def f(x):
        if armed[0] and x.shape[0] is None:     # tracing the relaxed trace
            raise KeyboardInterrupt
        return df.reduce_sum(x * 2.0)

    assert f(df.constant(np.ones(3))).numpy() == 6.0
    with pytest.raises(KeyboardInterrupt):
        f(df.constant(np.ones(4)))
    assert f.trace_count == 1 and f.retrace_reasons() == []
    armed[0] = False
    assert f(df.constant(np.ones(5))).numpy() == 10.0
    assert f(df.constant(np.ones(7))).numpy() == 14.0
    assert f.trace_count == 2 and f.retrace_reasons()[0].relaxed
