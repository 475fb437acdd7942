"""What executing a plan returns: per program a ``ProgramResult`` (the planned program
and how it ran), and the ``SweepResult`` that ``jaxpo.sweep`` and ``jaxpo.resume`` hand back."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from jaxpo.experiments.experiment import Experiment
from jaxpo.experiments.plan import PlannedProgram
from jaxpo.program.config import Config, Hyper
from jaxpo.run.events import Run
from jaxpo.run.periodic_eval import Evaluator
from jaxpo.run.report import plot_curves, save_figure
from jaxpo.run.steering import Steering


@dataclasses.dataclass(frozen=True)
class ProgramResult:
    """How one planned program ran.

    Attributes:
        plan: the ``PlannedProgram``.
        read_metrics: reads the metrics back (from the run's ``metrics.csv``, or memory
            where no such file was written); ``metrics`` calls it.
        state: the last group's final batched ``TrainState`` (padding included).
        compiles: traces of the chunk during this execution.
        first_chunk_seconds: wall time of the first chunk trained here (compile
            included); NaN when nothing was left to train.
        resumed_updates: updates per run that came from a checkpoint, not trained here.
        population: a steered program's ``Steering`` (its history and step compiles); else None.
    """

    plan: PlannedProgram
    read_metrics: Callable[[], dict[str, np.ndarray]]
    state: Any
    compiles: int
    first_chunk_seconds: float
    resumed_updates: int = 0
    population: Steering | None = None

    @property
    def metrics(self) -> dict[str, np.ndarray]:
        """name -> float64 ``[R, U]`` (R runs × U updates), read on each access (nothing
        per update is held in memory when the run has a metrics file)."""
        return self.read_metrics()

    @property
    def config(self) -> Config:
        """The program's static config."""
        return self.plan.config

    @property
    def runs(self) -> tuple[Run, ...]:
        """The program's runs."""
        return self.plan.runs

    @property
    def hyper(self) -> Hyper:
        """The runs' starting traced values ``[R, ...]``."""
        return self.plan.hyper

    @property
    def num_updates(self) -> int:
        """Updates per run."""
        return self.plan.num_updates

    @property
    def group_size(self) -> int:
        """Runs per compiled group."""
        return self.plan.group_size

    @property
    def env_steps(self) -> np.ndarray:
        """int ``[U]``: env steps per run after each update."""
        return self.plan.env_steps

    @property
    def steps_per_chunk(self) -> int:
        """Env steps per run in one chunk."""
        return self.plan.steps_per_chunk


@dataclasses.dataclass
class SweepResult:
    """What ``sweep`` and ``resume`` return: the experiment, its programs, per-run and
    per-setting statistics and the output directory.

    Attributes:
        experiment: the experiment that ran (``run.name`` filled in).
        programs: one ``ProgramResult`` per static config, in order of first appearance:
            its runs, ``metrics`` (name -> ``[R_p, U_p]``), ``env_steps`` ``[U_p]``, group
            size, compiles, ``first_chunk_seconds`` and the last group's final batched ``state``.
        summary: one row per run, as in ``summary.csv``: run_id, label, setting, seed, the
            axes' values, env_steps, initial / final / best return (and win rate),
            diverged_at_update.
        groups: one row per setting and ``final_*`` metric, as in ``groups.csv``: the
            axes' values, runs, mean and IQM with 95% stratified-bootstrap CIs.
        out_dir: the output directory ``<run.out>/<run.name>/``.
        seconds: wall time of the training, reports not included.
        diverged: run id -> ``(update, metric names)`` of the runs that became
            non-finite and were masked.
        evaluation: with ``run.eval_every > 0``, the ``Evaluator``: its ``results`` (each
            run's evaluations) and ``absolute`` (the absolute metric); else None.
    """

    experiment: Experiment
    programs: list[ProgramResult]
    summary: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    out_dir: str | None
    seconds: float
    diverged: dict[int, tuple[int, list[str]]] = dataclasses.field(default_factory=dict)
    evaluation: Evaluator | None = None

    @property
    def runs(self) -> list[Run]:
        """Every run (id, label, setting, seed, axis values), program after program."""
        return [run for p in self.programs for run in p.runs]

    def plot(self, path: str | None = None, metric: str = "return"):
        """Learning curves per setting: mean and 95% bootstrap band over its seeds.

        Every program's curves share one set of axes, against environment steps
        (programs may differ in env steps per update).

        Args:
            path: a PNG file to save the figure to (and close it); None: only return it.
            metric: the metric to plot, a key of the programs' ``metrics``.

        Returns:
            The matplotlib ``Figure``.
        """
        ax = None
        for program in self.programs:
            ax = plot_curves(program.metrics[metric], program.env_steps, [r.setting for r in program.runs],
                             title=self.experiment.config.env, metric=metric, ax=ax)
        return save_figure(ax.figure, path)
