"""graph: function graphs and what is done with them: the IR (nodes, the tracer, graphs),
verification and passes, gradients of functions and the function and loop ops, the
executor and its backends (numpy, numba), batching, and the exports (JSON, numpy source,
ONNX). It knows nothing of Python functions or decorators (docs/architecture.md has the
module map)."""
