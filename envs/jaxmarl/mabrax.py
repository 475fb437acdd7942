"""Multi-Agent Brax: agents drive disjoint sets of one body's joints.

* Names: ``MABRAX`` (``ant_4x2``, ``halfcheetah_6x1``, ``hopper_3x1``, ``humanoid_9|8``,
  ``walker2d_2x3``). It needs brax, the ``mabrax`` extra (``pip install
  "jaxpo[mabrax]"``); building one without it is an ImportError naming the extra.
* Arguments: ``MABraxEnv``'s constructor's (typed ones checked) and brax's own (brax
  checks those). ``auto_reset`` stays False: brax's auto-reset would replace the final
  observation, and jaxpo's ``AutoReset`` resets episodes.
* Episode ends: brax's ``info["truncation"]`` marks a time-limit end where the body is
  still healthy; an end where the body fell is a termination. brax's episode wrapper
  counts ``action_repeat`` physics steps per step, so an episode lasts
  ``ceil(episode_length / action_repeat)`` steps.
* Observations: unequal per agent (zero-padded), one team reward; no world state.
* Coupling: the body's joint graph (:func:`body_graph`: agents whose joints move adjacent
  links; for ant_4x2 complete, for halfcheetah_6x1 and hopper_3x1 a path along the
  limbs). The reward is one team reward, so every agent reaches every reward through the
  body's dynamics; the graph says whose actions act on each other directly, and ``khop``
  widens it hop by hop to the whole body.
* Renderer: none (brax renders through an OpenGL context, not headless).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from .family import Family, signature_parameters
from .loading import load_jaxmarl, quiet_import
from .registry import register

MABRAX: tuple[str, ...] = ("ant_4x2", "halfcheetah_6x1", "hopper_3x1", "humanoid_9|8", "walker2d_2x3")
"""The Multi-Agent Brax names: continuous control of one body's joints."""


@functools.cache
def brax_env_class() -> type | None:
    """JaxMARL's ``MABraxEnv``, or None when brax (the ``mabrax`` extra) is not installed.

    Returns:
        The class, or None.
    """
    load_jaxmarl()
    try:
        with quiet_import():
            from jaxmarl.environments.mabrax import MABraxEnv
    except ImportError:
        return None
    return MABraxEnv


def body_graph(system: Any, action_mapping: dict) -> np.ndarray:
    """MABrax agents' joint graph: agents i and j are adjacent when a link one of them drives
    is the parent, a child or a sibling (attached to the same body) of a link the other drives.

    Args:
        system: the brax ``System``.
        action_mapping: each agent -> its indices into the body's actuators.

    Returns:
        float32 [N, N] 0/1 with a unit diagonal.
    """
    parents = np.asarray(system.link_parents)
    dof_link = np.asarray(system.dof_link())[np.asarray(system.actuator.qd_id)]  # actuator -> the link it moves
    links = [set(dof_link[np.asarray(idx)].tolist()) for idx in action_mapping.values()]
    touch = lambda a, b: parents[a] == b or parents[b] == a or parents[a] == parents[b]
    return np.asarray([[float(any(touch(a, b) for a in mine for b in theirs)) for theirs in links] for mine in links],
                      dtype=np.float32)


class MABraxFamily(Family):
    """Multi-Agent Brax (the module docstring states the rules)."""

    title = "MABrax"
    names = MABRAX
    more_parameters = True

    def classes(self) -> tuple[type, ...]:
        """JaxMARL's ``MABraxEnv``; none without brax."""
        env_class = brax_env_class()
        return () if env_class is None else (env_class,)

    def parameters(self, name: str) -> dict[str, Any]:
        """``MABraxEnv``'s constructor's parameters (brax's own pass through it: ``more_parameters``)."""
        return signature_parameters(brax_env_class())

    def arguments(self, name: str, kwargs: dict) -> dict:
        """Needs brax, checks the arguments and builds without auto-reset.

        Raises:
            ImportError: brax is not installed (the message names the extra).
            ValueError: ``auto_reset=True``, or the base's.
        """
        if brax_env_class() is None:
            raise ImportError(f"JaxMARL env {name!r} (Multi-Agent Brax) needs brax, an optional extra: "
                              'pip install "jaxpo[mabrax]"')
        if kwargs.get("auto_reset", False):
            raise ValueError(f"auto_reset=True for {name!r}: jaxpo resets episodes itself (AutoReset keeps "
                             "the final observation); leave auto_reset out")
        return {**super().arguments(name, kwargs), "auto_reset": False}

    def max_steps(self, env: Any, name: str) -> int:
        """``ceil(episode_length / action_repeat)``.

        Raises:
            ValueError: if the environment was built with ``auto_reset=True``.
        """
        if env.auto_reset:
            raise ValueError(f"JaxMARL env {name!r} was built with auto_reset=True, which replaces the final "
                             "observation; build it with auto_reset=False (jaxpo's AutoReset resets episodes)")
        return -(-int(env.episode_length) // int(env.action_repeat))

    def time_up(self, env: Any, next_state: Any, max_steps: int) -> jax.Array:
        """brax's episode wrapper's physics-step count reached ``episode_length``."""
        return next_state.info["steps"] >= env.episode_length

    def terminal(self, env: Any, state: Any, actions: dict, next_state: Any) -> jax.Array:
        """The body fell: brax did not mark the end as a truncation."""
        return next_state.info["truncation"] == 0

    def coupling(self, env: Any, num_agents: int) -> np.ndarray:
        """The body's joint graph."""
        return body_graph(env.sys, env.agent_action_mapping)


register(MABraxFamily())
