"""The `defun` command against hostile documents and inputs (issue 28, the command line),
each run as a user would: the installed console script in a subprocess.

Names from a document reach the terminal escaped (no raw ESC, CR, NUL or bidi control, no
crash on a lone surrogate); `run -o` writes no member outside its folder; inputs claiming
more than they hold and random inputs past the budget are one-line refusals (exit 2); a
reader that stops early ends the command quietly; `bench` takes `--backend`; `bench
--profile` takes the profiler's own time out and prints the call beside the nodes.
"""
import json
import io
import os
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import defun as df
import defun.graph.profiler as profiler
from defun.graph.backends import get_backend
from defun.graph.executor import compile_graph

SCRIPT = os.path.join(os.path.dirname(sys.executable), "defun")
# the names a document may carry: an OSC title change, a colour, a carriage return, NUL,
# a right-to-left override, an isolate, a newline, a tab and a lone surrogate
HOSTILE = {"title": "\x1b]0;owned\x07t", "red": "\x1b[31mred\r\x00nul\u202eevil",
           "lines": "a\nb\tc\u2067", "surrogate": "ok\ud800", "escape": "../../escape"}
RAW = [b"\x1b", b"\r", b"\x00", b"\x07", "\u202e".encode(), "\u2067".encode(), b"\xed\xa0\x80"]


def defun_cmd(*args, cwd, **kwargs):
    """The console script, in a UTF-8 terminal's encoding (where a lone surrogate cannot be
    written), output as bytes."""
    env = dict(os.environ, LC_ALL="C.UTF-8", PYTHONIOENCODING="utf-8")
    return subprocess.run([SCRIPT, *map(str, args)], capture_output=True, cwd=cwd, timeout=300,
                          env=env, **kwargs)


def _text(proc):
    for raw in RAW:
        assert raw not in proc.stdout and raw not in proc.stderr, (raw, proc.stdout, proc.stderr)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert "Traceback" not in err, err
    return out, err


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """f(x) returns a dict whose keys are HOSTILE's names."""
    where = tmp_path_factory.mktemp("hostile")

    @df.defun
    def f(x):
        return {HOSTILE["title"]: df.reduce_sum(x), HOSTILE["red"]: x + 1.0, HOSTILE["lines"]: x * 3.0,
                HOSTILE["surrogate"]: x - 1.0, HOSTILE["escape"]: x * 2.0}
    df.export_json(f.get_concrete_function(df.TensorSpec([None, 3], df.float32)), str(where / "f.json"))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(where / "x.npy", x)
    return where, x


@pytest.mark.parametrize("args", [("show",), ("validate",), ("run", "x=x.npy"), ("bench", "--repeat", "2"),
                                  ("show", "--json"), ("bench", "--repeat", "2", "--profile")])
def test_names_from_a_document_are_printed_escaped(hostile, args):
    where, _ = hostile
    proc = defun_cmd(args[0], "f.json", *args[1:], cwd=where)
    out, err = _text(proc)
    assert proc.returncode == 0, err
    if args[0] in ("show", "validate") and "--json" not in args:
        sig = next(line for line in out.splitlines() if line.startswith("# @f("))
        for shown in ["\\x1b]0;owned\\x07t", "\\x1b[31mred\\r\\x00nul\\u202eevil", "a\\nb\\tc\\u2067",
                      "ok\\ud800", "../../escape"]:
            assert f"{shown}: float32[" in sig, (shown, sig)
    if args[0] == "run":
        assert "ok\\ud800: float32[2, 3]" in out.splitlines()
        assert "a\\nb\\tc\\u2067: float32[2, 3]" in out.splitlines()
    if "--json" in args:
        names = [o["name"] for o in json.loads(out)["outputs"]]
        assert sorted(names) == sorted(HOSTILE.values())


def test_a_bad_name_on_the_command_line_is_escaped_too(hostile):
    where, _ = hostile
    proc = defun_cmd("run", "f.json", "x=\x1b[2Jgone.npy", cwd=where)
    _, err = _text(proc)
    assert proc.returncode == 2 and "\\x1b[2Jgone.npy" in err and err.count("\n") == 1


