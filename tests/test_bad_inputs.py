"""Bad inputs to ops and to defun: a typed error naming the op or argument, never numpy's.

One table: each row is a call (a one-line lambda over tensor inputs), the error type it must
raise and words its message must hold. Every row runs eagerly and, unless it is about
something other than an op call, traced by a defun with the inputs' signature: the traced
error must come while tracing and hold this file and the row's line (the user's line), or,
for errors only values can show (`run_time`), come when the graph runs and also from the
same function exported to JSON and loaded back.
"""
import json
import re

import numpy as np
import pytest

import defun as df

IAE = df.errors.InvalidArgumentError


def f32(*shape):
    return np.ones(shape, np.float32)


def i32(*values):
    return np.asarray(values, np.int32)


class B:
    """`fn(*inputs)` raises `exc` whose message holds each of `says`."""

    def __init__(self, id, fn, inputs, exc, says, traced=True, run_time=False):
        self.id, self.fn, self.inputs, self.exc, self.says = id, fn, inputs, exc, says
        self.traced, self.run_time = traced, run_time


X = f32(2, 3)
SQ = np.eye(3, dtype=np.float32)
IMG, FILTERS = f32(1, 5, 5, 2), f32(3, 3, 2, 4)

ROWS = [
    # ---------------------------------------------------------------- issue 7: silent acceptance
    B("floordiv_int_zero", lambda x, y: df.floordiv(x, y), [i32(4, 5), i32(2, 0)], IAE,
      ["floordiv", "division by zero"], run_time=True),
    B("mod_int_zero", lambda x, y: df.mod(x, y), [i32(4, 5), i32(0, 3)], IAE, ["mod", "division by zero"],
      run_time=True),
    B("floordiv_operator_zero", lambda x, y: x // y, [i32(1), i32(0)], IAE, ["floordiv", "zero"], run_time=True),
    B("reduce_sum_axis_str", lambda x: df.reduce_sum(x, axis="0"), [X], TypeError,
      ["reduce_sum", "axis must be an int", "str '0'"]),
    B("reduce_sum_axis_float", lambda x: df.reduce_sum(x, axis=1.0), [X], TypeError,
      ["reduce_sum", "axis must be an int", "float 1.0"]),
    B("reduce_sum_axis_bool", lambda x: df.reduce_sum(x, axis=True), [X], TypeError, ["reduce_sum", "bool"]),
    B("reduce_sum_axes_float", lambda x: df.reduce_sum(x, axis=[0, 1.5]), [X], TypeError,
      ["reduce_sum", "axis[1]", "float 1.5"]),
    B("reduce_mean_duplicate_axes", lambda x: df.reduce_mean(x, axis=(1, -1)), [X], IAE,
      ["reduce_mean", "names axis 1 twice"]),
    B("reduce_max_axis_range", lambda x: df.reduce_max(x, axis=2), [X], IAE, ["reduce_max", "axis 2", "rank 2"]),
    B("reshape_minus_two", lambda x: df.reshape(x, [-2, 3]), [X], IAE, ["reshape", "-2", "-1 for one size"]),
    B("reshape_two_unknowns", lambda x: df.reshape(x, [-1, -1]), [X], IAE, ["reshape", "more than one -1"]),
    B("one_hot_depth_str", lambda i: df.one_hot(i, depth="3"), [i32(0, 1)], TypeError,
      ["one_hot", "depth must be an int", "str '3'"]),
    B("one_hot_depth_negative", lambda i: df.one_hot(i, -1), [i32(0, 1)], IAE, ["one_hot", "depth", ">= 0"]),
    B("ones_float_size", lambda: df.ones([2.5]), [], TypeError, ["ones", "shape[0]", "float 2.5"]),
    B("zeros_bool_size", lambda: df.zeros([True, 2]), [], TypeError, ["zeros", "shape[0]", "bool"]),
    B("while_loop_no_vars", lambda: df.while_loop(lambda: True, lambda: [], []), [], IAE,
      ["while_loop", "no loop variable"]),
    # ---------------------------------------------------------------- issue 7: unclear errors
    B("reshape_str_shape", lambda x: df.reshape(x, "abc"), [X], TypeError,
      ["reshape", "shape must be a list of ints", "'abc'"]),
    B("zeros_str_shape", lambda: df.zeros("abc"), [], TypeError, ["zeros", "shape", "str 'abc'"]),
    B("tensor_spec_str_size", lambda: df.TensorSpec(["a"]), [], TypeError, ["TensorSpec", "shape[0]", "'a'"],
      traced=False),
    B("tensor_spec_negative", lambda: df.TensorSpec([-1, 2]), [], ValueError, ["TensorSpec", "None"],
      traced=False),
    B("cast_to_resource", lambda x: df.cast(x, df.resource), [X], IAE, ["cast", "resource"]),
    B("zeros_resource", lambda: df.zeros([2], df.resource), [], TypeError, ["zeros", "resource"]),
    # ---------------------------------------------------------------- axes out of range, keys
    B("concat_axis", lambda a, b: df.concat([a, b], 2), [X, X], IAE, ["concat", "axis 2", "rank 2"]),
    B("concat_axis_float", lambda a, b: df.concat([a, b], 0.0), [X, X], TypeError, ["concat", "axis", "float"]),
    B("concat_not_a_list", lambda a: df.concat(a, 0), [f32()], TypeError, ["concat", "list of tensors"]),
    B("stack_axis", lambda a, b: df.stack([a, b], 3), [X, X], IAE, ["stack", "axis 3", "rank 3"]),
    B("gather_axis", lambda p, i: df.gather(p, i, axis=-3), [X, i32(0)], IAE, ["gather", "axis -3"]),
    B("gather_batch_dims_float", lambda p, i: df.gather(p, i, batch_dims=0.5), [X, i32(0)], TypeError,
      ["gather", "batch_dims"]),
    B("softmax_axis", lambda x: df.softmax(x, axis=2), [X], IAE, ["softmax", "axis 2"]),
    B("log_softmax_axis", lambda x: df.log_softmax(x, axis=-3), [X], IAE, ["log_softmax", "axis -3"]),
    B("argmax_axis_str", lambda x: df.argmax(x, axis="1"), [X], TypeError, ["argmax", "axis", "str"]),
    B("expand_dims_axis_float", lambda x: df.expand_dims(x, 1.0), [X], TypeError, ["expand_dims", "axis"]),
    B("squeeze_axis_float", lambda x: df.squeeze(x, 0.0), [f32(1, 3)], TypeError, ["squeeze", "axis"]),
    B("unstack_num_str", lambda x: df.unstack(x, num="2"), [X], TypeError, ["unstack", "num", "str"]),
    B("split_zero_parts", lambda x: df.split(x, 0), [X], IAE, ["split", "number of splits", ">= 1"]),
    B("split_float_sizes", lambda x: df.split(x, [1.0, 1.0]), [X], TypeError, ["split", "size_splits[0]"]),
    B("transpose_float_perm", lambda x: df.transpose(x, [1.0, 0.0]), [X], TypeError, ["transpose", "perm[0]"]),
    B("slice_index_range", lambda x: x[5], [X], IAE, ["strided_slice", "index 5"]),
    B("slice_str_key", lambda x: x["a"], [X], TypeError, ["strided_slice", "'a'", "df.gather"]),
    B("slice_float_key", lambda x: x[0.5], [X], TypeError, ["strided_slice", "0.5"]),
    B("slice_too_many", lambda x: x[0, 0, 0], [X], IAE, ["strided_slice", "too many indices"]),
    B("slice_zero_step", lambda x: x[::0], [X], IAE, ["strided_slice", "step", "zero"]),
    # ---------------------------------------------------------------- shapes, counts
    B("tile_negative", lambda x: df.tile(x, [1, -2]), [X], IAE, ["tile", "negative size in multiples"]),
    B("fill_negative", lambda v: df.fill([2, -1], v), [f32()], IAE, ["fill", "negative size in dims"]),
    B("broadcast_to_float_shape", lambda x: df.broadcast_to(x, [2, 3.0]), [X], TypeError,
      ["broadcast_to", "shape[1]", "float"]),
    B("pad_float_paddings", lambda x: df.pad(x, [[0, 1.5], [0, 0]]), [X], IAE, ["pad", "list of ints"]),
    B("pad_mode_typo", lambda x: df.pad(x, [[0, 1], [0, 0]], "reflekt"), [X], IAE, ["pad", "'reflekt'"]),
    B("repeat_negative", lambda x: df.repeat(x, -1), [X], IAE, ["repeat", ">= 0"]),
    B("eye_negative", lambda: df.eye(-1), [], IAE, ["eye", "num_rows", ">= 0"]),
    B("eye_float", lambda: df.eye(2.5), [], TypeError, ["eye", "num_rows", "float"]),
    B("linspace_num_negative", lambda: df.linspace(0.0, 1.0, -1), [], IAE, ["linspace", "num", ">= 0"]),
    B("linspace_num_float", lambda: df.linspace(0.0, 1.0, 3.0), [], TypeError, ["linspace", "num", "float"]),
    B("range_str", lambda: df.range("3"), [], TypeError, ["range", "numbers", "'3'"]),
    B("range_zero_delta", lambda: df.range(0, 3, 0), [], IAE, ["range", "delta"]),
    B("scatter_nd_negative_shape", lambda i, u: df.scatter_nd(i, u, [-4]), [i32(0).reshape(1, 1), f32(1)], IAE,
      ["scatter_nd", "negative size"]),
    B("unsorted_segments_float", lambda d, s: df.unsorted_segment_sum(d, s, 2.0), [f32(3), i32(0, 1, 0)],
      TypeError, ["unsorted_segment_sum", "num_segments", "float"]),
    B("band_part_float", lambda x: df.linalg.band_part(x, 1.5, 0), [f32(3, 3)], TypeError,
      ["band_part", "num_lower"]),
    # ---------------------------------------------------------------- the newer families
    B("conv2d_padding_typo", lambda x, w: df.conv2d(x, w, padding="same "), [IMG, FILTERS], IAE,
      ["conv2d", "padding", "'same '"]),
    B("conv2d_strides_zero", lambda x, w: df.conv2d(x, w, strides=0), [IMG, FILTERS], IAE,
      ["conv2d", "strides", "positive"]),
    B("conv2d_channels", lambda x, w: df.conv2d(x, w), [IMG, f32(3, 3, 3, 4)], IAE, ["conv2d", "channels"]),
    B("conv2d_data_format", lambda x, w: df.conv2d(x, w, data_format="NCHW"), [IMG, FILTERS],
      df.errors.UnimplementedError, ["conv2d", "NHWC"]),
    B("max_pool_ksize_zero", lambda x: df.max_pool2d(x, 0, 1, "VALID"), [IMG], IAE, ["max_pool2d", "ksize"]),
    B("einsum_bad_equation", lambda a, b: df.einsum("ij,jk->ikl", a, b), [X, f32(3, 4)], IAE,
      ["einsum", "'ij,jk->ikl'"]),
    B("einsum_operand_count", lambda a: df.einsum("ij,jk->ik", a), [X], IAE, ["einsum", "operand"]),
    B("einsum_not_a_str", lambda a: df.einsum(3, a), [X], TypeError, ["einsum", "string"]),
    B("tensordot_axis", lambda a, b: df.tensordot(a, b, [[2], [0]]), [X, f32(3, 4)], IAE, ["tensordot", "axis 2"]),
    B("tensordot_axes_float", lambda a, b: df.tensordot(a, b, 1.5), [X, f32(3, 4)], TypeError,
      ["tensordot", "axes"]),
    B("top_k_too_large", lambda x: df.top_k(x, 5), [X], IAE, ["top_k", "k=5"]),
    B("top_k_negative", lambda x: df.top_k(x, -1), [X], IAE, ["top_k", "k", ">= 0"]),
    B("sort_direction", lambda x: df.sort(x, direction="UP"), [X], IAE, ["sort", "'UP'"]),
    B("cumsum_axis_float", lambda x: df.cumsum(x, axis=0.0), [X], TypeError, ["cumsum", "axis"]),
    B("norm_ord", lambda x: df.norm(x, ord="max"), [X], IAE, ["norm", "'max'"]),
    B("norm_duplicate_axes", lambda x: df.norm(x, axis=(1, -1)), [X], IAE, ["norm", "twice"]),
    B("cholesky_not_square", lambda x: df.linalg.cholesky(x), [X], IAE, ["cholesky", "square"]),
    B("solve_shapes", lambda a, b: df.linalg.solve(a, b), [f32(3, 3), f32(2, 1)], IAE, ["solve"]),
    B("dropout_rate_one", lambda x: df.dropout(x, 1.0, (1, 2)), [X], IAE, ["dropout", "rate", "[0, 1)"]),
    B("dropout_rate_str", lambda x: df.dropout(x, "0.5", (1, 2)), [X], IAE, ["dropout", "rate"]),
    B("random_seed_shape", lambda: df.random.normal([2], (1, 2, 3)), [], IAE, ["stateless_random_normal", "seed"]),
    B("random_seed_tensor_shape", lambda s: df.random.uniform([2], s), [np.zeros(3, np.int64)], IAE,
      ["stateless_random_uniform", "seed must have shape [2]"]),
    B("random_dtype", lambda: df.random.uniform([2], (1, 2), dtype=df.int32), [], IAE, ["uniform", "floating"]),
    B("meshgrid_indexing", lambda a: df.meshgrid(a, indexing="xz"), [f32(2)], IAE, ["meshgrid", "'xz'"]),
    # ---------------------------------------------------------------- issue 21: bool flags are bools
    B("triangular_solve_lower_str", lambda a, b: df.linalg.triangular_solve(a, b, lower="no"), [SQ, f32(3, 1)],
      TypeError, ["triangular_solve", "lower must be a bool", "str 'no'"]),
    B("triangular_solve_lower_int", lambda a, b: df.linalg.triangular_solve(a, b, lower=0), [SQ, f32(3, 1)],
      TypeError, ["triangular_solve", "lower must be a bool", "int 0"]),
    B("triangular_solve_adjoint_none", lambda a, b: df.linalg.triangular_solve(a, b, adjoint=None), [SQ, f32(3, 1)],
      TypeError, ["triangular_solve", "adjoint must be a bool"]),
    B("solve_adjoint_str", lambda a, b: df.linalg.solve(a, b, adjoint="False"), [SQ, f32(3, 1)], TypeError,
      ["solve", "adjoint must be a bool"]),
    B("matmul_transpose_str", lambda a, b: df.matmul(a, b, transpose_b="yes"), [X, X], TypeError,
      ["matmul", "transpose_b must be a bool"]),
    B("reduce_sum_keepdims_int", lambda x: df.reduce_sum(x, axis=1, keepdims=1), [X], TypeError,
      ["reduce_sum", "keepdims must be a bool", "int 1"]),
    B("reduce_logsumexp_keepdims_str", lambda x: df.reduce_logsumexp(x, keepdims="no"), [X], TypeError,
      ["reduce_logsumexp", "keepdims must be a bool"]),
    B("norm_keepdims_str", lambda x: df.norm(x, keepdims="no"), [X], TypeError, ["norm", "keepdims must be a bool"]),
    B("cumsum_reverse_str", lambda x: df.cumsum(x, reverse="no"), [X], TypeError, ["cumsum", "reverse must be a bool"]),
    B("cumprod_exclusive_list", lambda x: df.cumprod(x, exclusive=[]), [X], TypeError,
      ["cumprod", "exclusive must be a bool"]),
    B("gelu_approximate_str", lambda x: df.gelu(x, approximate="no"), [X], TypeError,
      ["gelu", "approximate must be a bool"]),
    B("svd_compute_uv_str", lambda x: df.linalg.svd(x, compute_uv="no"), [X], TypeError,
      ["svd", "compute_uv must be a bool"]),
    B("qr_full_matrices_int", lambda x: df.linalg.qr(x, full_matrices=1), [X], TypeError,
      ["qr", "full_matrices must be a bool"]),
    B("top_k_sorted_str", lambda x: df.top_k(x, 2, sorted="no"), [X], TypeError, ["top_k", "sorted must be a bool"]),
    B("scan_reverse_str", lambda x: df.scan(lambda a, r: a + r, x, reverse="no"), [X], TypeError,
      ["scan", "reverse must be a bool"]),
    B("variable_trainable_str", lambda: df.Variable(1.0, trainable="no"), [], TypeError,
      ["Variable", "trainable must be a bool"], traced=False),
    B("tape_persistent_str", lambda: df.GradientTape(persistent="no"), [], TypeError,
      ["GradientTape", "persistent must be a bool"], traced=False),
    # ---------------------------------------------------------------- issue 21: values and shapes
    B("one_hot_on_value_fraction", lambda i: df.one_hot(i, 3, on_value=2.5, dtype=df.int32), [i32(0, 1)], IAE,
      ["one_hot", "on_value=2.5", "int32"]),
    B("one_hot_off_value_overflow", lambda i: df.one_hot(i, 3, off_value=2.0 ** 40, dtype=df.int32), [i32(0, 1)],
      IAE, ["one_hot", "off_value", "int32"]),
    B("one_hot_on_value_bool", lambda i: df.one_hot(i, 3, on_value=2, dtype=df.bool), [i32(0, 1)], IAE,
      ["one_hot", "on_value=2", "bool"]),
    B("one_hot_on_value_float16_overflow", lambda i: df.one_hot(i, 3, on_value=1e6, dtype=df.float16), [i32(0)],
      IAE, ["one_hot", "float16"]),
    B("one_hot_on_value_nan_int", lambda i: df.one_hot(i, 3, on_value=float("nan"), dtype=df.int64), [i32(0)],
      IAE, ["one_hot", "nan", "int64"]),
    B("conv2d_filter_no_rows", lambda x, w: df.conv2d(x, w), [IMG, f32(0, 3, 2, 4)], IAE,
      ["conv2d", "(0, 3, 2, 4)", "no rows"]),
    B("conv2d_filter_no_columns", lambda x, w: df.conv2d(x, w, padding="SAME"), [IMG, f32(3, 0, 2, 4)], IAE,
      ["conv2d", "no columns"]),
    B("leaky_relu_alpha_nan", lambda x: df.leaky_relu(x, alpha=float("nan")), [X], IAE,
      ["leaky_relu", "alpha must be a finite number"]),
    B("leaky_relu_alpha_str", lambda x: df.leaky_relu(x, alpha="0.2"), [X], TypeError,
      ["leaky_relu", "alpha must be a number", "str '0.2'"]),
    B("norm_ord_bool", lambda x: df.norm(x, ord=True), [X], TypeError, ["norm", "ord", "bool"]),
    B("argmax_float_output_type", lambda x: df.argmax(x, output_type=df.float32), [X], IAE,
      ["argmax", "output_type must be int32 or int64", "float32"]),
    B("range_nan_limit", lambda: df.range(0.0, float("nan")), [], IAE, ["range", "finite", "limit=nan"]),
    B("range_infinite_limit", lambda: df.range(0.0, float("inf"), 1.0), [], IAE, ["range", "finite", "limit=inf"]),
]


def _traced_line(row):
    """`this_file:line` of the row's lambda: where its op is called, the user's line."""
    return f"{__file__}:{row.fn.__code__.co_firstlineno}"


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in ROWS])
def test_eager(row):
    with pytest.raises(row.exc) as info:
        row.fn(*[df.constant(x) for x in row.inputs])
    _check_message(row, str(info.value))


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in ROWS if r.traced])
def test_traced(row):
    sig = [df.TensorSpec(np.shape(x), df.as_dtype(np.asarray(x).dtype)) for x in row.inputs]
    f = df.defun(row.fn, input_signature=sig)
    if not row.run_time:
        with pytest.raises(row.exc) as info:
            f.get_concrete_function()
        msg = str(info.value)
        _check_message(row, msg)
        assert f"while tracing, at {_traced_line(row)}" in msg, f"{msg!r} should name the line {_traced_line(row)}"
        return
    cf = f.get_concrete_function()   # traces: only the values can tell
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    for run in (f, loaded):
        with pytest.raises(row.exc) as info:
            run(*row.inputs)
        _check_message(row, str(info.value))


