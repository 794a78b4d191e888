"""The composition sweep (issue 28, Deliver 2): every differentiable row of the op table
(tests/test_ops.py ROWS and tests/op_rows_*.py, which cover the registry; 154 rows, and a
sweep-only custom_gradient row whose rule is not the derivative) through every composition of
up to three distinct transformations of {defun, vmap, grad (tape), fwd (ForwardAccumulator),
remat (defun rematerialize=True), json (export_json with its backward, reloaded), numba (defun
backend="numba")}: 7 + 42 + 210 = 259 compositions, in float32, float64, and complex64 and
complex128 where the op's registry row takes complex values (its `kinds` holds "c": 25 rows).

test_composition_matches_the_eager_composition: a case (row, composition, dtype) runs the
composition on inputs drawn (seeded) from the row's domain (its variant's A specs: positive,
unit, distinct...; one variant per case, rotating through the row's differentiable variants)
against the same composition run eagerly (tests/sweep_compose.py: graph transformations
dropped, vmap a loop of examples). Outcomes: a pass; a documented refusal (UnimplementedError
naming an op that says why it has no batching rule, or a configuration tests/test_vmap_ops.py
lists as UNCOVERED; or the eager composition refusing with a typed error, and then the
composition must refuse too); or a failure.
test_eager_composition_matches_finite_differences_and_jax: each eager composition with a grad
or fwd outermost (10 of vmap/grad/fwd) against central differences of the rest (float64,
complex128) and, for rows with a jax equivalent (sweep_compose.JAX, 53 ops; a third of them in
the default run), against the same composition of jax.vmap / jax.grad (conjugated: TF's
convention) / jax.jvp in x64.
Known failures are listed in KNOWN_FAILURES with their reason, and run as strict xfails: each
must still fail, so an entry goes when its bug is fixed; the default run includes one case of
each.

Counts (December 2026, after dynamic_strided_slice's rows). Default (CI): 314 composition
cases (every row twice, compositions by a stride, dtypes rotating, plus one case per known
failure) and 154 eager-composition cases (one per row, on its smallest variant).
`DEFUN_SWEEP=full`: 93,240 composition cases (40,145 float32, 40,145 float64, 6,475 complex64,
6,475 complex128) and 1,790 eager-composition cases.
`python tests/test_composition_sweep.py [full] [skeleton] [K/N] [op=NAME]` prints one line per
case (the full sweep in seeded-shuffled shares).

Found (issue 28, December 2026): complex det's gradient in a graph (adjugate's inference
refused complex; fixed: tests/test_composition_sweep_fixes.py); custom_gradient dropped or
refused under vmap (item 3), forward mode through a loaded document (KeyError 'transpose_a'
in the budget's matmul cost), reduce_prod's complex second derivative (item 10) -- all fixed
in this round, their strict xfails removed when the fixes merged; still KNOWN_FAILURES below:
forward mode through a loaded document holding a custom_gradient, and forward mode over a
graph needing one derivative order more than eager forward mode (reduce_prod's third order).
A partial full run before those fixes merged (43,077 composition cases, 51%, seeded shuffle):
41,587 pass, 1,176 documented refusals, 314 known failures, nothing else; all 1,630
eager-composition cases: 1,618 pass, 10 refusals (reduce_prod_others' third order, eagerly
too), 2 known (reduce_prod complex). The round's second session, on merged main: shares 21-60
of 60 (62,159 cases: 60,432 pass, 1,562 documented refusals, 165 known, 0 fail), every case
of dynamic_strided_slice and its gradient op (1,036 and 20 eager, all pass), all 1,790
eager-composition cases (1,784 pass, 6 refusals); session 1 ran shares 1-20 (30,740 cases,
one bug, fixed in c79b18b).
"""
import itertools
import os

import numpy as np
import pytest

import defun as df
from defun.runtime import errors, registry
import sweep_compose as sc
import test_ops as table
from opcheck import Row, un
from test_vmap_ops import UNCOVERED

