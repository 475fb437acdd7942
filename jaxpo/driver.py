"""The driver: the host loop over compiled chunks, and the hooks it calls.

``run_batch`` trains one batch of runs that share a static ``Config`` in one compiled
program: ``init_runs`` once, then ``chunk_runs`` chunk after chunk. Between chunks
the metrics come to the host once (``[R, K]`` arrays, no per-update callback) and
every hook sees them. Hooks are where loggers, checkpoints and evaluation plug in:

    class Hook:
        start(batch)        before a batch's first chunk
        chunk(event)        after each chunk (``ChunkEvent``: metrics, state, timing)
        end(batch, state)   after a batch's last chunk

``train`` is the Python API for one batch (seeds × any traced values); sweeps
(``jaxpo.sweep``) call ``run_batch`` once per group of runs.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxpo.config import Config, Hyper
from jaxpo.learner import TrainState, Trainer, trainer
from jaxpo.parallel import gather, is_main_process, padded_size, put
from jaxpo.report import FINAL_WINDOW, AppendCSV, final_mean, plot_curves, save_figure


@dataclasses.dataclass(frozen=True)
class Run:
    """One row of the run table: ``run_id`` (unique in its output), ``label``
    (``<setting>/seed<k>``), ``setting`` (what its seeds share), ``seed`` and the
    swept ``values`` that define the setting."""

    run_id: int
    label: str
    setting: str
    seed: int
    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Resumed:
    """Where a batch starts again: the batched ``state`` after ``chunk`` chunks and the
    ``metrics`` name -> [R, chunk × K] of those chunks (from a checkpoint)."""

    chunk: int
    state: Any
    metrics: dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Batch:
    """Runs trained together by one program call (R of them; padding not included).

    ``index``: its place among the batches of a plan; ``chunk_offset``: the chunks of
    the plan's batches before it (checkpoint steps count chunks of the whole plan);
    ``resumed``: set when it continues from a checkpoint."""

    config: Config
    runs: Sequence[Run]
    num_updates: int
    index: int = 0
    chunk_offset: int = 0
    resumed: Resumed | None = None

    @property
    def num_chunks(self) -> int:
        return self.num_updates // self.config.updates_per_chunk


@dataclasses.dataclass(frozen=True)
class ChunkEvent:
    """What hooks see after a chunk: ``metrics`` name -> float64 ``[R, K]`` for the
    batch's runs, ``updates`` / ``env_steps`` ``[K]`` (per run, counted from 1),
    the batched ``state`` (padding rows included) and wall ``seconds`` so far."""

    batch: Batch
    index: int
    updates: np.ndarray
    env_steps: np.ndarray
    metrics: dict[str, np.ndarray]
    state: TrainState
    seconds: float


class Hook:
    """Base class of driver hooks; override what you need."""

    def start(self, batch: Batch) -> None:
        pass

    def chunk(self, event: ChunkEvent) -> None:
        pass

    def end(self, batch: Batch, state: TrainState) -> None:
        pass


RUN_COLUMNS = ("run_id", "label", "setting", "seed")


def setting_of(label: str) -> str:
    """The setting a run belongs to: its label without the ``/seed<k>`` suffix."""
    return label.rsplit("/seed", 1)[0]


def chunk_updates(config: Config, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """``(updates, env steps)`` per run after each update of chunk ``chunk`` (from 0):
    int ``[K]`` each, updates counted from 1."""
    updates = np.arange(chunk * config.updates_per_chunk, (chunk + 1) * config.updates_per_chunk) + 1
    return updates, updates * config.steps_per_update


def close_hooks(hooks: Sequence[Hook]) -> None:
    """Closes the hooks that hold files, writers or threads (those with a ``close``)."""
    for hook in hooks:
        if hasattr(hook, "close"):
            hook.close()


def env_steps_per_update(config: Config, num_updates: int) -> np.ndarray:
    """Environment steps per run after each of ``num_updates`` updates: int ``[U]``."""
    return config.steps_per_update * np.arange(1, num_updates + 1)


class MetricsCSV(Hook):
    """``metrics.csv`` in long format, one row per (run, update): run_id, label, setting,
    seed, every swept value, update, env_steps, every metric. Rows are appended per chunk."""

    def __init__(self, path: str, value_names: Sequence[str], metric_names: Sequence[str]):
        self.value_names, self.metric_names = list(value_names), list(metric_names)
        self.file = AppendCSV(path, [*RUN_COLUMNS, *self.value_names, "update", "env_steps", *self.metric_names])

    def chunk(self, event: ChunkEvent) -> None:
        self.write(event.batch, event.updates, event.env_steps, event.metrics)

    def write(self, batch: Batch, updates: np.ndarray, env_steps: np.ndarray, metrics: dict[str, np.ndarray]) -> None:
        """Rows for ``batch``'s runs at ``updates`` / ``env_steps`` ``[U]``; ``metrics``
        name -> ``[R, U]`` (also how a resumed run writes back its checkpointed chunks)."""
        nan = np.full(len(updates), np.nan)
        columns = [metrics.get(name) for name in self.metric_names]
        rows = []
        for r, run in enumerate(batch.runs):
            head = [run.run_id, run.label, run.setting, run.seed, *(run.values.get(n, "") for n in self.value_names)]
            values = [nan if c is None else c[r] for c in columns]
            for k in range(len(updates)):
                rows.append([*head, int(updates[k]), int(env_steps[k]), *(v[k] for v in values)])
        self.file.append(rows)


class ProgressBar(Hook):
    """A tqdm bar over ``total`` chunks (all batches), showing the latest mean return."""

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


def pad_runs(tree: Any, size: int) -> Any:
    """Host leaves ``[R, ...] -> [size, ...]`` by repeating the last run (R ≤ size): a
    batch of fewer runs reuses the program compiled for ``size``, or fills every device;
    padded rows are dropped after."""
    def pad(x):
        x = np.asarray(x)
        return np.concatenate([x, np.repeat(x[-1:], size - x.shape[0], axis=0)])

    return jax.tree.map(pad, tree)


def run_batch(tr: Trainer, hyper: Hyper, seeds: np.ndarray, batch: Batch, hooks: Sequence[Hook] = (),
              pad_to: int | None = None) -> tuple[TrainState, dict[str, np.ndarray], float]:
    """Trains ``batch`` (R runs: ``hyper`` ``[R, ...]``, ``seeds`` ``[R]``) for
    ``batch.num_updates`` updates, calling ``hooks`` after every chunk.

    ``pad_to``: run the program compiled for that many runs (≥ R); either way the runs
    are padded to a multiple of ``tr.run_multiple`` (the devices they are split over).
    A ``batch.resumed`` batch starts from its state and chunk. Every process of a
    multi-process run calls this with the same arguments. Returns the final batched
    state (padding included; global arrays), metrics name -> float64 ``[R, U]`` (on
    every process) and the seconds of the first chunk run (compile included).
    """
    num_runs, cfg = len(seeds), tr.config
    size = padded_size(pad_to or num_runs, tr.run_multiple)
    keys = np.asarray(jax.vmap(jax.random.PRNGKey)(jnp.asarray(np.asarray(seeds), jnp.uint32)))
    hyper, keys = put(pad_runs((hyper, keys), size), tr.run_sharding)
    for hook in hooks:
        hook.start(batch)
    start = time.perf_counter()
    if batch.resumed is None:
        state, chunks, done = tr.init_runs(keys, hyper), [], 0
    else:
        state, chunks, done = batch.resumed.state, [batch.resumed.metrics], batch.resumed.chunk
    first_chunk_seconds = math.nan
    for i in range(done, batch.num_chunks):
        state, metrics = tr.chunk_runs(state, hyper)
        metrics = {k: np.asarray(v[:num_runs], np.float64) for k, v in gather(metrics).items()}
        seconds = time.perf_counter() - start
        if i == done:
            first_chunk_seconds = seconds
        chunks.append(metrics)
        event = ChunkEvent(batch, i, *chunk_updates(cfg, i), metrics, state, seconds)
        for hook in hooks:
            hook.chunk(event)
    for hook in hooks:
        hook.end(batch, state)
    collected = {k: np.concatenate([c[k] for c in chunks], axis=1) for k in chunks[0]}
    return state, collected, first_chunk_seconds


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


@dataclasses.dataclass
class TrainResult:
    """What ``train`` returns.

    Attributes:
        config: the static config. labels: one name per run (R).
        seeds: int [R]. hyper: the batched ``Hyper`` ``[R, ...]``.
        metrics: name -> float64 [R, U] per train step.
        env_steps: int [U] — environment steps per run after each train step.
        state: final batched ``TrainState``.
        out_dir: where the CSV and PNG were written (None if not written).
        seconds: wall time of the run; compile_seconds: of the first chunk (incl. compile).
    """

    config: Config
    labels: list[str]
    seeds: np.ndarray
    hyper: Hyper
    metrics: dict[str, np.ndarray]
    env_steps: np.ndarray
    state: TrainState
    out_dir: str | None
    seconds: float
    compile_seconds: float

    def final(self, metric: str = "return", last: float = FINAL_WINDOW) -> np.ndarray:
        """Mean of ``metric`` over the last ``last`` fraction of train steps, per run ``[R]``."""
        return final_mean(self.metrics[metric], last)

    def final_return(self, last: float = FINAL_WINDOW) -> np.ndarray:
        """Mean return over the last ``last`` fraction of train steps, per run ``[R]``."""
        return self.final("return", last)

    def initial_return(self) -> np.ndarray:
        """Return of the untrained policy (first train step's rollout), per run ``[R]``."""
        return self.metrics["return"][:, 0]

    def plot(self, path: str | None = None, metric: str = "return"):
        """Learning curves, mean and 95% bootstrap band over each setting's seeds."""
        settings = [setting_of(label) for label in self.labels]
        ax = plot_curves(self.metrics[metric], self.env_steps, settings, title=self.config.env, metric=metric)
        return save_figure(ax.figure, path)


def check_batch(config: Config, hyper: Hyper, seeds: Any, num_updates: Any, labels: Sequence[str] | None) -> tuple:
    """Validates ``train``'s arguments before anything compiles; returns
    ``(trainer, hyper [R, ...], seeds [R], labels)``."""
    seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
    if seeds.size == 0:
        raise ValueError("seeds must hold at least one integer seed")
    num_runs = seeds.size
    if isinstance(num_updates, bool) or not isinstance(num_updates, (int, np.integer)) or num_updates < 1 \
            or num_updates % config.updates_per_chunk:
        raise ValueError(f"num_updates must be a positive multiple of Config.updates_per_chunk "
                         f"({config.updates_per_chunk}), got {num_updates!r}")
    if np.ndim(hyper.S_A) == 2:  # one Hyper for every seed
        hyper = Hyper.stack([hyper] * num_runs)
    if np.ndim(hyper.S_A) != 3 or hyper.S_A.shape[0] != num_runs:
        raise ValueError(f"hyper must be batched over {num_runs} runs (one per seed), got S_A {np.shape(hyper.S_A)}")
    labels = list(labels) if labels is not None else [f"run{i}" for i in range(num_runs)]
    if len(labels) != num_runs:
        raise ValueError(f"labels must have one entry per run ({num_runs}), got {len(labels)}")
    tr = trainer(config)
    if hyper.S_A.shape[1:] != (tr.num_agents, tr.num_agents):
        raise ValueError(
            f"support matrices are {hyper.S_A.shape[1]}x{hyper.S_A.shape[2]} but the environment "
            f"{config.env!r} has {tr.num_agents} agents"
        )
    return tr, hyper, seeds, labels


def train(
    config: Config,
    hyper: Hyper,
    seeds: Sequence[int] | np.ndarray,
    *,
    num_updates: int,
    labels: Sequence[str] | None = None,
    out_dir: str | None = None,
    progress: bool = True,
    hooks: Sequence[Hook] = (),
    on_nan: str = "stop",
    checkpoint_every: int = 0,
    keep: int = 3,
    resume: bool = False,
) -> TrainResult:
    """Trains R runs for ``num_updates`` updates each in one compiled program.

    Args:
        config: static configuration.
        hyper: batched ``Hyper`` with leading axis R (see ``jaxpo.runs`` / ``Hyper.stack``),
            or a single ``Hyper`` used for every seed.
        seeds: R integer seeds (one per run).
        num_updates: train steps per run, a multiple of ``config.updates_per_chunk``.
        labels: R run names for the CSV and plot (default ``run{i}``).
        out_dir: if given, ``metrics.csv`` (appended per chunk) and ``learning_curve.png``
            are written there (by the main process only, in a multi-process run).
        progress: show a progress bar over chunks (main process only).
        hooks: more ``Hook``s called after every chunk, on every process.
        on_nan: a run turning non-finite raises ``NonFiniteError`` ("stop") or is masked
            ("mask"; see ``jaxpo.guard``).
        checkpoint_every: save a checkpoint to ``out_dir/checkpoints`` every this many
            chunks (0: never), keeping the last ``keep``.
        resume: continue from ``out_dir``'s latest checkpoint (same config, hyper, seeds
            and labels, or a ValueError naming the difference); ``num_updates`` may grow.
    """
    from jaxpo import checkpoint
    from jaxpo.experiment import Experiment, to_dict
    from jaxpo.guard import NanGuard

    tr, hyper, seeds, labels = check_batch(config, hyper, seeds, num_updates, labels)
    if (checkpoint_every or resume) and out_dir is None:
        raise ValueError("checkpoint_every and resume need out_dir (where the checkpoints are)")
    runs = [Run(i, label, setting_of(label), int(seed)) for i, (label, seed) in enumerate(zip(labels, seeds))]
    batch = Batch(config, runs, int(num_updates))
    writer = is_main_process()
    identity = {"hyper": checkpoint.digest(hyper), "labels": list(labels), "seeds": seeds.tolist()}
    if resume:
        found = checkpoint.restore(out_dir)
        if "train" not in found.meta:
            raise ValueError(f"the checkpoints in {out_dir!r} were written by jaxpo train/sweep; resume them with "
                             f"jaxpo.resume({out_dir!r}) or --resume")
        diffs = checkpoint.differences(found.meta["train"], identity)
        diffs += checkpoint.differences(found.meta["config"], to_dict(Experiment(config))["config"],
                                        "config.")
        if diffs:
            raise ValueError("cannot resume: the batch differs from the checkpoint's in " + "; ".join(diffs))
        if found.chunk > batch.num_chunks:
            raise ValueError(f"cannot resume with num_updates={num_updates}: the checkpoint has trained "
                             f"{found.chunk * config.updates_per_chunk} updates")
    guard = NanGuard(on_nan)
    csv = MetricsCSV(os.path.join(ensure_writable(out_dir), "metrics.csv"), (), tr.metric_names) \
        if out_dir is not None and writer else None
    saver = None
    if checkpoint_every:
        meta = {"train": identity, "program_runs": [len(runs)], "group_sizes": [len(runs)], "diverged": guard.diverged}
        saver = checkpoint.Checkpointer(out_dir, checkpoint_every, keep, meta, found.meta["pinned"] if resume else ())
        guard.pin = saver.pin_latest
    if resume:
        batch = checkpoint.resume_batch(batch, tr, out_dir, csv)
    bar = ProgressBar(batch.num_chunks, done=batch.resumed.chunk if resume else 0) if progress and writer else None
    owned = [h for h in (guard, csv, saver, bar) if h is not None]
    # Checked (diverged runs masked), logged, the caller's hooks, checkpointed, shown.
    ordered = [h for h in (guard, csv, *hooks, saver, bar) if h is not None]
    start = time.perf_counter()
    try:
        state, metrics, compile_seconds = run_batch(tr, hyper, seeds, batch, ordered)
    finally:
        close_hooks(owned)
    result = TrainResult(
        config=config, labels=labels, seeds=seeds, hyper=hyper, metrics=metrics,
        env_steps=env_steps_per_update(config, num_updates), state=state, out_dir=out_dir,
        seconds=time.perf_counter() - start, compile_seconds=compile_seconds,
    )
    if out_dir is not None and writer:
        result.plot(os.path.join(out_dir, "learning_curve.png"))
    return result