def _check_message(row, msg):
    for s in row.says:
        assert s in msg, f"{row.id}: error message {msg!r} should mention {s!r}"
    assert not re.search(r"invalid literal|not supported between|encountered in|object has no attribute", msg), msg


def test_the_bool_flags_of_the_ops_are_all_checked():
    """Every bool attr of a registered op comes from a public function that checks it: a row
    above covers each such op (the reductions share one checked wrapper per family)."""
    from defun.runtime import registry
    # flags the library sets itself, never a user's argument (fft's `inverse`: df.signal.fft or ifft)
    internal = {"while", "linear_scan", "fft"}
    flagged = {op.name for op in registry.all_ops() if "bool" in op.attrs.values()} - internal
    covered = {r.says[0] for r in ROWS if any("must be a bool" in w for w in r.says)}
    reductions = {name for name in flagged if name.startswith("reduce_")}
    assert {"reduce_sum", "reduce_logsumexp"} <= covered     # one of each wrapper family
    assert flagged - covered - reductions == set()


def test_masked_arrays_are_refused_rather_than_losing_their_mask():
    m = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False])
    says = "masked array cannot become a tensor: its mask would be lost"
    for call, who in [(lambda: df.reduce_sum(m), "reduce_sum: input 0"), (lambda: df.tanh(m), "tanh: input 0"),
                      (lambda: df.constant(1.0, df.float64) + m, "add: input 1"),
                      (lambda: df.constant(m), "constant"), (lambda: df.constant(m, df.float32), "constant"),
                      (lambda: df.convert_to_tensor(m), ""),
                      (lambda: df.Variable(m), "Variable: initial_value"),
                      (lambda: df.defun(lambda x: x * 2.0)(m), "defun argument x")]:
        with pytest.raises(TypeError) as info:
            call()
        assert says in str(info.value) and str(info.value).startswith(who), str(info.value)
    loaded = df.load_json(df.export_json(df.defun(lambda x: x * 2.0).get_concrete_function(df.constant(m.data))))
    with pytest.raises(TypeError, match=r"argument 0 \(x\): a numpy masked array"):
        loaded(m)
    np.testing.assert_array_equal(df.reduce_sum(m.filled(0.0)).numpy(), 4.0)    # the way out works


