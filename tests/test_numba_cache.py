"""The numba backend's on-disk cache trusts only what this process wrote or verified: a
replaced region source, a crafted numba index or data file and a planted `.pyc` are refused
(the planted code would write a marker file: it never exists) and the results stay right;
the directories are created 0700 whatever the umask and refused unless this user's and
closed to others; so is the signing key."""
import importlib.util
import os
import pickle
import py_compile
import stat
import subprocess
import sys

import pytest

pytest.importorskip("numba")

from defun.graph.numba_backend import jit  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PROGRAM = ("import numpy as np, defun as df\n"
            "from defun.graph.numba_backend import jit\n"
            "def f(x):\n    return df.reduce_sum(df.tanh(x * 1.5 + 0.25) * df.exp(x), axis=1)\n"
            "x = df.constant(np.linspace(-1, 1, 12).reshape(3, 4))\n"
            "out = df.defun(f, backend='numba')(x).numpy()\n"
            "regions = [m.region for m in jit._modules.values()]\n"
            "print(sum(len(r.stats.cache_hits) for r in regions))\n"
            "print(repr(out.tolist()))")


def _run(tmp_path, code=_PROGRAM, ok=True):
    env = {**os.environ, "DEFUN_CACHE_DIR": str(tmp_path / "cache"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "PYTHONWARNINGS": "always"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=600, env=env)
    assert (out.returncode == 0) == ok, out.stderr
    return out.stdout.strip().splitlines(), out.stderr


class _Marker:
    """Unpickling this writes the marker file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (exec, (f"open({self.path!r}, 'w').close()",))


def test_planted_source_index_data_and_pyc_are_refused(tmp_path):
    first, err = _run(tmp_path)
    assert first[0] == "0" and "refused" not in err
    folder = tmp_path / "cache" / "numba"
    (src,) = [f for f in os.listdir(folder) if f.startswith("r_") and f.endswith(".py")]
    (index,) = [f for f in os.listdir(folder) if f.startswith("r_") and f.endswith(".nbi")]
    markers = {k: tmp_path / f"ran_{k}" for k in ("py", "pyc", "nbi", "nbc")}

    # a replaced source, a pyc (unchecked hash: the import system would not look at the
    # source) and an index in numba's own format, each running code if used
    evil = f"open({str(markers['py'])!r}, 'w').close()\n" + (folder / src).read_text()
    (folder / src).write_text(evil)
    pyc_source = tmp_path / "pyc_source.py"
    pyc_source.write_text(f"open({str(markers['pyc'])!r}, 'w').close()\n")
    py_compile.compile(str(pyc_source), cfile=importlib.util.cache_from_source(str(folder / src)),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    import numba
    (folder / index).write_bytes(pickle.dumps(numba.__version__) + pickle.dumps(_Marker(str(markers["nbi"]))))
    second, err = _run(tmp_path)
    assert not any(m.exists() for m in markers.values()), err
    assert second == ["0", first[1]]                    # compiled again, same values
    assert f"refused {str(folder / src)!r}" in err and "not the generated source" in err, err
    assert f"refused {str(folder / index)!r}" in err and "not a file defun signed" in err, err
    assert (folder / src).read_text() != evil           # rewritten with the generated source

    # a data file: the (now signed) index names it; numba's format would unpickle it
    (data,) = [f for f in os.listdir(folder) if f.startswith("r_") and f.endswith(".nbc")]
    (folder / data).write_bytes(pickle.dumps(_Marker(str(markers["nbc"]))))
    third, err = _run(tmp_path)
    assert not markers["nbc"].exists() and third == ["0", first[1]]
    assert f"refused {str(folder / data)!r}" in err, err
    fourth, err = _run(tmp_path)                        # repaired: loaded, nothing refused
    assert fourth == ["1", first[1]] and "refused" not in err, err


def test_the_signature_binds_each_file_to_its_name(tmp_path):
    """A signed file copied over another name does not verify."""
    folder = jit.private_dir(str(tmp_path / "c" / "numba"))
    jit._write_signed(os.path.join(folder, "a.nbi"), b"payload")
    assert jit._read_signed(os.path.join(folder, "a.nbi")) == b"payload"
    with open(os.path.join(folder, "a.nbi"), "rb") as f, open(os.path.join(folder, "b.nbi"), "wb") as g:
        g.write(f.read())
    with pytest.warns(RuntimeWarning, match="signature does not verify"):
        assert jit._read_signed(os.path.join(folder, "b.nbi")) is None


def test_directories_are_created_0700_even_under_umask_002(tmp_path):
    old = os.umask(0o002)
    try:
        folder = jit.private_dir(str(tmp_path / "base" / "numba"))
    finally:
        os.umask(old)
    for d in (folder, os.path.dirname(folder)):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


@pytest.mark.parametrize("where", ["numba", "base"])
def test_a_directory_others_can_write_is_refused(tmp_path, where):
    folder = jit.private_dir(str(tmp_path / "base" / "numba"))
    os.chmod(folder if where == "numba" else os.path.dirname(folder), 0o775)
    with pytest.raises(PermissionError, match="mode 0775, open to other users"):
        jit.private_dir(folder)


def test_a_cache_others_can_write_refuses_the_numba_backend(tmp_path):
    os.makedirs(tmp_path / "cache" / "numba", mode=0o700)
    os.chmod(tmp_path / "cache" / "numba", 0o777)
    _, err = _run(tmp_path, ok=False)
    assert "UnsafeLocationError" in err and "mode 0777, open to other users" in err
    assert os.listdir(tmp_path / "cache" / "numba") == []       # nothing written there


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a directory to another user needs root")
def test_a_directory_of_another_user_is_refused(tmp_path):
    folder = jit.private_dir(str(tmp_path / "base" / "numba"))
    os.chown(folder, 12345, -1)
    with pytest.raises(PermissionError, match="owned by uid 12345, not by this user"):
        jit.private_dir(folder)


def test_a_key_others_can_read_is_refused(tmp_path):
    _run(tmp_path)
    key = tmp_path / "config" / "defun" / "cache.key"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and len(key.read_bytes()) == 32
    os.chmod(key, 0o644)
    _, err = _run(tmp_path, ok=False)
    assert "UnsafeLocationError" in err and "cache.key" in err and "only it can read" in err
