"""Tensors: the `Tensor` base (operators), eager tensors, resource handles, conversion."""
import itertools
import numbers

import numpy as np

from defun.runtime import convert, dtypes, errors
from defun.runtime.context import DEVICE, state

__all__ = ["Tensor", "EagerTensor", "ResourceHandle", "HandleData", "tensor_id",
           "to_array", "weak_scalar_tensor", "weak_or_raise", "constant", "convert_to_tensor", "is_tensor_like"]

# Stable per-object tensor ids: a counter, so an id is never reused while a tape may
# still refer to it (id() of a dead object can be).
_next_id = itertools.count(1).__next__
next_tensor_id = _next_id  # for code that builds tensors without calling __init__ (execute)


class ByIdentity:
    """`==` and `hash` by identity, so tensors and variables can be dict keys (`df.equal`
    compares values); numpy defers its binary operators to them (ndarray + tensor ->
    tensor.__radd__)."""

    __slots__ = ()
    __array_ufunc__ = None
    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other


class Tensor(ByIdentity):
    """Base of eager and symbolic tensors. Operators are installed by `runtime.ops`.

    `==` and `hash` stay identity so tensors can be dict keys; use `df.equal`.
    """

    __slots__ = ()

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def device(self):
        return DEVICE


class EagerTensor(Tensor):
    """A tensor holding a numpy value; immutable."""

    __slots__ = ("_value", "_id", "__weakref__")

    def __init__(self, value):
        self._value = value
        self._id = _next_id()

    @property
    def shape(self):
        return self._value.shape

    @property
    def dtype(self):
        return dtypes._BY_NUMPY[self._value.dtype]

    @property
    def name(self):
        return None

    def numpy(self):
        """The value as a read-only numpy array (a view; no copy)."""
        v = np.asarray(self._value).view()
        v.flags.writeable = False
        return v

    def __array__(self, dtype=None, copy=None):
        # Without a copy numpy gets a read-only view: writing through `np.asarray(t)` would
        # change an immutable tensor (and every value a tape saved from it).
        v = np.asarray(self._value)
        if dtype is not None and v.dtype != dtype:
            if copy is False:
                raise ValueError(f"converting a {self.dtype.name} tensor to {np.dtype(dtype).name} "
                                 f"needs a copy, but copy=False")
            return v.astype(dtype)
        if copy:
            return v.copy()
        v = v.view()
        v.flags.writeable = False
        return v

    def __float__(self):
        return float(self._value)

    def __int__(self):
        return int(self._value)

    def __index__(self):
        if not np.issubdtype(self._value.dtype, np.integer):
            raise TypeError(f"only integer tensors can be used as an index, got {self.dtype.name}")
        return int(self._value)

    def __bool__(self):
        return bool(self._value)

    def __len__(self):
        if not self._value.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._value.shape[0]

    def __iter__(self):
        if not self._value.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._value.shape[0]))

    def __repr__(self):
        body = np.array2string(np.asarray(self._value), separator=", ", threshold=20)
        return f"<df.Tensor shape={self.shape} dtype={self.dtype.name} numpy={body}>"

    __str__ = __repr__


class HandleData:
    """What a resource handle points at: `shape_and_type == [(shape, dtype)]`."""

    __slots__ = ("shape_and_type",)

    def __init__(self, shape, dtype):
        self.shape_and_type = [(tuple(shape), dtype)]

    def __repr__(self):
        (shape, dtype), = self.shape_and_type
        return f"HandleData(shape={shape}, dtype={dtype.name})"


class ResourceHandle(EagerTensor):
    """A scalar tensor of dtype `resource` whose value is a mutable variable container."""

    __slots__ = ("handle_data",)

    def __init__(self, container, handle_data):
        super().__init__(container)
        self.handle_data = handle_data

    @property
    def shape(self):
        return ()

    @property
    def dtype(self):
        return dtypes.resource

    def numpy(self):
        raise TypeError("a resource handle has no numpy value; read the variable instead")

    __array__ = None

    def __repr__(self):
        return f"<df.Tensor dtype=resource handle_data={self.handle_data!r}>"


def tensor_id(t):
    """The stable integer id of a tensor (eager or symbolic)."""
    return t._id


def is_tensor_like(x):
    return isinstance(x, (Tensor, np.ndarray, np.generic, numbers.Number, list, tuple)) or \
        hasattr(x, "_as_tensor")


