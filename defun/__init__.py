"""defun: a trace-to-graph function compiler on numpy.

    import defun as df

    @df.defun
    def step(x, w):
        return df.reduce_sum(df.tanh(x @ w))

The repository keeps `runtime/` and `graph/` beside this folder; installed, they are the
subpackages `defun.runtime` and `defun.graph` (pyproject.toml maps them), and nothing else
is put on `sys.path`. Run from a checkout that was not installed (a second work tree, say),
the two folders are found beside this one, so the checkout imports its own code.
"""
import os as _os

if not _os.path.isdir(_os.path.join(__path__[0], "runtime")):     # a source checkout
    __path__.append(_os.path.dirname(__path__[0]))
from defun.runtime import errors  # noqa: F401
from defun.runtime.dtypes import (DType, as_dtype, bool, float16, float32, float64, int32, int64,  # noqa: F401
                                  resource, complex64, complex128, int8, int16, uint8, uint16,
                                  uint32, uint64)
from defun.runtime.tensor import Tensor, constant, convert_to_tensor, tensor_id  # noqa: F401
from defun.runtime.ops import *  # noqa: F401,F403
from defun.runtime.ops import math_ops as _math_ops, array_ops as _array_ops, nn_ops as _nn_ops
from defun.runtime.execute import execute  # noqa: F401
from defun.runtime.context import (add_execution_callback, remove_execution_callback,  # noqa: F401
                                   executing_eagerly, active_trace)
from defun.runtime.variables import Variable  # noqa: F401
from defun.runtime.indexed_slices import IndexedSlices  # noqa: F401
from defun.runtime.backprop import (GradientTape, gradients_function, value_and_gradients_function,  # noqa: F401
                                    implicit_gradients, implicit_value_and_gradients)
from defun.runtime.custom_gradient import custom_gradient  # noqa: F401
from defun.runtime.tape import record_operation, stop_recording  # noqa: F401

# Python builtins shadowed on purpose by the op names (df.abs, df.pow, df.round, df.range).
abs = _math_ops.abs  # noqa: A001
pow = _math_ops.pow  # noqa: A001
round = _math_ops.round  # noqa: A001

__version__ = "0.1.0"
from defun.function import defun, TensorSpec, ConcreteFunction, Function, RetracingWarning  # noqa: F401,E402
from defun.function import StaleCaptureWarning  # noqa: F401,E402
from defun.control_flow import cond, while_loop, scan, map_fn, foldl  # noqa: E402,F401
from defun.vmap import vmap, vectorized_map, VectorizationFallbackWarning  # noqa: E402,F401
from defun.export import export_json, load_json  # noqa: E402,F401
from defun.graph.backends import Backend, NumpyBackend, backends, register_backend  # noqa: E402,F401
# installs backend "numba" if numba is installed; it loads numba on first use
from defun.graph import numba_backend as _numba_backend  # noqa: E402,F401
from defun import linalg, math, nn  # noqa: E402,F401  (TF's tf.linalg, tf.math, tf.nn names)
from defun.runtime.forwardprop import ForwardAccumulator  # noqa: E402,F401
from defun.runtime import optimizers  # noqa: E402,F401
from defun.runtime.checkpoint import save_variables, restore_variables  # noqa: E402,F401
from defun.runtime.context import init_scope  # noqa: E402,F401
from defun.runtime.ops import debug_ops as _debug_ops  # noqa: E402
from defun import config, debugging, random, signal, test  # noqa: E402,F401
print = _debug_ops.print  # noqa: A001,E402  (df.print, as tf.print)
from defun.profile import profile, Profile, ProfileRow  # noqa: E402,F401
from defun.view import view  # noqa: E402,F401
from defun.namespaces import missing_name as _missing_name, CalledLikeTF as _CalledLikeTF  # noqa: E402
function.__class__ = _CalledLikeTF  # noqa: F821,E402  (`@df.function` says to use @df.defun)
# Loaded on first use (module __getattr__ below): the numpy and ONNX exports' modules cost
# a tenth of `import defun` when Python compiles them (benchmarks/imports.py). (A name
# equal to its module's, such as `profile`, cannot be lazy: importing the module would set it.)
_LAZY = {"export_numpy_source": "defun.numpy_export", "export_onnx": "defun.onnx_export"}

# The public names: what `dir(df)` shows and `from defun import *` takes. Submodules
# (`defun.function`, `defun.graph`, ...) stay importable by their full names but are not API.
_NAMESPACES = ("errors", "linalg", "math", "nn", "random", "debugging", "optimizers", "dask", "test", "signal",
               "config", "autograph")
__all__ = sorted({n for n, v in globals().items()
                  if not n.startswith("_") and not isinstance(v, type(_os))
                  } | set(_NAMESPACES) | set(_LAZY))


def __getattr__(name):
    # df.dask loads on first use (defun.dask imports defun's modules, never the reverse)
    if name == "dask":
        import defun.dask as dask  # lazily: the [dask] extra is optional and slow to import
        return dask
    if name in _LAZY:
        import importlib  # lazily: only the first use of a _LAZY name gets here
        value = globals()[name] = getattr(importlib.import_module(_LAZY[name]), name)
        return value
    raise _missing_name("defun", name, __all__)


def __dir__():
    return list(__all__)
