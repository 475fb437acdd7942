"""Training and environment throughput of jaxpo, as JSON lines.

Run (defaults: MPE simple_spread, T = 64, E in 16 64 256 1024, 1 run):

    python benchmarks/throughput.py                              # ~3-5 min on 2 CPU cores
    python benchmarks/throughput.py --num-envs 16 64 --chunks 2  # quick
    python benchmarks/throughput.py --env traffic_grid --env-arg rows=4 --env-arg cols=4 --seeds 4
    python benchmarks/throughput.py --matched                    # the settings JaxMARL's IPPO uses
    python benchmarks/throughput.py --matched --num-envs 16 1024 --seeds 1 16

``--matched`` fixes JaxMARL's IPPO baseline settings (``baselines/IPPO/ippo_ff_mpe.py``):
MPE simple_spread, T = 128, 4 epochs × 4 minibatches, 64-64 tanh MLPs, ippo, and
measures every E in ``--num-envs`` (default 16 1024 4096) with every R in ``--seeds``
(default 1 16), train kind only, with ``--phases``.

Every ``num_envs`` is measured in a fresh subprocess (the script re-runs itself with
``--single``), so peak memory is that configuration's own: first the env-only rollout
(its peak is read before anything else is built), then the train program. One JSON
object per line goes to stdout, everything else to stderr. A configuration that fails
(out of memory, time limit) prints a line with an ``error`` field instead.

Fields of every line:
    kind            "train": the compiled train chunk (rollout + GAE + aggregation +
                    epochs × minibatches of PPO updates, K updates per call, vmapped over
                    runs); "env": random-action rollout of the same environment only
                    (``lax.scan`` of T vmapped ``AutoReset`` steps, uniform over the
                    action mask, jitted), over the same E × runs environments,
                    computing what a rollout reads of each step and no more; "raw":
                    the JaxMARL environment's own ``step`` likewise (its observations
                    carried, so XLA cannot drop them). Every program measured compiles
                    with jaxpo's XLA options (``jaxpo.program.compiled.compiler_options``;
                    XLA's defaults with ``--xla-defaults``), the command line's over them.
    env, env_kwargs, num_envs (E per run), num_steps (T), num_agents (N), runs (R,
                    vmapped seeds), backend (``jax.default_backend()``), device_kind,
                    num_devices, jax_version, jaxpo_version.
    backend_opt_level, xla_options
                    ``--backend-opt-level`` and the ``--xla-option`` pairs (null: none,
                    jaxpo's own compiler options).
    xla_defaults    ``--xla-defaults``: true when the programs compiled with XLA's default
                    options instead of jaxpo's (the command line's still over them).
    compile_s       seconds to lower + compile the timed function (``.lower().compile()``);
                    for "train", only when the command line's options differ from the
                    trainer's (``--backend-opt-level``, ``--xla-option``), else null and
                    ``start_s`` instead.
    timed_s         wall seconds of the timed calls (after ``--warmup`` untimed calls),
                    ended by ``jax.block_until_ready``: at least ``--chunks`` train calls /
                    3 env calls, and more until ``--min-seconds`` have passed.
    env_steps_per_s environment steps per second, all runs together: T × E × R per update
                    (train) or per call (env).
    agent_steps_per_s  env_steps_per_s × N.
    peak_rss_mib    peak resident memory of the measuring process (``ru_maxrss``), MiB,
                    read right after this kind's measurement; ``baseline_rss_mib`` is the
                    same just before its program was built (imports, env construction,
                    and for "train" the env-only measurement before it).
    device_peak_mib ``peak_bytes_in_use`` of device 0 in MiB when the backend reports
                    memory stats (GPU/TPU); null on CPU.
    process_wall_s  wall seconds of the whole subprocess for this num_envs (imports, both kinds).
Train lines also hold: updates_per_chunk (K), chunks_timed, updates_timed,
    updates_per_s, num_epochs, num_minibatches, hidden, recurrent, seq_len (L, 1 when
    feed-forward), scheme, preset (a ``--config`` file's own), parallel (``Config.parallel``:
    "envs" splits each run's environments over the ``num_devices``; ``--parallel``
    sets it, and ``JAX_NUM_CPU_DEVICES=D`` makes a CPU D devices).
    start_s: seconds from a new config to its first chunk, as the driver starts a group:
    ``Trainer.start`` (init and chunk built at once, init run), with the trainer's own
    options; with the command line's, null, and init_compile_s (the init program built
    and run) then compile_s (the chunk built with them) instead. With ``--sequential-start``,
    start_s times init built and run, then the chunk built (what ``Trainer.start`` overlaps).
    start_stages: with start_s from ``Trainer.start``, each program's seconds in each build
    stage, ``{"init": {"trace_s", "lower_s", "xla_compile_s"}, "chunk": {...}}`` as jax
    records them (``BuildStages``); init's compile overlaps the chunk's trace, so the stages
    sum to more than start_s.
A train measurement whose last timed update's policy loss is not finite prints an ``error``
line instead: a diverged run is no measurement.
Env lines also hold: calls_timed (each call is T steps of E × R environments).

With ``--phases`` (on in ``--matched``) train lines also hold, per phase of an update —
``rollout`` (T policy + env steps), ``advantages`` (GAE, S_A aggregation, normalisation,
cut into samples) and ``update`` (epochs × minibatches of gradient steps):
    phase_ms            wall milliseconds of the phase on its own (jitted alone,
                        vmapped over the R runs; the chunk fuses them, so the sum
                        differs a little from 1000 / updates_per_s).
    flops_per_env_step, bytes_per_env_step
                        XLA's cost analysis (``compiled.cost_analysis()``: "flops",
                        "bytes accessed") per environment step, with ``total``. XLA
                        counts a loop body once whatever its trip count, so each phase
                        is compiled at one unit of its loops — one rollout step, a
                        one-step rollout's advantages, one minibatch's gradient step —
                        and scaled by its count per update (T, T, epochs × minibatches);
                        recurrent programs are costed with one-step training sequences
                        (the same samples through the same cell, so the GRU's replay scan
                        is one loop body as well).
                        The one-minibatch program shuffles B/M samples, not B: its sort
                        is a sliver of the phase.
    min_flops_per_env_step
                        the analytical minimum for this network: every agent's actor and
                        critic forward pass in the rollout (2 · in·out per dense layer)
                        and forward + backward in each epoch (``min_flops_per_env_step``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

from jaxpo.cli import parse_env_arg
from jaxpo.program.cost import bootstrap_blocks, min_flops_per_env_step, phase_costs, rollout_of

DEFAULT_NUM_ENVS = (16, 64, 256, 1024)
MATCHED_NUM_ENVS = (16, 1024, 4096)
MATCHED_RUNS = (1, 16)
# JaxMARL IPPO's settings (baselines/IPPO/config/ippo_ff_mpe.yaml); E and R vary.
MATCHED = dict(env="MPE_simple_spread_v3", env_arg=[], num_steps=128, num_epochs=4, num_minibatches=4,
               hidden=[64, 64], critic_input="local", recurrent=False, seq_len=None, scheme="simultaneous", preset="ippo",
               kinds=["train"], phases=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="jaxpo training and env-only throughput; prints JSON lines (see the module docstring).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--env", default="MPE_simple_spread_v3", help="environment name (jaxpo.envs.make)")
    p.add_argument("--env-arg", action="append", type=parse_env_arg, default=[], metavar="KEY=VALUE",
                   help="environment keyword argument (repeatable; VALUE parsed as a Python literal)")
    p.add_argument("--num-envs", type=int, nargs="+", default=None,
                   help=f"E values to measure (default {' '.join(map(str, DEFAULT_NUM_ENVS))}; --matched: "
                        f"{' '.join(map(str, MATCHED_NUM_ENVS))})")
    p.add_argument("--num-steps", type=int, default=64, help="T, rollout length per update")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help=f"R values: runs vmapped in one program (default 1; --matched: {' '.join(map(str, MATCHED_RUNS))})")
    p.add_argument("--updates-per-chunk", type=int, default=2, help="K, train updates per compiled call")
    p.add_argument("--chunks", type=int, default=2, help="at least this many timed train calls")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls after compile")
    p.add_argument("--num-epochs", type=int, default=4)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--recurrent", action="store_true", help="GRU actor and critic")
    p.add_argument("--critic-input", default="local", choices=("local", "global", "agent"),
                   help="what the critic reads (global: MAPPO's centralised critic)")
    p.add_argument("--seq-len", type=int, default=None, help="with --recurrent: training sequence length")
    p.add_argument("--scheme", default="simultaneous", choices=("simultaneous", "sequential"),
                   help="sequential: exact HAPPO (per-agent parameters)")
    p.add_argument("--preset", default="ippo",
                   help="support preset (traced data: it does not change the compiled program)")
    p.add_argument("--min-seconds", type=float, default=1.0,
                   help="keep calling the timed function until at least this long has passed")
    p.add_argument("--kinds", nargs="+", choices=("train", "env", "raw"), default=["train", "env"],
                   help="raw: the JaxMARL environment alone, without jaxpo's adapter (JaxMARL envs only)")
    p.add_argument("--phases", action="store_true",
                   help="also time each phase of an update and count its flops and bytes (see the docstring)")
    p.add_argument("--matched", action="store_true",
                   help="JaxMARL IPPO's settings (T 128, 4 x 4, 64-64 tanh, MPE simple_spread), E 16 1024 4096 "
                        "x R 1 16 unless --num-envs/--seeds are given, train kind, with --phases")
    p.add_argument("--config", metavar="FILE.yaml", default=None,
                   help="measure an experiment file's config (e.g. jaxpo/experiments/configs/jaxmarl_ippo_rnn_smax.yaml): "
                        "its env, network, schedule, hyperparameters and support (--preset ignored), the "
                        "learning rate's horizon its own run length; --num-envs (default its own), --seeds and "
                        "--updates-per-chunk still apply")
    p.add_argument("--backend-opt-level", type=int, choices=(0, 1, 2, 3), default=None,
                   help="compile at this XLA backend (LLVM) optimisation level instead of "
                        "jaxpo's choice (jaxpo.program.compiled.compiler_options; XLA's default is 3)")
    p.add_argument("--xla-defaults", action="store_true",
                   help="compile with XLA's default options, not jaxpo's (Trainer(..., xla_defaults=True)); "
                        "--backend-opt-level and --xla-option still apply over them")
    p.add_argument("--sequential-start", action="store_true",
                   help="train: build the init program, run it, then build the chunk (start_s then times "
                        "that), to measure what Trainer.start's overlap saves")
    p.add_argument("--xla-option", action="append", type=parse_xla_option, default=[], metavar="NAME=VALUE",
                   help="an XLA option over jaxpo's (repeatable; e.g. xla_cpu_experimental_ynn_fusion_type="
                        "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE, XLA's CPU default)")
    p.add_argument("--parallel", choices=("runs", "envs"), default=None,
                   help="the config's layout over the devices (default: its own; Config.parallel). With "
                        "JAX_NUM_CPU_DEVICES=D a CPU is D devices, and envs splits each run's environments over them")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per num_envs subprocess")
    p.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    return p


def parse_xla_option(text: str) -> tuple[str, object]:
    """``NAME=VALUE`` -> ``(name, value)``; VALUE an int when it reads as one, else the text."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--xla-option must look like NAME=VALUE, got {text!r}")
    return name, int(value) if value.lstrip("-").isdigit() else value


