"""Static shapes: how they print, fit, broadcast and merge (None is an unknown size).

The one place for these rules: inference (runtime/ops/shape_rules.py re-exports them), graph
checks, the loader and the defun signature checks all use the same functions.
"""
import operator

from defun.runtime import errors

__all__ = ["shape_str", "shape_fits", "shapes_compatible", "merge_shapes", "broadcast_shapes",
           "normalize_axis", "normalize_axes", "num_elements"]


def shape_str(s):
    """`(2, ?)`: a shape in messages (`?` is an unknown size)."""
    return "(" + ", ".join("?" if d is None else str(d) for d in s) + ("," if len(s) == 1 else "") + ")"


def shape_fits(shape, declared):
    """True if every tensor of `shape` fits `declared`: same rank, and each declared size
    is None (any) or equal. An unknown size in `shape` fits only an unknown declared one."""
    shape = tuple(shape)
    return len(shape) == len(declared) and all(d is None or d == s for s, d in zip(shape, declared))


def shapes_compatible(a, b):
    """True if some tensor could have both shapes: same rank, sizes equal where both known."""
    a, b = tuple(a), tuple(b)
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


def merge_shapes(a, b):
    """The most specific shape both `a` and `b` fit (unknown where they differ)."""
    return tuple(x if x == y else None for x, y in zip(a, b))


def broadcast_shapes(op_name, a, b):
    """numpy broadcasting of two static shapes; None is an unknown size."""
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None:
            out.append(y)
        elif y is None:
            out.append(x)
        elif x == y:
            out.append(x)
        else:
            raise errors.InvalidArgumentError(
                f"{op_name}: shapes {shape_str(a)} and {shape_str(b)} cannot be broadcast together")
    return tuple(out)


def normalize_axis(op_name, axis, ndim, scalar_axis=True):
    """`axis` as a non-negative int for a tensor of rank `ndim`; raises naming `op_name`.

    `scalar_axis`: a scalar (rank 0) takes axis 0 or -1, as reductions do; ops that need an
    existing dimension (concat, gather, ...) pass False.
    """
    axis = operator.index(axis)
    if ndim == 0 and scalar_axis and axis in (0, -1):
        return 0
    if not -ndim <= axis < ndim:
        raise errors.InvalidArgumentError(
            f"{op_name}: axis {axis} is out of range for a tensor of rank {ndim} "
            f"(expected {-ndim} <= axis < {ndim})")
    return axis % ndim


def normalize_axes(op_name, axes, ndim):
    """A tuple of axes (each as `normalize_axis`), refusing one named twice (`(1, -1)` of a
    matrix): numpy would reject it only when the kernel runs."""
    out = tuple(normalize_axis(op_name, a, ndim) for a in axes)
    if len(set(out)) != len(out):
        twice = next(a for a in out if out.count(a) > 1)
        raise errors.InvalidArgumentError(
            f"{op_name}: axis {tuple(axes)} names axis {twice} twice (for a tensor of rank {ndim}); "
            f"the axes must differ: list each axis once")
    return out


def num_elements(shape):
    """The number of elements, or None when a size is unknown."""
    n = 1
    for d in shape:
        if d is None:
            return None
        n *= d
    return n
