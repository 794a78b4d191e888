"""Fit a Gaussian process's kernel hyperparameters on scikit-learn's bundled diabetes data.

usage: pip install -e ".[examples]" && python examples/gaussian_process.py [--steps N] [--quick]
                                                                             [--out PATH.png] [--quiet]

A GP regression model with a squared-exponential kernel (one length scale per feature,
a signal variance, a noise variance) is fitted by gradient descent on the negative log
marginal likelihood of the training targets,

    nll = 1/2 y^T K^-1 y + 1/2 log|K| + n/2 log(2 pi),   K = k(X, X) + noise I,

computed with `df.linalg.cholesky`, `df.linalg.triangular_solve` and `df.linalg.slogdet`.
The whole step (likelihood, gradients through the linear algebra, a hand-written Adam
update with `assign`) is one `df.defun` graph. Afterwards the posterior predicts the
held-out patients; the script reports its error next to predicting the training mean and
draws the training loss and the posterior (matplotlib, Agg backend) into a PNG (default
./gaussian_process.png). A progress bar runs over the steps (off with --quiet or when not
on a terminal).
"""
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import defun as df  # noqa: E402
from reporting import (blas_threads, check_output, count, parser, positive_float,  # noqa: E402
                       progress)  # (the examples' progress bar, output check, command line)

JITTER = 1e-6


def load_data(n_test=100, seed=0):
    """Diabetes (442 patients, 10 features, a disease-progression score), split at random;
    features and target standardized with the training statistics (float64)."""
    from sklearn.datasets import load_diabetes  # the `examples` extra; ships its data offline

    data = load_diabetes()
    x, y = data.data.astype(np.float64), data.target.astype(np.float64)
    order = np.random.default_rng(seed).permutation(len(x))
    test, train = order[:n_test], order[n_test:]
    mx, sx = x[train].mean(0), x[train].std(0)
    my, sy = y[train].mean(), y[train].std()
    scale = lambda v: (v - mx) / sx  # noqa: E731
    return (scale(x[train]), ((y[train] - my) / sy)[:, None], scale(x[test]), ((y[test] - my) / sy)[:, None],
            list(data.feature_names))


class GaussianProcess:
    """GP regression; hyperparameters are logs held in df.Variables (so they stay positive)."""

    def __init__(self, x, y):
        self.x, self.y = df.constant(x), df.constant(y)
        n, d = x.shape
        self.log_lengthscales = df.Variable(np.full(d, math.log(math.sqrt(d))), name="log_lengthscales")
        self.log_signal = df.Variable(np.float64(0.0), name="log_signal_variance")
        self.log_noise = df.Variable(np.float64(math.log(0.5)), name="log_noise_variance")
        self.eye = np.eye(n)

    @property
    def variables(self):
        return [self.log_lengthscales, self.log_signal, self.log_noise]

    def kernel(self, a, b):
        """sf2 * exp(-|a_i - b_j|^2 / 2) on inputs divided by the length scales."""
        ell = df.exp(self.log_lengthscales)
        za, zb = a / ell, b / ell
        sq = (za * za).sum(axis=1)[:, None] + (zb * zb).sum(axis=1)[None, :] - 2.0 * (za @ zb.T)
        return df.exp(self.log_signal) * df.exp(-0.5 * df.maximum(sq, 0.0))

    def train_covariance(self):
        noise = df.exp(self.log_noise) + JITTER
        return self.kernel(self.x, self.x) + noise * self.eye

    def negative_log_marginal_likelihood(self):
        k = self.train_covariance()
        low = df.linalg.cholesky(k)
        alpha = df.linalg.triangular_solve(low, self.y)        # L^-1 y, so y^T K^-1 y = |alpha|^2
        _, log_det = df.linalg.slogdet(k)
        n = self.y.shape[0]
        return 0.5 * (alpha * alpha).sum() + 0.5 * log_det + 0.5 * n * math.log(2 * math.pi)

    def predict(self, x_new):
        """Posterior mean and variance of the targets (noise included) at `x_new`."""
        low = df.linalg.cholesky(self.train_covariance())
        alpha = df.linalg.triangular_solve(low, self.y)
        v = df.linalg.triangular_solve(low, self.kernel(self.x, x_new))   # L^-1 k(X, x*)
        mean = df.linalg.matrix_transpose(v) @ alpha
        var = df.exp(self.log_signal) - (v * v).sum(axis=0) + df.exp(self.log_noise)
        return mean[:, 0], var

    def hyperparameters(self):
        return {"lengthscales": np.exp(self.log_lengthscales.numpy()),
                "signal_variance": float(np.exp(self.log_signal.numpy())),
                "noise_variance": float(np.exp(self.log_noise.numpy()))}


