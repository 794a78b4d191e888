"""`df.export_json` / `df.load_json`: a traced function as a versioned JSON document.

With `include_backward=k` the document also holds the function's backward function (its
Backward record, graph/gradients.py: side outputs, how to feed it, which output is which
input's gradient), and that function's own backward, k levels deep. A loaded function is a
GraphFunction like a traced one, with the document's records installed as its backward:
eagerly it runs its plan, inside a trace it is one call node, under a tape one recorded op
whose gradient runs the document's backward function.
"""
from defun.runtime import errors
from defun.runtime.context import state
from defun.runtime.tensor import EagerTensor
from defun.runtime.variables import Variable
from defun.graph.functions import call_graph
from defun.graph.ir import Graph
from defun.graph import serialize
from defun.graph.serialize import budget, describe_structure, from_document, to_document, write_document
from defun.concrete import _Static, input_names as _input_names
from defun.function import ConcreteFunction, Function
from defun.graph_function import GraphFunction

__all__ = ["export_json", "load_json", "LoadedFunction"]


def _function_parts(fn, what):
    """(graph, input names, output structure) of a ConcreteFunction or a loaded function:
    what the numpy and ONNX exports name their inputs and outputs by."""
    if isinstance(fn, Function):
        raise TypeError(f"{what} takes a ConcreteFunction: call f.get_concrete_function(*example_args) "
                        f"(or with df.TensorSpec arguments) and export that")
    if isinstance(fn, ConcreteFunction):
        graph, out_index = _returning_variable_values(fn)
        return graph, _input_names(fn), describe_structure(fn._out_structure, out_index)
    if isinstance(fn, serialize.LoadedFunction):
        return fn.graph, [s.name for s in fn.signature], fn.output_structure
    raise TypeError(f"{what} expects a ConcreteFunction or a loaded function (df.load_json), "
                    f"got {type(fn).__name__}")


def _backward_depth(include_backward):
    if include_backward is True or include_backward is False:
        return int(include_backward)
    if isinstance(include_backward, int) and include_backward >= 0:
        return include_backward
    raise ValueError(f"export_json: include_backward must be True, False or the number of backward "
                     f"levels to include (an int >= 0), got {include_backward!r}")


def _returning_variable_values(cf):
    """(graph, flat output index per leaf, None for a leaf that is no output): `cf.graph`
    unless the function returns variables; then a graph calling it and reading each returned
    variable after the call (every export gives a variable as its value, as TensorFlow
    returns it)."""
    out_index = [k if type(k) is int else None for k in cf._out_index]
    variables = [k.value for k in cf._out_index if type(k) is _Static and isinstance(k.value, Variable)]
    if not variables:
        return cf.graph, out_index
    g = cf.graph
    outer = Graph(g.name, base_name=g.base_name)
    with outer.building():
        args = [outer.placeholder(t.shape, t.dtype) for t in g.inputs]
        outs = call_graph(g, args + g.captured_values)
        reads = [v.read_value() for v in variables]
    outer.finalize(outs + reads)
    read_of = {id(v): len(outs) + j for j, v in enumerate(variables)}
    return outer, [read_of.get(id(k.value)) if type(k) is _Static else k for k in cf._out_index]


