"""The values converted control flow carries, and how an `if` on a tensor joins its branches.

`Undefined` stands for a variable with no value on the path taken (any use raises a
TracingError saying why); `TensorList` is a Python list being appended to inside a tensor
loop (its rows are one tensor); `ProbeList` records what a loop body appends.
"""
import numpy as np

from defun.runtime import dtypes, errors, sites
from defun.runtime.nest import flatten, pack_as
from defun.runtime.ops import bitwise_ops, elementwise_ops, math_ops
from defun.runtime.ops.array_ops import concat
from defun.runtime.ops.base_ops import cast, expand_dims
from defun.runtime.tensor import Tensor, convert_to_tensor, with_article
from defun.runtime.variables import Variable
from defun.graph.nodes import SymbolicTensor
from defun import control_flow as cf

RETVAL = "retval__"      # the converter's name for a function's return value


def where_text(line):
    """'file.py:12': the user's file (the innermost frame outside defun) at `line`."""
    here = sites.user_site(2)
    return f"{here[0] if here else '<unknown>'}:{line}"


def site(file, line):
    return f"{file}:{line}"


class UnassignedError(errors.TracingError, UnboundLocalError):
    """A variable used before it is assigned, on a path Python takes: the TracingError
    autograph raises, and the UnboundLocalError Python raises there."""


class Undefined:
    """The value of a variable that has none on the path taken; any use is a TracingError."""

    __slots__ = ("name", "why", "whole")

    def __init__(self, name, why=None, whole=False):
        self.name, self.why, self.whole = name, why, whole     # whole: `why` is the whole message

    def message(self):
        here = sites.user_site(2)
        if self.why is None:
            return f"{self.name!r} is used before assignment" + (f" at {here[0]}:{here[1]}" if here else "")
        at = f"(used at {here[0]}:{here[1]})" if here else ""
        return f"{self.why} {at}" if self.whole else f"{self.name!r} has no value here {at}: {self.why}"

    def fail(self, *args, **kwargs):
        raise (errors.TracingError if self.why else UnassignedError)(self.message())

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self.fail()

    def __repr__(self):
        return f"<undefined {self.name!r}: {self.why or 'not assigned yet'}>"

    __hash__ = object.__hash__


for _name in ("__bool__", "__call__", "__iter__", "__len__", "__getitem__", "__setitem__", "__add__",
              "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__matmul__", "__rmatmul__", "__neg__", "__pow__", "__lt__", "__le__", "__gt__", "__ge__",
              "__float__", "__int__", "__index__", "__array__", "__floordiv__", "__mod__", "__eq__", "__ne__"):
    setattr(Undefined, _name, Undefined.fail)


class UnknownValueError(errors.TracingError, TypeError):
    """float(a), int(a), [0] * a of numbers a tensor `if` joined, known only when the graph runs:
    the TracingError it is, and the TypeError a value that is not a number gives there."""


class TensorList:
    """A list appended to in a tensor loop: its rows so far, one tensor `buffer`."""

    __slots__ = ("buffer",)

    def __init__(self, buffer):
        self.buffer = buffer

    def append(self, value):
        return TensorList(append_rows(self.buffer, value))

    def __getitem__(self, index):
        return self.buffer[index]

    def __repr__(self):
        return f"<list appended to in a tensor loop: {self.buffer!r}>"


class CollectFallback(Exception):
    """A list in a tensor `for` is not appended to exactly once per iteration (or its
    value is read): the loop collects it by growing a tensor instead (see loops)."""


class SlotList:
    """A list appended to in a tensor `for` that stacks one value per iteration: the value
    this iteration appended (None before the append)."""

    __slots__ = ("value",)

    def __init__(self, value=None):
        self.value = value

    def append(self, value):
        if self.value is not None:
            raise CollectFallback()
        from defun.runtime.tensor import convert_to_tensor    # noqa: E402 - values imports it lazily
        return SlotList(value.read_value() if isinstance(value, Variable) else convert_to_tensor(value))

    def __getitem__(self, index):
        raise CollectFallback()


