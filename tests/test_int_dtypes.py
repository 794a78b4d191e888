"""The integer dtypes of issue 22 (int8, int16, uint8, uint16, uint32, uint64): numpy's
promotion between two integer tensors where one of them is such a dtype, the weak typing of
Python numbers, values against numpy eagerly, traced, reloaded, as numpy source and as
ONNX (widened for onnxruntime; uint64 refused but casts), and no gradients."""
import itertools

import numpy as np
import pytest

import defun as df
from isolated import run_without_defun

IAE = df.errors.InvalidArgumentError
NEW = ("int8", "int16", "uint8", "uint16", "uint32", "uint64")
INTS = NEW + ("int32", "int64")


def _arr(name, seed=0, shape=(2, 3)):
    info = np.iinfo(name)
    lo, hi = max(info.min, -100), min(info.max, 100)
    return np.random.default_rng(seed).integers(lo, hi, size=shape, endpoint=True).astype(name)


def test_the_new_dtypes():
    for name in NEW:
        d = getattr(df, name)
        assert d.name == name and d.is_integer and not d.is_floating and not d.is_complex
        assert d.is_unsigned is name.startswith("u")
        assert df.as_dtype(name) is d and df.as_dtype(np.dtype(name)) is d and d.as_numpy_dtype is np.dtype(name).type
        assert df.constant(np.zeros(2, name)).dtype is d
        assert name in dir(df)


@pytest.mark.parametrize("a,b", list(itertools.combinations(INTS, 2)))
def test_two_integer_tensors_promote_as_numpy_when_one_is_new(a, b):
    x, y = _arr(a, 1), _arr(b, 2)
    want = np.result_type(x.dtype, y.dtype)
    promotes = a in NEW or b in NEW      # to numpy's result type, float64 for a signed int with uint64
    if {a, b} == {"int64", "uint64"}:    # numpy compares these exactly; no common dtype does
        with pytest.raises(IAE, match="int64 with uint64"):
            df.constant(x) < df.constant(y)
        np.testing.assert_array_equal((df.constant(x) * df.constant(y)).numpy(), x * y)
        return
    traced = df.defun(lambda p, q: (p * q, p < q))
    for run in (lambda: (df.constant(x) * df.constant(y), df.constant(x) < df.constant(y)), lambda: traced(x, y)):
        if promotes:
            product, less = run()
            assert product.dtype.name == want.name
            np.testing.assert_array_equal(product.numpy(), x * y)
            np.testing.assert_array_equal(less.numpy(), x < y)
        else:
            with pytest.raises(IAE, match=f"{a}, {b}|{b}, {a}"):
                run()


def test_python_numbers_take_the_tensor_dtype_and_must_fit():
    u8 = df.constant(np.array([250, 3], np.uint8))
    assert (u8 + 10).dtype is df.uint8
    np.testing.assert_array_equal((u8 + 10).numpy(), np.array([250, 3], np.uint8) + np.uint8(10))  # wraps, as numpy
    assert (3 * df.constant(np.array([1], np.int16))).dtype is df.int16
    with pytest.raises(IAE, match="300 does not fit in uint8"):
        u8 + 300
    with pytest.raises(IAE, match="-1 does not fit in uint8"):
        u8 - (-1)
    with pytest.raises(IAE, match="float.*uint8|uint8.*float"):
        u8 * 1.5
    assert df.constant([1, 2], df.uint16).dtype is df.uint16


def _program(x, y):
    return [x + y, x * y, x - y, -x, df.abs(x), df.maximum(x, y), x < y, df.where(x < y, x, y),
            x // (y * 0 + 3), x % (y * 0 + 7), df.reduce_sum(x, axis=0), x @ df.transpose(y),
            df.cast(x, df.float32) * 0.5, df.reduce_max(x)]


def _reference(x, y):
    return [x + y, x * y, x - y, -x, np.abs(x), np.maximum(x, y), x < y, np.where(x < y, x, y),
            x // x.dtype.type(3), x % x.dtype.type(7), np.add.reduce(x, 0, x.dtype), x @ y.T,
            x.astype(np.float32) * np.float32(0.5), x.max()]


@pytest.mark.parametrize("name", NEW)
def test_values_agree_eager_traced_reloaded_numpy_source_and_onnx(name, tmp_path):
    x, y = _arr(name, 3), _arr(name, 4)
    with np.errstate(over="ignore"):
        want = _reference(x, y)
    eager = _program(df.constant(x), df.constant(y))
    for e, w in zip(eager, want):
        assert e.numpy().dtype == w.dtype
        np.testing.assert_array_equal(e.numpy(), w)
    spec = df.TensorSpec(x.shape, getattr(df, name))
    cf = df.defun(_program).get_concrete_function(spec, spec)
    for runner in (cf, df.load_json(df.export_json(cf))):
        for got, w in zip(runner(x, y), want):
            np.testing.assert_array_equal(np.asarray(got), w)
    got = run_without_defun({"m": df.export_numpy_source(cf)}, [{"module": "m", "call": "forward", "inputs": [x, y]}],
                            tmp_path)
    for g, w in zip(got[0]["outputs"], want):
        np.testing.assert_array_equal(g, w)
    pytest.importorskip("onnx")
    if name == "uint64":
        with pytest.raises(df.errors.UnimplementedError, match="uint64.*int64"):
            df.export_onnx(cf)
        to64 = df.defun(lambda a: df.cast(a, df.int64) * 2).get_concrete_function(spec)
        model, xs = df.export_onnx(to64), [x]
        want = [x.astype(np.int64) * 2]
    else:
        model, xs = df.export_onnx(cf), [x, y]
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString())
    outs = session.run(None, {i.name: v for i, v in zip(session.get_inputs(), xs)})
    for g, w in zip(outs, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_integer_sources_get_no_gradient_and_casts_pass_float_gradients():
    x = df.constant(np.array([1, 2], np.int8))
    w = df.constant([0.5, 2.0])
    with df.GradientTape() as tape:
        tape.watch([x, w])
        y = df.reduce_sum(df.cast(x, df.float32) * w)
    with pytest.warns(UserWarning, match="source 0 is an int8 tensor of shape .*gets no gradient"):
        gx, gw = tape.gradient(y, [x, w])       # TF warns too
    assert gx is None
    np.testing.assert_array_equal(gw.numpy(), [1.0, 2.0])


def test_the_ir_prints_the_short_names():
    spec = [df.TensorSpec([2], getattr(df, n)) for n in NEW]
    cf = df.defun(lambda *xs: [x + x for x in xs]).get_concrete_function(*spec)
    text = str(cf.graph)
    for short in ("i8[2]", "i16[2]", "u8[2]", "u16[2]", "u32[2]", "u64[2]"):
        assert short in text
