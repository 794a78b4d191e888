"""The trace cache key: which trace a call of a defun runs, and how two keys differ.

A key encodes the bound arguments leaf by leaf: tensors by (shape, dtype), variables by
shape/dtype/trainable, other values by value (floats by their bits). It is a tuple, so
hashing and comparing it cost what a tuple's do; it prints itself by argument name, and
`changes(old)` says per argument what differs, old -> new (the retracing warning's words).

Relaxing (`reduce_retracing`): keys with one `rank_part()` differ only in tensor sizes;
`relaxed_with(old)` makes each size that differs unknown (None), `fits(general)` says whether
a relaxed key's trace takes a call, and `relaxed_arguments` gives the arguments to trace it.
"""
import numpy as np

from defun.runtime import dtypes
from defun.runtime.nest import sorted_keys
from defun.runtime.shapes import shape_fits
from defun.runtime.tensor import EagerTensor, to_array
from defun.runtime.variables import Variable
from defun.graph.nodes import SymbolicTensor
from defun.spec import TensorSpec

__all__ = ["CacheKey", "SIGNATURE_KEY", "relaxed_arguments"]

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
        # encoded as _encode encodes a tuple and a dict, with paths named as `arguments` names them
        pos = ("t", tuple(_encode(v, tensors, _positional_name(names, i)) for i, v in enumerate(args)))
        if not kwargs:
            return cls((pos, None, names))
        keys = tuple(sorted(kwargs))
        return cls((pos, ("D", keys, tuple(_encode(kwargs[k], tensors, str(k)) for k in keys)), names))

    def static_part(self):
        """The key with tensor leaves blanked: what must match exactly (values, structure)."""
        return _static_parts(self[0]), _static_parts(self[1])

    def arguments(self):
        """{argument name: encoded argument}, positional ones by parameter name, then keywords."""
        names = self[2]
        args, kwargs = self[0], self[1]
        out = {_positional_name(names, i): v for i, v in enumerate(args[1])}  # ("t", items)
        if kwargs is not None:
            for k, v in zip(kwargs[1], kwargs[2]):
                out[str(k)] = v
        return out

    def leaves(self):
        """{argument path: encoded leaf}, paths by parameter name (`x`, `xs[1]`, `cfg['lr']`)."""
        out = {}
        for name, v in self.arguments().items():
            _leaves(v, name, out)
        return out

    def changes(self, old):
        """What differs from key `old`, one 'argument: old -> new' per changed leaf; an
        argument whose nesting alone changed is named once (`xs: list of 2 -> tuple of 2`)."""
        out = []
        for name, was, now in _paired_arguments(old, self):
            a, b = _leaves(was, name, {}), _leaves(now, name, {})
            diff = [f"{p}: {_key_text(a.get(p))} -> {_key_text(b.get(p))}"
                    for p in _union(a, b) if a.get(p) != b.get(p)]
            if not diff and was != now:
                diff = [f"{name}: {_structure_text(was)} -> {_structure_text(now)}"]
            out += diff
        return out

    def misfits(self, traced, placeholders):
        """What of this key a trace made for key `traced` cannot take: changed static leaves
        or structure, and tensors whose dtype or shape their placeholder refuses.

        `placeholders` are the trace's inputs, one per tensor or variable leaf of `traced`.
        """
        slots = iter(placeholders)
        out = []
        for name, was, now in _paired_arguments(traced, self):
            a, b = _leaves(was, name, {}), _leaves(now, name, {})
            slot = {p: next(slots, None) for p, v in a.items() if _takes_placeholder(v)}
            diff = []
            for p in _union(a, b):
                old, new, ph = a.get(p), b.get(p), slot.get(p)
                if _is_tensor_leaf(old) and _is_tensor_leaf(new) and ph is not None:
                    if new[1] != ph.dtype.np or not shape_fits(new[0], ph.shape):
                        diff.append(f"{p}: {_key_text(new)} given, the trace takes "
                                    f"{_key_text((ph.shape, ph.dtype.np))}")
                elif old != new:
                    diff.append(f"{p}: {_key_text(old)} -> {_key_text(new)}")
            if not diff and _static_parts(was) != _static_parts(now):
                diff = [f"{name}: {_structure_text(was)} -> {_structure_text(now)}"]
            out += diff
        return out

    def rank_part(self):
        """The key with each tensor leaf's sizes left out (its rank and dtype kept): keys with
        the same rank part differ in tensor sizes only, so one relaxed trace can serve them."""
        return (_map_tensor_leaves(self[0], _rank_leaf), _map_tensor_leaves(self[1], _rank_leaf), self[2])

    def relaxed_with(self, old):
        """This key with every tensor size that differs from key `old` (of the same rank
        part) unknown (None); the sizes both share stay."""
        return CacheKey((_zip_tensor_leaves(self[0], old[0]), _zip_tensor_leaves(self[1], old[1]), self[2]))

    def fits(self, general):
        """True if a trace made for key `general` (of the same rank part) takes this key's
        tensors: each of its sizes is None there or the same."""
        return all(shape_fits(s, g) for s, g in zip(self.tensor_shapes(), general.tensor_shapes()))

    def tensor_shapes(self):
        """The shape of each tensor leaf, in the order the arguments' tensors are taken."""
        out = []
        _map_tensor_leaves(self[0], lambda k: out.append(k[0]))
        _map_tensor_leaves(self[1], lambda k: out.append(k[0]))
        return out

    def relaxed_changes(self, old):
        """'argument: float32[5] -> float32[None]' per tensor whose sizes this relaxed key
        makes unknown where key `old` knew them."""
        was = old.leaves()
        return [f"{p}: {_sizes_text(was[p])} -> {_sizes_text(k)}" for p, k in self.leaves().items()
                if _is_tensor_leaf(k) and p in was and was[p][0] != k[0]]

    def __str__(self):
        return ", ".join(f"{p}: {_key_text(v)}" for p, v in self.leaves().items())

    def __repr__(self):
        return f"CacheKey({self})"


