"""Exact HAPPO: the sequential (heterogeneous-agent) actor update, as a pure function.

The HARL scheme (Kuba et al., 2022; PKU-MARL/HARL ``on_policy_ha_runner.py`` and
``algorithms/actors/happo.py``). Per train step the agents are updated one after
another in ``order`` (a fresh random permutation each step). With ``M_0 = 1``:

    for p, m in enumerate(order):
        agent m takes num_epochs × num_minibatches optimiser steps on
            L_m = − mean_b M_p · min(ρ_m A_m, clip(ρ_m, 1 − ε, 1 + ε) A_m) − c_H · mean_b H[π_m]
        M_{p+1} = M_p · π_m,new(a_m|o_m) / π_m,old(a_m|o_m)     (whole batch)

Only agent m's own ratio ρ_m is clipped; the factor M_p — the product of the
already-updated agents' new/old ratios, unclipped — is a constant (no gradient flows
into earlier agents). The critic is not touched here; it is trained separately.
Where the batch says which agents act (``active``), an inactive agent's samples leave
its own surrogate and entropy (they count as zero in the means) and its ratio leaves
the later agents' factors, as in ``jaxpo.core.losses``.

Layout: per-agent actor parameters *and* optimiser states carry a leading agent axis
``[N, ...]`` (``init_opt_state`` vmaps ``optimizer.init``, so every agent has its own
Adam moments and step count, as HARL's per-agent torch optimisers do). ``lax.scan``
runs over the order positions: it gathers agent m's slice by dynamic indexing, trains
it, writes it back with ``.at[m].set``. ``order`` is traced, so every permutation
shares one compiled program. Parameters must be per-agent (``share_params=False``):
with one shared actor there is no per-agent slice to update in sequence.

Shapes: B samples (transitions of the flattened T × E batch, or sequences of L
steps for recurrent actors), N agents, O observation width, A actions,
K = len(order) (normally N). A sample's trailing step axis, when present, follows
the agent axis: ``[B, N, L, ...]``.
"""

from __future__ import annotations

from typing import Any, Callable

import chex
import jax
import jax.numpy as jnp
import optax

from jaxpo.core.axes import pmean, varying
from jaxpo.core.losses import clip_fraction, masked_mean, mean_std
from jaxpo.core.rollout import epochs

ActorApply = Callable[[Any, jax.Array, jax.Array], Any]  # -> a distribution (categorical or Gaussian)


def init_opt_state(optimizer: optax.GradientTransformation, actor_params: Any) -> Any:
    """Per-agent optimiser states: ``optimizer.init`` vmapped over the leading agent axis.

    Args:
      optimizer: the actor's optax transformation (e.g. grad clipping + Adam); the norm
        of ``clip_by_global_norm`` is then per agent, as in HARL.
      actor_params: pytree whose every leaf is ``[N, ...]``.

    Returns:
      Optimiser state pytree whose every array leaf is ``[N, ...]``.
    """
    return jax.vmap(optimizer.init)(actor_params)


