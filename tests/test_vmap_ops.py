"""The batching rules against numpy loops, swept over the op table (tests/op_rows_*.py).

For every row and input variant of tests/test_ops.py's table: `df.vmap` of the row's
function on a batch of examples == the function applied to each example and stacked, with
every input batched and with only the first one batched (the rest shared), eagerly and in
a defun; and per-example gradients (`df.vmap(df.gradients_function(...))`, which batches the
gradient rules' own ops) == each example's tape gradient. The registry test: every op row
with a gradient declares a batching rule or says why it has none.
"""
import re

import numpy as np
import pytest

import defun as df
from defun.runtime import errors, registry
from opcheck import as_numpy, configuration, make_inputs

import op_table as table

B = 3

# Batched inputs a rule leaves out on purpose (it raises UnimplementedError naming the op,
# so vectorized_map(..., fallback_to_while_loop=True) loops): op -> what is not covered.
# Every other configuration of these ops is checked like any row.
UNCOVERED = {
    "conv2d": "a filter per example", "conv2d_backprop_input": "a filter per example",
    "dropout": "a seed per example",
    "dynamic_reshape": "a shape tensor per example", "dynamic_broadcast_to": "a shape tensor per example",
    "dynamic_tile": "multiples per example", "dynamic_tile_reduce": "multiples per example",
    "dynamic_fill": "a shape tensor per example",
    "stateless_random_uniform": "no rule: not differentiable; a seed per example",
    "stateless_random_normal": "no rule: not differentiable; a seed per example",
    "dynamic_range": "no rule: not differentiable; its length is data-dependent",
}


def test_every_differentiable_row_declares_a_batching_rule():
    missing = [op.name for op in registry.all_ops() if op.grad is not None and op.batch is None]
    assert not missing, f"op rows with a gradient and no batching rule (nor a reason string): {missing}"
    for op in registry.all_ops():
        if isinstance(op.batch, str):
            assert len(op.batch) > 20, f"{op.name}: the reason it has no batching rule says too little"


def _cases():
    out = []
    for row in table.ROWS:
        for k, v in enumerate(row.variants):
            if not v.args:
                continue
            out.append(pytest.param(row, v, k, id=f"{row.op}-{k}"))
    return out


def _dtype(row, v):
    dts = row.dtypes_of(v)
    return df.float64 if df.float64 in dts else dts[0]


def _examples(v, dt):
    return [make_inputs(v.args, dt, seed) for seed in range(B)]


def _stacked(results):
    """Per-example results (a tensor or a tuple of them) stacked along a new axis 0."""
    if isinstance(results[0], (tuple, list)):
        return [np.stack([as_numpy(r[k]) for r in results]) for k in range(len(results[0]))]
    return np.stack([as_numpy(r) for r in results])


def _check(actual, expected, what):
    if isinstance(expected, list):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), what
        for k, (a, e) in enumerate(zip(actual, expected)):
            _check(a, e, f"{what}[{k}]")
        return
    a = as_numpy(actual)
    assert a.shape == expected.shape, f"{what}: shape {a.shape}, expected {expected.shape}"
    assert a.dtype == expected.dtype, f"{what}: dtype {a.dtype}, expected {expected.dtype}"
    if a.dtype.kind == "f":
        tol = 1e-9 if a.dtype == np.float64 else 1e-4
        np.testing.assert_allclose(a, expected, rtol=tol, atol=tol, err_msg=what)
    else:
        np.testing.assert_array_equal(a, expected, err_msg=what)


def _rule_of(row):
    return registry.get(row.op).batch if registry.exists(row.op) else None


@pytest.mark.parametrize("row,v,k", _cases())
def test_vmap_and_per_example_gradients_match_the_loop(row, v, k):
    """One item per row variant (each item costs CI time): the batched values, then (for a
    differentiable variant) the per-example gradients; a failure says which."""
    exs = _examples(v, _dtype(row, v))
    with configuration(f"{row.op}{v!r} values"):
        _vmap_matches_the_loop(row, v, k, exs)
    if row.grad is True and v.grad and any(a.is_float_input for a in v.args):
        with configuration(f"{row.op}{v!r} per-example gradients"):
            _per_example_gradients_match_the_loop(row, v, exs)


