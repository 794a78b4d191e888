"""Every file the library writes goes through runtime/files.py's write_atomically: an
existing file keeps its mode, a new one honours the umask, a missing directory is named,
and a failed write leaves the old file whole and no temporary file behind."""
import os
import stat

import numpy as np
import pytest

import defun as df
from defun.runtime.files import write_atomically

W = df.Variable(np.array([1.0, 2.0], np.float32), name="w")


def _cf():
    return df.defun(lambda x: df.tanh(x) * W).get_concrete_function(df.TensorSpec([2]))


WRITERS = {
    "export_json": lambda path: df.export_json(_cf(), path),
    "export_numpy_source": lambda path: df.export_numpy_source(_cf(), path),
    "export_onnx": lambda path: df.export_onnx(_cf(), path),
    "save_variables": lambda path: df.save_variables(path, [W]),
}


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_an_existing_files_mode_is_kept(writer, tmp_path):
    path = tmp_path / "out.file"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    WRITERS[writer](path)
    assert _mode(path) == 0o640 and path.read_bytes() != b"old"
    assert os.listdir(tmp_path) == ["out.file"]


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_new_file_honours_the_umask(writer, tmp_path):
    old = os.umask(0o027)
    try:
        WRITERS[writer](tmp_path / "new.file")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "new.file") == 0o640


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_missing_directory_is_named(writer, tmp_path):
    missing = tmp_path / "no_such_dir"
    expected = df.errors.NotFoundError if writer == "save_variables" else FileNotFoundError
    with pytest.raises(expected, match="does not exist") as info:
        WRITERS[writer](missing / "out.file")
    assert str(missing) in str(info.value)


@pytest.mark.parametrize("failure", [OSError("disk full"), KeyboardInterrupt()])
def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(failure, tmp_path):
    path = tmp_path / "kept.json"
    path.write_bytes(b"the old contents")

    def write(f):
        f.write(b"half of the new")
        raise failure
    with pytest.raises(type(failure)):
        write_atomically(path, write)
    assert path.read_bytes() == b"the old contents"
    assert os.listdir(tmp_path) == ["kept.json"]