def _positional_name(names, i):
    """Positional argument `i` by parameter name (`names`: `*rest` for a var-positional one)."""
    star = names[-1][1:] if names and names[-1].startswith("*") else None
    named = len(names) - (star is not None)
    return names[i] if i < named else f"{star}[{i - named}]" if star else f"args[{i}]"


def _paired_arguments(old, new):
    """(name, old encoding or None, new encoding or None) per argument of either key."""
    a, b = old.arguments(), new.arguments()
    return [(n, a.get(n), b.get(n)) for n in dict.fromkeys([*a, *b])]


def _union(a, b):
    """The keys of dicts `a` and `b`: a's in order, then b's new ones."""
    return list(dict.fromkeys([*a, *b]))


def _is_tensor_leaf(k):
    return isinstance(k, tuple) and len(k) == 2 and isinstance(k[1], np.dtype)


def _takes_placeholder(k):
    """A tensor leaf, or a variable's first appearance (a variable passed again reuses it)."""
    return _is_tensor_leaf(k) or (isinstance(k, tuple) and len(k) == 4 and k[0] == "V")


def _structure_text(k):
    """How an encoded argument is nested, for a change of structure alone."""
    if isinstance(k, tuple) and k and isinstance(k[0], str):
        if k[0] == "L":
            return f"list of {len(k[1])}"
        if k[0] == "t":
            return f"tuple of {len(k[1])}"
        if k[0] == "D":
            return f"dict with keys {list(k[1])}"
        if k[0] == "N":
            return f"{k[1].__name__} of {len(k[2])}"
    return _key_text(k)


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


def _map_tensor_leaves(key, fn):
    """`key` (an encoded argument or argument list) with each tensor leaf `k` replaced by fn(k)."""
    if isinstance(key, tuple):
        if _is_tensor_leaf(key):
            return fn(key)
        return tuple(_map_tensor_leaves(k, fn) for k in key)
    return key


def _zip_tensor_leaves(new, old):
    """`new` with each tensor size that differs from `old` (same structure and ranks) None."""
    if isinstance(new, tuple):
        if _is_tensor_leaf(new):
            return (tuple(a if a == b else None for a, b in zip(new[0], old[0])), new[1])
        return tuple(_zip_tensor_leaves(a, b) for a, b in zip(new, old))
    return new


def _rank_leaf(k):
    return ("R", len(k[0]), k[1])


def _sizes_text(k):
    return f"{k[1].name}[{', '.join('None' if d is None else str(d) for d in k[0])}]"


def relaxed_arguments(value, shapes):
    """`value` (bound arguments: a tuple, or a dict of keywords) with each tensor leaf replaced
    by a TensorSpec of its dtype and the next shape of iterator `shapes`, leaves taken in
    the order `CacheKey.of` takes them; variables and static values stay."""
    if isinstance(value, (EagerTensor, SymbolicTensor, TensorSpec)):
        return TensorSpec(next(shapes), value.dtype)
    if isinstance(value, (np.ndarray, np.generic)):
        return TensorSpec(next(shapes), dtypes.from_numpy(to_array(value).dtype))
    if isinstance(value, Variable):
        return value
    if isinstance(value, dict):
        return {k: relaxed_arguments(value[k], shapes) for k in sorted_keys(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[relaxed_arguments(v, shapes) for v in value])
    if isinstance(value, list):
        return [relaxed_arguments(v, shapes) for v in value]
    if isinstance(value, tuple):
        return tuple(relaxed_arguments(v, shapes) for v in value)
    return value


def _static_parts(key):
    if isinstance(key, tuple):
        if len(key) == 2 and isinstance(key[1], np.dtype):
            return "T"
        return tuple(_static_parts(k) for k in key)
    return key


def _key_text(k):
    if k is None:
        return "absent"
    if _is_tensor_leaf(k):
        return f"tensor {k[1].name}[{', '.join('?' if d is None else str(d) for d in k[0])}]"
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
            raise TypeError(f"defun argument {path} is a variable's resource handle (v.handle); "
                            f"pass the Variable itself, which the trace reads and assigns by handle")
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
        try:
            t = EagerTensor(to_array(value))
        except TypeError as e:      # a masked array
            raise TypeError(f"defun argument {path}: {e}") from None
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
        keys = tuple(sorted_keys(value))
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
