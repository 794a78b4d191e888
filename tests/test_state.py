"""Variables under threads, failures and interrupts: atomic assignments, serializable calls.

Thread tests shrink the interpreter's switch interval so threads interleave inside every
read-modify-write; each counts the updates it made and checks that none was lost. Interrupt
tests run in a subprocess, raising KeyboardInterrupt in the middle of calls.
"""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import defun as df

F32 = np.float32
THREADS = 8


@pytest.fixture
def tight_switching():
    """Switch threads every microsecond (the default is 5 ms): races show up at once."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def run_threads(work, n=THREADS):
    """Run `work(k)` in n threads started together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    errors = []

    def body(k):
        barrier.wait()
        try:
            work(k)
        except BaseException as e:   # noqa: B036 - reported below
            errors.append(e)
    threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def report(what, threads, calls, lost):
    print(f"{what}: {threads} threads x {calls} calls, lost updates = {lost}")


# ---------------------------------------------------------------------------------------
# Each assignment is atomic

@pytest.mark.parametrize("size", [1, 200_000])   # a large add releases the GIL inside numpy
def test_eager_assign_add_from_threads_loses_no_update(tight_switching, size):
    calls = 400 if size == 1 else 40
    v = df.Variable(np.zeros(size, np.float64))
    one = df.constant(np.ones(size, np.float64))
    run_threads(lambda k: [v.assign_add(one) for _ in range(calls)])
    lost = THREADS * calls - v.numpy()
    report(f"eager assign_add, {size} elements", THREADS, calls, int(lost.max()))
    assert not lost.any()


def test_assign_sub_and_scatter_ops_from_threads_lose_no_update(tight_switching):
    calls = 300
    v = df.Variable(np.zeros((4, 2), np.float64))
    rows = df.IndexedSlices(df.constant(np.ones((2, 2))), df.constant([1, 1]), (4, 2))

    def work(k):
        for _ in range(calls):
            v.scatter_add(rows)             # row 1: +2 per call (a repeated index adds up)
            v.assign_add(np.ones((4, 2)))   # every row +1
            v.assign_sub(np.full((4, 2), 0.5))
    run_threads(work)
    want = np.full((4, 2), 0.5 * THREADS * calls)
    want[1] += 2 * THREADS * calls
    report("scatter_add + assign_add + assign_sub", THREADS, calls, int(np.abs(want - v.numpy()).max()))
    np.testing.assert_array_equal(v.numpy(), want)


def test_defun_assignments_from_threads_lose_no_update(tight_switching):
    calls = 200
    v = df.Variable(np.zeros(3, np.float32))

    @df.defun
    def bump(x):
        v.assign_add(x)
        v.scatter_add(df.IndexedSlices(x[:1], df.constant([2]), (3,)))
        return v.read_value()
    x = df.constant(np.ones(3, F32))
    run_threads(lambda k: [bump(x) for _ in range(calls)])
    want = np.array([1, 1, 2], F32) * THREADS * calls
    report("defun assign_add + scatter_add", THREADS, calls, int(np.abs(want - v.numpy()).max()))
    np.testing.assert_array_equal(v.numpy(), want)


# ---------------------------------------------------------------------------------------
# Calls that assign are serializable

def test_a_read_then_assign_inside_a_defun_is_one_atomic_step(tight_switching):
    """`v.assign(v + 1)` reads, then writes: only a call holding v for its whole run keeps
    another thread's call from slipping in between."""
    calls = 200
    v = df.Variable(0.0, dtype=df.float64)
    trips = df.Variable(0, dtype=df.int64)

    @df.defun
    def increment():
        v.assign(v.read_value() + 1.0)
        trips.assign(trips.read_value() + 1)
    run_threads(lambda k: [increment() for _ in range(calls)])
    report("defun read-then-assign of two variables", THREADS, calls, THREADS * calls - int(v.numpy()))
    assert v.numpy() == THREADS * calls and trips.numpy() == THREADS * calls