class ProbeList:
    """An empty list a tensor loop body appends to, traced once to learn what it appends."""

    __slots__ = ("spec",)

    def __init__(self):
        self.spec = None

    def append(self, value):
        from defun.runtime.tensor import convert_to_tensor    # noqa: E402 - only when probing
        t = value.read_value() if isinstance(value, Variable) else convert_to_tensor(value)
        self.spec = (tuple(t.shape), t.dtype)
        return self


class WeakValue:
    """A variable that a tensor `if` gives a Python number on each path (`a = 2.0` / `a = 3.0`):
    one tensor (`wide`) in the widest dtype of the numbers' kind (float64, int64, complex128;
    bools: a bool tensor that computes as the int it is, as Python's bools do)
    that, like a Python number, adopts the dtype of the tensor it meets (`a * y64` is float64,
    `a * y32` float32), is float32 / int32 / complex128 (as df makes Python numbers) where no tensor gives a dtype
    (`df.exp(a)`, a returned value), and stays such a value through Python arithmetic with
    Python numbers (`a + 1.0`). Graph conversion asks it for a tensor by `_weak_tensor`.
    Numbers of two kinds (`a = 1` / `a = 2.5`) join as the wider (JAX's rule for weak types);
    `mixed` says which they were, for the TypeError of an int-only use (`range(a)`, `a & 1`)."""

    __slots__ = ("wide", "name", "where", "mixed")

    def __init__(self, wide, name, where, mixed=None):
        self.wide, self.name, self.where, self.mixed = wide, name, where, mixed

    @property
    def label(self):
        """Its name in messages: "'a'", or what the function returns (an early `return`'s join)."""
        return "the value the function returns" if self.name == RETVAL else repr(self.name)

    def _holds(self):
        """What it holds, for messages: "'a' holds the numbers the tensor if at f.py:3 joins"."""
        if self.mixed:
            return (f"{self.label} is {self.mixed[0]} when the tensor if at {self.where} is true and "
                    f"{self.mixed[1]} when false, joined as {_KIND_NAME[self.wide.dtype.np.kind]}s")
        return f"{self.label} holds the numbers the tensor if at {self.where} joins"

    def _int_tensor(self, how):
        """Its value as an int tensor for an int-only use (`how`: "range()"), as Python's ints and
        bools serve there; the TypeError a float (or complex) gives there otherwise."""
        if self.wide.dtype.np.kind in "bi":
            return self._as_int().wide
        raise TypeError(f"{how} needs ints, and {self._holds()} ('{_KIND_NAME[self.wide.dtype.np.kind]}' object "
                        f"cannot be interpreted as an integer); use df.cast or give it ints on both paths")

    def _weak_tensor(self, dtype=None):
        """Its value as a tensor of numpy `dtype` (None: a Python number's default)."""
        kind = self.wide.dtype.np.kind
        if dtype is None:
            dtype = _DEFAULT[kind]
        dtype = np.dtype(dtype)
        if (kind == "c" and dtype.kind != "c") or (kind == "f" and dtype.kind in "iub") or \
                (dtype.kind == "b" and kind != "b"):
            raise errors.InvalidArgumentError(
                f"{self.label} holds the Python {_KIND_NAME[kind]}s the tensor if at {self.where} gives it, "
                f"which cannot be used with {with_article(dtype.name)} tensor; use df.cast")
        return self.wide if self.wide.dtype.np == dtype else cast(self.wide, dtype)

    @property
    def _stand_in(self):
        """A Python number of its kind (0, 0.0, 0j): what a list holding it converts as."""
        return _STAND_IN[self.wide.dtype.np.kind]

    def _binary(self, other, op, reflected):
        """Python's `self <op> other` (`other <op> self` if `reflected`): with a Python number
        (a bool as an int) or another WeakValue in the wider of their kinds, staying weak; with
        a numpy value in numpy's dtype of the pair (`a * np.int32(3)` is float64); with a
        tensor adopting its dtype. A TypeError where Python has one (complex `//`, a float's `&`).
        Joined bools compute as ints (`flag + 1` is 2) but for `&`, `|`, `^` with bools (a bool)."""
        if self.wide.dtype.np.kind == "b":
            if op in ("and", "or", "xor") and (other.__class__ in (bool, np.bool_) or weak_kind(other) == "b"):
                y = other.wide if isinstance(other, WeakValue) else convert_to_tensor(other)
                return WeakValue(_apply(op, self.wide, y), self.name, self.where)
            if not isinstance(other, (Tensor, Variable)):      # (a tensor: True adopts its dtype, bool too)
                return self._as_int()._binary(other, op, reflected)
        if other.__class__ is bool:
            other = int(other)
        elif weak_kind(other) == "b":
            other = other._as_int()
        if isinstance(other, WeakValue) or other.__class__ in (int, float, complex):
            wide = weak_wide(self, other)
            if op == "pow" and wide.kind == "i" and not reflected and other.__class__ is int and other < 0:
                wide = _WIDE["f"]       # 2 ** -1 is 0.5
            _check_kinds(op, wide.kind, self, other, reflected)
            if op in ("lshift", "rshift") and not reflected and other.__class__ is int and other < 0:
                raise ValueError("negative shift count")
            x, y = self._weak_tensor(wide), weak_leaf(other, wide)
            out = _apply(op, *((y, x) if reflected else (x, y)))
            return _weak_outputs(out, self)
        if isinstance(other, (np.ndarray, np.generic)):
            dt = np.result_type(other, self._stand_in)
            _check_kinds(op, dt.kind, self, other, reflected)
            y = convert_to_tensor(other)
            y = y if y.dtype.np == dt else cast(y, dt)
        elif isinstance(other, (Tensor, Variable)):
            if op in ("eq", "ne", "and", "or", "xor", "lshift", "rshift", "divmod"):
                return NotImplemented       # as a Python number's: the tensor's own (identity, its &)
            y = other.read_value() if isinstance(other, Variable) else other
        else:
            return NotImplemented
        x = self._weak_tensor(y.dtype.np)
        return _apply(op, *((y, x) if reflected else (x, y)))

    def __eq__(self, other):        # values, as the Python numbers compare (not identity, as tensors)
        return self._binary(other, "eq", False)

    def __ne__(self, other):
        return self._binary(other, "ne", False)

    __hash__ = object.__hash__
    __array_ufunc__ = None          # numpy defers to it (np.int32(3) * a is its __rmul__)

    def _as_int(self):
        """Joined bools as the Python ints they compute as (True + 1 is 2); other values as they are."""
        if self.wide.dtype.np.kind != "b":
            return self
        return WeakValue(cast(self.wide, _WIDE["i"]), self.name, self.where)

    def __neg__(self):
        return WeakValue(-self._as_int().wide, self.name, self.where)

    def __pos__(self):
        return self._as_int()

    def __abs__(self):
        return WeakValue(math_ops.abs(self._as_int().wide), self.name, self.where)

    def __invert__(self):
        _check_kinds("invert", self.wide.dtype.np.kind, self, None, False)
        return WeakValue(bitwise_ops.invert(self._as_int().wide), self.name, self.where)

    def __round__(self, ndigits=None):
        """round(a) an int as Python's (half to even); round(a, n) a float, as numpy rounds."""
        self = self._as_int()
        kind = _check_kinds("round", self.wide.dtype.np.kind, self, None, False)
        w = self.wide
        if ndigits is None or kind == "i":
            if kind == "i" and (ndigits is None or ndigits >= 0):
                return self
            scale = 10.0 ** -(ndigits or 0)
            r = math_ops.round(cast(w, np.float64) / scale) * scale
            return WeakValue(cast(r, np.int64), self.name, self.where)
        scale = 10.0 ** ndigits
        return WeakValue(math_ops.round(w * scale) / scale, self.name, self.where)

    def _whole(self, how):
        """math.floor / ceil / trunc: an int, as Python gives."""
        self = self._as_int()
        kind = _check_kinds(how, self.wide.dtype.np.kind, self, None, False)
        w = self.wide if kind == "i" else cast(self.wide if how == "trunc" else _WHOLE[how](self.wide), np.int64)
        return WeakValue(w, self.name, self.where)

    def __floor__(self):
        return self._whole("floor")

    def __ceil__(self):
        return self._whole("ceil")

    def __trunc__(self):
        return self._whole("trunc")

    def __bool__(self):
        return bool(self.wide)      # the TracingError of a symbolic tensor's bool()

    def _unknown(self, how):
        kind = _KIND_NAME[self.wide.dtype.np.kind]
        holds = self._holds() if self.mixed else \
            f"{self.label} holds the Python {kind}s the tensor if at {self.where} joins"
        raise UnknownValueError(
            f"{how} needs the value of {self.label}, and {holds}: its value is known "
            f"only when the graph runs; compute with it as a number "
            f"(df.cast(a, df.int32) for a tensor of another dtype) or return it")

    def __float__(self):
        self._unknown("float()")

    def __int__(self):
        self._unknown("int()")

    def __complex__(self):
        self._unknown("complex()")

    def __index__(self):
        self._unknown("a Python int (a repeat count, a slice bound, a list index)")

    def __pow__(self, other, mod=None):
        if mod is None:
            return self._binary(other, "pow", False)
        if "c" in (weak_kind(self), weak_kind(other), weak_kind(mod)):
            raise ValueError("complex modulo")
        if {"i" if v.__class__ is bool else weak_kind(v) for v in (self, other, mod)} - {"b"} != {"i"}:
            raise TypeError("pow() 3rd argument not allowed unless all arguments are integers")
        return (self ** other) % mod

    def __repr__(self):
        return f"<{self.name!r}: Python {_KIND_NAME[self.wide.dtype.np.kind]}s joined by a tensor if: {self.wide!r}>"


