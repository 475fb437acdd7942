"""Tests of the traffic-signal grid (envs/traffic.py).

Compilation dominates the runtime on CPU, so the module compiles three programs
once (module-scope fixtures) and the tests read their outputs: an AutoReset
rollout vmapped over 8 envs, a batched single step (fixed batch size) for
hand-made states and the coupling probe, and one step at N = 1024. The first two
are built by tests/envtools.py, which also says why test-side randomness comes
from numpy.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.envs import AutoReset, make
from jaxpo.envs.traffic import TrafficGrid, TrafficState

from envtools import batch_args, batched_step, keys, outside_variants, rollout_fn, variant_rewards

# 3 x 3 grid:   0 1 2 / 3 4 5 / 6 7 8   (sides: 0 N, 1 E, 2 S, 3 W)
SMALL = dict(rows=3, cols=3, arrival_rate=0.4, capacity=8, max_steps=40)
T = 50  # rollout length: one truncation at step 40, then 10 steps of a new episode
SEEDS = 2
POLICIES = ("random", "max_pressure", "fixed_phase", "always_switch")
BATCH = 2208  # the batched step's one batch size (= the coupling probe's 48 x 46)


def _policies(env):
    """Called as policy(state, rand), rand [N] numpy-drawn random actions."""
    n = env.num_agents
    return [
        lambda s, rand: rand,  # uniformly random, drawn by numpy
        lambda s, rand: env.reference_policy(None, s),
        lambda s, rand: jnp.zeros((n,), jnp.int32),
        lambda s, rand: 1 - s.phase,  # all-red every step: serves nobody
    ]


@pytest.fixture(scope="module")
def env():
    return AutoReset(TrafficGrid(**SMALL))


@pytest.fixture(scope="module")
def roll_fn(env):
    """jit(vmap) over 8 envs = SEEDS seeds x 4 policies (common random numbers per seed)."""
    return rollout_fn(env, _policies(env))


def _batch_args(seed):
    return batch_args(seed, SEEDS, T, len(POLICIES), num_agents=9, num_actions=2)


@pytest.fixture(scope="module")
def roll(roll_fn):
    """Outputs [E, T, ...] as numpy."""
    return jax.tree.map(np.asarray, roll_fn(*_batch_args(0)))


@pytest.fixture(scope="module")
def vstep():
    """Batched step for hand-made states and the probe: one compile at BATCH."""
    return batched_step(TrafficGrid(**SMALL).step, BATCH)


# --------------------------------------------------------------------- protocol
def test_shapes_and_dtypes(env, roll):
    states, ts, actions = roll
    n, e = env.num_agents, SEEDS * len(POLICIES)
    assert env.num_agents == 9 and env.obs_dim == 11 and env.num_actions == 2
    assert ts.obs.shape == (e, T, n, 11) and ts.obs.dtype == np.float32
    assert ts.final_obs.shape == (e, T, n, 11) and ts.final_obs.dtype == np.float32
    assert ts.reward.shape == (e, T, n) and ts.reward.dtype == np.float32
    assert ts.terminated.shape == (e, T) and ts.terminated.dtype == bool and ts.truncated.dtype == bool
    assert ts.action_mask.shape == (e, T, n, 2) and ts.action_mask.all()
    assert states.queues.shape == (e, T, n, 4) and states.queues.dtype == np.int32
    assert actions.shape == (e, T, n) and set(np.unique(actions)) <= {0, 1}
    assert np.isfinite(ts.obs).all() and np.isfinite(ts.reward).all()
    assert env.global_state_dim is None and ts.global_state is None


def test_autoreset_truncates_at_max_steps(roll):
    states, ts, _ = roll
    m = SMALL["max_steps"]
    expected = np.zeros(T, bool)
    expected[m - 1] = True
    assert (ts.truncated == expected).all() and not ts.terminated.any()
    # The truncating step hands back a fresh episode and keeps the old obs in final_obs.
    assert (states.t[:, m - 1] == 0).all() and (states.queues[:, m - 1] == 0).all()
    assert (states.t[:, m] == 1).all() and (states.t[:, m - 2] == m - 1).all()
    assert not np.allclose(ts.final_obs[:, m - 1], ts.obs[:, m - 1])
    ok = ~ts.truncated
    assert np.array_equal(ts.final_obs[ok], ts.obs[ok])


def test_vehicles_are_conserved_every_step(roll):
    states = roll[0]
    assert (states.arrivals - states.exits == states.queues.sum(axis=(-1, -2))).all()
    # Not vacuous: traffic entered, moved through, left, and was turned away.
    serving = np.tile(np.array(POLICIES) != "always_switch", SEEDS)
    assert (states.arrivals[:, 38] > 20).all() and (states.exits[serving, 38] > 0).all()
    assert states.blocked[:, 38].max() > 0


def test_capacity_bounds_queues(roll):
    q = roll[0].queues
    cap, s = SMALL["capacity"], TrafficGrid(**SMALL).service_rate
    # Full queues admit nobody; a queue below capacity admits <= 2 * service_rate.
    assert q.max() <= cap - 1 + 2 * s
    assert q.max() >= cap  # capacity is reached, so the bound has teeth


def test_reward_is_minus_scaled_queue_and_turned_away(roll):
    states, ts, _ = roll
    live = ~ts.truncated  # the truncating step's state is already the reset one
    turned = np.diff(states.blocked, axis=1, prepend=0)
    expect = -(states.queues.sum((-1, -2)) + turned) / TrafficGrid(**SMALL).queue_scale
    assert np.allclose(ts.reward.sum(-1)[live], expect[live], atol=1e-4)
    assert np.allclose(ts.obs[live][..., :4], states.queues[live] / 10.0)


def test_deterministic_under_same_key(roll_fn, roll):
    again = jax.tree.map(np.asarray, roll_fn(*_batch_args(0)))
    for a, b in zip(jax.tree.leaves(roll), jax.tree.leaves(again)):
        assert np.array_equal(a, b)
    other = jax.tree.map(np.asarray, roll_fn(*_batch_args(1)))
    assert not np.array_equal(roll[0].queues, other[0].queues)


def test_max_pressure_beats_baselines(roll):
    m = SMALL["max_steps"]
    ret = roll[1].reward[:, :m].sum(axis=(1, 2)).reshape(SEEDS, len(POLICIES))
    rnd, mp, fixed, flap = ret.T
    assert (mp > rnd + 20).all() and (mp > fixed + 20).all() and (mp > flap + 20).all(), ret


def test_switching_costs_an_all_red_step(roll):
    states = roll[0]
    flap = np.arange(SEEDS) * len(POLICIES) + POLICIES.index("always_switch")
    m = SMALL["max_steps"]
    assert (states.exits[flap, : m - 1] == 0).all()  # nothing is ever served
    assert (np.diff(states.queues[flap, : m - 1], axis=1) >= 0).all()
    assert (states.time_since_switch[flap] == 0).all()


# --------------------------------------------------------------- exact dynamics
def _state(queues, phase):
    """A hand-made state (numpy, explicit dtypes: weak types would recompile)."""
    queues, zero = np.asarray(queues, np.int32), np.int32(0)
    return TrafficState(
        queues=queues, phase=np.asarray(phase, np.int32), time_since_switch=np.full((len(queues),), 5, np.int32),
        t=zero, arrivals=queues.sum(dtype=np.int32), exits=zero, blocked=zero,
    )


def _repeat(state, b):
    return jax.tree.map(lambda x: np.broadcast_to(x, (b,) + np.shape(x)), state)


def test_service_routing_and_switching_by_hand(vstep):
    """Hand-made state under 400 keys; only internal roads are loaded, so the random
    boundary arrivals cannot touch the checked queues."""
    b = 400
    q = np.zeros((9, 4), int)
    q[4, 3] = 3  # centre, from the West (heading east): serves 2 of 3
    q[8, 3] = 1  # corner, from the West: straight/right leave the grid, left -> 5 side 2
    q[3, 0] = 2  # from the North, but 3 switches to North-South this step: no service
    phase = [0, 0, 0, 1, 1, 0, 0, 0, 1]
    actions = [0, 0, 0, 0, 1, 0, 0, 0, 1]
    state, ts = vstep(keys(11, b), _repeat(_state(q, phase), b), np.tile(actions, (b, 1)))
    nq = state.queues
    assert (nq[:, 4, 3] == 1).all()  # service_rate = 2
    straight, right, left = nq[:, 5, 3], nq[:, 7, 0], nq[:, 1, 2]  # heading east / south / north
    assert (straight + right + left == 2).all()
    assert abs(straight.mean() / 2 - 0.7) < 0.06 and abs(right.mean() / 2 - 0.15) < 0.05
    assert abs(left.mean() / 2 - 0.15) < 0.05
    assert (nq[:, 5, 2] + state.exits == 1).all() and abs(state.exits.mean() - 0.85) < 0.06
    assert (nq[:, 3, 0] == 2).all() and (state.time_since_switch[:, 3] == 0).all()
    assert (state.time_since_switch[:, 4] == 6).all()
    assert (state.arrivals - state.exits == nq.sum((1, 2))).all()
    assert np.allclose(ts.reward, -nq.sum(-1) / 10.0)  # nothing turned away here
    # Observation: own queues, the downstream queue per heading, phase, time since switch.
    o = ts.obs[:, 4]
    assert np.allclose(o[:, :4] * 10, nq[:, 4])
    assert np.allclose(o[:, 4:8] * 10, np.stack([nq[:, 7, 0], nq[:, 3, 1], nq[:, 1, 2], nq[:, 5, 3]], 1))
    assert np.allclose(o[:, 8:10], [0, 1]) and np.allclose(o[:, 10], 6 / 20)


def test_full_downstream_blocks_fifo(vstep):
    """Capacity 8: a vehicle bound for a full queue waits and blocks the ones behind."""
    b = 400
    q = np.zeros((9, 4), int)
    q[4, 3] = 3
    q[5, 3] = 8  # full, and 5 serves North-South, so it stays full
    state, _ = vstep(keys(12, b), _repeat(_state(q, [0, 0, 0, 0, 1, 0, 0, 0, 0]), b),
                     np.tile([0, 0, 0, 0, 1, 0, 0, 0, 0], (b, 1)))
    nq = state.queues
    assert (nq[:, 5, 3] == 8).all()  # nobody entered the full queue
    served = 3 - nq[:, 4, 3]
    assert (nq[:, 7, 0] + nq[:, 1, 2] == served).all()
    # The head goes straight (blocked) w.p. 0.7; then the second, w.p. 0.3 * 0.7.
    assert abs((served == 0).mean() - 0.7) < 0.06 and abs((served == 1).mean() - 0.21) < 0.06


# --------------------------------------------------------------------- coupling
def test_coupling_small_grid_by_hand():
    env = TrafficGrid(rows=2, cols=3)
    # 0 1 2
    # 3 4 5
    expected = np.array([
        [1, 1, 0, 1, 0, 0],
        [1, 1, 1, 0, 1, 0],
        [0, 1, 1, 0, 0, 1],
        [1, 0, 0, 1, 1, 0],
        [0, 1, 0, 1, 1, 1],
        [0, 0, 1, 0, 1, 1],
    ])
    assert np.array_equal(env.coupling, expected)
    assert np.array_equal(AutoReset(env).coupling, expected)


@pytest.fixture(scope="module")
def probe(roll, vstep):
    """Rewards of one step from 48 sampled reachable states under action variants:
    [S, 1 + N + N*P, N] = base, flip of each agent j, P re-draws of everything
    outside each agent i's coupling neighbourhood."""
    n, p = 9, 4
    cpl = TrafficGrid(**SMALL).coupling.astype(bool)
    states = jax.tree.map(lambda x: x[:, 6:36:5].reshape((-1,) + x.shape[2:]), roll[0])  # [S=48, ...]
    s = states.t.shape[0]
    rng = np.random.default_rng(7)
    base = rng.integers(0, 2, (s, n))
    flips = base[:, None, :] ^ np.eye(n, dtype=base.dtype)[None]  # [S, N(j), N]
    outside = outside_variants(rng, base, cpl, 2, p)
    variants = np.concatenate([base[:, None], flips, outside], axis=1)  # [S, V, N]
    assert s * variants.shape[1] == BATCH
    return variant_rewards(vstep, states, variants), variants, n, p


