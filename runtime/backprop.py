"""GradientTape and the functional gradient helpers (TensorFlow-eager style)."""
import functools
import inspect
import warnings
import weakref

from defun.runtime import errors, tape as tape_mod
from defun.runtime.autodiff import imperative_grad
from defun.runtime.context import execution_callbacks, state
from defun.runtime.jacobian import batch_jacobian, jacobian, unconnected_mode
from defun.runtime.nest import flatten, pack_as
from defun.runtime.shapes import shape_str, shapes_compatible
from defun.runtime.ops._args import bool_arg
from defun.runtime.ops.array_ops import identity, zeros, zeros_like
from defun.runtime.tensor import Tensor, convert_to_tensor, with_article
from defun.runtime.variables import Variable, handle_in_context, watch_variable

__all__ = ["GradientTape", "gradients_function", "value_and_gradients_function",
           "implicit_gradients", "implicit_value_and_gradients"]


class Recording:
    """The `with` block of a recorder owning a tape (GradientTape, ForwardAccumulator): the
    tape is active inside it, and a recorder is in one block at a time."""
    _recording = False

    def _open_tape(self):
        return self._tape

    def __enter__(self):
        if self._recording:
            raise RuntimeError(f"this {type(self).__name__} is already recording")
        tape_mod.push_tape(self._open_tape())
        self._recording = True
        return self

    def __exit__(self, *exc):
        if self._recording:
            tape_mod.pop_tape(self._tape)
            self._recording = False
        return False


class GradientTape(Recording):
    """Records ops on watched tensors so `gradient` can differentiate them.

    >>> x = df.constant(3.0)
    >>> with df.GradientTape() as tape:
    ...     tape.watch(x)
    ...     y = x * x
    >>> tape.gradient(y, x)   # 6.0
    """

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self._persistent = bool_arg("GradientTape", persistent, "persistent")
        self._watch_accessed_variables = bool_arg("GradientTape", watch_accessed_variables,
                                                  "watch_accessed_variables")
        self._tape = None
        self._used = False
        self._recording = False

    def _open_tape(self):
        if self._tape is None:
            self._tape = tape_mod.Tape(self._persistent, self._watch_accessed_variables)
        return self._tape

    def _ensure(self):
        if self._tape is None:
            raise RuntimeError("GradientTape.watch/gradient called before entering the tape's `with` block")

    def watch(self, tensor):
        """Watch a tensor, variable, or a nested structure of them."""
        self._ensure()
        if isinstance(tensor, Tensor):  # one tensor, without flattening: -0.3 us per watch
            self._tape.watch(tensor if state._graph is None else _in_trace(tensor))  # (field: -50 ns)
            return
        for t in flatten(tensor):
            if isinstance(t, Variable):
                watch_variable(self._tape, t)
            elif isinstance(t, Tensor):
                self._tape.watch(t if state._graph is None else _in_trace(t))
            else:
                raise TypeError(f"GradientTape.watch expects tensors or variables, got {type(t).__name__}")

    def watched_variables(self):
        """The variables watched so far, in first-use order."""
        return tuple(self._tape.variables.values()) if self._tape is not None else ()

    def stop_recording(self):
        """Context manager: ops inside are not recorded on any tape."""
        return tape_mod.stop_recording()

    def reset(self):
        """Forget everything recorded so far."""
        recording = self._recording
        if recording:
            self.__exit__(None, None, None)
        self._tape = None
        if recording:
            self.__enter__()

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients="none"):
        """d(sum of target)/d(sources), in the structure of `sources`."""
        self._ensure()
        mode = unconnected_mode(unconnected_gradients)
        if self._used and not self._persistent:
            raise RuntimeError("a non-persistent GradientTape can compute gradients only once; "
                               "use GradientTape(persistent=True) to ask again")
        targets = [_as_target(t) for t in flatten(target)]
        if not targets:
            raise ValueError("GradientTape.gradient: target is empty")
        flat_sources = flatten(sources)
        src_tensors = _source_tensors(flat_sources)
        seeds = None
        if output_gradients is not None:
            given = flatten(output_gradients) if isinstance(output_gradients, (list, tuple)) \
                else [output_gradients]
            if len(given) != len(targets):
                raise ValueError(f"output_gradients has {len(given)} entries for {len(targets)} targets")
            # Python scalars and lists take the target's dtype (weak typing, as operands do).
            seeds = [None if g is None else
                     convert_to_tensor(g, None if isinstance(g, Tensor) else t.dtype)
                     for g, t in zip(given, targets)]
            for k, (g, t) in enumerate(zip(seeds, targets)):
                if g is not None and not shapes_compatible(tuple(g.shape), tuple(t.shape)):
                    raise errors.InvalidArgumentError(
                        f"GradientTape.gradient: output_gradients[{k}] has shape {shape_str(g.shape)}, "
                        f"but target {k} has shape {shape_str(t.shape)}; each output gradient must "
                        f"have the shape of its target")
        # Other active tapes record the backward pass. A persistent tape asked inside its own
        # `with` block records it too (as TensorFlow's does), so the gradient of this gradient
        # can be asked of it; otherwise it must not (it may be off the stack already, e.g.
        # when asked inside its own stop_recording()).
        saved = state.tapes
        if not (self._persistent and self._recording):
            state.tapes = [t for t in saved if t is not self._tape]
        try:
            grads = imperative_grad(self._tape, targets, src_tensors, seeds)
        finally:
            state.tapes = saved
        if not self._persistent:
            self._used = True
        if mode == "zero":
            grads = [g if g is not None else
                     (zeros(s.shape, s.dtype) if isinstance(s, Variable) else zeros_like(s))
                     for g, s in zip(grads, flat_sources)]
        return pack_as(sources, grads) if isinstance(sources, (list, tuple, dict)) else grads[0]

    def jacobian(self, target, sources, unconnected_gradients="none"):
        """d target / d each source, of shape target.shape + source.shape (one gradient per row).

        >>> with df.GradientTape() as tape:
        ...     tape.watch(x)
        ...     y = x * x
        >>> tape.jacobian(y, x)   # diag(2 x)
        """
        return jacobian(self, target, sources, unconnected_gradients)

    def batch_jacobian(self, target, source, unconnected_gradients="none"):
        """Per-example jacobians: [b] + target.shape[1:] + source.shape[1:].

        Row b of `target` must depend only on row b of `source` (the rows are seeded together).
        """
        return batch_jacobian(self, target, source, unconnected_gradients)


