"""defun tracing: the trace cache, input signatures, concrete functions, the retracing warning
and the printed cache key."""
import warnings

import numpy as np
import pytest

import defun as df
from defun_helpers import F64, assert_close, f64, val


# ====================================================================== tracing and the cache
def test_cache_hit_does_not_rerun_python():
    calls = []

    @df.defun
    def f(x):
        calls.append(1)
        return x * 2.0 + 1.0

    a = f(df.constant([1.0, 2.0]))
    b = f(df.constant([5.0, -3.0]))
    c = f(df.constant([0.5, 0.25]))
    assert len(calls) == 1
    assert f.trace_count == 1
    assert_close(a, [3.0, 5.0])
    assert_close(b, [11.0, -5.0])
    assert_close(c, [2.0, 1.5])


@pytest.mark.filterwarnings("ignore::defun.function.RetracingWarning")
def test_retrace_on_new_shape_dtype_static_value_and_structure():
    calls = []

    @df.defun
    def f(x, k=1.0):
        calls.append(1)
        if isinstance(x, (list, tuple)):
            return df.add_n(list(x)) * k
        return x * k

    f(df.constant([1.0, 2.0]))
    assert f.trace_count == 1
    f(df.constant([3.0, 4.0]))                      # new values: no retrace
    assert f.trace_count == 1
    out = f(df.constant([1.0, 2.0, 3.0]))           # new shape
    assert f.trace_count == 2
    assert_close(out, [1.0, 2.0, 3.0])
    out = f(f64([1.0, 2.0]))                        # new dtype
    assert f.trace_count == 3
    assert out.dtype is df.float64
    out = f(df.constant([1.0, 2.0]), 3.0)           # new static Python value
    assert f.trace_count == 4
    assert_close(out, [3.0, 6.0])
    f(df.constant([1.0, 2.0]), 3.0)                 # same static value: hit
    assert f.trace_count == 4
    out = f([df.constant([1.0, 2.0]), df.constant([1.0, 1.0])])   # new structure
    assert f.trace_count == 5
    assert_close(out, [2.0, 3.0])
    out = f((df.constant([1.0, 2.0]), df.constant([1.0, 1.0])))   # tuple vs list differs
    assert f.trace_count == 6
    assert len(calls) == 6


def test_kwargs_and_defaults_bind_like_a_normal_call():
    @df.defun
    def f(x, scale=1.0):
        return x * scale

    x = df.constant([1.0, 2.0])
    a = f(x, 2.0)
    n = f.trace_count
    b = f(x, scale=2.0)
    c = f(scale=2.0, x=x)
    assert f.trace_count == n == 1
    assert_close(a, [2.0, 4.0])
    assert_close(b, [2.0, 4.0])
    assert_close(c, [2.0, 4.0])
    d = f(x)                       # default 1.0, bound explicitly -> same as f(x, 1.0)
    e = f(x, 1.0)
    assert f.trace_count == 2
    assert_close(d, [1.0, 2.0])
    assert_close(e, [1.0, 2.0])


def test_kwarg_tensor_is_a_placeholder_not_static():
    @df.defun
    def f(x, y=None):
        return x if y is None else x + y

    x = df.constant([1.0, 2.0])
    assert_close(f(x, y=df.constant([1.0, 1.0])), [2.0, 3.0])
    assert_close(f(x, y=df.constant([10.0, 20.0])), [11.0, 22.0])
    assert f.trace_count == 1
    assert_close(f(x), [1.0, 2.0])
    assert f.trace_count == 2


def test_nested_arguments_and_outputs_rebuilt_each_call():
    @df.defun
    def f(inputs):
        a, (b, c) = inputs["pair"]
        return {"sum": a + b, "items": [a * c, (b - c, None)], "neg": -inputs["x"]}

    def args(s):
        return {"pair": [df.constant([1.0, 2.0]) * s, (df.constant([3.0, 4.0]) * s, df.constant(2.0) * s)],
                "x": df.constant([[1.0]]) * s}

    out1 = f(args(1.0))
    out2 = f(args(2.0))
    assert f.trace_count == 1
    for out, s in ((out1, 1.0), (out2, 2.0)):
        assert set(out) == {"sum", "items", "neg"}
        assert isinstance(out["items"], list) and isinstance(out["items"][1], tuple)
        assert out["items"][1][1] is None
        assert isinstance(out["sum"], df.Tensor) and not isinstance(out["sum"], type(None))
        assert_close(out["sum"], np.array([4.0, 6.0]) * s)
        assert_close(out["items"][0], np.array([2.0, 4.0]) * s * s)
        assert_close(out["items"][1][0], np.array([1.0, 2.0]) * s)
        assert_close(out["neg"], [[-s]])
    assert out1["sum"] is not out2["sum"]
    assert out1 is not out2 and out1["items"] is not out2["items"]


