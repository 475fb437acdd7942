"""How a sweep scales with its number of runs R, as JSON lines.

Run:  python benchmarks/sweep_scaling.py                       # R = 1 4 16 64 256 1024
      python benchmarks/sweep_scaling.py --runs 1 16 --updates 4

Each R is a sweep of R runs (an lr grid × seeds, so runs differ in traced values) of
16 envs on MPE simple_spread, trained through ``jaxpo.sweep`` exactly as ``jaxpo sweep``
does, in a fresh subprocess (so peak memory is its own). One JSON object per line on
stdout; a configuration that fails or times out prints an ``error`` field instead.

Fields:
    runs (R), settings, seeds, num_envs (E), num_steps (T), updates (per run),
    updates_per_chunk (K), backend, device_kind, jax_version.
    runs_per_group    G, the group size the driver chose from its memory estimate
                      (``Trainer.bytes_per_run``) and the free memory; groups = ceil(R / G).
    chunk_compiles    compiled chunk programs in the sweep (1 when every group reuses it).
    compile_s         seconds spent tracing, lowering and compiling (jax.monitoring events),
                      once per sweep.
    first_chunk_s     wall seconds of the first chunk (compile included).
    env_steps_per_s   environment steps per second of all runs together, after compile:
                      T × E × R × updates of the chunks after each group's first, divided by
                      their wall time.
    runs_per_s        runs finished per second at that rate, for runs of ``updates`` updates.
    sweep_s           wall seconds of the whole sweep (compile and reports included).
    peak_rss_mib      peak resident memory of the process; baseline_rss_mib before the sweep;
                      peak_mib_per_run = (peak − baseline) / min(R, G) (includes the compiler's
                      memory, so large at small R); marginal_mib_per_run = the peak's growth per
                      run since the previous R (what one more run in a group costs).
    estimate_mib_per_run  the driver's estimate of one run's memory.
    device_peak_mib   accelerator ``peak_bytes_in_use`` (null on CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from throughput import rss_mib  # benchmarks/ is on sys.path when run as a script

DEFAULT_RUNS = (1, 4, 16, 64, 256, 1024)


def measure(args) -> dict:
    """One sweep of ``args.runs[0]`` runs, measured in this process."""
    import jax
    import numpy as np

    import jaxpo
    from jaxpo.run.driver import Hook
    from jaxpo.experiments.sweeps import execute, plan

    compile_seconds = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, seconds, **_: compile_seconds.append(seconds) if name.startswith("/jax/core/compile/") else None)

    class ChunkTimer(Hook):
        """Wall time of every chunk but each group's first (which may compile)."""

        def __init__(self):
            self.steady, self.env_steps, self.last = 0.0, 0, None

        def start(self, batch):
            self.last = None

        def chunk(self, event):
            now = time.perf_counter()
            if self.last is not None:
                self.steady += now - self.last
                self.env_steps += len(event.group.runs) * len(event.updates) * event.group.config.steps_per_update
            self.last = now

    num_runs = args.runs[0]
    settings = min(num_runs, 4)
    lrs = list(np.geomspace(1e-3, 3e-3, settings))
    experiment = jaxpo.Experiment().replace(
        config={"num_envs": args.num_envs, "num_steps": args.num_steps, "updates_per_chunk": args.updates_per_chunk},
        run={"steps": args.updates * args.num_envs * args.num_steps, "seeds": num_runs // settings,
             "progress": False, "out": args.out, "name": f"R{num_runs}"},
        sweep={"grid": {"lr": lrs}} if settings > 1 else {},
    )
    baseline = rss_mib()
    start = time.perf_counter()
    ready = plan(experiment)
    timer = ChunkTimer()
    program = ready.programs[0]
    tr = jaxpo.trainer(program.config)
    result = execute(ready, hooks=[timer])
    sweep_s = time.perf_counter() - start
    device = jax.devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    peak = rss_mib()
    rate = timer.env_steps / timer.steady if timer.steady else float("nan")
    per_run_steps = program.num_updates * program.config.steps_per_update
    return {
        "runs": len(result.runs), "settings": settings, "seeds": num_runs // settings,
        "num_envs": args.num_envs, "num_steps": args.num_steps, "updates": program.num_updates,
        "updates_per_chunk": program.config.updates_per_chunk, "runs_per_group": program.group_size,
        "groups": -(-len(program.runs) // program.group_size), "chunk_compiles": program.compiles,
        "compile_s": round(sum(compile_seconds), 2), "first_chunk_s": round(program.first_chunk_seconds, 2),
        "env_steps_per_s": round(rate), "runs_per_s": round(rate / per_run_steps, 3),
        "sweep_s": round(sweep_s, 1), "peak_rss_mib": round(peak), "baseline_rss_mib": round(baseline),
        "peak_mib_per_run": round((peak - baseline) / min(len(result.runs), program.group_size), 2),
        "estimate_mib_per_run": round(tr.bytes_per_run() / 2**20, 2),
        "device_peak_mib": round(stats["peak_bytes_in_use"] / 2**20) if stats and "peak_bytes_in_use" in stats else None,
        "backend": jax.default_backend(), "device_kind": device.device_kind, "jax_version": jax.__version__,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, nargs="+", default=list(DEFAULT_RUNS))
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-steps", type=int, default=32)
    parser.add_argument("--updates", type=int, default=8, help="updates per run")
    parser.add_argument("--updates-per-chunk", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per R")
    parser.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.single:
        print(json.dumps(measure(args)), flush=True)
        return 0
    previous = None
    with tempfile.TemporaryDirectory() as out:
        for runs in args.runs:
            cmd = [sys.executable, os.path.abspath(__file__), "--single", "--runs", str(runs), "--out", out,
                   "--num-envs", str(args.num_envs), "--num-steps", str(args.num_steps),
                   "--updates", str(args.updates), "--updates-per-chunk", str(args.updates_per_chunk)]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
                record = json.loads(lines[-1]) if done.returncode == 0 and lines else \
                    {"runs": runs, "error": done.stderr.strip().splitlines()[-1:] or f"exit {done.returncode}"}
            except subprocess.TimeoutExpired:
                record = {"runs": runs, "error": f"timeout after {args.timeout:.0f} s"}
            if "error" not in record and previous is not None and record["runs_per_group"] > previous["runs_per_group"]:
                record["marginal_mib_per_run"] = round((record["peak_rss_mib"] - previous["peak_rss_mib"])
                                                       / (record["runs_per_group"] - previous["runs_per_group"]), 2)
            previous = record if "error" not in record else previous
            print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
