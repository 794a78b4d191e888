"""Which unknown sizes of a relaxed graph are the same size: each tensor's shape with every
unknown size a label, equal labels meaning equal sizes whenever the graph runs.

    labels = size_labels(graph, (0, 0))   # its arguments' two unknown sizes: equal
    labels[id(a)] == labels[id(b)]        # a and b surely have one shape (e.g. both [?, 32]
                                          # of the batch size)

A relaxed trace's graph says `None` for every size it does not know, so `[?, 32]` and
`[?, 32]` may differ. The caller states which of the arguments' unknown sizes are equal
(`classes`: one class per unknown size of `graph.inputs`, by argument then axis; a call
with those sizes equal, and no others, is what the labels hold for): each class gets one
label, an integer no real size reaches (2**52 on, spaced by ~4e10). Each node's own shape
inference (`op.infer`) then runs on the labelled shapes, and an unknown output size takes
the label the inference returned if that is one of the node's input labels: matmul keeps
its rows' size, broadcasting keeps a size against 1 or itself, reshape(-1, 32) of [S, 32]
gives S. Anything else (S + 1, 2 * S, two labels broadcast together, an inference that
fails on them, a node running a function) gets a fresh label of its own: it is never
taken for another size. An inference returns an input's label only when it passes a size
through unchanged (a size computed from the labels, or a constant, is no label: no graph
computes 2**52), so equal labels are equal sizes at run time, 0 and 1 included. (This
trusts that a size an inference gives as an input's label at sizes this large is that
size at every size: so for passing through, broadcasting (which refuses two labels rather
than taking either), reshape's -1, slicing's clamps (x[:c] keeps all of x only when c is
past every real size); an op whose size were max(n, c) would break it, and no row has one.)
"""
import itertools

from defun.graph.nodes import PLACEHOLDER, infer_types
from defun.graph.verify import functions_of

__all__ = ["size_labels", "size_classes", "LABEL_BASE"]

LABEL_BASE = 1 << 52
_LABEL_STEP = 0x9E3779B97     # sums, differences and multiples of labels are no label


def size_classes(sizes):
    """The classes of a call's unknown sizes (`sizes`, in the order size_labels takes them):
    each size's class the position of the first size equal to it: (5, 5, 3) -> (0, 0, 2)."""
    return tuple(map(sizes.index, sizes))


def size_labels(graph, classes):
    """id(tensor) -> its shape, each unknown size a label (see the module), for every tensor
    of `graph` whose rank is known. `classes`: one per unknown size of `graph.inputs`."""
    fresh = itertools.count(max(classes, default=-1) + 1)
    labels = {}
    given = itertools.chain(classes, fresh)     # captures' unknown sizes: sizes of their own
    for t in graph.all_inputs:
        if t.shape is not None:
            labels[id(t)] = tuple(_label(next(given)) if d is None else d for d in t.shape)
    for node in graph.nodes:
        outs = node.outputs
        for t in outs:
            shape = t.shape
            if shape is None or None in shape:
                break
        else:       # every size known (a constant's, most of a gradient's)
            for t in outs:
                labels[id(t)] = tuple(t.shape)
            continue
        if node.op is PLACEHOLDER:
            continue
        inferred, own = _inferred(node, labels)
        for j, t in enumerate(outs):
            if t.shape is None:
                continue
            p = inferred[j][0] if inferred is not None else None
            if p is None or len(p) != len(t.shape):
                p = (None,) * len(t.shape)
            labels[id(t)] = tuple(d if d is not None else p[k] if p[k] in own else _label(next(fresh))
                                  for k, d in enumerate(t.shape))
    return labels


def _label(k):
    return LABEL_BASE + k * _LABEL_STEP


def _inferred(node, labels):
    """(the node's inference on its inputs' labelled shapes, or None; the labels among its
    inputs' sizes)."""
    shapes = [labels.get(id(t)) for t in node.inputs]
    own = {d for s in shapes if s is not None for d in s if d >= LABEL_BASE}
    if not own or None in shapes or node.op.function_attrs and functions_of(node):
        return None, own
    try:    # (memoized: the labels are the same each time, and no real size is one)
        inferred = infer_types(node.op, [_Typed(s, t.dtype) for s, t in zip(shapes, node.inputs)], node.attrs)
    except Exception:   # noqa: BLE001 - labels it refuses (two broadcast together): fresh sizes
        return None, own
    if type(inferred) is not list or len(inferred) != len(node.outputs):
        return None, own
    return inferred, own


class _Typed:
    """A tensor's type with its sizes labelled, as infer_types reads a tensor."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype
