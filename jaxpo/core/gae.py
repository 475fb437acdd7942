"""Per-agent generalised advantage estimation (GAE), termination vs truncation.

Shapes: ``[T, ...]`` with time leading, typically ``[T, E, N]`` (time, env, agent).
Each agent's advantage is computed from its own reward and its own critic; the
support matrices are applied afterwards (``jaxpo.losses.aggregate_advantages``).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def gae(
    rewards: chex.Array,
    values: chex.Array,
    next_values: chex.Array,
    terminated: chex.Array,
    truncated: chex.Array,
    gamma: chex.Numeric,
    gae_lambda: chex.Numeric,
    unroll: int | bool = 1,
) -> tuple[chex.Array, chex.Array]:
    """Generalised advantage estimates and λ-returns, computed backwards in time.

    Args:
      rewards: float ``[T, ...]`` (typically ``[T, E, N]``), reward of step t.
      values: float ``[T, ...]``, V(o_t) of the observation acted on at step t.
      next_values: float ``[T, ...]``, V of the observation step t reached *before
        any auto-reset* (the final observation); equals ``values[t + 1]`` when the
        episode continues.
      terminated: bool ``[T, ...]``, step t ended the episode in a terminal state.
      truncated: bool ``[T, ...]``, step t ended the episode by a time limit.
        The caller broadcasts per-env flags over the agent axis.
      gamma: scalar discount; may be a traced value.
      gae_lambda: scalar GAE λ; may be a traced value.
      unroll: backward steps per ``lax.scan`` iteration (True: all, no loop). With the discounts computed
        before the loop XLA has no product to reorder: any unroll gives the values of
        the loop of one step bit for bit (``tests/test_gae.py``).

    Returns:
      ``(advantages, returns)``, float32 ``[T, ...]`` each, with

        delta_t = r_t + γ (1 − terminated_t) next_values_t − values_t
        A_t     = delta_t + γ λ (1 − done_t) A_{t+1},  done = terminated | truncated,
        A_T = 0, returns = A + values.

      A truncated step bootstraps from its final observation's value but the
      recursion does not cross the reset; a terminated step bootstraps from zero.
    """
    if jnp.ndim(rewards) < 1:
        raise ValueError(
            f"rewards must have a leading time axis [T, ...]; got shape {jnp.shape(rewards)}"
        )
    chex.assert_equal_shape([rewards, values, next_values, terminated, truncated])
    gamma = jnp.asarray(gamma, jnp.float32)
    gae_lambda = jnp.asarray(gae_lambda, jnp.float32)
    chex.assert_rank([gamma, gae_lambda], 0)

    rewards = jnp.asarray(rewards, jnp.float32)
    values = jnp.asarray(values, jnp.float32)
    next_values = jnp.asarray(next_values, jnp.float32)
    terminated = jnp.asarray(terminated, bool)
    done = jnp.logical_or(terminated, jnp.asarray(truncated, bool))

    not_terminated = 1.0 - terminated.astype(jnp.float32)
    not_done = 1.0 - done.astype(jnp.float32)
    deltas = rewards + gamma * not_terminated * next_values - values
    # γ λ (1 − done_t), every step's at once: the loop body is one multiply-add.
    discounts = gamma * gae_lambda * not_done

    def backward_step(next_advantage, inputs):
        delta, discount = inputs
        advantage = delta + discount * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(
        backward_step, jnp.zeros_like(values[0]), (deltas, discounts), reverse=True, unroll=unroll
    )
    return advantages, advantages + values
