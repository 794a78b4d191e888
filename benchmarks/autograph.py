"""AutoGraph (Python control flow on tensors in a defun): the performance table of issue 29.

usage: python benchmarks/autograph.py [--quick]

  for-row loop   `for row in x:` over n = 10 / 1,000 / 100,000 rows in a defun: trace ms (a
                 fresh defun, get_concrete_function; median) and the nodes of the trace and
                 of every function it reaches; autograph=False (the loop unrolled) beside it
                 where it finishes in reasonable time.
  conversion     ms to convert, once, a 100-line function calling five helpers (each with
                 control flow), from a module written to a temporary file (median of fresh
                 imports, so nothing is cached); process time, so that other processes on a
                 busy machine count less.
  while          steady call us of a converted `while i < n:` (tensor n) against the same
                 loop written with df.while_loop.
  trace on/off   trace ms of a defun with no tensor control flow (60 ops over 3 helpers)
                 with autograph on and off (process time, interleaved).
"""
import common  # noqa: F401  (first: pins BLAS to one thread before numpy loads)

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import defun as df  # noqa: E402
from common import machine_figures, machine_line, markdown_table, median_us_interleaved  # noqa: E402
from defun.autograph import conversion  # noqa: E402
from defun.graph.ir import Graph  # noqa: E402


def row_loop(x):
    s = df.zeros([x.shape[1]], x.dtype)
    for row in x:
        s = s + df.tanh(row) * 0.5
    return s


def count_nodes(graph, seen=None):
    """Nodes of `graph` and of every function graph its nodes hold (each counted once)."""
    seen = set() if seen is None else seen
    if id(graph) in seen:
        return 0
    seen.add(id(graph))
    n = len(graph.nodes)
    for node in graph.nodes:
        for v in node.attrs.values():
            if isinstance(v, Graph):
                n += count_nodes(v, seen)
    return n


def trace_ms(make, arg, repeat):
    times, nodes = [], None
    for _ in range(repeat):
        f = make()
        start = time.perf_counter()
        cf = f.get_concrete_function(arg)
        times.append((time.perf_counter() - start) * 1e3)
        nodes = count_nodes(cf.graph)
    return statistics.median(times), nodes


def for_rows_table(quick):
    rows = []
    for n in (10, 1000, 100000):
        x = df.constant(np.random.default_rng(0).standard_normal((n, 4)).astype(np.float32))
        ms, nodes = trace_ms(lambda: df.defun(row_loop), x, 3 if quick else 7)
        np.testing.assert_allclose(df.defun(row_loop)(x).numpy(), np.sum(np.tanh(x.numpy()) * 0.5, 0), rtol=1e-4)
        if n <= 1000:
            off_ms, off_nodes = trace_ms(lambda: df.defun(row_loop, autograph=False), x, 1 if n > 10 else 3)
            off = (f"{off_ms:.1f}", str(off_nodes))
        else:
            off = ("(not run: ~5 nodes per row)", "")
        rows.append([f"{n:,}", f"{ms:.1f}", str(nodes), *off])
    return markdown_table(["rows n", "trace ms (autograph)", "nodes", "trace ms (autograph=False, unrolled)",
                           "nodes (unrolled)"], rows)


_HELPER = '''
def helper{k}(x, n):
    s = x * 0.0
    i = 0
    while i < n:
        if df.reduce_sum(s) > {k}.0:
            s = s - 1.0
        else:
            s = s + x * {k}.0
        i += 1
    for row in x:
        s = s + row
    return s
'''


def _big_function():
    """Source of a module: five helpers and a 100-line function calling them."""
    lines = ["import defun as df", ""] + [_HELPER.format(k=k) for k in range(5)]
    body = ["def big(x, n):", "    acc = x"]
    while len(body) < 99:
        k = len(body) % 5
        body += [f"    if df.reduce_max(acc) > {len(body)}.0:",
                 f"        acc = helper{k}(acc, n) * 0.5",
                 "    else:",
                 f"        acc = acc + {k}.0",
                 f"    acc = acc if df.reduce_min(acc) < 0.0 else acc - 0.1"]
    body.append("    return acc")
    return "\n".join(lines + body) + "\n"


