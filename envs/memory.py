"""Cue recall: a memory task that no feed-forward policy can solve.

Dynamics. Every agent i draws a private cue ``c_i`` uniformly from ``num_cues``
values at reset. Its first observation shows the cue; the next ``delay``
observations do not. On the last step of the episode (step ``delay``, flagged in the
observation) the agent answers: reward 1 if its action is ``c_i``, else 0. Actions
before the answer step do nothing. The episode then ends in a terminal state, after
``delay + 1`` steps.

Observation (float32 [N, num_cues + 2]): the cue one-hot (zeros after the first
step), a "cue shown" flag, an "answer now" flag.

Action: int in ``[0, num_cues)``. Reward: per agent, 1 or 0 at the answer step.

Coupling: the identity — an agent's reward depends on its own action only.

Returns per agent and episode: a policy with memory (``reference_policy``) earns 1;
any memoryless policy sees the same observation at the answer step whatever the
cue, so it earns at most ``1 / num_cues``. A recurrent policy that learns more than
that is using its hidden state across steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .base import Env, TimeStep
from .params import check_int


@struct.dataclass
class MemoryCueState:
    """cue: int32 [N]; t: int32 [] — steps taken in the episode."""

    cue: jax.Array
    t: jax.Array


class MemoryCue(Env):
    """Cue recall (see the module docstring).

    Args:
      num_agents: N ≥ 1.
      num_cues: K ≥ 2, the cue values and actions.
      delay: steps between the cue and the answer, ≥ 1.
    """

    name = "memory_cue"

    def __init__(self, num_agents: int = 2, num_cues: int = 4, delay: int = 3):
        self.num_agents = check_int(num_agents, "num_agents", 1)
        self.num_actions = self.num_cues = check_int(num_cues, "num_cues", 2)
        self.delay = check_int(delay, "delay", 1)
        self.max_steps = self.delay + 1
        self.obs_dim = self.num_cues + 2

    @property
    def coupling(self) -> np.ndarray:
        """uint8 [N, N]: the identity."""
        return np.eye(self.num_agents, dtype=np.uint8)

    def _timestep(self, state: MemoryCueState, reward: jax.Array, terminated: jax.Array) -> TimeStep:
        n = self.num_agents
        shown = state.t == 0
        cue = jax.nn.one_hot(state.cue, self.num_cues) * shown
        flags = jnp.broadcast_to(jnp.stack([shown, state.t == self.delay]).astype(jnp.float32), (n, 2))
        return TimeStep(
            obs=jnp.concatenate([cue, flags], axis=-1),
            reward=reward,
            terminated=terminated,
            truncated=jnp.zeros((), bool),
            action_mask=jnp.ones((n, self.num_cues), bool),
        )

    def reset(self, key: jax.Array) -> tuple[MemoryCueState, TimeStep]:
        state = MemoryCueState(
            cue=jax.random.randint(key, (self.num_agents,), 0, self.num_cues, jnp.int32),
            t=jnp.zeros((), jnp.int32),
        )
        return state, self._timestep(state, jnp.zeros((self.num_agents,), jnp.float32), jnp.zeros((), bool))

    def step(self, key: jax.Array, state: MemoryCueState, actions: jax.Array) -> tuple[MemoryCueState, TimeStep]:
        """One step. ``actions``: int [N]; only the answer step's actions count."""
        answer = state.t == self.delay
        reward = jnp.where(answer, (actions == state.cue).astype(jnp.float32), 0.0)
        new_state = MemoryCueState(cue=state.cue, t=state.t + 1)
        return new_state, self._timestep(new_state, reward, answer)

    def reference_policy(self, key: jax.Array, state: MemoryCueState) -> jax.Array:
        """int32 [N]: the cue — what a policy that remembers it answers."""
        return state.cue
