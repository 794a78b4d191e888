"""The public functions that mirror a TensorFlow function take TF's parameter names, in TF's
order, so a call written for TF by keyword means the same here (issue 19: `df.atan2(y=1.,
x=-1.)` gave -0.785 with the names swapped; TF gives 2.356).

The table below is written from TF 2's documented signatures (tensorflow.org/api_docs);
`=` marks a parameter with a default there. A df function may leave out TF parameters it
does not support, but each of its own parameters must be TF's, in TF's order (`name`, which
TF places last in most and before `axis` in tf.linspace, is not ordered, nor are keyword-only
parameters), and it must have every parameter TF requires. Functions without a TF counterpart (hypot, log2, logaddexp...:
TF has them only in tf.experimental.numpy, with numpy's names) are not in the table."""
import inspect

import pytest

import defun as df

# Where the API contract (API.md, binding: outside test suites are written against it) names
# the parameters itself, its names win over TF's (tf.transpose(a, ...), tf.repeat(input, ...),
# tf.nn.conv2d(input, filters, strides, padding, data_format, dilations): dilations is fifth in
# the contract).
CONTRACT = {
    "transpose": "API.md transpose(x, perm=, name=)",
    "repeat": "API.md repeat(x, repeats, axis=, name=)",
    "conv2d": "API.md conv2d(x, filters, strides=, padding=, dilations=, data_format=, name=)",
}

