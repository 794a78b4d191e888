"""`df.export_numpy_source`: a traced or loaded function as a Python module needing only numpy."""
from defun.runtime.files import write_atomically
from defun.graph.numpy_source import module_source
from defun.graph.serialize import output_names
from defun.export import _function_parts
from defun.graph_function import GraphFunction

__all__ = ["export_numpy_source"]


def export_numpy_source(function, path=None, include_backward=False):
    """The source of one Python module computing `function` with numpy alone (also
    written to `path` when given). Constants and variables (frozen at their current values)
    are in it; results equal the graph's bit for bit.

    `forward(*inputs)` (by position or by the input names, `INPUT_NAMES`) returns the list
    of outputs named in `OUTPUT_NAMES` (the keys and fields of what the function returns);
    with `include_backward=True` the module also has `forward_with_side_outputs(*inputs) -> (outputs, side_outputs)` and
    `backward(output_gradients, side_outputs)` -> one gradient per input (None if
    unconnected). `function` is a ConcreteFunction or a function from `df.load_json`.

    >>> cf = predict.get_concrete_function(df.TensorSpec([None, 64], df.float32))
    >>> df.export_numpy_source(cf, "predict.py")
    >>> import predict; predict.forward(x)      # no defun needed
    """
    graph, names, structure = _function_parts(function, "export_numpy_source")
    backward = GraphFunction.of(graph)._backward_pair() if include_backward else None
    text = module_source(graph, names, backward, output_names(structure, len(graph.outputs)))
    if path is not None:
        write_atomically(path, text.encode("utf-8"))
    return text
