"""Hanabi: a cooperative card game of hidden hands, played in turns.

* Names: ``hanabi``; arguments: ``HanabiEnv``'s constructor's.
* Turns: every agent acts at every step, but only the player whose turn it is matters:
  the others' action mask (JaxMARL's ``get_legal_moves``) allows only JaxMARL's no-op
  (its last move), so their log-probability is 0 and they add nothing to the objective.
* Episode ends: there is no time limit, so every end is the game's own, a termination
  (the fireworks are complete, the lives are spent or the last round after the deck
  is played). ``max_steps`` is the longest game the rules allow,
  2(C − N·H + N) + T + K turns for C cards, N players of H cards, T information tokens
  and K colours (every play or discard takes a card, every hint a token; discards and
  completed colours give tokens back).
* Coupling: the complete graph (one team reward). No renderer.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from .family import Family
from .registry import register


class HanabiFamily(Family):
    """Hanabi (the module docstring states the rules)."""

    title = "Hanabi"
    names = ("hanabi",)
    complete_coupling = True  # one team reward
    jaxmarl_classes = ("jaxmarl.environments.hanabi.hanabi:HanabiEnv",)

    def max_steps(self, env: Any, name: str) -> int:
        """The longest game the rules allow."""
        n, hand = env.num_agents, env.hand_size
        plays_and_discards = env.deck_size - n * hand + n
        return 2 * plays_and_discards + env.max_info_tokens + env.num_colors

    def terminal(self, env: Any, state: Any, actions: dict, next_state: Any) -> jax.Array:
        """Always: every end is the game's own."""
        return jnp.asarray(True)

    def available_actions(self, env: Any) -> Callable[[Any], dict]:
        """JaxMARL's ``get_legal_moves``."""
        return env.get_legal_moves


register(HanabiFamily())
