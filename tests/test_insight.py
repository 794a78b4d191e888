"""The insight tools, each on the failure it exists to explain: why a defun retraced
(`retrace_reasons`, RetracingWarning), what a call keeps for its backward (`side_outputs`),
where the graph first disagrees with eager (`df.debugging.compare`), and a rebound name the
trace still captures (StaleCaptureWarning); plus keyword arguments of input_signature
functions, ConcreteFunction mismatch messages, and a variable's handle passed by mistake."""
import inspect
import re
import warnings

import numpy as np
import pytest

import defun as df
from defun.function import GraphFunction
from defun.graph import backends, passes
from defun.runtime import registry
from defun.runtime import tape as tape_mod


def _line_of(fn, text):
    """`file:line` of the line of function `fn` containing `text`."""
    lines, start = inspect.getsourcelines(fn)
    k = next(i for i, line in enumerate(lines) if text in line)
    return f"{inspect.getsourcefile(fn)}:{start + k}"


# ====================================================================== retracing
def test_retrace_reasons_name_positional_and_keyword_only_arguments_old_to_new():
    @df.defun(reduce_retracing=False)      # a new shape is a new trace, named as such
    def f(x, n, *, mode="a", scale=1.0):
        return x * n * scale

    f(df.constant([1.0]), 1)
    f(df.constant([1.0, 2.0]), 1)                 # x's shape
    f(df.constant([1.0]), 2, mode="b")            # n and mode (keyword-only)
    f(df.constant([1.0]), 2, mode="b", scale=3.0)
    reasons = f.retrace_reasons()
    assert [r.trace for r in reasons] == [2, 3, 4]
    assert reasons[0].changes == ("x: tensor float32[1] -> tensor float32[2]",)
    assert reasons[1].closest == 1
    assert reasons[1].changes == ("n: Python int 1 -> Python int 2",
                                  "mode: Python str 'a' -> Python str 'b'")
    assert str(reasons[2]) == "trace 4 differs from trace 3 in scale: Python float 1.0 -> Python float 3.0"


def test_retrace_reason_compares_with_the_closest_earlier_trace():
    @df.defun
    def f(x, n):
        return x * n

    f(df.constant([1.0]), 1)
    f(df.constant([1.0, 2.0]), 5)
    f(df.constant([1.0]), 2)          # one change from trace 1, two from trace 2
    assert str(f.retrace_reasons()[-1]) == "trace 3 differs from trace 1 in n: Python int 1 -> Python int 2"


