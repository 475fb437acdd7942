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
import math
import os
import time
from collections import OrderedDict
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np

from jaxpo.core.support import Support
from jaxpo.experiments.experiment import Experiment, dump_yaml, from_dict, load_yaml, to_dict, typed_value
from jaxpo.experiments.settings import Setting, settings, sweepable, typed_spec
from jaxpo.program.config import Config, Hyper
from jaxpo.program.compiled import Trainer, trainer
from jaxpo.program.parallel import agree, describe, gather, is_main_process, padded_size
from jaxpo.run import checkpoint
from jaxpo.run.driver import run_group
from jaxpo.run.events import RUN_COLUMNS, Group, Hook, Run, close_hooks, env_steps_per_update
from jaxpo.run.guard import NanGuard
from jaxpo.run.loggers import MetricsCSV, ProgressBar, RunLogger, make_loggers, parse_loggers
from jaxpo.run.periodic_eval import Evaluator
from jaxpo.run.population import Axis, Halving, Population, PopulationTable, Replay, ancestry
from jaxpo.run.report import (GROUP_STATS, ensure_writable, group_statistics, plot_curves, plot_population, read_csv,
                              run_summary, save_figure, file_name, write_atomic, write_csv, write_text)


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
    """G, runs per compiled group: ``requested``, or as many as fit in half the free memory
    of the devices they are split over; rounded up to a multiple of those devices."""
    if requested is None and num_runs <= tr.run_multiple:
        requested = num_runs  # one group holds them all: no memory estimate (it traces a rollout) needed
    elif requested is None:
        requested = max(1, free_memory_bytes() // 2 * tr.run_multiple // tr.bytes_per_run())
    return padded_size(min(requested, num_runs), tr.run_multiple)


@dataclasses.dataclass
class Program:
    """The runs of one static config (``settings``: each run's; ``hyper``: their traced
    values), and how they ran:
    groups of ``group_size`` runs, ``compiles`` of the chunk, ``first_chunk_seconds``
    (compile included), the metrics ``[R, U]`` and the last group's final batched
    ``state`` (padding included)."""

    config: Config
    num_updates: int
    runs: list[Run]
    settings: list[Setting]
    group_size: int = 0
    offset: int = 0  # chunks of the plan before this program's first group
    resumed_updates: int = 0  # updates per run that came from a checkpoint, not trained here
    compiles: int = 0
    first_chunk_seconds: float = float("nan")
    metrics: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    state: Any = None
    # The runs' traced values [R, ...], stacked once: every group then has the same
    # support form (dense, or neighbour lists of one width K), so they all share the program.
    hyper: Hyper | None = None
    population: Population | None = None  # sweep.schedule pbt: its exploit/explore and lineage

    @property
    def env_steps(self) -> np.ndarray:
        return env_steps_per_update(self.config, self.num_updates)

    @property
    def num_chunks(self) -> int:
        return self.num_updates // self.config.updates_per_chunk

    @property
    def steps_per_chunk(self) -> int:
        """Env steps per run in one chunk."""
        return self.config.updates_per_chunk * self.config.steps_per_update

    def groups(self) -> range:
        """The first run of each group."""
        return range(0, len(self.runs), self.group_size)


@dataclasses.dataclass
class SweepResult:
    """What ``sweep`` and ``resume`` return: the experiment, its programs, per-run and
    per-setting statistics and the output directory.

    Attributes:
        experiment: the experiment that ran (``run.name`` filled in).
        programs: one ``Program`` per static config, in order of first appearance: its
            runs, ``metrics`` (name -> ``[R_p, U_p]``, R_p runs × U_p updates), ``env_steps``
            ``[U_p]``, group size, compiles, ``first_chunk_seconds`` and the last group's
            final batched ``state``.
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
    programs: list[Program]
    summary: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    out_dir: str
    seconds: float
    diverged: dict[int, tuple[int, list[str]]] = dataclasses.field(default_factory=dict)
    evaluation: Evaluator | None = None  # run.eval_every > 0: the evaluations and absolute metric

    @property
    def runs(self) -> list[Run]:
        """Every run (id, label, setting, seed, axis values), program after program."""
        return [run for p in self.programs for run in p.runs]

    def plot(self, path: str | None = None, metric: str = "return"):
        """Learning curves per setting: mean and 95% bootstrap band over its seeds.

        Every program's curves share one set of axes, against environment steps.

        Args:
            path: a PNG file to save the figure to (and close it); None: only return it.
            metric: the metric to plot, a key of the programs' ``metrics``.

        Returns:
            The matplotlib ``Figure``.
        """
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
    for program in programs.values():
        if experiment.sweep.schedule != "none":
            program.hyper, program.population = _population(experiment, program)
        else:
            program.hyper = Hyper.stack([s.hyper for s in program.settings])
    return list(programs.values())


def _pbt_axis(experiment: Experiment, name: str) -> Axis:
    """The PBT / halving axis of sweep axis ``name``: numbers move within their
    distribution's range (a grid or choice: within its values), support fields are
    categories."""
    spec = experiment.sweep
    if sweepable()[name] == "config":
        raise ValueError(f"sweep.schedule {spec.schedule}: {name!r} is a static Config field (one compiled program per "
                         f"value), and the schedule steers the runs of one program; sweep traced names "
                         f"(hyperparameters, support) only")
    dist = {"values": spec.grid[name]} if name in spec.grid else spec.random[name]
    (kind, args), = dist.items()
    if sweepable()[name] == "support":
        return Axis(name, "category", tuple(args))
    if kind == "choice":
        kind = "values"
    if kind == "values":
        return Axis(name, kind, tuple(float(v) for v in args), field=name)
    return Axis(name, kind, low=float(args[0]), high=float(args[1]), field=name)


def _population(experiment: Experiment, program: Program) -> tuple[Hyper, Population]:
    """A steered program's stacked Hyper ``[R]`` and its ``Population`` (PBT), ``Halving``
    or ``Replay``: the axes, each run's starting codes, the populations and, for support
    axes, S_A / S_R of every combination of their values (stacked with the runs' so both
    have one form)."""
    spec = experiment.sweep
    num_runs = len(program.runs)
    if spec.schedule == "replay":
        axes, start, segments = _replay(experiment, program)
        codes = np.repeat(start[None], num_runs, axis=0)
    else:
        axes = tuple(_pbt_axis(experiment, name) for name in spec.axes)
        codes = np.array([[_code(axis, run.values[axis.name]) for axis in axes] for run in program.runs],
                         np.float32).reshape(num_runs, len(axes))
    support_axes = tuple(a for a, axis in enumerate(axes) if axis.kind == "category")
    combos = []
    env = program.config.make_env() if support_axes else None
    for combo in itertools.product(*(axes[a].values for a in support_axes)) if support_axes else ():
        values = {axes[a].name: v for a, v in zip(support_axes, combo)}
        try:
            combos.append(Hyper.create(experiment.replace(support=values).support.build(env)))
        except ValueError as err:
            raise ValueError(f"sweep.schedule {spec.schedule} can reach every combination of the support axes; "
                             f"{values} is not a support: {err}") from None
    stacked = Hyper.stack([*(s.hyper for s in program.settings), *combos])
    hyper = jax.tree.map(lambda x: x[:num_runs], stacked)
    supports = jax.tree.map(lambda x: x[num_runs:], stacked) if combos else None
    populations = np.array([0 if spec.population == "all" else run.seed for run in program.runs], np.int32)
    table = PopulationTable(axes, populations, supports, support_axes, spec.fraction, tuple(spec.perturb),
                            spec.resample)
    if spec.schedule == "replay":
        return hyper, Replay(table, codes, segments)
    smallest = min(np.unique(populations, return_counts=True)[1])
    if math.floor(smallest * spec.fraction) < 1:
        raise ValueError(f"sweep.schedule {spec.schedule}: a population of {smallest} runs (sweep.population "
                         f"{spec.population}) times sweep.fraction {spec.fraction} is less than one run; use more "
                         f"runs or a larger fraction")
    kind = Halving if spec.schedule == "halving" else Population
    population = kind(table, codes, spec.ready, spec.schedule_seed, [run.seed for run in program.runs])
    if experiment.run.eval_every:  # rank on the evaluation's metric where it is on
        population.scorer = _eval_scorer(program, experiment.run)
    return hyper, population


def _code(axis: Axis, value: Any) -> float:
    """A value as its axis code: a category's index, a number itself."""
    return float(axis.values.index(value)) if axis.kind == "category" else float(value)


def _replay(experiment: Experiment, program: Program) -> tuple[tuple[Axis, ...], np.ndarray, dict[int, np.ndarray]]:
    """A replay's axes (every name its segments set), the codes before the first segment
    (the experiment's own values) and each segment's codes by the group chunk after
    which they start."""
    segments, names, per_chunk = experiment.sweep.segments, sweepable(), program.steps_per_chunk
    keys = list(dict.fromkeys(k for seg in segments for k in seg if k != "env_steps"))
    typed = []
    for i, seg in enumerate(segments):
        row = {}
        for name, value in seg.items():
            if name == "env_steps":
                continue
            if names.get(name) not in ("hyper", "support"):
                raise ValueError(f"sweep.segments[{i}].{name}: a segment sets traced names (hyperparameters, "
                                 f"support) only")
            row[name] = typed_value(names[name], name, value, f"sweep.segments[{i}].{name}")
        steps = seg["env_steps"]
        chunk, rest = divmod(steps, per_chunk)
        if rest or not 0 < chunk < program.num_chunks or (typed and chunk - 1 <= typed[-1][0]):
            raise ValueError(f"sweep.segments[{i}].env_steps must be increasing multiples of the env steps per "
                             f"chunk ({per_chunk}) inside the run (< {program.num_chunks * per_chunk}), got {steps}")
        typed.append((chunk - 1, row))
    own = {name: getattr(experiment.hyper if names[name] == "hyper" else experiment.support, name) for name in keys}
    axes = []
    for name in keys:
        seen = list(dict.fromkeys([own[name], *(row[name] for _, row in typed if name in row)]))
        axes.append(Axis(name, "category", tuple(seen)) if names[name] == "support"
                    else Axis(name, "values", tuple(float(v) for v in seen), field=name))
    current = np.array([_code(axis, own[axis.name]) for axis in axes], np.float32)
    start, by_chunk = current.copy(), {}
    for chunk, row in typed:
        current = current.copy()
        for a, axis in enumerate(axes):
            if axis.name in row:
                current[a] = _code(axis, row[axis.name])
        by_chunk[chunk] = current
    return tuple(axes), start, by_chunk


def _default_name(experiment: Experiment, programs: list[Program]) -> str:
    """``<env>-<support or "sweep">-<time>``, of the characters ``[A-Za-z0-9._-]`` only
    (``khop(k=1)`` -> ``khop_k1``), so a shell takes it unquoted."""
    what = "sweep" if experiment.sweep.axes else programs[0].runs[0].setting
    return file_name(f"{experiment.config.env}-{what}-{time.strftime('%Y%m%d-%H%M%S')}")


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
    and its output directory (created and proven writable; None: no files). Nothing is
    compiled yet. ``resume``: the checkpoint it continues from (meta and metrics only).
    ``described``: the experiment's sections describe every run's traced values (false
    for ``jaxpo.train``'s own Hyper rows, which ``hyper.npz`` then holds)."""

    experiment: Experiment
    programs: list[Program]
    out_dir: str | None
    resume: checkpoint.Restored | None = None
    described: bool = True

    @property
    def is_sweep(self) -> bool:
        return bool(self.experiment.sweep.axes)


def plan(experiment: Experiment | str | Mapping | None = None, *, resume: bool = False,
         **sections: Mapping[str, Any]) -> Plan:
    """Checks everything a run needs (every setting's config, env, support and
    hyperparameters; the output directory) and plans the programs. Raises ValueError
    naming the bad field; compiles nothing.

    ``resume``: continue ``<run.out>/<run.name>`` from its latest complete checkpoint;
    the experiment must equal the checkpoint's but for how it is run and logged (and
    ``run.steps``, for a run of one group)."""
    experiment = typed_spec(load(experiment, **sections))
    return prepare(experiment, _plan(experiment), resume=resume)


def prepare(experiment: Experiment, programs: list[Program], *, resume: bool = False, write: bool = True,
            described: bool = True, group_sizes: Sequence[int] | None = None) -> Plan:
    """The ``Plan`` of ``programs`` (the runs of ``experiment``, or ``jaxpo.train``'s):
    its output directory (``write``: named, created and proven writable), group sizes
    (``group_sizes``, or by ``run.runs_per_group`` and free memory), and with ``resume``
    the checkpoint it continues from, checked against the plan (the one resume check of
    every door). A directory that already holds checkpoints is only resumed, never
    trained over."""
    if resume and not experiment.run.name:
        raise ValueError("resume needs the run's directory: run.name (and run.out)")
    out_dir = None
    if write:
        name = experiment.run.name or _default_name(experiment, programs)
        out_dir = os.path.join(experiment.run.out, name)
        experiment = experiment.replace(run={"name": name})
    latest = checkpoint.restore(out_dir) if resume else None
    if out_dir is not None and not resume and checkpoint.steps(out_dir):
        raise ValueError(f"{out_dir!r} already holds the checkpoints of a run: resume it (resume=True, --resume DIR), "
                         f"or give the new run another directory")
    if out_dir is not None and is_main_process():
        ensure_writable(out_dir)
    if out_dir is not None and experiment.run.checkpoint:
        checkpoint.check_shared(out_dir)
    if latest is not None:
        sizes = checkpoint.check_resumable(latest.meta, to_dict(experiment), [len(p.runs) for p in programs],
                                           [p.num_chunks for p in programs], traced_digests(programs))
    elif group_sizes is not None:
        sizes = list(group_sizes)
    else:
        # a PBT population ranks in one program call: all its runs in one group
        sizes = [group_size(trainer(p.config), len(p.runs),
                            len(p.runs) if p.population is not None and experiment.run.runs_per_group is None
                            else experiment.run.runs_per_group) for p in programs]
        sizes = agree(sizes)  # free memory differs between hosts
    for program, size in zip(programs, sizes):
        if program.population is not None and size < len(program.runs):
            raise ValueError(f"sweep.schedule {experiment.sweep.schedule} ranks its {len(program.runs)} runs in one "
                             f"program call, but "
                             f"run.runs_per_group is {experiment.run.runs_per_group}: leave it unset or make it "
                             f">= {len(program.runs)}")
    offset = 0
    for program, size in zip(programs, sizes):
        program.group_size, program.offset = int(size), offset
        offset += len(program.groups()) * program.num_chunks
    return Plan(experiment, programs, out_dir, latest, described)


def traced_digests(programs: Sequence[Program]) -> list[dict[str, str]]:
    """Per program, digests of its runs' stacked traced values and of their labels and
    seeds: a checkpoint resumes only with identical ones."""
    return [{**checkpoint.digest(p.hyper), **checkpoint.digest({"labels": np.array([r.label for r in p.runs]),
                                                                "seeds": np.array([r.seed for r in p.runs])})}
            for p in programs]


def resume(run_dir: str, *, log: Callable[[str], None] | None = None, hooks: Sequence[Hook] = (),
           **sections: Mapping[str, Any]) -> SweepResult:
    """Continues the run (or sweep) in ``run_dir`` from its latest complete checkpoint.

    The result equals an uninterrupted run's, bitwise.

    Args:
        run_dir: the run directory (``<run.out>/<run.name>``) holding the checkpoints.
        log: called with progress lines (the CLI passes ``print``).
        hooks: more driver ``Hook``s, called around every group and after every chunk.
        **sections: overrides of how it runs, e.g. ``run={"steps": ...}`` (for a run of
            one group) or ``run={"log": ...}``; the experiment must otherwise equal the
            checkpoint's.

    Returns:
        The ``SweepResult``; files go on in ``run_dir``.

    Raises:
        ValueError: ``run_dir`` does not exist or holds no complete, readable checkpoint,
            its runs were given their Hyper rows in Python (resume them with
            ``jaxpo.train(..., resume=True)``), or ``sections`` change what the
            checkpoint fixes or hold a bad value (named).
        NonFiniteError: a run diverged with ``run.on_nan`` "stop" (and no schedule).
    """
    return execute(plan(resume_experiment(run_dir, **sections), resume=True), log=log, hooks=hooks)


def resume_experiment(run_dir: str, **sections: Mapping[str, Any]) -> Experiment:
    """The experiment saved in ``run_dir``'s latest checkpoint, with ``sections`` over it."""
    meta = checkpoint.restore(run_dir).meta
    if not meta.get("described", True):
        raise ValueError(f"the runs in {run_dir!r} were given their traced values (Hyper rows) in Python, which its "
                         f"experiment does not hold; resume them by calling jaxpo.train with the same arguments "
                         f"and resume=True")
    run_dir = os.path.normpath(run_dir)
    base = from_dict(meta["experiment"], source=f"the checkpoint in {run_dir!r}")
    located = {"out": os.path.dirname(run_dir) or ".", "name": os.path.basename(run_dir)}
    return base.replace(**{**sections, "run": {**sections.get("run", {}), **located}})


def sweep(experiment: Experiment | str | Mapping | None = None, *, log: Callable[[str], None] | None = None,
          hooks: Sequence[Hook] = (), **sections: Mapping[str, Any]) -> SweepResult:
    """Runs an experiment's sweep (or the single setting of an experiment without one).

    Every setting is checked before anything compiles; settings × ``run.seeds`` runs
    train, those sharing a static ``Config`` in one compiled program.

    Args:
        experiment: an ``Experiment``, a YAML file path (or shipped config name such as
            ``mappo``) or a mapping of sections; None: the defaults.
        log: called with progress lines (the CLI passes ``print``).
        hooks: more driver ``Hook``s, called around every group and after every chunk.
        **sections: overrides, e.g. ``run={"seeds": 8}``, ``sweep={"grid": {"lr": [1e-3, 3e-3]}}``.

    Returns:
        The ``SweepResult``; files go to ``<run.out>/<run.name>/``.

    Raises:
        ValueError: naming the bad field or value, before anything compiles: a bad
            experiment, section, axis or setting (config, env, support, hyperparameters),
            or an output directory that already holds a run's checkpoints.
        NonFiniteError: a run diverged with ``run.on_nan`` "stop" (and no schedule).
    """
    return execute(plan(experiment, **sections), log=log, hooks=hooks)


def execute(plan_: Plan, log: Callable[[str], None] | None = None, hooks: Sequence[Hook] = ()) -> SweepResult:
    """Trains a ``Plan``: program after program, group after group, then the reports.
    In a multi-process run every process calls this; only the main one writes files
    and logs (``hooks``, the NaN guard and checkpoints run on every process).

    The standard hooks, in order: the loggers (``run.log``), evaluation during training
    (``run.eval_every``), the caller's ``hooks``, the checkpointer (``run.checkpoint``: every group's final state, and every
    ``run.checkpoint_every`` chunks), the progress bar. The NaN guard is a step of the
    loop before them all (``jaxpo.run.guard``)."""
    writer = is_main_process()
    log = (log or (lambda line: None)) if writer else (lambda line: None)
    experiment, programs, out_dir, run = plan_.experiment, plan_.programs, plan_.out_dir, plan_.experiment.run
    trainers = [trainer(p.config) for p in programs]
    traced_before = [tr.compiles["chunk"] for tr in trainers]  # a program's count includes the CSV header's trace
    context = to_dict(experiment)
    logs: list[Hook] = []
    csv = None
    if writer and out_dir is not None:
        _write_experiment(plan_)
        loggers = parse_loggers(run.log)
        if "csv" in loggers:
            # each program's chunk, traced for its groups: the trace its first chunk then runs
            names = {m for p, tr in zip(programs, trainers) for m in tr.metric_names(p.group_size, p.hyper)}
            csv = MetricsCSV(os.path.join(out_dir, "metrics.csv"), experiment.sweep.axes, sorted(names))
            logs.append(csv)
        # the loggers' hyperparameters: sections that do not describe the runs are left out (each
        # jaxpo.train run then carries its own scalars in its values)
        logged = {k: v for k, v in context.items() if plan_.described or k not in ("hyper", "support")}
        logs += make_loggers(loggers, out_dir, logged)
    evaluator = None
    if run.eval_every:
        evaluator = Evaluator(run.eval_every, run.eval_episodes, run.eval_greedy, run.absolute_episodes,
                              out_dir, [h for h in logs if isinstance(h, RunLogger) and h is not csv],
                              resume=plan_.resume is not None, write=writer and out_dir is not None)
    # PBT and halving replace a diverged member at their next step: never a sweep-ending error
    on_nan = "mask" if experiment.sweep.schedule != "none" else run.on_nan
    guard = NanGuard(on_nan, log=log, diverged=plan_.resume.meta.get("diverged") if plan_.resume else None)
    saver = None
    if run.checkpoint and out_dir is not None:
        meta = {"experiment": context, "described": plan_.described, "program_runs": [len(p.runs) for p in programs],
                "group_sizes": [p.group_size for p in programs], "traced": traced_digests(programs)}
        pinned = plan_.resume.meta["pinned"] if plan_.resume else ()
        saver = checkpoint.Checkpointer(out_dir, run.checkpoint_every, run.keep, meta, pinned)
    resume_at = plan_.resume.meta["group"] if plan_.resume else -1
    total = sum(len(p.groups()) * p.num_chunks for p in programs)
    done = plan_.resume.step if plan_.resume else 0
    bar = ProgressBar(total, "sweep" if plan_.is_sweep else "train", done) if run.progress and writer else None
    tail = [h for h in (saver, bar) if h is not None]
    evaluation = [] if evaluator is None else [evaluator]
    owned, hooks = [*logs, *tail], [*logs, *evaluation, *hooks, *tail]  # owned: made here, closed here
    num_runs = sum(len(p.runs) for p in programs)
    num_settings = len({r.setting for p in programs for r in p.runs})
    log(f"{num_runs} runs ({num_settings} settings × {num_runs // num_settings} seeds) in {len(programs)} program(s); "
        f"runs per group: {', '.join(str(p.group_size) for p in programs)}; {describe()}"
        + (f"; writing to {out_dir}" if out_dir is not None else "")
        + (f"; resuming from checkpoint {plan_.resume.step} (group {resume_at}, chunk {plan_.resume.chunk})"
           if plan_.resume else ""))
    start = time.perf_counter()
    try:
        index = 0
        for program, tr, before in zip(programs, trainers, traced_before):
            index = _run_program(program, tr, hooks, guard, index, resume_at, out_dir, csv, before)
    finally:
        close_hooks(owned)
    result = SweepResult(experiment, programs, [], [], out_dir, time.perf_counter() - start, dict(guard.diverged),
                         evaluator)
    _write_reports(result, plan_.is_sweep, write=writer and out_dir is not None, statistics=out_dir is not None)
    if writer and out_dir is not None and experiment.sweep.schedule == "pbt":
        _write_best_schedule(result)
    return result


def best_schedule(result: SweepResult) -> tuple[Run, Experiment] | None:
    """A PBT sweep's best final member (by PBT's own score: the mean return over the last
    ``ready`` chunks, or with evaluation on, its final learner's evaluation) and the
    experiment that replays its schedule (``sweep.schedule: replay``): the values its
    learner lived under, segment by segment, from its first ancestor's seed. None when no
    run has a finite score."""
    (program,) = result.programs
    population = program.population
    scores = population.score(program.state, program.metrics[population.metric], program.num_updates,
                              program.config.updates_per_chunk)
    if not np.isfinite(scores).any():
        return None
    best = int(np.nanargmax(scores))
    lives = ancestry(population, best)
    axes, per_chunk = population.table.axes, program.steps_per_chunk
    decode = lambda codes: {axis.name: axis.decode(codes[a]) for a, axis in enumerate(axes)}
    start = decode(lives[0][2])
    segments, last = [], lives[0][2]
    for chunk, _, codes in lives[1:]:  # a segment where its values change
        if not np.array_equal(codes, last):
            segments.append({"env_steps": (chunk + 1) * per_chunk, **decode(codes)})
        last = codes
    names = sweepable()
    experiment = result.experiment
    replay = experiment.replace(
        hyper={k: v for k, v in start.items() if names[k] == "hyper"},
        support={k: v for k, v in start.items() if names[k] == "support"},
        sweep={"grid": {}, "random": {}, "samples": 0, "schedule": "replay" if segments else "none",
               "segments": segments},
        run={"seeds": 1, "seed": program.runs[lives[0][1]].seed, "name": f"{experiment.run.name}-best"})
    return program.runs[best], replay


def _write_best_schedule(result: SweepResult) -> None:
    """``best_schedule.yaml``: ``jaxpo train --config`` it to train the best member's
    schedule as one run."""
    found = best_schedule(result)
    if found is None:
        return
    run, replay = found
    write_text(os.path.join(result.out_dir, "best_schedule.yaml"),
               f"# The schedule of PBT member {run.label} (run {run.run_id}), the best final return of the sweep in\n"
               f"# {result.out_dir}: the values its learner trained under, from its first ancestor's seed.\n"
               f"# jaxpo train --config this-file\n" + dump_yaml(replay))


def _write_experiment(plan_: Plan) -> None:
    """``config.yaml`` (``sweep.yaml`` for a sweep): the resolved experiment, which runs it
    again. Runs given their own traced values (``jaxpo.train``) also get ``hyper.npz``
    (every run's ``Hyper`` row, label and seed), and their file holds only the sections
    that describe them (config, run)."""
    experiment, out_dir = plan_.experiment, plan_.out_dir
    if plan_.described:
        write_text(os.path.join(out_dir, "sweep.yaml" if plan_.is_sweep else "config.yaml"), dump_yaml(experiment))
        return
    (program,) = plan_.programs
    text = dump_yaml(experiment, sections=("config", "run"))
    write_text(os.path.join(out_dir, "config.yaml"),
               "# Trained by jaxpo.train with each run's traced values (Hyper rows) given in Python: they are in\n"
               "# hyper.npz beside this file; the hyper and support sections here would not describe them.\n" + text)
    rows = {name: np.asarray(leaf) for name, leaf in checkpoint.flatten_state(program.hyper).items()}

    def save(path: str) -> None:
        with open(path, "wb") as f:
            np.savez(f, labels=np.array([r.label for r in program.runs]),
                     seeds=np.array([r.seed for r in program.runs]), **rows)

    write_atomic(os.path.join(out_dir, "hyper.npz"), save)


def _run_program(program: Program, tr: Trainer, hooks: Sequence, guard: NanGuard, index: int, resume_at: int,
                 out_dir: str | None, csv: MetricsCSV | None, compiles_before: int) -> int:
    """Trains a program's runs group by group with one compiled chunk; fills its metrics.
    Groups before group ``resume_at`` are finished (their metrics come from their last
    checkpoint), that one continues from the latest. ``compiles_before``: the trainer's
    chunk traces before the sweep began. Returns the next group index."""
    size = program.group_size
    parts = []
    for g, lo in enumerate(program.groups()):
        runs = program.runs[lo:lo + size]
        group = Group(program.config, runs, program.num_updates, index, program.offset + g * program.num_chunks)
        index += 1
        if group.index <= resume_at:
            group = checkpoint.resume_group(group, tr, out_dir, csv, finished=group.index < resume_at)
            program.resumed_updates = group.resumed.chunk * program.config.updates_per_chunk
            if group.resumed.chunk == group.num_chunks:
                parts.append(group.resumed.metrics)
                program.state = group.resumed.state if group.resumed.state is not None else program.state
                continue
        hyper = jax.tree.map(lambda x: x[lo:lo + size], program.hyper)
        seeds = np.array([r.seed for r in runs])
        if program.population is not None and out_dir is not None and is_main_process():
            _write_lineage(program, out_dir)
        program.state, metrics, first = run_group(tr, hyper, seeds, group, hooks, pad_to=size, guard=guard,
                                                  population=program.population)
        if program.population is not None and out_dir is not None and is_main_process():
            _write_lineage(program, out_dir, last_chunk=program.num_chunks - 1)  # the trials' final budgets
            figure = plot_population(read_csv(os.path.join(out_dir, "lineage.csv")),
                                     [axis.name for axis in program.population.table.axes],
                                     end=program.num_chunks * program.steps_per_chunk,
                                     title=f"{program.config.env}: {program.population.kind}")
            save_figure(figure, os.path.join(out_dir, "population.png"))
        if math.isnan(program.first_chunk_seconds):
            program.first_chunk_seconds = first
        parts.append(metrics)
    program.metrics = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    program.compiles = tr.compiles["chunk"] - compiles_before
    return index


def _eval_scorer(program: Program, run: Any) -> Callable:
    """PBT / halving scores with evaluation on: each run's mean return over
    ``run.eval_episodes`` episodes from the evaluation's key stream at that update (the
    episodes the Evaluator plays there), played on the devices from the sharded state."""
    from jaxpo.program.learner import learner
    from jaxpo.run.evaluate import episode_player
    from jaxpo.run.periodic_eval import eval_keys

    num_runs, seeds = len(program.runs), [r.seed for r in program.runs]
    play = episode_player(program.config, learner(program.config).env, run.eval_episodes, run.eval_greedy)

    def score(state, update: int) -> np.ndarray:
        params = jax.tree.map(lambda x: x[:num_runs], state.params)
        returns = np.asarray(gather(play(params, eval_keys(seeds, update))[0]))  # [R, episodes]
        return returns.mean(axis=1).astype(np.float64)  # as the Evaluator's eval_return

    return score


def _write_lineage(program: Program, out_dir: str, last_chunk: int | None = None) -> None:
    """``lineage.csv`` (and for halving ``samples.csv``, every trial with its budget) now
    and after every step, rewritten whole and atomically; ``last_chunk``: where the
    trials still training stand (default: the latest step)."""
    run_ids = [run.run_id for run in program.runs]

    def write(pop: Population) -> None:
        write_csv(os.path.join(out_dir, "lineage.csv"), *pop.lineage_rows(run_ids, program.steps_per_chunk))
        if isinstance(pop, Halving):
            end = pop.chunks[-1] if last_chunk is None else last_chunk
            write_csv(os.path.join(out_dir, "samples.csv"), *pop.trials(run_ids, program.steps_per_chunk, end))

    program.population.on_step = write
    write(program.population)


def _write_reports(result: SweepResult, is_sweep: bool, write: bool = True, statistics: bool = True) -> None:
    """Fills the result's summary and (``statistics``) group rows; ``write``: also
    summary.csv, groups.csv and the figure. A plan without files (``jaxpo.train`` without
    ``out_dir``) skips the group statistics: their bootstrap is what it would not read."""
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
                                   **{n: float(v[r]) for n, v in stats.items()},
                                   "diverged_at_update": result.diverged.get(run.run_id, ("",))[0]})
    header = [*RUN_COLUMNS, *axes, "env_steps", *summary_names, "diverged_at_update"]
    if write:
        write_csv(os.path.join(result.out_dir, "summary.csv"), header,
                  [[row.get(h, float("nan")) for h in header] for row in result.summary])

    if not statistics:
        return
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
    """The grid supports × seeds as one batch for ``jaxpo.train``.

    Args:
        supports: one ``Support`` or several (S_A, S_R ``[N, N]``, one N for all).
        seeds: the integer seeds each support trains with.
        **hparams: ``Hyper.create`` keywords (hyperparameter scalars) shared by every run.

    Returns:
        ``(hyper, seeds, labels)`` over the R = len(supports) × len(seeds) runs, supports
            outer and seeds inner: the batched ``Hyper`` ``[R, ...]``, the seeds int ``[R]``
            and the labels ``"<support name>/seed<k>"``.

    Raises:
        ValueError: if ``supports`` or ``seeds`` is empty, a support is invalid or the
            supports differ in N, or ``hparams`` holds an unknown name or a bad value.
    """
    supports = [supports] if isinstance(supports, Support) else list(supports)
    seeds = [int(s) for s in seeds]
    if not supports or not seeds:
        raise ValueError("supports and seeds must be non-empty")
    grid = list(itertools.product(supports, seeds))
    hyper = Hyper.stack([Hyper.create(sup, **hparams) for sup, _ in grid])
    return hyper, np.array([s for _, s in grid]), [f"{sup.name}/seed{s}" for sup, s in grid]
