"""Where in the user's code something happened: the first frame outside defun's packages."""
import linecache
import os
import sys
import types

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


# (code, filename, line) -> that code reporting `line` of `filename` for every instruction
_AT_SITE = {}
_AT_SITE_LIMIT = 4096


def code_at(code, site, name=None):
    """`code` (the same bytecode) reporting `site` = (filename, line) as the place of each
    of its instructions, named `name` if given; `code` itself on Python < 3.11 or for no site.
    What a warning or a traceback names while it runs is then the user's line (a kernel
    running a node traced there, the runner of a defun defined there)."""
    if site is None or sys.version_info < (3, 11):
        return code
    key = (code, site[0], site[1], name)
    hit = _AT_SITE.get(key)
    if hit is None:
        table = bytearray()
        for start, end, line in code.co_lines():
            units = (end - start) // 2
            while units > 0:
                n = min(units, 8)
                units -= n
                if line is None:
                    table.append(0x80 | (15 << 3) | (n - 1))    # no location
                else:
                    table.append(0x80 | (13 << 3) | (n - 1))    # a line, no columns: +0
                    table.append(0)
        hit = code.replace(co_filename=str(site[0]), co_firstlineno=site[1], co_linetable=bytes(table),
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
