"""Data types: a small closed set, each tied to one numpy dtype.

Floats (float16/32/64), complex (complex64/128), signed and unsigned integers (int8 ...
int64, uint8 ... uint64), bool, and the `resource` of variable handles. `promoted(a, b)`
is the one rule two integer tensors of different dtypes follow (numpy's), see there.
"""
import builtins

import numpy as np

from defun.runtime import errors

__all__ = ["DType", "as_dtype", "float16", "float32", "float64", "complex64", "complex128",
           "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "bool", "resource", "variant", "promoted"]


class DType:
    """A tensor element type (`df.float32`, ...)."""

    __slots__ = ("name", "as_numpy_dtype", "is_floating", "is_integer", "is_bool", "is_complex",
                 "is_unsigned", "is_inexact", "_np")

    def __init__(self, name, np_dtype, is_floating=False, is_integer=False, is_bool=False,
                 is_complex=False):
        self.name = name
        self._np = np.dtype(np_dtype)
        self.as_numpy_dtype = self._np.type
        self.is_floating = is_floating
        self.is_integer = is_integer
        self.is_bool = is_bool
        self.is_complex = is_complex            # as TF: complex dtypes are not is_floating
        self.is_unsigned = is_integer and self._np.kind == "u"
        # floating or complex: the dtypes gradients flow through
        self.is_inexact = is_floating or is_complex

    @property
    def np(self):
        """The numpy dtype object (np.dtype instance)."""
        return self._np

    @property
    def is_numeric(self):
        """Floating or integer (real numbers: what ranges and orderings take; not complex)."""
        return self.is_floating or self.is_integer

    @property
    def real_dtype(self):
        """The dtype of the real and imaginary parts: complex64 -> float32; others: itself."""
        return _REAL_OF.get(self, self)

    def __repr__(self):
        return f"df.{self.name}"

    # DTypes are singletons; `==` also accepts what `as_dtype` does (`t.dtype == np.float32`).
    def __eq__(self, other):
        if self is other:
            return True
        if isinstance(other, DType):
            return False
        try:
            return as_dtype(other) is self
        except TypeError:
            return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash(self.name)

    def __reduce__(self):
        return as_dtype, (self.name,)


float16, float32, float64 = (DType(n, getattr(np, n), is_floating=True)
                             for n in ("float16", "float32", "float64"))
complex64, complex128 = (DType(n, getattr(np, n), is_complex=True) for n in ("complex64", "complex128"))
int8, int16, int32, int64, uint8, uint16, uint32, uint64 = (
    DType(n, getattr(np, n), is_integer=True)
    for n in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"))
bool = DType("bool", np.bool_, is_bool=True)  # noqa: A001 - the public name is df.bool
resource = DType("resource", object)
variant = DType("variant", object)  # internal: opaque Python values (e.g. TensorArray-like)

ALL = (float16, float32, float64, complex64, complex128, int8, int16, int32, int64,
       uint8, uint16, uint32, uint64, bool, resource)
_REAL_OF = {complex64: float32, complex128: float64}
_COMPLEX_OF = {float32: complex64, float64: complex128}
_BY_NAME = {d.name: d for d in ALL}
# numpy dtype -> DType; keyed by np.dtype so lookups from array.dtype are one dict hit.
_BY_NUMPY = {d.np: d for d in ALL if d is not resource}
_BY_NUMPY[np.dtype(np.bool_)] = bool


def native_order(np_dtype):
    """`np_dtype` in this machine's byte order (itself when it has no byte order), or None
    for what is not a numpy dtype."""
    try:
        return np.dtype(np_dtype).newbyteorder("=")
    except TypeError:
        return None


def from_numpy(np_dtype):
    """DType of a numpy dtype; raises for dtypes defun does not support (object, str, ...)."""
    d = _BY_NUMPY.get(np_dtype)
    if d is None and native_order(np_dtype) in _BY_NUMPY:
        npd = np.dtype(np_dtype)
        raise errors.InvalidArgumentError(
            f"dtype {npd.str!r} is {npd.name} in {'big' if npd.byteorder == '>' else 'little'}-endian "
            f"byte order, not this machine's; arrays of it are converted when they become tensors, "
            f"but a dtype names the machine's order: use {npd.name!r}")
    if d is None:
        raise errors.InvalidArgumentError(
            f"unsupported dtype {np.dtype(np_dtype).name!r}; defun supports "
            + ", ".join(x.name for x in ALL if x is not resource))
    return d


def as_dtype(x):
    """DType from a DType, a numpy dtype/type or a name: `as_dtype('float32') is df.float32`."""
    if isinstance(x, DType):
        return x
    # Python scalar types mean what their values become (API.md's defaults), not numpy's.
    if x is float:
        return float32
    if x is int:
        return int32
    if x is builtins.bool:
        return bool
    if x is complex:
        return complex128
    if x is None:  # np.dtype(None) would silently mean float64
        raise TypeError("cannot interpret None as a dtype")
    if isinstance(x, str):
        d = _BY_NAME.get(x)
        if d is None:
            raise TypeError(f"unknown dtype name {x!r}; expected one of {sorted(_BY_NAME)}")
        return d
    try:
        npd = np.dtype(x)
    except TypeError:
        raise TypeError(f"cannot interpret {x!r} as a dtype") from None
    d = _BY_NUMPY.get(npd)
    if d is None:
        d = _BY_NUMPY.get(native_order(npd))   # another byte order names the same type
    if d is None:
        raise TypeError(f"unsupported dtype {npd.name!r} ({npd.str!r}); defun supports "
                        + ", ".join(x.name for x in ALL if x is not resource))
    return d


_KIND_NAMES = {"f": "floating", "c": "complex", "i": "integer", "u": "unsigned", "b": "bool"}


def kinds_text(kinds):
    """Words for numpy dtype kinds: kinds_text("fi") == "floating or integer"."""
    return " or ".join(_KIND_NAMES[k] for k in kinds if k in _KIND_NAMES)


def complex_of(dtype, op_name):
    """The complex dtype with parts of float `dtype` (float32 -> complex64), or a typed error
    naming `op_name` (float16 has no complex counterpart, as in TF and numpy)."""
    c = _COMPLEX_OF.get(dtype)
    if c is None:
        raise errors.InvalidArgumentError(
            f"{op_name}: expected float32 or float64 parts, got {dtype.name}; use df.cast")
    return c


# The integer dtypes added after int32/int64 (issue 22): integer tensors of different dtypes
# where one of them is among these take numpy's result type, as numpy does (int8 + uint8 ->
# int16; uint64 with a signed integer -> float64); int32 with int64, and any other mix of
# dtypes, must match (use df.cast), as the first contract says.
_SMALL_INTS = frozenset((int8, int16, uint8, uint16, uint32, uint64))


def promoted(*dts):
    """The dtype tensors of dtypes `dts` (not all the same) are computed in, or None if they
    must match."""
    if not all(d.is_integer for d in dts) or not any(d in _SMALL_INTS for d in dts):
        return None
    return _BY_NUMPY.get(np.result_type(*[d.np for d in dts]))
