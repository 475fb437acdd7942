"""The shared JaxMARL adapter: dicts of agents inside, stacked arrays outside.

:class:`JaxMARLAdapter` knows no family: what differs between families (episode ends,
world state, masks, coupling, win, renderer, arguments) it asks its
:class:`~jaxpo.envs.jaxmarl.family.Family` (``jaxpo.envs.jaxmarl.registry``).

Agents are stacked in ``env.agents`` order. Heterogeneous agents are padded to common
sizes: observations with zeros at the end up to ``obs_dim``; actions up to
``num_actions`` (discrete: action indices; continuous: action-vector dimensions), with
the padding masked False in ``action_mask``.

Episode ends. The adapter calls JaxMARL's ``step_env`` (not ``step``, which resets inside
and loses the final observation); resets are :class:`~jaxpo.envs.AutoReset`'s job.
JaxMARL only reports ``dones["__all__"]``; the adapter splits it with the family's rules:

    truncated  = done & family.time_up & ~family.terminal
    terminated = done & ~truncated
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..base import Env, TimeStep
from .family import Family
from .loading import load_jaxmarl
from .registry import families, family_named, family_of


def _describe_space(space) -> str:
    shape = getattr(space, "shape", None)
    return f"{type(space).__name__}(shape={shape})" if shape is not None else type(space).__name__


def _strong(tree: Any) -> Any:
    """``tree`` with weakly typed array leaves made strongly typed (same dtype).

    JaxMARL's states flip weak types between calls (MPE: ``done`` is a strong bool after
    ``reset`` and a weak one after ``step_env``), so the state's type would change from
    step to step and every jitted function taking it (JaxMARL's own ``step_env``
    included) would compile twice. Fixed, the type stays the same.
    """
    return jax.tree.map(
        lambda x: jnp.asarray(x, x.dtype) if isinstance(x, jax.Array) and jax.typeof(x).weak_type else x,
        tree,
    )


class JaxMARLAdapter(Env):
    """A JaxMARL ``MultiAgentEnv`` (discrete or Box actions) in jaxpo's array protocol.

    Build it with :meth:`from_name` (a registered family's name) or wrap an instance,
    ``JaxMARLAdapter(jaxmarl_env, name=...)`` (any JaxMARL env with Discrete or 1-D Box
    action spaces; its family is found by class, else the base ``Family``'s defaults).

    Args:
        env: the JaxMARL environment.
        name: its name (default: the class name).
        shaped_reward: the coefficient of the family's shaped reward (Overcooked's
            ``info["shaped_reward"]``), added to the reward; 0: none.
        family: the family that reads it (default: found by the instance's class).

    Attributes:
        env: the wrapped JaxMARL environment.
        name: the JaxMARL name (or the class name).
        family: the ``Family`` that reads it.
        agents: tuple of agent names, the order of the agent axis: the agents jaxpo
            controls (every JaxMARL agent except those JaxMARL moves itself).
        num_agents: N.
        obs_dim: O, the largest flattened observation; smaller ones are zero-padded at the end.
        num_actions: A, the largest discrete action space (continuous: the widest Box); an
            agent's actions (dimensions) past its own count are padding, masked False.
        continuous: True when every agent's action space is a Box.
        agent_num_actions: int [N] numpy — each agent's own action count (width).
        action_low, action_high: float32 [N, A] numpy (continuous only) — the Box bounds,
            actions are clipped to them before the env sees them.
        shaped_reward: the shaped-reward coefficient (0: the sparse reward only).
        global_state_dim: S when the family states a world state ([N, S]); else None.
        max_steps: the most steps an episode can last (the family's ``max_steps``).

    Raises:
        ValueError: if ``env`` is not a JaxMARL ``MultiAgentEnv``, has no agents, an
            action space other than Discrete or 1-D Box, or mixes them, or
            ``shaped_reward`` is not a number or given for a family without one.
    """

    def __init__(self, env: Any, name: str | None = None, shaped_reward: float = 0.0, family: Family | None = None):
        load_jaxmarl()
        from jaxmarl.environments.multi_agent_env import MultiAgentEnv
        from jaxmarl.environments.spaces import Box, Discrete

        if not isinstance(env, MultiAgentEnv):
            raise ValueError(f"env must be a jaxmarl MultiAgentEnv instance, got {type(env).__name__}")
        self.env = env
        self.name = name if name is not None else type(env).__name__
        self.family = family_of(env) if family is None else family
        heuristic = self.family.heuristic_agents(env)
        self.agents = tuple(a for a in env.agents if a not in heuristic)
        # JaxMARL's agents moved by its own heuristic: given zero actions, {agent: zeros}.
        is_box = lambda a: isinstance(env.action_space(a), Box)
        self._heuristic_actions = {
            a: jnp.zeros(env.action_space(a).shape, jnp.float32 if is_box(a) else jnp.int32) for a in sorted(heuristic)
        }
        self.num_agents = len(self.agents)
        if self.num_agents == 0:
            raise ValueError(f"JaxMARL env {self.name!r} has no agents")

        spaces = [env.action_space(agent) for agent in self.agents]
        for agent, space in zip(self.agents, spaces):
            if not (isinstance(space, Discrete) or (isinstance(space, Box) and len(space.shape) == 1)):
                raise ValueError(
                    f"JaxMARL env {self.name!r}: only Discrete and 1-D Box action spaces are supported "
                    f"(agent {agent!r} has {_describe_space(space)})"
                )
        kinds = {isinstance(space, Box) for space in spaces}
        if len(kinds) > 1:
            raise ValueError(f"JaxMARL env {self.name!r} mixes Discrete and Box action spaces; not supported")
        self.continuous = kinds == {True}
        counts = [space.shape[0] if self.continuous else space.n for space in spaces]
        self.agent_num_actions = np.asarray(counts, dtype=np.int32)
        self.num_actions = int(self.agent_num_actions.max())
        # Static mask of real (non-padding) actions or action dimensions, [N, A].
        self._real_actions = np.arange(self.num_actions)[None, :] < self.agent_num_actions[:, None]
        if self.continuous:
            bound = lambda side: np.stack([
                np.pad(np.broadcast_to(np.asarray(getattr(s, side), np.float32), s.shape), (0, self.num_actions - n))
                for s, n in zip(spaces, counts)
            ])
            self.action_low, self.action_high = bound("low"), bound("high")

        # True observation shapes, from tracing reset (no computation).
        obs_shapes, _ = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
        missing = [a for a in self.agents if a not in obs_shapes]
        if missing:
            raise ValueError(f"JaxMARL env {self.name!r}: reset returns no observation for agents {missing}")
        self._obs_sizes = [int(np.prod(obs_shapes[a].shape)) for a in self.agents]
        self.obs_dim = max(self._obs_sizes)
        shapes = {tuple(obs_shapes[a].shape) for a in self.agents}
        shape = shapes.pop() if len(shapes) == 1 else ()
        self._obs_shape = shape if len(shape) > 1 else (self.obs_dim,)
        if not isinstance(shaped_reward, (int, float)) or isinstance(shaped_reward, bool):
            raise ValueError(f"shaped_reward must be a number, got {shaped_reward!r}")
        if shaped_reward and not self.family.shaped_reward:
            raise ValueError(f"shaped_reward is Overcooked's; JaxMARL env {self.name!r} has none")
        self.shaped_reward = float(shaped_reward)
        self.global_state_dim = self.family.global_state_dim(env, obs_shapes)
        self.max_steps = self.family.max_steps(env, self.name)
        self._available_actions = None if self.continuous else self.family.available_actions(env)
        self._coupling = self.family.coupling(env, self.num_agents)

    @classmethod
    def from_name(cls, name: str, **kwargs) -> "JaxMARLAdapter":
        """Builds a registered JaxMARL environment by name and wraps it.

        Args:
            name: a name of a registered family (``SUPPORTED_JAXMARL``, or SMAX's
                ``LEARNED_ENEMY_SMAX`` with ``policy=`` and ``params=``).
            **kwargs: the JaxMARL constructor's keyword arguments (e.g.
                ``local_ratio=0.5``, ``max_steps=50``, ``action_type="Continuous"``; for
                SMAX ``scenario=`` a JaxMARL ``Scenario`` or a map name such as ``"3m"``;
                for Overcooked ``layout=`` a layout name such as ``"cramped_room"``), plus
                the adapter's own ``shaped_reward`` (Overcooked only).

        Returns:
            The adapter, its ``family`` the one registered for ``name``.

        Raises:
            ValueError: an unknown or competitive name, a parameter the environment does
                not take, a value of the wrong kind or an unknown map name (each message
                names the argument and what it accepts), keyword arguments JaxMARL
                rejects, a shaped reward for an env without one, or an unsupported
                action space.
            ImportError: a family's optional dependency is missing (the message names
                the extra to install).
        """
        family = family_named(name)
        load_jaxmarl()  # quietly, before a family's checks import from JaxMARL
        shaped_reward = kwargs.pop("shaped_reward", 0.0)
        kwargs = family.arguments(name, kwargs)
        try:
            env = family.build(name, kwargs)
        except (AssertionError, TypeError, ValueError, NotImplementedError, KeyError) as exc:
            raise ValueError(f"invalid keyword arguments for JaxMARL env {name!r} {kwargs}: {exc}") from exc
        return cls(env, name=name, shaped_reward=shaped_reward, family=family)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        """The agents' observation shape before flattening when they share one (Overcooked:
        the image, H × W × C), else ``(obs_dim,)``."""
        return self._obs_shape

    @property
    def coupling(self) -> np.ndarray | None:
        """[N, N] 0/1: ``coupling[i, j] = 1`` when agent j's action can change agent i's
        reward; the family's graph (its module says why), None when unknown."""
        return self._coupling

    def interaction(self, state: Any) -> jax.Array | None:
        """Whose actions reach whose reward in one state, where that follows the state.

        Args:
            state: one (unbatched) state from ``reset``/``step``.

        Returns:
            bool [N, N], the family's graph (``Env.interaction``); None where the family's
            coupling does not follow the state.
        """
        return self.family.interaction(self.env, state)

    # -- dict <-> array conversion ------------------------------------------------

    def _stack_obs(self, obs: dict) -> jax.Array:
        """Agent observations, flattened and zero-padded to ``obs_dim``: float32 [N, O]."""
        rows = [
            jnp.pad(jnp.reshape(obs[a], (-1,)).astype(jnp.float32), (0, self.obs_dim - size))
            for a, size in zip(self.agents, self._obs_sizes)
        ]
        return jnp.stack(rows)

    def _global_state(self, obs: dict, state: Any) -> jax.Array | None:
        """The family's world state for every agent: float32 [N, S], or None."""
        if self.global_state_dim is None:
            return None
        return self.family.global_state(self.env, obs, state, self.num_agents, self.global_state_dim)

    def _action_mask(self, state: Any) -> jax.Array:
        """bool [N, A]: the env's available actions, False on padding."""
        if self._available_actions is None:
            return jnp.asarray(self._real_actions)
        avail = self._available_actions(state)
        rows = [
            jnp.pad(jnp.asarray(avail[a]).astype(bool), (0, self.num_actions - int(n)))
            for a, n in zip(self.agents, self.agent_num_actions)
        ]
        return jnp.stack(rows)

    # -- protocol ------------------------------------------------------------------
    # reset/step call JaxMARL's own (jitted) reset/step_env between two small jitted
    # conversions: inside an outer jit everything inlines; called eagerly (notebooks,
    # debugging) each env compiles three programs, the JaxMARL one shared with direct
    # JaxMARL calls, instead of one per operation.

    def reset(self, key: jax.Array) -> tuple[Any, TimeStep]:
        """Starts an episode.

        Args:
            key: PRNG key.

        Returns:
            (state, timestep): the JaxMARL state (a pytree) and a TimeStep with obs
            float32 [N, O], reward zeros float32 [N], terminated/truncated False,
            action_mask bool [N, A], global_state float32 [N, S] or None.
        """
        obs, state = self.env.reset(key)
        return self._pack_reset(obs, state)

    def step(self, key: jax.Array, state: Any, actions: jax.Array) -> tuple[Any, TimeStep]:
        """Advances one step without resetting (wrap in ``AutoReset`` for that).

        Args:
            key: PRNG key.
            state: the state from ``reset``/``step``.
            actions: int [N] — one action index per agent, in ``agents`` order. An index
                outside an agent's own range (padding, or negative) is replaced by action
                0 so it never reaches the env. Continuous: float [N, A], each row clipped
                to the agent's Box and cut to its own width (padding dimensions ignored).

        Returns:
            (state, timestep) with obs float32 [N, O] (the post-step observation, never
            reset), reward float32 [N], terminated/truncated bool [] (rule in the module
            docstring), action_mask bool [N, A], global_state float32 [N, S] or None.

        Raises:
            ValueError: if ``actions`` has the wrong shape or dtype.
        """
        actions = jnp.asarray(actions)
        if self.continuous:
            if actions.shape != (self.num_agents, self.num_actions) or not jnp.issubdtype(actions.dtype, jnp.floating):
                raise ValueError(
                    f"actions must be a float array of shape ({self.num_agents}, {self.num_actions}) "
                    f"(continuous env), got {actions.dtype} {actions.shape}"
                )
        elif actions.shape != (self.num_agents,) or not jnp.issubdtype(actions.dtype, jnp.integer):
            raise ValueError(
                f"actions must be an integer array of shape ({self.num_agents},), "
                f"got {actions.dtype} {actions.shape}"
            )
        action_dict = self._action_dict(actions)
        obs, next_state, reward, dones, info = self.env.step_env(key, state, action_dict)
        if self.shaped_reward:
            reward = {a: reward[a] + self.shaped_reward * info["shaped_reward"][a] for a in self.agents}
        return self._pack_step(obs, next_state, reward, dones["__all__"], state, action_dict)

    def render(self, state: Any) -> np.ndarray:
        """One (unbatched) state drawn by the family's renderer (JaxMARL's own visualiser).

        Args:
            state: a state from ``reset``/``step``.

        Returns:
            uint8 [H, W, 3].

        Raises:
            ValueError: if the family has no renderer (the message lists those that do).
        """
        if not self.family.renders:
            titles = [family.title for family in families() if family.renders]
            raise ValueError(f"JaxMARL env {self.name!r} cannot render here: JaxMARL's visualisers are wired in for "
                             f"{', '.join(titles[:-1])} and {titles[-1]}")
        return self.family.render(self.env, jax.device_get(state))

    @functools.partial(jax.jit, static_argnums=0)
    def _action_dict(self, actions: jax.Array) -> dict:
        """int [N] -> {agent: int32 []}, padded/out-of-range indices replaced by 0.
        Continuous: float [N, A] -> {agent: float32 [A_i]} clipped to the Box."""
        if self.continuous:
            actions = jnp.clip(actions.astype(jnp.float32), self.action_low, self.action_high)
            return {**{a: actions[i, :n] for i, (a, n) in enumerate(zip(self.agents, self.agent_num_actions))},
                    **self._heuristic_actions}
        actions = actions.astype(jnp.int32)
        real = (actions >= 0) & (actions < jnp.asarray(self.agent_num_actions))
        actions = jnp.where(real, actions, 0)
        return {**{a: actions[i] for i, a in enumerate(self.agents)}, **self._heuristic_actions}

    @functools.partial(jax.jit, static_argnums=0)
    def _pack_reset(self, obs: dict, state: Any) -> tuple[Any, TimeStep]:
        state = _strong(state)
        return state, TimeStep(
            obs=self._stack_obs(obs),
            reward=jnp.zeros((self.num_agents,), jnp.float32),
            terminated=jnp.asarray(False),
            truncated=jnp.asarray(False),
            action_mask=self._action_mask(state),
            global_state=self._global_state(obs, state),
            won=self.family.won(self.env, state),
            active=self.family.active(self.env, state),
        )

    @functools.partial(jax.jit, static_argnums=0)
    def _pack_step(self, obs: dict, next_state: Any, reward: dict, done: jax.Array, state: Any,
                   actions: dict) -> tuple[Any, TimeStep]:
        next_state = _strong(next_state)
        done = jnp.asarray(done, dtype=bool)
        time_up = self.family.time_up(self.env, next_state, self.max_steps)
        truncated = done & time_up & ~self.family.terminal(self.env, state, actions, next_state)
        return next_state, TimeStep(
            obs=self._stack_obs(obs),
            reward=jnp.stack([jnp.asarray(reward[a], jnp.float32) for a in self.agents]),
            terminated=done & ~truncated,
            truncated=truncated,
            action_mask=self._action_mask(next_state),
            global_state=self._global_state(obs, next_state),
            won=self.family.won(self.env, next_state),
            active=self.family.active(self.env, next_state),
        )
