"""ConcreteFunction: one trace of a defun, its calling convention and structured outputs."""
from runtime.nest import flatten, make_packer, pack_as
from runtime.shapes import shape_fits, shape_str
from runtime.variables import _BY_HANDLE
from graph.ir import SymbolicTensor
from graph.printer import render_dot, to_dot
from graph.backends import DEFAULT_BACKEND
from defun.cache_key import CacheKey
from defun.graph_function import GraphFunction
from defun.spec import TensorSpec

__all__ = ["ConcreteFunction"]


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
                isinstance(key, CacheKey) and key.static_part() != self._key.static_part():
            raise TypeError(f"{self.name}: this concrete function was traced for other Python "
                            f"arguments or variables ({key.describe_change(self._key)}); call the "
                            f"defun itself, or get_concrete_function for these arguments")
        if len(tensors) != len(self.graph.inputs):
            raise TypeError(f"{self.name}: expected {len(self.graph.inputs)} tensor arguments, got {len(tensors)}")
        for k, (t, p) in enumerate(zip(tensors, self.graph.inputs)):
            if t.dtype is not p.dtype or not shape_fits(t.shape, p.shape):
                raise ValueError(f"{self.name}: tensor argument {k} has {t.dtype.name}{shape_str(t.shape)}, "
                                 f"this concrete function takes {p.dtype.name}{shape_str(p.shape)}")
        return self._call_flat(tensors)

    def __str__(self):
        return str(self.graph)

    def _repr_svg_(self):
        """The graph drawn as SVG, for notebooks; None when Graphviz is not installed."""
        try:
            return render_dot(to_dot(self.graph), "svg").decode("utf-8")
        except RuntimeError:    # no graphviz package or no `dot` program: show the text
            return None

    def __repr__(self):
        return f"<ConcreteFunction {self.name} inputs={[(t.shape, t.dtype.name) for t in self.graph.inputs]}>"
