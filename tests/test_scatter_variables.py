"""Sparse variable updates: v.scatter_add/sub/update(IndexedSlices) and assign* of an IndexedSlices.

Against numpy references, eagerly, in a defun and JSON-reloaded; out-of-range indices name the
variable and the index and change nothing; a failed call rolls back; tapes see the new value
after a scatter but never differentiate through it.
"""
import json

import numpy as np
import pytest

import defun as df
from opcheck import recording

f64 = df.float64


def slices(values, indices, shape):
    return df.IndexedSlices(df.constant(np.asarray(values, np.float64)), df.constant(indices), shape)


def start():
    return np.arange(12, dtype=np.float64).reshape(4, 3)


def reference(kind, base, values, indices):
    out = base.copy()
    values = np.asarray(values, np.float64).reshape((-1,) + base.shape[1:])
    for i, row in zip(np.asarray(indices).reshape(-1), values):
        if kind == "add":
            out[i] += row
        elif kind == "sub":
            out[i] -= row
        else:
            out[i] = row
    return out


UPDATES = [
    ([[1., 2., 3.], [10., 20., 30.]], [3, 1]),
    ([[1., 1., 1.], [2., 2., 2.], [4., 4., 4.]], [2, 0, 2]),          # repeated row: adds up
    ([[[1., 0., 0.]], [[0., 5., 0.]]], np.array([[1], [1]], np.int64)),  # 2-D int64 indices
    (np.zeros((0, 3)), np.zeros(0, np.int32)),
]


def _repeats(indices):
    return len(set(np.asarray(indices).reshape(-1).tolist())) < np.size(indices)


# scatter_update with a repeated index is checked on its own below (it keeps one of the rows)
@pytest.mark.parametrize("kind,values,indices", [
    (kind, values, indices) for kind in ("add", "sub", "update") for values, indices in UPDATES
    if not (kind == "update" and _repeats(indices))])
def test_scatter_eager_matches_numpy(kind, values, indices):
    v = df.Variable(start(), name="table")
    before = v.read_value()
    getattr(v, f"scatter_{kind}")(slices(values, indices, (4, 3)))
    np.testing.assert_array_equal(v.numpy(), reference(kind, start(), values, indices))
    np.testing.assert_array_equal(before.numpy(), start())   # an earlier read keeps its value


def test_scatter_update_with_a_repeated_index_takes_one_of_its_rows():
    v = df.Variable(start())
    v.scatter_update(slices([[1., 1., 1.], [2., 2., 2.]], [0, 0], (4, 3)))
    assert v.numpy()[0].tolist() in ([1., 1., 1.], [2., 2., 2.])
    np.testing.assert_array_equal(v.numpy()[1:], start()[1:])


def test_assign_of_indexed_slices_is_a_scatter_without_densifying():
    v = df.Variable(start())
    s = slices([[1., 2., 3.]], [2], (4, 3))
    for method, op, kind in (("assign_add", "scatter_add_variable", "add"),
                             ("assign_sub", "scatter_sub_variable", "sub"),
                             ("assign", "scatter_update_variable", "update")):
        want = reference(kind, v.numpy(), [[1., 2., 3.]], [2])
        with recording() as calls:
            assert getattr(v, method)(s) is v
        assert [c.op for c in calls] == [op], f"{method} ran {[c.op for c in calls]}"
        np.testing.assert_array_equal(v.numpy(), want)


def test_python_and_numpy_values_and_a_float32_variable():
    v = df.Variable(np.zeros((3, 2), np.float32))
    v.scatter_add(df.IndexedSlices([[1.5, 2.5]], [1], (3, 2)))
    v.scatter_sub(df.IndexedSlices(np.array([[0.5, 0.5]], np.float32), np.array([1]), (3, 2)))
    np.testing.assert_array_equal(v.numpy(), [[0, 0], [1, 2], [0, 0]])
    assert v.dtype is df.float32


def test_errors_name_the_variable_and_change_nothing():
    v = df.Variable(start(), name="emb")
    for bad in (4, -1):
        with pytest.raises(df.errors.InvalidArgumentError,
                           match=rf"index {bad} is out of range \[0, 4\) for variable 'emb'.*unchanged"):
            v.scatter_add(slices([[1., 1., 1.], [1., 1., 1.]], [0, bad], (4, 3)))
        np.testing.assert_array_equal(v.numpy(), start())
    with pytest.raises(df.errors.InvalidArgumentError, match=r"'emb' holds float64\[4, 3\].*got float64\[1, 2\]"):
        v.scatter_update(df.IndexedSlices(df.constant(np.ones((1, 2))), df.constant([0]), (4, 3)))
    with pytest.raises(df.errors.InvalidArgumentError, match="cannot assign a float32 tensor to variable 'emb'"):
        v.scatter_add(df.IndexedSlices(df.constant(np.ones((1, 3), np.float32)), df.constant([0]), (4, 3)))
    with pytest.raises(df.errors.InvalidArgumentError,
                       match=r"'emb' has shape \[4, 3\], the IndexedSlices is for dense shape \[5, 3\]"):
        v.scatter_add(slices([[1., 1., 1.]], [0], (5, 3)))
    with pytest.raises(df.errors.InvalidArgumentError, match="must be int32 or int64"):
        v.scatter_add(df.IndexedSlices(df.constant(np.ones((1, 3))), df.constant([0.0]), (4, 3)))
    with pytest.raises(TypeError, match="takes a df.IndexedSlices"):
        v.scatter_add(np.ones((4, 3)))
    s = df.Variable(1.0, name="scalar")
    with pytest.raises(df.errors.InvalidArgumentError, match="'scalar' is a scalar"):
        s.scatter_add(df.IndexedSlices(df.constant([1.0]), df.constant([0]), ()))
    np.testing.assert_array_equal(v.numpy(), start())


