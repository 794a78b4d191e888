"""df.signal (issue 22): TF's FFT names and fft_length semantics against numpy, gradients in
TF's convention against torch.fft and finite differences (first and second order), eager vs
defun vs reloaded JSON vs numpy source, and the errors."""
import numpy as np
import pytest
import torch

import defun as df
from isolated import run_without_defun
from defun_helpers import nested_gradients

IAE = df.errors.InvalidArgumentError
S = df.signal


def _z(shape, seed, dtype=np.complex128):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)


def _x(shape, seed, dtype=np.float64):
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


# (name, df call, numpy reference, torch reference, input kind, shape): the innermost axis or
# two, with fft_length cropping and padding (TF fits the input to it, as numpy's n/s do).
CASES = [
    ("fft", S.fft, np.fft.fft, torch.fft.fft, "c", (3, 5)),
    ("ifft", S.ifft, np.fft.ifft, torch.fft.ifft, "c", (2, 6)),
    ("fft2", S.fft2, np.fft.fft2, torch.fft.fft2, "c", (2, 3, 4)),
    ("ifft2", S.ifft2, np.fft.ifft2, torch.fft.ifft2, "c", (3, 4)),
    ("rfft", S.rfft, np.fft.rfft, torch.fft.rfft, "r", (3, 6)),
    ("rfft-odd", S.rfft, np.fft.rfft, torch.fft.rfft, "r", (7,)),
    ("rfft-crop", lambda x: S.rfft(x, [4]), lambda x: np.fft.rfft(x, 4), lambda x: torch.fft.rfft(x, 4), "r", (2, 6)),
    ("rfft-pad", lambda x: S.rfft(x, [9]), lambda x: np.fft.rfft(x, 9), lambda x: torch.fft.rfft(x, 9), "r", (2, 6)),
    ("irfft", S.irfft, np.fft.irfft, torch.fft.irfft, "c", (3, 5)),
    ("irfft-odd", lambda z: S.irfft(z, [7]), lambda z: np.fft.irfft(z, 7), lambda z: torch.fft.irfft(z, 7), "c", (2, 4)),
    ("irfft-crop", lambda z: S.irfft(z, [4]), lambda z: np.fft.irfft(z, 4), lambda z: torch.fft.irfft(z, 4), "c", (6,)),
    ("irfft-pad", lambda z: S.irfft(z, [12]), lambda z: np.fft.irfft(z, 12), lambda z: torch.fft.irfft(z, 12), "c", (2, 4)),
    ("rfft2", S.rfft2, np.fft.rfft2, torch.fft.rfft2, "r", (2, 4, 6)),
    ("rfft2-fit", lambda x: S.rfft2(x, [5, 3]), lambda x: np.fft.rfft2(x, (5, 3)),
     lambda x: torch.fft.rfft2(x, (5, 3)), "r", (3, 4)),
    ("irfft2", S.irfft2, np.fft.irfft2, torch.fft.irfft2, "c", (4, 3)),
    ("irfft2-fit", lambda z: S.irfft2(z, [3, 5]), lambda z: np.fft.irfft2(z, (3, 5)),
     lambda z: torch.fft.irfft2(z, (3, 5)), "c", (2, 4, 4)),
]
IDS = [c[0] for c in CASES]


def _input(kind, shape, seed, double=True):
    if kind == "c":
        return _z(shape, seed, np.complex128 if double else np.complex64)
    return _x(shape, seed, np.float64 if double else np.float32)


@pytest.mark.parametrize("name,fn,ref,tref,kind,shape", CASES, ids=IDS)
def test_values_and_dtypes_match_numpy_eager_traced_and_reloaded(name, fn, ref, tref, kind, shape):
    for double in (False, True):
        x = _input(kind, shape, 1, double)
        want = ref(x)
        got = fn(df.constant(x))
        out_dtype = np.float64 if double else np.float32
        if not name.startswith("irfft"):
            out_dtype = np.complex128 if double else np.complex64
        assert got.numpy().dtype == out_dtype, (name, got.dtype)
        tol = dict(rtol=1e-10, atol=1e-12) if double else dict(rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got.numpy(), want, **tol)
        cf = df.defun(fn).get_concrete_function(df.TensorSpec(shape, df.as_dtype(x.dtype)))
        np.testing.assert_array_equal(cf(x).numpy(), got.numpy())
        np.testing.assert_array_equal(np.asarray(df.load_json(df.export_json(cf))(x)), got.numpy())


