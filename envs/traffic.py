"""Traffic signal control on a grid of intersections (one agent per intersection).

Agents are the ``rows x cols`` intersections, numbered row-major
(``i = r * cols + c``, row 0 at the top).  Each intersection has four incoming
queues, indexed by the side the vehicles come from::

    0: from North (heading south)   1: from East (heading west)
    2: from South (heading north)   3: from West (heading east)

The same index doubles as a *heading code*: a vehicle leaving with heading ``h``
joins incoming queue ``h`` of the neighbour in that direction (heading south =
code 0 enters the next intersection from its north side), or leaves the grid when
there is no neighbour.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .base import Env, TimeStep
from .params import check_int, check_real

# Out-direction h -> (row, col) offset of the neighbour it leads to.
_DR = np.array([1, 0, -1, 0])
_DC = np.array([0, -1, 0, 1])
# Phase -> which incoming sides have green: 0 = North-South, 1 = East-West.
_GREEN = np.array([[True, False, True, False], [False, True, False, True]])
_TSS_CAP = 20  # time-since-switch saturates here in the observation


@struct.dataclass
class TrafficState:
    """State of one grid.

    Attributes:
        queues: int32 [N, 4] — vehicles waiting on each incoming side.
        phase: int32 [N] — current green phase (0 = North-South, 1 = East-West).
        time_since_switch: int32 [N] — steps since the phase last changed.
        t: int32 [] — steps taken in this episode.
        arrivals: int32 [] — cumulative vehicles that entered the grid.
        exits: int32 [] — cumulative vehicles that left the grid.
        blocked: int32 [] — cumulative arrivals turned away by a full entry queue.
    """

    queues: jax.Array
    phase: jax.Array
    time_since_switch: jax.Array
    t: jax.Array
    arrivals: jax.Array
    exits: jax.Array
    blocked: jax.Array


class TrafficGrid(Env):
    """Traffic signal control on a ``rows x cols`` grid; N = rows * cols agents.

    Dynamics (one step, all intersections at once):
      1. *Signals.* Action ``a_i`` is the desired phase. If it differs from the
         current phase the intersection switches and spends this step all-red
         (no service); otherwise the two green sides each serve up to
         ``service_rate`` vehicles from the head of their queues.
      2. *Routing.* Each served vehicle goes straight with probability
         ``1 - turn_prob`` and turns left or right with ``turn_prob / 2`` each
         (one uniform draw per head-of-queue slot, so the draws do not depend on
         the actions). It joins the matching incoming queue of the neighbour in its
         new heading, or leaves the grid (an *exit*) at the boundary.
      3. *Capacity* (``capacity=None``: unbounded). A vehicle does not move into a
         downstream queue that was full (``>= capacity``) at the start of the step
         and, FIFO, blocks the vehicles behind it. Checking the start-of-step state
         keeps the update parallel; a queue may therefore overshoot ``capacity`` by
         what it admits in one step (at most ``2 * service_rate - 1`` extra).
      4. *Arrivals.* Every boundary entry road (sides facing outside the grid)
         receives one vehicle with probability ``arrival_rate``; an entry queue that
         is full at the start of the step turns it away (counted in ``blocked``).
    Vehicle counts are integers and conserved:
    ``arrivals - exits == queues.sum()`` (episodes start empty).

    Observation (float32 [N, 11]): own 4 queues / ``queue_scale``; the 4
    downstream queues this intersection feeds (heading codes 0..3, 0 where the
    road leaves the grid) / ``queue_scale``; current phase one-hot (2);
    ``min(time_since_switch, 20) / 20``.

    Action: 2 discrete — desired phase, 0 = North-South green, 1 = East-West green.

    Reward: ``r_i = -(vehicles queued at i after the step + arrivals turned away
    at i this step) / queue_scale`` (nothing is turned away without ``capacity``).

    Coupling: intersection j's action changes how many vehicles i receives this
    step iff j is a road neighbour of i, so ``coupling = road adjacency + I``.

    Episodes start from an empty grid with every phase North-South, never
    terminate, and are truncated after ``max_steps`` steps.

    Reference policy: max-pressure with a switching margin (``reference_policy``).
    """

    name = "traffic_grid"

    def __init__(
        self,
        rows: int = 4,
        cols: int = 4,
        arrival_rate: float = 0.3,
        service_rate: int = 2,
        turn_prob: float = 0.3,
        capacity: int | None = None,
        max_steps: int = 200,
        queue_scale: float = 10.0,
    ):
        self.rows = check_int(rows, "rows", 2, 32)
        self.cols = check_int(cols, "cols", 2, 32)
        self.arrival_rate = check_real(arrival_rate, "arrival_rate", 0.0, 1.0)
        self.service_rate = check_int(service_rate, "service_rate", 1, 16)
        self.turn_prob = check_real(turn_prob, "turn_prob", 0.0, 1.0)
        self.capacity = None if capacity is None else check_int(capacity, "capacity", 1, 10_000)
        self.max_steps = check_int(max_steps, "max_steps", 1)
        self.queue_scale = check_real(queue_scale, "queue_scale", 0.0, 1e6, low_open=True)

        n = self.rows * self.cols
        self.num_agents = n
        self.obs_dim = 11
        self.num_actions = 2
        self.global_state_dim = None

        r, c = np.divmod(np.arange(n), self.cols)
        nr, nc = r[:, None] + _DR, c[:, None] + _DC
        has_down = (nr >= 0) & (nr < self.rows) & (nc >= 0) & (nc < self.cols)
        # down[i, h]: intersection reached leaving i with heading h; n = outside.
        self._down = np.where(has_down, nr * self.cols + nc, n).astype(np.int32)
        self._has_down = has_down
        # Side d's upstream neighbour lies in out-direction (d + 2) % 4.
        self._up = self._down[:, [2, 3, 0, 1]]
        self._entry = ~has_down[:, [2, 3, 0, 1]]  # side d faces outside: an entry road
        coupling = np.eye(n, dtype=np.int32)
        rows_idx = np.repeat(np.arange(n), 4)[has_down.ravel()]
        coupling[rows_idx, self._down.ravel()[has_down.ravel()]] = 1
        self._coupling = coupling

    @property
    def coupling(self) -> np.ndarray:
        """int32 [N, N] — road adjacency plus self loops (symmetric)."""
        return self._coupling

    # ------------------------------------------------------------------ core
    def _pad(self, x: jax.Array) -> jax.Array:
        """Appends a zero row so that index N (outside the grid) gathers zeros."""
        return jnp.concatenate([x, jnp.zeros((1,) + x.shape[1:], x.dtype)], axis=0)

    def _downstream_queues(self, queues: jax.Array) -> jax.Array:
        """int32 [N, 4] — queue h of the neighbour in heading h (0 off the grid)."""
        return self._pad(queues)[self._down, jnp.arange(4)]

    def _obs(self, state: TrafficState) -> jax.Array:
        q = state.queues.astype(jnp.float32) / self.queue_scale
        qd = self._downstream_queues(state.queues).astype(jnp.float32) / self.queue_scale
        phase = jax.nn.one_hot(state.phase, 2, dtype=jnp.float32)
        tss = jnp.minimum(state.time_since_switch, _TSS_CAP).astype(jnp.float32)[:, None] / _TSS_CAP
        return jnp.concatenate([q, qd, phase, tss], axis=1)

    def _timestep(self, state: TrafficState, reward: jax.Array) -> TimeStep:
        return TimeStep(
            obs=self._obs(state),
            reward=reward,
            terminated=jnp.array(False),
            truncated=state.t >= self.max_steps,
            action_mask=jnp.ones((self.num_agents, 2), bool),
        )

    def reset(self, key: jax.Array) -> tuple[TrafficState, TimeStep]:
        """An empty grid, all phases North-South. ``key`` is unused: the arrivals
        randomise the episode, and a draw-free reset keeps AutoReset programs cheap
        to compile."""
        del key
        n = self.num_agents
        zero = jnp.array(0, jnp.int32)
        state = TrafficState(
            queues=jnp.zeros((n, 4), jnp.int32),
            phase=jnp.zeros((n,), jnp.int32),
            time_since_switch=jnp.zeros((n,), jnp.int32),
            t=zero, arrivals=zero, exits=zero, blocked=zero,
        )
        return state, self._timestep(state, jnp.zeros((n,), jnp.float32))

    def step(self, key: jax.Array, state: TrafficState, actions: jax.Array) -> tuple[TrafficState, TimeStep]:
        """actions: int [N] in {0, 1} (values are clipped to that range)."""
        n, s, tp = self.num_agents, self.service_rate, self.turn_prob
        # One draw per step (cheaper to compile than several): [..., :S] route the
        # head-of-queue slots, [..., S] decides the arrivals. Its shape never depends
        # on the actions, so one agent's action cannot reshuffle another's luck.
        u = jax.random.uniform(key, (n, 4, s + 1))
        q = state.queues
        phase = jnp.clip(jnp.asarray(actions, jnp.int32), 0, 1)
        switch = phase != state.phase
        green = jnp.asarray(_GREEN)[phase] & ~switch[:, None]  # all-red while switching

        # Heading of each head-of-queue slot [N, 4 sides, S slots]: straight keeps
        # the side's code, a right turn is +1, a left turn +3 (mod 4).
        side = jnp.arange(4)[None, :, None]
        ut = u[..., :s]
        heading = jnp.where(ut < 1.0 - tp, side, jnp.where(ut < 1.0 - tp / 2, (side + 1) % 4, (side + 3) % 4))
        ok = green[:, :, None] & (jnp.arange(s) < q[:, :, None])
        if self.capacity is not None:
            target = jnp.asarray(self._down)[jnp.arange(n)[:, None, None], heading]
            full = (self._pad(q)[target, heading] >= self.capacity) & (target < n)
            ok = ok & ~full
        moved = jnp.cumprod(ok.astype(jnp.int32), axis=-1)  # FIFO: stop at the first blocked vehicle
        served = moved.sum(-1)  # [N, 4]
        flow = jnp.einsum("nds,ndsh->nh", moved, jax.nn.one_hot(heading, 4, dtype=jnp.int32))  # [N, 4 headings]
        inflow = self._pad(flow)[self._up, jnp.arange(4)]  # side d receives heading d from its upstream
        exits = jnp.sum(jnp.where(self._has_down, 0, flow))

        want = (u[..., s] < self.arrival_rate) & self._entry
        room = jnp.ones_like(want) if self.capacity is None else q < self.capacity
        arrive = want & room
        turned_away = want & ~room

        new_q = q - served + inflow + arrive.astype(jnp.int32)
        new_state = TrafficState(
            queues=new_q,
            phase=phase,
            time_since_switch=jnp.where(switch, 0, state.time_since_switch + 1),
            t=state.t + 1,
            arrivals=state.arrivals + arrive.sum(dtype=jnp.int32),
            exits=state.exits + exits,
            blocked=state.blocked + turned_away.sum(dtype=jnp.int32),
        )
        # A turned-away vehicle counts as queued for this step, so that blocking an
        # entry road is never a way to shorten a queue.
        reward = -(new_q.sum(1) + turned_away.sum(1)).astype(jnp.float32) / self.queue_scale
        return new_state, self._timestep(new_state, reward)

    # ------------------------------------------------------------- policies
    def pressure(self, state: TrafficState) -> jax.Array:
        """float32 [N, 2] — max-pressure weight of each phase.

        A movement's pressure is its queue minus the expected downstream queue
        (turning probabilities as weights); a phase sums its two green sides.
        """
        q = state.queues.astype(jnp.float32)
        qd = self._downstream_queues(state.queues).astype(jnp.float32)
        tp = self.turn_prob
        expected_down = (1 - tp) * qd + tp / 2 * (jnp.roll(qd, -1, axis=1) + jnp.roll(qd, -3, axis=1))
        p = q - expected_down  # [N, 4 sides]; roll(-1)[d] = qd[(d+1)%4] (right), roll(-3) = left
        return jnp.stack([p[:, 0] + p[:, 2], p[:, 1] + p[:, 3]], axis=1)

    def reference_policy(self, key: jax.Array, state: TrafficState, switch_margin: float = 1.0) -> jax.Array:
        """Max-pressure with hysteresis: int32 [N]. Switch to the other phase only
        when its pressure exceeds the current phase's by more than ``switch_margin``
        vehicles — every switch costs an all-red step, and without a margin the
        signals flap. Deterministic; ``key`` is accepted for a uniform API."""
        del key
        p = self.pressure(state)
        current = jnp.take_along_axis(p, state.phase[:, None], axis=1)[:, 0]
        other = jnp.take_along_axis(p, 1 - state.phase[:, None], axis=1)[:, 0]
        return jnp.where(other > current + switch_margin, 1 - state.phase, state.phase).astype(jnp.int32)

    # ------------------------------------------------------------- display
    def render(self, state: TrafficState) -> np.ndarray:
        """uint8 [H, W, 3] — total queue per intersection (heat map) with the green
        direction drawn as a bar (vertical = North-South, horizontal = East-West;
        grey while switching)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure

        q = np.asarray(state.queues)
        phase = np.asarray(state.phase)
        tss = np.asarray(state.time_since_switch)
        total = q.sum(1).reshape(self.rows, self.cols)
        size = 2.0 + 0.15 * max(self.rows, self.cols)
        fig = Figure(figsize=(size * self.cols / max(self.rows, self.cols) + 1.0, size), dpi=80)
        canvas = FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        im = ax.imshow(total, cmap="Reds", vmin=0, vmax=max(1, int(total.max())))
        fig.colorbar(im, ax=ax, fraction=0.046, label="queued vehicles")
        r, c = np.divmod(np.arange(self.num_agents), self.cols)
        h = 0.35
        segs = np.where(
            (phase == 0)[:, None, None],
            np.stack([np.stack([c, r - h], 1), np.stack([c, r + h], 1)], 1),
            np.stack([np.stack([c - h, r], 1), np.stack([c + h, r], 1)], 1),
        )
        colors = np.where((tss == 0)[:, None], [[0.5, 0.5, 0.5, 1.0]], [[0.0, 0.6, 0.0, 1.0]])
        ax.add_collection(LineCollection(segs, colors=colors, linewidths=max(0.5, 6.0 - 0.15 * max(self.rows, self.cols))))
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"t={int(state.t)}  queued={int(q.sum())}")
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[..., :3].copy()
