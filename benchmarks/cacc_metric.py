"""Trained CACC policies scored as the original's evaluation scores them, as JSON lines.

Chu, Chinchali & Katti (ICLR 2020) score a CACC policy by R̄: per evaluation episode, the
mean over its steps of the reward summed over the vehicles, in raw units, with greedy
actions and without the safety term training adds; then the mean over episodes. A
collision pays −1000 per vehicle on every step until the episode ends at the next
multiple of 60 steps, and its result notebook counts an episode that ended early as a
collision (``benchmarks/results/cacc/paper.json`` cites where each rule is). This plays
each run's final checkpoint on the training environment with ``safety_weight=0`` and
``reward_norm=1``; jaxpo's return G is the team mean of an episode's summed rewards, so
an episode of L steps has R̄ = N·G / L.

Run (after training the shipped configs, e.g. ``jaxpo train --config cacc_catchup_khop1
--out runs --name cacc_catchup_khop1``; about 3 minutes each on 2 CPU cores):

    python benchmarks/cacc_metric.py runs/cacc_catchup_* runs/cacc_slowdown_* \\
        --out benchmarks/results/cacc/original_metric.jsonl

Lines: ``kind "run"`` per run (its config, scenario, support, seed, R̄'s mean and
standard deviation over the episodes, the collided fraction, the mean length) and
``kind "config"`` per run directory (R̄ and collided fraction over all its episodes).
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from jaxpo.run.evaluate import environment_with, latest_groups, load_runs, run_episodes

ORIGINAL_EVALUATION = {"safety_weight": 0.0, "reward_norm": 1.0}


def original_metric(config, params, run_ids: list[int], episodes: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Each episode's R̄ for runs of a CACC config, the original's evaluation.

    Args:
        config: the runs' ``Config`` (a CACC environment).
        params: their parameters, leaves ``[R, ...]``.
        run_ids: their run ids ``[R]`` (each folds into the episodes' keys).
        episodes: greedy episodes per run.
        seed: the episodes' seed.

    Returns:
        ``(r_bar [R, episodes], lengths int [R, episodes], max_steps)``; an episode shorter
        than ``max_steps`` ended in a collision.
    """
    env = environment_with(config, ORIGINAL_EVALUATION)
    returns, _, lengths, _ = run_episodes(config, params, run_ids, episodes, seed, True, env)
    return env.num_agents * returns / lengths, lengths, env.max_steps


def score(run_dir: str, episodes: int, seed: int) -> list[dict]:
    """The lines of one run directory: one per run, then the directory's.

    Args:
        run_dir: a run directory of a CACC config, with checkpoints.
        episodes: greedy evaluation episodes per run.
        seed: the episodes' seed (folded with each run's id).

    Returns:
        JSON-ready dicts, ``kind`` "run" for each run and "config" last.

    Raises:
        ValueError: if the directory holds no checkpoint or its environment is not CACC.
    """
    groups = latest_groups(run_dir)
    if not groups:
        raise ValueError(f"{run_dir!r} holds no checkpoint")
    lines, every_r_bar, every_collided = [], [], []
    name = os.path.basename(os.path.normpath(run_dir))
    for step in sorted(groups.values()):
        config, params, runs, meta = load_runs(run_dir, step)
        if config.env != "cacc":
            raise ValueError(f"{run_dir!r} trained on {config.env!r}, not cacc")
        r_bar, lengths, max_steps = original_metric(config, params, [r["run_id"] for r in runs], episodes, seed)
        collided = lengths < max_steps
        for r, run in enumerate(runs):
            lines.append({"kind": "run", "config": name, "scenario": config.env_args.get("scenario", "catchup"),
                          "label": run["label"], "seed": run["seed"], "update": int(meta["chunk"]) * config.updates_per_chunk,
                          "episodes": episodes, "r_bar": float(r_bar[r].mean()), "r_bar_std": float(r_bar[r].std()),
                          "collided": float(collided[r].mean()), "mean_length": float(lengths[r].mean())})
        every_r_bar.append(r_bar.ravel())
        every_collided.append(collided.ravel())
    r_bar, collided = np.concatenate(every_r_bar), np.concatenate(every_collided)
    lines.append({"kind": "config", "config": name, "runs": len(lines), "episodes": int(r_bar.size),
                  "r_bar": float(r_bar.mean()), "collided": float(collided.mean())})
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories of CACC configs")
    p.add_argument("--episodes", type=int, default=50, help="episodes per run (the original's 50)")
    p.add_argument("--seed", type=int, default=2000, help="the episodes' seed (default: 2000)")
    p.add_argument("--out", default=None, help="also append the lines to this file")
    args = p.parse_args()
    for run_dir in args.run_dirs:
        for line in score(run_dir, args.episodes, args.seed):
            text = json.dumps(line)
            print(text, flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(text + "\n")


if __name__ == "__main__":
    main()
