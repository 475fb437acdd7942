"""Sweeps: settings × seeds, every run of one static config in one compiled program.

``sweep(experiment)`` expands the experiment's sweep section into settings
(``jaxpo.settings``: grid axes crossed, random axes drawn), checks every setting
before anything compiles, and trains settings × seeds. Runs that share
a static ``Config`` are one compiled program, run in groups of G runs (the last group
padded to G, so it reuses the program); settings that differ in a static field run
one program after another. Everything goes to ``<out>/<name>/``: ``metrics.csv``
(long format, appended per chunk), ``summary.csv`` (per run), ``groups.csv`` (per
setting across seeds: mean and IQM with 95% stratified-bootstrap CIs), a figure
and the resolved experiment file.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from collections import OrderedDict
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np

from jaxpo.config import Config, Hyper
from jaxpo.driver import (RUN_COLUMNS, Batch, Hook, MetricsCSV, ProgressBar, Run, ensure_writable,
                          env_steps_per_update, run_batch)
from jaxpo.experiment import Experiment, dump_yaml, from_dict, load_yaml
from jaxpo.learner import Trainer, trainer
from jaxpo.parallel import agree, describe, is_main_process, padded_size
from jaxpo.report import GROUP_STATS, group_statistics, plot_curves, run_summary, save_figure, write_csv, write_text
from jaxpo.settings import Setting, settings, typed_spec
from jaxpo.support import Support


def free_memory_bytes(device: jax.Device | None = None) -> int:
    """Free memory of ``device`` (default: the first): the allocator's limit minus its use on
    accelerators, the host's available memory on CPU."""
    device = device or jax.local_devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def group_size(tr: Trainer, num_runs: int, requested: int | None) -> int:
    """G, runs per compiled batch: ``requested``, or as many as fit in half the free memory
    of the devices they are split over; rounded up to a multiple of those devices."""
    if requested is None:
        requested = max(1, free_memory_bytes() // 2 * tr.run_multiple // tr.bytes_per_run())
    return padded_size(min(requested, num_runs), tr.run_multiple)


@dataclasses.dataclass
class Program:
    """The runs of one static config, and how they ran: groups of ``group_size`` runs,
    ``compiles`` of the chunk, ``first_chunk_seconds`` (compile included)."""

    config: Config
    num_updates: int
    runs: list[Run]
    settings: list[Setting]
    group_size: int = 0
    compiles: int = 0
    first_chunk_seconds: float = float("nan")
    metrics: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def env_steps(self) -> np.ndarray:
        return env_steps_per_update(self.config, self.num_updates)


@dataclasses.dataclass
class SweepResult:
    """What ``sweep`` returns: the experiment, its programs (runs, metrics ``[R_p, U_p]``),
    per-run ``summary`` rows, per-setting ``groups`` rows and the output directory."""

    experiment: Experiment
    programs: list[Program]
    summary: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    out_dir: str
    seconds: float

    @property
    def runs(self) -> list[Run]:
        return [run for p in self.programs for run in p.runs]

    def plot(self, path: str | None = None, metric: str = "return"):
        """Learning curves per setting: mean and 95% bootstrap band over its seeds."""
        return _plot(self, metric, path)


def _plan(experiment: Experiment) -> list[Program]:
    """Settings × seeds as runs, grouped by static config (in order of first appearance)."""
    programs: OrderedDict[Config, Program] = OrderedDict()
    seeds = range(experiment.run.seed, experiment.run.seed + experiment.run.seeds)
    run_id = 0
    for setting in settings(experiment):
        program = programs.setdefault(setting.config, Program(setting.config, setting.num_updates, [], []))
        for seed in seeds:
            program.runs.append(Run(run_id, f"{setting.label}/seed{seed}", setting.label, seed, setting.values))
            program.settings.append(setting)
            run_id += 1
    return list(programs.values())


def _default_name(experiment: Experiment, programs: list[Program]) -> str:
    what = "sweep" if experiment.sweep.axes else programs[0].settings[0].support.name
    return f"{experiment.config.env}-{what}-{time.strftime('%Y%m%d-%H%M%S')}"


def load(experiment: Experiment | str | Mapping | None = None, **sections: Mapping[str, Any]) -> Experiment:
    """An ``Experiment`` from an experiment, a YAML path or a dict, with ``sections``
    overriding fields (``run={"seeds": 4}``)."""
    if isinstance(experiment, str):
        experiment = load_yaml(experiment)
    elif experiment is None or isinstance(experiment, Mapping):
        experiment = from_dict(experiment)
    if not isinstance(experiment, Experiment):
        raise ValueError(f"experiment must be an Experiment, a YAML path or a mapping, got {type(experiment).__name__}")
    return experiment.replace(**sections)


@dataclasses.dataclass
class Plan:
    """A checked experiment, ready to run: its programs (runs grouped by static config)
    and its output directory (created and proven writable). Nothing is compiled yet."""

    experiment: Experiment
    programs: list[Program]
    out_dir: str

    @property
    def is_sweep(self) -> bool:
        return bool(self.experiment.sweep.axes)


def plan(experiment: Experiment | str | Mapping | None = None, **sections: Mapping[str, Any]) -> Plan:
    """Checks everything a run needs (every setting's config, env, support and
    hyperparameters; the output directory) and plans the programs. Raises ValueError
    naming the bad field; compiles nothing."""
    experiment = typed_spec(load(experiment, **sections))
    programs = _plan(experiment)
    name = experiment.run.name or _default_name(experiment, programs)
    out_dir = os.path.join(experiment.run.out, name)
    if is_main_process():
        ensure_writable(out_dir)
    experiment = experiment.replace(run={"name": name})
    sizes = [group_size(trainer(p.config), len(p.runs), experiment.run.runs_per_group) for p in programs]
    for program, size in zip(programs, agree(sizes)):  # free memory differs between hosts
        program.group_size = int(size)
    return Plan(experiment, programs, out_dir)


def sweep(experiment: Experiment | str | Mapping | None = None, *, log: Callable[[str], None] | None = None,
          hooks: Sequence[Hook] = (), **sections: Mapping[str, Any]) -> SweepResult:
    """Runs an experiment's sweep (or the single setting of an experiment without one).

    Args:
        experiment: an ``Experiment``, a YAML file path or a mapping of sections.
        log: called with progress lines (the CLI passes ``print``).
        hooks: more driver ``Hook``s, called around every group and after every chunk.
        sections: overrides, e.g. ``run={"seeds": 8}``, ``sweep={"grid": {"lr": [1e-3, 3e-3]}}``.
    Returns a ``SweepResult``; files go to ``<run.out>/<run.name>/``.
    """
    return execute(plan(experiment, **sections), log=log, hooks=hooks)


def execute(plan_: Plan, log: Callable[[str], None] | None = None, hooks: Sequence[Hook] = ()) -> SweepResult:
    """Trains a ``Plan``: program after program, group after group, then the reports.
    In a multi-process run every process calls this; only the main one writes files
    and logs (``hooks`` run on every process)."""
    writer = is_main_process()
    log = (log or (lambda line: None)) if writer else (lambda line: None)
    experiment, programs, out_dir = plan_.experiment, plan_.programs, plan_.out_dir
    trainers = [trainer(p.config) for p in programs]
    hooks = list(hooks)
    if writer:
        write_text(os.path.join(out_dir, "sweep.yaml" if plan_.is_sweep else "config.yaml"), dump_yaml(experiment))
        metric_names = sorted({m for tr in trainers for m in tr.metric_names})
        hooks.insert(0, MetricsCSV(os.path.join(out_dir, "metrics.csv"), experiment.sweep.axes, metric_names))
    total_chunks = sum(-(-len(p.runs) // p.group_size) * (p.num_updates // p.config.updates_per_chunk)
                       for p in programs)
    bar = None
    if experiment.run.progress and writer:
        bar = ProgressBar(total_chunks, desc="sweep" if plan_.is_sweep else "train")
    log(f"{sum(len(p.runs) for p in programs)} runs ({len({r.setting for p in programs for r in p.runs})} settings × "
        f"{experiment.run.seeds} seeds) in {len(programs)} program(s); runs per group: "
        f"{', '.join(str(p.group_size) for p in programs)}; {describe()}; writing to {out_dir}")
    start = time.perf_counter()
    try:
        for program, tr in zip(programs, trainers):
            _run_program(program, tr, hooks + ([bar] if bar else []))
    finally:
        if bar is not None:
            bar.close()
    result = SweepResult(experiment, programs, [], [], out_dir, time.perf_counter() - start)
    _write_reports(result, plan_.is_sweep, write=writer)
    return result


def _run_program(program: Program, tr: Trainer, hooks: Sequence) -> None:
    """Trains a program's runs group by group with one compiled chunk; fills its metrics."""
    compiles_before = tr.compiles["chunk"]
    size = program.group_size
    # Stacked once: every group then has the same support form (dense, or neighbour
    # lists of one width K), so they all share the program.
    all_hyper = Hyper.stack([s.hyper for s in program.settings])
    parts = []
    for lo in range(0, len(program.runs), size):
        runs = program.runs[lo:lo + size]
        hyper = jax.tree.map(lambda x: x[lo:lo + size], all_hyper)
        seeds = np.array([r.seed for r in runs])
        _, metrics, first = run_batch(tr, hyper, seeds, Batch(program.config, runs, program.num_updates), hooks,
                                      pad_to=size)
        if lo == 0:
            program.first_chunk_seconds = first
        parts.append(metrics)
    program.metrics = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    program.compiles = tr.compiles["chunk"] - compiles_before


def _write_reports(result: SweepResult, is_sweep: bool, write: bool = True) -> None:
    """Fills the result's summary and group rows; ``write``: also summary.csv, groups.csv
    and the figure."""
    axes = result.experiment.sweep.axes
    reps = result.experiment.run.bootstrap_reps
    summary_names: list[str] = []
    for program in result.programs:
        stats = run_summary(program.metrics)
        summary_names += [n for n in stats if n not in summary_names]
        for r, run in enumerate(program.runs):
            result.summary.append({"run_id": run.run_id, "label": run.label, "setting": run.setting, "seed": run.seed,
                                   **{a: run.values[a] for a in axes},
                                   "env_steps": int(program.env_steps[-1]),
                                   **{n: float(v[r]) for n, v in stats.items()}})
    header = [*RUN_COLUMNS, *axes, "env_steps", *summary_names]
    if write:
        write_csv(os.path.join(result.out_dir, "summary.csv"), header,
                  [[row.get(h, float("nan")) for h in header] for row in result.summary])

    settings_: OrderedDict[str, dict] = OrderedDict((row["setting"], row) for row in result.summary)
    for metric in [n for n in summary_names if n.startswith("final_")]:
        scores = {s: np.array([row.get(metric, np.nan) for row in result.summary if row["setting"] == s])
                  for s in settings_}
        for setting, stats in group_statistics(scores, reps=reps).items():
            result.groups.append({"setting": setting, **{a: settings_[setting][a] for a in axes},
                                  "metric": metric, **stats})
    if write:
        header = ["setting", *axes, "metric", "runs", *GROUP_STATS]
        write_csv(os.path.join(result.out_dir, "groups.csv"), header, [[row[h] for h in header] for row in result.groups])
        result.plot(os.path.join(result.out_dir, "sweep.png" if is_sweep else "learning_curve.png"))


def _plot(result: SweepResult, metric: str, path: str | None):
    """Every program's curves on one set of axes (programs may differ in env steps per update)."""
    ax = None
    for program in result.programs:
        ax = plot_curves(program.metrics[metric], program.env_steps, [r.setting for r in program.runs],
                         title=result.experiment.config.env, metric=metric, ax=ax)
    return save_figure(ax.figure, path)


# ------------------------------------------------------------------ the simple grid


def runs(supports: Support | Sequence[Support], seeds: Sequence[int] = (0,), **hparams) -> tuple[Hyper, np.ndarray, list[str]]:
    """The grid supports × seeds as one batch for ``jaxpo.train``: ``(Hyper [R], seeds [R], labels)``.

    ``hparams`` are ``Hyper.create`` keywords shared by every run.
    """
    supports = [supports] if isinstance(supports, Support) else list(supports)
    seeds = [int(s) for s in seeds]
    if not supports or not seeds:
        raise ValueError("supports and seeds must be non-empty")
    grid = list(itertools.product(supports, seeds))
    hyper = Hyper.stack([Hyper.create(sup, **hparams) for sup, _ in grid])
    return hyper, np.array([s for _, s in grid]), [f"{sup.name}/seed{s}" for sup, s in grid]
