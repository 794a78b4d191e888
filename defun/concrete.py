"""ConcreteFunction: one trace of a defun, its calling convention and structured outputs
(what a call of it runs, in each of its call states: TraceCalls, defun/trace_calls.py).

Also what a trace can tell about itself: the tensors a call under a tape saves for the
backward (`side_outputs()`, rows printed as a table), its backward function
(`backward_function()`), its graph drawn (`to_dot()`, `to_networkx()`), and the global and
closure names whose tensors or variables it captured, checked at each call
(`StaleCaptureWarning`).
"""
import collections
import inspect
import warnings
import weakref

import numpy as np

from defun.runtime import sites
from defun.runtime.nest import flatten, make_packer, pack_as
from defun.runtime.shapes import shape_fits, shape_str
from defun.runtime.tensor import Tensor
from defun.runtime.variables import _BY_HANDLE, SymbolicVariable, Variable
from defun.graph.nodes import SymbolicTensor
from defun.graph.printer import render_dot, to_dot, to_networkx
from defun.graph.serialize import describe_structure, output_names
from defun.graph.backends import DEFAULT_BACKEND
from defun.graph.functions import plan_of
from defun.graph.passes import optimize
from defun.cache_key import CacheKey
from defun.graph_function import GraphFunction
from defun.trace_calls import MISS, TraceCalls
from defun.spec import TensorSpec

__all__ = ["ConcreteFunction", "SideOutput", "SideOutputs", "StaleCaptureWarning", "MISS"]

# graph name -> graph of every trace alive, so a report that sees a call by its name (an
# execution callback) finds the function it ran (names are unique in a process)
TRACED_GRAPHS = weakref.WeakValueDictionary()


class StaleCaptureWarning(UserWarning):
    """A global or closure name a trace captured now names another tensor or variable."""


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