class Adam:
    """Adam (Kingma and Ba) in a few lines of variable updates; runs eagerly or in a defun."""

    def __init__(self, variables, learning_rate=0.05, beta_1=0.9, beta_2=0.999, epsilon=1e-8):
        self.variables = variables
        self.lr, self.b1, self.b2, self.eps = learning_rate, beta_1, beta_2, epsilon
        self.m = [df.Variable(np.zeros_like(v.numpy()), trainable=False) for v in variables]
        self.v = [df.Variable(np.zeros_like(v.numpy()), trainable=False) for v in variables]
        self.t = df.Variable(np.float64(0.0), trainable=False)

    def apply(self, grads):
        t = self.t.assign_add(1.0).read_value()
        step = self.lr * df.sqrt(1.0 - df.pow(self.b2, t)) / (1.0 - df.pow(self.b1, t))
        for g, var, m, v in zip(grads, self.variables, self.m, self.v):
            m.assign(self.b1 * m.read_value() + (1.0 - self.b1) * g)
            v.assign(self.b2 * v.read_value() + (1.0 - self.b2) * g * g)
            var.assign_sub(step * m.read_value() / (df.sqrt(v.read_value()) + self.eps))


def make_step(model, optimizer):
    def step():
        with df.GradientTape() as tape:
            loss = model.negative_log_marginal_likelihood()
        optimizer.apply(tape.gradient(loss, model.variables))
        return loss
    return step


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def plot(path, losses, model, x_train, y_train, x_test, y_test, feature, feature_name):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    axes[0].plot(np.arange(1, len(losses) + 1), losses)
    axes[0].set(title="training", xlabel="step", ylabel="negative log marginal likelihood")

    mean, var = (t.numpy() for t in model.predict(df.constant(x_test)))
    order = np.argsort(mean)
    band = 2 * np.sqrt(var[order])
    axes[1].fill_between(np.arange(len(order)), mean[order] - band, mean[order] + band, alpha=0.3,
                         label="posterior mean +- 2 sd")
    axes[1].plot(mean[order], label="posterior mean")
    axes[1].scatter(np.arange(len(order)), y_test[order, 0], s=8, color="k", label="held-out target")
    axes[1].set(title="held-out patients (sorted by prediction)", xlabel="patient",
                ylabel="standardized progression")
    axes[1].legend(fontsize=8)

    grid = np.linspace(x_train[:, feature].min(), x_train[:, feature].max(), 200)
    x_grid = np.zeros((len(grid), x_train.shape[1]))   # other features at their (training) mean: 0
    x_grid[:, feature] = grid
    gmean, gvar = (t.numpy() for t in model.predict(df.constant(x_grid)))
    axes[2].scatter(x_train[:, feature], y_train[:, 0], s=6, color="0.6", label="training patients")
    axes[2].fill_between(grid, gmean - 2 * np.sqrt(gvar), gmean + 2 * np.sqrt(gvar), alpha=0.3)
    axes[2].plot(grid, gmean, label="posterior mean, other features at their mean")
    axes[2].set(title=f"posterior along '{feature_name}'", xlabel=f"{feature_name} (standardized)",
                ylabel="standardized progression")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# BLAS on one thread: its 342 x 342 factorizations are small for two threads on a busy