# ---------------------------------------------------------------- measuring (child)


def xla_options(args) -> dict:
    """The XLA options of every measured program: jaxpo's own on this backend
    (``compiler_options``; none with ``--xla-defaults``) with the command line's
    (``--backend-opt-level``, ``--xla-option``) over them."""
    import jax

    from jaxpo.program.compiled import compiler_options

    level = {} if args.backend_opt_level is None else {"xla_backend_optimization_level": args.backend_opt_level}
    own = {} if getattr(args, "xla_defaults", False) else compiler_options(jax.default_backend()) or {}
    return {**own, **level, **dict(args.xla_option)}


def make_trainer(config, xla_defaults: bool = False):
    """jaxpo's ``Trainer`` for ``config`` (``jaxpo.trainer``, cached). With ``xla_defaults``
    a new one whose jitted chunk carries no options of jaxpo's (``Trainer(...,
    xla_defaults=True)``): ``compile`` adds to a jit's own options rather than replacing them."""
    import jaxpo
    from jaxpo.program import compiled

    return compiled.Trainer(config, xla_defaults=True) if xla_defaults else jaxpo.trainer(config)


STAGE_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace_s",
                "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
                "/jax/core/compile/backend_compile_duration": "xla_compile_s"}


class BuildStages:
    """The seconds each program built inside the ``with`` block spent in each build stage, as
    jax records them (``jax.monitoring``'s compile events): ``stages[program] = {"trace_s",
    "lower_s", "xla_compile_s"}``, ``program`` as jax names it (``chunk``, ``jit(chunk)``).

    Every program built in the block has its entry (an op run eagerly there is one too; a jit
    traced inside another's trace is not: its time is in the outer one's). Stages that ran at
    once (``Trainer.start``'s init compile beside the chunk's trace) each count in full, so
    the stages' sum can exceed the wall time."""

    def __enter__(self):
        import jax

        self.stages: dict[str, dict[str, float]] = {}
        jax.monitoring.register_event_duration_secs_listener(self._record)
        return self

    def _record(self, event: str, seconds: float, fun_name: str = "?", **_) -> None:
        if event in STAGE_EVENTS:
            program = self.stages.setdefault(fun_name.removeprefix("jit(").removesuffix(")"), {})
            program[STAGE_EVENTS[event]] = round(program.get(STAGE_EVENTS[event], 0.0) + seconds, 3)

    def __exit__(self, *exc) -> None:
        import jax

        jax.monitoring.unregister_event_duration_listener(self._record)


