"""The loaded function: a graph rebuilt from a document, callable on arrays or tensors.

This class runs the compiled plan (forward only) and needs nothing above the graph layer;
`df.load_json` gives its defun subclass, which also differentiates and nests in traces.
"""
from collections import namedtuple

import numpy as np

from defun.runtime import errors
from defun.runtime.shapes import shape_fits, shape_str
from defun.runtime.tensor import EagerTensor, ResourceHandle, Tensor, masked_array_error, to_array
from defun.graph.arguments import bind_arguments
from defun.graph.functions import plan_of
from defun.graph.passes import optimize
from defun.graph.printer import render_dot, to_dot
from defun.graph.serialize import budget
from defun.graph.serialize.schema import shape_doc
from defun.graph.serialize.export import output_names, to_document

InputSpec = namedtuple("InputSpec", "name shape dtype")


class LoadedFunction:
    """A function rebuilt from a graph document: call it on numpy arrays or tensors."""

    def __init__(self, graph, backend, input_names, output_structure, backward_depth=0):
        self.graph = graph
        self.backend = backend                  # a BudgetBackend (the budgets), or numpy for none
        self.output_structure = output_structure
        self.backward_depth = backward_depth    # levels of backward functions the document holds
        self._plan = plan_of(graph, backend)
        self._names = list(input_names)
        self._handles = graph.captured_values      # variable handles, fed after the arguments
        self._captured = [h._value for h in self._handles]

    @property
    def signature(self):
        """The arguments: [InputSpec(name, shape, dtype), ...]."""
        return [InputSpec(n, t.shape, t.dtype) for n, t in zip(self._names, self.graph.inputs)]

    @property
    def variables(self):
        """Current variable values by name (assignments in calls update them)."""
        return {s.name: s.value for s in self._captured}

    def optimized_graph(self):
        """The graph after the optimization passes (a defun of it would compile this)."""
        return optimize(self.graph)

    def plan_source(self, backend="numpy"):
        """The Python source of the plan of the optimized graph on `backend` (an installed
        backend's name); calls of this function run the graph as loaded, on its budgets."""
        return plan_of(self.graph, backend).source

    def to_document(self):
        """The document of this function (byte-identical to the loaded one if unchanged)."""
        return to_document(self.graph, self.output_structure, self._names, self.backward_depth)

    @property
    def output_names(self):
        """A name per flat output (the dict keys and namedtuple fields of what it returns;
        `output_k` where there is none), in the order of `graph.outputs`."""
        return output_names(self.output_structure, len(self.graph.outputs))

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._bind(args, kwargs)
        feed = self._arguments(args)
        saved = budget.start_call()
        try:
            results = self._plan.run(*feed, *self._captured)
        finally:
            budget.end_call(saved)
        return self._results(results)

    def _bind(self, args, kwargs):
        """Positional arguments from `args` and keyword arguments named as the parameters."""
        return bind_arguments(f"{self.graph.name}:", self._names, args, kwargs)

    def _arguments(self, args):
        """The arguments as arrays, checked against the signature."""
        params = self.graph.inputs
        if len(args) != len(params):
            raise errors.InvalidArgumentError(
                f"{self.graph.name}: expected {len(params)} arguments "
                f"({', '.join(self._names)}), got {len(args)}")
        return [self._argument(k, x, t) for k, (x, t) in enumerate(zip(args, params))]

    def _results(self, results):
        """The flat results (arrays, or eager tensors kept as they are), checked against the
        declared outputs, packed."""
        outs = []
        for k, (value, t) in enumerate(zip(results, self.graph.outputs)):
            tensor = value if isinstance(value, EagerTensor) else None
            arr = np.asarray(value._value if tensor is not None else value)
            if arr.dtype != t.dtype.np or not shape_fits(arr.shape, t.shape):
                raise errors.InvalidArgumentError(
                    f"{self.graph.name}: output {k} came out as {arr.dtype.name}{list(arr.shape)}, "
                    f"the document declares {t.dtype.name}{shape_doc(t.shape)}")
            outs.append(tensor if tensor is not None else EagerTensor(arr))
        return pack_outputs(self.output_structure, outs)

    def _argument(self, k, x, t):
        name = self._names[k]
        if hasattr(x, "_as_tensor") and not isinstance(x, Tensor):
            x = x._as_tensor()
        if isinstance(x, EagerTensor) and not isinstance(x, ResourceHandle):
            arr = x._value
        elif isinstance(x, Tensor):
            raise errors.InvalidArgumentError(
                f"{self.graph.name}: argument {k} ({name}) is a {type(x).__name__}; a loaded "
                f"function runs on values (numpy arrays or eager tensors)")
        elif isinstance(x, (np.ndarray, np.generic)):
            if isinstance(x, np.ma.MaskedArray):
                raise TypeError(f"{self.graph.name}: argument {k} ({name}): {masked_array_error()}")
            arr = np.array(x, copy=True)   # outputs may alias inputs: never the caller's buffer
            if arr.dtype.newbyteorder("=") == t.dtype.np:
                arr = arr.astype(t.dtype.np)     # another byte order (big-endian): the same values
        else:
            try:
                arr = to_array(x, t.dtype.np)
            except (TypeError, errors.InvalidArgumentError) as e:
                raise errors.InvalidArgumentError(
                    f"{self.graph.name}: argument {k} ({name}): {e}") from None
        if arr.dtype != t.dtype.np:
            raise errors.InvalidArgumentError(
                f"{self.graph.name}: argument {k} ({name}) has dtype {arr.dtype.name}, expected "
                f"{t.dtype.name}; convert it with .astype or df.cast")
        if not shape_fits(arr.shape, t.shape):
            raise errors.InvalidArgumentError(
                f"{self.graph.name}: argument {k} ({name}) has shape {shape_str(arr.shape)}, "
                f"expected {shape_str(t.shape)} (? is any size)")
        return arr

    def _repr_svg_(self):
        """The graph drawn as SVG for notebooks (inputs and outputs by name); None when
        Graphviz is not installed, so the notebook shows the text."""
        dot = to_dot(self.graph, input_names=self._names, output_names=self.output_names)
        try:
            return render_dot(dot, "svg").decode("utf-8")
        except RuntimeError:    # no graphviz package or no `dot` program
            return None

    def __repr__(self):
        args = ", ".join(f"{s.name}: {s.dtype.name}{shape_doc(s.shape)}" for s in self.signature)
        return f"<LoadedFunction {self.graph.name}({args})>"


_NAMEDTUPLES = {}      # (type name, fields) -> the class loaded functions return


def _namedtuple(name, fields):
    cls = _NAMEDTUPLES.get((name, fields))
    if cls is None:    # validated: identifiers, no keyword, no field starting with _
        cls = _NAMEDTUPLES.setdefault((name, fields), namedtuple(name, fields))
    return cls


def pack_outputs(s, outs):
    """Flat outputs `outs` in the structure `s` of a document's `output_structure`."""
    (key, value), = s.items()
    if key == "none":
        return None
    if key == "output":
        return outs[value]
    if key == "list":
        return [pack_outputs(v, outs) for v in value]
    if key == "tuple":
        return tuple(pack_outputs(v, outs) for v in value)
    if key == "namedtuple":
        fields = value["fields"]
        cls = _namedtuple(value["name"], tuple(f for f, _ in fields))
        return cls(*[pack_outputs(v, outs) for _, v in fields])
    return {k: pack_outputs(v, outs) for k, v in value}

