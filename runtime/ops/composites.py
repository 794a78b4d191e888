"""Functions TensorFlow users reach for under `tf.nn` and `tf.math` that are compositions of
df's ops: each is written with the public functions, so it traces, differentiates (any
order, both modes), batches and exports exactly as the ops it is made of, and no row of its
own is registered. `df.nn` and `df.math` (defun/nn.py, defun/math.py) list them beside the
aliases of the registered ops.
"""
from defun.runtime import dtypes, errors
from defun.runtime.ops import math_ops as m
from defun.runtime.ops.array_ops import reshape, where, zeros_like
from defun.runtime.ops.special_math_ops import is_finite, is_nan, softplus
from defun.runtime.tensor import convert_to_tensor

__all__ = ["sigmoid_cross_entropy_with_logits", "weighted_cross_entropy_with_logits", "l2_loss",
           "log_sigmoid", "softsign", "relu6", "silu", "selu", "l2_normalize", "moments", "bias_add",
           "divide_no_nan", "multiply_no_nan", "xdivy", "is_inf", "reduce_variance", "reduce_std",
           "reduce_euclidean_norm", "count_nonzero"]


def _same_shapes(fn, labels, logits):
    labels, logits = convert_to_tensor(labels), convert_to_tensor(logits)
    if tuple(labels.shape) != tuple(logits.shape) and None not in labels.shape + logits.shape:
        raise errors.InvalidArgumentError(
            f"{fn}: labels and logits must have the same shape, got {list(labels.shape)} and "
            f"{list(logits.shape)}")
    return labels, logits


def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """Elementwise binary cross entropy of `labels` (probabilities) against `sigmoid(logits)`,
    as TF computes it: `max(x, 0) - x * z + log1p(exp(-|x|))`, which neither overflows for
    large |x| nor loses the tail where `sigmoid` rounds to 0 or 1."""
    z, x = _same_shapes("sigmoid_cross_entropy_with_logits", labels, logits)
    relu_x, neg_abs_x = _relu_and_neg_abs(x)
    return m.add(m.subtract(relu_x, m.multiply(x, z)), m.log1p(m.exp(neg_abs_x)), name=name)


def _relu_and_neg_abs(x):
    """(max(x, 0), -|x|) picked by one `x >= 0`, so at x = 0 their gradients (1 and -1) add
    up to the true derivative (relu's and abs's own are 0 there)."""
    positive = m.greater_equal(x, zeros_like(x))
    return where(positive, x, zeros_like(x)), where(positive, m.negative(x), x)


def weighted_cross_entropy_with_logits(labels, logits, pos_weight, name=None):
    """`sigmoid_cross_entropy_with_logits` with the positive term weighted by `pos_weight`:
    `(1 - z) x + (1 + (q - 1) z) (log1p(exp(-|x|)) + max(-x, 0))`, as TF."""
    z, x = _same_shapes("weighted_cross_entropy_with_logits", labels, logits)
    log_weight = m.add(1.0, m.multiply(m.subtract(pos_weight, 1.0), z))
    relu_x, neg_abs_x = _relu_and_neg_abs(x)
    tail = m.add(m.log1p(m.exp(neg_abs_x)), m.subtract(relu_x, x))
    return m.add(m.multiply(m.subtract(1.0, z), x), m.multiply(log_weight, tail), name=name)


def l2_loss(t, name=None):
    """Half the sum of squares, `sum(t ** 2) / 2` (TF's `tf.nn.l2_loss`: no square root)."""
    return m.multiply(m.reduce_sum(m.square(t)), 0.5, name=name)


def log_sigmoid(x, name=None):
    """`log(sigmoid(x)) = -softplus(-x)`, finite for every finite x."""
    return m.negative(softplus(m.negative(x)), name=name)


def softsign(features, name=None):
    """`x / (1 + |x|)`."""
    return m.divide(features, m.add(m.abs(features), 1.0), name=name)


def relu6(features, name=None):
    """`min(max(x, 0), 6)`."""
    return m.minimum(m.relu(features), 6.0, name=name)


def silu(features, beta=1.0, name=None):
    """`x * sigmoid(beta * x)` (also called swish)."""
    return m.multiply(features, m.sigmoid(m.multiply(features, beta)), name=name)


_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805


def selu(features, name=None):
    """Scaled ELU: `scale * (x if x > 0 else alpha * (exp(x) - 1))` with TF's constants."""
    x = convert_to_tensor(features)
    neg = m.multiply(m.subtract(m.exp(m.minimum(x, 0.0)), 1.0), _SELU_ALPHA)
    return m.multiply(where(m.greater(x, 0.0), x, neg), _SELU_SCALE, name=name)


def l2_normalize(x, axis=None, epsilon=1e-12, name=None):
    """`x / sqrt(max(sum(x ** 2, axis), epsilon))`, as TF."""
    x = convert_to_tensor(x)
    squares = m.reduce_sum(_abs_square(x), axis=axis, keepdims=True)
    scale = m.rsqrt(m.maximum(squares, epsilon))
    return m.multiply(x, m.cast(scale, x.dtype) if x.dtype.is_complex else scale, name=name)


