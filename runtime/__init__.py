"""runtime: everything eager, and the op table: dtypes, shapes and tensors; the op registry
and its rows, one module per op family (runtime/ops); `run_op`, the one dispatch point; the
tape, reverse and forward mode; variables, optimizers and checkpoints. It knows nothing of
graphs or tracing (docs/architecture.md has the module map)."""
