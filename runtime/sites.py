"""Where in the user's code something happened: the first frame outside defun's packages."""
import linecache
import os
import sys
import types

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
# Installed, runtime/ sits inside the defun package (one folder holds everything); in the
# repository it sits beside graph/ and defun/ (and tests/, examples/, which are the user's).
_OWN = ((_ROOT + os.sep,) if os.path.isfile(os.path.join(_ROOT, "__init__.py")) else
        tuple(os.path.join(_ROOT, p) + os.sep for p in ("runtime", "graph", "defun")))
_OWN_FILES = {}


def _is_own(filename):
    own = _OWN_FILES.get(filename)
    if own is None:
        # code defun generates (`<defun call f>`, `<defun plan f>`) is its own too
        own = _OWN_FILES[filename] = filename.startswith("<defun ") or \
            os.path.abspath(filename).startswith(_OWN)
    return own


def user_site(depth=1):
    """`(filename, lineno)` of the innermost caller outside runtime/graph/defun, or None."""
    f = sys._getframe(depth)
    while f is not None:
        fn = f.f_code.co_filename
        if not _is_own(fn):
            return fn, f.f_lineno
        f = f.f_back
    return None


def user_site_below(code, depth=1):
    """`(filename, lineno)` of the innermost caller outside runtime/graph/defun when it is
    below (called, however indirectly, by) the innermost frame running `code`, else None."""
    f = sys._getframe(depth)
    while f is not None:
        if f.f_code is code:
            return None
        fn = f.f_code.co_filename
        if not _is_own(fn):
            return fn, f.f_lineno
        f = f.f_back
    return None


def traceback_site(tb):
    """`(filename, lineno)` of the innermost frame of traceback `tb` outside
    runtime/graph/defun (where in the user's code an exception was raised), or None."""
    site = None
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if not _is_own(fn):
            site = fn, tb.tb_lineno
        tb = tb.tb_next
    return site
class DocumentSite(tuple):
    """`(base name, line)` read from a graph document: the line of a file on the machine that
    exported it, shown as it is and never read here (a file of that name here is another one)."""

    __slots__ = ()


def format_site(site):
    """'file.py:12' (or '<unknown>')."""
    if site is None:
        return "<unknown location>"
    fn, line = site
    return f"{fn}:{line}"


def source_line(site):
    """The stripped source text at `site`, or '' (always for a `DocumentSite`)."""
    if site is None or site.__class__ is DocumentSite:
        return ""
    return linecache.getline(site[0], site[1]).strip()


# Python 3.11's location table (Objects/locations.md in CPython): entries of up to 8 code
# units, each a header byte 0x80 | kind << 3 | (units - 1) and the kind's data. Written here:
# kind 13 (a line delta as a signed varint, no columns) and kind 15 (no location).
_LINE_ENTRY, _NO_LOCATION = 0x80 | 13 << 3, 0x80 | 15 << 3


def relocated(code, filename, lines, base):
    """`code` (the same bytecode) in `filename`, each instruction of its line `base + k`
    located at `lines[k]` (a line past the end at the last one): the location table decoded
    and re-encoded entry by entry with numpy (a plan of 1,000 nodes has ~6,500 entries: 3 ms
    in a Python loop, 0.5 ms so)."""
    table = np.frombuffer(code.co_linetable, np.uint8)
    heads = np.flatnonzero(table & 0x80)
    kind, units = (table[heads] >> 3) & 15, (table[heads] & 7) + 1
    delta = np.where((kind >= 10) & (kind <= 12), kind.astype(np.int64) - 10, 0)   # one-line kinds
    varint = (kind == 13) | (kind == 14)          # a line delta as a signed varint follows
    delta[varint] = _read_signed_varints(table, heads[varint] + 1)
    located = kind != 15
    generated = base + np.cumsum(delta)[located]
    new = np.asarray(lines, np.int64)[np.clip(generated - base, 0, len(lines) - 1)]
    table = _write_entries(np.where(located, _LINE_ENTRY, _NO_LOCATION) | (units - 1), located,
                           np.diff(new, prepend=lines[0]))
    return code.replace(co_filename=filename, co_firstlineno=lines[0], co_linetable=table)


def _read_signed_varints(table, at):
    """The signed varints (6 bits a byte, 0x40 = more, the low bit the sign) starting at `at`."""
    value = np.zeros(len(at), np.int64)
    more, shift = np.ones(len(at), bool), 0
    while more.any():
        byte = table[at].astype(np.int64)
        value |= np.where(more, (byte & 63) << shift, 0)
        more &= (byte & 64) != 0
        at, shift = at + more, shift + 6
    return np.where(value & 1, -(value >> 1), value >> 1)