f32, f64, c64, c128 = df.float32, df.float64, df.complex64, df.complex128
FULL = os.environ.get("DEFUN_SWEEP", "") == "full"

COMPOSITIONS = [c for n in (1, 2, 3) for c in itertools.permutations(sc.TRANSFORMS, n)]
TYPED = (errors.InvalidArgumentError, errors.UnimplementedError, TypeError, ValueError)


def _diff_variants(row):
    """The row's variants with a float input and a float output (cast to an integer has none)."""
    def float_out(v):
        dt = v.kw.get("dtype")
        return not isinstance(dt, df.DType) or dt.is_floating or dt.is_complex
    return [v for v in row.variants if v.grad and any(a.is_float_input for a in v.args) and float_out(v)]


def _halved_custom_exp(x):
    """exp with a custom gradient that is NOT its derivative (half of it): a composition that
    drops the rule (issue 28 item 3) gives another number, where the table's custom_gradient
    row, whose rule is the true derivative, cannot tell."""
    @df.custom_gradient
    def f(t):
        y = df.exp(t)
        return y, lambda dy: dy * y * 0.5
    return f(x)


# Sweep-only rows ("op:label": the registry's op, a row of its own); their gradients are the
# rule's, not derivatives, so they skip the finite-difference check.
SWEEP_ROWS = [Row("custom_gradient:halved", _halved_custom_exp, np.exp, un())]
NOT_DERIVATIVES = {"custom_gradient:halved"}
ROWS = [r for r in table.ROWS if r.grad is True and _diff_variants(r)] + SWEEP_ROWS


def op_of(row):
    return row.op.split(":")[0]


def _dtypes(row):
    dts = {d for v in _diff_variants(row) for d in row.dtypes_of(v) if d is not None}
    out = [d for d in (f32, f64) if d in dts]
    kinds = registry.get(op_of(row)).kinds if registry.exists(op_of(row)) else None
    return out + ([c64, c128] if kinds and "c" in kinds else [])


def _variant(row, comp):
    vs = _diff_variants(row)
    return vs[COMPOSITIONS.index(comp) % len(vs)]


def _smallest_variant(row):
    """The row's differentiable variant with the fewest input elements, at least 2 (a scalar
    variant of a reduction, say, differentiates nothing of interest)."""
    size = lambda v: sum(int(np.size(a.value) if a.value is not None else np.prod(a.shape))   # noqa: E731
                         for a in v.args)
    vs = _diff_variants(row)
    return min([v for v in vs if size(v) >= 2] or vs, key=size)


def _skeleton_variant(row, skel):
    """The full sweep rotates through the row's variants; the default takes its smallest."""
    return _variant(row, skel) if FULL else _smallest_variant(row)


def _name(comp):
    return ".".join(comp)


ALL_CASES = [(row, comp, dt) for row in ROWS for comp in COMPOSITIONS for dt in _dtypes(row)]
# the eager compositions with a derivative outermost (a vmap outermost is its loop): 10
SKELETONS = [c for c in COMPOSITIONS if not set(c) & set(sc.GRAPH_TRANSFORMS) and c[0] != "vmap"]
ALL_SKELETON_CASES = [(row, skel, dt) for row in ROWS for skel in SKELETONS for dt in _dtypes(row)
                      if dt in (f64, c128) and row.op not in NOT_DERIVATIVES]


def _sample(per_row=2):
    """Deterministic: row i takes compositions spread over the list (a stride prime to its
    length) and rotates through its dtypes."""
    out = []
    for i, row in enumerate(ROWS):
        dts = _dtypes(row)
        for j in range(per_row):
            comp = COMPOSITIONS[(i * 101 + j * 131) % len(COMPOSITIONS)]
            out.append((row, comp, dts[(i + j) % len(dts)]))
    return out


