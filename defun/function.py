"""`@defun` and `Function`: trace a Python function per cache key, call the right trace.

A call finds its trace by the first of three tiers that answers: the guarded runner of the
trace the last call ran (`_last_call`: eager tensors it takes as they are), the fast cache
(`_fast_cache`: (class, shape, dtype) per eager tensor argument -> that trace's TraceCalls),
then the cache key (defun/cache_key.py; `_cache`: key -> ConcreteFunction). A miss traces
(once per key, under a lock) into a ConcreteFunction; a trace's calls run what its call
state runs (defun/trace_calls.py), its GraphFunction (defun/graph_function.py) by one of
three routes.

With `reduce_retracing` (the default) a miss whose key differs from an earlier trace's in
tensor sizes only (the same `rank_part`) traces once more with those sizes unknown, and
that relaxed trace serves every later call it fits; a function whose relaxed trace fails
(it needs a static size) keeps one trace per shape.

This module is long because the cache, its relaxing and the trace share one Function's
state and lock; what a call does eagerly (df.config) lives in defun/config.py.
"""
import dis
import functools
import inspect
import sys
import threading
import types
import warnings
import weakref
from operator import attrgetter, itemgetter

import numpy as np

from defun.runtime import dtypes, errors, sites
from defun.runtime.context import state
from defun.runtime.indexed_slices import IndexedSlices
from defun.runtime.nest import flatten, pack_as
from defun.runtime.shapes import shape_fits, shape_str
from defun.runtime.tensor import EagerTensor, Tensor, to_array
from defun.runtime.variables import _BY_HANDLE, SymbolicVariable, Variable
from defun.graph.backends import DEFAULT_BACKEND, get_backend
from defun.graph.ir import Graph, unique_name
from defun.graph.nodes import SymbolicTensor
from defun.cache_key import SIGNATURE_KEY, CacheKey, relaxed_arguments
from defun.concrete import MISS, ConcreteFunction, StaleCaptureWarning, _ArgVariable, _named_value, _Static
from defun.graph_function import GraphFunction  # noqa: F401  (re-exported)
from defun.spec import TensorSpec
from defun import autograph as _autograph   # (the parameter `autograph` below is a flag)

__all__ = ["defun", "Function", "ConcreteFunction", "GraphFunction", "TensorSpec", "RetracingWarning",
           "RetraceReason", "StaleCaptureWarning"]

RETRACE_WARNING_THRESHOLD = 5

# While any defun traces, Python's recursion limit is at least this: each level of loops,
# branches and calls nested in each other costs 6-10 frames of tracing (AutoGraph's
# converted calls included), and the guide promises nesting as deep as a document holds
# (100), which the default limit of 1000 frames does not reach. Restored when the last
# trace running in any thread ends.
TRACE_RECURSION_LIMIT = 4000
_DEPTH = {"traces": 0, "saved": None}
_DEPTH_LOCK = threading.Lock()


class _deep_enough:
    """Raise the recursion limit to TRACE_RECURSION_LIMIT while traces run (never lower it)."""

    __slots__ = ()

    def __enter__(self):
        with _DEPTH_LOCK:
            if _DEPTH["traces"] == 0:
                limit = sys.getrecursionlimit()
                _DEPTH["saved"] = limit if limit < TRACE_RECURSION_LIMIT else None
                if _DEPTH["saved"] is not None:
                    sys.setrecursionlimit(TRACE_RECURSION_LIMIT)
            _DEPTH["traces"] += 1

    def __exit__(self, *exc):
        with _DEPTH_LOCK:
            _DEPTH["traces"] -= 1
            if _DEPTH["traces"] == 0 and _DEPTH["saved"] is not None:
                sys.setrecursionlimit(_DEPTH["saved"])
                _DEPTH["saved"] = None
# at most this many shapes are remembered for the fast path (any more take the slow path)
FAST_CACHE_LIMIT = 1024

# The fast cache key part of one argument (AttributeError when it is no tensor): C-level,
# with `tuple(map(...))` no Python frame per call.
_FAST_KEY_PART = attrgetter("__class__", "_value.shape", "_value.dtype")


class RetracingWarning(UserWarning):
    """A defun keeps tracing new signatures (each trace is slow)."""