def _write_entries(heads, located, deltas):
    """A location table: entry k is `heads[k]`, then, if `located[k]`, its line delta (the
    next of `deltas`) as a signed varint."""
    zigzag = np.where(deltas < 0, ((-deltas) << 1) | 1, deltas << 1)
    width = np.ones(len(zigzag), np.int64)
    for k in range(1, 6):
        width += zigzag >= 1 << (6 * k)
    size = np.ones(len(heads), np.int64)
    size[located] += width
    start = np.cumsum(size) - size
    out = np.empty(int(size.sum()), np.uint8)
    out[start] = heads
    first = start[located] + 1
    for k in range(int(width.max(initial=0))):
        has = width > k
        out[first[has] + k] = ((zigzag[has] >> (6 * k)) & 63) | np.where(width[has] > k + 1, 64, 0)
    return out.tobytes()


def location_table(units, lines, first):
    """A location table of groups of instructions: group k is `units[k]` code units at line
    `lines[k]` (None: no location), in entries of up to 8 units, lines as deltas from
    `first`. (A loop in Python, each group's bytes made once per size and small delta:
    faster than `_write_entries` below a few hundred groups, and ~0.3 us a group above.)"""
    out = []
    prev = first
    runs = _RUNS
    for u, line in zip(units, lines):
        delta = None if line is None else line - prev
        run = runs.get((u, delta))
        if run is None:
            run = _run(u, delta)
        out.append(run)
        if line is not None:
            prev = line
    return b"".join(out)


_RUNS = {}      # (units, line delta or None) -> their entries


def _run(units, delta):
    key = (units, delta)
    table = bytearray()
    while units > 0:
        n = min(units, 8)
        units -= n
        if delta is None:
            table.append(_NO_LOCATION | (n - 1))
            continue
        table.append(_LINE_ENTRY | (n - 1))
        zigzag = ((-delta) << 1) | 1 if delta < 0 else delta << 1
        while zigzag >= 64:
            table.append(64 | (zigzag & 63))
            zigzag >>= 6
        table.append(zigzag)
        delta = 0
    run = bytes(table)
    if key[1] is None or -64 < key[1] < 64:      # (a far jump between lines: made each time)
        if len(_RUNS) >= 8192:
            _RUNS.clear()
        _RUNS[key] = run
    return run


# (code, filename, line) -> that code reporting `line` of `filename` for every instruction
_AT_SITE = {}
_AT_SITE_LIMIT = 4096


def code_at(code, site, name=None):
    """`code` (the same bytecode) reporting `site` = (filename, line) as the place of each
    of its instructions, named `name` if given; `code` itself on Python < 3.11 or for no site.
    (`location_table`, not `relocated`: a kernel's code is small, and numpy's fixed cost
    would be ten times the loop's.)
    What a warning or a traceback names while it runs is then the user's line (a kernel
    running a node traced there, the runner of a defun defined there)."""
    if site is None or sys.version_info < (3, 11):
        return code
    key = (code, site[0], site[1], name)
    hit = _AT_SITE.get(key)
    if hit is None:
        spans = list(code.co_lines())
        table = location_table([(end - start) // 2 for start, end, _ in spans],
                               [None if line is None else site[1] for _, _, line in spans], site[1])
        hit = code.replace(co_filename=str(site[0]), co_firstlineno=site[1], co_linetable=table,
                           **({"co_name": name} if name else {}))
        if len(_AT_SITE) >= _AT_SITE_LIMIT:
            _AT_SITE.clear()
        _AT_SITE[key] = hit
    return hit


def function_at(fn, site, depth=2):
    """A copy of defun's Python function `fn` whose code reports `site` (see code_at), and
    so do the functions of defun it holds in its closure, `depth` levels down (a kernel
    bound to its attrs: `lambda x: kernel(x, axis)`); `fn` itself when it is no function of
    defun's or there is no site. A user's function (df.numpy_function's) keeps its lines."""
    if site is None or type(fn) is not types.FunctionType or not _is_own(fn.__code__.co_filename):
        return fn
    code = code_at(fn.__code__, site)
    closure = fn.__closure__
    if closure and depth > 1:
        cells = []
        for c in closure:
            try:
                held = c.cell_contents
            except ValueError:      # an empty cell
                held = None
            moved = function_at(held, site, depth - 1) if type(held) is types.FunctionType else held
            cells.append(c if moved is held else types.CellType(moved))
        closure = tuple(cells)
    if code is fn.__code__:
        return fn
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    copy.__dict__.update(fn.__dict__)
    return copy


def definition_site(fn):
    """`(filename, line)` of the `def` of Python function `fn` (through wrappers and
    methods), or None."""
    fn = getattr(fn, "__func__", fn)
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else None


def runs_at_definition(namespace, names, fn):
    """Make the functions `names` of `namespace` (defun's generated code running `fn`) report
    `fn`'s definition, named as `fn`, so tracebacks through them show no generated code."""
    site = definition_site(fn)
    if site is None or _is_own(site[0]):
        return
    name = getattr(fn, "__name__", None)
    for k in names:
        f = namespace.get(k)
        if f is not None:
            f.__code__ = code_at(f.__code__, site, name if isinstance(name, str) else None)
