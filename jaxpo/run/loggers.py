"""Loggers: hooks that receive every chunk's batched metrics, and the progress bar.

Every logger is a ``RunLogger``: the base walks the group's runs × the chunk's
updates once and hands each backend one run's row at a time (``record``), then
``flush``es. On resume the CSV keeps its rows up to the checkpoint and drops those
after it (``MetricsCSV.resume``); TensorBoard drops its events after the checkpoint
(``purge_step``) and W&B continues its runs.

    csv          metrics.csv, long format (``MetricsCSV``; the default)
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

import csv
import hashlib
import importlib.util
import os
from typing import Any, Mapping, Sequence

import numpy as np

from jaxpo.run.events import RUN_COLUMNS, ChunkEvent, Group, Hook, Run, chunk_updates
from jaxpo.run.report import AppendCSV, file_name

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
    return f"{run.run_id:03d}-{file_name(run.label)}"


class RunLogger(Hook):
    """A logger of per-update rows: ``write`` walks runs × updates once and calls
    ``record(r, run, update, env_steps, row)`` with ``row`` name -> float for every
    metric, then ``flush()``. Backends override ``record`` (and ``flush``)."""

    def chunk(self, event: ChunkEvent) -> None:
        self.write(event.group, event.updates, event.env_steps, event.metrics)

    def write(self, group: Group, updates: np.ndarray, env_steps: np.ndarray, metrics: dict[str, np.ndarray]) -> None:
        """Rows for ``group``'s runs at ``updates`` / ``env_steps`` ``[U]``; ``metrics``
        name -> ``[R, U]`` (also how a resumed group writes back its checkpointed chunks)."""
        for r, run in enumerate(group.runs):
            for k in range(len(updates)):
                self.record(run, int(updates[k]), int(env_steps[k]),
                            {name: float(values[r, k]) for name, values in metrics.items()})
        self.flush()

    def record(self, run: Run, update: int, env_steps: int, row: dict[str, float]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        pass


class MetricsCSV(RunLogger):
    """``metrics.csv`` in long format, one row per (run, update): run_id, label, setting,
    seed, every swept value, update, env_steps, every metric (empty where a group's
    program has no such metric). Rows are appended per chunk. ``keep``: a resumed plan's
    file, kept until ``resume`` replaces it."""

    def __init__(self, path: str, value_names: Sequence[str], metric_names: Sequence[str], keep: bool = False):
        self.value_names, self.metric_names = list(value_names), list(metric_names)
        header = [*RUN_COLUMNS, *self.value_names, "update", "env_steps", *self.metric_names]
        self.file = AppendCSV(path, header, keep=keep)
        self.rows: list[list] = []
        self._old: Any = None  # during a resume: the rows of the file it replaces
        self._next: list[str] | None = None  # the old file's next row, read ahead

    def record(self, run: Run, update: int, env_steps: int, row: dict[str, float]) -> None:
        self.rows.append([run.run_id, run.label, run.setting, run.seed, *(run.values.get(n, "") for n in self.value_names),
                          update, env_steps, *(row.get(name, np.nan) for name in self.metric_names)])

    def flush(self) -> None:
        self.file.append(self.rows)
        self.rows = []

    def resume(self, group: Group, metrics: Mapping[str, np.ndarray] | None, chunks: int, last: bool) -> None:
        """A resumed plan's rows of ``group``, up to its checkpoint (``chunks`` chunks).

        The plan's resumed groups come in order, each once, into a new file that
        replaces this one (``os.replace``) with the ``last`` (the group the plan goes on
        with): a crash during a resume leaves the file as it was.

        Args:
            group: a group at or before the checkpoint's.
            metrics: name -> ``[R, ≥ chunks × K]`` where its checkpoint holds them (a
                step written before the file held them alone): its rows written again
                from them. None: the rows this file holds, those of updates after the
                checkpoint (written before a crash) dropped.
            chunks: the chunks it had trained.
            last: the plan's last resumed group.

        Raises:
            ValueError: the file lacks rows the checkpoint has trained (or its columns differ).
        """
        if self._old is None:
            self._old, self._next = _rows(self.file.path, self.file.header), None
            self.file = AppendCSV(self.file.path + ".resume", self.file.header)
        try:
            if metrics is not None:
                self.rewrite(group, metrics, chunks)
            else:
                self._keep(group, chunks * group.config.updates_per_chunk)
        except BaseException:
            self._end_resume(replace=False)
            raise
        if last:
            self._end_resume(replace=True)

    def _end_resume(self, replace: bool) -> None:
        """Closes the old file and puts the new one in its place, or (``replace`` False) drops the new one."""
        self._old.close()
        self._old = self._next = None
        new, path = self.file.path, self.file.path[:-len(".resume")]
        if replace:
            os.replace(new, path)
        else:
            os.remove(new)
        self.file = AppendCSV(path, self.file.header, keep=True)

    def _keep(self, group: Group, updates: int) -> None:
        """Copies the old file's rows of ``group``'s runs up to ``updates`` (a block of rows:
        the plan's groups were written in order, each after the one before it)."""
        rows, ids = self._old, {str(run.run_id): 0 for run in group.runs}
        at, batch = self.file.header.index("update"), []
        row = self._next if self._next is not None else next(rows, None)
        while row is not None and row[0] not in ids:  # rows of groups rebuilt from their checkpoint
            row = next(rows, None)
        while row is not None and row[0] in ids:
            if int(row[at]) <= updates:
                ids[row[0]] += 1
                batch.append(row)
                if len(batch) >= 4096:
                    self.file.append(batch)
                    batch = []
            row = next(rows, None)
        self._next = row
        if batch:
            self.file.append(batch)
        short = [(run_id, n) for run_id, n in ids.items() if n != updates]
        if short:
            raise ValueError(f"cannot resume: {self.file.path[:-len('.resume')]} holds {short[0][1]} of the {updates} "
                             f"rows of run {short[0][0]} that its checkpoint has trained")

    def rewrite(self, group: Group, metrics: Mapping[str, np.ndarray], chunks: int) -> None:
        """A resumed group's rows again, chunk by chunk as they were first written.

        Args:
            group: the resumed group.
            metrics: name -> ``[R, ≥ chunks × K]``, what its checkpoint holds.
            chunks: the chunks it had trained.
        """
        k = group.config.updates_per_chunk
        for c in range(chunks):
            self.write(group, *chunk_updates(group.config, c), {name: v[:, c * k:(c + 1) * k] for name, v in metrics.items()})


def _rows(path: str, header: Sequence[str]):
    """The rows of the CSV at ``path`` (none if it does not exist), as strings, after a
    header that must be ``header``."""
    if not os.path.exists(path):
        return
    with open(path, newline="") as f:
        rows = csv.reader(f)
        found = next(rows, [])
        if found != list(header):
            raise ValueError(f"cannot resume: the columns of {path} differ from this plan's "
                             f"({', '.join(found[:8])}, … against {', '.join(list(header)[:8])}, …)")
        yield from rows


class TensorBoardLogger(RunLogger):
    """One tensorboardX ``SummaryWriter`` per run in ``<directory>/<run dir name>``."""

    def __init__(self, directory: str, context: Mapping[str, Any]):
        self.directory, self.context = directory, context
        self.writers: dict[int, Any] = {}

    def start(self, group: Group) -> None:
        from tensorboardX import SummaryWriter
        from tensorboardX.summary import hparams

        # A resumed group drops the events logged after its checkpoint (they come again).
        purge = None if group.resumed is None else int(group.resumed.chunk * group.config.updates_per_chunk
                                                      * group.config.steps_per_update) + 1
        for run in group.runs:
            writer = SummaryWriter(os.path.join(self.directory, run_directory_name(run)), purge_step=purge)
            if group.resumed is None:  # the HParams tab: this run's values, its return series as the metric
                for summary in hparams(run_params(run, self.context), {"return": 0.0}):
                    writer.file_writer.add_summary(summary)
            self.writers[run.run_id] = writer

    def record(self, run: Run, update: int, env_steps: int, row: dict[str, float]) -> None:
        writer = self.writers[run.run_id]
        for name, value in row.items():
            if np.isfinite(value):  # NaN: no episode ended (or a masked run): a gap
                writer.add_scalar(name, value, global_step=env_steps)

    def flush(self) -> None:
        for writer in self.writers.values():
            writer.flush()

    def end(self, group: Group, state: Any) -> None:
        for run in group.runs:
            self.writers.pop(run.run_id).close()

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()


class WandbLogger(RunLogger):
    """One W&B run per jaxpo run (``reinit="create_new"``), named by the run's label,
    grouped by ``group``; the run's hyperparameters are its W&B config. Ids are derived
    from the run directory and run id, so a resumed jaxpo run continues its W&B runs
    (online; offline, ``wandb sync`` gets a second segment)."""

    def __init__(self, directory: str, group: str, context: Mapping[str, Any], project: str | None = None):
        self.directory, self.group, self.context = directory, group, context
        self.project = project or os.environ.get("WANDB_PROJECT", "jaxpo")
        self.runs: dict[int, Any] = {}

    def start(self, group: Group) -> None:
        import wandb

        os.makedirs(self.directory, exist_ok=True)
        for run in group.runs:
            run_id = hashlib.sha256(f"{os.path.abspath(self.directory)}/{run.run_id}".encode()).hexdigest()[:12]
            self.runs[run.run_id] = wandb.init(
                project=self.project, group=self.group, name=run.label, job_type=run.setting, id=run_id,
                resume="allow", config=run_params(run, self.context), dir=self.directory, reinit="create_new",
                settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
            )

    def record(self, run: Run, update: int, env_steps: int, row: dict[str, float]) -> None:
        self.runs[run.run_id].log({**row, "env_steps": env_steps}, step=update)

    def end(self, group: Group, state: Any) -> None:
        for run in group.runs:
            self.runs.pop(run.run_id).finish()

    def close(self) -> None:
        for wandb_run in self.runs.values():
            wandb_run.finish(exit_code=1)  # cut short (an error or a diverged run)
        self.runs.clear()


class ProgressBar(Hook):
    """A tqdm bar over ``total`` chunks (all groups), showing the latest mean return."""

    def __init__(self, total: int, desc: str = "train", done: int = 0):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, initial=done, desc=desc, unit="chunk")

    def chunk(self, event: ChunkEvent) -> None:
        self.bar.update(1)
        returns = event.metrics["return"][:, -1]
        if np.isfinite(returns).any():
            self.bar.set_postfix(ret=f"{np.nanmean(returns):.3f}")

    def close(self) -> None:
        self.bar.close()


def make_loggers(names: Sequence[str], run_dir: str, context: Mapping[str, Any]) -> list[Hook]:
    """The non-CSV loggers in ``names`` (the CSV, ``MetricsCSV``, also replays resumed chunks)."""
    hooks: list[Hook] = []
    if "tensorboard" in names:
        hooks.append(TensorBoardLogger(os.path.join(run_dir, "tensorboard"), context))
    if "wandb" in names:
        hooks.append(WandbLogger(run_dir, os.path.basename(os.path.normpath(run_dir)), context))
    return hooks

