"""The examples on a busy small machine (issue 31): a bad argument is one line and exit
status 2 (no traceback from the middle of training); the examples of small matrices run
BLAS on one thread inside themselves (threadpoolctl, never the environment); and what the
READMEs' commands write in the checkout is ignored by git."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"{name}_example_round4", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script, args, message", [
    ("train_cnn", ["--batch-size", "0"], "argument --batch-size: expected an integer >= 1, got 0"),
    ("train_mlp", ["--lr", "-1"], "argument --lr: expected a positive number, got '-1'"),
    ("train_mlp", ["--epochs", "two"], "argument --epochs: expected an integer >= 1, got 'two'"),
    ("gaussian_process", ["--steps", "0"], "argument --steps: expected an integer >= 1, got 0"),
    ("gaussian_process", ["--learning-rate", "nan"], "argument --learning-rate: expected a positive number"),
    ("per_example_gradients", ["--noise", "-0.5"], "argument --noise: expected a non-negative number"),
    ("per_example_gradients", ["--batch", "0"], "argument --batch: expected an integer >= 1, got 0"),
    ("train_dask", ["--workers", "0"], "argument --workers: expected an integer >= 1, got 0"),
])
def test_an_example_refuses_a_bad_argument_in_one_line(script, args, message, tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, f"{script}.py"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"{script}.py: error: {message}") and proc.stderr.endswith(" (see --help)\n")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert os.listdir(tmp_path) == []       # refused before anything is written


def _blas_threads():
    from threadpoolctl import threadpool_info
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


class _Stop(Exception):
    pass


@pytest.mark.parametrize("name, first_call", [("train_cnn", "load_data"), ("gaussian_process", "load_data")])
def test_an_example_of_small_matrices_runs_blas_on_one_thread_inside(name, first_call, monkeypatch):
    pytest.importorskip("threadpoolctl")
    example = _load(name)
    seen = []

    def spy(*args, **kwargs):
        seen.append(_blas_threads())
        raise _Stop

    monkeypatch.setattr(example, first_call, spy)
    before = _blas_threads()
    with pytest.raises(_Stop):
        example.main(verbose=False)
    assert seen and all(n == 1 for n in seen[0]), seen       # inside main: one BLAS thread
    assert _blas_threads() == before                          # lifted when main returns


def test_no_example_sets_the_environment():
    for name in sorted(os.listdir(EXAMPLES)):
        if name.endswith(".py"):
            with open(os.path.join(EXAMPLES, name), encoding="utf-8") as f:
                text = f.read()
            assert not re.search(r"os\.environ\s*(\[|\.update|\.setdefault)|os\.putenv", text), name


# ---------------------------------------------------------------------------------------
# .gitignore: every file the READMEs' commands write at the top of the checkout

WRITTEN = re.compile(r"(?<![\w/.-])([\w-]+\.(?:json|npy|npz|png|svg|onnx))\b|-o ([\w-]+\.py)\b")


def _named_outputs():
    """File names the README's and examples/README.md's commands and prose say are written
    (`digits.json`, `digits_x.npy`, `train_cnn.png`, `digits_numpy.py`, ...), at the top
    level: a name with a folder (docs/...) is a file of the repository."""
    names = set()
    for readme in ("README.md", os.path.join("examples", "README.md")):
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            for m in WRITTEN.finditer(f.read()):
                names.add(m.group(1) or m.group(2))
    # the defaults of what each example writes (examples/README.md's table names them with
    # <out> stems too): train_mlp's test set next to its default --out
    names |= {"digits_mlp_x.npy", "digits_mlp_y.npy", "digits_y.npy"}
    return sorted(names)


def _git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=60)


def test_gitignore_covers_what_the_readmes_write():
    if _git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        pytest.skip("not a git checkout")
    names = _named_outputs()
    assert {"digits.json", "digits_x.npy", "predictions.npz", "digits.svg", "digits.onnx", "digits_numpy.py",
            "train_mlp.png", "train_cnn.png", "cnn.npz", "gaussian_process.png", "train_dask.png",
            "digits_mlp.json", "loss.json"} <= set(names), names
    tracked = set(_git("ls-files").stdout.split())
    written = [n for n in names if n not in tracked]
    proc = _git("check-ignore", "--no-index", "--verbose", "--non-matching", *written)
    not_ignored = [line.split("\t")[-1] for line in proc.stdout.splitlines() if line.startswith("::")]
    assert not not_ignored, f"written by the READMEs' commands but not in .gitignore: {not_ignored}"
    assert _git("ls-files", "-ci", "--exclude-standard").stdout == ""      # nothing tracked is ignored
