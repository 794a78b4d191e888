"""Budgets that bound (issue 28): documents of a few KB built to escape `max_bytes` and
`max_operations` are refused, before the work or the memory, on the numpy and the numba
backends; a while loop counts what it saves per iteration, a scan grows its rows as it goes,
work is declared per row where it is not linear (sorts, FFTs, pooling windows, solves, erf,
complex pow), FFTs declare their buffers, naming outputs is linear, out-of-memory is a
ResourceExhaustedError, and a loaded document's rebuilt gradient of matmul(transpose_b)
and qr runs under the budgets."""
import json
import math
import re
import sys

import numpy as np
import pytest

import defun as df
from serialize_helpers import peak_memory
from defun.graph.serialize import budget
from defun.graph.serialize.export import output_names

F = df.TensorSpec
F32, F64 = np.float32, np.float64
MB = 1 << 20
Exhausted = df.errors.ResourceExhaustedError
BACKENDS = ["numpy"] + (["numba"] if "numba" in df.backends() else [])


def _doc(f, *specs, backward=False):
    cf = df.defun(f, input_signature=list(specs)).get_concrete_function()
    return json.loads(json.dumps(df.export_json(cf, include_backward=backward)))


# ---------------------------------------------------------------------------------------
# Memory: what loops keep

def _saving_loop(x, n):
    return df.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, df.sin(y) * 1.0001), (0, x))[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_while_counts_the_values_it_saves_per_iteration(backend):
    """A differentiable loop's forward keeps 1 MiB per iteration for its backward: 200
    iterations (400 MiB with the stack) under a 64 MiB budget are refused while the call
    holds less than the budget (it allocated 400 MB, then refused the stack, before)."""
    doc = _doc(_saving_loop, F([1 << 18], df.float32), F([], df.int32), backward=True)
    assert any(n["op"] == "while" and n["attrs"].get("saves") for fd in doc["functions"] for n in fd["nodes"])
    f = df.load_json(doc, backend=backend, max_bytes=64 * MB)

    def differentiated(n):      # under a tape: the forward that saves for the backward
        x = df.constant(np.ones(1 << 18, F32))
        with df.GradientTape() as tape:
            tape.watch(x)
            y = df.reduce_sum(f(x, n))
        return tape.gradient(y, x)
    out, peak = peak_memory(differentiated, np.int32(200))
    assert isinstance(out, Exhausted) and "budget of 67108864 bytes" in str(out), out
    assert peak < 64 * MB, peak
    # within the budget: the loop's values and its gradient, as the function's own
    xt = df.constant(np.linspace(-1, 1, 1 << 18, dtype=F32))
    with df.GradientTape() as tape:
        tape.watch(xt)
        y = df.reduce_sum(f(xt, np.int32(5)))
    want = xt.numpy().astype(F64)
    d = np.ones_like(want)
    for _ in range(5):
        d, want = d * np.cos(want) * 1.0001, np.sin(want) * 1.0001
    np.testing.assert_allclose(y.numpy(), want.sum(), rtol=1e-4)
    np.testing.assert_allclose(tape.gradient(y, xt).numpy(), d, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_scan_grows_its_rows_and_counts_them(backend):
    """A map over 2^26 empty rows (an input of no bytes): refused at the row budget, having
    allocated under 4 MB (the row lists were made whole first: 512 MB each, before)."""
    doc = _doc(lambda xs: df.map_fn(lambda r: df.reduce_sum(r) + 1.0, xs), F([None, 0], df.float32))
    xs = np.empty((1 << 26, 0), F32)
    out, peak = peak_memory(df.load_json(doc, backend=backend, max_iterations=1000), xs)
    assert isinstance(out, Exhausted) and "scan: more than 1000 rows" in str(out), out
    assert peak < 4 * MB, peak
    # without an iteration budget, the rows' own bytes (array objects) count against max_bytes
    out, peak = peak_memory(df.load_json(doc, backend=backend, max_iterations=None, max_bytes=2 * MB), xs)
    assert isinstance(out, Exhausted) and "budget of 2097152 bytes" in str(out), out
    assert peak < 8 * MB, peak
    assert df.load_json(doc, backend=backend)(np.empty((5, 0), F32)).numpy().tolist() == [1.0] * 5


def test_a_reversed_scan_keeps_its_rows_in_place():
    doc = _doc(lambda xs: df.scan(lambda a, x: a + x, xs, reverse=True), F([None], df.float32))
    got = df.load_json(doc)(np.arange(1, 5, dtype=F32)).numpy()
    assert got.tolist() == [10.0, 9.0, 7.0, 4.0]


# ---------------------------------------------------------------------------------------
# Work: declared per row where it is not linear. Each document makes its big operand from
# a scalar (a few KB of JSON); under max_operations=10**8 (a fraction of a second of an
# add) each is refused at the heavy node before it runs, while one operation per element
# read and written (all that was charged before) is under the budget.

def _from(s, n, dtype=df.float64):
    """n values in [-1, 1] made from the scalar s."""
    return df.cast(df.sin(df.cast(df.range(0.0, float(n), 1.0), df.float64) * s), dtype)


_N = 1 << 22
_P = 1_000_003      # a prime: Bluestein's algorithm
_HEAVY = [
    ("erf", lambda s: df.erf(_from(s, _N))),
    ("gelu", lambda s: df.gelu(_from(s, _N))),
    ("softplus", lambda s: df.softplus(_from(s, _N))),
    ("reduce_logsumexp", lambda s: df.reduce_logsumexp(_from(s, _N))),
    ("pow", lambda s: (lambda c: c ** c)(df.complex(_from(s, _N // 2), _from(s, _N // 2) + 0.5))),
    ("sort", lambda s: df.sort(_from(s, _N))),
    ("argsort", lambda s: df.argsort(_from(s, _N))),
    ("top_k", lambda s: df.top_k(_from(s, _N), 1000)[0]),
    ("cumsum", lambda s: df.cumsum(_from(s, _N))),
    ("fft", lambda s: df.signal.fft(df.complex(_from(s, _P), _from(s, _P)))),
    ("rfft", lambda s: df.signal.rfft(_from(s, _P))),
    ("max_pool2d", lambda s: df.max_pool2d(df.reshape(_from(s, 256 * 256 * 4, df.float32), [1, 256, 256, 4]),
                                           32, 1, "VALID")),
    ("avg_pool2d", lambda s: df.avg_pool2d(df.reshape(_from(s, 256 * 256 * 4, df.float32), [1, 256, 256, 4]),
                                           32, 1, "VALID")),
    ("triangular_solve", lambda s: df.linalg.triangular_solve(
        df.reshape(_from(s, 1000 * 1000), [1000, 1000]) + df.eye(1000, dtype=df.float64) * 4.0,
        df.reshape(_from(s, 1000 * 1000), [1000, 1000]))),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op,f", _HEAVY, ids=[h[0] for h in _HEAVY])
def test_heavy_rows_are_charged_their_work(op, f, backend):
    doc = _doc(f, F([], df.float64))
    assert len(json.dumps(doc)) < 8000
    with pytest.raises(Exhausted, match=rf"(^|: ){op}: the call would reach \d+ operations"):
        df.load_json(doc, backend=backend, max_operations=10 ** 8)(np.float64(0.001))


def test_what_heavy_rows_are_charged():
    """The declared work against its formula: a sort's n log n, an FFT's passes (a power of
    two: 2 log2 n per element) or Bluestein's (a prime), a pooling window per output."""
    from defun.runtime.ops import _costs
    assert _costs._fft_plan(1 << 20) == (40, False)
    per, bluestein = _costs._fft_plan(_P)
    assert bluestein and per == pytest.approx(6 * 2.1 * math.log2(2.1 * _P))
    assert _costs._fft_plan(3 * 5 * 7 * 1024)[0] == 3 + 5 + 7 + 20
    sort = _charged(lambda x: df.sort(x), F([4096], df.float64), [np.ones(4096)])
    add = _charged(lambda x: x + 1.0, F([4096], df.float64), [np.ones(4096)])
    assert add == budget.KERNEL_OPERATIONS + 2 * 4096 + 1
    assert sort == budget.KERNEL_OPERATIONS + 2 * 4096 + 5 * 4096 * 12       # 5 n log2 n
    pool = _charged(lambda x: df.max_pool2d(x, 4, 2, "VALID"), F([1, 10, 10, 1], df.float32),
                    [np.ones((1, 10, 10, 1), F32)])
    assert pool == budget.KERNEL_OPERATIONS + 100 + 16 + 16 * 16


def _charged(f, spec, args):
    """The operations a one-node document is charged (its refusal under max_operations=0)."""
    with pytest.raises(Exhausted) as info:
        df.load_json(_doc(f, spec), max_operations=0)(*args)
    return int(re.search(r"reach (\d+) operations", str(info.value)).group(1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_fft_counts_its_buffers(backend):
    """numpy's FFT works in complex128 buffers it does not show to tracemalloc: a prime
    length (Bluestein) of a 16 MB complex64 result uses 18x that more (the process's peak),
    so a 128 MiB budget refuses it; a power-of-two length of that size needs 6x."""
    prime = _doc(lambda x: df.signal.fft(x), F([2_097_143], df.complex64))     # a prime
    with pytest.raises(Exhausted, match=r"fft: its result needs (\d+) bytes") as info:
        df.load_json(prime, backend=backend, max_bytes=128 * MB)(np.ones(2_097_143, np.complex64))
    need = int(re.search(r"needs (\d+) bytes", str(info.value)).group(1))
    assert need >= (1 + 18) * 2_097_143 * 8
    smooth = _doc(lambda x: df.signal.fft(x), F([1 << 21], df.complex64))
    got = df.load_json(smooth, backend=backend, max_bytes=128 * MB)(np.ones(1 << 21, np.complex64))
    assert got.numpy()[0] == 1 << 21 and np.all(got.numpy()[1:] == 0)


# ---------------------------------------------------------------------------------------
# Out of memory, names, a rebuilt gradient's matmul

def test_out_of_memory_is_a_resource_exhausted_error_with_a_message():
    doc = _doc(lambda d: df.fill(d, 1.5), F([2], df.int32))
    free = df.load_json(doc, max_bytes=None, max_iterations=None, max_operations=None)
    huge = np.array([1 << 30, 1 << 30], np.int32)
    with pytest.raises(Exhausted, match=r"dynamic_fill.*out of memory \(Unable to allocate 4.00 EiB"):
        free(huge)
    with pytest.raises(Exhausted, match=r"^fill\(.*\): out of memory \(Unable to allocate"):
        df.fill(df.constant(huge), 1.5)
    assert isinstance(df.errors.out_of_memory("x", MemoryError()), Exhausted)
    assert "out of memory (numpy or Python could not allocate" in str(df.errors.out_of_memory("x", MemoryError()))


def _steps(n):
    """Lines output_names runs for n outputs all named "f" (counted, not timed)."""
    structure = {"namedtuple": {"name": "T", "fields": [["f", {"output": k}] for k in range(n)]}}
    count = [0]
    code = output_names.__code__

    def tracer(frame, event, arg):
        if frame.f_code is code or frame.f_back is not None and frame.f_back.f_code is code:
            def local(frame, event, arg):
                count[0] += event == "line"
                return local
            return local
        return None
    sys.settrace(tracer)
    try:
        names = output_names(structure, n)
    finally:
        sys.settrace(None)
    assert names[:3] == ["f", "f_1", "f_2"] and names[-1] == f"f_{n - 1}" and len(set(names)) == n
    return count[0]


def test_naming_outputs_is_linear():
    """n outputs of one name: "f", "f_1", ... took n^2 / 2 steps (20,000 outputs: 126 s;
    216 s per access on a 5 MB document); now the steps grow as n."""
    small, big = _steps(500), _steps(2000)
    assert big < 4.5 * small, (small, big)      # quadratic: 16x


def _x(n, seed):
    return np.random.default_rng(seed).random((n, n))


@pytest.mark.parametrize("f,ref", [
    (lambda a, b: df.matmul(a, b, transpose_b=True), lambda a, b: np.ones((3, 3)) @ b),
    (lambda a, b: df.linalg.qr(a)[1] * b, None),
], ids=["matmul_transpose_b", "qr"])
def test_a_loaded_documents_rebuilt_gradient_runs_under_the_budgets(f, ref):
    """The gradient rebuilt for a loaded document (no backward exported) has matmul nodes
    with transpose_b and no transpose_a: the budget's matmul cost read a missing attr
    (KeyError: 'transpose_a')."""
    spec = F([3, 3], df.float64)
    g = df.load_json(_doc(f, spec, spec))
    a, b = df.constant(_x(3, 1)), df.constant(_x(3, 2))
    grads = []
    for fn in (g, df.defun(f)):
        with df.GradientTape() as tape:
            tape.watch(a)
            y = df.reduce_sum(fn(a, b))
        grads.append(tape.gradient(y, a).numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)
    if ref is not None:
        np.testing.assert_allclose(grads[0], ref(a.numpy(), b.numpy()), rtol=1e-12)


# ---------------------------------------------------------------------------------------
# The numba backend keeps every budget

@pytest.mark.skipif("numba" not in df.backends(), reason="the numba backend is not installed")
def test_numba_regions_are_metered_where_they_start():
    doc = _doc(lambda x: df.reduce_sum(df.tanh(x * 1.5 + 0.25) * df.exp(x), axis=1), F([None, None], df.float32))
    x = np.random.default_rng(0).random((300, 400)).astype(F32)
    want = df.load_json(doc)(x).numpy()
    g = df.load_json(doc, backend="numba")
    assert g.backend.base.name == "numba" and g.backend.max_operations == budget.DEFAULT_MAX_OPERATIONS
    np.testing.assert_allclose(g(x).numpy(), want, rtol=1e-5)
    with pytest.raises(Exhausted, match=r"fused\(multiply, add, tanh, exp, reduce_sum\): its result needs"):
        df.load_json(doc, backend="numba", max_bytes=100_000)(x)
    with pytest.raises(Exhausted, match=r"fused\(.*\): the call would reach \d+ operations"):
        df.load_json(doc, backend="numba", max_operations=10 ** 6)(x)
    # charged as numpy's kernels would be, less their dispatches: never more
    for what in ("max_bytes", "max_operations"):
        need = [_smallest_passing(doc, x, what, b) for b in ("numpy", "numba")]
        assert 0 < need[1] <= need[0], (what, need)


def _smallest_passing(doc, x, what, backend):
    lo, hi = 0, 10 ** 8
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            df.load_json(doc, backend=backend, **{what: mid})(x)
            hi = mid
        except Exhausted:
            lo = mid + 1
    return lo


@pytest.mark.skipif("numba" not in df.backends(), reason="the numba backend is not installed")
def test_numba_loops_keep_max_iterations_and_nested_work():
    def outer(x):
        inner = lambda y: df.while_loop(lambda j, z: j < 100_000, lambda j, z: (j + 1, df.tanh(z) * 2.0 + 1.0),  # noqa: E731
                                        (0, y))[1]
        return df.while_loop(lambda i, y: i < 100_000, lambda i, y: (i + 1, inner(y)), (0, x))[1]
    doc = _doc(outer, F([4], df.float32))
    with pytest.raises(Exhausted, match="max_operations=1000000"):
        df.load_json(doc, backend="numba", max_operations=10 ** 6)(np.ones(4, F32))
    forever = _doc(lambda x: df.while_loop(lambda i, y: i >= 0, lambda i, y: (i + 1, df.tanh(y) * 2.0 + 1.0),
                                           (0, x))[1], F([4], df.float32))
    with pytest.raises(Exhausted, match="50 iterations"):
        df.load_json(forever, backend="numba", max_iterations=50)(np.ones(4, F32))


@pytest.mark.skipif("numba" not in df.backends(), reason="the numba backend is not installed")
def test_a_region_falling_back_to_numpy_stays_within_what_it_is_counted_for():
    """A size that turns out to be 1 and broadcasts sends the region to numpy's kernels:
    they drop each value after its last reader, so 25 nodes on 8 MB arrays peak at 24 MB
    under a 64 MiB budget (they kept all 33 values, 264 MB, before)."""
    from defun.graph import numba_backend

    def f(x, y):
        z = x + y
        for _ in range(12):
            z = df.tanh(z) * 1.01 + 0.5
        return df.reduce_sum(z)
    doc = _doc(f, F([None], df.float64), F([None], df.float64))
    g = df.load_json(doc, backend="numba", max_bytes=64 * MB)
    x, y = np.ones(1 << 20), np.ones(1)
    before = numba_backend.stats["fallbacks"]
    g(x, y)         # compiled (numba's own allocations) and warm
    out, peak = peak_memory(g, x, y)
    assert numba_backend.stats["fallbacks"] >= before + 2
    want = np.ones(1 << 20) * 2.0
    for _ in range(12):
        want = np.tanh(want) * 1.01 + 0.5
    np.testing.assert_allclose(out.numpy(), want.sum(), rtol=1e-9)    # summation order
    assert peak < 32 * MB, peak
