"""Shapes that do not retrace, and debugging a defun: what each costs (issue 30's table).

usage: python benchmarks/retracing.py [--quick]

Workloads (benchmarks/anchors.py): mlp_small (batch 8, 32-32-10, tanh, mean softmax
cross-entropy) and mlp_medium (batch 64, 256-256-10); the step is
`df.defun(df.value_and_gradients_function(loss, [0, 1, 2, 3]))`.
  100 batch sizes      a fresh defun'd step called with batch sizes 1..100, each once: its
                       traces and total time (tracing included), against a fresh step called
                       100 times at batch 8 (target: 2 traces, <= 1.2x); with
                       reduce_retracing=False for comparison; and those 100 calls again once
                       every size has its exact trace (no trace in the time): sizes 1..100
                       do more arithmetic than batch 8, which alone takes a share of the 1.2x;
                       so also against 100 calls at batch 50, whose arithmetic is the sizes'
                       mean (the cost of sizes changing, without the cost of larger sizes); and
                       hand-written numpy's step (anchors.mlp_numpy) at the same sizes: what
                       the sizes' arithmetic alone costs over batch 50's
  relaxed vs exact     steady calls at batch 8 of the relaxed trace (made by a call at batch
                       9 first) against the exact trace, numpy and numba backends (<= 1.05x);
                       the forward alone (the loss, no gradient) too; and the relaxed trace's
                       first calls at a shape (its relaxed plan, before the static one)
  check numerics       mlp_medium's step with df.debugging.enable_check_numerics() against
                       without (<= 1.5x)
  run eagerly          the step under df.config.run_functions_eagerly(True) against the
                       eager step (value_and_gradients_function without defun): equal
Median microseconds of this process's CPU time (time.process_time: on a shared machine wall
time counts the waits for a core), interleaved runs, one BLAS thread. Benchmarks, not
tests: nothing here asserts a time.
"""
import common  # noqa: F401  (first: pins BLAS to one thread before numpy loads)

import argparse  # noqa: E402
import functools  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

import defun as df  # noqa: E402
from anchors import mlp_df_loss, mlp_numpy, mlp_problem  # noqa: E402
from common import machine_figures, machine_line, markdown_table  # noqa: E402
from common import median_us_interleaved as _median_wall  # noqa: E402

CLOCK = time.process_time
median_us_interleaved = functools.partial(_median_wall, clock=CLOCK)

PARAMS = [0, 1, 2, 3]
NUMPY_SIZES, NUMPY_50 = "hand-written numpy step, 100 sizes", "hand-written numpy step, 100 calls at batch 50"


def step_of(backend="numpy", reduce_retracing=True):
    return df.defun(df.value_and_gradients_function(mlp_df_loss, PARAMS), backend=backend,
                    reduce_retracing=reduce_retracing)


def args_of(batch, sizes=(32, 32, 10)):
    return [df.constant(a) for a in mlp_problem(batch, sizes)]


def many_sizes(trials):
    """(traces, median ms) of 100 calls at batch sizes 1..100 (relaxed, exact) and at one size;
    the workloads interleaved, a trial of each in turn (a busy machine's swings hit them alike)."""
    varied = [args_of(n) for n in range(1, 101)]
    one, mean = args_of(8), args_of(50)
    runs = (("100 sizes, reduce_retracing=True", varied, True),
            ("100 sizes, reduce_retracing=False", varied, False),
            ("100 calls at batch 8", [one] * 100, True),
            ("100 calls at batch 50", [mean] * 100, True))
    again_name = "100 sizes, each size's exact trace made before (calls alone)"
    times, traces = {name: [] for name, _, _ in runs}, {}
    times[again_name] = []
    hand = {NUMPY_SIZES: [[t.numpy() for t in a] for a in varied],
            NUMPY_50: [[t.numpy() for t in mean]] * 100}
    times.update((name, []) for name in hand)
    for _ in range(trials):
        for name, arrays in hand.items():   # the arithmetic alone: hand-written numpy's step
            start = CLOCK()
            for a in arrays:
                mlp_numpy(*a)
            times[name].append((CLOCK() - start) * 1e3)
        for name, calls, relax in runs:
            step = step_of(reduce_retracing=relax)
            start = CLOCK()
            for a in calls:
                step(*a)
            times[name].append((CLOCK() - start) * 1e3)
            traces[name] = step.trace_count
            if calls is varied and not relax:   # every size's exact trace made: the calls alone
                start = CLOCK()
                for a in calls:
                    step(*a)
                times[again_name].append((CLOCK() - start) * 1e3)
    traces[again_name] = traces[NUMPY_SIZES] = traces[NUMPY_50] = 0
    order = [name for name, _, _ in runs[:2]] + [again_name] + [name for name, _, _ in runs[2:]] + list(hand)
    return {name: (traces[name], statistics.median(times[name])) for name in order}


