"""Attr types: the one table saying, per type, what a valid value is and how it maps to JSON.

The registry checks declared type names against it, `graph.verify` checks values with it,
and `graph.serialize` encodes and decodes with it (through a writer and a reader that own
the file format's primitives: arrays, function references, limits, error messages).
"""
import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.dtypes import DType

__all__ = ["AttrType", "TYPES", "check", "is_function", "one_of", "choices"]


class AttrType:
    """One attr type: `check(v)` -> bool, `expected` (words for a valid value),
    `encode(v, writer)` -> JSON value, `decode(x, path, reader)` -> value."""

    __slots__ = ("name", "check", "expected", "encode", "decode")

    def __init__(self, name, check, expected, encode=None, decode=None):
        self.name, self.check, self.expected = name, check, expected
        self.encode, self.decode = encode, decode

    def __repr__(self):
        return f"<attr type {self.name}>"


def is_function(v):
    """True for a function graph (graph.ir.Graph says so with `is_function_graph`)."""
    return getattr(v, "is_function_graph", False) is True


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_float(v):
    return isinstance(v, (float, np.floating)) or _is_int(v)


def _tuple_of(pred):
    return lambda v: isinstance(v, tuple) and all(pred(x) for x in v)


def _slice_item(v):
    if v is None or v is Ellipsis or _is_int(v):
        return True
    return isinstance(v, slice) and all(p is None or _is_int(p) for p in (v.start, v.stop, v.step))


def _tensor_value(v):
    if not isinstance(v, np.ndarray):
        return False
    try:
        dtypes.from_numpy(v.dtype)
    except errors.InvalidArgumentError:
        return False
    return True


def _int(v):
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"expected int, got bool {v!r}")
    return int(v)


def _items(x, p, r, item):
    return tuple(item(v, f"{p}[{k}]") for k, v in enumerate(r.list(x, p)))


# --------------------------------------------------------------------- opt_ints, slices
def _encode_opt_ints(v):
    if v is None:
        return None
    return [_int(x) for x in v] if isinstance(v, (tuple, list)) else _int(v)


def _decode_opt_ints(x, p, r):
    if x is None:
        return None
    if isinstance(x, list):
        return _items(x, p, r, r.int)
    if isinstance(x, bool) or not isinstance(x, int):
        raise r.error(p, f"expected null, int or list of int, got {r.kind(x)}")
    return r.int(x, p)


def _encode_slice_item(v):
    if v is None:
        return None
    if isinstance(v, (int, np.integer)):
        return _int(v)
    if v is Ellipsis:
        return "..."
    if isinstance(v, slice):
        return [None if q is None else _int(q) for q in (v.start, v.stop, v.step)]
    raise TypeError(f"unsupported slice item {v!r}")


def _decode_slice_item(r):
    def item(x, p):
        if x is None:
            return None
        if x == "...":
            return Ellipsis
        if isinstance(x, list):
            if len(x) != 3:
                raise r.error(p, f"a slice is [start, stop, step], got {len(x)} items")
            return slice(*[None if q is None else r.int(q, f"{p}[{k}]") for k, q in enumerate(x)])
        if isinstance(x, bool) or not isinstance(x, int):
            raise r.error(p, f"expected int, null, \"...\" or [start, stop, step], got {r.kind(x)}")
        return r.int(x, p)
    return item


def _bool_decode(x, p, r):
    if not isinstance(x, bool):
        raise r.error(p, f"expected bool, got {r.kind(x)}")
    return bool(x)


