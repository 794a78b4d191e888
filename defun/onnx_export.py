"""`df.export_onnx`: a traced (or loaded) function as an ONNX model (the `[onnx]` extra)."""
from defun.runtime.files import write_atomically
from defun.graph.onnx_export import MIN_OPSET, to_onnx
from defun.graph.serialize import LoadedFunction, describe_structure
from defun.export import _input_names
from defun.function import ConcreteFunction, Function

__all__ = ["export_onnx"]


def _output_names(structure, n):
    """A name per flat output from an `output_structure` description: `output` for a lone
    tensor, then a suffix per level: the position in a list or tuple of several, the key of a
    dict (`(y, {"a": z})` gives `output_0`, `output_1_a`)."""
    names = {}

    def walk(s, path):
        (kind, value), = s.items()
        if kind == "output":
            names.setdefault(value, "_".join(["output"] + path))
        elif kind in ("list", "tuple"):
            for k, v in enumerate(value):
                walk(v, path + [str(k)] if len(value) > 1 else path)
        elif kind == "dict":
            for k, v in value:
                walk(v, path + [str(k)])
    walk(structure, [])
    return [names.get(k, f"output_{k}") for k in range(n)]


def export_onnx(fn, path=None, opset=MIN_OPSET):
    """`fn` (a ConcreteFunction, or df.load_json's result) as a checked onnx.ModelProto,
    also written to `path` if given. Variables become initializers holding their current
    value, `df.cond` an `If`, `df.while_loop` and `df.scan`/`map_fn`/`foldl` a `Loop`; None
    sizes are symbolic dims; inputs are named by the function's parameters. Exporting runs nothing; an op with no ONNX form
    (or a variable assignment) raises df.errors.UnimplementedError naming it.

    >>> cf = predict.get_concrete_function(df.TensorSpec([None, 64], df.float32))
    >>> model = df.export_onnx(cf, "predict.onnx")
    >>> onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": batch})
    """
    if isinstance(fn, Function):
        raise TypeError("export_onnx takes a ConcreteFunction: call f.get_concrete_function(*example_args) "
                        "(or with df.TensorSpec arguments) and export that")
    if isinstance(fn, ConcreteFunction):
        graph, captured = fn.graph, fn.graph.captured_values
        inputs = _input_names(fn)
        out_index = [k if type(k) is int else None for k in fn._out_index]
        structure = describe_structure(fn._out_structure, out_index)
    elif isinstance(fn, LoadedFunction):
        graph, captured = fn.graph, fn.graph.captured_values
        inputs = [s.name for s in fn.signature]
        structure = fn.output_structure
    else:
        raise TypeError(f"export_onnx expects a ConcreteFunction or a loaded function (df.load_json), "
                        f"got {type(fn).__name__}")
    outputs = _output_names(structure, len(graph.outputs))
    model = to_onnx(graph, captured, inputs, outputs, opset=opset,
                    doc_string=f"{graph.base_name}, exported by defun")
    if path is not None:
        write_atomically(path, model.SerializeToString())
    return model
