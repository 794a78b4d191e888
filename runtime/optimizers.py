"""Optimizers (`df.optimizers`): SGD with momentum/Nesterov and Adam, with Keras' update rules.

`opt.apply_gradients([(g, v), ...])` updates each variable from its gradient with ops, so it
runs eagerly or adds stateful nodes to a traced step function alike (eager and traced
updates are the same kernels on the same values, so they agree bit for bit). The state an
optimizer keeps (its iteration counter, and per variable its slots: SGD's momentum, Adam's
m and v) is made of variables created on first use under `init_scope`: eagerly, even when
the first use is inside a trace, which then captures them by handle like any outer
variable (so the next call of the step function does not retrace).

Update rules (g: gradient, lr: learning rate, t: iterations + 1, as in Keras):
  SGD, momentum 0:   w <- w - lr g
  SGD, momentum mu:  m <- mu m - lr g;  w <- w + m            (Nesterov: w <- w + mu m - lr g)
  Adam:              alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t)
                     m <- m + (g - m)(1 - beta_1);  v <- v + (g^2 - v)(1 - beta_2)
                     w <- w - alpha m / (sqrt(v) + epsilon)
Threads and interrupts: an eager `apply_gradients` is one step over the variables, their
slots and the counter (`all_or_nothing`, runtime/variables.py): steps from several threads
are serialized (none lost), and one that fails or is interrupted leaves every one of them
as it was. Slots and the counter are created once, under the optimizer's lock, even when two
threads take their first step together. A traced step is a compiled call that assigns,
which holds the same locks and undoes itself the same way (graph/executor.py).

A sparse gradient (IndexedSlices, e.g. from `gather`) updates only its rows of the variable
and of its slots, with the gradients of a repeated row summed first; the other rows, and
their slots, are left alone (Keras decays every row's slots; this is TensorFlow's "lazy"
sparse behaviour).
"""
import threading

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.context import init_scope, state
from defun.runtime.indexed_slices import IndexedSlices
from defun.runtime.ops._args import bool_arg, float_arg
from defun.runtime.ops.array_ops import gather, reshape, size
from defun.runtime.ops.math_ops import cast, pow, sqrt, square
from defun.runtime.ops.sparse_ops import sum_duplicate_rows
from defun.runtime.tape import stop_recording
from defun.runtime.tensor import Tensor, convert_to_tensor
from defun.runtime.variables import SymbolicVariable, Variable, all_or_nothing

__all__ = ["Optimizer", "SGD", "Adam"]


