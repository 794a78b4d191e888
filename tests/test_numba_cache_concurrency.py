"""The numba backend's compiled-code cache is safe between processes.

Two processes compile the same regions at the same time, one for C-ordered and one for
Fortran-ordered input (two signatures of one region: one index, two compiled entries). In
numba's own cache format both read the index, both pick the first free data file name, and
the index one process wrote can end up naming the data file the other wrote: every later
process then runs the other signature's machine code on its input, silently (issue 28:
2 of 80 lockstep compiles). Here each process marks every index read and waits (at most half
a second) for the other to reach the same read, so the two are in lockstep where it matters;
then a fresh process must get numpy's numbers for every region and signature, each loaded
from the cache. Also: a data file holding another entry's code (validly signed: what the
race wrote) or a truncated one is refused and compiled again; an unwritable cache or key
location compiles in memory with one warning instead of failing every call."""
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

from defun.graph.numba_backend import jit  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = 12

_COMMON = """
import os, sys, time
import numpy as np, defun as df
from defun.graph.numba_backend import jit

def make(r):
    def f(x):
        return df.reduce_sum(df.tanh(x * 1.5 + (0.25 + r)) * df.exp(x), axis=1)
    return df.defun(f, backend="numba")

def reference(x, r):
    return np.sum(np.tanh(x * 1.5 + (0.25 + r)) * np.exp(x), axis=1)

def inputs(order):
    a = np.linspace(-1, 1, 12).reshape(3, 4)
    return np.asfortranarray(a) if order == "F" else np.ascontiguousarray(a)
"""

_RACER = _COMMON + """
order, rounds, sync = sys.argv[1], int(sys.argv[2]), sys.argv[3]
other = "C" if order == "F" else "F"
ticks = [0]
real_read = jit._read_signed

def lockstep_read(path):
    # every index read: say we are here, and wait (bounded) for the other process
    if path.endswith(".nbi"):
        ticks[0] += 1
        open(os.path.join(sync, f"{order}{ticks[0]}"), "w").close()
        end = time.monotonic() + 0.5
        while not os.path.exists(os.path.join(sync, f"{other}{ticks[0]}")) and time.monotonic() < end:
            time.sleep(0.0005)
    return real_read(path)

jit._read_signed = lockstep_read
x = inputs(order)
for r in range(rounds):
    out = make(r)(x).numpy()
    assert np.allclose(out, reference(x, r)), (r, order, out)
print("ok")
"""

_CHECKER = _COMMON + """
rounds = int(sys.argv[1])
wrong = []
for r in range(rounds):
    g = make(r)
    for order in ("C", "F"):
        x = inputs(order)
        out = g(x).numpy()
        if not np.allclose(out, reference(x, r)):
            wrong.append((r, order, out.tolist(), reference(x, r).tolist()))
print(wrong)
print(sum(len(m.region.stats.cache_hits) for m in jit._modules.values()))
"""


def _env(tmp_path, cache="cache", config="config"):
    return {**os.environ, "DEFUN_CACHE_DIR": str(tmp_path / cache),
            "XDG_CONFIG_HOME": str(tmp_path / config), "PYTHONWARNINGS": "always"}


def _check(tmp_path, rounds):
    out = subprocess.run([sys.executable, "-c", _CHECKER, str(rounds)], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, env=_env(tmp_path))
    assert out.returncode == 0, out.stderr
    wrong, hits = out.stdout.strip().splitlines()
    return wrong, int(hits), out.stderr


def test_two_processes_compiling_the_same_regions_in_lockstep(tmp_path):
    sync = tmp_path / "sync"
    sync.mkdir()
    racers = [subprocess.Popen([sys.executable, "-c", _RACER, order, str(ROUNDS), str(sync)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                               env=_env(tmp_path))
              for order in ("C", "F")]
    for p in racers:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "ok", err
    wrong, hits, err = _check(tmp_path, ROUNDS)
    assert wrong == "[]", wrong              # numpy's numbers for every region and signature
    assert hits == 2 * ROUNDS, err           # each loaded from the cache: no entry was lost


def _one_region_two_entries(tmp_path):
    """Compile round 0 for both signatures in one process; its data files by signature."""
    wrong, hits, _ = _check(tmp_path, 1)
    assert wrong == "[]" and hits == 0
    folder = tmp_path / "cache" / "numba"
    data = sorted(f for f in os.listdir(folder) if f.endswith(".nbc"))
    assert len(data) == 2
    return folder, data


def test_a_data_file_holding_another_entry_is_refused_and_compiled_again(tmp_path, monkeypatch):
    folder, (a, b) = _one_region_two_entries(tmp_path)
    # what the race wrote: b's name, a's code, signed (by this user's key) under b's name
    monkeypatch.setattr(jit, "_key", [])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    payload = jit._read_signed(str(folder / a))
    jit._write_signed(str(folder / b), payload)
    monkeypatch.setattr(jit, "_key", [])
    wrong, hits, err = _check(tmp_path, 1)
    assert wrong == "[]", wrong
    assert hits == 1 and f"refused {str(folder / b)!r}" in err and "another" in err, err
    wrong, hits, err = _check(tmp_path, 1)      # repaired: both loaded, nothing refused
    assert wrong == "[]" and hits == 2 and "refused" not in err, err


def test_a_truncated_data_file_is_refused_and_compiled_again(tmp_path):
    folder, (a, _) = _one_region_two_entries(tmp_path)
    data = (folder / a).read_bytes()
    (folder / a).write_bytes(data[:len(data) // 2])
    wrong, hits, err = _check(tmp_path, 1)
    assert wrong == "[]" and hits == 1, err
    assert f"refused {str(folder / a)!r}" in err and "signature does not verify" in err, err


@pytest.mark.parametrize("where", ["cache", "config"])
def test_an_unwritable_cache_or_key_location_compiles_in_memory_with_one_warning(tmp_path, where):
    (tmp_path / "file").write_text("a regular file: nothing can be created under it")
    bad = {"cache": "file/cache", "config": "config"} if where == "cache" else \
        {"cache": "cache", "config": "file/config"}
    code = _COMMON + """
for r in range(3):
    g = make(r)
    for order in ("C", "F"):
        x = inputs(order)
        assert np.allclose(g(x).numpy(), reference(x, r)), (r, order)
print(sum(len(m.region.stats.cache_hits) for m in jit._modules.values()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=300, env=_env(tmp_path, **bad))
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("compiles in memory") == 1, out.stderr
    assert ("cache" if where == "cache" else "cache.key") in out.stderr
    assert out.stdout.strip() == "0"
    assert not (tmp_path / "cache" / "numba").exists()     # nothing half-made



def test_a_cache_gone_unwritable_while_running_is_skipped_with_one_warning(tmp_path):
    """The cache directory replaced by a file after the first compile: later regions save
    nothing (one warning) and still compute."""
    code = _COMMON + """
import os
x = inputs("C")
assert np.allclose(make(0)(x).numpy(), reference(x, 0))
folder = jit.cache_dir()
os.rename(folder, folder + ".old")
open(folder, "w").close()
for r in range(1, 4):
    assert np.allclose(make(r)(x).numpy(), reference(x, r)), r
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=300, env=_env(tmp_path))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert out.stderr.count("compiles in memory") == 1, out.stderr
