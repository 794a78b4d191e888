"""Which nodes the numba backend fuses, and how a run of them splits into stages.

A node may join a region when its op declares a fused form (runtime/fused.py) and its
dtypes are ones numba loops handle (bool, integers, float32, float64). A region is a run of
such nodes, consecutive in program order (so it is convex: no path leaves it and comes
back), holding at least two of them. Inside a region, nodes are grouped into stages, in
order:

- `Loop(shape)`: elementwise nodes whose outputs all have `shape`, computed element by
  element in one loop nest (a value used only inside the loop is a scalar, never an
  array), and reductions of values of that shape (accumulated in the same loop);
- `Call(node)`: an op with an array-level fused form (a matmul, a cross-entropy);
- `Rolled`: repetitions of elementwise nodes (graph/numba_backend/rolling.py), one loop
  over the repetitions around a loop nest over their shape.

A node joins the last stage when it is a loop of its shape and it reads nothing that
stage has not finished (a reduction's result is only ready after its loop). Values a later
stage or step reads are stored in arrays.
"""
import numpy as np

from defun.runtime.fused import Elementwise, Kernel, Reduction
from defun.graph.nodes import CONST

__all__ = ["Loop", "Call", "Rolled", "fused_form", "stages_of", "reduced_axes", "inlined_constant"]

# numpy dtypes whose scalars numba loops compute as numpy does
_SUPPORTED = frozenset(np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64,
                                             np.uint8, np.uint16, np.uint32, np.uint64,
                                             np.float32, np.float64))


def _supported(t):
    return t.dtype.np in _SUPPORTED and t.shape is not None


def inlined_constant(t):
    """True for a scalar constant the source writes as a literal instead of taking it."""
    return t.node.op is CONST and len(t.shape) == 0 and t.dtype.np.kind in "biuf"


def fused_form(node):
    """The node's fused form when the numba backend can run it inside a region, else None."""
    form = node.op.fused
    if form is None or node.stateful or not node.outputs:
        return None
    if not all(_supported(t) for t in node.inputs) or not all(_supported(t) for t in node.outputs):
        return None
    if isinstance(form, Kernel):
        return form if form.accepts is None or form.accepts(node) else None
    first = node.inputs[0].dtype.np.kind if node.inputs else None
    if form.kinds is not None and first not in form.kinds:
        return None
    if isinstance(form, Reduction):
        return form
    out = node.outputs[0].shape
    # every unknown output size must be read off an input (aligned to the right) at run time
    sources = node.inputs if form.shape_of in (None, "attr") else [node.inputs[form.shape_of]]
    for j, d in enumerate(out):
        if d is None and not any(len(t.shape) >= len(out) - j and
                                 t.shape[j - len(out) + len(t.shape)] is None for t in sources):
            return None
    if any(len(t.shape) > len(out) for t in node.inputs):
        return None
    return form


class Loop:
    """Elementwise nodes of one output shape and reductions of values of that shape."""

    __slots__ = ("shape", "nodes", "reductions")

    def __init__(self, shape):
        self.shape, self.nodes, self.reductions = tuple(shape), [], []


class Call:
    """A node with an array-level fused form (`runtime.fused.Kernel`)."""

    __slots__ = ("node",)

    def __init__(self, node):
        self.node = node


class Rolled:
    """`count` repetitions of `period` elementwise nodes of one static shape, computed by one
    loop over the repetitions (graph/numba_backend/rolling.py finds them); `reps[m][q]` is
    node q of repetition m, `classes[q][j]` what input j of node q reads, `inits` the
    carries' first values."""

    __slots__ = ("shape", "reps", "classes", "inits")

    def __init__(self, shape, reps, classes, inits):
        self.shape, self.reps, self.classes, self.inits = shape, reps, classes, inits

    @property
    def count(self):
        return len(self.reps)

    @property
    def period(self):
        return len(self.reps[0])

    @property
    def nodes(self):
        return [n for rep in self.reps for n in rep]

    def __repr__(self):
        return f"<Rolled {self.count} x {[n.op.name for n in self.reps[0]]}>"


def stages_of(run):
    """The stages computing `run` (fusible nodes and `Rolled` blocks in program order), and
    {id(tensor): stage} for the tensors they produce, with the kind of each: "ew" (a loop
    value), "red" (a reduction result, ready after its loop), "call" or "rolled"."""
    stages, where = [], {}

    def readable(stage, tensors):
        return all(where.get(id(t), (None, None))[0] is not stage or where[id(t)][1] == "ew"
                   for t in tensors)
    for n in run:
        if isinstance(n, Rolled):
            stages.append(n)
            for m in n.nodes:
                where[id(m.outputs[0])] = (n, "rolled")
            continue
        form = n.op.fused
        last = stages[-1] if stages else None
        if isinstance(form, (Elementwise, Reduction)):
            ew = isinstance(form, Elementwise)     # a loop runs over an output's or a reduced input's shape
            shape = tuple((n.outputs if ew else n.inputs)[0].shape)
            if not (isinstance(last, Loop) and last.shape == shape and readable(last, n.inputs)):
                last = Loop(shape)
                stages.append(last)
            (last.nodes if ew else last.reductions).append(n)
            where[id(n.outputs[0])] = (last, "ew" if ew else "red")
        else:
            last = Call(n)
            stages.append(last)
            for t in n.outputs:
                where[id(t)] = (last, "call")
    return stages, where


def reduced_axes(node):
    """The sorted axes a reduction node reduces (all for axis=None)."""
    rank = len(node.inputs[0].shape)
    axis = node.attrs.get("axis")
    if axis is None:
        return tuple(range(rank))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted({a % rank for a in axes})) if rank else ()
