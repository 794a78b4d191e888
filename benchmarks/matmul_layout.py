"""Does another operand order or layout run the anchors' matmuls faster on this BLAS?

usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \
       python benchmarks/matmul_layout.py [--rounds 3]

For every matmul of the mlp_small and mlp_medium steps (forward and backward, with the
transposes the gradients use) and the input gradient of a 256x256 layer, float32 on zeros,
one BLAS thread, times each way of getting the same product:
  default      np.matmul of the operands as the graph kernel gets them (transposes as views)
  swapped      (B^T @ A^T)^T: the other order; its result is F-ordered (a transposed view)
  swapped, C   the same copied to C order (what a plan needing C-ordered values would pay)
  copy A/B     the operand copied to C order first
  B as F       B copied to F order (w stored transposed)
and prints the medians (us of this process's CPU time, `time.process_time`) and the best
against the default, per round (runs interleave the layouts, so load falls on them alike).
The load average is printed with each round.
"""
import common  # noqa: F401  (first: pins BLAS/XLA to one thread before numpy loads)

import argparse  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from common import machine_figures, machine_line, markdown_table, median_us_interleaved  # noqa: E402

# name: (stored shape of a, of b, transpose_a, transpose_b)
CASES = {
    "small fwd x@w1 (8x32)(32x32)": ((8, 32), (32, 32), False, False),
    "small fwd h@w2 (8x32)(32x10)": ((8, 32), (32, 10), False, False),
    "small bwd g@w2^T": ((8, 10), (32, 10), False, True),
    "small bwd h^T@g": ((8, 32), (8, 10), True, False),
    "small bwd x^T@d": ((8, 32), (8, 32), True, False),
    "medium fwd x@w1 (64x256)(256x256)": ((64, 256), (256, 256), False, False),
    "medium fwd h@w2 (64x256)(256x10)": ((64, 256), (256, 10), False, False),
    "medium bwd g@w2^T": ((64, 10), (256, 10), False, True),
    "medium bwd h^T@g": ((64, 256), (64, 10), True, False),
    "medium bwd x^T@d": ((64, 256), (64, 256), True, False),
    "input grad d@w1^T (64x256)(256x256)^T": ((64, 256), (256, 256), False, True),
}


def layouts(a, b):
    mm = np.matmul
    return {"default": lambda: mm(a, b),
            "swapped": lambda: mm(b.T, a.T).T,
            "swapped, C": lambda: np.ascontiguousarray(mm(b.T, a.T).T),
            "copy A": lambda: mm(np.ascontiguousarray(a), b),
            "copy B": lambda: mm(a, np.ascontiguousarray(b)),
            "B as F": lambda: mm(a, np.asfortranarray(b))}


def one_round(repeat):
    rows = []
    for name, (sa, sb, ta, tb) in CASES.items():
        a, b = np.zeros(sa, np.float32), np.zeros(sb, np.float32)
        a, b = (a.T if ta else a), (b.T if tb else b)
        fns = layouts(a, b)
        ref = fns["default"]()
        for fn in fns.values():
            np.testing.assert_array_equal(fn(), ref)
        us = median_us_interleaved(fns, repeat=repeat, min_run_s=0.003, clock=time.process_time)
        best = min(us, key=us.get)
        rows.append([name] + [f"{us[k]:.1f}" for k in fns] + [f"{best} {us['default'] / us[best]:.2f}x"])
    return list(fns), rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(machine_line(machine_figures()))
    for r in range(args.rounds):
        load = os.getloadavg()[0]
        names, rows = one_round(args.repeat)
        print(f"\nround {r + 1}: median us per call (load average {load:.2f} -> "
              f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} cores)\n")
        print(markdown_table(["matmul"] + names + ["best vs default"], rows))


if __name__ == "__main__":
    main()