def conversion_ms(quick):
    source = _big_function()
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(5 if quick else 31):
            path = os.path.join(tmp, f"agbench_{k}.py")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(source)
            spec = importlib.util.spec_from_file_location(f"agbench_{k}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            fns = [module.big] + [getattr(module, f"helper{i}") for i in range(5)]
            start = time.process_time()
            for fn in fns:
                assert conversion.converted(fn) is not fn
            times.append((time.process_time() - start) * 1e3)
            if k == 0:      # the converted function runs and agrees with the Python
                x = df.constant(np.linspace(-1, 1, 6).astype(np.float32).reshape(2, 3))
                np.testing.assert_allclose(df.defun(module.big)(x, df.constant(3)).numpy(),
                                           module.big(x, df.constant(3)).numpy(), rtol=1e-4)
            sys.modules.pop(f"agbench_{k}", None)
    lines = len(source.splitlines())
    return statistics.median(times), min(times), lines


def python_loop_ms():
    """ms for `for i in range(10**6): s += i` (how fast this interpreter runs Python now)."""
    start, s = time.perf_counter(), 0
    for i in range(10 ** 6):
        s += i
    return (time.perf_counter() - start) * 1e3


def converted_while(x, n):
    i = 0
    while i < n:
        x = x * 0.5 + 1.0
        i += 1
    return x


def written_while(x, n):
    return df.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 0.5 + 1.0), (0, x))[1]


def while_table(quick):
    x, n = df.constant(np.ones(8, np.float32)), df.constant(100)
    a, b = df.defun(converted_while), df.defun(written_while)
    np.testing.assert_allclose(a(x, n).numpy(), b(x, n).numpy())
    us = median_us_interleaved({"converted": lambda: a(x, n), "df.while_loop": lambda: b(x, n)},
                               repeat=9 if quick else 25)
    return us["converted"], us["df.while_loop"]


def _layer(x, w):
    return df.tanh(df.matmul(x, w) + 0.1) * 0.9 + df.sigmoid(x) * 0.1


def _norm(x):
    m = df.reduce_mean(x, axis=1, keepdims=True)
    return (x - m) / (df.sqrt(df.reduce_mean((x - m) * (x - m), axis=1, keepdims=True)) + 1e-5)


def no_control_flow(x, w):
    for _ in range(6):      # a Python loop over a Python range: unrolled, as written
        x = _norm(_layer(x, w))
        x = x + df.relu(x) * 0.5
    return df.reduce_sum(x * x)


def on_off_table(quick):
    x = df.constant(np.ones((4, 8), np.float32))
    w = df.constant(np.eye(8, dtype=np.float32))
    repeat = 5 if quick else 601
    on, off = [], []
    for _ in range(repeat):     # interleaved, fresh defuns (conversion cached after the first)
        for flag, out in ((True, on), (False, off)):
            f = df.defun(no_control_flow, autograph=flag)
            start = time.process_time()
            cf = f.get_concrete_function(x, w)
            out.append((time.process_time() - start) * 1e3)
    return statistics.median(on), statistics.median(off), count_nodes(cf.graph)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    print(machine_line(machine_figures()))
    t_on, t_off, nodes = on_off_table(quick)      # first: before the large traces below fill the heap
    print()
    print("`for row in x` in a defun (one while node with autograph):")
    print(for_rows_table(quick))
    conv, best, lines = conversion_ms(quick)
    print()
    print(f"Conversion, once per function: {conv:.1f} ms median, {best:.1f} ms fastest of the fresh imports "
          f"(process time), "
          f"for a {lines}-line module (a 100-line function "
          f"and five helpers with control flow; target <= 20 ms); the interpreter meanwhile: "
          f"{python_loop_ms():.0f} ms for a 10^6-iteration Python loop, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    w_conv, w_loop = while_table(quick)
    print(f"Steady call, 100 iterations: converted while {w_conv:.0f} us, df.while_loop {w_loop:.0f} us "
          f"(ratio {w_conv / w_loop:.3f}; target <= 1.05)")
    print(f"Trace without tensor control flow ({nodes} nodes): autograph on {t_on:.2f} ms, off "
          f"{t_off:.2f} ms (process time; ratio {t_on / t_off:.3f}; target <= 1.2)")


if __name__ == "__main__":
    main()
