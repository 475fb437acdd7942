"""Overcooked v2: Overcooked with recipes, partial observability and more layouts.

Read as Overcooked (``jaxpo.envs.jaxmarl.overcooked``: shaped reward, image
observations, every end a truncation, the complete graph) except:

* Names: ``overcooked_v2``; ``layout=`` a v2 layout name such as ``"cramped_room"`` or
  a JaxMARL ``Layout``.
* Renderer: JaxMARL's ``OvercookedV2Visualizer``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .family import check_map_name
from .overcooked import OvercookedFamily
from .registry import register


class OvercookedV2Family(OvercookedFamily):
    """Overcooked v2 (the module docstring states what differs from Overcooked)."""

    title = "Overcooked v2"
    names = ("overcooked_v2",)
    jaxmarl_classes = ("jaxmarl.environments.overcooked_v2:OvercookedV2",)

    def layout(self, name: str, layout: Any) -> Any:
        """A v2 layout name (JaxMARL looks it up itself) or a JaxMARL ``Layout``, checked.

        Args:
            name: the environment's name, for the message.
            layout: a v2 layout name such as ``"cramped_room"``, or a ``Layout``.

        Returns:
            ``layout``.

        Raises:
            ValueError: if ``layout`` is neither a known v2 layout name nor a ``Layout``
                (the message lists the layouts).
        """
        from jaxmarl.environments.overcooked_v2.layouts import Layout, overcooked_v2_layouts

        return check_map_name(layout, overcooked_v2_layouts, "Overcooked v2 layout", "layout", name, (Layout,),
                              "a layout name or a jaxmarl Layout")

    def render(self, env: Any, state: Any) -> np.ndarray:
        """JaxMARL's ``OvercookedV2Visualizer``."""
        from jaxmarl.viz.overcooked_v2_visualizer import OvercookedV2Visualizer

        return np.asarray(OvercookedV2Visualizer()._render_state(state, env.agent_view_size))[..., :3]


register(OvercookedV2Family())
