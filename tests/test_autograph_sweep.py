"""AutoGraph-converted code through compositions of the sweep's transformations
(tests/sweep_compose.py: defun, vmap, grad, fwd, remat, json, numba): Python `if`, `for`,
`while`, `break`, a conditional expression, a list collected in a loop, a slice `x[i:i + 2]`
in a loop over a tensor range and one whose start is computed from the data (per example
under vmap), each as the sweep's base function.

test_converted_code_matches_the_eager_python: a composition against the same composition of
the plain Python function run eagerly (graph transformations dropped, vmap a loop of
examples). `df.vmap` traces its function without converting it (AutoGraph is `df.defun`'s),
so a vmap with no graph transformation inside it meets a Python `if`/`for` on a symbolic
tensor: the TracingError pointing to df.cond, as the guide says, and the case checks that.
test_eager_composition_matches_finite_differences: each eager composition with a grad or fwd
outermost against central differences of the rest.

Default: every composition of one or two transformations (49) and every ninth of three,
float64 (float32 for every third case); `DEFUN_SWEEP=full`: all 259 in both dtypes.
"""
import itertools
import os

import numpy as np
import pytest

import defun as df
import sweep_compose as sc

FULL = os.environ.get("DEFUN_SWEEP", "") == "full"
COMPOSITIONS = [c for n in (1, 2, 3) for c in itertools.permutations(sc.TRANSFORMS, n)]


# The converted functions: each takes tensors and returns a list of tensors (the sweep's form).

def branchy(x):
    """A `for` over x's rows with a tensor `if` in it, then a tensor `while`."""
    s = df.zeros([], x.dtype)
    for row in x:
        v = df.reduce_sum(row * row)
        if df.reduce_sum(row) > 0.0:
            s = s + v
        else:
            s = s - 0.5 * df.sin(v)
    while s > 3.0:
        s = s * 0.5
    return [s]


def sliced(x):
    """`x[i:i + 2]` with a loop index of a `for` over a tensor range (dynamic_strided_slice)."""
    n = df.shape(x)[0]
    acc = df.zeros_like(x[:2])
    for i in range(n - 1):
        acc = acc + df.sin(x[i:i + 2]) * df.cast(i + 1, x.dtype)
    return [acc]


def breaking(x):
    """A `for` over rows that breaks on a tensor condition, and a conditional expression."""
    s = df.zeros_like(x[0])
    for row in x:
        if df.reduce_max(row) > 1.2:
            break
        s = s + df.exp(row * 0.5)
    return [s * 2.0 if df.reduce_sum(s) > 1.0 else s - 1.0]


def collected(x):
    """A list appended to on either branch of a tensor `if` in a loop, stacked after it."""
    out = []
    for row in x:
        if df.reduce_sum(row) > 0.0:
            out.append(row * row)
        else:
            out.append(df.tanh(row))
    return [df.stack(out) * x]


def counted(x):
    """A `while` with a tensor counter and an early `return` in a tensor `if`."""
    i = df.constant(0)
    y = x
    while i < 3:
        y = df.sin(y) + x * 0.5
        i += 1
    if df.reduce_sum(y) > 50.0:
        return [y * 0.0]
    return [y * y]


def windowed(x):
    """Two rows from a start computed from the data (per example under vmap: rows 1:3 and
    2:4 of the two examples), and a tensor `if` on that count scaling by a row it picks."""
    k = df.reduce_sum(df.cast(x[:, 2] > 0.0, df.int32))
    w = x[k - 1:k + 1]
    if k > 2:
        w = w * df.exp(x[k - 1])
    return [df.sin(w) * 2.0]


def shrinking(x):
    """A `while` counting down a tensor index, summing a two-row slice it bounds."""
    n = df.shape(x)[0]
    s = df.zeros_like(x[0])
    i = n - 1
    while i > 0:
        s = s + df.reduce_sum(x[i - 1:i + 1] * x[0], axis=0)
        i -= 1
    return [s]


