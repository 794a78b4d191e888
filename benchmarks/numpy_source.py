"""The exported numpy module against the graph: the digits-sized MLP's loss and gradient.

usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/numpy_source.py

Medians of CPU time in microseconds (interleaved runs, process time, so other processes
on the machine count less; single-threaded BLAS), ratio to hand-written
numpy, for batch 32 and batch 359 (the digits test set) through a 64-64-10 tanh MLP with
mean sparse softmax cross-entropy:
  numpy (hand-written)   forward + backward written by hand (the floor)
  defun plan             the defun'd loss under a GradientTape: its forward-with-side-outputs
                         plan, then its backward plan (the graph's own run)
  numpy module           df.export_numpy_source(..., include_backward=True):
                         forward_with_side_outputs, then backward (no library)
Also the export's own time (a fresh module text each call; parsed sources are cached).
"""
import time

import common  # noqa: F401  (single-threaded BLAS before numpy loads)
from common import median_us_interleaved

import numpy as np

import defun as df


def hand_written(w0, b0, w1, b1):
    def step(x, labels):
        h = np.tanh(x @ w0 + b0)
        logits = h @ w1 + b1
        z = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(z)
        p = e / e.sum(axis=1, keepdims=True)
        n = x.shape[0]
        loss = -np.mean(np.log(p[np.arange(n), labels]))
        d = p.copy()
        d[np.arange(n), labels] -= 1
        d /= n
        dw1, db1 = h.T @ d, d.sum(0)
        dh = (d @ w1.T) * (1 - h * h)
        return loss, [x.T @ dh, dh.sum(0), dw1, db1]
    return step


def main():
    rng = np.random.default_rng(0)
    params = [rng.normal(0, 0.1, (64, 64)).astype(np.float32), np.zeros(64, np.float32),
              rng.normal(0, 0.1, (64, 10)).astype(np.float32), np.zeros(10, np.float32)]
    variables = [df.Variable(p, name=n) for p, n in zip(params, ["w0", "b0", "w1", "b1"])]

    @df.defun
    def loss(x, labels):
        h = df.tanh(x @ variables[0] + variables[1])
        logits = h @ variables[2] + variables[3]
        return df.reduce_mean(df.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))

    cf = loss.get_concrete_function(df.TensorSpec([None, 64], df.float32), df.TensorSpec([None], df.int32))
    source = df.export_numpy_source(cf, include_backward=True)
    module = {}
    exec(compile(source, "digits_loss.py", "exec"), module)
    fwd, bwd = module["forward_with_side_outputs"], module["backward"]
    hand = hand_written(*params)
    one = np.float32(1.0)
    print("| batch | numpy (hand-written) | defun plan | numpy module |")
    print("|---|---|---|---|")
    for n in (32, 359):
        x = rng.normal(size=(n, 64)).astype(np.float32)
        labels = rng.integers(0, 10, n).astype(np.int32)
        xt, lt = df.constant(x), df.constant(labels)

        def plan():
            with df.GradientTape() as tape:
                value = loss(xt, lt)
            return tape.gradient(value, variables)

        def numpy_module():
            outs, saved = fwd(x, labels)
            return bwd([one], saved)
        times = median_us_interleaved({"hand": lambda: hand(x, labels), "plan": plan, "module": numpy_module},
                                      repeat=41, min_run_s=0.01, clock=time.process_time)
        h = times["hand"]
        print(f"| {n} | {h:.1f} (1.00x) | {times['plan']:.1f} ({times['plan'] / h:.2f}x) | "
              f"{times['module']:.1f} ({times['module'] / h:.2f}x) |")
    export_ms = median_us_interleaved({"export": lambda: df.export_numpy_source(cf, include_backward=True)},
                                      repeat=7, clock=time.process_time)["export"] / 1e3
    print(f"\nexport_numpy_source(include_backward=True): {export_ms:.1f} ms, "
          f"{len(source.splitlines())} lines")


if __name__ == "__main__":
    main()
