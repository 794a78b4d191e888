"""Resource variables: a handle tensor of dtype `resource`, read and assigned by stateful ops;
`all_or_nothing`, the eager updates of several variables as one step (optimizer steps,
checkpoint saves and restores)."""
import weakref
from operator import attrgetter

import numpy as np

from defun.runtime import dtypes, errors, sites
from defun.runtime.context import state
from defun.runtime.execute import run_op
from defun.runtime.indexed_slices import IndexedSlices
from defun.runtime.ops import resource_ops
from defun.runtime.ops._args import bool_arg
from defun.runtime.tensor import ByIdentity, EagerTensor, HandleData, ResourceHandle, Tensor, constant, to_array

__all__ = ["Variable", "SymbolicVariable", "watch_variable", "watch_reads", "watch_read_handles",
           "handle_in_context", "all_or_nothing", "values_as_one_step"]

_counter = [0]
# handle id -> Variable, so a traced function can tell tapes which variables a call reads.
_BY_HANDLE = weakref.WeakValueDictionary()


class Variable(ByIdentity):
    """A mutable tensor: `v = df.Variable([1., 2.]); v.assign_add([1., 1.])`.

    Reads and assignments are stateful ops on `v.handle`, so they run in program order
    inside traced functions, and gradients reach `v` through its reads.
    """

    def __init__(self, initial_value, name=None, trainable=True, dtype=None):
        if state.graph is not None:
            raise errors.TracingError(
                f"df.Variable created inside a traced function (at "
                f"{sites.format_site(sites.user_site())}); create "
                f"variables outside the function and use them inside")
        if callable(initial_value):
            initial_value = initial_value()
        if isinstance(initial_value, Variable):
            initial_value = initial_value.numpy()
        want = dtypes.as_dtype(dtype).np if dtype is not None else None
        if isinstance(initial_value, Tensor):
            arr = np.array(initial_value, copy=True)
        elif want is not None and not isinstance(initial_value, (np.ndarray, np.generic)):
            # Python values go straight to the requested dtype (`Variable(0.1, dtype=float64)`
            # must not pass through float32 first), with constant()'s checks: no overflow, no
            # silent truncation of 1.5 into an integer.
            arr = np.array(constant(initial_value, dtype)._value, copy=True)
        else:
            try:
                arr = to_array(initial_value)  # a fresh array (to_array copies numpy input)
            except (TypeError, errors.InvalidArgumentError) as e:
                raise type(e)(f"Variable: initial_value: {e}") from None
        if want is not None and arr.dtype != want:
            arr = arr.astype(want)
        _counter[0] += 1
        self._name = name or f"Variable_{_counter[0]}"
        self._trainable = bool_arg("Variable", trainable, "trainable")
        store = resource_ops.VariableStore(arr, self._name)
        self.handle = ResourceHandle(store, HandleData(arr.shape, dtypes.from_numpy(arr.dtype)))
        self._store = store
        _BY_HANDLE[self.handle._id] = self
        self._attrs = {"dtype": self.handle.handle_data.shape_and_type[0][1], "shape": arr.shape}

    # -------------------------------------------------------------- properties
    # (attrgetter reads: a C getter, faster than a Python one)
    name = property(attrgetter("_name"), doc="Its name (given, or Variable_<n>).")
    trainable = property(attrgetter("_trainable"), doc="Whether a tape watching what is read watches it.")
    shape = property(attrgetter("_store.shape"), doc="The shape of its values (fixed when made).")
    device = property(attrgetter("handle.device"), doc="Where its values live (its handle's).")

    @property
    def dtype(self):
        """The DType of its values (fixed when it is made)."""
        return self._attrs["dtype"]

    @property
    def ndim(self):
        """The rank of its values."""
        return len(self._store.shape)

    # -------------------------------------------------------------- reads and writes
    def read_value(self):
        """The current value as a tensor (a read op; recorded on watching tapes)."""
        if self._trainable and state.tapes:
            watch_reads((self,))
        return run_op(resource_ops._READ, (self.handle,), self._attrs)

    value = read_value
    _as_tensor = read_value

    def _convert_value(self, value):
        if isinstance(value, Variable):
            value = value.read_value()
        if isinstance(value, Tensor):
            if value.dtype is not self.dtype:
                raise errors.InvalidArgumentError(
                    f"cannot assign a {value.dtype.name} tensor to variable {self._name!r} of dtype "
                    f"{self.dtype.name}; use df.cast")
            return value
        arr = to_array(value, self._store.dtype)  # copies numpy input: the caller may change it
        return EagerTensor(arr) if state.graph is None else _graph_const(arr)

    def _assign(self, op, value):
        if isinstance(value, IndexedSlices):   # a sparse update: only its rows change
            return self._scatter(_SCATTER_OF[op], value)
        run_op(op, (self.handle, self._convert_value(value)), self._attrs)
        return self

    def assign(self, value, name=None):
        """Set the value (same shape and dtype); returns the variable.

        An `IndexedSlices` sets only its rows (as `scatter_update`).
        """
        return self._assign(resource_ops._ASSIGN, value)

    def assign_add(self, delta, name=None):
        """Add `delta` in place; returns the variable. An `IndexedSlices` adds to its rows."""
        return self._assign(resource_ops._ASSIGN_ADD, delta)

    def assign_sub(self, delta, name=None):
        """Subtract `delta` in place; returns the variable. An `IndexedSlices` subtracts from its rows."""
        return self._assign(resource_ops._ASSIGN_SUB, delta)

    # -------------------------------------------------------------- sparse updates
    def scatter_add(self, sparse_delta, name=None):
        """Add `sparse_delta.values` to rows `sparse_delta.indices` (repeated rows add up).

        >>> v = df.Variable([[0., 0.], [0., 0.], [0., 0.]])
        >>> v.scatter_add(df.IndexedSlices(df.constant([[1., 2.]]), df.constant([2]), (3, 2)))
        """
        return self._scatter(resource_ops._SCATTER_ADD, sparse_delta)

    def scatter_sub(self, sparse_delta, name=None):
        """Subtract `sparse_delta.values` from rows `sparse_delta.indices` (repeated rows add up)."""
        return self._scatter(resource_ops._SCATTER_SUB, sparse_delta)

    def scatter_update(self, sparse_delta, name=None):
        """Set rows `sparse_delta.indices` to `sparse_delta.values`; other rows keep their value."""
        return self._scatter(resource_ops._SCATTER_UPDATE, sparse_delta)

    def _scatter(self, op, slices):
        if not isinstance(slices, IndexedSlices):
            raise TypeError(f"{op.name}: variable {self._name!r} takes a df.IndexedSlices, got "
                            f"{type(slices).__name__}; use assign/assign_add for a dense value")
        shape = tuple(self.shape)
        dense = tuple(slices.dense_shape)
        if len(dense) != len(shape) or any(d is not None and d != s for d, s in zip(dense, shape)):
            raise errors.InvalidArgumentError(
                f"{op.name}: variable {self._name!r} has shape {list(shape)}, the IndexedSlices is "
                f"for dense shape {list(dense)}")
        indices = slices.indices
        if isinstance(indices, Variable):
            indices = indices.read_value()
        if not isinstance(indices, Tensor):
            arr = to_array(indices)
            indices = EagerTensor(arr) if state.graph is None else _graph_const(arr)
        run_op(op, (self.handle, indices, self._convert_value(slices.values)), self._attrs)
        return self

    def numpy(self):
        """A copy of the current value."""
        return np.array(self._store.value, copy=True)

    def __array__(self, dtype=None, copy=None):
        v = np.array(self._store.value, copy=True)
        return v.astype(dtype) if dtype is not None else v

    def __float__(self):
        return float(self.read_value())

    def __int__(self):
        return int(self.read_value())

    def __bool__(self):
        return bool(self.read_value())

    def __len__(self):
        return len(self.read_value())

    def __iter__(self):
        return iter(self.read_value())

    def __repr__(self):
        body = np.array2string(np.asarray(self._store.value), separator=", ", threshold=20)
        return f"<df.Variable {self._name!r} shape={self.shape} dtype={self.dtype.name} numpy={body}>"


