"""runtime: dtypes, eager tensors, the op registry, execute, the tape, variables."""
