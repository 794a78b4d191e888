"""The bitwise ops (runtime/ops/bitwise_ops.py) on every integer dtype and bool against numpy:
eager, traced, reloaded from JSON, as numpy source, in onnxruntime (opset 18), on the numba
backend and under vmap; shift counts out of range as numpy; the Tensor operators (`&` `|`
`^` `~` `<<` `>>`, reflected, with Python numbers weakly typed) dispatching by dtype; typed
errors for floats. (The op table's rows: tests/op_rows_bitwise.py.)"""
import numpy as np
import pytest

import defun as df
from defun.graph.backends import get_backend
from defun.graph.functions import plan_of
from isolated import run_without_defun

INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
BINARY = ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")


def _values(name, seed):
    if name == "bool":
        return np.random.default_rng(seed).random((3, 4)) < 0.5
    info = np.iinfo(name)
    rng = np.random.default_rng(seed)
    x = rng.integers(info.min, info.max, size=(3, 4), endpoint=True, dtype=name)
    x[0, :2] = [info.min, info.max]
    return x


def _counts(name):
    """Shift counts in range, at the width, past it and (signed) negative: numpy's results."""
    bits = np.iinfo(name).bits
    c = [0, 1, bits - 1, bits, bits + 1, 63 if bits < 64 else 7, 3, 2, bits // 2, 1, 0, 5]
    if name.startswith("int"):
        c[-1], c[-2] = -1, -bits - 3
    return np.array(c, name).reshape(3, 4)


def _program(x, y, c):
    return [df.bitwise_and(x, y), df.bitwise_or(x, y), df.bitwise_xor(x, y), df.invert(x)] + (
        [] if c is None else [df.left_shift(x, c), df.right_shift(x, c)])


def _reference(x, y, c):
    out = [np.bitwise_and(x, y), np.bitwise_or(x, y), np.bitwise_xor(x, y), np.invert(x)]
    return out if c is None else out + [np.left_shift(x, c), np.right_shift(x, c)]


def _inputs(name):
    x, y = _values(name, 1), _values(name, 2)
    return x, y, (None if name == "bool" else _counts(name))


def _check(got, want, what):
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        assert g.dtype == w.dtype, f"{what} output {k}: {g.dtype} vs {w.dtype}"
        np.testing.assert_array_equal(g, w, err_msg=f"{what} output {k}")


def _traced(name):
    """(the concrete function of the program on dtype `name`, its numpy inputs, the program)."""
    x, y, c = _inputs(name)
    args = [x, y] + ([] if c is None else [c])
    program = (lambda a, b: _program(a, b, None)) if c is None else _program
    spec = [df.TensorSpec(a.shape, getattr(df, name)) for a in args]
    return df.defun(program).get_concrete_function(*spec), args, program


@pytest.mark.parametrize("name", INTS + ("bool",))
def test_eager_traced_reloaded_numba_and_vmap_agree_with_numpy(name, monkeypatch):
    x, y, c = _inputs(name)
    want = _reference(x, y, c)
    _check([t.numpy() for t in _program(*[df.constant(a) for a in (x, y)], None if c is None else df.constant(c))],
           want, "eager")
    cf, args, program = _traced(name)
    spec = [df.TensorSpec(a.shape, getattr(df, name)) for a in args]
    _check(cf(*args), want, "traced")
    _check(df.load_json(df.export_json(cf))(*args), want, "reloaded")
    monkeypatch.setattr(get_backend("numba"), "MIN_REGION", 1)
    numba = df.defun(program, backend="numba")
    _check([t.numpy() for t in numba(*args)], want, "numba")
    if name in ("int32", "uint8", "int64"):      # every shift count of numpy's rule, fused
        source = numba.get_concrete_function(*spec).graph
        assert "r_0" in plan_of(source, "numba").source
    batched = df.vmap(program)(*args)               # rows as examples: the same values
    _check([t.numpy() for t in batched], want, "vmap")


def test_numpy_source_of_every_dtype_agrees_with_numpy(tmp_path):
    modules, cases, wants = {}, [], []
    for name in INTS + ("bool",):       # one subprocess for all
        cf, args, _ = _traced(name)
        modules[name] = df.export_numpy_source(cf)
        cases.append({"module": name, "call": "forward", "inputs": args})
        wants.append(_reference(*_inputs(name)))
    for name, got, want in zip(modules, run_without_defun(modules, cases, tmp_path), wants):
        _check(got["outputs"], want, f"numpy source ({name})")


@pytest.mark.parametrize("name", INTS + ("bool",))
def test_onnx_opset_18_agrees_with_numpy(name):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    x, y, c = _inputs(name)
    args = [x, y] + ([] if c is None else [c])
    program = (lambda a, b: _program(a, b, None)) if c is None else _program
    cf = df.defun(program).get_concrete_function(*[df.TensorSpec(a.shape, getattr(df, name)) for a in args])
    if name == "uint64":        # onnxruntime computes no uint64 values (tests/test_int_dtypes.py)
        with pytest.raises(df.errors.UnimplementedError, match="uint64"):
            df.export_onnx(cf, opset=18)
        return
    session = ort.InferenceSession(df.export_onnx(cf, opset=18).SerializeToString())
    _check(session.run(None, {i.name: a for i, a in zip(session.get_inputs(), args)}), _reference(x, y, c), "onnx")


def test_onnx_opset_17_exports_shifts_and_bools_and_names_the_opset_for_the_rest():
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    x, c = _values("int16", 3), _counts("int16")
    spec = df.TensorSpec(x.shape, df.int16)
    shifts = df.defun(lambda a, b: [a << b, a >> b, ~a]).get_concrete_function(spec, spec)
    session = ort.InferenceSession(df.export_onnx(shifts).SerializeToString())
    _check(session.run(None, {i.name: a for i, a in zip(session.get_inputs(), [x, c])}),
           [x << c, x >> c, ~x], "onnx opset 17")
    b = df.TensorSpec([3], df.bool)
    logic = df.defun(lambda p, q: [p & q, p ^ q, df.bitwise_or(p, q), ~p]).get_concrete_function(b, b)
    p, q = np.array([True, False, True]), np.array([True, True, False])
    session = ort.InferenceSession(df.export_onnx(logic).SerializeToString())
    _check(session.run(None, {"p": p, "q": q}), [p & q, p ^ q, p | q, ~p], "onnx bools")
    ands = df.defun(lambda a, b: a & b).get_concrete_function(spec, spec)
    with pytest.raises(df.errors.UnimplementedError, match="bitwise_and.*integer.*BitwiseAnd.*opset=18"):
        df.export_onnx(ands)


def test_operators_dispatch_by_dtype_and_take_python_numbers_weakly():
    i8 = np.array([5, -3, 127], np.int8)
    t = df.constant(i8)
    cases = [(t & 6, i8 & np.int8(6)), (6 & t, np.int8(6) & i8), (t | 64, i8 | np.int8(64)),
             (64 | t, np.int8(64) | i8), (t ^ -1, i8 ^ np.int8(-1)), (-1 ^ t, np.int8(-1) ^ i8), (~t, ~i8),
             (t << 1, i8 << np.int8(1)), (1 << t, np.int8(1) << i8), (t >> 2, i8 >> np.int8(2)),
             (100 >> df.constant(np.array([1, 9], np.int8)), np.int8(100) >> np.array([1, 9], np.int8))]
    for got, want in cases:
        assert got.dtype is df.int8
        np.testing.assert_array_equal(got.numpy(), want)
    p, q = np.array([True, False, True]), np.array([True, True, False])
    tp, tq = df.constant(p), df.constant(q)
    for got, want in [(tp & tq, p & q), (tp | tq, p | q), (tp ^ tq, p ^ q), (~tp, ~p), (True ^ tp, True ^ p),
                      (False | tp, False | p), (True & tp, True & p)]:
        assert got.dtype is df.bool
        np.testing.assert_array_equal(got.numpy(), want)
    graph = df.defun(lambda a, b: [a & b, a | b, ~a]).get_concrete_function(tp, tq).graph
    assert {n.op.name for n in graph.nodes} >= {"logical_and", "logical_or", "logical_not"}
    for got, want in [(np.int8(3) & t, np.int8(3) & i8), (np.bitwise_xor(i8, t), i8 ^ i8),
                      (df.defun(lambda a: np.left_shift(a, 2))(t), i8 << np.int8(2))]:    # numpy's ufuncs: the ops
        assert isinstance(got, df.Tensor) and got.dtype is df.int8
        np.testing.assert_array_equal(got.numpy(), want)
    v = df.Variable(np.int32(6))
    assert [int(r.numpy()) for r in (v & 3, 3 & v, v | 1, 1 | v, v ^ 5, ~v, v << 2, 1 << v, v >> 1)] == \
        [6 & 3, 3 & 6, 6 | 1, 1 | 6, 6 ^ 5, ~6, 6 << 2, 1 << 6, 6 >> 1]


def test_floats_are_a_typed_error_naming_the_op():
    f = df.constant([1.5, 2.0])
    for call, op in [(lambda: f & f, "bitwise_and"), (lambda: df.bitwise_or(f, f), "bitwise_or"),
                     (lambda: f ^ f, "bitwise_xor"), (lambda: ~f, "invert"), (lambda: f << f, "left_shift"),
                     (lambda: df.right_shift(f, f), "right_shift"),
                     (lambda: df.constant([True]) << df.constant([True]), "left_shift")]:
        with pytest.raises(df.errors.InvalidArgumentError, match=f"{op}: unsupported input dtype (float32|bool)"):
            call()
    with pytest.raises(df.errors.InvalidArgumentError, match="bitwise_xor"):
        df.defun(lambda a: a ^ a)(np.array([1.0]))


def test_no_gradient_flows_through_them():
    x = df.constant([3, 5])
    with df.GradientTape() as tape:
        tape.watch(x)
        y = df.bitwise_and(x, 1) + df.left_shift(x, 2)
    with pytest.warns(UserWarning, match="int32"):
        assert tape.gradient(y, x) is None
