"""The op table: every registered op against a plain-numpy reference.

One `Row` per op: the df call, a numpy reference, and input variants (scalar, vector,
matrix, broadcasting pairs). From the table:
  - eager result == numpy reference (values, shape, dtype), for each dtype of the row;
  - each executed op's inference == the kernel's actual output, also with sizes unknown;
  - gradient from df.GradientTape == central finite differences (float64);
  - gradient rules build symbolically with known and with unknown (None) sizes;
  - second-order gradients for the rows marked `second`;
  - ops declared non-differentiable give no gradient;
  - every registered op appears in a row (or in an explicit, reasoned exclusion).
Typed errors and the special cases (IndexedSlices, variables, slicing) are in
test_ops_errors.py and test_ops_special.py.
"""
import pytest

import defun as df
from defun.runtime import registry
from op_table import API_ND, EXCLUDED, ROW_BY_OP, ROWS, float_inputs, op_cases
from opcheck import (as_numpy, assert_same, check_call_inference, check_gradient, check_second_order,
                     check_symbolic_gradient, configuration, make_inputs, recording)

f64 = df.float64


# ---------------------------------------------------------------------------------------
# Eager result == numpy reference; inference == kernel output

@pytest.mark.parametrize("row,v", op_cases())
def test_matches_numpy(row, v):
    """Every dtype of the variant (dtype None: the row's creation ops take no tensor input)."""
    for dt in row.dtypes_of(v):
        with configuration(f"{row.op}{v!r} {dt.name if dt else 'static'}"):
            _matches_numpy(row, v, dt)


def _matches_numpy(row, v, dt):
    xs = make_inputs(v.args, dt)
    with recording() as calls:
        out = row.fn(*[df.constant(x) for x in xs], **v.kw)
    expected = row.ref(*xs, **v.kw)
    assert_same(out, expected, f"{row.op}{v!r}", row.tol)
    assert row.op in {c.op for c in calls}, f"row {row.op} never ran op {row.op}: ran {[c.op for c in calls]}"
    for c in calls:
        check_call_inference(c)


@pytest.mark.parametrize("row", [pytest.param(r, id=r.op) for r in ROWS])
def test_row_exercises_its_helpers(row):
    """Forward and backward of all variants run the row's op and the helpers it names;
    inference of every op executed in the backward pass agrees with its kernel too."""
    seen = set()
    for v in row.variants:
        dt = (row.dtypes_of(v) or (None,))[0]
        dt = f64 if (row.grad is True and v.grad and dt is not None and dt.is_floating) else dt
        xs = make_inputs(v.args, dt)
        ts = [df.constant(x) for x in xs]
        with recording() as calls:
            with df.GradientTape(persistent=True) as tape:
                tape.watch(ts)
                out = row.fn(*ts, **v.kw)
            if row.grad is True and v.grad and float_inputs(v):
                grads = tape.gradient(out, [ts[i] for i in float_inputs(v)])
                [as_numpy(g) for g in grads if g is not None]
        for c in calls:
            check_call_inference(c)
        seen |= {c.op for c in calls}
    missing = ({row.op} | set(row.also)) - seen
    assert not missing, f"row {row.op} never executed {sorted(missing)} (ran {sorted(seen)})"


# ---------------------------------------------------------------------------------------
# Gradients

@pytest.mark.parametrize("row,v", op_cases(lambda r, v: r.grad is True and v.grad and float_inputs(v)))
def test_gradient_matches_finite_differences(row, v):
    xs = make_inputs(v.args, f64)
    check_gradient(lambda *ts: row.fn(*ts, **v.kw), xs, float_inputs(v))


def _has_float_dtype(row, v):
    """Whether a row variant runs in a float dtype (an integer-only op, bitwise_and, has no gradient to give)."""
    return any(d is not None and d.is_floating for d in row.dtypes_of(v))


@pytest.mark.parametrize("row,v", op_cases(lambda r, v: r.grad is False and float_inputs(v) and _has_float_dtype(r, v)))
def test_non_differentiable_ops_give_no_gradient(row, v):
    dt = next((d for d in row.dtypes_of(v) if d is not None and d.is_floating), f64)
    xs = make_inputs(v.args, dt)
    ts = [df.constant(x) for x in xs]
    with df.GradientTape() as tape:
        tape.watch(ts)
        out = row.fn(*ts, **v.kw)
    grads = tape.gradient(out, [ts[i] for i in float_inputs(v)])
    assert all(g is None for g in grads), f"{row.op} is declared non-differentiable but gave {grads}"


