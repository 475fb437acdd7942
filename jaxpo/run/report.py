"""Results on disk and in figures: the long-format metrics CSV (appended per chunk),
per-run summaries, per-setting statistics (rliable) and learning curves.

Crash safety: a CSV is created with its header atomically (temporary file +
``os.replace``) and then only *appended to*, one ``write`` of whole rows per chunk
followed by ``fsync``; so a killed run leaves a valid CSV holding every finished
chunk, and the cost per chunk does not grow with the run's length. Whole files
(summaries, figures) are written atomically.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import re
import tempfile
import warnings
from collections import defaultdict
from typing import Any, Iterable, Sequence

import numpy as np

# The share of a run's last updates that ``final_*`` statistics average over.
FINAL_WINDOW = 0.1


def file_name(text: str) -> str:
    """``text`` in the characters ``[A-Za-z0-9._-]`` only, so a shell takes it unquoted:
    ``khop(k=1)/seed0`` -> ``khop_k1_seed0``, ``lr=0.001`` -> ``lr0.001``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", re.sub(r"[=)]", "", text)).strip("_")


def ensure_writable(directory: str) -> str:
    """Creates ``directory`` and proves it writable, or raises a ValueError naming it."""
    try:
        os.makedirs(directory, exist_ok=True)
        probe = os.path.join(directory, f".write-test-{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as err:
        raise ValueError(f"output directory {directory!r} cannot be written: {err.strerror or err}") from None
    return directory


def _temp_beside(path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    return tmp


def write_atomic(path: str, write) -> None:
    """Calls ``write(tmp_path)``, then moves the finished file to ``path`` (never torn)."""
    tmp = _temp_beside(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_text(path: str, text: str) -> None:
    """Writes a text file atomically."""

    def write(tmp: str):
        with open(tmp, "w") as f:
            f.write(text)

    write_atomic(path, write)


def _csv_text(rows: Iterable[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([_cell(v) for v in row] for row in rows)
    return buffer.getvalue()


def _cell(value: Any) -> Any:
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        return " ".join(map(str, value))
    return value


def write_csv(path: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Writes a whole CSV atomically."""

    def write(tmp: str):
        with open(tmp, "w") as f:
            f.write(_csv_text([header, *rows]))
            f.flush()
            os.fsync(f.fileno())

    write_atomic(path, write)


def merge_csv(path: str, rows: Sequence[dict[str, Any]], measured: Sequence[str]) -> None:
    """Writes ``rows`` (dicts by column) into the CSV at ``path`` atomically, keeping the
    rows it already holds: an old row is dropped only where a new one names the same
    thing, i.e. equals it in every column but the ``measured`` ones (a repeated
    evaluation replaces its earlier result). The header is the union of both, in order
    of appearance; a row lacking a column holds an empty cell there."""
    old = []
    if os.path.exists(path):
        with open(path, newline="") as f:
            old = list(csv.DictReader(f))
    header = list(dict.fromkeys(k for row in [*old, *rows] for k in row))
    old, new = ([[str(_cell(row.get(h, ""))) for h in header] for row in table] for table in (old, rows))
    names = [i for i, h in enumerate(header) if h not in measured]
    key = lambda line: tuple(line[i] for i in names)
    new_keys = set(map(key, new))
    write_csv(path, header, [*(line for line in old if key(line) not in new_keys), *new])


class AppendCSV:
    """A CSV that grows by whole chunks: ``AppendCSV(path, header)`` creates it (replacing
    any old file; ``keep``: continue the existing one) and ``append(rows)`` adds rows
    with one ``write`` and an ``fsync``."""

    def __init__(self, path: str, header: Sequence[str], keep: bool = False):
        self.path, self.header = path, list(header)
        if not keep:
            write_csv(path, self.header, [])

    def append(self, rows: Iterable[Sequence[Any]]) -> None:
        data = _csv_text(rows).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)


def read_csv(path: str) -> dict[str, np.ndarray | list]:
    """A CSV by column: numeric columns as float64 arrays, the others as lists of str."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    columns: dict[str, list] = defaultdict(list)
    for row in rows:
        for key, value in row.items():
            columns[key].append(value)
    out: dict[str, np.ndarray | list] = {}
    for key, values in columns.items():
        try:
            out[key] = np.asarray(values, dtype=np.float64)
        except ValueError:
            out[key] = values
    return out



# ------------------------------------------------------------------ statistics


def window_means(curves: np.ndarray, window: float = FINAL_WINDOW) -> np.ndarray:
    """NaN-aware means over every run of ``k = round(window · U)`` consecutive updates
    (at least 1): ``[R, U] -> [R, U - k + 1]``; NaN where a window holds no value."""
    k = max(1, int(round(curves.shape[1] * window)))
    finite = np.isfinite(curves)
    zero = np.zeros((curves.shape[0], 1))
    sums = np.concatenate([zero, np.cumsum(np.where(finite, curves, 0.0), axis=1)], axis=1)
    counts = np.concatenate([zero, np.cumsum(finite, axis=1)], axis=1)
    total, count = sums[:, k:] - sums[:, :-k], counts[:, k:] - counts[:, :-k]
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def final_mean(curves: np.ndarray, window: float = FINAL_WINDOW) -> np.ndarray:
    """Mean over the last ``window`` share of updates (NaN-aware), per run: ``[R, U] -> [R]``."""
    return window_means(curves, window)[:, -1]


def run_summary(metrics: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-run statistics ``{name: [R]}``: ``initial_return`` (first update; NaN when no
    episode ended in it), ``final_return`` (mean of the last 10% of updates) and
    ``best_return`` (the best mean of any 10% of consecutive updates, so best ≥ final);
    likewise ``final_win_rate`` and ``best_win_rate`` when there is a win rate."""
    out = {"initial_return": metrics["return"][:, 0]}
    for name in ("return", "win_rate"):
        if name in metrics:
            windows = window_means(metrics[name])
            seen = np.isfinite(windows).any(axis=1)
            out[f"final_{name}"] = windows[:, -1]
            out[f"best_{name}"] = np.where(seen, np.nanmax(np.where(np.isfinite(windows), windows, -np.inf), axis=1),
                                           np.nan)
    return out


GROUP_STATS = ("mean", "mean_ci_low", "mean_ci_high", "iqm", "iqm_ci_low", "iqm_ci_high")


def interquartile_mean(scores: np.ndarray) -> float:
    """rliable's ``aggregate_iqm`` (SciPy's 25% ``trim_mean`` over every entry), bit for
    bit: the same partition, the same elements kept, the same NumPy mean, without
    SciPy's per-call array-API dispatch, which a 2,000-resample bootstrap would pay per
    setting and statistic.

    Args:
        scores: any shape (rliable's ``[runs, tasks]``), at least one entry.
    """
    flat = np.ravel(scores)
    cut = int(0.25 * flat.size)
    return np.mean(np.partition(flat, (cut, flat.size - cut - 1))[cut:flat.size - cut])


def group_statistics(scores: dict[str, np.ndarray], reps: int = 2000, seed: int = 0) -> dict[str, dict[str, float]]:
    """Mean and interquartile mean of each setting's scores across its runs, each with a
    95% stratified-bootstrap confidence interval (``rliable``, the field's standard).

    Args:
        scores: setting -> scores ``[n]`` (one per run; NaN scores are left out).
        reps: bootstrap resamples.
    Returns:
        setting -> ``{"runs": n, "mean", "mean_ci_low", …, "iqm_ci_high"}`` (NaN when
        a setting has no finite score).
    """
    from rliable import library as rly
    from rliable import metrics as rmetrics

    finite = {k: v[np.isfinite(v)].reshape(-1, 1) for k, v in scores.items()}
    usable = {k: v for k, v in finite.items() if len(v)}
    both = lambda x: np.array([rmetrics.aggregate_mean(x), interquartile_mean(x)])
    if all(len(v) == 1 for v in usable.values()):  # every resample of one run is that run: no bootstrap needed
        points = {k: both(v) for k, v in usable.items()}
        intervals = {k: np.stack([p, p]) for k, p in points.items()}
    else:
        global_state = np.random.get_state()  # rliable's bootstrap draws from numpy's global generator:
        np.random.seed(seed)  # seed it for reproducible intervals, and leave the caller's stream as it was
        try:
            points, intervals = rly.get_interval_estimates(usable, both, reps=reps)
        finally:
            np.random.set_state(global_state)
    out = {}
    for setting, values in finite.items():
        stats = dict.fromkeys(GROUP_STATS, math.nan)
        if setting in usable:
            (mean, iqm), ((mean_lo, iqm_lo), (mean_hi, iqm_hi)) = points[setting], intervals[setting]
            stats = dict(mean=mean, mean_ci_low=mean_lo, mean_ci_high=mean_hi, iqm=iqm, iqm_ci_low=iqm_lo,
                         iqm_ci_high=iqm_hi)
        out[setting] = {"runs": len(values), **{k: float(v) for k, v in stats.items()}}
    return out


def bootstrap_band(curves: np.ndarray, reps: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """95% percentile-bootstrap interval of the mean over runs at every point:
    ``[n, P] -> (low [P], high [P])`` (NaN entries ignored)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, curves.shape[0], size=(reps, curves.shape[0]))
    with _quiet_nan_warnings():
        means = np.nanmean(curves[idx], axis=1)
        return np.nanpercentile(means, 2.5, axis=0), np.nanpercentile(means, 97.5, axis=0)


@contextlib.contextmanager
def _quiet_nan_warnings():
    """Silences numpy's "mean of empty slice" warnings: all-NaN points stay NaN on purpose."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


# ------------------------------------------------------------------ figures


def plot_curves(curves: np.ndarray, env_steps: np.ndarray, settings: Sequence[str], *, title: str,
                metric: str = "return", ax=None, max_legend: int = 12):
    """Mean ``metric`` per setting against environment steps, with a 95% bootstrap band
    over the setting's runs; drawn on ``ax`` (default: a new figure). Returns the axes.

    Args:
        curves: ``[R, P]`` values per run and point (NaN: no episode ended; left out).
        env_steps: ``[P]``. settings: ``[R]`` the setting of each run.
    """
    import matplotlib.pyplot as plt

    groups: dict[str, list[int]] = defaultdict(list)
    for i, setting in enumerate(settings):
        groups[setting].append(i)
    if ax is None:
        ax = plt.subplots(figsize=(7, 4.5))[1]
    for name, idx in groups.items():
        values = curves[idx]
        seen = np.any(np.isfinite(values), axis=0)
        values, steps = values[:, seen], env_steps[seen]
        with _quiet_nan_warnings():
            line, = ax.plot(steps, np.nanmean(values, axis=0), label=f"{name} (n={len(idx)})")
        if len(idx) > 1:
            low, high = bootstrap_band(values)
            ax.fill_between(steps, low, high, alpha=0.2, color=line.get_color())
    ax.set_xlabel("environment steps per run")
    ax.set_ylabel(f"episode {metric} (mean over agents)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(ax.lines) <= max_legend:
        ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax


def plot_population(lineage: dict[str, Any], axes: Sequence[str], *, end: int, title: str):
    """A steered sweep's figure, from its lineage table (``read_csv`` of lineage.csv):
    one panel per axis with each run's value against env steps (numbers on a log scale
    when they span more than a decade), and the lineage tree: each run a line, each
    copy (PBT) an arrow from the parent's line, each new trial (halving) a dot.
    ``end``: the env steps per run at the end. Returns the figure."""
    import matplotlib.pyplot as plt

    steps, runs, parents = (np.asarray(lineage[k]) for k in ("env_steps", "run_id", "parent_id"))
    ids = sorted(set(runs.tolist()))
    times = sorted(set(steps.tolist()))
    fig, panels = plt.subplots(len(axes) + 1, 1, figsize=(8, 2.6 * (len(axes) + 1)), sharex=True, squeeze=False)
    colors = plt.get_cmap("viridis")(np.linspace(0, 1, max(len(ids), 2)))
    for panel, name in zip(panels[:-1, 0], axes):
        raw = list(lineage[name])
        numeric = all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in raw)
        labels = sorted(set(map(str, raw))) if not numeric else None
        values = np.asarray(raw, float) if numeric else np.array([labels.index(str(v)) for v in raw], float)
        for c, run in zip(colors, ids):
            mine = runs == run
            panel.step([*steps[mine], end], [*values[mine], values[mine][-1]], where="post", color=c, lw=1)
        if numeric and values.min() > 0 and values.max() / values.min() > 10:
            panel.set_yscale("log")
        if labels is not None:
            panel.set_yticks(range(len(labels)), labels)
        panel.set_ylabel(name)
        panel.grid(alpha=0.3)
    tree = panels[-1, 0]
    row = {run: i for i, run in enumerate(ids)}
    for c, run in zip(colors, ids):
        tree.plot([0, end], [row[run]] * 2, color=c, lw=1)
    for t in times[1:]:
        here = steps == t
        for run, parent in zip(runs[here], parents[here]):
            if parent < 0:
                tree.plot([t], [row[run]], "o", color="black", ms=3)
            elif parent != run:
                tree.annotate("", xy=(t, row[run]), xytext=(t, row[parent]),
                              arrowprops={"arrowstyle": "->", "color": "black", "lw": 0.7})
    tree.set_ylabel("run")
    tree.set_xlabel("environment steps per run")
    panels[0, 0].set_title(title)
    fig.tight_layout()
    return fig


def save_figure(fig, path: str | None):
    """Saves ``fig`` atomically as PNG to ``path`` (and closes it); returns ``fig``."""
    if path is not None:
        import matplotlib.pyplot as plt

        write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
        plt.close(fig)
    return fig
