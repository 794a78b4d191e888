"""`@defun`: trace a Python function into graph functions and call them as one op.

States of a `Function`, explicit in code: a call computes the cache key (structure,
(shape, dtype) per tensor, static Python values); a miss traces (once per key, under a
lock), a hit runs the compiled plan. Under a watching tape the call runs the forward
function with side outputs and records ONE tape entry whose backward calls the backward
graph function.
"""
import functools
import inspect
import threading
import warnings
import weakref

import numpy as np

from runtime import dtypes, errors
from runtime.context import execution_callbacks, state
from runtime.indexed_slices import IndexedSlices
from runtime.nest import flatten, make_packer, pack_as
from runtime.ops.array_ops import zeros_like
from runtime.tape import record_operation
from runtime.tensor import EagerTensor, Tensor, to_array
from runtime.variables import SymbolicVariable, Variable, _BY_HANDLE, watch_variable
from graph.functions import call_graph, plan_of, remat_backward
from graph.gradients import build_backward
from graph.ir import Graph, SymbolicTensor, unique_name

__all__ = ["defun", "Function", "ConcreteFunction", "GraphFunction", "TensorSpec", "RetracingWarning"]

RETRACE_WARNING_THRESHOLD = 5


class RetracingWarning(UserWarning):
    """A defun keeps tracing new signatures (each trace is slow)."""


class TensorSpec:
    """The shape (None for any size) and dtype a function argument must have."""

    __slots__ = ("shape", "dtype", "name")

    def __init__(self, shape, dtype=dtypes.float32, name=None):
        if shape is None:
            raise ValueError("TensorSpec needs a shape (use None for unknown sizes, not for the rank)")
        self.shape = tuple(None if d is None else int(d) for d in shape)
        self.dtype = dtypes.as_dtype(dtype)
        self.name = name

    @classmethod
    def from_tensor(cls, t, name=None):
        return cls(t.shape, t.dtype, name)

    def is_compatible_with(self, t):
        s = tuple(t.shape)
        return (t.dtype is self.dtype and len(s) == len(self.shape) and
                all(a is None or b is None or a == b for a, b in zip(self.shape, s)))

    def __eq__(self, other):
        return isinstance(other, TensorSpec) and (self.shape, self.dtype, self.name) == \
            (other.shape, other.dtype, other.name)

    def __hash__(self):
        return hash((self.shape, self.dtype.name, self.name))

    def __repr__(self):
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype!r}{', name=%r' % self.name if self.name else ''})"