def rss_mib() -> float:
    import resource

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / (1024 * 1024) if sys.platform == "darwin" else kib / 1024  # macOS reports bytes


def device_peak_mib():
    import jax

    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # not implemented on some backends
        return None
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return stats["peak_bytes_in_use"] / 2**20


def _common(args, env) -> dict:
    import jax

    import jaxpo

    return dict(
        env=args.env,
        env_kwargs=dict(args.env_arg),
        num_envs=args.num_envs[0],
        num_steps=args.num_steps,
        num_agents=env.num_agents,
        runs=args.seeds,
        backend=jax.default_backend(),
        device_kind=jax.devices()[0].device_kind,
        num_devices=jax.device_count(),
        jax_version=jax.__version__,
        jaxpo_version=jaxpo.__version__,
        backend_opt_level=args.backend_opt_level,
        xla_options=dict(args.xla_option) or None,
        xla_defaults=args.xla_defaults,
    )


def _measure_train(args) -> dict:
    import jax
    import numpy as np

    import jaxpo

    num_envs = args.num_envs[0]
    config = jaxpo.Config(
        env=args.env,
        env_kwargs=dict(args.env_arg),
        num_envs=num_envs,
        num_steps=args.num_steps,
        updates_per_chunk=args.updates_per_chunk,
        num_epochs=args.num_epochs,
        num_minibatches=args.num_minibatches,
        hidden=tuple(args.hidden),
        critic_input=args.critic_input,
        recurrent=args.recurrent,
        seq_len=args.seq_len,
        scheme=args.scheme,
        share_params=args.scheme == "simultaneous",
    ) if args.config is None else file_config(args.config, num_envs, args.updates_per_chunk)
    if args.parallel is not None:
        config = dataclasses.replace(config, parallel=args.parallel)
    tr = make_trainer(config, args.xla_defaults)
    if args.config is None:
        preset = args.preset
        sup = jaxpo.make_support(preset, tr.num_agents, coupling=tr.env.coupling)
        hyper, seeds, _ = jaxpo.runs(sup, seeds=range(args.seeds))
    else:  # the file's own hyperparameters and support, as jaxpo.train would run it
        preset, hyper = file_hyper(args.config, args.seeds)
        seeds = np.arange(args.seeds)
    keys = jax.vmap(jax.random.PRNGKey)(jax.numpy.asarray(seeds, jax.numpy.uint32))
    baseline = rss_mib()

    from jaxpo.program.parallel import put

    keys, hyper = put((keys, hyper), tr.run_sharding)  # as the driver places them
    start_s = init_compile_s = compile_s = start_stages = None
    t0 = time.perf_counter()
    if xla_options(args) == (tr.compiler_options or {}):  # the programs the driver builds, as it builds them
        if args.sequential_start:  # one after the other
            state = jax.block_until_ready(tr.init_runs(keys, hyper))
            tr.chunk_runs.lower(state, hyper).compile()
        else:
            with BuildStages() as built:
                state = jax.block_until_ready(tr.start(keys, hyper))
            start_stages = built.stages
        start_s, chunk = time.perf_counter() - t0, tr.chunk_runs
    else:  # the command line's options: the chunk built again with them
        state = jax.block_until_ready(tr.init_runs(keys, hyper))
        init_compile_s, t0 = time.perf_counter() - t0, time.perf_counter()
        chunk = tr.chunk_runs.lower(state, hyper).compile(xla_options(args))
        compile_s = time.perf_counter() - t0

    for _ in range(args.warmup):
        state, metrics = chunk(state, hyper)
    jax.block_until_ready((state, metrics) if args.warmup else state)
    calls, t0 = 0, time.perf_counter()
    while True:
        state, metrics = chunk(state, hyper)
        calls += 1
        if calls >= args.chunks:
            jax.block_until_ready((state, metrics))
            if time.perf_counter() - t0 >= args.min_seconds:
                break
    timed_s = time.perf_counter() - t0
    if not np.all(np.isfinite(np.asarray(metrics["policy_loss"]))):  # a diverged run is no measurement
        return dict(kind="train", **_common(args, tr.env), error="non-finite policy loss in the timed updates")

    updates = calls * args.updates_per_chunk
    env_steps = updates * config.steps_per_update * args.seeds
    phases = _phases(tr, state, hyper, xla_options(args)) if args.phases else {}
    return dict(
        kind="train",
        **_common(args, tr.env),
        updates_per_chunk=args.updates_per_chunk,
        chunks_timed=calls,
        updates_timed=updates,
        num_epochs=config.num_epochs,  # the config's (a --config file's own), not the flags' defaults
        num_minibatches=config.num_minibatches,
        hidden=list(config.hidden),
        recurrent=config.recurrent,
        shared_trunk=config.shared_trunk,
        seq_len=config.sequence_length,
        scheme=config.scheme,
        preset=preset,
        critic_input=config.critic_input,
        parallel=config.parallel,
        start_s=_round(start_s, 3),
        start_stages=start_stages,
        sequential_start=args.sequential_start,
        init_compile_s=_round(init_compile_s, 3),
        compile_s=_round(compile_s, 3),
        timed_s=round(timed_s, 4),
        updates_per_s=round(updates / timed_s, 3),
        env_steps_per_s=round(env_steps / timed_s, 1),
        agent_steps_per_s=round(env_steps * tr.num_agents / timed_s, 1),
        baseline_rss_mib=round(baseline, 1),
        peak_rss_mib=round(rss_mib(), 1),
        device_peak_mib=_round(device_peak_mib()),
        **phases,
    )