def test_a_loaded_document_with_a_truncating_one_hot_is_refused():
    """The loader asks the same inference: a document whose one_hot would truncate 2.5 into
    int32 does not load."""
    doc = json.loads(json.dumps(df.export_json(df.defun(lambda i: df.one_hot(i, 2, dtype=df.int32)).
                                               get_concrete_function(df.constant(i32(0, 1))))))
    node = [n for n in doc["functions"][0]["nodes"] if n["op"] == "one_hot"][0]
    node["attrs"]["on_value"] = 2.5
    with pytest.raises(df.errors.GraphFormatError, match="on_value=2.5"):
        df.load_json(doc)


# ---------------------------------------------------------------------------------------
# Bad inputs to defun and the tape: what the trace or the gradient is given

def test_a_dict_with_keys_of_mixed_types_is_refused_by_name():
    f = df.defun(lambda x: {"a": x, 1: x})
    with pytest.raises(TypeError, match=r"dict .* keys of one sortable kind .* got keys 'a', 1"):
        f(df.constant([1.0]))
    g = df.defun(lambda d: d["a"] * 2.0)    # as an argument: its cache key sorts the keys too
    with pytest.raises(TypeError, match=r"dict .* keys of one sortable kind .* got keys 'a', 1"):
        g({"a": df.constant([1.0]), 1: df.constant([2.0])})


