"""Anchor workloads of DESIGN.md ("Performance model"), side by side, as markdown tables.

usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/anchors.py [--quick]

Workloads (loss + gradients, one call = forward and backward):
  mlp_small   batch 8, 32-32-10 MLP, tanh, mean softmax cross-entropy, grads of all weights/biases
  mlp_medium  batch 64, 256-256-10, same
  chain       float64 (16,), 100 x `x = tanh(x) * 1.01 + 0.1`, loss = sum(x), grad wrt x
  call        a compiled one-op function, df.defun(lambda a, b: a + b) on float32 (4,)
  trace_cost  N chained elementwise ops: (first call - steady call) / N, N = 100, 1000, 10000

Implementations: hand-written numpy forward + backward (the floor); df eagerly
(value_and_gradients_function, i.e. a GradientTape); a defun of the whole value-and-gradients
step; value_and_gradients_function(df.defun(loss)); and, when installed (the `bench` extra),
HIPS autograd, torch eager (CPU) and jax.jit(value_and_grad). Every implementation is checked
against the numpy floor (loss and every gradient) before it is timed. Single-threaded BLAS.
"""
import common  # noqa: F401  (first: pins BLAS/XLA to one thread before numpy loads)

import argparse  # noqa: E402
import functools  # noqa: E402
import gc  # noqa: E402
import importlib.metadata  # noqa: E402
import importlib.util  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import defun as df  # noqa: E402
from common import assert_same, markdown_table, median_us, median_us_interleaved  # noqa: E402

CHAIN_STEPS = 100


def _have(module):
    return importlib.util.find_spec(module) is not None


# ======================================================================== problems
def mlp_problem(batch, sizes, seed=0):
    """[w1, b1, w2, b2, x, y] for an in-hidden-out MLP: float32 params and inputs, int32 labels."""
    rng = np.random.default_rng(seed)
    n_in, n_hidden, n_out = sizes
    x = rng.standard_normal((batch, n_in)).astype(np.float32)
    y = rng.integers(0, n_out, batch).astype(np.int32)
    params = [(rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in)).astype(np.float32),
              (0.1 * rng.standard_normal(n_hidden)).astype(np.float32),
              (rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden)).astype(np.float32),
              (0.1 * rng.standard_normal(n_out)).astype(np.float32)]
    return params + [x, y]


def chain_problem(seed=0):
    """[x]: float64 (16,)."""
    return [np.random.default_rng(seed).standard_normal(16)]


# ======================================================================== numpy floor
def mlp_numpy(w1, b1, w2, b2, x, y):
    """Forward and backward by hand: the fastest numpy can do without fusing."""
    h = np.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    total = exp.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = np.mean(np.log(total[:, 0]) - shifted[rows, y])
    d_logits = exp / total
    d_logits[rows, y] -= 1.0
    d_logits /= len(y)
    d_h = (d_logits @ w2.T) * (1.0 - h * h)
    return loss, [x.T @ d_h, d_h.sum(axis=0), h.T @ d_logits, d_logits.sum(axis=0)]


def chain_numpy(x):
    tanhs = []
    for _ in range(CHAIN_STEPS):
        t = np.tanh(x)
        tanhs.append(t)
        x = t * 1.01 + 0.1
    grad = np.ones_like(x)
    for t in reversed(tanhs):
        grad = grad * 1.01 * (1.0 - t * t)
    return x.sum(), [grad]


