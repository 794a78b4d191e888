"""The numpy-source exporter: a function graph as a Python module that needs only numpy.

Three steps, one module each:
- `reader`: reads this library's own source (the def behind a kernel, the global names it
  uses) so a kernel can be written out as it runs;
- `writer`: `SourceWriter` writes those kernels and what they use as standalone code;
- `module`: `module_source(graph, ...)` writes the whole module (one function per graph
  function, one line per node of its plan, variables as module-level cells).
"""
from defun.graph.numpy_source.module import module_source

__all__ = ["module_source"]
