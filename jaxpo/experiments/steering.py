"""Steering a sweep (``sweep.schedule``: pbt, halving, replay): from the experiment's
axes to a ``SteeringSpec`` (frozen, part of the plan), from the spec to the run layer's
``Steering`` (built at execution with its scorer and lineage sink), and back from a
finished PBT sweep to the schedule of its best member (``best_schedule``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

import jax
import numpy as np

from jaxpo.core.checks import FieldError, Ref
from jaxpo.experiments.experiment import Experiment, typed_value
from jaxpo.experiments.settings import Setting, sweepable
from jaxpo.program.config import Config, Hyper
from jaxpo.program.parallel import gather
from jaxpo.run.events import Run
from jaxpo.run.halving import Halving
from jaxpo.run.population import Population, ancestry
from jaxpo.run.replay import ScheduleReplay
from jaxpo.run.steering import Axis, PopulationTable, Scorer, Steering

if TYPE_CHECKING:
    from jaxpo.experiments.results import SweepResult


@dataclasses.dataclass(frozen=True)
class SteeringSpec:
    """What a steered program's ``Steering`` is built from: its ``kind`` (pbt, halving,
    replay), the ``table`` (axes, populations, supports), each run's starting ``codes``
    ``[R, A]``, ``ready`` (chunks between steps), ``seed`` (of the steps' draws), the
    runs' ``seeds`` and, for replay, ``segments`` (group chunk -> codes ``[A]``)."""

    kind: str
    table: PopulationTable
    codes: np.ndarray
    ready: int = 1
    seed: int = 0
    seeds: tuple[int, ...] = ()
    segments: Any = None

    def build(self, scorer: Scorer | None = None, on_step: Callable[[Steering], None] | None = None) -> Steering:
        """A fresh ``Steering`` of this spec.

        Args:
            scorer: what ranks the runs (PBT, halving); None: the training return's window.
            on_step: called after each step and load (the lineage files); None: nothing.

        Returns:
            A ``Population`` (PBT), ``Halving`` or ``ScheduleReplay``.
        """
        if self.kind == "replay":
            return ScheduleReplay(self.table, self.codes, self.segments, on_step=on_step)
        kind = Halving if self.kind == "halving" else Population
        return kind(self.table, self.codes, self.ready, self.seed, list(self.seeds), scorer=scorer, on_step=on_step)


def steered(experiment: Experiment, config: Config, num_updates: int, runs: Sequence[Run],
            settings: Sequence[Setting]) -> tuple[Hyper, SteeringSpec]:
    """A steered program's stacked Hyper ``[R]`` and its ``SteeringSpec``: the axes, each
    run's starting codes, the populations and, for support axes, S_A / S_R of every
    combination of their values (stacked with the runs' so both have one form).

    Args:
        experiment: the experiment (its sweep section names the schedule).
        config: the program's static config.
        num_updates: updates per run.
        runs: the program's runs.
        settings: each run's setting.

    Returns:
        ``(hyper [R, ...], spec)``.

    Raises:
        ValueError: an axis a schedule cannot steer, a support combination that is not a
            support, a population too small for ``sweep.fraction``, or bad segments.
    """
    spec = experiment.sweep
    num_runs = len(runs)
    if spec.schedule == "replay":
        axes, start, segments = _replay(experiment, config, num_updates)
        codes = np.repeat(start[None], num_runs, axis=0)
    else:
        axes = tuple(_pbt_axis(experiment, name) for name in spec.axes)
        codes = np.array([[_code(axis, run.values[axis.name]) for axis in axes] for run in runs],
                         np.float32).reshape(num_runs, len(axes))
    support_axes = tuple(a for a, axis in enumerate(axes) if axis.kind == "category")
    combos = []
    env = config.make_env() if support_axes else None
    for combo in itertools.product(*(axes[a].values for a in support_axes)) if support_axes else ():
        values = {axes[a].name: v for a, v in zip(support_axes, combo)}
        try:
            combos.append(Hyper.create(experiment.replace(support=values).support.build(env)))
        except ValueError as err:
            raise FieldError("sweep.schedule", f"{spec.schedule} can reach every combination of the support axes; "
                             f"{values} is not a support: {err}") from None
    stacked = Hyper.stack([*(s.hyper for s in settings), *combos])
    hyper = jax.tree.map(lambda x: x[:num_runs], stacked)
    supports = jax.tree.map(lambda x: x[num_runs:], stacked) if combos else None
    populations = np.array([0 if spec.population == "all" else run.seed for run in runs], np.int32)
    table = PopulationTable(axes, populations, supports, support_axes, spec.fraction, tuple(spec.perturb),
                            spec.resample)
    if spec.schedule == "replay":
        return hyper, SteeringSpec("replay", table, codes, segments=segments)
    smallest = min(np.unique(populations, return_counts=True)[1])
    if math.floor(smallest * spec.fraction) < 1:
        raise FieldError.saying("sweep.fraction", Ref("sweep.schedule"), f" {spec.schedule}: a population of "
                                f"{smallest} runs (", Ref("sweep.population"), f" {spec.population}) times ",
                                Ref("sweep.fraction"), f" {spec.fraction} is less than one run; use more runs or a "
                                f"larger fraction")
    Steering(table, codes, spec.ready, spec.schedule_seed)  # checks ready before anything compiles
    return hyper, SteeringSpec(spec.schedule, table, codes, spec.ready, spec.schedule_seed,
                               tuple(run.seed for run in runs))


def _pbt_axis(experiment: Experiment, name: str) -> Axis:
    """The PBT / halving axis of sweep axis ``name``: numbers move within their
    distribution's range (a grid or choice: within its values), support fields are
    categories."""
    spec = experiment.sweep
    if sweepable()[name] == "config":
        raise FieldError(f"sweep.grid.{name}" if name in spec.grid else f"sweep.random.{name}",
                         "is a static Config field (one compiled program per value), and ", Ref("sweep.schedule"),
                         f" {spec.schedule} steers the runs of one program; sweep traced names (hyperparameters, "
                         f"support) only", shown=f"sweep axis {name!r}")
    dist = {"values": spec.grid[name]} if name in spec.grid else spec.random[name]
    (kind, args), = dist.items()
    if sweepable()[name] == "support":
        return Axis(name, "category", tuple(args))
    if kind == "choice":
        kind = "values"
    if kind == "values":
        return Axis(name, kind, tuple(float(v) for v in args), field=name)
    return Axis(name, kind, low=float(args[0]), high=float(args[1]), field=name)


def _code(axis: Axis, value: Any) -> float:
    """A value as its axis code: a category's index, a number itself."""
    return float(axis.values.index(value)) if axis.kind == "category" else float(value)


def _replay(experiment: Experiment, config: Config, num_updates: int
            ) -> tuple[tuple[Axis, ...], np.ndarray, dict[int, np.ndarray]]:
    """A replay's axes (every name its segments set), the codes before the first segment
    (the experiment's own values) and each segment's codes by the group chunk after
    which they start."""
    segments, names = experiment.sweep.segments, sweepable()
    per_chunk = config.updates_per_chunk * config.steps_per_update
    num_chunks = num_updates // config.updates_per_chunk
    keys = list(dict.fromkeys(k for seg in segments for k in seg if k != "env_steps"))
    typed = []
    for i, seg in enumerate(segments):
        row = {}
        for name, value in seg.items():
            if name == "env_steps":
                continue
            if names.get(name) not in ("hyper", "support"):
                raise FieldError("sweep.segments", "sets traced names (hyperparameters, support) only",
                                 shown=f"sweep.segments[{i}].{name}:")
            row[name] = typed_value(names[name], name, value, f"sweep.segments[{i}].{name}")
        steps = seg["env_steps"]
        chunk, rest = divmod(steps, per_chunk)
        if rest or not 0 < chunk < num_chunks or (typed and chunk - 1 <= typed[-1][0]):
            raise FieldError("sweep.segments", f"must be increasing multiples of the env steps per chunk "
                             f"({per_chunk}) inside the run (< {num_chunks * per_chunk}), got {steps}",
                             shown=f"sweep.segments[{i}].env_steps")
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


def eval_scorer(config: Config, runs: Sequence[Run], run: Any) -> Scorer:
    """PBT / halving scores with evaluation on: each run's mean return over
    ``run.eval_episodes`` episodes from the evaluation's key stream at that update (the
    episodes the Evaluator plays there), played on the devices from the sharded state.

    Args:
        config: the program's static config.
        runs: its runs.
        run: the experiment's run section (eval_episodes, eval_greedy).

    Returns:
        ``(state, update) -> float64 [R]``.
    """
    from jaxpo.program.learner import learner
    from jaxpo.run.evaluate import episode_player
    from jaxpo.run.periodic_eval import eval_keys

    num_runs, seeds = len(runs), [r.seed for r in runs]
    play = episode_player(config, learner(config).env, run.eval_episodes, run.eval_greedy)

    def score(state, update: int) -> np.ndarray:
        params = jax.tree.map(lambda x: x[:num_runs], state.params)
        returns = np.asarray(gather(play(params, eval_keys(seeds, update))[0]))  # [R, episodes]
        return returns.mean(axis=1).astype(np.float64)  # as the Evaluator's eval_return

    return score


def best_schedule(result: SweepResult) -> tuple[Run, Experiment] | None:
    """A PBT sweep's best final member and the experiment that replays its schedule.

    The score is PBT's own (the mean return over the last ``ready`` chunks, or with
    evaluation on, its final learner's evaluation); the replay (``sweep.schedule:
    replay``) holds the values its learner lived under, segment by segment, from its
    first ancestor's seed.

    Args:
        result: a finished PBT sweep (one program).

    Returns:
        ``(best run, replay experiment)``, or None when no run has a finite score.
    """
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
