"""Checkpoints: variables saved to and restored from a `.npz` file, by variable name.

`save_variables` writes every array into a temporary file next to the target and renames
it over the target, so a reader never sees a half-written checkpoint and a crash leaves the
old one in place. `restore_variables` reads and checks every entry (present, same shape,
same dtype) before assigning any, so a bad checkpoint changes nothing; an entry's shape
and dtype are read from its .npy header before it is inflated, so a small compressed file
claiming gigabytes is refused without allocating them. The file is read with pickling
disabled: loading runs no code from it.

Beside training threads: a save takes its values as one step (`all_or_nothing`,
runtime/variables.py: the variables' locks held while their arrays are taken, never while
writing), so a checkpoint never mixes two optimizer steps or two calls of a compiled step;
a restore assigns every variable under those locks and, if interrupted, puts them all back.
"""
import os
import zipfile

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.context import state
from defun.runtime.files import write_atomically
from defun.runtime.nest import flatten
from defun.runtime.variables import Variable, all_or_nothing

__all__ = ["save_variables", "restore_variables"]


def save_variables(path, variables):
    """Write the values of `variables` to the `.npz` file `path`, keyed by `v.name`.

    >>> df.save_variables("model.npz", [w, b] + opt.variables())

    Names must be unique (give variables `name=`). Returns `path`.
    """
    variables = _variable_list(variables, "save_variables")
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise errors.NotFoundError(f"save_variables: directory {directory!r} does not exist")
    with all_or_nothing(variables) as step:     # one consistent step (arrays are never
        arrays = step.values()                  # written in place: no copy needed)

    def write(f):
        # the layout of np.savez, written member by member so that any name is a key (savez
        # takes names as keyword arguments, which clash with its own parameters)
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            for v, arr in zip(variables, arrays):
                with zf.open(v.name + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asarray(arr), allow_pickle=False)
    return write_atomically(path, write)


def restore_variables(path, variables):
    """Assign each of `variables` the value saved under its name in the `.npz` file `path`.

    >>> df.restore_variables("model.npz", [w, b] + opt.variables())

    Every entry is checked before any variable changes: a missing name raises NotFoundError,
    a wrong shape or dtype InvalidArgumentError (both name the variable). Entries of the file
    that no variable asks for are ignored.
    """
    variables = _variable_list(variables, "restore_variables")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise errors.NotFoundError(f"restore_variables: no checkpoint file {path!r}")
    values = {}
    try:
        with np.load(path, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile):
                raise ValueError("it holds a single array, not named entries")
            present = set(data.files)
            missing = [v.name for v in variables if v.name not in present]
            if missing:
                raise errors.NotFoundError(
                    f"restore_variables: {path!r} has no entr{'ies' if len(missing) > 1 else 'y'} "
                    f"{', '.join(repr(n) for n in missing)} (it holds {_listing(data.files)})")
            for v in variables:
                _check_header(data.zip, v, path)     # before inflating the entry
                values[v.name] = data[v.name]
    except errors.DefunError:
        raise
    except Exception as e:   # zipfile.BadZipFile, a truncated member, pickled data, ...
        raise errors.InvalidArgumentError(
            f"restore_variables: {path!r} is not a readable .npz checkpoint ({type(e).__name__}: "
            f"{e})") from None
    for v in variables:
        arr = values[v.name]
        if arr.shape != tuple(v.shape) or arr.dtype != v.dtype.np:
            raise _mismatch(v, path, arr.shape, arr.dtype)
    with all_or_nothing(variables):     # all of them, or (interrupted) none
        for v in variables:
            v.assign(values[v.name])


def _mismatch(v, path, shape, dtype):
    return errors.InvalidArgumentError(
        f"restore_variables: entry {v.name!r} of {path!r} is {_describe(shape, dtype)}, the variable "
        f"is {v.dtype.name}{list(v.shape)}; nothing was restored")


def _check_header(zf, v, path):
    """Refuse entry `v.name` by its .npy header (shape and dtype), read from inside the zip
    before the entry is inflated: a small compressed file may claim gigabytes."""
    member = v.name + ".npy" if v.name + ".npy" in zf.NameToInfo else v.name
    with zf.open(member) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    if dtype.hasobject:     # (the caller reports it as an unreadable checkpoint)
        raise ValueError(f"entry {v.name!r} holds Python objects, which would need unpickling")
    if tuple(shape) != tuple(v.shape) or dtype != v.dtype.np:
        raise _mismatch(v, path, shape, dtype)


def _variable_list(variables, what):
    if state.graph is not None:
        raise errors.TracingError(f"{what} reads and writes files, so it runs eagerly; call it "
                                  f"outside the traced function")
    flat = [variables] if isinstance(variables, Variable) else flatten(list(variables))
    by_name = {}
    for k, v in enumerate(flat):
        if not isinstance(v, Variable):
            raise TypeError(f"{what}: entry {k} is not a df.Variable (got {type(v).__name__})")
        if v.name in by_name:
            raise errors.InvalidArgumentError(
                f"{what}: two variables are named {v.name!r} (entries {by_name[v.name]} and {k}); "
                f"checkpoints are keyed by name, so give each variable a distinct name=")
        by_name[v.name] = k
    return flat


def _describe(shape, dtype):
    try:
        return f"{dtypes.from_numpy(dtype).name}{list(shape)}"
    except errors.InvalidArgumentError:
        return f"{dtype}{list(shape)}"


def _listing(names, limit=8):
    names = sorted(names)
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "") if names else "nothing"
