"""The public functions of elementwise ops dispatch plain eager calls themselves
(runtime.fast_dispatch.op_function): results, errors and recordings agree with `run_op`."""
import numpy as np
import pytest

import defun as df
from defun.runtime import tape as tape_mod
from defun.runtime.execute import run_op
from defun.runtime.registry import get

f32 = np.float32
_CALLS = [
    ("add", lambda: (df.constant([1.0, 2.0]), df.constant([3.0, 4.0]))),
    ("add", lambda: (df.constant([1.0, 2.0]), 2.5)),
    ("subtract", lambda: (3, df.constant([1, 2]))),
    ("multiply", lambda: (df.constant(np.ones((2, 1), np.float64)), df.constant(np.ones(3)))),
    ("add", lambda: (df.constant([1.0, 2.0]), np.array([1.0, 2.0], f32))),
    ("add", lambda: (df.constant([1.0, 2.0]), True)),
    ("add", lambda: (df.constant([1.0, 2.0]), 0.0)),
    ("less", lambda: (df.constant([1, 5]), 3)),
    ("logical_and", lambda: (df.constant([True, False]), df.constant([True, True]))),
    # errors: mixed dtypes, a kind the op rejects, shapes that do not broadcast, weak typing
    ("add", lambda: (df.constant([1.0]), df.constant([1], df.int32))),
    ("add", lambda: (df.constant([True]), df.constant([False]))),
    ("add", lambda: (df.constant([1.0, 2.0]), df.constant([1.0, 2.0, 3.0]))),
    ("add", lambda: (df.constant([1, 2]), 1.5)),
    ("exp", lambda: (df.constant([0.0, 1.0]),)),
    ("exp", lambda: (df.constant([0, 1]),)),
    ("negative", lambda: (2.0,)),
    ("sqrt", lambda: (df.constant([4.0, 9.0], df.float64),)),
]


def _outcome(fn, args):
    try:
        out = fn(*args)
    except Exception as e:
        return type(e), str(e)
    return out.dtype, out.numpy().tolist()


@pytest.mark.parametrize("k", range(len(_CALLS)))
def test_public_function_agrees_with_run_op(k):
    name, make = _CALLS[k]
    args = make()
    public = getattr(df, name)
    assert _outcome(public, args) == _outcome(lambda *a: run_op(get(name), a), args)


def test_public_function_records_what_run_op_records():
    x, y = df.constant(np.array([1.0, 2.0])), df.constant(np.array([3.0, 4.0]))
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        a, b = df.multiply(x, y), run_op(get("multiply"), (x, y))
        c, d = df.tanh(a), run_op(get("tanh"), (a,))
        df.add(y, y)                       # watches nothing: not recorded
    entries = tape._tape.entries
    assert len(entries) == 4
    for (e1, e2), (r1, r2) in ((entries[0:2], (a, b)), (entries[2:4], (c, d))):
        assert e1[2] == r1._id and e2[2] == r2._id
        assert (e1[0], e1[1], e1[3], len(e1)) == (e2[0], e2[1], e2[3], len(e2))
        for v1, v2 in zip(e1[4:], e2[4:]):
            np.testing.assert_array_equal(v1, v2)
        assert tape_mod.is_eager_entry(e1) and tape_mod.is_eager_entry(e2)
    gx = tape.gradient([c, d], x)
    np.testing.assert_allclose(gx.numpy(), 2 * (1 - np.tanh([3.0, 8.0]) ** 2) * [3.0, 4.0], rtol=1e-12)


def test_public_function_tells_callbacks_and_traces_and_builds_graph_nodes():
    x, y = df.constant([1.0, 2.0]), df.constant([3.0, 4.0])
    seen = []
    cb = lambda op_name, name, attrs, inputs, outputs: seen.append((op_name, name))
    df.add_execution_callback(cb)
    try:
        df.add(x, y, name="s")
        df.exp(x)
    finally:
        df.remove_execution_callback(cb)
    assert seen == [("add", "s"), ("exp", None)]
    with df.active_trace() as tr:
        z = df.add(x, 1.0)
    assert [r.op_name for r in tr.records] == ["add"] and tr.records[0].output_ids == (z._id,)
    f = df.defun(lambda p: df.exp(df.add(p, 1.0)))
    np.testing.assert_allclose(f(x).numpy(), np.exp([2.0, 3.0]), rtol=1e-6)
    assert [n.op.name for n in f.get_concrete_function(x).graph.nodes
            if n.op.name in ("add", "exp")] == ["add", "exp"]


def test_busy_threads_holds_exactly_the_threads_that_record_or_trace():
    import threading
    from defun.runtime.context import busy_threads
    me = threading.get_ident()
    x = df.constant([1.0, 2.0])
    assert me not in busy_threads
    started, release, seen = threading.Event(), threading.Event(), {}

    def other():       # holds a tape while this thread computes: only its own ops record
        with df.GradientTape() as tape:
            tape.watch(x)
            seen["in"] = threading.get_ident() in busy_threads
            started.set()
            release.wait(10)
            seen["y"] = tape.gradient(df.multiply(x, x), x)
        seen["out"] = threading.get_ident() in busy_threads
    th = threading.Thread(target=other)
    th.start()
    started.wait(10)
    with df.GradientTape() as tape:
        tape.watch(x)
        assert me in busy_threads
        with tape.stop_recording():
            assert me not in busy_threads      # no tape records here: quiet again
            df.exp(x)
        z = df.exp(x)
    assert me not in busy_threads
    traced = []
    df.defun(lambda p: traced.append(me in busy_threads) or p)(x)
    assert traced == [True] and me not in busy_threads   # tracing is not quiet
    release.set()
    th.join()
    assert me not in busy_threads and seen["in"] and not seen["out"]
    np.testing.assert_allclose(seen["y"].numpy(), [2.0, 4.0])
    assert len(tape._tape.entries) == 1
    np.testing.assert_allclose(tape.gradient(z, x).numpy(), np.exp([1.0, 2.0]), rtol=1e-6)
