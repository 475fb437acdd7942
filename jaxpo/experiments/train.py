"""``jaxpo.train``: R runs given in Python (a static ``Config``, their traced ``Hyper``
rows and seeds) as a one-program experiment, run by the same plan → execute → hooks
path as ``jaxpo.sweep`` and the CLI: the same files, checkpoints, resume check and
standard hooks.

The Hyper rows a call is given are data: the run directory keeps them as its run table
(``hyper.npz``: every run's row, label and seed; ``jaxpo.experiments.run_table``). The
experiment a call becomes holds its config and how it runs; when the rows are exactly
those an experiment's sections expand to (one setting: a preset support and shared
scalars, as ``jaxpo.runs`` builds them), its ``config.yaml`` is the CLI's, byte for byte,
else it holds only the sections that describe the runs (config, run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Sequence

import jax
import numpy as np

from jaxpo.core.checks import FieldError
from jaxpo.core.support import preset_of_name
from jaxpo.experiments.experiment import SECTIONS, Experiment, RunSettings
from jaxpo.experiments.settings import settings
from jaxpo.experiments.execution import execute
from jaxpo.experiments.plan import PlannedProgram, prepare
from jaxpo.experiments.results import SweepResult
from jaxpo.experiments.run_table import RunTable
from jaxpo.program.config import Config, Hyper
from jaxpo.program.compiled import trainer
from jaxpo.program.parallel import padded_size
from jaxpo.program.learner import TrainState
from jaxpo.run.events import Hook, Run, env_steps_per_update, setting_of
from jaxpo.run.periodic_eval import Evaluator
from jaxpo.run.report import FINAL_WINDOW, final_mean, plot_curves, save_figure


@dataclasses.dataclass
class TrainResult:
    """What ``train`` returns: the R runs' metrics, final state and statistics.

    Attributes:
        config: the static config.
        labels: one name per run (R).
        seeds: int [R].
        hyper: the batched ``Hyper`` ``[R, ...]``.
        metrics: name -> float64 [R, U] per train step.
        env_steps: int [U] — environment steps per run after each train step.
        state: final batched ``TrainState``.
        out_dir: where the files were written (None if not written).
        seconds: wall time of the run.
        compile_seconds: wall time of the first chunk (compile included).
        summary: per-run rows of ``summary.csv``.
        diverged: run id -> (update, metric names) of the runs that turned non-finite
            (``on_nan="mask"``).
        evaluation: with ``eval_every``, the ``Evaluator``: its ``results`` (each run's
            evaluations) and ``absolute`` (the absolute metric); else None.
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
    summary: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    diverged: dict[int, tuple[int, list[str]]] = dataclasses.field(default_factory=dict)
    evaluation: Evaluator | None = None

    def final(self, metric: str = "return", last: float = FINAL_WINDOW) -> np.ndarray:
        """Mean of ``metric`` over the last ``last`` fraction of train steps, per run.

        NaN values (updates in which no episode ended) are left out; NaN where the window holds none.

        Args:
            metric: a key of ``metrics`` (default ``"return"``).
            last: the fraction of train steps at the end to average over: the last
                ``round(last · U)`` steps, at least one (default 0.1).

        Returns:
            float ``[R]``.
        """
        return final_mean(self.metrics[metric], last)

    def final_return(self, last: float = FINAL_WINDOW) -> np.ndarray:
        """Mean return over the last ``last`` fraction of train steps, per run (``final("return", last)``).

        Args:
            last: the fraction of train steps at the end to average over: the last
                ``round(last · U)`` steps, at least one (default 0.1).

        Returns:
            float ``[R]``.
        """
        return self.final("return", last)

    def initial_return(self) -> np.ndarray:
        """Return of the untrained policy (first train step's rollout), per run.

        Returns:
            float ``[R]`` (NaN for a run in which no episode ended in the first train step).
        """
        return self.metrics["return"][:, 0]

    def plot(self, path: str | None = None, metric: str = "return"):
        """Learning curves, mean and 95% bootstrap band over each setting's seeds.

        Runs are grouped into settings by their labels (``<setting>/seed<k>``).

        Args:
            path: a PNG file to save the figure to (and close it); None: only return it.
            metric: the metric to plot, a key of ``metrics``.

        Returns:
            The matplotlib ``Figure``.
        """
        settings_ = [setting_of(label) for label in self.labels]
        ax = plot_curves(self.metrics[metric], self.env_steps, settings_, title=self.config.env, metric=metric)
        return save_figure(ax.figure, path)


