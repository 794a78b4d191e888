"""Forward mode: `ForwardAccumulator` computes Jacobian-vector products as ops run.

No op has a JVP rule of its own: each is derived from the op's registered gradient. The
gradient (VJP) `u -> J^T u` is linear in the cotangent `u`, so `<vjp(u), t> = <u, J t>`,
and differentiating that with respect to `u` by reverse mode gives `J t`. For every op
recorded while an accumulator is active (the accumulator is a tape on the thread's tape
stack, so it sees exactly what a GradientTape would, defun calls included as one op), the
tangents of the op's inputs are pushed through that rule at once, as TensorFlow's
accumulator does. The computation is made of registered ops, so it runs eagerly or adds
graph nodes alike, and the tapes and accumulators entered before this one record it
(reverse-over-forward, forward-over-forward); the accumulator records what tapes entered
inside it compute (forward-over-reverse: Hessian-vector products).

Nothing here touches the eager dispatch path: with no accumulator active, ops pay nothing.
"""
from defun.runtime import errors, tape as tape_mod
from defun.runtime.backprop import GradientTape, Recording
from defun.runtime.context import state
from defun.runtime.indexed_slices import IndexedSlices
from defun.runtime.nest import flatten, pack_as
from defun.runtime.tensor import Tensor, convert_to_tensor
from defun.runtime.ops.array_ops import zeros, zeros_like
from defun.runtime.variables import Variable, handle_in_context

__all__ = ["ForwardAccumulator"]

_UNCONNECTED = ("none", "zero")


class _PushTangents(list):
    """The accumulator's tape entries: recording an op computes its outputs' tangents.

    `record_op` / `Tape.add` append each recorded entry here; nothing is kept but the
    tangents (the accumulator never walks its tape backwards).
    """

    __slots__ = ("_acc",)

    def __init__(self, acc):
        super().__init__()
        self._acc = acc

    def append(self, entry):
        self._acc._push(entry)


class ForwardAccumulator(Recording):
    """Forward-mode derivatives of everything computed from `primals` in direction `tangents`.

    >>> x = df.constant([1., 2.])
    >>> with df.ForwardAccumulator(x, df.constant([1., 0.])) as acc:
    ...     y = x * x
    >>> acc.jvp(y)          # d y / d x . [1, 0] = [2., 0.]

    `primals` (tensors or variables, any nesting) and `tangents` (the same structure, each
    of its primal's shape and dtype) are watched at once; ops run inside the `with` block
    propagate them. Nested with a GradientTape, inside it gives reverse-over-forward and
    around it forward-over-reverse (Hessian-vector products: `acc.jvp(tape.gradient(y, x))`).
    """

    def __init__(self, primals, tangents):
        self._tape = tape_mod.Tape(persistent=True, watch_accessed_variables=False)
        self._tape.entries = _PushTangents(self)
        self._tangents = {}     # tensor id -> its tangent; absent means zero (unconnected)
        self._recording = False
        flat_p, flat_t = flatten(primals), flatten(tangents)
        if len(flat_p) != len(flat_t):
            raise ValueError(f"ForwardAccumulator: {len(flat_p)} primals but {len(flat_t)} tangents; "
                             f"give one tangent per primal, in the same structure")
        for k, (p, t) in enumerate(zip(flat_p, flat_t)):
            self._watch(k, p, t)

    def _watch(self, k, primal, tangent):
        if isinstance(primal, Variable):
            watched, shape, dtype, what = handle_in_context(primal), primal.shape, primal.dtype, \
                f"variable {primal.name!r}"
        elif isinstance(primal, Tensor):
            watched, shape, dtype, what = primal, primal.shape, primal.dtype, f"primal {k}"
        else:
            raise TypeError(f"ForwardAccumulator: primal {k} must be a tensor or a variable, got "
                            f"{type(primal).__name__}")
        if not dtype.is_inexact:
            raise errors.InvalidArgumentError(
                f"ForwardAccumulator: {what} is {dtype.name}; forward-mode derivatives are "
                f"defined for floating-point and complex primals (df.cast it first)")
        if watched._id in self._tangents:
            raise ValueError(f"ForwardAccumulator: {what} is given twice; pass it once with the sum "
                             f"of its tangents")
        if isinstance(tangent, IndexedSlices):
            tangent = tangent._as_tensor()
        t = convert_to_tensor(tangent, None if isinstance(tangent, Tensor) else dtype)
        if t.dtype is not dtype:
            raise errors.InvalidArgumentError(
                f"ForwardAccumulator: the tangent of {what} is {t.dtype.name}, the primal is "
                f"{dtype.name}; use df.cast")
        ts, ps = tuple(t.shape), tuple(shape)
        if len(ts) != len(ps) or any(a is not None and b is not None and a != b for a, b in zip(ts, ps)):
            raise errors.InvalidArgumentError(
                f"ForwardAccumulator: the tangent of {what} has shape {list(ts)}, the primal "
                f"{list(ps)}; a tangent has its primal's shape")
        self._tape.watch(watched)
        self._tangents[watched._id] = t

    # ------------------------------------------------------------------ results
    def jvp(self, primals, unconnected_gradients="none"):
        """The tangent of each tensor in `primals` (any nesting): its Jacobian-vector product.

        A tensor that does not depend on the watched primals gets None, or zeros with
        `unconnected_gradients="zero"`. Looks results up; computes nothing new.
        """
        mode = getattr(unconnected_gradients, "value", unconnected_gradients)
        if mode not in _UNCONNECTED:
            raise ValueError(f"unconnected_gradients must be 'none' or 'zero', got {unconnected_gradients!r}")
        out = []
        for p in flatten(primals):
            if isinstance(p, Variable):
                t = self._tangents.get(handle_in_context(p)._id)
                if t is None and mode == "zero":
                    t = zeros(p.shape, p.dtype)
            elif isinstance(p, Tensor):
                t = self._tangents.get(p._id)
                if t is None and mode == "zero":
                    t = zeros_like(p)
            else:
                raise TypeError(f"ForwardAccumulator.jvp expects tensors or variables, got {type(p).__name__}")
            out.append(t)
        return pack_as(primals, out) if isinstance(primals, (list, tuple, dict)) else out[0]

    # ------------------------------------------------------------------ propagation
    def _push(self, entry):
        """Compute the tangents of a just-recorded entry's floating-point outputs."""
        tangents = self._tangents
        in_tangents = [tangents.get(i) for i in tape_mod.input_ids(entry)]
        if all(t is None for t in in_tangents):
            return
        # an eager op's compact entry: its tensors and view rebuilt (runtime.tape)
        entry = tape_mod.expand_entry(entry)
        _, _, outputs, _, _, view = entry
        wanted = [k for k, o in enumerate(outputs) if o.dtype.is_inexact]
        if not wanted:
            return
        # Only what was entered before this accumulator records the tangent computation (as
        # in TensorFlow); the accumulator itself and tapes entered inside it do not.
        saved = state.tapes
        state.tapes = _tapes_below(saved, self._tape)
        try:
            result = _entry_jvp(entry, in_tangents, wanted)
        finally:
            state.tapes = saved
        for k, t in zip(wanted, result):
            if t is not None:
                tangents[outputs[k]._id] = t
        if view is not None and not isinstance(view, tuple) and len(view.outputs) > len(outputs):
            # the gradient raised a function node to return side outputs (graph.functions.
            # add_side_outputs) while this accumulator stood aside: they get tangents too
            more = tuple(view.outputs[len(outputs):])
            self._tape.add(tape_mod.more_outputs_entry(view, len(outputs), more))


