"""Dask scale: the digits MLP blockwise on a LocalCluster, next to numpy blocks under Dask.

usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/dask_scale.py [--quick]

Workloads (the 64-64-10 tanh MLP of examples/train_mlp.py, float32):
  inference   4M rows in 128k-row blocks: logits of every row (df.dask.map_blocks)
  gradient    1M rows in 128k-row blocks: summed cross-entropy and its gradients
              (df.dask.value_and_gradients: forward + backward per block, tree-added)
  tiny blocks 64-row blocks (1024 of them for inference, 512 for the gradient): the
              per-block cost, where the work per block is nearly nothing
Each runs in a single process (the same computation looped over the blocks, no Dask) and
on a LocalCluster of 1 and of 2 worker processes (1 thread each, single-threaded BLAS),
for df and for hand-written numpy blocks under Dask (the baseline the scaling is judged
against). The data is generated on the workers and held there before timing; inference
results stay on the workers (persisted), gradients come back to the client. Both clusters run
side by side and every round times each setting once (interleaved), so load from
elsewhere falls on all alike. Reports median wall times of `--repeat` rounds, the speed-up
from 1 to 2 workers, and the time per block.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (single-threaded BLAS before numpy loads)

import numpy as np  # noqa: E402

import defun as df  # noqa: E402

N_IN, HIDDEN, N_OUT = 64, 64, 10

# glibc hands large freed blocks back to the kernel (distributed even asks its workers to
# trim early), so every 32 MB intermediate of a 128k-row block is page-faulted in afresh,
# and two processes doing that at once on this VM queue in the kernel: numpy blocks under
# Dask then scale 0.8x from 1 to 2 workers instead of ~1.8x. Keeping freed memory in the
# process helps numpy and df alike; it is set for this process (re-exec) and the workers.
# `--default-allocator` measures without it.
ALLOCATOR_ENV = {"MALLOC_TOP_PAD_": str(512 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


# ---------------------------------------------------------------------------------------
# the model: df variables, and the same weights as plain arrays for the numpy baseline

def make_model(seed=0):
    rng = np.random.default_rng(seed)
    w0 = rng.normal(0, 1 / np.sqrt(N_IN), (N_IN, HIDDEN)).astype(np.float32)
    w1 = rng.normal(0, 1 / np.sqrt(HIDDEN), (HIDDEN, N_OUT)).astype(np.float32)
    arrays = [w0, np.zeros(HIDDEN, np.float32), w1, np.zeros(N_OUT, np.float32)]
    variables = [df.Variable(a, name=n) for a, n in zip(arrays, ("w0", "b0", "w1", "b1"))]
    w0v, b0v, w1v, b1v = variables

    @df.defun
    def predict(x):
        return df.tanh(x @ w0v + b0v) @ w1v + b1v

    @df.defun
    def loss_sum(x, labels):
        return df.reduce_sum(df.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=predict(x)))

    return variables, arrays, predict, loss_sum


def numpy_predict(x, w0, b0, w1, b1):
    return np.tanh(x @ w0 + b0) @ w1 + b1


def numpy_value_and_gradients(x, labels, w0, b0, w1, b1):
    """(loss sum, dw0, db0, dw1, db1) of one block, forward and backward by hand."""
    h = np.tanh(x @ w0 + b0)
    logits = h @ w1 + b1
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    sums = exp.sum(axis=1, keepdims=True)
    rows = np.arange(len(x))
    loss = np.sum(np.log(sums[:, 0]) - shifted[rows, labels])
    d_logits = exp / sums
    d_logits[rows, labels] -= 1.0
    d_h = (d_logits @ w1.T) * (1.0 - h * h)
    return (np.float32(loss), x.T @ d_h, d_h.sum(axis=0), h.T @ d_logits, d_logits.sum(axis=0))


def add_parts(parts):
    total = list(parts[0])
    for part in parts[1:]:
        total = [a + b for a, b in zip(total, part)]
    return tuple(total)


def numpy_tree_gradients(x, labels, weights, split_every=4):
    """The baseline's data-parallel gradient: numpy per block, the same tree of sums as df."""
    import dask
    level = [dask.delayed(numpy_value_and_gradients, pure=True)(xb, yb, *weights)
             for xb, yb in zip(x.to_delayed().ravel(), labels.to_delayed().ravel())]
    while len(level) > split_every:
        level = [dask.delayed(add_parts)(level[i:i + split_every]) for i in range(0, len(level), split_every)]
    return dask.delayed(add_parts)(level)


