"""SMAX, JaxMARL's StarCraft micromanagement: one team of allies against scripted enemies.

* Names: ``HeuristicEnemySMAX`` (enemies played by JaxMARL's heuristic) and
  ``LearnedPolicyEnemySMAX`` (enemies played by a given policy: ``policy=``, a flax
  module whose ``apply(params, enemy_obs)`` returns ``(distribution, value)``, and
  ``params=``; from Python only, a policy is code).
* Arguments: the wrapper's and ``SMAX``'s constructor's. ``scenario=`` is a map name
  such as ``"3m"`` or ``"2s3z"`` (SMACv2's random-unit maps included) or a JaxMARL
  ``Scenario``.
* Episode ends: a battle is decided when all allies or all enemies are dead, so a
  battle decided on the last step is a termination; a time-limited battle lasts
  JaxMARL's ``max_steps + 1`` steps (101 by default: the counter is tested before it
  is incremented).
* Win: every enemy dead and an ally alive (JaxMARL's win-bonus rule; both teams wiped
  out on one step is a draw).
* Observations: ``obs["world_state"]``, broadcast to every agent; the action masks are
  JaxMARL's ``get_avail_actions``.
* Active agents: the allies alive (a dead unit's action changes nothing; it still
  receives the team reward).
* Coupling: the complete graph (one team reward).
* Renderer: SMAX's ``init_render`` (allies blue, enemies green; no shots, the state
  holds no actions).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .family import Family, check_map_name, inner_state, signature_parameters
from .registry import register

LEARNED_ENEMY_SMAX = "LearnedPolicyEnemySMAX"
"""SMAX against enemies played by a given policy: built with ``policy=`` and ``params=``."""


def _battle(env: Any, state: Any) -> tuple[jax.Array, jax.Array]:
    """``(allies_dead, enemies_dead)``, bool [] each."""
    inner = inner_state(state)
    allies = env.num_allies
    return ~jnp.any(inner.unit_alive[:allies]), ~jnp.any(inner.unit_alive[allies:])


class SMAXFamily(Family):
    """SMAX against scripted enemies (the module docstring states the rules)."""

    title = "SMAX"
    names = ("HeuristicEnemySMAX",)
    complete_coupling = True  # one team reward
    needs_arguments = (LEARNED_ENEMY_SMAX,)
    jaxmarl_classes = ("jaxmarl.environments.smax.smax_env:SMAX",
                       "jaxmarl.environments.smax.heuristic_enemy_smax_env:EnemySMAX")

    def parameters(self, name: str) -> dict[str, Any]:
        """The enemy wrapper's parameters and ``SMAX``'s."""
        smax = self.classes()[0]
        import jaxmarl.registration

        return signature_parameters(getattr(jaxmarl.registration, name), smax)

    def arguments(self, name: str, kwargs: dict) -> dict:
        """Also requires a learned enemy's policy and turns a map name into its ``Scenario``.

        Raises:
            ValueError: besides the base's: ``LearnedPolicyEnemySMAX`` without ``policy=``
                and ``params=``; a ``scenario`` that is neither a known map name nor a
                ``Scenario`` (the message lists the maps).
        """
        if name == LEARNED_ENEMY_SMAX and not {"policy", "params"} <= set(kwargs):
            raise ValueError(f"{name} plays the enemies with a learned policy: pass policy= (a flax module whose "
                             "apply(params, enemy_obs [enemies, O]) returns (distribution, value)) and params= "
                             "(from Python: a policy is code), or use HeuristicEnemySMAX")
        kwargs = super().arguments(name, kwargs)
        if "scenario" not in kwargs:
            return kwargs
        from jaxmarl.environments.smax.smax_env import MAP_NAME_TO_SCENARIO, Scenario

        scenario = check_map_name(kwargs["scenario"], sorted(MAP_NAME_TO_SCENARIO), "SMAX scenario", "scenario", name,
                                  (Scenario,), "a map name or a jaxmarl Scenario")
        return {**kwargs, "scenario": MAP_NAME_TO_SCENARIO[scenario] if isinstance(scenario, str) else scenario}

    def max_steps(self, env: Any, name: str) -> int:
        """JaxMARL's ``max_steps + 1`` (the counter is tested before it is incremented)."""
        return super().max_steps(env, name) + 1

    def terminal(self, env: Any, state: Any, actions: dict, next_state: Any) -> jax.Array:
        """The battle is decided: all allies or all enemies dead."""
        allies_dead, enemies_dead = _battle(env, next_state)
        return allies_dead | enemies_dead

    def won(self, env: Any, state: Any) -> jax.Array:
        """Every enemy dead and an ally alive."""
        allies_dead, enemies_dead = _battle(env, state)
        return enemies_dead & ~allies_dead

    def active(self, env: Any, state: Any) -> jax.Array:
        """bool [allies]: the allies alive."""
        return inner_state(state).unit_alive[:env.num_allies]

    def render(self, env: Any, state: Any) -> np.ndarray:
        """SMAX's ``init_render``, every unit's action 0 (a move: no bullets drawn)."""
        import matplotlib.pyplot as plt

        smax = getattr(env, "_env", env)
        idle = {agent: 0 for agent in smax.agents}
        fig, ax = plt.subplots(figsize=(5, 5))
        image = smax.init_render(ax, (None, inner_state(state), idle), 0, int(inner_state(state).step))
        plt.close(fig)
        return np.asarray(image.get_array())[..., :3].copy()  # the figure as SMAX drew it


register(SMAXFamily())
