"""Executing a plan: the standard hooks, then program after program, group after group
(``jaxpo.run.driver.run_group``), then the reports. The plan is read, never changed:
each program's outcome comes back as a ``ProgramResult``.

The standard hooks, in order: the loggers (``run.log``), evaluation during training
(``run.eval_every``), the caller's hooks, the checkpointer (``run.checkpoint``: every
group's final state, and every ``run.checkpoint_every`` chunks), the progress bar. The
NaN guard is a step of the loop before them all (``jaxpo.run.guard``).

Where the run has a metrics file (``metrics.csv``), checkpoints hold no metrics: a
resumed plan keeps the file's rows up to the checkpoint (``MetricsCSV.resume``) and
results read them there (``CSVHistory``); without one, memory keeps them and every
checkpoint too (``MetricsHistory``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Callable, Sequence

import jax
import numpy as np

from jaxpo.experiments import artifacts
from jaxpo.experiments.experiment import to_dict
from jaxpo.experiments.plan import Plan, PlannedProgram, traced_digests
from jaxpo.experiments.results import ProgramResult, SweepResult
from jaxpo.experiments.steering import eval_scorer
from jaxpo.program.compiled import Trainer, trainer
from jaxpo.program.parallel import describe, is_main_process
from jaxpo.run import checkpoint
from jaxpo.run.driver import run_group
from jaxpo.run.events import Group, Hook, Resumed, close_hooks
from jaxpo.run.guard import NanGuard
from jaxpo.run.history import CSVHistory, MetricsHistory
from jaxpo.run.loggers import MetricsCSV, ProgressBar, RunLogger, make_loggers, parse_loggers
from jaxpo.run.periodic_eval import Evaluator


METRICS = "metrics.csv"


@dataclasses.dataclass
class _Hooks:
    """The standard hooks of an execution: ``owned`` (made here, closed here), ``all``
    (in calling order), the metrics CSV, the evaluator, the NaN guard and ``history``,
    where the runs' metrics are read back from (the CSV, or memory without one)."""

    owned: list[Hook]
    all: list[Hook]
    csv: MetricsCSV | None
    evaluator: Evaluator | None
    guard: NanGuard
    history: CSVHistory | MetricsHistory


def _standard_hooks(plan: Plan, trainers: Sequence[Trainer], hooks: Sequence[Hook], log: Callable[[str], None],
                    writer: bool) -> _Hooks:
    """The loggers, evaluator, NaN guard, checkpointer and progress bar of ``plan``."""
    experiment, programs, out_dir, run = plan.experiment, plan.programs, plan.out_dir, plan.experiment.run
    context = to_dict(experiment)
    logs: list[Hook] = []
    csv = None
    if writer and out_dir is not None:
        loggers = parse_loggers(run.log)
        if "csv" in loggers:
            # each program's chunk, traced for its groups: the trace its first chunk then runs
            names = {m for p, tr in zip(programs, trainers) for m in tr.metric_names(p.group_size, p.hyper)}
            csv = MetricsCSV(os.path.join(out_dir, METRICS), experiment.sweep.axes, sorted(names),
                             keep=plan.resume is not None)  # until the resumed groups' rows replace it
            logs.append(csv)
        # the loggers' hyperparameters: the sections that describe the runs (jaxpo.train rows
        # no experiment describes carry their own scalars in their values)
        logs += make_loggers(loggers, out_dir, {k: v for k, v in context.items() if k in plan.sections})
    evaluator = None
    if run.eval_every:
        evaluator = Evaluator(run.eval_every, run.eval_episodes, run.eval_greedy, run.absolute_episodes,
                              out_dir, [h for h in logs if isinstance(h, RunLogger) and h is not csv],
                              resume=plan.resume is not None, write=writer and out_dir is not None)
    # a run without a metrics file keeps its metrics in memory: results and checkpoints read them there
    history = CSVHistory(csv.file.path) if csv is not None else MetricsHistory()
    # PBT and halving replace a diverged member at their next step: never a sweep-ending error
    on_nan = "mask" if experiment.sweep.schedule != "none" else run.on_nan
    guard = NanGuard(on_nan, log=log, diverged=plan.resume.meta.get("diverged") if plan.resume else None)
    saver = None
    if run.checkpoint and out_dir is not None:
        meta = {"experiment": context, "sections": list(plan.sections), "program_runs": [len(p.runs) for p in programs],
                "group_sizes": [p.group_size for p in programs], "traced": traced_digests(programs)}
        pinned = plan.resume.meta["pinned"] if plan.resume else ()
        # with a metrics file (every process decides alike: they save each step together), steps
        # hold no metrics, a history that would grow with every update
        kept = METRICS if "csv" in parse_loggers(run.log) else history
        saver = checkpoint.Checkpointer(out_dir, run.checkpoint_every, run.keep, meta, pinned, kept)
    total = sum(len(p.groups()) * p.num_chunks for p in programs)
    done = plan.resume.step if plan.resume else 0
    bar = ProgressBar(total, "sweep" if plan.is_sweep else "train", done) if run.progress and writer else None
    tail = [h for h in (saver, bar) if h is not None]
    evaluation = [] if evaluator is None else [evaluator]
    return _Hooks([*logs, *tail], [*logs, history, *evaluation, *hooks, *tail], csv, evaluator, guard, history)


