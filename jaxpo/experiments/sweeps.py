"""The doors of a study: ``sweep`` (an experiment's settings × seeds), ``resume`` (a run
directory from its latest checkpoint) and ``runs`` (the simple grid that ``jaxpo.train``
takes). Each is plan → execute: ``jaxpo.experiments.plan`` expands and checks the
experiment (settings: ``jaxpo.experiments.settings``, grid axes crossed, random axes
drawn; steering: ``jaxpo.experiments.steering``), ``jaxpo.experiments.execution`` trains
it and ``jaxpo.experiments.artifacts`` writes the run directory ``<out>/<name>/``:
``metrics.csv`` (long format, appended per chunk), ``summary.csv`` (per run),
``groups.csv`` (per setting across seeds: mean and IQM with 95% stratified-bootstrap
CIs), a figure and the resolved experiment file.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from jaxpo.core.support import Support
from jaxpo.experiments.execution import execute
from jaxpo.experiments.experiment import Experiment, from_dict
from jaxpo.experiments.plan import Plan, PlannedProgram, load, plan, prepare
from jaxpo.experiments.results import ProgramResult, SweepResult
from jaxpo.experiments.steering import best_schedule
from jaxpo.program.config import Hyper
from jaxpo.run import checkpoint
from jaxpo.run.events import Hook

__all__ = ["Plan", "PlannedProgram", "ProgramResult", "SweepResult", "best_schedule", "execute", "load", "plan",
           "prepare", "resume", "resume_experiment", "runs", "sweep"]


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
    """The experiment saved in ``run_dir``'s latest checkpoint, with ``sections`` over it.

    Args:
        run_dir: the run directory.
        **sections: overrides of how it runs (``run={"steps": ...}``).

    Returns:
        The ``Experiment``, its ``run.out`` and ``run.name`` naming ``run_dir``.

    Raises:
        ValueError: no readable checkpoint, or its runs were given their Hyper rows in
            Python (no section describes them: resume with ``jaxpo.train(..., resume=True)``).
    """
    meta = checkpoint.restore(run_dir).meta
    # "described" is how checkpoints written before "sections" said the same
    if "hyper" not in meta.get("sections", ["hyper"]) or not meta.get("described", True):
        raise ValueError(f"the runs in {run_dir!r} were given their traced values (Hyper rows) in Python, which its "
                         f"experiment does not hold; resume them by calling jaxpo.train with the same arguments "
                         f"and resume=True")
    run_dir = os.path.normpath(run_dir)
    base = from_dict(meta["experiment"], source=f"the checkpoint in {run_dir!r}")
    located = {"out": os.path.dirname(run_dir) or ".", "name": os.path.basename(run_dir)}
    return base.replace(**{**sections, "run": {**sections.get("run", {}), **located}})


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
