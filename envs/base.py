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

from typing import Any, Callable

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
        active: bool [N] or None — the agents whose actions act on this step's
            ``obs`` (a SMAX unit alive, a JaxNav robot still driving); an inactive
            agent's action changes nothing. None: every agent acts at every step.
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
    active: jax.Array | None = None

    @property
    def done(self) -> jax.Array:
        """bool [] — the episode ended, for either reason."""
        return jnp.logical_or(self.terminated, self.truncated)


class Env:
    """Base class of array environments.

    Subclasses set the size attributes in ``__init__`` and implement ``reset`` and
    ``step`` (pure, jittable and vmappable functions over arrays, agents stacked on
    the first axis). ``coupling`` is the ``[N, N]`` 0/1 adjacency with
    ``coupling[i, j] = 1`` when agent j's action can change agent i's reward
    (diagonal included), or None when unknown.

    Attributes:
        name: the environment's name (``"env"`` unless a subclass sets it).
        num_agents: N, the number of agents.
        obs_dim: O, the width of an agent's flattened observation.
        num_actions: A, the number of discrete actions, or the action vector's width
            for continuous environments (the largest agent's; smaller ones padded).
        continuous: whether actions are float vectors ``[N, A]`` (True) or indices ``[N]``.
        global_state_dim: S, the width of each agent's global-state view for
            centralised critics; None when the environment has none.
        max_steps: the episode's time limit in steps (truncation).
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
        """The ``[N, N]`` 0/1 coupling graph, or None when unknown (the base class's answer).

        ``coupling[i, j] = 1`` when agent j's action can change agent i's reward
        (diagonal included); the ``khop`` support preset is built from it.
        """
        return None

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """An agent's observation before it was flattened to ``obs_dim`` values, row-major.

        ``(H, W, C)`` for images (a CNN can view it back), ``(obs_dim,)`` for vectors
        (the base class's answer).
        """
        return (self.obs_dim,)

    def interaction(self, state: Any) -> jax.Array | None:
        """The coupling graph of one state, where it depends on the state.

        ``interaction(state)[i, j]`` is True when agent j's action in ``state`` can change
        agent i's reward (diagonal included): a subgraph of ``coupling`` that
        ``Config.interaction_hops`` builds each step's ``khop`` support from. Computed
        only when asked for, so an environment pays nothing for it otherwise.

        Args:
            state: one (unbatched) state, as ``reset`` and ``step`` return it.

        Returns:
            bool ``[N, N]``, or None where the environment reports none (the base class's
            answer).
        """
        return None

    @property
    def coupling_lists(self) -> np.ndarray | None:
        """``coupling`` as row lists: the order of ``interaction_lists``' entries.

        Returns:
            int32 ``[N, K]``: row i lists the agents whose action can change agent i's
            reward (row i's non-zeros of ``coupling``, ascending; i among them), padded
            to the longest row with i; None without a ``coupling``.
        """
        coupling = self.coupling
        if coupling is None:
            return None
        edge = np.asarray(coupling) != 0
        size = edge.sum(axis=1)
        width = max(int(size.max(initial=0)), 1)
        order = np.argsort(~edge, axis=1, kind="stable")[:, :width]  # non-zeros first, ascending
        own = np.arange(edge.shape[0])[:, None]
        return np.where(np.arange(width) < size[:, None], order, own).astype(np.int32)

    def interaction_lists(self, state: Any) -> jax.Array | None:
        """``interaction(state)`` on the entries of ``coupling_lists``: the per-state graph
        at a cost per agent that does not grow with N.

        The base class reads it from the ``[N, N]`` ``interaction(state)``; an environment
        with many agents computes it directly (``WirelessAccess`` does).

        Args:
            state: one (unbatched) state.

        Returns:
            bool ``[N, K]``: entry ``[i, k]`` is True when agent ``coupling_lists[i, k]``'s
            action in ``state`` can change agent i's reward (padding entries: any value);
            None where the environment reports no per-state graph or no ``coupling``.
        """
        graph, lists = self.interaction(state), self.coupling_lists
        if graph is None or lists is None:
            return None
        return jnp.take_along_axis(graph, jnp.asarray(lists), axis=1)

    def reset(self, key: jax.Array) -> tuple[Any, TimeStep]:
        """Starts an episode.

        Args:
            key: a JAX PRNG key.

        Returns:
            ``(state, timestep)``: the environment state (any pytree) and the first
                ``TimeStep`` (``obs`` ``[N, O]``, ``reward`` ``[N]`` of zeros).

        Raises:
            NotImplementedError: in the base class; subclasses implement it.
        """
        raise NotImplementedError

    def step(self, key: jax.Array, state: Any, actions: jax.Array) -> tuple[Any, TimeStep]:
        """Advances the episode by one step of every agent.

        Args:
            key: a JAX PRNG key.
            state: the state ``reset`` or the previous ``step`` returned.
            actions: int32 ``[N]`` (one index per agent) for discrete environments, float32
                ``[N, A]`` (one action vector per agent) for continuous ones.

        Returns:
            ``(state, timestep)``: the next state and its ``TimeStep`` (``obs`` ``[N, O]``,
                ``reward`` ``[N]``, ``terminated`` / ``truncated`` ``[]``).

        Raises:
            NotImplementedError: in the base class; subclasses implement it.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, num_agents={self.num_agents}, "
            f"obs_dim={self.obs_dim}, num_actions={self.num_actions}, max_steps={self.max_steps})"
        )


def follows_state(env: Env) -> bool:
    """Whether ``env`` gives each state's coupling graph (``Env.interaction`` not None),
    what ``Config.interaction_hops`` needs; found by tracing ``reset`` and
    ``interaction``, computing nothing.

    Args:
        env: the environment (wrapped or not).

    Returns:
        True where ``env.interaction(state)`` is a graph.
    """
    state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))[0]
    return jax.eval_shape(env.interaction, state) is not None


