"""Switch Riddle: prisoners visit a room one at a time and one must tell when all have.

* Names: ``switch_riddle``; arguments: ``SwitchRiddle``'s constructor's.
* Episode ends: only the agent in the room acts, and its tell decides the game (reward
  ±1), so a tell, even on the last step, is a termination; otherwise the episode ends
  at JaxMARL's ``max_steps``, a truncation.
* Observations: vectors, no world state; every action available.
* Coupling: the complete graph (one team reward). No renderer.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .family import Family
from .registry import register


class SwitchRiddleFamily(Family):
    """Switch Riddle (the module docstring states the rules)."""

    title = "Switch Riddle"
    names = ("switch_riddle",)
    complete_coupling = True  # one team reward
    jaxmarl_classes = ("jaxmarl.environments.switch_riddle.switch_riddle:SwitchRiddle",)

    def terminal(self, env: Any, state: Any, actions: dict, next_state: Any) -> jax.Array:
        """The agent in the room told."""
        acted = jnp.stack([actions[a] for a in env.agents])[state.agent_in_room]
        return acted == env.game_actions["TELL"]


register(SwitchRiddleFamily())
