"""Helpers shared by the benchmarks: single-threaded setup, timing, checking, markdown.

Import this module before numpy: `pin_single_thread()` runs at import time, because
BLAS reads its thread count once, when it loads.
"""
import os
import statistics
import sys
import time

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def pin_single_thread():
    """One BLAS/OpenMP/XLA thread for every measured library, so ratios compare kernels."""
    for var in _THREAD_VARS:
        os.environ[var] = "1"
    os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


pin_single_thread()

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)


def _calls_per_run(fn, min_run_s, clock):
    """How many calls of `fn` make one timed run of at least `min_run_s` seconds."""
    number = 1
    while True:
        start = clock()
        for _ in range(number):
            fn()
        elapsed = clock() - start
        if elapsed >= min_run_s:
            return number
        number *= 2 if elapsed <= 0 else max(2, min(10, int(min_run_s / elapsed) + 1))


def median_us_interleaved(fns, repeat=25, min_run_s=0.001, clock=time.perf_counter):
    """{name: median microseconds per call} for a dict of zero-argument callables.

    Runs are interleaved (one run of each callable per round), so load from other
    processes falls on all of them alike and the ratios between them stay meaningful.
    Each run is a batch of calls lasting at least `min_run_s` (timer resolution and
    per-call noise stay small against it); the median is over `repeat` rounds. `clock`
    is wall time by default; `time.process_time` counts only this process's CPU time.
    """
    numbers = {}
    for name, fn in fns.items():
        fn()  # warm up: first-call caches, lazy builds
        numbers[name] = _calls_per_run(fn, min_run_s, clock)
    runs = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            number = numbers[name]
            start = clock()
            for _ in range(number):
                fn()
            runs[name].append((clock() - start) / number)
    return {name: statistics.median(r) * 1e6 for name, r in runs.items()}


def median_us(fn, repeat=25, min_run_s=0.001, clock=time.perf_counter):
    """Median microseconds per call of `fn()` (see `median_us_interleaved`)."""
    return median_us_interleaved({"fn": fn}, repeat, min_run_s, clock)["fn"]


def cpu_name():
    """The processor's model name (Linux /proc/cpuinfo; platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def machine_figures(repeat=25):
    """What this machine's Python and numpy cost, so figures from two machines compare:
    {"np.add us": one np.add of two float32 (4,) arrays (Python's per-call cost),
     "sgemm GFLOP/s": a (256x256) @ (256x256) float32 matmul on one BLAS thread,
     "tanh ns/elem": numpy's float32 tanh over 65,536 elements}."""
    a, b = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    m1 = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    m2 = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)
    t = np.random.default_rng(2).standard_normal(65536).astype(np.float32)
    out = np.empty_like(t)
    us = median_us_interleaved({"add": lambda: np.add(a, b), "mm": lambda: m1 @ m2,
                                "tanh": lambda: np.tanh(t, out=out)}, repeat=repeat)
    return {"np.add us": us["add"], "sgemm GFLOP/s": 2 * 256 ** 3 / (us["mm"] * 1e3),
            "tanh ns/elem": us["tanh"] * 1e3 / t.size}


def machine_line(figures):
    """One line naming the machine and its calibration figures."""
    import os as _os
    return (f"Machine: {cpu_name()}, {_os.cpu_count()} cores; np.add of float32 (4,) "
            f"{figures['np.add us']:.2f} us, single-thread sgemm 256^3 "
            f"{figures['sgemm GFLOP/s']:.1f} GFLOP/s, numpy float32 tanh "
            f"{figures['tanh ns/elem']:.2f} ns/element.")


def to_numpy(x):
    """An array from a df tensor, torch tensor, jax array or numpy value."""
    if hasattr(x, "detach"):            # torch
        x = x.detach()
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        x = x.numpy()
    return np.asarray(x)


def assert_same(name, got, expected, rtol, atol):
    """Check (loss, [grads]) of an implementation against the hand-written numpy floor."""
    got_loss, got_grads = got
    exp_loss, exp_grads = expected
    np.testing.assert_allclose(to_numpy(got_loss), exp_loss, rtol=rtol, atol=atol,
                               err_msg=f"{name}: loss differs from hand-written numpy")
    assert len(got_grads) == len(exp_grads), f"{name}: {len(got_grads)} gradients, expected {len(exp_grads)}"
    for i, (g, e) in enumerate(zip(got_grads, exp_grads)):
        g = to_numpy(g)
        assert g.shape == e.shape, f"{name}: gradient {i} has shape {g.shape}, expected {e.shape}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol,
                                   err_msg=f"{name}: gradient {i} differs from hand-written numpy")


def markdown_table(header, rows):
    """Rows of cells (already strings) as a GitHub markdown table."""
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep] + [line(r) for r in rows])
