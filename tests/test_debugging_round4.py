"""Debugging a defun: df.config.run_functions_eagerly, df.debugging.enable_check_numerics
(forward and backward, eager and graph, naming the op and the user's line), and errors and
warnings raised while a compiled plan runs naming the user's line, never generated code."""
import gc
import inspect
import os
import re
import traceback
import warnings
import weakref

import numpy as np
import pytest

import defun as df
from defun.function import Function

f32 = np.float32


@pytest.fixture(autouse=True)
def _switches_off():
    yield
    df.config.run_functions_eagerly(False)
    df.debugging.disable_check_numerics()


def _line(fn, marker):
    """The line number of the line of `fn`'s source holding `marker`."""
    lines, start = inspect.getsourcelines(fn)
    return next(start + k for k, text in enumerate(lines) if marker in text)


# ====================================================================== run_functions_eagerly
def _mlp_step():
    rng = np.random.default_rng(0)
    w = df.Variable(rng.normal(size=(3, 4)).astype(f32))
    b = df.Variable(rng.normal(size=(4,)).astype(f32))
    seen = []

    @df.defun
    def step(x, y, lr=0.1):
        seen.append(type(x).__name__)
        with df.GradientTape() as tape:
            h = df.tanh(x @ w + b)
            loss = df.reduce_mean(df.square(df.reduce_sum(h, axis=1) - y))
            loss = df.cond(loss > 100.0, lambda: loss * 0.5, lambda: loss)
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(lr * gw)
        b.assign_sub(lr * gb)
        return {"loss": loss, "gw": gw, "n": 3}

    x = rng.normal(size=(5, 3)).astype(f32)
    y = rng.normal(size=(5,)).astype(f32)
    return step, w, b, seen, x, y


def test_run_functions_eagerly_runs_the_python_body_with_the_graphs_results():
    step, w, b, seen, x, y = _mlp_step()
    w0, b0 = w.numpy().copy(), b.numpy().copy()
    graph_out = step(df.constant(x), y)
    graph_w = w.numpy().copy()
    assert seen == ["SymbolicTensor"] and step.trace_count == 1
    w.assign(w0)
    b.assign(b0)
    assert not df.config.functions_run_eagerly()
    df.config.run_functions_eagerly(True)
    assert df.config.functions_run_eagerly()
    eager_out = step(df.constant(x), y)         # numpy y becomes a tensor, as a trace takes it
    assert seen == ["SymbolicTensor", "EagerTensor"] and step.trace_count == 1
    assert set(eager_out) == {"loss", "gw", "n"}
    for k in ("loss", "gw"):
        np.testing.assert_allclose(eager_out[k].numpy(), graph_out[k].numpy(), rtol=1e-5, atol=1e-7)
    assert isinstance(eager_out["n"], df.Tensor) and eager_out["n"].numpy() == graph_out["n"].numpy()
    np.testing.assert_allclose(w.numpy(), graph_w, rtol=1e-5, atol=1e-7)
    df.config.run_functions_eagerly(False)
    assert Function.__call__ is Function._call_graph      # the graph call is back, unchanged
    step(df.constant(x), y)
    assert seen[-1] == "EagerTensor" and len(seen) == 2 and step.trace_count == 1


def test_run_functions_eagerly_gives_the_graphs_gradients_through_a_defun():
    w = df.Variable(np.array([[0.5], [-1.5]], f32))

    @df.defun
    def loss(x, k):
        return df.reduce_sum(df.sin(x @ w) * k)

    x = df.constant(np.array([[1.0, 2.0], [3.0, -1.0]], f32))
    k = df.constant(np.array([[2.0], [3.0]], f32))

    def grads():
        with df.GradientTape() as tape:
            tape.watch(x)
            y = loss(x, k)
        vg = df.value_and_gradients_function(loss, [0, 1])(x, k)
        return [y, *tape.gradient(y, [x, w]), vg[0], *vg[1]]

    in_graph = grads()
    df.config.run_functions_eagerly(True)
    eagerly = grads()
    for a, e in zip(in_graph, eagerly):
        np.testing.assert_allclose(e.numpy(), a.numpy(), rtol=1e-6)
    assert loss.trace_count == 1