def _time_ms(fn, *args, options: dict | None = None, min_seconds: float = 0.5) -> tuple[float, object]:
    """``(mean wall milliseconds of a call of jit(fn)(*args) after one untimed call,
    its output)``, compiled with XLA ``options``."""
    import jax

    compiled = jax.jit(fn, compiler_options=options).lower(*args).compile()
    out = jax.block_until_ready(compiled(*args))
    calls, t0 = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - t0 < min_seconds:
        out = compiled(*args)
        calls += 1
        jax.block_until_ready(out)
    return (time.perf_counter() - t0) / calls * 1e3, out


def file_config(path: str, num_envs: int | None = None, updates_per_chunk: int | None = None):
    """An experiment file's ``Config``, at ``num_envs`` environments and K =
    ``updates_per_chunk`` updates per chunk where they are given (None: the file's)."""
    from jaxpo.experiments.experiment import load_yaml

    changes = dict(num_envs=num_envs, updates_per_chunk=updates_per_chunk)
    return dataclasses.replace(load_yaml(path).config, **{k: v for k, v in changes.items() if v is not None})


def file_hyper(path: str, runs: int):
    """An experiment file's ``Hyper`` for ``runs`` runs: its ``hyper`` section and support,
    the learning rate's horizon resolved as ``jaxpo.train`` resolves it (the file's own run
    length), so that ``anneal_lr`` anneals instead of dividing by 0.

    Args:
        path: the experiment file.
        runs: R.

    Returns:
        ``(preset, hyper)``: the file's support preset and its one setting's ``Hyper``,
            repeated (leaves ``[R, ...]``).
    """
    from jaxpo.experiments.experiment import load_yaml
    from jaxpo.experiments.settings import settings
    from jaxpo.program.config import Hyper

    experiment = load_yaml(path)
    return experiment.support.preset, Hyper.stack([settings(experiment)[0].hyper] * runs)


