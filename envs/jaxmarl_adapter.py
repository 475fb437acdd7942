"""JaxMARL environments in jaxpo's array protocol (docs/design.md §3).

:class:`JaxMARLAdapter` wraps a JaxMARL ``MultiAgentEnv`` with discrete or
continuous (``Box``) actions so that it speaks dicts-of-agents on the inside and
stacked arrays on the outside:

    >>> env = JaxMARLAdapter.from_name("MPE_simple_spread_v3", local_ratio=0.5)
    >>> state, ts = env.reset(key)                     # ts.obs: float32 [N, O]
    >>> state, ts = env.step(key, state, actions)      # actions: int32 [N]
    >>> env = JaxMARLAdapter.from_name("MPE_simple_spread_v3", action_type="Continuous")
    >>> state, ts = env.step(key, state, actions)      # actions: float32 [N, A], clipped to the Box
    >>> env = JaxMARLAdapter.from_name("HeuristicEnemySMAX", scenario="3m")

Agents are stacked in ``env.agents`` order. Heterogeneous agents are padded to
common sizes: observations with zeros at the end up to ``obs_dim``; actions up to
``num_actions`` (discrete: action indices; continuous: action-vector dimensions),
with the padding masked False in ``action_mask``.

Episode ends. The adapter calls JaxMARL's ``step_env`` (not ``step``, which resets
inside and loses the final observation); resets are :class:`~jaxpo.envs.AutoReset`'s
job. JaxMARL only reports ``dones["__all__"]``; the adapter splits it:

    truncated  = done & (step counter >= max_steps) & ~terminal_condition
    terminated = done & ~truncated

``terminal_condition`` is known per family: never for MPE (every MPE episode ends
at the time limit, so every MPE done is a truncation); "the battle is decided" (all
allies or all enemies dead) for SMAX, so a battle decided on the last step is a
termination; "the agent in the room told" for Switch Riddle (the game is decided
then, reward ±1), so a tell on the last step is a termination; always for Hanabi,
which has no time limit (a game ends when the fireworks are complete, the lives are
spent or the last round after the deck is played); never for Overcooked (v1 and v2
end only at ``max_steps``: every end is a truncation); "every robot reached its goal or
crashed" for JaxNav (an episode that ends at its time limit with a robot still driving is
a truncation); "the body fell" for MABrax (brax's own ``info["truncation"]``: a time-limit
end where the body is still healthy; JaxMARL's MABrax is built with ``auto_reset=False``,
since brax's auto-reset would replace the final observation). ``max_steps`` is the true
maximal episode length in steps, which is *not* JaxMARL's ``max_steps`` for MPE and
SMAX (see :class:`JaxMARLAdapter`).

Overcooked's shaped reward (JaxMARL's ``info["shaped_reward"]``, for placing an onion
in a pot, picking up a dish, …) is added to the team reward times ``shaped_reward``
(a constructor argument, default 0: the sparse delivery reward only). Its image
observations (H × W × C) are flattened like every other observation; ``obs_shape``
keeps the image's shape.

Turn-based games (Hanabi). Every agent acts at every step, but only the player whose
turn it is matters: the others' action mask allows only JaxMARL's no-op (its last
move), so their log-probability is 0 and they add nothing to the objective.

Controlled agents. In the FACMAC MPE scenarios (``MPE_simple_facmac*``) the prey is in
JaxMARL's agent list but moved by JaxMARL's own heuristic (its action is thrown
away); the adapter's agents are the predators only, and the prey's action is zeros.

Robot navigation (JaxNav): per-agent rewards, continuous ``Box(2)`` actions (or
``act_type="Discrete"``: 15), and a world state per agent (its ``get_world_state``). A robot
that has reached its goal or crashed stays put with reward 0 until the episode ends.

Multi-Agent Brax (``MABRAX``): agents drive disjoint sets of one body's joints, with
unequal observations (zero-padded) and one team reward; it needs brax, the ``mabrax``
extra (``pip install "jaxpo[mabrax]"``), and names it in the error when it is missing.

JaxMARL is imported lazily (it takes seconds and prints to stdout on import).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .base import Env, TimeStep

# Multi-Agent Brax: continuous control of one body's joints, needs brax (the ``mabrax`` extra).
MABRAX: tuple[str, ...] = ("ant_4x2", "halfcheetah_6x1", "hopper_3x1", "humanoid_9|8", "walker2d_2x3")

# JaxMARL names verified by tests/test_jaxmarl_{adapter,families,control}.py: the cooperative tasks (one team
# of learners with a common goal). MPE with action_type "Discrete" or "Continuous" (FACMAC's
# are continuous only), SMAX with any scenario, SMACv2's random-unit maps included.
SUPPORTED_JAXMARL: tuple[str, ...] = (
    "MPE_simple_v3",
    "MPE_simple_spread_v3",
    "MPE_simple_reference_v3",
    "MPE_simple_speaker_listener_v4",
    "MPE_simple_facmac_v1",
    "MPE_simple_facmac_3a_v1",
    "MPE_simple_facmac_6a_v1",
    "MPE_simple_facmac_9a_v1",
    "HeuristicEnemySMAX",
    "switch_riddle",
    "hanabi",
    "overcooked",
    "overcooked_v2",
    "jaxnav",
    *MABRAX,
)

# SMAX against enemies played by a given policy (jaxmarl's LearnedPolicyEnemySMAX): from_name
# accepts it with policy= and params=, so it is not among the names listed with defaults.
LEARNED_ENEMY_SMAX = "LearnedPolicyEnemySMAX"

# JaxMARL names that are not one cooperative team (teams with opposed rewards): refused by name.
COMPETITIVE_JAXMARL: tuple[str, ...] = (
    "MPE_simple_tag_v3", "MPE_simple_world_comm_v3", "MPE_simple_crypto_v3", "MPE_simple_push_v3",
    "MPE_simple_adversary_v3", "SMAX", "coin_game", "storm", "storm_2p", "storm_np",
)  # fmt: skip

# Keyword arguments SimpleMPE.__init__ reads from its **kwargs (jaxmarl 0.2.0). MPE
# constructors swallow any other keyword silently, so a typo such as
# ``local_ration=0.3`` would be ignored: from_name rejects it instead.
_MPE_KWARGS = frozenset(
    {
        "rad", "moveable", "silent", "collide", "mass", "accel", "max_speed",
        "u_noise", "c_noise", "damping", "contact_force", "contact_margin",
    }
)  # fmt: skip


@contextlib.contextmanager
def _quiet_jaxmarl_import():
    """Swallows stdout during the jaxmarl import and leaves sys.stdout/stderr as found.

    contextlib.redirect_stdout alone does not work: jaxmarl's mabrax module sets
    ``sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__`` while importing,
    which drops any redirect (pytest's capture included) before the
    "Importing submoduled environments..." print. So the dunder streams are
    pointed at the sink / current stderr for the duration too.
    """
    saved = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    sink = io.StringIO()
    sys.stdout = sys.__stdout__ = sink
    sys.__stderr__ = sys.stderr
    try:
        yield
    finally:
        sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__ = saved


@functools.cache
def _jaxmarl():
    """Imports jaxmarl once, without its "Importing submoduled environments..." noise."""
    with _quiet_jaxmarl_import():
        import jaxmarl
        from jaxmarl.environments.hanabi.hanabi import HanabiEnv
        from jaxmarl.environments.jaxnav.jaxnav_env import JaxNav
        from jaxmarl.environments.mpe.simple import SimpleMPE
        from jaxmarl.environments.mpe.simple_facmac import SimpleFacmacMPE
        from jaxmarl.environments.multi_agent_env import MultiAgentEnv
        from jaxmarl.environments.overcooked import Overcooked
        from jaxmarl.environments.overcooked_v2 import OvercookedV2
        from jaxmarl.environments.smax.heuristic_enemy_smax_env import EnemySMAX
        from jaxmarl.environments.smax.smax_env import SMAX
        from jaxmarl.environments.spaces import Box, Discrete
        from jaxmarl.environments.switch_riddle.switch_riddle import SwitchRiddle
    return {
        "jaxmarl": jaxmarl,
        "Hanabi": HanabiEnv,
        "JaxNav": JaxNav,
        "Overcooked": (Overcooked, OvercookedV2),
        "SimpleFacmacMPE": SimpleFacmacMPE,
        "SwitchRiddle": SwitchRiddle,
        "SimpleMPE": SimpleMPE,
        "MultiAgentEnv": MultiAgentEnv,
        "SMAX": (SMAX, EnemySMAX),
        "Box": Box,
        "Discrete": Discrete,
    }


@functools.cache
def _mabrax_env_class() -> type | None:
    """JaxMARL's ``MABraxEnv``, or None when brax (the ``mabrax`` extra) is not installed."""
    try:
        with _quiet_jaxmarl_import():
            from jaxmarl.environments.mabrax import MABraxEnv
    except ImportError:
        return None
    return MABraxEnv


def _body_graph(system: Any, action_mapping: dict) -> np.ndarray:
    """MABrax agents' joint graph, [N, N] 0/1 with a unit diagonal: agents i and j are
    adjacent when a link one of them drives is the parent, a child or a sibling (attached
    to the same body) of a link the other drives. ``system`` is the brax ``System``;
    ``action_mapping`` maps each agent to its indices into the body's actuators."""
    parents = np.asarray(system.link_parents)
    dof_link = np.asarray(system.dof_link())[np.asarray(system.actuator.qd_id)]  # actuator -> the link it moves
    links = [set(dof_link[np.asarray(idx)].tolist()) for idx in action_mapping.values()]
    touch = lambda a, b: parents[a] == b or parents[b] == a or parents[a] == parents[b]
    return np.asarray([[float(any(touch(a, b) for a in mine for b in theirs)) for theirs in links] for mine in links],
                      dtype=np.float32)


def _smax_scenario(map_name: str) -> Any:
    """JaxMARL's SMAX ``Scenario`` for a map name such as ``"3m"`` or ``"2s3z"``."""
    from jaxmarl.environments.smax.smax_env import MAP_NAME_TO_SCENARIO

    if map_name not in MAP_NAME_TO_SCENARIO:
        raise ValueError(f"unknown SMAX scenario {map_name!r}; known: {', '.join(sorted(MAP_NAME_TO_SCENARIO))}")
    return MAP_NAME_TO_SCENARIO[map_name]


def _describe_space(space) -> str:
    shape = getattr(space, "shape", None)
    return f"{type(space).__name__}(shape={shape})" if shape is not None else type(space).__name__


def _strong(tree: Any) -> Any:
    """``tree`` with weakly typed array leaves made strongly typed (same dtype).

    JaxMARL's states flip weak types between calls (MPE: ``done`` is a strong bool
    after ``reset`` and a weak one after ``step_env``), so the state's type would
    change from step to step and every jitted function taking it (JaxMARL's own
    ``step_env`` included) would compile twice. Fixed, the type stays the same.
    """
    return jax.tree.map(
        lambda x: jnp.asarray(x, x.dtype) if isinstance(x, jax.Array) and jax.typeof(x).weak_type else x,
        tree,
    )


def _inner_state(state: Any) -> Any:
    """The innermost JaxMARL state: wrappers such as EnemySMAX nest it as ``.state``."""
    while not hasattr(state, "step") and hasattr(state, "state"):
        state = state.state
    return state


class JaxMARLAdapter(Env):
    """A JaxMARL ``MultiAgentEnv`` (discrete or Box actions) in jaxpo's array protocol.

    Build it with :meth:`from_name` (the names in ``SUPPORTED_JAXMARL``) or wrap an
    existing instance, ``JaxMARLAdapter(jaxmarl_env, name=...)`` (any JaxMARL env
    with Discrete or 1-D Box action spaces; untested ones at the caller's risk).

    Attributes:
        env: the wrapped JaxMARL environment.
        name: the JaxMARL name (or the class name).
        agents: tuple of agent names, the order of the agent axis: the agents jaxpo
            controls (every JaxMARL agent except FACMAC's heuristic prey).
        num_agents: N.
        obs_dim: O, the largest flattened observation; smaller ones are zero-padded
            at the end.
        num_actions: A, the largest discrete action space (continuous: the widest
            Box); an agent's actions (dimensions) past its own count are padding,
            masked False.
        continuous: True when every agent's action space is a Box.
        agent_num_actions: int [N] numpy — each agent's own action count (width).
        action_low, action_high: float32 [N, A] numpy (continuous only) — the Box
            bounds, actions are clipped to them before the env sees them.
        obs_shape: the agents' observation shape before flattening when they share
            one (Overcooked: the image, H × W × C), else ``(obs_dim,)``.
        shaped_reward: Overcooked's shaped-reward coefficient (0: sparse reward only).
        global_state_dim: S when the env provides a world state (SMAX's
            ``obs["world_state"]``), broadcast to every agent as [N, S]; else None.
        max_steps: the most steps an episode can last. For MPE and SMAX this is
            JaxMARL's ``max_steps + 1``: their ``step_env`` tests
            ``step >= max_steps`` on the counter *before* incrementing it, so a
            time-limited episode lasts ``max_steps + 1`` steps (MPE: 26 by default,
            not PettingZoo's 25; SMAX: 101). The adapter keeps JaxMARL's dynamics
            unchanged and reports the true length. Hanabi (no time limit): the
            longest game its rules allow, 2(C − N·H + N) + T + K turns for C cards,
            N players of H cards, T information tokens and K colours (every play
            or discard takes a card, every hint a token; discards and completed
            colours give tokens back). Other envs: JaxMARL's value.
    """

    def __init__(self, env: Any, name: str | None = None, shaped_reward: float = 0.0):
        jm = _jaxmarl()
        if not isinstance(env, jm["MultiAgentEnv"]):
            raise ValueError(f"env must be a jaxmarl MultiAgentEnv instance, got {type(env).__name__}")
        self.env = env
        self.name = name if name is not None else type(env).__name__
        heuristic = set(env.good_agents) if isinstance(env, jm["SimpleFacmacMPE"]) else set()
        self.agents = tuple(a for a in env.agents if a not in heuristic)
        # JaxMARL's agents moved by its own heuristic: given zero actions, {agent: zeros}.
        is_box = lambda a: isinstance(env.action_space(a), jm["Box"])
        self._heuristic_actions = {
            a: jnp.zeros(env.action_space(a).shape, jnp.float32 if is_box(a) else jnp.int32) for a in sorted(heuristic)
        }
        self.num_agents = len(self.agents)
        if self.num_agents == 0:
            raise ValueError(f"JaxMARL env {self.name!r} has no agents")

        spaces = [env.action_space(agent) for agent in self.agents]
        for agent, space in zip(self.agents, spaces):
            box = isinstance(space, jm["Box"])
            if not (isinstance(space, jm["Discrete"]) or (box and len(space.shape) == 1)):
                raise ValueError(
                    f"JaxMARL env {self.name!r}: only Discrete and 1-D Box action spaces are supported "
                    f"(agent {agent!r} has {_describe_space(space)})"
                )
        kinds = {isinstance(space, jm["Box"]) for space in spaces}
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
        mabrax = _mabrax_env_class()
        if isinstance(env, jm["SimpleMPE"]):
            self._family = "mpe"
        elif isinstance(env, jm["SMAX"]):
            self._family = "smax"
        elif isinstance(env, jm["SwitchRiddle"]):
            self._family = "switch_riddle"
        elif isinstance(env, jm["Hanabi"]):
            self._family = "hanabi"
        elif isinstance(env, jm["Overcooked"]):
            self._family = "overcooked"
        elif isinstance(env, jm["JaxNav"]):
            self._family = "jaxnav"
        elif mabrax is not None and isinstance(env, mabrax):
            self._family = "mabrax"
        else:
            self._family = "other"
        if not isinstance(shaped_reward, (int, float)) or isinstance(shaped_reward, bool):
            raise ValueError(f"shaped_reward must be a number, got {shaped_reward!r}")
        if shaped_reward and self._family != "overcooked":
            raise ValueError(f"shaped_reward is Overcooked's; JaxMARL env {self.name!r} has none")
        self.shaped_reward = float(shaped_reward)
        # The world state: SMAX's obs["world_state"] (one, broadcast); JaxNav's get_world_state (one per agent).
        ws = obs_shapes.get("world_state")
        self.global_state_dim = None if ws is None else int(np.prod(ws.shape))
        if self._family == "jaxnav":  # [N, S]
            ws = jax.eval_shape(env.get_world_state, jax.eval_shape(env.reset, jax.random.PRNGKey(0))[1])
            self.global_state_dim = int(np.prod(ws.shape[1:]))
        if self._family == "hanabi":
            n, hand = env.num_agents, env.hand_size
            plays_and_discards = env.deck_size - n * hand + n
            self.max_steps = 2 * plays_and_discards + env.max_info_tokens + env.num_colors
        elif self._family == "mabrax":  # brax's EpisodeWrapper counts action_repeat physics steps per step
            if env.auto_reset:
                raise ValueError(f"JaxMARL env {self.name!r} was built with auto_reset=True, which replaces the final "
                                 "observation; build it with auto_reset=False (jaxpo's AutoReset resets episodes)")
            self.max_steps = -(-int(env.episode_length) // int(env.action_repeat))
        elif not isinstance(getattr(env, "max_steps", None), (int, np.integer)):
            raise ValueError(f"JaxMARL env {self.name!r} has no integer max_steps; cannot tell truncation")
        else:  # MPE and SMAX test `step >= max_steps` on the counter *before* incrementing it,
            # so their episodes last one step longer than their max_steps says.
            self.max_steps = int(env.max_steps) + (1 if self._family in ("mpe", "smax") else 0)

        # MultiAgentEnv.get_avail_actions raises NotImplementedError (MPE does not
        # override it): then every real action is available. Continuous: every real dimension.
        base_avail = jm["MultiAgentEnv"].get_avail_actions
        # JaxNav's is a placeholder (two ones per agent, whatever its action space): every action is legal there.
        self._has_avail = not self.continuous and self._family != "jaxnav" and (
            type(env).get_avail_actions is not base_avail or self._family == "hanabi")
        self._coupling = _body_graph(env.sys, env.agent_action_mapping) if self._family == "mabrax" else None

    @classmethod
    def from_name(cls, name: str, **kwargs) -> "JaxMARLAdapter":
        """Builds ``jaxmarl.make(name, **kwargs)`` and wraps it.

        Args:
            name: one of ``SUPPORTED_JAXMARL``, or ``LEARNED_ENEMY_SMAX`` with ``policy=``
                (a flax module whose ``apply(params, enemy_obs)`` returns ``(distribution,
                value)``) and ``params=``, which play SMAX's enemies.
            **kwargs: the JaxMARL constructor's keyword arguments (e.g.
                ``local_ratio=0.5``, ``max_steps=50``, ``action_type="Continuous"``;
                for SMAX ``scenario=`` a JaxMARL ``Scenario`` or a map name such as
                ``"3m"`` or ``"2s3z"``; for Overcooked ``layout=`` a layout name such
                as ``"cramped_room"``), plus the adapter's own ``shaped_reward``
                (Overcooked only).

        Raises:
            ValueError: unknown name, keyword arguments the env rejects (or, for
                MPE, does not know), an unknown SMAX scenario or Overcooked layout,
                a shaped reward for an env without one, or an unsupported action space.
        """
        if name in COMPETITIVE_JAXMARL:
            raise ValueError(
                f"JaxMARL env {name!r} is not a cooperative task (its teams' rewards are opposed); "
                f"jaxpo trains one cooperative team. Cooperative JaxMARL envs: {', '.join(SUPPORTED_JAXMARL)}"
            )
        if name == LEARNED_ENEMY_SMAX and not {"policy", "params"} <= set(kwargs):
            raise ValueError(f"{name} plays the enemies with a learned policy: pass policy= (a flax module whose "
                             "apply(params, enemy_obs [enemies, O]) returns (distribution, value)) and params= "
                             "(from Python: a policy is code), or use HeuristicEnemySMAX")
        if name not in SUPPORTED_JAXMARL and name != LEARNED_ENEMY_SMAX:
            raise ValueError(
                f"unknown JaxMARL env name {name!r}; supported: {', '.join(SUPPORTED_JAXMARL)} "
                "(other discrete JaxMARL envs can be wrapped as JaxMARLAdapter(jaxmarl.make(name)))"
            )
        jm = _jaxmarl()
        if name in MABRAX:
            if _mabrax_env_class() is None:
                raise ImportError(f"JaxMARL env {name!r} (Multi-Agent Brax) needs brax, an optional extra: "
                                  'pip install "jaxpo[mabrax]"')
            if kwargs.get("auto_reset", False):
                raise ValueError(f"auto_reset=True for {name!r}: jaxpo resets episodes itself (AutoReset keeps "
                                 "the final observation); leave auto_reset out")
            kwargs = {**kwargs, "auto_reset": False}
        shaped_reward = kwargs.pop("shaped_reward", 0.0)
        if name == "overcooked" and isinstance(kwargs.get("layout"), str):  # v2 takes names itself
            from jaxmarl.environments.overcooked import overcooked_layouts
            from flax.core import FrozenDict

            if kwargs["layout"] not in overcooked_layouts:
                known = ", ".join(overcooked_layouts)
                raise ValueError(f"unknown Overcooked layout {kwargs['layout']!r}; known: {known}")
            kwargs = {**kwargs, "layout": FrozenDict(overcooked_layouts[kwargs["layout"]])}
        if isinstance(kwargs.get("scenario"), str):  # SMAX map name, e.g. scenario="3m"
            kwargs = {**kwargs, "scenario": _smax_scenario(kwargs["scenario"])}
        try:
            env = jm["jaxmarl"].make(name, **kwargs)
        except (AssertionError, TypeError, ValueError, NotImplementedError, KeyError) as exc:
            raise ValueError(f"invalid keyword arguments for JaxMARL env {name!r} {kwargs}: {exc}") from exc
        if isinstance(env, jm["SimpleMPE"]):
            known = set(_MPE_KWARGS)
            for klass in type(env).__mro__:
                if issubclass(klass, jm["SimpleMPE"]):
                    known |= {
                        p.name
                        for p in inspect.signature(klass.__init__).parameters.values()
                        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"
                    }
            unknown = sorted(set(kwargs) - known)
            if unknown:
                raise ValueError(
                    f"invalid keyword arguments for JaxMARL env {name!r}: unknown {unknown} "
                    f"(MPE would ignore them silently); known: {sorted(known)}"
                )
        return cls(env, name=name, shaped_reward=shaped_reward)

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return self._obs_shape

    @property
    def coupling(self) -> np.ndarray | None:
        """[N, N] 0/1: ``coupling[i, j] = 1`` when agent j's action can change agent i's reward.

        MPE: the complete graph. The rewards are functions of every agent's position:
        simple_spread's global term (sum over landmarks of the nearest agent's
        distance) couples all agents whenever ``local_ratio < 1``, and its local
        collision term couples any pair that can collide, so even at
        ``local_ratio == 1`` every pair is coupled; simple_reference's reward of
        agent i is the *other* agent's distance to its goal (blended with the
        team mean); simple_speaker_listener's reward is shared by both.
        SMAX, Switch Riddle, Hanabi, Overcooked and FACMAC's predators: the complete
        graph — one team reward. JaxNav: the complete graph — each agent's reward is
        blended with the team mean (``rew_lambda``), and any two robots can collide.
        MABrax: the body's joint graph (:func:`_body_graph`: agents whose joints move
        adjacent links; for ant_4x2 complete, for halfcheetah_6x1 and hopper_3x1 a path
        along the limbs). Its reward is one team reward, so every agent reaches every
        reward through the body's dynamics; the graph says whose actions act on each
        other directly, and ``khop`` widens it hop by hop to the whole body.
        Other envs: None (unknown).
        """
        if self._family in ("mpe", "smax", "switch_riddle", "hanabi", "overcooked", "jaxnav"):
            return np.ones((self.num_agents, self.num_agents), dtype=np.float32)
        return self._coupling

    # -- dict <-> array conversion ------------------------------------------------

    def _stack_obs(self, obs: dict) -> jax.Array:
        """Agent observations, flattened and zero-padded to ``obs_dim``: float32 [N, O]."""
        rows = [
            jnp.pad(jnp.reshape(obs[a], (-1,)).astype(jnp.float32), (0, self.obs_dim - size))
            for a, size in zip(self.agents, self._obs_sizes)
        ]
        return jnp.stack(rows)

    def _global_state(self, obs: dict, state: Any) -> jax.Array | None:
        """The env's world state for every agent: float32 [N, S], or None. SMAX's one
        ``obs["world_state"]`` is broadcast; JaxNav's ``get_world_state`` is per agent."""
        if self.global_state_dim is None:
            return None
        if self._family == "jaxnav":
            return jnp.reshape(self.env.get_world_state(state), (self.num_agents, -1)).astype(jnp.float32)
        ws = jnp.reshape(obs["world_state"], (-1,)).astype(jnp.float32)
        return jnp.broadcast_to(ws, (self.num_agents, self.global_state_dim))

    def _action_mask(self, state: Any) -> jax.Array:
        """bool [N, A]: the env's available actions, False on padding."""
        if not self._has_avail:
            return jnp.asarray(self._real_actions)
        avail = (self.env.get_legal_moves if self._family == "hanabi" else self.env.get_avail_actions)(state)
        rows = [
            jnp.pad(jnp.asarray(avail[a]).astype(bool), (0, self.num_actions - int(n)))
            for a, n in zip(self.agents, self.agent_num_actions)
        ]
        return jnp.stack(rows)

    def _battle(self, state: Any) -> tuple[jax.Array, jax.Array]:
        """SMAX: ``(allies_dead, enemies_dead)``, bool [] each."""
        inner = _inner_state(state)
        allies = self.env.num_allies
        return ~jnp.any(inner.unit_alive[:allies]), ~jnp.any(inner.unit_alive[allies:])

    def _terminal_condition(self, state: Any, actions: dict, next_state: Any) -> jax.Array:
        """bool [] — the step from ``state`` with ``actions`` (JaxMARL's dict) to
        ``next_state`` ended the episode for a reason other than the time limit."""
        if self._family == "smax":
            allies_dead, enemies_dead = self._battle(next_state)
            return allies_dead | enemies_dead
        if self._family == "switch_riddle":  # only the agent in the room acts; its tell decides the game
            acted = jnp.stack([actions[a] for a in self.env.agents])[state.agent_in_room]
            return acted == self.env.game_actions["TELL"]
        if self._family == "hanabi":  # no time limit: every end is the game's own
            return jnp.asarray(True)
        if self._family == "jaxnav":  # every robot is at its goal or has crashed (now or, evaporating, before)
            return jnp.all(state.done | next_state.goal_reached | next_state.move_term)
        if self._family == "mabrax":  # brax marks a time-limit end as truncation unless the body also fell
            return next_state.info["truncation"] == 0
        return jnp.asarray(False)  # MPE has no terminal states; unknown otherwise

    def _won(self, state: Any) -> jax.Array | None:
        """SMAX: bool [] — every enemy dead and an ally alive (JaxMARL's win-bonus rule;
        both teams wiped out on one step is a draw). None for envs without a win."""
        if self._family != "smax":
            return None
        allies_dead, enemies_dead = self._battle(state)
        return enemies_dead & ~allies_dead

    # -- protocol ------------------------------------------------------------------
    # reset/step call JaxMARL's own (jitted) reset/step_env between two small jitted
    # conversions. Inside an outer jit everything inlines; called eagerly (notebooks,
    # debugging) each env costs three compiles, the JaxMARL one shared with direct
    # JaxMARL calls, instead of dozens of one-op compiles.

    def reset(self, key: jax.Array) -> tuple[Any, TimeStep]:
        """Starts an episode.

        Args:
            key: PRNG key.

        Returns:
            (state, timestep): the JaxMARL state (a pytree) and a TimeStep with
            obs float32 [N, O], reward zeros float32 [N], terminated/truncated
            False, action_mask bool [N, A], global_state float32 [N, S] or None.
        """
        obs, state = self.env.reset(key)
        return self._pack_reset(obs, state)

    def step(self, key: jax.Array, state: Any, actions: jax.Array) -> tuple[Any, TimeStep]:
        """Advances one step without resetting (wrap in ``AutoReset`` for that).

        Args:
            key: PRNG key.
            state: the state from ``reset``/``step``.
            actions: int [N] — one action index per agent, in ``agents`` order. An
                index outside an agent's own range (padding, or negative) is
                replaced by action 0 so it never reaches the env. Continuous:
                float [N, A], each row clipped to the agent's Box and cut to its
                own width (padding dimensions are ignored).

        Returns:
            (state, timestep) with obs float32 [N, O] (the post-step observation,
            never reset), reward float32 [N], terminated/truncated bool [] (rule in
            the module docstring), action_mask bool [N, A], global_state
            float32 [N, S] or None.
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
        """One (unbatched) state drawn by JaxMARL's own visualiser: uint8 [H, W, 3].

        MPE (``MPEVisualizer``), SMAX (its ``init_render``: allies blue, enemies green;
        no shots, the state holds no actions), Overcooked v1 and v2 (their visualisers'
        grid renderers) and JaxNav (its ``init_render``: map, robots, goals, lidar).
        MABrax has none that runs headless (brax renders through an OpenGL context).
        """
        import matplotlib.pyplot as plt

        state = jax.device_get(state)
        family = self._family
        if family == "overcooked" and isinstance(self.env, _jaxmarl()["Overcooked"][1]):
            from jaxmarl.viz.overcooked_v2_visualizer import OvercookedV2Visualizer

            return np.asarray(OvercookedV2Visualizer()._render_state(state, self.env.agent_view_size))[..., :3]
        if family == "overcooked":
            from jaxmarl.viz.overcooked_visualizer import TILE_PIXELS, OvercookedVisualizer

            pad = self.env.agent_view_size - 2  # the maze map is padded for the agents' views
            grid = np.asarray(state.maze_map[pad:-pad, pad:-pad, :])
            return np.asarray(OvercookedVisualizer._render_grid(
                grid, TILE_PIXELS, highlight_mask=None, agent_dir_idx=state.agent_dir_idx,
                agent_inv=state.agent_inv))[..., :3]
        if family == "mpe":
            from jaxmarl.environments.mpe.mpe_visualizer import MPEVisualizer

            with contextlib.redirect_stdout(io.StringIO()):  # it prints whether agents communicate
                viz = MPEVisualizer(self.env, [_inner_state(state)])
            fig = viz.fig
        elif family in ("smax", "jaxnav"):
            fig, ax = plt.subplots(figsize=(5, 5))
            if family == "smax":  # every unit's action 0, a move: no bullets drawn
                smax = getattr(self.env, "_env", self.env)
                idle = {agent: 0 for agent in smax.agents}
                image = smax.init_render(ax, (None, _inner_state(state), idle), 0, int(_inner_state(state).step))
                plt.close(fig)
                return np.asarray(image.get_array())[..., :3].copy()  # the figure as SMAX drew it
            self.env.init_render(ax, state, obs=self.env.get_obs(state))  # the lidar beams need the observation
        else:
            raise ValueError(f"JaxMARL env {self.name!r} cannot render here: JaxMARL's visualisers are wired in for "
                             "MPE, SMAX, Overcooked and JaxNav")
        try:
            fig.canvas.draw()
            return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
        finally:
            plt.close(fig)

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
            won=self._won(state),
        )

    @functools.partial(jax.jit, static_argnums=0)
    def _pack_step(self, obs: dict, next_state: Any, reward: dict, done: jax.Array, state: Any,
                   actions: dict) -> tuple[Any, TimeStep]:
        next_state = _strong(next_state)
        done = jnp.asarray(done, dtype=bool)
        if self._family == "mabrax":  # brax's EpisodeWrapper counts physics steps in info
            time_up = next_state.info["steps"] >= self.env.episode_length
        else:
            time_up = _inner_state(next_state).step >= self.max_steps
        truncated = done & time_up & ~self._terminal_condition(state, actions, next_state)
        return next_state, TimeStep(
            obs=self._stack_obs(obs),
            reward=jnp.stack([jnp.asarray(reward[a], jnp.float32) for a in self.agents]),
            terminated=done & ~truncated,
            truncated=truncated,
            action_mask=self._action_mask(next_state),
            global_state=self._global_state(obs, next_state),
            won=self._won(next_state),
        )


__all__ = ["COMPETITIVE_JAXMARL", "JaxMARLAdapter", "LEARNED_ENEMY_SMAX", "MABRAX", "SUPPORTED_JAXMARL"]
