"""Helpers shared by the environment test modules (test_traffic.py, test_wireless.py).

Compilation dominates those modules' runtime on CPU, so each compiles a few
programs once (module-scope fixtures) and its tests read their outputs: an
AutoReset rollout vmapped over all (seed, policy) pairs, and a batched single
step at one fixed batch size. These helpers build those programs and their
inputs. Test-side randomness (keys, random actions) comes from numpy, since every
jax.random call site adds seconds of CPU compile time; the keys are ordinary raw
threefry keys.

Imported as a plain module (`from envtools import ...`): tests/ has no __init__.py,
so pytest's default (prepend) import mode puts tests/ itself on sys.path.
"""

import jax
import numpy as np


def keys(seed, *shape):
    """uint32 [*shape, 2] raw threefry keys from numpy."""
    return np.random.default_rng(seed).integers(0, 2**32, (*shape, 2), dtype=np.uint32)


def rollout_fn(env, policies):
    """One compiled jit(vmap) of AutoReset episode streams, for E envs at once:
    (step_keys [E, T + 1, 2] (the first resets), *inputs [E, T, ...], policy_id [E])
    -> (states, timesteps, actions), each [E, T, ...].

    Each step's actions are ``lax.switch(policy_id, policies, state, *inputs_t)``,
    so every policy runs in the one program instead of one compile per policy."""

    def rollout(step_keys, *args):
        *inputs, policy_id = args
        state, _ = env.reset(step_keys[0])

        def body(state, x):
            key, *xs = x
            actions = jax.lax.switch(policy_id, policies, state, *xs)
            state, ts = env.step(key, state, actions)
            return state, (state, ts, actions)

        return jax.lax.scan(body, state, (step_keys[1:], *inputs))[1]

    return jax.jit(jax.vmap(rollout))


def batch_args(seed, seeds, steps, num_policies, num_agents, num_actions, policy_keys=False):
    """rollout_fn's inputs for seeds x num_policies envs (policy fastest), with common
    random numbers per seed (every policy sees the same step keys and inputs):
    (step_keys [E, steps + 1, 2], [policy_keys [E, steps, 2],] uniform int32 random
    actions [E, steps, num_agents], policy_id [E])."""
    rep = lambda x: np.repeat(x, num_policies, axis=0)
    rand = np.random.default_rng(seed + 100).integers(0, num_actions, (seeds, steps, num_agents), dtype=np.int32)
    pkeys = (rep(keys(seed + 200, seeds, steps)),) if policy_keys else ()
    return (rep(keys(seed, seeds, steps + 1)), *pkeys, rep(rand), np.tile(np.arange(num_policies), seeds))


def batched_step(step, batch):
    """(keys [b], states [b], actions [b, N]) -> numpy (state, timestep) [b], b <= batch,
    through one compiled jit(vmap(step)): inputs are padded to `batch`, so calls of any
    size share the one compile."""
    f = jax.jit(jax.vmap(step))

    def run(keys, states, actions):
        b = keys.shape[0]
        pad = lambda x: np.concatenate([x, np.repeat(x[:1], batch - b, axis=0)])  # numpy: no eager jax ops
        out = f(*jax.tree.map(lambda x: pad(np.asarray(x)), (keys, states, np.asarray(actions, np.int32))))
        return jax.tree.map(lambda x: np.asarray(x)[:b], out)

    return run


def outside_variants(rng, base, coupling, num_actions, p):
    """int [S, N * P, N]: for each agent i (major) P re-draws, from rng, of every action
    outside i's coupling neighbourhood; actions inside it stay at base [S, N]."""
    s, n = base.shape
    other = rng.integers(0, num_actions, (s, n, p, n))
    return np.where(coupling[None, :, None, :], base[:, None, None, :], other).reshape(s, n * p, n)


def variant_rewards(vstep, states, variants, seed=8):
    """Rewards [S, V, N] of one batched_step from each of S states [S, ...] under each
    of its V action variants [S, V, N]. All variants of a state share one step key, so
    reward differences between them come from the actions alone."""
    s, v, n = variants.shape
    step_keys = np.repeat(keys(seed, s), v, axis=0)
    rew = vstep(step_keys, jax.tree.map(lambda x: np.repeat(x, v, axis=0), states), variants.reshape(-1, n))[1].reward
    return rew.reshape(s, v, n)