_WHOLE = {"floor": math_ops.floor, "ceil": elementwise_ops.ceil}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "** or pow()",
           "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "&", "or": "|", "xor": "^", "lshift": "<<",
           "rshift": ">>", "divmod": "divmod()"}
_NOT_COMPLEX = ("floordiv", "mod", "divmod", "lt", "le", "gt", "ge", "round", "floor", "ceil", "trunc")
_INT_ONLY = ("and", "or", "xor", "lshift", "rshift", "invert")


def _check_kinds(op, kind, weak, other, reflected):
    """`kind` (of the operands together); the TypeError Python raises for `op` on it."""
    if (op in _NOT_COMPLEX and kind == "c") or (op in _INT_ONLY and kind not in "iub"):
        kinds = [_KIND_NAME.get(weak_kind(v) or "", type(v).__name__) for v in (weak, other)]
        if op in _SYMBOL:
            a, b = kinds[::-1] if reflected else kinds
            raise TypeError(f"unsupported operand type(s) for {_SYMBOL[op]}: '{a}' and '{b}' ({weak._holds()})")
        raise TypeError(f"bad operand type for {'unary ~' if op == 'invert' else op + '()'}: '{kinds[0]}' "
                        f"({weak._holds()})")
    return kind


def _apply(op, x, y):
    """`x <op> y` on tensors."""
    if op == "divmod":
        return math_ops.floordiv(x, y), math_ops.mod(x, y)
    if op in ("lshift", "rshift"):      # numpy's shifts: a count past the bits shifts them all out, as Python's
        return (bitwise_ops.left_shift if op == "lshift" else bitwise_ops.right_shift)(x, y)
    if op in ("eq", "ne"):
        return (math_ops.equal if op == "eq" else math_ops.not_equal)(x, y)
    return getattr(Tensor, f"__{op}__")(x, y)