def test_transfers_between_two_variables_keep_their_sum(tight_switching):
    """Calls move amounts between two variables in both directions (locks taken in opposite
    program orders): no deadlock, and every completed transfer is counted once."""
    calls = 150
    a = df.Variable(1000.0, dtype=df.float64, name="a")
    b = df.Variable(1000.0, dtype=df.float64, name="b")

    @df.defun
    def a_to_b(amount):
        a.assign(a.read_value() - amount)
        b.assign(b.read_value() + amount)

    @df.defun
    def b_to_a(amount):
        b.assign(b.read_value() - amount)
        a.assign(a.read_value() + amount)
    one = df.constant(1.0, df.float64)
    run_threads(lambda k: [(a_to_b if k % 2 else b_to_a)(one) for _ in range(calls)])
    assert a.numpy() + b.numpy() == 2000.0
    assert a.numpy() == 1000.0 and b.numpy() == 1000.0    # as many each way


# ---------------------------------------------------------------------------------------
# Failed calls undo only themselves

def test_failed_calls_never_undo_other_threads_updates(tight_switching):
    """The issue's reproduction: good increments in 7 threads, failing calls in the 8th.
    The failing calls' rollbacks restored whole old values, losing the others' updates."""
    calls, failures = 300, 40
    v = df.Variable(np.zeros(2, np.float32))

    @df.defun(input_signature=[df.TensorSpec([None, None]), df.TensorSpec([None, 2])])
    def step(x, w):
        v.assign_add(np.ones(2, F32))
        return df.tanh(x @ w)        # fails at run time when the inner sizes differ
    x, good_w, bad_w = np.ones((1, 2), F32), np.ones((2, 2), F32), np.ones((3, 2), F32)
    failed = []

    def work(k):
        if k == 0:
            for _ in range(failures):
                try:
                    step(x, bad_w)
                except df.errors.InvalidArgumentError:
                    failed.append(1)
        else:
            for _ in range(calls):
                step(x, good_w)
    run_threads(work)
    good = (THREADS - 1) * calls
    report(f"good calls with {len(failed)} failing calls beside them", THREADS - 1, calls,
           int(good - v.numpy()[0]))
    assert len(failed) == failures
    np.testing.assert_array_equal(v.numpy(), [good, good])


