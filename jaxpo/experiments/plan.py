"""The plan: an experiment expanded into programs, checked, sized and frozen.

Settings × seeds become runs; runs that share a static ``Config`` are one
``PlannedProgram`` (one compiled program, run in groups of G runs, the last group padded
to G so it reuses the program); settings that differ in a static field are programs run
one after another. ``prepare`` fixes the output directory, the group sizes and, on
resume, the checkpoint the plan continues from. Nothing here compiles or trains, and
nothing in a ``Plan`` changes afterwards: ``jaxpo.experiments.execution`` returns what
happened as results of its own.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import OrderedDict
from typing import Any, Mapping, Sequence

import jax
import numpy as np

from jaxpo.core.checks import FieldError, Ref
from jaxpo.experiments.experiment import SECTIONS, Experiment, from_dict, load_yaml, to_dict
from jaxpo.experiments.run_table import RunTable
from jaxpo.experiments.settings import Setting, settings, typed_spec
from jaxpo.experiments.steering import SteeringSpec, steered
from jaxpo.program.config import Config, Hyper
from jaxpo.program.compiled import Trainer, trainer
from jaxpo.program.parallel import agree, is_main_process, padded_size
from jaxpo.run import checkpoint
from jaxpo.run.events import Run, env_steps_per_update
from jaxpo.run.report import ensure_writable, file_name


def free_memory_bytes(device: jax.Device | None = None) -> int:
    """Free memory of ``device`` (default: the first).

    Args:
        device: a jax device; None: the first local one.

    Returns:
        The allocator's limit minus its use on accelerators, the host's available memory on CPU.
    """
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
    """G, runs per compiled group.

    Args:
        tr: the program's ``Trainer``.
        num_runs: the program's runs.
        requested: runs per group asked for; None: as many as fit in half the free
            memory of the devices they are split over.

    Returns:
        G, at most ``num_runs`` rounded up to a multiple of those devices.
    """
    if requested is None and num_runs <= tr.run_multiple:
        requested = num_runs  # one group holds them all: no memory estimate (it traces a rollout) needed
    elif requested is None:
        requested = max(1, free_memory_bytes() // 2 * tr.run_multiple // tr.bytes_per_run())
    return padded_size(min(requested, num_runs), tr.run_multiple)


@dataclasses.dataclass(frozen=True)
class PlannedProgram:
    """The runs of one static config: ``runs``, each run's ``settings``, their traced
    values ``hyper`` ``[R, ...]`` (stacked once, so every group has the same support
    form and shares the program), groups of ``group_size`` runs, ``offset`` (chunks of
    the plan before its first group) and, for a steered sweep, its ``steering`` spec."""

    config: Config
    num_updates: int
    runs: tuple[Run, ...]
    settings: tuple[Setting, ...]
    hyper: Hyper
    steering: SteeringSpec | None = None
    group_size: int = 0
    offset: int = 0

    @property
    def env_steps(self) -> np.ndarray:
        """int ``[U]``: env steps per run after each update."""
        return env_steps_per_update(self.config, self.num_updates)

    @property
    def num_chunks(self) -> int:
        """Chunks per group."""
        return self.num_updates // self.config.updates_per_chunk

    @property
    def steps_per_chunk(self) -> int:
        """Env steps per run in one chunk."""
        return self.config.updates_per_chunk * self.config.steps_per_update

    def groups(self) -> range:
        """The first run of each group."""
        return range(0, len(self.runs), self.group_size)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A checked experiment, ready to run: its programs (runs grouped by static config)
    and its output directory (created and proven writable; None: no files). Nothing is
    compiled yet. ``resume``: the checkpoint it continues from (meta and metrics only).
    ``table``: the Hyper rows given as data (``jaxpo.train``), which the run directory
    keeps as ``hyper.npz``; None for an experiment's own expansion. ``sections``: the
    experiment's sections that describe the runs (config.yaml and the loggers hold
    those; ``jaxpo.train`` rows no experiment describes: config and run only)."""

    experiment: Experiment
    programs: tuple[PlannedProgram, ...]
    out_dir: str | None
    resume: checkpoint.Restored | None = None
    table: RunTable | None = None
    sections: tuple[str, ...] = tuple(SECTIONS)

    @property
    def is_sweep(self) -> bool:
        """The experiment has sweep axes."""
        return bool(self.experiment.sweep.axes)

    @property
    def describes_runs(self) -> bool:
        """Every section, the traced ones included, describes the runs."""
        return "hyper" in self.sections


def expand(experiment: Experiment) -> list[PlannedProgram]:
    """Settings × seeds as runs, grouped by static config (in order of first appearance).

    Args:
        experiment: a typed experiment.

    Returns:
        One ``PlannedProgram`` per static config (group sizes not yet set).

    Raises:
        ValueError: naming a bad setting or schedule.
    """
    grouped: OrderedDict[Config, tuple[int, list[Run], list[Setting]]] = OrderedDict()
    seeds = range(experiment.run.seed, experiment.run.seed + experiment.run.seeds)
    run_id = 0
    for setting in settings(experiment):
        _, runs, own = grouped.setdefault(setting.config, (setting.num_updates, [], []))
        for seed in seeds:
            runs.append(Run(run_id, f"{setting.label}/seed{seed}", setting.label, seed, setting.values))
            own.append(setting)
            run_id += 1
    programs = []
    for config, (num_updates, runs, own) in grouped.items():
        if experiment.sweep.schedule != "none":
            hyper, spec = steered(experiment, config, num_updates, runs, own)
        else:
            hyper, spec = Hyper.stack([s.hyper for s in own]), None
        programs.append(PlannedProgram(config, num_updates, tuple(runs), tuple(own), hyper, spec))
    return programs


