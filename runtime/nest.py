"""Nested structures (list/tuple/namedtuple/dict): flatten to leaves and pack back."""

__all__ = ["flatten", "pack_as", "is_nested"]


def is_nested(s):
    return isinstance(s, (list, tuple, dict))


def flatten(structure):
    """Leaves of a nested list/tuple/dict, dicts in sorted key order; a leaf gives [leaf]."""
    out = []
    _flatten_into(structure, out)
    return out


def _flatten_into(s, out):
    if isinstance(s, dict):
        for k in sorted_keys(s):
            _flatten_into(s[k], out)
    elif isinstance(s, (list, tuple)):
        for v in s:
            _flatten_into(v, out)
    else:
        out.append(s)


def sorted_keys(d):
    """The keys of dict `d` in the order its leaves are flattened (sorted); keys that do
    not sort together (`{'a': x, 1: y}`) are refused, naming them."""
    try:
        return sorted(d)
    except TypeError:
        kinds = sorted({type(k).__name__ for k in d})
        raise TypeError(
            f"a dict in a nested structure must have keys of one sortable kind (its leaves are "
            f"ordered by sorted key), got keys {', '.join(repr(k) for k in list(d)[:6])} of types "
            f"{', '.join(kinds)}; use str keys throughout") from None


def pack_as(structure, flat):
    """Rebuild `structure` with leaves taken in order from `flat`."""
    it = iter(flat)
    result = _pack(structure, it)
    for _ in it:
        raise ValueError("pack_as: more leaves than the structure holds")
    return result


def _pack(s, it):
    if isinstance(s, dict):
        return {k: _pack(s[k], it) for k in sorted_keys(s)}
    if isinstance(s, tuple) and hasattr(s, "_fields"):
        return type(s)(*[_pack(v, it) for v in s])
    if isinstance(s, (list, tuple)):
        return type(s)(_pack(v, it) for v in s)
    return next(it)


def make_packer(structure, sources):
    """A fast `f(values) -> structure`: one generated expression instead of a recursive walk.

    `sources` gives, per leaf of `structure` in flatten order, an int (take `values[i]`) or
    `("const", v)` (the leaf is `v`). Dict keys, constants and namedtuple types are passed
    to the generated code as data, never as source text.
    """
    consts, types = [], []
    it = iter(sources)

    def expr(s):
        if isinstance(s, dict):
            keys = sorted_keys(s)
            parts = []
            for k in keys:
                consts.append(k)
                parts.append(f"C[{len(consts) - 1}]: {expr(s[k])}")
            return "{" + ", ".join(parts) + "}"
        if isinstance(s, tuple) and hasattr(s, "_fields"):
            types.append(type(s))
            return f"T[{len(types) - 1}](" + ", ".join(expr(v) for v in s) + ")"
        if isinstance(s, list):
            return "[" + ", ".join(expr(v) for v in s) + "]"
        if isinstance(s, tuple):
            inner = ", ".join(expr(v) for v in s)
            return "(" + inner + ("," if len(s) == 1 else "") + ")"
        src = next(it)
        if isinstance(src, int):
            return f"v[{src}]"
        consts.append(src[1])
        return f"C[{len(consts) - 1}]"

    body = expr(structure)
    ns = {"C": consts, "T": types}
    exec(f"def pack(v):\n    return {body}\n", ns)  # noqa: S102 - source built above from structure only
    return ns["pack"]
