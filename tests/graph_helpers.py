"""Helpers shared by the graph-level tests."""
import textwrap

import defun as df
from defun.graph.ir import Graph

F32, F64, I32 = df.float32, df.float64, df.int32


def build(name, types, fn):
    """A finalized graph `name` with placeholders of `types` [(shape, dtype)], outputs fn(*args)."""
    g = Graph(name)
    with g.building():
        args = [g.placeholder(s, d) for s, d in types]
        out = fn(*args)
    return g.finalize(list(out) if isinstance(out, (list, tuple)) else [out])


def golden(text):
    return textwrap.dedent(text).strip()