def _weak_outputs(out, weak):
    """The result of Python arithmetic between weak values: weak (`a < 1` a joined bool)."""
    if isinstance(out, tuple):
        return tuple(_weak_outputs(o, weak) for o in out)
    return WeakValue(out, weak.name, weak.where, weak.mixed if out.dtype.np.kind in "fc" else None)


def _weak_method(op, reflected):
    return lambda self, other: self._binary(other, op, reflected)


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lt", "le", "gt", "ge", "and", "or",
              "xor", "lshift", "rshift", "divmod"):
    if _name != "pow":      # its own: pow(a, b, m)
        setattr(WeakValue, f"__{_name}__", _weak_method(_name, False))
    if _name not in ("lt", "le", "gt", "ge"):
        setattr(WeakValue, f"__r{_name}__", _weak_method(_name, True))
_DEFAULT = {"b": np.dtype(np.bool_), "i": np.dtype(np.int32), "u": np.dtype(np.int32), "f": np.dtype(np.float32),
            "c": np.dtype(np.complex128)}
_WIDE = {"b": np.dtype(np.bool_), "i": np.dtype(np.int64), "f": np.dtype(np.float64), "c": np.dtype(np.complex128)}
_STAND_IN = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}
_KINDS = {bool: "b", int: "i", float: "f", complex: "c"}
_KIND_NAME = {"b": "bool", "i": "int", "u": "int", "f": "float", "c": "complex"}


