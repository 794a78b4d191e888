"""Running generated numpy modules where this library cannot be imported.

`run_without_defun(modules, cases, tmp_path)` writes each module's source into a fresh
directory, then, in ONE subprocess whose import system refuses `defun`, `runtime` and
`graph` (a sys.meta_path blocker, the repository off sys.path, -I so neither PYTHONPATH
nor user site-packages apply), imports each module and runs its cases:

    {"module": name, "call": "forward" | "backward", "inputs": [...arrays],
     "output_gradients": [...], }      ->   {"outputs": [...], "gradients": [...]}

Results come back through .npz files; the script also checks that none of the blocked
packages was imported.

A matrix product's bits depend on the BLAS thread count (a product split over threads
rounds differently), and so would every comparison with this process: the subprocess runs
BLAS on one thread, and the tests compute their expected results under `one_blas_thread()`,
whatever thread count either process started with. `one_blas_thread_env()` is the
environment to start another comparing subprocess with (a copy: os.environ stays as it is).
"""
import os
import pickle
import subprocess
import sys
import textwrap

import threadpoolctl

_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

RUNNER = textwrap.dedent('''
    import importlib, importlib.abc, pickle, sys
    BLOCKED = ("defun", "runtime", "graph")

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked: the module must not need it")
            return None

    sys.meta_path.insert(0, Blocker())
    import numpy                     # loads BLAS, which threadpoolctl then finds and limits
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=1)      # one BLAS thread, as the comparing process (see module doc)
    here, repo = sys.argv[1], sys.argv[2]
    sys.path = [p for p in sys.path if p and __import__("os").path.abspath(p) != repo]
    sys.path.insert(0, here)
    for name in BLOCKED:
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise SystemExit(f"{name} could be imported: the check is broken")
    with open(sys.argv[3], "rb") as f:
        cases = pickle.load(f)
    results = []
    for case in cases:
        try:
            m = importlib.import_module(case["module"])
            if case["call"] == "forward":
                results.append({"outputs": m.forward(*case["inputs"])})
            else:
                outs, saved = m.forward_with_side_outputs(*case["inputs"])
                grads = m.backward(case["output_gradients"], saved)
                results.append({"outputs": outs, "gradients": grads})
            for step in range(case.get("repeat", 1) - 1):    # stateful: call again
                results[-1]["outputs"] = m.forward(*case["inputs"])
            if "variables" in case:
                results[-1]["variables"] = [getattr(m, v).value for v in case["variables"]]
        except Exception as e:
            results.append({"error": f"{type(e).__name__}: {e}"})
    leaked = [n for n in sys.modules if n.split(".")[0] in BLOCKED]
    with open(sys.argv[4], "wb") as f:
        pickle.dump({"results": results, "leaked": leaked}, f)
''')


def one_blas_thread():
    """A context in which this process runs BLAS (and OpenMP) on one thread, as the subprocess."""
    return threadpoolctl.threadpool_limits(limits=1)


def one_blas_thread_env():
    """os.environ for a subprocess (a copy) whose BLAS and OpenMP start with one thread."""
    return {**os.environ, **{var: "1" for var in _THREAD_VARS}}


def run_without_defun(modules, cases, tmp_path):
    """Run `cases` against `modules` ({name: source}) in a process without this library."""
    here = tmp_path / "isolated"
    here.mkdir(exist_ok=True)
    for name, source in modules.items():
        (here / f"{name}.py").write_text(source)
    (here / "runner.py").write_text(RUNNER)
    with open(here / "cases.pkl", "wb") as f:
        pickle.dump(cases, f)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = here / "results.pkl"
    proc = subprocess.run([sys.executable, "-I", str(here / "runner.py"), str(here), repo,
                           str(here / "cases.pkl"), str(out)],
                          capture_output=True, text=True, cwd=str(here), timeout=600)
    assert proc.returncode == 0, f"the isolated run failed:\n{proc.stdout}\n{proc.stderr}"
    with open(out, "rb") as f:
        got = pickle.load(f)
    assert got["leaked"] == [], f"the modules imported {got['leaked']}"
    return got["results"]


def same_bits(actual, expected):
    """None, or why arrays `actual` and `expected` are not the same bits (shape, dtype, bytes)."""
    import numpy as np
    if expected is None or actual is None:
        return None if actual is expected else f"got {type(actual).__name__}, expected {type(expected).__name__}"
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape or a.dtype != e.dtype:
        return f"got {a.dtype}{list(a.shape)}, expected {e.dtype}{list(e.shape)}"
    if a.tobytes() != e.tobytes():
        with np.errstate(all="ignore"):
            diff = np.max(np.abs(a.astype(np.float64) - e.astype(np.float64))) if a.size else 0
        return f"values differ (max |diff| {diff:.3g})"
    return None

