"""A generated sweep against the relaxed-size plans (defun/trace_calls.py, graph/specialize.py's
sizes_plan and unify_sizes, graph/size_labels.py, the executor's in-place reuse): small
programs (tests/relaxed_programs.py: broadcasting with size-1 axes and unknown sizes that are
1, reductions with keepdims, means, a reduction broadcast back, matmul, transpose, reshape
with -1, concat, stack, slices, gather, where, broadcast_to, expand_dims / squeeze, tile,
softmax, one_hot) on arguments whose shapes are written in size variables, each defun'd as
it is (its outputs) and as `df.value_and_gradients_function` of a loss summing or averaging
them (the sum and mean gradient paths), in float64, float32 and float16, on the numpy and
numba backends.

Programs with features (seeds from 20,000; relaxed_programs.FEATURES): part of the program
inside each feature a relaxed trace must support -- a nested df.defun (its own relaxed
trace), df.cond and an AutoGraph `if` on a tensor (a span of nodes in both branches), an
AutoGraph `for row in t` and df.scan over an unknown number of rows, df.while_loop counting
to an unknown size, a captured outer tensor, a df.Variable read and one assigned
(assign_add, then read) in the defun, the whole program under df.vmap over an unknown batch
size (some arguments unbatched); and, as options of a case, rematerialize=True and the
export step: every relaxed trace exported to JSON (through text), numpy source and ONNX
(onnxruntime; float32/64), reloaded and called at every size the case called, against the
eager results. Seeds from 40,000 put two features together (relaxed_programs.PAIRS: an
assignment inside a cond, a scan under vmap, ...). The eager reference runs with
df.config.run_functions_eagerly (the nested defun eager too); a variable's value is
compared after every call (defun, eager, numpy); a case whose function never got a relaxed
trace fails (a relaxed trace that fell back to one trace per shape).

A case calls its function at sizes the program takes, all variables 2 where it can (the
exact trace), then at other sizes for every variable (the relaxed trace), then at many:
0, 1, equal and unequal for different variables, equal by coincidence, 1 broadcast against
n; one of them HOT_CALLS + 2 times (its plan made static), then a pattern seen before, and,
with four variables, every pattern of equal variables (15, more than MAX_PATTERNS); two
cases go past MAX_SPECIALIZED hot shapes. Every call's outputs and gradients are compared
with the same function run eagerly (values, shapes, dtypes; float tolerance: plans may sum
in another order), the eager outputs with numpy's, and no call may change its arguments'
arrays or an earlier call's results (results are written over temporaries). A failure
prints the program and the call.

Default (CI): 40 numpy seeds and 2 numba ones, each a forward and a gradient case (84,
~6-8 s), and 16 cases with features (FEATURE_CASES: each feature once, and the cases that
found the bugs below; +1.9-2.1 s on 2 busy cores). DEFUN_SWEEP=full: 1,500 numpy seeds and
100 numba ones (3,200 cases), 600 numpy seeds with a feature and 400 with two (2,000
cases), 120 numba seeds with a feature and 48 with two (336 cases): 5,540 tests, all pass
(December 2026, 2 busy cores, numba's kernel cache partly warm: 10 min 16 s). Beyond it,
seeds 20,600-22,599 (4,000 numpy cases; the ONNX step from 21,800 on) and 40,400-40,799
(800, without it) pass too (21,261 once df.vmap's matmul was fixed).
`python tests/test_relaxed_sweep.py [-q] [numba] [SEED...]` runs the cases (of the seeds
given, printing each program; -q: only failures) outside pytest.

The sweep found (December 2026): the numba backend's fused loops read an input's unknown
size that is 1 at run time as if it had the loop's known size (out of bounds, garbage
values) -- the relaxed trace of a program broadcasting [1, 4, N] against [2, 4, 2]; fixed in
graph/numba_backend/codegen.py, test below. Nothing in the new plans: each of these
mutations fails cases of the CI share -- unify_sizes without its label test for "same",
"sum" or "scalar", size_labels taking every unknown size for equal, the executor's reuse
comparing ranks instead of labels. With features (each fixed, its test beside the fix;
"older" fails with reduce_retracing=False too):
- df.defun(df.value_and_gradients_function(loss)) traced loss unconverted: a tensor `if`
  was a TracingError, a `for` over an unknown size lost the relaxed trace (older;
  defun/autograph/conversion.py, test_autograph_python_semantics.py);
- a relaxed trace's df.scan of no rows stacked [0, 0, 0] where eager gives [0, 2, 3] (a
  silent wrong shape; its backward then an add_n error), in the kernel, the numpy source
  and ONNX (graph/scan.py, test_scan.py); eagerly, a scan of no rows (also under df.vmap)
  left an argument read only through it 'not connected' (older; defun/control_flow.py);
- gather's gradient of a row of no elements, x [2, 3, 0] indexed by a scalar (`for row in
  x` differentiated): a reshape error (older; runtime/ops/index_ops.py, test_ops_special.py);
- df.vmap of matmul by a shared matrix with a contraction of 0: a reshape error, eagerly
  and in a defun (older; runtime/ops/math_ops.py, test_vmap_round4.py);
- ONNX: a mean of no elements 0 in onnxruntime, nan in the kernel and numpy (older;
  runtime/ops/math_ops.py, test_onnx.py);
- AutoGraph gave a lambda first converted after its file was edited (this sweep's programs,
  while a sweep ran) the source of the lambda now at its line: another function, silently
  (older; defun/autograph/conversion.py, test_autograph_cache.py).
"""
import itertools
import json
import os
import sys
import warnings