def weak_kind(v):
    """'b', 'i', 'f' or 'c' for a Python bool or number or a WeakValue, else None."""
    if isinstance(v, WeakValue):
        return v.wide.dtype.np.kind
    return _KINDS.get(v.__class__)


def weak_wide(*values):
    """The widest dtype of the kinds of weak `values` (an int and a float: float64)."""
    return _WIDE[max((weak_kind(v) for v in values), key="bifc".index)]


def weak_leaf(v, dtype):
    """Weak value `v` (Python number or WeakValue) as a tensor of numpy `dtype` in the graph being built."""
    return v._weak_tensor(dtype) if isinstance(v, WeakValue) else convert_to_tensor(v, dtypes.from_numpy(dtype))


def condition(c, what, line):
    """A condition as a Python bool, or a scalar bool symbolic tensor."""
    if c.__class__ is bool:     # the usual Python condition (`i % 2 == 0`): no isinstance tests
        return c
    if isinstance(c, Variable):
        c = c.read_value()
    if isinstance(c, Undefined):
        c.fail()
    if isinstance(c, WeakValue):
        c = c.wide
    if not isinstance(c, SymbolicTensor):
        if isinstance(c, Tensor):
            return bool(np.asarray(c.numpy()).all()) if c.shape else bool(c.numpy())
        return c
    if c.shape != ():
        raise errors.TracingError(
            f"the condition of the {what} at {where_text(line)} is a {c.dtype.name}"
            f"{list(c.shape)} tensor, not a scalar; reduce it first (df.reduce_any / df.reduce_all)")
    if c.dtype.name != "bool":
        c = math_ops.not_equal(c, cast(0, c.dtype))
    return c


def append_rows(buffer, value):
    """`buffer` with `value` as one more row."""
    value = convert_to_tensor(value, buffer.dtype) if not isinstance(value, Tensor) else value
    return concat([buffer, expand_dims(value, 0)], 0)


def dynamic(v):
    """True for a value a graph can carry: a tensor, a number, a numpy array, a TensorList."""
    return isinstance(v, (Tensor, TensorList, WeakValue, np.ndarray, np.generic, bool, int, float, complex))


def dtype_of(v):
    """The dtype of a dynamic value, or None for a Python number (weakly typed)."""
    if isinstance(v, TensorList):
        return v.buffer.dtype
    return v.dtype if isinstance(v, (Tensor, Variable)) else None


def same_static(x, y):
    """True if `x` and `y` can stay Python values after a join (identical, or equal numbers/strings)."""
    if x is y:
        return True
    if type(x) is not type(y) or isinstance(x, (Tensor, TensorList, np.ndarray)):
        return False
    try:
        return bool(x == y)
    except Exception:    # noqa: BLE001 - an object whose == is not a truth value is not static
        return False


def describe(v):
    if isinstance(v, (Tensor, Variable)):
        return f"{'an' if v.dtype.name[0] in 'aeiou' else 'a'} {v.dtype.name}{list(v.shape)} tensor"
    if isinstance(v, TensorList):
        return "a list appended to in a tensor loop"
    if isinstance(v, WeakValue):
        return f"the Python {_KIND_NAME[weak_kind(v)]}s the tensor if at {v.where} joins"
    return f"a Python {type(v).__name__} ({v!r:.40})"


