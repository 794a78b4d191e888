"""The `defun` command's files and text (defun/cli.py): input arrays read with the sizes
their headers claim checked before anything is allocated, random inputs counted against
the budget, outputs written under names safe as files and zip members, and every name
shown with its hidden characters escaped.

A document's names are anyone's: a name may hold a terminal escape (ESC, an OSC title),
a carriage return, NUL, a bidi override or a lone surrogate. Printed, they are escapes
(`\\x1b`, `\\u202e`, `\\ud800`); as a file or zip member name, `_`.
"""
import math
import os
import re
import unicodedata
import zipfile

import numpy as np

__all__ = ["BadInput", "Visible", "array_type", "file_stem", "member_name", "one_line", "parse_feeds",
           "random_inputs", "read_input", "safe_names", "shown", "silence", "type_text", "visible",
           "write_npz"]


class BadInput(Exception):
    """A file or argument the user gave is wrong (exit status 2)."""


def silence(stream):
    """Point `stream`'s file at /dev/null, so the interpreter's last flush has nowhere to fail."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):    # not a file (a StringIO in tests)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


# Characters shown as escapes: controls (C0, DEL, C1), format characters (bidi overrides and
# isolates, zero-width ones), line and paragraph separators, and lone surrogates (which
# no encoding writes).
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))
_NOT_PLAIN = re.compile(r"[^\t\n\x20-\x7e]")
_NOT_PLAIN_NAME = re.compile(r"[^\x20-\x5b\x5d-\x7e]")     # in a name: tab, newline and \\ too
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(m):
    c = m.group()
    if c == "\\":
        return "\\\\"
    if c in _SHORT:
        return _SHORT[c]
    if unicodedata.category(c) not in _HIDDEN:
        return c
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text):
    """`text` with its hidden characters as escapes (newlines and tabs kept)."""
    return _NOT_PLAIN.sub(_escape, text)


def shown(name):
    """A name as printed: hidden characters, newlines, tabs and backslashes as escapes, so a
    name cannot start a line of its own or pass for another."""
    return _NOT_PLAIN_NAME.sub(_escape, name)


class Visible:
    """A text stream showing hidden characters as escapes (see `visible`)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        return self._stream.write(visible(text))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def one_line(e):
    return " ".join(str(e).split())


def type_text(shape, dtype):
    return f"{dtype}[{', '.join('?' if d is None else str(d) for d in shape)}]"


def array_type(a):
    return type_text(a.shape, a.dtype.name)


_NPZ_KEY = re.compile(r"^(?P<path>.+\.npz)\[(?P<key>[^\[\]]+)\]$", re.I)


def parse_feeds(items):
    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise BadInput(f"inputs are given as NAME=file.npy or NAME=file.npz[key], got {item!r}")
        if name in feeds:
            raise BadInput(f"input {name!r} is given twice")
        feeds[name] = path
    return feeds


def _check_npy_size(path, name):
    """Refuse a .npy whose header claims more data than the file holds, before anything is
    allocated (a 128-byte file could otherwise ask for terabytes). Other files (an .npz, not
    an array file) are left to np.load to judge."""
    with open(path, "rb") as fh:
        header = _npy_header(fh)
        have = os.fstat(fh.fileno()).st_size - fh.tell()
    _check_claim(header, have, f"input {name!r}: {path}")


def _check_member_size(npz, key, name, path):
    """As _check_npy_size, for the array `key` of an .npz: its header's claim is held against
    the member's size in the zip, and a deflated member's against the most that its
    compressed bytes can inflate to (deflate's limit, 1032 to 1)."""
    member = key if key in npz.zip.namelist() else f"{key}.npy"
    info = npz.zip.getinfo(member)
    with npz.zip.open(info) as fh:
        header = _npy_header(fh)
        have = info.file_size - fh.tell()
    if info.compress_type == zipfile.ZIP_DEFLATED:
        have = min(have, 1032 * info.compress_size)
    _check_claim(header, have, f"input {name!r}: {path}[{key}]")


