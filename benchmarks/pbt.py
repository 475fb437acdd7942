"""PBT and successive halving against grid and random search, at equal env steps.

    python benchmarks/pbt.py                        # both tasks, 8 sweep seeds (~15 min on 2 CPU cores)
    python benchmarks/pbt.py --tasks public_goods --sweep-seeds 2 --quick
    python benchmarks/pbt.py --tasks support        # PBT over the support (κ) on public_goods and traffic_grid

Every method gets the same 8 run slots for the same env steps per slot (so the same
total), and searches the learning rate over the same log-uniform range:

    grid      8 learning rates log-spaced over the range
    random    8 draws (sample_seed = the sweep seed)
    pbt       those 8 draws as the first population; every 1/8 of the budget the bottom
              quarter copies a top-quarter learner and perturbs (×0.8 / ×1.25) or redraws
              its learning rate
    halving   those 8 draws; every 1/8 of the budget a trial in the bottom half of its
              rung stops and its slot starts a new draw

Per sweep: the best run's final return (mean over the last 10% of updates) and the
population's mean. Over sweep seeds (each its own env seed and draws): IQM with a 95%
stratified-bootstrap CI (rliable). Tasks: ``mpe`` (MPE simple_spread, 16 envs × 32
steps, 64-64 MLP) and ``public_goods`` (8 agents, coupling radius 1, κ = 1, 16 envs ×
50 steps), whose learning rate fails at both ends of the range. ``support``: PBT with
κ as an axis (category) beside the learning rate, on public_goods (c = 1) and
traffic_grid (2 × 4), reporting the κ its final population holds.

Writes ``<out>/results.json``, ``<out>/results.md`` and prints one JSON line per
(task, method).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter

import numpy as np

TASKS = {
    "mpe": {"config": {"env": "MPE_simple_spread_v3", "num_envs": 16, "num_steps": 32, "hidden": [64, 64],
                       "updates_per_chunk": 5},
            "support": {}, "steps": 512 * 200, "lr": (1e-4, 1e-1)},
    "public_goods": {"config": {"env": "public_goods", "env_kwargs": {"num_agents": 8, "radius": 1}, "num_envs": 16,
                                "num_steps": 50, "hidden": [32, 32], "updates_per_chunk": 5},
                     "support": {"preset": "khop", "kappa": 1}, "steps": 800 * 40, "lr": (1e-4, 0.3)},
}
SUPPORT_TASKS = {
    "public_goods": {"config": TASKS["public_goods"]["config"], "steps": 800 * 80, "kappas": [0, 1, 2, 3]},
    "traffic_grid": {"config": {"env": "traffic_grid", "env_kwargs": {"rows": 2, "cols": 4}, "num_envs": 16,
                                "num_steps": 50, "hidden": [32, 32], "updates_per_chunk": 5},
                     "steps": 800 * 80, "kappas": [0, 1, 2, 3]},
}
METHODS = ("grid", "random", "pbt", "halving")
SLOTS = 8


def sweep_spec(task: dict, method: str, seed: int, out: str, steps: int) -> dict:
    """The experiment of one sweep: ``method`` on ``task`` with sweep seed ``seed``."""
    low, high = task["lr"]
    chunks = steps // (task["config"]["num_envs"] * task["config"]["num_steps"] * task["config"]["updates_per_chunk"])
    if method == "grid":
        sweep = {"grid": {"lr": [float(x) for x in np.geomspace(low, high, SLOTS)]}}
    else:
        sweep = {"random": {"lr": {"loguniform": [low, high]}}, "samples": SLOTS, "sample_seed": seed}
    if method == "pbt":
        sweep.update(schedule="pbt", ready=max(1, chunks // 8), fraction=0.25, schedule_seed=seed)
    elif method == "halving":
        sweep.update(schedule="halving", ready=max(1, chunks // 8), fraction=0.5, schedule_seed=seed)
    return {"config": task["config"], "support": task["support"], "sweep": sweep,
            "run": {"steps": steps, "seeds": 1, "seed": 1000 + seed, "out": out, "name": f"{method}-{seed}",
                    "progress": False, "checkpoint": False, "bootstrap_reps": 200}}


def final_scores(result) -> np.ndarray:
    """Each slot's final return (mean over the last 10% of updates): ``[8]``."""
    return np.array([row["final_return"] for row in result.summary], np.float64)


def iqm(values) -> dict:
    """IQM and its 95% stratified-bootstrap CI over sweep seeds (rliable)."""
    from jaxpo.run.report import group_statistics

    stats = group_statistics({"x": np.asarray(values, np.float64)}, reps=2000)["x"]
    return {"iqm": stats["iqm"], "ci_low": stats["iqm_ci_low"], "ci_high": stats["iqm_ci_high"], "n": stats["runs"]}