# A Python complex alone is complex128, as in TF (floats default to float32, as TF does too)
_PY_DEFAULT = {bool: np.dtype(np.bool_), int: np.dtype(np.int32), float: np.dtype(np.float32),
               complex: np.dtype(np.complex128)}
_NUMPY_DEFAULTS = {np.dtype(np.float64): np.dtype(np.float32), np.dtype(np.int64): np.dtype(np.int32)}


def _python_kind(value):
    """bool | int | float | complex for Python scalars, else None."""
    if isinstance(value, bool):
        return bool
    if isinstance(value, numbers.Integral) and not isinstance(value, np.generic):
        return int
    if isinstance(value, numbers.Real) and not isinstance(value, np.generic):
        return float
    if isinstance(value, numbers.Complex) and not isinstance(value, np.generic):
        return complex
    return None


def to_array(value, dtype=None):
    """Convert a Python/numpy value to a numpy array of a supported dtype.

    `dtype` (np.dtype) is the weak-typing target: Python scalars and lists adopt it.
    Without it, Python floats become float32 and ints int32 (numpy arrays keep theirs).
    Raises InvalidArgumentError for a Python float meeting an integer dtype, or for a
    numpy array whose dtype differs from `dtype`.
    """
    if dtype is not None and dtype not in dtypes._BY_NUMPY:     # e.g. a big-endian array's
        dtype = dtypes.native_order(dtype) or dtype
    if isinstance(value, (np.ndarray, np.generic)):
        if isinstance(value, np.ma.MaskedArray):
            raise masked_array_error()
        # A copy: tensors are immutable, so they must not share memory with an array the
        # caller may still change (numpy scalars are immutable and become fresh arrays).
        arr = np.array(value, copy=True) if isinstance(value, np.ndarray) else np.asarray(value)
        if arr.dtype not in dtypes._BY_NUMPY and dtypes.native_order(arr.dtype) in dtypes._BY_NUMPY:
            arr = arr.astype(dtypes.native_order(arr.dtype))    # big-endian: same values, native order
        if arr.dtype not in dtypes._BY_NUMPY:
            dtypes.from_numpy(arr.dtype)  # raises, listing the supported dtypes
        if dtype is not None and arr.dtype != dtype:
            raise errors.InvalidArgumentError(
                f"cannot convert a {arr.dtype.name} array to {np.dtype(dtype).name}; use df.cast")
        return arr
    kind = _python_kind(value)
    if kind is None:
        if isinstance(value, (list, tuple)):
            arr = _list_to_array(value, dtype)
            return arr
        raise TypeError(f"cannot convert {type(value).__name__} value {value!r} to a tensor")
    if dtype is None:
        if kind is int and not _INT32_MIN <= value <= _INT32_MAX:
            return np.asarray(value, _wide_int(value))   # too big for int32: int64, as TF does
        return np.asarray(value, _PY_DEFAULT[kind])
    return _python_scalar_to(value, kind, dtype)


def masked_array_error():
    """The TypeError for a numpy masked array given as a value: converting it would drop its
    mask (tensors have none), so it is refused."""
    return TypeError("a numpy masked array cannot become a tensor: its mask would be lost; pass "
                     "a.filled(value) for the masked entries you want, or a.data to ignore the mask")


_INT32_MIN, _INT32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)


def _wide_int(value):
    info = np.iinfo(np.int64)
    if not info.min <= value <= info.max:
        raise errors.InvalidArgumentError(f"Python int {value} does not fit in int64")
    return np.dtype(np.int64)


def _python_scalar_to(value, kind, dtype):
    _refuse_narrowing(kind, dtype, value)
    if kind is int and dtype.kind == "b":
        raise errors.InvalidArgumentError(
            f"cannot use Python int {value!r} with a bool tensor; use True/False")
    if kind is int and dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise errors.InvalidArgumentError(f"Python int {value} does not fit in {dtype.name}")
    return np.asarray(value, dtype)


# Weakly typed Python numbers met by eager ops, as tensors: `x * 1.01` in a loop converts
# 1.01 once per dtype instead of on every call (-1.5 us per op). The key holds the type
# because 1 == 1.0 == True share a hash; their arrays are read-only, so sharing is safe.
_weak_scalars = {}
_WEAK_SCALARS_MAX = 1024  # distinct numbers kept; the cache starts over when full