# ======================================================================== df
def mlp_df_loss(w1, b1, w2, b2, x, y):
    h = df.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    return df.reduce_mean(df.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def chain_df_loss(x):
    for _ in range(CHAIN_STEPS):
        x = df.tanh(x) * 1.01 + 0.1
    return df.reduce_sum(x)


def df_variants(loss, n_params):
    """The three ways to run `loss` + gradients with df, as callables over df tensors."""
    params = list(range(n_params))
    return {
        "df eager (GradientTape)": df.value_and_gradients_function(loss, params),
        "df defun(whole step)": df.defun(df.value_and_gradients_function(loss, params)),
        "df value_and_grads(defun(loss))": df.value_and_gradients_function(df.defun(loss), params),
    }


# ======================================================================== peers
def autograd_variants(kind):
    import autograd
    import autograd.numpy as anp

    if kind == "mlp":
        def loss(params, x, y):
            w1, b1, w2, b2 = params
            logits = anp.tanh(anp.dot(x, w1) + b1) @ w2 + b2
            shifted = logits - anp.max(logits, axis=1, keepdims=True)
            logp = shifted - anp.log(anp.sum(anp.exp(shifted), axis=1, keepdims=True))
            return -anp.mean(logp[anp.arange(len(y)), y])
        vg = autograd.value_and_grad(loss)
        return {"autograd": lambda w1, b1, w2, b2, x, y: vg([w1, b1, w2, b2], x, y)}

    def chain(x):
        for _ in range(CHAIN_STEPS):
            x = anp.tanh(x) * 1.01 + 0.1
        return anp.sum(x)
    vg = autograd.value_and_grad(chain)
    return {"autograd": lambda x: (lambda v, g: (v, [g]))(*vg(x))}


def torch_variants(kind):
    import torch
    torch.set_num_threads(1)

    if kind == "mlp":
        def step(w1, b1, w2, b2, x, y):
            logits = torch.tanh(x @ w1 + b1) @ w2 + b2
            loss = torch.nn.functional.cross_entropy(logits, y)
            return loss, torch.autograd.grad(loss, (w1, b1, w2, b2))
        return {"torch eager": step}

    def chain(x):
        y = x
        for _ in range(CHAIN_STEPS):
            y = torch.tanh(y) * 1.01 + 0.1
        loss = y.sum()
        return loss, torch.autograd.grad(loss, (x,))
    return {"torch eager": chain}


def torch_args(kind, args):
    import torch
    if kind == "mlp":
        *params, x, y = args
        return [torch.tensor(p, requires_grad=True) for p in params] + \
            [torch.tensor(x), torch.tensor(y.astype(np.int64))]
    return [torch.tensor(args[0], requires_grad=True)]


def jax_variants(kind):
    import jax
    import jax.numpy as jnp

    if kind == "mlp":
        def loss(w1, b1, w2, b2, x, y):
            logits = jnp.tanh(x @ w1 + b1) @ w2 + b2
            logp = jax.nn.log_softmax(logits, axis=1)
            return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))
        vg = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))
    else:
        def loss(x):
            for _ in range(CHAIN_STEPS):
                x = jnp.tanh(x) * 1.01 + 0.1
            return jnp.sum(x)
        vg = jax.jit(jax.value_and_grad(loss, argnums=(0,)))

    def run(*args):
        return jax.block_until_ready(vg(*args))
    return {"jax.jit(value_and_grad)": run}


def jax_args(kind, args):
    import jax
    return [jax.device_put(a) for a in args]


# ======================================================================== measuring
def measure_workload(kind, args, tol, repeat):
    """{implementation: median us} for one loss+grads workload; every result checked first."""
    floor_fn = mlp_numpy if kind == "mlp" else chain_numpy
    expected = floor_fn(*args)
    expected = (np.asarray(expected[0]), [np.asarray(g) for g in expected[1]])
    n_params = 4 if kind == "mlp" else 1
    loss = mlp_df_loss if kind == "mlp" else chain_df_loss

    impls = [("numpy (hand-written)", floor_fn, args)]
    df_args = [df.constant(a) for a in args]
    impls += [(name, fn, df_args) for name, fn in df_variants(loss, n_params).items()]
    if _have("autograd"):
        impls += [(name, fn, args) for name, fn in autograd_variants(kind).items()]
    if _have("torch"):
        t_args = torch_args(kind, args)
        impls += [(name, fn, t_args) for name, fn in torch_variants(kind).items()]
    if _have("jax"):
        j_args = jax_args(kind, args)
        impls += [(name, fn, j_args) for name, fn in jax_variants(kind).items()]

    calls = {}
    for name, fn, fn_args in impls:
        assert_same(name, fn(*fn_args), expected, *tol)
        calls[name] = functools.partial(fn, *fn_args)
    return median_us_interleaved(calls, repeat=repeat)


