"""Document files: canonical bytes, atomic writes, file modes and missing directories."""
import math
import os

import pytest

import defun as df
from defun.graph.serialize import dumps_document, from_document, to_document, write_document
from defun.runtime.errors import GraphFormatError
from serialize_helpers import build_rich


# ---------------------------------------------------------------------------------------
# Files: canonical bytes, atomic writes

def test_write_document_writes_canonical_bytes_atomically(tmp_path):
    g, feeds, _ = build_rich()
    doc = to_document(g)
    path = tmp_path / "rich.json"
    write_document(doc, path)
    assert path.read_bytes() == dumps_document(doc).encode()
    assert os.listdir(tmp_path) == ["rich.json"]
    loaded = from_document(str(path))
    assert dumps_document(loaded.to_document()) == dumps_document(doc)
    write_document({"b": 1, "a": [1.5]}, path)   # overwrite in place
    assert path.read_bytes() == b'{"a":[1.5],"b":1}'


def test_write_document_failure_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    path.write_bytes(b"old")

    def broken_replace(src, dst):
        raise OSError("disk on fire")
    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        write_document({"a": 1}, path)
    monkeypatch.undo()
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.json"]
    with pytest.raises(GraphFormatError, match="not JSON-serializable"):
        write_document({"a": object()}, path)
    with pytest.raises(GraphFormatError, match="not JSON-serializable"):
        write_document({"a": math.nan}, path)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.json"]


# ---------------------------------------------------------------------------------------
# Files: permissions and directories

def test_an_export_keeps_an_existing_files_mode_and_new_files_honour_the_umask(tmp_path):
    path = tmp_path / "f.json"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    write_document({"a": 1}, path)
    assert path.read_bytes() == b'{"a":1}' and (os.stat(path).st_mode & 0o777) == 0o640
    old = os.umask(0o027)
    try:
        write_document({"a": 2}, tmp_path / "new.json")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "new.json").st_mode & 0o777 == 0o640     # 0o666 & ~0o027
    old = os.umask(0o022)
    try:
        write_document({"a": 3}, tmp_path / "other.json")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "other.json").st_mode & 0o777 == 0o644
    assert sorted(os.listdir(tmp_path)) == ["f.json", "new.json", "other.json"]


def test_an_export_into_a_missing_directory_names_the_directory(tmp_path):
    import defun as df
    cf = df.defun(lambda x: x * 2.0).get_concrete_function(df.constant([1.0]))
    missing = tmp_path / "no" / "such"
    with pytest.raises(FileNotFoundError) as info:
        df.export_json(cf, missing / "f.json")
    assert str(missing) in str(info.value) and "does not exist" in str(info.value)
    assert ".tmp" not in str(info.value)
    assert os.listdir(tmp_path) == []
