"""jaxpo.core.gae against a plain-numpy reference; termination vs truncation; traced γ, λ."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core.gae import gae

T, E, N = 7, 3, 2
gae_jit = jax.jit(gae)


def gae_reference(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Python-loop GAE, float64."""
    adv = np.zeros(rewards.shape, np.float64)
    next_adv = np.zeros(rewards.shape[1:], np.float64)
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * (1.0 - terminated[t]) * next_values[t] - values[t]
        done = np.logical_or(terminated[t], truncated[t])
        next_adv = delta + gamma * lam * (1.0 - done) * next_adv
        adv[t] = next_adv
    return adv, adv + values


@pytest.fixture(scope="module")
def rollout():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(T, E, N)).astype(np.float32)
    values = rng.normal(size=(T, E, N)).astype(np.float32)
    terminated = np.zeros((T, E), bool)
    truncated = np.zeros((T, E), bool)
    terminated[2, 0] = True  # env 0 terminates mid-rollout
    truncated[4, 1] = True  # env 1 truncates at another time
    terminated[T - 1, 2] = True  # env 2 terminates at the last step
    truncated[T - 1, 0] = True  # env 0 truncates at the last step
    truncated[1, 2] = True
    # Continuing steps: next_values = values[t + 1]; a done step (and the last step)
    # sees an independent final-observation value.
    next_values = np.concatenate([values[1:], rng.normal(size=(1, E, N))], 0)
    done = terminated | truncated
    final_obs_values = rng.normal(size=(T, E, N))
    next_values = np.where(done[..., None], final_obs_values, next_values).astype(np.float32)
    # The caller broadcasts per-env flags over agents.
    terminated = np.broadcast_to(terminated[..., None], (T, E, N)).copy()
    truncated = np.broadcast_to(truncated[..., None], (T, E, N)).copy()
    return rewards, values, next_values, terminated, truncated


def test_matches_numpy_reference(rollout):
    adv, ret = gae_jit(*rollout, 0.97, 0.9)
    ref_adv, ref_ret = gae_reference(*rollout, 0.97, 0.9)
    assert adv.shape == ret.shape == (T, E, N)
    assert adv.dtype == ret.dtype == jnp.float32
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)


def test_truncation_bootstraps_final_obs_and_cuts_recursion():
    gamma, lam = 0.9, 0.8
    rewards = np.array([1.0, 2.0, 3.0], np.float32)[:, None]
    values = np.array([0.5, -1.0, 0.25], np.float32)[:, None]
    next_values = np.array([7.0, 11.0, 13.0], np.float32)[:, None]  # [0] = final obs
    truncated = np.array([True, False, False])[:, None]
    terminated = np.zeros_like(truncated)
    adv, ret = gae_jit(rewards, values, next_values, terminated, truncated, gamma, lam)
    # Steps after the reset form their own episode.
    a2 = 3.0 + gamma * 13.0 - 0.25
    a1 = 2.0 + gamma * 11.0 - (-1.0) + gamma * lam * a2
    # Truncated step: bootstraps from the final observation's value (7), no A_1 term.
    a0 = 1.0 + gamma * 7.0 - 0.5
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2], rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], np.array([a0, a1, a2]) + values[:, 0], rtol=1e-6)


def test_termination_bootstraps_zero():
    gamma, lam = 0.9, 0.8
    rewards = np.array([1.0, 2.0], np.float32)[:, None]
    values = np.array([0.5, -1.0], np.float32)[:, None]
    next_values = np.array([7.0, 11.0], np.float32)[:, None]
    terminated = np.array([True, False])[:, None]
    truncated = np.zeros_like(terminated)
    adv, _ = gae_jit(rewards, values, next_values, terminated, truncated, gamma, lam)
    a1 = 2.0 + gamma * 11.0 + 1.0
    np.testing.assert_allclose(adv[:, 0], [1.0 - 0.5, a1], rtol=1e-6)


def test_traced_gamma_lambda_vmap(rollout):
    gammas = jnp.array([0.0, 0.5, 0.9, 0.99], jnp.float32)
    lams = jnp.array([1.0, 0.95, 0.5, 0.0], jnp.float32)
    batched = jax.jit(jax.vmap(gae, in_axes=(None,) * 5 + (0, 0)))
    adv_b, ret_b = batched(*rollout, gammas, lams)
    assert adv_b.shape == (4, T, E, N)
    for g, l, adv, ret in zip(gammas, lams, adv_b, ret_b):
        ref_adv, ref_ret = gae_reference(*rollout, float(g), float(l))
        np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
        one_adv, one_ret = gae_jit(*rollout, g, l)
        np.testing.assert_allclose(adv, one_adv, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(ret, one_ret, rtol=1e-6, atol=1e-6)


def gae_one_step_per_iteration(rewards, values, next_values, terminated, truncated, gamma, lam):
    """The recursion as a scan of one step per iteration, γ λ (1 − done) multiplied in the body."""
    gamma, lam = jnp.float32(gamma), jnp.float32(lam)
    not_done = 1.0 - jnp.logical_or(terminated, truncated).astype(jnp.float32)
    deltas = rewards + gamma * (1.0 - terminated.astype(jnp.float32)) * next_values - values

    def step(next_advantage, inputs):
        delta, continues = inputs
        advantage = delta + gamma * lam * continues * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(step, jnp.zeros_like(values[0]), (deltas, not_done), reverse=True)
    return advantages, advantages + values


@pytest.mark.parametrize("steps, unroll", [(128, 8), (130, 8), (5, 8), (128, 3), (128, 1), (128, True)])
def test_unrolled_loop_is_bit_identical(steps, unroll):
    """The unrolled loop (``unroll`` steps an iteration, discounts made before it) computes
    the very values of a loop of one step per iteration: rounding included, traced γ and λ."""
    keys = jax.random.split(jax.random.PRNGKey(steps), 5)
    shape = (steps, 64, 3)
    args = [jax.random.normal(k, shape) for k in keys[:3]]
    args += [jax.random.bernoulli(k, 0.1, shape) for k in keys[3:]]
    hyper = (jnp.float32(0.99), jnp.float32(0.95))
    unrolled = jax.jit(functools.partial(gae, unroll=unroll))
    for got, want in zip(unrolled(*args, *hyper), jax.jit(gae_one_step_per_iteration)(*args, *hyper)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
