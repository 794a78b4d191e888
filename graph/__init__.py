"""graph: the IR, graph-level gradients, the compiled executor, passes, JSON export/import."""