def test_run_functions_eagerly_keeps_input_signature_refusals_and_nested_defuns_run_eagerly():
    inner_seen = []

    @df.defun
    def inner(x):
        inner_seen.append(type(x).__name__)
        return x * 2.0

    @df.defun(input_signature=[df.TensorSpec([None], df.float32)])
    def outer(x):
        return inner(x) + 1.0

    df.config.run_functions_eagerly(True)
    np.testing.assert_allclose(outer(df.constant([1.0, 2.0])).numpy(), [3.0, 5.0])
    assert inner_seen == ["EagerTensor"] and outer.trace_count == 0 and inner.trace_count == 0
    with pytest.raises(ValueError, match="does not fit input_signature"):
        outer(df.constant([[1.0]]))
    with pytest.raises(TypeError, match="True or False"):
        df.config.run_functions_eagerly("yes")


# ====================================================================== check numerics
def test_check_numerics_names_the_first_eager_op_and_its_line():
    df.debugging.enable_check_numerics()
    x = df.constant([1.0, -1.0])

    def f():
        y = df.log(x)                 # MARK-log: NaN here first
        return df.sqrt(y)

    with pytest.raises(df.errors.InvalidArgumentError) as info:
        f()
    msg = str(info.value)
    assert msg.startswith("check_numerics: log produced NaN in the forward at ")
    assert f"{__file__}:{_line(f, 'MARK-log')}" in msg
    with pytest.raises(df.errors.InvalidArgumentError, match="produced Inf in the forward"):
        df.constant([0.0]) ** -1.0
    # integers are not checked; finite float16 values whose sum overflows are not NaN
    df.constant([1, 2]) // df.constant([1, 1])
    big = df.constant(np.full(8, 60000.0, np.float16))
    np.testing.assert_array_equal((big * 1.0).numpy(), np.full(8, 60000.0, np.float16))
    with pytest.raises(df.errors.InvalidArgumentError, match="produced NaN"):
        df.constant(np.array([1 + 1j, np.nan], np.complex64)) * 1.0


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_check_numerics_in_a_graph_forward_names_the_node_and_the_users_line(backend):
    if backend not in df.backends():
        pytest.skip("numba is not installed")

    def body(x):
        y = df.exp(x) * 2.0
        z = df.log(y - 2.0)           # MARK-forward
        return df.reduce_sum(z * z)

    f = df.defun(body, backend=backend)
    x = df.constant(np.array([1.0, 0.0], f32))
    clean = f(x)                               # a plain plan: NaN flows through, no check
    assert np.isinf(clean.numpy()) or np.isnan(clean.numpy())
    df.debugging.enable_check_numerics()
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        f(x)
    msg = str(info.value)
    assert "produced Inf in the forward at " in msg and "log" in msg
    assert f"{__file__}:{_line(body, 'MARK-forward')}" in msg
    np.testing.assert_allclose(f(df.constant(np.array([1.0, 2.0], f32))).numpy(),
                               np.sum(np.log(np.exp([1.0, 2.0]) * 2 - 2) ** 2), rtol=1e-5)
    df.debugging.disable_check_numerics()
    assert "q" not in "".join(line.split("=")[0] for line in f.get_concrete_function(x).plan_source().splitlines())


