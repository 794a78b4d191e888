"""Per-example gradients of the digits MLP with `df.vmap`, clipped and noised as DP-SGD does.

usage: pip install -e ".[examples]" && python examples/per_example_gradients.py
           [--epochs N] [--batch B] [--clip C] [--noise SIGMA] [--out PLOT.png] [--quiet]

What it shows, in order:
  1. one example's loss, written for one example (no batch axis anywhere), and its
     per-example gradients for a whole batch by `df.vmap(df.gradients_function(loss))`,
     compiled into one graph by `df.defun`;
  2. those gradients equal to a Python loop of tape gradients over the examples (exits
     non-zero when they differ), and the time of both on one batch;
  3. DP-SGD training: each example's gradient clipped to global norm `--clip`, the clipped
     gradients summed, Gaussian noise of scale `--noise * --clip` added, the mean taken;
     a progress bar over the steps, per epoch the loss, accuracy and the median
     per-example gradient norm before clipping;
  4. `per_example_gradients.png`: loss and accuracy per epoch (left, right), and the
     per-example gradient norms of the last epoch next to the clipping bound.
"""
import os
import sys
import time

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)
import defun as df  # noqa: E402
from reporting import (check_output, count, non_negative_float, parser as make_parser,  # noqa: E402
                       plot_history, positive_float, progress, say)  # (the examples' shared helpers)
from train_mlp import load_data  # noqa: E402  (the same digits split as train_mlp.py)

SIZES = (64, 32, 10)


def init_params(seed=0):
    """[w1, b1, w2, b2] as float32 arrays."""
    rng = np.random.default_rng(seed)
    (n_in, n_hidden, n_out) = SIZES
    return [(rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in)).astype(np.float32),
            np.zeros(n_hidden, np.float32),
            (rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden)).astype(np.float32),
            np.zeros(n_out, np.float32)]


def example_loss(w1, b1, w2, b2, x, y):
    """Cross-entropy of ONE example: x is an image (64,), y its label (a scalar)."""
    h = df.tanh(df.matmul(df.reshape(x, (1, -1)), w1) + b1)
    logits = df.reshape(df.matmul(h, w2) + b2, (-1,))
    return df.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)


_grad = df.gradients_function(example_loss, params=[0, 1, 2, 3])
# the parameters are shared by every example (None); images and labels are mapped (0)
per_example_gradients = df.defun(df.vmap(_grad, in_axes=(None, None, None, None, 0, 0)))


def loop_gradients(params, x, y):
    """The reference: one tape per example, in Python."""
    ps = [df.constant(p) for p in params]
    grads = [_grad(*ps, df.constant(x[i]), df.constant(y[i])) for i in range(len(x))]
    return [np.stack([g[k].numpy() for g in grads]) for k in range(len(params))]


@df.defun
def dp_step(w1, b1, w2, b2, x, y, noise, clip, lr):
    """One DP-SGD step: per-example gradients, clipped, summed, noised, averaged, applied."""
    params = [w1, b1, w2, b2]
    grads = per_example_gradients(w1, b1, w2, b2, x, y)
    # each example's global norm over all parameters: shape (B,)
    norms = df.sqrt(df.add_n([df.reduce_sum(df.square(g), axis=list(range(1, len(g.shape))))
                              for g in grads]))
    scale = clip / df.maximum(norms, clip)             # 1 inside the bound, clip/norm outside
    n = df.cast(df.shape(x)[0], df.float32)
    new = []
    for p, g, z in zip(params, grads, noise):
        s = df.reshape(scale, (-1,) + (1,) * (len(g.shape) - 1))
        total = df.reduce_sum(g * s, axis=0) + z * clip
        new.append(p - lr * total / n)
    return new, norms


def accuracy(params, x, y):
    w1, b1, w2, b2 = params
    logits = np.tanh(x @ w1 + b1) @ w2 + b2
    return float(np.mean(np.argmax(logits, axis=1) == y))


def mean_loss(params, x, y):
    w1, b1, w2, b2 = params
    logits = np.tanh(x @ w1 + b1) @ w2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-np.mean(logp[np.arange(len(y)), y]))


def time_both(params, x, y, repeat=3):
    """Best-of-`repeat` seconds of the vmapped (defun'd) gradients and of the Python loop."""
    per_example_gradients(*params, x, y)       # trace once
    best = {}
    for name, fn in (("vmap", lambda: [g.numpy() for g in per_example_gradients(*params, x, y)]),
                     ("loop", lambda: loop_gradients(params, x, y))):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        best[name] = min(times)
    return best


