"""Train a small convolutional network on scikit-learn's digits (8x8 images) with a defun'd step.

usage: pip install -e ".[examples]" && python examples/train_cnn.py [--epochs N] [--out cnn.npz] [--quiet]

What it shows, in order:
  1. conv2d + max pooling + dropout + Adam, the whole training step (forward, backward,
     Adam update) compiled into one graph by `df.defun`; the dropout seed is a tensor
     argument, a new one per step, so the step is traced once;
  2. a progress bar per epoch (tqdm) with the running loss, then test accuracy;
  3. the time of one step run eagerly next to the same step run through `df.defun`;
  4. a checkpoint (`df.save_variables`: the model's and Adam's variables) restored into a
     freshly initialized model, which must predict exactly what the trained one does;
  5. a plot of the loss and accuracy per epoch, `<out>.png` next to the checkpoint.
Exits non-zero when the restored model differs.
"""
import os

# One BLAS thread unless told otherwise (set before numpy loads): this network's matrices
# are small, and a second thread made each conv several times slower on a busy 2-core box.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import defun as df  # noqa: E402


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


def _progress(iterable, total, desc, quiet):
    if quiet:
        return iterable
    from tqdm import tqdm  # the `examples` extra
    return tqdm(iterable, total=total, desc=desc, leave=False, unit="step")


def plot_history(history, path):
    """Loss and test accuracy per epoch, written to `path` (PNG)."""
    import matplotlib  # the `examples` extra
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = np.arange(1, len(history["loss"]) + 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.plot(epochs, history["loss"], marker="o")
    left.set(xlabel="epoch", ylabel="mean training loss", title="loss")
    right.plot(epochs, history["test_accuracy"], marker="o", color="tab:green")
    right.set(xlabel="epoch", ylabel="test accuracy", title="digits, CNN")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(epochs=15, batch_size=32, learning_rate=3e-3, out=None, timing_repeat=50, seed=0,
         quiet=False, plot=True):
    """Train, time, checkpoint, restore; returns a dict of results (used by the tests).

    `quiet`: no progress bar and no line per epoch (the summary lines are still printed).
    """
    say = (lambda *a, **k: None) if quiet else print
    x_train, y_train, x_test, y_test = load_data(seed)
    model = CNN(seed)
    optimizer = df.optimizers.Adam(learning_rate)
    eager_step = make_train_step(model, optimizer)
    compiled_step = df.defun(eager_step)
    predict = df.defun(model.logits)
    say(f"digits: {len(x_train)} train / {len(x_test)} test images 8x8, CNN conv16-pool-conv32-pool-"
        f"dropout-dense10, batch {batch_size}, Adam lr {learning_rate}")

    rng = np.random.default_rng(seed)
    n_batches = len(x_train) // batch_size   # full batches only: one signature, one trace
    history = {"loss": [], "test_accuracy": []}
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x_train))
        losses = []
        bar = _progress(range(n_batches), n_batches, f"epoch {epoch}/{epochs}", quiet)
        for i in bar:
            idx = order[i * batch_size:(i + 1) * batch_size]
            step_seed = df.constant([epoch, i], df.int32)     # a tensor: no retrace per step
            losses.append(float(compiled_step(df.constant(x_train[idx]), df.constant(y_train[idx]),
                                              step_seed)))
            if not quiet:
                bar.set_postfix(loss=f"{np.mean(losses):.4f}")
        history["loss"].append(float(np.mean(losses)))
        history["test_accuracy"].append(accuracy(predict, x_test, y_test))
        say(f"epoch {epoch:3d}  loss {history['loss'][-1]:.4f}  test acc {history['test_accuracy'][-1]:.3f}")
    test_accuracy = history["test_accuracy"][-1]
    print(f"final test accuracy: {test_accuracy:.4f}  (traces of the step: {compiled_step.trace_count})")

    # Eager vs defun step time, same batch, same Python code (the extra steps keep training).
    args = (df.constant(x_train[:batch_size]), df.constant(y_train[:batch_size]),
            df.constant([0, 0], df.int32))
    eager_us = median_step_us(eager_step, args, timing_repeat)
    defun_us = median_step_us(compiled_step, args, timing_repeat)
    print(f"step time (median of {timing_repeat}): eager {eager_us / 1000:.2f} ms, defun "
        f"{defun_us / 1000:.2f} ms ({eager_us / defun_us:.1f}x faster)")

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
            zip(saved, fresh.variables + fresh_optimizer.variables()))
        plot_path = None
        if plot and out:
            plot_path = plot_history(history, os.path.splitext(out)[0] + ".png")
    print(f"checkpoint {path if out else 'in a temporary file'}: {len(saved)} variables; the restored "
        f"model's predictions {'match' if restored_ok else 'DIFFER'}"
        f"{f'; plot: {plot_path}' if plot_path else ''}")
    return {"test_accuracy": test_accuracy, "history": history, "eager_step_us": eager_us,
            "defun_step_us": defun_us, "restored_ok": restored_ok,
            "step_trace_count": compiled_step.trace_count, "plot": plot_path}


def cli():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    parser.add_argument("--out", help="checkpoint path (.npz); the plot goes next to it as .png "
                                      "(default: a temporary directory, no plot)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")
    parser.add_argument("--timing-repeat", type=int, default=50, help="steps timed, eager and defun")
    args = parser.parse_args()
    result = main(args.epochs, args.batch_size, args.lr, args.out, args.timing_repeat, quiet=args.quiet)
    if not result["restored_ok"]:
        print("error: the model restored from the checkpoint predicts differently", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli())