def test_check_numerics_in_a_backward_names_the_forward_ops_line():
    def body(x):
        r = df.sqrt(x)                # MARK-sqrt: its gradient divides by 0 at x = 0
        return df.reduce_sum(r * 3.0)

    f = df.defun(body)
    x = df.constant(np.array([4.0, 0.0], f32))
    df.debugging.enable_check_numerics()
    with df.GradientTape() as tape:
        tape.watch(x)
        y = f(x)                      # the forward is finite
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        tape.gradient(y, x)
    msg = str(info.value)
    assert "produced Inf in the backward (the gradient of sqrt, the forward op at " in msg
    assert f"{__file__}:{_line(body, 'MARK-sqrt')}" in msg
    # the same eagerly, and in a whole step traced with its tape
    with df.GradientTape() as tape:
        tape.watch(x)
        y = body(x)
    with pytest.raises(df.errors.InvalidArgumentError, match="in the backward .the gradient of sqrt") as info:
        tape.gradient(y, x)
    assert f"{__file__}:{_line(body, 'MARK-sqrt')}" in str(info.value)

    @df.defun
    def step(x):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = body(x)
        return tape.gradient(y, x)

    with pytest.raises(df.errors.InvalidArgumentError, match="in the backward .the gradient of sqrt") as info:
        step(x)
    assert f"{__file__}:{_line(body, 'MARK-sqrt')}" in str(info.value)


def test_check_numerics_reaches_into_branches_loops_and_nested_defuns():
    inner = df.defun(lambda v: df.log(v))

    def body(x):
        y = df.cond(df.reduce_sum(x) > 0.0, lambda: inner(x), lambda: x)
        _, z = df.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a * 2.0), (df.constant(0), y))
        return z

    f = df.defun(body)
    df.debugging.enable_check_numerics()
    np.testing.assert_allclose(f(df.constant([1.0, 2.0])).numpy(), 4 * np.log([1.0, 2.0]), rtol=1e-6)
    with pytest.raises(df.errors.InvalidArgumentError, match="log .* produced NaN in the forward"):
        f(df.constant([3.0, -1.0]))