def test_actions_outside_coupling_never_change_reward(probe):
    rew, variants, n, p = probe
    base, outside = rew[:, 0], rew[:, 1 + n:].reshape(-1, n, p, n)
    own = outside[:, np.arange(n), :, np.arange(n)]  # [N(i), S, P]: r_i when i's outside is re-drawn
    assert np.array_equal(own, np.broadcast_to(base.T[:, :, None], own.shape))
    # Not vacuous: the perturbations changed actions and other agents' rewards.
    assert (variants[:, 1 + n:] != variants[:, :1]).any()
    assert (outside != base[:, None, None, :]).any()


def test_every_coupled_action_changes_reward_somewhere(probe):
    rew, _, n, _ = probe
    base, flips = rew[:, 0], rew[:, 1:1 + n]  # flips[s, j, i]
    changed = (flips != base[:, None, :]).any(axis=0).T  # [i, j]
    assert np.array_equal(changed, TrafficGrid(**SMALL).coupling.astype(bool))  # inside: some state; outside: none


# --------------------------------------------------------------- scale, misc
def test_1024_intersections_step_under_jit():
    """Default (threefry) keys; unbounded queues."""
    env = TrafficGrid(rows=32, cols=32, arrival_rate=0.3)
    state = _state(np.full((1024, 4), 3), np.zeros(1024))
    state, ts = jax.jit(env.step)(jax.random.PRNGKey(1), state, np.arange(1024, dtype=np.int32) % 2)
    assert ts.obs.shape == (1024, 11) and ts.obs.dtype == jnp.float32 and np.isfinite(ts.obs).all()
    assert ts.reward.shape == (1024,) and int(state.exits) > 0 and int(state.blocked) == 0
    assert int(state.arrivals - state.exits) == int(state.queues.sum())
    assert env.coupling.shape == (1024, 1024) and env.coupling.sum() == 1024 + 2 * 2 * 32 * 31
    img = env.render(state)
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3