def relaxed_against_exact(backend, repeat):
    """{name: us} of steady calls at batch 8: the whole step and the loss alone."""
    a8, a9 = args_of(8), args_of(9)
    fns = {}
    for what, make in (("step", lambda: step_of(backend)),
                       ("forward", lambda: df.defun(mlp_df_loss, backend=backend))):
        exact, relaxed = make(), make()
        exact(*a8)
        relaxed(*a9)
        relaxed(*a8)
        assert relaxed.trace_count == 2 and relaxed.retrace_reasons()[0].relaxed
        fns[f"{what} exact"] = lambda f=exact: f(*a8)
        fns[f"{what} relaxed"] = lambda f=relaxed: f(*a8)
        if what == "step":     # the relaxed plan itself: what a shape's first calls run (the
            values = [t.numpy() for t in a8]    # plan for its pattern of equal sizes)
            calls = list(relaxed._cache.values())[-1]._calls
            plans = [list(exact._cache.values())[-1]._fn.plan_run(), calls._pattern_plan((8, 8))]
            fns["plan exact"] = lambda run=plans[0]: run(*values)
            fns["plan relaxed"] = lambda run=plans[1]: run(*values)
    for fn in fns.values():     # past HOT_CALLS: the steady plan (defun/trace_calls.py)
        for _ in range(5):
            fn()
    return median_us_interleaved(fns, repeat=repeat, min_run_s=0.01)


def check_numerics(repeat):
    a = args_of(64, (256, 256, 10))
    step = step_of()
    step(*a)

    def checked():
        df.debugging.enable_check_numerics()
        try:
            return step(*a)
        finally:
            df.debugging.disable_check_numerics()

    def check_on_run(number=20):
        df.debugging.enable_check_numerics()
        try:
            for _ in range(number):
                step(*a)
        finally:
            df.debugging.disable_check_numerics()

    checked()   # compile the checking plans
    us = median_us_interleaved({"plain": lambda: step(*a), "checked x20": check_on_run}, repeat=repeat,
                               min_run_s=0.05)
    return us["plain"], us["checked x20"] / 20


def run_eagerly(repeat):
    a = args_of(8)
    eager = df.value_and_gradients_function(mlp_df_loss, PARAMS)
    step = step_of()
    step(*a)

    def switched(number=20):
        df.config.run_functions_eagerly(True)
        try:
            for _ in range(number):
                step(*a)
        finally:
            df.config.run_functions_eagerly(False)
    us = median_us_interleaved({"eager x20": lambda: [eager(*a) for _ in range(20)], "switched x20": switched},
                               repeat=repeat, min_run_s=0.05)
    return us["eager x20"] / 20, us["switched x20"] / 20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    args = parser.parse_args()
    repeat, trials = (7, 3) if args.quick else (21, 7)
    warnings.simplefilter("ignore", df.RetracingWarning)    # the exact row retraces 100 times
    print(machine_line(machine_figures()) + f" Load average {os.getloadavg()[0]:.1f} at the start.\n")
    rows = []
    sizes = many_sizes(trials)
    base = sizes["100 calls at batch 8"][1]
    for name, (traces, ms) in sizes.items():
        if name in (NUMPY_SIZES, NUMPY_50):    # their own row below
            continue
        target = "2 traces, <= 1.2x" if name.endswith("=True") else ""
        rows.append([f"mlp_small step, {name}", f"{traces} traces, {ms:,.1f} ms" if traces else f"no trace, {ms:,.1f} ms",
                     f"{ms / base:.2f}x", target])
    relaxed, mean = sizes["100 sizes, reduce_retracing=True"][1], sizes["100 calls at batch 50"][1]
    rows.append(["mlp_small step, 100 sizes (relaxed) against 100 calls at batch 50 (their mean arithmetic)",
                 f"{relaxed:,.1f} vs {mean:,.1f} ms", f"{relaxed / mean:.2f}x", ""])
    hand_sizes, hand_50 = sizes[NUMPY_SIZES][1], sizes[NUMPY_50][1]
    rows.append(["hand-written numpy step, 100 sizes against 100 calls at batch 50 (the sizes' own arithmetic)",
                 f"{hand_sizes:,.1f} vs {hand_50:,.1f} ms", f"{hand_sizes / hand_50:.2f}x", ""])
    for backend in [b for b in ("numpy", "numba") if b in df.backends()]:
        us = relaxed_against_exact(backend, repeat)
        for what in ("step", "forward", "plan"):
            e, r = us[f"{what} exact"], us[f"{what} relaxed"]
            label = {"step": "step", "forward": "forward (loss only)",
                     "plan": "step's plan before its shape is hot"}[what]
            rows.append([f"mlp_small {label}, relaxed vs exact trace, {backend}", f"{r:,.1f} vs {e:,.1f} us",
                         f"{r / e:.2f}x", "<= 1.05x" if what == "step" else ""])
    plain, checked = check_numerics(repeat)
    rows.append(["mlp_medium step, check numerics on vs off", f"{checked:,.0f} vs {plain:,.0f} us",
                 f"{checked / plain:.2f}x", "<= 1.5x"])
    eager, switched = run_eagerly(repeat)
    rows.append(["mlp_small step, run_functions_eagerly vs the eager step", f"{switched:,.0f} vs {eager:,.0f} us",
                 f"{switched / eager:.2f}x", "equal"])
    print(markdown_table(["workload", "time", "ratio", "target"], rows))


if __name__ == "__main__":
    main()