class RetraceReason(tuple):
    """(trace, closest earlier trace, changes, relaxed, note): why trace number `trace` of a
    defun happened.

    `changes` has one 'argument: old -> new' per argument whose key part differs from the
    key of trace `closest` (the earlier trace with the fewest differences, latest on ties).
    `relaxed`: the trace has those sizes unknown (`x: float32[5] -> float32[None]`) and
    serves every call they fit. `note`: why sizes were not relaxed (said once), or "".
    """

    __slots__ = ()
    trace = property(itemgetter(0))
    closest = property(itemgetter(1))
    changes = property(itemgetter(2))
    relaxed = property(itemgetter(3))
    note = property(itemgetter(4))

    def __new__(cls, fields):
        fields = tuple(fields)
        return super().__new__(cls, fields + (False, "")[len(fields) - 3:])

    def __str__(self):
        if self[3]:
            return (f"trace {self[0]} relaxes trace {self[1]} to unknown sizes (one trace for "
                    f"any size there): {'; '.join(self[2])}")
        text = f"trace {self[0]} differs from trace {self[1]} in {'; '.join(self[2]) or 'nothing (the same key)'}"
        return f"{text}; {self[4]}" if self[4] else text

    def __repr__(self):
        return f"RetraceReason({self})"


class Function:
    """A Python function compiled to graph functions, one per input signature.

    >>> @df.defun
    ... def f(x):
    ...     return x * 2.0
    >>> f(df.constant([1., 2.]))   # traced once, then run from the compiled graph
    """

    def __init__(self, python_function, input_signature=None, name=None, backend=DEFAULT_BACKEND,
                 rematerialize=False, reduce_retracing=True, autograph=True):
        if not callable(python_function):
            raise TypeError(f"defun expects a callable, got {type(python_function).__name__}")
        self.backend = get_backend(backend).name   # ValueError naming the installed ones
        self.rematerialize = bool(rematerialize)
        self.reduce_retracing = bool(reduce_retracing)
        self.autograph = bool(autograph)    # trace the function converted (defun/autograph/)
        self.python_function = python_function
        self.name = name or getattr(python_function, "__name__", "function").replace("<lambda>", "lambda")
        functools.update_wrapper(self, python_function, updated=())
        self._lock = threading.RLock()
        self._cache = {}
        self._fast_cache = {}   # tuple of (class, shape, np dtype) per eager argument -> TraceCalls
        self._last_call = None  # `last_call` of the trace the last call ran (defun/trace_calls.py)
        self._tracing = set()   # keys being traced (by the thread holding the lock): recursion
        self._retraces = []     # a RetraceReason per trace after the first
        self._stale_warned = False   # a StaleCaptureWarning was given (once per function)
        # reduce_retracing, per rank part of a key (CacheKey.rank_part): the key of its latest
        # trace, the relaxed trace serving it, and the rank parts that keep one trace per shape
        self._by_rank = {}
        self._relaxed = {}
        self._static_ranks = set()
        self.trace_count = 0
        try:
            self._signature = inspect.signature(python_function)
        except (TypeError, ValueError):
            self._signature = None
        params = list(self._signature.parameters.values()) if self._signature else []
        # cache keys name positional arguments by these (`*rest` for a var-positional one)
        self._param_names = tuple(p.name if p.kind is not p.VAR_POSITIONAL else "*" + p.name
                                  for p in params if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL,
                                                                p.POSITIONAL_OR_KEYWORD))
        # Fast path: plain positional parameters without defaults need no binding.
        self._plain_arity = len(params) if params and all(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
            for p in params) else (0 if self._signature is not None and not params else None)
        self._input_signature = None
        if input_signature is not None:
            if not isinstance(input_signature, (list, tuple)):
                raise TypeError("input_signature must be a list or tuple of TensorSpec")
            for s in flatten(input_signature):
                if not isinstance(s, TensorSpec):
                    raise TypeError(f"input_signature may only hold TensorSpec, got {type(s).__name__}")
            self._input_signature = tuple(input_signature)
            self._signature_params = _signature_params(params, len(self._input_signature))
            self._signature_keyword_only = frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY) \
                & {name for name, _ in self._signature_params}

    # ------------------------------------------------------------------ keys
    def _bind(self, args, kwargs):
        if not kwargs and self._plain_arity == len(args):
            return args, {}
        if self._signature is None:
            return args, kwargs
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.name}(): {e}") from None
        bound.apply_defaults()
        return bound.args, bound.kwargs

    def _key_and_tensors(self, args, kwargs):
        if self._input_signature is not None:
            return SIGNATURE_KEY, self._check_signature(args, kwargs)
        args, kwargs = self._bind(args, kwargs)
        tensors = []
        return CacheKey.of(args, kwargs, tensors, self._param_names), tensors

    def _check_signature(self, args, kwargs):
        """The tensors of a call, in input_signature order; one error lists every argument
        that does not fit (TypeError for structure or dtype, ValueError for shapes alone)."""
        # The signature covers the leading parameters; later parameters keep their Python
        # defaults (static), as in a plain call.
        args = self._signature_arguments(args, kwargs)
        tensors, wrong_type, wrong_shape = [], [], []
        for (argname, _), a, spec in zip(self._signature_params, args, self._input_signature):
            flat_a = flatten(a)
            flat_s = flatten(spec)
            if len(flat_a) != len(flat_s):
                wrong_type.append(f"argument {argname!r} should have the structure of {spec!r}, got {a!r}")
                continue
            for x, s in zip(flat_a, flat_s):
                if isinstance(x, TensorSpec):   # get_concrete_function(TensorSpec(...))
                    if x.dtype is not s.dtype or not shape_fits(x.shape, s.shape):
                        wrong_shape.append(f"argument {argname!r} is {x!r}, which does not fit "
                                           f"input_signature {s!r}")
                    tensors.append(x)
                    continue
                if isinstance(x, Variable):
                    x = x.read_value()
                elif getattr(x, "dtype", None) is dtypes.resource:
                    wrong_type.append(f"argument {argname!r} is a variable's resource handle "
                                      f"(v.handle); pass the Variable itself")
                    continue
                if not isinstance(x, Tensor):
                    try:
                        x = EagerTensor(to_array(x, s.dtype.np))
                    except (errors.InvalidArgumentError, TypeError) as e:
                        wrong_type.append(f"argument {argname!r}: {e}")
                        continue
                if x.dtype is not s.dtype:
                    wrong_type.append(f"argument {argname!r} has dtype {x.dtype.name}, but "
                                      f"input_signature expects {s.dtype.name}")
                elif not s.is_compatible_with(x):
                    wrong_shape.append(f"argument {argname!r} has shape {shape_str(x.shape)}, which "
                                       f"does not fit input_signature shape {shape_str(s.shape)}")
                tensors.append(x)
        if wrong_type or wrong_shape:
            raise (TypeError if wrong_type else ValueError)(
                f"{self.name}: {'; '.join(wrong_type + wrong_shape)}")
        return tensors

    def _signature_arguments(self, args, kwargs):
        """The call's arguments in input_signature order, keywords matched by parameter name."""
        params = self._signature_params
        if not kwargs and len(args) == len(params):
            return args
        if len(args) > len(params):
            raise TypeError(f"{self.name}: input_signature has {len(params)} arguments, got "
                            f"{len(args) + len(kwargs)}")
        given = [name for name, _ in params[:len(args)] if name in kwargs]
        missing = [name for name, keyword in params[len(args):] if not keyword or name not in kwargs]
        extra = sorted(set(kwargs) - {name for name, keyword in params if keyword})
        if given or missing or extra:
            problems = [f"got multiple values for argument {n!r}" for n in given]
            problems += [f"missing argument {n!r}" for n in missing]
            problems += [f"unexpected keyword argument {n!r}" for n in extra]
            raise TypeError(f"{self.name}: {'; '.join(problems)} (the input_signature covers "
                            f"{', '.join(name for name, _ in params)}; later parameters keep "
                            f"their defaults)")
        return tuple(args) + tuple(kwargs[name] for name, _ in params[len(args):])

    # ------------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        # Shortest path: the trace the last call ran takes these arguments as they are
        # (eager tensors of its static shapes and dtypes): it runs them, else says MISS.
        last = self._last_call
        if last is not None and not kwargs:
            out = last(args)
            if out is not MISS:
                return out
        # Fast path: all arguments eager tensors, seen before. One tuple build + one dict hit
        # instead of binding and encoding (about 1.5 us saved per call). The class is part
        # of the key: a variable's handle has a shape and dtype too, but is never stored
        # here, so it takes the slow path, whose encoding refuses it by name.
        fast_key = None
        if not kwargs:
            try:
                fast_key = tuple(map(_FAST_KEY_PART, args))
            except AttributeError:
                pass
            else:
                calls = self._fast_cache.get(fast_key)
                if calls is not None:
                    self._last_call = calls.last_call
                    return calls.call(args)
        key, tensors = self._key_and_tensors(args, kwargs)
        concrete = self._cache.get(key)
        if concrete is None:
            concrete = self._miss(key, args, kwargs)
        calls = concrete._calls
        if fast_key is None or self._plain_arity != len(args) or \
                not all(type(a) is EagerTensor for a in args):
            return calls.call(tensors)
        if len(self._fast_cache) < FAST_CACHE_LIMIT:
            self._fast_cache[fast_key] = calls
        out = calls.call(tensors)
        self._last_call = calls.last_call     # a relaxed trace's takes the next size as it is
        return out

    _call_graph = __call__    # what `__call__` is again after run_functions_eagerly(False)

    def _value_and_gradients(self, args, params):
        """`value_and_gradients_function(self, params)(*args)` when nobody listens (no tape,
        trace or callback; the caller checks) and the call hits the fast cache with one
        floating-point tensor returned: one run of the forward with side outputs and one
        of the backward, no tape. None: take the tape route (it traces, fills the cache)."""
        if _RUN_EAGERLY:
            return None     # the tape route runs the Python function
        try:
            calls = self._fast_cache.get(tuple(map(_FAST_KEY_PART, args)))
        except AttributeError:
            return None
        if calls is None or not calls.single or calls.watched or \
                not calls.graph.outputs[0].dtype.is_inexact:
            return None
        value, grads = calls.fn.first_order().value_and_gradients([*args, *calls.captured])
        # integer and bool sources get none, as from a tape
        return value, [grads[p] if args[p].dtype.is_inexact else None for p in params]

    def get_concrete_function(self, *args, **kwargs):
        """Trace (if needed) without running; returns the ConcreteFunction for these args:
        for tensors, the trace a call with them runs (a relaxed one, see reduce_retracing);
        with TensorSpec arguments (tensors of that shape/dtype), a trace for exactly them.
        """
        if self._input_signature is not None:
            if args or kwargs:
                self._check_signature(args, kwargs)   # arguments must fit the signature
            key = SIGNATURE_KEY
        else:
            b_args, b_kwargs = self._bind(args, kwargs)
            key = CacheKey.of(b_args, b_kwargs, [], self._param_names)
        concrete = self._cache.get(key)
        if concrete is None:
            # TensorSpecs ask for their signature exactly; tensors for the trace a call runs
            if any(isinstance(x, TensorSpec) for x in flatten((args, kwargs))):
                concrete = self._trace_for(key, args, kwargs)
            else:
                concrete = self._miss(key, args, kwargs)
        return concrete

    def _miss(self, key, args, kwargs):
        """The trace for a call whose key has none: with reduce_retracing, the relaxed trace
        that takes it (made now if its sizes differ from an earlier trace's only), else a
        trace for exactly this key."""
        if self.reduce_retracing and type(key) is CacheKey:
            with self._lock:
                concrete, note = self._relaxed_for(key, args, kwargs)
                if concrete is not None:
                    return concrete
                concrete = self._trace_for(key, args, kwargs, note=note)
                if note:    # the exact trace works where the relaxed one failed: stay exact
                    self._static_ranks.add(key.rank_part())
                return concrete
        return self._trace_for(key, args, kwargs)

    def _relaxed_for(self, key, args, kwargs):
        """(the relaxed trace serving `key`, made if needed, or None; why sizes stay static:
        the failure of a relaxed trace, once, else "")."""
        rank = key.rank_part()
        if rank in self._static_ranks:
            return None, ""
        current = self._relaxed.get(rank)
        if current is not None and key.fits(current._key):
            return current, ""
        base = current._key if current is not None else self._by_rank.get(rank)
        if base is None:
            return None, ""
        relaxed = key.relaxed_with(base)
        concrete = self._cache.get(relaxed)
        if concrete is None:
            b_args, b_kwargs = self._bind(args, kwargs)
            shapes = iter(relaxed.tensor_shapes())
            r_args, r_kwargs = relaxed_arguments(tuple(b_args), shapes), relaxed_arguments(b_kwargs, shapes)
            reason = RetraceReason((len(self._cache) + 1, list(self._cache).index(base) + 1,
                                    tuple(relaxed.relaxed_changes(base)), True))
            try:
                concrete = self._trace_for(relaxed, r_args, r_kwargs, reason=reason)
            except Exception as e:      # noqa: BLE001 - any failure: the function needs static sizes
                return None, _static_note(self.name, reason, e)
        self._relaxed[rank] = concrete
        return concrete, ""

    def _trace_for(self, key, args, kwargs, reason=None, note=""):
        with self._lock:
            concrete = self._cache.get(key)
            if concrete is not None:
                return concrete
            concrete = self._trace_once(key, args, kwargs)
            concrete._key = key
            if reason is None:
                reason = self._retrace_reason(key)
                if reason is not None and note:
                    reason = RetraceReason((*reason[:3], False, note))
            self._cache[key] = concrete
            self.trace_count += 1
            if type(key) is CacheKey:
                rank = key.rank_part()
                self._by_rank[rank] = key
                if None in (d for s in key.tensor_shapes() for d in s):   # a TensorSpec with None
                    self._relaxed.setdefault(rank, concrete)
            if reason is not None:
                self._retraces.append(reason)
                if self.trace_count > RETRACE_WARNING_THRESHOLD:
                    warnings.warn_explicit(
                        f"defun {self.name!r} has been traced {self.trace_count} times; {reason}. "
                        f"Each trace is slow: pass tensors instead of changing Python values, or "
                        f"give input_signature with None sizes.", RetracingWarning,
                        *(sites.user_site() or ("<unknown>", 0)))
            return concrete

    def _trace_once(self, key, args, kwargs):
        """`_trace`, refusing a function that calls itself with the same key while being
        traced (its graph would hold itself forever) and runaway recursion through new keys."""
        if key in self._tracing:
            raise errors.TracingError(
                f"defun {self.name!r} calls itself with the same argument types while being traced "
                f"(through {key!r:.120}); its graph would contain itself without end. Stop the "
                f"recursion on a Python value (an int argument), or loop with df.while_loop")
        outermost = not self._tracing
        self._tracing.add(key)
        try:
            if not outermost:
                return self._trace(args, kwargs)
            with _deep_enough():
                return self._trace(args, kwargs)
        except RecursionError:
            if not outermost:
                raise
            raise errors.TracingError(
                f"defun {self.name!r}: Python's recursion limit was reached while tracing it (it calls "
                f"itself, or other defuns, too deeply); stop the recursion earlier, or loop with "
                f"df.while_loop") from None
        finally:
            self._tracing.discard(key)

    def _retrace_reason(self, key):
        """Why `key` needs a new trace: its changes from the closest earlier trace's key."""
        if not isinstance(key, CacheKey) or not self._cache:
            return None
        best = None
        # the last 64 traces are compared (a function retracing thousands of times needs
        # no better explanation than one of its recent traces)
        earlier = list(self._cache)[-64:]
        first = len(self._cache) - len(earlier) + 1
        for number, old in enumerate(earlier, first):
            if isinstance(old, CacheKey):
                changes = key.changes(old)
                if best is None or len(changes) <= len(best[1]):
                    best = (number, changes)
        if best is None:
            return None
        return RetraceReason((len(self._cache) + 1, best[0], tuple(best[1])))

    def retrace_reasons(self):
        """Why each trace after the first happened, oldest first: per trace, every argument
        (positional or keyword) whose key part differs from the closest earlier trace.

        >>> for reason in f.retrace_reasons():
        ...     print(reason)     # trace 2 differs from trace 1 in n: Python int 1 -> Python int 2
        """
        with self._lock:
            return list(self._retraces)

    def _trace(self, args, kwargs):
        graph = Graph(unique_name(self.name), outer=state.graph, base_name=self.name)
        with graph.building():
            if self._input_signature is not None:
                flat = [pack_as(s, [graph.placeholder(x.shape, x.dtype) for x in flatten(s)])
                        for s in self._input_signature]
                keyword_only = self._signature_keyword_only
                b_args = tuple(a for a, p in zip(flat, self._signature_params) if p[0] not in keyword_only)
                b_kwargs = {p[0]: a for a, p in zip(flat, self._signature_params) if p[0] in keyword_only}
            else:
                b_args, b_kwargs = self._bind(args, kwargs)
                proxies = {}
                b_args = _substitute(b_args, graph, proxies)
                b_kwargs = _substitute(b_kwargs, graph, proxies)
            saved = _autograph.conversion.tracing(self.autograph)   # df.vmap in it converts as this does
            try:
                result = self._traced()(*b_args, **b_kwargs)
            finally:
                _autograph.conversion.tracing(saved)
            out_leaves = flatten(result)
            outputs, out_index = [], []
            for pos, leaf in enumerate(out_leaves):
                if isinstance(leaf, SymbolicVariable) and leaf.handle.node.graph is graph:
                    out_index.append(_ArgVariable(graph.inputs.index(leaf.handle)))
                    continue
                if leaf is None or isinstance(leaf, Variable):
                    out_index.append(_Static(leaf))  # returned as is: None, or the variable itself
                    continue
                out_index.append(len(outputs))
                outputs.append(_output_tensor(leaf, graph, self.name, pos))
        graph.finalize(outputs)
        graph.structured_outputs = result
        concrete = ConcreteFunction(graph, self, (b_args, b_kwargs), result, out_index, graph.name,
                                    self.backend, self.rematerialize)
        if graph.captures and not self._stale_warned:
            concrete._watch(_named_captures(self.python_function, graph))
        return concrete

    def _traced(self):
        """What a trace calls: the Python function, converted by autograph unless it is off."""
        return _autograph.entry_point(self.python_function) if self.autograph else self.python_function

    def __get__(self, instance, owner):
        if instance is None:
            return self
        # A method: one Function per instance (its own traces), held weakly both ways so the
        # cache never keeps an instance alive.
        cache = self.__dict__.get("_bound")
        if cache is None:
            cache = self.__dict__.setdefault("_bound", weakref.WeakKeyDictionary())
        try:
            bound = cache.get(instance)
        except TypeError:   # not weakly referenceable (e.g. __slots__ without __weakref__)
            raise TypeError(f"defun method {self.name!r}: instances of {owner.__name__} must support "
                            f"weak references (add '__weakref__' to __slots__)") from None
        if bound is None:
            ref = weakref.ref(instance)
            fn = self._traced()

            def method(*args, **kwargs):
                return fn(ref(), *args, **kwargs)
            functools.update_wrapper(method, fn)
            if self._signature is not None:
                params = list(self._signature.parameters.values())[1:]
                method.__signature__ = self._signature.replace(parameters=params)
            bound = cache[instance] = Function(method, self._input_signature, self.name, self.backend,
                                               self.rematerialize, self.reduce_retracing, self.autograph)
        return bound

    def __repr__(self):
        return f"<df.defun {self.name} traces={self.trace_count}>"


