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
        for k in sorted(s):
            _flatten_into(s[k], out)
    elif isinstance(s, (list, tuple)):
        for v in s:
            _flatten_into(v, out)
    else:
        out.append(s)


def pack_as(structure, flat):
    """Rebuild `structure` with leaves taken in order from `flat`."""
    it = iter(flat)
    result = _pack(structure, it)
    for _ in it:
        raise ValueError("pack_as: more leaves than the structure holds")
    return result


def _pack(s, it):
    if isinstance(s, dict):
        return {k: _pack(s[k], it) for k in sorted(s)}
    if isinstance(s, tuple) and hasattr(s, "_fields"):
        return type(s)(*[_pack(v, it) for v in s])
    if isinstance(s, (list, tuple)):
        return type(s)(_pack(v, it) for v in s)
    return next(it)