def _vmap_matches_the_loop(row, v, k, exs):
    fn = lambda *xs: row.fn(*xs, **v.kw)     # noqa: E731
    refused = (errors.InvalidArgumentError, errors.UnimplementedError, ValueError, TypeError)
    try:
        per = [fn(*[df.constant(x) for x in ex]) for ex in exs]
    except refused:     # an error variant: batched, it is refused too (typed), never a value
        with pytest.raises(refused):
            df.vmap(fn)(*[np.stack(xs) for xs in zip(*exs)])
        return
    if isinstance(_rule_of(row), str):
        with pytest.raises(errors.UnimplementedError, match=row.op):
            df.vmap(fn)(*[np.stack(xs) for xs in zip(*exs)])
        return
    batch = [np.stack(xs) for xs in zip(*exs)]
    _check_or_uncovered(row, lambda: df.vmap(fn)(*batch), _stacked(per), "all batched")
    if k == 0:    # in a defun too (once per row: the rules emit the same ops either way)
        _check_or_uncovered(row, lambda: df.defun(df.vmap(fn))(*batch), _stacked(per), "all batched, in a defun")
    if len(batch) > 1:
        shared = exs[0][1:]
        per1 = [fn(*[df.constant(x) for x in [ex[0]] + list(shared)]) for ex in exs]
        _check_or_uncovered(row, lambda: df.vmap(fn, in_axes=(0,) + (None,) * len(shared))(batch[0], *shared),
                            _stacked(per1), "first batched")
        per2 = [fn(*[df.constant(x) for x in [exs[0][0]] + list(ex[1:])]) for ex in exs]
        _check_or_uncovered(row, lambda: df.vmap(fn, in_axes=(None,) + (0,) * len(shared))(exs[0][0], *batch[1:]),
                            _stacked(per2), "first shared")


def _check_or_uncovered(row, run, expected, what):
    """`run()` matches `expected`, or, for a configuration UNCOVERED lists, raises
    UnimplementedError naming the op (never a wrong value)."""
    if row.op not in UNCOVERED:
        _check(run(), expected, f"{row.op} {what}")
        return
    try:
        got = run()
    except errors.UnimplementedError as e:
        assert row.op in str(e), str(e)
        return
    _check(got, expected, f"{row.op} {what}")


def _per_example_gradients_match_the_loop(row, v, exs):
    floats = [i for i, a in enumerate(v.args) if a.is_float_input]

    def loss(*xs):
        out = row.fn(*xs, **v.kw)
        outs = out if isinstance(out, (tuple, list)) else [out]
        total = 0.0
        for o in outs:
            if isinstance(o, df.Tensor) and o.dtype.is_floating:
                total = total + df.reduce_sum(df.sin(o))
        return total
    per = None
    while floats and per is None:       # inputs that only give a shape (`like`) have no gradient
        grad = df.gradients_function(loss, params=floats)
        try:
            per = [grad(*[df.constant(x) for x in ex]) for ex in exs]
        except ValueError as e:
            unconnected = re.search(r"\(position (\d+)\) of loss is not connected", str(e))
            if unconnected is None:
                raise
            floats = [i for i in floats if i != int(unconnected.group(1))]
        except (errors.InvalidArgumentError, errors.UnimplementedError, TypeError) as e:
            per = e
    batch = [np.stack(xs) for xs in zip(*exs)]
    if per is None or isinstance(per, Exception):
        # refused eagerly, or no input differentiable: the batched gradient is refused too
        with pytest.raises((errors.InvalidArgumentError, errors.UnimplementedError, TypeError, ValueError)):
            df.vmap(df.gradients_function(loss, params=floats or None))(*batch)
        return
    try:
        got = df.vmap(grad)(*batch)
    except errors.UnimplementedError as e:
        # only an op that says why it has no rule may stop it
        names = [op.name for op in registry.all_ops() if isinstance(op.batch, str)] + list(UNCOVERED)
        assert any(n in str(e) for n in names), str(e)
        return
    expected = [np.stack([as_numpy(p[k]) for p in per]) for k in range(len(floats))]
    _check([df.convert_to_tensor(g) if g is not None else g for g in got], expected, f"{row.op} gradients")
