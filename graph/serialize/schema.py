"""The document's vocabulary: its limits, and the primitive checks of one value each.

validate.py walks a document field by field with these checks; export.py writes values with
the encoders. Every check takes the value and the path of its field (`functions[0].nodes[3]`),
returns the value as the loader uses it, and raises GraphFormatError naming that path.
"""
import base64
import binascii
import keyword
import math
import re

import numpy as np

from defun.runtime import dtypes, errors, sites


FORMAT = "defun.graph"
VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
__all__ = [
    "FORMAT", "VERSION", "READABLE_VERSIONS", "V1_STATEFUL_TWINS", "MAX_DOCUMENT_BYTES",
    "MAX_FUNCTIONS", "MAX_CALL_DEPTH", "MAX_NODES", "MAX_TOTAL_NODES", "MAX_LIST", "MAX_RANK",
    "MAX_ELEMENTS", "MAX_TENSOR_BYTES", "MAX_TOTAL_TENSOR_BYTES", "MAX_NAME", "MAX_STRING",
    "MAX_STRUCTURE_DEPTH", "MAX_SITE_FILE", "MAX_SITE_LINE", "REF_PATTERN", "DATA_DTYPES", "ALL_DTYPES",
    # writing values
    "shape_doc", "encode_array", "encode_float", "site_doc",
    # messages
    "format_error", "kind_of", "quote", "attr_path",
    # reading and checking one value
    "check_fields", "check_int", "check_str", "check_name", "check_identifier", "check_list",
    "check_dtype", "check_shape", "check_array", "decode_array", "check_ref", "decode_float", "check_site",
    "FuncRef"]

# Version 1 named a node whose functions have effects by a second op; version 2 flags the
# node (`"stateful": true`) and has one op each.
V1_STATEFUL_TWINS = {"stateful_call": "call", "stateful_cond": "cond", "stateful_while": "while"}

# Limits: a document beyond them is refused before anything is decoded or built. Together
# they bound loading: a document at the limits parses, validates, builds and compiles in
# time linear in its size and in a few GB (measured in docs/architecture.md, "Reliability").
MAX_DOCUMENT_BYTES = 1 << 28        # file size (256 MiB)
MAX_FUNCTIONS = 1000
MAX_CALL_DEPTH = 100                # functions run inside each other (calls, branches, loop bodies)
MAX_NODES = 100_000                 # per function
MAX_TOTAL_NODES = 200_000
MAX_LIST = 100_000                  # inputs of a node, items of an ints attr, ...
MAX_RANK = 32
MAX_ELEMENTS = 1 << 28              # of any declared shape (unknown sizes count as 1)
MAX_TENSOR_BYTES = 1 << 27          # one array's payload (128 MiB)
MAX_TOTAL_TENSOR_BYTES = 3 << 26    # all payloads together (192 MiB: 256 MiB of base64)
MAX_NAME = 128
MAX_STRING = 4096                   # str attrs
MAX_STRUCTURE_DEPTH = 64
MAX_SITE_FILE = 255                 # a node's source site (version 3): a file's base name,
MAX_SITE_LINE = (1 << 31) - 1       # and its line, from 1
_INT64 = (-(1 << 63), (1 << 63) - 1)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*\Z")
# a reference "k:i" to output i of node (or input) k
REF_PATTERN = re.compile(r"(0|[1-9][0-9]{0,8}):(0|[1-9][0-9]{0,5})\Z")
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
# dtypes by name: those an array or attr may have; all of them, with `resource` (which only
# types inputs, outputs and variable handles)
DATA_DTYPES = {d.name: d for d in dtypes.ALL if d is not dtypes.resource}
ALL_DTYPES = dict(DATA_DTYPES, resource=dtypes.resource)


def format_error(path, message):
    """The GraphFormatError `path: message` (to raise)."""
    return errors.GraphFormatError(f"{path}: {message}")


# =======================================================================================
# Writing values (export.py)

def shape_doc(shape):
    """A static shape as the document writes it: a list of ints, null for an unknown size."""
    return [None if d is None else int(d) for d in shape]


def encode_array(value):
    """An array as {dtype, shape, data}: its little-endian bytes in base64."""
    arr = np.asarray(value)
    arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)
    d = dtypes.from_numpy(arr.dtype)
    raw = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return {"dtype": d.name, "shape": list(arr.shape), "data": base64.b64encode(raw).decode("ascii")}


