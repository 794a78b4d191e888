"""What the examples share: a progress bar, lines printed beside it, a loss/accuracy plot.

The convention (examples/README.md): a `tqdm` bar over the training steps, off with
`--quiet` or when stderr is not a terminal; summaries printed with `say` (tqdm.write, so
the bar stays whole); a `<example>.png` plot of loss and accuracy written next to the
example's output with matplotlib's Agg backend (no display needed), its path printed.

    from reporting import plot_history, progress, say
    for step in progress(range(n_steps), desc="training", quiet=quiet):
        ...
    say(f"epoch {epoch}: loss {loss:.4f}", quiet=quiet)
    plot_history("train_mlp.png", {"loss": losses}, {"test": accuracies}, "MLP on digits")

Both need the `[examples]` extra (tqdm, matplotlib).
"""

__all__ = ["progress", "say", "plot_history"]


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