def measure_call(repeat):
    """A compiled one-op function next to the raw numpy op and the eager df op."""
    a = np.arange(4, dtype=np.float32)
    b = np.ones(4, dtype=np.float32)
    x, y = df.constant(a), df.constant(b)
    add = df.defun(lambda a, b: a + b)
    np.testing.assert_array_equal(add(x, y).numpy(), a + b)
    calls = {"numpy np.add": lambda: np.add(a, b),
             "df.add eager": lambda: df.add(x, y),
             "df.defun(a + b)": lambda: add(x, y)}
    if _have("torch"):
        import torch
        ta, tb = torch.tensor(a), torch.tensor(b)
        calls["torch eager a + b"] = lambda: ta + tb
    if _have("jax"):
        import jax
        jadd = jax.jit(lambda a, b: a + b)
        ja, jb = jax.device_put(a), jax.device_put(b)
        calls["jax.jit(a + b)"] = lambda: jadd(ja, jb).block_until_ready()
    return median_us_interleaved(calls, repeat=repeat)


def elementwise_chain(n, tanh, scale):
    """f(x) with n chained elementwise ops, alternating tanh(x) and x * 1.01."""
    def f(x):
        for i in range(n):
            x = tanh(x) if i % 2 == 0 else scale(x)
        return x
    return f


def first_minus_steady_us(make_compiled, call, trials, repeat):
    """Median over `trials` fresh functions of (make + first call - steady call), in us.

    Making counts: torch.fx traces when made, df.defun and jax.jit on the first call.
    Timed in process CPU time: one long first call is the measurement most exposed to
    other processes taking the CPU, and CPU time does not count the time they take.
    """
    costs = []
    for _ in range(trials):
        gc.collect()  # start each trial from a clean heap (earlier workloads leave garbage)
        start = time.process_time()
        compiled = make_compiled()
        call(compiled)
        first = (time.process_time() - start) * 1e6
        steady = median_us(lambda: call(compiled), repeat=repeat, min_run_s=0.002,
                           clock=time.process_time)
        costs.append(first - steady)
    return statistics.median(costs)


