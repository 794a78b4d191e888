"""`df.export_numpy_source`: a traced or loaded function as a Python module needing only numpy."""
from defun.runtime.files import write_atomically
from defun.graph.numpy_source import module_source
from defun.graph.serialize import LoadedFunction
from defun.export import _input_names
from defun.function import ConcreteFunction, Function
from defun.graph_function import GraphFunction

__all__ = ["export_numpy_source"]


def export_numpy_source(function, path=None, include_backward=False):
    """The source of one Python module computing `function` with numpy alone (also
    written to `path` when given). Constants and variables (frozen at their current values)
    are in it; results equal the graph's bit for bit.

    `forward(*inputs)` returns the list of outputs; with `include_backward=True` the module
    also has `forward_with_side_outputs(*inputs) -> (outputs, side_outputs)` and
    `backward(output_gradients, side_outputs)` -> one gradient per input (None if
    unconnected). `function` is a ConcreteFunction or a function from `df.load_json`.

    >>> cf = predict.get_concrete_function(df.TensorSpec([None, 64], df.float32))
    >>> df.export_numpy_source(cf, "predict.py")
    >>> import predict; predict.forward(x)      # no defun needed
    """
    if isinstance(function, Function):
        raise TypeError("export_numpy_source takes a ConcreteFunction: call "
                        "f.get_concrete_function(*example_args) and export that")
    if isinstance(function, ConcreteFunction):
        graph, names = function.graph, _input_names(function)
    elif isinstance(function, LoadedFunction):
        graph, names = function.graph, [s.name for s in function.signature]
    else:
        raise TypeError(f"export_numpy_source expects a ConcreteFunction or a loaded function, "
                        f"got {type(function).__name__}")
    backward = GraphFunction.of(graph)._backward_pair() if include_backward else None
    text = module_source(graph, names, backward)
    if path is not None:
        write_atomically(path, text.encode("utf-8"))
    return text
