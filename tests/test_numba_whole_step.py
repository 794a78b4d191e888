"""Whole steps on the numba backend: a value-and-gradients step whose ops all have fused
forms (loops, reductions, matmuls of any size, BLAS for the large ones, the cross-entropy)
is one compiled call; a step unrolled from a Python loop is compiled as a loop over its
repetitions (graph/numba_backend/rolling.py), so its compiled code does not grow with the
count. Results equal the numpy backend and eager mode within float rounding (values and
gradients, float32 and float64); an op without a fused form splits the step; variables
read and assigned around regions, an optimizer step, and the on-disk cache still work."""
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

import defun as df  # noqa: E402
import defun.graph.numba_backend as nb  # noqa: E402
from defun.graph.functions import plan_of  # noqa: E402
from defun.graph.numba_backend.plan import Rolled  # noqa: E402
from defun.graph.numba_backend.rolling import roll  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = {np.float32: (2e-5, 2e-6), np.float64: (1e-12, 1e-13)}


def _flat(out):
    """A step's (value, [gradients]) or tuple of tensors as a list of numpy arrays."""
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], list):
        out = [out[0]] + out[1]
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


def _three_ways(step, args, dtype):
    """The step eagerly, on the numpy backend and on the numba backend: all equal within
    rounding (dtypes too); returns the numba defun and its plan's source."""
    eager = _flat(step(*args))
    numpy = _flat(df.defun(step)(*args))
    fast = df.defun(step, backend="numba")
    fallbacks = nb.stats["fallbacks"]
    got = _flat(fast(*args))
    assert nb.stats["fallbacks"] == fallbacks       # the compiled code ran, not numpy
    rtol, atol = TOL[dtype]
    for want in (eager, numpy):
        assert len(want) == len(got)
        for w, g in zip(want, got):
            assert w.shape == g.shape and w.dtype == g.dtype, (w.shape, w.dtype, g.shape, g.dtype)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return fast, plan_of(fast.get_concrete_function(*args).graph, "numba").source


def _calls(source):
    """Kernel calls in a plan's source (each line `... = kNN(...)` is one)."""
    return source.count(" = k")


def _mlp_loss(w1, b1, w2, b2, x, y):
    h = df.tanh(x @ w1 + b1)
    return df.reduce_mean(df.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h @ w2 + b2))


def _mlp_args(dtype, batch, n_in, n_hidden, n_out, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in), 0.1 * rng.standard_normal(n_hidden),
              rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden), 0.1 * rng.standard_normal(n_out),
              rng.standard_normal((batch, n_in))]
    return [df.constant(a.astype(dtype)) for a in arrays] + \
        [df.constant(rng.integers(0, n_out, batch).astype(np.int32))]


# ---------------------------------------------------------------------------------------
# One call for a step whose ops all have fused forms

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_mlp_step_with_blas_sized_matmuls_is_one_call(dtype):
    # 48 x 96 x 96 multiply-adds: past the loops' size, so np.dot (BLAS) inside the region
    args = _mlp_args(dtype, 48, 96, 96, 10)
    step = df.value_and_gradients_function(_mlp_loss, [0, 1, 2, 3])
    _, source = _three_ways(step, args, dtype)
    assert _calls(source) == 1, source


def test_a_small_mlp_step_is_one_call_of_loops():
    args = _mlp_args(np.float32, 4, 8, 8, 3)
    _, source = _three_ways(df.value_and_gradients_function(_mlp_loss, [0, 1, 2, 3]), args, np.float32)
    assert _calls(source) == 1, source


def test_an_op_without_a_fused_form_splits_the_step():
    def loss(x, w):
        h = df.tanh(x @ w) * 2.0 + 1.0
        s = df.cumsum(h, axis=1)                # no fused form: numpy, between two regions
        return df.reduce_sum(df.exp(s * 0.01) * h)
    rng = np.random.default_rng(1)
    args = [df.constant(rng.standard_normal((5, 6))), df.constant(rng.standard_normal((6, 7)))]
    _, source = _three_ways(df.value_and_gradients_function(loss, [0, 1]), args, np.float64)
    assert "cumsum" not in source and 3 <= _calls(source) <= 6, source


# ---------------------------------------------------------------------------------------
# Rolled repetitions