def _default_name(experiment: Experiment, programs: Sequence[PlannedProgram]) -> str:
    """``<env>-<support or "sweep">-<time>``, of the characters ``[A-Za-z0-9._-]`` only
    (``khop(k=1)`` -> ``khop_k1``), so a shell takes it unquoted."""
    what = "sweep" if experiment.sweep.axes else programs[0].runs[0].setting
    return file_name(f"{experiment.config.env}-{what}-{time.strftime('%Y%m%d-%H%M%S')}")


def load(experiment: Experiment | str | Mapping | None = None, **sections: Mapping[str, Any]) -> Experiment:
    """An ``Experiment`` from an experiment, a YAML path or a dict, with ``sections`` over it.

    Args:
        experiment: an ``Experiment``, a YAML path (or shipped config name) or a mapping; None: the defaults.
        **sections: overrides of fields by section (``run={"seeds": 4}``).

    Returns:
        The ``Experiment``.

    Raises:
        ValueError: ``experiment`` is of another type, or a field is bad (named).
    """
    if isinstance(experiment, str):
        experiment = load_yaml(experiment)
    elif experiment is None or isinstance(experiment, Mapping):
        experiment = from_dict(experiment)
    if not isinstance(experiment, Experiment):
        raise ValueError(f"experiment must be an Experiment, a YAML path or a mapping, got {type(experiment).__name__}")
    return experiment.replace(**sections)


def plan(experiment: Experiment | str | Mapping | None = None, *, resume: bool = False,
         **sections: Mapping[str, Any]) -> Plan:
    """Checks everything a run needs and plans the programs; compiles nothing.

    Args:
        experiment: as ``load`` takes it.
        resume: continue ``<run.out>/<run.name>`` from its latest complete checkpoint;
            the experiment must equal the checkpoint's but for how it is run and logged
            (and ``run.steps``, for a run of one group).
        **sections: overrides, as ``load`` takes them.

    Returns:
        The ``Plan``.

    Raises:
        ValueError: naming the bad field (every setting's config, env, support and
            hyperparameters; the output directory; the checkpoint).
    """
    experiment = typed_spec(load(experiment, **sections))
    return prepare(experiment, expand(experiment), resume=resume)


def prepare(experiment: Experiment, programs: Sequence[PlannedProgram], *, resume: bool = False, write: bool = True,
            table: RunTable | None = None, sections: Sequence[str] = tuple(SECTIONS),
            group_sizes: Sequence[int] | None = None) -> Plan:
    """The ``Plan`` of ``programs`` (the runs of ``experiment``, or ``jaxpo.train``'s).

    A directory that already holds checkpoints is only resumed, never trained over.

    Args:
        experiment: the experiment the programs run.
        programs: the planned programs (group sizes not yet set).
        resume: continue from the directory's latest checkpoint, checked against the
            plan (the one resume check of every door).
        write: name, create and prove writable the output directory; False: no files.
        table: the Hyper rows given as data (``jaxpo.train``), kept as ``hyper.npz``.
        sections: the experiment's sections that describe the runs.
        group_sizes: runs per group of each program; None: by ``run.runs_per_group``
            and free memory.

    Returns:
        The frozen ``Plan``.

    Raises:
        ValueError: naming the problem: no ``run.name`` to resume, a directory that holds
            checkpoints without ``resume``, a checkpoint that does not fit, a steered
            program split over groups.
    """
    if resume and not experiment.run.name:
        raise FieldError.saying("run.name", "resume needs the run's directory: ", Ref("run.name"), " (and ",
                                Ref("run.out"), ")")
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
        # a steered population ranks in one program call: all its runs in one group
        sizes = [group_size(trainer(p.config), len(p.runs),
                            len(p.runs) if p.steering is not None and experiment.run.runs_per_group is None
                            else experiment.run.runs_per_group) for p in programs]
        sizes = agree(sizes)  # free memory differs between hosts
    for program, size in zip(programs, sizes):
        if program.steering is not None and size < len(program.runs):
            raise FieldError.saying(
                "run.runs_per_group", Ref("sweep.schedule"), f" {experiment.sweep.schedule} ranks its "
                f"{len(program.runs)} runs in one program call, but ", Ref("run.runs_per_group"),
                f" is {experiment.run.runs_per_group}: leave it unset or make it >= {len(program.runs)}")
    sized, offset = [], 0
    for program, size in zip(programs, sizes):
        sized.append(dataclasses.replace(program, group_size=int(size), offset=offset))
        offset += len(sized[-1].groups()) * program.num_chunks
    return Plan(experiment, tuple(sized), out_dir, latest, table, tuple(sections))


def traced_digests(programs: Sequence[PlannedProgram]) -> list[dict[str, str]]:
    """Per program, digests of its runs' stacked traced values and of their labels and
    seeds: a checkpoint resumes only with identical ones.

    Args:
        programs: the planned programs.

    Returns:
        One ``{field: digest}`` per program.
    """
    return [{**checkpoint.digest(p.hyper), **checkpoint.digest({"labels": np.array([r.label for r in p.runs]),
                                                                "seeds": np.array([r.seed for r in p.runs])})}
            for p in programs]