def test_run_o_writes_no_member_outside_its_folder(hostile, tmp_path):
    where, x = hostile
    proc = defun_cmd("run", "f.json", "x=x.npy", "-o", tmp_path / "out.npz", cwd=where)
    out, _ = _text(proc)
    assert proc.returncode == 0
    assert "../../escape float32[2, 3] (as key _.._escape)" in out
    with zipfile.ZipFile(tmp_path / "out.npz") as z:
        members = z.namelist()
        z.extractall(tmp_path / "unzipped")
    assert len(members) == len(HOSTILE)
    for m in members:
        assert "/" not in m and "\\" not in m and not m.startswith(".")
        assert not any(ord(c) < 32 or 0xd800 <= ord(c) < 0xe000 or c in "\u202e\u2067" for c in m), m
    extracted = {p for _, _, files in os.walk(tmp_path) for p in files}
    assert {m for m in members} <= extracted and not (tmp_path.parent / "escape.npy").exists()
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_array_equal(got["_.._escape"], x * 2)
        np.testing.assert_array_equal(got["ok_"], x - 1)
        np.testing.assert_array_equal(got["_[31mred__nul_evil"], x + 1)


def test_safe_member_names_stay_apart():
    from defun.cli_files import member_name as _member_name, safe_names as _safe_names
    keys = _safe_names(["a/b", "a_b", "A_B", "größe"], _member_name)
    assert keys == {"a/b": "a_b", "a_b": "a_b_1", "A_B": "A_B_2", "größe": "größe"}


def _npy_bytes(shape, data=b"\0" * 16):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buf.getvalue() + data


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED], ids=["stored", "deflated"])
def test_an_npz_member_claiming_2_to_the_40_elements_is_refused_before_allocating(hostile, tmp_path,
                                                                                   compression):
    where, _ = hostile
    with zipfile.ZipFile(tmp_path / "lie.npz", "w", compression) as z:
        z.writestr("x.npy", _npy_bytes((2 ** 40, 3)))
    proc = defun_cmd("run", where / "f.json", f"x={tmp_path / 'lie.npz'}[x]", cwd=tmp_path)
    _, err = _text(proc)
    assert proc.returncode == 2 and err.count("\n") == 1, err
    assert "lie.npz[x] claims a float32 array of shape [1099511627776, 3]" in err
    assert "but holds 16 bytes of data" in err


@pytest.mark.parametrize("command", ["run", "bench"])
def test_a_huge_size_is_a_one_line_refusal(hostile, command):
    """12 PB of random inputs: refused before numpy is asked (more than the machine's
    memory), budgets or none."""
    where, _ = hostile
    extra = ["--random"] if command == "run" else []
    for budget in (["--max-bytes", "none"], []):
        proc = defun_cmd(command, "f.json", *extra, "--size", 10 ** 15, *budget, cwd=where)
        _, err = _text(proc)
        assert proc.returncode == 2 and err.count("\n") == 1, err
        assert re.search(r"the random inputs \(x float32\[1000000000000000, 3\]\) would take "
                         r"12,000,000,000,000,000 bytes, more than this machine's memory \([\d,]+ bytes\): "
                         r"give a smaller --size$", err), err