import numpy as np
import pytest

import defun as df
from defun.trace_calls import HOT_CALLS, MAX_PATTERNS, MAX_SPECIALIZED
from relaxed_programs import DF_OPS, FEATURES, NP_OPS, PAIRS, Invalid, generate

FULL = os.environ.get("DEFUN_SWEEP", "") == "full"
# seeds, each a forward and a gradient case; CI's numpy seeds with five chosen: programs with
# four variables (45, 155: more patterns than MAX_PATTERNS), square (49), squeeze (155), and
# the two that fail when unify_sizes takes a sum over leading axes (87) or a multiply by a
# fill's scalar (59) without its label test
NUMPY_SEEDS = range(1500) if FULL else [*range(35), 45, 49, 59, 87, 155]
NUMBA_SEEDS = range(10_000, 10_100 if FULL else 10_002)
# programs with features (feature_of): 20,000 on one (numpy; numba from 30,000), 40,000 on two
# (numpy; numba from 50,000); CI: (seed, gradient?) of each feature once, the pairs that found
# bugs, and every case that failed before its fix (scan 20066, for_rows 20052, ag_if 20000,
# vmap 21261, scan+vmap 40001)
CASE_FEATURES = [*FEATURES, "export", "remat"]
FEATURE_CASES = [(s, g) for s in [*range(20_000, 20_600), *range(40_000, 40_400)] for g in (False, True)] if FULL \
    else [(20_000, True), (20_001, False), (20_002, True), (20_003, True), (20_052, True), (20_005, True),
          (20_066, False), (20_066, True), (20_007, True), (20_008, True), (20_009, True), (20_010, True),
          (20_011, True), (21_261, False), (40_001, True), (40_012, True)]
FEATURE_NUMBA_CASES = [(s, g) for s in [*range(30_000, 30_120), *range(50_000, 50_048)] for g in (False, True)] \
    if FULL else []


def feature_of(seed):
    """A case's feature: none (seeds below 20,000), one of CASE_FEATURES in turn, or (seeds from
    40,000) two of them (PAIRS)."""
    return None if seed < 20_000 else PAIRS[seed % len(PAIRS)] if seed >= 40_000 else \
        CASE_FEATURES[seed % len(CASE_FEATURES)]
TOL = {np.float64: dict(rtol=1e-9, atol=1e-11), np.float32: dict(rtol=2e-4, atol=2e-5),
       np.float16: dict(rtol=2e-2, atol=2e-2)}


def program(seed, feature=None):
    """Seed's program: float64, a third float32, a ninth float16; with `feature` in it."""
    dtype = np.float16 if seed % 9 == 8 else np.float32 if seed % 3 == 2 else np.float64
    return generate(seed, dtype, feature if feature in FEATURES or feature in PAIRS else None)