def measure_trace_cost(sizes, trials, repeat):
    """{(implementation, N): us per op of tracing + compiling}."""
    x = np.linspace(-1.0, 1.0, 16).astype(np.float32)
    xt = df.constant(x)
    rows = {}
    for n in sizes:
        f = elementwise_chain(n, df.tanh, lambda v: v * 1.01)
        expected = elementwise_chain(n, np.tanh, lambda v: v * np.float32(1.01))(x)
        np.testing.assert_allclose(df.defun(f)(xt).numpy(), expected, rtol=1e-5, atol=1e-6)
        rows[("df.defun", n)] = first_minus_steady_us(
            lambda: df.defun(elementwise_chain(n, df.tanh, lambda v: v * 1.01)), lambda c: c(xt),
            trials, repeat) / n
    if _have("torch"):
        import torch
        import torch.fx
        tx = torch.tensor(x)

        class Chain(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.n = n

            def forward(self, v):
                return elementwise_chain(self.n, torch.tanh, lambda u: u * 1.01)(v)
        for n in sizes:
            rows[("torch.fx.symbolic_trace", n)] = first_minus_steady_us(
                lambda: torch.fx.symbolic_trace(Chain(n)), lambda c: c(tx), trials, repeat) / n
    if _have("jax"):
        import jax
        import jax.numpy as jnp
        jx = jax.device_put(x)
        for n in sizes:
            if n > 1000:
                continue  # minutes per trial at this size; the trend is clear below
            # A fresh Python function per trial: jax caches traces by function identity.
            rows[("jax.jit", n)] = first_minus_steady_us(
                lambda: jax.jit(elementwise_chain(n, jnp.tanh, lambda v: v * 1.01)),
                lambda c: c(jx).block_until_ready(), trials, repeat) / n
    return rows


# ======================================================================== report
def _fmt(us):
    return f"{us:,.1f}" if us < 100 else f"{us:,.0f}"


PROBLEMS = {"mlp_small": ("mlp", lambda: mlp_problem(8, (32, 32, 10))),
            "mlp_medium": ("mlp", lambda: mlp_problem(64, (256, 256, 10))),
            "chain": ("chain", chain_problem)}


def profile_whole_step(workload, calls, top):
    """cProfile the defun'd whole value-and-gradients step (steady calls only)."""
    import cProfile
    import pstats

    kind, make = PROBLEMS[workload]
    loss, n_params = (mlp_df_loss, 4) if kind == "mlp" else (chain_df_loss, 1)
    step = df_variants(loss, n_params)["df defun(whole step)"]
    args = [df.constant(a) for a in make()]
    step(*args)  # trace and compile outside the profile
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        step(*args)
    profiler.disable()
    print(f"## cProfile: df defun(whole step) on {workload}, {calls} steady calls\n")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller trace sizes")
    parser.add_argument("--profile", choices=sorted(PROBLEMS),
                        help="instead of timing, cProfile the defun'd whole step of one workload")
    parser.add_argument("--profile-calls", type=int, default=2000)
    args = parser.parse_args()
    if args.profile:
        profile_whole_step(args.profile, args.profile_calls, top=25)
        return
    repeat = 7 if args.quick else 25
    trials = 1 if args.quick else 3
    trace_sizes = (100, 1000) if args.quick else (100, 1000, 10000)

    if _have("jax"):
        import jax
        jax.config.update("jax_enable_x64", True)  # the chain runs in float64
    versions = [f"numpy {np.__version__}", f"defun {df.__version__}"]
    for dist, mod in (("autograd", "autograd"), ("torch", "torch"), ("jax", "jax")):
        if _have(mod):
            versions.append(f"{mod} {importlib.metadata.version(dist)}")
    print(f"# defun anchor benchmarks\n\n{platform.python_implementation()} "
          f"{platform.python_version()}, {platform.machine()}; {', '.join(versions)}; "
          f"single-threaded; median of {repeat} runs{' (--quick)' if args.quick else ''}.\n")

    f32_tol, f64_tol = (2e-4, 2e-6), (1e-9, 1e-12)
    workloads = {
        name: measure_workload(kind, make(), f32_tol if kind == "mlp" else f64_tol, repeat)
        for name, (kind, make) in PROBLEMS.items()}
    names = list(dict.fromkeys(n for w in workloads.values() for n in w))
    floor = "numpy (hand-written)"
    rows = []
    for name in names:
        cells = [name]
        for w in workloads.values():
            cells.append(f"{_fmt(w[name])} ({w[name] / w[floor]:.2f}x)" if name in w else "-")
        rows.append(cells)
    print("## Loss + gradients: median us per step (ratio to hand-written numpy)\n")
    print(markdown_table(["implementation"] + [f"{k}" for k in workloads], rows))

    call = measure_call(repeat)
    print("\n## Call overhead: add of two float32 (4,) arrays\n")
    print(markdown_table(["implementation", "us/call", "x numpy"],
                         [[k, f"{v:.2f}", f"{v / call['numpy np.add']:.1f}"] for k, v in call.items()]))

    trace = measure_trace_cost(trace_sizes, trials, repeat)
    impls = list(dict.fromkeys(k[0] for k in trace))
    print("\n## Trace + compile: (first call - steady call) / N, us of CPU time per op\n")
    print(markdown_table(["implementation"] + [f"N = {n}" for n in trace_sizes],
                         [[i] + [_fmt(trace[(i, n)]) if (i, n) in trace else "-" for n in trace_sizes]
                          for i in impls]))

    def whole_step_ratio(workload):
        return workloads[workload]["df defun(whole step)"] / workloads[workload][floor]
    checks = [
        ("mlp_small defun(whole step) <= 1.3x", whole_step_ratio("mlp_small"), 1.3),
        ("mlp_medium defun(whole step) <= 1.1x", whole_step_ratio("mlp_medium"), 1.1),
        ("chain defun(whole step) <= 1.3x", whole_step_ratio("chain"), 1.3),
        ("one-op compiled call <= 3 us", call["df.defun(a + b)"], 3.0),
        ("trace + compile <= 50 us/op (largest N)", trace[("df.defun", trace_sizes[-1])], 50.0),
    ]
    print("\n## Targets\n")
    print(markdown_table(["target", "measured", "met"],
                         [[t, f"{v:.2f}", "yes" if v <= lim else "no"] for t, v, lim in checks]))


if __name__ == "__main__":
    main()
