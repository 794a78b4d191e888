"""The one dispatch point: `run_op` executes eagerly or asks the graph builder for a node.

`run_op` is the reference semantics of an op call, written plainly: while a graph is
being built, a node; eagerly, the operands as tensors (converted, one dtype where the op
wants one: `same_dtype_inputs`), the kernel on their values, results wrapped, then (only
when someone listens) the execution callbacks, the execution trace and the tapes told.
The specialized public functions of elementwise ops that skip work for plain eager calls
live beside it, in runtime/fast_dispatch.py, and are tested to decide the same.
"""
import numpy as np

from defun.runtime import dtypes, errors, tape as tape_mod
from defun.runtime.context import execution_callbacks, state
from defun.runtime.convert import convert_operands
from defun.runtime.dtypes import kinds_text
from defun.runtime.registry import check_input_count, get as get_op
from defun.runtime.tensor import EagerTensor, Tensor, to_array, weak_scalar_tensor

__all__ = ["run_op", "execute", "same_dtype_inputs", "kernel_error"]

_EMPTY = {}
_FIRST_TWO = (0, 1)


def run_op(op, inputs, attrs=_EMPTY, name=None):
    """Run OpDef `op` on `inputs`; returns a tensor, a tuple of tensors, or None (0 outputs)."""
    st = state
    tapes = st.eager_tapes    # the thread's tapes while it runs eagerly untraced ([] if none)
    if tapes is None and st._graph is not None:
        return _add_node(st, op, inputs, attrs, name)
    try:
        vals = [x._value for x in inputs]       # eager tensors
    except AttributeError:                      # else: converted (variables read, ...)
        inputs = _eager_inputs(op, inputs)
        vals = [x._value for x in inputs]
    checked = same_dtype_inputs(op, inputs, vals)
    if checked is not inputs:       # cast to one dtype
        inputs = checked
        vals = [x._value for x in inputs]
    kinds = op.kinds
    if kinds is not None and vals and vals[0].dtype.kind not in kinds:
        raise errors.InvalidArgumentError(
            f"{op.name}: unsupported input dtype {vals[0].dtype.name} "
            f"(expected {kinds_text(kinds)})")
    try:
        out = op.kernel(*vals, **attrs) if attrs else op.kernel(*vals)
    except errors.DefunError:
        raise
    except Exception as e:
        raise kernel_error(op, vals, attrs, e) from e
    if op.single:
        outs = (EagerTensor(out),)
    else:
        outs = tuple(EagerTensor(o) for o in out) if out is not None else ()
    result = outs[0] if op.single else (outs if outs else None)
    if tapes is not None and not tapes and not execution_callbacks:    # nobody listens
        return result
    for cb in tuple(execution_callbacks):
        cb(op.name, name, attrs, inputs, outs)
    if tapes is None:       # eager under an execution trace
        st._trace.add(op.name, outs)
        tapes = st._tapes
    if tapes and op.grad is not None:
        tape_mod.record_op(tapes, op, inputs, outs, attrs)
    return result


def _add_node(st, op, inputs, attrs, name):
    """A graph is being built: `op` becomes a node of it (recorded on its tapes)."""
    inputs, outs = st._graph.add_op(op, inputs, attrs, name)
    if st._tapes and op.grad is not None and outs:
        tape_mod.record_op(st._tapes, op, inputs, outs, attrs, getattr(outs[0], "node", None))
    return outs[0] if op.single else (tuple(outs) if outs else None)


def execute(op_name, num_outputs, inputs, attrs=None, name=None):
    """Run op `op_name` and return its outputs as a list (TensorFlow eager's entry point)."""
    op = get_op(op_name)
    check_input_count(op, len(inputs))
    attrs = attrs or _EMPTY
    if op.defaults and not op.defaults.keys() <= attrs.keys():
        attrs = {**op.defaults, **attrs}     # attrs left out take their declared defaults
    expected = op.output_count(attrs, len(inputs))
    if num_outputs != expected:
        raise errors.InvalidArgumentError(
            f"op {op_name!r} produces {expected} outputs, but num_outputs={num_outputs}")
    out = run_op(op, list(inputs), attrs, name)
    if out is None:
        return []
    return list(out) if isinstance(out, tuple) else [out]


def _eager_inputs(op, inputs):
    """`inputs` as eager tensors: variables read, arrays and Python values converted by the
    weak-typing rules (runtime.convert); a symbolic tensor here is an error."""
    if len(inputs) == 2 and op.same_dtype == _FIRST_TWO:
        # a tensor and a Python number (`x * 1.01`): the number takes the tensor's dtype,
        # as convert_operands decides, as the cached tensor of weak_scalar_tensor
        a, b = inputs
        if type(a) is EagerTensor and (t := weak_scalar_tensor(b, a._value.dtype)) is not None:
            return [a, t]
        if type(b) is EagerTensor and (t := weak_scalar_tensor(a, b._value.dtype)) is not None:
            return [t, b]
    inputs = list(inputs)
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor):
            if not isinstance(x, EagerTensor):
                raise _symbolic_outside_trace(op, x)
        elif hasattr(x, "_as_tensor"):
            inputs[i] = x._as_tensor()
    return convert_operands(op, inputs, _is_tensor, _eager_operand)


