"""The FFT rows behind `df.signal` (TF's names and semantics): three ops over the innermost
axis or two, with numpy's pocketfft kernels.

- `fft` (complex -> complex; attrs rank, inverse, norm) is fft, ifft, fft2, ifft2. Its
  gradient is itself, the other direction with the other normalization: the adjoint of
  F (norm "backward") is conj(F), which is numpy's inverse transform with norm "forward".
- `rfft` (real -> complex, the n // 2 + 1 non-negative frequencies of the last axis) and
  `irfft` (their inverse, real results of the `fft_length` attr). The public functions fit
  the input to `fft_length` first (crop or zero-pad, as TF) with `pad` and slicing, so the
  rows see exactly sized inputs and the fitting's gradient is theirs.

Gradients follow TF's convention (complex_ops): rfft's is Re(conj(F) P^T g), P^T putting
zeros at the dropped frequencies; irfft's is c rfft(g) / N, c = 2 for the frequencies that
stand for two (all but 0 and n / 2), N the transform's size.
"""
import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, _costs, shape_rules
from defun.runtime.ops.array_ops import pad
from defun.runtime.ops.complex_ops import real
from defun.runtime.ops.index_ops import slice_helper
from defun.runtime.ops.math_ops import multiply
from defun.runtime.registry import one_of, register
from defun.runtime.tensor import convert_to_tensor
from defun.runtime import batching as bt

__all__ = ["fft", "ifft", "fft2", "ifft2", "rfft", "irfft", "rfft2", "irfft2"]

_AXES = {1: (-1,), 2: (-2, -1)}
_REAL_NP = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
_COMPLEX_NP = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128)}


def _check_rank(op_name, shape, rank):
    if len(shape) < rank:
        raise errors.InvalidArgumentError(
            f"{op_name}: input must have rank >= {rank}, got shape {shape_rules.shape_str(shape)}")


# ------------------------------------------------------------------ fft (complex -> complex)
def _fft_infer(shapes, dts, attrs):
    shape_rules.check_kinds("fft", dts[0], "c")
    _check_rank("fft", shapes[0], attrs["rank"])
    return [(tuple(shapes[0]), dts[0])]


def _fft_kernel(x, rank, inverse, norm):
    f = (np.fft.ifftn if inverse else np.fft.fftn)
    return f(x, axes=_AXES[rank], norm=norm).astype(x.dtype, copy=False)


def _fft_grad(op, g):
    a = op.attrs
    return [run_op(_FFT, (g,), {"rank": a["rank"], "inverse": not a["inverse"],
                                "norm": "forward" if a["norm"] == "backward" else "backward"})]


_FFT = register(
    name="fft",
    kernel=_fft_kernel,
    infer=_fft_infer,
    grad=_fft_grad,
    num_inputs=1,
    attrs={"rank": "int", "inverse": "bool", "norm": one_of("backward", "forward")},
    defaults={"norm": "backward"},
    kinds="c",
    batch=bt.leading,
    cost=_costs.fft_cost(lambda shapes, outs, attrs: shapes[0][len(shapes[0]) - attrs["rank"]:]),
)


# ------------------------------------------------------------------ rfft, irfft
def _length_attr(op_name, shape, fft_length):
    rank = len(fft_length)
    if rank not in _AXES or any(n < 1 for n in fft_length):
        raise errors.InvalidArgumentError(
            f"{op_name}: fft_length must hold 1 or 2 positive sizes, got {list(fft_length)}")
    _check_rank(op_name, shape, rank)
    return rank


