"""df.print and df.debugging.check_numerics: eagerly, traced (every call, program order,
never pruned), under a tape, exported and reloaded; hostile documents; typed errors."""
import json
import sys

import numpy as np
import pytest

import defun as df


def _reload(cf):
    return df.load_json(json.loads(json.dumps(df.export_json(cf))))


# ---------------------------------------------------------------------------------------
# print

def test_print_eagerly_prints_at_once_and_returns_none(capsys):
    assert df.print("x:", df.constant([1, 2, 3]), "and", 7, df.constant(2.5)) is None
    assert capsys.readouterr().out == "x: [1 2 3] and 7 2.5\n"
    df.print(np.arange(4.0), sep=", ", end="!\n")
    df.print("braces {} and {{x}} print as is", {"k": df.constant([1])}, (df.constant(True),), [1, "s"])
    assert capsys.readouterr().out == ("[0. 1. 2. 3.]!\n"
                                       "braces {} and {{x}} print as is {'k': [1]} (True,) [1, s]\n")


def test_print_summarizes_each_dimension(capsys):
    df.print(df.range(10))
    df.print(df.range(10), summarize=2)
    df.print(df.reshape(df.range(24), [4, 6]), summarize=1)
    df.print(df.range(10), summarize=-1)
    df.print(df.range(10), summarize=None)
    df.print(df.range(6))   # 2 * 3 entries: nothing to leave out
    assert capsys.readouterr().out == ("[0 1 2 ... 7 8 9]\n"
                                       "[0 1 ... 8 9]\n"
                                       "[[ 0 ...  5]\n ...\n [18 ... 23]]\n"
                                       "[0 1 2 3 4 5 6 7 8 9]\n"
                                       "[0 1 2 3 4 5 6 7 8 9]\n"
                                       "[0 1 2 3 4 5]\n")


def test_print_to_stderr(capsys):
    df.print("to stderr", df.constant([1.5]), output_stream=sys.stderr)
    df.print("also", output_stream="stderr")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "to stderr [1.5]\nalso\n"


def test_traced_print_runs_on_every_call_in_program_order(capsys):
    @df.defun
    def f(x):
        df.print("start")
        y = df.tanh(x) * 2.0
        df.print("y =", y)        # its result is not used: the op is kept anyway
        z = df.reduce_sum(y)
        df.print("z =", z, "x =", x)
        return z

    cf = f.get_concrete_function(df.constant([0.0, 1.0]))
    assert capsys.readouterr().out == ""              # tracing runs no print
    assert [n.op.name for n in cf.graph.nodes].count("print") == 3
    for _ in range(2):
        f(df.constant([0.0, 1.0]))
    expected = "start\ny = [0.        1.5231884]\nz = 1.5231884 x = [0. 1.]\n"
    assert capsys.readouterr().out == expected * 2
    f.python_function(df.constant([0.0, 1.0]))          # eager: the same text
    assert capsys.readouterr().out == expected


def test_print_survives_optimization_export_and_reload(capsys):
    from defun.graph.passes import optimize

    @df.defun
    def f(x):
        df.print("first", x)
        df.print("second", x * 3)
        return x + 1

    cf = f.get_concrete_function(df.TensorSpec([None], df.int32))
    assert [n.op.name for n in optimize(cf.graph).nodes].count("print") == 2
    doc = df.export_json(cf)
    prints = [n for n in doc["functions"][0]["nodes"] if n["op"] == "print"]
    assert [p["attrs"]["template"] for p in prints] == ["first {}\n", "second {}\n"]
    loaded = _reload(cf)
    capsys.readouterr()
    out = loaded(np.array([1, 2], np.int32))
    np.testing.assert_array_equal(out.numpy(), [2, 3])
    assert capsys.readouterr().out == "first [1 2]\nsecond [3 6]\n"


def test_print_under_a_tape_prints_once_per_call(capsys):
    @df.defun
    def f(x):
        df.print("value", x)
        return df.reduce_sum(x * x)

    x = df.constant([1.0, 2.0])
    with df.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [2.0, 4.0])
    assert capsys.readouterr().out == "value [1. 2.]\n"


def test_print_in_a_branch_prints_only_when_the_branch_runs(capsys):
    @df.defun
    def f(x):
        return df.cond(x > 0, lambda: (df.print("positive", x), x)[1], lambda: (df.print("not positive"), -x)[1])

    f(df.constant(2.0))
    f(df.constant(-1.0))
    assert capsys.readouterr().out == "positive 2.0\nnot positive\n"


def test_print_variables_and_arrays(capsys):
    v = df.Variable([1.0, 2.0])
    df.print("v", v)
    df.defun(lambda: df.print("traced v", v))()
    v.assign([3.0, 4.0])
    df.defun(lambda: df.print("traced v", v))()
    assert capsys.readouterr().out == "v [1. 2.]\ntraced v [1. 2.]\ntraced v [3. 4.]\n"


@pytest.mark.parametrize("change,match", [
    (("first {}", "{0.__class__}"), r"print: the template has a lone '\{'"),
    (("first {}", "first {} {}"), r"print: the template has 2 tensor places but the op has 1 inputs"),
    (('"output_stream": "stderr"', '"output_stream": "file:///tmp/defun-print"'),
     r"attrs.output_stream: expected one of 'stdout', 'stderr', got 'file:///tmp/defun-print'"),
])
def test_a_document_cannot_make_print_format_or_write_elsewhere(change, match):
    import sys

    @df.defun
    def f(x):
        df.print("first", x, output_stream=sys.stderr)   # not the default: written out
        return x

    text = json.dumps(df.export_json(f.get_concrete_function(df.constant([1.0]))))
    assert change[0] in text
    with pytest.raises(df.errors.GraphFormatError, match=match):
        df.load_json(json.loads(text.replace(change[0], change[1])))