def check_batch(config: Config, hyper: Hyper, seeds: Any, num_updates: Any, labels: Sequence[str] | None) -> tuple:
    """Validates ``train``'s arguments before anything compiles; returns
    ``(hyper [R, ...], seeds [R], labels)``."""
    if not isinstance(config, Config):
        raise ValueError(f"config must be a jaxpo.Config, got {type(config).__name__}")
    if not isinstance(hyper, Hyper):
        raise ValueError(f"hyper must be a jaxpo.Hyper (see jaxpo.runs / Hyper.stack), got {type(hyper).__name__}")
    seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
    if seeds.size == 0:
        raise ValueError("seeds must hold at least one integer seed")
    if (seeds < 0).any() or (seeds >= 2 ** 32).any():
        raise ValueError(f"seeds must be integers in [0, 2**32), got {seeds.tolist()}")
    num_runs = seeds.size
    if isinstance(num_updates, bool) or not isinstance(num_updates, (int, np.integer)) or num_updates < 1 \
            or num_updates % config.updates_per_chunk:
        raise ValueError(f"num_updates must be a positive multiple of Config.updates_per_chunk "
                         f"({config.updates_per_chunk}), got {num_updates!r}")
    if np.ndim(hyper.S_A) == 2:  # one Hyper for every seed
        hyper = Hyper.stack([hyper] * num_runs)
    if np.ndim(hyper.S_A) != 3 or hyper.S_A.shape[0] != num_runs:
        raise ValueError(f"hyper must be batched over {num_runs} runs (one per seed), got S_A {np.shape(hyper.S_A)}")
    if config.anneal_lr:  # its default horizon: the run's own length
        hyper = hyper.with_horizon(num_updates)
    labels = list(labels) if labels is not None else [f"run{i}" for i in range(num_runs)]
    if len(labels) != num_runs:
        raise ValueError(f"labels must have one entry per run ({num_runs}), got {len(labels)}")
    if not all(isinstance(label, str) and label for label in labels):
        raise ValueError(f"labels must be non-empty strings, got {labels!r}")
    if len(set(labels)) != num_runs:
        raise ValueError(f"labels must be unique (they name the runs in every file), got {labels!r}")
    num_agents = trainer(config).num_agents
    if hyper.S_A.shape[1:] != (num_agents, num_agents):
        raise ValueError(
            f"support matrices are {hyper.S_A.shape[1]}x{hyper.S_A.shape[2]} but the environment "
            f"{config.env!r} has {num_agents} agents"
        )
    return hyper, seeds, labels


def _described(base: Experiment, hyper: Hyper, seeds: np.ndarray, labels: list[str]) -> Experiment | None:
    """The experiment whose sections expand to exactly these runs (labels, seeds and
    traced values, bitwise), when there is one: one setting of a preset support
    (its label as ``jaxpo.runs`` names it) with shared scalars and consecutive seeds."""
    preset = preset_of_name(setting_of(labels[0]))
    if preset is None or not np.array_equal(seeds, seeds[0] + np.arange(seeds.size)):
        return None
    support = {"preset": preset[0], **({"kappa": preset[1]} if preset[1] is not None else {})}
    # float32 values as the shortest decimals that give them back (0.003, not 0.0030000000261)
    scalars = {name: float(str(np.float32(np.asarray(v)[0]))) for name, v in _row_scalars(hyper).items()}
    try:
        candidate = base.replace(hyper=scalars, support=support, run={"seeds": int(seeds.size), "seed": int(seeds[0])})
        (point,) = settings(candidate)
    except ValueError:
        return None
    expected = [f"{point.label}/seed{s}" for s in seeds]
    rows, given = (jax.tree_util.tree_flatten(h) for h in (Hyper.stack([point.hyper] * seeds.size), hyper))
    same = rows[1] == given[1] and all(np.shape(a) == np.shape(b) and np.array_equal(a, b)
                                       for a, b in zip(rows[0], given[0]))
    return candidate if same and expected == labels else None


# What train's arguments are called in the experiment it becomes (its errors name the arguments).
ARGUMENTS = {"run.steps": "num_updates (as env steps)", "run.seeds": "seeds", "run.name": "out_dir", "run.out": "out_dir",
             "run.progress": "progress", "run.log": "log", "run.checkpoint_every": "checkpoint_every",
             "run.checkpoint": "checkpoint", "run.keep": "keep", "run.on_nan": "on_nan",
             "run.eval_every": "eval_every", "run.eval_episodes": "eval_episodes", "run.eval_greedy": "eval_greedy",
             "run.absolute_episodes": "absolute_episodes"}


@contextlib.contextmanager
def _as_arguments():
    """FieldErrors raised inside name ``train``'s arguments (``ARGUMENTS``), not the experiment's fields."""
    try:
        yield
    except FieldError as err:
        raise err.renamed(ARGUMENTS) from None


