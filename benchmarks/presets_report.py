"""The named methods side by side, at an equal budget of environment steps and the same seeds.

Run:  python benchmarks/presets_report.py [--tasks mpe smax] [--methods ...] [--seeds 2]
      [--mpe-steps 512000] [--smax-steps 327680]

Prints one JSON line per (task, method) on stdout and a markdown table on stderr.
Every method runs through the one training loop; what differs is data — the support
(S_A, S_R) and the ``Config`` options below, each as in its reference implementation:

  method              support             Config options
  ippo                ippo  (I, I)        local critic, shared params (JaxMARL IPPO)
  mappo               mappo (11ᵀ, I)      S_A on rewards (team reward), global critic, value
                                          norm, Huber δ=10, shared params (on-policy MAPPO)
  happo (sequential)  mappo's S_A         scheme="sequential" (exact HAPPO: agents one after
                                          another, fresh random order), team reward, global
                                          critic, value norm, Huber, per-agent params (HARL)
  happo (matrix)      happo (I, order-    the simultaneous matrix form; otherwise as
                      triangular S_R)     happo (sequential)
  joint               joint (11ᵀ, 11ᵀ)    global critic, shared params
  khop (default)      khop(coupling, 1)   jaxpo's default: κ = 1 advantage support, S_R = I,
                                          local critic, shared params

Tasks: ``mpe`` — MPE_simple_spread_v3 (3 agents, local_ratio 0.5), final mean episode
return per agent (last 10% of updates); ``smax`` — HeuristicEnemySMAX 3m, final win
rate (last 10% of updates). All methods of a task share E, T, epochs, minibatches,
network widths, lr, entropy coefficient and env steps; the seeds of one method are
vmapped in one compiled program. ``initial`` is the first update (untrained policy).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from jaxpo.core import support
from jaxpo import Config, runs, train

TEAM_CRITIC = dict(aggregate_in="reward", critic_input="global", value_norm=True, value_loss="huber")
METHODS: dict[str, tuple] = {  # name -> (support factory (n, coupling) -> Support, Config options)
    "ippo": (lambda n, g: support.ippo(n), dict()),
    "mappo": (lambda n, g: support.mappo(n), dict(TEAM_CRITIC)),
    "happo (sequential)": (lambda n, g: support.mappo(n), dict(TEAM_CRITIC, scheme="sequential", share_params=False)),
    "happo (matrix)": (lambda n, g: support.happo(n, seed=0), dict(TEAM_CRITIC, share_params=False)),
    "joint": (lambda n, g: support.joint(n), dict(critic_input="global")),
    "khop (default)": (lambda n, g: support.khop(g, 1), dict()),
}
TASKS = {
    "mpe": dict(env="MPE_simple_spread_v3", env_kwargs={}, num_envs=32, num_steps=64, lr=3e-3, metric="return"),
    "smax": dict(env="HeuristicEnemySMAX", env_kwargs={"scenario": "3m"}, num_envs=64, num_steps=64, lr=1e-3,
                 metric="win_rate"),
}


def run(task: str, method: str, seeds: list[int], env_steps: int) -> dict:
    spec = TASKS[task]
    make_support, options = METHODS[method]
    per_update = spec["num_envs"] * spec["num_steps"]
    chunks = 10
    updates = -(-env_steps // (per_update * chunks)) * chunks
    config = Config(
        env=spec["env"], env_kwargs=spec["env_kwargs"], num_envs=spec["num_envs"], num_steps=spec["num_steps"],
        updates_per_chunk=updates // chunks, hidden=(64, 64), **options,
    )
    env = config.make_env()
    sup = make_support(env.num_agents, env.coupling)
    hyper, seed_array, labels = runs(sup, seeds, lr=spec["lr"])
    start = time.perf_counter()
    result = train(config, hyper, seed_array, num_updates=updates, labels=labels, progress=False)
    metric = spec["metric"]
    final = result.final(metric)
    return {
        "task": task, "env": spec["env"], "env_kwargs": spec["env_kwargs"], "method": method,
        "support": sup.name, "options": options, "metric": metric, "seeds": seeds,
        "final": [round(float(x), 4) for x in final], "final_mean": round(float(np.mean(final)), 4),
        "initial": [round(float(x), 4) for x in result.metrics[metric][:, 0]],
        "env_steps_per_run": updates * per_update, "train_s": round(time.perf_counter() - start, 1),
        "compile_s": round(result.compile_seconds, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--mpe-steps", type=int, default=512_000)
    parser.add_argument("--smax-steps", type=int, default=327_680)
    args = parser.parse_args()
    budget = {"mpe": args.mpe_steps, "smax": args.smax_steps}
    rows = []
    for task in args.tasks:
        for method in args.methods:
            row = run(task, method, list(range(args.seeds)), budget[task])
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| method | " + " | ".join(f"{t} {TASKS[t]['metric']} (per seed; mean)" for t in args.tasks) + " |",
          file=sys.stderr)
    print("|---|" + "---|" * len(args.tasks), file=sys.stderr)
    for method in args.methods:
        cells = []
        for task in args.tasks:
            row = next(r for r in rows if r["task"] == task and r["method"] == method)
            cells.append(" / ".join(f"{x:.3f}" for x in row["final"]) + f"; **{row['final_mean']:.3f}**")
        print(f"| {method} | " + " | ".join(cells) + " |", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
