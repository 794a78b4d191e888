"""Helpers for sparse (IndexedSlices) updates: summing the rows of repeated indices.

An optimizer applying an IndexedSlices gradient computes each touched row's new value from
the row's total gradient, then writes the rows back with a scatter update. With repeated
indices every occurrence must see the same total, so `sum_duplicate_rows` gives, for each
position, the sum over all positions holding the same index. The shape stays that of the
input (static), so the op traces with unknown sizes and duplicate rows are written twice with
the same value.
"""
import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.registry import register
from defun.runtime.ops import shape_rules

__all__ = ["sum_duplicate_rows"]


def _sum_duplicate_rows_kernel(values, indices):
    if indices.size == 0:
        return values.copy()
    unique, inverse = np.unique(indices, return_inverse=True)
    totals = np.zeros((unique.size,) + values.shape[1:], values.dtype)
    np.add.at(totals, inverse.reshape(-1), values)     # in position order, as a dense scatter
    return totals[inverse.reshape(-1)]


def _sum_duplicate_rows_infer(shapes, dts, attrs):
    vshape, ishape = tuple(shapes[0]), tuple(shapes[1])
    if dts[1] not in (dtypes.int32, dtypes.int64):
        raise errors.InvalidArgumentError(
            f"sum_duplicate_rows: indices must be int32 or int64, got {dts[1].name}")
    if len(ishape) != 1 or not vshape:
        raise errors.InvalidArgumentError(
            f"sum_duplicate_rows: takes values of rank >= 1 and a vector of indices, got values "
            f"{shape_rules.shape_str(vshape)} and indices {shape_rules.shape_str(ishape)}")
    if vshape[0] is not None and ishape[0] is not None and vshape[0] != ishape[0]:
        raise errors.InvalidArgumentError(
            f"sum_duplicate_rows: {ishape[0]} indices for {vshape[0]} rows of values")
    rows = vshape[0] if vshape[0] is not None else ishape[0]
    return [((rows,) + vshape[1:], dts[0])]


def _sum_duplicate_rows_grad(op, g):
    # The map is symmetric (position i gets position j's row iff j gets i's), so it is its own
    # transpose: the gradient is the same sum of the incoming gradient's rows.
    return [sum_duplicate_rows(g, op.inputs[1]), None]


def _sum_duplicate_rows_onnx(e, node, ins):
    """A 0/1 matrix of equal indices times the rows (flattened to one axis)."""
    values, indices = ins
    same = e.op("Equal", e.op("Unsqueeze", indices, e.ints([1])), e.op("Unsqueeze", indices, e.ints([0])))
    rows = e.op("Flatten", values, axis=1)
    out = e.op("MatMul", e.cast(same, node.outputs[0].dtype), rows)
    return e.op("Reshape", out, e.op("Shape", values))


_SUM_DUPLICATE_ROWS_BATCH = "its output row count is data-dependent per example"
_SUM_DUPLICATE_ROWS = register(
    name="sum_duplicate_rows",
    kernel=_sum_duplicate_rows_kernel,
    infer=_sum_duplicate_rows_infer,
    grad=_sum_duplicate_rows_grad,
    num_inputs=2,
    attrs={},
    defaults={},
    kinds="f",
    onnx=_sum_duplicate_rows_onnx,
    batch=_SUM_DUPLICATE_ROWS_BATCH,
)


def sum_duplicate_rows(values, indices):
    """Row i of the result: the sum of the rows of `values` whose index equals `indices[i]`.

    >>> sum_duplicate_rows([[1.], [2.], [4.]], [3, 0, 3])   # [[5.], [2.], [5.]]
    """
    return run_op(_SUM_DUPLICATE_ROWS, (values, indices))
