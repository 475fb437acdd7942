"""JaxNav: robots drive to their goals through a map of obstacles, sensing by lidar.

* Names: ``jaxnav``; arguments: ``JaxNav``'s constructor's, ``map_id=`` one of JaxNav's
  registered maps that JaxMARL can step (not ``Grid-Rand``, whose disc robots have no
  map collision; ``Grid-Rand-Barn`` with one robot).
* Actions: continuous ``Box(2)`` (or ``act_type="Discrete"``: 15), every one available
  (JaxNav's ``get_avail_actions`` is a placeholder, two ones per agent whatever its
  action space). Rewards are per agent.
* Episode ends: when every robot has reached its goal or crashed, a termination; an
  episode that ends at its time limit with a robot still driving is a truncation. With
  ``evaporating=True`` a robot that reaches its goal or crashes is done at once and earns
  0 until the end; by default (``evaporating=False``) JaxNav sets every robot's ``done``
  only when the episode ends: a crashed robot stays put and still pays the lidar
  proximity term (−0.1 a step while it touches something), and one at its goal drives on.
* Active agents: the robots whose action still does something: not done, and not
  crashed and kept in place (by default; with ``evaporating=True`` a crash is ``done``).
  A crashed robot still counts where JaxNav's turning penalty (``weight_w``, 0 by
  default) is on, which can make its action change its own reward.
* Observations: a world state per agent (JaxNav's ``get_world_state``), [N, S].
* Coupling: the complete graph: each agent's reward is blended with the team mean
  (``rew_lambda``), and any two robots can collide. Per state (``interaction``), at
  ``rew_lambda=1`` only robots close enough to touch or to sense each other within the
  lidar's proximity threshold after one step; below 1, every active robot reaches every
  robot through the team mean.
* Renderer: JaxNav's ``init_render`` (map, robots, goals, lidar).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .family import Family, check_map_name, figure_pixels
from .registry import register


class JaxNavFamily(Family):
    """JaxNav (the module docstring states the rules)."""

    title = "JaxNav"
    names = ("jaxnav",)
    complete_coupling = True  # rewards blended with the team mean; any two robots can collide
    jaxmarl_classes = ("jaxmarl.environments.jaxnav.jaxnav_env:JaxNav",)

    def arguments(self, name: str, kwargs: dict) -> dict:
        """Also checks ``map_id`` against JaxNav's registered maps.

        Raises:
            ValueError: besides the base's, a ``map_id`` that is not a registered map's
                name (the message lists them).
        """
        from jaxmarl.environments.jaxnav.maps.map_registration import registered_maps

        if "map_id" in kwargs:
            check_map_name(kwargs["map_id"], registered_maps, "JaxNav map", "map_id", name)
        return super().arguments(name, kwargs)

    def build(self, name: str, kwargs: dict) -> Any:
        """JaxMARL's ``JaxNav``, refused where its map cannot step these robots.

        Raises:
            ValueError: ``map_id`` a map whose robot-map collision JaxMARL leaves
                unimplemented (its step would raise NotImplementedError: ``Grid-Rand``'s
                disc robots), or a single-robot map (``Grid-Rand-Barn``) with
                ``num_agents`` other than 1.
        """
        from jaxmarl.environments.jaxnav.maps.grid_map import GridMapBarn
        from jaxmarl.environments.jaxnav.maps.map import Map

        env = super().build(name, kwargs)
        map_id, kind = kwargs.get("map_id", "the default map"), type(env.map_obj)
        if kind.check_agent_map_collision is Map.check_agent_map_collision:
            raise ValueError(f"map_id {map_id!r}: JaxMARL's {kind.__name__} does not implement a robot's collision "
                             "with the map, so its step cannot run; the polygon-robot maps can ('Grid-Rand-Poly')")
        if isinstance(env.map_obj, GridMapBarn) and env.num_agents != 1:
            raise ValueError(f"map_id {map_id!r} places one robot: num_agents must be 1, got {env.num_agents}")
        return env

    def terminal(self, env: Any, state: Any, actions: dict, next_state: Any) -> jax.Array:
        """Every robot is at its goal or has crashed (now or, evaporating, before)."""
        return jnp.all(state.done | next_state.goal_reached | next_state.move_term)

    def active(self, env: Any, state: Any) -> jax.Array:
        """bool [N]: the robots whose action still changes a reward (``moving``, or not
        done where a crashed robot's turning is penalised)."""
        return ~state.done if env.weight_w else moving(env, state)

    def interaction(self, env: Any, state: Any) -> jax.Array:
        """bool [N, N]: robot j's action in ``state`` can change robot i's reward.

        A robot's own reward, ``r_i`` (progress to its goal, its collisions, lidar
        proximity, the time penalty), counts until its episode ends (``done``); it
        reaches another robot only by where the robot ends the step. At ``rew_lambda=1``:
        i and j both counted, j still moving (not ``done``, nor crashed and kept in
        place), and their centres within ``contact_distance(env)`` plus what both can
        drive in a step (``max_v · dt`` each), so no action of theirs can bring their
        bodies into contact or j into i's proximity reading. Below 1, ``r_j`` enters
        every robot's reward through the team mean: every active j (``active``: its
        action still changes ``r_j``) reaches every i.
        A superset of the measured influence, never missing an edge
        (``tests/test_state_supports.py`` steps robots' alternatives to check it).
        """
        n = env.num_agents
        eye = jnp.eye(n, dtype=bool)
        if float(np.asarray(env.rew_lambda)) != 1.0:
            return eye | jnp.broadcast_to(self.active(env, state)[None, :], (n, n))
        counted = ~state.done
        gap = jnp.linalg.norm(state.pos[:, None, :] - state.pos[None, :, :], axis=-1)
        near = gap <= contact_distance(env) + 2 * env.max_v * env.dt
        return eye | (counted[:, None] & moving(env, state)[None, :] & near)

    def global_state_dim(self, env: Any, obs_shapes: dict) -> int:
        """The width of one agent's row of ``get_world_state``."""
        state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))[1]
        return int(np.prod(jax.eval_shape(env.get_world_state, state).shape[1:]))

    def global_state(self, env: Any, obs: dict, state: Any, num_agents: int, dim: int) -> jax.Array:
        """``get_world_state``, one row per agent."""
        return jnp.reshape(env.get_world_state(state), (num_agents, -1)).astype(jnp.float32)

    def available_actions(self, env: Any) -> None:
        """None: every action is available."""
        return None

    def render(self, env: Any, state: Any) -> np.ndarray:
        """JaxNav's ``init_render``; the lidar beams need the observation."""
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 5))
        env.init_render(ax, state, obs=env.get_obs(state))
        return figure_pixels(fig)