def test_retracing_warning_lists_every_changed_argument_with_the_same_text():
    @df.defun
    def f(a, b, c, d, e, *, g=0):
        return a * 1.0

    x = df.constant([1.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(7):
            f(x, k, k, k, k, g=k)
    messages = [str(w.message) for w in caught if issubclass(w.category, df.RetracingWarning)]
    assert len(messages) == 2
    last = f.retrace_reasons()[-1]
    assert len(last.changes) == 5       # b, c, d, e and the keyword-only g: none left out
    assert "g: Python int 5 -> Python int 6" in last.changes
    assert f"; {last}. Each trace is slow" in messages[-1]


def test_retrace_reason_names_a_change_of_nesting_alone():
    @df.defun
    def f(xs):
        return xs[0] + xs[1]

    a, b = df.constant(1.0), df.constant(2.0)
    f([a, b])
    f((a, b))
    assert f.retrace_reasons()[0].changes == ("xs: list of 2 -> tuple of 2",)


def test_retrace_reasons_name_extra_keyword_arguments():
    @df.defun
    def f(x, **options):
        return x * options.get("k", 1.0)

    f(df.constant(1.0), k=2.0)
    f(df.constant(1.0), k=2.0, j=1)
    assert f.retrace_reasons()[0].changes == ("j: absent -> Python int 1",)


def test_input_signature_function_never_retraces():
    f = df.defun(lambda x: x * 2.0, input_signature=[df.TensorSpec([None])])
    f(df.constant([1.0]))
    f(df.constant([1.0, 2.0]))
    assert f.retrace_reasons() == [] and f.trace_count == 1


# ====================================================================== input_signature + keywords
def test_input_signature_accepts_keyword_arguments():
    @df.defun(input_signature=[df.TensorSpec([None]), df.TensorSpec([None])])
    def f(x, y, scale=2.0):
        return (x - y) * scale

    x, y = df.constant([5.0, 7.0]), df.constant([1.0, 2.0])
    expected = [8.0, 10.0]
    for out in (f(x, y), f(x, y=y), f(y=y, x=x)):
        np.testing.assert_allclose(out.numpy(), expected)
    assert f.trace_count == 1
    np.testing.assert_allclose(f.get_concrete_function()(x, y=y).numpy(), expected)


def test_input_signature_covers_a_keyword_only_parameter():
    @df.defun(input_signature=[df.TensorSpec([2]), df.TensorSpec([2])])
    def f(x, *, bias):
        return x + bias

    np.testing.assert_allclose(f(df.constant([1.0, 2.0]), bias=df.constant([10.0, 20.0])).numpy(),
                               [11.0, 22.0])


def test_input_signature_keyword_errors_name_the_argument():
    f = df.defun(lambda x, y: x + y, input_signature=[df.TensorSpec([None]), df.TensorSpec([None])])
    x = df.constant([1.0])
    with pytest.raises(TypeError, match="got multiple values for argument 'x'"):
        f(x, x=x, y=x)
    with pytest.raises(TypeError, match="missing argument 'y'"):
        f(x)
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'.*covers x, y"):
        f(x, y=x, z=x)


def test_input_signature_error_lists_only_the_arguments_that_do_not_fit():
    f = df.defun(lambda a, b, c: a + b + c,
                 input_signature=[df.TensorSpec([2]), df.TensorSpec([2]), df.TensorSpec([2])])
    good = df.constant([1.0, 2.0])
    with pytest.raises(ValueError) as e:
        f(df.constant([1.0]), good, c=df.constant([1.0, 2.0, 3.0]))
    msg = str(e.value)
    assert "argument 'a' has shape (1,)" in msg and "argument 'c' has shape (3,)" in msg
    assert "'b'" not in msg
    with pytest.raises(TypeError, match="argument 'b' has dtype int32") as e:
        f(good, df.constant([1, 2]), good)
    assert "'a'" not in str(e.value)


# ====================================================================== ConcreteFunction mismatch
def test_concrete_function_mismatch_lists_only_what_does_not_fit():
    g = df.defun(lambda x, s, t: x * s * t)
    cf = g.get_concrete_function(df.TensorSpec([None]), 2.0, 1)
    np.testing.assert_allclose(cf(df.constant([1.0, 2.0, 3.0]), 2.0, 1).numpy(), [2.0, 4.0, 6.0])
    with pytest.raises(TypeError) as e:
        cf(df.constant([1.0, 2.0, 3.0]), 3.0, 1)      # x fits ([?] takes [3]), t is the same
    msg = str(e.value)
    assert "(s: Python float 2.0 -> Python float 3.0)" in msg
    assert "x:" not in msg and "t:" not in msg
    with pytest.raises(ValueError) as e:
        cf(df.constant([[1.0]]), 2.0, 1)
    assert "(x: tensor float32[1, 1] given, the trace takes tensor float32[?])" in str(e.value)
    with pytest.raises(ValueError, match=r"x: tensor float64\[2\] given"):
        cf(np.zeros(2), 2.0, 1)


# ====================================================================== a variable's handle
def test_a_variables_handle_is_refused_with_a_clear_type_error_after_a_tensor_call():
    f = df.defun(lambda x: x * 2.0)
    ident = df.defun(lambda x: x)
    v = df.Variable([1.0, 2.0])
    for fn in (f, ident):
        fn(df.constant([3.0, 4.0]))        # the fast path now knows float32[2]
        with pytest.raises(TypeError, match=r"argument x is a variable's resource handle \(v.handle\); "
                                            r"pass the Variable itself"):
            fn(v.handle)
    np.testing.assert_allclose(f(v).numpy(), [2.0, 4.0])
    sig = df.defun(lambda x: x * 2.0, input_signature=[df.TensorSpec([2])])
    with pytest.raises(TypeError, match="argument 'x' is a variable's resource handle"):
        sig(v.handle)


# ====================================================================== side outputs
def test_side_outputs_rows_name_the_saved_tensors_and_their_bytes():
    @df.defun
    def energy(x):
        return df.reduce_sum(df.tanh(x) * x)

    x = df.constant(np.linspace(-1, 1, 6).reshape(2, 3).astype(np.float32))
    cf = energy.get_concrete_function(x)
    rows = cf.side_outputs()
    assert [(r.name, r.producer, r.shape, r.dtype, r.bytes) for r in rows] == \
        [("%1", "tanh", (2, 3), "float32", 24)]
    assert rows[0].line == _line_of(energy.python_function, "df.tanh(x)")
    assert rows[0].source == "return df.reduce_sum(df.tanh(x) * x)"
    assert rows.total_bytes == 24
    # the rows are what a recorded call really keeps: the tape entry's extra outputs
    with df.GradientTape() as tape:
        tape.watch(x)
        energy(x)
    (entry,) = tape._tape.entries
    saved = tape_mod.entry_outputs(entry)[1:]
    assert [t.numpy().nbytes for t in saved] == [24]
    np.testing.assert_allclose(saved[0].numpy(), np.tanh(x.numpy()))
    text = str(rows)
    assert text.splitlines()[0].split() == ["name", "producer", "line", "shape", "dtype", "bytes", "source"]
    assert text.splitlines()[-1] == "total: 1 side output, 24 bytes"


def test_side_outputs_of_a_function_reading_variables_and_of_unknown_size():
    w = df.Variable(np.ones((3, 2), np.float32))

    @df.defun(input_signature=[df.TensorSpec([None, 3])])
    def layer(x):
        return df.reduce_sum(df.tanh(x @ w))

    rows = layer.get_concrete_function().side_outputs()
    by_producer = {r.producer: r for r in rows}
    assert by_producer["read_variable"].bytes == 24 and by_producer["read_variable"].shape == (3, 2)
    assert by_producer["tanh"].shape == (None, 2) and by_producer["tanh"].bytes is None
    assert rows.total_bytes == 24
    assert str(rows).splitlines()[-1] == "total: 2 side outputs, 24 bytes and 1 of unknown size"


def test_side_outputs_name_a_node_running_functions():
    @df.defun
    def f(x):
        def body(i, a):
            return i + 1, df.tanh(a) * 1.5
        return df.reduce_sum(df.while_loop(lambda i, a: i < 3, body, (df.constant(0), x))[1])

    rows = f.get_concrete_function(df.constant([0.5, 1.0])).side_outputs()
    loop_rows = [r for r in rows if r.producer.startswith("while")]
    assert loop_rows, rows
    assert all(re.fullmatch(r"while \{body=@while_body_\d+(_saves)?, cond=@while_cond_\d+\} output \d", r.producer)
               for r in loop_rows)
    assert all(r.line == _line_of(f.python_function, "df.while_loop") for r in loop_rows)


def _two_defun_step():
    w = df.Variable(np.full((3, 4), 0.1, np.float32), name="w")
    b = df.Variable(np.zeros(4, np.float32), name="b")

    @df.defun
    def layer(x):
        return df.tanh(x @ w + b)

    @df.defun
    def loss_fn(h, labels):
        return df.reduce_mean(df.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=h))

    def step(x, labels):
        with df.GradientTape() as tape:
            loss = loss_fn(layer(x), labels)
        for g, v in zip(tape.gradient(loss, [w, b]), [w, b]):
            v.assign_sub(0.1 * g)
        return loss

    return step, layer, loss_fn, w


def test_step_side_outputs_report_every_recorded_call_with_actual_sizes():
    step, layer, loss_fn, w = _two_defun_step()
    x = df.constant(np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32))
    labels = df.constant(np.arange(8, dtype=np.int32) % 4)
    before = w.numpy().copy()
    report = df.debugging.side_outputs(step, x, labels)
    assert not np.allclose(w.numpy(), before)             # the step really ran
    assert report.calls == 2
    names = {r.function for r in report}
    assert names == {layer.get_concrete_function(x).name,
                     loss_fn.get_concrete_function(layer(x), labels).name}
    per_function = {}
    for r in report:
        per_function.setdefault(r.function, []).append(r)
    for cf in (layer.get_concrete_function(x), loss_fn.get_concrete_function(layer(x), labels)):
        static = cf.side_outputs()
        assert [(r.name, r.producer, r.bytes) for r in per_function[cf.name]] == \
            [(r.name, r.producer, r.bytes) for r in static]
    assert report.total_bytes == 8 * 4 * 4 + 3 * 4 * 4 + 8 * 4 * 4   # tanh, read of w, softmax
    assert str(report).splitlines()[0].split()[0] == "function"
    assert str(report).endswith("saved by 2 recorded calls")


