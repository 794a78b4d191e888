"""The `defun` command: the README's "Ways out" story step by step, run as the installed
console script in a subprocess (looked up next to sys.executable, where `pip install -e .`
puts it), as is `python -m defun`, --help and a bad file; every subcommand, its --help, bad
files and bad inputs through `defun.cli.main` in this process (the same code, without
a second of interpreter start-up per case)."""
import contextlib
import json
import io
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

import defun as df
from defun.graph.printer import format_graph
from isolated import one_blas_thread, one_blas_thread_env, run_without_defun, same_bits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(os.path.dirname(sys.executable), "defun.exe" if os.name == "nt" else "defun")
COMMANDS = ["show", "validate", "run", "dot", "onnx", "numpy", "bench"]
LOADING = ["show", "validate", "run", "dot", "numpy", "bench"]     # commands that load a file


def defun_cmd(*args, cwd):
    """The console script run on one BLAS thread (its results are compared bit for bit with
    this process's under `one_blas_thread()`)."""
    if not os.path.exists(SCRIPT):
        pytest.fail(f"the `defun` console script is not installed next to {sys.executable}; "
                    f"install the package first: pip install -e .")
    return subprocess.run([SCRIPT, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env=one_blas_thread_env())


class _Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def cli(*args, cwd):
    """`defun args...` run by defun.cli.main in this process, in directory `cwd`."""
    from defun.cli import main
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as e:        # argparse: --help, or a bad command line
                code = e.code
    finally:
        os.chdir(here)
    return _Result(code, out.getvalue(), err.getvalue())


def exit_ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


# ---------------------------------------------------------------------------------------
# The README's story: train and export the digits model, then each command of the section

def _story_commands():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Ways out"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def _story_command(word):
    """The story's command whose program or subcommand is `word`."""
    for argv in _story_commands():
        if argv[0] == "defun" and argv[1] == word or argv[0] == "python" and word in argv[1]:
            return argv
    raise AssertionError(f"the README's Ways out section has no {word!r} command")


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    """A directory where the README's training command ran (two quick epochs)."""
    pytest.importorskip("sklearn")
    where = tmp_path_factory.mktemp("story")
    argv = _story_command("train_mlp.py")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, argv[1]), *argv[2:], "--epochs", "1",
                           "--timing-repeat", "3", "--quiet"], capture_output=True, text=True,
                          cwd=where, timeout=600)
    exit_ok(proc)
    doc = where / argv[argv.index("--out") + 1]
    return where, doc, df.load_json(str(doc))


def _run_story(word, where):
    argv = _story_command(word)
    assert argv[0] == "defun"
    return exit_ok(defun_cmd(*argv[1:], cwd=where))


def test_story_trains_and_exports(story):
    where, doc, loaded = story
    assert doc.exists() and (where / "digits_x.npy").exists() and (where / "train_mlp.png").exists()
    x, y = np.load(where / "digits_x.npy"), np.load(where / "digits_y.npy")
    assert np.mean(np.argmax(loaded(x)["logits"].numpy(), 1) == y) > 0.8


def test_story_show(story):
    where, _, loaded = story
    out = _run_story("show", where).stdout
    assert out.startswith("# @classify(x: float32[?, 64]) -> (logits: float32[?, 10], probs: float32[?, 10])\n"
                          "func @classify(")
    assert out.count("matmul(") == 2 and out.count("read_variable(") == 4


def test_story_dot(story):
    where, _, _ = story
    argv = _story_command("dot")
    _run_story("dot", where)
    svg = (where / argv[argv.index("-o") + 1]).read_text()
    assert "<svg" in svg
    assert "backward @" in svg and "side output 0" in svg and "captured variable w0" in svg


def test_story_run(story):
    where, _, loaded = story
    argv = _story_command("run")
    _run_story("run", where)
    with np.load(where / argv[argv.index("-o") + 1]) as out:
        assert list(out) == ["logits", "probs"]          # the names the exported function gave them
        predictions = out["logits"]
    x = np.load(where / "digits_x.npy")
    with one_blas_thread():          # as the command ran
        assert same_bits(predictions, loaded(x)["logits"].numpy()) is None


