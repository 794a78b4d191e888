"""What generated region modules import, and the on-disk cache they live in (imports numba).

A region's source is written to `<cache dir>/r_<hash>.py` (the hash of the source and of
what it calls) and run from the text this process generated, never imported: the file is
compared byte for byte first (a different one is refused with a warning and rewritten), and
no `.pyc` is ever read. The compiled code goes through `_SignedCache`, numba's cache format
with each index and data file signed (HMAC-SHA256, with a per-user key kept outside the
cache directory, `$XDG_CONFIG_HOME/defun/cache.key`, default `~/.config/defun`); a file
whose signature does not verify is refused (a warning) before anything in it is unpickled,
and compiled again. The cache directory is `$DEFUN_CACHE_DIR/numba`, else
`~/.cache/defun/numba`; it and its parent are created 0700 whatever the umask, and refused
(`UnsafeLocationError`, a PermissionError) unless owned by this user and closed to writes by
others.

Between processes: numba names an entry's data file by the first free number in the index,
so two processes saving at once could each write the index and the other's data under one
name, the index then naming another signature's machine code. Here an entry's data file is
named by a hash of its key and holds the key (a load compares it: a mismatch is refused and
compiled again), it is written (atomically, `os.replace`) before the index names it, and the
index is read, updated and replaced under an exclusive lock on `<index>.lock` (fcntl).

A cache or key location that cannot be created or written (a read-only disk, a path under a
file) does not stop the backend: regions compile in memory, with one RuntimeWarning per
process.
"""
import contextlib
import errno
import hashlib
import hmac
import inspect
import linecache
import os
import pickle
import secrets
import stat
import sys
import threading
import types as pytypes
import warnings

import numpy as np
from numba import njit, types
from numba.core.caching import CompileResultCacheImpl, FunctionCache, IndexDataCacheFile, _CacheLocator
from numba.core.errors import NumbaError
from numba.extending import overload

from defun.graph.numba_backend import polynomials
from defun.runtime import registry
from defun.runtime.files import write_atomically

try:
    import fcntl        # POSIX only: the lock between processes
except ImportError:     # Windows: no lock (entries named by key still load right; one may be lost)
    fcntl = None

__all__ = ["Fallback", "scalar", "kernel", "load_region", "cache_dir", "is_compile_error",
           "private_dir", "key_path", "UnsafeLocationError"]


class UnsafeLocationError(PermissionError):
    """The cache directory or key is not this user's alone: refused, never used."""


class Fallback(Exception):
    """Raised by a fused region for a case its loops leave to numpy."""


def scalar(x):
    """The value of a 0-d array or scalar (region inputs of rank 0 may be either)."""
    return x[()] if isinstance(x, np.ndarray) else x


@overload(scalar)
def _scalar_overload(x):
    if isinstance(x, types.Array):
        return lambda x: x[()]
    return lambda x: x


def is_compile_error(exc):
    """True if `exc` says numba could not compile a function (not that it failed running)."""
    return isinstance(exc, NumbaError)


# ---------------------------------------------------------------------------------------
_lock = threading.RLock()
_kernels = {}
_modules = {}


def kernel(op_name):
    """The compiled array-level fused form (`runtime.fused.Kernel.fn`) of op `op_name`."""
    k = _kernels.get(op_name)
    if k is None:
        with _lock:
            k = _kernels.get(op_name)
            if k is None:
                fn = registry.get(op_name).fused.fn
                k = njit(error_model="numpy")(fn)
                h = hashlib.sha256(_own_source())
                with open(inspect.getfile(fn), "rb") as fh:    # numba's rule: the whole file
                    h.update(fh.read())
                stamp = h.hexdigest()[:32]
                folder = _checked_cache_dir()
                if folder is not None:      # else: compiled in memory (the cache is unusable)
                    k._cache = _SignedCache(fn, folder, f"k_{op_name}_{stamp}", stamp)
                _kernels[op_name] = k
    return k


