"""Binding a call's positional and keyword arguments to a function's input names.

One function for the two entries that take a graph's inputs by name: a loaded function
(graph/serialize/loaded.py) and the module `export_numpy_source` writes, which needs only
numpy and so carries this function's own source text (graph/numpy_source/module.py). It
therefore uses nothing but builtins.
"""

__all__ = ["bind_arguments"]


def bind_arguments(where, names, args, kwargs):
    """The arguments in `names`' order, from positions `args` and keywords `kwargs`; a
    TypeError starting with `where` ('affine:', 'forward()') for any other call."""
    if len(args) > len(names):
        raise TypeError(f"{where} takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{where} got an unexpected keyword argument {key!r}; its "
                            f"arguments are {', '.join(names) or 'none'}")
        if key in bound:
            raise TypeError(f"{where} got several values for argument {key!r}")
        bound[key] = value
    missing = [n for n in names if n not in bound]
    if missing:
        raise TypeError(f"{where} missing argument{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(map(repr, missing))}")
    return [bound[n] for n in names]
