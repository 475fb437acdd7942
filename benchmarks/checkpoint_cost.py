"""What checkpoints and evaluation cost, as JSON lines.

Run (defaults: MPE simple_spread, 16 runs × 64 envs, T = 64, 8 chunks of 1 update):

    python benchmarks/checkpoint_cost.py          # ~2 min on 2 CPU cores

Lines:
    kind "train"       the same sweep with no checkpoint at all (``checkpoint`` false), the
                       default (each group's final state) and ``checkpoint_every`` 1 (every
                       chunk): env_steps_per_s after the first chunk (compile), wall_s.
    kind "checkpoint"  one checkpoint: size_mib on disk, blocking_s (``save`` returns:
                       the arrays are copied off the device) and total_s (until written).
    kind "eval"        ``jaxpo eval``'s program: episodes_per_s over every run, compile_s.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import jax

import jaxpo
from jaxpo.run import checkpoint
from jaxpo.run.events import ChunkEvent, Group
from jaxpo.run.evaluate import latest_groups, load_runs, run_episodes


def dir_mib(path: str) -> float:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files) / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="MPE_simple_spread_v3")
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--num-steps", type=int, default=64)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--episodes", type=int, default=100)
    args = p.parse_args()
    out = tempfile.mkdtemp(prefix="jaxpo-ckpt-")
    config = {"env": args.env, "num_envs": args.num_envs, "num_steps": args.num_steps, "updates_per_chunk": 1}
    steps = args.chunks * args.num_envs * args.num_steps
    common = {"env": args.env, "runs": args.runs, "num_envs": args.num_envs, "num_steps": args.num_steps,
              "backend": jax.default_backend()}
    # (checkpoint, checkpoint_every): the first run pays the compile for all
    for i, (keep_any, every) in enumerate([(False, 0), (False, 0), (True, 0), (True, 1)]):
        name = f"every{every}" if keep_any and every else f"run{i}"
        start = time.perf_counter()
        result = jaxpo.sweep({"config": config, "run": {"seeds": args.runs, "steps": steps, "out": out, "name": name,
                                                        "progress": False, "checkpoint": keep_any,
                                                        "checkpoint_every": every}})
        wall = time.perf_counter() - start
        program = result.programs[0]
        timed = result.seconds - program.first_chunk_seconds
        env_steps = args.runs * (program.num_updates - 1) * program.config.steps_per_update
        print(json.dumps({"kind": "train", **common, "checkpoint": keep_any, "checkpoint_every": every,
                          "env_steps_per_s": round(env_steps / timed), "wall_s": round(wall, 2)}), flush=True)

    run_dir = os.path.join(out, "every1")
    step = checkpoint.steps(run_dir)[-1]
    size = dir_mib(os.path.join(checkpoint.checkpoint_dir(run_dir), str(step)))
    state = checkpoint.restore(run_dir, target=checkpoint.trained_target).state
    saver = checkpoint.Checkpointer(os.path.join(out, "timing"), every=1)
    group = Group(program.config, program.runs, 1)
    metrics = {k: v[:, :1] for k, v in program.metrics.items()}
    event = ChunkEvent(group, 0, program.env_steps[:1], program.env_steps[:1], metrics, state, 0.0)
    saver.start(group)
    start = time.perf_counter()
    saver.chunk(event)
    blocking = time.perf_counter() - start
    saver.close()
    total = time.perf_counter() - start
    print(json.dumps({"kind": "checkpoint", **common, "size_mib": round(size, 2), "blocking_s": round(blocking, 3),
                      "total_s": round(total, 3)}), flush=True)

    cfg, params, runs, _ = load_runs(run_dir, latest_groups(run_dir)[0])
    start = time.perf_counter()
    run_episodes(cfg, params, [r["run_id"] for r in runs], args.episodes, 0, True)
    first = time.perf_counter() - start
    *_, rate = run_episodes(cfg, params, [r["run_id"] for r in runs], args.episodes, 1, True)
    print(json.dumps({"kind": "eval", **common, "episodes": args.episodes, "episodes_per_s": round(rate, 1),
                      "compile_s": round(first, 2)}), flush=True)


if __name__ == "__main__":
    main()