class Optimizer:
    """Base: validation, slot variables, the iteration counter; subclasses give the rule.

    A subclass lists its slot names in `_slot_names` and implements `_update(rule inputs)`.
    """

    _slot_names = ()

    def __init__(self, learning_rate, name):
        self.learning_rate = _check_learning_rate(type(self).__name__, learning_rate)
        self.name = name
        self._iterations = None
        self._slots = {}        # id(variable) -> {slot name: Variable}, in creation order
        self._owners = {}       # id(variable) -> variable (keeps ids meaningful)
        self._lock = threading.Lock()   # creating the counter and slots

    # ------------------------------------------------------------------ state
    @property
    def iterations(self):
        """The number of apply_gradients calls so far: an int64 variable."""
        self._build_iterations()
        return self._iterations

    def variables(self):
        """The optimizer's own variables (iteration counter, then slots), e.g. to checkpoint."""
        slots = [s for per_var in list(self._slots.values()) for s in per_var.values()]
        return ([self._iterations] if self._iterations is not None else []) + slots

    def get_slot(self, var, slot_name):
        """The slot variable `slot_name` (e.g. "momentum", "m", "v") kept for `var`."""
        slots = self._slots.get(id(var))
        if slots is None or slot_name not in slots:
            have = (f"it has {', '.join(sorted(slots))}" if slots else
                    "none made yet: apply gradients or build first")
            raise errors.NotFoundError(
                f"{self.name}: no slot {slot_name!r} for variable {getattr(var, 'name', var)!r} ({have})")
        return slots[slot_name]

    def build(self, var_list):
        """Make the counter and the slots of `var_list` now (e.g. before restoring a checkpoint)."""
        var_list = list(var_list)
        for v in var_list:
            _check_variable(self.name, v)
        self._build_iterations()
        for v in var_list:
            self._build_slots(v)

    def _build_iterations(self):
        if self._iterations is None:
            with self._lock:
                if self._iterations is None:
                    with init_scope():
                        self._iterations = Variable(np.zeros((), np.int64),
                                                    name=f"{self.name}/iterations", trainable=False)

    def _build_slots(self, var):
        if id(var) in self._slots or not self._slot_names:
            return
        with self._lock:
            if id(var) in self._slots:      # another thread made them meanwhile
                return
            with init_scope():   # eagerly, also when first needed inside a trace
                slots = {s: Variable(np.zeros(var.shape, var.dtype.np),
                                     name=f"{self.name}/{var.name}/{s}", trainable=False)
                         for s in self._slot_names}
            self._owners[id(var)] = var
            self._slots[id(var)] = slots    # last, in one step: the slots exist or do not

    # ------------------------------------------------------------------ applying
    def apply_gradients(self, grads_and_vars, name=None):
        """Update each variable from its gradient; `None` gradients are skipped.

        >>> opt = df.optimizers.SGD(0.1)
        >>> opt.apply_gradients([(df.constant([1., 1.]), w)])

        Returns the iteration counter (incremented once per call).
        """
        pairs = []
        seen = {}
        for k, pair in enumerate(grads_and_vars):
            try:
                g, v = pair
            except (TypeError, ValueError):
                raise TypeError(f"{self.name}.apply_gradients: entry {k} must be a (gradient, variable) "
                                f"pair, got {type(pair).__name__}") from None
            _check_variable(self.name, v)
            if id(v) in seen:
                raise errors.InvalidArgumentError(
                    f"{self.name}.apply_gradients: variable {v.name!r} appears twice (entries "
                    f"{seen[id(v)]} and {k}); sum its gradients and pass it once")
            seen[id(v)] = k
            pairs.append((g, v))
        if not pairs:
            raise errors.InvalidArgumentError(f"{self.name}.apply_gradients: no (gradient, variable) pairs given")
        live = [(_check_gradient(self.name, g, v), v) for g, v in pairs if g is not None]
        if not live:
            names = ", ".join(repr(v.name) for _, v in pairs)
            raise errors.InvalidArgumentError(
                f"{self.name}.apply_gradients: no gradients provided for any variable ({names}); "
                f"check that the loss depends on them (tape.gradient gives None for unconnected "
                f"variables)")
        self._build_iterations()
        for _, v in live:
            self._build_slots(v)
        if state.graph is not None:      # traced: the compiled call is the transaction
            self._apply(live)
            return self._iterations
        state_vars = [self._iterations] + [x for _, v in live
                                           for x in (v, *self._slots.get(id(v), {}).values())]
        with all_or_nothing(state_vars):
            self._apply(live)
        return self._iterations

    def _apply(self, live):
        with stop_recording():   # updates are not differentiated
            step = self._iterations.read_value()
            for g, v in live:
                slots = self._slots.get(id(v), {})
                lr = self._learning_rate_for(v.dtype)
                if isinstance(g, IndexedSlices):
                    self._apply_sparse(g, v, slots, lr, step)
                else:
                    self._apply_dense(g, v, slots, lr, step)
            self._iterations.assign_add(np.ones((), np.int64))

    def _learning_rate_for(self, dtype):
        lr = self.learning_rate
        if isinstance(lr, (Variable, Tensor)):   # a variable can change between calls of a trace
            value = lr.read_value() if isinstance(lr, Variable) else lr
            return value if value.dtype is dtype else cast(value, dtype)
        return lr

    def _apply_sparse(self, g, v, slots, lr, step):
        """Gather the touched rows, apply the dense rule to them, scatter them back."""
        row_shape = tuple(v.shape[1:])
        ishape = tuple(g.indices.shape)
        if len(ishape) == 1 and tuple(g.values.shape)[1:] == row_shape:     # rows already (a gather's)
            indices, values = g.indices, g.values
        else:   # the indices' count, not -1: no count fits rows of no elements (v [5, 0])
            n = int(np.prod(ishape, dtype=np.int64)) if None not in ishape else size(g.indices)
            indices = reshape(g.indices, (n,))
            values = reshape(g.values, (n,) + row_shape)
        total = sum_duplicate_rows(values, indices)   # each occurrence sees its row's sum
        rows = {"var": gather(v, indices)}
        for s, slot in slots.items():
            rows[s] = gather(slot, indices)
        new = self._rule(total, rows, lr, step, v.dtype)
        for key, value in new.items():
            target = v if key == "var" else slots[key]
            target.scatter_update(IndexedSlices(value, indices, tuple(v.shape)))

    def _apply_dense(self, g, v, slots, lr, step):
        values = {"var": v.read_value()}
        for s, slot in slots.items():
            values[s] = slot.read_value()
        new = self._rule(g, values, lr, step, v.dtype)
        for key, value in new.items():
            (v if key == "var" else slots[key]).assign(value)

    def _rule(self, g, values, lr, step, dtype):
        """New values of "var" and of the slots, from the gradient and the current values."""
        raise NotImplementedError

    def __repr__(self):
        return f"<df.optimizers.{type(self).__name__} {self.name!r} lr={self.learning_rate!r}>"


class SGD(Optimizer):
    """Gradient descent, optionally with momentum (and Nesterov momentum), as Keras' SGD.

    >>> opt = df.optimizers.SGD(0.1, momentum=0.9)
    """

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD"):
        momentum = float_arg("SGD", momentum, "momentum")
        nesterov = bool_arg("SGD", nesterov, "nesterov")
        if not 0.0 <= momentum <= 1.0:
            raise errors.InvalidArgumentError(f"SGD: momentum must be in [0, 1], got {momentum}")
        super().__init__(learning_rate, name)
        self.momentum = momentum
        self.nesterov = bool(nesterov)
        self._slot_names = ("momentum",) if momentum != 0.0 else ()

    def _rule(self, g, values, lr, step, dtype):
        w = values["var"]
        if not self._slot_names:
            return {"var": w - g * lr}
        m = values["momentum"] * self.momentum - g * lr
        if self.nesterov:
            return {"momentum": m, "var": w + (m * self.momentum - g * lr)}
        return {"momentum": m, "var": w + m}


