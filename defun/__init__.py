"""defun: a trace-to-graph function compiler on numpy.

    import defun as df

    @df.defun
    def step(x, w):
        return df.reduce_sum(df.tanh(x @ w))
"""
from runtime import errors  # noqa: F401
from runtime.dtypes import (DType, as_dtype, bool, float16, float32, float64, int32, int64,  # noqa: F401
                            resource)
from runtime.tensor import Tensor, constant, convert_to_tensor, tensor_id  # noqa: F401
from runtime.ops import *  # noqa: F401,F403
from runtime.ops import math_ops as _math_ops, array_ops as _array_ops, nn_ops as _nn_ops
from runtime.execute import execute  # noqa: F401
from runtime.context import (add_execution_callback, remove_execution_callback,  # noqa: F401
                             executing_eagerly, active_trace)
from runtime.variables import Variable  # noqa: F401
from runtime.indexed_slices import IndexedSlices  # noqa: F401
from runtime.backprop import (GradientTape, gradients_function, value_and_gradients_function,  # noqa: F401
                              implicit_gradients, implicit_value_and_gradients)
from runtime.custom_gradient import custom_gradient  # noqa: F401
from runtime.tape import record_operation, stop_recording  # noqa: F401

# Python builtins shadowed on purpose by the op names (df.abs, df.pow, df.round, df.range).
abs = _math_ops.abs  # noqa: A001
pow = _math_ops.pow  # noqa: A001
round = _math_ops.round  # noqa: A001

__version__ = "0.1.0"
from defun.function import defun, TensorSpec, ConcreteFunction, Function, RetracingWarning  # noqa: F401,E402
from defun.function import StaleCaptureWarning  # noqa: F401,E402
from defun.control_flow import cond, while_loop  # noqa: E402,F401
from defun.export import export_json, load_json  # noqa: E402,F401
from graph.backends import backends  # noqa: E402,F401
import graph.numba_backend  # noqa: E402,F401  (installs backend "numba" if numba is; it loads numba on first use)
from defun import linalg  # noqa: E402,F401
from runtime.forwardprop import ForwardAccumulator  # noqa: E402,F401
from runtime import optimizers  # noqa: E402,F401
from runtime.checkpoint import save_variables, restore_variables  # noqa: E402,F401
from runtime.context import init_scope  # noqa: E402,F401
from runtime.ops import debug_ops as _debug_ops  # noqa: E402
from defun import debugging, random  # noqa: E402,F401
print = _debug_ops.print  # noqa: A001,E402  (df.print, as tf.print)
from defun import dask  # noqa: E402,F401  (df.dask: the optional [dask] extra, imported lazily)
from defun.numpy_export import export_numpy_source  # noqa: E402,F401
from defun.onnx_export import export_onnx  # noqa: E402,F401  (the optional [onnx] extra, imported lazily)