def _npy_header(fh):
    """(shape, dtype) that the .npy array at `fh` claims, or None if it is not one whose
    header this reads (np.load then says what is wrong)."""
    try:
        if fh.read(6) != b"\x93NUMPY":
            return None
        version = (fh.read(1)[0], fh.read(1)[0])
        read = {(1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read is None:
            return None      # another version: np.load judges it
        shape, _, dtype = read(fh)
    except (ValueError, TypeError, SyntaxError, OverflowError, IndexError):
        return None      # a malformed header
    return None if dtype.hasobject else (shape, dtype)     # object arrays: refused by np.load


def _check_claim(header, have, what):
    if header is None:
        return
    shape, dtype = header
    n = math.prod(shape)
    if n * dtype.itemsize > have:
        raise BadInput(f"{what} claims a {dtype.name} array of shape {list(shape)} "
                        f"({n:,} elements, {n * dtype.itemsize:,} bytes) but holds {have:,} bytes "
                        f"of data: the file is cut short or its header is wrong")


def read_input(name, path):
    """(what to call it, the array) of NAME=path: a .npy file, or one array of an .npz
    (`f.npz[key]`; `f.npz` alone when it holds one array, or one named NAME)."""
    key = None
    m = _NPZ_KEY.match(path)
    if m is not None and not os.path.exists(path):
        path, key = m.group("path"), m.group("key")
    _check_npy_size(path, name)
    try:
        loaded = np.load(path, allow_pickle=False)
    except OSError:
        raise
    except ValueError as e:
        raise BadInput(f"input {name!r}: {path} is not a .npy or .npz array file ({one_line(e)})") from None
    except MemoryError:
        raise BadInput(f"input {name!r}: {path} is too large to load into memory") from None
    if isinstance(loaded, np.ndarray):
        if key is not None:
            raise BadInput(f"input {name!r}: {path} holds one array (a .npy), not keys: drop [{key}]")
        return path, loaded
    with loaded:
        keys = list(loaded.files)
        if key is None:
            if len(keys) == 1:
                key = keys[0]
            elif name in keys:
                key = name
            else:
                raise BadInput(f"input {name!r}: {path} holds {len(keys)} arrays; pick one with "
                                f"{name}={path}[key], key one of {', '.join(keys[:20])}")
        if key not in keys:
            raise BadInput(f"input {name!r}: {path} has no array {key!r}; it holds "
                            f"{', '.join(keys[:20]) or 'none'}")
        _check_member_size(loaded, key, name, path)
        try:
            return f"{path}[{key}]", loaded[key]
        except MemoryError:
            raise BadInput(f"input {name!r}: {path}[{key}] is too large to load into memory") from None
        except (ValueError, zipfile.BadZipFile, EOFError) as e:
            raise BadInput(f"input {name!r}: {path}[{key}] cannot be read ({one_line(e)})") from None


def write_npz(path, named):
    """Arrays by name in an .npz, as np.savez writes them (any name, `file` included)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for name, value in named.items():
                with z.open(f"{name}.npy", "w", force_zip64=True) as out:
                    np.lib.format.write_array(out, np.asanyarray(value), allow_pickle=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def safe_names(names, clean):
    """A safe name per name: `clean(name)`, numbered when two would be the same but for case
    (`x`, `x_1`), as files on a case-blind disk would be."""
    safe, taken = {}, set()
    for name in names:
        base = clean(name)
        stem, k = base, 1
        while stem.lower() in taken:
            stem, k = f"{base}_{k}", k + 1
        taken.add(stem.lower())
        safe[name] = stem
    return safe


def file_stem(name):
    """An output's file name under --outdir, but `.npy` (`stats.mean` -> stats.mean)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".") or "output"


def member_name(name):
    """An output's key in -o's .npz: the name, but path separators and hidden characters
    as `_` and no leading dot, so no unzip writes it outside its folder (`../x` -> `_.._x`)."""
    text = "".join("_" if c in "/\\" or unicodedata.category(c) in _HIDDEN else c for c in name)
    return text.lstrip(". ") or "output"


def sized(shape, size):
    return tuple(size if d is None else d for d in shape)


def random_inputs(specs, size, seed, int_high):
    """Random arrays for the TensorSpecs `specs` (unknown sizes `size`), their bytes counted
    before any is made: more than this machine's memory (or than numpy can allocate) is a
    bad argument."""
    shapes = [sized(s.shape, size) for s in specs]
    need = sum(math.prod(shape) * s.dtype.np.itemsize for s, shape in zip(specs, shapes))
    what = ", ".join(f"{shown(s.name)} {type_text(shape, s.dtype.name)}" for s, shape in zip(specs, shapes))
    memory = _memory_bytes()
    if memory is not None and need > memory:
        raise BadInput(f"the random inputs ({what}) would take {need:,} bytes, more than this "
                       f"machine's memory ({memory:,} bytes): give a smaller --size")
    rng = np.random.default_rng(seed)
    try:
        return [_random_input(rng, shape, s.dtype.np, int_high) for s, shape in zip(specs, shapes)]
    except MemoryError:
        raise BadInput(f"the random inputs ({what}) would take {need:,} bytes, more than memory "
                       f"holds: give a smaller --size") from None


def _memory_bytes():
    """This machine's physical memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):     # not a POSIX system
        return None


def _random_input(rng, shape, dtype, int_high):
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, max(int_high, 1), size=shape).astype(dtype)
