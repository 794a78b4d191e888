"""`df.config`: switches that change how every defun runs.

    df.config.run_functions_eagerly(True)    # every defun runs its Python function eagerly
    df.config.functions_run_eagerly()        # True

The switch is made once, not tested per call: while on, `Function.__call__` is
`_call_eagerly` below (and `Function._value_and_gradients` declines), and switching off
puts the graph call back.
"""
import numpy as np

from defun.runtime import errors
from defun.runtime.context import state
from defun.runtime.indexed_slices import IndexedSlices
from defun.runtime.nest import flatten, pack_as
from defun.runtime.tensor import EagerTensor, Tensor, to_array
from defun.runtime.variables import Variable
from defun import function
from defun.function import Function

__all__ = ["run_functions_eagerly", "functions_run_eagerly"]


def run_functions_eagerly(run_eagerly):
    """While True, every defun call runs its Python function on eager tensors instead of its
    graph (breakpoints, `print` and pdb work), with the same results and gradients; no
    trace is made. False: calls run the traced graphs again.

    >>> df.config.run_functions_eagerly(True)
    >>> step(x, y)          # runs step's Python body, op by op
    >>> df.config.run_functions_eagerly(False)
    """
    if not isinstance(run_eagerly, bool):
        raise TypeError(f"run_functions_eagerly expects True or False, got {run_eagerly!r:.60}")
    if run_eagerly:
        function._RUN_EAGERLY[:] = [True]
        Function.__call__ = _call_eagerly
    else:
        function._RUN_EAGERLY.clear()
        Function.__call__ = Function._call_graph


def functions_run_eagerly():
    """True while `run_functions_eagerly(True)` is in effect."""
    return bool(function._RUN_EAGERLY)


def _call_eagerly(self, *args, **kwargs):
    """`Function.__call__` while functions run eagerly: the Python function itself, on eager
    tensors (numpy arrays become tensors, as a trace takes them), its numbers and arrays
    returned as tensors (as a graph returns them). Called while a trace is being built
    (df.vmap's, a loop body's, another function's made meanwhile), where nothing runs
    eagerly: the call a graph makes, as with the switch off (its Python converted by
    AutoGraph, not run as written on symbolic tensors)."""
    if state.graph is not None:
        return self._call_graph(*args, **kwargs)
    if self._input_signature is not None:
        self._check_signature(args, kwargs)     # the same refusals as a graph call
    if not _as_is(args) or (kwargs and not _as_is(kwargs)):
        args, kwargs = _eager_argument(args), _eager_argument(kwargs)
    result = self.python_function(*args, **kwargs)
    if _as_is(result):      # tensors, variables and None in lists, tuples and dicts: as they are
        return result
    return pack_as(result, [_eager_output(leaf, self.name, pos) for pos, leaf in enumerate(flatten(result))])


_SEQUENCES = (tuple, list)


def _as_is(value):
    """True if `value` is an eager tensor, a variable or None, or a plain list or tuple of
    such values (nested): what a call takes and returns unchanged (the common case, which
    this finds in a fraction of what the general walk costs: ~17 -> ~3 us for mlp_small's step)."""
    t = type(value)
    if t is EagerTensor or value is None:
        return True
    if t in _SEQUENCES:
        for v in value:
            if type(v) is not EagerTensor and not _as_is(v):
                return False
        return True
    return isinstance(value, Variable)     # (a dict is packed anew: its keys in flatten's order)


def _eager_argument(value):
    """`value` with numpy arrays as eager tensors, nests walked (what a trace makes placeholders)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return EagerTensor(to_array(value))
    if isinstance(value, dict):
        return {k: _eager_argument(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_eager_argument(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_eager_argument(v) for v in value)
    return value


def _eager_output(leaf, fname, pos):
    """An output leaf of an eager call as a graph call returns it."""
    if leaf is None or isinstance(leaf, (Tensor, Variable)):
        return leaf
    if isinstance(leaf, IndexedSlices):
        return leaf._as_tensor()
    if isinstance(leaf, (np.ndarray, np.generic, bool, int, float)):
        return EagerTensor(to_array(leaf))
    raise errors.TracingError(
        f"defun {fname!r} returned a {type(leaf).__name__} ({leaf!r:.60}) as output leaf {pos}; a "
        f"defun may return tensors, numbers, None, and nested lists/tuples/dicts of them")