def test_step_side_outputs_of_a_whole_step_defun_is_empty():
    step, _, _, _ = _two_defun_step()
    whole = df.defun(step)
    x = df.constant(np.ones((8, 3), np.float32))
    labels = df.constant(np.zeros(8, np.int32))
    report = df.debugging.side_outputs(whole, x, labels)
    assert list(report) == [] and report.calls == 0
    assert str(report).splitlines()[-1] == "total: 0 side outputs, 0 bytes, saved by 0 recorded calls"


# ====================================================================== compare
def _model():
    w = df.Variable(np.array([[0.5, -0.2], [0.1, 0.3]], np.float32))
    counter = df.Variable(0.0)

    @df.defun
    def f(x):
        counter.assign_add(1.0)
        h = df.tanh(x @ w + 1.0)
        y = h * 3.0
        return df.reduce_sum(y - 0.5)

    return f, counter


X = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)


def test_compare_finds_nothing_in_a_correct_function_and_runs_it_once():
    f, counter = _model()
    assert df.debugging.compare(f, df.constant(X)) is None
    assert float(counter.numpy()) == 1.0   # both runs started from 0: one call's effect

    @df.defun
    def with_grad(x):
        with df.GradientTape() as tape:
            tape.watch(x)
            y = df.reduce_sum(df.sin(x) * df.exp(x))
        return tape.gradient(y, x)

    assert df.debugging.compare(with_grad, df.constant(X)) is None
    # a plain Python function is traced for the comparison
    assert df.debugging.compare(lambda x: df.sqrt(x) + 1.0, X) is None


