"""How training cost scales with the number of agents N at a fixed agent batch, as JSON lines.

Run (defaults: public_goods ring and traffic_grid, khop κ = 1, N in 16 64 256 1024,
16384 agents per environment step, i.e. num_envs = 16384 / N):

    python benchmarks/agent_scaling.py --support-form dense     # before: dense [N, N] supports
    python benchmarks/agent_scaling.py --support-form auto      # after: neighbour lists when sparse
    python benchmarks/agent_scaling.py --agent-batch 4096 --num-agents 16 64 --num-steps 8
    python benchmarks/agent_scaling.py --envs wireless --interaction-hops 1 --support-form dense  # S_A per state

public_goods uses a ring of N agents; traffic_grid a √N × √N grid (N must be a square,
side 2..32); wireless (not in the default ``--envs``) N users on a line. Each (env, N) is measured in a fresh subprocess (the script re-runs itself
with ``--single``), so peak memory is that configuration's own. One JSON object per line
goes to stdout, everything else to stderr; a configuration that fails or runs past
``--timeout`` prints a line with an ``error`` field instead.

Fields of every line:
    env, num_agents (N), num_envs (E = agent_batch / N), agent_batch, num_steps (T),
        updates_per_chunk (K), num_epochs, num_minibatches, hidden, share_params,
        interaction_hops (null: a fixed support), support_form (requested), S_A_form / S_R_form ("dense" or "sparse:K", as chosen),
        backend, jax_version.
    init_s          seconds of the first ``init_runs`` call (compile + run).
    compile_s       seconds to lower + compile the train chunk (``.lower().compile()``).
    first_chunk_s   compile_s plus the first chunk's run: what the driver reports as a
                    run's compile time (its first chunk).
    timed_s, chunks_timed   wall seconds of the timed chunk calls after one warm-up call
                    (at least 2 calls, more until ``--min-seconds``).
    agent_steps_per_s   T × E × N × K × chunks_timed / timed_s, after compile.
    peak_rss_mib    peak resident memory of the measuring process (``ru_maxrss``), MiB;
                    baseline_rss_mib just before the train program was built.
    device_peak_mib ``peak_bytes_in_use`` of device 0 (null on CPU).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

from throughput import device_peak_mib, rss_mib  # benchmarks/ is on sys.path when run as a script

DEFAULT_NUM_AGENTS = (16, 64, 256, 1024)
ENVS = ("public_goods", "traffic_grid", "wireless")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="jaxpo training cost against the number of agents; prints JSON lines (see the module docstring).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--envs", nargs="+", choices=ENVS, default=list(ENVS[:2]))
    p.add_argument("--num-agents", type=int, nargs="+", default=list(DEFAULT_NUM_AGENTS), help="N values")
    p.add_argument("--agent-batch", type=int, default=16384, help="agents per environment step, E × N")
    p.add_argument("--support-form", choices=("dense", "sparse", "auto"), default="auto",
                   help="how S_A and S_R are stored (Hyper.create's support_form)")
    p.add_argument("--kappa", type=int, default=1, help="khop support hops")
    p.add_argument("--interaction-hops", type=int, default=None,
                   help="κ of a state-dependent khop (Config.interaction_hops; wireless): each step's S_A "
                        "from its state's graph, in the S_A's form")
    p.add_argument("--num-steps", type=int, default=16, help="T, rollout length per update")
    p.add_argument("--updates-per-chunk", type=int, default=1, help="K, updates per compiled call")
    p.add_argument("--num-epochs", type=int, default=2)
    p.add_argument("--num-minibatches", type=int, default=2)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--per-agent-params", action="store_true",
                   help="per-agent parameter sets (share_params=False) instead of shared + one-hot agent id")
    p.add_argument("--min-seconds", type=float, default=2.0, help="keep calling the chunk until this long has passed")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per (env, N) subprocess")
    p.add_argument("--single", nargs=2, metavar=("ENV", "N"), help=argparse.SUPPRESS)
    return p


def env_kwargs(env: str, n: int) -> dict:
    """public_goods: a ring of n agents; traffic_grid: a √n × √n grid; wireless: n users on a line."""
    if env == "public_goods":
        return dict(num_agents=n, graph="ring")
    if env == "wireless":
        return dict(num_users=n)
    side = math.isqrt(n)
    if side * side != n:
        raise ValueError(f"traffic_grid needs a square number of agents, got N = {n}")
    return dict(rows=side, cols=side)


def _form(matrix) -> str:
    from jaxpo.core.sparse import NeighbourLists

    return f"sparse:{matrix.width}" if isinstance(matrix, NeighbourLists) else "dense"


def measure(args, env: str, n: int) -> dict:
    """Compiles and times the train chunk of one (env, N) in this process."""
    import jax
    import jax.numpy as jnp

    import jaxpo
    from jaxpo import Hyper

    if args.agent_batch % n:
        raise ValueError(f"--agent-batch ({args.agent_batch}) must be a multiple of N ({n})")
    config = jaxpo.Config(
        env=env, env_kwargs=env_kwargs(env, n), num_envs=args.agent_batch // n, num_steps=args.num_steps,
        updates_per_chunk=args.updates_per_chunk, num_epochs=args.num_epochs,
        num_minibatches=args.num_minibatches, hidden=tuple(args.hidden), share_params=not args.per_agent_params,
        interaction_hops=args.interaction_hops,
    )
    tr = jaxpo.trainer(config)
    sup = jaxpo.make_support("khop", n, kappa=args.kappa, coupling=tr.env.coupling)
    single = Hyper.create(sup, support_form=args.support_form)
    hyper = Hyper.stack([single])
    keys = jax.random.PRNGKey(0)[None]
    baseline = rss_mib()

    t0 = time.perf_counter()
    state = jax.block_until_ready(tr.init_runs(keys, hyper))
    init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    chunk = tr.chunk_runs.lower(state, hyper).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = jax.block_until_ready(chunk(state, hyper))  # warm-up: the first chunk
    first_run_s = time.perf_counter() - t0
    calls, t0 = 0, time.perf_counter()
    while calls < 2 or time.perf_counter() - t0 < args.min_seconds:
        state, metrics = jax.block_until_ready(chunk(state, hyper))
        calls += 1
    timed_s = time.perf_counter() - t0
    if not bool(jnp.all(jnp.isfinite(metrics["policy_loss"]))):
        print("warning: non-finite policy loss", file=sys.stderr)
    agent_steps = calls * args.updates_per_chunk * config.steps_per_update * n
    return dict(
        env=env, num_agents=n, num_envs=config.num_envs, agent_batch=args.agent_batch, num_steps=args.num_steps,
        updates_per_chunk=args.updates_per_chunk, num_epochs=args.num_epochs, num_minibatches=args.num_minibatches,
        hidden=list(args.hidden), share_params=config.share_params, support_form=args.support_form,
        interaction_hops=args.interaction_hops,
        S_A_form=_form(single.S_A), S_R_form=_form(single.S_R), backend=jax.default_backend(),
        jax_version=jax.__version__, init_s=round(init_s, 2), compile_s=round(compile_s, 2),
        first_chunk_s=round(compile_s + first_run_s, 2), timed_s=round(timed_s, 3), chunks_timed=calls,
        agent_steps_per_s=round(agent_steps / timed_s, 1), baseline_rss_mib=round(baseline, 1),
        peak_rss_mib=round(rss_mib(), 1), device_peak_mib=device_peak_mib(),
    )


def _child_argv(args, env: str, n: int) -> list[str]:
    argv = [sys.executable, os.path.abspath(__file__), "--single", env, str(n),
            "--agent-batch", str(args.agent_batch), "--support-form", args.support_form, "--kappa", str(args.kappa),
            "--num-steps", str(args.num_steps), "--updates-per-chunk", str(args.updates_per_chunk),
            "--num-epochs", str(args.num_epochs), "--num-minibatches", str(args.num_minibatches),
            "--hidden", *map(str, args.hidden), "--min-seconds", str(args.min_seconds)]
    hops = [] if args.interaction_hops is None else ["--interaction-hops", str(args.interaction_hops)]
    return argv + hops + (["--per-agent-params"] if args.per_agent_params else [])


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.single:
        env, n = args.single[0], int(args.single[1])
        real_stdout, sys.stdout = sys.stdout, sys.stderr  # library prints must not corrupt the JSON stream
        try:
            record = measure(args, env, n)
        finally:
            sys.stdout = real_stdout
        print(json.dumps(record), flush=True)
        return 0
    failures = 0
    for env in args.envs:
        for n in args.num_agents:
            print(f"[agent_scaling] {env} N={n} ({args.support_form}) ...", file=sys.stderr, flush=True)
            start, record = time.perf_counter(), None
            try:
                proc = subprocess.run(_child_argv(args, env, n), capture_output=True, text=True, timeout=args.timeout)
                lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
                if proc.returncode == 0 and lines:
                    record = json.loads(lines[-1])
                else:
                    tail = " | ".join((proc.stderr or "").strip().splitlines()[-3:])
                    error = f"exit code {proc.returncode}: {tail}"
            except subprocess.TimeoutExpired:
                error = f"timed out after {args.timeout:g} s"
            if record is None:
                failures += 1
                record = dict(env=env, num_agents=n, agent_batch=args.agent_batch,
                              support_form=args.support_form, error=error)
            record["process_wall_s"] = round(time.perf_counter() - start, 1)
            print(json.dumps(record), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
