"""Stateless random numbers and dropout: the same seed gives the same bits, everywhere.

The seed is an op input (a pair of ints, or an int32/int64 tensor of shape [2]), so a
traced training step can take it as an argument and draw new numbers on every call
without retracing. Numbers depend only on the seed, the shape and the dtype, never on
process state: the seed is the 128-bit key of a Philox-4x64 counter-based generator
(numpy's `Philox`, counter starting at 0), whose raw 64-bit words are turned into values
by the fixed recipes below (numpy's own distributions may change between versions; these
do not):

- uniform in [0, 1): float64 takes the top 53 bits of each word; float32 (float16) splits
  each word into its low then high 32-bit halves and takes the top 24 (11) bits of each;
  every value is exact in the dtype. `uniform(minval, maxval)` is minval + (maxval - minval) * u.
- normal: Box-Muller on pairs of float64 uniforms (u1, u2) = words (2k, 2k+1):
  r = sqrt(-2 log(1 - u1)), values 2k and 2k+1 are r cos(2 pi u2) and r sin(2 pi u2),
  rounded to the dtype; `normal(mean, stddev)` is mean + stddev * z.
- dropout keeps an entry where the float32 uniform of its mask position is >= rate.
"""
import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops.math_ops import add, multiply, subtract
from defun.runtime.registry import Cost, register
from defun.runtime.tensor import Tensor
from defun.runtime import batching as bt

__all__ = ["dropout"]

_UINT32 = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)
# the random bits in each uniform of a float dtype (all exact in that dtype)
_UNIFORM_BITS = {np.dtype(np.float16): 11, np.dtype(np.float32): 24, np.dtype(np.float64): 53}


# ------------------------------------------------------------------ the generator
def _words(seed, n):
    """n raw 64-bit words of Philox keyed by `seed` (two ints, read as unsigned 64-bit)."""
    key = np.asarray(seed).astype(np.int64).view(np.uint64)
    return np.random.Philox(key=key).random_raw(n)