def happo_policy_loss(
    log_prob: chex.Array,
    *,
    old_log_prob: chex.Array,
    advantages: chex.Array,
    factor: chex.Array,
    clip_eps: chex.Numeric,
    active: chex.Array | None = None,
) -> tuple[chex.Array, dict[str, chex.Array]]:
    """One agent's HAPPO surrogate (negated, to minimise).

        loss = − mean_b factor_b · min(ρ_b A_b, clip(ρ_b, 1 − ε, 1 + ε) A_b),
        ρ_b = exp(log_prob_b − old_log_prob_b)

    The factor multiplies the clipped surrogate from outside (it is never clipped and
    takes no part in the clip decision) and is detached.

    Args:
      log_prob: ``[B]`` (or ``[B, L]``: any shape, the mean runs over all entries) the
        agent's current ``log π_m(a_m|o_m)``.
      old_log_prob: the same under the behaviour policy.
      advantages: the agent's (normalised) advantage column.
      factor: product of the earlier agents' new/old ratios (1 for the first).
      clip_eps: scalar ε; may be traced.
      active: bool, the shape of the others, or None: the samples where the agent acts;
        the others count as zero in the loss and are left out of the metrics.

    Returns:
      ``(loss, metrics)``; metrics ``"clip_frac"`` (fraction with ``|ρ − 1| > ε``) and
      ``"approx_kl"`` (mean of ``(ρ − 1) − log ρ``).

    Raises:
      AssertionError: if the four arrays differ in shape.
    """
    chex.assert_equal_shape([log_prob, old_log_prob, advantages, factor])
    old_log_prob, advantages, factor = jax.lax.stop_gradient((old_log_prob, advantages, factor))
    log_ratio = log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    surrogate = factor * jnp.minimum(ratio * advantages, clipped * advantages)
    loss = -jnp.mean(surrogate if active is None else jnp.where(active, surrogate, 0.0))
    ratio, log_ratio = jax.lax.stop_gradient((ratio, log_ratio))
    metrics = {
        "clip_frac": clip_fraction(ratio, clip_eps, active),
        "approx_kl": masked_mean(jnp.expm1(log_ratio) - log_ratio, active),
    }
    return loss, metrics