# machine (40 steps: 59-78 s with two threads, 3.6-4.0 s with one, 2 cores at load 12)
@blas_threads(1)
def main(steps=150, learning_rate=0.05, out="gaussian_process.png", quick=False, seed=0, verbose=True):
    """Fit, evaluate, plot; returns a dict of results (used by tests/test_example_gp.py).

    `quick`: at most 30 steps on the first 200 training patients (a smoke run of a few seconds).
    """
    say = print if verbose else (lambda *a, **k: None)
    x_train, y_train, x_test, y_test, names = load_data(seed=seed)
    if quick:
        steps = min(steps, 30)
        x_train, y_train = x_train[:200], y_train[:200]
    model = GaussianProcess(x_train, y_train)
    step = df.defun(make_step(model, Adam(model.variables, learning_rate)))
    say(f"diabetes: {len(x_train)} training / {len(x_test)} held-out patients, {x_train.shape[1]} "
        f"features; GP with a squared-exponential kernel (one length scale per feature)")

    initial_nll = float(model.negative_log_marginal_likelihood())
    initial_rmse = rmse(model.predict(df.constant(x_test))[0], y_test[:, 0])
    losses = []
    start = time.perf_counter()
    with progress(range(steps), desc="fitting", quiet=not verbose) as bar:
        for _ in bar:
            losses.append(float(step()))
            bar.set_postfix(nll=f"{losses[-1]:.2f}")
    seconds = time.perf_counter() - start
    final_nll = float(model.negative_log_marginal_likelihood())

    mean, _ = model.predict(df.constant(x_test))
    test_rmse = rmse(mean, y_test[:, 0])
    baseline_rmse = rmse(np.zeros(len(y_test)), y_test[:, 0])   # the training mean (0 once standardized)
    hp = model.hyperparameters()
    say(f"{steps} Adam steps in {seconds:.1f} s ({1e3 * seconds / max(steps, 1):.0f} ms per defun step, "
        f"traced {step.trace_count} time{'s' if step.trace_count != 1 else ''})")
    say(f"negative log marginal likelihood: {initial_nll:.2f} -> {final_nll:.2f}")
    say(f"held-out RMSE (standardized units): GP {test_rmse:.3f} (before fitting {initial_rmse:.3f}), "
        f"predicting the training mean {baseline_rmse:.3f}")
    say(f"signal variance {hp['signal_variance']:.3f}, noise variance {hp['noise_variance']:.3f}, "
        f"length scales " + ", ".join(f"{n} {v:.2f}" for n, v in zip(names, hp["lengthscales"])))

    feature = int(np.argmin(hp["lengthscales"]))   # the most relevant feature: the shortest scale
    if out:
        plot(out, losses, model, x_train, y_train, x_test, y_test, feature, names[feature])
        say(f"posterior plot written to {out}")
    return {"initial_nll": initial_nll, "final_nll": final_nll, "losses": losses, "test_rmse": test_rmse,
            "initial_test_rmse": initial_rmse, "baseline_rmse": baseline_rmse, "hyperparameters": hp,
            "trace_count": step.trace_count, "seconds": seconds, "plot": out}


if __name__ == "__main__":
    parse = parser(__doc__.splitlines()[0])
    parse.add_argument("--steps", type=count(1), default=150, help="Adam steps (default 150)")
    parse.add_argument("--learning-rate", type=positive_float, default=0.05)
    parse.add_argument("--quick", action="store_true",
                       help="at most 30 steps on 200 training patients (a smoke run)")
    parse.add_argument("--out", default="gaussian_process.png", help="where to write the posterior plot")
    parse.add_argument("--quiet", action="store_true", help="no progress bar and no output lines")
    args = parse.parse_args()
    check_output(args.out, (".png",), "--out")      # before fitting, not after it
    result = main(steps=args.steps, learning_rate=args.learning_rate, out=args.out, quick=args.quick,
                  verbose=not args.quiet)
    sys.exit(0 if result["final_nll"] < result["initial_nll"] else 1)