def export_json(concrete_function, path=None, include_backward=False, sites=True):
    """The graph of `concrete_function` as a JSON-ready dict; also written to `path` if given.

    Variables are frozen at their current value; the same function gives the same bytes. A
    function returning a variable exports its value (read after the function ran).
    `include_backward=True` (or k, a number of levels) adds the backward function, so the
    loaded function is differentiable from the document alone (k = 2: second order too).
    Each node carries its source line as `"site": [base name, line]` (never the file's
    directories), which `defun dot/show/view F.json` show; `sites=False` leaves them out.

    >>> cf = predict.get_concrete_function(df.TensorSpec([None, 64], df.float32))
    >>> df.export_json(cf, "predict.json", include_backward=True)
    """
    if isinstance(concrete_function, Function):
        raise TypeError("export_json takes a ConcreteFunction: call f.get_concrete_function(*example_args) "
                        "(or with df.TensorSpec arguments) and export that")
    if not isinstance(concrete_function, ConcreteFunction):
        raise TypeError(f"export_json expects a ConcreteFunction, got {type(concrete_function).__name__}")
    depth = _backward_depth(include_backward)
    cf = concrete_function
    names = _input_names(cf)
    for name, t in zip(names, cf.graph.inputs):
        if t.dtype.name == "resource":
            raise TypeError(f"export_json: argument {name!r} of {cf.name} is a variable; an exported "
                            f"function takes tensors only. Use the variable from the enclosing scope "
                            f"instead of passing it (captured variables export their current value)")
    graph, out_index = _returning_variable_values(cf)
    structure = describe_structure(cf._out_structure, out_index)
    fn = GraphFunction.of(graph, cf._fn.backend)
    for _ in range(depth):       # each level's Backward, kept in graph.derived (to_document reads it)
        fn = GraphFunction.of(fn.backward().graph, fn.backend)
    doc = to_document(graph, structure, names, backward=depth, sites=bool(sites))
    if path is not None:
        write_document(doc, path)
    return doc


class LoadedFunction(serialize.LoadedFunction):
    """A loaded document, callable eagerly, inside a defun (a call node) and under a tape.

    Gradients come from the document's backward functions where it holds them
    (`export_json(..., include_backward=k)`), and beyond those from the op registry's
    gradient rules, as for any traced function. Its budgets apply to its own calls and to
    the gradients they record; inside a defun it becomes part of that function.
    """

    @classmethod
    def of(cls, loaded):
        self = cls.__new__(cls)
        self.__dict__.update(loaded.__dict__)
        self._fn = GraphFunction.of(self.graph, self.backend)
        return self

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._bind(args, kwargs)
        if state.graph is not None:      # tracing: one call node (its function is exported with the caller)
            params = self.graph.inputs
            if len(args) != len(params):
                raise errors.InvalidArgumentError(
                    f"{self.graph.name}: expected {len(params)} arguments ({', '.join(self._names)}), "
                    f"got {len(args)}")
            outs = self._fn.call_flat(list(args) + self._handles)
            return serialize.loaded.pack_outputs(self.output_structure, outs)
        feed = self._arguments(args)
        tensors = [x if isinstance(x, EagerTensor) and x._value is a else EagerTensor(a)
                   for x, a in zip(args, feed)]
        saved = budget.start_call()
        try:
            outs = self._fn.call_flat(tensors + self._handles)
        finally:
            budget.end_call(saved)
        return self._results(outs)


def load_json(path_or_dict, backend="numpy", max_bytes=budget.DEFAULT_MAX_BYTES,
              max_iterations=budget.DEFAULT_MAX_ITERATIONS, max_operations=budget.DEFAULT_MAX_OPERATIONS):
    """A callable running an exported graph on numpy arrays or tensors (no Python code needed).

    Its calls refuse to hold more than `max_bytes` of computed values at once (kernels'
    scratch memory included), stop a `while` loop after `max_iterations` iterations and a
    call after `max_operations` operations (across its calls and loops), raising
    df.errors.ResourceExhaustedError (None: no limit; the defaults, 1 GiB, 100,000 and
    10**10, suit documents you did not write).
    `backend` names the installed backend its plans run on (df.backends()), with the same
    budgets: "numba"'s fused loops are metered where each starts, from its input shapes.
    Call it by position or by the input names (`.signature`); it returns the structure the
    traced function returned (dicts and namedtuples with their names: `.output_names`).

    >>> predict = df.load_json("predict.json")
    >>> predict(np.ones((2, 64), np.float32))
    >>> predict(x=np.ones((2, 64), np.float32))["probs"]
    """
    return LoadedFunction.of(from_document(path_or_dict, max_bytes, max_iterations, backend, max_operations))