def _chain(count, scale=1.01):
    def loss(x):
        for _ in range(count):
            x = df.tanh(x) * scale + 0.1
        return df.reduce_sum(x)
    return loss


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_unrolled_chain_and_its_backward_are_one_call_of_two_rolled_loops(dtype):
    x = df.constant(np.random.default_rng(2).standard_normal(16).astype(dtype))
    step = df.value_and_gradients_function(_chain(40), [0])
    fast, source = _three_ways(step, [x], dtype)
    assert _calls(source) == 1, source
    graph = fast.get_concrete_function(x).graph
    from defun.graph.passes import optimize
    from defun.graph.numba_backend.plan import fused_form
    run = [n for n in optimize(graph).nodes if fused_form(n) is not None]
    blocks = [it for it in roll(run) if isinstance(it, Rolled)]
    # the forward (tanh, multiply, add) and the backward, which reads the forward's tanh
    # values newest first
    assert [(b.period, b.count) for b in blocks][0] == (3, 40)
    assert blocks[1].count >= 38 and any(c[0] == "stack" and c[4] == -1
                                         for row in blocks[1].classes for c in row)


def test_the_compiled_source_does_not_grow_with_the_count():
    from defun.graph.numba_backend import jit
    x = df.constant(np.linspace(-1.0, 1.0, 8))
    sizes = []
    for count in (30, 90):
        before = set(jit._modules)
        _three_ways(df.value_and_gradients_function(_chain(count, 0.99), [0]), [x], np.float64)
        (key,) = set(jit._modules) - before
        with open(os.path.join(jit.cache_dir(), f"r_{key}.py")) as f:
            sizes.append(len(f.read().splitlines()))
    assert sizes[0] == sizes[1], sizes


def test_values_of_one_block_read_in_order_by_another_and_broadcast_operands():
    def f(x, w, b):
        ts = []
        for _ in range(6):
            t = df.tanh(x * w)          # w: (4,) broadcast against (3, 4)
            ts.append(t)
            x = t + b                   # b: (3, 1)
        z = df.zeros_like(x)
        for t in ts:                    # oldest first
            z = z * 0.5 + df.square(t)
        return df.reduce_sum(z, axis=1), x
    rng = np.random.default_rng(3)
    args = [df.constant(rng.standard_normal((3, 4))), df.constant(rng.standard_normal(4)),
            df.constant(rng.standard_normal((3, 1)))]
    _, source = _three_ways(f, args, np.float64)
    assert _calls(source) == 1, source
    step = df.value_and_gradients_function(lambda *a: df.reduce_sum(f(*a)[0]) + df.reduce_sum(f(*a)[1]),
                                           [0, 1, 2])
    _three_ways(step, args, np.float64)


def test_unknown_sizes_are_not_rolled_and_still_equal_numpy():
    f = df.defun(df.value_and_gradients_function(_chain(12), [0]), backend="numba",
                 input_signature=[df.TensorSpec([None], df.float64)])
    g = df.defun(df.value_and_gradients_function(_chain(12), [0]))
    for n in (5, 9):
        x = df.constant(np.linspace(-2.0, 2.0, n))
        for a, b in zip(_flat(f(x)), _flat(g(x))):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_a_block_indexing_a_block_of_another_region_is_written_out():
    """Cut after the forward block (MAX_REGION 4), the backward, which indexes the forward's
    repetitions, cannot read them as one array: its nodes are written out (and cut)."""
    x = np.linspace(-1.0, 1.0, 6)
    step = df.value_and_gradients_function(_chain(6), [0])
    cf = df.defun(step).get_concrete_function(df.constant(x))
    from defun.graph.executor import compile_graph
    from defun.graph.passes import optimize

    class Capped(nb.NumbaBackend):
        MAX_REGION = 4
    graph = optimize(cf.graph)
    regions = [s for s in Capped().partition(list(graph.nodes), list(graph.outputs)) if hasattr(s, "kernel")]
    assert len(regions) > 3 and sum(len(r.nodes) for r in regions) >= 6 * 3 + 5 * 4
    got = compile_graph(graph, backend=Capped()).run(x)
    for a, b in zip(got, _flat(step(df.constant(x)))):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_two_repetitions_are_written_out():
    x = df.constant(np.linspace(-1.0, 1.0, 5))
    step = df.value_and_gradients_function(_chain(2), [0])
    fast, _ = _three_ways(step, [x], np.float64)
    from defun.graph.passes import optimize
    from defun.graph.numba_backend.plan import fused_form
    run = [n for n in optimize(fast.get_concrete_function(x).graph).nodes if fused_form(n) is not None]
    assert not any(isinstance(it, Rolled) for it in roll(run))


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
_OPS = [lambda a, b: df.tanh(a) * 0.9 + b * 0.1, lambda a, b: a * b * 0.5, lambda a, b: df.sin(a) - b,
        lambda a, b: df.maximum(a, b * 0.5), lambda a, b: df.square(a) * 0.25 + 0.1]


