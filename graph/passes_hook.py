"""The optimization pipeline used before compiling (kept tiny so the executor stays simple)."""

__all__ = ["optimize_for_execution"]


def optimize_for_execution(graph):
    """Run the default passes; falls back to the graph itself when none are available."""
    try:
        from graph.passes import optimize
    except ImportError:
        return graph
    return optimize(graph)
