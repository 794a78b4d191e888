"""The `tensorflow` names TF's AutoGraph reference tests use, mapped onto defun's.

`install(tests_dir)` puts the modules into sys.modules: `tensorflow` (and `tensorflow.compat.v1`,
the same names), `tensorflow.python.autograph` (`ag.stack`, `ag.set_element_type`) and
`tensorflow.python.autograph.tests.reference_test_base`, which is TF's own file from
`tests_dir`, imported as given. Names only: each maps onto the defun function or class that
does the same thing; what TF has and defun has not (tf.data, tf.distribute, tf.SparseTensor,
tf.ragged, tf.config) maps onto a stand-in that raises `NotMapped` when it is used.
"""
import importlib.util
import os
import sys
import types
import unittest

import numpy as np

import defun as df
from defun import autograph as df_autograph


class NotMapped(Exception):
    """A TF-only feature was used; the message starts with NOT_MAPPED and says which."""


NOT_MAPPED = "[TF-only, not mapped]"


class _Unmapped:
    """A TF-only name: any attribute is another stand-in; calling one raises NotMapped."""

    def __init__(self, name, why):
        self._name, self._why = name, why

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unmapped(f"{self._name}.{attr}", self._why)

    def __call__(self, *args, **kwargs):
        raise NotMapped(f"{NOT_MAPPED} {self._name}: {self._why}")

    def __repr__(self):
        return f"<{self._name}: TF-only, not mapped>"


def _unmapped_class(name, why):
    """A TF-only class (it must stay a class: the files use it in isinstance)."""
    def __init__(self, *args, **kwargs):
        raise NotMapped(f"{NOT_MAPPED} {name}: {why}")
    return type(name.rsplit(".", 1)[-1], (), {"__init__": __init__})


_DATA = "TF's input pipelines (tf.data); defun has no dataset type"
_DISTRIBUTE = "TF's multi-device strategies (tf.distribute); defun runs on one device"
_SPARSE = "TF's sparse tensors; defun has dense tensors only"
_RAGGED = "TF's ragged tensors; defun has dense tensors only"
_CONFIG = "TF's device configuration (tf.config); defun runs on one device"


def function(func=None, input_signature=None, autograph=True, experimental_autograph_options=None,
             experimental_compile=None, jit_compile=None, reduce_retracing=True):
    """tf.function -> df.defun (AutoGraph options are TF's opt-in features, always on in
    defun; experimental_compile / jit_compile (XLA) -> the default numpy backend)."""
    if func is None:
        return lambda f: function(f, input_signature, autograph)
    return df.defun(func, input_signature=input_signature, autograph=autograph,
                    reduce_retracing=reduce_retracing)


def uniform(shape, minval=0, maxval=None, dtype=df.float32, seed=None, name=None):
    """tf.random.uniform -> df.random.uniform (stateless: a fixed seed); integer dtypes as the
    floor of float uniforms in [minval, maxval)."""
    dtype = df.as_dtype(dtype)
    if dtype.is_floating:
        return df.random.uniform(shape, (0, 0), minval, 1.0 if maxval is None else maxval, dtype)
    u = df.random.uniform(shape, (0, 0), df.cast(minval, df.float64), df.cast(maxval, df.float64), df.float64)
    return df.cast(df.floor(u), dtype)


class TensorShape:
    """tf.TensorShape (only given to set_loop_options here): the dims, None for unknown."""

    def __init__(self, dims):
        self.dims = None if dims is None else list(dims)


class TensorArray(tuple):
    """tf.TensorArray -> one df tensor that grows by a row per write (a tuple holding it, so
    that a loop carries it: defun gives a loop variable whose size changes an unknown size).
    Writes land in order, at index size() (as the files write them); stack() is the tensor."""

    def __new__(cls, dtype, size=0, dynamic_size=None, element_shape=None, **kwargs):
        if not isinstance(dtype, (df.DType, str, type)):     # rebuilt from its items by nest
            return super().__new__(cls, tuple(dtype))
        return super().__new__(cls, (df.zeros([0] + list(element_shape or ()), dtype),))

    def write(self, index, value):
        buffer = self[0]
        row = df.expand_dims(df.cast(value, buffer.dtype), 0)
        return TensorArray((df.concat([buffer, row], 0),))

    def size(self):
        return df.shape(self[0])[0]

    def stack(self):
        return self[0]


class name_scope:
    """tf.name_scope: names TF's ops; defun's ops are named by their site, so nothing to do."""

    def __init__(self, name, *args, **kwargs):
        self.name = name

    def __enter__(self):
        return self.name

    def __exit__(self, *exc):
        return False


def set_loop_options(parallel_iterations=None, swap_memory=None, maximum_iterations=None,
                     shape_invariants=None):
    """tf.autograph.experimental.set_loop_options: defun gives a loop variable whose shape
    changes unknown sizes by itself (no shape_invariants) and has no other loop options."""


