"""The one dispatch point: `run_op` executes eagerly or asks the graph builder for a node.

Eager path: unwrap values, check dtypes, call the kernel, wrap results, then (only when
someone listens) record on tapes, call callbacks, append to the execution trace.

The eager path is the per-op cost of every eager program, so it is written flat: each
trick below says what it bought, measured with benchmarks/dispatch.py (one float32 (4,)
add; numpy's own call is ~0.3 us of it on the reference machine). The public functions of
elementwise ops (`op_function`) run their plain eager calls themselves, quiet or taped,
and hand everything else to `run_op`: the same decisions, with the op's fields bound once.
"""
import numpy as np

from defun.runtime import dtypes, errors, tape as tape_mod
from defun.runtime.context import busy_threads, execution_callbacks, state
from defun.runtime.convert import convert_operands
from defun.runtime.dtypes import kinds_text
from defun.runtime.registry import check_input_count, get as get_op
from defun.runtime.tensor import EagerTensor, Tensor, next_tensor_id, to_array, weak_scalar_tensor

__all__ = ["run_op", "execute", "op_function"]

_EMPTY = {}
_new_object = object.__new__
_PY_NUMBERS = frozenset((float, int))  # weakly typed operands (a rare bool takes the slow path)


def run_op(op, inputs, attrs=_EMPTY, name=None):
    """Run OpDef `op` on `inputs`; returns a tensor, a tuple of tensors, or None (0 outputs)."""
    st = state
    # `eager_tapes`: the thread's tapes while it runs eagerly with no trace ([] when quiet),
    # else None; the one thread-local read of an eager op, taped or not. Otherwise read
    # the fields behind the state's properties (a property costs ~50 ns).
    tapes = st.eager_tapes
    if tapes is None:
        g = st._graph
        if g is not None:
            inputs, outs = g.add_op(op, inputs, attrs, name)
            tapes = st._tapes
            if tapes and op.grad is not None and outs:
                tape_mod.record_op(tapes, op, inputs, outs, attrs, getattr(outs[0], "node", None))
            return outs[0] if op.single else (tuple(outs) if outs else None)

    # Values of eager tensors; anything else (arrays, scalars, variables) takes the slow
    # path. Unrolling the common arities instead of a list comprehension: -75 ns (a
    # comprehension is a function call of its own before Python 3.12).
    n = len(inputs)
    if n == 2:
        a, b = inputs
        # A Python number operand (`x * 1.01`) is tested for (~30 ns) rather than met as
        # the AttributeError below: raising and catching that costs ~0.4 us.
        if type(a) in _PY_NUMBERS or type(b) in _PY_NUMBERS:
            inputs, vals = _convert_eager_inputs(op, inputs)  # checks dtypes itself
        else:
            try:
                vals = (a._value, b._value)
            except AttributeError:
                inputs, vals = _convert_eager_inputs(op, inputs)
            else:
                # Binary ops that want one dtype: two fields compared inline rather than
                # the general loop below (-0.15 us). numpy dtypes of the same type are one
                # object, so `is` settles the usual case before the slower `!=`.
                if op.same_dtype is not None:
                    da, db = vals[0].dtype, vals[1].dtype
                    if da is not db and da != db and len(op.same_dtype) == 2:
                        return run_op(op, promote_or_raise(op, inputs), attrs, name)
    else:
        try:
            if n == 1:
                vals = (inputs[0]._value,)
            else:
                vals = [x._value for x in inputs]
        except AttributeError:
            inputs, vals = _convert_eager_inputs(op, inputs)  # checks dtypes itself
        else:
            same = op.same_dtype
            if same is not None:
                d0 = vals[same[0]].dtype
                for i in same:
                    d = vals[i].dtype
                    if d is not d0 and d != d0:
                        return run_op(op, promote_or_raise(op, inputs), attrs, name)
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
        raise _kernel_error(op, vals, attrs, e) from e

    if op.single:
        # EagerTensor(out) without the __init__ call: same two fields, -20 ns.
        result = _new_object(EagerTensor)
        result._value = out
        result._id = next_tensor_id()
        if tapes is not None and not tapes and not execution_callbacks:  # quiet
            return result
        outs = (result,)
    else:
        outs = tuple(EagerTensor(o) for o in out) if out is not None else ()
        result = outs if outs else None
    if execution_callbacks:
        for cb in tuple(execution_callbacks):
            cb(op.name, name, attrs, inputs, outs)
    if tapes is None:  # eager under an execution trace
        st._trace.add(op.name, outs)
        tapes = st._tapes
    if tapes and op.grad is not None:
        tape_mod.record_op(tapes, op, inputs, outs, attrs)
    return result