# ---------------------------------------------------------------------------------------
# timing: every setting's runs interleaved, so load from elsewhere falls on all alike

# Untimed idle time after every run: the workers free the last run's memory, the nannies
# poll memory, garbage is collected. Without it that work lands in the next timed run.
PAUSE_S = 0.5


def _task_count(dask_scheduler):
    return len(dask_scheduler.tasks)


def released(client):
    """A settle function: wait until the scheduler holds only what it holds now.

    A rerun of the same graph (the same keys) while the previous results are still held
    would reuse them instead of computing; so every timed run starts from a clean state.
    """
    baseline = client.run_on_scheduler(_task_count)

    def settle():
        deadline = time.monotonic() + 30
        while client.run_on_scheduler(_task_count) > baseline and time.monotonic() < deadline:
            time.sleep(0.01)
    return settle


def cluster_runners(client, model, workload, rows, block):
    """{impl: zero-argument run} for one workload on `client`'s cluster, data held there."""
    import dask.array as da
    from distributed import futures_of, wait

    def hold(collection):
        """Compute `collection` on the cluster and keep it there (nothing comes back)."""
        held = client.persist(collection)
        with client.as_current():
            wait(futures_of(held))
        return held

    variables, weights, predict, loss_sum = model
    x = client.persist(da.random.default_rng(1).random((rows, N_IN), chunks=(block, -1), dtype=np.float32))
    labels = client.persist(da.random.default_rng(2).integers(0, N_OUT, rows, chunks=block, dtype=np.int32))
    with client.as_current():
        wait(futures_of(x) + futures_of(labels))
    if workload.startswith("inference"):
        def run_df():
            hold(df.dask.map_blocks(predict, x))

        def run_numpy():
            y = x.map_blocks(numpy_predict, *weights, chunks=(x.chunks[0], (N_OUT,)), dtype=np.float32)
            hold(y)
    else:
        def run_df():
            df.dask.value_and_gradients(loss_sum, variables, x, labels, client=client)

        def run_numpy():
            client.compute(numpy_tree_gradients(x, labels, weights), sync=True)
    return {"df": run_df, "numpy": run_numpy}


def local_runners(model, workload, rows, block):
    """The same blocks looped over in this process, without Dask."""
    variables, weights, predict, loss_sum = model
    rng = np.random.default_rng(1)
    blocks = []
    for start in range(0, rows, block):
        n = min(block, rows - start)
        blocks.append((rng.random((n, N_IN), dtype=np.float32), rng.integers(0, N_OUT, n).astype(np.int32)))
    if workload.startswith("inference"):
        def run_df():
            for xb, _ in blocks:
                predict(df.constant(xb))

        def run_numpy():
            for xb, _ in blocks:
                numpy_predict(xb, *weights)
    else:
        def run_df():
            parts = []
            for xb, yb in blocks:
                with df.GradientTape() as tape:
                    loss = loss_sum(df.constant(xb), df.constant(yb))
                parts.append([loss.numpy()] + [g.numpy() for g in tape.gradient(loss, variables)])
            add_parts(parts)

        def run_numpy():
            add_parts([numpy_value_and_gradients(xb, yb, *weights) for xb, yb in blocks])
    return {"df": run_df, "numpy": run_numpy}


