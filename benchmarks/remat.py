"""Rematerialization: what `df.defun(f, rematerialize=True)` saves, holds and costs.

usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/remat.py [--quick]

Per workload, default mode against rematerialize=True:
  saved        bytes of the side outputs one recorded call keeps for its backward,
  peak         peak traced memory (tracemalloc) of one step, above what the inputs hold,
  time         median us per step (CPU time, interleaved), and its ratio to the default.
Workloads: mlp_medium (batch 64, 256-256-10, tanh, softmax cross-entropy, gradients of the
four parameters); a deep elementwise chain (float64 (4096,), 100 x tanh(x) * 1.01 + 0.1);
and the same chain called 8 times under one tape before one backward (what a tape over
several forward calls holds: there the saved bytes are the peak).
"""
import common  # noqa: F401  (first: pins BLAS to one thread before numpy loads)

import argparse  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402

import numpy as np  # noqa: E402

import defun as df  # noqa: E402
from defun.runtime.tape import entry_outputs  # noqa: E402
from common import markdown_table, median_us_interleaved  # noqa: E402
from anchors import mlp_df_loss, mlp_problem  # noqa: E402

CHAIN_STEPS = 100


def chain_loss(x):
    for _ in range(CHAIN_STEPS):
        x = df.tanh(x) * 1.01 + 0.1
    return df.reduce_sum(x)


def _step(f, n_params, calls=1):
    """One value-and-gradients step: `calls` calls of `f` under one tape, then the backward."""
    def step(*ts):
        with df.GradientTape() as tape:
            for t in ts[:n_params]:
                tape.watch(t)
            values = [f(*ts) for _ in range(calls)]
            total = values[0] if calls == 1 else df.add_n(values)
        return total, tape.gradient(total, list(ts[:n_params]))
    return step


def saved_bytes(f, ts, n_params):
    """Bytes of the side outputs a recorded call of `f` keeps (each array counted once)."""
    with df.GradientTape() as tape:
        for t in ts[:n_params]:
            tape.watch(t)
        f(*ts)
    entry = tape._tape.entries[-1]
    n = len(f.get_concrete_function(*ts).graph.outputs)
    arrays = {id(t._value): t._value for t in entry_outputs(entry)[n:]}
    return sum(a.nbytes for a in arrays.values())


def peak_bytes(step, ts):
    step(*ts)                               # warm: plans compiled, caches filled
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    step(*ts)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def measure(name, loss, args, n_params, calls, repeat):
    ts = [df.constant(a) for a in args]
    fns = {mode: df.defun(loss, rematerialize=mode == "remat") for mode in ("default", "remat")}
    steps = {mode: _step(f, n_params, calls) for mode, f in fns.items()}
    got = {mode: step(*ts) for mode, step in steps.items()}
    for a, b in zip(got["default"][1], got["remat"][1]):      # the same gradients
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    times = median_us_interleaved({m: (lambda s=s: s(*ts)) for m, s in steps.items()},
                                  repeat=repeat, clock=time.process_time)
    rows = []
    for mode in ("default", "remat"):
        rows.append([name, "rematerialize" if mode == "remat" else "default",
                     f"{calls * saved_bytes(fns[mode], ts, n_params) / 1024:,.0f}",
                     f"{peak_bytes(steps[mode], ts) / 1024:,.0f}",
                     f"{times[mode]:,.0f}", f"{times[mode] / times['default']:.2f}x"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    opts = parser.parse_args()
    repeat = 5 if opts.quick else 25
    chain = [np.random.default_rng(0).standard_normal(4096)]
    rows = measure("mlp_medium", mlp_df_loss, mlp_problem(64, (256, 256, 10)), 4, 1, repeat)
    rows += measure("chain (4096,) x 100", chain_loss, chain, 1, 1, repeat)
    rows += measure("chain, 8 calls, one tape", chain_loss, chain, 1, 8, repeat)
    print("# Rematerialization: side outputs, peak memory, time per step\n")
    print(markdown_table(["workload", "mode", "saved KiB", "peak KiB", "us/step", "time"], rows))


if __name__ == "__main__":
    main()
