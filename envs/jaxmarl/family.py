"""What a JaxMARL family states: the base class every family module subclasses.

A family is a set of JaxMARL environments that :class:`~jaxpo.envs.jaxmarl.JaxMARLAdapter`
reads the same way. Its module subclasses :class:`Family` and overrides what differs from
the defaults here (a JaxMARL environment of no known family gets these defaults):

* names and arguments: ``names``, ``jaxmarl_classes`` (its JaxMARL classes, by import
  path), ``parameters`` (checked before building), ``arguments`` (map names turned into
  JaxMARL objects), ``build``;
* agents: ``heuristic_agents`` (JaxMARL agents that JaxMARL moves itself);
* episode ends: ``max_steps``, ``time_up``, ``terminal`` (a decided game), ``won``;
* ``active``: which agents still act (a unit alive, a robot still driving);
* observations: ``global_state_dim`` and ``global_state`` (the world state), and
  ``available_actions`` (the action masks);
* ``coupling`` (whose actions reach whose reward; ``complete_coupling`` for one team
  reward), ``interaction`` (the same, in one state, where it follows the state) and
  ``render``.

Every method takes the JaxMARL environment (``env``) it reads; a family holds no state.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np

from ..params import check_like_default
from .loading import load_jaxmarl


def inner_state(state: Any) -> Any:
    """The innermost JaxMARL state: wrappers such as SMAX's ``EnemySMAX`` nest it as ``.state``.

    Args:
        state: a JaxMARL state pytree.

    Returns:
        The first nested state that has a ``step`` counter.
    """
    while not hasattr(state, "step") and hasattr(state, "state"):
        state = state.state
    return state


def signature_parameters(*constructors: Callable) -> dict[str, Any]:
    """The named keyword parameters of callables (``self``, ``*args`` and ``**kwargs`` left out).

    Args:
        *constructors: functions or classes (a class's ``__init__``).

    Returns:
        Parameter name -> default (``inspect.Parameter.empty`` where required), in order.
    """
    found = {}
    for constructor in constructors:
        for p in inspect.signature(constructor).parameters.values():
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self":
                found.setdefault(p.name, p.default)
    return found


def check_map_name(value: Any, known: Iterable[str], what: str, argument: str, env: str,
                   accepted: tuple[type, ...] = (), form: str = "a map name") -> Any:
    """Checks an argument that names a map (a scenario, a layout) or is one already.

    Args:
        value: the argument given.
        known: the map names.
        what: what a name names, for the message (``"SMAX scenario"``).
        argument: the argument's name (``"scenario"``).
        env: the environment's name.
        accepted: the classes of a map given as an object (JaxMARL's ``Scenario``).
        form: what the argument may be, for the message (``"a map name or a jaxmarl Scenario"``).

    Returns:
        ``value``: an instance of ``accepted`` or a known name.

    Raises:
        ValueError: if ``value`` is neither; the message names the argument, the form
            expected and the known names.
    """
    known = list(known)
    if accepted and isinstance(value, accepted):
        return value
    if not isinstance(value, str):
        raise ValueError(f"{argument} for env {env!r} must be {form}, got {value!r}; known: {', '.join(known)}")
    if value not in known:
        raise ValueError(f"unknown {what} {value!r}; known: {', '.join(known)}")
    return value


def figure_pixels(fig: Any) -> np.ndarray:
    """A matplotlib figure drawn and closed.

    Args:
        fig: the figure.

    Returns:
        uint8 [H, W, 3]: its pixels.
    """
    import matplotlib.pyplot as plt

    try:
        fig.canvas.draw()
        return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    finally:
        plt.close(fig)


class Family:
    """A JaxMARL family: how its environments are built, read and drawn.

    The defaults describe a JaxMARL environment of no known family: no checks beyond
    JaxMARL's own, JaxMARL's ``max_steps``, no terminal state of its own, no win, the
    world state ``obs["world_state"]`` where there is one, ``get_avail_actions`` where
    the environment defines it, an unknown coupling and no renderer.

    Attributes:
        title: the family's name in messages (``"SMAX"``).
        jaxmarl_classes: the family's JaxMARL classes as ``"module:Class"`` import paths
            (JaxMARL is imported on first use); an instance of one is read by this family.
        names: the JaxMARL names the family builds with their default arguments
            (``jaxpo envs`` lists them).
        needs_arguments: names it builds only with arguments that have no default
            (SMAX's ``LearnedPolicyEnemySMAX``: a policy); not listed.
        shaped_reward: whether the environment reports ``info["shaped_reward"]``
            (Overcooked), which the adapter's ``shaped_reward`` scales.
        complete_coupling: whether ``coupling`` is the complete graph (every agent's
            action can reach every reward: one team reward, say).
        more_parameters: whether JaxMARL passes keyword arguments beyond ``parameters``
            on (MABrax: to brax), which then checks them itself.
    """

    title: str = "JaxMARL"
    jaxmarl_classes: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    needs_arguments: tuple[str, ...] = ()
    shaped_reward: bool = False
    more_parameters: bool = False
    complete_coupling: bool = False

    def classes(self) -> tuple[type, ...]:
        """The family's JaxMARL classes, imported from ``jaxmarl_classes`` on first use.

        Returns:
            The classes; ``()`` in the base (no instance is recognised).
        """
        load_jaxmarl()
        paths = (path.split(":") for path in self.jaxmarl_classes)
        return tuple(getattr(importlib.import_module(module), name) for module, name in paths)

    def handles(self, env: Any) -> bool:
        """Whether a JaxMARL instance belongs to this family.

        Args:
            env: a JaxMARL ``MultiAgentEnv``.

        Returns:
            True when it is an instance of one of ``classes()``.
        """
        classes = self.classes()
        return bool(classes) and isinstance(env, classes)

    def parameters(self, name: str) -> dict[str, Any] | None:
        """The keyword parameters ``jaxmarl.make(name, **kwargs)`` takes.

        Args:
            name: one of the family's names.

        Returns:
            Parameter name -> default: the constructor's parameters of ``classes()``
            (the class ``jaxmarl.make`` builds), or None where the family states no
            class (JaxMARL checks them).
        """
        classes = self.classes()
        return signature_parameters(*classes) if classes else None

    def arguments(self, name: str, kwargs: dict) -> dict:
        """Checks keyword arguments before building and returns what ``build`` passes on.

        Args:
            name: one of the family's names.
            kwargs: the keyword arguments given.

        Returns:
            The arguments for ``build`` (a subclass turns names of maps into JaxMARL's objects).

        Raises:
            ValueError: a parameter ``parameters(name)`` does not list (unless
                ``more_parameters``; the message lists those it does), or a value of another kind than its parameter's scalar
                default (the message names the parameter and the kind expected).
        """
        known = self.parameters(name)
        if known is None:
            return kwargs
        unknown = sorted(set(kwargs) - set(known))
        if unknown and not self.more_parameters:
            raise ValueError(f"invalid keyword arguments for JaxMARL env {name!r}: unknown {unknown}; "
                             f"known: {sorted(known)}")
        for key in known.keys() & kwargs.keys():
            check_like_default(kwargs[key], known[key], f"{key} for env {name!r}")
        return kwargs

    def build(self, name: str, kwargs: dict) -> Any:
        """Builds the JaxMARL environment.

        Args:
            name: one of the family's names.
            kwargs: what ``arguments`` returned.

        Returns:
            ``jaxmarl.make(name, **kwargs)``.
        """
        return load_jaxmarl().make(name, **kwargs)

    def heuristic_agents(self, env: Any) -> set[str]:
        """JaxMARL agents that JaxMARL moves itself: not the adapter's, given zero actions.

        Args:
            env: the JaxMARL environment.

        Returns:
            Their names; none in the base.
        """
        return set()

    def max_steps(self, env: Any, name: str) -> int:
        """The most steps an episode can last.

        Args:
            env: the JaxMARL environment.
            name: its name, for the message.

        Returns:
            JaxMARL's ``max_steps`` in the base.

        Raises:
            ValueError: if the environment has no integer ``max_steps``.
        """
        if not isinstance(getattr(env, "max_steps", None), (int, np.integer)):
            raise ValueError(f"JaxMARL env {name!r} has no integer max_steps; cannot tell truncation")
        return int(env.max_steps)

    def time_up(self, env: Any, next_state: Any, max_steps: int) -> jax.Array:
        """Whether the episode reached its time limit.

        Args:
            env: the JaxMARL environment.
            next_state: the state a step reached.
            max_steps: the adapter's ``max_steps``.

        Returns:
            bool []: the state's step counter has reached ``max_steps``.
        """
        return inner_state(next_state).step >= max_steps

    def terminal(self, env: Any, state: Any, actions: dict, next_state: Any) -> jax.Array:
        """Whether a step ended the episode for a reason other than the time limit.

        Args:
            env: the JaxMARL environment.
            state: the state the step started from.
            actions: the step's actions, JaxMARL's ``{agent: action}``.
            next_state: the state it reached.

        Returns:
            bool []: False in the base (no terminal state known).
        """
        return jnp.asarray(False)

    def won(self, env: Any, state: Any) -> jax.Array | None:
        """Whether the episode ended in a win.

        Args:
            env: the JaxMARL environment.
            state: the state reached.

        Returns:
            bool [], or None for a family without a win (the base).
        """
        return None

    def active(self, env: Any, state: Any) -> jax.Array | None:
        """Which agents act in ``state``: an inactive agent's action changes nothing.

        Args:
            env: the JaxMARL environment.
            state: a state (reset or reached).

        Returns:
            bool [N] in the adapter's agent order, or None for a family whose agents all
            act at every step (the base).
        """
        return None

    def global_state_dim(self, env: Any, obs_shapes: dict) -> int | None:
        """S, the width of an agent's view of the world state.

        Args:
            env: the JaxMARL environment.
            obs_shapes: ``reset``'s observations as shapes, ``{key: ShapeDtypeStruct}``.

        Returns:
            The size of ``obs["world_state"]``, or None when there is none.
        """
        world = obs_shapes.get("world_state")
        return None if world is None else int(np.prod(world.shape))

    def global_state(self, env: Any, obs: dict, state: Any, num_agents: int, dim: int) -> jax.Array:
        """Every agent's view of the world state.

        Args:
            env: the JaxMARL environment.
            obs: the observations, JaxMARL's dict.
            state: the state they were made in.
            num_agents: N.
            dim: S, from ``global_state_dim``.

        Returns:
            float32 [N, S]: ``obs["world_state"]`` for every agent.
        """
        world = jnp.reshape(obs["world_state"], (-1,)).astype(jnp.float32)
        return jnp.broadcast_to(world, (num_agents, dim))

    def available_actions(self, env: Any) -> Callable[[Any], dict] | None:
        """The function from a state to each agent's available actions.

        Args:
            env: the JaxMARL environment (discrete actions).

        Returns:
            ``state -> {agent: bool [A_i]}``: ``env.get_avail_actions`` where the class
            defines it; None where every action is available (JaxMARL's base class raises
            NotImplementedError there).
        """
        load_jaxmarl()
        from jaxmarl.environments.multi_agent_env import MultiAgentEnv

        return None if type(env).get_avail_actions is MultiAgentEnv.get_avail_actions else env.get_avail_actions

    def coupling(self, env: Any, num_agents: int) -> np.ndarray | None:
        """[N, N] 0/1: ``coupling[i, j] = 1`` when agent j's action can change agent i's reward.

        Args:
            env: the JaxMARL environment.
            num_agents: N.

        Returns:
            float32 [N, N] of ones when ``complete_coupling``, else None (unknown).
        """
        return np.ones((num_agents, num_agents), dtype=np.float32) if self.complete_coupling else None

    def interaction(self, env: Any, state: Any) -> jax.Array | None:
        """The coupling graph of one state, where it follows the state (``Env.interaction``).

        Args:
            env: the JaxMARL environment.
            state: one (unbatched) state.

        Returns:
            bool [N, N], a subgraph of ``coupling`` with its diagonal: entry ``[i, j]`` is
            True when agent j's action in ``state`` can change agent i's reward; None for
            a family whose coupling does not follow the state (the base).
        """
        return None

    @property
    def renders(self) -> bool:
        """Whether the family has a renderer (overrides ``render``)."""
        return type(self).render is not Family.render

    def render(self, env: Any, state: Any) -> np.ndarray:
        """One state drawn by JaxMARL's visualiser.

        Args:
            env: the JaxMARL environment.
            state: one unbatched state, on the host.

        Returns:
            uint8 [H, W, 3].

        Raises:
            NotImplementedError: in the base (no renderer).
        """
        raise NotImplementedError

