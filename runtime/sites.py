"""Where in the user's code something happened: the first frame outside defun's packages."""
import linecache
import os
import sys

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