def size_calls(prog, seed):
    """The variables of each call of a case, in order (see the module)."""
    names = prog.variables
    rng = np.random.default_rng(seed + 7)
    n = len(names)
    cands = [{v: 0 for v in names}, {v: 1 for v in names}, {v: 4 for v in names},
             dict(zip(names, range(4, 4 + n))), dict(zip(names, range(4 + n, 4, -1)))]
    for k in range(n):       # one variable 1 (or 0) against the others n
        cands += [{v: 1 if j == k else 5 for j, v in enumerate(names)},
                  {v: 0 if j == k else 1 for j, v in enumerate(names)},
                  {v: 5 if j == k else 1 for j, v in enumerate(names)}]
    for a, b in itertools.combinations(range(n), 2):     # two equal by coincidence
        cands.append({v: 3 if j in (a, b) else 6 + j for j, v in enumerate(names)})
    cands += [dict(zip(names, (int(s) for s in rng.integers(0, 6, size=n)))) for _ in range(6)]
    cands = [{v: 2 for v in names}, {v: 3 for v in names}] + cands
    valid = [c for c in cands if _runs(prog, c)]
    first = valid[0] if valid else cands[0]     # all 2 unless a size broadcasts against 3 (then 1 or 3)
    second = next((c for c in valid if all(c[v] != first[v] for v in names)), cands[1])
    calls = [first, second] + [c for c in valid if c not in (first, second)]
    hot = next((c for c in calls[2:] if len(set(c.values())) == n and min(c.values()) > 1), calls[-1])
    calls += [hot] * (HOT_CALLS + 2) + [cands[3]]     # then a pattern seen before: all 1
    if n == 4:      # every pattern of equal variables: more than MAX_PATTERNS
        calls += [dict(zip(names, (7 + p for p in part))) for part in _partitions(n)]
    return calls


def _runs(prog, env):
    """Whether numpy runs the program at sizes `env`."""
    try:
        _numpy_outputs(prog, prog.arrays(env, 0))
    except (Invalid, ValueError, IndexError):
        return False
    return True


def _partitions(n):
    """Every set partition of n things, as each thing's block number."""
    out = [()]
    for _ in range(n):
        out = [p + (b,) for p in out for b in range(max(p, default=-1) + 2)]
    return out


def _loss_reductions(prog, seed):
    rng = np.random.default_rng(seed + 11)
    return [str(rng.choice(["sum", "mean", "mean0"])) if prog.shapes[k] else "sum" for k in prog.sinks()]


def functions(prog, seed):
    """(forward, loss, float argument positions, state) of a program; state: its own variables
    and inner defun (a second call gives a second set)."""
    sinks, how = prog.sinks(), _loss_reductions(prog, seed)
    state = {"vars": [df.Variable(np.array(v, prog.dtype)) for v in prog.var_inits]}

    def outputs(*args):
        values = prog.run(DF_OPS, args, state)
        return tuple(values[k] for k in sinks)

    forward = df.vmap(outputs, in_axes=tuple(0 if b else None for b in prog.batched)) if prog.batched else outputs

    def loss(*args):
        total = 0.0
        for t, h in zip(forward(*args), how):
            total = total + (df.reduce_sum(t) if h == "sum" else df.reduce_mean(t) if h == "mean" else
                             df.reduce_sum(df.reduce_mean(t, axis=0)))
        return total

    floats = [k for k, (kind, _, _) in enumerate(prog.args) if kind == "float"]
    return forward, loss, floats, state


def _dense(t):
    return np.array(np.asarray(t) if isinstance(t, df.IndexedSlices) else t.numpy())


def _flat(result, grad):
    return [result[0], *result[1]] if grad else list(result)


def _compare(got, want, tol, what):
    """Mismatch descriptions of two lists of tensors."""
    if len(got) != len(want):
        return [f"{what}: {len(got)} results, {len(want)} wanted"]
    out = []
    for j, (g, w) in enumerate(zip(got, want)):
        g, w = _dense(g) if not isinstance(g, np.ndarray) else g, _dense(w) if not isinstance(w, np.ndarray) else w
        if g.shape != w.shape or g.dtype != w.dtype:
            out.append(f"{what} #{j}: {g.dtype}{g.shape}, wanted {w.dtype}{w.shape}")
        elif not np.allclose(g, w, equal_nan=True, **tol):
            out.append(f"{what} #{j}: max difference {np.nanmax(np.abs(g - w))} of {g.ravel()[:6]} "
                       f"wanted {w.ravel()[:6]}")
    return out