def same_dtype_inputs(op, inputs, typed=None):
    """`inputs` (tensors, eager or symbolic) as they are when the operands of
    `op.same_dtype` share one dtype; else `promote_or_raise`: THE same-dtype check.

    `typed` (default `inputs`): per input, what its dtype is read from, for eager tensors
    their numpy values (an attribute, where a tensor's `dtype` is a property lookup)."""
    same = op.same_dtype
    if same is not None:
        typed = inputs if typed is None else typed
        d0 = typed[same[0]].dtype
        for i in same:
            if typed[i].dtype is not d0:
                return promote_or_raise(op, inputs)
    return inputs


def _is_tensor(x):
    return isinstance(x, Tensor)


def _eager_operand(x, dtype):
    # a Python number taking a tensor's dtype: the one shared tensor of weak_scalar_tensor
    # (a dtype of an array operand may be one no tensor has: big-endian, to_array's to fix)
    t = weak_scalar_tensor(x, dtype) if dtype in dtypes._BY_NUMPY else None
    return t if t is not None else EagerTensor(to_array(x, dtype))


def promote_or_raise(op, inputs):
    """`inputs` with the operands of `op.same_dtype` cast to the dtype `dtypes.promoted` gives
    integer dtypes (int8 + uint8 -> int16, int8 + uint64 -> float64, as numpy), or the error
    naming the dtypes.
    Only reached on a mismatch, so the usual call pays nothing; eager and traced alike."""
    same = op.same_dtype
    dts = [inputs[i].dtype for i in same]
    if all(d is dts[0] for d in dts):      # one dtype, arrays in another byte order
        target = dts[0]
    else:
        target = dtypes.promoted(*dts)
    if target is None:
        _raise_dtype_mismatch(op, [inputs[j] for j in same])
    if target.is_floating and op.name in _EXACT_COMPARISONS and dtypes.int64 in dts:
        # numpy compares int64 with uint64 exactly; in float64 2**62 + 1 would equal 2**62
        raise errors.InvalidArgumentError(
            f"{op.name}: comparing int64 with uint64 has no exact common dtype (numpy compares "
            f"them exactly; float64 rounds past 2**53): df.cast one of them first")
    cast = get_op("cast")
    out = list(inputs)
    for i in same:
        if out[i].dtype is not target:
            out[i] = run_op(cast, (out[i],), {"dtype": target})
    return out


_EXACT_COMPARISONS = frozenset(("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"))


def _raise_dtype_mismatch(op, tensors):
    names = ", ".join(t.dtype.name for t in tensors)
    raise errors.InvalidArgumentError(
        f"{op.name}: inputs must have the same dtype, got {names}; use df.cast to convert")


def _symbolic_outside_trace(op, t):
    where = getattr(t, "creation_site", None)
    site = f" (created at {where})" if where else ""
    return errors.TracingError(
        f"{op.name}: symbolic tensor {getattr(t, 'name', t)!r}{site} is used outside the "
        f"function trace that created it; return it from the traced function instead")


def describe_value(v):
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        try:
            return f"{dtypes.from_numpy(v.dtype).name}{list(v.shape)}"
        except errors.InvalidArgumentError:
            return f"{v.dtype}{list(v.shape)}"
    return type(v).__name__


def kernel_error(op, vals, attrs, exc):
    """The error of kernel call `op(*vals, **attrs)` that raised `exc`."""
    # The static check says it best, and the same way a trace would: ask it first (only on
    # this failure path, so the eager path never pays for inference).
    try:
        op.infer([np.shape(v) for v in vals], [dtypes.from_numpy(v.dtype) for v in vals], attrs)
    except errors.InvalidArgumentError as e:
        return errors.InvalidArgumentError(f"{e}; called eagerly with "
                                           f"{', '.join(describe_value(v) for v in vals)}")
    except Exception:
        pass
    shown = ", ".join(describe_value(v) for v in vals)
    if isinstance(exc, MemoryError):
        return errors.out_of_memory(f"{op.name}({shown})", exc)
    attr_txt = ""
    if attrs:
        attr_txt = " with " + ", ".join(f"{k}={v!r}" for k, v in sorted(attrs.items())
                                        if not callable(v))
    return errors.InvalidArgumentError(f"{op.name}({shown}){attr_txt} failed: {exc}")
