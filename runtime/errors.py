"""Typed errors (`df.errors`)."""

__all__ = ["DefunError", "InvalidArgumentError", "NotFoundError", "UnimplementedError",
           "TracingError", "GraphFormatError", "ResourceExhaustedError"]


class DefunError(Exception):
    """Base of defun's own errors."""


class InvalidArgumentError(DefunError, ValueError):
    """An op got inputs of the wrong shape, dtype or value."""


class NotFoundError(DefunError, LookupError):
    """An op, function or name is unknown."""


class UnimplementedError(DefunError, NotImplementedError):
    """The request is valid but not supported (for example, no gradient defined)."""


class TracingError(DefunError, TypeError):
    """A Python construct cannot be traced into a graph (e.g. `if` on a symbolic tensor)."""


class GraphFormatError(DefunError, ValueError):
    """A graph document (JSON) is malformed, hostile or of an unknown version."""


class ResourceExhaustedError(DefunError, RuntimeError):
    """A budget ran out: a loaded function would hold more memory than its `max_bytes`, or a
    loop would run more than its `max_iterations` (df.load_json's arguments); or the machine's
    memory did: a kernel's MemoryError, named (as TensorFlow's out-of-memory error)."""


def out_of_memory(what, exc):
    """The ResourceExhaustedError for MemoryError `exc` raised by `what` (an op's call)."""
    detail = str(exc) or "numpy or Python could not allocate what it needed"
    return ResourceExhaustedError(f"{what}: out of memory ({detail})")