# ---------------------------------------------------------------------------------------
class GraphFunction:
    """A function graph that can be called eagerly, nested, and differentiated.

    The backward function is built lazily on the first call that needs a gradient.
    """

    def __init__(self, graph):
        self.graph = graph
        self._lock = threading.Lock()
        self._backward = None
        self._forward_with_side = None   # Graph view: outputs + side outputs
        # positions of resource inputs (variable arguments and captured variables): a call under
        # a tape that watches accessed variables watches these variables
        self._resource_positions = [k for k, t in enumerate(graph.all_inputs) if t.dtype is dtypes.resource]
        self._n_in = len(graph.inputs)
        self._run = None

    @staticmethod
    def of(graph):
        gf = graph.__dict__.get("_function")
        if gf is None:
            gf = graph._function = GraphFunction(graph)
        return gf

    @property
    def plan(self):
        return plan_of(self.graph)

    def backward(self):
        """(Backward, forward-with-side-outputs graph), built once."""
        if self._backward is None:
            with self._lock:
                if self._backward is None:
                    bw = build_backward(self.graph)
                    self._forward_with_side = self.graph.view(self.graph.outputs + bw.side_outputs,
                                                              f"{self.graph.name}_forward",
                                                              f"{self.graph.base_name}_forward")
                    self._backward = bw
        return self._backward

    def call_flat(self, inputs):
        """Run on `inputs` (tensors in all_inputs order); returns a list of output tensors.

        Eagerly one op: the compiled plan (or, under a watching tape, the forward function
        with side outputs and one tape entry); while tracing, a call node.
        """
        st = state
        if st.quiet and not execution_callbacks:  # eager, nobody listening: straight to the plan
            return self._run_plan(inputs)
        if st.graph is not None:
            if st.tapes and self._resource_positions:  # a tape in the enclosing trace sees the reads
                self._watch_variables(st.tapes, inputs)
            return call_graph(self.graph, inputs)
        tapes = st.tapes
        if tapes and self._should_record(tapes, inputs):
            outs = self._call_recorded(inputs)
        else:
            outs = self._run_plan(inputs)
        if execution_callbacks:   # a defun call is one op to callbacks and traces
            for cb in tuple(execution_callbacks):
                cb(self.graph.name, None, {}, list(inputs), tuple(outs))
        if st.trace is not None:
            st.trace.add(self.graph.name, outs)
        return outs

    def _run_plan(self, inputs):
        run = self._run
        if run is None:
            run = self._run = plan_of(self.graph).run
        try:
            vals = [t._value for t in inputs]
        except AttributeError:
            vals = [_eager_value(t) for t in inputs]
        return [EagerTensor(o) for o in run(*vals)]

    def _watch_variables(self, tapes, inputs):
        for k in self._resource_positions:
            var = _BY_HANDLE.get(inputs[k]._id)
            if var is not None and var.trainable:
                for tape in tapes:
                    if tape.watch_accessed_variables:
                        watch_variable(tape, var)

    def _should_record(self, tapes, inputs):
        if self._resource_positions:
            self._watch_variables(tapes, inputs)
        ids = [getattr(t, "_id", None) for t in inputs]
        return any(tape.should_record(ids) for tape in tapes)

    def _call_recorded(self, inputs):
        bw = self.backward()
        fwd = self._forward_with_side
        outs = plan_of(fwd).run(*[_eager_value(t) for t in inputs])
        n = len(self.graph.outputs)
        real = [EagerTensor(o) for o in outs[:n]]
        side = [EagerTensor(o) for o in outs[n:]]
        inputs = list(inputs)

        def backward(*grads):
            g_out, g_side = grads[:n], grads[n:]
            if any(g is not None for g in g_side):
                # Higher order: the side outputs themselves get gradients. Recompute.
                rb, spec = remat_backward(fwd)
                outs_all = real + side
                feed = inputs + [grads[k] if grads[k] is not None else zeros_like(outs_all[k])
                                 for k, t in enumerate(fwd.outputs) if t.dtype.is_floating]
                res = GraphFunction.of(rb).call_flat(feed)
                return [None if j is None else res[j] for j in spec]
            feed = [g_out[k] if g_out[k] is not None else zeros_like(real[k]) for k in bw.grad_outputs]
            for kind, v in bw.capture_sources:
                feed.append(inputs[v] if kind == "input" else side[v] if kind == "side" else v)
            res = GraphFunction.of(bw.graph).call_flat(feed)
            result = []
            for spec in bw.input_grads:
                if spec is None:
                    result.append(None)
                elif spec[0] == "dense":
                    result.append(res[spec[1]])
                else:
                    result.append(IndexedSlices(res[spec[1]], res[spec[2]], spec[3]))
            return result

        record_operation(self.graph.name, real + side, inputs, backward, none_grads=True)
        return real


def _eager_value(t):
    if isinstance(t, EagerTensor):
        return t._value
    if isinstance(t, SymbolicTensor):
        raise errors.TracingError(f"symbolic tensor {t.name} (created at {t.creation_site}) is used "
                                  f"outside the function trace that created it")
    return to_array(t)


def _fits(spec_shape, shape):
    shape = tuple(shape)
    return len(spec_shape) == len(shape) and all(a is None or a == b for a, b in zip(spec_shape, shape))