def test_story_onnx_predicts_the_same_in_onnxruntime(story):
    import onnxruntime as ort
    where, _, loaded = story
    argv = _story_command("onnx")
    _run_story("onnx", where)
    session = ort.InferenceSession(str(where / argv[argv.index("-o") + 1]))
    x = np.load(where / "digits_x.npy")
    assert [o.name for o in session.get_outputs()] == ["logits", "probs"]
    logits, probs = session.run(None, {session.get_inputs()[0].name: x})
    expected = loaded(x)["logits"].numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
    assert np.array_equal(np.argmax(logits, 1), np.argmax(expected, 1))


def test_story_numpy_module_predicts_the_same_without_defun(story, tmp_path):
    where, _, loaded = story
    argv = _story_command("numpy")
    _run_story("numpy", where)
    path = where / argv[argv.index("-o") + 1]
    x = np.load(where / "digits_x.npy")
    got, = run_without_defun({path.stem: path.read_text()},
                             [{"module": path.stem, "call": "forward", "inputs": [x]}], tmp_path)
    assert "error" not in got, got
    with one_blas_thread():          # as the module ran
        assert same_bits(got["outputs"][0], loaded(x)["logits"].numpy()) is None
    # and the README's one-liner, in the directory it wrote the module to
    line = next(a for a in _story_commands() if a[0] == "python" and a[1] == "-c")
    proc = exit_ok(subprocess.run([sys.executable, *line[1:]], capture_output=True, text=True, cwd=where,
                              timeout=120))
    assert proc.stdout.strip() == str(np.argmax(loaded(x)["logits"].numpy(), 1)[:10])


# ---------------------------------------------------------------------------------------
# Each command