def sequential_actor_trace(
    actor_apply: ActorApply,
    actor_params: Any,
    opt_state: Any,
    optimizer: optax.GradientTransformation,
    batch: Any,
    advantages: chex.Array,
    order: chex.Array,
    key: chex.PRNGKey,
    *,
    clip_eps: chex.Numeric,
    ent_coef: chex.Numeric,
    num_epochs: int,
    num_minibatches: int,
    extra_inputs: tuple = (),
    axis_name: str | None = None,
    platform: str | None = None,
    unroll: int = 1,
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """The sequential HAPPO actor update, with per-position diagnostics.

    Args:
      actor_apply: ``(params_m, obs [b, O], action_mask bool [b, A], *extra) -> distribution``
        with batch shape ``[b]``, for ONE agent (params without the agent axis).
        With a step axis: ``obs [b, L, O]`` etc. and batch shape ``[b, L]``.
      actor_params: per-agent stacked pytree, every leaf ``[N, ...]``.
      opt_state: per-agent stacked optimiser state (``init_opt_state``).
      optimizer: optax transformation; may be built from traced hyperparameters.
      batch: any object with attributes ``obs [B, N, O]``, ``action_mask bool
        [B, N, A]``, ``action int [B, N]`` (continuous: float ``[B, N, A]``),
        ``log_prob [B, N]`` (behaviour policy) and ``active`` (bool ``[B, N]``, or None:
        every agent acts), e.g. a ``jaxpo.core.rollout.Transition`` flattened to
        ``[B, ...]``. Other fields are ignored.
      advantages: ``[B, N]`` (``[B, N, L]``) column m is agent m's advantage (for
        HAPPO every column is the normalised team advantage; distinct columns are
        allowed). ``obs``, ``action_mask``, ``action`` and ``log_prob`` may carry the
        same step axis L after the agent axis.
      order: int ``[K]`` distinct agent indices, updated in this order (K = N for
        HAPPO; a prefix updates only those agents). Traced.
      key: PRNG key for the minibatch shuffles. Agent m shuffles with
        ``split(key, N)[m]``; its epoch e with ``split(that, num_epochs)[e]``, whose
        ``permutation`` of B is cut into ``num_minibatches`` consecutive minibatches.
      clip_eps, ent_coef: scalars; may be traced.
      num_epochs, num_minibatches: static; ``num_minibatches`` must divide B.
      extra_inputs: more ``[B, N, ...]`` arrays passed, sliced per agent, after
        ``obs`` and ``action_mask`` to ``actor_apply`` (recurrent actors: the hidden
        state at each sequence's start ``[B, N, H]`` and the ``first`` flags
        ``[B, N, L]``).
      axis_name: when the batch is split over the devices of this mapped axis (data
        parallel), the loss is averaged over them before differentiating, so every
        device takes the same step (``key`` should differ per device: its own shuffles).
      platform: whose kernels shuffle the minibatches (``jaxpo.core.kernels.for_platform``;
        None: ``jax.default_backend()``).
      unroll: minibatch updates per ``lax.scan`` iteration (``jaxpo.core.rollout.epochs``).

    Returns:
      ``(actor_params, opt_state, trace)``. Agents not in ``order`` are returned
      unchanged. ``trace`` stacks over order positions p: ``"agent" [K]``,
      ``"factor" [K, B]`` (the factor M_p agent order[p] trained with),
      ``"policy_loss"``, ``"entropy"``, ``"clip_frac"``, ``"approx_kl"`` ``[K]``
      (means over that agent's epochs × minibatches), and ``"joint_ratio" [B]`` =
      M_K, the product of all updated agents' new/old ratios (``[K, B, L]`` and
      ``[B, L]`` with a step axis).
    """
    obs, mask, action, old_log_prob = batch.obs, batch.action_mask, batch.action, batch.log_prob
    active = getattr(batch, "active", None)
    chex.assert_rank(order, 1)
    chex.assert_equal_shape([old_log_prob, advantages])
    chex.assert_equal_shape_prefix([obs, mask, action, old_log_prob, *extra_inputs], 2)
    chex.assert_type(order, int)
    if old_log_prob.ndim not in (2, 3) or obs.ndim != old_log_prob.ndim + 1:
        raise ValueError(f"expected log_prob [B, N] or [B, N, L] and obs one rank higher, "
                         f"got log_prob {old_log_prob.shape} and obs {obs.shape}")
    num_samples, num_agents = old_log_prob.shape[:2]
    chex.assert_tree_shape_prefix(actor_params, (num_agents,))
    if order.shape[0] > num_agents:
        raise ValueError(f"order has {order.shape[0]} entries but there are {num_agents} agents")
    if num_samples % num_minibatches:
        raise ValueError(f"num_minibatches ({num_minibatches}) must divide the batch size ({num_samples})")

    # Agent-major [N, B, ...] so that agent m's data is one dynamic slice.
    data = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1),
                        (obs, mask, action, old_log_prob, advantages, extra_inputs, active))
    agent_keys = jax.random.split(key, num_agents)
    take = lambda tree, m: jax.tree.map(lambda x: x[m], tree)
    put = lambda tree, m, new: jax.tree.map(lambda x, y: x.at[m].set(y), tree, new)

    def loss_fn(params_m, minibatch):
        obs_m, mask_m, action_m, old_lp, adv, extra, active_m, factor = minibatch
        dist = actor_apply(params_m, obs_m, mask_m, *extra)
        pi_loss, metrics = happo_policy_loss(dist.log_prob(action_m), old_log_prob=old_lp, advantages=adv,
                                             factor=factor, clip_eps=clip_eps, active=active_m)
        entropy = dist.entropy()
        entropy = jnp.mean(entropy if active_m is None else jnp.where(active_m, entropy, 0.0))
        return pi_loss - ent_coef * entropy, {"policy_loss": pi_loss, "entropy": entropy, **metrics}

    # The gradient of the devices' mean loss (the gradient w.r.t. replicated params is
    # already summed over the axis; a pmean of local gradients would be D× too large).
    grad_fn = jax.grad(lambda params_m, minibatch: pmean(loss_fn(params_m, minibatch), axis_name), has_aux=True)

    def minibatch_step(carry, minibatch):
        params_m, opt_m = carry
        grads, metrics = grad_fn(params_m, minibatch)
        updates, opt_m = optimizer.update(grads, opt_m, params_m)
        return (optax.apply_updates(params_m, updates), opt_m), metrics

    def agent_step(carry, m):
        params, opt, factor = carry
        params_m, opt_m = take(params, m), take(opt, m)
        agent_data = (*take(data, m), factor)

        (params_m, opt_m), metrics = epochs(minibatch_step, (params_m, opt_m), agent_data, agent_keys[m], num_epochs,
                                            num_minibatches, platform, unroll)

        # Unclipped new/old ratio of the updated agent on the whole batch (1 where it is inactive).
        obs_m, mask_m, action_m, old_lp, _, extra, active_m = agent_data[:7]
        log_ratio = actor_apply(params_m, obs_m, mask_m, *extra).log_prob(action_m) - old_lp
        if active_m is not None:
            log_ratio = jnp.where(active_m, log_ratio, 0.0)
        new_factor = jax.lax.stop_gradient(factor * jnp.exp(log_ratio))

        out = {"agent": m, "factor": factor, **jax.tree.map(jnp.mean, metrics)}
        return (put(params, m, params_m), put(opt, m, opt_m), new_factor), out

    factor0 = varying(jnp.ones((num_samples, *old_log_prob.shape[2:]), old_log_prob.dtype), axis_name)
    (actor_params, opt_state, joint_ratio), trace = jax.lax.scan(
        agent_step, (actor_params, opt_state, factor0), order
    )
    return actor_params, opt_state, {**trace, "joint_ratio": joint_ratio}


