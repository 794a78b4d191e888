"""The document's schema primitives and limits: field checks, names, dtypes, shapes, arrays.

Every check raises GraphFormatError naming the path of the field (`functions[0].nodes[3]`).
"""
import base64
import binascii
import math
import re

import numpy as np

from defun.runtime import dtypes, errors


FORMAT = "defun.graph"
VERSION = 2
READABLE_VERSIONS = (1, 2)
# Version 1 named a node whose functions have effects by a second op; version 2 flags the
# node (`"stateful": true`) and has one op each.
_V1_STATEFUL_TWINS = {"stateful_call": "call", "stateful_cond": "cond", "stateful_while": "while"}

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
_INT64 = (-(1 << 63), (1 << 63) - 1)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*\Z")
_REF = re.compile(r"(0|[1-9][0-9]{0,8}):(0|[1-9][0-9]{0,5})\Z")
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
# dtypes an array or attr may have; `resource` only types inputs, outputs and variable handles
_DATA_DTYPES = {d.name: d for d in dtypes.ALL if d is not dtypes.resource}
_ALL_DTYPES = dict(_DATA_DTYPES, resource=dtypes.resource)


def _format_error(path, message):
    return errors.GraphFormatError(f"{path}: {message}")



def _shape_doc(shape):
    return [None if d is None else int(d) for d in shape]


def _encode_array(value):
    arr = np.asarray(value)
    arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)
    d = dtypes.from_numpy(arr.dtype)
    raw = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return {"dtype": d.name, "shape": list(arr.shape), "data": base64.b64encode(raw).decode("ascii")}


def _encode_float(v):
    v = float(v)
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


# =======================================================================================
# Import, step 2: validate (no graph is built here)

def _kind(x):
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "bool"
    for t, name in ((dict, "object"), (list, "list"), (str, "str"), (int, "int"), (float, "float")):
        if isinstance(x, t):
            return name
    return type(x).__name__


def _fields(x, path, required, optional=()):
    if not isinstance(x, dict):
        raise _format_error(path, f"expected object, got {_kind(x)}")
    for key in required:
        if key not in x:
            raise _format_error(path, f"missing field {key!r}")
    for key in x:
        if key not in required and key not in optional:
            raise _format_error(path, f"unknown field {_show(key)}")
    return x


def _show(s):
    """A value from the file, quoted and shortened for a message (never interpreted; a
    container is named, not printed: it may be nested arbitrarily deep)."""
    if isinstance(s, (dict, list, tuple, set)):
        return f"a {_kind(s)} of {len(s)} items"
    if not isinstance(s, (str, int, float, bool, type(None))):
        return f"a {type(s).__name__}"
    text = repr(s)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_int(x, path, lo=_INT64[0], hi=_INT64[1]):
    if isinstance(x, bool) or not isinstance(x, int):
        raise _format_error(path, f"expected int, got {_kind(x)}")
    if not lo <= x <= hi:
        raise _format_error(path, f"{x} is out of range [{lo}, {hi}]")
    return int(x)


def _check_str(x, path, limit=MAX_STRING):
    if not isinstance(x, str):
        raise _format_error(path, f"expected str, got {_kind(x)}")
    if len(x) > limit:
        raise _format_error(path, f"string longer than {limit} characters")
    return str(x)


def _check_name(x, path):
    _check_str(x, path, MAX_NAME)
    if not _NAME.match(x):
        raise _format_error(path, f"{_show(x)} is not a valid name (letters, digits, _ . / -; "
                            f"starting with a letter or _)")
    return str(x)


def _check_list(x, path, limit=MAX_LIST):
    if not isinstance(x, list):
        raise _format_error(path, f"expected list, got {_kind(x)}")
    if len(x) > limit:
        raise _format_error(path, f"{len(x)} items, more than the limit of {limit}")
    return x


def _check_dtype(x, path, allow_resource=False):
    _check_str(x, path, 32)
    d = (_ALL_DTYPES if allow_resource else _DATA_DTYPES).get(x)
    if d is None:
        allowed = sorted(_ALL_DTYPES if allow_resource else _DATA_DTYPES)
        raise _format_error(path, f"unsupported dtype {_show(x)}; expected one of {', '.join(allowed)}")
    return d


def _check_shape(x, path, known=False):
    _check_list(x, path, MAX_RANK)
    dims, count = [], 1
    for k, d in enumerate(x):
        if d is None and not known:
            dims.append(None)
            continue
        dims.append(_check_int(d, f"{path}[{k}]", 0, MAX_ELEMENTS))
        count *= dims[-1]
    if count > MAX_ELEMENTS:
        raise _format_error(path, f"{count} elements, more than the limit of {MAX_ELEMENTS}")
    return tuple(dims)


def _check_array(x, path, budget):
    """{dtype, shape, data} -> a read-only numpy array (payload size checked before decoding)."""
    _fields(x, path, ("dtype", "shape", "data"))
    return _decode_array(x, path, budget)


def _decode_array(x, path, budget):
    d = _check_dtype(x["dtype"], path + ".dtype")
    shape = _check_shape(x["shape"], path + ".shape", known=True)
    nbytes = int(np.prod(shape, dtype=np.int64)) * d.np.itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise _format_error(path, f"{nbytes} bytes of data, more than the limit of {MAX_TENSOR_BYTES}")
    budget[0] += nbytes
    if budget[0] > MAX_TOTAL_TENSOR_BYTES:
        raise _format_error(path, f"the document's arrays exceed {MAX_TOTAL_TENSOR_BYTES} bytes in all")
    data = x["data"]
    if not isinstance(data, str):
        raise _format_error(path + ".data", f"expected base64 str, got {_kind(data)}")
    if len(data) != 4 * ((nbytes + 2) // 3):
        raise _format_error(path + ".data", f"{len(data)} base64 characters; {d.name}"
                            f"{list(shape)} needs {nbytes} bytes ({4 * ((nbytes + 2) // 3)} characters)")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise _format_error(path + ".data", "not valid base64") from None
    if len(raw) != nbytes:
        raise _format_error(path + ".data", f"decodes to {len(raw)} bytes, expected {nbytes}")
    if d is dtypes.bool and raw and max(raw) > 1:
        raise _format_error(path + ".data", "bool data must be bytes 0 or 1")
    arr = np.frombuffer(raw, dtype=d.np.newbyteorder("<")).astype(d.np).reshape(shape)
    arr.flags.writeable = False
    return arr


def _check_ref(x, path, total):
    _check_str(x, path)
    m = _REF.match(x)
    if m is None:
        raise _format_error(path, f"{_show(x)} is not a reference 'node:index'")
    k, i = int(m.group(1)), int(m.group(2))
    if k >= total:
        raise _format_error(path, f"reference {x!r}: there is no node {k} (this function numbers "
                            f"its inputs and nodes 0..{total - 1})")
    return k, i


class _FuncRef:
    """A func attr before building: the callee's name."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def _decode_float(x, path):
    if isinstance(x, str) and x in _NONFINITE:
        return _NONFINITE[x]
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise _format_error(path, f"expected number, got {_kind(x)}")
    v = float(x)
    if not math.isfinite(v):
        raise _format_error(path, "non-finite numbers are written as \"nan\", \"inf\" or \"-inf\"")
    return v


def _attr_path(path, key):
    return f"{path}.{key}" if isinstance(key, str) and _NAME.match(key) else f"{path}[{_show(key)}]"