def measure(workload, rows, block, clients, model, repeat, single_process):
    """{(setting, impl): median seconds}: the runs of every setting interleaved per round."""
    runs, settles = {}, {}
    if single_process:
        for impl, fn in local_runners(model, workload, rows, block).items():
            runs["single process", impl] = fn
    for setting, client in clients.items():
        for impl, fn in cluster_runners(client, model, workload, rows, block).items():
            runs[setting, impl] = fn
        settles[setting] = released(client)
    times = {key: [] for key in runs}
    for round_ in range(repeat + 1):         # round 0 warms up: traces, worker builds, imports
        for (setting, impl), fn in runs.items():
            start = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - start
            if setting in settles:
                settles[setting]()
            time.sleep(PAUSE_S)
            if round_:
                times[setting, impl].append(elapsed)
    return {key: statistics.median(t) for key, t in times.items()}


def check_gradients_agree():
    """df.dask's result equals the hand-written numpy one on a small dataset (threads)."""
    import dask
    import dask.array as da
    variables, weights, _, loss_sum = make_model()
    rng = np.random.default_rng(3)
    x = rng.random((1000, N_IN), dtype=np.float32)
    labels = rng.integers(0, N_OUT, 1000).astype(np.int32)
    xd, yd = da.from_array(x, chunks=(128, -1)), da.from_array(labels, chunks=128)
    with dask.config.set(scheduler="threads"):
        loss, grads = df.dask.value_and_gradients(loss_sum, variables, xd, yd)
    expected = numpy_value_and_gradients(x, labels, *weights)
    common.assert_same("df.dask.value_and_gradients", (loss, grads), (expected[0], list(expected[1:])),
                       rtol=2e-4, atol=2e-5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--default-allocator", action="store_true",
                        help="leave glibc's malloc settings alone (see ALLOCATOR_ENV)")
    args = parser.parse_args()
    env = {} if args.default_allocator else ALLOCATOR_ENV
    if any(os.environ.get(k) != v for k, v in env.items()):    # glibc reads them at start-up
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **env})
    from distributed import Client, LocalCluster

    scale = 16 if args.quick else 1
    sizes = [("inference", 4 * 2 ** 20 // scale, 2 ** 17 // scale, True),
             ("gradient", 2 ** 20 // scale, 2 ** 17 // scale, True),
             ("inference, tiny blocks", 1024 * 64 // scale, 64, False),
             ("gradient, tiny blocks", 512 * 64 // scale, 64, False)]
    check_gradients_agree()
    model = make_model()
    clusters = {n: LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                                env=env)
                for n in (1, 2)}
    clients = {f"{n} worker{'s' if n > 1 else ''}": Client(c, set_as_default=False) for n, c in clusters.items()}
    try:
        results = {}
        for workload, rows, block, single in sizes:
            results[workload] = measure(workload, rows, block, clients, model, args.repeat, single)
    finally:
        for c in clients.values():
            c.close()
        for c in clusters.values():
            c.close()

    table = []
    for workload, n_rows, block, _ in sizes:
        n_blocks = -(-n_rows // block)
        r = results[workload]
        for impl in ("df", "numpy"):
            cells = [workload, f"{n_rows:,} / {block:,}", impl]
            for setting in ("single process", "1 worker", "2 workers"):
                t = r.get((setting, impl))
                cells.append("-" if t is None else f"{t:.3f} s" if t >= 0.1 else f"{t * 1e3:.1f} ms")
            cells.append(f"{r['1 worker', impl] / r['2 workers', impl]:.2f}x")
            cells.append(f"{r['2 workers', impl] / n_blocks * 1e3:.2f} ms")
            table.append(cells)
    print(f"df.dask scaling ({os.cpu_count()} cores; LocalCluster processes, 1 thread each; "
          f"{'default allocator' if args.default_allocator else 'ALLOCATOR_ENV'}; "
          f"median of {args.repeat} interleaved rounds):\n")
    print(common.markdown_table(["workload", "rows / block", "impl", "single process", "1 worker",
                                 "2 workers", "1 -> 2 workers", "per block (2 workers)"], table))
    for workload, n_rows, block, _ in sizes[2:]:
        r, n_blocks = results[workload], -(-n_rows // block)
        extra = (r["2 workers", "df"] - r["2 workers", "numpy"]) / n_blocks
        print(f"\n{workload}: df costs {extra * 1e3:+.2f} ms per block over numpy blocks under Dask "
              f"(2 workers)")


if __name__ == "__main__":
    main()
