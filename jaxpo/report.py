"""Results on disk: the metrics CSV and the learning-curve figure.

Both are written atomically (temporary file + ``os.replace``), so a crash mid-run
leaves the previous complete file, never a torn one.
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections import defaultdict
from typing import Sequence

import numpy as np


def _atomic_path(path: str):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    return tmp


def write_metrics_csv(
    path: str,
    labels: Sequence[str],
    seeds: np.ndarray,
    env_steps: np.ndarray,
    metrics: dict[str, np.ndarray],
) -> None:
    """Writes one row per (run, train step): ``run, seed, update, env_steps, <metrics>``.

    ``metrics``: name -> [R, U]; ``env_steps``: [U]; ``labels``, ``seeds``: [R].
    """
    names = sorted(metrics)
    tmp = _atomic_path(path)
    try:
        with open(tmp, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["run", "seed", "update", "env_steps", *names])
            for r, label in enumerate(labels):
                for u in range(len(env_steps)):
                    row = [repr(float(metrics[n][r, u])) for n in names]
                    writer.writerow([label, int(seeds[r]), u + 1, int(env_steps[u]), *row])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def read_metrics_csv(path: str) -> dict[str, np.ndarray | list]:
    """Reads a metrics CSV back: column name -> list (run) or float array."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    columns: dict[str, list] = defaultdict(list)
    for row in rows:
        for key, value in row.items():
            columns[key].append(value)
    return {k: (v if k == "run" else np.asarray(v, dtype=np.float64)) for k, v in columns.items()}


def _group(labels: Sequence[str]) -> dict[str, list[int]]:
    """Runs named ``<group>/seed<k>`` grouped by ``<group>``."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, label in enumerate(labels):
        groups[label.rsplit("/seed", 1)[0]].append(i)
    return groups


def plot_learning_curves(result, path: str | None = None, metric: str = "return"):
    """Mean ``metric`` over seeds (band: min–max) against environment steps.

    Train steps in which no episode ended (NaN return) are left out of the curve.
    Returns the matplotlib figure; saves it atomically to ``path`` when given.
    """
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    values = result.metrics[metric]
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, idx in _group(result.labels).items():
        curve = values[idx]
        seen = ~np.all(np.isnan(curve), axis=0)
        curve, steps = curve[:, seen], result.env_steps[seen]
        ax.plot(steps, np.nanmean(curve, axis=0), label=f"{name} (n={len(idx)})")
        if len(idx) > 1:
            ax.fill_between(steps, np.nanmin(curve, 0), np.nanmax(curve, 0), alpha=0.2)
    ax.set_xlabel("environment steps per run")
    ax.set_ylabel(f"episode {metric} (mean over agents)")
    ax.set_title(result.config.env)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        tmp = _atomic_path(path)
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, path)
        plt.close(fig)
    return fig
