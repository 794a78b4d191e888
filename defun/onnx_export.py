"""`df.export_onnx`: a traced (or loaded) function as an ONNX model (the `[onnx]` extra)."""
from defun.runtime.files import write_atomically
from defun.graph.onnx_export import MIN_OPSET, to_onnx
from defun.graph.serialize import output_names
from defun.export import _function_parts

__all__ = ["export_onnx"]


def export_onnx(fn, path=None, opset=MIN_OPSET):
    """`fn` (a ConcreteFunction, or df.load_json's result) as a checked onnx.ModelProto,
    also written to `path` if given. Variables become initializers holding their current
    value, `df.cond` an `If`, `df.while_loop` and `df.scan`/`map_fn`/`foldl` a `Loop`; None
    sizes are symbolic dims; inputs are named by the function's parameters, outputs by the
    keys and fields of what it returns (`output_k` where there is none). Exporting runs
    nothing; an op with no ONNX form
    (or a variable assignment) raises df.errors.UnimplementedError naming it.

    >>> cf = predict.get_concrete_function(df.TensorSpec([None, 64], df.float32))
    >>> model = df.export_onnx(cf, "predict.onnx")
    >>> onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": batch})
    """
    graph, inputs, structure = _function_parts(fn, "export_onnx")
    outputs = output_names(structure, len(graph.outputs))
    model = to_onnx(graph, graph.captured_values, inputs, outputs, opset=opset,
                    doc_string=f"{graph.base_name}, exported by defun")
    if path is not None:
        write_atomically(path, model.SerializeToString())
    return model
