"""Every file of a run directory that is not a checkpoint or a logger's: the experiment
file (``config.yaml``, ``sweep.yaml``), the run table (``hyper.npz``), the reports
(``summary.csv``, ``groups.csv``, the learning-curve figure), a steered sweep's lineage
(``lineage.csv``, ``samples.csv``, ``population.png``) and PBT's ``best_schedule.yaml``.
Every file is written whole and atomically, by the main process only (the caller's check).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from jaxpo.experiments.experiment import dump_yaml
from jaxpo.experiments.plan import Plan, PlannedProgram
from jaxpo.experiments.results import ProgramResult, SweepResult
from jaxpo.experiments.run_table import FILE as RUN_TABLE
from jaxpo.experiments.steering import best_schedule
from jaxpo.run.events import RUN_COLUMNS
from jaxpo.run.halving import Halving
from jaxpo.run.report import (GROUP_STATS, group_statistics, plot_population, read_csv, run_summary, save_figure,
                              write_csv, write_text)
from jaxpo.run.steering import Steering


def write_experiment(plan: Plan) -> None:
    """``config.yaml`` (``sweep.yaml`` for a sweep): the resolved experiment, which runs it
    again; and for Hyper rows given as data, ``hyper.npz`` (every run's row, label and
    seed). Rows no experiment describes leave ``config.yaml`` only the sections that do
    (config, run), headed by a note pointing to ``hyper.npz``.

    Args:
        plan: the plan whose directory is written (``out_dir`` not None).
    """
    experiment, out_dir = plan.experiment, plan.out_dir
    if plan.table is not None:
        plan.table.write(os.path.join(out_dir, RUN_TABLE))
    if plan.describes_runs:
        write_text(os.path.join(out_dir, "sweep.yaml" if plan.is_sweep else "config.yaml"), dump_yaml(experiment))
        return
    write_text(os.path.join(out_dir, "config.yaml"),
               "# Trained by jaxpo.train with each run's traced values (Hyper rows) given in Python: they are in\n"
               "# hyper.npz beside this file; the hyper and support sections here would not describe them.\n"
               + dump_yaml(experiment, sections=plan.sections))


def lineage_sink(program: PlannedProgram, out_dir: str) -> Callable[[Steering], None]:
    """What a steered program's ``Steering`` calls after every step and load:
    ``lineage.csv`` (and for halving ``samples.csv``, every trial with its budget, the
    trials still training standing at the latest step), rewritten whole and atomically.

    Args:
        program: the steered program.
        out_dir: its run directory.

    Returns:
        ``sink(steering)``.
    """
    return lambda steering: write_lineage(program, out_dir, steering)


def write_lineage(program: PlannedProgram, out_dir: str, steering: Steering, last_chunk: int | None = None) -> None:
    """``lineage.csv`` (and for halving ``samples.csv``) of ``steering`` now.

    Args:
        program: the steered program.
        out_dir: its run directory.
        steering: its ``Steering``.
        last_chunk: where the trials still training stand (default: the latest step).
    """
    run_ids = [run.run_id for run in program.runs]
    write_csv(os.path.join(out_dir, "lineage.csv"), *steering.lineage_rows(run_ids, program.steps_per_chunk))
    if isinstance(steering, Halving):
        end = steering.chunks[-1] if last_chunk is None else last_chunk
        write_csv(os.path.join(out_dir, "samples.csv"), *steering.trials(run_ids, program.steps_per_chunk, end))


def write_population_files(program: PlannedProgram, out_dir: str, steering: Steering) -> None:
    """After a steered group: the lineage with the trials' final budgets and ``population.png``.

    Args:
        program: the steered program.
        out_dir: its run directory.
        steering: its ``Steering``.
    """
    write_lineage(program, out_dir, steering, last_chunk=program.num_chunks - 1)
    figure = plot_population(read_csv(os.path.join(out_dir, "lineage.csv")),
                             [axis.name for axis in steering.table.axes],
                             end=program.num_chunks * program.steps_per_chunk,
                             title=f"{program.config.env}: {steering.kind}")
    save_figure(figure, os.path.join(out_dir, "population.png"))


def summary_rows(programs: Sequence[ProgramResult], axes: Sequence[str], diverged: Mapping[int, Any]
                 ) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per run, as in ``summary.csv``, and the statistics' names.

    Args:
        programs: the executed programs.
        axes: the sweep's axis names.
        diverged: run id -> ``(update, metric names)``.

    Returns:
        ``(rows, statistic names)``.
    """
    rows: list[dict[str, Any]] = []
    names: list[str] = []
    for program in programs:
        stats = run_summary(program.metrics)
        names += [n for n in stats if n not in names]
        for r, run in enumerate(program.runs):
            rows.append({"run_id": run.run_id, "label": run.label, "setting": run.setting, "seed": run.seed,
                         **{a: run.values[a] for a in axes}, "env_steps": int(program.env_steps[-1]),
                         **{n: float(v[r]) for n, v in stats.items()},
                         "diverged_at_update": diverged.get(run.run_id, ("",))[0]})
    return rows, names


def group_rows(summary: Sequence[Mapping[str, Any]], names: Sequence[str], axes: Sequence[str], reps: int
               ) -> list[dict[str, Any]]:
    """One row per setting and ``final_*`` statistic, as in ``groups.csv``.

    Args:
        summary: the per-run rows.
        names: the statistics' names.
        axes: the sweep's axis names.
        reps: bootstrap resamples.

    Returns:
        The rows: the axes' values, runs, mean and IQM with 95% stratified-bootstrap CIs.
    """
    settings_: OrderedDict[str, Mapping] = OrderedDict((row["setting"], row) for row in summary)
    rows = []
    for metric in [n for n in names if n.startswith("final_")]:
        scores = {s: np.array([row.get(metric, np.nan) for row in summary if row["setting"] == s]) for s in settings_}
        for setting, stats in group_statistics(scores, reps=reps).items():
            rows.append({"setting": setting, **{a: settings_[setting][a] for a in axes}, "metric": metric, **stats})
    return rows


def write_reports(result: SweepResult, names: Sequence[str], is_sweep: bool) -> None:
    """``summary.csv``, ``groups.csv`` and the figure (``sweep.png`` or ``learning_curve.png``).

    Args:
        result: the finished result (``out_dir`` not None).
        names: the summary's statistics' names.
        is_sweep: the experiment has sweep axes.
    """
    axes = result.experiment.sweep.axes
    header = [*RUN_COLUMNS, *axes, "env_steps", *names, "diverged_at_update"]
    write_csv(os.path.join(result.out_dir, "summary.csv"), header,
              [[row.get(h, float("nan")) for h in header] for row in result.summary])
    header = ["setting", *axes, "metric", "runs", *GROUP_STATS]
    write_csv(os.path.join(result.out_dir, "groups.csv"), header, [[row[h] for h in header] for row in result.groups])
    result.plot(os.path.join(result.out_dir, "sweep.png" if is_sweep else "learning_curve.png"))


def write_best_schedule(result: SweepResult) -> None:
    """``best_schedule.yaml``: ``jaxpo train --config`` it to train the best PBT member's
    schedule as one run (nothing when no member has a finite score).

    Args:
        result: a finished PBT sweep.
    """
    found = best_schedule(result)
    if found is None:
        return
    run, replay = found
    write_text(os.path.join(result.out_dir, "best_schedule.yaml"),
               f"# The schedule of PBT member {run.label} (run {run.run_id}), the best final return of the sweep in\n"
               f"# {result.out_dir}: the values its learner trained under, from its first ancestor's seed.\n"
               f"# jaxpo train --config this-file\n" + dump_yaml(replay))