def _numpy_outputs(prog, arrays, state=None):
    """The program's outputs by numpy (`state`: its variables, as numpy arrays, updated)."""
    state = state if state is not None else {"vars": [np.array(v, prog.dtype) for v in prog.var_inits]}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # numpy's mean of nothing
        if not prog.batched:
            values = prog.run(NP_OPS, arrays, state)
            return [np.asarray(values[k]) for k in prog.sinks()]
        b = prog.batched
        n = next(a.shape[0] for a, bk in zip(arrays, b) if bk)
        examples = [[a[e] if bk else a for a, bk in zip(arrays, b)] for e in range(n)] or \
            [[np.zeros(a.shape[1:], a.dtype) if bk else a for a, bk in zip(arrays, b)]]    # B 0: the shapes
        outs = [[np.asarray(prog.run(NP_OPS, ex, state)[k]) for k in prog.sinks()] for ex in examples]
        return [np.stack(col) if n else np.zeros((0,) + col[0].shape, col[0].dtype) for col in zip(*outs)]


def run_case(seed, backend="numpy", grad=False, calls=None, feature=None, exact=False):
    """Mismatches of one case (empty: it passes), the case's last trace, its program; `exact`:
    reduce_retracing=False (is a failure older than relaxed traces?)."""
    with np.errstate(all="ignore"):     # means of nothing: nan, as numpy's
        return _run_case(seed, backend, grad, calls, feature, exact)


def options(seed, feature):
    """(export?, rematerialize?) of a case: the feature itself, or with others now and then (a
    program assigning a variable is not exported: its export freezes the variable)."""
    rng = np.random.default_rng(seed + 13)
    export = feature == "export" or feature is not None and "var_assign" not in feature and rng.random() < 0.3
    return export, feature == "remat" or feature is not None and rng.random() < 0.3


def _call(f, tensors, grad, eagerly=False):
    df.config.run_functions_eagerly(eagerly)    # the eager reference: nested defuns eager too
    try:
        return _flat(f(*tensors), grad)
    finally:
        df.config.run_functions_eagerly(False)


def _run_case(seed, backend, grad, calls, feature, exact):
    prog = program(seed, feature)
    export, remat = options(seed, feature)
    forward, loss, floats, state = functions(prog, seed)
    eager_fwd, eager_loss, _, eager_state = functions(prog, seed)
    fn = df.defun(df.value_and_gradients_function(loss, floats) if grad else forward, backend=backend,
                  rematerialize=remat, reduce_retracing=not exact)
    eager = df.value_and_gradients_function(eager_loss, floats) if grad else eager_fwd
    np_state = {"vars": [np.array(v, prog.dtype) for v in prog.var_inits]}
    tol = TOL[prog.dtype]
    kept, bad, done = [], [], []      # (earlier results, their copies); mismatches; (where, arrays, wanted)
    for c, env in enumerate(calls or size_calls(prog, seed)):
        try:
            arrays = prog.arrays(env, seed * 1000 + c)
            _numpy_outputs(prog, arrays)
        except (Invalid, ValueError, IndexError):
            continue    # sizes the program refuses (numpy says so)
        want_np = _numpy_outputs(prog, arrays, np_state)
        where = f"call {c} at {env} (shapes {[a.shape for a in arrays]})"
        tensors = [df.constant(a.copy()) for a in arrays]      # (the arrays stay as they were)
        try:
            want = _call(eager, tensors, grad, eagerly=True)
        except Exception as e:      # noqa: BLE001 - numpy runs it: a mismatch
            bad.append(f"{where}: eager raised {type(e).__name__}: {e}, numpy did not")
            break
        if not grad:
            bad += _compare(want, want_np, tol, f"{where}: eager vs numpy, output")
        try:
            got = _call(fn, tensors, grad)
        except Exception as e:      # noqa: BLE001 - a defun refusing what eager runs is a mismatch
            bad.append(f"{where}: defun raised {type(e).__name__}: {e}")
            break
        bad += _compare([t._value for t in tensors], arrays, dict(rtol=0, atol=0), f"{where}: after the call, argument")
        for ref, copy in kept:
            if not np.array_equal(ref, copy, equal_nan=True):
                bad.append(f"{where}: changed an earlier call's result")
                break
        bad += _compare(got, want, tol, f"{where}: {'value/gradient' if grad else 'output'}")
        bad += _compare([v.numpy() for v in state["vars"]], [v.numpy() for v in eager_state["vars"]], tol,
                        f"{where}: after the call, variable")
        bad += _compare([v.numpy() for v in eager_state["vars"]], np_state["vars"], tol,
                        f"{where}: after the call, eager's variable vs numpy's")
        refs = [t._value if isinstance(t, df.Tensor) else _dense(t) for t in got]   # the arrays returned
        kept += [(r, r.copy()) for r in refs]
        if bad:
            break
        done.append((where, arrays, want))
    if len(done) > 1 and not bad and not exact and not any(d is None for cf in fn._cache.values() for t in cf.inputs
                                             for d in t.shape):
        bad.append(f"no relaxed trace: {fn.retrace_reasons()}")     # (the relaxed trace failed)
    if export and not bad:
        bad += _exported(fn, done, tol)
    trace = list(fn._cache.values())[-1] if fn._cache else None
    return bad, trace, prog


