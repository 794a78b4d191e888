"""The loaded function: a graph rebuilt from a document, callable on arrays or tensors.

This class runs the compiled plan (forward only) and needs nothing above the graph layer;
`df.load_json` gives its defun subclass, which also differentiates and nests in traces.
"""
from collections import namedtuple

import numpy as np

from defun.runtime import errors
from defun.runtime.shapes import shape_fits, shape_str
from defun.runtime.tensor import EagerTensor, ResourceHandle, Tensor, to_array
from defun.graph.functions import plan_of
from defun.graph.serialize import budget
from defun.graph.serialize.schema import _shape_doc
from defun.graph.serialize.export import to_document

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

    def to_document(self):
        """The document of this function (byte-identical to the loaded one if unchanged)."""
        return to_document(self.graph, self.output_structure, self._names, self.backward_depth)

    def __call__(self, *args):
        feed = self._arguments(args)
        saved = budget.start_call()
        try:
            results = self._plan.run(*feed, *self._captured)
        finally:
            budget.end_call(saved)
        return self._results(results)

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
                    f"the document declares {t.dtype.name}{_shape_doc(t.shape)}")
            outs.append(tensor if tensor is not None else EagerTensor(arr))
        return _pack(self.output_structure, outs)

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
            arr = np.array(x, copy=True)   # outputs may alias inputs: never the caller's buffer
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

    def __repr__(self):
        args = ", ".join(f"{s.name}: {s.dtype.name}{_shape_doc(s.shape)}" for s in self.signature)
        return f"<LoadedFunction {self.graph.name}({args})>"


def _pack(s, outs):
    (key, value), = s.items()
    if key == "none":
        return None
    if key == "output":
        return outs[value]
    if key == "list":
        return [_pack(v, outs) for v in value]
    if key == "tuple":
        return tuple(_pack(v, outs) for v in value)
    return {k: _pack(v, outs) for k, v in value}