def _static_parts(key):
    """The key with tensor leaves blanked: what must match exactly (Python values, structure)."""
    if isinstance(key, tuple):
        if len(key) == 2 and isinstance(key[1], np.dtype):
            return "T"
        return tuple(_static_parts(k) for k in key)
    return key


class _ArgVariable:
    """An output leaf that is a variable argument: the variable passed at flat input `index`."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


class _Static:
    """An output leaf that is not a graph output (None, a Variable): returned as is."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


# ---------------------------------------------------------------------------------------
class ConcreteFunction:
    """One trace of a defun: a graph with typed inputs, captures and structured outputs."""

    def __init__(self, graph, function, arg_structure, out_structure, out_index, name):
        self.graph = graph
        self._fn = GraphFunction.of(graph)
        self._arg_structure = arg_structure   # (args, kwargs) with placeholders in tensor leaves
        self._out_structure = out_structure   # structure with leaves
        self._out_index = out_index           # per leaf: index into graph.outputs or None
        self._function = function
        self._key = None          # the cache key it was traced for (set by Function)
        self.name = name
        self._captured = graph.captured_values   # fixed once the trace is finalized
        n_out = len(graph.outputs)
        self._arg_variables = [k.index for k in out_index if type(k) is _ArgVariable]
        sources, j = [], 0
        for k in out_index:
            if type(k) is int:
                sources.append(k)
            elif type(k) is _ArgVariable:
                sources.append(n_out + j)   # appended per call: the variable actually passed
                j += 1
            else:
                sources.append(("const", k.value))
        self._pack = make_packer(out_structure, sources)

    @property
    def inputs(self):
        """The argument placeholders (then captures are `graph.captured_placeholders`)."""
        return list(self.graph.inputs)

    @property
    def outputs(self):
        return list(self.graph.outputs)

    @property
    def captured_inputs(self):
        """Outer values fed as extra inputs: eager tensors, and variable handles."""
        return self.graph.captured_values

    @property
    def structured_outputs(self):
        """The traced return value, with symbolic tensors in its leaves."""
        leaves = [k.value if type(k) is _Static else
                  _BY_HANDLE.get(self.graph.inputs[k.index]._id) if type(k) is _ArgVariable else
                  self.graph.outputs[k] for k in self._out_index]
        return pack_as(self._out_structure, leaves)

    @property
    def structured_input_signature(self):
        args, kwargs = self._arg_structure
        conv = lambda t: TensorSpec(t.shape, t.dtype) if isinstance(t, SymbolicTensor) else t  # noqa: E731
        return pack_as(args, [conv(x) for x in flatten(args)]), pack_as(kwargs, [conv(x) for x in flatten(kwargs)])

    def _call_flat(self, tensors):
        outs = self._fn.call_flat([*tensors, *self._captured])
        if self._arg_variables:
            outs += [_BY_HANDLE[tensors[k]._id] for k in self._arg_variables]
        return self._pack(outs)

    def __call__(self, *args, **kwargs):
        key = None
        if self._function is not None:
            key, tensors = self._function._key_and_tensors(args, kwargs)
        else:
            tensors = [t for t in flatten((args, kwargs))]
        if key is not None and self._key is not None and key != self._key and \
                isinstance(key, tuple) and _static_parts(key) != _static_parts(self._key):
            raise TypeError(f"{self.name}: this concrete function was traced for other Python "
                            f"arguments or variables ({_describe_key_diff(self._key[0], key[0])}); call the "
                            f"defun itself, or get_concrete_function for these arguments")
        if len(tensors) != len(self.graph.inputs):
            raise TypeError(f"{self.name}: expected {len(self.graph.inputs)} tensor arguments, got {len(tensors)}")
        for k, (t, p) in enumerate(zip(tensors, self.graph.inputs)):
            if t.dtype is not p.dtype or not _fits(p.shape, t.shape):
                raise ValueError(f"{self.name}: tensor argument {k} has {t.dtype.name}{list(t.shape)}, "
                                 f"this concrete function takes {p.dtype.name}{list(p.shape)}")
        return self._call_flat(tensors)

    def __str__(self):
        return str(self.graph)

    def __repr__(self):
        return f"<ConcreteFunction {self.name} inputs={[(t.shape, t.dtype.name) for t in self.graph.inputs]}>"


