"""df.scan: trace time independent of the sequence length (one node), against unrolling.

usage: python benchmarks/scan.py [--quick]

A small RNN cell (batch 8, input 16, hidden 32: h = tanh(x W + h U + b)), the loss the
sum of squares of every hidden state, in a defun, over T = 100 and T = 1000 steps:
  trace       CPU ms to trace the forward (a fresh defun, get_concrete_function; median),
  + backward  CPU ms to trace it and build its backward (the first gradient's setup),
  nodes       nodes of the traced graph and of every function it reaches,
  step        median CPU ms of one call with its gradient (steady state), and per time step;
for df.scan, and for the same cell unrolled by a Python loop inside the defun (the trace a
scan avoids). The hand-written numpy forward and backward loop is the floor for `step`.
"""
import common  # noqa: F401  (first: pins BLAS to one thread before numpy loads)

import argparse  # noqa: E402
import gc  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import defun as df  # noqa: E402
from common import assert_same, markdown_table, median_us  # noqa: E402
from defun.graph.gradients import saving_of  # noqa: E402

BATCH, INPUT, HIDDEN = 8, 16, 32


def params():
    rs = np.random.RandomState(0)
    return [rs.randn(INPUT, HIDDEN) * 0.2, rs.randn(HIDDEN, HIDDEN) * 0.2, np.zeros(HIDDEN)]


def scan_loss(w, u, b, xs, h0):
    hs = df.scan(lambda h, x: df.tanh(df.matmul(x, w) + df.matmul(h, u) + b), xs, h0)
    return df.reduce_sum(hs * hs)


def unrolled_loss(w, u, b, xs, h0):
    h, total = h0, 0.0
    for t in range(xs.shape[0]):
        h = df.tanh(df.matmul(xs[t], w) + df.matmul(h, u) + b)
        total = total + df.reduce_sum(h * h)
    return total


def numpy_step(w, u, b, xs, h0):
    hs, h = [], h0
    for x in xs:
        h = np.tanh(x @ w + h @ u + b)
        hs.append(h)
    loss = sum(float(np.sum(h * h)) for h in hs)
    gw, gu, gb, gh = np.zeros_like(w), np.zeros_like(u), np.zeros_like(b), np.zeros_like(h0)
    for t in reversed(range(len(xs))):
        prev = hs[t - 1] if t else h0
        dz = (2 * hs[t] + gh) * (1 - hs[t] ** 2)
        gw += xs[t].T @ dz
        gu += prev.T @ dz
        gb += dz.sum(0)
        gh = dz @ u.T
    return loss, [gw, gu, gb]


def specs(steps):
    f64 = df.float64
    return [df.TensorSpec([INPUT, HIDDEN], f64), df.TensorSpec([HIDDEN, HIDDEN], f64),
            df.TensorSpec([HIDDEN], f64), df.TensorSpec([steps, BATCH, INPUT], f64),
            df.TensorSpec([BATCH, HIDDEN], f64)]


def node_count(graph):
    seen, todo, total = set(), [graph], 0
    while todo:
        g = todo.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        total += len(g.nodes)
        for node in g.nodes:
            todo.extend(v for v in node.attrs.values() if hasattr(v, "nodes") and hasattr(v, "all_inputs"))
    return total


def trace_ms(loss, lengths, repeat, backward):
    """{T: median CPU ms (this process's only) to trace `loss` with a fresh defun, and build
    its backward if `backward`}. The lengths are interleaved and garbage is collected before
    each sample, so what one length left behind is not charged to the next."""
    samples = {steps: [] for steps in lengths}
    for _ in range(repeat):
        for steps in lengths:
            gc.collect()
            start = time.process_time()
            cf = df.defun(loss).get_concrete_function(*specs(steps))
            if backward:
                saving_of(cf.graph)
            samples[steps].append(time.process_time() - start)
    return {steps: statistics.median(v) * 1e3 for steps, v in samples.items()}


def graphs(loss, steps):
    cf = df.defun(loss).get_concrete_function(*specs(steps))
    return node_count(cf.graph), node_count(saving_of(cf.graph).backward.graph)


def step_fn(loss, args):
    d = df.defun(loss)
    ts = [df.constant(a) for a in args]

    def step():
        with df.GradientTape() as tape:
            for t in ts[:3]:
                tape.watch(t)
            y = d(*ts)
        return y, tape.gradient(y, ts[:3])
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    opts = parser.parse_args()
    repeat = 3 if opts.quick else 21
    lengths = (100, 1000)
    trace_ms(scan_loss, (10,), 1, backward=True)        # warm up: first-use imports and caches
    traces = {}
    for name, loss, times in (("df.scan", scan_loss, repeat), ("unrolled", unrolled_loss, 3)):
        traces[name] = (trace_ms(loss, lengths, times, False), trace_ms(loss, lengths, times, True))
    rows = []
    for steps in lengths:
        rs = np.random.RandomState(steps)
        args = params() + [rs.randn(steps, BATCH, INPUT), np.zeros((BATCH, HIDDEN))]
        want = numpy_step(*args)
        floor_ms = median_us(lambda: numpy_step(*args), repeat=min(repeat, 5), clock=time.process_time) / 1e3
        for name, loss in (("df.scan", scan_loss), ("unrolled", unrolled_loss)):
            step = step_fn(loss, args)
            assert_same(f"{name} T={steps}", step(), want, 1e-9, 1e-9)
            step_ms = median_us(step, repeat=min(repeat, 5), clock=time.process_time) / 1e3
            fwd, both = traces[name]
            nodes = "%d + %d" % graphs(loss, steps)
            rows.append([name, steps, f"{fwd[steps]:.2f}", f"{both[steps]:.2f}", nodes, f"{step_ms:.2f}",
                         f"{step_ms / steps * 1e3:.1f}", f"{step_ms / floor_ms:.2f}"])
        rows.append(["numpy by hand", steps, "", "", "", f"{floor_ms:.2f}", f"{floor_ms / steps * 1e3:.1f}",
                     "1.00"])
    print(markdown_table(["", "T", "trace ms", "trace + backward ms", "nodes (fwd + bwd)", "step ms",
                          "us per time step", "x numpy"], rows))
    for name, (fwd, both) in traces.items():
        print(f"{name}: T=1000 / T=100: trace {fwd[1000] / fwd[100]:.2f}, "
              f"trace + backward {both[1000] / both[100]:.2f}")


if __name__ == "__main__":
    main()
