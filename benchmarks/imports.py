"""What starting costs: `import defun` over `import numpy`, and `defun --version`.

usage: python benchmarks/imports.py [--runs N] [--detail]

Each figure is the median over N fresh interpreters (default 15), the rows started in
turn so that each sees the machine's load alike: the CPU time (user + system) of the whole
process, which a busy machine does not stretch (on an idle one it is the wall time), and
the wall time beside it:

  python -c "import numpy"              the whole process
  python -c "import defun"              the whole process
  defun --version                       the console script (defun/cli.py)
  import defun, after numpy             the process's own clocks around the import, numpy
                                        already loaded: defun's own part

in two settings: with the bytecode that Python caches for an installed package (the first
interpreter writes it to a folder of its own, PYTHONPYCACHEPREFIX), as a user who installed
defun sees; and with defun's modules compiled at each start (sys.pycache_prefix set to an
empty folder, and no bytecode written, after numpy is imported and just before defun is:
the standard library modules defun loads first are compiled too), as in a checkout run
with PYTHONDONTWRITEBYTECODE (this project's sessions run so).
The targets (issue 31): `import defun` at most 0.25 s over `import numpy`, `defun
--version` at most 0.3 s. `--detail` adds the slowest of defun's modules (`python -X
importtime`, self time, compiled at the start).

Nothing here is a test: tests/test_imports.py checks which modules `import defun` loads,
never how long it takes.
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(os.path.dirname(sys.executable), "defun")
IMPORT_OVER_NUMPY = 0.25
VERSION = 0.3
TARGETS = {"over": IMPORT_OVER_NUMPY, "inside": IMPORT_OVER_NUMPY, "version": VERSION}
# the process's own CPU and wall time of the import, numpy loaded first
_INSIDE = ("import sys, time, numpy; {compile}cpu, wall = time.process_time(), time.perf_counter(); "
           "import defun; print(time.process_time() - cpu, time.perf_counter() - wall)")
# sys.pycache_prefix at an empty folder: defun (and what it loads after this) compiled at this start
_COMPILE = "sys.dont_write_bytecode = True; sys.pycache_prefix = {folder!r}; "


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv, env):
    """(cpu, wall) seconds of one process."""
    cpu, wall = _children_cpu(), time.perf_counter()
    subprocess.run(argv, env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return _children_cpu() - cpu, time.perf_counter() - wall


def _commands(folder, cached):
    """{row: argv} of one setting."""
    # compiled at each start: numpy (which defun imports first) is loaded before, as installed
    compile_ = "" if cached else "import numpy; " + _COMPILE.format(folder=folder)
    version = f"import sys; {compile_}sys.argv = ['defun', '--version']; from defun.cli import main; main()"
    return {"numpy": [sys.executable, "-c", "import numpy"],
            "defun": [sys.executable, "-c", f"import sys; {compile_}import defun"],
            "version": [SCRIPT, "--version"] if cached else [sys.executable, "-c", version],
            "inside": [sys.executable, "-c", _INSIDE.format(compile=compile_)]}


def measure(runs, cached):
    """{row: (median cpu, median wall) seconds} for one setting."""
    folder = tempfile.mkdtemp(prefix="defun-imports-")
    try:
        env = dict(os.environ)      # a copy: os.environ itself is left alone
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if cached:       # everything's bytecode in `folder`, written by a first start
            env["PYTHONPYCACHEPREFIX"] = folder
            subprocess.run([sys.executable, "-c", "import defun.cli"], env=env, cwd=REPO, check=True)
        else:            # the standard library and numpy as installed (their bytecode read)
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        commands = _commands(folder, cached)
        samples = {k: [] for k in commands}
        for _ in range(runs):
            for row, argv in commands.items():
                if row == "inside":
                    out = subprocess.run(argv, env=env, cwd=REPO, check=True, capture_output=True,
                                         text=True).stdout
                    samples[row].append(tuple(float(x) for x in out.split()[-2:]))
                else:
                    samples[row].append(_run(argv, env))
        result = {k: tuple(statistics.median(s[i] for s in v) for i in (0, 1)) for k, v in samples.items()}
        result["over"] = tuple(statistics.median(d[i] - n[i] for d, n in zip(samples["defun"], samples["numpy"]))
                               for i in (0, 1))
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_LABELS = {"numpy": "python -c 'import numpy'", "defun": "python -c 'import defun'",
           "over": "  import defun - import numpy", "inside": "import defun after numpy (inside)",
           "version": "defun --version"}


def table(settings, runs):
    """Markdown: a row per measurement, cpu (wall) per setting, the target and whether met."""
    def cell(m):
        return f"{1000 * m[0]:.0f} ms ({1000 * m[1]:.0f} ms)"
    head = [f"median of {runs} starts: cpu (wall)", *settings, "target: met by cpu time?"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in ("numpy", "defun", "over", "inside", "version"):
        target = TARGETS.get(row)
        verdict = "" if target is None else f"<= {1000 * target:.0f} ms: " + " / ".join(
            "met" if m[row][0] <= target else "missed" for m in settings.values())
        lines.append("| " + " | ".join([_LABELS[row], *(cell(m[row]) for m in settings.values()), verdict]) + " |")
    return "\n".join(lines)


def slowest_modules(count=12):
    """defun's modules by self import time, compiled at this start (python -X importtime)."""
    folder = tempfile.mkdtemp(prefix="defun-imports-")
    try:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        code = "import sys, numpy; " + _COMPILE.format(folder=folder) + "import defun"
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, cwd=REPO,
                             check=True, capture_output=True, text=True).stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows = []
    for line in err.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)", line)
        if m and m.group(3).startswith("defun"):
            rows.append((int(m.group(1)), m.group(3)))
    rows.sort(reverse=True)
    return "\n".join(f"  {us / 1000:6.1f} ms  {name}" for us, name in rows[:count])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per figure (default 15)")
    parser.add_argument("--detail", action="store_true", help="also the slowest of defun's modules")
    args = parser.parse_args(argv)
    if not os.path.exists(SCRIPT):
        raise SystemExit(f"no `defun` console script next to {sys.executable}: pip install -e .")
    settings = {"bytecode cached": measure(args.runs, cached=True),
                "defun compiled at each start": measure(args.runs, cached=False)}
    print(table(settings, args.runs))
    if args.detail:
        print("\nslowest of defun's modules, compiled at the start (self time):")
        print(slowest_modules())


if __name__ == "__main__":
    main()