def encode_float(v):
    """A float attr: a JSON number, or "nan", "inf", "-inf"."""
    v = float(v)
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


# =======================================================================================
# Reading values (validate.py): each check returns the value as the loader uses it

def kind_of(x):
    """The JSON kind of `x`, for a message: null, bool, object, list, str, int or float."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "bool"
    for t, name in ((dict, "object"), (list, "list"), (str, "str"), (int, "int"), (float, "float")):
        if isinstance(x, t):
            return name
    return type(x).__name__


def check_fields(x, path, required, optional=()):
    """`x` itself: an object with every `required` key and no key but those and `optional`."""
    if not isinstance(x, dict):
        raise format_error(path, f"expected object, got {kind_of(x)}")
    for key in required:
        if key not in x:
            raise format_error(path, f"missing field {key!r}")
    for key in x:
        if key not in required and key not in optional:
            raise format_error(path, f"unknown field {quote(key)}")
    return x


def quote(s):
    """A value from the file, quoted and shortened for a message (never interpreted; a
    container is named, not printed: it may be nested arbitrarily deep)."""
    if isinstance(s, (dict, list, tuple, set)):
        return f"a {kind_of(s)} of {len(s)} items"
    if not isinstance(s, (str, int, float, bool, type(None))):
        return f"a {type(s).__name__}"
    text = repr(s)
    return text if len(text) <= 60 else text[:57] + "..."


def check_int(x, path, lo=_INT64[0], hi=_INT64[1]):
    """An int (not a bool) in [lo, hi]."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise format_error(path, f"expected int, got {kind_of(x)}")
    if not lo <= x <= hi:
        raise format_error(path, f"{x} is out of range [{lo}, {hi}]")
    return int(x)


def check_str(x, path, limit=MAX_STRING):
    """A str of at most `limit` characters."""
    if isinstance(x, str) and len(x) <= limit:
        return str(x)
    raise format_error(path, f"string longer than {limit} characters" if isinstance(x, str) else
                       f"expected str, got {kind_of(x)}")


def _site_file_ok(name):
    """A base name as a site holds it: 1..MAX_SITE_FILE printable characters, no path
    separator (no directory, and nothing a terminal would take as a control sequence)."""
    return 0 < len(name) <= MAX_SITE_FILE and name.isprintable() and "/" not in name and "\\" not in name


def site_doc(site):
    """The document form `[base name, line]` of a node's source site, or None when it has
    none or the name cannot be written as one (too long, control characters)."""
    if site is None:
        return None
    name, line = site
    name = re.split(r"[\\/]", str(name))[-1]
    if not _site_file_ok(name) or isinstance(line, bool) or not isinstance(line, int) or \
            not 0 < line <= MAX_SITE_LINE:
        return None
    return [name, line]


def check_site(x, path):
    """A node's `site`: `[base name, line]` (a DocumentSite)."""
    if x.__class__ is not list or len(x) != 2:
        raise format_error(path, f"expected [file, line], got {quote(x)}")
    name, line = x
    check_str(name, path + "[0]", MAX_SITE_FILE)
    if not _site_file_ok(name):
        raise format_error(path + "[0]", f"{quote(name)} is not a file's base name (printable "
                           f"characters, no '/' or '\\', not empty)")
    return sites.DocumentSite((str(name), check_int(line, path + "[1]", 1, MAX_SITE_LINE)))


def check_name(x, path):
    """A name: letters, digits, _ . / -, starting with a letter or _."""
    check_str(x, path, MAX_NAME)
    if not _NAME.match(x):
        raise format_error(path, f"{quote(x)} is not a valid name (letters, digits, _ . / -; "
                           f"starting with a letter or _)")
    return str(x)


def check_list(x, path, limit=MAX_LIST):
    """`x` itself: a list of at most `limit` items."""
    if not isinstance(x, list):
        raise format_error(path, f"expected list, got {kind_of(x)}")
    if len(x) > limit:
        raise format_error(path, f"{len(x)} items, more than the limit of {limit}")
    return x


