"""``jaxpo train`` and ``jaxpo sweep``: an experiment from defaults, ``--config`` and
flags, checked in full, then trained; a summary is printed as text and one JSON line.

Values combine in this order: defaults (or, with ``--resume``, the checkpoint's
experiment), then ``--config FILE.yaml``, then the flags given.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from jaxpo.cli.errors import in_flags, report
from jaxpo.cli.processes import start_processes
from jaxpo.experiments.experiment import Experiment, dump_yaml, load_yaml
from jaxpo.program import parallel
from jaxpo.run.report import final_mean


def experiment_from_args(args: argparse.Namespace) -> Experiment:
    """The experiment the flags ask for.

    Args:
        args: the parsed flags of ``train`` / ``sweep`` (fields under their paths).

    Returns:
        Defaults (or, with ``--resume``, the checkpoint's experiment), then ``--config``,
            then the flags given.

    Raises:
        ValueError: naming a bad value (a ``FieldError`` when it is a field's), or
            ``--resume`` with ``--out`` / ``--name``.
    """
    from jaxpo.experiments.sweeps import resume_experiment

    resume = getattr(args, "resume", None)
    if resume and {"run.out", "run.name"} & set(vars(args)):
        raise ValueError("--resume RUN_DIR names the run's directory; give it without --out and --name")
    experiment = resume_experiment(resume) if resume else Experiment()
    if args.config:
        experiment = load_yaml(args.config, base=experiment)
    sections: dict[str, dict] = {}
    for dest, value in vars(args).items():
        if "." in dest:
            section, name = dest.split(".", 1)
            sections.setdefault(section, {})[name] = value
    if "env_kwargs" in sections.get("config", {}):
        sections["config"]["env_kwargs"] = {**experiment.config.env_args, **dict(sections["config"]["env_kwargs"])}
    axes = sections.get("sweep", {}).pop("axes", [])
    for kind, name, values in axes:
        sections["sweep"][kind] = {**getattr(experiment.sweep, kind), **sections["sweep"].get(kind, {}), name: values}
    return experiment.replace(**sections)


def _mean(values: np.ndarray) -> float | None:
    """The mean of the finite ``values``, or None when there is none (JSON has no NaN)."""
    finite = np.asarray(values, np.float64)[np.isfinite(values)]
    return round(float(finite.mean()), 4) if finite.size else None


def cmd_run(args: argparse.Namespace) -> int:
    """``jaxpo train`` and ``jaxpo sweep``: check everything, then train.

    Args:
        args: the parsed flags of the command.

    Returns:
        The exit status: 0, 1 if a run diverged (``--on-nan stop``), or 2 after printing
            a usage error.
    """
    from jaxpo.run.guard import NonFiniteError
    from jaxpo.experiments.sweeps import plan

    try:
        experiment = experiment_from_args(args)
        if args.print_config:
            print(dump_yaml(experiment), end="")
            return 0
        if args.command == "train" and experiment.sweep.axes:
            raise ValueError("this experiment has a sweep section; run it with `jaxpo sweep`")
        start_processes(args)
        ready = plan(experiment, resume=bool(args.resume))
    except (ValueError, ConnectionError) as err:
        return report(args.command, err)
    try:
        return parallel.exit_on_error(_train if args.command == "train" else _sweep, ready)
    except NonFiniteError as err:
        print(f"jaxpo {args.command}: {in_flags(err)}", file=sys.stderr)
        return 1


def _train(ready) -> int:
    """Trains the plan's one program and prints what it trained and a JSON summary."""
    from jaxpo.experiments.sweeps import execute

    program = ready.programs[0]
    setting, config = program.settings[0], program.config
    env = config.make_env()
    actions = f"{env.num_actions}-dim continuous actions" if env.continuous else f"{env.num_actions} actions"
    print(f"env: {' '.join(map(str, filter(None, (config.env, config.env_args))))} — {env.num_agents} agents, {actions}")
    print(setting.support.describe())
    print(f"runs: {len(program.runs)} seed(s) × {program.num_updates} updates × {config.steps_per_update} env steps "
          f"= {program.num_updates * config.steps_per_update:,} env steps per run")
    result = execute(ready)
    program = result.programs[0]  # the plan is frozen: how it ran is the result's
    metrics, seconds, first = program.metrics, result.seconds, program.first_chunk_seconds
    trained = program.num_updates - program.resumed_updates  # in this process
    summary = {
        "return_before": _mean(metrics["return"][:, 0]),
        "return_after": _mean(final_mean(metrics["return"])),
        "wall_seconds": round(seconds, 1),
        "compile_seconds": None if np.isnan(first) else round(first, 1),  # None: nothing left to train
        "env_steps_per_second": None if np.isnan(first) else round(
            len(program.runs) * trained * config.steps_per_update / max(seconds - first, 1e-9)),
        "out_dir": ready.out_dir,
    }
    before = "n/a (no episode ended in the first update)" if summary["return_before"] is None else summary["return_before"]
    print(f"return (mean episode return per agent): before {before} → after {summary['return_after']}")
    if "win_rate" in metrics:
        summary["win_rate_before"] = _mean(metrics["win_rate"][:, 0])
        summary["win_rate_after"] = _mean(final_mean(metrics["win_rate"]))
        print(f"win rate: before {summary['win_rate_before']} → after {summary['win_rate_after']}")
    print(json.dumps(summary))
    return 0


def _sweep(ready) -> int:
    """Runs every program of the plan and prints each setting's final return with its CIs."""
    from jaxpo.experiments.sweeps import execute

    result = execute(ready, log=print)
    rows = [g for g in result.groups if g["metric"] == "final_return"]
    width = max(len("setting"), *(len(g["setting"]) for g in rows))
    print(f"{'setting':<{width}}  runs  final return: mean [95% CI]     IQM [95% CI]")
    for g in rows:
        print(f"{g['setting']:<{width}}  {g['runs']:>4}  {g['mean']:9.3f} [{g['mean_ci_low']:.3f}, {g['mean_ci_high']:.3f}]"
              f"  {g['iqm']:9.3f} [{g['iqm_ci_low']:.3f}, {g['iqm_ci_high']:.3f}]")
    print(json.dumps({
        "runs": len(result.runs), "settings": len(rows), "programs": len(result.programs),
        "chunk_compiles": [p.compiles for p in result.programs],
        "runs_per_group": [p.group_size for p in result.programs],
        "wall_seconds": round(result.seconds, 1), "out_dir": result.out_dir,
    }))
    return 0
