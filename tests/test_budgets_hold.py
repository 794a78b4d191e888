"""The budgets of loaded documents hold: run-time sizes counted before allocating, kernels'
scratch memory counted (the row's Cost, measured with tracemalloc), a work budget across
calls and loops, budgets kept when a loaded function is called inside a defun, and the two
wrappers of the meter (static and run-time sizes) counting alike."""
import json
import re
import sys

import numpy as np
import pytest

import defun as df
from serialize_helpers import peak_memory
from defun.graph.passes import optimize
from defun.graph.serialize import budget
from defun.runtime import registry

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from opcheck import make_inputs  # noqa: E402
from op_table import ROWS, graph_dtype, input_signature_of  # noqa: E402

F32, I32 = np.float32, np.int32
MB = 1 << 20
Exhausted = df.errors.ResourceExhaustedError


def _doc(f, *specs):
    cf = df.defun(f, input_signature=list(specs)).get_concrete_function()
    return json.loads(json.dumps(df.export_json(cf)))


# ---------------------------------------------------------------------------------------
# Sizes known only from values: refused before anything is allocated

_VEC, _VEC2 = df.TensorSpec([1], df.int32), df.TensorSpec([2], df.int32)
_SCALAR = df.TensorSpec([], df.int32)
_RUN_TIME_SIZED = [
    ("dynamic_fill", lambda d: df.fill(d, 1.5), (_VEC2,), (np.array([1 << 14, 1 << 15], I32),)),
    ("dynamic_fill", lambda d: df.zeros(d, df.float64), (_VEC,), (np.array([1 << 28], I32),)),
    ("dynamic_tile", lambda x, m: df.tile(x, m), (df.TensorSpec([None], df.float32), _VEC),
     (np.ones(4, F32), np.array([1 << 27], I32))),
    ("dynamic_range", lambda a, b: df.range(a, b, 1), (_SCALAR, _SCALAR), (np.int32(0), np.int32(2 ** 31 - 1))),
    ("dynamic_range", lambda a: df.range(df.cast(a, df.float32), 3e9, 1.0), (_SCALAR,), (np.int32(0),)),
]


@pytest.mark.parametrize("op,f,specs,args", _RUN_TIME_SIZED, ids=[f"{r[0]}-{k}" for k, r in enumerate(_RUN_TIME_SIZED)])
def test_a_run_time_size_is_refused_before_it_is_allocated(op, f, specs, args):
    """Each of these documents asks for GiBs; the call is refused naming the op while
    less than 4 MB was ever allocated (and the same document runs on small values)."""
    loaded = df.load_json(_doc(f, *specs), max_bytes=64 * MB)
    out, peak = peak_memory(loaded, *args)
    assert isinstance(out, Exhausted) and re.search(op.split("_")[1] + r": its result needs \d+ bytes", str(out)), out
    assert peak < 4 * MB


def test_run_time_sizes_within_the_budget_compute():
    fill = df.load_json(_doc(lambda d: df.fill(d, 1.5), _VEC2), max_bytes=1024)
    np.testing.assert_array_equal(fill(np.array([2, 3], I32)).numpy(), np.full((2, 3), 1.5, F32))
    with pytest.raises(Exhausted, match="fill"):
        fill(np.array([16, 17], I32))        # 1088 bytes
    rng = df.load_json(_doc(lambda a, b: df.range(a, b, 1), _SCALAR, _SCALAR), max_bytes=40)
    np.testing.assert_array_equal(rng(np.int32(0), np.int32(10)).numpy(), np.arange(10))
    with pytest.raises(Exhausted, match="range"):
        rng(np.int32(0), np.int32(11))


def _nodes(g):
    for n in g.nodes:
        yield n
        for a in n.op.function_attrs:
            fs = n.attrs[a]
            for f in fs if isinstance(fs, (list, tuple)) else [fs]:
                yield from _nodes(f)