def _breaking_kernel(monkeypatch, op_name, wrong):
    original = backends.NumpyBackend.kernel

    def kernel(self, node):
        fn, pass_attrs = original(self, node)
        return (wrong, pass_attrs) if node.op.name == op_name else (fn, pass_attrs)

    monkeypatch.setattr(backends.NumpyBackend, "kernel", kernel)


def test_compare_names_the_node_and_line_of_a_broken_kernel(monkeypatch):
    f, _ = _model()
    _breaking_kernel(monkeypatch, "tanh", lambda a: np.tanh(a) + np.float32(0.01))
    d = df.debugging.compare(f, df.constant(X))
    assert d is not None and d.op == "tanh"
    assert d.line == _line_of(f.python_function, "df.tanh(")
    assert d.source == "h = df.tanh(x @ w + 1.0)"
    assert d.graph_shape == d.eager_shape == (2, 2)
    assert abs(d.max_abs - 0.01) < 1e-5 and d.eager_only == ()
    assert re.match(r"%\d+: f32\[2,2\] = tanh\(%\d+\) at .*: the graph's value differs from eager "
                    r"by up to 0\.01", str(d))


def test_compare_respects_its_tolerance(monkeypatch):
    f, _ = _model()
    _breaking_kernel(monkeypatch, "tanh", lambda a: np.tanh(a) * np.float32(1 + 1e-6))
    assert df.debugging.compare(f, df.constant(X)) is None
    assert df.debugging.compare(f, df.constant(X), rtol=1e-8, atol=0.0).op == "tanh"