@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small document with a variable: f(x, n) = (tanh(x @ w) * n summed per row, x * 2)."""
    where = tmp_path_factory.mktemp("small")
    w = df.Variable(np.arange(6, dtype=np.float32).reshape(3, 2) / 10, name="w")

    @df.defun
    def f(x, scale):
        return df.reduce_sum(df.tanh(x @ w) * scale, axis=1), x * 2.0
    cf = f.get_concrete_function(df.TensorSpec([None, 3], df.float32), df.TensorSpec([], df.float32))
    df.export_json(cf, str(where / "f.json"))
    np.save(where / "x.npy", np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
    np.save(where / "scale.npy", np.float32(1.5))
    return where, df.load_json(str(where / "f.json"))


def test_the_installed_script_helps_and_refuses_a_bad_file(tmp_path):
    proc = exit_ok(defun_cmd("--help", cwd=tmp_path))
    assert proc.stdout.startswith("usage: defun") and all(c in proc.stdout for c in COMMANDS)
    (tmp_path / "bad.json").write_text('{"format": "defun.graph", "version": 99}')
    proc = defun_cmd("show", "bad.json", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("defun show: bad.json: version")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", [None] + COMMANDS)
def test_every_command_has_help(command, tmp_path):
    proc = exit_ok(cli(*([command] if command else []), "--help", cwd=tmp_path))
    assert proc.stdout.startswith(f"usage: defun{' ' + command if command else ''}")
    if command is None:
        for c in COMMANDS:
            assert c in proc.stdout


def test_python_dash_m_defun_is_the_same_command(small):
    where, _ = small
    by_module = subprocess.run([sys.executable, "-m", "defun", "validate", "f.json"], capture_output=True,
                               text=True, cwd=where, timeout=120)
    assert by_module.returncode == 0, by_module.stderr
    assert by_module.stdout == exit_ok(defun_cmd("validate", "f.json", cwd=where)).stdout


def test_validate_reports_the_signature(small):
    where, _ = small
    out = exit_ok(cli("validate", "f.json", cwd=where)).stdout.splitlines()
    assert out[0] == "f.json: valid (defun.graph version 3)"
    assert out[1] == "# @f(x: float32[?, 3], scale: float32[]) -> (output_0: float32[?], output_1: float32[?, 3])"
    assert out[2] == "1 function, 7 nodes, 1 variable (24 bytes)"


def test_show_prints_the_backward_too(small):
    where, _ = small
    out = exit_ok(cli("show", "f.json", "--backward", cwd=where)).stdout
    assert "func @f(" in out and "# backward: inputs are the gradients of outputs [0, 1]" in out
    assert "func @f_grad(" in out


def test_run_prints_or_writes_the_outputs(small):
    where, loaded = small
    expected = loaded(np.load(where / "x.npy"), np.load(where / "scale.npy"))
    out = exit_ok(cli("run", "f.json", "x=x.npy", "scale=scale.npy", cwd=where)).stdout
    assert out.startswith("output_0: float32[4]\n") and "output_1: float32[4, 3]" in out
    exit_ok(cli("run", "f.json", "scale=scale.npy", "x=x.npy", "-o", "out.npz", cwd=where))
    with np.load(where / "out.npz") as got:
        assert same_bits(got["output_0"], expected[0].numpy()) is None
        assert same_bits(got["output_1"], expected[1].numpy()) is None


def test_run_takes_a_big_endian_npy(small):
    where, loaded = small
    x = np.load(where / "x.npy")
    np.save(where / "xbig.npy", x.astype(">f4"))
    expected = loaded(x, np.load(where / "scale.npy"))
    exit_ok(cli("run", "f.json", "x=xbig.npy", "scale=scale.npy", "-o", "big.npz", cwd=where))
    with np.load(where / "big.npz") as got:
        assert same_bits(got["output_1"], expected[1].numpy()) is None


@pytest.mark.parametrize("args, message", [
    (["x=x.npy"], "missing input 'scale': pass NAME=file.npy for each of x (float32[?, 3]), scale (float32[])"),
    (["x=x.npy", "scale=scale.npy", "y=x.npy"], "no input named 'y'; the function's inputs are x"),
    (["x=scale.npy", "scale=scale.npy"], "input 'x': scale.npy holds float32[], the function takes float32[?, 3]"),
    (["x=x64.npy", "scale=scale.npy"], "input 'x': x64.npy holds float64[4, 3], the function takes "
                                       "float32[?, 3]; convert it with .astype(np.float32)"),
    (["x=f.json", "scale=scale.npy"], "input 'x': f.json is not a .npy or .npz array file"),
    (["x=huge.npy", "scale=scale.npy"], "input 'x': huge.npy claims a float32 array of shape "
                                        "[1099511627776, 3] (3,298,534,883,328 elements, "
                                        "13,194,139,533,312 bytes) but holds 64 bytes of data"),
    (["x=nothere.npy", "scale=scale.npy"], "nothere.npy: No such file or directory"),
    (["x=x.npy", "x=x.npy"], "input 'x' is given twice"),
    (["x", "scale=scale.npy"], "inputs are given as NAME=file.npy or NAME=file.npz[key], got 'x'"),
    (["x=x.npy", "scale=scale.npy", "-o", "out.txt"], "outputs are written as .npz"),
])
def test_run_names_the_bad_input(small, args, message):
    where, _ = small
    np.save(where / "x64.npy", np.zeros((4, 3)))
    with open(where / "huge.npy", "wb") as fh:     # a header claiming 2^40 rows, 64 bytes of data
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (2 ** 40, 3)})
        fh.write(bytes(64))
    proc = cli("run", "f.json", *args, cwd=where)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_dot_writes_svg_png_and_dot_text(small):
    where, _ = small
    exit_ok(cli("dot", "f.json", "-o", "f.dot", cwd=where))
    assert (where / "f.dot").read_text().startswith('digraph "f" {')
    exit_ok(cli("dot", "f.json", "-o", "f.png", "--backward", cwd=where))
    assert (where / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    exit_ok(cli("dot", "f.json", "-o", "f.svg", cwd=where))
    assert "captured variable w" in (where / "f.svg").read_text()
    proc = cli("dot", "f.json", "-o", "f.bmp", cwd=where)
    assert proc.returncode == 2 and "name the picture .svg, .png or .pdf" in proc.stderr


def test_numpy_prints_or_writes_the_module(small):
    where, _ = small
    text = exit_ok(cli("numpy", "f.json", "--backward", cwd=where)).stdout
    assert "def forward(*args, **kwargs):" in text and "def backward(output_gradients, side_outputs):" in text
    exit_ok(cli("numpy", "f.json", "-o", "f_numpy.py", cwd=where))
    assert (where / "f_numpy.py").read_text() == df.export_numpy_source(df.load_json(str(where / "f.json")))


def test_bench_prints_median_and_p90(small):
    where, _ = small
    out = exit_ok(cli("bench", "f.json", "--size", "8", "--repeat", "5", "--warmup", "1", cwd=where)).stdout
    assert out.splitlines()[0] == "@f on x float32[8, 3], scale float32[]"
    assert re.match(r"median [\d.]+ (us|ms|s), p90 [\d.]+ (us|ms|s), min [\d.]+ (us|ms|s) over 5 calls "
                    r"\(1 warm-up\)$", out.splitlines()[1]), out


@pytest.mark.parametrize("content", ["not json at all", '{"format": "something else"}', "",
                                     '{"format": "defun.graph", "version": 99}'])
@pytest.mark.parametrize("command", LOADING)
def test_a_bad_file_prints_the_loader_message_and_exits_2(command, content, tmp_path):
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(df.errors.GraphFormatError) as caught:
        df.load_json(str(tmp_path / "bad.json"))
    extra = ["-o", "out.svg"] if command == "dot" else []
    proc = cli(command, "bad.json", *extra, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == f"defun {command}: bad.json: {caught.value}\n"
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", LOADING)
def test_a_missing_file_or_a_directory_exits_2(command, tmp_path):
    extra = ["-o", "out.svg"] if command == "dot" else []
    proc = cli(command, "nothere.json", *extra, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr == f"defun {command}: nothere.json: No such file or directory\n"
    proc = cli(command, ".", *extra, cwd=tmp_path)
    assert proc.returncode == 2 and "is a directory" in proc.stderr and "Traceback" not in proc.stderr


def test_a_bad_command_line_exits_2_with_usage(tmp_path):
    proc = cli("frobnicate", cwd=tmp_path)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr and "see `defun --help`" in proc.stderr
    assert proc.stderr.count("\n") == 1                   # one line, no usage block
    proc = cli("dot", "f.json", cwd=tmp_path)          # -o is required
    assert proc.returncode == 2 and "-o/--output" in proc.stderr and proc.stderr.count("\n") == 1


# ---------------------------------------------------------------------------------------
# Names outside: outputs by name, npz inputs, random inputs, budgets, backends, --check

@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """A document returning a dict: {"probs": softmax-ish of x @ w, "total": sum of x * n}."""
    where = tmp_path_factory.mktemp("named")
    w = df.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2), name="w")

    @df.defun
    def f(x, n):
        e = df.exp(x @ w)
        return {"probs": e / df.reduce_sum(e, axis=1, keepdims=True), "total": df.reduce_sum(x) * n}
    cf = f.get_concrete_function(df.TensorSpec([None, 3], df.float32), df.TensorSpec([], df.float32))
    df.export_json(cf, str(where / "f.json"))
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    np.savez(where / "inputs.npz", x=x, n=np.float32(2.0), other=np.zeros(3))
    np.savez(where / "one.npz", only=x)
    np.savez(where / "two.npz", a=x, b=x)
    np.save(where / "x.npy", x)
    return where, df.load_json(str(where / "f.json")), x


def test_show_validate_and_run_name_the_outputs(named):
    where, f, x = named
    sig = "# @f(x: float32[?, 3], n: float32[]) -> (probs: float32[?, 2], total: float32[])"
    assert exit_ok(cli("show", "f.json", cwd=where)).stdout.splitlines()[0] == sig
    assert exit_ok(cli("validate", "f.json", cwd=where)).stdout.splitlines()[1] == sig
    out = exit_ok(cli("run", "f.json", "x=inputs.npz[x]", "n=inputs.npz[n]", cwd=where)).stdout
    assert out.startswith("probs: float32[4, 2]\n") and "\ntotal: float32[]\n" in out
    expected = f(x, np.float32(2.0))
    exit_ok(cli("run", "f.json", "x=one.npz", "n=inputs.npz", "-o", "out.npz", cwd=where))   # one array; the key n
    with np.load(where / "out.npz") as got:
        assert sorted(got) == ["probs", "total"]
        assert same_bits(got["probs"], expected["probs"].numpy()) is None
        assert same_bits(got["total"], expected["total"].numpy()) is None
    exit_ok(cli("run", "f.json", "x=x.npy", "n=inputs.npz[n]", "--outdir", "outs/deeper", cwd=where))
    assert sorted(os.listdir(where / "outs" / "deeper")) == ["probs.npy", "total.npy"]
    assert same_bits(np.load(where / "outs" / "deeper" / "probs.npy"), expected["probs"].numpy()) is None


def test_run_on_random_inputs(named):
    where, f, _ = named
    out = exit_ok(cli("run", "f.json", "--random", "--size", "7", "--seed", "3", "-o", "r.npz", cwd=where)).stdout
    assert out == "wrote 2 outputs to r.npz: probs float32[7, 2], total float32[]\n"
    rng = np.random.default_rng(3)
    x, n = rng.standard_normal((7, 3)).astype(np.float32), rng.standard_normal(()).astype(np.float32)
    with np.load(where / "r.npz") as got:
        assert same_bits(got["probs"], f(x, n)["probs"].numpy()) is None
    # given inputs stay as given, the rest are random
    out = exit_ok(cli("run", "f.json", "x=x.npy", "--random", cwd=where)).stdout
    assert out.startswith("probs: float32[4, 2]")


@pytest.mark.parametrize("args, message", [
    (["x=inputs.npz[nope]", "n=inputs.npz[n]"], "input 'x': inputs.npz has no array 'nope'; it holds x, n, other"),
    (["x=two.npz", "n=inputs.npz[n]"], "input 'x': two.npz holds 2 arrays; pick one with x=two.npz[key], key one of a, b"),
    (["x=x.npy[0]", "n=inputs.npz[n]"], "x.npy[0]: No such file or directory"),
    (["x=inputs.npz[other]", "n=inputs.npz[n]"], "input 'x': inputs.npz[other] holds float64[3], the function takes float32[?, 3]"),
    (["x=__import__('os').system('touch pwned')", "n=inputs.npz[n]"], "No such file or directory"),
    (["--size", "3"], "--size sets the unknown sizes of --random inputs: add --random"),
    (["--random", "--size", "-2"], "argument --size: expected an integer >= 0, got -2"),
    (["--random", "--max-bytes", "lots"], "argument --max-bytes: expected an integer >= 0, got 'lots'"),
    (["--random", "--backend", "fortran"], "argument --backend: unknown backend 'fortran'; installed backends"),
    (["--random", "-o", "a.npz", "--outdir", "d"], "argument --outdir: not allowed with argument -o/--output"),
    (["--random", "--max-bytes", "64"], "more than the budget of 64 bytes"),
])
def test_run_refuses_bad_flags_and_budgets_in_one_line(named, args, message):
    where, _, _ = named
    proc = cli("run", "f.json", *args, cwd=where)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (where / "pwned").exists()


def test_run_budgets_and_backends(named):
    where, f, x = named
    proc = cli("run", "f.json", "--random", "--max-iterations", "0", "--max-bytes", "64", cwd=where)
    assert proc.returncode == 2 and "raise the budget with --max-bytes N" in proc.stderr
    exit_ok(cli("run", "f.json", "x=x.npy", "n=inputs.npz[n]", "--max-bytes", "none", "-o", "free.npz", cwd=where))
    if "numba" not in df.backends():
        return
    # numba keeps the budgets too (regions metered where they start): no `none` flags needed
    proc = cli("run", "f.json", "--random", "--backend", "numba", "--max-bytes", "64", cwd=where)
    assert proc.returncode == 2 and "raise the budget with --max-bytes N" in proc.stderr
    exit_ok(cli("run", "f.json", "x=x.npy", "n=inputs.npz[n]", "--backend", "numba", "-o", "fast.npz", cwd=where))
    with np.load(where / "fast.npz") as fast, np.load(where / "free.npz") as free:
        np.testing.assert_allclose(fast["probs"], free["probs"], rtol=1e-6)


def test_show_json_optimized_plan_and_variables(named):
    where, f, _ = named
    desc = json.loads(exit_ok(defun_cmd("show", "f.json", "--json", cwd=where)).stdout)     # what scripts read
    assert desc == {"function": "f", "backward_levels": 0,
                    "inputs": [{"name": "x", "dtype": "float32", "shape": [None, 3]},
                               {"name": "n", "dtype": "float32", "shape": []}],
                    "outputs": [{"name": "probs", "dtype": "float32", "shape": [None, 2]},
                                {"name": "total", "dtype": "float32", "shape": []}],
                    "variables": [{"name": "w", "dtype": "float32", "shape": [3, 2]}]}
    out = exit_ok(cli("show", "f.json", "--optimized", "--variables", cwd=where)).stdout
    assert "# variables (1, 24 bytes):\n#   w: float32[3, 2]\n" in out
    assert out.split("\n", 3)[3] == format_graph(f.optimized_graph()) + "\n"
    plan = exit_ok(cli("show", "f.json", "--plan", cwd=where)).stdout
    assert plan.split("\n", 1)[1] == f.plan_source("numpy") and "def plan(" in plan
    if "numba" in df.backends():
        plan = exit_ok(cli("show", "f.json", "--plan", "--backend", "numba", cwd=where)).stdout
        assert plan.split("\n", 1)[1] == f.plan_source("numba")
    proc = cli("show", "f.json", "--plan", "--optimized", cwd=where)
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr


def test_onnx_check_compares_onnxruntime_with_the_loaded_function(named):
    pytest.importorskip("onnxruntime")
    where, _, _ = named
    proc = exit_ok(defun_cmd("onnx", "f.json", "-o", "f.onnx", "--check", cwd=where))
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("wrote f.onnx (") and lines[0].endswith("; inputs x, n; outputs probs, total)")
    m = re.match(r"checked against onnxruntime \S+ on random x float32\[4, 3\], n float32\[\]: largest "
                 r"difference (\S+) \(output (probs|total)\)$", lines[1])
    assert m and float(m.group(1)) < 1e-5, lines[1]
    import onnx
    model = onnx.load(str(where / "f.onnx"))
    assert [o.name for o in model.graph.output] == ["probs", "total"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "x_0"


def test_onnx_check_fails_with_exit_1_when_onnxruntime_differs(named, monkeypatch):
    ort = pytest.importorskip("onnxruntime")
    where, _, _ = named
    real = ort.InferenceSession.run

    def off_by_a_little(self, names, feeds):      # a runtime whose results drift by 1e-3
        return [r + np.float32(1e-3) for r in real(self, names, feeds)]
    monkeypatch.setattr(ort.InferenceSession, "run", off_by_a_little)
    proc = cli("onnx", "f.json", "-o", "g.onnx", "--check", cwd=where)
    assert proc.returncode == 1
    assert "onnxruntime differs beyond float tolerance in probs (difference 0.001" in proc.stderr
    assert "largest difference 0.001" in proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--opset", "3"], "--opset 3: this export writes opsets 17 to "),
    (["--opset", "999"], "--opset 999: this export writes opsets 17 to "),
    (["--opset", "x"], "argument --opset: expected an integer >= 1, got 'x'"),
    (["--opset", "-1"], "argument --opset: expected an integer >= 1, got -1"),
    (["--size", "-1"], "argument --size: expected an integer >= 0, got -1"),
])
def test_onnx_bad_flag_values_are_one_line_exit_2(named, args, message):
    pytest.importorskip("onnx")
    where, _, _ = named
    proc = cli("onnx", "f.json", "-o", "bad.onnx", *args, cwd=where)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_the_console_script_refuses_a_bad_opset_without_a_traceback(named):
    pytest.importorskip("onnx")
    where, _, _ = named
    proc = defun_cmd("onnx", "f.json", "-o", "bad.onnx", "--opset", "3", cwd=where)
    assert proc.returncode == 2 and proc.stderr.startswith("defun onnx: --opset 3: ")
    assert proc.stderr.count("\n") == 1 and not (where / "bad.onnx").exists()


def test_bench_profile_prints_the_time_per_node(named):
    where, _, _ = named
    out = exit_ok(cli("bench", "f.json", "--size", "8", "--repeat", "4", "--warmup", "0", "--profile",
                  cwd=where)).stdout.splitlines()
    assert out[3].startswith("# @f: ") and " steps over 4 calls, " in out[3]
    assert out[4].split() == ["node", "op", "calls", "total", "share", "line"]
    rows = [ln.split() for ln in out[5:-1]]
    assert out[-1].startswith("# per call: the nodes' median times add up to ")
    assert {"matmul", "exp", "divide"} <= {r[1] for r in rows} and all(r[2] == "4" for r in rows)
    shares = [float(r[5].rstrip("%")) for r in rows]       # node, op, calls, total (2 words), share
    assert shares == sorted(shares, reverse=True) and abs(sum(shares) - 100) < 0.5 + 0.05 * len(rows)