def test_print_argument_errors():
    with pytest.raises(df.errors.InvalidArgumentError, match=r"print: output_stream must be sys.stdout or sys.stderr"):
        df.print("x", output_stream=open)
    with pytest.raises(df.errors.InvalidArgumentError, match=r"print: summarize must be -1"):
        df.print("x", summarize=-2)


# ---------------------------------------------------------------------------------------
# check_numerics

def test_check_numerics_returns_its_input_unchanged():
    x = df.constant([1.0, -2.0, 3.5])
    y = df.debugging.check_numerics(x, "fine")
    assert y.numpy().tobytes() == x.numpy().tobytes() and y.dtype is df.float32
    assert df.debugging.check_numerics(df.constant(np.zeros((0, 3))), "empty").shape == (0, 3)


@pytest.mark.parametrize("value,counts", [([1.0, np.nan, 2.0], "1 NaN and 0 Inf values"),
                                          ([[np.inf, 1.0], [-np.inf, np.nan]], "1 NaN and 2 Inf values")])
def test_check_numerics_raises_eagerly_naming_op_and_message(value, counts):
    with pytest.raises(df.errors.InvalidArgumentError, match=rf"check_numerics: bad input: .* has {counts}"):
        df.debugging.check_numerics(df.constant(value), "bad input")


def test_check_numerics_traced_names_the_users_line_and_loaded_names_the_op():
    @df.defun
    def f(x):
        y = df.log(x)
        return df.debugging.check_numerics(y, "log of x")   # the line the error names

    line = f.python_function.__code__.co_firstlineno + 3
    np.testing.assert_allclose(f(df.constant([1.0, np.e])).numpy(), [0.0, 1.0], rtol=1e-6)
    with np.errstate(invalid="ignore"), pytest.raises(df.errors.InvalidArgumentError) as info:
        f(df.constant([1.0, -1.0]))
    msg = str(info.value)
    assert "check_numerics: log of x" in msg and "1 NaN" in msg
    assert f"test_debug_ops.py:{line}" in msg
    loaded = _reload(f.get_concrete_function(df.TensorSpec([None])))
    np.testing.assert_allclose(loaded(np.array([1.0], np.float32)).numpy(), [0.0])
    with np.errstate(invalid="ignore"), pytest.raises(df.errors.InvalidArgumentError,
                                                      match=r"check_numerics.*log of x: .* 1 NaN"):
        loaded(np.array([-1.0, 2.0], np.float32))


def test_check_numerics_checks_the_gradient_too():
    def loss(x):
        return df.reduce_sum(df.sqrt(df.debugging.check_numerics(x, "x")))

    for fn in (loss, df.defun(loss)):
        x = df.constant([0.0, 4.0])
        with df.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        assert float(y) == 2.0                   # the forward value is finite
        with np.errstate(divide="ignore"), pytest.raises(
                df.errors.InvalidArgumentError, match=r"check_numerics: x \(in the gradient\): .* 0 NaN and 1 Inf"):
            tape.gradient(y, x)


def test_check_numerics_refuses_integers_and_static_checks_with_unknown_sizes():
    with pytest.raises(df.errors.InvalidArgumentError, match=r"check_numerics: unsupported input dtype int32"):
        df.debugging.check_numerics(df.constant([1, 2]), "ints")
    cf = df.defun(lambda x: df.debugging.check_numerics(x, "m")).get_concrete_function(
        df.TensorSpec([None, 3], df.float64))
    assert tuple(cf.graph.outputs[0].shape) == (None, 3) and cf.graph.outputs[0].dtype is df.float64
    with pytest.raises(df.errors.InvalidArgumentError, match=r"check_numerics: message must be a str"):
        df.debugging.check_numerics(df.constant([1.0]), 3)


# ---------------------------------------------------------------------------------------
# No terminal control codes reach the terminal

_HOSTILE = "a\x1b[2J\x1b]0;title\x07b\x9b31m\u202ec\x7f"
_SHOWN = "a\\x1b[2J\\x1b]0;title\\x07b\\x9b31m\\u202ec\\x7f"


def test_print_escapes_control_codes_eagerly_traced_and_loaded(capsys):
    df.print(_HOSTILE, df.constant([1, 2]), sep="\t")
    assert capsys.readouterr().out == _SHOWN + "\t[1 2]\n"     # tabs and newlines are kept

    @df.defun
    def f(x):
        df.print("first", x)
        return x
    cf = f.get_concrete_function(df.constant([1.0]))
    text = json.dumps(df.export_json(cf))
    loaded = df.load_json(json.loads(text.replace('"first {}', '"' + json.dumps(_HOSTILE)[1:-1] + " {}")))
    capsys.readouterr()
    loaded(df.constant([3.0]))
    assert capsys.readouterr().out == _SHOWN + " [3.]\n"


def test_check_numerics_messages_escape_control_codes():
    with pytest.raises(df.errors.InvalidArgumentError) as e:
        df.debugging.check_numerics(df.constant([np.nan]), _HOSTILE)
    assert _SHOWN in str(e.value) and "\x1b" not in str(e.value)

    @df.defun
    def f(x):
        return df.debugging.check_numerics(x, "mark")
    text = json.dumps(df.export_json(f.get_concrete_function(df.constant([1.0]))))
    loaded = df.load_json(json.loads(text.replace('"mark"', json.dumps(_HOSTILE))))
    with pytest.raises(df.errors.InvalidArgumentError) as e:
        loaded(df.constant([np.inf]))
    assert _SHOWN in str(e.value) and not any(c in str(e.value) for c in "\x1b\x07\x9b\u202e")
