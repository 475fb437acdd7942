"""MPE, the multi-particle environments: the cooperative scenarios and FACMAC's predators.

* Names: ``MPE_simple_v3``, ``MPE_simple_spread_v3``, ``MPE_simple_reference_v3``,
  ``MPE_simple_speaker_listener_v4`` (``action_type`` ``"Discrete"`` or
  ``"Continuous"``) and FACMAC's ``MPE_simple_facmac*`` (continuous only).
* Arguments: the scenario's constructor's and ``SimpleMPE``'s, and the entity
  keywords ``SimpleMPE`` reads from its ``**kwargs``. MPE constructors swallow any
  other keyword silently, so a typo such as ``local_ration=0.3`` would be ignored:
  it is refused instead.
* Agents: in FACMAC's scenarios the prey is in JaxMARL's agent list but moved by
  JaxMARL's own heuristic (its action is thrown away): the adapter's agents are the
  predators, and the prey's action is zeros.
* Episode ends: every MPE episode ends at the time limit (no terminal state), and
  lasts JaxMARL's ``max_steps + 1`` steps: ``step_env`` tests ``step >= max_steps``
  on the counter before incrementing it (26 steps by default, not PettingZoo's 25).
  JaxMARL's dynamics are kept; the adapter reports the true length.
* Observations: vectors, no world state; every action available.
* Coupling: the complete graph. The rewards are functions of every agent's position:
  simple_spread's global term (sum over landmarks of the nearest agent's distance)
  couples all agents whenever ``local_ratio < 1``, and its local collision term
  couples any pair that can collide, so even at ``local_ratio == 1`` every pair is
  coupled; simple_reference's reward of agent i is the other agent's distance to its
  goal (blended with the team mean); simple_speaker_listener's reward and FACMAC's
  predators' are shared.
* Renderer: JaxMARL's ``MPEVisualizer``.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np

from .family import Family, figure_pixels, inner_state, signature_parameters
from .loading import load_jaxmarl
from .registry import register

# The callable jaxmarl.make calls for each name, by its name in jaxmarl.registration.
_CONSTRUCTORS = {
    "MPE_simple_v3": "SimpleMPE",
    "MPE_simple_spread_v3": "SimpleSpreadMPE",
    "MPE_simple_reference_v3": "SimpleReferenceMPE",
    "MPE_simple_speaker_listener_v4": "SimpleSpeakerListenerMPE",
    "MPE_simple_facmac_v1": "SimpleFacmacMPE",
    "MPE_simple_facmac_3a_v1": "SimpleFacmacMPE3a",
    "MPE_simple_facmac_6a_v1": "SimpleFacmacMPE6a",
    "MPE_simple_facmac_9a_v1": "SimpleFacmacMPE9a",
}

# Keyword arguments SimpleMPE.__init__ reads from its **kwargs (jaxmarl 0.2.0), one value per entity.
_ENTITY_KWARGS = (
    "rad", "moveable", "silent", "collide", "mass", "accel", "max_speed",
    "u_noise", "c_noise", "damping", "contact_force", "contact_margin",
)  # fmt: skip


class MPEFamily(Family):
    """The cooperative MPE scenarios (the module docstring states the rules)."""

    title = "MPE"
    names = tuple(_CONSTRUCTORS)
    complete_coupling = True  # rewards of every agent's position
    jaxmarl_classes = ("jaxmarl.environments.mpe.simple:SimpleMPE",)

    def parameters(self, name: str) -> dict[str, Any]:
        """The scenario's parameters, ``SimpleMPE``'s and its entity keywords (FACMAC's fixed
        3a/6a/9a scenarios take none)."""
        (simple_mpe,) = self.classes()
        import jaxmarl.registration

        made = getattr(jaxmarl.registration, _CONSTRUCTORS[name])
        if not isinstance(made, type):
            return signature_parameters(made)
        chain = [klass for klass in made.__mro__ if issubclass(klass, simple_mpe)]
        return {**signature_parameters(*chain), **dict.fromkeys(_ENTITY_KWARGS)}

    def heuristic_agents(self, env: Any) -> set[str]:
        """FACMAC's prey (JaxMARL's good agents), moved by JaxMARL's heuristic."""
        load_jaxmarl()
        from jaxmarl.environments.mpe.simple_facmac import SimpleFacmacMPE

        return set(env.good_agents) if isinstance(env, SimpleFacmacMPE) else set()

    def max_steps(self, env: Any, name: str) -> int:
        """JaxMARL's ``max_steps + 1`` (the counter is tested before it is incremented)."""
        return super().max_steps(env, name) + 1

    def render(self, env: Any, state: Any) -> np.ndarray:
        """JaxMARL's ``MPEVisualizer``."""
        from jaxmarl.environments.mpe.mpe_visualizer import MPEVisualizer

        with contextlib.redirect_stdout(io.StringIO()):  # it prints whether agents communicate
            viz = MPEVisualizer(env, [inner_state(state)])
        return figure_pixels(viz.fig)


register(MPEFamily())