def _phases(tr, state, hyper, options: dict) -> dict:
    """Per-phase wall time (each phase compiled with XLA ``options``, the chunk's), XLA
    cost per env step and its minimum (module docstring)."""
    import jax

    cfg = tr.config
    data_of = jax.vmap(tr.training_data)
    update_of = jax.vmap(lambda s, d, h: tr.update(s, d, s.key, h))
    phase_ms = {}  # each phase runs on the previous one's output
    phase_ms["rollout"], traj = _time_ms(rollout_of(tr, cfg.num_steps), state, options=options)
    phase_ms["advantages"], data = _time_ms(data_of, state, traj, hyper, options=options)
    phase_ms["update"], _ = _time_ms(update_of, state, data, hyper, options=options)
    return dict(
        phase_ms={k: round(v, 2) for k, v in phase_ms.items()},
        **phase_costs(tr, state, hyper, bootstrap_blocks(traj)),
        min_flops_per_env_step=min_flops_per_env_step(tr, cfg.num_epochs),
    )


def _measure_env(args, raw: bool = False) -> dict:
    """The env-only rollout (``kind`` "env"); ``raw``: the JaxMARL environment itself
    (``kind`` "raw"), without jaxpo's adapter or ``AutoReset`` — its own ``step``, which
    resets inside, and ``get_avail_actions``: the floor of any framework on it."""
    import jax
    import jax.numpy as jnp

    from jaxpo import envs
    from jaxpo.core.rollout import acted_on, critic_features

    env = envs.AutoReset(envs.make(args.env, **dict(args.env_arg)))
    num_envs = args.num_envs[0] * args.seeds  # the train kind steps E envs in each of R runs
    num_steps = args.num_steps
    if raw and not hasattr(env.env, "agents"):
        raise ValueError(f"kind raw is for JaxMARL environments, not {args.env!r}")

    def uniform_actions(key, mask):
        if env.continuous:  # uniform in [0, 1] on every existing action dimension, [E, N, A]
            return jnp.where(mask, jax.random.uniform(key, mask.shape), 0.0)
        return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)  # [E, N]

    if raw:  # the JaxMARL env: dict observations and actions, its own auto-reset
        inner = env.env.env
        agents = inner.agents

        def reset_one(key):
            obs, state = inner.reset(key)
            return state, obs

        def step_one(key, state, actions):
            obs, state, reward, dones, _ = inner.step(key, state, {a: actions[i] for i, a in enumerate(agents)})
            return state, obs, reward

        adapter = env.env
        # the family's get_avail_actions (as the adapter asks it), None where all actions are available
        available = None if adapter.continuous else adapter.family.available_actions(inner)

        def mask_of(state):
            if available is None:  # e.g. MPE: every action always available
                return jnp.ones((num_envs, len(agents), env.num_actions), bool)
            avail = jax.vmap(available)(state)
            return jnp.stack([avail[a] for a in agents], axis=1).astype(bool)

        def one_step(carry, key):  # the observations carried, as the env kind's: XLA cannot drop them
            state, obs, total = carry
            key_act, key_env = jax.random.split(key)
            actions = uniform_actions(key_act, mask_of(state))
            state, obs, reward = jax.vmap(step_one)(jax.random.split(key_env, num_envs), state, actions)
            return (state, obs, total + sum(r.sum() for r in reward.values())), None

        @jax.jit
        def reset(key):
            return jax.vmap(reset_one)(jax.random.split(key, num_envs))
    else:  # what a rollout reads of each step: the carried TimeStep (acted_on), the critic input
        # of the pre-reset observations (a truncation bootstraps from its value), the rewards
        @jax.jit
        def reset(key):
            state, ts = jax.vmap(env.reset)(jax.random.split(key, num_envs))
            return state, acted_on(ts, args.critic_input)

        def one_step(carry, key):
            state, ts, total = carry
            key_act, key_env = jax.random.split(key)
            actions = uniform_actions(key_act, ts.action_mask)
            state, ts = jax.vmap(env.step)(jax.random.split(key_env, num_envs), state, actions)
            final = critic_features(ts.final_obs, ts.final_global_state, args.critic_input)
            return (state, acted_on(ts, args.critic_input), total + ts.reward.sum() + final.sum()), None

    @jax.jit
    def run(state, ts, key):
        key, key_steps = jax.random.split(key)
        (state, ts, total), _ = jax.lax.scan(
            one_step, (state, ts, jnp.float32(0)), jax.random.split(key_steps, num_steps)
        )
        return state, ts, key, total

    baseline = rss_mib()
    key = jax.random.PRNGKey(0)
    state, ts = jax.block_until_ready(reset(key))
    t0 = time.perf_counter()
    compiled = run.lower(state, ts, key).compile(xla_options(args))  # as the chunk compiles its rollout
    compile_s = time.perf_counter() - t0

    key = jax.random.PRNGKey(1)
    for _ in range(args.warmup):
        state, ts, key, total = compiled(state, ts, key)
    jax.block_until_ready(state)
    calls, t0 = 0, time.perf_counter()
    while True:
        state, ts, key, total = compiled(state, ts, key)
        calls += 1
        if calls >= 3:
            jax.block_until_ready(total)
            if time.perf_counter() - t0 >= args.min_seconds:
                break
    timed_s = time.perf_counter() - t0
    env_steps = calls * num_steps * num_envs
    return dict(
        kind="raw" if raw else "env",
        **_common(args, env),
        calls_timed=calls,
        compile_s=round(compile_s, 3),
        timed_s=round(timed_s, 4),
        env_steps_per_s=round(env_steps / timed_s, 1),
        agent_steps_per_s=round(env_steps * env.num_agents / timed_s, 1),
        baseline_rss_mib=round(baseline, 1),
        peak_rss_mib=round(rss_mib(), 1),
        device_peak_mib=_round(device_peak_mib()),
    )