class AutoReset(Env):
    """Wraps an ``Env`` so that ``step`` starts a new episode when one ends.

    The returned ``TimeStep`` carries the new episode's first ``obs`` (and mask and
    global state) together with the ``reward``/``terminated``/``truncated`` of the
    step that ended the old one, and keeps that step's own observation in
    ``final_obs`` / ``final_global_state`` so truncated episodes bootstrap correctly.
    Under ``vmap`` both branches are evaluated (a ``select``), as with any batched
    conditional. The size attributes, ``coupling``, ``obs_shape``, ``render`` and
    ``reference_policy`` are the wrapped environment's; anything else is reached
    through ``env``.

    Args:
        env: the environment to wrap.
        active: pass on the wrapped environment's ``active`` agents; False: every
            ``TimeStep``'s ``active`` is None, so a program that does not mask inactive
            agents computes nothing for them.
    """

    def __init__(self, env: Env, active: bool = True):
        self.env, self.keeps_active = env, active
        for attr in ("name", "num_agents", "obs_dim", "num_actions", "continuous", "global_state_dim", "max_steps"):
            setattr(self, attr, getattr(env, attr))

    @property
    def coupling(self) -> np.ndarray | None:
        """The wrapped environment's ``[N, N]`` 0/1 coupling graph, or None when unknown."""
        return self.env.coupling

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """The wrapped environment's observation shape before flattening (``(H, W, C)`` or ``(obs_dim,)``)."""
        return self.env.obs_shape

    @property
    def render(self) -> Callable[..., np.ndarray]:
        """The wrapped environment's ``render(state, ...) -> uint8 [H, W, 3]``.

        A property, so that ``getattr(env, "render", None)`` is None where the wrapped
        environment has none.

        Raises:
            AttributeError: if the wrapped environment has no ``render``.
        """
        return self.env.render

    def interaction(self, state: Any) -> jax.Array | None:
        """The wrapped environment's per-state coupling graph (``Env.interaction``).

        Args:
            state: one (unbatched) state.

        Returns:
            bool ``[N, N]``, or None where the wrapped environment reports none.
        """
        return self.env.interaction(state)

    def interaction_lists(self, state: Any) -> jax.Array | None:
        """The wrapped environment's per-state graph on ``coupling_lists`` (``Env.interaction_lists``).

        Args:
            state: one (unbatched) state.

        Returns:
            bool ``[N, K]``, or None where the wrapped environment reports none.
        """
        return self.env.interaction_lists(state)

    @property
    def reference_policy(self) -> Callable[..., jax.Array]:
        """The wrapped environment's ``reference_policy(key, state, ...) -> actions [N]``.

        Raises:
            AttributeError: if the wrapped environment has no ``reference_policy``.
        """
        return self.env.reference_policy

    def reset(self, key: jax.Array) -> tuple[Any, TimeStep]:
        """Starts an episode of the wrapped environment.

        Args:
            key: a JAX PRNG key.

        Returns:
            ``(state, timestep)``: the wrapped environment's state and first ``TimeStep``,
                with ``final_obs`` / ``final_global_state`` set to its ``obs`` / ``global_state``.
        """
        state, ts = self.env.reset(key)
        return state, self._kept(ts).replace(final_obs=ts.obs, final_global_state=ts.global_state)

    def _kept(self, ts: TimeStep) -> TimeStep:
        """``ts`` with ``active`` only where this wrapper passes it on."""
        return ts if self.keeps_active else ts.replace(active=None)

    def step(self, key: jax.Array, state: Any, actions: jax.Array) -> tuple[Any, TimeStep]:
        """Steps the wrapped environment and, where the episode ended, starts a new one.

        Args:
            key: a JAX PRNG key (split into the step's and the reset's).
            state: the state ``reset`` or the previous ``step`` returned.
            actions: int32 ``[N]`` for discrete environments, float32 ``[N, A]`` for continuous ones.

        Returns:
            ``(state, timestep)``: when the step ended the episode (``done``), the new
                episode's state, ``obs``, ``action_mask``, ``global_state`` and ``active``,
                else the step's; ``reward``, ``terminated``, ``truncated`` and ``won`` are
                always the step's, and ``final_obs`` / ``final_global_state`` the step's
                own observation and global state (``[N, O]`` / ``[N, S]``).
        """
        key_step, key_reset = jax.random.split(key)
        next_state, ts = self.env.step(key_step, state, actions)
        reset_state, reset_ts = self.env.reset(key_reset)
        ts, reset_ts = self._kept(ts), self._kept(reset_ts)
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
            active=pick(reset_ts.active, ts.active),
        )
