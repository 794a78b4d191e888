"""Eager versus graph, for every row of the op table: `df.defun` of the row's call gives
the eager values and the eager gradients, with static shapes and with every size unknown
(an input_signature of None sizes, so gradient rules take their dynamic paths)."""
import numpy as np
import pytest

import defun as df
from opcheck import as_list, as_numpy, assert_same, make_inputs, random_cotangents, tape_vjp
from op_table import (ROWS, documented_refusal, float_inputs, graph_dtype, graph_rows, input_signature_of,
                      op_cases)

f64 = df.float64


def _exact(actual, expected, what):
    """Same shapes, dtypes and values (graph kernels are the eager kernels)."""
    assert_same(actual, [as_numpy(e) for e in expected] if isinstance(expected, (list, tuple))
                else as_numpy(expected), what, tol=(1e-12, 1e-12))


def _static_and_unknown(check, row, v):
    """`check(row, v, unknown)` with static sizes, then unknown sizes: one pytest item, not
    two (the CI run's time); a failure says which."""
    for unknown in (False, True):
        try:
            check(row, v, unknown)
        except AssertionError as e:
            raise AssertionError(f"with {'unknown' if unknown else 'static'} sizes: {e}") from e


@pytest.mark.parametrize("row,v", op_cases(graph_rows))
def test_graph_matches_eager(row, v):
    _static_and_unknown(_graph_matches_eager, row, v)


def _graph_matches_eager(row, v, unknown):
    xs = make_inputs(v.args, graph_dtype(row, v))
    ts = [df.constant(x) for x in xs]
    eager = row.fn(*ts, **v.kw)
    traced = df.defun(lambda *a: row.fn(*a, **v.kw), input_signature=input_signature_of(xs, unknown))
    try:
        graph = traced(*ts)
    except df.errors.InvalidArgumentError as e:
        if documented_refusal(row, e, unknown):
            return  # the refusal is the specified behaviour; its message is checked above
        raise
    _exact(graph, eager, f"{row.op}{v!r} graph vs eager")


@pytest.mark.parametrize("row,v", op_cases(lambda r, v: graph_rows(r, v) and r.grad is True and v.grad
                                            and float_inputs(v)))
def test_graph_gradient_matches_eager(row, v):
    # static sizes and unknown sizes in one test (the CI run's time: one pytest item, not two)
    _static_and_unknown(_graph_gradient_matches_eager, row, v)


def _graph_gradient_matches_eager(row, v, unknown):
    xs = make_inputs(v.args, f64)
    wrt = float_inputs(v)
    ws = random_cotangents(lambda *a: row.fn(*a, **v.kw), xs)

    def grads(fn):
        return tape_vjp(fn, xs, ws, wrt)

    eager = grads(lambda *a: row.fn(*a, **v.kw))
    traced = df.defun(lambda *a: row.fn(*a, **v.kw), input_signature=input_signature_of(xs, unknown))
    try:
        graph = grads(traced)
    except df.errors.InvalidArgumentError as e:
        if documented_refusal(row, e, unknown):
            return  # the refusal is the specified behaviour; its message is checked above
        raise
    for k, (g, e) in enumerate(zip(graph, eager)):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12, err_msg=f"{row.op}{v!r} input {wrt[k]}")


# ---------------------------------------------------------------------------------------
# Graph kernels bound at compile time (OpDef.bind) against the eager kernels, exactly

def _bound_calls(row, v):
    """[(op, attrs, input values, output values)] of every op with a `bind` that the row
    runs eagerly, forward and (for differentiable rows) backward."""
    from defun.runtime import registry
    calls = []

    def record(op_name, name, attrs, inputs, outputs):
        op = registry.get(op_name)
        if op.bind is not None:
            calls.append((op, dict(attrs), [t._value for t in inputs], [t._value for t in outputs]))
    xs = make_inputs(v.args, graph_dtype(row, v))
    ts = [df.constant(x) for x in xs]
    df.add_execution_callback(record)
    try:
        with df.GradientTape() as tape:
            tape.watch(ts)
            out = as_list(row.fn(*ts, **v.kw))
        wrt = float_inputs(v)
        if row.grad is True and v.grad and wrt:
            tape.gradient(out, [ts[i] for i in wrt])
    finally:
        df.remove_execution_callback(record)
    return calls


@pytest.mark.parametrize("row,v", op_cases(graph_rows))
def test_bound_kernels_equal_eager_kernels(row, v):
    """op.bind(attrs)(*values) returns what op.kernel(*values, **attrs) returned eagerly:
    same type (array or numpy scalar), dtype, shape and bits."""
    for op, attrs, ins, outs in _bound_calls(row, v):
        bound = op.bind(attrs)(*ins)
        bound = [bound] if op.single else list(bound)
        assert len(bound) == len(outs), f"{op.name} {attrs}: {len(bound)} outputs, eager gave {len(outs)}"
        for k, (b, e) in enumerate(zip(bound, outs)):
            what = f"{row.op}{v!r}: bound {op.name} {attrs} output {k}"
            assert type(b) is type(e), f"{what}: {type(b).__name__}, eager gave {type(e).__name__}"
            assert b.dtype == e.dtype and b.shape == e.shape, f"{what}: {b.dtype}{b.shape} vs {e.dtype}{e.shape}"
            np.testing.assert_array_equal(b, e, err_msg=what)


