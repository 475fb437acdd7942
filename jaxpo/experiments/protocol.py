"""The benchmark protocol: SMAX and MPE with recurrent / feed-forward IPPO and MAPPO at the
reference settings, evaluation during training, the absolute metric, marl-eval output.

    python benchmarks/protocol.py                              # the full suite (GPU-sized)
    python benchmarks/protocol.py --suite mpe --steps 1e6 --seeds 3 --evaluations 20

Every (task, method) is one vmapped program over its seeds, trained from the shipped
reference config (``jaxpo/experiments/configs/``: JaxMARL's ``ippo_rnn_smax`` and
``mappo_homogenous_rnn_smax`` on SMAX, ``ippo_ff_mpe`` on MPE — MAPPO there is the same
config with the centralised critic) into ``<out>/<task>-<method>/``, checkpointed every
``--checkpoint-every`` chunks. The suite is resumable: a finished task (its summary.csv
written) is skipped, a killed one continues from its checkpoint, bit for bit. At the end
it writes ``<out>/marl_eval.json`` (every task, marl-eval's schema),
``<out>/results.json`` (per task and method: IQM and 95% bootstrap CI over seeds of the
absolute metric and of the final evaluation's win rate / return, the budget),
``<out>/results.md`` (that table beside the published SMAX win rates) and
``<out>/curves.png``, and prints one JSON line per task.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

SMAX_MAPS = ("2s3z", "3s5z", "5m_vs_6m", "3s5z_vs_3s6z", "6h_vs_8z", "27m_vs_30m")
MPE_ENVS = {"simple_spread": "MPE_simple_spread_v3", "simple_reference": "MPE_simple_reference_v3",
            "simple_speaker_listener": "MPE_simple_speaker_listener_v4"}
MPE_TASKS = tuple(MPE_ENVS)
METHODS = ("ippo", "mappo")
# Final win rates (%) at ~10M steps, read from Mava's SMAX benchmark figures (JaxMARL's: its
# 2023 report as plotted there): map -> (JaxMARL IPPO, JaxMARL MAPPO, Mava rec-IPPO, Mava rec-MAPPO).
PUBLISHED_SMAX = {
    "2s3z": (90, 100, 89, 94), "3s5z": (55, 70, 100, 97), "5m_vs_6m": (12, 5, 6, 9),
    "3s5z_vs_3s6z": (2, 35, 70, 76), "6h_vs_8z": (95, 20, 99, 100), "27m_vs_30m": (10, 15, 32, 79),
}
CONFIGS = {  # (suite, method) -> shipped reference config
    ("smax", "ippo"): "jaxmarl_ippo_rnn_smax.yaml",
    ("smax", "mappo"): "jaxmarl_mappo_homogenous_rnn_smax.yaml",
    ("mpe", "ippo"): "jaxmarl_ippo_ff_mpe.yaml",
    ("mpe", "mappo"): "jaxmarl_ippo_ff_mpe.yaml",
}


def task_sections(suite: str, task: str, method: str) -> dict:
    """The config changes that make the reference config train ``task`` with ``method``."""
    if suite == "smax":
        from jaxpo.experiments.experiment import load_yaml

        base = dict(load_yaml(config_path(suite, method)).config.env_kwargs)
        return {"config": {"env_kwargs": {**base, "scenario": task}}}
    config = {"env": MPE_ENVS[task]}
    if method == "mappo":  # MAPPO: the centralised critic of the same network
        config["critic_input"] = "global"
    return {"config": config}


def config_path(suite: str, method: str) -> str:
    import jaxpo.experiments

    return os.path.join(os.path.dirname(jaxpo.experiments.__file__), "configs", CONFIGS[suite, method])


def run_task(args, suite: str, task: str, method: str, hooks=()) -> str:
    """Trains (or resumes, or skips when finished) one (task, method); returns its
    directory. ``hooks``: more driver hooks (``jaxpo.run.events.Hook``)."""
    from jaxpo.experiments.sweeps import resume, sweep
    from jaxpo.run import checkpoint

    name = f"{task}-{method}"
    run_dir = os.path.join(args.out, name)
    if os.path.exists(os.path.join(run_dir, "summary.csv")):
        return run_dir  # finished
    steps = int(float(args.steps))
    run = {"steps": steps, "seeds": args.seeds, "out": args.out, "name": name, "progress": args.progress,
           "checkpoint_every": args.checkpoint_every, "eval_every": max(1, steps // args.evaluations),
           "eval_episodes": args.eval_episodes}
    if os.path.isdir(run_dir) and checkpoint.steps(run_dir):
        resume(run_dir, log=print, hooks=hooks, run={"progress": args.progress})
    else:
        sections = task_sections(suite, task, method)
        for section, values in args.set.items():  # e.g. CI-sized networks
            sections[section] = {**sections.get(section, {}), **values}
        sections["config"].setdefault("updates_per_chunk", eval_chunk(suite, method, sections, run["eval_every"]))
        sweep(config_path(suite, method), log=print, hooks=hooks, run={**run, **sections.pop("run", {})}, **sections)
    return run_dir


def eval_chunk(suite: str, method: str, sections: dict, eval_every: int) -> int:
    """Updates per chunk that put an evaluation every ``eval_every`` env steps: the hook runs
    between chunks, and the reference configs' 10-update chunks (163,840 steps on SMAX)
    would evaluate a 10M-step run 62 times, not Mava's 200."""
    from jaxpo.experiments.experiment import load_yaml

    config = load_yaml(config_path(suite, method)).replace(**sections).config
    return max(1, eval_every // config.steps_per_update)


def results_only(run_dir: str) -> bool:
    """A finished task kept without its per-episode files (a device's results-only copy, or
    a repository that commits only ``eval.csv`` and ``summary.csv``): its tables cannot be
    recomputed, so its row and marl-eval entries stay as the call that trained it wrote them."""
    return os.path.exists(os.path.join(run_dir, "summary.csv")) and not all(
        os.path.exists(os.path.join(run_dir, f)) for f in ("eval_episodes.csv", "absolute.csv"))


def earlier_entries(path: str, exported: list[dict]) -> dict:
    """The marl-eval entries of ``path`` (an earlier call's ``marl_eval.json``) for every
    (env, task, algorithm) that ``exported`` does not write again."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        earlier = json.load(f)
    fresh = {(env, task, algorithm) for result in exported for env, tasks in result.items()
             for task, algorithms in tasks.items() for algorithm in algorithms}
    return {env: {task: {algorithm: seeds for algorithm, seeds in algorithms.items() if (env, task, algorithm) not in fresh}
                  for task, algorithms in tasks.items()} for env, tasks in earlier.items()}


def parse_set(text: str) -> tuple[str, str, str]:
    """``--set config.num_envs=4`` -> ``("config", "num_envs", "4")``."""
    name, sep, value = text.partition("=")
    section, dot, field = name.partition(".")
    if not (sep and dot and section and field):
        raise argparse.ArgumentTypeError(f"--set must look like SECTION.FIELD=VALUE (e.g. config.num_envs=4), got {text!r}")
    return section, field, value


def iqm_ci(values: np.ndarray, reps: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """IQM of ``values`` (one per seed) and its 95% bootstrap CI: ``report.group_statistics``'s
    (rliable's, its resamples drawn from ``seed``, so a re-export gives the same bounds)."""
    from jaxpo.run.report import group_statistics

    stats = group_statistics({"x": np.asarray(values, np.float64)}, reps=reps, seed=seed)["x"]
    return stats["iqm"], stats["iqm_ci_low"], stats["iqm_ci_high"]


def task_results(run_dir: str, steps: int) -> dict:
    """Per-seed final evaluation and absolute metric, aggregated (IQM, 95% CI)."""
    from jaxpo.run.report import read_csv

    evals, absolute = read_csv(os.path.join(run_dir, "eval.csv")), read_csv(os.path.join(run_dir, "absolute.csv"))
    seeds = sorted(set(evals["seed"].tolist()))
    last = max(evals["update"])
    out = {"seeds": len(seeds), "env_steps": int(max(evals["env_steps"])), "budget_steps": steps}
    for metric, column in (("return", "return"), ("win_rate", "win_rate")):
        if not isinstance(evals[column], np.ndarray):  # empty column: no win condition
            continue
        final = [evals[column][(evals["seed"] == s) & (evals["update"] == last)][0] for s in seeds]
        best = [absolute[column if column == "return" else "won"][absolute["seed"] == s].mean() for s in seeds]
        out[f"final_{metric}"] = dict(zip(("iqm", "ci_low", "ci_high"), iqm_ci(final)))
        out[f"absolute_{metric}"] = dict(zip(("iqm", "ci_low", "ci_high"), iqm_ci(best)))
    return out


def eval_curves(run_dir: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """``(values [seeds, evaluations], env_steps [evaluations])`` of eval.csv's ``metric``."""
    from jaxpo.run.report import read_csv

    evals = read_csv(os.path.join(run_dir, "eval.csv"))
    seeds, steps = sorted(set(evals["seed"].tolist())), np.unique(evals["env_steps"])
    values = np.full((len(seeds), len(steps)), np.nan)
    for i, seed in enumerate(seeds):
        mine = evals["seed"] == seed
        values[i, np.searchsorted(steps, evals["env_steps"][mine])] = evals[metric][mine]
    return values, steps


def plot_suite(out: str, rows: dict) -> None:
    """``<out>/curves.png``: every task's evaluation curves (mean and 95% band over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jaxpo.run.report import plot_curves, save_figure

    tasks = list(dict.fromkeys(row["task"] for row in rows.values()))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for row in (r for r in rows.values() if r["task"] == task):
            metric = "win_rate" if row["suite"] == "smax" else "return"
            values, steps = eval_curves(os.path.join(out, f"{task}-{row['method']}"), metric)
            plot_curves(values, steps, [row["method"]] * len(values), title=task, metric=metric, ax=ax)
    fig.tight_layout()
    save_figure(fig, os.path.join(out, "curves.png"))


def interval(stats: dict, scale: float = 1) -> str:
    """``stats`` (``iqm``, ``ci_low``, ``ci_high``) × ``scale`` as the tables print it: ``"98.2 [95.5, 99.3]"``."""
    return f"{scale * stats['iqm']:.1f} [{scale * stats['ci_low']:.1f}, {scale * stats['ci_high']:.1f}]"


def markdown_table(rows: dict) -> str:
    """jaxpo's measured numbers (IQM [95% CI] over seeds, with the budget) beside the published ones."""
    lines = ["| task | method | budget (env steps × seeds) | final eval | absolute metric | published (JaxMARL IPPO / MAPPO, Mava rec-IPPO / rec-MAPPO; ~10M steps) |",
             "|---|---|---|---|---|---|"]
    for row in rows.values():
        smax = row["suite"] == "smax"
        metric, scale = ("win_rate", 100) if smax else ("return", 1)
        published = " / ".join(f"{v}%" for v in PUBLISHED_SMAX[row["task"]]) if smax else "—"
        unit = " (win %)" if smax else " (return)"
        lines.append(f"| {row['task']} | {row['method']} | {row['env_steps']:,} × {row['seeds']} | "
                     f"{interval(row['final_' + metric], scale)}{unit} | {interval(row['absolute_' + metric], scale)} | {published} |")
    return "\n".join(lines) + "\n"


def main(argv=None, hooks=()) -> int:
    """Runs the suite (``python benchmarks/protocol.py --help`` lists the options).

    Args:
        argv: the command-line arguments (default: ``sys.argv[1:]``).
        hooks: more driver hooks for every task (``jaxpo.run.events.Hook``).

    Returns:
        0 on success (bad arguments exit through argparse).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=("all", "smax", "mpe"), default="all")
    parser.add_argument("--tasks", nargs="*", default=None, help="a subset of maps / MPE scenarios")
    parser.add_argument("--methods", nargs="*", choices=METHODS, default=list(METHODS))
    parser.add_argument("--steps", default="1e7", help="env steps per run (default 1e7)")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--evaluations", type=int, default=200, help="evaluations per run (Mava: 200)")
    parser.add_argument("--eval-episodes", type=int, default=32, help="episodes per evaluation (Mava: 32)")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="chunks between checkpoints")
    parser.add_argument("--out", default="benchmarks/results/protocol")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--set", action="append", type=parse_set, default=[], metavar="SECTION.FIELD=VALUE",
                        help="override a field of every reference config (repeatable), e.g. config.num_envs=4")
    args = parser.parse_args(argv)
    overrides: dict = {}
    for section, field, value in args.set:
        overrides.setdefault(section, {})[field] = value
    args.set = overrides
    suites = ("smax", "mpe") if args.suite == "all" else (args.suite,)
    known = {"smax": SMAX_MAPS, "mpe": MPE_TASKS}
    unknown = [t for t in args.tasks or () if not any(t in known[s] for s in suites)]
    if unknown:
        parser.error(f"--tasks: unknown task {unknown[0]!r}; known: {', '.join(t for s in suites for t in known[s])}")
    if args.evaluations < 1 or args.seeds < 1:
        parser.error("--evaluations and --seeds must be positive")

    from jaxpo.run.export import marl_eval_results, merge, write_marl_eval
    from jaxpo.run.report import write_text

    os.makedirs(args.out, exist_ok=True)
    results_path = os.path.join(args.out, "results.json")
    done = {}
    if os.path.exists(results_path):  # earlier calls' tasks stay in the tables
        with open(results_path) as f:
            done = json.load(f)
    for suite in suites:
        for task in known[suite]:
            if args.tasks and task not in args.tasks:
                continue
            for method in args.methods:
                name, start = f"{task}-{method}", time.perf_counter()
                if name in done and results_only(os.path.join(args.out, name)):
                    print(json.dumps(done[name]), flush=True)  # its row stays as the earlier call wrote it
                    continue
                run_dir = run_task(args, suite, task, method, hooks)
                seconds = time.perf_counter() - start
                row = {"suite": suite, "task": task, "method": method, "config": CONFIGS[suite, method],
                       **task_results(run_dir, int(float(args.steps))), "this_call_seconds": round(seconds, 1)}
                done[name] = row
                print(json.dumps(row), flush=True)
    order = [f"{task}-{method}" for suite in ("smax", "mpe") for task in known[suite] for method in METHODS]
    done = {name: done[name] for name in sorted(done, key=order.index)}  # tables in the suite's order
    exported = [marl_eval_results(os.path.join(args.out, name), algorithm=row["method"])
                for name, row in done.items() if not results_only(os.path.join(args.out, name))]
    marl_eval_path = os.path.join(args.out, "marl_eval.json")
    write_marl_eval(marl_eval_path, merge(earlier_entries(marl_eval_path, exported), *exported))
    write_text(results_path, json.dumps(done, indent=1))
    write_text(os.path.join(args.out, "results.md"), markdown_table(done))
    plot_suite(args.out, done)
    return 0