TF = {
    # math, elementwise (tf.math.*)
    "abs": "tf.math.abs(x, name=)", "acos": "tf.math.acos(x, name=)", "acosh": "tf.math.acosh(x, name=)",
    "asin": "tf.math.asin(x, name=)", "asinh": "tf.math.asinh(x, name=)", "atan": "tf.math.atan(x, name=)",
    "atanh": "tf.math.atanh(x, name=)", "atan2": "tf.math.atan2(y, x, name=)",
    "ceil": "tf.math.ceil(x, name=)", "cos": "tf.math.cos(x, name=)", "cosh": "tf.math.cosh(x, name=)",
    "erf": "tf.math.erf(x, name=)", "exp": "tf.math.exp(x, name=)", "expm1": "tf.math.expm1(x, name=)",
    "floor": "tf.math.floor(x, name=)", "is_finite": "tf.math.is_finite(x, name=)",
    "is_nan": "tf.math.is_nan(x, name=)", "log": "tf.math.log(x, name=)", "log1p": "tf.math.log1p(x, name=)",
    "logical_not": "tf.math.logical_not(x, name=)", "negative": "tf.math.negative(x, name=)",
    "reciprocal": "tf.math.reciprocal(x, name=)", "round": "tf.math.round(x, name=)",
    "rsqrt": "tf.math.rsqrt(x, name=)", "sigmoid": "tf.math.sigmoid(x, name=)", "sign": "tf.math.sign(x, name=)",
    "sin": "tf.math.sin(x, name=)", "sinh": "tf.math.sinh(x, name=)", "sqrt": "tf.math.sqrt(x, name=)",
    "square": "tf.math.square(x, name=)", "tan": "tf.math.tan(x, name=)", "tanh": "tf.math.tanh(x, name=)",
    "softplus": "tf.math.softplus(features, name=)",
    "add": "tf.math.add(x, y, name=)", "subtract": "tf.math.subtract(x, y, name=)",
    "multiply": "tf.math.multiply(x, y, name=)", "divide": "tf.math.divide(x, y, name=)",
    "floordiv": "tf.math.floordiv(x, y, name=)", "mod": "tf.math.mod(x, y, name=)",
    "pow": "tf.math.pow(x, y, name=)", "maximum": "tf.math.maximum(x, y, name=)",
    "minimum": "tf.math.minimum(x, y, name=)", "squared_difference": "tf.math.squared_difference(x, y, name=)",
    "equal": "tf.math.equal(x, y, name=)", "not_equal": "tf.math.not_equal(x, y, name=)",
    "less": "tf.math.less(x, y, name=)", "less_equal": "tf.math.less_equal(x, y, name=)",
    "greater": "tf.math.greater(x, y, name=)", "greater_equal": "tf.math.greater_equal(x, y, name=)",
    "logical_and": "tf.math.logical_and(x, y, name=)", "logical_or": "tf.math.logical_or(x, y, name=)",
    "bitwise_and": "tf.bitwise.bitwise_and(x, y, name=)", "bitwise_or": "tf.bitwise.bitwise_or(x, y, name=)",
    "bitwise_xor": "tf.bitwise.bitwise_xor(x, y, name=)", "invert": "tf.bitwise.invert(x, name=)",
    "left_shift": "tf.bitwise.left_shift(x, y, name=)", "right_shift": "tf.bitwise.right_shift(x, y, name=)",
    "add_n": "tf.math.add_n(inputs, name=)",
    # complex numbers
    "angle": "tf.math.angle(input, name=)", "complex": "tf.dtypes.complex(real, imag, name=)",
    "conj": "tf.math.conj(x, name=)", "imag": "tf.math.imag(input, name=)", "real": "tf.math.real(input, name=)",
    **{f"signal.{f}": f"tf.signal.{f}(input, name=)" for f in ("fft", "ifft", "fft2", "ifft2")},
    **{f"signal.{f}": f"tf.signal.{f}(input_tensor, fft_length=, name=)" for f in ("rfft", "irfft", "rfft2", "irfft2")},
    "cumsum": "tf.math.cumsum(x, axis=, exclusive=, reverse=, name=)",
    "cumprod": "tf.math.cumprod(x, axis=, exclusive=, reverse=, name=)",
    "argmax": "tf.math.argmax(input, axis=, output_type=, name=)",
    "argmin": "tf.math.argmin(input, axis=, output_type=, name=)",
    "segment_sum": "tf.math.segment_sum(data, segment_ids, name=)",
    "unsorted_segment_sum": "tf.math.unsorted_segment_sum(data, segment_ids, num_segments, name=)",
    "top_k": "tf.math.top_k(input, k=, sorted=, index_type=, name=)",
    **{r: f"tf.math.{r}(input_tensor, axis=, keepdims=, name=)"
       for r in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_any",
                 "reduce_all", "reduce_logsumexp")},
    "matmul": "tf.linalg.matmul(a, b, transpose_a=, transpose_b=, adjoint_a=, adjoint_b=, a_is_sparse=, "
              "b_is_sparse=, output_type=, name=)",
    "tensordot": "tf.tensordot(a, b, axes, name=)",
    "einsum": "tf.einsum(equation, *inputs, optimize=, name=)",
    "clip_by_value": "tf.clip_by_value(t, clip_value_min, clip_value_max, name=)",
    "norm": "tf.norm(tensor, ord=, axis=, keepdims=, name=)",
    # arrays
    "cast": "tf.cast(x, dtype, name=)", "identity": "tf.identity(input, name=)",
    "stop_gradient": "tf.stop_gradient(input, name=)",
    "constant": "tf.constant(value, dtype=, shape=, name=)",
    "convert_to_tensor": "tf.convert_to_tensor(value, dtype=, dtype_hint=, name=)",
    "zeros": "tf.zeros(shape, dtype=, name=)", "ones": "tf.ones(shape, dtype=, name=)",
    "zeros_like": "tf.zeros_like(input, dtype=, name=)", "ones_like": "tf.ones_like(input, dtype=, name=)",
    "fill": "tf.fill(dims, value, name=)", "eye": "tf.eye(num_rows, num_columns=, batch_shape=, dtype=, name=)",
    "range": "tf.range(start, limit=, delta=, dtype=, name=)",
    "linspace": "tf.linspace(start, stop, num, name=, axis=)",
    "reshape": "tf.reshape(tensor, shape, name=)", "transpose": CONTRACT["transpose"],
    "expand_dims": "tf.expand_dims(input, axis, name=)", "squeeze": "tf.squeeze(input, axis=, name=)",
    "concat": "tf.concat(values, axis, name=)", "stack": "tf.stack(values, axis=, name=)",
    "unstack": "tf.unstack(value, num=, axis=, name=)",
    "split": "tf.split(value, num_or_size_splits, axis=, num=, name=)",
    "tile": "tf.tile(input, multiples, name=)", "broadcast_to": "tf.broadcast_to(input, shape, name=)",
    "pad": "tf.pad(tensor, paddings, mode=, constant_values=, name=)",
    "shape": "tf.shape(input, out_type=, name=)", "size": "tf.size(input, out_type=, name=)",
    "gather": "tf.gather(params, indices, validate_indices=, axis=, batch_dims=, name=)",
    "gather_nd": "tf.gather_nd(params, indices, batch_dims=, name=)",
    "scatter_nd": "tf.scatter_nd(indices, updates, shape, name=)",
    "where": "tf.where(condition, x=, y=, name=)",
    "one_hot": "tf.one_hot(indices, depth, on_value=, off_value=, axis=, dtype=, name=)",
    "repeat": CONTRACT["repeat"], "roll": "tf.roll(input, shift, axis, name=)",
    "reverse": "tf.reverse(tensor, axis, name=)",
    "sort": "tf.sort(values, axis=, direction=, name=)",
    "argsort": "tf.argsort(values, axis=, direction=, stable=, name=)",
    "meshgrid": "tf.meshgrid(*args, indexing=, name=)",
    "outer": "tf.experimental.numpy.outer(a, b)",
    # nn
    "relu": "tf.nn.relu(features, name=)", "elu": "tf.nn.elu(features, name=)",
    "leaky_relu": "tf.nn.leaky_relu(features, alpha=, name=)", "gelu": "tf.nn.gelu(features, approximate=, name=)",
    "softmax": "tf.nn.softmax(logits, axis=, name=)", "log_softmax": "tf.nn.log_softmax(logits, axis=, name=)",
    "softmax_cross_entropy_with_logits": "tf.nn.softmax_cross_entropy_with_logits(labels, logits, axis=, name=)",
    "sparse_softmax_cross_entropy_with_logits":
        "tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name=)",
    "conv2d": CONTRACT["conv2d"],
    "max_pool2d": "tf.nn.max_pool2d(input, ksize, strides, padding, data_format=, name=)",
    "avg_pool2d": "tf.nn.avg_pool2d(input, ksize, strides, padding, data_format=, name=)",
    # the seed is an argument (stateless): TF's stateless dropout
    "dropout": "tf.nn.experimental.stateless_dropout(x, rate, seed, rng_alg=, noise_shape=, name=)",
    # control flow, gradients, printing
    "cond": "tf.cond(pred, true_fn=, false_fn=, name=)",
    "while_loop": "tf.while_loop(cond, body, loop_vars, shape_invariants=, parallel_iterations=, back_prop=, "
                  "swap_memory=, maximum_iterations=, name=)",
    "scan": "tf.scan(fn, elems, initializer=, parallel_iterations=, back_prop=, swap_memory=, infer_shape=, "
            "reverse=, name=)",
    "map_fn": "tf.map_fn(fn, elems, dtype=, parallel_iterations=, back_prop=, swap_memory=, infer_shape=, name=, "
              "fn_output_signature=)",
    "foldl": "tf.foldl(fn, elems, initializer=, parallel_iterations=, back_prop=, swap_memory=, name=)",
    "vectorized_map": "tf.vectorized_map(fn, elems, fallback_to_while_loop=, warn=)",
    "custom_gradient": "tf.custom_gradient(f=)",
    "print": "tf.print(*inputs, output_stream=, summarize=, sep=, end=, name=)",
    # tf.linalg
    "linalg.band_part": "tf.linalg.band_part(input, num_lower, num_upper, name=)",
    "linalg.cholesky": "tf.linalg.cholesky(input, name=)", "linalg.det": "tf.linalg.det(input, name=)",
    "linalg.diag": "tf.linalg.diag(diagonal, name=, k=, num_rows=, num_cols=, padding_value=, align=)",
    "linalg.diag_part": "tf.linalg.diag_part(input, name=, k=, padding_value=, align=)",
    "linalg.eigh": "tf.linalg.eigh(tensor, name=)", "linalg.inv": "tf.linalg.inv(input, adjoint=, name=)",
    "linalg.matrix_transpose": "tf.linalg.matrix_transpose(a, name=, conjugate=)",
    "linalg.norm": "tf.norm(tensor, ord=, axis=, keepdims=, name=)",
    "linalg.qr": "tf.linalg.qr(input, full_matrices=, name=)", "linalg.slogdet": "tf.linalg.slogdet(input, name=)",
    "linalg.solve": "tf.linalg.solve(matrix, rhs, adjoint=, name=)",
    "linalg.svd": "tf.linalg.svd(tensor, full_matrices=, compute_uv=, name=)",
    "linalg.trace": "tf.linalg.trace(x, name=)",
    "linalg.triangular_solve": "tf.linalg.triangular_solve(matrix, rhs, lower=, adjoint=, name=)",
    # tf.random's stateless samplers (the seed is an argument)
    "random.normal": "tf.random.stateless_normal(shape, seed, mean=, stddev=, dtype=, name=, alg=)",
    "random.uniform": "tf.random.stateless_uniform(shape, seed, minval=, maxval=, dtype=, name=, alg=)",
    "debugging.check_numerics": "tf.debugging.check_numerics(tensor, message, name=)",
}


