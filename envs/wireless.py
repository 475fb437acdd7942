"""Wireless multiple access with packet deadlines (one agent per user).

In the style of the wireless example of Qu, Wierman & Li, "Scalable reinforcement
learning of localized policies for multi-agent networked systems" (L4DC 2020):
users hold packets that expire after a deadline and contend for shared access
points (APs); two users sending to the same AP in the same step collide.

Layouts (user i can reach the APs that "bracket" its position):

* ``"line"``: ``num_aps = M`` APs at positions 0..M-1, the N users evenly spread
  at ``x_i = (i + 1/2) (M - 1) / N``; user i reaches the two APs ``lo, lo + 1``
  with ``lo = min(floor(x_i), M - 2)``. The default ``M = N + 1`` puts user i
  between APs i and i + 1, so neighbouring users share one AP.
* ``"grid"``: users on a ``grid_shape = (R, C)`` grid, APs on an
  ``num_aps = (Ra, Ca)`` lattice; the line rule is applied per axis, giving each
  user the four APs at the corners of its cell. The default ``(R + 1, C + 1)``
  puts one AP at every cell corner, so adjacent and diagonal users share APs.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .base import Env, TimeStep
from .params import check_int, check_prob


def _bracket(n: int, m: int) -> np.ndarray:
    """int [n] — lower of the two (of m) APs bracketing each of n evenly spread users.

    Exact integer form of ``min(floor((i + 1/2) (m - 1) / n), m - 2)``.
    """
    i = np.arange(n)
    return np.minimum(((2 * i + 1) * (m - 1)) // (2 * n), m - 2)


@struct.dataclass
class WirelessState:
    """State of one network.

    Attributes:
        queue: bool [N, D] — ``queue[i, k]`` holds a packet with k + 1 steps left
            (slot 0 expires at the end of this step unless delivered).
        t: int32 [] — steps taken in this episode.
        arrivals: int32 [] — cumulative packets that entered queues (initial ones included).
        delivered: int32 [] — cumulative packets delivered.
        expired: int32 [] — cumulative packets dropped at their deadline.
        collisions: int32 [] — cumulative transmissions lost to collisions.
        last_ap: int32 [N] — AP user i sent to in the last step, -1 if none (for render).
        last_success: bool [N] — whether that transmission was delivered.
    """

    queue: jax.Array
    t: jax.Array
    arrivals: jax.Array
    delivered: jax.Array
    expired: jax.Array
    collisions: jax.Array
    last_ap: jax.Array
    last_success: jax.Array


class WirelessAccess(Env):
    """Wireless multiple access with deadlines; N = ``num_users`` agents, K APs each
    (K = 2 on a line, 4 on a grid).

    Dynamics (one step):
      1. User i with action ``a_i = k >= 1`` and a non-empty queue transmits its
         earliest-deadline packet to its k-th accessible AP (``access[i, k-1]``);
         ``a_i = 0`` waits (so does a user with an empty queue).
      2. A transmission succeeds with probability ``success_prob[ap]`` if it is the
         only one to that AP this step; two or more to the same AP all fail. The
         success draw is one uniform per user, independent of the actions.
      3. Delivered packets leave; every remaining packet's deadline moves one step
         closer and those at their deadline expire; each user receives a new packet
         (deadline ``deadline``) with probability ``arrival_prob``.
    Packets are conserved: ``arrivals - delivered - expired == queue.sum()``.

    Observation (float32 [N, D + K]): the deadline-queue occupancy (0/1 per slot,
    earliest deadline first) followed by the success probabilities of the user's K
    APs.

    Action: K + 1 discrete — 0 wait, k in 1..K transmit to AP ``access[i, k-1]``.

    Reward: ``r_i`` = packets user i delivered this step (0 or 1).

    Active agents: the users holding a packet (``TimeStep.active``); an empty queue's
    action changes nothing. Interaction graph of a state (``interaction``): users
    i ≠ j are coupled when they share an AP and both hold a packet (only then can j's
    transmission collide with one of i's); the diagonal is always set.

    Coupling: ``coupling[i, j] = 1`` iff users i and j share an AP (self included):
    only a transmission to one of i's APs can collide with i's.

    Episodes never terminate; they are truncated after ``max_steps`` steps. Reset
    fills each deadline slot independently with probability ``arrival_prob``.

    Reference policy: fixed random access (``reference_policy``).
    """

    name = "wireless"

    def __init__(
        self,
        num_users: int = 16,
        num_aps: int | tuple[int, int] | None = None,
        layout: str = "line",
        grid_shape: tuple[int, int] | None = None,
        deadline: int = 3,
        arrival_prob: float = 0.5,
        success_prob: float | np.ndarray = 0.8,
        max_steps: int = 100,
    ):
        n = self.num_users = check_int(num_users, "num_users", 2)
        if layout not in ("line", "grid"):
            raise ValueError(f"layout must be one of 'line', 'grid', got {layout!r}")
        self.layout = layout
        self.deadline = check_int(deadline, "deadline", 1, 64)
        self.arrival_prob = check_prob(arrival_prob, "arrival_prob")
        self.max_steps = check_int(max_steps, "max_steps", 1)

        if layout == "line":
            if grid_shape is not None:
                raise ValueError(f"grid_shape applies only to layout='grid', got {grid_shape!r}")
            m = self.num_aps = n + 1 if num_aps is None else check_int(num_aps, "num_aps", 2)
            lo = _bracket(n, m)
            access = np.stack([lo, lo + 1], axis=1)
            self._user_xy = np.stack([(np.arange(n) + 0.5) * (m - 1) / n, np.zeros(n)], 1)
            self._ap_xy = np.stack([np.arange(m), np.ones(m)], 1).astype(float)
        else:
            if grid_shape is None:
                side = math.isqrt(n)
                if side * side != n:
                    raise ValueError(f"grid_shape is required when num_users ({n}) is not a perfect square")
                grid_shape = (side, side)
            if not (isinstance(grid_shape, (tuple, list)) and len(grid_shape) == 2):
                raise ValueError(f"grid_shape must be a pair (rows, cols) of integers >= 1, got {grid_shape!r}")
            rows, cols = (check_int(g, "grid_shape", 1) for g in grid_shape)
            if rows * cols != n:
                raise ValueError(f"grid_shape must multiply to num_users={n}, got {grid_shape!r}")
            if num_aps is None:
                num_aps = (rows + 1, cols + 1)
            if not (isinstance(num_aps, (tuple, list)) and len(num_aps) == 2):
                raise ValueError(f"num_aps must be a pair (ap_rows, ap_cols) of integers >= 2 for layout='grid', got {num_aps!r}")
            ar, ac = (check_int(g, "num_aps", 2) for g in num_aps)
            self.grid_shape, self.ap_shape = (rows, cols), (ar, ac)
            m = self.num_aps = ar * ac
            r, c = np.divmod(np.arange(n), cols)
            lr, lc = _bracket(rows, ar)[r], _bracket(cols, ac)[c]
            access = np.stack([lr * ac + lc, lr * ac + lc + 1, (lr + 1) * ac + lc, (lr + 1) * ac + lc + 1], 1)
            ys, xs = (r + 0.5) * (ar - 1) / rows, (c + 0.5) * (ac - 1) / cols
            self._user_xy = np.stack([xs, ys], 1)
            ay, ax = np.divmod(np.arange(m), ac)
            self._ap_xy = np.stack([ax, ay], 1).astype(float)

        sp = np.asarray(success_prob, dtype=np.float64)
        if sp.ndim == 0:
            sp = np.full(m, float(sp))
        if sp.shape != (m,) or not np.all(np.isfinite(sp)) or np.any((sp < 0) | (sp > 1)):
            raise ValueError(f"success_prob must be a probability in [0, 1] or {m} of them (one per AP), got {success_prob!r}")
        self.success_prob = sp.astype(np.float32)
        self.access = access.astype(np.int32)  # [N, K]
        self.num_aps_per_user = k = access.shape[1]

        self.num_agents = n
        self.obs_dim = self.deadline + k
        self.num_actions = k + 1
        self.global_state_dim = None
        self._coupling = None

    @property
    def coupling(self) -> np.ndarray:
        """int32 [N, N] — users sharing at least one AP (self included); symmetric."""
        if self._coupling is None:  # lazy: dense [N, N] is only built when asked for
            n = self.num_agents
            inc = np.zeros((n, self.num_aps), np.int32)
            inc[np.arange(n)[:, None], self.access] = 1
            self._coupling = (inc @ inc.T > 0).astype(np.int32)
        return self._coupling

    # ------------------------------------------------------------------ core
    def _timestep(self, state: WirelessState, reward: jax.Array) -> TimeStep:
        ap_quality = jnp.asarray(self.success_prob)[self.access]  # [N, K]
        return TimeStep(
            obs=jnp.concatenate([state.queue.astype(jnp.float32), ap_quality], axis=1),
            reward=reward,
            terminated=jnp.array(False),
            truncated=state.t >= self.max_steps,
            action_mask=jnp.ones((self.num_agents, self.num_actions), bool),
            active=state.queue.any(axis=1),
        )

    def interaction(self, state: WirelessState) -> jax.Array:
        """bool [N, N]: users sharing an AP and both holding a packet, and the diagonal."""
        holding = state.queue.any(axis=1)
        both = (holding[:, None] & holding[None, :]) | jnp.eye(self.num_agents, dtype=bool)
        return jnp.asarray(self.coupling, bool) & both

    def interaction_lists(self, state: WirelessState) -> jax.Array:
        """bool [N, K] — ``interaction`` on ``coupling_lists`` (users sharing an AP), in O(N·K)."""
        holding = state.queue.any(axis=1)
        lists = jnp.asarray(self.coupling_lists)  # [N, K]
        return (holding[:, None] & holding[lists]) | (lists == jnp.arange(self.num_agents)[:, None])

    def reset(self, key: jax.Array) -> tuple[WirelessState, TimeStep]:
        n = self.num_agents
        queue = jax.random.bernoulli(key, self.arrival_prob, (n, self.deadline))
        zero = jnp.array(0, jnp.int32)
        state = WirelessState(
            queue=queue, t=zero, arrivals=queue.sum(dtype=jnp.int32), delivered=zero, expired=zero,
            collisions=zero, last_ap=jnp.full((n,), -1, jnp.int32), last_success=jnp.zeros((n,), bool),
        )
        return state, self._timestep(state, jnp.zeros((n,), jnp.float32))

    def step(self, key: jax.Array, state: WirelessState, actions: jax.Array) -> tuple[WirelessState, TimeStep]:
        """actions: int [N] in {0, .., K} (values are clipped to that range)."""
        n, idx = self.num_agents, jnp.arange(self.num_agents)
        # One draw per step: column 0 decides delivery, column 1 the arrival. Its shape
        # never depends on the actions, so one user's action cannot reshuffle another's luck.
        u = jax.random.uniform(key, (n, 2))
        a = jnp.clip(jnp.asarray(actions, jnp.int32), 0, self.num_aps_per_user)
        q = state.queue
        send = (a > 0) & q.any(axis=1)
        ap = jnp.asarray(self.access)[idx, jnp.maximum(a - 1, 0)]  # [N]
        senders = jnp.zeros(self.num_aps, jnp.int32).at[ap].add(send.astype(jnp.int32))
        alone = senders[ap] == 1
        ok = send & alone & (u[:, 0] < jnp.asarray(self.success_prob)[ap])

        first = jnp.argmax(q, axis=1)  # earliest-deadline packet
        q = q & ~(ok[:, None] & (jnp.arange(self.deadline) == first[:, None]))
        arrive = u[:, 1] < self.arrival_prob
        new_q = jnp.concatenate([q[:, 1:], arrive[:, None]], axis=1)  # age by one step

        new_state = WirelessState(
            queue=new_q,
            t=state.t + 1,
            arrivals=state.arrivals + arrive.sum(dtype=jnp.int32),
            delivered=state.delivered + ok.sum(dtype=jnp.int32),
            expired=state.expired + q[:, 0].sum(dtype=jnp.int32),
            collisions=state.collisions + (send & ~alone).sum(dtype=jnp.int32),
            last_ap=jnp.where(send, ap, -1),
            last_success=ok,
        )
        return new_state, self._timestep(new_state, ok.astype(jnp.float32))

    # ------------------------------------------------------------- policies
    def reference_policy(self, key: jax.Array, state: WirelessState, transmit_prob: float = 0.5) -> jax.Array:
        """Fixed random access: int32 [N]. A user with a packet transmits with
        probability ``transmit_prob`` to a uniformly chosen accessible AP."""
        k = self.num_aps_per_user
        u = jax.random.uniform(key, (self.num_agents, 2))
        send = state.queue.any(axis=1) & (u[:, 0] < transmit_prob)
        choice = jnp.minimum((u[:, 1] * k).astype(jnp.int32), k - 1) + 1
        return jnp.where(send, choice, 0)

    # ------------------------------------------------------------- display
    def render(self, state: WirelessState) -> np.ndarray:
        """uint8 [H, W, 3] — users coloured by queued packets, APs as triangles,
        grey links to accessible APs, last step's transmissions green (delivered)
        or red (lost)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure

        queued = np.asarray(state.queue).sum(1)
        last_ap, last_ok = np.asarray(state.last_ap), np.asarray(state.last_success)
        u, a = self._user_xy, self._ap_xy
        span = np.ptp(np.concatenate([u, a]), axis=0) + 1.0
        w = float(np.clip(span[0] * 0.5 + 1.5, 4, 12))  # + room for the colour bar
        h = float(np.clip(span[1] * 0.5 + 1.0, 2.5, 12))
        fig = Figure(figsize=(w, h), dpi=80)
        canvas = FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        n, k = self.access.shape
        links = np.stack([np.repeat(u, k, axis=0), a[self.access.ravel()]], 1)
        ax.add_collection(LineCollection(links, colors=(0.8, 0.8, 0.8), linewidths=0.5, zorder=1))
        tx = last_ap >= 0
        if tx.any():
            segs = np.stack([u[tx], a[last_ap[tx]]], 1)
            colors = np.where(last_ok[tx][:, None], [[0.0, 0.6, 0.0, 1.0]], [[0.85, 0.0, 0.0, 1.0]])
            ax.add_collection(LineCollection(segs, colors=colors, linewidths=1.5, zorder=2))
        ms = float(np.clip(400.0 / np.sqrt(n + self.num_aps), 2, 60))
        ax.scatter(a[:, 0], a[:, 1], marker="^", s=ms, c="k", zorder=3)
        sc = ax.scatter(u[:, 0], u[:, 1], s=ms, c=queued, cmap="viridis", vmin=0, vmax=self.deadline, zorder=4)
        fig.colorbar(sc, ax=ax, fraction=0.046, label="queued packets")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.margins(0.05)
        if self.layout == "grid":
            ax.invert_yaxis()
        ax.set_title(f"t={int(state.t)}  delivered={int(state.delivered)}  expired={int(state.expired)}")
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[..., :3].copy()
