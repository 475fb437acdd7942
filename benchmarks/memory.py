"""Resident memory over a long run, as JSON lines.

Run (defaults: public_goods, 4 envs × 8 steps, one update a chunk, 10,000 updates per variant):

    python benchmarks/memory.py                      # both variants, one subprocess each
    python benchmarks/memory.py --updates 3000       # shorter, on a busy machine
    python benchmarks/memory.py --tracemalloc        # also the Python allocations that grew most
    python benchmarks/memory.py --variants full --checkpoint-every 10   # 1,000 saves in 10,000 updates

Variants (each in a fresh subprocess, so one does not see the other's memory):
    plain   ``jaxpo train``'s defaults: the metrics CSV, a final checkpoint.
    full    evaluation every 100 updates, a checkpoint every 1,000 chunks (``--checkpoint-every``),
            TensorBoard.

Lines:
    kind "rss"    variant (and the full one's checkpoint_every), update, rss_mib: VmRSS
                  (``/proc/self/status``) every 1,000 updates.
    kind "slope"  variant, kib_per_10k_updates: the least-squares slope of RSS over the
                  samples after the first quarter of the run (warm-up: compiles, caches),
                  per 10,000 updates; the goal is under 1,024 KiB both ways.
    kind "top"    (--tracemalloc) the allocation sites whose size grew most between the
                  first sample after warm-up and the last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

VARIANTS = ("plain", "full")
SAMPLE_EVERY = 1000  # updates


def rss_mib() -> float:
    """This process's resident memory (VmRSS), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def run_variant(variant: str, updates: int, trace: bool, checkpoint_every: int = 1000) -> None:
    """Trains one variant in this process, printing its lines."""
    import tracemalloc

    import jaxpo
    from jaxpo.run.events import Hook

    steps_per_update = 4 * 8
    tag = {"variant": variant, **({"checkpoint_every": checkpoint_every} if variant == "full" else {})}
    samples: list[tuple[int, float]] = []
    snapshots = []

    class Sampler(Hook):
        def chunk(self, event) -> None:
            update = int(event.updates[-1])
            if update % SAMPLE_EVERY == 0:
                samples.append((update, rss_mib()))
                print(json.dumps({"kind": "rss", **tag, "update": update, "rss_mib": round(samples[-1][1], 2)}),
                      flush=True)
                if trace and update in (updates // 4 // SAMPLE_EVERY * SAMPLE_EVERY or SAMPLE_EVERY, updates):
                    snapshots.append(tracemalloc.take_snapshot())

    if trace:
        tracemalloc.start(8)
    run = {"steps": updates * steps_per_update, "seeds": 1, "progress": False, "out": tempfile.mkdtemp(),
           "name": variant}
    if variant == "full":
        run.update(eval_every=100 * steps_per_update, eval_episodes=2, absolute_episodes=2, checkpoint_every=checkpoint_every,
                   log="csv,tensorboard")
    config = {"env": "public_goods", "env_kwargs": {"num_agents": 4}, "num_envs": 4, "num_steps": 8,
              "updates_per_chunk": 1}
    jaxpo.sweep(None, config=config, run=run, hooks=[Sampler()])
    late = [(u, r) for u, r in samples if u > updates // 4]
    if len(late) >= 2:
        u, r = np.array(late).T
        slope = np.polyfit(u, r, 1)[0] * 1024 * 10_000  # KiB per 10,000 updates
        print(json.dumps({"kind": "slope", **tag, "kib_per_10k_updates": round(float(slope), 1)}),
              flush=True)
    if len(snapshots) == 2:
        for stat in snapshots[1].compare_to(snapshots[0], "traceback")[:8]:
            print(json.dumps({"kind": "top", **tag, "size_diff_kib": round(stat.size_diff / 1024, 1),
                              "count_diff": stat.count_diff, "where": stat.traceback.format()[-6:]}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--updates", type=int, default=10_000, help="updates per variant (a multiple of 1,000)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: plain, full")
    p.add_argument("--tracemalloc", action="store_true", help="print the allocation sites that grew most")
    p.add_argument("--checkpoint-every", type=int, default=1000, help="the full variant's (chunks; 0: the final only)")
    p.add_argument("--variant", help=argparse.SUPPRESS)  # the subprocess's own
    args = p.parse_args()
    if args.variant:
        run_variant(args.variant, args.updates, args.tracemalloc, args.checkpoint_every)
        return
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    for variant in args.variants.split(","):
        flags = ["--variant", variant, "--updates", str(args.updates), "--checkpoint-every", str(args.checkpoint_every)] + (["--tracemalloc"] if args.tracemalloc else [])
        subprocess.run([sys.executable, __file__, *flags], env=env, check=True)


if __name__ == "__main__":
    main()