def _skeleton_sample():
    """One skeleton per row, rotating through the skeletons and the row's float64/complex128."""
    out = []
    for i, row in enumerate(r for r in ROWS if r.op not in NOT_DERIVATIVES):
        dts = [d for d in _dtypes(row) if d in (f64, c128)]
        out.append((row, SKELETONS[(i * 3) % len(SKELETONS)], dts[i % len(dts)]))
    return out


def _fwd_over_json(comp):
    """Forward mode over a loaded document (a vmap inside it keeps f's custom_gradient as a
    batched one, which the document holds alike)."""
    return any(a == "fwd" and "json" in comp[i + 1:] for i, a in enumerate(comp))


def _diff_over_vmap_of_json(comp):
    """A gradient (either mode) of a vmap of a loaded document."""
    return "vmap" in comp and "json" in comp[comp.index("vmap") + 1:] and \
        any(t in ("grad", "fwd") for t in comp[:comp.index("vmap")])


def _prod_order(comp, base):
    """The order of reduce_prod's derivative `comp` needs (`base`: the row's own order,
    reduce_prod_others is its first). Forward mode over a graph function differentiates the
    function's backward (two orders, where eager forward mode takes one); an export builds
    one order more (its backward); a vmap runs its function's ops eagerly, batched."""
    order = need = base
    graph = False
    for t in reversed(comp):
        if t in sc.GRAPH_TRANSFORMS:
            need = max(need, order + 1) if t == "json" else need
            graph = True
        elif t == "vmap":
            graph = False
        else:
            order += 2 if t == "fwd" and graph else 1
        need = max(need, order)
    return need


def _beyond_second_order(comp, row):
    """reduce_prod has two orders of gradients: a composition needing a third, where the same
    eager composition does not (that one refuses alike: a documented refusal)."""
    base = 1 if row == "reduce_prod_others" else 0
    return _prod_order(comp, base) >= 3 > _prod_order(sc.skeleton(comp), base)


_DIFF = ("grad", "fwd")
_CUSTOM = {"custom_gradient", "custom_gradient:halved"}
UIE = errors.UnimplementedError

# The failures the sweep found and left for their owners: (test, rows, applies(comp, dtype),
# errors raised, why), test "composition" (a composition against the eager one) or "skeleton"
# (the eager one against finite differences and jax). A matching case is a strict xfail
# raising one of those errors: it must still fail so, and the entry goes when its bug is fixed.
KNOWN_FAILURES = [
    ("composition", _CUSTOM, lambda c, d, v: _diff_over_vmap_of_json(c) and not _fwd_over_json(c), (UIE,),
     "a gradient of vmap over a loaded document holding a custom_gradient: the batched op has no Python "
     "gradient function either (the document holds none), so it refuses as the loaded op does"),
    ("composition", _CUSTOM, lambda c, d, v: _fwd_over_json(c), (UIE,),
     "forward mode through a loaded document holding a custom_gradient: the document has no Python "
     "gradient function, and forward mode differentiates the backward it holds"),
    ("composition", {"reduce_prod"}, lambda c, d, v: _beyond_second_order(c, "reduce_prod"), (UIE,),
     "reduce_prod: gradients beyond the second order are not implemented, and forward mode over a graph "
     "function (defun, remat, numba, a loaded document) needs one order more than eager forward mode"),
    ("composition", {"reduce_prod_others"}, lambda c, d, v: _beyond_second_order(c, "reduce_prod_others"),
     (UIE,), "reduce_prod_others is reduce_prod's first derivative: as the reduce_prod entry"),
]


def known_failure(row, comp, dtype, test="composition"):
    """The KNOWN_FAILURES entry (errors, reason) covering this case of `test`, or None."""
    for kind, ops, applies, error, reason in KNOWN_FAILURES:
        if kind == test and row.op in ops:
            v = _variant(row, comp) if test == "composition" else _skeleton_variant(row, comp)
            if applies(comp, dtype, v):
                return error, reason
    return None