def test_render_returns_rgb(env, roll):
    img = env.render(jax.tree.map(lambda x: x[0, 30], roll[0]))
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 and img.shape[0] > 50
    assert img.std() > 0


def test_make_builds_from_registry():
    env = make("traffic_grid", rows=8, cols=5)
    assert isinstance(env, TrafficGrid) and env.num_agents == 40


@pytest.mark.parametrize("kwargs, name", [
    (dict(rows=1), "rows"), (dict(rows=33), "rows"), (dict(rows=2.0), "rows"), (dict(rows=True), "rows"),
    (dict(cols=0), "cols"), (dict(cols=40), "cols"),
    (dict(arrival_rate=-0.1), "arrival_rate"), (dict(arrival_rate=1.5), "arrival_rate"),
    (dict(arrival_rate=float("nan")), "arrival_rate"), (dict(arrival_rate="0.3"), "arrival_rate"),
    (dict(service_rate=0), "service_rate"), (dict(service_rate=17), "service_rate"),
    (dict(turn_prob=-0.5), "turn_prob"), (dict(turn_prob=1.01), "turn_prob"),
    (dict(capacity=0), "capacity"), (dict(capacity=2.5), "capacity"),
    (dict(max_steps=0), "max_steps"), (dict(max_steps=10.0), "max_steps"),
    (dict(queue_scale=0.0), "queue_scale"), (dict(queue_scale=-1.0), "queue_scale"),
])
def test_invalid_parameters_raise(kwargs, name):
    with pytest.raises(ValueError, match=name):
        TrafficGrid(**kwargs)