class ConcreteFunction:
    """One trace of a defun: a graph with typed inputs, captures and structured outputs."""

    def __init__(self, graph, function, arg_structure, out_structure, out_index, name,
                 backend=DEFAULT_BACKEND, rematerialize=False):
        self.graph = graph
        self._fn = GraphFunction.of(graph, backend, rematerialize)
        self._arg_structure = arg_structure   # (args, kwargs) with placeholders in tensor leaves
        self._out_structure = out_structure   # structure with leaves
        self._out_index = out_index           # per leaf: index into graph.outputs or None
        self._function = function
        self._key = None          # the cache key it was traced for (set by Function)
        self.name = name
        self._captured = graph.captured_values   # fixed once the trace is finalized
        self._watched = ()      # (namespace, name, tensor or variable, use site) checked per call
        TRACED_GRAPHS[graph.name] = graph
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
        # one tensor returned as such: the eager runner returns it without packing
        self._single = sources == [0] and not isinstance(out_structure, (list, tuple, dict))
        self._calls = TraceCalls(self)    # its call states: what a call runs (defun/trace_calls.py)

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

    def __call__(self, *args, **kwargs):
        key = None
        if self._function is not None:
            key, tensors = self._function._key_and_tensors(args, kwargs)
        else:
            tensors = [t for t in flatten((args, kwargs))]
        if isinstance(key, CacheKey) and isinstance(self._key, CacheKey) and key != self._key:
            misfits = key.misfits(self._key, self.graph.inputs)
            if misfits:
                static = key.static_part() != self._key.static_part()
                raise (TypeError if static else ValueError)(
                    f"{self.name}: this concrete function was traced for other arguments "
                    f"({'; '.join(misfits)}); call the defun itself, or get_concrete_function "
                    f"for these arguments")
            return self._calls.call(tensors)
        if len(tensors) != len(self.graph.inputs):
            raise TypeError(f"{self.name}: expected {len(self.graph.inputs)} tensor arguments, got {len(tensors)}")
        misfits = [f"tensor argument {k} has {t.dtype.name}{shape_str(t.shape)}, the trace takes "
                   f"{p.dtype.name}{shape_str(p.shape)}"
                   for k, (t, p) in enumerate(zip(tensors, self.graph.inputs))
                   if t.dtype is not p.dtype or not shape_fits(t.shape, p.shape)]
        if misfits:
            raise ValueError(f"{self.name}: {'; '.join(misfits)}")
        return self._calls.call(tensors)

    # ------------------------------------------------------------------ side outputs
    def side_outputs(self):
        """What a call under a tape saves for the backward: one SideOutput row per tensor.

        >>> print(cf.side_outputs())     # a table: name, producer, line, shape, dtype, bytes
        """
        backward = self._fn.backward()
        return SideOutputs([side_output_row(t, self.name) for t in backward.side_outputs])

    def backward_function(self):
        """The backward function a gradient of a call runs, and how it is fed: a
        BackwardFunction (graph, forward, side_outputs, capture_sources).

        >>> bf = cf.backward_function()
        >>> print(bf.graph)                 # the backward graph
        >>> bf.capture_sources              # [('input', 0), ('side', 0), ...]
        """
        bw = self._fn.backward()
        return BackwardFunction(bw.graph, bw.forward, list(bw.side_outputs), list(bw.capture_sources))

    # ------------------------------------------------------------------ stale captures
    def _watch(self, watched):
        """Check at every call that these names (namespace, name, the tensor or variable it
        named, use site) still name it. Only a trace that has such names pays for the
        check: its calls move to WATCHED (defun/trace_calls.py)."""
        self._watched = tuple(watched)
        if self._watched:
            self._calls.watch(self._watched)

    def _unwatch(self):
        self._watched = ()
        self._calls.unwatch()

    def _check_stale(self):
        """Warn (once per function) for the first name that now names another tensor or variable."""
        for where, name, named, used_at in self._watched:
            now = _named_value(where, name)
            if now is not named and isinstance(now, (Tensor, Variable)):
                self._warn_stale(where, name, now, used_at)
                return

    def _warn_stale(self, where, name, now, used_at):
        fn = self._function
        what = "variable" if isinstance(now, Variable) else "tensor"
        kind = "global" if type(where) is dict else "closure"
        line = sites.source_line(used_at)
        here = sites.user_site()
        message = (f"defun {fn.name!r}: the {kind} name {name!r} names another {what} than when "
                   f"the function was traced (used at {sites.format_site(used_at)}"
                   f"{': ' + line if line else ''}); the trace keeps using the old one. Pass it as "
                   f"an argument, or assign to a df.Variable instead of rebinding the name.")
        # once per function: every trace of it stops checking
        with fn._lock:
            fn._stale_warned = True
            for concrete in list(fn._cache.values()):
                concrete._unwatch()
        warnings.warn_explicit(message, StaleCaptureWarning, *(here or ("<unknown>", 0)))

    # ------------------------------------------------------------------ what runs
    def optimized_graph(self):
        """The graph after the optimization passes: what the plans compile.

        >>> print(cf.optimized_graph())    # calls inlined, constants folded, dead code gone
        """
        return optimize(self.graph)

    def plan_source(self, backend=DEFAULT_BACKEND):
        """The Python source of the compiled plan a call runs on `backend` (an installed
        backend's name, df.backends()): one line per node of the optimized graph.

        >>> print(cf.plan_source())             # numpy: one kernel call per node
        >>> print(cf.plan_source("numba"))      # fused regions: one call per region
        """
        return plan_of(self.graph, backend).source

    def __str__(self):
        return str(self.graph)

    # ------------------------------------------------------------------ pictures
    def to_dot(self, backward=False):
        """Graphviz DOT text of the graph, inputs and outputs by name; with `backward`, the
        backward function drawn beside it (render with `dot -Tsvg`).

        >>> open("f.dot", "w").write(cf.to_dot(backward=True))
        """
        return to_dot(self.graph, self._fn.backward() if backward else None,
                      input_names=input_names(self), output_names=output_names_of(self))

    def to_networkx(self):
        """The graph as a networkx MultiDiGraph: a vertex per node (attrs op, label, outputs),
        an edge per data or control dependency (attr kind)."""
        return to_networkx(self.graph)

    def _repr_svg_(self):
        """The graph drawn as SVG, for notebooks; None when Graphviz is not installed."""
        try:
            return render_dot(self.to_dot(), "svg").decode("utf-8")
        except RuntimeError:    # no graphviz package or no `dot` program: show the text
            return None

    def __repr__(self):
        return f"<ConcreteFunction {self.name} inputs={[(t.shape, t.dtype.name) for t in self.graph.inputs]}>"


def output_names_of(concrete):
    """A name per output: a returned dict's keys, `output_0` for a lone tensor (as exported)."""
    out_index = [k if type(k) is int else None for k in concrete._out_index]
    return output_names(describe_structure(concrete._out_structure, out_index), len(concrete.graph.outputs))


