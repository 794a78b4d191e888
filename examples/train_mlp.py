"""Train a small MLP on scikit-learn's bundled digits with a defun'd training step.

usage: pip install -e ".[examples]" && python examples/train_mlp.py [--epochs N] [--out PATH.json]
                                                                     [--quiet]

What it shows, in order:
  1. a whole training step (forward, backward, SGD update with `assign_sub`) compiled
     into one graph function by `df.defun`;
  2. a progress bar over the steps (tqdm; off with --quiet or when not on a terminal) and
     per epoch the mean training loss and the training and test accuracy;
  3. the time of one step run eagerly next to the same step run through `df.defun`;
  4. the trained prediction function, returning {"logits", "probs"} (the model whose
     accuracy it printed: the timed
     steps' updates are undone) exported to JSON with `df.export_json`, loaded back with
     `df.load_json` (no Python code of this file needed) and checked to give the same
     predictions and accuracy. Exits non-zero when they differ; a bad --out stops it
     before training (exit 2).

It writes, next to the JSON (default ./digits_mlp.json): the test images and labels as
`<name>_x.npy` and `<name>_y.npy` (inputs for `defun run`), and `train_mlp.png`, the loss
and accuracy per epoch.
"""
import os
import statistics
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)
import defun as df  # noqa: E402
from reporting import (check_output, count, parser as make_parser, plot_history, positive_float,  # noqa: E402
                       progress, say)  # (the examples' shared helpers)


def load_data(seed=0, test_fraction=0.2):
    """Digits (8x8 images, 10 classes) as float32 features in [0, 1] and int32 labels."""
    from sklearn.datasets import load_digits  # the `examples` extra; ships its data offline

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


class MLP:
    """in -> tanh hidden -> logits, with weights held in df.Variables."""

    def __init__(self, sizes, seed=0):
        rng = np.random.default_rng(seed)
        self.weights, self.biases = [], []
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            w = rng.normal(0.0, 1.0 / np.sqrt(fan_in), (fan_in, fan_out)).astype(np.float32)
            self.weights.append(df.Variable(w, name=f"w{i}"))
            self.biases.append(df.Variable(np.zeros(fan_out, np.float32), name=f"b{i}"))

    @property
    def variables(self):
        return self.weights + self.biases

    def logits(self, x):
        h = x
        for w, b in zip(self.weights[:-1], self.biases[:-1]):
            h = df.tanh(h @ w + b)
        return h @ self.weights[-1] + self.biases[-1]

    def loss(self, x, labels):
        per_example = df.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=self.logits(x))
        return df.reduce_mean(per_example)


def make_train_step(model, learning_rate):
    """One SGD step: returns the loss; updates the variables in place."""
    value_and_grads = df.implicit_value_and_gradients(model.loss)

    def train_step(x, labels):
        loss, grads_and_vars = value_and_grads(x, labels)
        for grad, var in grads_and_vars:
            var.assign_sub(grad * learning_rate)
        return loss

    return train_step


def accuracy(predict, x, y):
    return float(np.mean(np.argmax(predict(x).numpy(), axis=1) == y))


