"""What a training program costs in arithmetic: XLA's cost analysis of each phase of
an update, and the analytical minimum of the networks it trains.

``benchmarks/throughput.py`` reports these beside its timings, and ``tests/test_speed.py``
checks that the compiled train step stays close to the minimum. XLA counts a loop body
once whatever its trip count, so each phase is costed at one unit of its loops (a
rollout step, a one-step rollout's advantages, one minibatch's gradient step) and scaled
by the unit's count per update. Measured figures are in ``docs/speed.md``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import numpy as np
from flax.traverse_util import flatten_dict

from jaxpo.core.rollout import bootstrap_values, rollout
from jaxpo.program.compiled import Trainer


def xla_cost(fn: Callable, *args: Any, optimized: bool = True) -> tuple[float, float]:
    """XLA's cost analysis of ``jit(fn)`` for ``args``.

    Args:
        fn: the function to cost.
        *args: its arguments, arrays or ``jax.ShapeDtypeStruct`` shapes.
        optimized: cost the compiled program (true) or the lowered one, uncompiled
            (false: cheaper to get; the same flops, but the bytes of unfused ops).

    Returns:
        ``(flops, bytes accessed)``.
    """
    lowered = jax.jit(fn).lower(*args)
    cost = (lowered.compile() if optimized else lowered).cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost  # a list in older jax
    return float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))


def dense_flops(tr: Trainer) -> tuple[float, float]:
    """Flops of one agent's forward pass through every kernel of its networks.

    Each weight is one multiply-add, 2 flops: the dense layers and the GRU's input and
    recurrent kernels; a shared trunk is counted once. The shared networks' agent-id
    rows are a bias (O(1) per agent), not counted.

    Args:
        tr: the trainer whose networks are counted.

    Returns:
        ``(forward, first)``: the forward pass's flops, and the input layers' share of
            them (whose input gradient no one needs).
    """
    params = tr.net.init(jax.random.PRNGKey(0))
    forward = first = 0.0
    for name, net in (("actor", tr.net.actor), ("critic", tr.net.critic)):
        if net is None:  # a shared trunk: the actor's network holds both heads
            continue
        for path, leaf in flatten_dict(params[name]).items():
            if path[-1] != "kernel":
                continue
            shape = leaf.shape[1:] if not net.shared else leaf.shape  # per-agent: a leading [N]
            if path[-2] == "Dense_0":
                shape = (net.in_dim, shape[-1])  # without the agent-id rows
                first += 2.0 * np.prod(shape)
            forward += 2.0 * np.prod(shape)
    return forward, first


def min_flops_per_env_step(tr: Trainer, num_epochs: int) -> float:
    """The analytical minimum of flops per env step (``dense_flops`` for all N agents).

    One forward pass in the rollout; per epoch a forward pass, the weight gradients
    (another forward's worth) and the input gradients of every layer but the first (the
    observations need none).

    Args:
        tr: the trainer whose networks are counted.
        num_epochs: epochs over each rollout.

    Returns:
        The minimum flops per environment step.
    """
    forward, first = dense_flops(tr)
    return tr.num_agents * (forward + num_epochs * (3 * forward - first))


def rollout_of(tr: Trainer, num_steps: int) -> Callable:
    """The runs' next rollout as a function of their state.

    Args:
        tr: the trainer whose environment and networks roll out.
        num_steps: T, the rollout's length.

    Returns:
        ``state [R, ...] -> Transition`` with leaves ``[R, T, E, ...]``.
    """
    cfg = tr.config
    return jax.vmap(lambda s: rollout(tr.env, tr.net, s.params, s.rollout, s.key, num_steps, cfg.critic_input)[1])


def bootstrap_blocks(traj: Any) -> float:
    """Mean number of blocks of E rows that the rollout's ``bootstrap_values`` evaluated.

    Args:
        traj: rollouts, leaves ``[R, T, E, ...]``.

    Returns:
        Its steps that ended an episode before the last step, plus the last step's E,
            over E, averaged over the runs.
    """
    done = np.asarray(traj.terminated | traj.truncated)[:, :-1]
    num_envs = done.shape[-1]
    return float(np.mean(np.ceil((done.sum(axis=(1, 2)) + num_envs) / num_envs)))


def phase_costs(tr: Trainer, state: Any, hyper: Any, blocks: float = 1.0, optimized: bool = True) -> dict:
    """XLA's cost of one update per environment step, phase by phase.

    Each phase is costed at one unit of its loops (a rollout step, its advantages, one
    minibatch's gradient step) and scaled by the unit's count per update. Recurrent
    programs are costed with one-step training sequences (the same samples through the
    same cell, so the GRU's replay scan is one loop body as well).

    Args:
        tr: the trainer of the program.
        state: the runs' training state, leaves ``[R, ...]`` (arrays or shapes).
        hyper: their ``Hyper``, leaves ``[R, ...]``.
        blocks: blocks of E rows the rollout's truncation bootstrap evaluates
            (``bootstrap_blocks`` of a measured rollout; 1, the last step's, at least).
        optimized: cost the compiled programs (true) or the lowered ones (``xla_cost``).

    Returns:
        ``{"flops_per_env_step": {phase: value, "total": sum}, "bytes_per_env_step":
            {...}, "bootstrap_blocks": blocks}``, phases ``rollout``, ``advantages`` and
            ``update``.
    """
    cfg = tr.config
    if cfg.recurrent:  # training sequences of one step: the replay's GRU scan is then one loop body too
        cfg = dataclasses.replace(cfg, seq_len=1)
        tr = Trainer(cfg, tuple(tr.mesh.devices.flat))
    runs = jax.tree.leaves(state)[0].shape[0]
    data_of = jax.vmap(tr.training_data)
    one_step = jax.eval_shape(rollout_of(tr, 1), state)
    data = jax.eval_shape(data_of, state, jax.eval_shape(rollout_of(tr, cfg.num_steps), state), hyper)
    minibatch_data = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct((runs, x.shape[1] // cfg.num_minibatches, *x.shape[2:]), x.dtype), data)
    one_minibatch = Trainer(dataclasses.replace(cfg, num_epochs=1, num_minibatches=1), tuple(tr.mesh.devices.flat))
    cost = functools.partial(xla_cost, optimized=optimized)
    block = cost(jax.vmap(lambda s, traj: bootstrap_values(tr.net, s.params, traj, s.rollout.carry,
                                                           traj.critic_input)), state, one_step)
    step = [a - b for a, b in zip(cost(rollout_of(tr, 1), state), block)]  # a one-step rollout has one block
    units = {
        "rollout": ([s * cfg.num_steps + b * blocks for s, b in zip(step, block)], 1),
        "advantages": (cost(data_of, state, one_step, hyper), cfg.num_steps),
        "update": (cost(jax.vmap(lambda s, d, h: one_minibatch.update(s, d, s.key, h)), state, minibatch_data, hyper),
                   cfg.num_epochs * cfg.num_minibatches),
    }
    env_steps = cfg.num_steps * cfg.num_envs * runs  # per update
    per_step = lambda i: {k: cost[i] * count / env_steps for k, (cost, count) in units.items()}
    total = lambda d: {**{k: round(v, 1) for k, v in d.items()}, "total": round(sum(d.values()), 1)}
    return dict(flops_per_env_step=total(per_step(0)), bytes_per_env_step=total(per_step(1)),
                bootstrap_blocks=round(blocks, 2))
