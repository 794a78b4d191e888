"""Op rows of the training pieces: the sparse-update helper, and the scatter variable ops."""
import numpy as np

from opcheck import A, Row, V, internal_op, idx

import defun as df


def _sum_duplicate_rows_ref(values, indices):
    out = np.zeros_like(values)
    for i in range(len(indices)):
        for j in range(len(indices)):
            if indices[j] == indices[i]:
                out[i] += values[j]
    return out


ROWS = [
    Row("sum_duplicate_rows", internal_op("sum_duplicate_rows"), _sum_duplicate_rows_ref,
        [V([A((4, 3)), idx([2, 0, 2, 2])]), V([A((3,)), idx([1, 1, 0], df.int64)]),
         V([A((2, 2, 2)), idx([5, 3])]), V([A((0, 2)), idx(np.zeros(0, np.int32))])],
        second=True),
]

EXCLUDED = {
    "scatter_add_variable": "stateful; tests/test_scatter_variables.py",
    "scatter_sub_variable": "stateful; tests/test_scatter_variables.py",
    "scatter_update_variable": "stateful; tests/test_scatter_variables.py",
}
