"""Report on jaxpo's own environments (env-only throughput and policy returns) and on
one task of every cooperative JaxMARL family (env-only and training throughput).

Run:  python benchmarks/env_report.py [--envs public_goods traffic_grid wireless]
      [--seeds 2] [--updates U] [--skip-train] [--skip-throughput]
      python benchmarks/env_report.py --families [NAME ...]   (default: every family)

Prints JSON lines on stdout (notes and progress on stderr), three kinds:

``kind: "env_throughput"`` — one line per environment and size ("small": public_goods
    ring N=8, traffic_grid 4×4, wireless 16 users; "large": N = 1024 each — ring 1024,
    32×32 grid, 1024 users on a line). ``AutoReset`` env, E environments vmapped,
    ``lax.scan`` of T steps of uniformly random actions, one jitted call. Fields:
    env, size, env_kwargs, num_agents, num_envs, num_steps (T), compile_s, calls_timed,
    timed_s, env_steps_per_s (E·T·calls / timed_s), agent_steps_per_s (× N).

``kind: "returns"`` — one line per environment at its small size. Mean per-agent
    episode return (undiscounted episode return averaged over agents, then over
    episodes — the quantity ``jaxpo.train`` reports as ``return``) of:
      random     uniform actions, complete episodes from reset via
                 ``jaxpo.rollout.rollout(..., policy=uniform)``;
      reference  the env's ``reference_policy(key, state)``, complete episodes from reset
                 (own scan; the rollout's policy hook does not see the env state);
      khop0      IPPO (``khop`` κ = 0) trained with ``jaxpo.train``;
      khopC      ``khop`` κ = C (public_goods: C = its coupling radius; traffic_grid and
                 wireless: C = 1, their coupling is 1-hop), trained in the SAME
                 ``jaxpo.train`` call as khop0 (same Config, env steps and seeds).
    Evaluated policies report mean, sem (standard error over episodes) and episodes;
    trained ones report ``final`` (``TrainResult.final_return()``, mean of the last 10%
    of updates) per seed and its mean, and ``initial`` (first-update return of the
    untrained policy) per seed. The line also holds the Config fields that matter,
    env_steps_per_run, train_s (incl. compile_s).

``kind: "family_throughput"`` — with ``--families``, one line per JaxMARL family's task
    (``FAMILIES``): ``env`` as above (uniform random actions: discrete over the legal
    moves, continuous uniform in [−1, 1] and clipped to the Box), and ``train``: one seed
    of ``jaxpo.train`` at the family's CI-sized Config for ``updates`` train steps,
    ``env_steps_per_s`` after compile (the updates after the first chunk over their
    seconds) and ``compile_s`` (the first chunk, compile included).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import distrax
import jax
import jax.numpy as jnp
import numpy as np

import jaxpo
from jaxpo import envs
from jaxpo.core.networks import MASKED_LOGIT, ActorCritic
from jaxpo.core.rollout import acted_on
from jaxpo.core.rollout import reset as rollout_reset
from jaxpo.core.rollout import rollout

ENVS = ("public_goods", "traffic_grid", "wireless")

# Environment kwargs per size. Training uses the small size; max_steps is cut to 50 for
# traffic_grid (default 200) and wireless (default 100) so that one rollout of 50 steps
# holds exactly one whole episode per environment, as public_goods (default 50) does.
SIZES = {
    "public_goods": {"small": dict(num_agents=8, graph="ring", radius=1),
                     "large": dict(num_agents=1024, graph="ring", radius=1)},
    "traffic_grid": {"small": dict(rows=4, cols=4, max_steps=50),
                     "large": dict(rows=32, cols=32, max_steps=50)},
    "wireless": {"small": dict(num_users=16, layout="line", max_steps=50),
                 "large": dict(num_users=1024, layout="line", max_steps=50)},
}

# Training budget per env (small size): same for κ = 0 and κ = C, and for every seed.
TRAIN = {
    "public_goods": dict(num_envs=16, num_steps=50, updates_per_chunk=10, hidden=(32, 32)),
    "traffic_grid": dict(num_envs=16, num_steps=50, updates_per_chunk=10, hidden=(32, 32)),
    "wireless": dict(num_envs=16, num_steps=50, updates_per_chunk=10, hidden=(32, 32)),
}


# One task per cooperative JaxMARL family: its env kwargs and the CI-sized training of its
# learning test (tests/test_jaxmarl_*.py), so the training rate is that of a tested program.
FAMILIES = {
    "MPE_simple_spread_v3": dict(env_kwargs={}, train=dict(num_envs=32, num_steps=26, hidden=(64, 64))),
    "MPE_simple_facmac_3a_v1": dict(env_kwargs={}, train=dict(num_envs=32, num_steps=26, hidden=(64, 64))),
    "HeuristicEnemySMAX": dict(env_kwargs=dict(scenario="3m"), train=dict(num_envs=32, num_steps=32, hidden=(64, 64))),
    "switch_riddle": dict(env_kwargs={}, train=dict(num_envs=32, num_steps=16, hidden=(32, 32), recurrent=True,
                                                    seq_len=8)),
    "hanabi": dict(env_kwargs={}, train=dict(num_envs=32, num_steps=64, hidden=(128, 128))),
    "overcooked": dict(env_kwargs=dict(layout="cramped_room", shaped_reward=1.0),
                       train=dict(num_envs=32, num_steps=100, hidden=(64, 64), conv_features=(16, 16),
                                  conv_kernels=(3, 3))),
    "overcooked_v2": dict(env_kwargs=dict(layout="cramped_room", shaped_reward=1.0),
                          train=dict(num_envs=32, num_steps=100, hidden=(64, 64), conv_features=(16, 16),
                                     conv_kernels=(3, 3))),
    "jaxnav": dict(env_kwargs=dict(max_steps=60), train=dict(num_envs=32, num_steps=60, hidden=(64, 64))),
    "hopper_3x1": dict(env_kwargs=dict(episode_length=100), train=dict(num_envs=32, num_steps=50, hidden=(64, 64))),
    "ant_4x2": dict(env_kwargs={}, train=dict(num_envs=32, num_steps=50, hidden=(64, 64))),
}


def note(*args) -> None:
    print("[env_report]", *args, file=sys.stderr, flush=True)


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def coupling_kappa(env_name: str, env: envs.Env) -> int:
    """κ = C matching the env's coupling: public_goods' radius, else 1 (1-hop coupling)."""
    return int(env.radius) if env_name == "public_goods" else 1


def uniform_policy(params, obs, mask) -> distrax.Categorical:
    """Uniform over the available actions; ``[..., N, A]`` logits."""
    del params, obs
    return distrax.Categorical(logits=jnp.where(mask, 0.0, MASKED_LOGIT))


# ---------------------------------------------------------------- throughput


def env_rate(env: envs.AutoReset, num_envs: int, num_steps: int, min_seconds: float) -> dict:
    """Env-only rate: jitted ``lax.scan`` of ``num_steps`` vmapped steps of random actions,
    computing what a rollout with a local critic reads of each step (the carried
    ``acted_on`` TimeStep, the pre-reset observations, the rewards) and no more."""

    def step(carry, key):
        state, ts, total = carry
        key_act, key_env = jax.random.split(key)
        if env.continuous:  # [E, N, A], clipped to the Box by the env
            actions = jax.random.uniform(key_act, ts.action_mask.shape, minval=-1.0, maxval=1.0)
        else:  # [E, N]
            actions = uniform_policy(None, None, ts.action_mask).sample(seed=key_act).astype(jnp.int32)
        state, ts = jax.vmap(env.step)(jax.random.split(key_env, num_envs), state, actions)
        return (state, acted_on(ts, "local"), total + ts.reward.sum() + ts.final_obs.sum()), None

    @jax.jit
    def run(state, ts, key):
        key, sub = jax.random.split(key)
        (state, ts, total), _ = jax.lax.scan(step, (state, ts, jnp.float32(0)), jax.random.split(sub, num_steps))
        return state, ts, key, total

    state, ts = jax.block_until_ready(jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), num_envs)))
    ts, key = acted_on(ts, "local"), jax.random.PRNGKey(1)
    t0 = time.perf_counter()
    compiled = run.lower(state, ts, key).compile()
    compile_s = time.perf_counter() - t0
    state, ts, key, total = jax.block_until_ready(compiled(state, ts, key))  # warm-up
    calls, t0 = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - t0 < min_seconds:
        state, ts, key, total = compiled(state, ts, key)
        calls += 1
        if calls >= 3:
            jax.block_until_ready(total)
    timed_s = time.perf_counter() - t0
    steps = calls * num_steps * num_envs
    return dict(
        num_envs=num_envs, num_steps=num_steps, compile_s=round(compile_s, 3), calls_timed=calls,
        timed_s=round(timed_s, 4), env_steps_per_s=round(steps / timed_s, 1),
        agent_steps_per_s=round(steps * env.num_agents / timed_s, 1),
    )


# ---------------------------------------------------------------- returns of fixed policies


def random_return(env: envs.AutoReset, num_envs: int, episodes: int, seed: int) -> dict:
    """Uniform actions, ``episodes`` whole episodes per env from reset, via ``jaxpo.rollout``."""
    net = ActorCritic.create(
        num_agents=env.num_agents, obs_dim=env.obs_dim, num_actions=env.num_actions,
        critic_dim=env.obs_dim, hidden=(8,), activation="tanh", shared=True,
    )  # only its value head runs (rollout records values); the policy is overridden

    @jax.jit
    def run(key):
        k_params, k_reset, k_roll = jax.random.split(key, 3)
        state = rollout_reset(env, net, k_reset, num_envs)
        _, traj = rollout(env, net, net.init(k_params), state, k_roll, episodes * env.max_steps, "local",
                          policy=uniform_policy)
        return traj.episode_return, traj.episode_length > 0  # [T, E] team-mean returns at episode ends

    returns, ended = jax.device_get(run(jax.random.PRNGKey(seed)))
    return _summary(returns[ended], num_envs * episodes)


def reference_return(env: envs.AutoReset, num_envs: int, episodes: int, seed: int) -> dict:
    """``env.reference_policy(key, state)``, ``episodes`` whole episodes per env from reset."""

    def step(carry, key):
        state, running = carry
        key_act, key_env = jax.random.split(key)
        actions = jax.vmap(env.reference_policy)(jax.random.split(key_act, num_envs), state)  # [E, N]
        state, ts = jax.vmap(env.step)(jax.random.split(key_env, num_envs), state, actions)
        running = running + ts.reward
        done = ts.done  # [E]
        out = (jnp.where(done, running.mean(-1), 0.0), done)
        return (state, jnp.where(done[:, None], 0.0, running)), out

    @jax.jit
    def run(key):
        k_reset, k_steps = jax.random.split(key)
        state, _ = jax.vmap(env.reset)(jax.random.split(k_reset, num_envs))
        running = jnp.zeros((num_envs, env.num_agents), jnp.float32)
        _, out = jax.lax.scan(step, (state, running), jax.random.split(k_steps, episodes * env.max_steps))
        return out

    returns, ended = jax.device_get(run(jax.random.PRNGKey(seed)))
    return _summary(returns[ended], num_envs * episodes)


def _summary(returns: np.ndarray, expected: int) -> dict:
    if returns.size != expected:
        note(f"warning: {returns.size} episodes ended, expected {expected}")
    r = returns.astype(np.float64)
    sem = r.std(ddof=1) / np.sqrt(r.size) if r.size > 1 else float("nan")
    return dict(mean=round(float(r.mean()), 4), sem=round(float(sem), 4), episodes=int(r.size))


# ---------------------------------------------------------------- trained policies


def trained_returns(env_name: str, env_kwargs: dict, seeds: list[int], updates: int | None) -> tuple[dict, dict]:
    budget = dict(TRAIN[env_name])
    updates = 60 if updates is None else updates
    budget["updates_per_chunk"] = max(d for d in range(1, min(10, updates) + 1) if updates % d == 0)
    config = jaxpo.Config(env=env_name, env_kwargs=env_kwargs, **budget)
    env = config.make_env()
    kappa = coupling_kappa(env_name, env)
    supports = [jaxpo.make_support("khop", env.num_agents, kappa=k, coupling=env.coupling) for k in (0, kappa)]
    hyper, run_seeds, labels = jaxpo.runs(supports, seeds=seeds)
    result = jaxpo.train(config, hyper, run_seeds, num_updates=updates, labels=labels, progress=False)
    final, initial = result.final_return(), result.initial_return()
    s = len(seeds)
    policies = {}
    for idx, k in enumerate((0, kappa)):
        part = slice(idx * s, (idx + 1) * s)
        policies[f"khop{k}"] = dict(
            kappa=k, support=supports[idx].name,
            final=[round(float(x), 4) for x in final[part]],
            final_mean=round(float(np.mean(final[part])), 4),
            initial=[round(float(x), 4) for x in initial[part]],
        )
    h = jax.device_get(result.hyper)
    info = dict(
        config=dict(num_envs=config.num_envs, num_steps=config.num_steps, num_updates=updates,
                    num_epochs=config.num_epochs, num_minibatches=config.num_minibatches,
                    hidden=list(config.hidden), share_params=config.share_params,
                    critic_input=config.critic_input, adv_norm=config.adv_norm),
        hyper={k: round(float(getattr(h, k)[0]), 6) for k in ("lr", "clip_eps", "gamma", "gae_lambda", "ent_coef")},
        seeds=seeds,
        env_steps_per_run=int(result.env_steps[-1]),
        train_s=round(result.seconds, 2),
        compile_s=round(result.compile_seconds, 2),
    )
    return policies, info


def train_rate(name: str, updates: int) -> dict:
    """One seed of ``jaxpo.train`` at ``FAMILIES[name]``'s Config: env steps/s after the
    first chunk (which holds the compile), and that chunk's seconds."""
    family = FAMILIES[name]
    config = jaxpo.Config(env=name, env_kwargs=family["env_kwargs"], updates_per_chunk=updates // 4,
                          **family["train"])
    env = config.make_env()
    hyper, seeds, _ = jaxpo.runs(jaxpo.make_support("ippo", env.num_agents), seeds=[0])
    result = jaxpo.train(config, hyper, seeds, num_updates=updates, progress=False)
    timed_steps = (updates - config.updates_per_chunk) * config.num_envs * config.num_steps
    return dict(config={k: list(v) if isinstance(v, tuple) else v for k, v in family["train"].items()},
                updates=updates, compile_s=round(result.compile_seconds, 2),
                env_steps_per_s=round(timed_steps / (result.seconds - result.compile_seconds), 1))