# [True] while df.config.run_functions_eagerly(True): defun/config.py swaps Function's
# `__call__` for one running the Python function, so the graph call pays nothing for it
_RUN_EAGERLY = []


def _static_note(name, reason, exc):
    """What `retrace_reasons()` says, once, when the relaxed trace `reason` failed with `exc`."""
    site = sites.traceback_site(exc.__traceback__)
    where = f" at {sites.format_site(site)}" if site else ""
    return (f"{name!r} needs static sizes: a trace with {'; '.join(reason[2])} failed{where} "
            f"({type(exc).__name__}: {str(exc):.200}), so it keeps one trace per shape")


def _named_captures(fn, graph, depth=3):
    """(namespace, name, tensor or variable, use site) per global or closure name of `fn`
    that refers to a tensor or variable `graph` captured; names of the plain functions and defuns
    `fn` refers to by name are searched too, `depth` levels deep. Runs once per trace."""
    targets = {}
    for tid in graph.capture_order:
        outer, placeholder = graph.captures[tid]
        if isinstance(outer, EagerTensor):
            # a variable is named by the Variable, and captured as its handle
            var = _BY_HANDLE.get(outer._id) if outer.dtype is dtypes.resource else None
            named = var if var is not None else outer
            targets[id(named)] = (named, placeholder)
    found, seen = {}, set()
    stack = [(fn, depth)]
    while stack:
        f, level = stack.pop()
        if isinstance(f, Function):
            f = f.python_function
        code = getattr(f, "__code__", None)
        if code is None or code in seen:
            continue
        seen.add(code)
        names = [(f.__globals__, n) for n in _global_names(code)]
        names += [(cell, n) for n, cell in zip(code.co_freevars, f.__closure__ or ())]
        for where, name in names:
            value = _named_value(where, name)
            hit = targets.get(id(value))
            if hit is not None:
                found.setdefault((id(where), name), (where, name, hit[0], _first_use(graph, hit[1])))
            elif level and isinstance(value, (types.FunctionType, Function)):
                stack.append((value, level - 1))
    return list(found.values())