def test_bound_kernels_are_exercised():
    """The table reaches the specialized graph kernels (a row dropping them fails here)."""
    seen = set()
    for row in ROWS:
        if graph_rows(row, None):
            for v in row.variants:
                seen |= {(op.name, tuple(sorted(attrs.items()))) for op, attrs, _, _ in _bound_calls(row, v)}
    names = {n for n, _ in seen}
    for name in ("matmul", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reshape",
                 "expand_dims", "broadcast_to", "transpose"):
        assert name in names, f"no table row runs {name} eagerly"
    transposes = {dict(a).get("transpose_a", False) * 2 + dict(a).get("transpose_b", False)
                  for n, a in seen if n == "matmul"}
    assert transposes == {0, 1, 2, 3}, f"matmul transposes covered: {sorted(transposes)}"


# ---------------------------------------------------------------------------------------
# Eager versus the exported and reloaded graph, for every row

@pytest.mark.parametrize("row,v", op_cases(graph_rows))
def test_json_round_trip_matches_eager(row, v):
    # static sizes and unknown sizes in one test (the CI run's time: one pytest item, not two)
    _static_and_unknown(_json_round_trip_matches_eager, row, v)


def _json_round_trip_matches_eager(row, v, unknown):
    """export_json -> json text -> load_json runs every row as eagerly, bit for bit; the
    document meets the published schema. With its backward function (differentiable rows),
    the loaded function's gradients are the eager gradients."""
    import json
    from schema_check import assert_valid
    xs = make_inputs(v.args, graph_dtype(row, v))
    eager = row.fn(*[df.constant(x) for x in xs], **v.kw)
    traced = df.defun(lambda *a: row.fn(*a, **v.kw), input_signature=input_signature_of(xs, unknown))
    try:
        cf = traced.get_concrete_function()
    except df.errors.InvalidArgumentError as e:
        if documented_refusal(row, e, unknown):
            return
        raise
    doc = json.loads(json.dumps(df.export_json(cf)))
    assert_valid(doc, f"{row.op}{v!r}")
    loaded = df.load_json(doc)
    _exact(loaded(*xs), eager, f"{row.op}{v!r} reloaded vs eager")
    if not (row.grad is True and v.grad and float_inputs(v)):
        return
    doc = json.loads(json.dumps(df.export_json(cf, include_backward=True)))
    assert_valid(doc, f"{row.op}{v!r} with its backward")
    wrt = float_inputs(v)
    ws = random_cotangents(lambda *a: row.fn(*a, **v.kw), xs)

    def grads(fn):
        return tape_vjp(fn, xs, ws, wrt)
    for k, (g, e) in enumerate(zip(grads(df.load_json(doc)), grads(lambda *a: row.fn(*a, **v.kw)))):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12,
                                   err_msg=f"{row.op}{v!r} input {wrt[k]}: loaded backward vs eager")


# ---------------------------------------------------------------------------------------
# Weak typing: numpy arrays and Python numbers as operands convert the same way eagerly and
# traced (one conversion routine, runtime/convert.py), so the graph gives the eager result.

def _operand_forms(xs):
    """The row's inputs as numpy arrays; with scalars as Python numbers; the first a tensor."""
    arrays = [np.asarray(x) for x in xs]
    python = [x.item() if x.ndim == 0 and x.dtype.kind in "fi" else x for x in arrays]
    mixed = [df.constant(arrays[0])] + arrays[1:] if arrays else arrays
    return {"arrays": arrays, "python_scalars": python, "tensor_then_arrays": mixed}


def _run(fn):
    try:
        return fn(), None
    except (df.errors.InvalidArgumentError, df.errors.UnimplementedError, TypeError) as e:
        return None, type(e)


@pytest.mark.parametrize("row,v", op_cases(graph_rows))
def test_graph_converts_arrays_and_python_numbers_like_eager(row, v):
    for form, xs in _operand_forms(make_inputs(v.args, graph_dtype(row, v))).items():
        eager, eager_error = _run(lambda: row.fn(*xs, **v.kw))
        graph, graph_error = _run(lambda: df.defun(lambda: row.fn(*xs, **v.kw))())
        assert graph_error is eager_error, (f"{row.op}{v!r} with {form}: eagerly "
                                            f"{eager_error or 'a result'}, traced {graph_error or 'a result'}")
        if eager_error is None:
            _exact(graph, eager, f"{row.op}{v!r} with {form}: graph vs eager")


@pytest.mark.parametrize("args, dtype", [
    ((1.5, np.array([1.0, 2.0])), np.float64),      # the numpy array is strong: float64
    ((np.array([1, 2], np.int64), 3), np.int64),
    ((1.5, 2), np.float32),                          # the first number sets the dtype
    ((np.float64(0.5), 2.0), np.float64),
])
def test_weak_typing_is_the_same_eagerly_and_traced(args, dtype):
    eager = df.add(*args)
    traced = df.defun(lambda: df.add(*args))()
    assert eager.dtype.np == dtype and traced.dtype.np == dtype
    np.testing.assert_array_equal(eager.numpy(), traced.numpy())


@pytest.mark.parametrize("args", [(2, 1.5), (np.array([1, 2], np.int32), 0.5),
                                  (np.array([1.0], np.float32), np.array([1.0]))])
def test_weak_typing_refuses_the_same_way_eagerly_and_traced(args):
    with pytest.raises(df.errors.InvalidArgumentError) as eager:
        df.add(*args)
    with pytest.raises(df.errors.InvalidArgumentError) as traced:
        df.defun(lambda: df.add(*args))()
    assert str(traced.value).startswith(str(eager.value).split(";")[0].split(" (")[0])
