"""Overcooked: two cooks share a kitchen and deliver onion soups.

* Names: ``overcooked``; arguments: ``Overcooked``'s constructor's, ``layout=`` a layout
  name such as ``"cramped_room"`` or a layout dict.
* Reward: the team's delivery reward plus, times the adapter's ``shaped_reward`` (default
  0: the sparse reward only), JaxMARL's ``info["shaped_reward"]`` (placing an onion in a
  pot, picking up a dish, …).
* Episode ends: only at ``max_steps``, so every end is a truncation.
* Observations: images (H × W × C), flattened like every other observation; the
  adapter's ``obs_shape`` keeps the image's shape. No world state; every action available.
* Coupling: the complete graph (one team reward).
* Renderer: JaxMARL's ``OvercookedVisualizer`` grid renderer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .family import Family, check_map_name
from .registry import register


class OvercookedFamily(Family):
    """Overcooked (the module docstring states the rules)."""

    title = "Overcooked"
    names = ("overcooked",)
    complete_coupling = True  # one team reward
    jaxmarl_classes = ("jaxmarl.environments.overcooked:Overcooked",)
    shaped_reward = True

    def arguments(self, name: str, kwargs: dict) -> dict:
        """Also turns a layout name into the layout JaxMARL takes (``layout``).

        Raises:
            ValueError: besides the base's, a ``layout`` that ``layout`` refuses.
        """
        if "layout" in kwargs:
            kwargs = {**kwargs, "layout": self.layout(name, kwargs["layout"])}
        return super().arguments(name, kwargs)

    def layout(self, name: str, layout: Any) -> Any:
        """The layout JaxMARL's constructor takes for a ``layout`` argument.

        Args:
            name: the environment's name, for the message.
            layout: a layout name such as ``"cramped_room"``, or a layout dict.

        Returns:
            The layout dict (a ``FrozenDict``).

        Raises:
            ValueError: if ``layout`` is neither a known layout name nor a layout dict
                (the message lists the layouts).
        """
        from collections.abc import Mapping

        from flax.core import FrozenDict
        from jaxmarl.environments.overcooked import overcooked_layouts

        layout = check_map_name(layout, overcooked_layouts, "Overcooked layout", "layout", name, (Mapping,),
                                "a layout name or a layout dict")
        return FrozenDict(overcooked_layouts[layout]) if isinstance(layout, str) else layout

    def render(self, env: Any, state: Any) -> np.ndarray:
        """JaxMARL's ``OvercookedVisualizer`` grid renderer, without the padding of the agents' views."""
        from jaxmarl.viz.overcooked_visualizer import TILE_PIXELS, OvercookedVisualizer

        pad = env.agent_view_size - 2  # the maze map is padded for the agents' views
        grid = np.asarray(state.maze_map[pad:-pad, pad:-pad, :])
        return np.asarray(OvercookedVisualizer._render_grid(
            grid, TILE_PIXELS, highlight_mask=None, agent_dir_idx=state.agent_dir_idx,
            agent_inv=state.agent_inv))[..., :3]


register(OvercookedFamily())