def _tapes_below(tapes, tape):
    for i in range(len(tapes) - 1, -1, -1):
        if tapes[i] is tape:
            return tapes[:i]
    return [t for t in tapes if t is not tape]


def _entry_jvp(entry, in_tangents, wanted):
    """J t for one recorded op: d/du <vjp(u), t>, from the op's own gradient function.

    `u` are zero cotangents, one per floating-point output; the result does not depend on
    their value (the VJP is linear in them). Returns one tangent (or None) per `wanted`.
    """
    _, ids, outputs, backward, none_grads, view = entry
    with tape_mod.stop_recording():
        cotangents = [zeros_like(outputs[k]) for k in wanted]
        grads = [None] * len(outputs)
        for k, u in zip(wanted, cotangents):
            grads[k] = u
        if not none_grads:
            for k, o in enumerate(outputs):
                if grads[k] is None:
                    grads[k] = zeros_like(o)
    # Inputs without a tangent need no VJP: the gradient function may skip them.
    skip = tuple(k for k, t in enumerate(in_tangents) if t is None)
    if view is not None and skip:  # an eager op's view or a graph node
        view = tuple.__new__(tape_mod._OpView, (view.type, view.inputs, view.outputs, view.attrs, skip))
    with GradientTape(watch_accessed_variables=False) as inner:
        for u in cotangents:
            inner.watch(u)
        vjps = backward(*grads) if view is None else backward(view, *grads)
        if not isinstance(vjps, (list, tuple)):
            vjps = [vjps]
        targets, seeds = [], []
        for g, t in zip(vjps, in_tangents):
            if g is None or t is None:
                continue
            targets.append(g._as_tensor() if isinstance(g, IndexedSlices) else g)
            seeds.append(t)
    if not targets:
        return [None] * len(wanted)
    result = inner.gradient(targets, cotangents, output_gradients=seeds)
    return [g._as_tensor() if isinstance(g, IndexedSlices) else g for g in result]
