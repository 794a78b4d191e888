"""Fused transcendental chains, float32: numba backend vs numpy vs jax.jit, ns per element.

usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \
       python benchmarks/transcendentals.py [--quick]

Each chain is one defun run on the numba backend (one fused region whose tanh/exp/sigmoid are
graph/numba_backend/polynomials.py), on the numpy backend, as hand-written numpy (one ufunc
call per op), as jax.jit when installed, and as a numba loop calling libm (what the fused loop
cost before the polynomials: `np.tanh` in numba is libm's scalar call). Every result is
checked against numpy's first. Medians of interleaved runs of this process's CPU time
(`time.process_time`: on a loaded machine wall time mostly measures the other processes);
the machine's load is printed.
"""
import common  # noqa: F401  (first: pins BLAS/XLA to one thread before numpy loads)

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import defun as df  # noqa: E402
from common import machine_figures, machine_line, markdown_table, median_us_interleaved  # noqa: E402

# name: (defun/numpy form over a namespace `m`, number of ops)
CHAINS = {
    "tanh(x) * 2": lambda m, x: m.tanh(x) * np.float32(2),
    "tanh(x * 1.5 + 0.1) * 0.9": lambda m, x: m.tanh(x * np.float32(1.5) + np.float32(0.1)) * np.float32(0.9),
    "exp(x * 0.5) + 1": lambda m, x: m.exp(x * np.float32(0.5)) + np.float32(1),
    "sigmoid(x * 1.5 + 0.1)": lambda m, x: m.sigmoid(x * np.float32(1.5) + np.float32(0.1)),
    "log(exp(x) + 1) (softplus)": lambda m, x: m.log(m.exp(x) + np.float32(1)),
}


class _Numpy:
    tanh, exp, log = np.tanh, np.exp, np.log

    @staticmethod
    def sigmoid(x):
        return (np.tanh(x * np.float32(0.5)) + np.float32(1)) * np.float32(0.5)


def _jax_namespace():
    import jax
    import jax.numpy as jnp

    class _Jax:
        tanh, exp, log, sigmoid = jnp.tanh, jnp.exp, jnp.log, staticmethod(jax.nn.sigmoid)
    return jax, _Jax


# the chains for a numba loop calling numba's np.tanh / np.exp / np.log (libm's scalar calls)
_LIBM = {
    "tanh(x) * 2": lambda v: np.tanh(v) * np.float32(2),
    "tanh(x * 1.5 + 0.1) * 0.9": lambda v: np.tanh(v * np.float32(1.5) + np.float32(0.1)) * np.float32(0.9),
    "exp(x * 0.5) + 1": lambda v: np.exp(v * np.float32(0.5)) + np.float32(1),
    "sigmoid(x * 1.5 + 0.1)": lambda v: (np.tanh((v * np.float32(1.5) + np.float32(0.1)) * np.float32(0.5))
                                         + np.float32(1)) * np.float32(0.5),
    "log(exp(x) + 1) (softplus)": lambda v: np.log(np.exp(v) + np.float32(1)),
}


def _libm_loop(name):
    """A numba loop computing the chain element by element with libm's scalar functions."""
    import numba
    scalar = numba.njit(_LIBM[name])

    @numba.njit(error_model="numpy", fastmath={"contract"})
    def loop(x, out):
        for i in range(x.shape[0]):
            out[i] = scalar(x[i])
    return loop


def measure(n, repeat):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    jax = None
    if importlib.util.find_spec("jax") is not None:
        jax, jnp_ns = _jax_namespace()
        jx = jax.device_put(x)
    rows = []
    for name, chain in CHAINS.items():
        want = chain(_Numpy, x)
        fns = {"numpy": lambda: chain(_Numpy, x)}
        tx = df.constant(x)
        for backend in ("numpy", "numba"):
            f = df.defun(lambda v: chain(df, v), backend=backend)
            got = np.asarray(f(tx))
            np.testing.assert_allclose(got, want, rtol=3e-6, atol=3e-6)
            fns[f"defun {backend}"] = (lambda f: lambda: f(tx))(f)
        loop, out = _libm_loop(name), np.empty_like(x)
        loop(x, out)
        np.testing.assert_allclose(out, want, rtol=3e-6, atol=3e-6)
        fns["numba loop, libm"] = lambda: loop(x, out)
        if jax is not None:
            jf = jax.jit(lambda v: chain(jnp_ns, v))
            np.testing.assert_allclose(np.asarray(jf(jx)), want, rtol=3e-6, atol=3e-6)
            fns["jax.jit"] = lambda: jf(jx).block_until_ready()
        us = median_us_interleaved(fns, repeat=repeat, min_run_s=0.005, clock=time.process_time)
        rows.append([name] + [f"{us[k] * 1e3 / n:.3f}" for k in fns]
                    + [f"{us['numpy'] / us['defun numba']:.2f}x"])
    return list(fns), rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeat = 5 if args.quick else 15
    print(machine_line(machine_figures()))
    for n in (10 ** 4, 10 ** 6):
        load = os.getloadavg()
        names, rows = measure(n, repeat)
        print(f"\nfloat32, N = {n:,}: ns per element (load average before: "
              f"{load[0]:.2f}, after: {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores)\n")
        print(markdown_table(["chain"] + names + ["numpy / defun numba"], rows))


if __name__ == "__main__":
    main()