def test_every_op_whose_size_depends_on_values_declares_it():
    """Trace every row of the op table with static shapes: a node whose inputs have known
    sizes and whose output does not is sized by values, and its row says how (Cost.sized)."""
    found = set()
    for row in ROWS:
        for v in row.variants:
            try:
                xs = make_inputs(v.args, graph_dtype(row, v))
                cf = df.defun(lambda *a: row.fn(*a, **v.kw), input_signature=input_signature_of(xs, False)
                              ).get_concrete_function()
            except Exception:       # rows that refuse static tracing are covered by their own tests
                continue
            for n in _nodes(cf.graph):
                if n.op.name in ("placeholder", "const", "call", "cond", "while"):
                    continue
                if all(None not in tuple(t.shape) for t in n.inputs) and \
                        any(None in tuple(t.shape) for t in n.outputs):
                    found.add(n.op.name)
    views = {"dynamic_reshape", "dynamic_broadcast_to"}     # views: nothing is allocated
    assert {"dynamic_fill", "dynamic_tile", "dynamic_range", "segment_sum"} <= found
    for name in found - views:
        assert registry.get(name).cost.sized is not None, name


# ---------------------------------------------------------------------------------------
# Scratch memory: the row's Cost, checked against what numpy really allocates

_F = df.TensorSpec
_SCRATCH = [
    ("conv2d", lambda x, w: df.conv2d(x, w, 1, "SAME"),
     (_F([1, 128, 128, 8], df.float32), _F([5, 5, 8, 8], df.float32)),
     lambda: (np.ones((1, 128, 128, 8), F32), np.ones((5, 5, 8, 8), F32))),
    ("conv2d", lambda x, w: df.conv2d(x, w, 1, "VALID"),
     (_F([2, 96, 96, 1], df.float32), _F([7, 7, 1, 2], df.float32)),
     lambda: (np.ones((2, 96, 96, 1), F32), np.ones((7, 7, 1, 2), F32))),
    ("stateless_random_normal", lambda s: df.random.normal([1 << 19], s),
     (_F([2], df.int32),), lambda: (np.array([1, 2], I32),)),
    ("dropout", lambda x, s: df.dropout(x, 0.5, s), (_F([1 << 19], df.float32), _F([2], df.int32)),
     lambda: (np.ones(1 << 19, F32), np.array([1, 2], I32))),
    ("top_k", lambda x: df.top_k(x, 4)[0], (_F([64, 8192], df.float32),),
     lambda: (np.random.default_rng(0).random((64, 8192), F32),)),
    ("softmax", lambda x: df.softmax(x), (_F([512, 1024], df.float32),), lambda: (np.ones((512, 1024), F32),)),
    ("norm", lambda x: df.norm(x, axis=1), (_F([512, 1024], df.float32),), lambda: (np.ones((512, 1024), F32),)),
    ("reduce_logsumexp", lambda x: df.reduce_logsumexp(x, axis=1), (_F([512, 1024], df.float32),),
     lambda: (np.ones((512, 1024), F32),)),
]


@pytest.mark.parametrize("op,f,specs,make", _SCRATCH, ids=[f"{r[0]}-{k}" for k, r in enumerate(_SCRATCH)])
def test_a_kernels_scratch_memory_is_within_what_the_budget_counts(op, f, specs, make):
    """The budget the node asks for (its refusal under max_bytes=0 says) is what it takes:
    under exactly that budget the call runs, and numpy's peak stays within it (plus the
    arguments, copied, and 256 KiB of Python objects)."""
    doc = _doc(f, *specs)
    args = make()
    with pytest.raises(Exhausted) as info:
        df.load_json(doc, max_bytes=0)(*args)
    assert f"{op}: its result needs" in str(info.value), info.value
    need = int(re.search(r"needs (\d+) bytes", str(info.value)).group(1))
    loaded = df.load_json(doc, max_bytes=need)
    loaded(*args)   # compiled and warm
    out, peak = peak_memory(loaded, *args)
    assert not isinstance(out, Exception), out
    held = sum(a.nbytes for a in args)     # the call's copies of its arguments
    assert peak <= need + held + 256 * 1024, (op, peak, need)
    assert peak > 0.5 * need, (op, peak, need)    # and the count is not wildly above it


