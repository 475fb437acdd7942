"""Networked public goods with a tunable coupling radius c.

N agents sit on a graph (ring, 4-neighbour grid, or any symmetric adjacency). Let
``N_c(i) = {j : d(i, j) <= c}`` be the agents within c hops of i (i included) and
``|N_c(i)|`` its size.

Dynamics (one step, all agents at once)::

    a_j   = action_j / (num_actions - 1)              contribution level in [0, 1]
    u_i   ~ U[1 - noise, 1 + noise]                   productivity shock (from the key)
    x_i' = decay * x_i + (1 - decay) * u_i * mean_{j in N_c(i)} a_j
    r_i  = benefit * min(x_i', cap) - cost * a_i      (cap = None: no cap)

Each agent owns a local stock ``x_i >= 0`` (a commons: pasture, water, trust). A
contribution is paid once, now, by the contributor, and its product flows into the
stocks of everyone within c hops, where it decays over time. ``x_i`` is fed only by
contributions from ``N_c(i)`` — never by other stocks — so agent j's actions
(now and in the past) reach r_i iff ``d(i, j) <= c``: ``coupling`` is exactly
``neighbourhood(adjacency, c)``. Without noise, all-contribute drives every stock
to 1; stocks stay in ``[0, max(init_stock, 1 + noise)]``.

Observation, float32 [N, 5] (width independent of N): own stock ``x_i``; mean stock
over ``N_c(i)``; own last contribution ``a_i``; mean last contribution over
``N_c(i)``; time fraction ``t / max_steps``. Global state, float32 [N, 7] (cheap,
O(N)): the agent's observation plus the mean stock and mean contribution of all
agents. Actions: ``num_actions`` contribution levels, all always available.
Episodes are truncated after ``max_steps`` steps and never terminate.

The dilemma. A full contribution by j at a step with h steps left (this one
included) adds, in expectation and undiscounted,

    own gain   g_own(j)  = benefit * (1 - decay^h) / |N_c(j)|
    team gain  g_team(j) = benefit * (1 - decay^h) * sum_{i in N_c(j)} 1 / |N_c(i)|

to j's own return and to the team's summed return, at a cost ``cost`` to j
(:meth:`PublicGoods.contribution_gain`). Stocks and rewards are linear in the
contributions (cap = None), so each contribution's value is separate from all
others: defecting is a dominant strategy for j iff ``g_own < cost`` (for any discount
γ ≤ 1, which only shrinks g_own), and the team
optimum contributes iff ``g_team > cost`` — which is what :meth:`reference_policy`
does (with cap = None it is the exact team optimum of expected undiscounted return).

Defaults: ring, c = 1, decay 0.8, benefit 1, cost 0.5, noise 0.1, 50 steps. Each
contribution feeds 3 agents; as h → ∞: own gain 1/3 (≤ 0.37 on every sample path,
shock included) < cost 0.5 < team gain 1. On a regular graph the team gain is
``benefit`` for every c while the own share is ``benefit / |N_c|`` (c = 2 on a ring:
0.2), so a larger c makes the dilemma sharper. The team optimum stops contributing
in the last 3 steps (1 - 0.8^3 = 0.488 < 0.5). Expected episode return per agent
(N = 8 ring, c = 1; the first three hold for any graph and c): all-contribute 22.0,
:meth:`reference_policy` 22.5, uniformly random 11.5, all-defect 1.0 (only the
initial stock, mean 0.25, decaying) — the independent best response loses ~95%.

c = 0 has no externality: each agent's stock is fed only by itself, own gain =
team gain = benefit, and with benefit > cost contributing is individually optimal —
there is no dilemma (an independent learner already solves it). The same holds for
any agent whose neighbourhood is too small (``benefit / |N_c(j)| >= cost``, e.g. a
leaf of a custom graph with c = 1).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .base import Env, TimeStep
from .graphs import grid, neighbourhood, ring, validate_adjacency
from .params import check_int, check_real

GRAPHS = ("ring", "grid")


@struct.dataclass
class PublicGoodsState:
    """Environment state.

    Attributes:
        stock: float32 [N] — each agent's local stock x_i.
        contribution: float32 [N] — each agent's last contribution a_i in [0, 1].
        t: int32 [] — steps taken in this episode.
    """

    stock: jax.Array
    contribution: jax.Array
    t: jax.Array


class PublicGoods(Env):
    """Networked public goods game with coupling radius ``radius`` (see module docstring).

    Args:
      num_agents: N ≥ 1.
      graph: "ring", "grid" (4-neighbour, rows × cols) or a symmetric 0/1 [N, N]
        adjacency (self loops ignored).
      radius: coupling radius c ≥ 0 (hops).
      rows, cols: grid shape, only for graph="grid"; rows * cols must equal N. If
        neither is given N must be a perfect square; if one is given it must divide N.
      max_steps: episode length ≥ 1.
      num_actions: contribution levels ≥ 2 (level k contributes k / (num_actions-1)).
      decay: stock persistence in [0, 1).
      benefit: reward per unit of stock, > 0.
      cost: reward cost of a full contribution, > 0.
      noise: productivity shock half-width in [0, 1).
      init_stock: initial stocks are U[0, init_stock], ≥ 0.
      cap: benefit saturates at stock ``cap`` (> 0), or None for linear benefit.
    """

    name = "public_goods"

    def __init__(
        self,
        num_agents: int = 8,
        graph: str | Any = "ring",
        radius: int = 1,
        rows: int | None = None,
        cols: int | None = None,
        max_steps: int = 50,
        num_actions: int = 2,
        decay: float = 0.8,
        benefit: float = 1.0,
        cost: float = 0.5,
        noise: float = 0.1,
        init_stock: float = 0.5,
        cap: float | None = None,
    ):
        n = self.num_agents = check_int(num_agents, "num_agents", 1)
        self.radius = check_int(radius, "radius", 0)
        self.max_steps = check_int(max_steps, "max_steps", 1)
        self.num_actions = check_int(num_actions, "num_actions", 2)
        self.decay = check_real(decay, "decay", 0.0, 1.0, high_open=True)
        self.benefit = check_real(benefit, "benefit", 0.0, low_open=True)
        self.cost = check_real(cost, "cost", 0.0, low_open=True)
        self.noise = check_real(noise, "noise", 0.0, 1.0, high_open=True)
        self.init_stock = check_real(init_stock, "init_stock", 0.0)
        self.cap = None if cap is None else check_real(cap, "cap", 0.0, low_open=True)

        if isinstance(graph, str):
            if graph not in GRAPHS:
                raise ValueError(f"graph must be one of {GRAPHS} or an [N, N] adjacency array, got {graph!r}")
            if graph == "ring":
                if rows is not None or cols is not None:
                    raise ValueError("rows and cols only apply to graph='grid'; leave them None for graph='ring'")
                adjacency, self.grid_shape = ring(n), None
            else:
                self.grid_shape = _grid_shape(n, rows, cols)
                adjacency = grid(*self.grid_shape)
        else:
            if rows is not None or cols is not None:
                raise ValueError("rows and cols only apply to graph='grid'; leave them None with an adjacency array")
            adjacency, self.grid_shape = validate_adjacency(graph, n, symmetric=True, name="graph"), None
        self.graph = graph if isinstance(graph, str) else "custom"
        self.adjacency = adjacency  # uint8 [N, N], no self loops
        self._coupling = neighbourhood(adjacency, self.radius)  # uint8 [N, N], self included
        # Neighbourhood means as a padded gather [N, K], K = max |N_c(i)|: O(N K) rather
        # than a dense [N, N] matvec, and r_i's arithmetic never touches an agent outside
        # N_c(i) (padding points at i itself with weight 0), so locality holds bitwise.
        size = self._coupling.sum(1)
        width = int(size.max())
        order = np.argsort(self._coupling == 0, axis=1, kind="stable")[:, :width]  # members first
        member = np.arange(width) < size[:, None]
        self._nbr_idx = np.where(member, order, np.arange(n)[:, None]).astype(np.int32)
        self._nbr_w = np.where(member, 1.0 / size[:, None], 0.0).astype(np.float32)
        # Column sums of the row-normalised coupling: Σ_{i ∈ N_c(j)} 1 / |N_c(i)|.
        self._team_weight = np.bincount(self._nbr_idx.ravel(), self._nbr_w.ravel().astype(np.float64), n)
        self._own_weight = 1.0 / size
        for a in (self.adjacency, self._coupling):
            a.flags.writeable = False  # shared with callers: keep them from editing the env
        self.obs_dim = 5
        self.global_state_dim = self.obs_dim + 2

    # ------------------------------------------------------------------ protocol

    @property
    def coupling(self) -> np.ndarray:
        """uint8 [N, N]: ``coupling[i, j] = 1`` iff d(i, j) <= radius (j's actions reach r_i)."""
        return self._coupling

    def _mean_nbhd(self, v: jax.Array) -> jax.Array:
        """float32 [N]: mean of ``v [N]`` over each agent's N_c(i)."""
        return (v[self._nbr_idx] * self._nbr_w).sum(-1)

    def _timestep(self, state: PublicGoodsState, reward: jax.Array, truncated: jax.Array) -> TimeStep:
        n = self.num_agents
        frac = jnp.full((n,), state.t / self.max_steps, jnp.float32)
        obs = jnp.stack(
            [state.stock, self._mean_nbhd(state.stock), state.contribution, self._mean_nbhd(state.contribution), frac],
            axis=-1,
        )
        glob = jnp.broadcast_to(jnp.stack([state.stock.mean(), state.contribution.mean()]), (n, 2))
        return TimeStep(
            obs=obs,
            reward=reward,
            terminated=jnp.zeros((), bool),
            truncated=truncated,
            action_mask=jnp.ones((n, self.num_actions), bool),
            global_state=jnp.concatenate([obs, glob], axis=-1),
        )

    def reset(self, key: jax.Array) -> tuple[PublicGoodsState, TimeStep]:
        n = self.num_agents
        state = PublicGoodsState(
            stock=jax.random.uniform(key, (n,), jnp.float32, 0.0, self.init_stock),
            contribution=jnp.zeros((n,), jnp.float32),
            t=jnp.zeros((), jnp.int32),
        )
        return state, self._timestep(state, jnp.zeros((n,), jnp.float32), jnp.zeros((), bool))

    def step(self, key: jax.Array, state: PublicGoodsState, actions: jax.Array) -> tuple[PublicGoodsState, TimeStep]:
        """One step. ``actions``: int [N] in [0, num_actions) (out-of-range values are clipped)."""
        a = jnp.clip(actions, 0, self.num_actions - 1).astype(jnp.float32) / (self.num_actions - 1)
        u = 1.0 + self.noise * jax.random.uniform(key, (self.num_agents,), jnp.float32, -1.0, 1.0)
        stock = self.decay * state.stock + (1.0 - self.decay) * u * self._mean_nbhd(a)
        gain = stock if self.cap is None else jnp.minimum(stock, self.cap)
        reward = self.benefit * gain - self.cost * a
        t = state.t + 1
        new_state = PublicGoodsState(stock=stock, contribution=a, t=t)
        return new_state, self._timestep(new_state, reward, t >= self.max_steps)

    # ------------------------------------------------------------------ extras

    def contribution_gain(self, steps_left: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Expected undiscounted gain of one full contribution, before its cost.

        Args:
          steps_left: steps h left including the current one, or None for h → ∞.

        Returns:
          ``(own, team)``, float64 [N] each: the contributor's own return gain
          ``benefit (1 - decay^h) / |N_c(j)|`` and the team's summed return gain
          ``benefit (1 - decay^h) sum_{i in N_c(j)} 1 / |N_c(i)|``. Exact for
          cap = None; upper bounds with a cap. Agent j faces a dilemma iff
          ``own[j] < cost < team[j]``.
        """
        h = 1.0 if steps_left is None else 1.0 - self.decay ** check_int(steps_left, "steps_left", 0)
        return self.benefit * h * self._own_weight, self.benefit * h * self._team_weight

    def reference_policy(self, key: jax.Array, state: PublicGoodsState) -> jax.Array:
        """Contribute fully while the team gain of a contribution exceeds its cost.

        Deterministic (``key`` is unused). With cap = None this is the team-optimal
        policy for expected undiscounted return; with a cap it additionally waits
        while the own stock is at the cap (a heuristic). Returns int32 [N].
        """
        del key
        team = jnp.asarray(self.contribution_gain()[1], jnp.float32)  # [N], h → ∞
        h = 1.0 - self.decay ** (self.max_steps - state.t).astype(jnp.float32)
        give = team * h > self.cost
        if self.cap is not None:
            give = give & (state.stock < self.cap)
        return jnp.where(give, self.num_actions - 1, 0).astype(jnp.int32)

    def positions(self) -> np.ndarray:
        """float [N, 2] node coordinates for drawing: grid cells, otherwise a circle."""
        n = self.num_agents
        if self.grid_shape is not None:
            r, c = np.divmod(np.arange(n), self.grid_shape[1])
            return np.stack([c, -r], axis=1).astype(float)
        angle = 2 * np.pi * np.arange(n) / n
        return np.stack([np.cos(angle), np.sin(angle)], axis=1)

    def render(self, state: PublicGoodsState, size: int = 320) -> np.ndarray:
        """Draws one (unbatched) state: nodes coloured by stock, contributors ringed.

        Returns uint8 [size, size, 3].
        """
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure

        stock = np.asarray(state.stock)
        give = np.asarray(state.contribution) > 0
        pos = self.positions()
        dpi = 80
        fig = Figure(figsize=(size / dpi, size / dpi), dpi=dpi)
        FigureCanvasAgg(fig)
        ax = fig.add_axes((0.02, 0.02, 0.96, 0.88))
        ax.set_axis_off()
        ax.set_aspect("equal")
        i, j = np.nonzero(np.triu(self.adjacency))
        ax.add_collection(LineCollection(np.stack([pos[i], pos[j]], axis=1), colors="0.8", linewidths=0.5, zorder=1))
        marker = max(4.0, 4000.0 / self.num_agents)  # keep N = 1024 readable
        vmax = max(1.0 + self.noise, self.init_stock) if self.cap is None else self.cap
        ax.scatter(pos[:, 0], pos[:, 1], c=stock, cmap="viridis", vmin=0.0, vmax=vmax, s=marker,
                   edgecolors=np.where(give, "crimson", "none"), linewidths=1.5, zorder=2)
        pad = 0.15 * max(np.ptp(pos[:, 0]), np.ptp(pos[:, 1]), 1.0)
        ax.set_xlim(pos[:, 0].min() - pad, pos[:, 0].max() + pad)
        ax.set_ylim(pos[:, 1].min() - pad, pos[:, 1].max() + pad)
        fig.suptitle(f"t={int(state.t)}  mean stock {stock.mean():.2f}  contributing {give.mean():.0%}", fontsize=9)
        fig.canvas.draw()
        return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def _grid_shape(n: int, rows: Any, cols: Any) -> tuple[int, int]:
    if rows is None and cols is None:
        side = math.isqrt(n)
        if side * side != n:
            raise ValueError(f"graph='grid' needs rows and cols with rows * cols == num_agents ({n}); "
                             "num_agents is not a perfect square")
        return side, side
    if rows is not None:
        rows = check_int(rows, "rows", 1)
    if cols is not None:
        cols = check_int(cols, "cols", 1)
    rows = n // cols if rows is None else rows
    cols = n // rows if cols is None else cols
    if rows * cols != n:
        raise ValueError(f"rows * cols must equal num_agents ({n}), got rows={rows}, cols={cols}")
    return rows, cols


__all__ = ["GRAPHS", "PublicGoods", "PublicGoodsState"]
