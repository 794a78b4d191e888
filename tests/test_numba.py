"""The numba backend (extra [fast]): installed only with numba, never imported unless asked;
fused regions equal the numpy backend within float rounding (the anchors' programs, random
elementwise programs, unknown sizes, control flow and variables around regions); cases the
loops leave to numpy (a size-1 unknown axis, a bad label) give numpy's result or error; the
compiled code is cached on disk for the next process."""
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

import defun as df  # noqa: E402
import defun.graph.numba_backend as nb  # noqa: E402
from defun.graph.functions import plan_of  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code, env=None):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=600, env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()


def _both(fn, *args, **kw):
    """fn's results on the numpy and numba backends, as lists of numpy arrays."""
    def run(backend):
        out = df.defun(fn, backend=backend, **kw)(*args)
        return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]
    return run("numpy"), run("numba")


def _assert_equal_within_rounding(want, got, rtol=1e-12, atol=1e-13):
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert w.shape == g.shape and w.dtype == g.dtype, (w.dtype, w.shape, g.dtype, g.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------
# Installed only with numba; numba imported only when asked for

def test_the_core_imports_numba_only_when_the_backend_is_used():
    lines = _python("import sys, defun as df\n"
                    "f = df.defun(lambda x: df.tanh(x) * 2.0 + 1.0)\n"
                    "f(df.constant([1.0, 2.0]))\n"
                    "print('numba' in sys.modules, df.backends())\n"
                    "g = df.defun(lambda x: df.tanh(x) * 2.0 + 1.0, backend='numba')\n"
                    "print('numba' in sys.modules)\n"
                    "g(df.constant([1.0, 2.0]))\n"
                    "print('numba' in sys.modules)")
    assert lines == ["False ('numpy', 'numba')", "False", "True"]


def test_without_numba_the_backend_is_refused_naming_the_extra():
    lines = _python("import sys\nsys.modules['numba'] = None   # as if not installed\n"
                    "import defun as df\nprint(df.backends())\n"
                    "try:\n    df.defun(lambda x: x, backend='numba')\n"
                    "except ValueError as e:\n    print(e)")
    assert lines[0] == "('numpy',)"
    assert lines[1] == ("backend 'numba' is not installed: it needs the optional extra [fast] "
                        "(pip install 'defun[fast]'); installed backends: 'numpy'")


# ---------------------------------------------------------------------------------------
# The anchors' programs (benchmarks/anchors.py), smaller

def _mlp_loss(w1, b1, w2, b2, x, y):
    h = df.tanh(x @ w1 + b1)
    return df.reduce_mean(df.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h @ w2 + b2))


def _chain_loss(x):
    for _ in range(20):
        x = df.tanh(x) * 1.01 + 0.1
    return df.reduce_sum(x)


def test_mlp_step_is_one_region_and_equals_numpy():
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((32, 32)).astype(np.float32) / 6, rng.standard_normal(32).astype(np.float32),
            rng.standard_normal((32, 10)).astype(np.float32) / 6, rng.standard_normal(10).astype(np.float32),
            rng.standard_normal((8, 32)).astype(np.float32), rng.integers(0, 10, 8).astype(np.int32)]
    ts = [df.constant(a) for a in args]
    step = df.value_and_gradients_function(_mlp_loss, [0, 1, 2, 3])
    want, got = _both(lambda *a: (lambda v, g: [v] + g)(*step(*a)), *ts)
    _assert_equal_within_rounding(want, got, rtol=2e-6, atol=1e-7)
    f = df.defun(step, backend="numba")
    source = plan_of(f.get_concrete_function(*ts).graph, "numba").source
    assert source.count(" = k") == 1, source      # matmuls, cross-entropy, loops: one call


def test_chain_forward_and_backward_equal_numpy():
    x = df.constant(np.random.default_rng(1).standard_normal(16))
    step = df.value_and_gradients_function(_chain_loss, [0])
    want, got = _both(lambda a: (lambda v, g: [v] + g)(*step(a)), x)
    _assert_equal_within_rounding(want, got)


def test_tanh_of_the_fused_loops_is_within_float_rounding():
    specials = [0.0, -0.0, 0.55, -0.55, np.nextafter(0.55, 0), 19.0, 20.0, 40.0, 1e-300, 5e-324,
                710.0, -710.0, np.inf, -np.inf, np.nan, 1e-8]
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(20000) * s for s in (0.01, 0.3, 1, 3, 10)] + [specials])
    got = np.asarray(df.defun(lambda v: df.tanh(v) + 0.0, backend="numba")(df.constant(x)))
    exact = np.tanh(x.astype(np.longdouble))
    finite = np.isfinite(x)
    rel = np.abs((got - exact) / np.where(exact == 0, 1, exact))[finite].astype(np.float64)
    assert rel.max() <= 2 * np.finfo(np.float64).eps
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.tanh(x) + 0.0))
    np.testing.assert_array_equal(got[~finite], np.tanh(x[~finite]))
    x32 = x.astype(np.float32)
    got32 = np.asarray(df.defun(lambda v: df.tanh(v) + 0.0, backend="numba")(df.constant(x32)))
    assert got32.dtype == np.float32
    # float32 is computed in float32 (graph/numba_backend/polynomials.py): within 2 ulp
    np.testing.assert_array_max_ulp(got32, np.tanh(x32.astype(np.float64)).astype(np.float32), maxulp=2)