def test_a_recursive_defun_is_a_tracing_error():
    @df.defun
    def forever(x):
        return forever(x) + 1.0

    with pytest.raises(df.errors.TracingError, match="'forever' calls itself with the same argument types"):
        forever(df.constant([1.0]))


def test_recursion_through_new_keys_is_a_tracing_error_not_a_recursion_error():
    @df.defun
    def deeper(x, n):
        return deeper(x, n + 1)    # a new cache key each time, no base case

    with pytest.raises(df.errors.TracingError, match="'deeper': Python's recursion limit"):
        deeper(df.constant(1.0), 0)


def test_recursion_that_stops_on_a_python_value_still_traces():
    @df.defun
    def power(x, n):
        return x if n == 1 else x * power(x, n - 1)

    np.testing.assert_allclose(power(df.constant(2.0), 4).numpy(), 16.0)


def test_output_gradients_of_the_wrong_shape_name_the_target():
    x = df.constant([1.0, 2.0])
    with df.GradientTape() as tape:
        tape.watch(x)
        y = x * 2.0
    with pytest.raises(IAE, match=r"output_gradients\[0\] has shape \(3,\), but target 0 has shape \(2,\)"):
        tape.gradient(y, x, output_gradients=[df.constant([1.0, 2.0, 3.0])])


def test_floats_divide_by_zero_as_numpy_does():
    with np.errstate(divide="ignore"):
        out = df.floordiv(df.constant([1.0, -1.0]), df.constant([0.0, 0.0]))
    assert np.all(np.isinf(out.numpy()))


def test_a_symbolic_axis_is_refused_while_tracing_naming_it():
    f = df.defun(lambda x, a: df.reduce_sum(x, axis=a),
                 input_signature=[df.TensorSpec([2, 3]), df.TensorSpec([], df.int32)])
    with pytest.raises(IAE, match=r"reduce_sum: axis must be known while tracing"):
        f.get_concrete_function()