def median_step_us(step, x, y, repeat):
    """Median wall time of `repeat` calls of `step(x, y)`, in microseconds."""
    step(x, y)  # warm up (trace on the first defun call)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main(epochs=20, batch_size=32, learning_rate=0.5, hidden=64, out="digits_mlp.json",
         timing_repeat=200, seed=0, verbose=True):
    """Train, time, export, reload; returns a dict of results (used by the tests).

    Writes `out` (the exported prediction function), `<out>_x.npy` / `<out>_y.npy` (the test
    set) and `train_mlp.png` (loss and accuracy per epoch) in the directory of `out`.
    """
    quiet = not verbose
    x_train, y_train, x_test, y_test = load_data(seed)
    model = MLP([x_train.shape[1], hidden, 10], seed)
    eager_step = make_train_step(model, learning_rate)
    compiled_step = df.defun(eager_step)
    predict = df.defun(model.logits)

    say(f"digits: {len(x_train)} train / {len(x_test)} test, MLP {x_train.shape[1]}-{hidden}-10, "
        f"batch {batch_size}, SGD lr {learning_rate}", quiet)
    rng = np.random.default_rng(seed)
    n_batches = len(x_train) // batch_size   # full batches only: one signature, one trace
    history = {"loss": [], "train": [], "test": []}
    with progress(None, total=epochs * n_batches, desc="training", quiet=quiet) as bar:
        for epoch in range(1, epochs + 1):
            order = rng.permutation(len(x_train))
            losses = []
            for i in range(n_batches):
                idx = order[i * batch_size:(i + 1) * batch_size]
                losses.append(float(compiled_step(df.constant(x_train[idx]), df.constant(y_train[idx]))))
                bar.update(1)
                bar.set_postfix(epoch=epoch, loss=f"{losses[-1]:.3f}", refresh=False)
            history["loss"].append(float(np.mean(losses)))
            history["train"].append(accuracy(predict, x_train, y_train))
            history["test"].append(accuracy(predict, x_test, y_test))
            say(f"epoch {epoch:3d}  loss {history['loss'][-1]:.4f}  train acc {history['train'][-1]:.3f}  "
                f"test acc {history['test'][-1]:.3f}", quiet)
    test_accuracy = accuracy(predict, x_test, y_test)
    say(f"final test accuracy: {test_accuracy:.4f}  (traces of the step: {compiled_step.trace_count})", quiet)

    # Eager vs defun step time, same batch, same Python code. The timed steps train too, so
    # the trained values are put back afterwards: the exported model is the one measured above.
    trained = [v.numpy().copy() for v in model.variables]
    xb, yb = df.constant(x_train[:batch_size]), df.constant(y_train[:batch_size])
    eager_us = median_step_us(eager_step, xb, yb, timing_repeat)
    defun_us = median_step_us(compiled_step, xb, yb, timing_repeat)
    for v, value in zip(model.variables, trained):
        v.assign(value)
    say(f"step time (median of {timing_repeat}): eager {eager_us:.0f} us, defun {defun_us:.0f} us "
        f"({eager_us / defun_us:.1f}x faster)", quiet)

    # Export the trained prediction function, with named outputs (the names travel to the
    # JSON, `defun run`, ONNX and the numpy module), reload it without this file's code, compare.
    def classify(x):
        logits = model.logits(x)
        return {"logits": logits, "probs": df.softmax(logits)}
    concrete = df.defun(classify).get_concrete_function(df.TensorSpec([None, x_test.shape[1]], df.float32))
    df.export_json(concrete, out)
    stem = os.path.splitext(out)[0]
    np.save(f"{stem}_x.npy", x_test)
    np.save(f"{stem}_y.npy", y_test)
    reloaded = df.load_json(out)
    expected = predict(df.constant(x_test)).numpy()
    got = np.asarray(reloaded(x=x_test)["logits"].numpy())
    max_diff = float(np.max(np.abs(got - expected)))
    same_labels = bool(np.array_equal(np.argmax(got, axis=1), np.argmax(expected, axis=1)))
    exported_accuracy = float(np.mean(np.argmax(got, axis=1) == y_test))
    round_trip_ok = same_labels and np.allclose(got, expected, rtol=1e-5, atol=1e-6) and \
        exported_accuracy == test_accuracy
    say(f"exported to {out} ({os.path.getsize(out)} bytes; test set in {stem}_x.npy, {stem}_y.npy); "
        f"reloaded predictions {'match' if round_trip_ok else 'DIFFER'} (max |diff| {max_diff:.2e}; "
        f"test accuracy {exported_accuracy:.4f})", quiet)
    plot = plot_history(os.path.join(os.path.dirname(os.path.abspath(out)), "train_mlp.png"),
                        {"training loss": history["loss"]},
                        {"training": history["train"], "test": history["test"]},
                        f"MLP {x_train.shape[1]}-{hidden}-10 on digits, SGD lr {learning_rate}")
    say(f"loss and accuracy plot: {plot}", quiet)
    return {"test_accuracy": test_accuracy, "exported_accuracy": exported_accuracy, "eager_step_us": eager_us, "defun_step_us": defun_us,
            "round_trip_ok": round_trip_ok, "max_diff": max_diff, "history": history, "plot": plot,
            "step_trace_count": compiled_step.trace_count}


def cli():
    parser = make_parser(__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=count(1), default=20)
    parser.add_argument("--batch-size", type=count(1), default=32)
    parser.add_argument("--lr", type=positive_float, default=0.5, help="SGD learning rate")
    parser.add_argument("--hidden", type=count(1), default=64, help="hidden layer width")
    parser.add_argument("--out", default="digits_mlp.json",
                        help="where to write the exported JSON (default ./digits_mlp.json); the "
                             "test set .npy files and train_mlp.png go next to it")
    parser.add_argument("--timing-repeat", type=count(1), default=200,
                        help="steps timed eagerly and with defun (default 200)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no output lines")
    args = parser.parse_args()
    check_output(args.out, (".json",), "--out")      # before training, not after it
    result = main(args.epochs, args.batch_size, args.lr, args.hidden, args.out, args.timing_repeat,
                  verbose=not args.quiet)
    if not result["round_trip_ok"]:
        print("error: predictions of the reloaded JSON graph differ from the trained model",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli())