# ---------------------------------------------------------------------------------------
# Random elementwise programs: numba equals numpy, values and gradients

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
_UNARY = [df.tanh, df.sin, df.square, df.negative, df.sigmoid, lambda a: df.exp(df.tanh(a)),
          lambda a: df.relu(a) * 0.5]
_BINARY = [df.add, df.subtract, df.multiply, df.maximum, lambda a, b: df.where(a > b, a, b * 2.0)]
_SHAPES = [(3, 4), (4,), (3, 1), (1, 4), ()]


@st.composite
def programs(draw):
    steps = []
    for k in range(draw(st.integers(2, 7))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce"]))
        steps.append((kind, draw(st.integers(0, 99)), draw(st.integers(0, 99)), draw(st.integers(0, 3))))
    shapes = [draw(st.sampled_from(_SHAPES)) for _ in range(3)]
    return steps, shapes


def _run_program(steps, xs):
    vals = list(xs)
    for kind, a, b, c in steps:
        x, y = vals[a % len(vals)], vals[b % len(vals)]
        if kind == "unary":
            vals.append(_UNARY[c % len(_UNARY)](x) if c < 3 else _UNARY[(a + c) % len(_UNARY)](x))
        elif kind == "binary":
            vals.append(_BINARY[(a + b + c) % len(_BINARY)](x, y))
        elif len(x.shape):
            vals.append(df.reduce_sum(x, axis=c % len(x.shape), keepdims=bool(b % 2)) if c % 3
                        else df.reduce_max(x))
    return df.add_n([df.reduce_sum(vals[-1])] + [df.reduce_sum(df.cos(x)) for x in xs])   # all connected


@hypothesis.settings(max_examples=12, deadline=None, derandomize=True)
@hypothesis.given(programs())
def test_random_elementwise_programs_equal_numpy_with_gradients(program):
    steps, shapes = program
    rng = np.random.default_rng(3)
    xs = [df.constant(rng.standard_normal(s)) for s in shapes]
    step = df.value_and_gradients_function(lambda *a: _run_program(steps, a), [0, 1, 2])
    fallbacks = nb.stats["fallbacks"]
    want, got = _both(lambda *a: (lambda v, g: [v] + g)(*step(*a)), *xs)
    _assert_equal_within_rounding(want, got, rtol=1e-11, atol=1e-12)
    assert nb.stats["fallbacks"] == fallbacks


# ---------------------------------------------------------------------------------------
# Unknown sizes, and what the loops leave to numpy

def test_unknown_sizes_loop_over_run_time_shapes():
    f = df.defun(lambda x, b: df.reduce_sum(df.tanh(x + b) * 2.0, axis=0), backend="numba",
                 input_signature=[df.TensorSpec([None, None], df.float64), df.TensorSpec([None], df.float64)])
    rng = np.random.default_rng(4)
    fallbacks = nb.stats["fallbacks"]
    for n, m in [(3, 4), (1, 5), (6, 2), (0, 3)]:
        x, b = rng.standard_normal((n, m)), rng.standard_normal(m)
        np.testing.assert_allclose(f(x, b).numpy(), (np.tanh(x + b) * 2.0).sum(axis=0), rtol=1e-13)
    assert nb.stats["fallbacks"] == fallbacks
    # an unknown size that is 1 at run time broadcasts: numpy's case, same result
    x, b = rng.standard_normal((3, 4)), rng.standard_normal(1)
    np.testing.assert_allclose(f(x, b).numpy(), (np.tanh(x + b) * 2.0).sum(axis=0), rtol=1e-13)
    assert nb.stats["fallbacks"] == fallbacks + 1


def test_errors_are_the_numpy_backends():
    logits = df.constant(np.zeros((2, 3), np.float32))

    def loss(labels, logits):
        return df.reduce_sum(df.sparse_softmax_cross_entropy_with_logits(labels, logits * 2.0))
    messages = []
    for backend in ("numpy", "numba"):
        with pytest.raises(df.errors.InvalidArgumentError) as e:
            df.defun(loss, backend=backend)(df.constant(np.array([1, 7], np.int32)), logits)
        messages.append(str(e.value))
    # numpy's message; a region names its first node (the plan knows its steps, not their nodes)
    numpy_says = "sparse_softmax_cross_entropy_with_logits: label 7 is outside the valid range [0, 3)"
    assert messages[0].endswith(numpy_says) and messages[1].endswith(numpy_says)
    empty_max = df.defun(lambda x: df.reduce_max(x * 2.0, axis=0), backend="numba",
                         input_signature=[df.TensorSpec([None, 2], df.float64)])
    with pytest.raises(df.errors.InvalidArgumentError, match="zero-size array"):
        empty_max(np.zeros((0, 2)))


# ---------------------------------------------------------------------------------------
# Regions next to what stays numpy: variables, control flow, large matmuls

def test_variables_and_control_flow_around_regions():
    v = df.Variable(np.linspace(-1.0, 1.0, 6))

    def step(x):
        y = df.tanh(v * x) + 1.0
        v.assign_add(y * 0.1)
        z = df.cond(df.reduce_sum(y) > 3.0, lambda: df.exp(y) * 2.0, lambda: df.square(y) - 1.0)
        _, w = df.while_loop(lambda i, w: i < 3, lambda i, w: (i + 1, df.sin(w) * 1.5 + x), (0, z))
        return df.reduce_sum(w * y)
    x = df.constant(np.arange(6.0) / 5)
    got = []
    for backend in ("numpy", "numba"):
        v.assign(np.linspace(-1.0, 1.0, 6))
        f = df.defun(step, backend=backend)
        got.append([f(x).numpy() for _ in range(3)] + [v.numpy().copy()])
    for a, b in zip(*got):
        np.testing.assert_allclose(b, a, rtol=1e-13)


def test_large_matmuls_call_blas_inside_the_region():
    f = df.defun(lambda a, b: df.tanh(a @ b) * 2.0 + 1.0, backend="numba")
    a, b = df.constant(np.ones((64, 256), np.float32)), df.constant(np.ones((256, 64), np.float32) / 256)
    source = plan_of(f.get_concrete_function(a, b).graph, "numba").source
    assert source.count(" = k") == 1, source      # one region: np.dot (BLAS), then the loop
    np.testing.assert_allclose(f(a, b).numpy(), np.tanh(1.0) * 2.0 + 1.0, rtol=1e-6)


# ---------------------------------------------------------------------------------------
# The on-disk cache: a second process finds the compiled code

def test_a_second_process_reuses_the_compiled_regions(tmp_path):
    # (compile times are reported by benchmarks/anchors.py; here numba's own cache counters)
    code = ("import numpy as np, defun as df\n"
            "from defun.graph.numba_backend import jit\n"
            "def f(x):\n    return df.reduce_sum(df.tanh(x * 1.5 + 0.25) * df.exp(x), axis=1)\n"
            "x = df.constant(np.linspace(-1, 1, 12).reshape(3, 4))\n"
            "out = df.defun(f, backend='numba')(x).numpy()\n"
            "regions = [m.region for m in jit._modules.values()]\n"
            "print(sum(len(r.stats.cache_hits) for r in regions), "
            "sum(len(r.stats.cache_misses) for r in regions))\n"
            "print(repr(out.tolist()))")
    env = {"DEFUN_CACHE_DIR": str(tmp_path)}
    first, second = _python(code, env), _python(code, env)
    assert first[0] == "0 1" and second[0] == "1 0"     # compiled once, then loaded
    assert first[1] == second[1]
    files = os.listdir(tmp_path / "numba")
    assert any(f.endswith(".py") for f in files) and any(f.endswith(".nbi") for f in files)
    assert "__pycache__" not in files        # run from the generated text, never imported


def test_integer_division_by_zero_raises_on_numba_too():
    """Integer floordiv/mod are not fused (a fused loop would give 0), so they raise as on numpy."""
    f = df.defun(lambda x, y: (x // y) + (x % y) * 2, backend="numba")
    x, y = df.constant(np.arange(6, dtype=np.int32)), df.constant(np.array([1, 2, 0, 1, 2, 3], np.int32))
    with pytest.raises(df.errors.InvalidArgumentError, match="integer division by zero"):
        f(x, y)
    ok = df.constant(np.array([1, 2, 4, 1, 2, 3], np.int32))
    np.testing.assert_array_equal(f(x, ok).numpy(), (x.numpy() // ok.numpy()) + (x.numpy() % ok.numpy()) * 2)


def test_a_long_run_of_fusible_nodes_is_cut_into_regions_of_max_region_nodes():
    """numba's compile time grows faster than a function's length, so a run longer than
    MAX_REGION nodes becomes several regions (compile time linear in the nodes): here 10
    nodes under a cap of 4 are regions of 4, 4 and 2, and compute what numpy does."""
    def chain(x):
        for k in range(5):
            x = df.tanh(x * (1.0 + 0.25 * k))
        return x
    x = np.linspace(-1, 1, 6)
    cf = df.defun(chain).get_concrete_function(df.constant(x))

    class Capped(nb.NumbaBackend):
        MAX_REGION = 4
    steps = Capped().partition(list(cf.graph.nodes), list(cf.graph.outputs))
    sizes = [len(s.nodes) for s in steps if hasattr(s, "kernel")]
    assert sizes == [4, 4, 2], sizes
    assert nb.NumbaBackend.MAX_REGION == 32
    from defun.graph.executor import compile_graph
    plan = compile_graph(cf.graph, backend=Capped())
    np.testing.assert_allclose(plan.run(x)[0], chain(df.constant(x)).numpy(), rtol=1e-12)