def main(epochs=5, batch=64, clip=1.0, noise=0.5, lr=0.5, out=None, verbose=True, timing_batch=None,
         seed=0):
    quiet = not verbose
    x_train, y_train, x_test, y_test = load_data(seed)
    params = init_params(seed)

    # 1-2. the batched gradients agree with the loop, and their times
    n = timing_batch or batch
    xb, yb = x_train[:n], y_train[:n]
    got = [g.numpy() for g in per_example_gradients(*params, xb, yb)]
    want = loop_gradients(params, xb, yb)
    max_diff = max(float(np.max(np.abs(a - b))) for a, b in zip(got, want))
    times = time_both(params, xb, yb)
    say(f"per-example gradients of {n} examples: max |vmap - loop| = {max_diff:.2e}; "
        f"vmap {times['vmap'] * 1e3:.2f} ms, Python loop {times['loop'] * 1e3:.1f} ms "
        f"({times['vmap'] / times['loop']:.3f}x)", quiet)

    # 3. DP-SGD
    rng = np.random.default_rng(seed + 1)
    history = {"loss": [], "train": [], "test": [], "median_norm": []}
    last_norms = None
    steps = len(x_train) // batch
    for epoch in range(epochs):
        order = rng.permutation(len(x_train))
        norms_epoch = []
        for s in progress(range(steps), desc=f"epoch {epoch + 1}", quiet=quiet):
            idx = order[s * batch:(s + 1) * batch]
            noise_draw = [(noise * rng.standard_normal(p.shape)).astype(np.float32) for p in params]
            new, norms = dp_step(*params, x_train[idx], y_train[idx], noise_draw,
                                 np.float32(clip), np.float32(lr))
            params = [p.numpy() for p in new]
            norms_epoch.append(norms.numpy())
        last_norms = np.concatenate(norms_epoch)
        history["loss"].append(mean_loss(params, x_train, y_train))
        history["train"].append(accuracy(params, x_train, y_train))
        history["test"].append(accuracy(params, x_test, y_test))
        history["median_norm"].append(float(np.median(last_norms)))
        say(f"epoch {epoch + 1}: loss {history['loss'][-1]:.4f}, accuracy {history['train'][-1]:.3f} "
            f"(test {history['test'][-1]:.3f}), median per-example gradient norm "
            f"{history['median_norm'][-1]:.3f} (clipped to {clip})", quiet)

    # 4. the plot
    path = out or "per_example_gradients.png"
    plot_history(path, {"training loss": history["loss"]},
                 {"training": history["train"], "test": history["test"]},
                 f"DP-SGD on digits: clip {clip}, noise {noise} (per-example gradients by df.vmap)")
    _add_norms_panel(path, last_norms, clip)
    say(f"wrote {path}", quiet)
    return {"max_diff": max_diff, "times": times, "history": history, "plot": path,
            "norms": last_norms, "params": params}


def _add_norms_panel(path, norms, clip):
    """A second picture beside the history: the last epoch's per-example gradient norms."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = plt.imread(path)
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 3.8), gridspec_kw={"width_ratios": [2.6, 1]})
    left.imshow(history)
    left.axis("off")
    right.hist(norms, bins=40, color="tab:blue", alpha=0.8)
    right.axvline(clip, color="tab:red", linestyle="--", label=f"clip bound {clip}")
    right.set(xlabel="per-example gradient norm (last epoch)", ylabel="examples")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    parser = make_parser(__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=count(1), default=5)
    parser.add_argument("--batch", type=count(1), default=64)
    parser.add_argument("--clip", type=positive_float, default=1.0)
    parser.add_argument("--noise", type=non_negative_float, default=0.5)
    parser.add_argument("--lr", type=positive_float, default=0.5)
    parser.add_argument("--out", default=None, help="the plot (default ./per_example_gradients.png)")
    parser.add_argument("--quiet", action="store_true")
    a = parser.parse_args()
    check_output(a.out, (".png",), "--out")      # before training, not after it
    result = main(a.epochs, a.batch, a.clip, a.noise, a.lr, a.out, verbose=not a.quiet)
    if result["max_diff"] > 1e-4:
        print(f"per-example gradients differ from the loop by {result['max_diff']:.2e}", file=sys.stderr)
        sys.exit(1)