def check_dtype(x, path, allow_resource=False):
    """The DType a dtype name names (`resource` only when allowed)."""
    check_str(x, path, 32)
    d = (ALL_DTYPES if allow_resource else DATA_DTYPES).get(x)
    if d is None:
        allowed = sorted(ALL_DTYPES if allow_resource else DATA_DTYPES)
        raise format_error(path, f"unsupported dtype {quote(x)}; expected one of {', '.join(allowed)}")
    return d


def check_shape(x, path, known=False):
    """A static shape as a tuple (None for an unknown size, unless `known`)."""
    check_list(x, path, MAX_RANK)
    dims, count = [], 1
    for k, d in enumerate(x):
        if d is None and not known:
            dims.append(None)
            continue
        dims.append(check_int(d, f"{path}[{k}]", 0, MAX_ELEMENTS))
        count *= dims[-1]
    if count > MAX_ELEMENTS:
        raise format_error(path, f"{count} elements, more than the limit of {MAX_ELEMENTS}")
    return tuple(dims)


def check_array(x, path, budget):
    """{dtype, shape, data} -> a read-only numpy array (payload size checked before decoding)."""
    check_fields(x, path, ("dtype", "shape", "data"))
    return decode_array(x, path, budget)


def decode_array(x, path, budget):
    """The read-only array object `x` describes (its keys not checked);
    `budget[0]` counts the document's array bytes so far."""
    d = check_dtype(x["dtype"], path + ".dtype")
    shape = check_shape(x["shape"], path + ".shape", known=True)
    nbytes = int(np.prod(shape, dtype=np.int64)) * d.np.itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise format_error(path, f"{nbytes} bytes of data, more than the limit of {MAX_TENSOR_BYTES}")
    budget[0] += nbytes
    if budget[0] > MAX_TOTAL_TENSOR_BYTES:
        raise format_error(path, f"the document's arrays exceed {MAX_TOTAL_TENSOR_BYTES} bytes in all")
    data = x["data"]
    if not isinstance(data, str):
        raise format_error(path + ".data", f"expected base64 str, got {kind_of(data)}")
    if len(data) != 4 * ((nbytes + 2) // 3):
        raise format_error(path + ".data", f"{len(data)} base64 characters; {d.name}"
                           f"{list(shape)} needs {nbytes} bytes ({4 * ((nbytes + 2) // 3)} characters)")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise format_error(path + ".data", "not valid base64") from None
    if len(raw) != nbytes:
        raise format_error(path + ".data", f"decodes to {len(raw)} bytes, expected {nbytes}")
    if d is dtypes.bool and raw and max(raw) > 1:
        raise format_error(path + ".data", "bool data must be bytes 0 or 1")
    arr = np.frombuffer(raw, dtype=d.np.newbyteorder("<")).astype(d.np).reshape(shape)
    arr.flags.writeable = False
    return arr


def check_ref(x, path, total):
    """(node, output index) of a reference "k:i", k below `total`."""
    check_str(x, path)
    m = REF_PATTERN.match(x)
    if m is None:
        raise format_error(path, f"{quote(x)} is not a reference 'node:index'")
    k, i = int(m.group(1)), int(m.group(2))
    if k >= total:
        raise format_error(path, f"reference {x!r}: there is no node {k} (this function numbers "
                           f"its inputs and nodes 0..{total - 1})")
    return k, i


class FuncRef:
    """A func attr before building: the callee's name."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def decode_float(x, path):
    """A float attr: a finite JSON number, or "nan", "inf", "-inf"."""
    if isinstance(x, str) and x in _NONFINITE:
        return _NONFINITE[x]
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise format_error(path, f"expected number, got {kind_of(x)}")
    v = float(x)
    if not math.isfinite(v):
        raise format_error(path, "non-finite numbers are written as \"nan\", \"inf\" or \"-inf\"")
    return v


def attr_path(path, key):
    """The path of attr `key` under `path` (`.key`, or `[...]` for a key that is no name)."""
    return f"{path}.{key}" if isinstance(key, str) and _NAME.match(key) else f"{path}[{quote(key)}]"


def check_identifier(s, path):
    """A Python identifier (a namedtuple's type or field name), not a keyword."""
    if not isinstance(s, str) or not s.isidentifier() or keyword.iskeyword(s) or \
            len(s) > MAX_NAME:
        raise format_error(path, f"expected a Python identifier, got {quote(s)}")
    return s
