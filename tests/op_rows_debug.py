"""Op rows: check_numerics (identity on finite values); print is tested in test_debug_ops.py."""
import numpy as np

import defun as df
from opcheck import Row, un

__all__ = ["ROWS", "EXCLUDED"]


ROWS = [
    Row("check_numerics", lambda x: df.debugging.check_numerics(x, "the table's input"), np.copy,
        un(), (df.float16, df.float32, df.float64), second=True),
]

EXCLUDED = {
    "print": "stateful op with no outputs: tests/test_debug_ops.py checks what it prints eagerly, "
             "traced (every call, in program order, never pruned) and reloaded from JSON",
}