_SCATTER_OF = {resource_ops._ASSIGN: resource_ops._SCATTER_UPDATE,
               resource_ops._ASSIGN_ADD: resource_ops._SCATTER_ADD,
               resource_ops._ASSIGN_SUB: resource_ops._SCATTER_SUB}


def _graph_const(arr):
    return state.graph.constant(arr, None)


class SymbolicVariable(Variable):
    """A variable argument while tracing: reads and assigns go through a resource placeholder.

    Made by defun for each Variable passed as an argument, so one trace serves every
    variable of the same shape and dtype; each call feeds the actual variable's handle.
    """

    def __init__(self, handle, like):  # noqa: super().__init__ would create a real variable
        self._name = like.name
        self._trainable = like.trainable
        self.handle = handle
        dtype = like.dtype
        # metadata only (shape/dtype for conversions); a zero-size view, no copy of the value
        self._store = resource_ops.VariableStore(np.broadcast_to(np.zeros((), dtype.np), like.shape),
                                                 like.name)
        self._attrs = {"dtype": dtype, "shape": tuple(like.shape)}
        _BY_HANDLE[handle._id] = self

    def numpy(self):
        raise errors.TracingError(
            f"variable argument {self._name!r} has no value while tracing; use its tensor ops "
            f"(read_value(), arithmetic) inside the function")

    def __array__(self, dtype=None, copy=None):
        return self.numpy()

    def __repr__(self):
        return f"<df.Variable {self._name!r} shape={self.shape} dtype={self.dtype.name} (traced argument)>"