def _source_tensors(flat_sources):
    """The tensors the tape differentiates for `sources` (a variable's handle); an integer or
    bool source, which gets no gradient (None), is named in a warning, as TF warns."""
    tensors = []
    for k, s in enumerate(flat_sources):
        if isinstance(s, Variable):
            tensors.append(handle_in_context(s))
        elif isinstance(s, Tensor):
            tensors.append(s if state._graph is None else _in_trace(s))
        else:
            raise TypeError(f"GradientTape.gradient: sources must be tensors or variables, got "
                            f"{type(s).__name__}")
        if not s.dtype.is_inexact:
            what = f"variable {s.name!r}" if isinstance(s, Variable) else f"source {k}"
            warnings.warn(f"GradientTape.gradient: {what} is {with_article(s.dtype.name)} "
                          f"{'variable' if isinstance(s, Variable) else 'tensor'} of shape "
                          f"{shape_str(s.shape)}; an integer or bool source gets no gradient (None), "
                          f"its values not being continuous: df.cast it to a float dtype before the "
                          f"tape watches it to differentiate with respect to it", UserWarning, stacklevel=3)
    return tensors


def _in_trace(t):
    """`t` as the traced graph sees it: an outer tensor (eager, or of an enclosing trace) is
    watched, and differentiated, as the graph's capture of it."""
    return state.graph.capture(t)


def _as_target(t):
    if t is None:
        raise ValueError("GradientTape.gradient: target is None (did the function return a value?)")
    if isinstance(t, Tensor):
        return t
    if hasattr(t, "_as_tensor"):
        return t._as_tensor()
    raise TypeError(f"GradientTape.gradient: target must be a tensor, got {type(t).__name__}")


def _fresh(x):
    """A tensor of its own for one argument position (so `f(x, x)` has two sources)."""
    if hasattr(x, "_as_tensor") and not isinstance(x, Tensor):
        x = x._as_tensor()
    return identity(convert_to_tensor(x) if not isinstance(x, Tensor) else x)