def op_function(op, doc="", names=None):
    """The public function of registered op `op`: `f(x, name=None)` or `f(x, y, name=None)`;
    `names` renames its tensor parameters (TF's names: `relu(features, name=None)`).

    For an op of one or two inputs (two of one dtype), no attrs and one output, a plain
    eager call on eager tensors (or a tensor and a Python number) runs here, taped or not,
    with the op's fields bound once; anything else (arrays, variables, a graph being
    built, an execution trace or callback, an unusual dtype, an error to report) goes to
    `run_op`, which decides the same. For a float32 (4,) add, against `run_op`: 0.77 us
    instead of 1.06 untaped, 1.2 instead of 2.0 taped (process time; numpy's call 0.39).
    """
    if op.num_inputs == 1:
        f = _unary_function(op) if _fits(op) else \
            (lambda x, name=None: run_op(op, (x,), _EMPTY, name))
    else:
        f = _binary_function(op) if _fits(op) and op.same_dtype == _FIRST_TWO else \
            (lambda x, y, name=None: run_op(op, (x, y), _EMPTY, name))
    f.__name__ = f.__qualname__ = op.name
    f.__doc__ = doc
    return f if names is None else renamed_parameters(f, names)


def renamed_parameters(f, names):
    """`f` with its first len(names) parameters called `names` (keywords and signature): the
    same code object otherwise, so a call costs what it did."""
    code = f.__code__
    assert len(names) <= code.co_argcount and not set(names) & set(code.co_varnames[len(names):]), names
    f.__code__ = code.replace(co_varnames=tuple(names) + code.co_varnames[len(names):])
    return f


_QUIET = ()  # the tapes of a quiet thread (no thread is busy)


def _fits(op):
    return op.single and not op.attrs and op.num_inputs in (1, 2) and tape_mod.claim(op)


def _kind_dtypes(kinds):
    """The supported numpy dtypes of `kinds` (all if None): one set test per call."""
    return frozenset(d for d in dtypes._BY_NUMPY if kinds is None or d.kind in kinds)


def _unary_function(op):
    kernel, ok, op_name = op.kernel, _kind_dtypes(op.kinds), op.name
    st, busy, callbacks, record = state, busy_threads, execution_callbacks, tape_mod.record_unary
    ET, new, next_id = EagerTensor, _new_object, next_tensor_id

    def f(x, name=None):
        if type(x) is ET:
            tapes = st.eager_tapes if busy else _QUIET
            if tapes is not None and not callbacks:
                v = x._value
                if v.dtype in ok:
                    try:
                        out = kernel(v)
                    except errors.DefunError:
                        raise
                    except Exception as e:
                        raise _kernel_error(op, [v], _EMPTY, e) from e
                    r = new(ET)
                    r._value = out
                    r._id = next_id()
                    if tapes and op.grad is not None:
                        record(tapes, op_name, x, r)
                    return r
        return run_op(op, (x,), _EMPTY, name)
    return f