def _exported(fn, done, tol):
    """Each relaxed trace exported to JSON (through text) and numpy source, reloaded, called
    at every size the case called (once each) that it takes, against the eager results."""
    bad, seen, runs = [], set(), []
    for cf in fn._cache.values():
        if not any(d is None for t in cf.inputs for d in t.shape):
            continue
        try:
            loaded, module = df.load_json(json.loads(json.dumps(df.export_json(cf)))), {}
            exec(compile(df.export_numpy_source(cf), "<exported numpy source>", "exec"), module)   # noqa: S102
        except Exception as e:      # noqa: BLE001 - a relaxed trace that does not export is a failure
            return [f"export of the relaxed trace raised {type(e).__name__}: {e}"]
        runs.append(([tuple(t.shape) for t in cf.inputs], loaded, module["forward"], _onnx_session(cf)))
    for where, arrays, want in done:
        key = tuple(a.shape for a in arrays)
        run = next((r for r in runs if all(len(s) == len(a) and all(d in (None, n) for d, n in zip(s, a))
                                           for s, a in zip(r[0], key))), None)
        if key in seen or run is None:
            continue
        seen.add(key)
        calls = [("load_json", lambda: _nested_flat(run[1](*arrays))),
                 ("numpy source", lambda: [np.asarray(v) for v in run[2](*arrays)])]
        if run[3] is not None:
            calls.append(("onnx", lambda: run[3].run(None, dict(zip([i.name for i in run[3].get_inputs()], arrays)))))
        for name, call in calls:
            try:
                got = call()
            except Exception as e:      # noqa: BLE001
                bad.append(f"{where}: exported ({name}) raised {type(e).__name__}: {e}")
                continue
            bad += _compare(got, want, tol, f"{where}: exported ({name}), output")
    return bad


def _onnx_session(cf):
    """An onnxruntime session of the trace's ONNX export, or None: no onnxruntime, a float16
    program (its CPU kernels lack some), an op without an ONNX form (the documented refusal)."""
    try:
        import onnxruntime as ort       # (optional: the export step runs without it)
    except ImportError:
        return None
    if any(t.dtype == df.float16 for t in cf.inputs):
        return None
    try:
        model = df.export_onnx(cf)
    except df.errors.UnimplementedError:
        return None
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _nested_flat(result):
    """A loaded function's results, flat (value, then gradients)."""
    if isinstance(result, (list, tuple)):
        return [x for r in result for x in _nested_flat(r)]
    return [result]


def cases():
    """(seed, backend, gradient?) of every case of this run: each seed forward and gradient,
    and the programs with features (FEATURE_CASES)."""
    return [(s, backend, grad) for backend, seeds in (("numpy", NUMPY_SEEDS), ("numba", NUMBA_SEEDS))
            for s in seeds for grad in (False, True)] + \
        [(s, backend, grad) for backend, which in (("numpy", FEATURE_CASES), ("numba", FEATURE_NUMBA_CASES))
         for s, grad in which]


@pytest.mark.filterwarnings("ignore::defun.RetracingWarning")
@pytest.mark.parametrize("seed, backend, grad", [
    pytest.param(*c, id=f"{c[1]}-{'grad' if c[2] else 'fwd'}-{c[0]}" + (f"-{feature_of(c[0])}" if c[0] >= 20_000
                                                                         else "")) for c in cases()])
def test_relaxed_calls_match_eager(seed, backend, grad):
    if backend == "numba":
        pytest.importorskip("numba")
    bad, _, prog = run_case(seed, backend, grad, feature=feature_of(seed))
    assert not bad, f"case {seed} ({backend}, {'gradient' if grad else 'forward'}, {feature_of(seed)}, " \
        f"export/remat {options(seed, feature_of(seed))}):\n" + \
        prog.describe() + "\n" + "\n".join(bad[:5])


