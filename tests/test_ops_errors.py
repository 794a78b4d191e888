"""Typed errors naming the op, for bad shapes, dtypes and values.

Each row runs eagerly (the kernel path) and, unless it needs values, symbolically (the
inference path graph building uses), and both must raise the same typed error whose
message names the op and the offending dtypes/shapes.
"""
import numpy as np
import pytest

import defun as df
from opcheck import SymbolicBuilder, SymbolicTensor
from defun.runtime import dtypes

IAE = df.errors.InvalidArgumentError


def f32(*shape):
    return np.ones(shape, np.float32)


def f64(*shape):
    return np.ones(shape, np.float64)


def i32(*values):
    return np.asarray(values, np.int32)


class E:
    """An error row: `fn(*inputs)` raises `exc` with every string of `says` in its message."""

    def __init__(self, id, fn, inputs, says, exc=IAE, eager_only=False):
        self.id, self.fn, self.inputs, self.says, self.exc, self.eager_only = id, fn, inputs, says, exc, eager_only


ERRORS = [
    # dtype mismatches name both dtypes
    E("add_dtypes", df.add, [f32(2), f64(2)], ["add", "float32", "float64"]),
    E("matmul_dtypes", df.matmul, [f32(2, 2), f64(2, 2)], ["matmul", "float32", "float64"]),
    E("where_dtypes", df.where, [np.array([True]), f32(1), f64(1)], ["where", "float32", "float64"]),
    E("concat_dtypes", lambda a, b: df.concat([a, b], 0), [f32(2), f64(2)], ["concat", "float32", "float64"]),
    E("stack_dtypes", lambda a, b: df.stack([a, b]), [f32(2), f64(2)], ["stack", "float32", "float64"]),
    E("add_n_dtypes", lambda a, b: df.add_n([a, b]), [f32(2), f64(2)], ["add_n", "float32", "float64"]),
    E("pad_dtypes", lambda x, c: df.pad(x, [[1, 1]], constant_values=c), [f32(2), np.float64(1)],
      ["pad", "float32", "float64"]),
    E("xent_dtypes", df.softmax_cross_entropy_with_logits, [f32(2, 3), f64(2, 3)],
      ["softmax_cross_entropy_with_logits", "float32", "float64"]),
    E("python_float_with_int", lambda x: df.add(x, 1.5), [i32(1, 2)], ["add", "int32"]),
    # unsupported dtypes name the op and the dtype
    E("exp_int", df.exp, [i32(1)], ["exp", "int32"]),
    E("log_bool", df.log, [np.array([True])], ["log", "bool"]),
    E("softmax_int", df.softmax, [i32(1, 2)], ["softmax", "int32"]),
    E("logical_and_float", df.logical_and, [f32(2), f32(2)], ["logical_and", "float32"]),
    E("where_cond_float", df.where, [f32(2), f32(2), f32(2)], ["where", "bool", "float32"]),
    E("gather_float_indices", df.gather, [f32(3), f32(2)], ["gather", "indices", "float32"]),
    E("one_hot_float_indices", lambda i: df.one_hot(i, 3), [f32(2)], ["one_hot", "float32"]),
    E("sparse_float_labels", df.sparse_softmax_cross_entropy_with_logits, [f32(2), f32(2, 3)],
      ["sparse_softmax_cross_entropy_with_logits", "float32"]),
    E("sparse_int_logits", df.sparse_softmax_cross_entropy_with_logits, [i32(0, 1), np.ones((2, 3), np.int32)],
      ["sparse_softmax_cross_entropy_with_logits", "int32"]),
    E("reduce_max_bool", df.reduce_max, [np.array([True])], ["reduce_max", "bool"]),
    E("range_bool", lambda: df.range(3, dtype=df.bool), [], ["range", "bool"]),
    # shapes
    E("add_broadcast", df.add, [f32(2, 3), f32(4)], ["add", "2, 3", "4"]),
    E("matmul_inner", df.matmul, [f32(2, 3), f32(4, 5)], ["matmul", "2, 3", "4, 5"]),
    E("matmul_rank", df.matmul, [f32(3), f32(3, 2)], ["matmul"]),
    E("reshape_count", lambda x: df.reshape(x, [4]), [f32(2, 3)], ["reshape", "4"]),
    E("transpose_perm", lambda x: df.transpose(x, [0, 0]), [f32(2, 3)], ["transpose", "perm"]),
    E("concat_shapes", lambda a, b: df.concat([a, b], 0), [f32(2, 3), f32(2, 4)], ["concat", "2, 3", "2, 4"]),
    E("concat_axis", lambda a, b: df.concat([a, b], 2), [f32(2), f32(2)], ["concat", "axis 2"]),
    E("concat_scalars", lambda a, b: df.concat([a, b], 0), [f32(), f32()], ["concat"]),
    E("stack_shapes", lambda a, b: df.stack([a, b]), [f32(2), f32(3)], ["stack", "same shape", "2", "3"]),
    E("unstack_num", lambda x: df.unstack(x, num=3), [f32(2)], ["unstack", "num=3"]),
    E("split_uneven", lambda x: df.split(x, 2), [f32(5)], ["split", "5", "2"]),
    E("split_sizes", lambda x: df.split(x, [2, 2]), [f32(5)], ["split", "(2, 2)", "5"]),
    E("tile_multiples", lambda x: df.tile(x, [2]), [f32(2, 3)], ["tile", "multiples"]),
    E("pad_pairs", lambda x: df.pad(x, [[1, 1]]), [f32(2, 3)], ["pad", "paddings"]),
    E("pad_reflect_size", lambda x: df.pad(x, [[3, 0]], "REFLECT"), [f32(3)], ["pad", "REFLECT", "3"]),
    E("pad_mode", lambda x: df.pad(x, [[1, 0]], "WRAP"), [f32(3)], ["pad", "WRAP"]),
    E("squeeze_non_one", lambda x: df.squeeze(x, [0]), [f32(2, 1)], ["squeeze", "2, 1"]),
    E("expand_dims_axis", lambda x: df.expand_dims(x, 3), [f32(2)], ["expand_dims", "axis 3"]),
    E("broadcast_to_shape", lambda x: df.broadcast_to(x, [2, 4]), [f32(3)], ["broadcast_to", "3", "(2, 4)"]),
    E("broadcast_to_lower_rank", lambda x: df.broadcast_to(x, [3]), [f32(1, 3)], ["broadcast_to", "(3,)"]),
    E("expand_dims_negative_axis", lambda x: df.expand_dims(x, -3), [f32(2)], ["expand_dims", "axis -3"]),
    E("reduce_axis", lambda x: df.reduce_sum(x, axis=2), [f32(2, 3)], ["reduce_sum", "axis 2"]),
    E("argmax_axis", lambda x: df.argmax(x, axis=1), [f32(3)], ["argmax", "axis"]),
    E("softmax_axis", lambda x: df.softmax(x, axis=2), [f32(2, 3)], ["softmax", "axis 2"]),
    E("softmax_scalar", df.softmax, [f32()], ["softmax", "scalar"]),
    E("xent_shapes", df.softmax_cross_entropy_with_logits, [f32(2, 3), f32(2, 4)],
      ["softmax_cross_entropy_with_logits", "(2, 3)", "(2, 4)"]),
    E("sparse_shapes", df.sparse_softmax_cross_entropy_with_logits, [i32(0, 1, 2), f32(2, 4)],
      ["sparse_softmax_cross_entropy_with_logits", "(3,)", "(2, 4)"]),
    E("gather_scalar_params", df.gather, [f32(), i32(0)], ["gather", "rank"]),
    E("gather_axis", lambda p, i: df.gather(p, i, axis=2), [f32(2, 3), i32(0)], ["gather", "axis 2"]),
    E("fill_value_shape", lambda v: df.fill([2], v), [f32(2)], ["fill", "scalar"]),
    E("zeros_negative", lambda: df.zeros([-1]), [], ["zeros", "-1"]),
    # slicing
    E("slice_out_of_range", lambda x: x[5], [f32(3)], ["strided_slice", "5"]),
    E("slice_too_many", lambda x: x[0, 0], [f32(3)], ["strided_slice", "too many"]),
    E("slice_two_ellipses", lambda x: x[..., 0, ...], [f32(3, 3)], ["strided_slice", "ellipsis"]),
    E("slice_zero_step", lambda x: x[::0], [f32(3)], ["strided_slice", "zero"]),
    E("slice_list", lambda x: x[[0, 1]], [f32(3)], ["strided_slice", "df.gather"], exc=TypeError),
    E("slice_float", lambda x: x[1.5], [f32(3)], ["strided_slice", "df.gather"], exc=TypeError),
    # run-time values (only a kernel can see them)
    E("gather_out_of_range", df.gather, [f32(3, 2), i32(0, 3)], ["gather", "3", "[0, 3)"], eager_only=True),
    E("gather_negative", df.gather, [f32(3, 2), i32(-1)], ["gather", "-1"], eager_only=True),
    E("sparse_label_range", df.sparse_softmax_cross_entropy_with_logits, [i32(0, 3), f32(2, 3)],
      ["sparse_softmax_cross_entropy_with_logits", "3", "[0, 3)"], eager_only=True),
    E("sparse_label_negative", df.sparse_softmax_cross_entropy_with_logits, [i32(-1, 0), f32(2, 3)],
      ["sparse_softmax_cross_entropy_with_logits", "-1", "[0, 3)"], eager_only=True),
    E("sparse_label_range_nd", df.sparse_softmax_cross_entropy_with_logits,
      [np.array([[0, 1], [4, 2]], np.int64), f32(2, 2, 4)],
      ["sparse_softmax_cross_entropy_with_logits", "4", "[0, 4)"], eager_only=True),
    E("range_zero_delta", lambda: df.range(0, 3, 0), [], ["range", "delta"]),
    E("range_wrong_direction", lambda: df.range(3, 0, 1), [], ["range", "start=3", "limit=0"]),
    E("int_negative_pow", df.pow, [i32(2), i32(-1)], ["pow", "negative"], eager_only=True),
]


