"""Per-example gradients by `df.vmap` against a Python loop of tapes and against jax.

usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/vmap.py [--batch 256] [--quick]

Workload: the digits MLP (64-32-10, tanh, softmax cross-entropy, float32), the gradient of
one example's loss with respect to the four parameters, for every example of a batch:
  df.vmap in a defun     df.defun(df.vmap(df.gradients_function(loss), in_axes=(None,)*4 + (0, 0)))
  df.vmap eager          the same without df.defun (traced and batched at every call)
  Python loop of tapes   one df.gradients_function call per example, stacked
  jax.jit(vmap(grad))    jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2, 3)), in_axes=...))
Every implementation's gradients are checked against the loop's before timing. Median
microseconds per batch (wall time, interleaved runs, one BLAS thread), and the ratios the
issue's Performance table asks for: vmap / loop (target <= 0.05) and vmap / jax (<= 1.5).
"""
import common  # noqa: F401  (first: pins BLAS to one thread before numpy loads)

import argparse  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402

import numpy as np  # noqa: E402

import defun as df  # noqa: E402
from common import markdown_table, median_us_interleaved  # noqa: E402

SIZES = (64, 32, 10)
AXES = (None, None, None, None, 0, 0)


def problem(batch, seed=0):
    rng = np.random.default_rng(seed)
    n_in, n_hidden, n_out = SIZES
    params = [(rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in)).astype(np.float32),
              (0.1 * rng.standard_normal(n_hidden)).astype(np.float32),
              (rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden)).astype(np.float32),
              (0.1 * rng.standard_normal(n_out)).astype(np.float32)]
    x = rng.uniform(0, 1, (batch, n_in)).astype(np.float32)
    y = rng.integers(0, n_out, batch).astype(np.int32)
    return params, x, y


def example_loss(w1, b1, w2, b2, x, y):
    h = df.tanh(df.matmul(df.reshape(x, (1, -1)), w1) + b1)
    logits = df.reshape(df.matmul(h, w2) + b2, (-1,))
    return df.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)


def df_variants(params, x, y):
    grad = df.gradients_function(example_loss, params=[0, 1, 2, 3])
    batched = df.vmap(grad, in_axes=AXES)
    compiled = df.defun(batched)
    ps = [df.constant(p) for p in params]
    xt, yt = df.constant(x), df.constant(y)

    def loop():
        per = [grad(*ps, df.constant(x[i]), df.constant(y[i])) for i in range(len(x))]
        return [np.stack([g[k].numpy() for g in per]) for k in range(4)]
    return {"df.vmap in a defun": lambda: [g.numpy() for g in compiled(*ps, xt, yt)],
            "df.vmap eager": lambda: [g.numpy() for g in batched(*ps, xt, yt)],
            "Python loop of tapes": loop}


def jax_variant(params, x, y):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}

    def loss(w1, b1, w2, b2, x, y):
        logits = jnp.tanh(x @ w1 + b1) @ w2 + b2
        return -jax.nn.log_softmax(logits)[y]
    fn = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1, 2, 3)), in_axes=AXES))
    args = [jax.device_put(a) for a in list(params) + [x, y]]
    return {"jax.jit(vmap(grad))": lambda: [np.asarray(g) for g in jax.block_until_ready(fn(*args))]}


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.platform()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    a = parser.parse_args()
    params, x, y = problem(a.batch)
    fns = df_variants(params, x, y)
    fns.update(jax_variant(params, x, y))
    reference = fns["Python loop of tapes"]()
    for name, fn in fns.items():
        for g, r in zip(fn(), reference):
            np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-6, err_msg=f"{name} differs from the loop")
    repeat = 3 if a.quick else 9
    us = median_us_interleaved(fns, repeat=repeat, min_run_s=0.05)
    vm = us["df.vmap in a defun"]
    rows = [[name, f"{t:,.0f}", f"{t / vm:.3g}x"] for name, t in us.items()]
    print(f"# Per-example gradients, digits MLP {'-'.join(map(str, SIZES))}, batch {a.batch}\n")
    print(f"machine: {_cpu_name()} ({platform.machine()}), {os.cpu_count()} cores; one BLAS thread; "
          f"numpy {np.__version__}\n")
    print(markdown_table(["implementation", "us per batch", "vs df.vmap in a defun"], rows))
    print(f"\ndf.vmap (defun) / Python loop of tapes: {vm / us['Python loop of tapes']:.4f}x (target <= 0.05)")
    if "jax.jit(vmap(grad))" in us:
        print(f"df.vmap (defun) / jax.jit(vmap(grad)): {vm / us['jax.jit(vmap(grad))']:.2f}x (target <= 1.5)")
    print(f"df.vmap eager / Python loop of tapes: {us['df.vmap eager'] / us['Python loop of tapes']:.4f}x")


if __name__ == "__main__":
    main()
