"""An experiment as one typed, file-backed object: what ``jaxpo train`` and
``jaxpo sweep`` run, what ``--config FILE.yaml`` loads and ``--print-config`` prints.

    config:  Config        static: fixes the compiled program
    hyper:   Hyper         traced scalars (lr, clip_eps, …); S_A and S_R come from support
    support: SupportSpec   preset, κ and coupling graph, or matrices from a file
    run:     RunSettings   length, seeds, output — nothing here changes the program
    sweep:   SweepSpec     grid and random axes over any of the above but run

A config file holds any subset of these sections; unknown keys and values of the
wrong type are errors that name the key. ``dump_yaml`` writes a file that
``load_yaml`` reads back to an equal ``Experiment``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import yaml

from jaxpo.core.checks import FieldError, Ref, Setting, positive_int
from jaxpo.program.config import Config, Hyper, config_to_dict
from jaxpo.program.fields import coerce, coerce_fields, plain, type_hints
from jaxpo.core.support import PRESETS, Support, custom, make_support
from jaxpo.envs.coupling import measured_graph

SupportName = Literal[(*PRESETS, "custom")]
MATRIX_SUFFIXES = (".npz", ".json", ".yaml", ".yml")


@dataclasses.dataclass(frozen=True)
class SupportSpec:
    """Which support matrices (S_A, S_R) runs train with: the ``support`` section.

    Raises:
        FieldError: (a ValueError) on construction, if a field has the wrong type (the message names
            ``support.<field>``).

    Attributes:
        preset: a preset (``ippo``, ``mappo``, ``happo``, ``joint``, ``khop``), or ``custom``
            for the matrices in the file ``matrices``.
        kappa: hops of the environment's coupling graph for preset khop (ignored otherwise).
        graph: the coupling graph khop is built from: declared (the environment's own) or
            measured (found by stepping the environment: jaxpo.envs.coupling.measured_graph).
        matrices: preset custom only: a file holding S_A and S_R as [N, N] arrays
            (.npz, or lists in .yaml / .json).
    """

    preset: SupportName = "khop"
    kappa: int = 1
    graph: Literal["declared", "measured"] = "declared"
    matrices: str | None = None

    def __post_init__(self):
        coerce_fields(self, "support")

    def build(self, env: Any) -> Support:
        """Builds the validated ``Support`` for an environment.

        Args:
            env: the environment (an ``Env``): its agent count N and coupling graph.

        Returns:
            The ``Support``, S_A and S_R ``[N, N]``.

        Raises:
            ValueError: if preset custom names no ``matrices`` file, ``matrices`` is given
                with another preset, the file is missing, unreadable, of another suffix
                or lacks S_A / S_R, the matrices are invalid or not ``[N, N]``, or the
                preset cannot be built for ``env`` (khop on a declared graph that ``env``
                does not declare: the message names ``support.graph`` measured).
        """
        if self.preset == "custom":
            if not self.matrices:
                raise FieldError.saying("support.matrices", Ref("support.matrices"),
                                        " must name a file holding S_A and S_R when ", Ref("support.preset"),
                                        " is 'custom'")
            return load_matrices(self.matrices).validate(env.num_agents)
        if self.matrices:
            raise FieldError("support.matrices", "is only read with ", Ref("support.preset"),
                             f" 'custom', got preset {self.preset!r}")
        khop = self.preset == "khop"
        coupling = measured_graph(env) if khop and self.graph == "measured" else env.coupling
        if khop and coupling is None:
            raise FieldError.saying("support.graph", f"preset khop needs a coupling graph, but env {env.name!r} "
                                    "declares none; set ", Setting("support.graph", "measured"), " to measure it "
                                    "by stepping the environment, or choose ippo, mappo, happo or joint")
        return make_support(self.preset, env.num_agents, kappa=self.kappa if khop else None, coupling=coupling)


def load_matrices(path: str) -> Support:
    """A custom ``Support`` from ``path``: ``.npz`` with arrays ``S_A`` and ``S_R``, or a
    ``.yaml`` / ``.json`` mapping with those keys (nested lists). Never unpickles."""
    if not os.path.isfile(path):
        raise _bad_matrices(f": no such file {path!r}")
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in MATRIX_SUFFIXES:
        raise _bad_matrices(f" must be one of {', '.join(MATRIX_SUFFIXES)} files, got {path!r}")
    try:
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                data = {k: data[k] for k in data.files}
        else:
            with open(path) as f:
                data = json.load(f) if suffix == ".json" else yaml.safe_load(f)
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise _bad_matrices(f": cannot read {path!r}: {err}") from None
    if not isinstance(data, Mapping) or not {"S_A", "S_R"} <= set(data):
        raise _bad_matrices(f": {path!r} must hold S_A and S_R")
    name = os.path.splitext(os.path.basename(path))[0]
    return custom(data["S_A"], data["S_R"], name=f"custom({name})")


def _bad_matrices(text: str) -> FieldError:
    """The error about the ``support.matrices`` file: its name, then ``text``."""
    return FieldError.saying("support.matrices", Ref("support.matrices"), text)


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """How long runs train, which seeds, and where results go: the ``run`` section.

    Nothing here changes the compiled program.

    Raises:
        FieldError: (a ValueError) on construction, naming ``run.<field>``: a value of the wrong type, an
            unknown or repeated logger (or wandb not installed), a count below its minimum
            (steps, seeds, bootstrap_reps, keep, eval_episodes, runs_per_group: >= 1; seed,
            checkpoint_every, eval_every, absolute_episodes: >= 0), checkpoint_every without
            checkpoint, or a name that is not a plain directory name.

    Attributes:
        steps: environment steps per run, rounded up to whole chunks of updates.
        seeds: seeds per setting, trained in parallel.
        seed: the first seed (seeds are seed, seed + 1, …).
        out: output directory; results go to out/name.
        name: run name (none: <env>-<support>-<time>, or <env>-sweep-<time> for sweeps).
        progress: show a progress bar.
        runs_per_group: runs per compiled group (none: as many as fit in half the free
            memory, from an estimate of one run).
        bootstrap_reps: bootstrap resamples for the confidence intervals in groups.csv.
        log: loggers, comma-separated: csv, tensorboard, wandb (wandb: set WANDB_MODE=offline
            to log without a network).
        checkpoint: save every group's final training state into out/name/checkpoints/
            (what eval, render and resume read); false: no checkpoints at all.
        checkpoint_every: also save a checkpoint every this many chunks; 0: only the final ones.
        keep: checkpoints kept (besides each group's last and the last before a divergence).
        on_nan: when a run's loss, parameters or returns become non-finite: stop, or mask
            the run (the other runs go on; for sweeps).
        eval_every: evaluate every this many env steps per run (after the chunk that
            reaches each multiple, and after the last): eval.csv, eval_episodes.csv;
            0: no evaluation during training.
        eval_episodes: episodes per run and evaluation.
        eval_greedy: evaluate the most likely action (true) or sampled actions.
        absolute_episodes: episodes of the absolute metric played at the end with each
            run's best evaluated parameters (absolute.csv); none: 10 × eval_episodes; 0: none.
    """

    steps: int = 1_024_000
    seeds: int = 1
    seed: int = 0
    out: str = "runs"
    name: str | None = None
    progress: bool = True
    runs_per_group: int | None = None
    bootstrap_reps: int = 2000
    log: str = "csv"
    checkpoint: bool = True
    checkpoint_every: int = 0
    keep: int = 3
    on_nan: Literal["stop", "mask"] = "stop"
    eval_every: int = 0
    eval_episodes: int = 32
    eval_greedy: bool = True
    absolute_episodes: int | None = None

    def __post_init__(self):
        from jaxpo.run.loggers import parse_loggers

        coerce_fields(self, "run")
        parse_loggers(self.log)
        if self.checkpoint_every < 0:
            raise FieldError("run.checkpoint_every", f"must be >= 0 (chunks; 0: only each group's final state), "
                                                     f"got {self.checkpoint_every}")
        if self.checkpoint_every and not self.checkpoint:
            raise FieldError.saying("run.checkpoint_every", Ref("run.checkpoint_every"),
                                    f"={self.checkpoint_every} asks for periodic checkpoints, but ",
                                    Ref("run.checkpoint"), " is off")
        if self.eval_every < 0:
            raise FieldError("run.eval_every", f"must be >= 0 (env steps between evaluations; 0: none), "
                                               f"got {self.eval_every}")
        if self.absolute_episodes is not None and self.absolute_episodes < 0:
            raise FieldError("run.absolute_episodes", f"must be >= 0 or none (10 × eval_episodes), "
                                                      f"got {self.absolute_episodes}")
        for field in ("steps", "seeds", "bootstrap_reps", "keep", "eval_episodes"):
            positive_int(getattr(self, field), f"run.{field}")
        if self.runs_per_group is not None and self.runs_per_group < 1:
            raise FieldError("run.runs_per_group", f"must be a positive integer or none, got {self.runs_per_group!r}")
        if self.seed < 0:
            raise FieldError("run.seed", f"must be >= 0, got {self.seed}")
        if self.name is not None and (not self.name or os.sep in self.name or self.name in (".", "..")):
            raise FieldError("run.name", f"must be a plain directory name, got {self.name!r}")


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """Axes of a sweep, and how its runs are scheduled: the ``sweep`` section.

    Every run of one static config is one compiled program.

    Raises:
        FieldError: (a ValueError) on construction, naming ``sweep.<field>``: a value of the wrong type,
            grid or random not a mapping, malformed segments, samples < 0, segments
            without schedule replay (or replay without segments, or with axes), or with
            pbt / halving: ready < 1, fraction outside (0, 0.5], perturb empty or not
            positive, resample outside [0, 1].

    Attributes:
        grid: name -> list of values; the settings are their cartesian product.
        random: name -> {loguniform: [low, high]} | {uniform: [low, high]} | {choice: [values]}.
        samples: random settings drawn (each crossed with the grid).
        sample_seed: seed of the random draws.
        schedule: none (every run trains to the end), pbt (population-based training:
            every ``ready`` chunks the bottom ``fraction`` of each population copies a top
            member's learner and explores its axes) or halving (successive halving: every
            ``ready`` chunks a trial in the bottom ``fraction`` of its rung stops and its
            slot starts a new sample). Both steer the runs of one program: every axis
            must be traced (hyperparameters, support).
        ready: PBT / halving: chunks between steps (halving: between rungs).
        fraction: PBT: the share of each population that is copied (bottom) and copied
            from (top); halving: the share of each rung that stops (0.5: halving); in (0, 0.5].
        perturb: PBT: factors a copied number axis is multiplied by (one drawn per axis).
        resample: PBT: the probability that a copied axis is drawn afresh from its sweep
            distribution instead (support axes: drawn, else kept).
        population: PBT: all (the runs of the program rank together) or seed (each
            seed's runs rank among themselves).
        schedule_seed: seed of PBT's random choices (parents, perturbations, draws).
        segments: replay (``schedule: replay``, what a PBT sweep's ``best_schedule.yaml``
            holds): ``[{env_steps: S, NAME: VALUE, …}, …]``, the traced values from env
            step S on (S a multiple of the env steps per chunk, increasing); before the
            first, the hyper and support sections' own.
    """

    grid: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    random: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    samples: int = 0
    sample_seed: int = 0
    schedule: Literal["none", "pbt", "halving", "replay"] = "none"
    ready: int = 0
    fraction: float = 0.25
    perturb: tuple[float, ...] = (0.8, 1.25)
    resample: float = 0.25
    population: Literal["all", "seed"] = "all"
    schedule_seed: int = 0
    segments: Sequence[Mapping[str, Any]] = ()

    def __post_init__(self):
        segments = plain(list(self.segments or ()))
        if not all(isinstance(seg, Mapping) and isinstance(seg.get("env_steps"), int) and seg["env_steps"] > 0
                   for seg in segments):
            raise FieldError("sweep.segments", f"must be a list of {{env_steps: positive int, NAME: VALUE, ...}}, "
                                               f"got {self.segments!r}")
        object.__setattr__(self, "segments", segments)
        for field in ("grid", "random"):
            if not isinstance(getattr(self, field), Mapping):
                raise FieldError(f"sweep.{field}", f"must be a mapping of names to values, got {getattr(self, field)!r}")
            object.__setattr__(self, field, plain(dict(getattr(self, field))))  # lists, as a file holds them
        hints = type_hints(SweepSpec)
        for field in ("samples", "sample_seed", "schedule", "ready", "fraction", "perturb", "resample", "population",
                      "schedule_seed"):
            object.__setattr__(self, field, coerce(getattr(self, field), hints[field], f"sweep.{field}"))
        if self.samples < 0:
            raise FieldError("sweep.samples", f"must be >= 0, got {self.samples}")
        if (self.schedule == "replay") != bool(self.segments):
            raise FieldError.saying("sweep.segments", Ref("sweep.segments"), " go with ", Ref("sweep.schedule"),
                                    " replay, and replay needs segments")
        if self.schedule == "replay" and self.axes:
            raise FieldError.saying("sweep.schedule", Ref("sweep.schedule"),
                                    " replay trains one setting: it takes no grid or random axes")
        if self.schedule in ("pbt", "halving"):
            if self.ready < 1:
                raise FieldError.saying("sweep.ready", Ref("sweep.schedule"), f" {self.schedule} needs ",
                                        Ref("sweep.ready"), f" >= 1 (chunks between its steps), got {self.ready}")
            if not 0 < self.fraction <= 0.5:
                raise FieldError("sweep.fraction", f"must be in (0, 0.5] (the share of a population copied), "
                                                   f"got {self.fraction}")
            if not self.perturb or min(self.perturb) <= 0:
                raise FieldError("sweep.perturb", f"must be a non-empty list of positive factors, "
                                                  f"got {list(self.perturb)}")
            if not 0 <= self.resample <= 1:
                raise FieldError("sweep.resample", f"must be a probability in [0, 1], got {self.resample}")

    @property
    def axes(self) -> list[str]:
        """The names of the sweep's axes: the grid's, then the random ones' (empty: no sweep)."""
        return [*self.grid, *self.random]


@dataclasses.dataclass(frozen=True)
class Experiment:
    """Everything ``jaxpo train`` / ``jaxpo sweep`` runs, as one typed, file-backed object.

    A config file (``load_yaml``) holds any subset of the sections; ``dump_yaml`` writes
    one that reads back to an equal ``Experiment``.

    Attributes:
        config: the static ``Config``: fixes the compiled program.
        hyper: the traced ``Hyper`` scalars (lr, clip_eps, …); its S_A and S_R come from ``support``.
        support: the ``SupportSpec``: a preset, κ, or matrices from a file.
        run: the ``RunSettings``: length, seeds, output (nothing here changes the program).
        sweep: the ``SweepSpec``: grid and random axes over any of the above but run.
    """

    config: Config = dataclasses.field(default_factory=Config)
    hyper: Hyper = dataclasses.field(default_factory=Hyper)
    support: SupportSpec = dataclasses.field(default_factory=SupportSpec)
    run: RunSettings = dataclasses.field(default_factory=RunSettings)
    sweep: SweepSpec = dataclasses.field(default_factory=SweepSpec)

    def replace(self, **sections: Mapping[str, Any]) -> "Experiment":
        """A copy with fields overridden per section: ``replace(config={"num_envs": 8})``.

        Values are coerced to the fields' types (hyperparameters also range-checked).

        Args:
            **sections: section name (``config``, ``hyper``, ``support``, ``run``, ``sweep``)
                -> ``{field: value}`` overrides of that section.

        Returns:
            The new ``Experiment`` (this one is unchanged).

        Raises:
            ValueError: naming ``section.field``: an unknown section or key, a section
                that is not a mapping, or a value of the wrong type or range, or that the
                section's own checks reject.
        """
        changes = {}
        for section, values in sections.items():
            if section not in SECTIONS:
                raise ValueError(f"unknown section {section!r}; sections: {', '.join(SECTIONS)}")
            if not isinstance(values, Mapping):
                raise FieldError(section, f"must be a mapping of field names to values, got {values!r}")
            fields = section_fields(section)
            unknown = [k for k in values if k not in fields]
            if unknown:
                raise FieldError.saying(f"{section}.{unknown[0]}", f"unknown key {section}.{unknown[0]}; "
                                                                   f"{section} has: {', '.join(fields)}")
            typed = {k: typed_value(section, k, v, f"{section}.{k}") for k, v in values.items()}
            changes[section] = dataclasses.replace(getattr(self, section), **typed)
        return dataclasses.replace(self, **changes)

    def chunking(self, config: Config | None = None) -> tuple[Config, int]:
        """The updates per run for ``run.steps`` env steps, and the config that trains them.

        The updates are rounded up to whole chunks. A run shorter than one chunk lowers
        ``updates_per_chunk`` to its own length (one chunk of exactly its updates), so
        the returned config may differ from the one given.

        Args:
            config: the static config to chunk (default: this experiment's ``config``).

        Returns:
            ``(config, U)``: the config (``updates_per_chunk`` lowered to U for a run
                shorter than one chunk) and U, the updates per run, a multiple of its
                ``updates_per_chunk``.
        """
        config = config or self.config
        updates = -(-self.run.steps // config.steps_per_update)
        if updates < config.updates_per_chunk:
            config = dataclasses.replace(config, updates_per_chunk=updates)
        chunk = config.updates_per_chunk
        return config, -(-updates // chunk) * chunk


SECTIONS = {"config": Config, "hyper": Hyper, "support": SupportSpec, "run": RunSettings, "sweep": SweepSpec}


def section_fields(section: str) -> dict[str, Any]:
    """``{field: type}`` of a section (the hyper section: its scalars only)."""
    hints = type_hints(SECTIONS[section])
    if section == "hyper":
        return {name: float for name in Hyper.scalar_bounds()}
    return hints


def typed_value(section: str, name: str, value: Any, where: str) -> Any:
    """``value`` as the type of field ``section.name`` (hyperparameters also range-checked),
    or a ValueError naming ``where``. Whether it fits the other fields is the section's check."""
    value = coerce(value, section_fields(section)[name], where)
    return Hyper.scalar_bounds()[name].check(where, value) if section == "hyper" else value


def from_dict(data: Any, base: Experiment | None = None, source: str = "config") -> Experiment:
    """An ``Experiment``: ``base`` (default: the defaults) with the sections in ``data``."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ValueError(f"{source} must be a mapping of sections ({', '.join(SECTIONS)}), got {type(data).__name__}")
    unknown = [k for k in data if k not in SECTIONS]
    if unknown:
        raise ValueError(f"{source}: unknown section {unknown[0]!r}; sections: {', '.join(SECTIONS)}")
    try:
        return (base or Experiment()).replace(**{k: v or {} for k, v in data.items()})
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None


CONFIGS_DIR = os.path.join(os.path.dirname(__file__), "configs")


def shipped_configs() -> list[str]:
    """Names of the experiment files shipped in ``jaxpo/experiments/configs`` (``mappo``, ``happo``, …)."""
    return sorted(os.path.splitext(f)[0] for f in os.listdir(CONFIGS_DIR) if f.endswith(".yaml"))


def config_path(path: str) -> str:
    """``path`` itself, or the shipped file of that name (``mappo`` or ``mappo.yaml``)."""
    if os.path.exists(path):
        return path
    name = os.path.splitext(os.path.basename(path))[0]
    if os.sep not in path and name in shipped_configs():
        return os.path.join(CONFIGS_DIR, f"{name}.yaml")
    raise ValueError(f"config file {path!r} does not exist (shipped configs: {', '.join(shipped_configs())})")


def load_yaml(path: str, base: Experiment | None = None) -> Experiment:
    """Reads an experiment file (YAML; JSON is YAML too).

    Args:
        path: the file, or a bare name such as ``mappo`` (or ``mappo.yaml``) for the
            shipped ``jaxpo/experiments/configs/mappo.yaml``.
        base: the experiment the file's sections override (default: the defaults).

    Returns:
        The ``Experiment``: ``base`` with the file's sections.

    Raises:
        ValueError: naming the file (and key): no such file or shipped config, a file
            that cannot be read or is not valid YAML, a top level that is not a mapping of
            sections, or an unknown section or key, or a bad value.
    """
    path = config_path(path)
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as err:
        raise ValueError(f"config file {path!r} cannot be read: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"config file {path!r} is not valid YAML: {err}") from None
    return from_dict(data, base, source=f"config file {path!r}")


def to_dict(experiment: Experiment) -> dict[str, dict[str, Any]]:
    """Plain data (YAML-ready) for every field of every section."""
    out = {}
    for section in SECTIONS:
        obj = getattr(experiment, section)
        if section == "config":
            out[section] = config_to_dict(obj)
        else:
            out[section] = plain({name: getattr(obj, name) for name in section_fields(section)})
    return out


class _Dumper(yaml.SafeDumper):
    """Block-style mappings, flow-style lists: ``hidden: [64, 64]`` under ``config:``."""


_Dumper.add_representer(list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
_Dumper.add_representer(dict, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=False))


def dump_yaml(experiment: Experiment, sections: Sequence[str] = tuple(SECTIONS)) -> str:
    """The experiment as YAML that ``load_yaml`` reads back to an equal experiment.

    Args:
        experiment: the experiment to write.
        sections: the sections to write (default all: ``config``, ``hyper``, ``support``,
            ``run``, ``sweep``), in the experiment's order.

    Returns:
        The YAML text: block-style mappings, flow-style lists (``hidden: [64, 64]``).
    """
    data = {name: values for name, values in to_dict(experiment).items() if name in sections}
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100)


def format_value(value: Any) -> str:
    """A compact label for a swept value: ``0.001``, ``khop``, ``64x64``."""
    if isinstance(value, float):
        return f"{value:.3g}" if math.isfinite(value) else str(value)
    if isinstance(value, (tuple, list)):
        return "x".join(map(format_value, value))
    return str(value)