def cache_dir():
    base = os.environ.get("DEFUN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "defun")
    return os.path.join(base, "numba")


def key_path():
    """The file of the per-user key that signs the compiled code (outside the cache)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "defun", "cache.key")


# ---------------------------------------------------------------------------------------
# Directories and the key: owned by this user, closed to others

def private_dir(path, what="defun's numba cache directory"):
    """`path`, created (with its missing parents) 0700 whatever the umask; refused with a
    PermissionError unless it and its parent are directories owned by this user that no one
    else can write to."""
    path = os.path.abspath(path)
    missing, p = [], path
    while not os.path.isdir(p) and os.path.dirname(p) != p:
        missing.append(p)
        p = os.path.dirname(p)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)      # 0o700 less the umask: never more than 0o700
        except FileExistsError:
            pass
    _check_private(path, what)
    _check_private(os.path.dirname(path), what + "'s parent")
    return path


def _foreign(st):
    uid = getattr(os, "geteuid", None)
    return uid is not None and st.st_uid != uid()


def _check_private(path, what, closed_bits=0o022):
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(errno.ENOTDIR, f"{what} {path!r} is not a directory", path)
    if _foreign(st):
        raise UnsafeLocationError(errno.EPERM, f"{what} {path!r} is owned by uid {st.st_uid}, not by this "
                              f"user (uid {os.geteuid()}): anyone who can write there runs code "
                              f"in this process; use a directory of your own (DEFUN_CACHE_DIR)", path)
    if st.st_mode & closed_bits and os.name != "nt":     # Windows: no such mode bits
        raise UnsafeLocationError(errno.EPERM, f"{what} {path!r} has mode {stat.S_IMODE(st.st_mode):04o}, "
                              f"open to other users (anyone who can write there runs code in this "
                              f"process): `chmod go-w {path}` (0700 is what defun creates)", path)


_key = []


def _signing_key():
    """The per-user signing key: 32 random bytes, created once (0600) and refused unless
    this user's alone."""
    if _key:
        return _key[0]
    with _lock:
        if not _key:
            path = key_path()
            private_dir(os.path.dirname(path), "defun's key directory")
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            except FileNotFoundError:
                fd = _create_key(path)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if _foreign(st) or st.st_mode & 0o077 and os.name != "nt" or not stat.S_ISREG(st.st_mode):
                    raise UnsafeLocationError(errno.EPERM, f"defun's cache key {path!r} must be a file of "
                                          f"this user's that only it can read (mode "
                                          f"{stat.S_IMODE(st.st_mode):04o}, uid {st.st_uid}): "
                                          f"remove it and defun makes a new one", path)
                key = f.read()
            if len(key) != 32:
                raise UnsafeLocationError(errno.EPERM, f"defun's cache key {path!r} is not 32 bytes: "
                                      f"remove it and defun makes a new one", path)
            _key.append(key)
    return _key[0]


def _create_key(path):
    """A new key file, complete before it appears (a linked temporary file); the open file."""
    tmp = f"{path}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:     # another process made it first: use theirs
            pass
    finally:
        os.unlink(tmp)
    return os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))


_checked = {}
_unusable = []      # the first reason the cache could not be used (warned about once)


def _checked_cache_dir():
    """The cache directory, checked; None if it or the key cannot be made (compile in memory).
    An unsafe one raises UnsafeLocationError."""
    folder = cache_dir()
    if folder not in _checked:
        what = f"its signing key {key_path()!r}"
        try:
            _signing_key()      # here, not at compile time (where an error would mean "run on numpy")
            what = f"its directory {folder!r}"
            _checked[folder] = private_dir(folder)
        except UnsafeLocationError:
            raise
        except OSError as e:
            _cache_unusable(what, e)
            _checked[folder] = None
    return _checked[folder]


def _cache_unusable(what, exc):
    """Warn, once per process, that compiled code is not cached (`what` cannot be written)."""
    with _lock:
        if _unusable:
            return
        _unusable.append(exc)
    warnings.warn(f"numba backend: the compiled-code cache cannot use {what} ({exc}): this process "
                  f"compiles in memory (nothing cached); set DEFUN_CACHE_DIR / XDG_CONFIG_HOME to a "
                  f"directory of yours to cache compiled code", RuntimeWarning, stacklevel=4)


# ---------------------------------------------------------------------------------------
# Signed files: numba's index and data files, each with an HMAC of its name and contents

_MAGIC = b"defun-signed-v1\n"


def _mac(name, payload):
    return hmac.new(_signing_key(), name.encode() + b"\0" + payload, hashlib.sha256).digest()


def _refuse(path, why):
    warnings.warn(f"numba backend: refused {path!r} from the cache ({why}): it is not run or "
                  f"read, and is replaced by what this process writes", RuntimeWarning, stacklevel=3)