def first_rows(x):
    """A `for` over a range counted from the data (a trip count per example under vmap),
    slicing the row it is at."""
    k = df.reduce_sum(df.cast(x[:, 2] > 0.0, df.int32))
    s = df.zeros_like(x[0])
    for i in range(k):
        s = s + df.reduce_sum(x[i:i + 1] * df.cos(x[-1]), axis=0)
    return [s]


FUNCTIONS = [branchy, sliced, breaking, collected, counted, windowed, shrinking, first_rows]

# x (rows of 3, four rows); the second vmap example is another value that takes other branches
_X = np.array([[0.5, -0.3, 0.9], [-0.6, 0.2, -0.4], [0.1, 0.7, -0.2], [1.5, 0.4, 0.3]])
_X2 = np.array([[-0.4, 0.3, -0.5], [0.8, 0.6, 0.1], [1.4, -0.2, 0.3], [0.2, -0.9, 0.5]])


def inputs(comp, dtype):
    x = np.stack([_X, _X2]) if "vmap" in comp else _X
    return [x.astype(dtype.np)]


def _cases():
    out = []
    for i, comp in enumerate(COMPOSITIONS):
        if len(comp) == 3 and not FULL and i % 9:
            continue
        for j, fn in enumerate(FUNCTIONS):
            dts = [df.float64, df.float32] if FULL else [df.float32 if (i + j) % 3 == 0 else df.float64]
            out += [pytest.param(fn, comp, dt, id=f"{fn.__name__}-{'.'.join(comp)}-{dt.name}") for dt in dts]
    return out


def _close(got, want, dtype, what, tol=None):
    rtol, atol = tol or ((1e-4, 1e-5) if dtype == df.float32 else (1e-9, 1e-11))
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what}: {g.shape} {g.dtype}, expected {w.shape} {w.dtype}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=what)


@pytest.mark.parametrize("fn,comp,dtype", _cases())
def test_converted_code_matches_the_eager_python(fn, comp, dtype):
    xs = inputs(comp, dtype)
    want = sc.run(sc.compose(comp, fn, sc.REFERENCE_WRAP), xs)
    # (a vmap with no defun inside it converts the function it traces, as defun does)
    _close(sc.run(sc.compose(comp, fn), xs), want, dtype, f"{fn.__name__} {'.'.join(comp)} {dtype.name}")


SKELETONS = [c for c in COMPOSITIONS if not set(c) & set(sc.GRAPH_TRANSFORMS) and c[0] != "vmap"]


@pytest.mark.parametrize("fn,comp", [(fn, c) for fn in FUNCTIONS for c in SKELETONS],
                         ids=[f"{fn.__name__}-{'.'.join(c)}" for fn in FUNCTIONS for c in SKELETONS])
def test_eager_composition_matches_finite_differences(fn, comp):
    xs = inputs(comp, df.float64)
    want = sc.run(sc.compose(comp, fn, sc.REFERENCE_WRAP), xs)
    _close(want, sc.finite_differences(comp, fn, xs), df.float64, f"{fn.__name__} {'.'.join(comp)}",
           tol=(1e-5, 1e-6))


def test_the_functions_take_both_branches():
    """Each example input drives the converted code down different paths (so a composition that
    mixed up the vmap examples' branches would show): the eager values differ by branch."""
    for fn in (branchy, breaking, collected, windowed):
        a, b = (fn(df.constant(x))[0].numpy() for x in (_X, _X2))
        assert not np.allclose(a, b)
    assert df.reduce_sum(df.constant(_X[3])) > 0 > df.reduce_sum(df.constant(_X[1]))
    assert np.max(_X[3]) > 1.2 and np.max(_X2[2]) > 1.2     # `breaking` breaks at different rows
    assert np.sum(_X[:, 2] > 0) == 2 and np.sum(_X2[:, 2] > 0) == 3      # `windowed`, `first_rows`