def uniform_bits(seed, n, dtype):
    """n uniforms in [0, 1) of numpy float `dtype` (the module docstring's recipe)."""
    dtype = np.dtype(dtype)
    bits = _UNIFORM_BITS[dtype]
    if bits == 53:
        words = _words(seed, n)
        return (words >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    words = _words(seed, (n + 1) // 2)
    halves = np.empty(2 * len(words), np.uint32)
    halves[0::2] = words & _UINT32
    halves[1::2] = words >> _32
    top = halves[:n] >> np.uint32(32 - bits)
    return top.astype(dtype) * dtype.type(2.0 ** -bits)


def normal_values(seed, n, dtype):
    """n standard normals of numpy float `dtype` (Box-Muller, module docstring)."""
    pairs = (n + 1) // 2
    u = (_words(seed, 2 * pairs) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    r = np.sqrt(-2.0 * np.log1p(-u[0::2]))
    angle = 2.0 * np.pi * u[1::2]
    z = np.empty(2 * pairs)
    z[0::2] = r * np.cos(angle)
    z[1::2] = r * np.sin(angle)
    return z[:n].astype(dtype, copy=False)


# ------------------------------------------------------------------ arguments
def _seed_arg(op_name, seed):
    """A tensor/variable as is; a Python pair (or array) as an int64 array of shape [2]."""
    if isinstance(seed, Tensor) or hasattr(seed, "_as_tensor"):
        return seed
    bad = _args.error(
        f"{op_name}: seed must be a pair of ints (e.g. seed=(1, 2)) or an int32/int64 tensor of "
        f"shape [2], got {seed!r:.60}")
    try:
        arr = np.asarray(seed)
    except (TypeError, ValueError, OverflowError):
        raise bad from None
    if arr.shape != (2,) or arr.dtype.kind not in "iu":
        raise bad
    if arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max:
        raise _args.error(f"{op_name}: seed {seed!r} does not fit in int64")
    return arr.astype(np.int64)


def _dims_arg(op_name, shape):
    """(value for the shape input, static shape attr) for a shape argument: the one shape
    mechanism of the ops (`_args.shape_operand`); a static shape becomes an int array."""
    static, operand = _args.shape_operand(op_name, shape)
    if operand is None:
        wide = max(static, default=0) > np.iinfo(np.int32).max
        operand = np.asarray(static, np.int64 if wide else np.int32)
    return operand, static


# ------------------------------------------------------------------ inference and kernels
def _check_seed(op_name, shape, dtype):
    if not dtype.is_integer:
        raise errors.InvalidArgumentError(f"{op_name}: seed must be int32 or int64, got {dtype.name}")
    if len(shape) != 1 or shape[0] not in (None, 2):
        raise errors.InvalidArgumentError(
            f"{op_name}: seed must have shape [2] (a pair of ints), got shape {shape_rules.shape_str(shape)}")


def _random_infer(op_name):
    def infer(shapes, dts, attrs):
        dims, seed = shapes
        if not dts[0].is_integer:
            raise errors.InvalidArgumentError(f"{op_name}: shape must be int32 or int64, got {dts[0].name}")
        static = tuple(attrs["shape"])
        if len(dims) != 1 or (dims[0] is not None and dims[0] != len(static)):
            raise errors.InvalidArgumentError(
                f"{op_name}: the shape tensor has shape {shape_rules.shape_str(dims)}, expected "
                f"({len(static)},) for the static shape {shape_rules.shape_str(static)}")
        _check_seed(op_name, seed, dts[1])
        if not attrs["dtype"].is_floating:
            raise errors.InvalidArgumentError(
                f"{op_name}: dtype must be floating (float16, float32, float64), got {attrs['dtype'].name}")
        return [(static, attrs["dtype"])]
    return infer


def _check_seed_value(op_name, seed):
    """The kernels' check of a seed array: inference's words, so eager and traced agree."""
    if seed.shape != (2,) or seed.dtype.kind not in "iu":
        _check_seed(op_name, seed.shape, dtypes.from_numpy(seed.dtype))


def _out_shape(op_name, dims, seed, shape):
    _check_seed_value(op_name, seed)
    out = _args.shape_value(op_name, dims, shape)
    if min(out, default=0) < 0:
        raise errors.InvalidArgumentError(f"{op_name}: negative size in shape {list(out)}")
    return out


def _uniform_kernel(dims, seed, shape, dtype):
    out = _out_shape("stateless_random_uniform", dims, seed, shape)
    return uniform_bits(seed, int(np.prod(out)), dtype.np).reshape(out)


def _normal_kernel(dims, seed, shape, dtype):
    out = _out_shape("stateless_random_normal", dims, seed, shape)
    return normal_values(seed, int(np.prod(out)), dtype.np).reshape(out)


_RANDOM_ATTRS = {"shape": "shape", "dtype": "dtype"}
_UNIFORM = register(
    name="stateless_random_uniform",
    kernel=_uniform_kernel,
    infer=_random_infer("stateless_random_uniform"),
    grad=None,
    num_inputs=2,
    attrs=_RANDOM_ATTRS,
    defaults={"dtype": dtypes.float32},
    kinds=shape_rules.int_kinds,
    # measured 3.0x: the raw bits
    cost=Cost(scratch=3.25),
)     # measured 3.0x: the raw bits
_NORMAL = register(
    name="stateless_random_normal",
    kernel=_normal_kernel,
    infer=_random_infer("stateless_random_normal"),
    grad=None,
    num_inputs=2,
    attrs=_RANDOM_ATTRS,
    defaults={"dtype": dtypes.float32},
    kinds=shape_rules.int_kinds,
    # measured 6.0x: two uniforms, float64
    cost=Cost(scratch=6.25),
)      # measured 6.0x: two uniforms, float64


def _is_number(v, value):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == value


def _affine(x, scale, offset, scale_is_one, offset_is_zero):
    if not scale_is_one:
        x = multiply(x, scale)
    if not offset_is_zero:
        x = add(x, offset)
    return x


def _float_dtype(op_name, dtype):
    dt = dtypes.as_dtype(dtype)
    if not dt.is_floating:
        raise _args.error(f"{op_name}: dtype must be floating (float16, float32, float64), got {dt.name}")
    return dt


def uniform(shape, seed, minval=0.0, maxval=1.0, dtype=dtypes.float32, name=None):
    """Uniform numbers in [minval, maxval), a function of `seed` (two ints) alone.

    >>> df.random.uniform([2], seed=(1, 2))     # the same two numbers on every run
    """
    op = "stateless_random_uniform"
    dt = _float_dtype(op, dtype)
    dims, static = _dims_arg(op, shape)
    u = run_op(_UNIFORM, (dims, _seed_arg(op, seed)), {"shape": static, "dtype": dt}, name)
    if isinstance(minval, (int, float)) and isinstance(maxval, (int, float)):
        return _affine(u, maxval - minval, minval, maxval - minval == 1, minval == 0)
    return add(multiply(u, subtract(maxval, minval)), minval)


def normal(shape, seed, mean=0.0, stddev=1.0, dtype=dtypes.float32, name=None):
    """Normal numbers with `mean` and `stddev`, a function of `seed` (two ints) alone.

    >>> df.random.normal([2, 3], seed=(7, 0), stddev=0.1)
    """
    op = "stateless_random_normal"
    dt = _float_dtype(op, dtype)
    dims, static = _dims_arg(op, shape)
    z = run_op(_NORMAL, (dims, _seed_arg(op, seed)), {"shape": static, "dtype": dt}, name)
    return _affine(z, stddev, mean, _is_number(stddev, 1), _is_number(mean, 0))


# ------------------------------------------------------------------ dropout
def _mask_shape(op_name, xs, noise_shape):
    """The keep mask's shape: noise_shape with None entries taken from x's shape `xs`."""
    if len(noise_shape) != len(xs):
        raise errors.InvalidArgumentError(
            f"{op_name}: noise_shape {list(noise_shape)} must have one entry per dimension of x "
            f"(shape {shape_rules.shape_str(xs)})")
    out = []
    for n, d in zip(noise_shape, xs):
        if n is not None and n != 1 and d is not None and n != d:
            raise errors.InvalidArgumentError(
                f"{op_name}: noise_shape {list(noise_shape)} does not broadcast to x's shape "
                f"{shape_rules.shape_str(xs)}: each entry must be 1, x's size or None")
        out.append(d if n is None else n)
    return tuple(out)


def _check_rate(rate):
    if not 0.0 <= rate < 1.0:
        raise errors.InvalidArgumentError(
            f"dropout: rate must be in [0, 1) (the fraction of entries dropped), got {rate}")


def _dropout_infer(shapes, dts, attrs):
    xs, seed = shapes
    shape_rules.check_kinds("dropout", dts[0], shape_rules.float_kinds)
    _check_seed("dropout", seed, dts[1])
    _check_rate(attrs["rate"])
    _mask_shape("dropout", xs, attrs["noise_shape"])
    return [(tuple(xs), dts[0])]


def _dropout_kernel(x, seed, rate, noise_shape):
    _check_seed_value("dropout", seed)
    if rate == 0:
        return x
    mask_shape = _mask_shape("dropout", x.shape, noise_shape)
    u = uniform_bits(seed, int(np.prod(mask_shape)), np.float32).reshape(mask_shape)
    scale = np.where(u >= np.float32(rate), x.dtype.type(1.0 / (1.0 - rate)), x.dtype.type(0))
    return x * scale


def _dropout_grad(op, g):
    # linear in x with a mask fixed by the seed: the gradient is dropout of g, same seed
    return [run_op(_DROPOUT, (g, op.inputs[1]), op.attrs), None]


def _dropout_batch(ctx, node, inputs, batched):
    """One mask for every example (it depends on the seed alone, as per example)."""
    if batched[1]:
        raise errors.UnimplementedError("dropout: batching covers a shared seed only")
    ns = node.attrs["noise_shape"]
    xs = tuple(node.inputs[0].shape)
    ns = xs if ns is None else tuple(x if n is None else n for n, x in zip(ns, xs))
    return bt.all_batched(bt.emit(node, inputs, dict(node.attrs, noise_shape=(1,) + ns)))


_DROPOUT = register(
    name="dropout",
    kernel=_dropout_kernel,
    infer=_dropout_infer,
    grad=_dropout_grad,
    num_inputs=2,
    attrs={"rate": "float", "noise_shape": "shape"},
    defaults={},
    kinds=shape_rules.float_kinds,
    batch=_dropout_batch,
    cost=Cost(scratch=3.25),
)


def dropout(x, rate, seed, noise_shape=None, name=None):
    """Inverted dropout: each entry is zeroed with probability `rate`, the rest scaled by
    1 / (1 - rate). The mask is a function of `seed` (two ints) alone, so the same seed
    drops the same entries eagerly, traced and reloaded; `noise_shape` (None entries: x's
    size) shares one mask entry along dimensions of size 1.

    >>> df.dropout(df.ones([4]), rate=0.5, seed=(1, 2))      # entries 0 or 2
    """
    rate = _static_rate(rate)
    if not 0.0 <= rate < 1.0:
        raise _args.error(f"dropout: rate must be in [0, 1) (the fraction of entries dropped), got {rate}")
    rank = len(x.shape) if hasattr(x, "shape") else np.ndim(x)
    if noise_shape is None:
        ns = (None,) * rank
    else:
        if hasattr(noise_shape, "numpy"):
            noise_shape = noise_shape.numpy().tolist()
        if isinstance(noise_shape, (str, bytes)) or not hasattr(noise_shape, "__iter__"):
            raise _args.error(f"dropout: noise_shape must be a list of ints or None, got {noise_shape!r}",
                              TypeError)
        ns = tuple(None if d is None else _args.int_arg("dropout", d, "noise_shape entry") for d in noise_shape)
        if any(d is not None and d < 0 for d in ns):
            raise _args.error(f"dropout: negative size in noise_shape {list(ns)}")
    return run_op(_DROPOUT, (x, _seed_arg("dropout", seed)), {"rate": rate, "noise_shape": ns}, name)


def _static_rate(rate):
    if isinstance(rate, (int, float, np.floating, np.integer)) and not isinstance(rate, bool):
        return float(rate)
    static_value = getattr(rate, "static_value", None)
    value = static_value() if static_value is not None else (
        np.asarray(rate) if isinstance(rate, Tensor) else None)
    if value is None or np.ndim(value) != 0:
        raise _args.error(
            f"dropout: rate must be a Python float (or a scalar tensor known while tracing), got {rate!r:.60}")
    return float(value)