def test_the_ci_share_has_every_op_and_feature_and_a_case_past_max_patterns():
    ops = {op for s in NUMPY_SEEDS for op, _, _ in program(s).nodes}
    with_features = [program(s, feature_of(s)) for s, _ in FEATURE_CASES]
    ops |= {op for p in with_features for op, _, _ in p.nodes} | {"wrap_" + p.span[2] for p in with_features if p.span}
    assert ops == set(DF_OPS) == set(NP_OPS)
    assert {f for s, _ in FEATURE_CASES for f in feature_of(s).split("+")} == set(CASE_FEATURES)
    assert any(p.batched for p in with_features)
    bad, trace, prog = run_case(45, "numpy", True)
    assert not bad and len(prog.variables) == 4
    calls = trace._calls
    assert len(calls._patterns) == MAX_PATTERNS and len(calls._specialized) == 1
    assert calls.fn._run is not None    # the trace's own plan ran past MAX_PATTERNS


@pytest.mark.parametrize("seed, grad", [(27, True), (38, False)])
def test_past_max_specialized_hot_shapes_the_pattern_plans_run(seed, grad):
    prog = program(seed)
    n, m = prog.variables       # two variables, unequal: one pattern for every hot shape
    hot = [{n: a, m: a + 1} for a in range(2, MAX_SPECIALIZED + 5)]
    calls = [env for env in hot for _ in range(HOT_CALLS)] + [{n: 1, m: 5}, {n: 5, m: 5}, hot[0], hot[-1]]
    bad, trace, _ = run_case(seed, "numpy", grad, calls)
    assert not bad, bad[:3]
    assert len(trace._calls._specialized) == MAX_SPECIALIZED and len(trace._calls._patterns) == 2


def test_numba_reads_an_unknown_size_of_1_broadcast_against_a_known_size():
    # found by the sweep (case 10033): y [1, 4, ?] times a [2, 4, 2] fused with another node
    # read y[0, i1, i2] for i2 < 2 where y's size is 1 (out of bounds, no error): the loop's
    # size is known, so the input's unknown size was never compared with it
    pytest.importorskip("numba")
    import defun.graph.numba_backend as nb     # (its fallback count; imported only with numba)

    def f(b, c, y):
        return df.stack([b, b], axis=2) * y, df.maximum(c, 0.5)

    g = df.defun(f, backend="numba", input_signature=[df.TensorSpec([2, 4], df.float64),
                 df.TensorSpec([3], df.float64), df.TensorSpec([1, 4, None], df.float64)])
    rng = np.random.default_rng(5)
    fallbacks = nb.stats["fallbacks"]
    for n in (2, 1, 1, 0):
        b, c, y = rng.normal(size=(2, 4)), rng.normal(size=3), rng.normal(size=(1, 4, n))
        if n == 0:      # 0 against 2: numpy's error
            with pytest.raises(df.errors.InvalidArgumentError, match="broadcast"):
                g(b, c, y)
            continue
        prod, top = g(b, c, y)
        np.testing.assert_array_equal(prod.numpy(), np.stack([b, b], 2) * y)
        np.testing.assert_array_equal(top.numpy(), np.maximum(c, 0.5))
    assert nb.stats["fallbacks"] == fallbacks + 3     # sizes 1 and 0: numpy's case


if __name__ == "__main__":
    import time
    warnings.simplefilter("ignore", df.RetracingWarning)
    seeds = [int(a) for a in sys.argv[1:] if a.isdigit()]
    backends = ["numba"] if "numba" in sys.argv else ["numpy"]
    todo = [(s, b, g) for s in seeds for b in backends for g in (False, True)] if seeds else cases()
    failed, t0 = 0, time.perf_counter()
    for s, b, g in todo:
        bad, trace, prog = run_case(s, b, g, feature=feature_of(s))
        failed += bool(bad)
        if bad or seeds and "-q" not in sys.argv:
            patterns = len(trace._calls._patterns) if trace is not None and trace._calls else "-"
            print(f"case {s} {b} {'grad' if g else 'fwd'} {feature_of(s)} {options(s, feature_of(s))}: "
                  f"{'FAIL' if bad else 'ok'}, {patterns} patterns")
            print(prog.describe() + "\n" + "\n".join(bad[:3]))
    print(f"{len(todo)} cases, {failed} failed, {time.perf_counter() - t0:.1f} s")