_LIST = [
    AttrType("int", _is_int, "a Python int (not a bool)",
             lambda v, w: _int(v), lambda x, p, r: r.int(x, p)),
    AttrType("float", _is_float, "a Python float (an int is accepted)",
             lambda v, w: w.float(v), lambda x, p, r: r.float(x, p)),
    AttrType("bool", lambda v: isinstance(v, (bool, np.bool_)), "True or False",
             lambda v, w: bool(v), _bool_decode),
    AttrType("str", lambda v: isinstance(v, str), "a str",
             lambda v, w: str(v), lambda x, p, r: r.str(x, p)),
    AttrType("ints", _tuple_of(_is_int), "a tuple of ints",
             lambda v, w: [_int(x) for x in v], lambda x, p, r: _items(x, p, r, r.int)),
    AttrType("shape", _tuple_of(lambda d: d is None or (_is_int(d) and d >= 0)),
             "a tuple of non-negative ints or None (unknown size)",
             lambda v, w: [None if d is None else int(d) for d in v], lambda x, p, r: r.shape(x, p)),
    AttrType("dtype", lambda v: isinstance(v, DType), "a df.DType such as df.float32",
             lambda v, w: dtypes.as_dtype(v).name, lambda x, p, r: r.dtype(x, p)),
    AttrType("dtypes", _tuple_of(lambda d: isinstance(d, DType)), "a tuple of df.DType",
             lambda v, w: [dtypes.as_dtype(x).name for x in v],
             lambda x, p, r: _items(x, p, r, r.dtype)),
    AttrType("tensor", _tensor_value,
             "a numpy array of a supported dtype (float16/32/64, int32/64, bool)",
             lambda v, w: w.array(v), lambda x, p, r: r.array(x, p)),
    AttrType("func", is_function, "a function Graph",
             lambda v, w: w.func(v), lambda x, p, r: r.func(x, p)),
    AttrType("funcs", _tuple_of(is_function), "a tuple of function Graphs",
             lambda v, w: [w.func(x) for x in v], lambda x, p, r: _items(x, p, r, r.func)),
    AttrType("opt_int", lambda v: v is None or _is_int(v), "an int or None",
             lambda v, w: None if v is None else _int(v),
             lambda x, p, r: None if x is None else r.int(x, p)),
    # reductions store a single axis as an int: `axis=1` and `axis=(1,)` are both valid
    AttrType("opt_ints", lambda v: v is None or _is_int(v) or _tuple_of(_is_int)(v),
             "None, an int, or a tuple of ints",
             lambda v, w: _encode_opt_ints(v), _decode_opt_ints),
    AttrType("slices", _tuple_of(_slice_item),
             "a tuple of ints, slices with int/None bounds, None (new axis) or Ellipsis",
             lambda v, w: [_encode_slice_item(x) for x in v],
             lambda x, p, r: _items(x, p, r, _decode_slice_item(r))),
    # never exported: a Python callable or object that lives only in this process
    AttrType("transient", lambda v: True, "anything (never exported)"),
]

TYPES = {t.name: t for t in _LIST}


# --------------------------------------------------------------------- enumerated strings
def one_of(*values):
    """The attr type whose valid values are the strings `values`, made once per value list:
    `attrs={"mode": one_of("CONSTANT", "REFLECT", "SYMMETRIC")}`. A traced graph (verify) and
    a loaded document (the decoder) are checked against the list alike, so a kernel never
    sees a value its op did not declare. In JSON it is a string.
    """
    if not values or not all(isinstance(v, str) and v and "," not in v for v in values):
        raise ValueError(f"one_of: expected non-empty strings without commas, got {values!r}")
    name = f"one_of({','.join(values)})"
    if name not in TYPES:
        allowed = frozenset(values)
        shown = ", ".join(repr(v) for v in values)

        def decode(x, p, r):
            x = r.str(x, p)
            if x not in allowed:
                raise r.error(p, f"expected one of {shown}, got {x[:60]!r}")
            return x
        TYPES[name] = AttrType(name, lambda v: isinstance(v, str) and v in allowed, f"one of {shown}",
                               lambda v, w: str(v), decode)
    return name


def choices(type_name):
    """The values an enumerated attr type allows (a tuple), or None for other types."""
    if type_name.startswith("one_of(") and type_name.endswith(")"):
        return tuple(type_name[len("one_of("):-1].split(","))
    return None


def check(type_name, value):
    """True if `value` is a valid attr of type `type_name` (e.g. "ints")."""
    return TYPES[type_name].check(value)
