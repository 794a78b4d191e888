"""Where a backward function's outputs hold one forward input's gradient: `DenseGrad`,
`SlicesGrad` (the entries of `Backward.input_grads`, a document's `input_gradients`).

A leaf (it imports nothing of the graph), so that every module matching the records, the
printer above the IR included, imports them from this one place.
"""
from collections import namedtuple

__all__ = ["DenseGrad", "SlicesGrad"]


class DenseGrad(namedtuple("DenseGrad", "output")):
    """The gradient is backward output `output`."""

    __slots__ = ()


class SlicesGrad(namedtuple("SlicesGrad", "values indices dense_shape")):
    """The gradient is IndexedSlices(backward output `values`, backward output `indices`,
    `dense_shape`, a static shape)."""

    __slots__ = ()