def test_non_differentiable_declarations_agree():
    for name in API_ND:
        assert registry.get(name).grad is None, f"API.md marks {name} (nd) but it has a gradient"
        assert ROW_BY_OP[name].grad is False, f"row {name} must say grad=False"
    for row in ROWS:
        if row.grad is True:
            assert registry.get(row.op).grad is not None, f"row {row.op} checks a gradient the op lacks"


@pytest.mark.parametrize("row,v", op_cases(lambda r, v: r.second and v.grad and float_inputs(v)))
def test_second_order_gradient(row, v):
    xs = make_inputs(v.args, f64)
    check_second_order(lambda *ts: row.fn(*ts, **v.kw), xs, float_inputs(v), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("row,v", op_cases(lambda r, v: r.grad is True and v.grad))
def test_gradient_builds_symbolically(row, v):
    """Every op the row runs infers and builds its gradient as graph code would, and the
    gradients' static shapes/dtypes fit the inputs (exactly, when sizes are known); with
    known sizes, then with unknown sizes."""
    xs = make_inputs(v.args, f64 if float_inputs(v) else row.dtypes_of(v)[0])
    with recording() as calls:
        row.fn(*[df.constant(x) for x in xs], **v.kw)
    for unknown in (False, True):
        with configuration(f"{row.op}{v!r} with {'unknown' if unknown else 'known'} sizes"):
            for c in calls:
                check_symbolic_gradient(c, unknown)


# ---------------------------------------------------------------------------------------
# Inputs of every kind: numpy arrays and variables give the same result as tensors

@pytest.mark.parametrize("row", [pytest.param(r, id=r.op) for r in ROWS if r.variants[-1].args])
def test_accepts_arrays_and_variables(row):
    v = row.variants[-1]
    dt = row.dtypes_of(v)[0]
    xs = make_inputs(v.args, dt)
    expected = as_numpy(row.fn(*[df.constant(x) for x in xs], **v.kw))
    from_arrays = row.fn(*xs, **v.kw)
    if isinstance(from_arrays, (df.Tensor, tuple, list)):  # x[key] on an array stays numpy
        assert_same(from_arrays, expected, f"{row.op} on numpy arrays")
    variables = [df.Variable(x) for x in xs]
    assert_same(row.fn(*variables, **v.kw), expected, f"{row.op} on variables")


# ---------------------------------------------------------------------------------------
# Coverage: a new op without a row fails here

def test_every_registered_op_has_a_row():
    covered = set(ROW_BY_OP) | set(EXCLUDED)
    missing = sorted(op.name for op in registry.all_ops() if op.name not in covered)
    assert not missing, (f"registered ops without a row in tests/test_ops.py: {missing}; add a Row "
                         f"(or an EXCLUDED entry with the reason)")
    stale = sorted(n for n in covered if not registry.exists(n))
    assert not stale, f"rows/exclusions name unregistered ops: {stale}"
    assert len(ROW_BY_OP) == len(ROWS), "two rows claim the same op"


# ---------------------------------------------------------------------------------------
# Every op is declared explicitly: nothing about its inputs or attrs is read off its kernel.

def test_every_op_declares_num_inputs_attrs_and_defaults():
    import inspect
    from defun.runtime import registry
    src = inspect.getsource(registry.register)
    assert "signature" not in src and "import inspect" not in inspect.getsource(registry)
    for op in registry.all_ops():
        assert op.num_inputs is None or isinstance(op.num_inputs, int), op.name
        assert all(t in registry.ATTR_TYPES for t in op.attrs.values()), op.name
        assert set(op.defaults) <= set(op.attrs), op.name
        assert op.required_attrs == {a for a, t in op.attrs.items()
                                     if t != "transient" and a not in op.defaults}, op.name


@pytest.mark.parametrize("missing", ["num_inputs", "attrs", "defaults"])
def test_register_refuses_an_op_without_explicit_declarations(missing):
    from defun.runtime import registry
    kw = {"num_inputs": 1, "attrs": {}, "defaults": {}}
    del kw[missing]
    with pytest.raises(TypeError, match=missing):
        registry.register("never_registered_" + missing, lambda x: x, None, **kw)
    assert not registry.exists("never_registered_" + missing)