def _binary_function(op):
    kernel, ok, op_name = op.kernel, _kind_dtypes(op.kinds), op.name
    st, busy, callbacks, record = state, busy_threads, execution_callbacks, tape_mod.record_binary
    ET, new, next_id, weak = EagerTensor, _new_object, next_tensor_id, weak_scalar_tensor

    def f(x, y, name=None):
        a, b = x, y
        # A Python number beside a tensor takes the tensor's dtype, from the cache of
        # weak_scalar_tensor (None for anything else: run_op converts or reports it).
        if type(a) is not ET:
            if type(b) is not ET or (a := weak(a, b._value.dtype)) is None:
                return run_op(op, (x, y), _EMPTY, name)
        elif type(b) is not ET and (b := weak(b, a._value.dtype)) is None:
            return run_op(op, (x, y), _EMPTY, name)
        tapes = st.eager_tapes if busy else _QUIET
        if tapes is None or callbacks:
            return run_op(op, (x, y), _EMPTY, name)
        va = a._value
        vb = b._value
        d = va.dtype
        if d is not vb.dtype or d not in ok:
            return run_op(op, (x, y), _EMPTY, name)  # mixed or unsupported dtypes: its error
        try:
            out = kernel(va, vb)
        except errors.DefunError:
            raise
        except Exception as e:
            raise _kernel_error(op, [va, vb], _EMPTY, e) from e
        r = new(ET)
        r._value = out
        r._id = next_id()
        if tapes and op.grad is not None:
            record(tapes, op_name, a, b, r)
        return r
    return f


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


_FIRST_TWO = (0, 1)


def _convert_eager_inputs(op, inputs):
    """Slow path: inputs that are not all eager tensors (arrays, scalars, variables)."""
    # A tensor and a Python number (`x * 1.01`, `1 - y`): the number's tensor comes from
    # a cache (see weak_scalar_tensor), -1.5 us per op against the general path below.
    if len(inputs) == 2 and op.same_dtype == _FIRST_TWO:
        a, b = inputs
        if type(a) is EagerTensor:
            t = weak_scalar_tensor(b, a._value.dtype)
            if t is not None:
                return [a, t], [a._value, t._value]
        elif type(b) is EagerTensor:
            t = weak_scalar_tensor(a, b._value.dtype)
            if t is not None:
                return [t, b], [t._value, b._value]
    inputs = list(inputs)
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor):
            if not isinstance(x, EagerTensor):
                raise _symbolic_outside_trace(op, x)
        elif hasattr(x, "_as_tensor"):
            inputs[i] = x._as_tensor()
    inputs = convert_operands(op, inputs, _is_tensor, _eager_operand)
    same = op.same_dtype
    if same:
        d0 = inputs[same[0]]._value.dtype
        for i in same:
            if inputs[i]._value.dtype != d0:
                inputs = promote_or_raise(op, inputs)
                break
    return inputs, [x._value for x in inputs]


def _is_tensor(x):
    return isinstance(x, Tensor)


def _eager_operand(x, dtype):
    return EagerTensor(to_array(x, dtype))


def promote_or_raise(op, inputs):
    """`inputs` with the operands of `op.same_dtype` cast to the dtype `dtypes.promoted` gives
    two integer dtypes (int8 + uint8 -> int16, as numpy), or the error naming the dtypes.
    Only reached on a mismatch, so the usual call pays nothing; eager and traced alike."""
    same = op.same_dtype
    target = inputs[same[0]].dtype
    for i in same[1:]:
        d = inputs[i].dtype
        if d is not target:
            target = dtypes.promoted(target, d)
            if target is None:
                _raise_dtype_mismatch(op, [inputs[j] for j in same])
    cast = get_op("cast")
    out = list(inputs)
    for i in same:
        if out[i].dtype is not target:
            out[i] = run_op(cast, (out[i],), {"dtype": target})
    return out


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


def _kernel_error(op, vals, attrs, exc):
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
    attr_txt = ""
    if attrs:
        attr_txt = " with " + ", ".join(f"{k}={v!r}" for k, v in sorted(attrs.items())
                                        if not callable(v))
    return errors.InvalidArgumentError(f"{op.name}({shown}){attr_txt} failed: {exc}")
