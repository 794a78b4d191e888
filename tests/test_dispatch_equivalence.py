"""The fast paths decide what the reference decides: every op row with a specialized public
function (runtime/fast_dispatch.py, `SPECIALIZED`) against `run_op` (runtime/execute.py)
on the same operands, in every mode a call can meet.

Operand forms: eager tensors of every dtype the row takes and of dtypes it refuses, shapes
that broadcast and shapes that do not (Hypothesis draws them, and the values); Python
numbers (ints, floats, a float zero, bools), numpy arrays, variables, lists, and mixed
dtypes that promote (int8 + int16) or must raise. Modes: quiet, under a tape (its entries
and the gradients through them), under an execution callback, under an execution trace,
and inside a trace (a graph node, run). Compared: values, dtypes and shapes, errors (type
and message), tape entries (ids named by role), gradients, callback and trace records.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import defun as df
from defun.runtime import tape as tape_mod
from defun.runtime.execute import run_op
from defun.runtime.fast_dispatch import SPECIALIZED
from defun.runtime.registry import get

ROWS = sorted(SPECIALIZED)
# one numpy dtype per kind a row may take or refuse (float twice: both widths)
_DTYPES = {"f": (np.float32, np.float64), "i": (np.int32,), "u": (np.uint8,), "b": (np.bool_,),
           "c": (np.complex64,)}
_ALL = [d for ds in _DTYPES.values() for d in ds]
_SHAPES = [((), ()), ((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((3,), (4,))]  # the last: no broadcast


def _supported(op):
    return [d for k, ds in _DTYPES.items() if op.kinds is None or k in op.kinds for d in ds]


def _elements(dtype):
    d = np.dtype(dtype)
    if d.kind == "b":
        return st.booleans()
    if d.kind in "iu":
        return st.integers(0 if d.kind == "u" else -5, 5)
    if d.kind == "c":
        return st.complex_numbers(max_magnitude=3, allow_nan=False, width=64)
    return st.floats(-3, 3, width=32)


# ------------------------------------------------------------------ what a call did
def _value(t):
    v = np.asarray(t._value)
    return (v.dtype.str, v.shape, v.tobytes())      # bit-exact, nan included


def _outcome(fn, args):
    """('ok', the result's dtype, shape, bytes) or ('error', type, message)."""
    try:
        out = fn(*args)
    except Exception as e:   # noqa: BLE001 - the error is what is compared
        return ("error", type(e), str(e)), None
    return ("ok", out.dtype, _value(out)), out


def _entry_text(entry, roles):
    """A tape entry with every id named by its role (ids differ between the two runs)."""
    def named(i):
        return roles.setdefault(i, f"t{len(roles)}")
    out = []
    for k, item in enumerate(entry):
        if k == 2 or 4 <= k < 4 + entry[1]:
            out.append(tuple(named(i) for i in item) if type(item) is tuple else named(item))
        elif isinstance(item, (np.ndarray, np.generic)):     # a kernel may give a numpy scalar
            out.append((type(item).__name__, item.dtype.str, np.shape(item), np.asarray(item).tobytes()))
        elif isinstance(item, df.Tensor):
            out.append(("tensor", named(item._id)))
        else:
            out.append(item)
    return tuple(out)


def _taped(fn, args):
    """(outcome, entries with ids by role, the gradients wrt the tensor arguments)."""
    tensors = [a for a in args if isinstance(a, (df.Tensor, df.Variable))]
    with df.GradientTape(persistent=True) as tape:
        for t in tensors:
            tape.watch(t)
        outcome, out = _outcome(fn, args)
    roles = {}      # named in order of appearance: alike in both runs when they agree
    entries = [_entry_text(e, roles) for e in tape._tape.entries]
    grads = None
    if out is not None and out.dtype.is_inexact:
        grads = [None if g is None else _value(g) for g in tape.gradient(out, tensors)]
    return outcome, entries, grads


def _heard(fn, args):
    """(outcome, what an execution callback heard, what an execution trace recorded)."""
    heard = []

    def cb(op_name, name, attrs, inputs, outputs):
        heard.append((op_name, name, dict(attrs), [_value(t) for t in inputs],
                      [_value(t) for t in outputs]))
    df.add_execution_callback(cb)
    try:
        outcome, _ = _outcome(fn, args)
    finally:
        df.remove_execution_callback(cb)
    with df.active_trace() as trace:
        traced, _ = _outcome(fn, args)
    records = [(r.op_name, len(r.output_ids)) for r in trace.records]
    return outcome, heard, traced, records, trace.total_elements()


def _in_graph(fn, args):
    """The outcome of the call traced into a graph (tensor arguments as its inputs) and run."""
    positions = [k for k, a in enumerate(args) if isinstance(a, df.Tensor)]

    def traced(*ts):
        full = list(args)
        for k, t in zip(positions, ts):
            full[k] = t
        return fn(*full)
    outcome = _outcome(df.defun(traced), [args[k] for k in positions])[0]
    if outcome[0] == "error":   # the site a trace names is the caller's line: not compared
        outcome = outcome[:2] + (outcome[2].split(" (while tracing, at ")[0],)
    return outcome


def _agree(name, args, graph=False):
    """Every mode of the call gives the same through the public function and `run_op`."""
    op = get(name)
    fast, ref = SPECIALIZED[name], (lambda *a: run_op(op, a))
    assert _outcome(fast, args)[0] == _outcome(ref, args)[0]
    assert _taped(fast, args) == _taped(ref, args)
    assert _heard(fast, args) == _heard(ref, args)
    if graph:
        assert _in_graph(fast, args) == _in_graph(ref, args)


# ------------------------------------------------------------------ eager tensors, drawn
@st.composite
def _tensor_operands(draw, op):
    """Eager tensors for `op`: mostly of one supported dtype, sometimes of two or a refused one."""
    supported = _supported(op)
    dtype = draw(st.sampled_from(supported if draw(st.integers(0, 4)) else _ALL))
    shapes = draw(st.sampled_from(_SHAPES))[:op.num_inputs]
    dtypes = [dtype] * len(shapes)
    if len(shapes) == 2 and draw(st.integers(0, 5)) == 0:
        dtypes[1] = draw(st.sampled_from(_ALL))          # mixed: promotes or raises
    return [df.constant(draw(hnp.arrays(d, s, elements=_elements(d)))) for d, s in zip(dtypes, shapes)]


@pytest.mark.parametrize("name", ROWS)
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_eager_tensor_operands_agree(name, data):
    with np.errstate(all="ignore"):
        _agree(name, data.draw(_tensor_operands(get(name))))


# ------------------------------------------------------------------ the other operand forms
def _first(name):
    d = _supported(get(name))[0]
    values = {"b": [True, False, True], "u": [1, 2, 3], "i": [-1, 2, 3]}.get(np.dtype(d).kind, [0.5, 1.5, -2.0])
    return np.array(values, d)


def _forms(name):
    """Operand tuples beyond eager tensors of one dtype, for a row of one or two inputs."""
    a = _first(name)
    x = df.constant(a)
    if get(name).num_inputs == 1:
        return [(a,), (a.tolist(),), (df.Variable(a),), (2.0,), (3,), (True,), (0.0,)]
    forms = [(x, 2), (x, 2.5), (x, 0.0), (x, -0.0), (x, True), (3, x), (1.5, x), (x, a), (a, x),
             (a, a), (x, a.tolist()), (df.Variable(a), x), (x, df.Variable(a)), (2.0, 3.0),
             (x, "text"), (x, None)]
    for d1, d2 in ((np.int8, np.int16), (np.uint8, np.int8), (np.float32, np.float64),
                   (np.int32, np.float32), (np.int64, np.uint64)):
        forms.append((df.constant(np.array([1, 2, 3], d1)), df.constant(np.array([3, 2, 1], d2))))
    return forms


@pytest.mark.parametrize("name", ROWS)
def test_other_operand_forms_agree(name):
    with np.errstate(all="ignore"):
        for k, args in enumerate(_forms(name)):
            try:
                _agree(name, args, graph=k < 3)
            except AssertionError as e:
                raise AssertionError(f"{name}{tuple(type(a).__name__ for a in args)}: {e}") from None


def test_every_qualifying_row_is_specialized_and_the_table_is_what_df_exports():
    # the rows served here are the public functions themselves, so the tests above run
    # what users call
    assert len(ROWS) >= 30
    for name in ROWS:   # df's own function, or df.math's (bessel_i0e, igamma, ...)
        public = getattr(df, name, None) or getattr(df.math, name)
        assert public is SPECIALIZED[name], name


def test_a_recorded_fast_call_is_one_eager_entry_with_the_reference_layout():
    x, y = df.constant([1.0, 2.0]), df.constant([3.0, 4.0])
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        a = df.add(x, y)
        b = run_op(get("add"), (x, y))
        with df.GradientTape() as inner:       # two tapes: the general recorder
            inner.watch(x)
            c = df.add(x, y)
    e1, e2, e3 = tape._tape.entries
    assert tape_mod.is_eager_entry(e1) and tape_mod.is_eager_entry(e2)
    assert (e1[0], e1[1], e1[3], e1[4:6]) == (e2[0], e2[1], e2[3], e2[4:6]) == ("add", 2, None, (x._id, y._id))
    assert (e1[2], e2[2], e3[2]) == (a._id, b._id, c._id)
    assert inner._tape.entries == [e3]
    np.testing.assert_array_equal(tape.gradient(a, x).numpy(), tape.gradient(b, x).numpy())


# ------------------------------------------------------------------ a defun call's shortest path
# `Function.__call__` first tries `last_call` of the trace its last call ran (defun/concrete.py
# `_runner_source`); the same calls with that path turned off before each call are the reference.
def _str_outcome(fn, args):
    """A call's result as text (structures of tensors print their values), or its error."""
    try:
        return "ok", str(fn(*args))
    except Exception as e:   # noqa: BLE001
        return "error", type(e), str(e)


def _calls(fn, sequence, shortest):
    f = df.defun(fn)
    out = []
    for args in sequence:
        if not shortest:
            f._last_call = None
        out.append(_str_outcome(f, args))
    return out, f.trace_count, [str(r) for r in f.retrace_reasons()]


def _pair(a, b):
    return a * b + 1.0, {"d": a - b}


@pytest.mark.parametrize("fn", [lambda a, b: a + b, _pair, lambda a, b: [df.tanh(a), b]])
def test_the_last_trace_path_agrees_with_the_cache_path(fn):
    x4, y4 = df.constant(np.arange(4.0, dtype=np.float32)), df.constant(np.ones(4, np.float32))
    x3 = df.constant(np.ones(3, np.float32))
    d4 = df.constant(np.arange(4.0))
    sequence = [(x4, y4), (x4, y4), (y4, x4), (x3, x3), (x4, y4), (d4, d4), (x4, y4),
                (np.ones(4, np.float32), y4), (x4, y4), (x4, 2.0), (x4, y4), (x4, d4), (x4, y4)]
    shortest = _calls(fn, sequence, True)
    assert shortest == _calls(fn, sequence, False)
    f = df.defun(fn)
    f(x4, y4), f(x4, y4)
    assert f._last_call is not None          # the path these calls took is the one under test


def test_the_last_trace_path_leaves_tapes_callbacks_traces_and_variables_as_they_were():
    x, y = df.constant(np.arange(4.0, dtype=np.float32)), df.constant(np.ones(4, np.float32))
    f = df.defun(lambda a, b: a * b)
    f(x, y), f(x, y)
    assert f._last_call is not None
    with df.GradientTape() as tape:              # recorded as one op, its gradient right
        tape.watch(x)
        z = f(x, y)
    assert len(tape._tape.entries) == 1
    np.testing.assert_array_equal(tape.gradient(z, x).numpy(), y.numpy())
    seen = []
    cb = lambda op_name, name, attrs, inputs, outputs: seen.append(op_name)  # noqa: E731
    df.add_execution_callback(cb)
    try:
        f(x, y)
    finally:
        df.remove_execution_callback(cb)
    assert seen == [f.get_concrete_function(x, y).graph.name]
    with df.active_trace() as trace:
        f(x, y)
    assert [r.op_name for r in trace.records] == seen
    v = df.Variable(np.zeros(4, np.float32))
    bump = df.defun(lambda p: v.assign_add(p))
    for _ in range(3):
        bump(x)
    np.testing.assert_array_equal(v.numpy(), 3 * x.numpy())
    g = df.defun(lambda p: df.multiply(p, 2.0) + df.constant(1.0))   # inside another trace
    np.testing.assert_array_equal(df.defun(lambda p: g(p) + f(p, p))(x).numpy(),
                                  2 * x.numpy() + 1 + x.numpy() ** 2)


SCALE = df.constant(np.float32(2.0))


def test_the_last_trace_path_keeps_warning_of_a_stale_capture():
    global SCALE
    x = df.constant(np.ones(4, np.float32))
    f = df.defun(lambda a: a * SCALE)
    f(x), f(x), f(x)
    old = SCALE
    SCALE = df.constant(np.float32(3.0))
    try:
        with pytest.warns(df.StaleCaptureWarning, match="SCALE"):
            out = f(x)
    finally:
        SCALE = old
    np.testing.assert_array_equal(out.numpy(), 2 * np.ones(4))    # the trace keeps the old one
