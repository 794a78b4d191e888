"""Files written atomically: every file the library writes (JSON documents, numpy source,
ONNX models, checkpoints, the numba backend's cache modules) goes through `write_atomically`.

The bytes go to a new temporary file beside the target, are flushed to disk, and the file
is renamed over the target in one step, so a reader sees the old file or the new one and
never a part. On any failure (an interrupt included) the old file is untouched and the
temporary one removed. An existing file keeps its permission bits; a new one gets what
`open` would give it (0o666 less the umask; `tempfile.mkstemp` would make it 0o600).
"""
import errno
import os
import secrets
import stat

__all__ = ["write_atomically"]


def write_atomically(path, data):
    """Write `data` to `path` atomically; returns `path` as a string. `data` is bytes, or a
    function writing them into the binary file it is given (no copy of a large payload in
    memory). A missing directory is named in the FileNotFoundError."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(errno.ENOENT, f"cannot write {path!r}: directory {directory!r} does "
                                f"not exist (create it first)", directory)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    fd, tmp = _create_temp(directory, os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.chmod(tmp, mode)
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _create_temp(directory, base):
    """(fd, path) of a new file next to the target, created with mode 0o666 so that the
    kernel applies the umask."""
    for _ in range(100):
        tmp = os.path.join(directory, f".{base}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"could not create a temporary file in {directory!r}")