def moments(x, axes, keepdims=False, name=None):
    """`(mean, variance)` of `x` over `axes`, as `tf.nn.moments`."""
    mean = m.reduce_mean(x, axis=axes, keepdims=True)
    variance = m.reduce_mean(_abs_square(m.subtract(x, mean)), axis=axes, keepdims=keepdims)
    if not keepdims:
        mean = m.reduce_mean(x, axis=axes)
    return mean, variance


def bias_add(value, bias, data_format="NHWC", name=None):
    """`value + bias` with a 1-D `bias` along the channel axis (the last for NHWC-style
    formats, axis 1 for NCHW-style ones), refused when the sizes differ."""
    value, bias = convert_to_tensor(value), convert_to_tensor(bias)
    if len(bias.shape) != 1:
        raise errors.InvalidArgumentError(f"bias_add: bias must be 1-D, got shape {list(bias.shape)}")
    if data_format not in ("NHWC", "NCHW", "NWC", "NCW", "NDHWC", "NCDHW", "N...C", "NC..."):
        raise errors.InvalidArgumentError(f"bias_add: unknown data_format {data_format!r}")
    axis = 1 if data_format.startswith("NC") else len(value.shape) - 1
    if len(value.shape) < (2 if axis == 1 else 1):
        raise errors.InvalidArgumentError(f"bias_add: value of shape {list(value.shape)} has no channel axis")
    size = value.shape[axis]
    if size is not None and bias.shape[0] is not None and size != bias.shape[0]:
        raise errors.InvalidArgumentError(
            f"bias_add: bias has {bias.shape[0]} elements but the channel axis of value (axis {axis}) "
            f"has {size}")
    if axis != len(value.shape) - 1:
        bias = reshape(bias, [-1] + [1] * (len(value.shape) - axis - 1))
    return m.add(value, bias, name=name)


def _abs_square(x):
    if x.dtype.is_complex:
        return m.real(m.multiply(x, m.conj(x)))
    return m.square(x)


def divide_no_nan(x, y, name=None):
    """`x / y`, and 0 where `y` is 0 (the gradient is 0 there too, not NaN)."""
    x, y = convert_to_tensor(x), convert_to_tensor(y)
    zero = m.equal(y, zeros_like(y))
    safe = where(zero, m.add(zeros_like(y), 1), y)
    return where(zero, zeros_like(m.divide(x, safe)), m.divide(x, safe), name=name)


def multiply_no_nan(x, y, name=None):
    """`x * y`, and 0 where `y` is 0 even if `x` is NaN or infinite."""
    x, y = convert_to_tensor(x), convert_to_tensor(y)
    zero = m.equal(y, zeros_like(y))
    product = m.multiply(where(zero, zeros_like(m.multiply(x, y)), x), y)
    return where(zero, zeros_like(product), product, name=name)


def xdivy(x, y, name=None):
    """`x / y`, and 0 where `x` is 0 (whatever `y`)."""
    x, y = convert_to_tensor(x), convert_to_tensor(y)
    zero = m.equal(x, zeros_like(x))
    safe = where(zero, m.add(zeros_like(y), 1), y)
    quotient = m.divide(x, safe)
    return where(zero, zeros_like(quotient), quotient, name=name)


def is_inf(x, name=None):
    """True where `x` is +inf or -inf."""
    return m.logical_and(m.logical_not(is_finite(x)), m.logical_not(is_nan(x)), name=name)


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None):
    """The population variance over `axis` (real for complex input: the mean of |x - mean|^2)."""
    x = convert_to_tensor(input_tensor)
    _floating("reduce_variance", x)
    centered = m.subtract(x, m.reduce_mean(x, axis=axis, keepdims=True))
    return m.reduce_mean(_abs_square(centered), axis=axis, keepdims=keepdims, name=name)


def reduce_std(input_tensor, axis=None, keepdims=False, name=None):
    """The population standard deviation over `axis`."""
    return m.sqrt(reduce_variance(input_tensor, axis=axis, keepdims=keepdims), name=name)


def reduce_euclidean_norm(input_tensor, axis=None, keepdims=False, name=None):
    """`sqrt(sum(|x| ** 2, axis))`."""
    x = convert_to_tensor(input_tensor)
    _floating("reduce_euclidean_norm", x)
    return m.sqrt(m.reduce_sum(_abs_square(x), axis=axis, keepdims=keepdims), name=name)


def count_nonzero(input, axis=None, keepdims=False, dtype=dtypes.int64, name=None):
    """How many elements along `axis` are not zero (not False, not the empty string)."""
    x = convert_to_tensor(input)
    nonzero = m.not_equal(x, zeros_like(x))
    return m.reduce_sum(m.cast(nonzero, dtype), axis=axis, keepdims=keepdims, name=name)


def _floating(fn, x):
    if not (x.dtype.is_floating or x.dtype.is_complex):
        raise errors.InvalidArgumentError(f"{fn} takes a floating or complex tensor, got {x.dtype.name}")