@pytest.mark.parametrize("mode", ["eager", "symbolic"])
@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in ERRORS])
def test_typed_error_names_the_op(row, mode):
    if mode == "eager":
        args = [df.constant(x) for x in row.inputs]
        with pytest.raises(row.exc) as info:
            row.fn(*args)
    else:
        if row.eager_only:
            # The error depends on values: tracing succeeds, and running the compiled graph
            # raises the same typed error, naming the node's op.
            args = [df.constant(x) for x in row.inputs]
            with pytest.raises(row.exc) as info:
                df.defun(row.fn)(*args)
            assert "while executing" in str(info.value)
        else:
            builder = SymbolicBuilder()
            with builder.building():
                args = [SymbolicTensor(np.shape(x), dtypes.from_numpy(np.asarray(x).dtype)) for x in row.inputs]
                with pytest.raises(row.exc) as info:
                    row.fn(*args)
    msg = str(info.value)
    for s in row.says:
        assert s in msg, f"error message {msg!r} should mention {s!r}"


def test_unknown_op_name_suggests_close_names():
    from defun.runtime import registry
    with pytest.raises(df.errors.NotFoundError, match="softmax"):
        registry.get("sofmax")


def test_eager_kernel_failures_read_like_the_traced_check():
    x = df.constant(np.ones((2, 2)))
    with pytest.raises(df.errors.InvalidArgumentError) as eager:
        x + df.constant(np.ones(3))
    traced = df.defun(lambda a, b: a + b)
    with pytest.raises(df.errors.InvalidArgumentError) as graph:
        traced(x, df.constant(np.ones(3)))
    assert "add: shapes (2, 2) and (3,) cannot be broadcast together" in str(eager.value)
    assert "add: shapes (2, 2) and (3,) cannot be broadcast together" in str(graph.value)