def merge_branches(a, b, entry, names, info, file):
    """(true leaves, false leaves, rebuild): what one cond node must return so that each
    variable in `names` (`a`: its values after the true branch, `b`: the false one) has one
    value after the `if`; `rebuild(outputs)` gives the state after it."""
    line, lines = info[0], (dict(info[1]), dict(info[2]))
    then_leaves, else_leaves, plan = [], [], []
    for k, name in enumerate(names):
        va, vb = a[k], b[k]
        try:
            kinds, ta, tb, va = _join(name, va, vb, lines, file, line)
        except errors.TracingError as e:      # an error only if the variable is used after the if
            plan.append(("value", Undefined(name, str(e), whole=True)))
            continue
        then_leaves += ta
        else_leaves += tb
        plan.append(("nest", va, kinds, name) if kinds is not None else ("value", va))

    def rebuild(out):
        it, values = iter(out), []
        for p in plan:
            if p[0] == "value":
                values.append(p[1])
                continue
            leaves = [x if kind is None else SlotList(next(it)) if kind == "slot" else
                      WeakValue(next(it), p[3], site(file, line), kind[1]) if kind.__class__ is tuple else
                      (TensorList(next(it)) if kind else next(it)) for x, kind in zip(flatten(p[1]), p[2])]
            values.append(pack_as(p[1], leaves) if isinstance(p[1], (list, tuple, dict)) else leaves[0])
        return tuple(values)
    return then_leaves, else_leaves, rebuild


def _join(name, va, vb, lines, file, line):
    """(per leaf: None (the same Python value) or whether it is a TensorList; the true and
    the false leaves one cond returns; the structure) for variable `name` after an if
    whose branches leave it `va` and `vb`; TracingError if they cannot join."""
    for v in (va, vb):
        if isinstance(v, Undefined) and v.whole:     # a join that failed before: its reason stands
            raise errors.TracingError(v.why)
    if isinstance(va, SlotList) or isinstance(vb, SlotList):    # appended on one path only: grow
        if not (isinstance(va, SlotList) and isinstance(vb, SlotList)) or (va.value is None) != (vb.value is None):
            raise CollectFallback()
        return (None, [], [], va) if va.value is None else (["slot"], [va.value], [vb.value], va)
    if isinstance(va, Undefined) or isinstance(vb, Undefined):
        if isinstance(va, Undefined) and isinstance(vb, Undefined):
            return None, [], [], va
        if name != RETVAL:
            raise _one_path(name, isinstance(va, Undefined), lines, file, line)
        va, vb = (_zeros_like(vb), vb) if isinstance(va, Undefined) else (va, _zeros_like(va))
    if cf._structure(va) != cf._structure(vb):
        raise _differs(name, f"{cf._describe(va)} when true but {cf._describe(vb)} when false", lines,
                       file, line, "the same structure")
    kinds, ta, tb = [], [], []
    for x, y in zip(flatten(va), flatten(vb)):
        if same_static(x, y):
            kinds.append(None)
            continue
        _check_pair(name, x, y, lines, file, line)
        ta.append(x.buffer if isinstance(x, TensorList) else x)
        tb.append(y.buffer if isinstance(y, TensorList) else y)
        kinds.append(("weak", mixed_kinds(x, y)) if weak_kind(x) and weak_kind(y) else isinstance(x, TensorList))
    return kinds, ta, tb, va


def weak_outputs(graphs, then_leaves, else_leaves):
    """The leaves one cond returns with its weak ones as tensors of their branch's graph: a
    pair of Python numbers (or WeakValues) in the wider dtype of their kinds (the cond's
    output is a WeakValue after the if), a WeakValue beside a tensor in that tensor's dtype."""
    for k, (x, y) in enumerate(zip(then_leaves, else_leaves)):
        if weak_kind(x) and weak_kind(y):
            dt = weak_wide(x, y)
        elif isinstance(x, WeakValue) or isinstance(y, WeakValue):
            dt = (y if isinstance(x, WeakValue) else x).dtype
            dt = getattr(dt, "np", dt)
        else:
            continue
        for g, leaves in zip(graphs, (then_leaves, else_leaves)):
            if weak_kind(leaves[k]):
                with g.building():
                    leaves[k] = weak_leaf(leaves[k], dt)


