"""Cooperative adaptive cruise control (CACC): a platoon of vehicles, one agent each.

The networked benchmark of Chu, Chinchali & Katti, "Multi-agent reinforcement learning
for networked system control" (ICLR 2020), written from the paper and the authors'
environment (``envs/cacc_env.py`` and the ``config/*_catchup.ini`` / ``*_slowdown.ini``
settings of github.com/cts198859/deeprl_network). Vehicles ``i = 0 .. N-1`` drive in a
line behind a scripted leader (vehicle ``-1``): ``h_i`` is vehicle i's headway (the gap
to the vehicle ahead: vehicle ``i - 1``, or the leader for ``i = 0``), ``v_i`` its speed
and ``u_i`` the acceleration it applied in the last step. Each vehicle picks the gains
of an optimal-velocity model (OVM) car-following controller every ``DT`` seconds.

Units are metres and seconds; the constants below are the original's settings
(its ``ENV_CONFIG`` sections, identical in every CACC config file).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .base import Env, TimeStep
from .params import check_int, check_real

DT = 0.1  # control interval (s)
H_MIN, H_ST, H_GO = 1.0, 5.0, 35.0  # collision, OVM stop and full-speed headways (m)
H_STAR, V_STAR = 20.0, 15.0  # target headway (m) and speed (m/s); V(H_STAR) = V_STAR
V_MAX, U_MIN, U_MAX = 30.0, -2.5, 2.5  # speed (m/s) and acceleration (m/s²) limits
SPEED_WEIGHT, ACCEL_WEIGHT = 1.0, 0.1  # a and b of the reward
COLLISION_PENALTY = 1000.0  # G
SAFE_HEADWAY = 10.0  # the safety term penalises headways below this (m)
DIFF_SCALE = 5.0  # speed differences in the observation are divided by this (m/s) and clipped to ±2
DECEL_STEPS = 300  # slow-down: the leader reaches V_STAR at step DECEL_STEPS - 1
# Action -> OVM gains (alpha, beta): headway-speed gain and leader-speed gain.
GAINS = np.array([[0.0, 0.0], [0.5, 0.0], [0.0, 0.5], [0.5, 0.5]], np.float32)
SCENARIOS = ("catchup", "slowdown")
FEATURES = 5  # observation features per vehicle


def ovm_speed(headway: jax.Array) -> jax.Array:
    """The OVM's desired speed ``V(h)`` (float32, the shape of ``headway``).

    ``0`` for ``h <= H_ST``, ``V_MAX / 2 (1 - cos(π (h - H_ST) / (H_GO - H_ST)))`` between,
    ``V_MAX`` for ``h >= H_GO``.

    Args:
        headway: float headways ``h`` (m), any shape.

    Returns:
        The desired speeds (m/s), the shape of ``headway``.
    """
    x = jnp.clip((headway - H_ST) / (H_GO - H_ST), 0.0, 1.0)
    mid = 0.5 * V_MAX * (1.0 - jnp.cos(jnp.pi * x))
    return jnp.where(headway <= H_ST, 0.0, jnp.where(headway >= H_GO, V_MAX, mid))


@struct.dataclass
class CACCState:
    """State of one platoon.

    Attributes:
        headway: float32 [N] — ``h_i``, the gap to the vehicle ahead (m).
        speed: float32 [N] — ``v_i`` (m/s).
        accel: float32 [N] — ``u_i``, the acceleration applied in the last step (m/s²; 0 at reset).
        lead_start: float32 [] — the leader's speed at step 0 (m/s).
        t: int32 [] — steps taken in this episode.
        collided: bool [] — a headway fell below ``H_MIN``; the platoon stands still since.
    """

    headway: jax.Array
    speed: jax.Array
    accel: jax.Array
    lead_start: jax.Array
    t: jax.Array
    collided: jax.Array


class CACC(Env):
    """CACC Catch-up or Slow-down; N = ``num_vehicles`` agents (the benchmark's is 8).

    Dynamics (one step of ``DT = 0.1`` s, every vehicle at once; ``v_{-1}`` is the leader):
      1. Action ``a_i`` in {0, 1, 2, 3} picks the OVM gains ``(α_i, β_i)`` = (0, 0),
         (0.5, 0), (0, 0.5), (0.5, 0.5) (``GAINS``).
      2. Commanded acceleration ``u*_i = α_i (V(h_i) - v_i) + β_i (v_{i-1} - v_i)`` with the
         OVM speed ``V`` (``ovm_speed``: 0 up to ``H_ST = 5``, a cosine rise to
         ``V_MAX = 30`` at ``H_GO = 35``; ``V(20) = 15``).
      3. Limits: ``v'_i = clip(v_i + clip(u*_i, -2.5, 2.5) DT, 0, V_MAX)``; the applied
         acceleration is ``u'_i = (v'_i - v_i) / DT``.
      4. Headways by the trapezoid rule: ``h'_i = h_i + DT/2 (v_{i-1} + v'_{i-1} - v_i - v'_i)``.
    The leader's speed ``v_{-1}`` at step t is ``leader_speed``.

    Reward (per vehicle, divided by ``reward_norm``): when some headway ``h'_j`` is below
    ``H_MIN = 1`` (a collision), ``-G = -1000`` for every vehicle; otherwise
    ``r_i = -[(h'_i - 20)² + (v'_i - 15)² + 0.1 u'_i² + w min(h'_i - 10, 0)²]``, with the
    safety weight ``w = safety_weight``. The original adds the safety term while
    training only (its evaluation reward has ``w = 0``); its learners divide
    rewards by a ``reward_norm``: 800 for IA2C, FPrint and ConseNet, 5000 for DIAL,
    CommNet and NeurComm.

    Collisions: the platoon then stands still, every later step pays ``-G`` to every
    vehicle, and the episode terminates when t reaches a multiple of ``collision_hold``
    or ``max_steps``. The original's 60 is its A2C batch length (it ends collided
    episodes only at a batch's end); ``collision_hold=1`` ends the episode on the
    collision step.

    Observation (float32 [N, 5], or [N, 15] with ``neighbour_obs``): vehicle i's
    ``(v_i - 15) / 15``, ``clip((v_{i-1} - v_i) / 5, ±2)``, ``clip((V(h_i) - v_i) / 5, ±2)``,
    ``(h_i + (v_{i-1} - v_i) DT - 20) / 20`` and ``u_i / 2.5``, at the step reached. With
    ``neighbour_obs`` (the original's IA2C and FPrint agents; its communicating agents
    see their own five) these are followed by vehicle i - 1's and vehicle i + 1's
    five, zeros where the platoon has no such vehicle.

    Episodes (``scenario``): all headways start at 20 and
      * ``"catchup"``: except ``h_0 = 20 (1.5 + U)``, U uniform in [0, 1); every speed and
        the leader's are 15 throughout: the platoon must close the leader's gap.
      * ``"slowdown"``: every speed starts at ``15 (1.5 + U)`` (one draw, so up to 37.5,
        above ``V_MAX``: the first step brakes to 30); the leader starts there too and
        slows linearly to 15 at step 299, then holds it.
    An episode is truncated after ``max_steps`` (600 = 60 s) steps.

    Coupling: ``u'_i`` and ``v'_i`` depend on ``a_i`` alone and ``h'_i`` on ``v'_i`` and
    ``v'_{i-1}``, so vehicle j's action reaches its own reward and its follower's:
    ``coupling[i, j] = 1`` iff ``j`` is ``i`` or ``i - 1`` (directed: a follower's
    action never reaches its leader's reward; vehicle 0's leader is scripted). The
    collision penalty lies outside this graph: on a step where a headway falls below
    ``H_MIN``, any action that changes whether it does changes every vehicle's reward.

    Departures from the original: its start for a seed counter of 0 (catch-up
    ``h_0 = 40``, slow-down speeds 30), which its configs never reach (they count from
    12), is not reproduced; its time limit is a terminal done, here a truncation (jaxpo
    bootstraps time limits); its IA2C observation omits a missing neighbour, here
    zero-padded to one width. Its global reward option
    (``coop_gamma < 0``) and spatial discount are learner settings: jaxpo's support.

    Reference policy: every vehicle the human-driver OVM, ``(α, β) = (0.5, 0.5)``.
    """

    name = "cacc"

    def __init__(
        self,
        scenario: str = "catchup",
        num_vehicles: int = 8,
        reward_norm: float = 800.0,
        safety_weight: float = 5.0,
        collision_hold: int = 60,
        neighbour_obs: bool = True,
        max_steps: int = 600,
    ):
        if scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of 'catchup', 'slowdown', got {scenario!r}")
        if not isinstance(neighbour_obs, (bool, np.bool_)):
            raise ValueError(f"neighbour_obs must be true or false, got {neighbour_obs!r}")
        self.scenario = scenario
        self.num_agents = self.num_vehicles = check_int(num_vehicles, "num_vehicles", 1)
        self.reward_norm = check_real(reward_norm, "reward_norm", 0.0, low_open=True)
        self.safety_weight = check_real(safety_weight, "safety_weight", 0.0)
        self.collision_hold = check_int(collision_hold, "collision_hold", 1)
        self.neighbour_obs = bool(neighbour_obs)
        self.max_steps = check_int(max_steps, "max_steps", 1)
        self.obs_dim = FEATURES * (3 if self.neighbour_obs else 1)
        self.num_actions = len(GAINS)
        self.global_state_dim = None
        n = self.num_agents
        self._coupling = (np.eye(n, dtype=np.int32) + np.eye(n, k=-1, dtype=np.int32))
        self._coupling.flags.writeable = False  # shared with callers

    @property
    def coupling(self) -> np.ndarray:
        """int32 [N, N] — ``coupling[i, j] = 1`` iff j is i or its leader i - 1 (lower bidiagonal)."""
        return self._coupling

    def leader_speed(self, lead_start: jax.Array, t: jax.Array) -> jax.Array:
        """The scripted leader's speed at step ``t`` (float32, the broadcast shape).

        ``lead_start + (15 - lead_start) min(t, 299) / 299``: a linear slow-down to 15 over
        steps 0..299 (the original's ``linspace(lead_start, 15, 300)``), then 15. Catch-up
        starts the leader at 15, so it holds 15 throughout.

        Args:
            lead_start: float, any shape — the leader's speed at step 0 (``CACCState.lead_start``).
            t: int, broadcastable with ``lead_start`` — the step.

        Returns:
            float32 — the leader's speed (m/s), the broadcast shape.
        """
        frac = jnp.minimum(t, DECEL_STEPS - 1).astype(jnp.float32) / (DECEL_STEPS - 1)
        return lead_start + (V_STAR - lead_start) * frac

    # ------------------------------------------------------------------ core
    def _ahead(self, speed: jax.Array, lead: jax.Array) -> jax.Array:
        """float32 [N] — the speed of the vehicle ahead of each: the leader, then v_0 .. v_{N-2}."""
        return jnp.concatenate([jnp.reshape(lead, (1,)), speed[:-1]])

    def _obs(self, state: CACCState) -> jax.Array:
        v, h = state.speed, state.headway
        gap_rate = self._ahead(v, self.leader_speed(state.lead_start, state.t)) - v
        own = jnp.stack([
            (v - V_STAR) / V_STAR,
            jnp.clip(gap_rate / DIFF_SCALE, -2.0, 2.0),
            jnp.clip((ovm_speed(h) - v) / DIFF_SCALE, -2.0, 2.0),
            (h + gap_rate * DT - H_STAR) / H_STAR,
            state.accel / U_MAX,
        ], axis=-1)  # [N, 5]
        if not self.neighbour_obs:
            return own
        padded = jnp.pad(own, ((1, 1), (0, 0)))  # a zero row beyond each end of the platoon
        return jnp.concatenate([own, padded[:-2], padded[2:]], axis=-1)  # own, ahead, behind

    def _timestep(self, state: CACCState, reward: jax.Array) -> TimeStep:
        over = state.t >= self.max_steps
        terminated = state.collided & ((state.t % self.collision_hold == 0) | over)
        return TimeStep(
            obs=self._obs(state),
            reward=reward,
            terminated=terminated,
            truncated=over & ~terminated,
            action_mask=jnp.ones((self.num_agents, self.num_actions), bool),
        )

    def reset(self, key: jax.Array) -> tuple[CACCState, TimeStep]:
        """A platoon at the scenario's start; one uniform draw from ``key`` sets it (class docstring)."""
        n = self.num_agents
        spread = 1.5 + jax.random.uniform(key, (), jnp.float32)
        even = jnp.full((n,), H_STAR, jnp.float32)
        if self.scenario == "catchup":
            headway, speed, lead = even.at[0].set(H_STAR * spread), jnp.full((n,), V_STAR, jnp.float32), V_STAR
        else:
            lead = V_STAR * spread
            headway, speed = even, jnp.full((n,), lead, jnp.float32)
        state = CACCState(headway=headway, speed=speed, accel=jnp.zeros((n,), jnp.float32),
                          lead_start=jnp.asarray(lead, jnp.float32), t=jnp.zeros((), jnp.int32),
                          collided=jnp.zeros((), bool))
        return state, self._timestep(state, jnp.zeros((n,), jnp.float32))

    def step(self, key: jax.Array, state: CACCState, actions: jax.Array) -> tuple[CACCState, TimeStep]:
        """actions: int [N] in {0, 1, 2, 3} (values are clipped to that range). Deterministic: ``key`` is unused."""
        del key
        alpha, beta = jnp.asarray(GAINS)[jnp.clip(jnp.asarray(actions, jnp.int32), 0, len(GAINS) - 1)].T
        v, h = state.speed, state.headway
        ahead = self._ahead(v, self.leader_speed(state.lead_start, state.t))
        command = alpha * (ovm_speed(h) - v) + beta * (ahead - v)
        speed = jnp.clip(v + jnp.clip(command, U_MIN, U_MAX) * DT, 0.0, V_MAX)
        accel = (speed - v) / DT
        ahead_next = self._ahead(speed, self.leader_speed(state.lead_start, state.t + 1))
        headway = h + 0.5 * DT * (ahead + ahead_next - v - speed)
        collided = state.collided | (jnp.min(headway) < H_MIN)
        cost = ((headway - H_STAR) ** 2 + SPEED_WEIGHT * (speed - V_STAR) ** 2 + ACCEL_WEIGHT * accel ** 2
                + self.safety_weight * jnp.minimum(headway - SAFE_HEADWAY, 0.0) ** 2)
        reward = jnp.where(collided, -COLLISION_PENALTY, -cost) / self.reward_norm
        still = state.collided  # a collided platoon stands still; the colliding step itself moves
        new_state = CACCState(
            headway=jnp.where(still, h, headway), speed=jnp.where(still, v, speed),
            accel=jnp.where(still, state.accel, accel), lead_start=state.lead_start, t=state.t + 1,
            collided=collided,
        )
        return new_state, self._timestep(new_state, reward)

    # ------------------------------------------------------------- policies
    def reference_policy(self, key: jax.Array, state: CACCState) -> jax.Array:
        """The human-driver OVM, ``(α, β) = (0.5, 0.5)``, for every vehicle: int32 [N] of 3.

        Deterministic; ``key`` and ``state`` are accepted for a uniform API.
        """
        del key, state
        return jnp.full((self.num_agents,), 3, jnp.int32)