def test_compare_names_a_node_a_broken_pass_rewrote_wrongly(monkeypatch):
    # a "simplification" that doubles the constant of every multiply by a constant
    def wrong_multiply(cp, node, x, y):
        c = passes._const_value(y)
        if c is None:
            return None
        if cp is passes._Probe:     # asked only whether the rule applies
            return node.outputs
        doubled = cp.emit_const(c * 2, node.site)
        out = node.outputs[0]
        return cp.emit(node.op, (x, doubled), {}, [(out.shape, out.dtype)], node.site,
                       node_id=node.id).outputs

    monkeypatch.setitem(passes._RULES, "multiply", wrong_multiply)
    f, counter = _model()
    d = df.debugging.compare(f, df.constant(X))
    assert d.op == "multiply" and d.line == _line_of(f.python_function, "y = h * 3.0")
    assert d.optimized and "the graph as traced agrees: an optimization pass changed" in str(d)
    assert float(counter.numpy()) == 1.0    # three runs (eager, traced, optimized): one call's effect


def test_compare_points_past_a_node_a_broken_pass_removed(monkeypatch):
    # "x + c is x" for every constant: the add disappears, its consumer is the first to differ
    monkeypatch.setitem(passes._RULES, "add", lambda cp, node, x, y: [x] if passes._const_value(y) is not None else None)
    f, _ = _model()
    d = df.debugging.compare(f, df.constant(X))
    assert d.op == "tanh" and d.line == _line_of(f.python_function, "df.tanh(")
    assert d.eager_only == ("add",)
    assert "eagerly this line also ran add, which the optimized graph does not have there" in str(d)


def test_compare_checks_the_outputs_when_the_wrong_node_has_no_eager_partner(monkeypatch):
    # "x - c is x" drops the last op; reduce_sum agrees with eager, the output does not
    monkeypatch.setitem(passes._RULES, "subtract", lambda cp, node, x, y: [x])
    f, _ = _model()
    d = df.debugging.compare(f, df.constant(X))
    assert d.op == "reduce_sum" and d.line == _line_of(f.python_function, "y - 0.5")
    assert d.eager_only == ("subtract",)
    assert abs(d.max_abs - 2.0) < 1e-5      # four entries of 0.5


_TABLE = np.array([1.0, 2.0, 3.0])


def test_compare_names_the_node_the_user_wrote_when_a_pass_folded_its_line_away():
    # A constant that changed after the trace: eagerly exp(7), in the graph exp(2). The
    # optimized graph folds that line into one constant; compare used to report the first
    # node it kept (on the return line), now it compares the graph as traced first.
    table = _TABLE.copy()

    @df.defun
    def f(x):
        w = df.exp(df.constant(table)) * 2.0
        return df.reduce_sum(x * w)

    x = df.constant(np.array([0.1, 0.2, 0.3]))
    f(x)
    assert not any(n.op.name == "exp" for n in passes.optimize(f.get_concrete_function(x).graph).nodes)
    table[1] = 7.0
    d = df.debugging.compare(f, x)
    assert d.op == "exp" and d.line == _line_of(f.python_function, "w = df.exp(")
    assert d.source == "w = df.exp(df.constant(table)) * 2.0" and not d.optimized
    np.testing.assert_allclose(d.max_abs, np.exp(7.0) - np.exp(2.0), rtol=1e-12)
    assert d.eager_only == () and "optimization pass" not in str(d)


# ====================================================================== stale captures
_OFFSET = df.constant([10.0, 20.0])
_GAIN = df.Variable([1.0, 1.0])
_SCALE = df.constant(2.0)


def _scaled(x):
    return x * _SCALE


@df.defun
def _shift(x):
    return x + _OFFSET + _GAIN


@df.defun
def _uses_helper(x):
    return _scaled(x) + 1.0