def test_outputs_are_eager_tensors_usable_eagerly():
    @df.defun
    def f(x):
        return x * 3.0, df.reduce_sum(x)

    a, s = f(df.constant([1.0, 2.0]))
    assert float(s) == pytest.approx(3.0)
    assert_close(a + 1.0, [4.0, 7.0])
    assert isinstance(val(a), np.ndarray)


def test_numpy_array_arguments_are_placeholders_keyed_by_shape_and_dtype():
    calls = []

    @df.defun
    def f(x):
        calls.append(1)
        return x * 2

    assert_close(f(np.array([1.0, 2.0])), [2.0, 4.0])
    out = f(np.array([5.0, 7.0]))
    assert_close(out, [10.0, 14.0])
    assert out.dtype is df.float64          # numpy arrays keep their dtype
    assert len(calls) == 1
    out = f(np.array([1, 2], dtype=np.int32))
    assert out.dtype is df.int32
    assert_close(out, [2, 4])
    assert len(calls) == 2
    # A numpy array and an eager tensor of the same shape/dtype share a trace.
    assert_close(f(f64([3.0, 4.0])), [6.0, 8.0])
    assert len(calls) == 2


def test_static_string_and_none_arguments_are_in_the_key():
    @df.defun
    def f(x, mode):
        if mode == "double":
            return x * 2.0
        if mode is None:
            return x
        return x * 3.0

    x = df.constant([1.0])
    assert_close(f(x, "double"), [2.0])
    assert_close(f(x, "triple"), [3.0])
    assert_close(f(x, None), [1.0])
    assert_close(f(x, "double"), [2.0])
    assert f.trace_count == 3


def test_unhashable_python_argument_raises_clear_type_error():
    @df.defun
    def f(x, opts):
        return x

    with pytest.raises(TypeError, match="hashable"):
        f(df.constant(1.0), {1, 2})


# ====================================================================== input_signature
def test_input_signature_with_none_sizes_traces_once():
    @df.defun(input_signature=[df.TensorSpec([None, 3], df.float32)])
    def f(x):
        return df.reduce_sum(x, axis=1)

    for n in (1, 4, 7):
        arr = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        assert_close(f(df.constant(arr)), arr.sum(axis=1))
    assert f.trace_count == 1
    cf = f.get_concrete_function()
    assert cf.inputs[0].shape == (None, 3)
    assert f.trace_count == 1


def test_input_signature_as_function_argument():
    f = df.defun(lambda x, y: x @ y, input_signature=[df.TensorSpec([None, 2], df.float64),
                                                      df.TensorSpec([2, None], df.float64)])
    a = np.arange(6, dtype=F64).reshape(3, 2)
    b = np.arange(8, dtype=F64).reshape(2, 4)
    assert_close(f(a, b), a @ b)
    assert_close(f(a[:1], b[:, :1]), a[:1] @ b[:, :1])
    assert f.trace_count == 1


def _signature_fn_with_variable():
    v = df.Variable(5.0)

    @df.defun(input_signature=[df.TensorSpec([None, 3], df.float32)])
    def bump(inputs):
        v.assign_add(1.0)
        return df.reduce_sum(inputs) + v

    return v, bump


def test_input_signature_wrong_shape_raises_value_error_naming_argument_before_running():
    v, bump = _signature_fn_with_variable()
    bump(df.ones([2, 3]))
    assert float(v) == 6.0
    with pytest.raises(ValueError, match="inputs"):
        bump(df.ones([2, 4]))
    with pytest.raises(ValueError, match="inputs"):
        bump(df.ones([3]))                 # wrong rank
    assert float(v) == 6.0
    assert bump.trace_count == 1


def test_input_signature_wrong_dtype_raises_type_error_naming_argument_before_running():
    v, bump = _signature_fn_with_variable()
    with pytest.raises(TypeError, match="inputs"):
        bump(df.ones([2, 3], dtype=df.float64))
    assert float(v) == 5.0
    assert bump.trace_count == 0


def test_input_signature_wrong_structure_raises_type_error():
    v = df.Variable(0.0)

    @df.defun(input_signature=[[df.TensorSpec([2]), df.TensorSpec([2])]])
    def f(pair):
        v.assign_add(1.0)
        return pair[0] + pair[1]

    assert_close(f([df.ones([2]), df.ones([2])]), [2.0, 2.0])
    with pytest.raises(TypeError, match="pair"):
        f([df.ones([2])])
    with pytest.raises(TypeError):
        f(df.ones([2]), df.ones([2]))       # wrong number of arguments
    assert float(v) == 1.0