# ---------------------------------------------------------------------------------------
def _describe_key_diff(old, new):
    """Human words for how two cache keys differ (why a function retraced)."""
    def leaves(key, path, out):
        if isinstance(key, tuple) and key and isinstance(key[0], str) and key[0] in ("L", "t", "D", "N"):
            tag = key[0]
            if tag == "D":
                for k, v in zip(key[1], key[2]):
                    leaves(v, f"{path}[{k!r}]", out)
            elif tag == "N":
                for i, v in enumerate(key[2]):
                    leaves(v, f"{path}.{i}", out)
            else:
                for i, v in enumerate(key[1]):
                    leaves(v, f"{path}[{i}]", out)
        else:
            out[path] = key
        return out
    a = leaves(old, "args", {})
    b = leaves(new, "args", {})
    diffs = []
    for p in sorted(set(a) | set(b)):
        if a.get(p) != b.get(p):
            diffs.append(f"{p}: {_key_text(a.get(p))} -> {_key_text(b.get(p))}")
    return "; ".join(diffs[:4]) or "argument structure"


def _key_text(k):
    if k is None:
        return "absent"
    if isinstance(k, tuple) and len(k) == 2 and isinstance(k[1], np.dtype):
        return f"tensor {k[1].name}{list(k[0])}"
    if isinstance(k, tuple) and len(k) == 3 and k[0] == "P":
        value = float.fromhex(k[2]) if k[1] == "float" else k[2]
        return f"Python {k[1]} {value!r}"
    if isinstance(k, tuple) and k and k[0] == "V":
        return f"variable {k[2]}{list(k[1])}{'' if k[3] else ' (not trainable)'}"
    if isinstance(k, tuple) and k and k[0] == "VA":
        return f"the variable of flat argument {k[1]} again"
    return repr(k)