def _loss(y, w):
    """A real loss of the transform's output (complex or real) with fixed weights."""
    re, im = (p.astype(y.dtype.real_dtype.np) for p in (w.real, w.imag))
    if y.dtype.is_complex:
        return df.reduce_sum(df.real(y) * re) + df.reduce_sum(df.imag(y) * im)
    return df.reduce_sum(y * re)


def _torch_loss(y, w):
    w = torch.tensor(w)
    if y.is_complex():
        return (y.real * w.real).sum() + (y.imag * w.imag).sum()
    return (y * w.real).sum()


def _grad(fn, x, w):
    t = df.constant(x)
    with df.GradientTape() as tape:
        tape.watch(t)
        value = _loss(fn(t), w)
    return tape.gradient(value, t).numpy()


def _weights(fn, x):
    y = fn(df.constant(x)).numpy()
    return _z(y.shape, 9)


@pytest.mark.parametrize("name,fn,ref,tref,kind,shape", CASES, ids=IDS)
def test_gradients_match_torch_and_finite_differences(name, fn, ref, tref, kind, shape):
    x = _input(kind, shape, 2)
    w = _weights(fn, x)
    ours = _grad(fn, x, w)
    assert ours.dtype == x.dtype
    xt = torch.tensor(x, requires_grad=True)
    _torch_loss(tref(xt), w).backward()
    np.testing.assert_allclose(ours, xt.grad.numpy(), rtol=1e-9, atol=1e-10)
    eps = 1e-6
    fd = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        steps = (eps, 1j * eps) if kind == "c" else (eps,)
        parts = []
        for s in steps:
            hi, lo = x.copy(), x.copy()
            hi[idx] += s
            lo[idx] -= s
            parts.append((float(_loss(fn(df.constant(hi)), w)) - float(_loss(fn(df.constant(lo)), w))) / (2 * eps))
        fd[idx] = parts[0] + (1j * parts[1] if kind == "c" else 0)
    np.testing.assert_allclose(ours, fd, rtol=1e-6, atol=1e-7)
    # float32 / complex64 follow the same rule
    x32 = _input(kind, shape, 2, double=False)
    np.testing.assert_allclose(_grad(fn, x32, w), ours, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["fft", "rfft-crop", "irfft-odd", "rfft2-fit", "irfft2"])
def test_second_order_gradients_match_differences_of_the_first(name):
    _, fn, _, _, kind, shape = CASES[IDS.index(name)]
    x = _input(kind, shape, 3)
    w = _weights(fn, x)

    def loss(t):   # a non-linear real loss, so the second derivative is not zero
        y = fn(t)
        return df.reduce_sum(df.square(df.abs(y) if y.dtype.is_complex else y) * np.abs(w).astype(
            y.dtype.real_dtype.np))
    v = _input(kind, shape, 4)

    def directional(x0):
        t = df.constant(x0)
        with df.GradientTape() as tape:
            tape.watch(t)
            value = loss(t)
        g = tape.gradient(value, t)
        return df.reduce_sum(df.real(g * df.conj(df.constant(v))))
    t = df.constant(x)
    hv = nested_gradients(loss, t, lambda g: df.reduce_sum(df.real(g * df.conj(df.constant(v)))))[1].numpy()
    eps = 1e-6
    fd = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        steps = (eps, 1j * eps) if kind == "c" else (eps,)
        parts = []
        for st in steps:
            hi, lo = x.copy(), x.copy()
            hi[idx] += st
            lo[idx] -= st
            parts.append((float(directional(hi)) - float(directional(lo))) / (2 * eps))
        fd[idx] = parts[0] + (1j * parts[1] if kind == "c" else 0)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6)


