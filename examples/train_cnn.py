"""Train a small convolutional network on scikit-learn's digits (8x8 images) with a defun'd step.

usage: pip install -e ".[examples]" && python examples/train_cnn.py [--epochs N] [--out PATH.npz] [--quiet]

What it shows, in order:
  1. conv2d + max pooling + dropout + Adam, the whole training step (forward, backward,
     Adam update) compiled into one graph by `df.defun`; the dropout seed is a tensor
     argument, a new one per step, so the step is traced once;
  2. a progress bar over the steps (tqdm; off with --quiet or when not on a terminal) and
     per epoch the mean training loss and the training and test accuracy;
  3. the time of one step run eagerly next to the same step run through `df.defun`;
  4. a checkpoint (`df.save_variables`: the model's and Adam's variables, as trained: the
     timed steps' updates are undone) restored into a freshly initialized model, which
     must predict exactly what the trained one does;
  5. `train_cnn.png`, the loss and accuracy per epoch, next to the checkpoint.
Exits non-zero when the restored model differs; a bad --out stops it before training.
(This network's matrices are small: it runs BLAS on one thread (threadpoolctl), which on a
busy machine keeps a second thread from slowing each conv down.)
"""
import os
import statistics
import sys
import tempfile
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)
import defun as df  # noqa: E402
from reporting import (blas_threads, check_output, count, parser, plot_history, positive_float,  # noqa: E402
                       progress, say)  # (the examples' shared helpers)


def load_data(seed=0, test_fraction=0.2):
    """Digits as float32 NHWC images (n, 8, 8, 1) in [0, 1] and int32 labels, split at random."""
    from sklearn.datasets import load_digits  # the `examples` extra; ships its data offline

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


class CNN:
    """conv 3x3 (16) -> relu -> pool 2 -> conv 3x3 (32) -> relu -> pool 2 -> dropout -> dense 10."""

    def __init__(self, seed=0, channels=(16, 32), dropout=0.25):
        rng = np.random.default_rng(seed)
        c1, c2 = channels
        self.dropout = dropout

        def he(shape, fan_in, name):
            return df.Variable((rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32),
                               name=name)

        self.conv1 = he((3, 3, 1, c1), 9, "conv1")
        self.bias1 = df.Variable(np.zeros(c1, np.float32), name="bias1")
        self.conv2 = he((3, 3, c1, c2), 9 * c1, "conv2")
        self.bias2 = df.Variable(np.zeros(c2, np.float32), name="bias2")
        self.dense = he((2 * 2 * c2, 10), 2 * 2 * c2, "dense")
        self.bias3 = df.Variable(np.zeros(10, np.float32), name="bias3")

    @property
    def variables(self):
        return [self.conv1, self.bias1, self.conv2, self.bias2, self.dense, self.bias3]

    def logits(self, x, seed=None):
        """Class scores of NHWC images `x`; with a `seed` (training), dropout before the dense layer."""
        h = df.max_pool2d(df.relu(df.conv2d(x, self.conv1, padding="SAME") + self.bias1), 2, 2, "VALID")
        h = df.max_pool2d(df.relu(df.conv2d(h, self.conv2, padding="SAME") + self.bias2), 2, 2, "VALID")
        h = df.reshape(h, [-1, self.dense.shape[0]])
        if seed is not None:
            h = df.dropout(h, self.dropout, seed)
        return h @ self.dense + self.bias3

    def loss(self, x, labels, seed):
        per_example = df.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=self.logits(x, seed))
        return df.reduce_mean(per_example)


def make_train_step(model, optimizer):
    """One Adam step on a batch; `seed` (an int32 tensor of shape [2]) picks the dropout mask."""
    def train_step(x, labels, seed):
        with df.GradientTape() as tape:
            loss = model.loss(x, labels, seed)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.variables), model.variables))
        return loss

    return train_step


def accuracy(predict, x, y):
    return float(np.mean(np.argmax(predict(x).numpy(), axis=1) == y))


def median_step_us(step, args, repeat):
    """Median wall time of `repeat` calls of `step(*args)`, in microseconds."""
    step(*args)  # warm up (trace on the first defun call)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