class _Feature:
    ALL = "ALL"
    AUTO_CONTROL_DEPS = "AUTO_CONTROL_DEPS"
    ASSERT_STATEMENTS = "ASSERT_STATEMENTS"
    BUILTIN_FUNCTIONS = "BUILTIN_FUNCTIONS"
    EQUALITY_OPERATORS = "EQUALITY_OPERATORS"
    LISTS = "LISTS"
    NAME_SCOPES = "NAME_SCOPES"


def trace(*args):
    """tf.autograph.trace: prints its arguments when the function is traced."""
    print(*args)


def to_graph(entity, recursive=True, experimental_optional_features=None):
    """tf.autograph.to_graph -> the function as autograph converts it (df.autograph)."""
    return df_autograph.converted(entity)


class TestCase(unittest.TestCase):
    """tf.test.TestCase: unittest's, with the assertAllEqual the files use."""

    def assertAllEqual(self, a, b, msg=None):
        np.testing.assert_array_equal(_numpy(a), _numpy(b), err_msg=msg or "")


def _numpy(x):
    if isinstance(x, df.Tensor):
        return x.numpy()
    if isinstance(x, (list, tuple)):
        return np.array([_numpy(v) for v in x])
    return np.asarray(x)


def ag_stack(list_or_tensor, element_dtype=None, strict=True):
    """autograph's ag.stack -> df.stack."""
    return df.stack(list_or_tensor)


def set_element_type(entity, dtype, shape=None):
    """autograph's ag.set_element_type: defun's lists need no element type."""


def _module(name, **names):
    m = types.ModuleType(name)
    m.__dict__.update(names)
    return m


def tensorflow_module():
    """The `tensorflow` module of the mapping."""
    errors = _module("tensorflow.errors", InvalidArgumentError=df.errors.InvalidArgumentError,
                     OutOfRangeError=_unmapped_class("tf.errors.OutOfRangeError", _DATA))
    experimental = _module("tensorflow.autograph.experimental", Feature=_Feature,
                           set_loop_options=set_loop_options)
    autograph = _module("tensorflow.autograph", experimental=experimental, trace=trace, to_graph=to_graph)
    names = dict(
        function=function, constant=df.constant, Variable=df.Variable, Tensor=df.Tensor,
        TensorArray=TensorArray, TensorShape=TensorShape, range=df.range, print=df.print,
        stack=df.stack, unstack=df.unstack, concat=df.concat, pad=df.pad, reshape=df.reshape,
        zeros=df.zeros, ones=df.ones, eye=df.eye, identity=df.identity, size=df.size, abs=df.abs,
        cast=df.cast, greater=df.greater, reduce_sum=df.reduce_sum, newaxis=None, name_scope=name_scope,
        int32=df.int32, int64=df.int64, float32=df.float32, float64=df.float64, bool=df.bool,
        random=_module("tensorflow.random", uniform=uniform), errors=errors, autograph=autograph,
        test=_module("tensorflow.test", TestCase=TestCase, main=unittest.main),
        data=_Unmapped("tf.data", _DATA), distribute=_Unmapped("tf.distribute", _DISTRIBUTE),
        SparseTensor=_unmapped_class("tf.SparseTensor", _SPARSE), sparse=_Unmapped("tf.sparse", _SPARSE),
        ragged=_Unmapped("tf.ragged", _RAGGED), config=_Unmapped("tf.config", _CONFIG))
    tf = _module("tensorflow", **names)
    tf.compat = _module("tensorflow.compat", v1=tf, v2=tf)
    return tf


def install(tests_dir):
    """Map `tensorflow` (and absl's parameterized, when absl is not installed) in sys.modules,
    with TF's own reference_test_base.py from `tests_dir`."""
    tf = tensorflow_module()
    ag = _module("tensorflow.python.autograph", stack=ag_stack, set_element_type=set_element_type)
    tests = _module("tensorflow.python.autograph.tests")
    tests.__path__ = [tests_dir]
    mods = {"tensorflow": tf, "tensorflow.compat": tf.compat, "tensorflow.compat.v1": tf,
            "tensorflow.python": _module("tensorflow.python", autograph=ag),
            "tensorflow.python.autograph": ag, "tensorflow.python.autograph.tests": tests}
    ag.tests = tests
    sys.modules.update(mods)
    if importlib.util.find_spec("absl") is None:
        from tests.tf_reference import parameterized_names   # only when absl is missing
        testing = _module("absl.testing", parameterized=parameterized_names)
        sys.modules.update({"absl": _module("absl", testing=testing), "absl.testing": testing,
                            "absl.testing.parameterized": parameterized_names})
    base = os.path.join(tests_dir, "reference_test_base.py")
    spec = importlib.util.spec_from_file_location("tensorflow.python.autograph.tests.reference_test_base", base)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    tests.reference_test_base = module
    return tf