def moving(env: Any, state: Any) -> jax.Array:
    """bool [N]: the robots whose action moves them: not done, and (unless evaporating,
    where a crash is done) not crashed, which JaxNav keeps in place.

    Args:
        env: JaxMARL's ``JaxNav``.
        state: one (unbatched) JaxNav state.

    Returns:
        bool [N].
    """
    return ~state.done if env.evaporating else ~(state.done | state.move_term)


def contact_distance(env: Any) -> float:
    """The farthest apart two robots' centres can be when they end a step touching, or
    one inside the other's lidar proximity reading (``lidar_thresh + rad``, the range
    being a whole number of lidar samples, each ``lidar_range_resolution`` or a little
    more apart).

    Args:
        env: JaxMARL's ``JaxNav``.

    Returns:
        Metres: ``max(2 e, lidar_thresh + rad + sample + e)`` and a millimetre, where ``e``
        is the body's farthest point from its centre (``rad`` for discs; the polygon
        maps' ``agent_coords``) and ``sample`` the lidar's range step.
    """
    coords = getattr(env.map_obj, "agent_coords", None)
    body = env.rad if coords is None else max(env.rad, float(np.linalg.norm(np.asarray(coords), axis=1).max()))
    ranges = np.asarray(env.lidar_ranges)
    sample = float(ranges[1] - ranges[0]) if ranges.size > 1 else float(env.lidar_range_resolution)
    return max(2 * body, env.lidar_thresh + env.rad + sample + body) + 1e-3


register(JaxNavFamily())
