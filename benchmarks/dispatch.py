"""Eager dispatch cost: one `df.add` of two float32 (4,) tensors, next to raw `np.add`.

usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/dispatch.py [--repeat N]

Prints microseconds per call (median over `repeat` timeit runs) for:
  numpy        np.add(a, b) on the two arrays (the floor),
  eager        df.add(x, y) with no tape,
  eager+tape   df.add(x, y) inside a GradientTape that watches x (the op is recorded),
  tape 100k    the same inside a tape already holding 100k entries (built once, before
               timing; each run adds `number // 10` more): recording costs the same at
               any length (its entries are not tracked by the garbage collector),
  number       df.add(x, 2.0) with no tape: a Python number operand (weakly typed, converted
               to x's dtype; the conversion is cached per value and dtype),
  sin, sinh    df.sin(x) and df.sinh(x) with no tape: two unary ops declared in different
               files (math_ops, elementwise_ops), both by the elementwise definer, so both
               take the eager fast path (np.sin itself is the floor of the pair),
  assign_add   v.assign_add(x) eagerly (one variable lock),
  defun        a defun of one add, called on two tensors,
  defun+assign a defun of one assign_add, called on a tensor: a call that assigns holds
               its variables' locks and keeps an undo log (graph/executor.py).
and the cost of one compiled call of `x * y + 1.0` (two ops) per backend: numpy (two ufunc
calls) and, with the `fast` extra, numba (one fused region: a Python wrapper and a numba
dispatch), next to numpy's own `a * b + 1`.
"""
import os

# Single-threaded BLAS for every measurement, set before numpy is imported.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import timeit  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import defun as df  # noqa: E402


def per_call_us(fn, number, repeat):
    """Median microseconds per call of `fn` over `repeat` runs of `number` calls."""
    fn()  # warm up (first-call caches, lazy imports)
    runs = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e6


def measure(number=20000, repeat=15):
    a = np.arange(4, dtype=np.float32)
    b = np.ones(4, dtype=np.float32)
    x, y = df.constant(a), df.constant(b)
    add = df.add
    rows = [("numpy np.add", per_call_us(lambda: np.add(a, b), number, repeat)),
            ("df.add eager", per_call_us(lambda: add(x, y), number, repeat))]
    # One long-lived tape: every call appends an entry. `number` adds per run keep the
    # tape's growth (and its memory) bounded; a fresh tape per run keeps runs alike.
    taped = []
    for _ in range(repeat):
        with df.GradientTape(persistent=True) as tape:
            tape.watch(x)
            taped.append(per_call_us(lambda: add(x, y), number, 1))
    rows.append(("df.add eager + tape", statistics.median(taped)))
    with df.GradientTape(persistent=True) as tape:
        tape.watch(x)
        for _ in range(100_000):
            add(x, y)
        rows.append(("df.add eager, tape of 100k entries",
                     per_call_us(lambda: add(x, y), max(1, number // 10), repeat)))
    del tape
    rows.append(("df.add(x, 2.0) eager", per_call_us(lambda: add(x, 2.0), number, repeat)))
    sin, sinh = df.sin, df.sinh
    rows.append(("numpy np.sin", per_call_us(lambda: np.sin(a), number, repeat)))
    rows.append(("df.sin eager", per_call_us(lambda: sin(x), number, repeat)))
    rows.append(("df.sinh eager", per_call_us(lambda: sinh(x), number, repeat)))
    one = np.float32(1.0)
    rows.append(("numpy a * b + 1", per_call_us(lambda: a * b + one, number, repeat)))
    for backend in df.backends():
        fused = df.defun(lambda p, q: p * q + 1.0, backend=backend)
        np.testing.assert_allclose(fused(x, y).numpy(), a * b + one)
        rows.append((f"defun x*y+1, {backend}", per_call_us(lambda: fused(x, y), number, repeat)))
    v = df.Variable(np.zeros(4, np.float32))
    rows.append(("v.assign_add eager", per_call_us(lambda: v.assign_add(x), number, repeat)))
    one_add = df.defun(lambda p, q: p + q)
    rows.append(("defun one add", per_call_us(lambda: one_add(x, y), number, repeat)))
    bump = df.defun(lambda p: v.assign_add(p))
    rows.append(("defun one assign_add", per_call_us(lambda: bump(x), number, repeat)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="timeit runs (median is reported)")
    parser.add_argument("--number", type=int, default=20000, help="calls per timeit run")
    args = parser.parse_args()
    rows = measure(args.number, args.repeat)
    floor = rows[0][1]
    print(f"dispatch: add of two float32 (4,) tensors; median of {args.repeat} runs x "
          f"{args.number} calls; numpy {np.__version__}")
    print(f"{'what':<36}{'us/call':>10}{'x numpy':>10}")
    for what, us in rows:
        print(f"{what:<36}{us:>10.3f}{us / floor:>10.2f}")
    print("targets (issue 24, multiples of np.add in this run): eager <= 1.8x, eager under a "
          "100k-entry tape <= 2.5x, one-op defun call <= 3.0x")


if __name__ == "__main__":
    main()