# BLAS on one thread: its matrices are small, and a second thread slowed each conv down
# (two epochs: 8.8-10.4 s with two threads, 1.1 s with one, on a 2-core machine at load 12)
@blas_threads(1)
def main(epochs=15, batch_size=32, learning_rate=3e-3, out=None, timing_repeat=50, seed=0,
         verbose=True, plot=True):
    """Train, time, checkpoint, restore; returns a dict of results (used by the tests).

    Writes `out` (the checkpoint; default: a temporary file) and, with `plot`,
    `train_cnn.png` (loss and accuracy per epoch) in the directory of `out` (default: the
    current one). `verbose=False`: no progress bar and no output lines.
    """
    quiet = not verbose
    x_train, y_train, x_test, y_test = load_data(seed)
    model = CNN(seed)
    optimizer = df.optimizers.Adam(learning_rate)
    eager_step = make_train_step(model, optimizer)
    compiled_step = df.defun(eager_step)
    predict = df.defun(model.logits)
    say(f"digits: {len(x_train)} train / {len(x_test)} test images 8x8, CNN conv16-pool-conv32-pool-"
        f"dropout-dense10, batch {batch_size}, Adam lr {learning_rate}", quiet)

    rng = np.random.default_rng(seed)
    n_batches = len(x_train) // batch_size   # full batches only: one signature, one trace
    history = {"loss": [], "train": [], "test": []}
    with progress(None, total=epochs * n_batches, desc="training", quiet=quiet) as bar:
        for epoch in range(1, epochs + 1):
            order = rng.permutation(len(x_train))
            losses = []
            for i in range(n_batches):
                idx = order[i * batch_size:(i + 1) * batch_size]
                step_seed = df.constant([epoch, i], df.int32)     # a tensor: no retrace per step
                losses.append(float(compiled_step(df.constant(x_train[idx]), df.constant(y_train[idx]),
                                                  step_seed)))
                bar.update(1)
                bar.set_postfix(epoch=epoch, loss=f"{losses[-1]:.3f}", refresh=False)
            history["loss"].append(float(np.mean(losses)))
            history["train"].append(accuracy(predict, x_train, y_train))
            history["test"].append(accuracy(predict, x_test, y_test))
            say(f"epoch {epoch:3d}  loss {history['loss'][-1]:.4f}  train acc {history['train'][-1]:.3f}  "
                f"test acc {history['test'][-1]:.3f}", quiet)
    test_accuracy = history["test"][-1]
    say(f"final test accuracy: {test_accuracy:.4f}  (traces of the step: {compiled_step.trace_count})", quiet)

    # Eager vs defun step time, same batch, same Python code. The timed steps train too, so
    # the trained values (the model's and Adam's) are put back: the checkpoint is the model above.
    trained = [v.numpy().copy() for v in model.variables + optimizer.variables()]
    args = (df.constant(x_train[:batch_size]), df.constant(y_train[:batch_size]),
            df.constant([0, 0], df.int32))
    eager_us = median_step_us(eager_step, args, timing_repeat)
    defun_us = median_step_us(compiled_step, args, timing_repeat)
    for v, value in zip(model.variables + optimizer.variables(), trained):
        v.assign(value)
    say(f"step time (median of {timing_repeat}): eager {eager_us / 1000:.2f} ms, defun "
        f"{defun_us / 1000:.2f} ms ({eager_us / defun_us:.1f}x faster)", quiet)

    # Checkpoint the model and Adam's state, restore into a fresh model, compare predictions.
    with tempfile.TemporaryDirectory() as tmp:
        path = out or os.path.join(tmp, "digits_cnn.npz")
        saved = model.variables + optimizer.variables()
        df.save_variables(path, saved)
        fresh, fresh_optimizer = CNN(seed + 1), df.optimizers.Adam(learning_rate)
        fresh_optimizer.build(fresh.variables)
        df.restore_variables(path, fresh.variables + fresh_optimizer.variables())
        expected = predict(x_test).numpy()
        got = df.defun(fresh.logits)(x_test).numpy()
        restored_ok = bool(np.array_equal(got, expected)) and all(
            np.array_equal(a.numpy(), b.numpy()) for a, b in
            zip(saved, fresh.variables + fresh_optimizer.variables())) and \
            float(np.mean(np.argmax(got, axis=1) == y_test)) == test_accuracy
    say(f"checkpoint {path if out else 'in a temporary file'}: {len(saved)} variables; the restored "
        f"model's predictions {'match' if restored_ok else 'DIFFER'}", quiet)
    plot_path = None
    if plot:
        folder = os.path.dirname(os.path.abspath(out)) if out else os.getcwd()
        plot_path = plot_history(os.path.join(folder, "train_cnn.png"), {"training loss": history["loss"]},
                                 {"training": history["train"], "test": history["test"]},
                                 f"CNN on digits, Adam lr {learning_rate}")
        say(f"loss and accuracy plot: {plot_path}", quiet)
    return {"test_accuracy": test_accuracy, "history": history, "eager_step_us": eager_us,
            "defun_step_us": defun_us, "restored_ok": restored_ok,
            "step_trace_count": compiled_step.trace_count, "plot": plot_path}


def cli():
    parse = parser(__doc__.splitlines()[0])
    parse.add_argument("--epochs", type=count(1), default=15)
    parse.add_argument("--batch-size", type=count(1), default=32)
    parse.add_argument("--lr", type=positive_float, default=3e-3, help="Adam learning rate")
    parse.add_argument("--out", help="checkpoint path (.npz; default: a temporary file); train_cnn.png "
                                     "goes next to it (default: the current directory)")
    parse.add_argument("--quiet", action="store_true", help="no progress bar and no output lines")
    parse.add_argument("--timing-repeat", type=count(1), default=50, help="steps timed, eager and defun")
    args = parse.parse_args()
    check_output(args.out, (".npz",), "--out")      # before training, not after it
    result = main(args.epochs, args.batch_size, args.lr, args.out, args.timing_repeat,
                  verbose=not args.quiet)
    if not result["restored_ok"]:
        print("error: the model restored from the checkpoint predicts differently", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli())
