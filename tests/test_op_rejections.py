"""Every op's static inference rejects, while tracing, what its kernel rejects eagerly.

For every row of the op table (tests/test_ops.py ROWS, with the op_rows_*.py families) bad
variants are derived from its good ones: an axis out of range, an axis named twice, a
negative size, depth or count, a zero stride, a mismatched shape for a second input,
inputs of the wrong dtype kind, a bool flag given "no" or 0 (these must raise: a truthy
string is not True), a float attr given NaN. For each, if the eager call raises, then:
  - the error is typed (a df.errors class, or a TypeError/ValueError of the library), starts
    with the name of the op (or public function) that refused it, and is not the kernel
    wrapper's fallback ("... failed: <numpy's words>"), which means no check named the problem;
  - tracing the same call with the same input signature raises the same kind of error while
    tracing (inference refused it), and the message names the user's file and line.
"""
import os
import re

import numpy as np
import pytest

import defun as df
from opcheck import A, make_inputs
from defun.runtime import registry
from op_table import ROWS

TESTS = os.path.dirname(os.path.abspath(__file__))
SIZE_KEYS = ("depth", "num", "k", "num_segments", "num_rows", "num_columns", "repeats", "num_or_size_splits")
SHAPE_KEYS = ("shape", "dims", "multiples", "dense_shape", "noise_shape")
WINDOW_KEYS = ("strides", "ksize", "dilations")
MUST_RAISE = ("flag_",)     # labels of bad variants that must raise (the others: if they raise)
INTERNAL_FLAGS = {"linear_scan"}    # run by the library's own code (cumsum's gradient), never a user

# Bad variants only values can show (the trace sees shapes and dtypes, not values): for each,
# the reason. Running the graph raises the same error (tests/test_bad_inputs.py does so).
VALUE_DEPENDENT = {
    ("pow", "int_inputs"): "an integer to a negative power: the exponent's values say so",
    ("dynamic_range", "int_inputs"): "a delta of 0 (0.25 as an int): the input's value",
    ("dynamic_reshape", "input_0_mismatched_shape"): "9 elements fit (None, 3); the run-time shape [2, 3] does not",
    ("dynamic_tile_reduce", "input_0_mismatched_shape"): "(9,) is (3,) tiled 3 times; the run-time multiples say 2",
    ("check_batch_size", "input_0_mismatched_shape"): "the batch size it checks is an input's value (vmap's "
                                                      "run-time batch size): the check is the op's purpose",
}


def _mutations(v, flags=()):
    """(label, arg specs, kw, dtype override) of the bad variants derived from variant `v`
    (`flags`: the names of its op's bool attrs given by a user)."""
    kw = v.kw
    for key, val in kw.items():
        if isinstance(val, bool) and key in flags:   # anything but a bool must be refused (MUST_RAISE)
            yield f"flag_{key}_str", v.args, {**kw, key: "no"}, None
            yield f"flag_{key}_int", v.args, {**kw, key: int(val)}, None
        elif isinstance(val, float):    # a float attr: NaN refused, if at all, by a typed error
            yield f"nan_{key}", v.args, {**kw, key: float("nan")}, None
        if key == "axis" and isinstance(val, int) and not isinstance(val, bool):
            yield "axis_out_of_range", v.args, {**kw, key: 7}, None
            yield "axis_negative_out_of_range", v.args, {**kw, key: -9}, None
        elif key == "axis" and isinstance(val, (tuple, list)) and val:
            yield "axis_named_twice", v.args, {**kw, key: tuple(val) + (val[0],)}, None
            yield "axes_out_of_range", v.args, {**kw, key: (7,)}, None
        elif key in SIZE_KEYS and isinstance(val, int) and not isinstance(val, bool):
            yield f"negative_{key}", v.args, {**kw, key: -1}, None
        elif key in SHAPE_KEYS and isinstance(val, (tuple, list)) and val and isinstance(val[0], int):
            yield f"negative_size_in_{key}", v.args, {**kw, key: type(val)([-3] + list(val[1:]))}, None
        elif key in WINDOW_KEYS and isinstance(val, int):
            yield f"zero_{key}", v.args, {**kw, key: 0}, None
    if len(v.args) >= 2:
        for k in (1, 0):
            a = v.args[k]
            if a.value is None and a.shape:
                shape = a.shape[:-1] + (a.shape[-1] + 3,)
                args = v.args[:k] + (A(shape, a.kind, a.dtype, a.high),) + v.args[k + 1:]
                yield f"input_{k}_mismatched_shape", args, kw, None
                break
    floats = [i for i, a in enumerate(v.args) if a.is_float_input]
    if floats:
        yield "int_inputs", v.args, kw, df.int32
        yield "bool_inputs", v.args, kw, df.bool
    pinned = [i for i, a in enumerate(v.args) if a.dtype is not None and a.dtype.is_integer]
    if pinned:
        args = tuple(A(a.shape, a.kind, df.float32 if i in pinned else a.dtype, a.high, a.value)
                     for i, a in enumerate(v.args))
        yield "float_indices", args, kw, None