def _round(x, nd=1):
    return None if x is None else round(x, nd)


def single(args) -> None:
    """Measures one num_envs (env first, then train); JSON lines to the real stdout, all else to stderr."""
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # library prints must not corrupt the JSON stream
    try:
        for kind in ("raw", "env", "train"):
            if kind in args.kinds:
                record = _measure_train(args) if kind == "train" else _measure_env(args, raw=kind == "raw")
                print(json.dumps(record), file=real_stdout, flush=True)
    finally:
        sys.stdout = real_stdout


# ---------------------------------------------------------------- driving (parent)


def _child_argv(args, num_envs: int, runs: int) -> list[str]:
    argv = [sys.executable, os.path.abspath(__file__), "--single", "--kinds", *args.kinds,
            "--env", args.env, "--num-envs", str(num_envs), "--num-steps", str(args.num_steps),
            "--seeds", str(runs), "--updates-per-chunk", str(args.updates_per_chunk),
            "--chunks", str(args.chunks), "--warmup", str(args.warmup),
            "--num-epochs", str(args.num_epochs), "--num-minibatches", str(args.num_minibatches),
            "--hidden", *map(str, args.hidden), "--preset", args.preset, "--critic-input", args.critic_input,
            "--min-seconds", str(args.min_seconds), "--scheme", args.scheme]
    if args.phases:
        argv.append("--phases")
    if args.parallel:
        argv += ["--parallel", args.parallel]
    if args.config:
        argv += ["--config", args.config]
    if args.backend_opt_level is not None:
        argv += ["--backend-opt-level", str(args.backend_opt_level)]
    if args.xla_defaults:
        argv.append("--xla-defaults")
    if args.sequential_start:
        argv.append("--sequential-start")
    for name, value in args.xla_option:
        argv += ["--xla-option", f"{name}={value}"]
    if args.recurrent:
        argv += ["--recurrent"] + ([] if args.seq_len is None else ["--seq-len", str(args.seq_len)])
    for key, value in args.env_arg:
        argv += ["--env-arg", f"{key}={value!r}"]
    return argv