def execute(plan: Plan, log: Callable[[str], None] | None = None, hooks: Sequence[Hook] = ()) -> SweepResult:
    """Trains a ``Plan``: program after program, group after group, then the reports.

    In a multi-process run every process calls this; only the main one writes files
    and logs (``hooks``, the NaN guard and checkpoints run on every process).

    Args:
        plan: the plan (``jaxpo.experiments.plan``).
        log: called with progress lines (the CLI passes ``print``).
        hooks: more driver ``Hook``s, after evaluation and before the checkpointer.

    Returns:
        The ``SweepResult``.

    Raises:
        NonFiniteError: a run diverged with ``run.on_nan`` "stop" (and no schedule).
    """
    writer = is_main_process()
    log = (log or (lambda line: None)) if writer else (lambda line: None)
    experiment, programs, out_dir = plan.experiment, plan.programs, plan.out_dir
    trainers = [trainer(p.config) for p in programs]
    traced_before = [tr.compiles["chunk"] for tr in trainers]  # a program's count includes the CSV header's trace
    if writer and out_dir is not None:
        artifacts.write_experiment(plan)
    standard = _standard_hooks(plan, trainers, hooks, log, writer)
    resume_at = plan.resume.meta["group"] if plan.resume else -1
    num_runs = sum(len(p.runs) for p in programs)
    num_settings = len({r.setting for p in programs for r in p.runs})
    log(f"{num_runs} runs ({num_settings} settings × {num_runs // num_settings} seeds) in {len(programs)} program(s); "
        f"runs per group: {', '.join(str(p.group_size) for p in programs)}; {describe()}"
        + (f"; writing to {out_dir}" if out_dir is not None else "")
        + (f"; resuming from checkpoint {plan.resume.step} (group {resume_at}, chunk {plan.resume.chunk})"
           if plan.resume else ""))
    start = time.perf_counter()
    results, index = [], 0
    try:
        for program, tr, before in zip(programs, trainers, traced_before):
            outcome, index = _run_program(plan, program, tr, standard, index, resume_at, before, writer)
            results.append(outcome)
    finally:
        close_hooks(standard.owned)
    seconds = time.perf_counter() - start
    diverged = dict(standard.guard.diverged)
    axes = experiment.sweep.axes
    summary, names = artifacts.summary_rows(results, axes, diverged)
    # a plan without files (jaxpo.train without out_dir) skips the group statistics' bootstrap
    groups = artifacts.group_rows(summary, names, axes, experiment.run.bootstrap_reps) if out_dir is not None else []
    result = SweepResult(experiment, results, summary, groups, out_dir, seconds, diverged, standard.evaluator)
    if writer and out_dir is not None:
        artifacts.write_reports(result, names, plan.is_sweep)
        if experiment.sweep.schedule == "pbt":
            artifacts.write_best_schedule(result)
    return result