def _flags(row):
    """The op's bool attrs a user passes (an internal op's are set by the library itself)."""
    if row.op in INTERNAL_FLAGS:
        return ()
    return tuple(a for a, t in registry.get(row.op).attrs.items() if t == "bool")


def _bad_cases(row):
    seen = set()
    flags = _flags(row)
    for v in row.variants:
        dt = row.dtypes_of(v)[0]
        for label, args, kw, override in _mutations(v, flags):
            key = (label, repr(args), repr(sorted(kw.items(), key=lambda kv: kv[0])), override)
            if key not in seen:
                seen.add(key)
                yield label, args, kw, override or dt


def _typed(e):
    return isinstance(e, (df.errors.DefunError, TypeError, ValueError))


@pytest.mark.parametrize("row", [pytest.param(r, id=r.op) for r in ROWS])
def test_inference_rejects_what_the_kernel_rejects(row):
    problems = [p for p in map(_check, _cases_of(row)) if p]
    assert not problems, f"{len(problems)} bad variants of {row.op}:\n" + "\n".join(problems)


def _cases_of(row):
    return [(row,) + case for case in _bad_cases(row)]


def _check(case):
    """None if the case is fine, else what is wrong with it."""
    row, label, args, kw, dt = case
    if (row.op, label) in VALUE_DEPENDENT:
        return None
    with np.errstate(invalid="ignore"):     # (inf and nan as ints: the bad variant is the point)
        xs = make_inputs(args, dt)
    try:
        with np.errstate(all="ignore"):
            row.fn(*[df.constant(x) for x in xs], **kw)
    except Exception as e:  # noqa: BLE001 - which errors are fine is the point of the test
        eager = e
    else:
        if label.startswith(MUST_RAISE):
            return f"{row.op} {label} {kw}: accepted (a flag given a non-bool must be refused)"
        return None
    what = f"{row.op} {label} {kw}"
    msg = str(eager)
    if not _typed(eager):
        return f"{what}: untyped eager error {type(eager).__name__}: {msg}"
    if re.search(r"\) failed: |\) with .* failed: ", msg):
        return f"{what}: the kernel's own words reached the user (no check named the problem): {msg}"
    first = re.match(r"[A-Za-z_0-9.]+", msg)
    if not first or not (registry.exists(first.group(0)) or hasattr(df, first.group(0))):
        return f"{what}: the error should start with the op's name: {msg}"
    sig = [df.TensorSpec(np.shape(x), df.as_dtype(np.asarray(x).dtype)) for x in xs]

    def traced(*ts):
        return row.fn(*ts, **kw)
    try:
        df.defun(traced, input_signature=sig).get_concrete_function()
    except Exception as e:  # noqa: BLE001
        got = e
    else:
        return f"{what}: eager raised {type(eager).__name__} ({msg}), but the trace accepted it"
    traced_msg = str(got)
    if not (isinstance(got, type(eager)) or isinstance(eager, type(got))):
        return f"{what}: eager raised {type(eager).__name__}, the trace {type(got).__name__}: {traced_msg}"
    site = re.search(r"while tracing, at (\S+?):(\d+)", traced_msg)
    if not site or os.path.dirname(os.path.abspath(site.group(1))) != TESTS:
        return f"{what}: the traced error should name the user's line (a file in tests/): {traced_msg}"
    return None