def from_config_file(args) -> None:
    """Sets ``args``' env, its arguments, T and the support preset to the ``--config`` file's,
    and E and the layout where the command line leaves them out: every record, and the
    env-only kinds' environments, are then the file's, in the parent and in a ``--single``
    process alike."""
    from jaxpo.experiments.experiment import load_yaml

    experiment = load_yaml(args.config)
    cfg = experiment.config
    args.env, args.env_arg, args.num_steps = cfg.env, list(cfg.env_args.items()), cfg.num_steps
    args.preset, args.num_envs = experiment.support.preset, args.num_envs or [cfg.num_envs]
    args.parallel = args.parallel or cfg.parallel


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.matched:
        for name, value in MATCHED.items():
            setattr(args, name, value)
    if args.config:
        from_config_file(args)
    args.num_envs = args.num_envs or list(MATCHED_NUM_ENVS if args.matched else DEFAULT_NUM_ENVS)
    args.seeds = args.seeds or list(MATCHED_RUNS if args.matched else (1,))
    if min(args.num_envs) < 1 or min(args.seeds) < 1:
        raise SystemExit("--num-envs and --seeds must be positive integers")
    if args.phases and args.parallel == "envs":  # each phase is timed as one device's program
        raise SystemExit("--phases times each phase on one device: it cannot be used with --parallel envs")
    if args.single:
        if len(args.num_envs) != 1 or len(args.seeds) != 1:
            raise SystemExit("--single needs exactly one --num-envs and one --seeds")
        args.seeds = args.seeds[0]
        single(args)
        return 0
    failures = 0
    for runs in args.seeds:
        for num_envs in args.num_envs:
            failures += _measure_in_subprocess(args, num_envs, runs)
    return 1 if failures else 0


