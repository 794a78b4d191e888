"""Op-table entries of the complex-number and FFT ops (issue 22): their inputs are complex,
which the float/int table machinery does not draw, so each is tested in its own file
against numpy, torch and jax (values, dtypes, TF-convention gradients, eager vs defun vs
reloaded)."""

ROWS = []

_COMPLEX = "complex inputs: tests/test_complex.py (numpy values, torch and jax gradients, exits)"
_FFT = "complex inputs: tests/test_fft.py (numpy values, torch.fft gradients, exits)"
EXCLUDED = {"complex": _COMPLEX, "real": _COMPLEX, "imag": _COMPLEX, "conj": _COMPLEX, "angle": _COMPLEX,
            "fft": _FFT, "rfft": _FFT, "irfft": _FFT}