def _read_signed(path):
    """The payload of the signed file `path`, or None (absent, or refused with a warning)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:        # unreadable (a directory, no permission): compiled again
        _refuse(path, f"it cannot be read: {e}")
        return None
    n = len(_MAGIC) + 32
    if not data.startswith(_MAGIC) or len(data) < n:
        _refuse(path, "not a file defun signed")
        return None
    payload = data[n:]
    if not hmac.compare_digest(data[len(_MAGIC):n], _mac(os.path.basename(path), payload)):
        _refuse(path, "its signature does not verify")
        return None
    return payload


def _write_signed(path, payload):
    write_atomically(path, _MAGIC + _mac(os.path.basename(path), payload) + payload)


@contextlib.contextmanager
def _locked(path):
    """An exclusive lock on the file `path` (created 0600) between processes and threads."""
    if fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)      # each open file its own lock: threads too
        yield
    finally:
        os.close(fd)        # releases it


class _SignedFile(IndexDataCacheFile):
    """numba's index and data files, signed; read only once verified; an entry's data file is
    named by its key and holds it, written before the index names it (safe between processes)."""

    def save(self, key, data):
        name = f"{self._index_name[:-len('.nbi')]}.{hashlib.sha256(repr(key).encode()).hexdigest()[:20]}.nbc"
        try:
            self._save_data(name, (key, data))      # complete before the index can name it
            with _locked(self._index_path + ".lock"):
                overloads = self._load_index()
                if overloads.get(key) != name:
                    overloads[key] = name
                    self._save_index(overloads)
        except UnsafeLocationError:
            raise
        except OSError as e:        # cannot write there: compiled code stays in memory
            _cache_unusable(f"its directory {self._cache_path!r}", e)

    def load(self, key):
        name = self._load_index().get(key)
        if name is None:
            return None
        path = self._data_path(name)
        entry = self._load_data(name)
        if entry is None:
            return None
        if not (isinstance(entry, tuple) and len(entry) == 2 and entry[0] == key):
            _refuse(path, "it holds another entry's compiled code than the index names")
            return None
        return entry[1]

    def _load_index(self):
        payload = _read_signed(self._index_path)
        if payload is None:
            return {}
        version, stamp, overloads = pickle.loads(payload)    # verified: this user's key
        return overloads if (version, stamp) == (self._version, self._source_stamp) else {}

    def _save_index(self, overloads):
        _write_signed(self._index_path, self._dump((self._version, self._source_stamp, overloads)))

    def _load_data(self, name):
        payload = _read_signed(self._data_path(name))
        return None if payload is None else pickle.loads(payload)      # verified

    def _save_data(self, name, data):
        _write_signed(self._data_path(name), self._dump(data))


class _Locator(_CacheLocator):
    def __init__(self, folder, py_func, stamp):
        self._folder, self._stamp = folder, stamp
        self._py_file = py_func.__code__.co_filename

    def ensure_cache_path(self):
        try:
            private_dir(self._folder)
        except UnsafeLocationError:
            raise
        except OSError as e:        # gone unwritable since: the save is skipped (see save)
            _cache_unusable(f"its directory {self._folder!r}", e)

    def get_cache_path(self):
        return self._folder

    def get_source_stamp(self):
        return self._stamp

    def get_disambiguator(self):
        return ""


class _Impl(CompileResultCacheImpl):
    def __init__(self, py_func, locator, base):     # numba's walks its locators: not here
        self._lineno = py_func.__code__.co_firstlineno
        self._locator = locator
        self._filename_base = f"{base}.py{sys.version_info[0]}{sys.version_info[1]}"


class _SignedCache(FunctionCache):
    """numba's function cache in `folder`, its files named `base`, signed (see above)."""

    def __init__(self, py_func, folder, base, stamp):   # numba's finds a locator: not here
        self._name = repr(py_func)
        self._py_func = py_func
        self._impl = _Impl(py_func, _Locator(folder, py_func, stamp), base)
        self._cache_path = folder
        self._cache_file = _SignedFile(folder, self._impl.filename_base, stamp)
        self.enable()


# ---------------------------------------------------------------------------------------
# Regions

def _own_source():
    """This module's source and the polynomials' (compiled into regions: part of their key)."""
    data = b""
    for path in (__file__, polynomials.__file__):
        with open(path, "rb") as fh:
            data += fh.read()
    return data


def _fingerprint(source):
    """Hash of the source, of this module and of the kernels the source calls (a kernel's code
    is compiled into the region's: a change to it must give another file)."""
    h = hashlib.sha256(source.encode())
    h.update(_own_source())
    for line in source.splitlines():
        if "= _kernel(" in line:
            name = line.split("_kernel(", 1)[1].strip("()'\"")
            h.update(inspect.getsource(registry.get(name).fused.fn).encode())
    return h.hexdigest()[:32]


def load_region(source):
    """The `region` function (a numba dispatcher) of `source`, from its file in the cache."""
    key = _fingerprint(source)
    mod = _modules.get(key)
    if mod is None:
        with _lock:
            mod = _modules.get(key)
            if mod is None:
                mod = _modules[key] = _import(key, source)
    return mod.region


def _import(key, source):
    """The module of `source`, run from this text (never imported: no file of the cache is
    executed); its file in the cache is rewritten unless it holds exactly this text. Without a
    usable cache the module is compiled in memory."""
    folder = _checked_cache_dir()
    path = f"<defun numba region {key}>"
    if folder is not None:
        try:
            path = _write_source(os.path.join(folder, f"r_{key}.py"), source.encode("utf-8"))
        except UnsafeLocationError:
            raise
        except OSError as e:
            _cache_unusable(f"its directory {folder!r}", e)
            folder = None
    name = f"defun_numba_region_{key}"
    mod = pytypes.ModuleType(name)
    mod.__file__ = path
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)    # this text
    code = compile(source, path, "exec", dont_inherit=True)
    sys.modules[name] = mod
    exec(code, mod.__dict__)
    if folder is not None:
        mod.region._cache = _SignedCache(mod.region.py_func, folder, f"r_{key}.region", key)
    return mod


def _write_source(path, data):
    """`path`, made to hold exactly `data` (a different file is refused and rewritten)."""
    try:
        with open(path, "rb") as fh:
            found = fh.read()
    except FileNotFoundError:
        found = None
    if found != data:
        if found is not None:
            _refuse(path, "it is not the generated source")
        # written once, atomically (another process may write the same file)
        write_atomically(path, data)
    return path