def run_method(name: str, task: dict, method: str, seeds: range, out: str, steps: int) -> dict:
    import jaxpo

    best, population, seconds = [], [], time.perf_counter()
    for seed in seeds:
        scores = final_scores(jaxpo.sweep(sweep_spec(task, method, seed, out, steps)))
        best.append(float(np.nanmax(scores)))
        population.append(float(np.nanmean(scores)))
    return {"task": name, "method": method, "sweep_seeds": len(seeds), "slots": SLOTS, "env_steps_per_slot": steps,
            "best_final_return": iqm(best), "population_final_return": iqm(population),
            "per_seed_best": best, "seconds": round(time.perf_counter() - seconds, 1)}


def run_support(name: str, task: dict, seeds: range, out: str, steps: int) -> dict:
    """PBT over κ (and lr): which κ its final populations hold, per sweep seed pooled."""
    import jaxpo
    from jaxpo.run.report import read_csv

    held, best_kappa = Counter(), Counter()
    for seed in seeds:
        spec = {"config": task["config"], "support": {"preset": "khop"},
                "sweep": {"random": {"kappa": {"choice": task["kappas"]}, "lr": {"loguniform": [1e-3, 3e-2]}},
                          "samples": SLOTS, "sample_seed": seed, "schedule": "pbt", "schedule_seed": seed,
                          "ready": max(1, steps // (800 * 5) // 8), "fraction": 0.25, "resample": 0.25},
                "run": {"steps": steps, "seeds": 1, "seed": 1000 + seed, "out": out, "name": f"kappa-{name}-{seed}",
                        "progress": False, "checkpoint": False, "bootstrap_reps": 200}}
        result = jaxpo.sweep(spec)
        lineage = read_csv(os.path.join(result.out_dir, "lineage.csv"))
        last = lineage["env_steps"] == lineage["env_steps"].max()
        held.update(int(k) for k in np.asarray(lineage["kappa"])[last])
        scores = final_scores(result)
        best_kappa[int(np.asarray(lineage["kappa"])[last][int(np.nanargmax(scores))])] += 1
    total = sum(held.values())
    return {"task": name, "method": "pbt-kappa", "sweep_seeds": len(seeds), "kappas": task["kappas"],
            "final_population_kappa_share": {str(k): held[k] / total for k in task["kappas"]},
            "best_member_kappa_count": {str(k): best_kappa[k] for k in task["kappas"]}, "env_steps_per_slot": steps}


def markdown(rows: list[dict]) -> str:
    fmt = lambda s: f"{s['iqm']:.2f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}]"
    lines = ["| task | method | best final return, IQM [95% CI] | population's final return | sweep seeds × slots × steps |",
             "|---|---|---|---|---|"]
    for r in rows:
        if "best_final_return" in r:
            lines.append(f"| {r['task']} | {r['method']} | {fmt(r['best_final_return'])} | "
                         f"{fmt(r['population_final_return'])} | {r['sweep_seeds']} × {r['slots']} × "
                         f"{r['env_steps_per_slot']:,} |")
    kappa = [r for r in rows if r["method"] == "pbt-kappa"]
    if kappa:
        lines += ["", "| task | κ held by the final populations (share) | best member's κ (count of sweeps) |",
                  "|---|---|---|"]
        for r in kappa:
            share = ", ".join(f"κ={k}: {v:.2f}" for k, v in r["final_population_kappa_share"].items())
            count = ", ".join(f"κ={k}: {v}" for k, v in r["best_member_kappa_count"].items())
            lines.append(f"| {r['task']} | {share} | {count} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", default=["mpe", "public_goods", "support"],
                        choices=[*TASKS, "support"])
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    parser.add_argument("--sweep-seeds", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="a quarter of the steps (a smoke run)")
    parser.add_argument("--out", default="benchmarks/results/pbt")
    args = parser.parse_args(argv)
    if args.sweep_seeds < 1:
        parser.error("--sweep-seeds must be positive")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "results.json")
    rows = json.load(open(path)) if os.path.exists(path) else []
    seeds = range(args.sweep_seeds)
    from jaxpo.run.report import write_text

    def keep(row: dict) -> None:  # results so far, rewritten after each (task, method)
        nonlocal rows
        rows = [r for r in rows if (r["task"], r["method"]) != (row["task"], row["method"])] + [row]
        print(json.dumps(row), flush=True)
        write_text(path, json.dumps(rows, indent=1))
        write_text(os.path.join(args.out, "results.md"), markdown(rows))

    with tempfile.TemporaryDirectory() as runs:
        for name in args.tasks:
            if name == "support":
                for env, task in SUPPORT_TASKS.items():
                    keep(run_support(env, task, seeds, runs, task["steps"] // (4 if args.quick else 1)))
                continue
            for method in args.methods:
                keep(run_method(name, TASKS[name], method, seeds, runs, TASKS[name]["steps"] // (4 if args.quick else 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