def _rfft_infer(shapes, dts, attrs):
    n = attrs["fft_length"]
    rank = _length_attr("rfft", shapes[0], n)
    shape_rules.check_kinds("rfft", dts[0], "f")
    inner = tuple(shapes[0][-rank:])
    if any(d is not None and d != k for d, k in zip(inner, n)):
        raise errors.InvalidArgumentError(
            f"rfft: the input's innermost sizes {shape_rules.shape_str(inner)} must equal fft_length {list(n)}")
    out = tuple(shapes[0][:-1]) + (n[-1] // 2 + 1,)
    return [(out, dtypes.complex_of(dts[0], "rfft"))]


def _rfft_kernel(x, fft_length):
    c = _COMPLEX_NP.get(x.dtype)
    if c is None:
        dtypes.complex_of(dtypes.from_numpy(x.dtype), "rfft")     # raises: float16
    return np.fft.rfftn(x, s=fft_length, axes=_AXES[len(fft_length)]).astype(c, copy=False)


def _rfft_grad(op, g):
    n = op.attrs["fft_length"]
    # zeros at the frequencies rfft drops, then the adjoint of the full transform
    full = pad(g, [[0, 0]] * (len(g.shape) - 1) + [[0, n[-1] - (n[-1] // 2 + 1)]])
    return [real(run_op(_FFT, (full,), {"rank": len(n), "inverse": True, "norm": "forward"}))]


def _irfft_infer(shapes, dts, attrs):
    n = attrs["fft_length"]
    rank = _length_attr("irfft", shapes[0], n)
    shape_rules.check_kinds("irfft", dts[0], "c")
    want = tuple(n[:-1]) + (n[-1] // 2 + 1,)
    inner = tuple(shapes[0][-rank:])
    if any(d is not None and d != k for d, k in zip(inner, want)):
        raise errors.InvalidArgumentError(
            f"irfft: the input's innermost sizes {shape_rules.shape_str(inner)} must be {list(want)} for "
            f"fft_length {list(n)}")
    return [(tuple(shapes[0][:-rank]) + tuple(n), dts[0].real_dtype)]


def _irfft_kernel(x, fft_length):
    return np.fft.irfftn(x, s=fft_length, axes=_AXES[len(fft_length)]).astype(_REAL_NP[x.dtype], copy=False)


def _irfft_grad(op, g):
    n = op.attrs["fft_length"]
    m = n[-1] // 2 + 1
    # c / N: the frequencies 1 .. (n - 1) // 2 stand for themselves and their mirror images
    scale = np.full(m, 2.0 / np.prod(n))
    scale[0] /= 2
    if n[-1] % 2 == 0:
        scale[-1] /= 2
    spectrum = run_op(_RFFT, (g,), {"fft_length": n})
    return [multiply(spectrum, convert_to_tensor(scale.astype(spectrum.dtype.np)))]


_FFT_LENGTH = _costs.fft_cost(lambda shapes, outs, attrs: attrs["fft_length"])
_RFFT = register(
    name="rfft",
    kernel=_rfft_kernel,
    infer=_rfft_infer,
    grad=_rfft_grad,
    num_inputs=1,
    attrs={"fft_length": "ints"},
    defaults={},
    kinds="f",
    batch=bt.leading,
    cost=_FFT_LENGTH,
)
_IRFFT = register(
    name="irfft",
    kernel=_irfft_kernel,
    infer=_irfft_infer,
    grad=_irfft_grad,
    num_inputs=1,
    attrs={"fft_length": "ints"},
    defaults={},
    kinds="c",
    batch=bt.leading,
    cost=_FFT_LENGTH,
)


# ------------------------------------------------------------------ public functions
def _tensor(name, x, kinds, what):
    t = x if hasattr(x, "dtype") and isinstance(x.dtype, dtypes.DType) else convert_to_tensor(x)
    if t.dtype.np.kind not in kinds:
        raise _args.error(f"{name}: input must be {what}, got {t.dtype.name}"
                          + ("; use df.complex(x, df.zeros_like(x)) or df.signal.rfft" if kinds == "c" else
                             "; use df.signal.fft for complex input, or df.cast"))
    return t


def _c2c(fn, x, rank, inverse, name):
    t = _tensor(fn, x, "c", "complex64 or complex128")
    return run_op(_FFT, (t,), {"rank": rank, "inverse": inverse, "norm": "backward"}, name)


def _fit(name, x, lengths):
    """x cropped or zero-padded in its innermost len(lengths) axes to `lengths` (TF's fitting)."""
    shape = tuple(x.shape)
    rank = len(lengths)
    _check_rank(name, shape, rank)
    inner = shape[-rank:]
    if tuple(inner) == tuple(lengths):
        return x
    if None in inner:
        raise _args.error(f"{name}: the innermost sizes of the input must be known to fit it to "
                          f"fft_length {list(lengths)}, got shape {shape_rules.shape_str(shape)}")
    if any(d > k for d, k in zip(inner, lengths)):
        x = slice_helper(x, (Ellipsis,) + tuple(slice(0, min(d, k)) for d, k in zip(inner, lengths)))
    if any(d < k for d, k in zip(inner, lengths)):
        x = pad(x, [[0, 0]] * (len(shape) - rank) + [[0, max(k - d, 0)] for d, k in zip(inner, lengths)])
    return x


def _lengths(name, fft_length, default, rank):
    if fft_length is None:
        if None in default:
            raise _args.error(f"{name}: the innermost sizes of the input are unknown while tracing; "
                              f"pass fft_length")
        return tuple(default)
    n = _args.int_list_arg(name, fft_length if hasattr(fft_length, "__len__") or _args.is_tensor_arg(fft_length)
                           else [fft_length], "fft_length")
    if len(n) != rank or any(k < 1 for k in n):
        raise _args.error(f"{name}: fft_length must be {rank} positive size{'s' if rank > 1 else ''}, "
                          f"got {list(n)}")
    return n


def _real_to_complex(fn, x, fft_length, rank, name):
    t = _tensor(fn, x, "f", "float32 or float64")
    _check_rank(fn, tuple(t.shape), rank)
    n = _lengths(fn, fft_length, tuple(t.shape)[-rank:], rank)
    return run_op(_RFFT, (_fit(fn, t, n),), {"fft_length": n}, name)


def _complex_to_real(fn, x, fft_length, rank, name):
    t = _tensor(fn, x, "c", "complex64 or complex128")
    shape = tuple(t.shape)
    _check_rank(fn, shape, rank)
    inner = shape[-rank:]
    default = tuple(inner[:-1]) + ((None if inner[-1] is None else 2 * (inner[-1] - 1)),)
    n = _lengths(fn, fft_length, default, rank)
    half = tuple(n[:-1]) + (n[-1] // 2 + 1,)
    return run_op(_IRFFT, (_fit(fn, t, half),), {"fft_length": n}, name)


def fft(input, name=None):
    """The discrete Fourier transform of the innermost axis of a complex tensor (tf.signal.fft)."""
    return _c2c("fft", input, 1, False, name)


def ifft(input, name=None):
    """The inverse DFT of the innermost axis (1/n normalized, as TF): `ifft(fft(z)) == z`."""
    return _c2c("ifft", input, 1, True, name)


def fft2(input, name=None):
    """The 2-D DFT of the two innermost axes of a complex tensor (tf.signal.fft2d)."""
    return _c2c("fft2", input, 2, False, name)


def ifft2(input, name=None):
    """The inverse 2-D DFT of the two innermost axes (tf.signal.ifft2d)."""
    return _c2c("ifft2", input, 2, True, name)


def rfft(input_tensor, fft_length=None, name=None):
    """The DFT of a real signal's innermost axis: its fft_length // 2 + 1 non-negative
    frequencies. The input is cropped or zero-padded to `fft_length` (default: its size).

    >>> df.signal.rfft(df.constant([1., 2., 3., 4.]))   # [10+0j, -2+2j, -2+0j]
    """
    return _real_to_complex("rfft", input_tensor, fft_length, 1, name)


def irfft(input_tensor, fft_length=None, name=None):
    """The real signal of length `fft_length` (default 2 * (n - 1)) whose rfft is the input
    (cropped or zero-padded to fft_length // 2 + 1 frequencies, as TF)."""
    return _complex_to_real("irfft", input_tensor, fft_length, 1, name)


def rfft2(input_tensor, fft_length=None, name=None):
    """The 2-D rfft of the two innermost axes (`fft_length`: two sizes)."""
    return _real_to_complex("rfft2", input_tensor, fft_length, 2, name)


def irfft2(input_tensor, fft_length=None, name=None):
    """The inverse of rfft2 (`fft_length` default: [n0, 2 * (n1 - 1)])."""
    return _complex_to_real("irfft2", input_tensor, fft_length, 2, name)
