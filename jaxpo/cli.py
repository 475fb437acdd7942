"""Command line: ``jaxpo train`` (the default experiment) and ``jaxpo envs``."""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time

import numpy as np

from jaxpo.support import PRESETS, make_support

DEFAULTS = dict(
    env="MPE_simple_spread_v3",
    preset="khop",
    kappa=1,
    num_envs=32,
    num_steps=64,
    steps=1_024_000,
    seeds=1,
    out="runs",
)


def parse_env_arg(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` -> ``(key, value)``; VALUE is a Python literal when it parses as one."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--env-arg must look like KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        pass  # keep it a string
    return key, value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxpo",
        description="Cooperative multi-agent policy optimisation defined by support matrices (S_A, S_R).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser(
        "train",
        help="train a preset (default: κ=1 advantage support on MPE simple_spread)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Train in one compiled program; writes <out>/<name>/metrics.csv and learning_curve.png.",
    )
    tr.add_argument("--env", default=DEFAULTS["env"], help="environment name (see `jaxpo envs`)")
    tr.add_argument(
        "--env-arg", action="append", type=parse_env_arg, default=[], metavar="KEY=VALUE",
        help="environment parameter, repeatable (e.g. --env-arg local_ratio=0.5)",
    )
    tr.add_argument("--preset", default=DEFAULTS["preset"], choices=PRESETS, help="support preset")
    tr.add_argument(
        "--kappa", type=int, default=DEFAULTS["kappa"],
        help="κ for the khop preset (ignored by other presets): hops of the env's coupling graph "
        "aggregated in the advantage",
    )
    tr.add_argument("--num-envs", type=_positive_int, default=DEFAULTS["num_envs"], help="parallel environments per run")
    tr.add_argument("--num-steps", type=_positive_int, default=DEFAULTS["num_steps"], help="rollout length T per update")
    tr.add_argument(
        "--steps", type=_positive_int, default=DEFAULTS["steps"],
        help="environment steps per run (rounded up to whole chunks of updates)",
    )
    tr.add_argument("--seeds", type=_positive_int, default=DEFAULTS["seeds"], help="number of seeds, trained in parallel (vmap)")
    tr.add_argument("--seed", type=int, default=0, help="first seed")
    tr.add_argument("--chunks", type=_positive_int, default=20, help="progress/log points (chunks of updates)")
    tr.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    tr.add_argument("--ent-coef", type=float, default=0.01, help="entropy coefficient")
    tr.add_argument("--clip-eps", type=float, default=0.2, help="PPO clip ε on each term's importance weight")
    tr.add_argument("--per-agent-params", action="store_true", help="per-agent parameters instead of shared + agent id")
    tr.add_argument("--critic-input", default="local", choices=("local", "global", "agent"),
                    help="critic input: own observation, global state, or global state + own observation")
    tr.add_argument(
        "--scheme", default="simultaneous", choices=("simultaneous", "sequential"),
        help="sequential = exact HAPPO (agents updated one after another; needs --per-agent-params)",
    )
    tr.add_argument("--value-norm", action="store_true", help="MAPPO's running value normalisation")
    tr.add_argument("--recurrent", action="store_true", help="GRU actor and critic (hidden states reset at episode starts)")
    tr.add_argument(
        "--seq-len", type=_positive_int, default=None,
        help="with --recurrent: training sequence length (must divide --num-steps; default: the whole rollout)",
    )
    tr.add_argument("--value-loss", default="mse", choices=("mse", "huber"), help="critic loss (huber: δ = 10)")
    tr.add_argument("--out", default=DEFAULTS["out"], help="output directory")
    tr.add_argument("--name", default=None, help="run name (default: <env>-<preset>-<time>)")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    sub.add_parser("envs", help="list environment names")
    return parser


def cmd_train(args: argparse.Namespace) -> int:
    from jaxpo.train import Config, runs, train

    env_kwargs = dict(args.env_arg)
    updates = -(-args.steps // (args.num_envs * args.num_steps))
    chunks = min(args.chunks, updates)
    updates = -(-updates // chunks) * chunks
    try:
        config = Config(
            env=args.env, env_kwargs=env_kwargs, num_envs=args.num_envs, num_steps=args.num_steps,
            num_updates=updates, updates_per_chunk=updates // chunks,
            share_params=not args.per_agent_params, critic_input=args.critic_input,
            scheme=args.scheme, value_norm=args.value_norm, value_loss=args.value_loss,
            recurrent=args.recurrent, seq_len=args.seq_len,
            num_minibatches=_minibatches(args.num_envs * args.num_steps),
        )
        env = config.make_env()
        kappa = args.kappa if args.preset == "khop" else None
        support = make_support(args.preset, env.num_agents, kappa=kappa, coupling=env.coupling)
        hyper, seeds, labels = runs(
            support, range(args.seed, args.seed + args.seeds),
            lr=args.lr, ent_coef=args.ent_coef, clip_eps=args.clip_eps,
        )
    except ValueError as err:
        print(f"jaxpo train: error: {err}", file=sys.stderr)
        return 2
    name = args.name or f"{args.env}-{support.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir = os.path.join(args.out, name)

    actions = f"{env.num_actions}-dim continuous actions" if env.continuous else f"{env.num_actions} actions"
    print(f"env: {args.env} {env_kwargs or ''} — {env.num_agents} agents, {actions}")
    print(support.describe())
    print(
        f"runs: {len(seeds)} seed(s) × {config.num_updates} updates × {config.steps_per_update} env steps "
        f"= {config.num_updates * config.steps_per_update:,} env steps per run"
    )
    result = train(config, hyper, seeds, labels=labels, out_dir=out_dir, progress=not args.no_progress)
    before, after = result.initial_return(), result.final_return()
    total_steps = config.num_updates * config.steps_per_update * len(seeds)
    summary = {
        "return_before": float(np.nanmean(before)),
        "return_after": float(np.nanmean(after)),
        "wall_seconds": round(result.seconds, 1),
        "compile_seconds": round(result.compile_seconds, 1),
        "env_steps_per_second": round(total_steps / max(result.seconds - result.compile_seconds, 1e-9)),
        "out_dir": out_dir,
    }
    print(f"return (mean episode return per agent): before {summary['return_before']:.3f} → after {summary['return_after']:.3f}")
    if "win_rate" in result.metrics:
        summary["win_rate_before"] = float(np.nanmean(result.metrics["win_rate"][:, 0]))
        summary["win_rate_after"] = float(np.nanmean(result.final("win_rate")))
        print(f"win rate: before {summary['win_rate_before']:.3f} → after {summary['win_rate_after']:.3f}")
    print(json.dumps(summary))
    return 0


def _minibatches(batch: int, preferred: int = 4) -> int:
    """The largest count ≤ ``preferred`` that divides the batch."""
    return max(m for m in range(1, preferred + 1) if batch % m == 0)


def cmd_envs(_: argparse.Namespace) -> int:
    from jaxpo.envs import registered_names

    print("\n".join(registered_names()))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return {"train": cmd_train, "envs": cmd_envs}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
