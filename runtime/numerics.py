"""Checking numerics: which op first made a NaN or an infinity, forward or backward, and where.

    numerics.enable()      # df.debugging.enable_check_numerics()
    numerics.disable()

While on, every eager op's floating outputs are checked by an execution callback, and
compiled plans run on a checking backend (graph/checking.py) that checks every node's.
The first NaN or infinity raises `NumericsError` (an InvalidArgumentError) naming the op,
whether it ran in the forward or the backward, and the user's line; for a backward op,
the line of the forward op whose gradient it computes.

Which forward op a gradient belongs to is noted when the gradient is made: the reverse walk
(runtime/autodiff.py) sets `state.grad_of` to (forward op name, its first output) while that
entry's gradient function runs; a node traced meanwhile is recorded in
BACKWARD_OF (always: tracing is not a hot path), and an eager op run meanwhile reads it
(only while checking: the walk notes it only then).
"""
import cmath
import math

import numpy as np

from defun.runtime import errors, sites
from defun.runtime.context import add_execution_callback, remove_execution_callback, state

__all__ = ["NumericsError", "enable", "disable", "enabled", "BACKWARD_OF", "forward_site", "check_value",
           "bad_value", "numerics_message", "carry_backward"]

# (graph name, node id) -> (forward op name, forward site) of each node traced as a gradient
BACKWARD_OF = {}
_BACKWARD_OF_LIMIT = 1 << 18
# eager tensor id -> user site of the eager op that made it, while checking (a backward op's
# error names the line of the forward op whose gradient it computes)
_EAGER_SITES = {}
_EAGER_SITES_LIMIT = 1 << 16
# [True] while checking (a list: read by reference from the modules that test it)
ON = []


class NumericsError(errors.InvalidArgumentError):
    """A NaN or infinity that check numerics found: its message names the op and the line."""

    attributed = True     # the plan's failure handler passes it on unchanged


def enabled():
    return bool(ON)


def enable():
    """Check every op's floating outputs from now on (idempotent)."""
    if not ON:
        add_execution_callback(_check_eager)
        ON.append(True)


def disable():
    if ON:
        ON.clear()
        remove_execution_callback(_check_eager)
        _EAGER_SITES.clear()


def note_backward(graph_name, node_id):
    """Record that the node just traced computes a gradient (called by the tracer while
    `state.grad_of` is set)."""
    _, t = state.grad_of
    node = getattr(t, "node", None)
    if node is not None:
        if len(BACKWARD_OF) >= _BACKWARD_OF_LIMIT:
            BACKWARD_OF.clear()
        BACKWARD_OF[(graph_name, node_id)] = (node.op.name, node.site)


def carry_backward(from_graph, from_id, to_graph, to_id):
    """Node `to_id` of graph `to_graph` is a copy of `from_id` of `from_graph` (inlined, under
    a new id): it computes the gradient the original does (graph/passes.py's inline_calls)."""
    of = BACKWARD_OF.get((from_graph, from_id))
    if of is not None:
        BACKWARD_OF[(to_graph, to_id)] = of


def forward_site(graph_name, node_id):
    """(forward op name, its site) when node `node_id` of graph `graph_name` was traced as a
    gradient, else None."""
    return BACKWARD_OF.get((graph_name, node_id))


def _bad(v):
    """'NaN' or 'Inf' when array `v` (of an inexact dtype) holds one, else None. The sum is
    finite only when every element is (one reduction, no temporary array); a sum that
    overflowed is told apart by the exact test."""
    s = v.sum()
    if (math.isfinite if v.dtype.kind == "f" else cmath.isfinite)(s):
        return None
    if np.isnan(v).any():
        return "NaN"
    return "Inf" if not np.isfinite(v).all() else None


def bad_value(v):
    """'NaN' or 'Inf' when array `v` is floating and holds one, else None."""
    v = np.asarray(v)
    return _bad(v) if v.dtype.kind in "fc" else None


def check_value(v, describe):
    """Raise NumericsError(describe(kind)) if array `v` is floating and holds a NaN or Inf."""
    if v.dtype.kind in "fc":
        kind = _bad(v)
        if kind is not None:
            raise NumericsError(describe(kind))


def numerics_message(kind, op, backward, site, forward_op=None):
    """The error's words: the op, forward or backward (and whose gradient), and the line."""
    line = sites.source_line(site)
    where = f" at {sites.format_site(site)}{': ' + line if line else ''}" if site else ""
    if backward:
        of = f" (the gradient of {forward_op}" + (f", the forward op{where})" if where else ")") \
            if forward_op else (f" (its forward op{where})" if where else "")
        return f"check_numerics: {op} produced {kind} in the backward{of}"
    return f"check_numerics: {op} produced {kind} in the forward{where}"


def _check_eager(op_name, name, attrs, inputs, outputs):
    """The execution callback: check an eager op's outputs, and note where they were made."""
    st = state
    if st.graph is not None:
        return
    grad_of = st.grad_of
    site = None
    for o in outputs:
        v = getattr(o, "_value", None)
        if type(v) is np.ndarray or isinstance(v, np.generic):
            if v.dtype.kind in "fc" and _bad(np.asarray(v)) is not None:
                kind = _bad(np.asarray(v))
                if grad_of is not None:
                    forward_op, t = grad_of
                    fwd = _EAGER_SITES.get(getattr(t, "_id", None))
                    raise NumericsError(numerics_message(kind, op_name, True, fwd or sites.user_site(),
                                                         forward_op))
                raise NumericsError(numerics_message(kind, op_name, False, st.node_site or sites.user_site()))
            if grad_of is None:
                if site is None:
                    site = st.node_site or sites.user_site()
                if len(_EAGER_SITES) >= _EAGER_SITES_LIMIT:
                    _EAGER_SITES.clear()
                _EAGER_SITES[o._id] = site