def _params(cases, test="composition"):
    out = []
    for row, comp, dt in cases:
        known = known_failure(row, comp, dt, test)
        marks = [pytest.mark.xfail(strict=True, raises=known[0], reason=known[1])] if known else []
        out.append(pytest.param(row, comp, dt, id=f"{row.op}-{_name(comp)}-{dt.name}", marks=marks))
    return out


def _with_known(sample, cases, test):
    """`sample` and, for each KNOWN_FAILURES entry of `test`, its first case (shortest
    composition first) if the sample has none: the default run tracks every known failure."""
    out = list(sample)
    for entry in KNOWN_FAILURES:
        if entry[0] != test or any(known_failure(r, c, d, test) == (entry[3], entry[4]) for r, c, d in out):
            continue
        out += [min((case for case in cases if known_failure(*case, test) == (entry[3], entry[4])),
                    key=lambda case: len(case[1]))]
    return out


CASES = ALL_CASES if FULL else _with_known(_sample(), ALL_CASES, "composition")
SKELETON_CASES = ALL_SKELETON_CASES if FULL else _with_known(_skeleton_sample(), ALL_SKELETON_CASES, "skeleton")


# ---------------------------------------------------------------------------------------
# One case

def _documented_refusal(e):
    """An UnimplementedError naming an op that declares why it has no batching rule, or one
    tests/test_vmap_ops.py lists as leaving a batched input out on purpose."""
    names = [op.name for op in registry.all_ops() if isinstance(op.batch, str)] + list(UNCOVERED)
    return isinstance(e, errors.UnimplementedError) and any(n in str(e) for n in names)


def _tolerance(dtype):
    return (1e-3, 1e-4) if dtype in (f32, c64) else (1e-7, 1e-9)


def _close(got, want, dtype, what, tol=None):
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    rtol, atol = tol or _tolerance(dtype)
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{what}[{k}]: shape {g.shape}, expected {w.shape}"
        assert g.dtype == w.dtype, f"{what}[{k}]: dtype {g.dtype}, expected {w.dtype}"
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * scale, err_msg=f"{what}[{k}]")


def run_case(row, comp, dtype):
    """-> "pass" or "refused" (documented); raises AssertionError (or the error) otherwise."""
    v = _variant(row, comp)
    xs = sc.inputs_for(comp, v, dtype)
    base = sc.base_function(row, v)
    try:
        want = sc.run(sc.compose(comp, base, sc.REFERENCE_WRAP), xs)
    except TYPED as e:          # the eager reference refuses: the composition must too
        try:
            sc.run(sc.compose(comp, base), xs)
        except TYPED:
            return "refused"
        raise AssertionError(f"the eager reference refuses ({type(e).__name__}: {e}) but "
                             f"{_name(comp)} gives a value") from None
    try:
        got = sc.run(sc.compose(comp, base), xs)
    except errors.UnimplementedError as e:
        if "vmap" in comp and _documented_refusal(e):
            return "refused"
        raise
    _close(got, want, dtype, f"{row.op}{v!r} {_name(comp)} {dtype.name} vs eager")
    return "pass"


# jax runs each composition op by op, compiling each (~0.1 s): the default run checks a third
# of the rows with an equivalent against it, the full sweep all of them
_JAX_ROWS = set(sc.JAX) if FULL else set(sorted(sc.JAX)[::3])


def run_skeleton_case(row, skel, dtype):
    """The eager reference of a skeleton (vmap/grad/fwd only) against central differences of
    its outermost grad or fwd, and against jax where the row has an equivalent."""
    v = _skeleton_variant(row, skel)
    xs = sc.inputs_for(skel, v, dtype)
    base = sc.base_function(row, v)
    try:
        want = sc.run(sc.compose(skel, base, sc.REFERENCE_WRAP), xs)
    except TYPED:
        return "refused"        # the composition cases check that every path refuses alike
    fd = sc.finite_differences(skel, base, xs)
    _close(want, fd, dtype, f"{row.op}{v!r} {_name(skel)} {dtype.name}: eager vs finite differences",
           tol=(1e-4, 1e-5))
    if row.op in _JAX_ROWS and all(a.is_float_input for a in v.args):
        jx = sc.jax_reference(skel, sc.JAX[row.op], v.kw, xs)
        _close(want, jx, dtype, f"{row.op}{v!r} {_name(skel)} {dtype.name}: eager vs jax", tol=(1e-7, 1e-9))
    return "pass"