# ====================================================================== get_concrete_function
def test_get_concrete_function_traces_without_running():
    v = df.Variable(1.0)
    calls = []

    @df.defun
    def f(x):
        calls.append(1)
        v.assign_add(10.0)
        return {"y": x * v, "z": [df.reduce_sum(x)]}

    cf = f.get_concrete_function(df.constant([1.0, 2.0]))
    assert float(v) == 1.0
    assert len(calls) == 1
    assert f.trace_count == 1
    assert len(cf.inputs) >= 1 and cf.inputs[0].shape == (2,)
    assert cf.inputs[0].dtype is df.float32
    assert len(cf.outputs) == 2
    assert set(cf.structured_outputs) == {"y", "z"}
    assert isinstance(cf.structured_outputs["z"], list)
    assert cf.graph is not None
    # Calling the concrete function and the defun use the same trace.
    out = cf(df.constant([1.0, 2.0]))
    assert_close(out["y"], [11.0, 22.0])
    assert float(v) == 11.0
    out = f(df.constant([3.0, 4.0]))
    assert_close(out["z"][0], 7.0)
    assert len(calls) == 1 and f.trace_count == 1
    text = str(cf)
    assert "assign" in text.lower() or "Assign" in text
    assert "mul" in text.lower()
    assert len(text.splitlines()) >= 3


def test_get_concrete_function_accepts_tensor_spec():
    @df.defun
    def f(x):
        return df.reduce_sum(x * x, axis=0)

    cf = f.get_concrete_function(df.TensorSpec([None, 2], df.float64))
    assert cf.inputs[0].shape == (None, 2)
    assert cf.outputs[0].shape == (2,)
    assert_close(cf(f64([[1.0, 2.0], [3.0, 4.0], [0.0, 1.0]])), [10.0, 21.0])


# ====================================================================== retracing warning
def test_retracing_warning_says_what_differed():
    @df.defun
    def f(x, n):
        return x * n

    x = df.constant([1.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(12):
            f(x, float(n))
    retrace = [w for w in caught if issubclass(w.category, df.RetracingWarning)]
    assert retrace, "expected a RetracingWarning after many retraces"
    msg = str(retrace[-1].message)
    assert "10.0" in msg and "11.0" in msg
    assert "n: Python float 10.0 -> Python float 11.0" in msg    # named by the parameter
    assert f.trace_count == 12


def test_no_retracing_warning_for_cache_hits():
    @df.defun
    def f(x):
        return x + 1.0

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(50):
            f(df.constant([float(k)]))
    assert not [w for w in caught if issubclass(w.category, df.RetracingWarning)]
    assert f.trace_count == 1


def test_retracing_warning_names_shape_change():
    @df.defun(reduce_retracing=False)      # one trace per shape
    def f(x):
        return x * 2.0

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 10):
            f(df.ones([n]))
    retrace = [w for w in caught if issubclass(w.category, df.RetracingWarning)]
    assert retrace
    msg = str(retrace[-1].message)
    assert "[8]" in msg and "[9]" in msg


def test_retracing_warning_points_at_the_callers_line():
    @df.defun
    def f(x, n):
        return x * n

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(10):
            f(df.constant(1.0), float(n))
    retrace = [w for w in caught if issubclass(w.category, df.RetracingWarning)]
    assert retrace
    assert retrace[-1].filename == __file__


# ====================================================================== the cache key
def test_cache_key_prints_and_names_each_changed_argument():
    from defun.cache_key import CacheKey
    x, v = df.constant([1.0, 2.0]), df.Variable([1.0])
    names = ("x", "n", "cfg", "v")
    old = CacheKey.of((x, 2.0, {"lr": 0.1, "layers": [3, 4]}, v), {}, [], names)
    new = CacheKey.of((df.constant([[1.0]]), 2.0, {"lr": 0.2, "layers": [3, 5]}, v), {"flag": True},
                      [], names)
    assert str(old) == ("x: tensor float32[2], n: Python float 2.0, cfg['layers'][0]: Python int 3, "
                        "cfg['layers'][1]: Python int 4, cfg['lr']: Python float 0.1, "
                        "v: variable float32[1]")
    assert new.changes(old) == ["x: tensor float32[2] -> tensor float32[1, 1]",
                                "cfg['layers'][1]: Python int 4 -> Python int 5",
                                "cfg['lr']: Python float 0.1 -> Python float 0.2",
                                "flag: absent -> Python bool True"]
    assert old == CacheKey.of((x, 2.0, {"lr": 0.1, "layers": [3, 4]}, v), {}, [], names)
    assert hash(old) == hash(CacheKey.of((x, 2.0, {"layers": [3, 4], "lr": 0.1}, v), {}, [], names))
    assert new.static_part() != old.static_part()


def test_cache_key_names_var_positional_and_keyword_arguments():
    @df.defun
    def f(x, *rest, scale=1.0):
        return x * scale

    x = df.constant([1.0])
    f(x, 1, 2, scale=2.0)
    cf = f.get_concrete_function(x, 1, 3, scale=3.0)
    key, old = cf._key, next(k for k in f._cache if k != cf._key)
    assert key.changes(old) == ["rest[1]: Python int 2 -> Python int 3",
                                "scale: Python float 2.0 -> Python float 3.0"]
