"""The array environment protocol (docs/design.md §3) and auto-reset.

Every jaxpo environment is a pair of pure functions over arrays with the agents
stacked on one axis — no dict-of-agents on the hot path:

    reset(key)                  -> (state, TimeStep)
    step(key, state, actions)   -> (state, TimeStep)

``actions`` is int32 [N] (one index per agent) for discrete environments and
float32 [N, A] (one action vector per agent) for continuous ones
(``continuous = True``; ``num_actions`` is then the vector width A).

Both are jittable and vmappable.  ``state`` is any pytree.  An environment also
states its sizes (``num_agents``, ``obs_dim``, ``num_actions``,
``global_state_dim``, ``max_steps``), whether its actions are ``continuous``,
its observations' ``obs_shape`` before flattening, and, where known, its
``coupling`` graph.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


@struct.dataclass
class TimeStep:
    """What an environment returns after ``reset`` or ``step``.

    Attributes:
        obs: float32 [N, O] — each agent's observation, to act on next.
        reward: float32 [N] — each agent's reward for the transition (0 after reset).
        terminated: bool [] — the episode ended in a terminal state (no bootstrap).
        truncated: bool [] — the episode was cut by a time limit (bootstrap from
            the final observation's value).
        action_mask: bool [N, A] — True where an action is available (continuous
            environments: where an action dimension exists; False on padding).
        global_state: float32 [N, S] or None — per-agent view of the global state
            for centralised critics; None when the environment has none.
        final_obs: float32 [N, O] or None — set by ``AutoReset`` only: the
            observation the step reached *before* any reset (equal to ``obs``
            unless the episode just ended). Truncated episodes bootstrap from it.
        final_global_state: float32 [N, S] or None — the same for ``global_state``.
        won: bool [] or None — for environments with a win condition (SMAX), the
            episode ended in a win at this step; None for the others.
    """

    obs: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    action_mask: jax.Array
    global_state: jax.Array | None = None
    final_obs: jax.Array | None = None
    final_global_state: jax.Array | None = None
    won: jax.Array | None = None

    @property
    def done(self) -> jax.Array:
        """bool [] — the episode ended, for either reason."""
        return jnp.logical_or(self.terminated, self.truncated)


class Env:
    """Base class of array environments.

    Subclasses set the size attributes in ``__init__`` and implement ``reset`` and
    ``step``. ``coupling`` is the ``[N, N]`` 0/1 adjacency with ``coupling[i, j] = 1``
    when agent j's action can change agent i's reward (diagonal included), or None
    when unknown.
    """

    name: str = "env"
    num_agents: int
    obs_dim: int
    num_actions: int
    continuous: bool = False
    global_state_dim: int | None = None
    max_steps: int

    @property
    def coupling(self) -> np.ndarray | None:
        return None

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """An agent's observation before it was flattened to ``obs_dim`` values, row-major:
        ``(H, W, C)`` for images (a CNN can view it back), ``(obs_dim,)`` for vectors."""
        return (self.obs_dim,)

    def reset(self, key: jax.Array) -> tuple[Any, TimeStep]:
        raise NotImplementedError

    def step(self, key: jax.Array, state: Any, actions: jax.Array) -> tuple[Any, TimeStep]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, num_agents={self.num_agents}, "
            f"obs_dim={self.obs_dim}, num_actions={self.num_actions}, max_steps={self.max_steps})"
        )


class AutoReset(Env):
    """Wraps an ``Env`` so that ``step`` starts a new episode when one ends.

    The returned ``TimeStep`` carries the new episode's first ``obs`` (and mask and
    global state) together with the ``reward``/``terminated``/``truncated`` of the
    step that ended the old one, and keeps that step's own observation in
    ``final_obs`` / ``final_global_state`` so truncated episodes bootstrap correctly.
    Under ``vmap`` both branches are evaluated (a ``select``), as with any batched
    conditional.
    """

    def __init__(self, env: Env):
        self.env = env
        for attr in ("name", "num_agents", "obs_dim", "num_actions", "continuous", "global_state_dim", "max_steps"):
            setattr(self, attr, getattr(env, attr))

    @property
    def coupling(self) -> np.ndarray | None:
        return self.env.coupling

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return self.env.obs_shape

    def __getattr__(self, name: str) -> Any:  # env-specific extras (render, reference policies, ...)
        return getattr(self.env, name)

    def reset(self, key: jax.Array) -> tuple[Any, TimeStep]:
        state, ts = self.env.reset(key)
        return state, ts.replace(final_obs=ts.obs, final_global_state=ts.global_state)

    def step(self, key: jax.Array, state: Any, actions: jax.Array) -> tuple[Any, TimeStep]:
        key_step, key_reset = jax.random.split(key)
        next_state, ts = self.env.step(key_step, state, actions)
        reset_state, reset_ts = self.env.reset(key_reset)
        done = ts.done
        pick = lambda new, cont: jax.tree.map(lambda a, b: jnp.where(done, a, b), new, cont)
        return pick(reset_state, next_state), TimeStep(
            obs=pick(reset_ts.obs, ts.obs),
            reward=ts.reward,
            terminated=ts.terminated,
            truncated=ts.truncated,
            action_mask=pick(reset_ts.action_mask, ts.action_mask),
            global_state=pick(reset_ts.global_state, ts.global_state),
            final_obs=ts.obs,
            final_global_state=ts.global_state,
            won=ts.won,
        )