def mixed_kinds(x, y):
    """None for joined numbers of one kind; else what they were on the true and the false path
    ('a Python int', 'a Python float'; an int with a bool is an int: bools are ints)."""
    kx, ky = weak_kind(x), weak_kind(y)
    if kx == ky or {kx, ky} == {"b", "i"}:
        return (x.mixed if isinstance(x, WeakValue) else None) or (y.mixed if isinstance(y, WeakValue) else None)
    return kind_text(x), kind_text(y)


def _check_pair(name, x, y, lines, file, line):
    if not (dynamic(x) or isinstance(x, Variable)) or not (dynamic(y) or isinstance(y, Variable)):
        raise _differs(name, f"{describe(x)} when true but {describe(y)} when false", lines, file, line,
                       "tensors (or numbers) on both paths, or the same Python value")
    if isinstance(x, TensorList) != isinstance(y, TensorList):
        raise _differs(name, f"{describe(x)} when true but {describe(y)} when false", lines, file, line,
                       "the same kind of value")
    dx, dy = dtype_of(x), dtype_of(y)
    if dx is not None and dy is not None and dx is not dy:
        raise _differs(name, f"{dx.name} when true but {dy.name} when false", lines, file, line,
                       "the same dtype (use df.cast)")
    weak, other = (x, dy) if dx is None else (y, dx)
    if (dx is None) != (dy is None) and weak_kind(weak) == "f" and not other.is_floating and not other.is_complex:
        raise _differs(name, f"a Python float on one path but {other.name} on the other", lines, file,
                       line, "the same dtype (use df.cast)")
    if dx is None and dy is None and (weak_kind(x) or type(x)) != (weak_kind(y) or type(y)):
        raise _differs(name, f"{kind_text(x)} when true but {kind_text(y)} when false",
                       lines, file, line, "the same dtype")
    rx, ry = (getattr(getattr(v, "buffer", v), "shape", None) for v in (x, y))
    if rx is not None and ry is not None and len(rx) != len(ry):
        raise _differs(name, f"rank {len(rx)} when true but rank {len(ry)} when false", lines, file, line,
                       "the same rank")


def kind_text(v):
    k = weak_kind(v)
    return f"Python {_KIND_NAME[k]}s" if isinstance(v, WeakValue) else f"a Python {type(v).__name__}"


def _zeros_like(v):
    """A stand-in for the return value on the path that has not returned (never used)."""
    return pack_as(v, [np.zeros([d or 0 for d in x.shape], x.dtype.np) if isinstance(x, (Tensor, Variable))
                       else x for x in flatten(v)])


def _at(lines, which, name):
    at = lines[which].get(name)
    return f"line {at}" if at is not None else "unchanged from before the if"


def _one_path(name, missing_true, lines, file, line):
    have, lack = ("false", "true") if missing_true else ("true", "false")
    where = _at(lines, 1 if missing_true else 0, name)
    what = "the function returns" if name == RETVAL else f"{name!r} is assigned"
    return errors.TracingError(
        f"{what} only when the tensor condition of the if at {site(file, line)} is {have} "
        f"({where}), not when it is {lack}; a tensor `if` becomes one cond node, so "
        f"{'every path must return a value' if name == RETVAL else repr(name) + ' needs a value on both paths'}"
        f": give it one before the if or in the other branch")


def _differs(name, how, lines, file, line, need):
    if name == RETVAL:      # the hidden variable of early returns: say what the user wrote
        return errors.TracingError(
            f"the function returns different kinds of value on the two paths of the tensor if at "
            f"{site(file, line)}: {how} (a path that ends without `return` returns None); a tensor `if` "
            f"becomes one cond node, so every path must return {need}")
    return errors.TracingError(
        f"{name!r} differs between the branches of the tensor if at {site(file, line)}: {how} "
        f"(true: {_at(lines, 0, name)}; false: {_at(lines, 1, name)}); the branches of a cond "
        f"must give it {need}")
