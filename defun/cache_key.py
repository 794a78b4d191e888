"""The trace cache key: which trace a call of a defun runs, and how two keys differ.

A key encodes the bound arguments leaf by leaf: tensors by (shape, dtype), variables by
shape/dtype/trainable, other values by value (floats by their bits). It is a tuple, so
hashing and comparing it cost what a tuple's do; it prints itself by argument name, and
`changes(old)` says per argument what differs, old -> new (the retracing warning's words).
"""
import numpy as np

from runtime import dtypes
from runtime.tensor import EagerTensor, to_array
from runtime.variables import Variable
from graph.ir import SymbolicTensor
from defun.spec import TensorSpec

__all__ = ["CacheKey", "SIGNATURE_KEY"]

# The one key of a function with an input_signature: every call runs the same trace.
SIGNATURE_KEY = "input_signature"


class CacheKey(tuple):
    """(encoded positional args, encoded keyword args or None, parameter names).

        key = CacheKey.of(args, kwargs, tensors, ("x", "n"))
        str(key)             # "x: tensor float32[2], n: Python float 2.0"
        key.changes(old)     # ["n: Python float 1.0 -> Python float 2.0"]
    """

    __slots__ = ()

    @classmethod
    def of(cls, args, kwargs, tensors, names=()):
        """The key of bound `args`/`kwargs`; appends their tensor leaves to `tensors`."""
        return cls((_encode(args, tensors, "args"),
                    _encode(kwargs, tensors, "kwargs") if kwargs else None, names))

    def static_part(self):
        """The key with tensor leaves blanked: what must match exactly (values, structure)."""
        return _static_parts(self[0]), _static_parts(self[1])

    def leaves(self):
        """{argument path: encoded leaf}, paths by parameter name (`x`, `xs[1]`, `cfg['lr']`)."""
        out = {}
        names = self[2]
        args, kwargs = self[0], self[1]
        star = names[-1][1:] if names and names[-1].startswith("*") else None
        named = len(names) - (star is not None)
        for i, v in enumerate(args[1]):        # ("t", items) of the positional tuple
            name = names[i] if i < named else f"{star}[{i - named}]" if star else f"args[{i}]"
            _leaves(v, name, out)
        if kwargs is not None:
            for k, v in zip(kwargs[1], kwargs[2]):
                _leaves(v, str(k), out)
        return out

    def changes(self, old):
        """What differs from key `old`, one 'argument: old -> new' per changed leaf."""
        a, b = old.leaves(), self.leaves()
        return [f"{p}: {_key_text(a.get(p))} -> {_key_text(b.get(p))}"
                for p in sorted(set(a) | set(b), key=_path_order(a, b)) if a.get(p) != b.get(p)]

    def describe_change(self, old, most=4):
        return "; ".join(self.changes(old)[:most]) or "argument structure"

    def __str__(self):
        return ", ".join(f"{p}: {_key_text(v)}" for p, v in self.leaves().items())

    def __repr__(self):
        return f"CacheKey({self})"


def _path_order(a, b):
    order = {p: k for k, p in enumerate(list(a) + [p for p in b if p not in a])}
    return order.__getitem__


def _leaves(key, path, out):
    if isinstance(key, tuple) and key and isinstance(key[0], str) and key[0] in ("L", "t", "D", "N"):
        tag = key[0]
        if tag == "D":
            for k, v in zip(key[1], key[2]):
                _leaves(v, f"{path}[{k!r}]", out)
        elif tag == "N":
            for i, v in enumerate(key[2]):
                _leaves(v, f"{path}.{i}", out)
        else:
            for i, v in enumerate(key[1]):
                _leaves(v, f"{path}[{i}]", out)
    else:
        out[path] = key
    return out


def _static_parts(key):
    if isinstance(key, tuple):
        if len(key) == 2 and isinstance(key[1], np.dtype):
            return "T"
        return tuple(_static_parts(k) for k in key)
    return key


def _key_text(k):
    if k is None:
        return "absent"
    if isinstance(k, tuple) and len(k) == 2 and isinstance(k[1], np.dtype):
        return f"tensor {k[1].name}{list(k[0])}"
    if isinstance(k, tuple) and len(k) == 3 and k[0] == "P":
        value = float.fromhex(k[2]) if k[1] == "float" else k[2]
        return f"Python {k[1]} {value!r}"
    if isinstance(k, tuple) and k and k[0] == "V":
        return f"variable {k[2]}{list(k[1])}{'' if k[3] else ' (not trainable)'}"
    if isinstance(k, tuple) and k and k[0] == "VA":
        return f"the variable of flat argument {k[1]} again"
    return repr(k)


def _encode(value, tensors, path):
    """Cache-key part of one argument; appends its tensor leaves to `tensors`."""
    if isinstance(value, EagerTensor):
        if value.dtype is dtypes.resource:
            raise TypeError(f"{path}: pass the Variable itself, not its handle")
        tensors.append(value)
        v = value._value
        return (v.shape, v.dtype)
    if isinstance(value, SymbolicTensor):
        tensors.append(value)
        return (value.shape, value.dtype.np)
    if isinstance(value, TensorSpec):
        tensors.append(value)
        return (value.shape, value.dtype.np)
    if isinstance(value, (np.ndarray, np.generic)):
        t = EagerTensor(to_array(value))
        tensors.append(t)
        return (t._value.shape, t._value.dtype)
    if isinstance(value, Variable):
        # By shape and dtype, so one trace serves any such variable; a variable passed again
        # is keyed by its first position (aliasing matters when the function assigns).
        h = value.handle
        for k, t in enumerate(tensors):
            if t is h:
                return ("VA", k)
        tensors.append(h)
        return ("V", tuple(value.shape), value.dtype.name, value.trainable)
    if isinstance(value, dict):
        keys = tuple(sorted(value))
        return ("D", keys, tuple(_encode(value[k], tensors, f"{path}[{k!r}]") for k in keys))
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return ("N", type(value), tuple(_encode(v, tensors, f"{path}.{i}") for i, v in enumerate(value)))
    if isinstance(value, list):
        return ("L", tuple(_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(value)))
    if isinstance(value, tuple):
        return ("t", tuple(_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(value)))
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"defun argument {path} of type {type(value).__name__} is neither a tensor nor "
                        f"hashable, so it cannot be part of the trace cache key; pass a tensor or a "
                        f"hashable value") from None
    if type(value) is float:
        # by bits: nan equals itself (no retrace per call), 0.0 and -0.0 differ (1/x does)
        return ("P", "float", value.hex())
    return ("P", type(value).__name__, value)