def _tf_params(entry):
    """[(name, required)] of a table entry; *args/**kwargs as '*name' / '**name'."""
    inside = entry[entry.index("(") + 1:entry.rindex(")")]
    out = []
    for p in (s.strip() for s in inside.split(",")):
        if p:
            name = "*" if p.startswith("*") and not p.startswith("**") else p.rstrip("=")
            out.append((name, not p.endswith("=") and not p.startswith("*")))
    return out


def _df_function(path):
    obj = df
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _df_params(fn):
    """[(name, keyword_only)]; *args is '*' whatever its name (it takes no keyword)."""
    kinds = inspect.Parameter
    return [("*" if p.kind is kinds.VAR_POSITIONAL else ("**" if p.kind is kinds.VAR_KEYWORD else "") + p.name,
             p.kind is kinds.KEYWORD_ONLY) for p in inspect.signature(fn).parameters.values()]


def mismatch(path, fn=None):
    """None, or what differs between df.<path>'s parameters (or `fn`'s) and TF's."""
    tf = _tf_params(TF[path])
    tf_names = [n for n, _ in tf]
    params = _df_params(fn or _df_function(path))
    ours = [n for n, _ in params]
    unknown = [n for n in ours if n not in tf_names and n != "name"]    # every df op takes a name
    if unknown:
        return f"df.{path}{tuple(ours)}: {unknown} are not parameters of {TF[path]}"
    missing = [n for n, required in tf if required and n not in ours]
    if missing:
        return f"df.{path}{tuple(ours)}: lacks {missing}, which {TF[path]} requires"
    ordered = [n for n, keyword_only in params if n != "name" and not keyword_only]
    if ordered != [n for n in tf_names if n in ordered]:
        return f"df.{path}{tuple(ours)}: the order differs from {TF[path]}"
    return None


