"""Train the digits MLP data-parallel on a Dask cluster: gradients are computed where the data is.

usage: pip install -e ".[examples,dask]" && python examples/train_dask.py [--epochs N] [--workers N]
                                                                          [--plot PATH] [--quiet]
       python examples/train_dask.py --scheduler tcp://scheduler:8786     (an existing cluster)

What it shows, in order:
  1. the training data as a dask array sharded over the workers and kept there (each shard
     reshuffled in place every epoch);
  2. each SGD step through `df.dask.value_and_gradients`: the first call ships the loss's
     pure step (a JSON document, no pickled code) to the workers; every step then sends only
     the variables' current values, each worker runs forward + backward on its blocks of the
     batch, and the partial sums come back through a tree reduction;
  3. a progress bar per epoch (off with --quiet or when not on a terminal), then the loss and
     accuracies (the same model, data, batch size and learning rate as examples/train_mlp.py,
     and the same accuracy); `train_dask.png` plots them per epoch;
  4. test predictions computed blockwise on the cluster by `df.dask.map_blocks`, checked
     against the local predictions. Exits non-zero when they differ.
"""
import os
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)
import defun as df  # noqa: E402
from reporting import (check_output, count, parser as make_parser, plot_history, positive_float,  # noqa: E402
                       progress, say)  # (the examples' helpers)
from train_mlp import MLP, accuracy, load_data  # noqa: E402  (the single-process example)