def weak_scalar_tensor(value, dtype):
    """An eager tensor of Python int or float `value` converted to numpy `dtype`, or None.

    None when `value` is no Python int or float, is a float zero (0.0 and -0.0 are equal
    keys), or does not convert: the caller then converts it the usual way (which reports
    why). Same result as `EagerTensor(to_array(value, dtype))`, shared between calls.
    """
    kind = type(value)
    if kind is not float and kind is not int:
        return None
    key = (kind, value, dtype)
    t = _weak_scalars.get(key)
    if t is None:
        if kind is float and value == 0.0:
            return None
        try:
            arr = _python_scalar_to(value, kind, dtype)
        except Exception:
            return None
        arr.flags.writeable = False
        if len(_weak_scalars) >= _WEAK_SCALARS_MAX:
            _weak_scalars.clear()
        t = _weak_scalars[key] = EagerTensor(arr)
    return t


def _list_to_array(value, dtype):
    try:
        arr = np.asarray(value)
    except ValueError as e:
        raise errors.InvalidArgumentError(f"cannot convert a ragged list to a tensor: {e}") from None
    if arr.dtype == object:
        # A list holding tensors: stack their values.
        try:
            arr = np.asarray([np.asarray(v) for v in value])
        except Exception:
            raise TypeError("cannot convert a list of mixed objects to a tensor") from None
    if arr.dtype.kind == "c" and all_python(value):
        kind = complex
    elif arr.dtype.kind == "f" and all_python(value):
        kind = float
    elif arr.dtype.kind in "iu" and all_python(value):
        kind = int
    elif arr.dtype.kind == "b":
        kind = bool
    else:
        kind = None
    if kind is not None:
        if dtype is None:
            if kind is int and arr.size and not (_INT32_MIN <= arr.min() and arr.max() <= _INT32_MAX):
                return arr  # int64: a value does not fit in int32 (as TF does)
            return arr.astype(_PY_DEFAULT[kind])
        _refuse_narrowing(kind, dtype, None)
        if kind is int and dtype.kind in "iu" and arr.size:
            _check_int_range(arr, dtype)
        return arr.astype(dtype)
    if arr.dtype not in dtypes._BY_NUMPY and dtypes.native_order(arr.dtype) in dtypes._BY_NUMPY:
        arr = arr.astype(dtypes.native_order(arr.dtype))
    if arr.dtype not in dtypes._BY_NUMPY:
        if arr.dtype == object and _holds_weak(value):     # made a tensor by weak_or_raise
            raise TypeError("a list holding numbers an autograph `if` joined is known only in a graph")
        raise errors.InvalidArgumentError(f"unsupported dtype {arr.dtype.name!r}")
    if dtype is not None and arr.dtype != dtype:
        raise errors.InvalidArgumentError(
            f"cannot convert a {arr.dtype.name} value to {np.dtype(dtype).name}; use df.cast")
    return arr


def _holds_weak(value):
    """True if a nested list or tuple holds numbers an autograph `if` joined (`_weak_tensor`)."""
    return any(_holds_weak(v) if isinstance(v, (list, tuple)) else hasattr(v, "_weak_tensor") for v in value)


def _stand_ins(value):
    """Nested list `value` with each joined number as a Python number of its kind."""
    return [_stand_ins(v) if isinstance(v, (list, tuple)) else v._stand_in if hasattr(v, "_weak_tensor")
            else v for v in value]


def _refuse_narrowing(kind, dtype, value):
    """Refuse Python numbers of `kind` (one, `value`; or a list of them, None) that a `dtype`
    tensor cannot hold: complex numbers but in a complex tensor, floats in an integer or
    bool one."""
    if kind is complex and dtype.kind != "c":
        raise errors.InvalidArgumentError(
            f"cannot use {_python_numbers(kind, value)} with {with_article(dtype.name)} tensor; "
            f"use df.complex or df.cast to make the tensor complex")
    if kind is float and dtype.kind in "iub":
        raise errors.InvalidArgumentError(
            f"cannot use {_python_numbers(kind, value)} with {with_article(dtype.name)} tensor; "
            f"use df.cast or {'integer values' if value is None else 'an integer value'}")


def _python_numbers(kind, value):
    """'Python float 0.5', or for a list (`value` None) 'a list of Python floats'."""
    if value is not None:
        return f"Python {kind.__name__} {value!r}"
    return "a list of Python complex numbers" if kind is complex else "a list of Python floats"


def _check_int_range(arr, dtype):
    info = np.iinfo(dtype)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < info.min or hi > info.max:
        raise errors.InvalidArgumentError(
            f"Python int {lo if lo < info.min else hi} does not fit in {np.dtype(dtype).name}")


