"""Data types: a small closed set, each tied to one numpy dtype."""
import builtins

import numpy as np

from defun.runtime import errors

__all__ = ["DType", "as_dtype", "float16", "float32", "float64", "int32", "int64",
           "bool", "resource", "variant"]


class DType:
    """A tensor element type (`df.float32`, ...)."""

    __slots__ = ("name", "as_numpy_dtype", "is_floating", "is_integer", "is_bool", "_np")

    def __init__(self, name, np_dtype, is_floating=False, is_integer=False, is_bool=False):
        self.name = name
        self._np = np.dtype(np_dtype)
        self.as_numpy_dtype = self._np.type
        self.is_floating = is_floating
        self.is_integer = is_integer
        self.is_bool = is_bool

    @property
    def np(self):
        """The numpy dtype object (np.dtype instance)."""
        return self._np

    @property
    def is_numeric(self):
        return self.is_floating or self.is_integer

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


float16 = DType("float16", np.float16, is_floating=True)
float32 = DType("float32", np.float32, is_floating=True)
float64 = DType("float64", np.float64, is_floating=True)
int32 = DType("int32", np.int32, is_integer=True)
int64 = DType("int64", np.int64, is_integer=True)
bool = DType("bool", np.bool_, is_bool=True)  # noqa: A001 - the public name is df.bool
resource = DType("resource", object)
variant = DType("variant", object)  # internal: opaque Python values (e.g. TensorArray-like)

ALL = (float16, float32, float64, int32, int64, bool, resource)
_BY_NAME = {d.name: d for d in ALL}
# numpy dtype -> DType; keyed by np.dtype so lookups from array.dtype are one dict hit.
_BY_NUMPY = {d.np: d for d in ALL if d is not resource}
_BY_NUMPY[np.dtype(np.bool_)] = bool


def from_numpy(np_dtype):
    """DType of a numpy dtype; raises for dtypes defun does not support (object, complex, ...)."""
    d = _BY_NUMPY.get(np_dtype)
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
        raise TypeError(f"unsupported dtype {npd.name!r}")
    return d


_KIND_NAMES = {"f": "floating", "i": "integer", "u": "unsigned", "b": "bool"}


def kinds_text(kinds):
    """Words for numpy dtype kinds: kinds_text("fi") == "floating or integer"."""
    return " or ".join(_KIND_NAMES[k] for k in kinds if k in _KIND_NAMES)
