"""The eager fast paths: the public functions of elementwise ops, specialized per op.

`runtime.execute.run_op` is the reference: what any op call means, eager or traced. The
functions made here (`op_function`) decide exactly what it decides for the plain eager
calls they take, and hand everything else to it: arrays, variables, a graph being built,
an execution trace or callback, mixed or unsupported dtypes, any error to report
(tests/test_dispatch_equivalence.py checks every op row they serve against `run_op`:
values, dtypes, errors, tape records, gradients, callbacks, traces).

An op qualifies (`_specializable`) with one output, no attrs, one input or two of one dtype, and
a name it owns on tapes (`tape.claim`). What the tricks buy, measured on one float32 (4,)
add against `run_op` doing the same call (medians of interleaved runs, load average ~2 on
2 shared cores; numpy's own np.add 0.27 us):
- the op's fields (kernel, supported dtypes, name) bound once in the closure, the dtype
  check one identity test and one set test on the numpy dtypes, no thread-local read
  while `context.busy_threads` is empty (no thread records or traces): quiet, 0.54 us
  instead of 0.98;
- a Python number beside a tensor takes the tensor's dtype from `weak_scalar_tensor`'s
  cache, tested for rather than met as an AttributeError: 0.68 us instead of 2.08;
- under a tape: 0.96-0.99 us instead of 1.88-1.95. The entry is written by
  `tape.record_unary`/`record_binary` (runtime/tape.py owns the entry layout): writing it in
  place here saved 0.02-0.11 us, too little to keep a second copy of the layout.
"""
from defun.runtime import dtypes, errors
from defun.runtime.context import busy_threads, execution_callbacks, state
from defun.runtime.execute import kernel_error, run_op
from defun.runtime import tape as tape_mod
from defun.runtime.tensor import EagerTensor, next_tensor_id, weak_scalar_tensor

__all__ = ["op_function", "renamed_parameters", "SPECIALIZED"]

# op name -> the specialized public function made for it (what the equivalence test runs)
SPECIALIZED = {}
_EMPTY = {}
_QUIET = ()  # the tapes of a quiet thread (no thread is busy)
_FIRST_TWO = (0, 1)


def op_function(op, doc="", names=None):
    """The public function of registered op `op`: `f(x, name=None)` or `f(x, y, name=None)`;
    `names` renames its tensor parameters (TF's names: `relu(features, name=None)`).

    An op that qualifies (see the module's docstring) gets its specialized function; any
    other calls `run_op`.
    """
    f = None
    if _specializable(op):
        if op.num_inputs == 1:
            f = _unary_function(op)
        elif op.same_dtype == _FIRST_TWO:
            f = _binary_function(op)
    if f is not None:
        SPECIALIZED[op.name] = f
    elif op.num_inputs == 1:
        f = lambda x, name=None: run_op(op, (x,), _EMPTY, name)     # noqa: E731
    else:
        f = lambda x, y, name=None: run_op(op, (x, y), _EMPTY, name)  # noqa: E731
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


def _specializable(op):
    """Whether `op` gets a specialized closure (the conditions of this module's docstring)."""
    return op.single and not op.attrs and op.num_inputs in (1, 2) and tape_mod.claim(op)


def _kind_dtypes(kinds):
    """The supported numpy dtypes of `kinds` (all if None): one set test per call."""
    return frozenset(d for d in dtypes._BY_NUMPY if kinds is None or d.kind in kinds)


def _unary_function(op):
    kernel, ok, op_name = op.kernel, _kind_dtypes(op.kinds), op.name
    st, busy, callbacks, record = state, busy_threads, execution_callbacks, tape_mod.record_unary
    ET, new, next_id = EagerTensor, object.__new__, next_tensor_id

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
                        raise kernel_error(op, [v], _EMPTY, e) from e
                    r = new(ET)
                    r._value = out
                    r._id = next_id()
                    if tapes and op.grad is not None:
                        record(tapes, op_name, x._id, v, r._id, out)
                    return r
        return run_op(op, (x,), _EMPTY, name)
    return f


def _binary_function(op):
    kernel, ok, op_name = op.kernel, _kind_dtypes(op.kinds), op.name
    st, busy, callbacks, record = state, busy_threads, execution_callbacks, tape_mod.record_binary
    ET, new, next_id, weak = EagerTensor, object.__new__, next_tensor_id, weak_scalar_tensor

    def f(x, y, name=None):
        tx, ty = x, y
        # A Python number beside a tensor takes the tensor's dtype, from the cache of
        # weak_scalar_tensor (None for anything else: run_op converts or reports it).
        if type(tx) is not ET:
            if type(ty) is not ET or (tx := weak(tx, ty._value.dtype)) is None:
                return run_op(op, (x, y), _EMPTY, name)
        elif type(ty) is not ET and (ty := weak(ty, tx._value.dtype)) is None:
            return run_op(op, (x, y), _EMPTY, name)
        tapes = st.eager_tapes if busy else _QUIET
        if tapes is None or callbacks:
            return run_op(op, (x, y), _EMPTY, name)
        va = tx._value
        vb = ty._value
        d = va.dtype
        if d is not vb.dtype or d not in ok:
            return run_op(op, (x, y), _EMPTY, name)  # mixed or unsupported dtypes: its error
        try:
            out = kernel(va, vb)
        except errors.DefunError:
            raise
        except Exception as e:
            raise kernel_error(op, [va, vb], _EMPTY, e) from e
        r = new(ET)
        r._value = out
        r._id = next_id()
        if tapes and op.grad is not None:
            record(tapes, op_name, tx._id, ty._id, va, vb, r._id, out)
        return r
    return f