def all_python(value):
    """True if a nested list holds only Python scalars (weakly typed)."""
    if isinstance(value, (list, tuple)):
        return all(all_python(v) for v in value)
    return _python_kind(value) is not None


def constant(value, dtype=None, name=None):
    """An eager tensor holding a copy of `value` (scalar, nested list or array).

    >>> df.constant([1, 2], df.float32)
    <df.Tensor shape=(2,) dtype=float32 numpy=[1., 2.]>

    While tracing, the value becomes a constant node of the graph.
    """
    if isinstance(value, Tensor):
        return convert_to_tensor(value, dtype)
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(f"constant: {masked_array_error()}")
    if dtype is not None:
        npd = dtypes.as_dtype(dtype).np
        if isinstance(value, (np.ndarray, np.generic)) or _python_kind(value) is float or \
                isinstance(value, (list, tuple)):
            try:
                arr = np.array(value, dtype=npd)  # explicit dtype: a deliberate cast
            except OverflowError as e:  # a Python int that does not fit (numpy would wrap)
                raise errors.InvalidArgumentError(f"cannot make a {npd.name} constant: {e}") from None
            except TypeError as e:
                return weak_or_raise(value, npd, e)
            if npd.kind in "iub" and not isinstance(value, (np.ndarray, np.generic)) and \
                    all_python(value) and np.any(np.asarray(value, dtype=np.float64) != arr):
                # Python numbers are not cast silently (1.5 -> 1): only numpy arrays are.
                raise errors.InvalidArgumentError(
                    f"cannot make a {npd.name} constant from {value!r:.60}: the values are not "
                    f"exactly representable; round them or use df.cast")
        else:
            try:
                arr = to_array(value, npd)
            except TypeError as e:
                return weak_or_raise(value, npd, e)
    else:
        try:
            arr = to_array(value)  # a fresh array: to_array copies caller-owned arrays
        except TypeError as e:
            return weak_or_raise(value, None, e)
    g = state.graph
    if g is not None:
        return g.constant(arr, name)
    return EagerTensor(arr)


def weak_or_raise(value, dtype, error):
    """After to_array refused `value` (TypeError `error`): for numbers an autograph `if` joined
    (known when the graph runs) their tensor of numpy `dtype`; else `error`."""
    if hasattr(value, "_weak_tensor"):
        return value._weak_tensor(dtype)
    if isinstance(value, (list, tuple)) and _holds_weak(value):
        # as the same list of Python numbers: the dtype given, else its first tensor's, else
        # the one to_array gives the list (Python numbers standing in for the joined ones)
        if dtype is None:
            dtype = convert.first_dtype(value, _is_tensor) or to_array(_stand_ins(value)).dtype
        return convert.pack_list(value, np.dtype(dtype), _is_tensor, _constant_of)
    raise error


def convert_to_tensor(value, dtype=None, name=None):
    """A tensor for `value`: tensors pass through, variables are read, arrays wrapped.

    >>> df.convert_to_tensor(np.ones(3))
    <df.Tensor shape=(3,) dtype=float64 numpy=[1., 1., 1.]>
    """
    want = dtypes.as_dtype(dtype) if dtype is not None else None
    if isinstance(value, Tensor):
        t = value
    elif hasattr(value, "_as_tensor"):
        t = value._as_tensor()
    elif isinstance(value, (list, tuple)) and convert.holds_tensor(value, _is_tensor):
        # packed with df.stack (differentiable), as operand lists are
        t = convert.pack_list(value, want.np if want is not None else None, _is_tensor, _constant_of)
    else:
        try:
            arr = to_array(value, want.np if want is not None else None)
        except TypeError as e:
            return weak_or_raise(value, want.np if want is not None else None, e)
        g = state.graph
        t = g.constant(arr, name) if g is not None else EagerTensor(arr)
    if want is not None and t.dtype is not want:
        raise errors.InvalidArgumentError(
            f"tensor has dtype {t.dtype.name}, expected {want.name}; use df.cast")
    return t


def _is_tensor(x):
    return isinstance(x, Tensor)


def _constant_of(value, np_dtype):
    """A constant tensor (of the graph being built, if any) of `value` adopting `np_dtype`."""
    try:
        arr = to_array(value, np_dtype)
    except TypeError as e:
        return weak_or_raise(value, np_dtype, e)
    g = state.graph
    return g.constant(arr) if g is not None else EagerTensor(arr)


def with_article(word):
    """`word` with its article: 'an int32', 'a float32'."""
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"