def sequential_actor_update(
    actor_apply: ActorApply,
    actor_params: Any,
    opt_state: Any,
    optimizer: optax.GradientTransformation,
    batch: Any,
    advantages: chex.Array,
    order: chex.Array,
    key: chex.PRNGKey,
    *,
    clip_eps: chex.Numeric,
    ent_coef: chex.Numeric,
    num_epochs: int,
    num_minibatches: int,
    extra_inputs: tuple = (),
    axis_name: str | None = None,
    platform: str | None = None,
    unroll: int = 1,
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """The sequential HAPPO actor update with scalar metrics (arguments: ``sequential_actor_trace``).

    Returns:
      ``(actor_params, opt_state, metrics)``, metrics scalars:
      ``"policy_loss"``, ``"entropy"`` — summed over the updated agents (as
      ``losses.ppo_loss`` sums over agents, so the columns compare across schemes);
      ``"clip_frac"``, ``"approx_kl"`` — averaged over agents;
      ``"factor_mean"``, ``"factor_std"`` (mean over positions of the std over the
      batch), ``"factor_min"``, ``"factor_max"`` — of the factors M_p agents trained
      with; ``"joint_ratio_dev"`` — mean ``|M_K − 1|``, how far the joint policy moved.
    """
    actor_params, opt_state, trace = sequential_actor_trace(
        actor_apply, actor_params, opt_state, optimizer, batch, advantages, order, key, clip_eps=clip_eps,
        ent_coef=ent_coef, num_epochs=num_epochs, num_minibatches=num_minibatches, extra_inputs=extra_inputs,
        axis_name=axis_name, platform=platform, unroll=unroll,
    )
    factor = trace["factor"].reshape(order.shape[0], -1)  # [K, B] (× L)
    extreme = lambda reduce, x: x if axis_name is None else reduce(x, axis_name)
    metrics = {
        "policy_loss": jnp.sum(trace["policy_loss"]),
        "entropy": jnp.sum(trace["entropy"]),
        "clip_frac": jnp.mean(trace["clip_frac"]),
        "approx_kl": jnp.mean(trace["approx_kl"]),
        "factor_mean": pmean(jnp.mean(factor), axis_name),
        "factor_std": jnp.mean(mean_std(factor, (1,), axis_name)[1]),
        "factor_min": extreme(jax.lax.pmin, jnp.min(factor)),
        "factor_max": extreme(jax.lax.pmax, jnp.max(factor)),
        "joint_ratio_dev": pmean(jnp.mean(jnp.abs(trace["joint_ratio"] - 1.0)), axis_name),
    }
    return actor_params, opt_state, metrics