def _param_names(f, n):
    try:
        names = list(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        names = []
    return [names[i] if i < len(names) else f"arg{i}" for i in range(n)]


# a gradient function -> (what made it, the function it was given, the rest of what it was given):
# autograph makes it again around that function converted (defun/autograph/conversion.py). Not an
# attribute: functools.wraps copies those onto a wrapper of the gradient function (df.vmap's)
MADE_FROM = weakref.WeakKeyDictionary()


def value_and_gradients_function(f, params=None):
    """`g(*args) -> (f(*args), [d f / d args[i] for i in params])`.

    >>> df.value_and_gradients_function(lambda x, y: x * y)(2., 3.)   # (6., [3., 2.])
    """
    hook = getattr(f, "_value_and_gradients", None)
    try:    # each position once (a position given twice is two sources, the first unconnected)
        if params is not None and len(set(params)) != len(params):
            hook = None
    except TypeError:   # not a sized collection of ints: refused at the call
        hook = None

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        which = range(len(args)) if params is None else params
        for p in which:
            if not isinstance(p, int) or not 0 <= p < len(args):
                raise ValueError(f"params entry {p!r} is not a positional argument index "
                                 f"(function got {len(args)} positional arguments)")
        # A defun may do it all in one forward and one backward run when no tape, trace or
        # callback could see the steps (defun.Function._value_and_gradients; None: it cannot)
        fused = None
        if hook is not None and not kwargs and state.quiet and not execution_callbacks:
            fused = hook(args, which)
        if fused is not None:
            value, grads = fused
        else:
            args = list(args)
            with GradientTape(persistent=False) as tape:
                sources = []
                for p in which:
                    args[p] = _fresh(args[p])
                    if not args[p].dtype.is_inexact:    # refused here, before the tape's warning
                        raise _integer_argument(f, args, p)
                    tape.watch(args[p])
                    sources.append(args[p])
                value = f(*args, **kwargs)
            if value is None:
                raise ValueError(f"{getattr(f, '__name__', 'function')} returned None; a "
                                 f"differentiated function must return a tensor")
            grads = tape.gradient(value, sources)
        for p, g in zip(which, grads):
            if g is None:
                if not args[p].dtype.is_inexact:
                    raise _integer_argument(f, args, p)
                names = _param_names(f, len(args))  # only for the message: inspect is slow
                raise ValueError(
                    f"argument {names[p]!r} (position {p}) of {getattr(f, '__name__', 'function')} is not "
                    f"connected to its result, so it has no gradient")
        return value, grads
    MADE_FROM[decorated] = (value_and_gradients_function, f, params)
    return decorated


def _integer_argument(f, args, p):
    names = _param_names(f, len(args))  # only for the message: inspect is slow
    return ValueError(f"argument {names[p]!r} (position {p}) of {getattr(f, '__name__', 'function')} is "
                      f"{with_article(args[p].dtype.name)} tensor; gradients are defined for floating-point "
                      f"arguments (pass a float such as 3.0, or df.cast it)")


def gradients_function(f, params=None):
    """`g(*args) -> [d f / d args[i] for i in params]` (all positional args by default).

    >>> df.gradients_function(lambda x: x * x)(3.)   # [6.]
    """
    vg = value_and_gradients_function(f, params)

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        return vg(*args, **kwargs)[1]
    MADE_FROM[decorated] = (gradients_function, f, params)
    return decorated


def implicit_value_and_gradients(f):
    """`g(*args) -> (f(*args), [(gradient, variable), ...])` for the trainable variables f reads."""
    @functools.wraps(f)
    def decorated(*args, **kwargs):
        with GradientTape(watch_accessed_variables=True) as tape:
            value = f(*args, **kwargs)
        if value is None:
            raise ValueError(f"{getattr(f, '__name__', 'function')} returned None; a differentiated "
                             f"function must return a tensor")
        variables = list(tape.watched_variables())
        if not variables:
            raise ValueError(f"{getattr(f, '__name__', 'function')} read no trainable variables, so "
                             f"there is nothing to differentiate; use gradients_function for arguments")
        grads = tape.gradient(value, variables)
        return value, list(zip(grads, variables))
    MADE_FROM[decorated] = (implicit_value_and_gradients, f)
    return decorated


def implicit_gradients(f):
    """`g(*args) -> [(gradient, variable), ...]` for the trainable variables f reads."""
    vg = implicit_value_and_gradients(f)

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        return vg(*args, **kwargs)[1]
    MADE_FROM[decorated] = (implicit_gradients, f)
    return decorated