def input_names(concrete):
    """A name per argument placeholder: the parameter name, with a path for nested leaves."""
    args, kwargs = concrete._arg_structure
    fn = concrete._function.python_function if concrete._function is not None else None
    try:
        params = list(inspect.signature(fn).parameters) if fn is not None else []
    except (TypeError, ValueError):
        params = []

    def is_input(x):
        return isinstance(x, (SymbolicTensor, SymbolicVariable))

    names = []
    for i, a in enumerate(args):
        base = params[i] if i < len(params) else f"arg{i}"
        leaves = [x for x in flatten(a) if is_input(x)]
        names += [base] if len(leaves) == 1 and is_input(a) else \
            [f"{base}_{k}" for k in range(len(leaves))]
    for k in sorted(kwargs):
        leaves = [x for x in flatten(kwargs[k]) if is_input(x)]
        names += [k] if len(leaves) == 1 and is_input(kwargs[k]) else \
            [f"{k}_{j}" for j in range(len(leaves))]
    if len(names) != len(concrete.graph.inputs):
        names = [f"arg{i}" for i in range(len(concrete.graph.inputs))]
    return names


def _named_value(where, name):
    """The object a global (`where` is the globals dict) or closure cell name refers to now."""
    if type(where) is dict:
        return where.get(name)
    try:
        return where.cell_contents
    except ValueError:      # an empty cell: the name was deleted
        return None


class BackwardFunction(collections.namedtuple(
        "BackwardFunction", "graph forward side_outputs capture_sources")):
    """A concrete function's backward (`cf.backward_function()`).

    graph: the backward graph: one gradient input per floating output, then its captures.
    forward: the forward with side outputs, the graph a call under a tape runs: the
        outputs, then `side_outputs`.
    side_outputs: the forward tensors the backward reads (tensors of `forward`).
    capture_sources: per capture of `graph`, where its value comes from: ("input", k) the
        function's k-th input, ("side", j) side output j, ("value", v) an outer value.
    """

    __slots__ = ()


# ---------------------------------------------------------------------------------------
# Side outputs as rows and a table

class SideOutput(collections.namedtuple(
        "SideOutput", "name producer line shape dtype bytes function source")):
    """One saved tensor: its name in the forward graph, the producing op, the user's line
    (`file:line`), shape, dtype, bytes (None for an unknown size), the function saving it
    and the text of the line."""

    __slots__ = ()


def side_output_row(t, function, value=None):
    """The SideOutput row of forward tensor `t` of `function`; `value` (an array) gives the
    actual shape and size, else they come from the static shape."""
    node = t.node
    # a node running functions (call, cond, while) is named with them, as the listing does
    funcs = [f"{k}={_function_names(node.attrs.get(k))}" for k in sorted(node.op.function_attrs)]
    producer = node.op.name + (" {" + ", ".join(funcs) + "}" if funcs else "")
    if len(node.outputs) > 1:
        producer += f" output {t.index}"
    if value is not None:
        shape, nbytes = tuple(value.shape), int(value.nbytes)
    else:
        shape = tuple(t.shape)
        nbytes = None if None in shape else int(np.prod(shape, dtype=np.int64)) * t.dtype.np.itemsize
    return SideOutput(t.name, producer, sites.format_site(node.site) if node.site else "",
                      shape, t.dtype.name, nbytes, function, sites.source_line(node.site))


def _function_names(v):
    if isinstance(v, tuple):
        return "(" + ", ".join(_function_names(g) for g in v) + ")"
    return f"@{v.name}" if getattr(v, "is_function_graph", False) else repr(v)


class SideOutputs(list):
    """SideOutput rows; `print` shows them as a table with the total (`total_bytes`).

    `calls`: how many recorded calls saved them (a whole step's report), or None for one
    function's side outputs, whose table leaves out the function column.
    """

    def __init__(self, rows=(), calls=None):
        super().__init__(rows)
        self.calls = calls

    @property
    def total_bytes(self):
        """Bytes of the rows of known size."""
        return sum(r.bytes for r in self if r.bytes is not None)

    def __str__(self):
        header = ["name", "producer", "line", "shape", "dtype", "bytes"]
        rows = [[r.name, r.producer, r.line, shape_str(r.shape), r.dtype,
                 "?" if r.bytes is None else f"{r.bytes:,}", _clip(r.source)] for r in self]
        if self.calls is not None:
            header = ["function"] + header
            rows = [[r.function] + row for r, row in zip(self, rows)]
        header.append("source")
        widths = [max([len(h)] + [len(row[k]) for row in rows]) for k, h in enumerate(header)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                 for row in [header] + rows]
        unknown = sum(r.bytes is None for r in self)
        total = (f"total: {len(self)} side output{'' if len(self) == 1 else 's'}, "
                 f"{self.total_bytes:,} bytes")
        if unknown:
            total += f" and {unknown} of unknown size"
        if self.calls is not None:
            total += f", saved by {self.calls} recorded call{'' if self.calls == 1 else 's'}"
        return "\n".join(lines + [total])

    def __repr__(self):
        return f"<SideOutputs: {len(self)} rows, {self.total_bytes} bytes>"


def _clip(text, width=48):
    return text if len(text) <= width else text[:width - 3] + "..."