def test_a_convolution_is_refused_before_its_patch_matrix():
    """A 16 MiB budget and a convolution whose output is 2 MiB but whose patches are 50 MiB:
    refused, with under 4 MB allocated."""
    doc = _doc(lambda x, w: df.conv2d(x, w, 1, "SAME"), _F([1, 256, 256, 8], df.float32),
               _F([5, 5, 8, 8], df.float32))
    out, peak = peak_memory(df.load_json(doc, max_bytes=16 * MB), np.ones((1, 256, 256, 8), F32),
                      np.ones((5, 5, 8, 8), F32))
    assert isinstance(out, Exhausted) and "conv2d: its result needs" in str(out), out
    assert peak < 4 * MB + 2 * 256 * 256 * 8 * 4


def test_costs_are_declared_on_the_rows():
    assert registry.get("conv2d").cost.work is not None and callable(registry.get("conv2d").cost.scratch)
    assert registry.get("stateless_random_normal").cost.scratch >= 6
    assert registry.get("add").cost is registry.FREE
    with pytest.raises(ValueError, match="cost must be a registry.Cost"):
        registry.OpDef("x", None, None, cost=3)
    with pytest.raises(ValueError, match="scratch must be"):
        registry.Cost(scratch=-1)


# ---------------------------------------------------------------------------------------
# Work: an operation count across calls and loops

def test_the_work_budget_is_checked_and_can_be_lifted():
    doc = _doc(lambda x: x * 2.0, _F([4], df.float32))
    assert df.load_json(doc).backend.max_operations == budget.DEFAULT_MAX_OPERATIONS == 10 ** 10
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="max_operations must be an int >= 0"):
            df.load_json(doc, max_operations=bad)
    with pytest.raises(Exhausted, match=r"mul.*max_operations=10\b"):
        df.load_json(doc, max_operations=10)(np.ones(4, F32))
    assert df.load_json(doc, max_operations=None)(np.ones(4, F32)).numpy().tolist() == [2.0] * 4


def _doubling_calls(levels):
    """f_0(x) = x * 1.0001; f_k(x) = f_{k-1}(f_{k-1}(x)): 2^levels calls of f_0, 2 nodes a level."""
    f = df.defun(lambda x: x * 1.0001)
    for _ in range(levels):
        f = df.defun(lambda x, g=f: g(g(x)))
    return _doc(f, _F([2], df.float32))


def test_a_document_making_2_to_the_60_calls_is_stopped():
    doc = _doubling_calls(60)
    assert sum(len(fd["nodes"]) for fd in doc["functions"]) <= 130
    with pytest.raises(Exhausted, match="max_operations=100000000"):
        df.load_json(doc, max_operations=10 ** 8)(np.ones(2, F32))
    small = df.load_json(_doubling_calls(3))
    np.testing.assert_allclose(small(np.ones(2, F32)).numpy(), [1.0001 ** 8] * 2, rtol=1e-6)


def test_nested_loops_of_10_to_the_10_iterations_are_stopped():
    """Each loop is within max_iterations (10^5); together they would run 10^10 bodies."""
    def inner(y):
        return df.while_loop(lambda j, z: j < 100_000, lambda j, z: (j + 1, z + 1.0), (0, y))[1]

    def outer(x):
        return df.while_loop(lambda i, y: i < 100_000, lambda i, y: (i + 1, inner(y)), (0, x))[1]
    doc = _doc(outer, _F([], df.float32))
    with pytest.raises(Exhausted, match="max_operations=1000000"):
        df.load_json(doc, max_operations=10 ** 6)(np.float32(0))


def test_an_svd_of_a_large_matrix_is_refused_before_it_runs():
    doc = _doc(lambda x: df.linalg.svd(df.ones([6000, 6000]) * x, compute_uv=False), _F([], df.float32))
    with pytest.raises(Exhausted, match="svd: the call would reach"):
        df.load_json(doc)(np.float32(1))
    small = df.load_json(_doc(lambda x: df.linalg.svd(x, compute_uv=False), _F([3, 2], df.float64)))
    m = np.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(small(m).numpy(), np.linalg.svd(m, compute_uv=False))


