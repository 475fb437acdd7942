"""The commands on what training left: ``jaxpo eval``, ``jaxpo render`` and ``jaxpo
export`` read a run directory; ``jaxpo envs`` lists the environments and ``jaxpo docs``
serves the documentation.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

import numpy as np

from jaxpo.cli.errors import report
from jaxpo.core.checks import positive_int


def cmd_eval(args: argparse.Namespace) -> int:
    """``jaxpo eval``: every checkpointed run (or ``--run K``), one JSON line each, and its
    rows in checkpoint_eval.csv, which keeps earlier evaluations (``report.merge_csv``: an
    evaluation repeated with the same run, update and settings replaces its old row).

    Args:
        args: ``run_dir``, ``run`` (None: every run), ``episodes``, ``seed``, ``greedy``,
            ``env_kwargs`` (``(key, value)`` pairs over the training environment's parameters).

    Returns:
        0; 2 after a usage error (no checkpoint, a run id it does not hold, an environment
        parameter the environment refuses or that changes its shapes).
    """
    from jaxpo.run import checkpoint
    from jaxpo.run.evaluate import STATISTICS, environment_with, latest_groups, load_runs, run_episodes, summarize
    from jaxpo.run.report import merge_csv

    try:
        positive_int(args.episodes, "episodes")
        overrides = dict(args.env_kwargs)
        groups = latest_groups(args.run_dir)
        if not groups:
            checkpoint.restore(args.run_dir)  # raises the precise error
        rows, known = [], []
        for step in sorted(groups.values()):
            config, params, runs, meta = load_runs(args.run_dir, step)
            known += [r["run_id"] for r in runs]
            pick = [i for i, r in enumerate(runs) if args.run in (None, r["run_id"])]
            if not pick:
                continue
            params = _take_runs(params, pick)
            ids = [runs[i]["run_id"] for i in pick]
            env = environment_with(config, overrides) if overrides else None
            played = run_episodes(config, params, ids, args.episodes, args.seed, args.greedy, env)
            for i, stats in zip(pick, summarize(*played)):
                run = runs[i]
                rows.append({"run_id": run["run_id"], "label": run["label"], "setting": run["setting"],
                             "seed": run["seed"], "update": int(meta["chunk"]) * config.updates_per_chunk,
                             "greedy": args.greedy, "eval_seed": args.seed,
                             **{f"env.{k}": v for k, v in overrides.items()}, **stats})
        if not rows:
            raise ValueError(f"--run {args.run} is out of range: the checkpointed runs of {args.run_dir!r} have "
                             f"run ids {min(known)}..{max(known)}")
    except ValueError as err:
        return report("eval", err)
    merge_csv(os.path.join(args.run_dir, "checkpoint_eval.csv"), rows, measured=STATISTICS)
    for row in rows:
        print(json.dumps(row))
    return 0


def _take_runs(tree, index):
    """Leaves ``[R, ...] -> [len(index), ...]``."""
    import jax

    return jax.tree.map(lambda x: x[np.asarray(index)], tree)


def cmd_render(args: argparse.Namespace) -> int:
    """``jaxpo render``: one episode of run ``--run`` to ``--out``.

    Args:
        args: ``run_dir``, ``run``, ``seed``, ``greedy``, ``out`` (.gif or .mp4), ``fps``,
            ``env_kwargs`` (as ``cmd_eval``'s).

    Returns:
        0; 2 after a usage error (an animation path of another suffix, no checkpoint, an
        environment parameter the environment refuses or that changes its shapes).
    """
    from jaxpo.run.evaluate import check_animation_path, environment_with, load_policy, render_episode

    try:
        check_animation_path(args.out)  # before the (slower) loading
        policy = load_policy(args.run_dir, run=args.run, greedy=args.greedy)
        env = environment_with(policy.config, dict(args.env_kwargs)) if args.env_kwargs else None
        frames = render_episode(policy, args.out, seed=args.seed, fps=args.fps, env=env)
    except ValueError as err:
        return report("render", err)
    print(json.dumps({"out": args.out, "frames": frames, "run": policy.run["label"], "update": policy.update}))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``jaxpo export``: marl-eval JSON of one or more run directories.

    Args:
        args: ``run_dirs``, ``out`` (needed for several), and marl-eval's names.

    Returns:
        0; 2 after a usage error (several directories and no ``--out``).
    """
    from jaxpo.run.export import marl_eval_results, merge, write_marl_eval

    try:
        if args.out is None and len(args.run_dirs) > 1:
            raise ValueError("--out FILE.json is needed to export several run directories into one file")
        out = args.out or os.path.join(args.run_dirs[0], "marl_eval.json")
        results = merge(*(marl_eval_results(d, env_name=args.env_name, task_name=args.task, algorithm=args.algorithm)
                          for d in args.run_dirs))
        write_marl_eval(out, results)
    except ValueError as err:
        return report("export", err)
    print(json.dumps({"out": out, "run_dirs": args.run_dirs}))
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    """``jaxpo docs``: ``mkdocs serve`` (or ``build --strict``) on the checkout's mkdocs.yml.

    Args:
        args: the parsed flags of the command.

    Returns:
        mkdocs's exit status, or 2 when there is no checkout or no mkdocs.
    """
    import importlib.util
    import subprocess

    config = pathlib.Path(__file__).resolve().parents[2] / "mkdocs.yml"  # the checkout: jaxpo/cli/ is two below
    if not config.exists():
        return report("docs", ValueError("the documentation is in jaxpo's source repository: clone it and "
                                         "`pip install -e \".[dev]\"` there"))
    if importlib.util.find_spec("mkdocs") is None:
        return report("docs", ValueError("mkdocs is not installed: `pip install -e \".[dev]\"` in the checkout"))
    command = (["build", "--strict", "--site-dir", args.build] if args.build else
               ["serve", "--dev-addr", args.address])
    return subprocess.call([sys.executable, "-m", "mkdocs", *command, "--config-file", str(config)])


def cmd_envs(args: argparse.Namespace) -> int:
    """``jaxpo envs``: every registered environment with its agents, spaces and coupling,
    or (``--coupling NAME``) one environment's measured coupling.

    Args:
        args: the parsed flags (``names``: only the names, one a line; ``coupling``: the
            environment to measure, with ``env_kwargs``, ``horizon`` and ``num_states``).

    Returns:
        0; 2 after a usage error (an unknown name or parameter, a bad setting).
    """
    from jaxpo.envs import describe, make, measure_coupling, registered_names

    if args.coupling is not None:
        try:
            env = make(args.coupling, **dict(args.env_kwargs))
            measured = measure_coupling(env, num_states=args.num_states, horizon=args.horizon)
        except (ImportError, ValueError) as err:
            return report("envs", err)
        print("\n".join(coupling_lines(args.coupling, measured)))
        return 0
    if args.names:
        print("\n".join(registered_names()))
        return 0
    rows = [["name", "N", "obs", "actions", "continuous", "coupling"]]
    for name in registered_names():  # each with its default parameters
        try:
            facts = describe(make(name))
        except ImportError as exc:  # an optional extra that is not installed: the row says which
            rows.append([name, "?", "?", "?", "?", str(exc)])
            continue
        rows.append([name, *(str(facts[k]) for k in ("num_agents", "obs_dim", "actions", "continuous", "coupling"))])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def coupling_lines(name: str, measured) -> list[str]:
    """A measured coupling as text: the settings, then one row per agent i with
    ``frequency[i]`` in percent, the measured graph's row and the declared graph's row.

    Args:
        name: the environment's name.
        measured: its ``jaxpo.envs.Coupling``.

    Returns:
        The lines. A frequency cell is ``.`` for 0, ``<1`` below 1 %, else the percent
            rounded; a graph cell ``1`` or ``.``.
    """
    freq, n = measured.frequency, len(measured.graph)
    percent = lambda f: "." if f == 0 else "<1" if f < 0.01 else f"{100 * f:.0f}"
    cells = lambda row: "".join("1" if x else "." for x in row)
    declared = measured.declared
    lines = [f"{name}: N = {n}; {measured.num_states} states, horizon {measured.horizon}, up to "
             f"{measured.alternatives} alternative actions per agent and state",
             "row i, column j: % of agent j's varied actions that changed agent i's reward; the graph "
             f"(frequency > {measured.threshold:g}){'; the declared graph' if declared is not None else ''}"]
    for i in range(n):
        row = " ".join(f"{percent(f):>3}" for f in freq[i])
        lines.append(f"{i:>3}  {row}   {cells(measured.graph[i])}"
                     + (f"   {cells(declared[i])}" if declared is not None else ""))
    hops = "the declared graph" if declared is not None else "the measured graph"
    lines.append(f"radius {'disconnected' if measured.radius is None else measured.radius} (the measured graph, "
                 f"symmetrised); khop on {hops} covers every measured edge from kappa = "
                 f"{'never (it misses one)' if measured.max_hops is None else measured.max_hops}")
    if declared is not None:
        lines.append("measured graph == declared" if np.array_equal(measured.graph, declared) else
                     f"measured graph != declared: {int((measured.graph > declared).sum())} measured edges not "
                     f"declared, {int((declared > measured.graph).sum())} declared edges not seen")
    return lines