def _global_names(code):
    """Names `code` (and the functions defined in it) loads as globals."""
    names = [i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names += _global_names(c)
    return dict.fromkeys(names)


def _first_use(graph, placeholder):
    """The user's source site of the first node of `graph` reading `placeholder`."""
    for node in graph.nodes:
        if any(t is placeholder for t in node.inputs):
            return node.site
    return None


def _signature_params(params, n):
    """(name, may be passed by keyword) of the `n` parameters an input_signature covers."""
    out = []
    for p in params:
        if len(out) == n or p.kind is p.VAR_KEYWORD:
            break
        if p.kind is p.VAR_POSITIONAL:
            out += [(f"{p.name}[{j}]", False) for j in range(n - len(out))]
            break
        out.append((p.name, p.kind is not p.POSITIONAL_ONLY))
    return tuple(out) + tuple((f"arg{i}", False) for i in range(len(out), n))


def _substitute(value, graph, proxies):
    """Replace tensor leaves with new placeholders (in the order _encode visited them).

    A Variable becomes a SymbolicVariable over a resource placeholder (one per distinct
    variable: `proxies` maps id(variable) to it, so a variable passed twice stays one).
    """
    if isinstance(value, Variable):
        proxy = proxies.get(id(value))
        if proxy is None:
            h = value.handle
            proxy = proxies[id(value)] = SymbolicVariable(
                graph.placeholder((), dtypes.resource, h.handle_data), value)
        return proxy
    if isinstance(value, (EagerTensor, SymbolicTensor, TensorSpec)):
        return graph.placeholder(value.shape, value.dtype)
    if isinstance(value, (np.ndarray, np.generic)):
        arr = to_array(value)
        return graph.placeholder(arr.shape, dtypes.from_numpy(arr.dtype))
    if isinstance(value, dict):
        return {k: _substitute(value[k], graph, proxies) for k in sorted(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_substitute(v, graph, proxies) for v in value])
    if isinstance(value, list):
        return [_substitute(v, graph, proxies) for v in value]
    if isinstance(value, tuple):
        return tuple(_substitute(v, graph, proxies) for v in value)
    return value


def _output_tensor(leaf, graph, fname, pos):
    if isinstance(leaf, SymbolicTensor):
        return leaf if leaf.node.graph is graph else graph.capture(leaf)
    if isinstance(leaf, EagerTensor):
        return graph.capture(leaf)
    if isinstance(leaf, IndexedSlices):
        return leaf._as_tensor()
    if isinstance(leaf, Variable):
        return leaf.read_value()
    if isinstance(leaf, (np.ndarray, np.generic, bool, int, float)):
        return graph.constant(to_array(leaf))
    if hasattr(leaf, "_weak_tensor"):   # Python numbers an autograph `if` joined: as a returned number
        return leaf._weak_tensor()
    raise errors.TracingError(
        f"defun {fname!r} returned a {type(leaf).__name__} ({leaf!r:.60}) as output leaf {pos}; a "
        f"traced function may return tensors, numbers, None, and nested lists/tuples/dicts of them")


def defun(func=None, input_signature=None, backend=DEFAULT_BACKEND, rematerialize=False,
          reduce_retracing=True, autograph=True):
    """Compile `func` into graph functions traced per input signature.

    >>> @df.defun
    ... def loss(x, w):
    ...     return df.reduce_sum(df.tanh(x @ w))

    `backend` names the installed backend its plans run on (`df.backends()`; "numpy").
    `rematerialize=True`: under a tape, save only the inputs and what cheap pure ops cannot
    recompute, and recompute the rest in the backward (less memory, more time).
    `reduce_retracing=True`: a call whose tensors differ from an earlier trace's in sizes
    only traces once more with those sizes unknown, for every later such call; False: one
    trace per shape. An `input_signature` decides alone.
    `autograph=True`: Python `if`/`while`/`for` on tensors become graph control flow (guide, AutoGraph).
    """
    get_backend(backend)        # an unknown name fails here, not at the first call
    options = dict(backend=backend, rematerialize=rematerialize, reduce_retracing=reduce_retracing,
                   autograph=autograph)
    if func is None:
        return lambda f: Function(f, input_signature, **options)
    return Function(func, input_signature, **options)