def test_contractions_are_charged_for_their_products():
    """A matmul or einsum of two 3000 x 3000 matrices reads 18M entries but forms 2.7e10
    products: refused under the default budget before it runs; small ones compute."""
    big = _F([3000, 3000], df.float32)
    m = np.zeros((3000, 3000), F32)
    for f in (lambda a, b: df.matmul(a, b), lambda a, b: df.einsum("ij,jk->ik", a, b)):
        with pytest.raises(Exhausted, match="(matmul|einsum): the call would reach"):
            df.load_json(_doc(f, big, big))(m, m)
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    small = df.load_json(_doc(lambda a, b: df.einsum("ij,jk->ik", a, b), _F([2, 3], df.float64),
                              _F([3, 4], df.float64)))
    np.testing.assert_array_equal(small(a, b).numpy(), a @ b)


def test_printing_16m_floats_is_refused_before_it_prints(capsys):
    def show(x):
        df.print(df.zeros([1 << 24]) + x, summarize=-1)
        return x
    with pytest.raises(Exhausted, match="print: the call would reach"):
        df.load_json(_doc(show, _F([], df.float32)))(np.float32(1))
    assert capsys.readouterr().out == ""
    shown = df.load_json(_doc(lambda x: (df.print(x, summarize=-1), x)[1], _F([3], df.float32)))
    shown(np.arange(3, dtype=F32))
    assert capsys.readouterr().out.strip() == "[0. 1. 2.]"


# ---------------------------------------------------------------------------------------
# Inside a defun: the loaded function keeps its budgets

def test_a_loaded_function_called_inside_a_defun_keeps_its_budgets():
    tiler = df.load_json(_doc(lambda x, m: df.tile(x, m), _F([None], df.float32), _VEC), max_bytes=1024)
    looper = df.load_json(_doc(lambda x: df.while_loop(lambda i, y: i >= 0, lambda i, y: (i + 1, y * 1.0),
                                                        (0, x))[1], _F([2], df.float32)), max_iterations=50)

    @df.defun
    def use(x, m):
        return tiler(x, m) * 2.0

    np.testing.assert_array_equal(use(df.constant([1.0, 2.0]), df.constant([2])).numpy(), [2.0, 4.0, 2.0, 4.0])
    out, peak = peak_memory(lambda: use(df.constant([1.0, 2.0]), df.constant([1 << 28])))
    assert isinstance(out, Exhausted) and "tile" in str(out), out
    assert peak < 4 * MB
    with pytest.raises(Exhausted, match="50 iterations"):
        df.defun(lambda x: looper(x) + 1.0)(df.constant([1.0, 2.0]))
    # the defun's own plan inlines nothing of the loaded function
    cf = use.get_concrete_function(df.constant([1.0]), df.constant([1]))
    assert any(n.op.name == "call" for n in optimize(cf.graph).nodes)


# ---------------------------------------------------------------------------------------
# The meter's two wrappers count alike

def _smallest(passes, hi):
    """The smallest budget in [0, hi] under which `passes(budget)` holds."""
    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if passes(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _passes(doc, args, **budgets):
    try:
        df.load_json(doc, **budgets)(*args)
        return True
    except Exhausted:
        return False


@pytest.mark.parametrize("fn,shape", [
    (lambda x: df.reduce_sum(df.tanh(x) * 2.0 + x, axis=1), (64, 32)),
    (lambda x: df.softmax(df.matmul(x, x, transpose_b=True)), (48, 16)),
    (lambda x: df.concat([x, df.sort(x, axis=1)], 0)[:3], (8, 8)),
], ids=["chain", "softmax_matmul", "concat_sort"])
def test_static_and_run_time_sizes_count_the_same(fn, shape):
    """The same computation traced with static shapes (static-size wrappers) and with
    unknown sizes (run-time-size wrappers) needs the same bytes and operations."""
    x = np.random.default_rng(1).random(shape).astype(F32)
    static = _doc(fn, _F(list(shape), df.float32))
    dynamic = _doc(fn, _F([None, None], df.float32))
    assert all(None not in o["shape"] for n in static["functions"][0]["nodes"] for o in n["outputs"])
    assert any(None in o["shape"] for n in dynamic["functions"][0]["nodes"] for o in n["outputs"])
    for what in ("max_bytes", "max_operations"):
        got = [_smallest(lambda b, d=d: _passes(d, [x], **{what: b}), 10 ** 8) for d in (static, dynamic)]
        assert got[0] == got[1] > 0, (what, got)
