"""JSON export and import of function graphs: a versioned, canonical, validated document.

    doc = to_document(graph)                 # JSON-ready dict        (export.py)
    write_document(doc, "f.json")            # canonical bytes, atomic
    f = from_document("f.json")              # validate, then build   (validate.py, build.py)
    f(np.ones((4, 3), np.float32))           # a LoadedFunction       (loaded.py)

The format itself (layout, attr encodings, versions, limits) is docs/format.md; schema.py
holds its limits and field checks. Loading needs the op registry and nothing else: this
package imports every op module a document may name, and never `defun`.
"""
from defun.runtime import custom_gradient as _custom_gradient  # noqa: F401  (registers its op)
from defun.runtime import ops as _ops  # noqa: F401  (registers the ops a document may name)
from defun.graph import control_flow as _control_flow  # noqa: F401  (registers `cond`)
from defun.graph import while_op as _while_op  # noqa: F401  (registers `while`)
from defun.graph import scan as _scan  # noqa: F401  (registers `scan`)
from defun.graph import functions as _functions  # noqa: F401  (registers `call`)
from defun.graph.serialize.build import from_document
from defun.graph.serialize.export import describe_structure, dumps_document, output_names, to_document, write_document
from defun.graph.serialize.loaded import InputSpec, LoadedFunction
from defun.graph.serialize.schema import FORMAT, READABLE_VERSIONS, VERSION

__all__ = ["FORMAT", "VERSION", "READABLE_VERSIONS", "to_document", "write_document",
           "from_document", "dumps_document", "describe_structure", "output_names", "LoadedFunction", "InputSpec"]