class Function:
    """A Python function compiled to graph functions, one per input signature.

    >>> @df.defun
    ... def f(x):
    ...     return x * 2.0
    >>> f(df.constant([1., 2.]))   # traced once, then run from the compiled graph
    """

    def __init__(self, python_function, input_signature=None, name=None):
        if not callable(python_function):
            raise TypeError(f"defun expects a callable, got {type(python_function).__name__}")
        self.python_function = python_function
        self.name = name or getattr(python_function, "__name__", "function").replace("<lambda>", "lambda")
        functools.update_wrapper(self, python_function, updated=())
        self._lock = threading.RLock()
        self._cache = {}
        self._fast_cache = {}   # tuple of (shape, np dtype) per plain eager argument -> concrete
        self._last_key = None
        self.trace_count = 0
        try:
            self._signature = inspect.signature(python_function)
        except (TypeError, ValueError):
            self._signature = None
        params = list(self._signature.parameters.values()) if self._signature else []
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
            return "input_signature", self._check_signature(args, kwargs)
        args, kwargs = self._bind(args, kwargs)
        tensors = []
        key = (_encode(args, tensors, "args"), _encode(kwargs, tensors, "kwargs") if kwargs else None)
        return key, tensors

    def _check_signature(self, args, kwargs):
        # The signature covers the leading positional parameters; later parameters keep
        # their Python defaults (static), as in a plain call.
        if kwargs:
            raise TypeError(f"{self.name}: with an input_signature, pass tensors positionally "
                            f"(got keyword arguments {sorted(kwargs)})")
        sig = self._input_signature
        if len(args) != len(sig):
            raise TypeError(f"{self.name}: input_signature has {len(sig)} arguments, got {len(args)}")
        names = list(self._signature.parameters) if self._signature else []
        tensors = []
        for i, (a, spec) in enumerate(zip(args, sig)):
            argname = names[i] if i < len(names) else f"arg{i}"
            flat_a = flatten(a)
            flat_s = flatten(spec)
            if len(flat_a) != len(flat_s):
                raise TypeError(f"{self.name}: argument {argname!r} should have the structure of "
                                f"{spec!r}, got {a!r}")
            for x, s in zip(flat_a, flat_s):
                if isinstance(x, TensorSpec):   # get_concrete_function(TensorSpec(...))
                    if x.dtype is not s.dtype or not _fits(s.shape, x.shape):
                        raise ValueError(f"{self.name}: argument {argname!r} is {x!r}, which does "
                                         f"not fit input_signature {s!r}")
                    tensors.append(x)
                    continue
                if isinstance(x, Variable):
                    x = x.read_value()
                if not isinstance(x, Tensor):
                    try:
                        x = EagerTensor(to_array(x, s.dtype.np))
                    except (errors.InvalidArgumentError, TypeError) as e:
                        raise TypeError(f"{self.name}: argument {argname!r}: {e}") from None
                if x.dtype is not s.dtype:
                    raise TypeError(f"{self.name}: argument {argname!r} has dtype {x.dtype.name}, but "
                                    f"input_signature expects {s.dtype.name}")
                if not s.is_compatible_with(x):
                    raise ValueError(f"{self.name}: argument {argname!r} has shape {tuple(x.shape)}, "
                                     f"which does not fit input_signature shape {s.shape}")
                tensors.append(x)
        return tensors

    # ------------------------------------------------------------------ calling
    def __call__(self, *args, **kwargs):
        # Fast path: all arguments eager tensors, seen before. One tuple build + one dict hit
        # instead of binding and encoding (about 1.5 us saved per call).
        fast_key = None
        if not kwargs:
            try:
                fast_key = tuple([(a._value.shape, a._value.dtype) for a in args])
            except AttributeError:
                pass
            else:
                concrete = self._fast_cache.get(fast_key)
                if concrete is not None:
                    return concrete._call_flat(args)
        key, tensors = self._key_and_tensors(args, kwargs)
        concrete = self._cache.get(key)
        if concrete is None:
            concrete = self._trace_for(key, args, kwargs)
        if fast_key is not None and self._plain_arity == len(args) and \
                all(type(a) is EagerTensor for a in args):
            self._fast_cache[fast_key] = concrete
        return concrete._call_flat(tensors)

    def get_concrete_function(self, *args, **kwargs):
        """Trace (if needed) without running; returns the ConcreteFunction for these args.

        TensorSpec arguments stand for tensors of that shape/dtype.
        """
        if self._input_signature is not None:
            if args or kwargs:
                self._check_signature(args, kwargs)   # arguments must fit the signature
            key = "input_signature"
        else:
            tensors = []
            b_args, b_kwargs = self._bind(args, kwargs)
            key = (_encode(b_args, tensors, "args"), _encode(b_kwargs, tensors, "kwargs") if b_kwargs else None)
        concrete = self._cache.get(key)
        if concrete is None:
            concrete = self._trace_for(key, args, kwargs)
        return concrete

    def _trace_for(self, key, args, kwargs):
        with self._lock:
            concrete = self._cache.get(key)
            if concrete is not None:
                return concrete
            concrete = self._trace(args, kwargs)
            concrete._key = key
            self._cache[key] = concrete
            self.trace_count += 1
            if (self.trace_count > RETRACE_WARNING_THRESHOLD and self._last_key is not None
                    and isinstance(key, tuple)):
                warnings.warn(
                    f"defun {self.name!r} has been traced {self.trace_count} times; this call differs "
                    f"from the previous trace in {_describe_key_diff(self._last_key[0], key[0])}. "
                    f"Each trace is slow: pass tensors instead of changing Python values, or give "
                    f"input_signature with None sizes.", RetracingWarning, stacklevel=3)
            self._last_key = key
            return concrete

    def _trace(self, args, kwargs):
        graph = Graph(unique_name(self.name), outer=state.graph, base_name=self.name)
        with graph.building():
            if self._input_signature is not None:
                b_kwargs = {}
                b_args = tuple(pack_as(s, [graph.placeholder(x.shape, x.dtype) for x in flatten(s)])
                               for s in self._input_signature)
            else:
                b_args, b_kwargs = self._bind(args, kwargs)
                proxies = {}
                b_args = _substitute(b_args, graph, proxies)
                b_kwargs = _substitute(b_kwargs, graph, proxies)
            result = self.python_function(*b_args, **b_kwargs)
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
        return ConcreteFunction(graph, self, (b_args, b_kwargs), result, out_index, graph.name)

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
            fn = self.python_function

            def method(*args, **kwargs):
                return fn(ref(), *args, **kwargs)
            functools.update_wrapper(method, fn)
            if self._signature is not None:
                params = list(self._signature.parameters.values())[1:]
                method.__signature__ = self._signature.replace(parameters=params)
            bound = cache[instance] = Function(method, self._input_signature, self.name)
        return bound

    def __repr__(self):
        return f"<df.defun {self.name} traces={self.trace_count}>"


