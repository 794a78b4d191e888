"""Op table rows: einsum (with tensordot, which is written as an einsum) and its internal
einsum_expand (runtime/ops/einsum_ops.py). Gathered by test_ops.py."""
import numpy as np

import defun as df
from opcheck import A, NUMERIC, Row, V, internal_op

EQUATIONS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
    ("...ij->...ji", [(2, 3, 4)]),
    ("ii->", [(3, 3)]),
    ("ii->i", [(3, 3)]),
    ("i,j->ij", [(2,), (3,)]),
    ("ij,jk", [(2, 3), (3, 2)]),                      # implicit output: ik
    ("ba", [(2, 3)]),                                  # implicit output: ab (a transpose)
    ("...ij,...jk->...ik", [(1, 2, 3), (2, 3, 2)]),    # broadcast batch
    ("...ij,jk->...ik", [(2, 1, 2, 3), (3, 2)]),
    ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]),        # three operands
    ("i,ij,j->", [(2,), (2, 3), (3,)]),
    ("ij->", [(2, 3)]),
    ("bi,bi->b", [(3, 4), (3, 4)]),
    ("iij->ji", [(2, 2, 3)]),
    ("i...,i->...", [(3, 2, 2), (3,)]),
    ("i...j,j...->...i", [(2, 1, 3), (3, 2)]),
    ("ij,ij->ij", [(2, 3), (2, 3)]),
    (",i->i", [(), (3,)]),
    ("ab,cd->", [(2, 2), (3, 1)]),
    ("ij,jk->ik", [(2, 0), (0, 3)]),                   # an empty contraction: zeros
    ("bij,bkj->bik", [(0, 2, 3), (0, 2, 3)]),
]
TENSORDOTS = [((2, 3, 4), (3, 4, 2), 2), ((2, 3), (3, 2), 1), ((2, 3), (4,), 0), ((2, 3, 4), (4, 3), [[1, 2], [1, 0]]),
              ((3, 2), (3, 4), [0, 0])]


def _call(*xs, equation=None, axes=None):
    return df.tensordot(*xs, axes) if equation is None else df.einsum(equation, *xs)


def _ref(*xs, equation=None, axes=None):
    if equation is None:
        return np.tensordot(*xs, axes)
    out = np.einsum(equation, *(x.astype(np.float64) if x.dtype.kind == "f" else x for x in xs))
    return np.asarray(out).astype(xs[0].dtype)


def _expand_ref(x, equation):
    """Element by element: out[dst index] = x[src index], zeros elsewhere."""
    src, dst = (t.replace("...", ".") for t in equation.split("->"))
    e = x.ndim - len(src.replace(".", ""))

    def axes(term):  # each axis of a term: a label, or ("...", k) for the k-th '...' axis
        out = []
        for c in term:
            out.extend([(".", k) for k in range(e)] if c == "." else [c])
        return out
    src_axes, dst_axes = axes(src), axes(dst)
    size = dict(zip(src_axes, x.shape))
    out = np.zeros(tuple(size[a] for a in dst_axes), x.dtype)
    for idx in np.ndindex(x.shape):
        at = dict(zip(src_axes, idx))
        out[tuple(at[a] for a in dst_axes)] = x[idx]
    return out


ROWS = [
    Row("einsum", _call, _ref,
        [V([A(s) for s in shapes], dict(equation=eq)) for eq, shapes in EQUATIONS] +
        [V([A(sa), A(sb)], dict(axes=axes)) for sa, sb, axes in TENSORDOTS], NUMERIC,
        also=("einsum_expand",), second=True),
    Row("einsum_expand", internal_op("einsum_expand"), _expand_ref,
        [V([A((3,))], dict(equation="i->ii")), V([A((2, 3))], dict(equation="ij->iji")),
         V([A((2, 3))], dict(equation="...i->...ii")), V([A((2, 3))], dict(equation="ij->ji")),
         V([A((0, 2))], dict(equation="ij->iij"))], NUMERIC, second=True),
]