def test_a_failed_call_restores_every_variable_it_assigned():
    u = df.Variable(np.array([1.0, 2.0], F32))
    w = df.Variable(np.array([[1.0]], F32))

    @df.defun
    def f(x):
        u.assign(u.read_value() * 10.0)
        w.scatter_update(df.IndexedSlices(df.constant([[5.0]]), df.constant([0]), (1, 1)))
        u.assign_sub(x[:2])
        return df.debugging.check_numerics(df.log(x), "bad x")    # fails for x <= 0
    with pytest.raises(df.errors.InvalidArgumentError, match="bad x"), np.errstate(invalid="ignore"):
        f(df.constant([1.0, 2.0, -1.0]))
    np.testing.assert_array_equal(u.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(w.numpy(), [[1.0]])
    f(df.constant([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(u.numpy(), [9.0, 18.0])
    np.testing.assert_array_equal(w.numpy(), [[5.0]])


def test_locks_are_released_after_failures_and_reads_never_wait():
    v = df.Variable(np.zeros(2, F32))
    store = v.handle._value

    @df.defun
    def fail(x):
        v.assign_add(x)
        return df.debugging.check_numerics(df.log(x), "negative")
    with pytest.raises(df.errors.InvalidArgumentError), np.errstate(invalid="ignore"):
        fail(df.constant([-1.0, 1.0]))
    assert store.lock.acquire(blocking=False)    # not held by a finished call
    try:     # while this thread holds the variable, another thread can still read it
        seen = []
        reader = threading.Thread(target=lambda: seen.append(v.read_value().numpy()))
        reader.start()
        reader.join(timeout=10)
        assert len(seen) == 1 and not reader.is_alive()
    finally:
        store.lock.release()


def test_an_eager_assignment_waits_for_a_call_holding_the_variable():
    """Another thread's assign_add blocks until the call that holds the variable ends, so
    the call's rollback can never undo it."""
    v = df.Variable(np.zeros(1, F32))
    started, release = threading.Event(), threading.Event()

    def slow_stream_write(text):
        started.set()
        release.wait(10)

    @df.defun
    def f(x):
        v.assign_add(x)
        df.print("pause", output_stream=sys.stderr)
        return df.debugging.check_numerics(df.log(x - 2.0) * 0.0, "fails after the pause")
    done = []
    old = sys.stderr
    sys.stderr = type("Slow", (), {"write": staticmethod(slow_stream_write), "flush": lambda self: None})()
    try:
        def call():
            with np.errstate(invalid="ignore"):
                pytest.raises(df.errors.InvalidArgumentError, f, df.constant([1.0]))
        caller = threading.Thread(target=call)
        caller.start()
        assert started.wait(10)
        other = threading.Thread(target=lambda: done.append(v.assign_add([5.0]).numpy()))
        other.start()
        other.join(timeout=0.2)
        assert other.is_alive()       # waiting for the call's lock
        release.set()
        caller.join(10)
        other.join(10)
    finally:
        sys.stderr = old
    np.testing.assert_array_equal(v.numpy(), [5.0])   # the failed call undone, the update kept
    np.testing.assert_array_equal(done[0], [5.0])


# ---------------------------------------------------------------------------------------
# KeyboardInterrupt mid-call (in a subprocess)

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(code, timeout=120):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, cwd=_ROOT, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_a_keyboard_interrupt_mid_call_undoes_the_calls_assignments():
    out = run_child("""
        import sys
        import numpy as np
        import defun as df
        v = df.Variable(np.array([1.0, 2.0], np.float32))
        w = df.Variable(np.array([0.0], np.float32))

        class Interrupting:
            def write(self, text):
                raise KeyboardInterrupt
            def flush(self):
                pass

        @df.defun
        def f(x):
            v.assign_add(x)
            w.assign([7.0])
            df.print("interrupted here", output_stream=sys.stderr)
            v.assign_add(x)
            return v.read_value()
        sys.stderr = Interrupting()
        try:
            f(df.constant([10.0, 10.0]))
        except KeyboardInterrupt:
            sys.stderr = sys.__stderr__
            print("interrupted", v.numpy().tolist(), w.numpy().tolist())
        print("unlocked", v.handle._value.lock.acquire(blocking=False),
              w.handle._value.lock.acquire(blocking=False))
    """)
    assert "interrupted [1.0, 2.0] [0.0]" in out
    assert "unlocked True True" in out


def test_interrupts_at_random_moments_leave_whole_calls_and_no_held_lock():
    """SIGINT every few hundred microseconds while calls run: each interrupted call leaves
    all its assignments undone (the two variables stay equal), completed calls all count,
    and no lock stays held (other threads and later calls carry on)."""
    out = run_child("""
        import signal, threading
        import numpy as np
        import defun as df
        a = df.Variable(np.zeros(64), name="a")
        b = df.Variable(np.zeros(64), name="b")

        @df.defun
        def step(x):
            a.assign_add(x)
            y = df.tanh(x) * 0.0 + x
            b.assign_add(y)
            return a.read_value()
        x = df.constant(np.ones(64))
        step(x)                       # traced before the interrupts start
        armed = [False]

        def interrupt(*_):            # only while a call runs: the loop itself is not hit
            if armed[0]:
                raise KeyboardInterrupt
        signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
        done, interrupted = 1, 0
        while done < 5000:
            try:
                armed[0] = True
                step(x)
                armed[0] = False
                done += 1
            except KeyboardInterrupt:
                armed[0] = False
                interrupted += 1
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        # every completed call is counted; interrupted ones may have finished just before
        # the interrupt (the call returned, its result was lost) - the two stay equal
        ok = bool((a.numpy() == b.numpy()).all() and (a.numpy() >= done).all())
        t = threading.Thread(target=lambda: a.assign_add(x))
        t.start(); t.join(10)
        print("calls", done, "interrupted", interrupted, "consistent", ok, "unlocked", not t.is_alive())
    """)
    words = out.split()
    assert words[words.index("consistent") + 1] == "True", out
    assert words[words.index("unlocked") + 1] == "True", out
    print(out.strip())


# ---------------------------------------------------------------------------------------
# Optimizer steps and checkpoints beside training threads and interrupts

def _adam_reference(steps, g):
    """w, m, v of `steps` Adam steps (Keras' rule) with the constant gradient g, in float64."""
    w, m, v = np.zeros_like(g), np.zeros_like(g), np.zeros_like(g)
    for t in range(1, steps + 1):
        alpha = 1e-2 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        m = m + (g - m) * (1 - 0.9)
        v = v + (g * g - v) * (1 - 0.999)
        w = w - (m * alpha) / (np.sqrt(v) + 1e-7)
    return w, m, v


def test_eager_steps_from_two_threads_are_serialized(tight_switching):
    """2 threads x 1,000 eager steps: exactly 2,000 applied, each with its own counter value
    (Adam's bias correction reads it), so the result is the sequential one."""
    steps = 1000
    w = df.Variable(np.zeros(3), name="w")
    u = df.Variable(np.zeros(3), name="u")
    sgd, adam = df.optimizers.SGD(1.0), df.optimizers.Adam(1e-2)
    g = np.array([1.0, -2.0, 0.5])
    gt = df.constant(g)

    def work(k):
        for _ in range(steps):
            sgd.apply_gradients([(gt, w)])
            adam.apply_gradients([(gt, u)])
    run_threads(work, n=2)
    assert int(sgd.iterations.numpy()) == int(adam.iterations.numpy()) == 2 * steps
    np.testing.assert_array_equal(w.numpy(), -2 * steps * g)
    want = _adam_reference(2 * steps, g)
    for got, ref in zip((u, adam.get_slot(u, "m"), adam.get_slot(u, "v")), want):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12, atol=1e-15)
    report("eager apply_gradients (SGD and Adam)", 2, steps, 2 * steps - int(sgd.iterations.numpy()))


def test_two_threads_first_steps_create_the_slots_once(tight_switching):
    for trial in range(100):
        w = df.Variable(np.zeros(2), name=f"w{trial}")
        opt = df.optimizers.Adam(1e-2)
        run_threads(lambda k: opt.apply_gradients([(df.constant(np.ones(2)), w)]), n=2)
        assert len(opt.variables()) == 3, (trial, opt.variables())   # iterations, m, v
        assert int(opt.iterations.numpy()) == 2
        np.testing.assert_allclose(opt.get_slot(w, "m").numpy(), _adam_reference(2, np.ones(2))[1])


def _train_two(a, b, opt, stop):
    """Steps keeping a == b == -(iterations) (SGD, rate 1, gradient 1) until `stop` is set."""
    one = df.constant(np.ones(a.shape))
    while not stop.is_set():
        opt.apply_gradients([(one, a), (one, b)])


def test_a_save_beside_a_training_thread_holds_one_step(tight_switching, tmp_path):
    a, b = df.Variable(np.zeros(50), name="a"), df.Variable(np.zeros(50), name="b")
    opt = df.optimizers.SGD(1.0)
    opt.build([a, b])
    stop = threading.Event()
    t = threading.Thread(target=_train_two, args=(a, b, opt, stop))
    t.start()
    try:
        for k in range(100):
            path = df.save_variables(tmp_path / f"c{k % 4}.npz", [a, b] + opt.variables())
            with np.load(path) as data:
                step = int(data[opt.iterations.name])
                assert (data["a"] == -step).all() and (data["b"] == -step).all(), (k, step)
    finally:
        stop.set()
        t.join()
    assert step > 0


def test_a_restore_beside_a_training_thread_is_one_step(tight_switching, tmp_path):
    a, b = df.Variable(np.zeros(50), name="a"), df.Variable(np.zeros(50), name="b")
    opt = df.optimizers.SGD(1.0)
    opt.build([a, b])
    path = df.save_variables(tmp_path / "c.npz", [a, b] + opt.variables())
    stop = threading.Event()
    t = threading.Thread(target=_train_two, args=(a, b, opt, stop))
    t.start()
    try:
        for _ in range(200):
            df.restore_variables(path, [a, b])
    finally:
        stop.set()
        t.join()
    np.testing.assert_array_equal(a.numpy(), b.numpy())     # never a restored, b stepped


def test_interrupted_steps_and_restores_are_all_or_nothing():
    """SIGINT every few hundred microseconds during eager Adam steps and restores: every
    interrupted one leaves all variables, slots and the counter as they were."""
    out = run_child("""
        import os, random, signal, tempfile, time
        import numpy as np
        import defun as df
        a = df.Variable(np.zeros(64), name="a")
        b = df.Variable(np.zeros(64), name="b")
        opt = df.optimizers.Adam(1e-2)
        g = df.constant(np.ones(64))
        opt.apply_gradients([(g, a), (g, b)])
        path = df.save_variables(os.path.join(tempfile.mkdtemp(), "c.npz"), [a, b] + opt.variables())
        other = df.save_variables(os.path.join(tempfile.mkdtemp(), "c.npz"),
                                  [df.Variable(np.full(64, 5.0), name="a"),
                                   df.Variable(np.full(64, 7.0), name="b")])
        armed = [False]

        def interrupt(*_):
            if armed[0]:
                raise KeyboardInterrupt
        signal.signal(signal.SIGALRM, interrupt)
        start = time.perf_counter()
        for _ in range(20):
            opt.apply_gradients([(g, a), (g, b)])
        took = (time.perf_counter() - start) / 20    # one step; a restore takes about as long
        rng = random.Random(5)
        steps = restores = interrupted = torn = 0
        for k in range(2000):
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 1.5 * took))  # at a random moment
            try:
                if k % 10 == 0:
                    df.restore_variables(path, [a, b] + opt.variables())
                    armed[0] = True
                    df.restore_variables(other, [a, b])
                    armed[0] = False
                    restores += 1
                    ok = (a.numpy() == 5.0).all() and (b.numpy() == 7.0).all()
                    df.restore_variables(path, [a, b] + opt.variables())
                else:
                    before = [v.numpy() for v in [a, b] + opt.variables()]
                    armed[0] = True
                    opt.apply_gradients([(g, a), (g, b)])
                    armed[0] = False
                    steps += 1
                    ok = (a.numpy() == b.numpy()).all()
            except KeyboardInterrupt:
                armed[0] = False
                interrupted += 1
                if k % 10 == 0:     # all restored, or none (a, b as saved: equal)
                    ok = ((a.numpy() == 5.0).all() and (b.numpy() == 7.0).all()) or \\
                         (a.numpy() == b.numpy()).all()
                    df.restore_variables(path, [a, b] + opt.variables())
                else:               # the step happened entirely or not at all
                    after = [v.numpy() for v in [a, b] + opt.variables()]
                    ok = all((x == y).all() for x, y in zip(before, after)) or \\
                        (a.numpy() == b.numpy()).all() and int(after[2]) == int(before[2]) + 1
            signal.setitimer(signal.ITIMER_REAL, 0)
            armed[0] = False
            torn += not ok
        locks = [v.handle._value.lock.acquire(blocking=False) for v in [a, b] + opt.variables()]
        print("steps", steps, "restores", restores, "interrupted", interrupted, "torn", torn,
              "unlocked", all(locks))
    """)
    words = out.split()
    assert words[words.index("torn") + 1] == "0", out
    assert words[words.index("unlocked") + 1] == "True", out
    assert int(words[words.index("interrupted") + 1]) > 0, out
    print(out.strip())