def _stale(caught):
    return [w for w in caught if issubclass(w.category, df.StaleCaptureWarning)]


def test_a_rebound_global_tensor_warns_once_naming_it_and_the_line():
    global _OFFSET
    x = df.constant([1.0, 2.0])
    np.testing.assert_allclose(_shift(x).numpy(), [12.0, 23.0])
    old = _OFFSET
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _shift(x)                          # nothing changed: no warning
            _OFFSET = df.constant([0.0, 0.0])
            call_line = inspect.currentframe().f_lineno + 1
            out = _shift(x)
            _shift(x)                          # once per function
        (w,) = _stale(caught)
        np.testing.assert_allclose(out.numpy(), [12.0, 23.0])   # the trace keeps the old value
        assert (w.filename, w.lineno) == (__file__, call_line)
        msg = str(w.message)
        assert "defun '_shift': the global name '_OFFSET' names another tensor" in msg
        assert f"used at {_line_of(_shift.python_function, 'return x + _OFFSET')}" in msg
        assert "return x + _OFFSET + _GAIN" in msg
    finally:
        _OFFSET = old


def test_a_rebound_global_variable_warns_but_assigning_to_it_does_not():
    global _GAIN
    x = df.constant([1.0, 2.0])
    f = df.defun(_shift.python_function)
    f(x)
    old = _GAIN
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _GAIN.assign([2.0, 2.0])           # the same variable: the graph sees it
            np.testing.assert_allclose(f(x).numpy(), [13.0, 24.0])
            _GAIN = None                       # not a tensor or variable: nothing to say
            f(x)
            assert _stale(caught) == []
            _GAIN = df.Variable([5.0, 5.0])
            f(x)
        (w,) = _stale(caught)
        assert "the global name '_GAIN' names another variable" in str(w.message)
    finally:
        old.assign([1.0, 1.0])
        _GAIN = old


def test_a_rebound_closure_name_warns():
    def make():
        scale = df.constant(2.0)

        @df.defun
        def f(x):
            return x * scale

        def rebind():
            nonlocal scale
            scale = df.constant(3.0)
        return f, rebind

    f, rebind = make()
    f(df.constant(1.0))
    rebind()
    with pytest.warns(df.StaleCaptureWarning, match="the closure name 'scale' names another tensor"):
        f(df.constant(1.0))


def test_a_global_named_in_a_helper_function_is_watched_too():
    global _SCALE
    _uses_helper(df.constant(1.0))
    old = _SCALE
    try:
        _SCALE = df.constant(5.0)
        with pytest.warns(df.StaleCaptureWarning, match="global name '_SCALE'.*return x \\* _SCALE"):
            _uses_helper(df.constant(1.0))
    finally:
        _SCALE = old


def test_a_trace_without_named_captures_pays_nothing_per_call():
    f = df.defun(lambda x: x * 2.0)
    cf = f.get_concrete_function(df.constant(1.0))
    assert not cf._calls.watched and cf._calls.call == cf._calls.run     # no per-call check
    captured = df.constant(3.0)
    g = df.defun(lambda x: x * captured)
    gcf = g.get_concrete_function(df.constant(1.0))
    assert gcf._calls.watched and gcf._calls.call != gcf._calls.run
    assert g(df.constant(2.0)).numpy() == 6.0
    assert gcf._calls.watched and gcf._calls.call != gcf._calls.run   # the first call keeps the check


def test_step_side_outputs_of_a_function_not_traced_here_give_the_saved_sizes(monkeypatch):
    from defun import debugging
    step, _, _, _ = _two_defun_step()
    monkeypatch.setattr(debugging, "_traced_graph", lambda name: None)   # e.g. a loaded document
    report = df.debugging.side_outputs(step, df.constant(np.ones((8, 3), np.float32)),
                                       df.constant(np.zeros(8, np.int32)))
    assert report.calls == 2
    assert [(r.name, r.shape, r.bytes) for r in report] == \
        [("side output 0", (8, 4), 128), ("side output 1", (3, 4), 48), ("side output 0", (8, 4), 128)]