def _long_document(path, n=3000):
    nodes = [{"op": "tanh", "inputs": [f"{k}:0"], "attrs": {}, "control_inputs": [],
              "outputs": [{"dtype": "float32", "shape": [4]}]} for k in range(n)]
    doc = {"format": "defun.graph", "version": 2, "entry": "f", "functions": [{
        "name": "f", "inputs": [{"name": "x", "dtype": "float32", "shape": [4]}], "nodes": nodes,
        "outputs": [{"ref": f"{n}:0", "dtype": "float32", "shape": [4]}]}], "variables": [],
           "output_structure": {"output": 0}}
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("command", [["show"], ["numpy"]])
def test_a_reader_that_stops_early_ends_it_quietly(tmp_path, command):
    """`defun show F.json | head -1`: no "Broken pipe", the status of a program stopped by
    SIGPIPE (141), as other Unix tools. (`defun numpy` writes its module in one write, which
    Python's buffered writer here ends with status 0 and nothing lost to the reader.)"""
    _long_document(tmp_path / "long.json")
    env = dict(os.environ, LC_ALL="C.UTF-8")
    proc = subprocess.Popen([SCRIPT, command[0], "long.json", *command[1:]], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    first = os.read(proc.stdout.fileno(), 100)     # less than the output past a pipe's 64 KiB
    proc.stdout.close()       # as `head -1` does after its line
    err = proc.stderr.read()
    assert proc.wait(timeout=300) in ((141,) if command == ["show"] else (0, 141)) and err == b"", err
    assert first


def test_bench_runs_on_the_backend_asked_for(hostile):
    where, _ = hostile
    proc = defun_cmd("bench", "f.json", "--backend", "nope", cwd=where)
    _, err = _text(proc)
    assert proc.returncode == 2 and "argument --backend: unknown backend 'nope'" in err
    if "numba" not in df.backends():
        return
    proc = defun_cmd("bench", "f.json", "--backend", "numba", "--repeat", "3", "--profile", "--max-bytes",
                     "none", "--max-iterations", "none", "--max-operations", "none", cwd=where)
    out, err = _text(proc)
    assert proc.returncode == 0, err
    rows = out.split("node  op")[1].splitlines()[1:-1]
    assert any(r.split()[1].startswith("fused(") for r in rows), out     # numba's regions


def test_bench_profile_prints_the_call_beside_the_nodes(hostile):
    where, _ = hostile
    proc = defun_cmd("bench", "f.json", "--repeat", "20", "--profile", cwd=where)
    out, _ = _text(proc)
    lines = out.splitlines()
    median = re.match(r"median (\S+ \S+), ", lines[1]).group(1)
    per_call = re.search(r"in kernels \((\S+ \S+) per call; the profiler's own \S+ \S+ per kernel call "
                         r"taken out\)", lines[3]).group(1)
    assert re.fullmatch(rf"# per call: the nodes' median times add up to {per_call} of the {median} "
                        r"median call \(\d+%\); the rest runs the plan between them", lines[-1]), lines[-1]


# ---------------------------------------------------------------------------------------
# The profiler: its own time out, the plan timed as it runs unprofiled, a pause not counted

def _chain():
    @df.defun
    def chain(x):
        for _ in range(5):
            x = df.tanh(x) * 2.0 + 1.0
        return df.reduce_sum(x)
    return chain


def test_the_profiled_plan_is_the_plan_it_times():
    """A ufunc writing over a dead temporary takes it positionally, profiled or not (the
    profiled plan passed `out=` by keyword, a slower call than the plan it stood for)."""
    cf = _chain().get_concrete_function(df.TensorSpec([8], df.float32))
    plain = compile_graph(cf.optimized_graph(), backend=get_backend("numpy"))
    timed = compile_graph(cf.optimized_graph(), backend=profiler.ProfilingBackend(get_backend("numpy")))
    assert "out=" not in plain.source and re.search(r"\bk\d+\(v\d+, \w+, v\d+\)", plain.source)
    def calls(plan):        # each profiled node has its own kernel (a wrapper): k7, not k1
        return re.sub(r"\bk\d+\(", "k(", plan.source)
    assert calls(timed) == calls(plain)


class _Ticks:
    """A clock that advances one tick per reading, and `pause` more at readings `at` and
    `at + 1`: one of the two ends a timed call, whose interval then holds one pause (the
    other starts one, which a pause before it does not lengthen)."""

    def __init__(self, at, pause):
        self.now, self.reads, self.at, self.pause = 0.0, 0, at, pause

    def __call__(self):
        self.reads += 1
        self.now += 1.0 + (self.pause if self.reads in (self.at, self.at + 1) else 0.0)
        return self.now


def test_profile_takes_out_its_own_clock_and_a_pause(monkeypatch):
    """Under a clock that ticks once per reading, a kernel (which reads no clock) costs no
    tick: what the wrapper records around it is the profiler's own and is taken out. A pause
    of 1000 ticks inside one call of one node (a busy machine) does not move the row: a
    row's time is its median call times its calls."""
    chain = _chain()
    x = np.ones(8, np.float32)
    chain(x)
    clock = _Ticks(at=2 * profiler._CALIBRATION_CALLS + 25, pause=1000.0)
    monkeypatch.setattr(profiler, "_clock", clock)
    rows = df.profile(chain, x, repeat=5)
    assert clock.reads > clock.at + 1 and rows.overhead == 1.0
    assert [r.seconds for r in rows] == [0.0] * len(rows) and all(r.calls == 5 for r in rows)
    assert rows.total_seconds == 0.0
