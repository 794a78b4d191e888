"""`df.signal`: FFTs with TensorFlow's names and semantics (the innermost axis or two;
`fft_length` crops or zero-pads), differentiable with TF's complex gradient convention
(see runtime/ops/fft_ops.py for the rules).

    import defun as df
    spectrum = df.signal.rfft(x)                  # float32 (..., n) -> complex64 (..., n // 2 + 1)
    back = df.signal.irfft(spectrum, [x.shape[-1]])
"""
from defun.runtime.ops.fft_ops import fft, fft2, ifft, ifft2, irfft, irfft2, rfft, rfft2  # noqa: F401

__all__ = ["fft", "fft2", "ifft", "ifft2", "irfft", "irfft2", "rfft", "rfft2"]