# ====================================================================== plan errors and warnings
def test_a_numpy_warning_inside_a_plan_names_the_users_line():
    def body(x):
        y = df.log(x)                 # MARK-warn: log(0) warns
        return y * 2.0

    f = df.defun(body)
    x = df.constant(np.array([1.0, 0.0], f32))
    f(df.constant(np.array([1.0, 2.0], f32)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f(x)
    (w,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert (w.filename, w.lineno) == (__file__, _line(body, "MARK-warn"))
    assert "divide by zero" in str(w.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning) as info:
            f(x)
    assert f"traced at {__file__}:{_line(body, 'MARK-warn')}" in str(info.value)


def _runtime_warnings(f, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f(*args)
    return [(w.filename, w.lineno, str(w.message)) for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_warning_inside_a_python_kernel_names_the_users_line(backend):
    if backend not in df.backends():
        pytest.skip("numba is not installed")

    def body(x, d, e):
        q = df.divide(x, d)             # MARK-divide: a Python kernel (math_ops._divide_kernel)
        s = df.sort(q)                  # numba fuses neither lone op: they run numpy's kernels
        m = df.reduce_mean(e, axis=0)   # MARK-mean: a kernel bound to its attrs, then _k_mean
        return s, m

    f = df.defun(body, backend=backend)
    x, d = df.constant([1.0, 2.0]), df.constant([0.0, 1.0])
    e = df.constant(np.zeros((0, 3), f32))
    got = _runtime_warnings(f, x, d, e)
    assert (__file__, _line(body, "MARK-divide"), "divide by zero encountered in divide") in got, got
    assert (__file__, _line(body, "MARK-mean"), "invalid value encountered in divide") in got, got
    assert not any(fn.endswith("math_ops.py") for fn, _, _ in got), got
    q, m = f(df.constant([1.0, 2.0]), df.constant([2.0, 1.0]), df.constant(np.ones((2, 3), f32)))
    np.testing.assert_allclose(q.numpy(), [0.5, 2.0])  # sorted
    np.testing.assert_allclose(m.numpy(), [1.0, 1.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning) as info:
            f(x, d, e)
    assert f"traced at {__file__}:{_line(body, 'MARK-divide')}" in str(info.value)


def test_python_kernel_warnings_of_two_lines_are_two_warnings_by_default():
    def body(x, d):
        a = x / d                       # MARK-first
        b = (x + 1.0) / d               # MARK-second
        return a, b

    f = df.defun(body)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")    # once per place: the kernel's one place hid the second
        f(df.constant([1.0]), df.constant([0.0]))
    lines = {w.lineno for w in caught if w.filename == __file__}
    assert lines == {_line(body, "MARK-first"), _line(body, "MARK-second")}, [str(w) for w in caught]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_an_error_inside_a_plan_names_the_users_line_and_no_generated_code(backend):
    if backend not in df.backends():
        pytest.skip("numba is not installed")

    def body(x, i):
        y = df.gather(x, i) * 2.0       # MARK-gather
        z = df.sin(y)
        return z + 1.0

    f = df.defun(body, backend=backend)
    x = df.constant([1.0, 2.0])
    f(x, df.constant(1))
    f(x, df.constant(0))            # the fast call runner (`<defun call ...>`) runs it now
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        f(x, df.constant(7))
    assert type(info.value) is df.errors.InvalidArgumentError
    assert f"traced at {__file__}:{_line(body, 'MARK-gather')}" in str(info.value)
    text = "".join(traceback.format_exception(info.value))
    assert "<defun" not in text, text
    frames = traceback.extract_tb(info.value.__traceback__)
    assert not any(fr.filename.startswith("<") for fr in frames), frames
    # one traceback, no chained copy: the frame running the plan is at the failing node's
    # line (not the last node's), and the defun's runner at its def
    assert info.value.__cause__ is None
    at = [(fr.filename, fr.lineno) for fr in frames]
    assert (__file__, _line(body, "MARK-gather")) in at
    assert (__file__, _line(body, "return z + 1.0")) not in at
    assert (__file__, _line(body, "def body")) in at
    assert not any(fr.filename.endswith("executor.py") for fr in frames)


def test_a_numpy_error_inside_a_plan_becomes_invalid_argument_naming_the_users_line():
    def body(x):
        y = df.reshape(x, [-1, 5])      # MARK-reshape
        return df.sin(y) + 1.0

    f = df.defun(body, input_signature=[df.TensorSpec([None])])
    with pytest.raises(df.errors.InvalidArgumentError, match="cannot reshape") as info:
        f(df.constant([1.0, 2.0, 3.0]))
    assert f"traced at {__file__}:{_line(body, 'MARK-reshape')}" in str(info.value)
    assert type(info.value.__cause__) is ValueError
    text = "".join(traceback.format_exception(info.value))
    assert "<defun" not in text and f'File "{__file__}", line {_line(body, "MARK-reshape")}' in text, text


def test_nodes_traced_under_a_defuns_call_name_the_users_line_not_the_call_runner():
    f = df.defun(lambda x: df.reduce_sum(df.sqrt(x)))
    x = df.constant([4.0, 1.0])
    f(x)        # the fast call runner (`<defun call ...>`) is made
    with df.GradientTape() as tape:
        tape.watch(x)
        y = f(x)              # MARK-under-tape: the backward is built here
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [0.25, 0.5])
    backward = f.get_concrete_function(x).backward_function().graph
    files = {n.site[0] for n in backward.nodes if n.site}
    assert files == {__file__}, files


# ====================================================================== loaded documents
def _document(body, x, **kw):
    f = df.defun(body)
    return df.export_json(f.get_concrete_function(x), include_backward=True, **kw)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_check_numerics_covers_a_loaded_document_forward_and_backward(backend):
    if backend not in df.backends():
        pytest.skip("numba is not installed")

    def body(x):
        y = df.log(x)                 # MARK-loaded-log
        r = df.sqrt(x)                # MARK-loaded-sqrt: its gradient divides by sqrt(0)
        return df.reduce_sum(y * 2.0 + r)

    base = os.path.basename(__file__)
    g = df.load_json(_document(body, df.constant([1.0, 2.0])), backend=backend)
    plain = g(np.array([1.0, -1.0], f32))           # not checking: the NaN flows out
    assert np.isnan(plain.numpy())
    df.debugging.enable_check_numerics()
    for arg in (np.array([1.0, -1.0], f32), df.constant([1.0, -1.0])):
        with pytest.raises(df.errors.InvalidArgumentError) as info:
            g(arg)
        assert str(info.value).startswith("check_numerics: log (")
        assert f"produced NaN in the forward at {base}:{_line(body, 'MARK-loaded-log')}" in str(info.value)
    x = df.constant([1.0, 0.0])                      # log(0) = -inf: the forward fails first
    with pytest.raises(df.errors.InvalidArgumentError, match="log .* produced Inf in the forward"):
        g(x)
    x = df.constant([1.0, 4.0])
    with df.GradientTape() as tape:
        tape.watch(x)
        y = g(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0 + 0.5, 0.5 + 0.25], rtol=1e-6)


@pytest.mark.parametrize("sites", [True, False])
def test_check_numerics_in_a_loaded_backward_names_the_forward_line_or_the_node(sites):
    def body(x):
        r = df.sqrt(x)                # MARK-loaded-grad: its gradient divides by sqrt(0)
        return df.reduce_sum(r * 3.0)

    g = df.load_json(_document(body, df.constant([1.0, 2.0]), sites=sites))
    x = df.constant([4.0, 0.0])
    df.debugging.enable_check_numerics()
    with df.GradientTape() as tape:
        tape.watch(x)
        y = g(x)                      # finite: sqrt(0) = 0
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        tape.gradient(y, x)
    msg = str(info.value)
    assert re.match(r"check_numerics: divide \(%\d+ of body_grad\) produced Inf in the backward", msg), msg
    where = f"{os.path.basename(__file__)}:{_line(body, 'MARK-loaded-grad')}"
    if sites:
        assert msg.endswith(f"(its forward op at {where})"), msg
    else:
        assert " at " not in msg, msg


def test_check_numerics_keeps_a_loaded_documents_budgets():
    def body(x):
        _, y = df.while_loop(lambda i, a: i < 50, lambda i, a: (i + 1, a * 1.01), (df.constant(0), x))
        return y

    x = df.constant([1.0, 2.0])
    doc = _document(body, x)
    tight, loose = df.load_json(doc, max_iterations=10), df.load_json(doc)
    df.debugging.enable_check_numerics()
    for _ in range(2):      # alternately: each keeps its own budgets (and its checked plans)
        with pytest.raises(df.errors.ResourceExhaustedError, match="iterations"):
            tight(x)
        np.testing.assert_allclose(loose(x).numpy(), np.array([1.0, 2.0]) * 1.01 ** 50, rtol=1e-4)
    with pytest.raises(df.errors.InvalidArgumentError, match="produced NaN in the forward"):
        loose(df.constant([np.nan, 1.0]))
    gone = weakref.ref(tight.backend)       # its checking twin does not keep it
    del tight
    gc.collect()
    assert gone() is None


# ====================================================================== where a plan's error points
# A numpy error in a plan becomes an InvalidArgumentError caused by it; its own traceback
# (not only its cause's) has the plan's frame at the failing node's line: the last frame in
# the user's file, on every route a plan runs, and no frame at the plan's last line.
_M = [df.TensorSpec([None, None], df.float32)] * 2


def _matmul_body(a, b):
    c = a * 2.0                   # MARK-double
    d = df.matmul(c, b)           # MARK-matmul
    e = d + 1.0
    return df.tanh(e)             # MARK-matmul-last


def _user_lines(exc):
    """The line numbers of `exc`'s own traceback in this file (a loaded document's sites
    name it by its base name)."""
    base = os.path.basename(__file__)
    return [fr.lineno for fr in traceback.extract_tb(exc.__traceback__) if os.path.basename(fr.filename) == base]


def _fails_at(call, fn, marker, last_marker=None, cause=ValueError):
    """Run `call`, which fails in a plan on `fn`'s line holding `marker`: its error's own
    traceback ends, in this file, at that line; none of its frames is at `last_marker`'s."""
    with pytest.raises(df.errors.InvalidArgumentError) as info:
        call()
    lines = _user_lines(info.value)
    assert lines and lines[-1] == _line(fn, marker), (lines, info.value)
    if last_marker is not None:
        assert _line(fn, last_marker) not in lines, lines
    assert type(info.value.__cause__) is cause
    assert f"{os.path.basename(__file__)}:{_line(fn, marker)})" in str(info.value)
    assert not any(fr.filename.endswith("executor.py") for fr in traceback.extract_tb(info.value.__traceback__))
    return info.value


def _rows(n, k):
    return df.constant(np.ones((n, k), f32))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("n", [0, 1, 3])
def test_a_plans_error_points_at_the_failing_line_in_the_quiet_runner(n, backend):
    if backend not in df.backends():
        pytest.skip("numba is not installed")
    f = df.defun(_matmul_body, input_signature=_M, backend=backend)
    assert f(_rows(n, 3), _rows(3, 5)).shape == (n, 5)
    assert f(_rows(n, 3), _rows(3, 5)).shape == (n, 5)     # the fast call runner now
    error = _fails_at(lambda: f(_rows(n, 3), _rows(4, 5)), _matmul_body, "MARK-matmul", "MARK-matmul-last")
    # the failing node and its values (with numba: a node of a fused region, not its first)
    assert re.search(rf"while executing %\d+: f32\[\?,\?\] = matmul\(.* on float32\[{n}, 3\], float32\[4, 5\] \(traced",
                     str(error)), error


def test_a_plans_error_points_at_the_failing_line_under_a_tape_forward_and_backward():
    @df.custom_gradient
    def pairs(x):
        def grad(dy):
            r = df.reshape(dy, [-1, 2])       # MARK-grad: odd sizes fail in the backward
            return df.reshape(r, df.shape(dy))
        return df.identity(x), grad

    def body(x):
        y = df.reshape(pairs(x), [-1, 3]) * 2.0    # MARK-forward
        return df.reduce_sum(df.sin(y))             # MARK-forward-last

    f = df.defun(body, input_signature=[df.TensorSpec([None])])

    def gradient(x):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        return tape.gradient(y, x)

    for n in (0, 6):
        np.testing.assert_allclose(gradient(df.constant(np.zeros(n, f32))).numpy(), np.full(n, 2.0))
    for n in (1, 4):
        _fails_at(lambda: gradient(df.constant(np.zeros(n, f32))), body, "MARK-forward", "MARK-forward-last")
    _fails_at(lambda: gradient(df.constant(np.zeros(3, f32))), pairs, "MARK-grad")


def test_a_plans_error_points_at_the_failing_line_in_relaxed_pattern_and_specialized_plans():
    from defun.trace_calls import HOT_CALLS     # function-level: the count the test relies on

    f = df.defun(_matmul_body)
    for n in (2, 3):                # the second size relaxes the trace
        f(_rows(n, n + 1), _rows(n + 1, 5))
    for n in (0, 1):                # sizes not hot: a pattern plan
        _fails_at(lambda: f(_rows(n, 3), _rows(4, 5)), _matmul_body, "MARK-matmul", "MARK-matmul-last")
    assert f.trace_count == 2

    def body(x, k):
        y = df.pow(x * 2, k)        # MARK-relaxed: integers to negative powers fail (defun's error)
        return y + 1                # MARK-relaxed-last

    def ints(n):
        return df.constant(np.ones(n, np.int32))

    g = df.defun(body)
    k, bad = df.constant(2), df.constant(-1)
    for n in (4, 6):
        g(ints(n), k)
    for _ in range(HOT_CALLS + 1):  # 10 is hot: a plan specialized to it
        np.testing.assert_array_equal(g(ints(10), k).numpy(), np.full(10, 5))
    assert g.trace_count == 2 and len(list(g._cache.values())[-1]._calls._specialized) == 1
    _fails_at(lambda: g(ints(10), bad), body, "MARK-relaxed", "MARK-relaxed-last", cause=type(None))


def test_a_plans_error_points_at_the_failing_line_of_a_nested_defun():
    # a loaded document's function stays a call node (a defun's is inlined)
    inner = df.load_json(df.export_json(df.defun(_matmul_body, input_signature=_M).get_concrete_function()))

    def outer(a, b):
        y = inner(a, b) * 3.0       # MARK-call
        return y - 1.0

    f = df.defun(outer, input_signature=_M)
    assert f(_rows(1, 3), _rows(3, 2)).shape == (1, 2)
    error = _fails_at(lambda: f(_rows(1, 3), _rows(4, 2)), _matmul_body, "MARK-matmul", "MARK-matmul-last")
    assert _line(outer, "MARK-call") in _user_lines(error)


@pytest.mark.parametrize("form", ["cond", "while", "scan"])
def test_a_plans_error_points_at_the_failing_line_in_a_control_flow_body(form):
    def step(a, b):
        return df.matmul(a, b) + 1.0        # MARK-body

    def body(a, b):
        if form == "cond":
            y = df.cond(df.reduce_sum(b) > 0.0, lambda: step(a, b), lambda: a)
        elif form == "while":
            _, y = df.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, step(v, b)), (df.constant(0), a))
        else:
            y = df.scan(lambda acc, v: step(acc, b), df.zeros([2]), initializer=a)[-1]
        return df.tanh(y)                   # MARK-flow-last

    f = df.defun(body, input_signature=_M)
    assert f(_rows(2, 3), _rows(3, 3)).shape == (2, 3)
    error = _fails_at(lambda: f(_rows(2, 3), _rows(4, 3)), step, "MARK-body")
    assert _line(body, "MARK-flow-last") not in _user_lines(error)


def test_a_plans_error_points_at_the_failing_line_in_checked_and_assigning_plans():
    v = df.Variable(np.zeros(2, f32))

    def body(a, b):
        v.assign_add(df.reduce_sum(a, axis=1)[:2])
        d = df.matmul(a, b)                 # MARK-assigning
        return d + v.read_value()[0]        # MARK-assigning-last

    f = df.defun(body, input_signature=_M)
    f(_rows(2, 3), _rows(3, 1))
    _fails_at(lambda: f(_rows(2, 3), _rows(4, 1)), body, "MARK-assigning", "MARK-assigning-last")
    np.testing.assert_allclose(v.numpy(), [3.0, 3.0])       # undone
    df.debugging.enable_check_numerics()
    g = df.defun(_matmul_body, input_signature=_M)
    _fails_at(lambda: g(_rows(2, 3), _rows(4, 5)), _matmul_body, "MARK-matmul", "MARK-matmul-last")
    with pytest.raises(df.errors.InvalidArgumentError, match="produced NaN") as info:
        g(df.constant(np.full((1, 3), np.nan, f32)), _rows(3, 5))
    assert _user_lines(info.value)[-1] == _line(_matmul_body, "MARK-double")


def test_a_warning_turned_error_in_a_plan_points_at_its_line():
    # (numpy's kernels: the numba backend's fused loops do not warn)
    def body(x, d):
        y = df.log(x) * 2.0         # MARK-log-error: log(0) warns
        q = y / d                   # MARK-divide-error: divide's kernel is Python
        return df.sort(q)           # MARK-warn-last

    f = df.defun(body, input_signature=[df.TensorSpec([None])] * 2)
    for n in (0, 1, 2):
        f(df.constant(np.ones(n, f32)), df.constant(np.ones(n, f32)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x, d, marker in [([0.0], [1.0], "MARK-log-error"), ([1.0, 2.0], [1.0, 0.0], "MARK-divide-error")]:
            with pytest.raises(RuntimeWarning) as info:
                f(df.constant(x), df.constant(d))
            lines = _user_lines(info.value)
            assert lines[-1] == _line(body, marker) and _line(body, "MARK-warn-last") not in lines, lines