@pytest.mark.parametrize("path", sorted(TF))
def test_parameter_names_are_tfs(path):
    why = mismatch(path)
    assert why is None, why


def test_the_table_covers_every_public_function_with_a_tf_counterpart():
    """A new public function that mirrors TF gets a row here (or is said to have no counterpart)."""
    no_counterpart = {
        # TF has these only in tf.experimental.numpy, with numpy's parameter names
        "hypot", "log2", "log10", "logaddexp",
        # this library's own API (tracing, export, gradients by function, callbacks, checkpoints)
        "defun", "export_json", "export_numpy_source", "export_onnx", "load_json", "execute",
        "executing_eagerly", "active_trace", "backends", "add_execution_callback", "remove_execution_callback",
        "gradients_function", "value_and_gradients_function", "implicit_gradients",
        "implicit_value_and_gradients", "record_operation", "tensor_id", "unbroadcast", "as_dtype",
        "save_variables", "restore_variables", "profile", "register_backend", "view",
        "vmap",                                  # jax's (fn, in_axes, out_axes); TF's is vectorized_map
    }
    public = [n for n in df.__all__ if callable(getattr(df, n)) and not isinstance(getattr(df, n), type)
              and not inspect.ismodule(getattr(df, n))]
    uncovered = sorted(n for n in public if n not in TF and n not in no_counterpart)
    assert uncovered == [], f"public functions with neither a TF signature row nor a reason: {uncovered}"


def test_the_check_catches_swapped_names():
    """The checker itself: atan2 with TF's names passes, the old swapped form fails."""
    def swapped(x, y, name=None):
        return None

    def renamed(input, name=None):
        return None
    assert "order differs" in mismatch("atan2", swapped)
    assert "not parameters" in mismatch("relu", renamed)
    assert "requires" in mismatch("roll", lambda input, shift, name=None: None)
    assert mismatch("atan2") is None