def _run_program(plan: Plan, program: PlannedProgram, tr: Trainer, standard: _Hooks, index: int, resume_at: int,
                 compiles_before: int, writer: bool) -> tuple[ProgramResult, int]:
    """Trains a program's runs group by group with one compiled chunk. Groups before
    group ``resume_at`` are finished (their metrics are read from the metrics file, or
    their last checkpoint), that one continues from the latest. ``compiles_before``: the
    trainer's chunk traces before the execution began. Returns the program's result and
    the next group index."""
    out_dir, size = plan.out_dir, program.group_size
    files = out_dir is not None and writer
    steering = None
    if program.steering is not None:
        scorer = eval_scorer(program.config, program.runs, plan.experiment.run) if plan.experiment.run.eval_every \
            else None  # rank on the evaluation's metric where it is on
        steering = program.steering.build(scorer, artifacts.lineage_sink(program, out_dir) if files else None)
    groups, state, first, resumed_updates = [], None, math.nan, 0
    for g, lo in enumerate(program.groups()):
        runs = program.runs[lo:lo + size]
        group = Group(program.config, list(runs), program.num_updates, index,
                      program.offset + g * program.num_chunks)
        groups.append(group)
        index += 1
        if group.index <= resume_at:
            group = _resume(group, tr, out_dir, standard, last=group.index == resume_at)
            resumed_updates = group.resumed.chunk * program.config.updates_per_chunk
            if group.resumed.chunk == group.num_chunks:
                if group.resumed.metrics is not None:
                    standard.history.add(group, group.resumed.metrics)
                state = group.resumed.state if group.resumed.state is not None else state
                continue
        hyper = jax.tree.map(lambda x: x[lo:lo + size], program.hyper)
        seeds = np.array([r.seed for r in runs])
        if steering is not None and steering.on_step is not None:
            steering.on_step(steering)
        state, seconds = run_group(tr, hyper, seeds, group, standard.all, pad_to=size, guard=standard.guard,
                                   population=steering)
        if steering is not None and files:
            artifacts.write_population_files(program, out_dir, steering)
        if math.isnan(first):
            first = seconds
    history = standard.history
    read = lambda: _concatenate([history(g) for g in groups])
    return ProgramResult(program, read, state, tr.compiles["chunk"] - compiles_before, first, resumed_updates,
                         steering), index


def _resume(group: Group, tr: Trainer, out_dir: str, standard: _Hooks, last: bool) -> Group:
    """``group`` with what its checkpoint holds: the last step of a group finished
    before the plan's checkpoint (its metrics, where the step holds them), else (``last``)
    the newest step's state and metrics. Its rows of the metrics file are kept up to the
    checkpoint (or written from it); where the file holds its metrics and this execution
    keeps them in memory (``run.log`` without csv now), they are read from the file."""
    if not last:
        found = checkpoint.restore(out_dir, step=group.chunk_offset + group.num_chunks)
    else:
        found = checkpoint.restore(out_dir, target=lambda meta: tr.abstract_state(meta["state_runs"]),
                                   accept=lambda meta: meta["group"] == group.index)
    metrics, updates = found.metrics, found.chunk * group.config.updates_per_chunk
    if metrics is None:
        standard.history.learn(group, found.meta["metric_names"])
        if isinstance(standard.history, MetricsHistory):
            path = os.path.join(out_dir, found.meta["metrics_file"])
            metrics = CSVHistory(path)(group, found.meta["metric_names"], updates=updates)
    if standard.csv is not None:
        standard.csv.resume(group, found.metrics, found.chunk, last)
    return dataclasses.replace(group, resumed=Resumed(found.chunk, found.state, metrics, found.population))


def _concatenate(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Groups' metrics ``[G_i, U]`` as one ``[R, U]`` per name."""
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