def family_report(names: list[str], updates: int, num_envs: int, num_steps: int, min_seconds: float,
                  common: dict, out) -> None:
    """A ``family_throughput`` line per name (see the module docstring)."""
    for name in names:
        t0 = time.perf_counter()
        note(f"{name}: env throughput (E={num_envs}, T={num_steps}) and training ({updates} updates)")
        env = envs.AutoReset(envs.make(name, **FAMILIES[name]["env_kwargs"]))
        record = dict(kind="family_throughput", env=name, env_kwargs=FAMILIES[name]["env_kwargs"],
                      num_agents=env.num_agents, continuous=env.continuous,
                      env_only=env_rate(env, num_envs, num_steps, min_seconds), train=train_rate(name, updates),
                      seconds=round(time.perf_counter() - t0, 2), **common)
        print(json.dumps(record), file=out, flush=True)


# ---------------------------------------------------------------- driver


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Throughput and returns of jaxpo's own environments; JSON lines on stdout.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--envs", nargs="+", choices=ENVS, default=list(ENVS))
    p.add_argument("--seeds", type=int, default=2, help="training seeds 0..S-1 (per support)")
    p.add_argument("--updates", type=int, default=None,
                   help="override num_updates of every env's training budget (default: 60)")
    p.add_argument("--skip-train", action="store_true", help="returns lines without the trained policies")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-returns", action="store_true")
    p.add_argument("--num-envs", type=int, nargs=2, default=[16, 4], metavar=("SMALL", "LARGE"),
                   help="E for the throughput measurement at the small and large size")
    p.add_argument("--num-steps", type=int, default=100, help="T, steps per jitted throughput call")
    p.add_argument("--min-seconds", type=float, default=1.0, help="minimum timed seconds per throughput line")
    p.add_argument("--eval-envs", type=int, default=32, help="environments for the random/reference returns")
    p.add_argument("--eval-episodes", type=int, default=2, help="episodes per environment for those")
    p.add_argument("--families", nargs="*", choices=list(FAMILIES), default=None, metavar="NAME",
                   help=f"JaxMARL families' throughput instead (no names: all of {', '.join(FAMILIES)})")
    p.add_argument("--family-updates", type=int, default=8, help="train steps per family (a multiple of 4)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.seeds < 1 or (args.updates is not None and args.updates < 1):
        raise SystemExit("--seeds and --updates must be >= 1")
    common = dict(backend=jax.default_backend(), device_kind=jax.devices()[0].device_kind,
                  jax_version=jax.__version__, jaxpo_version=jaxpo.__version__)
    start = time.perf_counter()
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # library prints must not corrupt the JSON stream
    try:
        if args.families is not None:
            if args.family_updates < 8 or args.family_updates % 4:
                raise SystemExit("--family-updates must be a multiple of 4, at least 8")
            family_report(args.families or list(FAMILIES), args.family_updates, args.num_envs[0], args.num_steps,
                          args.min_seconds, common, real_stdout)
            return 0
        for name in args.envs:
            if not args.skip_throughput:
                for size, num_envs in zip(("small", "large"), args.num_envs):
                    kwargs = SIZES[name][size]
                    note(f"{name} {size}: env throughput, E={num_envs}, T={args.num_steps}")
                    t0 = time.perf_counter()
                    env = envs.AutoReset(envs.make(name, **kwargs))
                    rate = env_rate(env, num_envs, args.num_steps, args.min_seconds)
                    record = dict(kind="env_throughput", env=name, size=size, env_kwargs=kwargs,
                                  num_agents=env.num_agents, **rate,
                                  seconds=round(time.perf_counter() - t0, 2), **common)
                    print(json.dumps(record), file=real_stdout, flush=True)
            if args.skip_returns:
                continue
            t0 = time.perf_counter()
            kwargs = SIZES[name]["small"]
            env = envs.AutoReset(envs.make(name, **kwargs))
            note(f"{name}: random and reference returns ({args.eval_envs} envs x {args.eval_episodes} episodes)")
            policies = {
                "random": random_return(env, args.eval_envs, args.eval_episodes, seed=100),
                "reference": reference_return(env, args.eval_envs, args.eval_episodes, seed=101),
            }
            info = {}
            if not args.skip_train:
                note(f"{name}: training khop κ=0 and κ={coupling_kappa(name, env)}, seeds 0..{args.seeds - 1}")
                trained, info = trained_returns(name, kwargs, list(range(args.seeds)), args.updates)
                policies.update(trained)
            record = dict(kind="returns", env=name, size="small", env_kwargs=kwargs, num_agents=env.num_agents,
                          max_steps=env.max_steps, policies=policies, **info,
                          seconds=round(time.perf_counter() - t0, 2), **common)
            print(json.dumps(record), file=real_stdout, flush=True)
    finally:
        sys.stdout = real_stdout
    note(f"total {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
