"""Loggers: driver hooks that receive every chunk's batched metrics.

    csv          metrics.csv, long format (``driver.MetricsCSV``; the default)
    tensorboard  tensorboardX event files, one directory per run under
                 ``<run dir>/tensorboard/``: a scalar series per metric (step = env
                 steps) and the run's hyperparameters (TensorBoard's HParams tab)
    wandb        Weights & Biases (``pip install 'jaxpo[wandb]'``): one W&B run per jaxpo
                 run, so vmapped seeds are never merged; grouped by the run directory's
                 name. ``WANDB_MODE=offline`` writes ``<run dir>/wandb/offline-run-*``
                 with no network; ``wandb sync`` uploads them later.

``--log csv,tensorboard,wandb`` picks them (``run.log``); the progress bar is
``--progress``. Loggers run on the main process only.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np

from jaxpo.driver import Batch, ChunkEvent, Hook, Run

LOGGERS = ("csv", "tensorboard", "wandb")


def parse_loggers(text: str, where: str = "run.log") -> tuple[str, ...]:
    """``"csv,tensorboard"`` -> ``("csv", "tensorboard")``; unknown names are a ValueError."""
    names = tuple(n.strip() for n in str(text).split(",") if n.strip())
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ValueError(f"{where}: unknown logger {unknown[0]!r}; loggers: {', '.join(LOGGERS)} "
                         f"(comma-separated, e.g. csv,tensorboard)")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: logger named twice in {text!r}")
    if "wandb" in names and importlib.util.find_spec("wandb") is None:
        raise ValueError(f"{where}: the wandb logger needs the wandb package: pip install 'jaxpo[wandb]'")
    return names


def run_params(run: Run, context: Mapping[str, Any]) -> dict[str, Any]:
    """A run's hyperparameters, flat: the experiment's scalar fields (``hyper.lr``,
    ``config.num_envs``, …), its swept values and its seed."""
    flat = {}
    for section, fields in context.items():
        if isinstance(fields, Mapping):
            for name, value in fields.items():
                if isinstance(value, (bool, int, float, str)):
                    flat[f"{section}.{name}"] = value
    return {**flat, **{k: v for k, v in run.values.items() if isinstance(v, (bool, int, float, str))},
            "seed": run.seed, "label": run.label}


def run_directory_name(run: Run) -> str:
    """``007-khop_k1_seed0``: sortable, and safe as a file name."""
    return f"{run.run_id:03d}-" + re.sub(r"[^A-Za-z0-9_.=-]+", "_", run.label).strip("_")


class TensorBoardLogger(Hook):
    """One tensorboardX ``SummaryWriter`` per run in ``<directory>/<run dir name>``."""

    def __init__(self, directory: str, context: Mapping[str, Any]):
        self.directory, self.context = directory, context
        self.writers: dict[int, Any] = {}

    def start(self, batch: Batch) -> None:
        from tensorboardX import SummaryWriter
        from tensorboardX.summary import hparams

        # A resumed batch drops the events logged after its checkpoint (they come again).
        purge = None if batch.resumed is None else int(batch.resumed.chunk * batch.config.updates_per_chunk
                                                      * batch.config.steps_per_update) + 1
        for run in batch.runs:
            writer = SummaryWriter(os.path.join(self.directory, run_directory_name(run)), purge_step=purge)
            if batch.resumed is None:  # the HParams tab: this run's values, its return series as the metric
                for summary in hparams(run_params(run, self.context), {"return": 0.0}):
                    writer.file_writer.add_summary(summary)
            self.writers[run.run_id] = writer

    def chunk(self, event: ChunkEvent) -> None:
        for r, run in enumerate(event.batch.runs):
            writer = self.writers[run.run_id]
            for name, values in event.metrics.items():
                for k, step in enumerate(event.env_steps):
                    if np.isfinite(values[r, k]):  # NaN: no episode ended (or a masked run): a gap
                        writer.add_scalar(name, float(values[r, k]), global_step=int(step))
            writer.flush()

    def end(self, batch: Batch, state: Any) -> None:
        for run in batch.runs:
            self.writers.pop(run.run_id).close()

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()


class WandbLogger(Hook):
    """One W&B run per jaxpo run (``reinit="create_new"``), named by the run's label,
    grouped by ``group``; the run's hyperparameters are its W&B config. Ids are derived
    from the run directory and run id, so a resumed jaxpo run continues its W&B runs
    (online; offline, ``wandb sync`` gets a second segment)."""

    def __init__(self, directory: str, group: str, context: Mapping[str, Any], project: str | None = None):
        self.directory, self.group, self.context = directory, group, context
        self.project = project or os.environ.get("WANDB_PROJECT", "jaxpo")
        self.runs: dict[int, Any] = {}

    def start(self, batch: Batch) -> None:
        import wandb

        os.makedirs(self.directory, exist_ok=True)
        for run in batch.runs:
            run_id = hashlib.sha256(f"{os.path.abspath(self.directory)}/{run.run_id}".encode()).hexdigest()[:12]
            self.runs[run.run_id] = wandb.init(
                project=self.project, group=self.group, name=run.label, job_type=run.setting, id=run_id,
                resume="allow", config=run_params(run, self.context), dir=self.directory, reinit="create_new",
                settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
            )

    def chunk(self, event: ChunkEvent) -> None:
        for r, run in enumerate(event.batch.runs):
            wandb_run = self.runs[run.run_id]
            for k, update in enumerate(event.updates):
                row = {name: float(values[r, k]) for name, values in event.metrics.items()}
                wandb_run.log({**row, "env_steps": int(event.env_steps[k])}, step=int(update))

    def end(self, batch: Batch, state: Any) -> None:
        for run in batch.runs:
            self.runs.pop(run.run_id).finish()

    def close(self) -> None:
        for wandb_run in self.runs.values():
            wandb_run.finish(exit_code=1)  # cut short (an error or a diverged run)
        self.runs.clear()


def make_loggers(names: Sequence[str], run_dir: str, context: Mapping[str, Any]) -> list[Hook]:
    """The non-CSV loggers in ``names`` (the CSV is the driver's ``MetricsCSV``)."""
    hooks: list[Hook] = []
    if "tensorboard" in names:
        hooks.append(TensorBoardLogger(os.path.join(run_dir, "tensorboard"), context))
    if "wandb" in names:
        hooks.append(WandbLogger(run_dir, os.path.basename(os.path.normpath(run_dir)), context))
    return hooks

