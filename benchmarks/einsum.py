"""einsum: df.einsum (eager, no tape) against numpy on the equations models use.

usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/einsum.py [--repeat N]

For each equation: microseconds per call (median, interleaved runs, single-threaded BLAS) of
  hand     the hand-written numpy for that equation (matmul, sum of products...), the floor;
  df       df.einsum on eager tensors (the kernel contracts pairwise through matmul);
  np opt   np.einsum(..., optimize=True);
  np       np.einsum(...) (numpy's C loop, no BLAS);
and df / hand. Results are checked against np.einsum first.
"""
import argparse
import sys

from common import markdown_table, median_us_interleaved  # noqa: F401  (pins one BLAS thread first)

import numpy as np  # noqa: E402

import defun as df  # noqa: E402

R = np.random.default_rng(0)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


CASES = [  # (equation, operands, hand-written numpy)
    ("ij,jk->ik", (f32(256, 256), f32(256, 256)), lambda a, b: a @ b),
    ("bij,bjk->bik", (f32(64, 64, 64), f32(64, 64, 64)), lambda a, b: a @ b),
    ("bhqd,bhkd->bhqk", (f32(8, 8, 64, 32), f32(8, 8, 64, 32)), lambda a, b: a @ b.swapaxes(-1, -2)),
    ("ij,kj->ik", (f32(512, 128), f32(256, 128)), lambda a, b: a @ b.T),
    ("bi,bi->b", (f32(4096, 64), f32(4096, 64)), lambda a, b: (a * b).sum(-1)),
    ("i,j->ij", (f32(512), f32(512)), lambda a, b: np.outer(a, b)),
    ("ii->", (f32(512, 512),), lambda a: np.trace(a)),
    ("ij,jk,kl->il", (f32(64, 256), f32(256, 256), f32(256, 8)), lambda a, b, c: a @ (b @ c)),
    ("ij->ji", (f32(512, 512),), lambda a: a.T),
    ("ij,ij->", (f32(512, 512), f32(512, 512)), lambda a, b: np.vdot(a, b)),
    ("ij,jk->ik", (f32(4, 8), f32(8, 4)), lambda a, b: a @ b),
]


def measure(repeat):
    rows = []
    for eq, xs, hand in CASES:
        ts = [df.constant(x) for x in xs]
        want = np.einsum(eq, *xs, optimize=True)
        np.testing.assert_allclose(df.einsum(eq, *ts).numpy(), want, rtol=1e-3, atol=1e-2, err_msg=eq)
        np.testing.assert_allclose(hand(*xs), want, rtol=1e-3, atol=1e-2, err_msg=eq)
        us = median_us_interleaved({
            "hand": lambda: hand(*xs),
            "df": lambda: df.einsum(eq, *ts),
            "np_opt": lambda: np.einsum(eq, *xs, optimize=True),
            "np": lambda: np.einsum(eq, *xs),
        }, repeat=repeat)
        shapes = " ".join("x".join(map(str, x.shape)) for x in xs)
        rows.append([f"`{eq}` {shapes}", f"{us['hand']:.1f}", f"{us['df']:.1f}", f"{us['np_opt']:.1f}",
                     f"{us['np']:.1f}", f"{us['df'] / us['hand']:.2f}"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    rows = measure(args.repeat)
    print(markdown_table(["equation, shapes", "hand us", "df us", "np opt us", "np us", "df/hand"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
