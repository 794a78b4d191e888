"""Matmul layout: per static shape, the operand layout the BLAS runs fastest, measured once.

A graph's `matmul(a, b, transpose_b=True)` hands BLAS a transposed view, and BLAS's kernels
for a transposed operand are not always as fast as for a C-ordered one: on this project's
machine (OpenBLAS, one thread) `(64x10) @ (256x10)^T` runs 1.2x faster with the (10x256)
operand copied to C order first, while `x @ w` and the transposed-A products of a backward
pass gain nothing from any layout (benchmarks/matmul_layout.py prints the figures).

`choose(node, kernel)` is called when a plan binds a matmul node (NumpyBackend.kernel, which
the numba backend inherits for the matmuls it does not fuse). For a 2-D float matmul with
static shapes and at least one transposed operand, whose work m*k*n is between MIN_WORK
(below it a call's overhead is all there is) and MAX_WORK (above it the measuring would
cost too much compile time), it times the default and each candidate on zeros of those
shapes (a warm-up call, then the best of RUNS single calls each) and keeps a candidate only
if it takes under MARGIN of the default's time. Otherwise, and for every other node, it
returns `kernel` itself: nothing changes at run time when the default wins.

Candidates give C-ordered results only: the other operand order, (B^T A^T)^T, is faster for
some shapes (1.18x for `(64x256) @ (256x256)^T` here), but its result is F-ordered, which
later numpy ops read strided and a numba region compiles another signature for (copying it
back to C order costs more than it gained). The copies can change rounding: BLAS may sum
in another order for a C-ordered operand (measured: float32 bitwise equal; float64 TN
within 1e-15 relative); results equal the default within float rounding.

Choices are kept in a process-level table keyed by (dtype, shapes, transposes, BLAS
threads as the environment sets them); not on disk: measuring is a few milliseconds per
shape once per process, and a table on disk would need signing (like the numba cache's
files) and invalidating when the BLAS, its threads or the machine change.
"""
import os
import threading
import time

import numpy as np

__all__ = ["choose", "candidates", "table", "MIN_WORK", "MAX_WORK", "MARGIN", "RUNS"]

MIN_WORK = 1 << 16
MAX_WORK = 1 << 27
MARGIN = 0.9
RUNS = 3

_table = {}
_lock = threading.Lock()
_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def table():
    """A copy of the choices made so far: {key: layout name}."""
    return dict(_table)


def candidates(transpose_a, transpose_b):
    """{name: fn(a, b)} of the layouts other than the default for these transposes (a and b
    as stored: the candidate applies the transposes itself)."""
    mm = np.matmul

    def t(x):
        return x.swapaxes(-1, -2)
    out = {}
    if transpose_a:
        out["copy A"] = ((lambda a, b: mm(np.ascontiguousarray(t(a)), t(b))) if transpose_b
                         else (lambda a, b: mm(np.ascontiguousarray(t(a)), b)))
    if transpose_b:
        out["copy B"] = ((lambda a, b: mm(t(a), np.ascontiguousarray(t(b)))) if transpose_a
                         else (lambda a, b: mm(a, np.ascontiguousarray(t(b)))))
    if transpose_a and transpose_b:
        out["copy A and B"] = lambda a, b: mm(np.ascontiguousarray(t(a)), np.ascontiguousarray(t(b)))
    return out


def _best_time(fn, a, b):
    fn(a, b)
    best = float("inf")
    for _ in range(RUNS):
        start = time.perf_counter()
        fn(a, b)
        best = min(best, time.perf_counter() - start)
    return best


def _measure(kernel, options, a, b):
    """The name of the fastest of `options` under MARGIN of `kernel`'s time, or "default"."""
    base = _best_time(kernel, a, b)
    times = {name: _best_time(fn, a, b) for name, fn in options.items()}
    name = min(times, key=times.get)
    return name if times[name] < MARGIN * base else "default"


def _key(node):
    """The table key of a 2-D float matmul with static shapes worth measuring, else None."""
    a, b = node.inputs
    if len(a.shape) != 2 or len(b.shape) != 2 or None in a.shape or None in b.shape:
        return None
    ta, tb = bool(node.attrs.get("transpose_a")), bool(node.attrs.get("transpose_b"))
    dtype = a.dtype.np
    if not (ta or tb) or dtype.kind != "f" or dtype != b.dtype.np:
        return None
    m, k = (a.shape[1], a.shape[0]) if ta else a.shape
    n = b.shape[0] if tb else b.shape[1]
    if not MIN_WORK <= m * k * n <= MAX_WORK:
        return None
    threads = next((os.environ[v] for v in _THREAD_VARS if v in os.environ), str(os.cpu_count()))
    return dtype.str, tuple(a.shape), tuple(b.shape), ta, tb, threads


def choose(node, kernel):
    """The kernel for matmul `node`: `kernel` (its default) unless a layout measured
    faster for its shapes (see above)."""
    key = _key(node)
    if key is None:
        return kernel
    options = candidates(key[3], key[4])
    name = _table.get(key)
    if name is None:
        with _lock:
            name = _table.get(key)
            if name is None:
                dtype = np.dtype(key[0])
                a, b = np.zeros(key[1], dtype), np.zeros(key[2], dtype)
                name = _table[key] = _measure(kernel, options, a, b)
    return kernel if name == "default" else options[name]
