"""Complex numbers: `complex`, `real`, `imag`, `conj` rows, and `conj_grad`, the one helper
every gradient of a complex-accepting op conjugates its other factors with.

The gradient convention is TF's (and torch's): for a real loss L of a complex z the tape
returns 2 dL/d(conj z) = dL/d(re z) + i dL/d(im z); so a holomorphic op's rule is the real
rule with its derivative conjugated (`multiply`: dx = g * conj(y)). jax.grad returns the
conjugate of that. Below math_ops (which imports it), above base_ops.
"""
import numpy as np

from defun.runtime import dtypes
from defun.runtime.execute import run_op
from defun.runtime.ops import shape_rules
from defun.runtime.ops.base_ops import unbroadcast, zeros_like
from defun.runtime.registry import register
from defun.runtime.tensor import EagerTensor, Tensor, convert_to_tensor
from defun.runtime import batching as bt

__all__ = ["complex", "real", "imag", "conj"]

_EMPTY = {}
_COMPLEX_NP = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128)}


# ------------------------------------------------------------------ complex(real, imag)
def _complex_infer(shapes, dts, attrs):
    shape_rules.check_same("complex", dts)
    shape_rules.check_kinds("complex", dts[0], "f")
    return [(shape_rules.broadcast_shapes("complex", shapes[0], shapes[1]), dtypes.complex_of(dts[0], "complex"))]


def _complex_kernel(re, im):
    c = _COMPLEX_NP.get(re.dtype)
    if c is None:
        dtypes.complex_of(dtypes.from_numpy(re.dtype), "complex")   # raises: float16
    out = np.empty(np.broadcast_shapes(re.shape, im.shape), c)
    out.real, out.imag = re, im
    return out


def _complex_grad(op, g):
    re, im = op.inputs
    return [unbroadcast(real(g), re), unbroadcast(imag(g), im)]


_COMPLEX = register(
    name="complex",
    kernel=_complex_kernel,
    infer=_complex_infer,
    grad=_complex_grad,
    num_inputs=2,
    attrs={},
    defaults={},
    same_dtype=(0, 1),
    kinds="f",
    batch=bt.elementwise,
)


def complex(real, imag, name=None):  # noqa: A001 - the public name is df.complex, as tf.complex
    """The complex tensor real + i imag (float32 parts -> complex64, float64 -> complex128).

    >>> df.complex([1., 2.], [3., 4.])
    <df.Tensor shape=(2,) dtype=complex64 numpy=[1.+3.j, 2.+4.j]>
    """
    return run_op(_COMPLEX, (real, imag), _EMPTY, name)


# ------------------------------------------------------------------ real, imag, conj
def _part_infer(name):
    def infer(shapes, dts, attrs):
        shape_rules.check_kinds(name, dts[0], "fiuc")
        return [(tuple(shapes[0]), dts[0].real_dtype)]
    return infer


def _real_grad(op, g):
    return [run_op(_COMPLEX, (g, zeros_like(g)), _EMPTY)]


def _imag_grad(op, g):
    return [run_op(_COMPLEX, (zeros_like(g), g), _EMPTY)]


# `kinds` "c": the rows take complex inputs only; the public functions give real inputs TF's
# answers (real(x) = x, imag(x) = 0, conj(x) = x) without a node.
_REAL = register(
    name="real",
    kernel=lambda x: np.real(x),
    infer=_part_infer("real"),
    grad=_real_grad,
    num_inputs=1,
    attrs={},
    defaults={},
    kinds="c",
    batch=bt.elementwise,
)
_IMAG = register(
    name="imag",
    kernel=lambda x: np.imag(x),
    infer=_part_infer("imag"),
    grad=_imag_grad,
    num_inputs=1,
    attrs={},
    defaults={},
    kinds="c",
    batch=bt.elementwise,
)
_CONJ = register(
    name="conj",
    kernel=np.conjugate,
    infer=shape_rules.unary_same("conj", "c"),
    grad=lambda op, g: [conj(g)],
    num_inputs=1,
    attrs={},
    defaults={},
    kinds="c",
    batch=bt.elementwise,
)


def _is_complex(x):
    """(is x complex, x as a tensor): variables are read, arrays and numbers converted."""
    if not isinstance(x, Tensor):
        x = convert_to_tensor(x)
    return x.dtype.is_complex, x


def real(input, name=None):
    """The real part (a real input is returned as it is, as in TF): `df.real(z)`."""
    cplx, x = _is_complex(input)
    return run_op(_REAL, (x,), _EMPTY, name) if cplx else x


def imag(input, name=None):
    """The imaginary part (zeros for a real input, as in TF): `df.imag(z)`."""
    cplx, x = _is_complex(input)
    return run_op(_IMAG, (x,), _EMPTY, name) if cplx else zeros_like(x)


def conj(x, name=None):
    """The complex conjugate (a real input is returned as it is, as in TF): `df.conj(z)`."""
    if type(x) is EagerTensor and x._value.dtype.kind != "c":
        return x     # every gradient rule calls this on its factors: one test for real ones
    cplx, t = _is_complex(x)
    return run_op(_CONJ, (t,), _EMPTY, name) if cplx else t