@st.composite
def layers(draw):
    """A loop body: ops over the carried values, this iteration's values and fixed inputs."""
    body = [(draw(st.integers(0, len(_OPS) - 1)), draw(st.integers(0, 9)), draw(st.integers(0, 9)))
            for _ in range(draw(st.integers(1, 4)))]
    return body, draw(st.integers(3, 7)), draw(st.integers(1, 2))


@hypothesis.settings(max_examples=8, deadline=None, derandomize=True)
@hypothesis.given(layers())
def test_random_loop_bodies_rolled_equal_numpy_with_gradients(layer):
    """Random bodies repeated by a Python loop, their carries one or two values: whatever
    the rolling finds (or leaves), values and gradients are numpy's."""
    body, count, carried = layer

    def loss(x, y, w):
        carry = [x, y][:carried]
        for _ in range(count):
            vals = list(carry)
            for op, a, b in body:
                pool = vals + [w]
                vals.append(_OPS[op](pool[a % len(pool)], pool[b % len(pool)]))
            carry = (vals[-carried:] if carried == 2 else [vals[-1]])
        return df.add_n([df.reduce_sum(c) for c in carry] + [df.reduce_sum(df.cos(v)) for v in (x, y, w)])
    rng = np.random.default_rng(5)
    args = [df.constant(rng.standard_normal((2, 5)) * 0.5) for _ in range(2)] + \
        [df.constant(rng.standard_normal(5) * 0.5)]
    _three_ways(df.value_and_gradients_function(loss, [0, 1, 2]), args, np.float64)


# ---------------------------------------------------------------------------------------
# Variables around regions, a training step

def test_a_training_step_with_an_optimizer_equals_numpy():
    def run(backend):
        rng = np.random.default_rng(4)
        w = df.Variable(rng.standard_normal((6, 8)) / 3, name="w")
        b = df.Variable(np.zeros(8), name="b")
        opt = df.optimizers.Adam(0.05)

        @df.defun(backend=backend)
        def train(x):
            with df.GradientTape() as tape:
                h = x @ w + b
                for _ in range(5):
                    h = df.tanh(h) * 0.9 + 0.05
                loss = df.reduce_mean(df.square(h))
            grads = tape.gradient(loss, [w, b])
            opt.apply_gradients(zip(grads, [w, b]))
            return loss
        x = df.constant(rng.standard_normal((4, 6)))
        losses = [train(x).numpy() for _ in range(4)]
        return losses + [w.numpy(), b.numpy()]
    for a, b in zip(run("numpy"), run("numba")):
        np.testing.assert_allclose(b, a, rtol=1e-11, atol=1e-13)


# ---------------------------------------------------------------------------------------
# The on-disk cache: a second process loads the whole step

def test_a_second_process_loads_the_rolled_whole_step(tmp_path):
    code = ("import numpy as np, defun as df\n"
            "from defun.graph.numba_backend import jit\n"
            "def loss(x):\n"
            "    for _ in range(25):\n        x = df.tanh(x) * 1.02 + 0.05\n"
            "    return df.reduce_sum(x)\n"
            "step = df.defun(df.value_and_gradients_function(loss, [0]), backend='numba')\n"
            "v, (g,) = step(df.constant(np.linspace(-1, 1, 8)))\n"
            "regions = [m.region for m in jit._modules.values()]\n"
            "print(len(regions), sum(len(r.stats.cache_hits) for r in regions))\n"
            "print(repr([float(v.numpy())] + g.numpy().tolist()))")
    env = {**os.environ, "DEFUN_CACHE_DIR": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "config")}

    def python():
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                             timeout=600, env=env)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().splitlines()
    first, second = python(), python()
    assert first[0] == "1 0" and second[0] == "1 1"        # one region: compiled, then loaded
    assert first[1] == second[1]