def test_a_defun_with_a_backward_reloads_and_runs_as_numpy_source(tmp_path):
    def f(x):
        spectrum = S.rfft(x, [8])
        return df.reduce_sum(df.abs(S.irfft(spectrum * spectrum, [6]))) + df.reduce_sum(df.abs(S.fft(spectrum)))
    x = _x((2, 7), 5)
    cf = df.defun(f).get_concrete_function(df.TensorSpec([2, 7], df.float64))
    t = df.constant(x)
    with df.GradientTape() as tape:
        tape.watch(t)
        value = f(t)
    want = tape.gradient(value, t).numpy()
    loaded = df.load_json(df.export_json(cf, include_backward=True))
    t = df.constant(x)
    with df.GradientTape() as tape:
        tape.watch(t)
        y = loaded(t)
    np.testing.assert_allclose(tape.gradient(y, t).numpy(), want, rtol=1e-12)
    got = run_without_defun({"m": df.export_numpy_source(cf, include_backward=True)}, [
        {"module": "m", "call": "forward", "inputs": [x]},
        {"module": "m", "call": "backward", "inputs": [x], "output_gradients": [np.float64(1.0)]}], tmp_path)
    np.testing.assert_allclose(got[0]["outputs"][0], value.numpy(), rtol=1e-12)
    np.testing.assert_allclose(got[1]["gradients"][0], want, rtol=1e-10)


def test_unknown_outer_sizes_trace_and_unknown_inner_sizes_need_fft_length():
    cf = df.defun(lambda x: S.rfft(x)).get_concrete_function(df.TensorSpec([None, 6], df.float32))
    assert tuple(cf.graph.outputs[0].shape) == (None, 4)
    np.testing.assert_allclose(cf(_x((3, 6), 1, np.float32)).numpy(), np.fft.rfft(_x((3, 6), 1, np.float32)),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(IAE, match="rfft: the innermost sizes .* unknown"):
        df.defun(lambda x: S.rfft(x)).get_concrete_function(df.TensorSpec([2, None], df.float32))
    cf = df.defun(lambda x: S.fft(x)).get_concrete_function(df.TensorSpec([None, None], df.complex64))
    z = _z((2, 3), 1, np.complex64)
    np.testing.assert_allclose(cf(z).numpy(), np.fft.fft(z), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("call,match", [
    (lambda: S.fft(np.ones(4)), "fft: input must be complex64 or complex128, got float64"),
    (lambda: S.ifft2(np.ones(4, np.complex64)), "fft.*rank >= 2"),
    (lambda: S.rfft(np.ones(4, np.complex64)), "rfft: input must be float32 or float64, got complex64"),
    (lambda: S.rfft(np.ones(4, np.float16)), "rfft.*float16"),
    (lambda: S.irfft(np.ones(4)), "irfft: input must be complex"),
    (lambda: S.rfft(np.ones(4), [2, 2]), "rfft: fft_length must be 1 positive size"),
    (lambda: S.rfft2(np.ones((4, 4)), [0, 2]), "rfft2: fft_length must be 2 positive sizes"),
    (lambda: S.rfft(np.ones(4), "4"), "rfft: fft_length"),
])
def test_bad_inputs_raise_naming_the_function(call, match):
    with pytest.raises((IAE, TypeError), match=match):
        call()


def test_df_test_checks_real_functions_through_the_transforms_both_modes_to_order_two():
    # real in, real out, complex inside: reverse and forward mode, first and second order
    def f(x):
        product = S.irfft(S.rfft(x, [6]) * S.rfft(x, [6]), [5])
        return df.abs(product) + df.real(S.ifft2(S.fft2(df.complex(x, x * x))))[..., :5]
    x = _x((3, 5), 6)
    for dtype in (np.float32, np.float64):
        df.test.check_gradients(f, [x.astype(dtype)], order=2)