def _row_scalars(hyper: Hyper) -> dict[str, Any]:
    """The batched scalar fields of ``hyper``: name -> ``[R]``."""
    return {name: getattr(hyper, name) for name in Hyper.scalar_bounds()}


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
    checkpoint: bool = True,
    checkpoint_every: int = 0,
    keep: int = 3,
    resume: bool = False,
    log: str = "csv",
    eval_every: int = 0,
    eval_episodes: int = 32,
    eval_greedy: bool = True,
    absolute_episodes: int | None = None,
) -> TrainResult:
    """Trains R runs for ``num_updates`` updates each in one compiled program.

    Args:
        config: static configuration.
        hyper: batched ``Hyper`` with leading axis R (see ``jaxpo.runs`` / ``Hyper.stack``),
            or a single ``Hyper`` used for every seed.
        seeds: R integer seeds (one per run).
        num_updates: train steps per run, a multiple of ``config.updates_per_chunk``.
        labels: R unique run names for the files and plots (default ``run{i}``);
            ``<setting>/seed<k>`` groups runs into settings.
        out_dir: if given, the run directory: ``config.yaml``, ``metrics.csv`` (appended
            per chunk), ``summary.csv``, ``groups.csv``, ``learning_curve.png`` and the
            checkpoints, as ``jaxpo train`` writes them (by the main process only, in a
            multi-process run). None: nothing is written.
        progress: show a progress bar over chunks (main process only).
        hooks: more ``Hook``s called after every chunk, on every process.
        on_nan: a run turning non-finite raises ``NonFiniteError`` ("stop") or is masked
            ("mask"; see ``jaxpo.run.guard``).
        checkpoint: with ``out_dir``, save the final training state (``jaxpo.load_policy``,
            eval, render and resume read it).
        checkpoint_every: also save a checkpoint every this many chunks, keeping the last ``keep``.
        keep: the latest checkpoints kept, >= 1 (besides the final one and the last before a divergence).
        resume: continue from ``out_dir``'s latest checkpoint (same config, hyper, seeds
            and labels, or a ValueError naming the difference); ``num_updates`` may grow
            (not under ``anneal_lr`` with its default horizon, the run's length: that
            schedule would change; give ``hyper.lr_horizon`` explicitly to extend one).
        log: loggers for ``out_dir``, comma-separated: csv, tensorboard, wandb.
        eval_every: evaluate every this many env steps per run (0: never), and at the end
            play the absolute metric with each run's best evaluated parameters
            (``jaxpo.run.periodic_eval``).
        eval_episodes: episodes per run and evaluation.
        eval_greedy: evaluate the most likely actions (True) or sampled ones.
        absolute_episodes: episodes of the absolute metric (None: 10 × ``eval_episodes``; 0: none).

    Returns:
        The ``TrainResult``: metrics ``[R, U]``, the final batched state, summary rows.

    Raises:
        ValueError: a bad argument (named; e.g. ``checkpoint_every`` or ``resume`` without
            ``out_dir``), or a checkpoint that does not fit.
        NonFiniteError: a run diverged with ``on_nan="stop"``.
    """
    hyper, seeds, labels = check_batch(config, hyper, seeds, num_updates, labels)
    if (checkpoint_every or resume) and out_dir is None:
        raise ValueError("checkpoint_every and resume need out_dir (where the checkpoints are)")
    write = out_dir is not None
    out, name = os.path.split(os.path.abspath(out_dir)) if write else (".", None)
    if write and not name:
        raise ValueError(f"out_dir must name a directory (not the file system's root), got {out_dir!r}")
    with _as_arguments():
        run = RunSettings(steps=int(num_updates) * config.steps_per_update, seeds=int(seeds.size), out=out,
                          name=name, progress=progress, log=log, checkpoint=bool(checkpoint and write),
                          checkpoint_every=checkpoint_every, keep=keep, on_nan=on_nan, eval_every=eval_every,
                          eval_episodes=eval_episodes, eval_greedy=eval_greedy, absolute_episodes=absolute_episodes)
        base = Experiment(config=config, run=run)
        described = _described(base, hyper, seeds, labels)
        # Rows no experiment describes: each run's scalars are its values (the loggers' hyperparameters).
        values = [{} if described else {f"hyper.{k}": float(np.asarray(v)[r]) for k, v in _row_scalars(hyper).items()}
                  for r in range(seeds.size)]
        runs = [Run(i, label, setting_of(label), int(seed), values[i])
                for i, (label, seed) in enumerate(zip(labels, seeds))]
        program = PlannedProgram(config, int(num_updates), tuple(runs), (), hyper)
        table = RunTable(hyper, list(labels), np.array([r.seed for r in runs]))
        # One group of every run, as one program call: train's results never depend on free memory.
        plan = prepare(described or base, [program], resume=resume, write=write, table=table,
                       sections=SECTIONS if described else ("config", "run"),
                       group_sizes=[padded_size(seeds.size, trainer(config).run_multiple)])
    result: SweepResult = execute(plan, hooks=hooks)
    (trained,) = result.programs
    return TrainResult(
        config=config, labels=labels, seeds=seeds, hyper=hyper, metrics=trained.metrics,
        env_steps=env_steps_per_update(config, num_updates), state=trained.state, out_dir=plan.out_dir,
        seconds=result.seconds, compile_seconds=trained.first_chunk_seconds, summary=result.summary,
        diverged=result.diverged, evaluation=result.evaluation,
    )