def make_loss_sum(model):
    """The SUM of per-example losses of one block: what value_and_gradients adds up."""
    @df.defun
    def loss_sum(x, labels):
        logits = model.logits(x)
        return df.reduce_sum(df.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    return loss_sum


def train(client, epochs=20, batch_size=32, learning_rate=0.5, hidden=64, seed=0, verbose=True):
    """Data-parallel SGD on `client`'s cluster; returns a dict of results (used by the tests)."""
    import dask.array as da

    quiet = not verbose
    x_train, y_train, x_test, y_test = load_data(seed)
    model = MLP([x_train.shape[1], hidden, 10], seed)
    loss_sum = make_loss_sum(model)
    predict = df.defun(model.logits)
    n_workers = max(1, len(client.scheduler_info()["workers"]))
    # One shard of the training set per worker, kept there. Each step takes the next
    # `block` rows of every shard: a global batch of `batch_size` rows, one block per shard.
    block = -(-batch_size // n_workers)
    shard = -(-len(x_train) // n_workers)
    x_shards = client.persist(da.from_array(x_train, chunks=(shard, -1)))
    y_shards = client.persist(da.from_array(y_train, chunks=shard))
    shard_rows = x_shards.chunks[0]
    say(f"digits: {len(x_train)} train / {len(x_test)} test, MLP {x_train.shape[1]}-{hidden}-10, "
        f"{n_workers} shards, batch {block * n_workers} ({block} rows per shard), SGD lr {learning_rate}",
        quiet)

    rng = np.random.default_rng(seed)
    n_batches = min(shard_rows) // block
    step_times = []
    history = {"loss": [], "train": [], "test": []}
    for epoch in range(1, epochs + 1):
        # Each shard is reshuffled where it lives (only the permutations travel), and the
        # epoch's batches are cut there in one go: batch i is block i of every shard.
        perms = [rng.permutation(n) for n in shard_rows]
        x_epoch = da.concatenate([x_shards.blocks[k][p] for k, p in enumerate(perms)])
        y_epoch = da.concatenate([y_shards.blocks[k][p] for k, p in enumerate(perms)])
        batches = client.persist([da.concatenate([a.blocks[k][i * block:(i + 1) * block]
                                                  for k in range(n_workers)])
                                  for i in range(n_batches) for a in (x_epoch, y_epoch)])
        losses = []
        for i in progress(range(n_batches), n_batches, f"epoch {epoch}", quiet):
            start = time.perf_counter()
            xb, yb = batches[2 * i], batches[2 * i + 1]
            total, grads = df.dask.value_and_gradients(loss_sum, model.variables, xb, yb, client=client)
            for grad, var in zip(grads, model.variables):
                var.assign_sub(grad * (learning_rate / (block * n_workers)))
            step_times.append(time.perf_counter() - start)
            losses.append(float(total) / (block * n_workers))
        history["loss"].append(float(np.mean(losses)))
        history["train"].append(accuracy(predict, x_train, y_train))
        history["test"].append(accuracy(predict, x_test, y_test))
        say(f"epoch {epoch:3d}  loss {history['loss'][-1]:.4f}  train acc {history['train'][-1]:.3f}  "
            f"test acc {history['test'][-1]:.3f}", quiet)
    test_accuracy = accuracy(predict, x_test, y_test)
    step_ms = float(np.median(step_times)) * 1e3 if step_times else float("nan")
    say(f"final test accuracy: {test_accuracy:.4f}  (median step {step_ms:.1f} ms, "
        f"traces of the loss: {loss_sum.trace_count})", quiet)

    # Inference where the data is: blockwise on the cluster, from the exported graph.
    x_test_blocks = da.from_array(x_test, chunks=(64, -1))
    on_cluster = client.compute(df.dask.map_blocks(predict, x_test_blocks), sync=True)
    local = predict(df.constant(x_test)).numpy()
    predictions_match = bool(np.allclose(on_cluster, local, rtol=1e-5, atol=1e-6))
    say(f"map_blocks predictions on the cluster {'match' if predictions_match else 'DIFFER from'} "
        f"the local ones (max |diff| {float(np.max(np.abs(on_cluster - local))):.2e})", quiet)
    return {"test_accuracy": test_accuracy, "predictions_match": predictions_match, "history": history,
            "n_workers": n_workers, "batch_size": block * n_workers,
            "step_ms": step_ms, "loss_trace_count": loss_sum.trace_count,
            "variables": [v.numpy() for v in model.variables]}


def main(epochs=20, batch_size=32, learning_rate=0.5, hidden=64, workers=2, scheduler=None,
         verbose=True, plot="train_dask.png"):
    """Start a LocalCluster (or connect to `scheduler`), train, shut down; plot to `plot`."""
    from distributed import Client, LocalCluster

    if scheduler is not None:
        with Client(scheduler) as client:
            result = train(client, epochs, batch_size, learning_rate, hidden, verbose=verbose)
    else:
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            result = train(client, epochs, batch_size, learning_rate, hidden, verbose=verbose)
    if plot:
        h = result["history"]
        plot_history(plot, {"training loss": h["loss"]}, {"training": h["train"], "test": h["test"]},
                     f"MLP on digits, data-parallel on {result['n_workers']} Dask workers "
                     f"(batch {result['batch_size']})")
        say(f"loss and accuracy plot: {plot}", not verbose)
    return result


def cli():
    parser = make_parser(__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=count(1), default=20)
    parser.add_argument("--batch-size", type=count(1), default=32)
    parser.add_argument("--lr", type=positive_float, default=0.5, help="SGD learning rate")
    parser.add_argument("--hidden", type=count(1), default=64, help="hidden layer width")
    parser.add_argument("--workers", type=count(1), default=2, help="LocalCluster worker processes")
    parser.add_argument("--scheduler", help="address of a running scheduler (default: a LocalCluster)")
    parser.add_argument("--plot", default="train_dask.png", help="where to write the loss/accuracy plot")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no output lines")
    args = parser.parse_args()
    check_output(args.plot, (".png",), "--plot")      # before the cluster starts, not after training
    result = main(args.epochs, args.batch_size, args.lr, args.hidden, args.workers, args.scheduler,
                  verbose=not args.quiet, plot=args.plot)
    if not result["predictions_match"]:
        print("error: blockwise predictions on the cluster differ from the local ones", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli())
