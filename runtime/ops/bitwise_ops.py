"""Bitwise ops on integer tensors: and, or, xor, invert and the two shifts (numpy's meanings).

Declared through the elementwise definer (runtime/ops/elementwise.py); not differentiable.
On bool tensors and/or/xor/invert are the logical ops (as numpy's). Shifts follow numpy for
counts out of range: a count below 0 or not below the width of the dtype shifts every bit
out (left: 0; right: 0, or -1 for a negative signed value), where C and numba's machine
shift would mask the count. The Tensor operators `&`, `|`, `~` on bool tensors stay the
logical ops (runtime/ops/__init__.py dispatches by dtype); `^` on bools is bitwise_xor.
"""
import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.fused import Elementwise as Ew
from defun.runtime.ops import elementwise

__all__ = ["bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift"]

_BITS_KINDS = "biu"       # and, or, xor, invert: integers, and bools as logical values
_SHIFT_KINDS = "iu"


def _logical_or_bitwise(logical, bitwise):
    """The ONNX form: the logical op on bools, else the bitwise one (ONNX opset 18)."""
    def form(e, node, ins):
        if node.inputs[0].dtype is dtypes.bool:
            return e.op(logical, *ins)
        if e.opset < 18:
            raise errors.UnimplementedError(
                f"export_onnx: op {node.op.name!r} on integer tensors needs ONNX "
                f"{bitwise} (opset 18); export with opset=18")
        return e.op(bitwise, *ins)
    return form


def _shift_onnx(direction):
    """numpy's shift by ONNX BitShift (unsigned only): the value's bits as the unsigned type
    of its width; a right shift of a negative value is ~(~x >> c) (arithmetic); a count out
    of [0, width) shifts every bit out. (Small integers arrive widened: int32 or int64.)"""
    def form(e, node, ins):
        x, c = ins
        dt = node.inputs[0].dtype
        bits = dt.np.itemsize * 8
        unsigned = dtypes.uint64 if bits == 64 else dtypes.uint32
        ok = e.op("And", e.op("GreaterOrEqual", c, e.scalar(0, dt)), e.op("Less", c, e.scalar(bits, dt)))
        count = e.cast(e.op("Where", ok, c, e.scalar(0 if direction == "LEFT" else bits - 1, dt)), unsigned)
        if direction == "LEFT":
            moved = e.cast(e.op("BitShift", e.cast(x, unsigned), count, direction="LEFT"), dt)
            return e.op("Where", ok, moved, e.scalar(0, dt))
        negative = e.op("Less", x, e.scalar(0, dt))
        flipped = e.op("Sub", e.scalar(-1, dt), x)                     # ~x, never overflowing
        source = e.op("Where", negative, flipped, x)                   # >= 0: a logical shift is right
        moved = e.cast(e.op("BitShift", e.cast(source, unsigned), count, direction="RIGHT"), dt)
        return e.op("Where", negative, e.op("Sub", e.scalar(-1, dt), moved), moved)
    return form


def _invert_onnx(e, node, ins):
    if node.inputs[0].dtype is dtypes.bool:
        return e.op("Not", *ins)
    return e.op("Sub", e.scalar(-1, node.inputs[0].dtype), ins[0])    # ~x = -1 - x (wraps as numpy)


bitwise_and = elementwise.binary(
    "bitwise_and", np.bitwise_and, None, kinds=_BITS_KINDS, fused=Ew("{0} & {1}"),
    onnx=_logical_or_bitwise("And", "BitwiseAnd"),
    doc="x & y elementwise on integers (on bools: logical and). `df.bitwise_and(12, 10) -> 8`")
bitwise_or = elementwise.binary(
    "bitwise_or", np.bitwise_or, None, kinds=_BITS_KINDS, fused=Ew("{0} | {1}"),
    onnx=_logical_or_bitwise("Or", "BitwiseOr"),
    doc="x | y elementwise on integers (on bools: logical or). `df.bitwise_or(12, 10) -> 14`")
bitwise_xor = elementwise.binary(
    "bitwise_xor", np.bitwise_xor, None, kinds=_BITS_KINDS, fused=Ew("{0} ^ {1}"),
    onnx=_logical_or_bitwise("Xor", "BitwiseXor"),
    doc="x ^ y elementwise on integers (on bools: logical xor). `df.bitwise_xor(12, 10) -> 6`")
invert = elementwise.unary(
    "invert", np.invert, None, kinds=_BITS_KINDS, fused=Ew("~{0}"), onnx=_invert_onnx,
    doc="~x elementwise: the bits of an integer flipped (-x - 1 if signed); on bools logical not.")
# numba shifts in 64 bits and masks the count: a count out of [0, 64) is numpy's rule written
# out (in range, the 64-bit result stored in the narrower type is numpy's)
left_shift = elementwise.binary(
    "left_shift", np.left_shift, None, kinds=_SHIFT_KINDS,
    fused=Ew("({0} << {1}) if 0 <= {1} < 64 else ({0} ^ {0})"), onnx=_shift_onnx("LEFT"),
    doc="x << y elementwise on integers (wrapping as numpy); a count y < 0 or >= the dtype's bits gives 0.")
right_shift = elementwise.binary(
    "right_shift", np.right_shift, None, kinds=_SHIFT_KINDS,
    fused=Ew("({0} >> {1}) if 0 <= {1} < 64 else (({0} >> 63) if {0} < 0 else ({0} ^ {0}))"),
    onnx=_shift_onnx("RIGHT"),
    doc="x >> y elementwise on integers (arithmetic for signed); a count y < 0 or >= the dtype's bits "
        "gives 0 (-1 for a negative x).")