def watch_variable(tape, var):
    """Make `tape` watch `var` (its handle as seen in the current graph, if tracing)."""
    h = handle_in_context(var)
    if h._id not in tape.variables:
        tape.variables[h._id] = var
    tape.watch(h)


def watch_reads(variables):
    """The variables read: tapes of this thread that watch accessed variables watch the
    trainable ones (the one place reads are announced: reads, custom gradients, calls,
    control flow)."""
    tapes = state.tapes
    if tapes:
        for var in variables:
            if var.trainable:
                for tape in tapes:
                    if tape.watch_accessed_variables:
                        watch_variable(tape, var)


def watch_read_handles(handles):
    """`watch_reads` for the variables behind resource tensors `handles` (others skipped)."""
    if state.tapes:
        watch_reads([v for v in (_BY_HANDLE.get(h._id) for h in handles
                                 if h.dtype is dtypes.resource) if v is not None])


def handle_in_context(var):
    """The handle tensor ops see: the eager handle, or its capture in the traced graph."""
    g = state.graph
    return var.handle if g is None else g.capture(var.handle)


class all_or_nothing:
    """`with all_or_nothing(variables):` one eager step over several variables. It holds their
    locks (in `serial` order, as a compiled call that assigns does: graph/executor.py) for
    the whole block, so steps of other threads and compiled calls never interleave with it,
    and on any BaseException (a KeyboardInterrupt included) it puts back every variable's
    value from before the block. Assignments store new arrays, so keeping the old ones costs
    nothing. `values()` is the variables' values as of now, one consistent step.
    """

    def __init__(self, variables):
        self._variables = list(variables)
        stores = {id(v._store): v._store for v in self._variables}
        self._stores = sorted(stores.values(), key=lambda s: s.serial)
        self._held = []
        self._old = None

    def __enter__(self):
        held = self._held
        try:
            for s in self._stores:
                held.append(s.lock)     # listed first: an interrupt before acquiring is harmless
                s.lock.acquire()
            self._old = [(s, s.value) for s in self._stores]
        except BaseException:
            _release(held)
            raise
        return self

    def values(self):
        """The variables' current arrays, in the order given (never written in place)."""
        return [v._store.value for v in self._variables]

    def __exit__(self, kind, exc, tb):
        pending = None
        while True:     # each step can be repeated: an interrupt landing here is re-raised after
            try:
                if kind is not None and self._old is not None:
                    for s, old in self._old:
                        s.value = old
                _release(self._held)
                break
            except BaseException as e:  # noqa: B036 - re-raised below
                pending = e
        if pending is not None:
            raise pending
        return False


def values_as_one_step(values):
    """{id(store): array} of the variables behind the ResourceHandles among `values` (others
    are skipped), read as one step: under their locks, taken in `serial` order as a compiled
    call that assigns takes them, so an export never holds half of another thread's call
    or optimizer step. Assignments store new arrays: what was read stays as read."""
    stores = {id(v._value): v._value for v in values
              if isinstance(v, ResourceHandle) and isinstance(v._value, resource_ops.VariableStore)}
    held = []
    try:
        for s in sorted(stores.values(), key=attrgetter("serial")):
            held.append(s.lock)     # listed first: an interrupt before acquiring is harmless
            s.lock.acquire()
        return {k: s.value for k, s in stores.items()}
    finally:
        _release(held)


def _release(held):
    while held:
        try:
            held[-1].release()
        except RuntimeError:     # not held: an interrupt came between listing and acquiring
            pass
        held.pop()


from defun.runtime.ops import _install_operators  # noqa: E402
_install_operators(Variable)
