"""What the examples share: a progress bar, lines printed beside it, a loss/accuracy plot,
and a check of where the output goes, made before any training.

The convention (examples/README.md): a `tqdm` bar over the training steps, off with
`--quiet` or when stderr is not a terminal; summaries printed with `say` (tqdm.write, so
the bar stays whole); a `<example>.png` plot of loss and accuracy written next to the
example's output with matplotlib's Agg backend (no display needed), its path printed.

    from reporting import plot_history, progress, say
    for step in progress(range(n_steps), desc="training", quiet=quiet):
        ...
    say(f"epoch {epoch}: loss {loss:.4f}", quiet=quiet)
    plot_history("train_mlp.png", {"loss": losses}, {"test": accuracies}, "MLP on digits")

    check_output(args.out, (".json",), "--out")      # first: a bad path fails in a second

A command line is read by `parser(...)`, whose refusal of a bad value (`--batch-size 0`,
with the types `count(1)`, `positive_float`, `non_negative_float`) is one line and exit
status 2, never a traceback from the middle of training. An example whose matrices are
small runs `@blas_threads(1)`: BLAS on one thread inside it (threadpoolctl; the process's
environment is left alone), since on a busy machine a second thread slows each small
product down.

The bar and the plot need the `[examples]` extra (tqdm, matplotlib, threadpoolctl).
"""
import argparse
import contextlib
import functools
import os
import sys

__all__ = ["progress", "say", "plot_history", "check_output", "output_problem", "parser", "count",
           "positive_float", "non_negative_float", "blas_threads"]


class _OneLineParser(argparse.ArgumentParser):
    """argparse, a bad command line refused in one line on stderr (exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parser(description):
    """The examples' argument parser (see the module's docstring)."""
    return _OneLineParser(description=description)


def count(low):
    """An argparse type: an int >= `low`."""
    def parse(text):
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value
    return parse


def _float(text, positive):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or value != value or value in (float("inf"), float("-inf")) or value < 0 or \
            (positive and value == 0):
        raise argparse.ArgumentTypeError(f"expected a {'positive' if positive else 'non-negative'} "
                                         f"number, got {text!r}")
    return value


def positive_float(text):
    """An argparse type: a finite number > 0 (a learning rate, a clipping norm)."""
    return _float(text, positive=True)


def non_negative_float(text):
    """An argparse type: a finite number >= 0 (a noise scale)."""
    return _float(text, positive=False)


def blas_threads(limit):
    """A decorator: the function runs with BLAS on at most `limit` threads (threadpoolctl's
    limit, lifted when it returns; without threadpoolctl, as the process is)."""
    def decorate(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                from threadpoolctl import threadpool_limits   # the `examples` extra
            except ImportError:
                limits = contextlib.nullcontext()
            else:
                limits = threadpool_limits(limits=limit, user_api="blas")
            with limits:
                return fn(*args, **kwargs)
        return run
    return decorate


def check_output(path, suffixes, flag):
    """Exit with status 2 and one line unless `path` ends with one of `suffixes` and its
    directory exists and is writable: checked before training, not after it."""
    problem = output_problem(path, suffixes)
    if problem is not None:
        print(f"error: {flag} {path}: {problem}", file=sys.stderr)
        raise SystemExit(2)


def output_problem(path, suffixes):
    """What is wrong with writing a file at `path` (None: nothing)."""
    if path is None:
        return None
    if suffixes and not path.lower().endswith(tuple(suffixes)):
        return f"name it with {' or '.join(suffixes)}"
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "is a directory; give a file name"
    if not os.path.isdir(folder):
        return f"the directory {folder} does not exist"
    if not os.access(folder, os.W_OK):
        return f"cannot write to {folder}"
    return None


def progress(iterable, total=None, desc=None, quiet=False, unit="step"):
    """A tqdm progress bar over `iterable`: hidden with `quiet`, and when stderr is not a
    terminal (tqdm's `disable=None`), so logs and tests get no bar."""
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True,
                disable=True if quiet else None)


def say(text, quiet=False):
    """Print `text` above a running progress bar (nothing with `quiet`)."""
    if not quiet:
        from tqdm import tqdm

        tqdm.write(text)


def plot_history(path, losses, accuracies, title, xlabel="epoch"):
    """Write a PNG: each curve of `losses` ({label: values}) on the left, of `accuracies`
    on the right, against 1, 2, ... (`xlabel`). Returns `path`."""
    import matplotlib
    matplotlib.use("Agg")            # files only: no display, same output everywhere
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, curves, ylabel in ((left, losses, "loss"), (right, accuracies, "accuracy")):
        for label, values in curves.items():
            ax.plot(range(1, len(values) + 1), values, marker="o", markersize=3, label=label)
        ax.set(xlabel=xlabel, ylabel=ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if curves:
            ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