class Adam(Optimizer):
    """Adam with Keras' bias-corrected step size (epsilon added to sqrt(v), not sqrt(v_hat)).

    >>> opt = df.optimizers.Adam(1e-3)
    """

    _slot_names = ("m", "v")

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7, name="Adam"):
        super().__init__(learning_rate, name)
        beta_1, beta_2 = float_arg("Adam", beta_1, "beta_1"), float_arg("Adam", beta_2, "beta_2")
        for what, b in (("beta_1", beta_1), ("beta_2", beta_2)):
            if not 0.0 <= b < 1.0:
                raise errors.InvalidArgumentError(f"Adam: {what} must be in [0, 1), got {b}")
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, float_arg("Adam", epsilon, "epsilon")

    def _rule(self, g, values, lr, step, dtype):
        t = cast(step + 1, dtype)
        alpha = lr * sqrt(1.0 - pow(self.beta_2, t)) / (1.0 - pow(self.beta_1, t))
        m = values["m"] + (g - values["m"]) * (1.0 - self.beta_1)
        v = values["v"] + (square(g) - values["v"]) * (1.0 - self.beta_2)
        return {"m": m, "v": v, "var": values["var"] - (m * alpha) / (sqrt(v) + self.epsilon)}


# ---------------------------------------------------------------------- validation
def _check_learning_rate(opt_name, lr):
    """A number, or a real floating scalar Variable or tensor (read at each step): anything
    else is refused here, not when the first step applies it."""
    if isinstance(lr, (Variable, Tensor)):
        if lr.dtype.is_floating and tuple(lr.shape) == ():
            return lr
        raise TypeError(f"{opt_name}: learning_rate must be a number or a float scalar variable or "
                        f"tensor, got a {lr.dtype.name} {type(lr).__name__} of shape {tuple(lr.shape)}")
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        return lr
    return float_arg(opt_name, lr, "learning_rate")     # a numpy number; else a TypeError


def _check_variable(opt_name, v):
    if isinstance(v, SymbolicVariable):
        raise errors.TracingError(
            f"{opt_name}: variable {v.name!r} is an argument of the function being traced; an "
            f"optimizer keeps state per variable, so use the variable from the enclosing scope "
            f"(it is captured by handle) instead of passing it as an argument")
    if not isinstance(v, Variable):
        raise TypeError(f"{opt_name}: expected a df.Variable to update, got {type(v).__name__}")
    if not v.dtype.is_floating:
        raise errors.InvalidArgumentError(
            f"{opt_name}: variable {v.name!r} is {v.dtype.name}; optimizers update floating-point "
            f"variables")


def _compatible(a, b):
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


def _check_gradient(opt_name, g, v):
    """`g` as a tensor or IndexedSlices of tensors that fits `v`; InvalidArgumentError naming `v`."""
    want = f"{v.dtype.name}{list(v.shape)}"
    if isinstance(g, IndexedSlices):
        values, indices = g.values, g.indices
        values = values if isinstance(values, Tensor) else convert_to_tensor(values, v.dtype)
        indices = indices if isinstance(indices, Tensor) else convert_to_tensor(indices)
        if values.dtype is not v.dtype or indices.dtype not in (dtypes.int32, dtypes.int64):
            raise errors.InvalidArgumentError(
                f"{opt_name}: the sparse gradient for variable {v.name!r} has {values.dtype.name} values "
                f"and {indices.dtype.name} indices; the variable is {want} (values must match its "
                f"dtype, indices be int32 or int64)")
        rows = tuple(indices.shape) + tuple(v.shape[1:])
        if not v.shape or not _compatible(tuple(g.dense_shape), tuple(v.shape)) or \
                not _compatible(tuple(values.shape), rows):
            raise errors.InvalidArgumentError(
                f"{opt_name}: the sparse gradient for variable {v.name!r} is for dense shape "
                f"{list(g.dense_shape)} with values {list(values.shape)} at indices "
                f"{list(indices.shape)}; the variable is {want}")
        return IndexedSlices(values, indices, g.dense_shape)
    if isinstance(g, Variable):
        g = g.read_value()
    if not isinstance(g, Tensor):
        try:
            g = convert_to_tensor(g, v.dtype)
        except (errors.InvalidArgumentError, TypeError) as e:
            raise errors.InvalidArgumentError(
                f"{opt_name}: the gradient for variable {v.name!r} does not convert to {want}: {e}") from None
    if g.dtype is not v.dtype or not _compatible(tuple(g.shape), tuple(v.shape)):
        raise errors.InvalidArgumentError(
            f"{opt_name}: the gradient for variable {v.name!r} is {g.dtype.name}{list(g.shape)}, "
            f"the variable is {want}; a gradient has its variable's shape and dtype")
    return g