def _encode(value, tensors, path):
    """Cache-key part of one argument; appends its tensor leaves to `tensors`."""
    if isinstance(value, EagerTensor):
        if value.dtype is dtypes.resource:
            raise TypeError(f"{path}: pass the Variable itself, not its handle")
        tensors.append(value)
        v = value._value
        return (v.shape, v.dtype)
    if isinstance(value, SymbolicTensor):
        tensors.append(value)
        return (value.shape, value.dtype.np)
    if isinstance(value, TensorSpec):
        tensors.append(value)
        return (value.shape, value.dtype.np)
    if isinstance(value, (np.ndarray, np.generic)):
        t = EagerTensor(to_array(value))
        tensors.append(t)
        return (t._value.shape, t._value.dtype)
    if isinstance(value, Variable):
        # By shape and dtype, so one trace serves any such variable; a variable passed again
        # is keyed by its first position (aliasing matters when the function assigns).
        h = value.handle
        for k, t in enumerate(tensors):
            if t is h:
                return ("VA", k)
        tensors.append(h)
        return ("V", tuple(value.shape), value.dtype.name, value.trainable)
    if isinstance(value, dict):
        keys = tuple(sorted(value))
        return ("D", keys, tuple(_encode(value[k], tensors, f"{path}[{k!r}]") for k in keys))
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return ("N", type(value), tuple(_encode(v, tensors, f"{path}.{i}") for i, v in enumerate(value)))
    if isinstance(value, list):
        return ("L", tuple(_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(value)))
    if isinstance(value, tuple):
        return ("t", tuple(_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(value)))
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"defun argument {path} of type {type(value).__name__} is neither a tensor nor "
                        f"hashable, so it cannot be part of the trace cache key; pass a tensor or a "
                        f"hashable value") from None
    if type(value) is float:
        # by bits: nan equals itself (no retrace per call), 0.0 and -0.0 differ (1/x does)
        return ("P", "float", value.hex())
    return ("P", type(value).__name__, value)


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
    raise errors.TracingError(
        f"defun {fname!r} returned a {type(leaf).__name__} ({leaf!r:.60}) as output leaf {pos}; a "
        f"traced function may return tensors, numbers, None, and nested lists/tuples/dicts of them")


def defun(func=None, input_signature=None):
    """Compile `func` into graph functions traced per input signature.

    >>> @df.defun
    ... def loss(x, w):
    ...     return df.reduce_sum(df.tanh(x @ w))
    """
    if func is None:
        return lambda f: Function(f, input_signature)
    return Function(func, input_signature)
