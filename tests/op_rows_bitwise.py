"""Op rows: bitwise_and, bitwise_or, bitwise_xor, invert, left_shift, right_shift
(runtime/ops/bitwise_ops.py), in int32, int64 and bool; every integer dtype, shift counts out
of range, ONNX and numba: tests/test_bitwise_ops.py."""
import numpy as np

import defun as df
from opcheck import A, Row, V

__all__ = ["ROWS"]

i32, i64, b = df.int32, df.int64, df.bool
_SHAPES = [((), ()), ((2, 3), (3,)), ((3, 1), (1, 4))]


def _pairs(kind="normal"):
    return [V([A(x), A(y, kind)]) for x, y in _SHAPES]


def _counts():
    """Shift counts up to 40 (an int32's width and past it; written as floats: the row's dtype)."""
    return [V([A((2, 3)), A((3,), value=np.array([0., 3., 7.]))]),
            V([A((2, 1)), A((4,), value=np.array([1., 31., 32., 40.]))])]


ROWS = [
    *[Row(name, getattr(df, name), getattr(np, name), _pairs(), (i32, i64, b), grad=False)
      for name in ("bitwise_and", "bitwise_or", "bitwise_xor")],
    Row("invert", df.invert, np.invert, [V([A(s)]) for s in [(), (2, 3)]], (i32, i64, b), grad=False),
    *[Row(name, getattr(df, name), getattr(np, name), _pairs() + _counts(), (i32, i64), grad=False)
      for name in ("left_shift", "right_shift")],
]