@pytest.mark.parametrize("row,comp,dtype", _params(CASES))
def test_composition_matches_the_eager_composition(row, comp, dtype):
    run_case(row, comp, dtype)


@pytest.mark.parametrize("row,comp,dtype", _params(SKELETON_CASES, "skeleton"))
def test_eager_composition_matches_finite_differences_and_jax(row, comp, dtype):
    run_skeleton_case(row, comp, dtype)


def test_the_sweep_counts_its_cases():
    """Every differentiable row is swept, in every composition and dtype it takes."""
    assert len(COMPOSITIONS) == 7 + 7 * 6 + 7 * 6 * 5
    swept = {op_of(r) for r in ROWS}
    elsewhere = set(table.EXCLUDED) | {r.op for r in table.ROWS if r.grad == "skip"}     # with the reason
    missing = {op.name for op in registry.all_ops() if op.grad is not None} - swept - elsewhere
    assert not missing, f"differentiable ops the sweep never runs: {sorted(missing)}"
    assert {op_of(r) for r, _, _ in _sample()} == swept
    assert {op_of(r) for r, _, _ in _skeleton_sample()} == swept
    for kind, ops, applies, _, reason in KNOWN_FAILURES:
        cases = ALL_CASES if kind == "composition" else ALL_SKELETON_CASES
        assert any(known_failure(r, c, d, kind) for r, c, d in cases if r.op in ops), \
            f"no case of KNOWN_FAILURES {reason!r}"


if __name__ == "__main__":
    # A summary of the sweep, one line per case:
    #   python tests/test_composition_sweep.py [full] [skeleton] [K/N] [op=NAME ...]
    # (full: every case, in a seeded shuffle so a partial run covers rows and compositions
    # evenly; skeleton: the eager compositions against finite differences and jax; K/N: the
    # K-th of N interleaved shares; op=: only these rows).
    import collections
    import sys
    args = sys.argv[1:]
    test = "skeleton" if "skeleton" in args else "composition"
    full, sample = (ALL_SKELETON_CASES, _skeleton_sample) if test == "skeleton" else (ALL_CASES, _sample)
    check = run_skeleton_case if test == "skeleton" else run_case
    FULL = "full" in args
    _JAX_ROWS = set(sc.JAX) if FULL else _JAX_ROWS
    todo = list(full if FULL else sample())
    if FULL:
        todo = [todo[i] for i in np.random.default_rng(28).permutation(len(todo))]
    k, n = map(int, next((a for a in args if "/" in a), "0/1").split("/"))
    ops = [a[3:] for a in args if a.startswith("op=")]
    todo = [case for case in todo[k::n] if not ops or case[0].op in ops]
    outcomes = collections.Counter()
    for count, (r, c, d) in enumerate(todo):
        known = known_failure(r, c, d, test)
        try:
            outcome = check(r, c, d)
            outcomes[outcome] += 1
            print("XPASS" if known else outcome.upper(), r.op, _name(c), d.name, flush=True)
        except Exception as e:      # noqa: BLE001 -- a summary lists every failure
            outcome = "known" if known and isinstance(e, known[0]) else "fail"
            outcomes[outcome] += 1
            print(outcome.upper(), r.op, _name(c), d.name, f"{type(e).__name__}: {str(e)[:400]!r}", flush=True)
        if count % 500 == 0:
            print("PROGRESS", count, dict(outcomes), flush=True)
    print("DONE", dict(outcomes), len(todo), flush=True)