# ---------------------------------------------------------------------------------------
# In a defun, exported, rolled back

def _scatter_step(v):
    @df.defun
    def step(values, indices):
        v.scatter_add(df.IndexedSlices(values, indices, (4, 3)))
        v.scatter_sub(df.IndexedSlices(values * 0.5, indices, (4, 3)))
        v.assign(df.IndexedSlices(values[:1] * 3.0, indices[:1], (4, 3)))
        return v.read_value()
    return step


def _eager_step(v, values, indices):
    v.scatter_add(df.IndexedSlices(values, indices, (4, 3)))
    v.scatter_sub(df.IndexedSlices(values * 0.5, indices, (4, 3)))
    v.assign(df.IndexedSlices(values[:1] * 3.0, indices[:1], (4, 3)))
    return v.read_value()


ARGS = (np.array([[1., 2., 3.], [4., 5., 6.], [7., 8., 9.]]), np.array([3, 1, 3], np.int32))


def test_defun_matches_eager_and_sees_the_same_variable():
    a, b = df.Variable(start()), df.Variable(start())
    step = _scatter_step(a)
    for _ in range(2):
        got = step(df.constant(ARGS[0]), df.constant(ARGS[1]))
        want = _eager_step(b, df.constant(ARGS[0]), df.constant(ARGS[1]))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert step.trace_count == 1
    ops = [n.op.name for n in step.get_concrete_function(df.constant(ARGS[0]), df.constant(ARGS[1])).graph.nodes]
    assert ops.count("scatter_add_variable") == 1 and "indexed_slices_to_dense" not in ops


def test_variable_argument_and_unknown_sizes():
    @df.defun(input_signature=[df.TensorSpec([None, 3], f64), df.TensorSpec([None], df.int32)])
    def add_rows(values, indices):
        table.scatter_add(df.IndexedSlices(values, indices, (4, 3)))
        return table.read_value()
    table = df.Variable(start())
    add_rows(*ARGS)
    add_rows(ARGS[0][:1], ARGS[1][:1])
    np.testing.assert_array_equal(table.numpy(), reference("add", reference("add", start(), *ARGS),
                                                            ARGS[0][:1], ARGS[1][:1]))

    @df.defun
    def into(v, values, indices):
        v.scatter_sub(df.IndexedSlices(values, indices, (4, 3)))
    other = df.Variable(start())
    into(other, df.constant(ARGS[0]), df.constant(ARGS[1]))
    np.testing.assert_array_equal(other.numpy(), reference("sub", start(), *ARGS))


def test_json_export_runs_the_scatters():
    v = df.Variable(start())
    step = _scatter_step(v)
    cf = step.get_concrete_function(df.constant(ARGS[0]), df.constant(ARGS[1]))
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))   # holds v's value at export
    reference_var = df.Variable(start())
    for _ in range(2):
        want = _eager_step(reference_var, df.constant(ARGS[0]), df.constant(ARGS[1]))
        np.testing.assert_array_equal(loaded(*ARGS).numpy(), want.numpy())
    np.testing.assert_array_equal(v.numpy(), start())        # the loaded copy is its own


def test_a_failed_call_rolls_every_scatter_back():
    v, w = df.Variable(start(), name="v"), df.Variable(start(), name="w")

    @df.defun
    def step(values, indices, bad):
        v.scatter_add(df.IndexedSlices(values, indices, (4, 3)))
        w.scatter_update(df.IndexedSlices(values, indices, (4, 3)))
        w.scatter_add(df.IndexedSlices(values[:1], bad, (4, 3)))      # fails at run time
        return v.read_value()
    step(df.constant(ARGS[0]), df.constant(ARGS[1]), df.constant([0]))
    after_v, after_w = v.numpy(), w.numpy()
    with pytest.raises(df.errors.InvalidArgumentError, match="index 7 is out of range .* variable 'w'"):
        step(df.constant(ARGS[0]), df.constant(ARGS[1]), df.constant([7]))
    np.testing.assert_array_equal(v.numpy(), after_v)
    np.testing.assert_array_equal(w.numpy(), after_w)


# ---------------------------------------------------------------------------------------
# Gradients

def test_a_read_after_a_scatter_differentiates_the_new_value():
    v = df.Variable(start())
    values = df.constant(np.ones((2, 3)))
    with df.GradientTape(persistent=True) as tape:
        tape.watch(values)
        y_before = df.reduce_sum(v * v)
        v.scatter_add(df.IndexedSlices(values, df.constant([0, 2]), (4, 3)))
        y_after = df.reduce_sum(v * v)
    new = start()
    new[[0, 2]] += 1
    np.testing.assert_array_equal(tape.gradient(y_before, v).numpy(), 2 * start())
    np.testing.assert_array_equal(tape.gradient(y_after, v).numpy(), 2 * new)
    assert tape.gradient(y_after, values) is None      # the scatter is not differentiated


def test_gradient_of_a_defun_that_scatters_changes_no_variable():
    v = df.Variable(start())

    @df.defun
    def f(values):
        v.scatter_add(df.IndexedSlices(values, df.constant([1]), (4, 3)))
        return df.reduce_sum(v * v)
    values = df.constant(np.ones((1, 3)))
    with df.GradientTape() as tape:
        y = f(values)
    expected = start()
    expected[1] += 1
    np.testing.assert_array_equal(v.numpy(), expected)
    g = tape.gradient(y, v)
    np.testing.assert_array_equal(g.numpy(), 2 * expected)
    np.testing.assert_array_equal(v.numpy(), expected)       # the backward ran no scatter