def _measure_in_subprocess(args, num_envs: int, runs: int) -> int:
    """Prints the child's JSON lines for (E, R) (an ``error`` line for each kind that
    gave none); returns the number of failed kinds."""
    start = time.perf_counter()
    print(f"[throughput] num_envs={num_envs} runs={runs}: {' + '.join(args.kinds)} ...", file=sys.stderr, flush=True)
    records, error = {}, None
    try:
        proc = subprocess.run(_child_argv(args, num_envs, runs), capture_output=True, text=True, timeout=args.timeout)
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                records[record["kind"]] = record
        if proc.returncode != 0:
            tail = (proc.stderr or "").strip().splitlines()[-5:]
            error = f"exit {proc.returncode}: " + " | ".join(tail)
    except subprocess.TimeoutExpired:
        error = f"timed out after {args.timeout:g} s"
    wall_s = round(time.perf_counter() - start, 2)
    failures = 0
    for kind in args.kinds:
        if kind in records:
            record = {**records[kind], "process_wall_s": wall_s}
        else:
            failures += 1
            record = dict(kind=kind, env=args.env, env_kwargs=dict(args.env_arg), num_envs=num_envs,
                          num_steps=args.num_steps, runs=runs, error=error or "no result")
        print(json.dumps(record), flush=True)
    return failures


if __name__ == "__main__":
    sys.exit(main())
