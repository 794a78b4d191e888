"""Run TF's reference test files through the name mapping, one process per file.

    python -m tests.tf_reference DIR [-v] [--only NAME ...] [--timeout SECONDS]

Each `*_test.py` in DIR runs through unittest in a child process (`--one FILE`), so that
every file starts from a fresh interpreter (the files set module globals and os.environ);
a test that runs over `--timeout` seconds (a loop that never ends) counts as an error.
"""
import argparse
import io
import json
import os
import re
import signal
import subprocess
import sys
import traceback
import unittest

KINDS = ("passed", "failed", "errors", "tf_only", "skipped")


class _TimedOut(Exception):
    pass


class _Result(unittest.TestResult):
    """Each test's outcome: passed, failed (an assertion), errors (another exception),
    tf_only (stopped by a TF-only name, with its reason) or skipped (by TF's file itself)."""

    def __init__(self, timeout):
        super().__init__()
        self.timeout, self.rows = timeout, []

    def startTest(self, test):
        super().startTest(test)
        signal.alarm(self.timeout)

    def stopTest(self, test):
        signal.alarm(0)
        super().stopTest(test)

    def _add(self, test, kind, why=""):
        self.rows.append([test.id().split(".", 1)[-1], kind, why])

    def addSuccess(self, test):
        self._add(test, "passed")

    def addSkip(self, test, reason):
        self._add(test, "skipped", reason)

    def addFailure(self, test, err):
        self._add(test, *_classify("failed", err))

    def addError(self, test, err):
        self._add(test, *_classify("errors", err))


def _classify(kind, err):
    from tests.tf_reference.tf_names import NOT_MAPPED    # the mapping is installed by run_one
    text = "".join(traceback.format_exception(*err))
    if NOT_MAPPED in text:
        line = text[text.index(NOT_MAPPED) + len(NOT_MAPPED):].strip().splitlines()[0]
        return "tf_only", line
    last = str(err[1]).strip().splitlines()
    return kind, f"{err[0].__name__}: {last[0] if last else ''}"[:300]


def run_one(path, timeout):
    """Rows [test, kind, why] of TF's file `path` run in this process."""
    from tests.tf_reference import tf_names     # installs `tensorflow` for this process only
    tf_names.install(os.path.dirname(os.path.abspath(path)))

    def alarm(signum, frame):
        raise _TimedOut(f"the test ran over {timeout} s")
    signal.signal(signal.SIGALRM, alarm)
    name = os.path.splitext(os.path.basename(path))[0]
    try:
        loader = unittest.defaultTestLoader
        import importlib.util      # noqa: E401  (the file is imported by path, under its own name)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        suite = loader.loadTestsFromModule(module)
    except Exception as e:   # noqa: BLE001  (a file that does not import is one error row)
        return [["<import>", *_classify("errors", (type(e), e, e.__traceback__))]]
    result = _Result(timeout)
    suite.run(result)
    return result.rows


def _child(path, timeout, out):
    real = sys.stdout
    sys.stdout = io.StringIO()       # the files print; keep the child's report clean
    try:
        rows = run_one(path, timeout)
    finally:
        sys.stdout = real
    with open(out, "w") as f:
        json.dump(rows, f)


def run_file(path, timeout):
    """Rows of one file, run in a child process."""
    import tempfile     # noqa: E401  (only the parent needs a scratch file)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        cmd = [sys.executable, "-m", "tests.tf_reference.runner", "--one", path, "--out", out,
               "--timeout", str(timeout)]
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        if not os.path.exists(out):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return [["<process>", "errors", f"exit {proc.returncode}: {tail[0]}"]]
        with open(out) as f:
            return json.load(f)


def count(rows):
    totals = dict.fromkeys(KINDS, 0)
    for _, kind, _ in rows:
        totals[kind] += 1
    return totals


def run_dir(directory, only=(), timeout=120, verbose=False, write=print):
    """Run every *_test.py of `directory`; print a table; return {file: rows}."""
    files = sorted(f for f in os.listdir(directory) if f.endswith("_test.py")
                   and (not only or any(o in f for o in only)))
    if not files:
        raise SystemExit(f"no *_test.py files in {directory}")
    results = {}
    write(f"{'file':48} {'passed':>7} {'failed':>7} {'errors':>7} {'TF-only':>8} {'skipped':>8}")
    for f in files:
        rows = results[f] = run_file(os.path.join(directory, f), timeout)
        c = count(rows)
        write(f"{f:48} {c['passed']:7} {c['failed']:7} {c['errors']:7} {c['tf_only']:8} {c['skipped']:8}")
        for test, kind, why in rows:
            if kind in ("failed", "errors") and verbose:
                write(f"    {kind[:-1] if kind == 'errors' else 'fail'}: {test}: {why}")
    every = [r for rows in results.values() for r in rows]
    c = count(every)
    write(f"{'TOTAL':48} {c['passed']:7} {c['failed']:7} {c['errors']:7} {c['tf_only']:8} {c['skipped']:8}")
    reasons = sorted({why for _, kind, why in every if kind == "tf_only"})
    for why in reasons:
        n = sum(1 for _, kind, w in every if kind == "tf_only" and w == why)
        write(f"  TF-only, not mapped ({n}): {why}")
    write("  skipped: by TF's own file (self.skipTest in it), as under TensorFlow")
    causes = {}
    for _, kind, why in every:
        if kind in ("failed", "errors"):
            cause = re.sub(r"\d+", "N", re.sub(r"(/[^\s:]+)+:\d+", "<line>", why))[:110]
            causes[cause] = causes.get(cause, 0) + 1
    if causes:
        write("  failed and errors by cause (numbers as N, sites as <line>):")
        for cause, n in sorted(causes.items(), key=lambda kv: -kv[1]):
            write(f"    {n:4}  {cause}")
    return results


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m tests.tf_reference", description=__doc__.split("\n\n")[0])
    p.add_argument("directory", nargs="?")
    p.add_argument("-v", "--verbose", action="store_true", help="list each failing test and why")
    p.add_argument("--only", nargs="*", default=(), help="only files whose name contains one of these")
    p.add_argument("--timeout", type=int, default=120, help="seconds one test may run")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        return _child(a.one, a.timeout, a.out)
    if not a.directory:
        p.error("the directory of TF's reference tests is required")
    results = run_dir(a.directory, a.only, a.timeout, a.verbose)
    every = count([r for rows in results.values() for r in rows])
    return 1 if every["failed"] or every["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
