"""Op rows: check_numerics (identity on finite values), check_batch_size (identity on a batch
of the size given; refusals: tests/test_vmap_gaps.py); print is tested in test_debug_ops.py."""
import numpy as np

import defun as df
from opcheck import A, Row, V, internal_op, idx, un

__all__ = ["ROWS", "EXCLUDED"]


ROWS = [
    Row("check_numerics", lambda x: df.debugging.check_numerics(x, "the table's input"), np.copy,
        un(), (df.float16, df.float32, df.float64), second=True),
    Row("check_batch_size", lambda x, n: internal_op("check_batch_size")(x, n, message="check_batch_size: {got} vs {want}"),
        lambda x, n: np.copy(x), [V([A((3, 2)), idx(3)]), V([A((0, 4)), idx(0)]), V([A((1,)), idx(1)])],
        (df.float16, df.float32, df.float64), second=True),
]

EXCLUDED = {
    "assert": "stateful op with no outputs (a converted `assert` on a tensor): tests/test_autograph_statements.py "
              "checks it passes and raises at the user's line, eagerly, traced and in every branch",
    "print": "stateful op with no outputs: tests/test_debug_ops.py checks what it prints eagerly, "
             "traced (every call, in program order, never pruned) and reloaded from JSON",
}
