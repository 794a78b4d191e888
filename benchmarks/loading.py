"""Loading and running JSON documents: cost at the format's limits, and the budgets' price.

usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/loading.py [--quick]

Prints, for hand-written documents at and below the limits of docs/format.md:
  nodes N      load time and peak memory of one function of N tanh nodes (10k, 100k),
               and of two functions of 100k (the total limit: 200k nodes);
  functions    1000 functions called side by side; a chain of 100 nested calls (the depth
               limit);
and, for a small MLP step exported from a defun, the median time of one call of the
defun, of its loaded document (whose kernels run under the memory budget), and the
loaded call with no budget.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import timeit

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def chain(n, name="f", callee=None):
    nodes = []
    for k in range(n):
        op = {"op": "tanh", "inputs": [f"{k}:0"], "attrs": {}}
        if callee is not None and k == 0:
            op = {"op": "call", "inputs": ["0:0"], "attrs": {"f": callee}}
        nodes.append({**op, "control_inputs": [], "outputs": [{"dtype": "float32", "shape": [4]}]})
    return {"name": name, "inputs": [{"name": "x", "dtype": "float32", "shape": [4]}], "nodes": nodes,
            "outputs": [{"ref": f"{n}:0", "dtype": "float32", "shape": [4]}]}


def document(functions):
    return {"format": "defun.graph", "version": 2, "entry": functions[0]["name"], "variables": [],
            "output_structure": {"output": 0}, "functions": functions}


def wide(n):
    """An entry calling n - 1 functions side by side."""
    callees = [chain(2, f"g{k}") for k in range(n - 1)]
    nodes = [{"op": "call", "inputs": [f"{k}:0" if k else "0:0"], "attrs": {"f": f"g{k}"}, "control_inputs": [],
              "outputs": [{"dtype": "float32", "shape": [4]}]} for k in range(n - 1)]
    entry = {"name": "f", "inputs": [{"name": "x", "dtype": "float32", "shape": [4]}], "nodes": nodes,
             "outputs": [{"ref": f"{n - 1}:0", "dtype": "float32", "shape": [4]}]}
    return document([entry] + callees)


def deep(n):
    return document([chain(1, f"f{k}", callee=f"f{k + 1}" if k + 1 < n else None) for k in range(n)])


CASES = {
    "10k nodes": lambda: document([chain(10_000)]),
    "100k nodes": lambda: document([chain(100_000)]),
    "2 x 100k nodes": lambda: document([chain(100_000, "f", callee="g"), chain(100_000, "g")]),
    "1000 functions": lambda: wide(1000),
    "100 nested calls": lambda: deep(100),
}

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import defun as df
text = sys.stdin.read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
f = df.load_json(json.loads(text))
load = time.perf_counter() - t
t = time.perf_counter()
f(np.ones(4, np.float32))
run = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps([load, run, peak / 1024, len(text)]))
"""


def measure_load(name):
    """(load s, first call s, peak MB, document bytes), in a fresh interpreter each."""
    text = json.dumps(CASES[name]())
    out = subprocess.run([sys.executable, "-c", _CHILD, ROOT], input=text, capture_output=True,
                         text=True, timeout=3600)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout)


def per_call_us(fn, number=2000, repeat=9):
    fn()
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def call_costs():
    import numpy as np
    import defun as df
    rng = np.random.default_rng(0)
    w1 = df.Variable(rng.normal(size=(32, 32)).astype(np.float32))
    w2 = df.Variable(rng.normal(size=(32, 10)).astype(np.float32))

    @df.defun
    def step(x):
        h = df.tanh(x @ w1)
        return df.reduce_mean(df.log_softmax(h @ w2))
    x = rng.normal(size=(8, 32)).astype(np.float32)
    sig = df.TensorSpec([None, 32], df.float32)
    doc = df.export_json(step.get_concrete_function(sig))
    loaded = df.load_json(doc)
    free = df.load_json(doc, max_bytes=None, max_iterations=None, max_operations=None)
    t = df.constant(x)
    return [("defun call", per_call_us(lambda: step(t))),
            ("loaded call (budgets)", per_call_us(lambda: loaded(t))),
            ("loaded call, no budgets", per_call_us(lambda: free(t)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 100k-node documents")
    args = parser.parse_args()
    print(f"{'document':<18}{'bytes':>12}{'load s':>9}{'us/node':>9}{'1st call s':>12}{'peak MB':>9}")
    for name in CASES:
        if args.quick and "100k" in name:
            continue
        load, run, peak, size = measure_load(name)
        nodes = {"10k nodes": 10_000, "100k nodes": 100_000, "2 x 100k nodes": 200_000,
                 "1000 functions": 2997, "100 nested calls": 100}[name]
        print(f"{name:<18}{size:>12}{load:>9.2f}{load / nodes * 1e6:>9.1f}{run:>12.3f}{peak:>9.0f}")
    print()
    print(f"{'call (MLP 8x32-32-10)':<30}{'us':>8}")
    for what, us in call_costs():
        print(f"{what:<30}{us:>8.1f}")


if __name__ == "__main__":
    main()
