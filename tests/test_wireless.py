"""Tests of wireless multiple access (envs/wireless.py).

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
from jaxpo.envs.wireless import WirelessAccess, WirelessState

from envtools import batch_args, batched_step, keys, outside_variants, rollout_fn, variant_rewards

# 3 x 3 users, APs at the 4 x 4 cell corners (K = 4 APs per user). User (r, c) = 3r + c
# reaches [TL, TR, BL, BR] = APs [4r + c, 4r + c + 1, 4r + c + 4, 4r + c + 5].
SMALL = dict(num_users=9, layout="grid", deadline=3, arrival_prob=0.5, success_prob=0.8, max_steps=40)
T = 50
SEEDS = 2
POLICIES = ("random", "random_access", "always_wait", "always_first")
BATCH = 5248  # the batched step's one batch size (= the coupling probe's 64 x 82)


def _policies(env):
    """Called as policy(state, key, rand): a policy key [2] and rand [N] numpy-drawn
    random actions."""
    n = env.num_agents
    return [
        lambda s, k, rand: rand,  # uniformly random, drawn by numpy
        lambda s, k, rand: env.reference_policy(k, s),  # default transmit_prob 0.5
        lambda s, k, rand: jnp.zeros((n,), jnp.int32),
        lambda s, k, rand: jnp.ones((n,), jnp.int32),  # own top-left AP: no two users share it
    ]


@pytest.fixture(scope="module")
def env():
    return AutoReset(WirelessAccess(**SMALL))


@pytest.fixture(scope="module")
def roll_fn(env):
    """jit(vmap) over 8 envs = SEEDS seeds x 4 policies (common random numbers per seed)."""
    return rollout_fn(env, _policies(env))


def _batch_args(seed):
    return batch_args(seed, SEEDS, T, len(POLICIES), num_agents=9, num_actions=5, policy_keys=True)


@pytest.fixture(scope="module")
def roll(roll_fn):
    """Outputs [E, T, ...] as numpy."""
    return jax.tree.map(np.asarray, roll_fn(*_batch_args(0)))


@pytest.fixture(scope="module")
def vstep():
    """Batched step for hand-made states and the probe: one compile at BATCH."""
    return batched_step(WirelessAccess(**SMALL).step, BATCH)


# --------------------------------------------------------------------- protocol
def test_shapes_and_dtypes(env, roll):
    states, ts, actions = roll
    e, n, d = SEEDS * len(POLICIES), 9, SMALL["deadline"]
    assert env.num_actions == 5 and env.obs_dim == d + 4
    assert ts.obs.shape == (e, T, n, d + 4) and ts.obs.dtype == np.float32
    assert ts.final_obs.shape == ts.obs.shape and ts.final_obs.dtype == np.float32
    assert ts.reward.shape == (e, T, n) and ts.reward.dtype == np.float32
    assert ts.terminated.shape == (e, T) and ts.terminated.dtype == bool and ts.truncated.dtype == bool
    assert ts.action_mask.shape == (e, T, n, 5) and ts.action_mask.all()
    assert states.queue.shape == (e, T, n, d) and states.queue.dtype == bool
    assert actions.shape == (e, T, n) and actions.min() >= 0 and actions.max() <= 4
    assert set(np.unique(ts.reward)) <= {0.0, 1.0}
    assert env.global_state_dim is None and ts.global_state is None


def test_obs_is_queue_then_ap_quality(roll):
    states, ts, _ = roll
    live = ~ts.truncated
    assert np.array_equal(ts.obs[live][..., :3], states.queue[live].astype(np.float32))
    assert np.allclose(ts.obs[..., 3:], 0.8)


def test_autoreset_truncates_at_max_steps(roll):
    states, ts, _ = roll
    m = SMALL["max_steps"]
    expected = np.zeros(T, bool)
    expected[m - 1] = True
    assert (ts.truncated == expected).all() and not ts.terminated.any()
    assert (states.t[:, m - 1] == 0).all() and (states.t[:, m] == 1).all() and (states.t[:, m - 2] == m - 1).all()
    assert (states.delivered[:, m - 1] == 0).all()  # counters restart with the episode
    ok = ~ts.truncated
    assert np.array_equal(ts.final_obs[ok], ts.obs[ok])
    assert not np.array_equal(ts.final_obs[:, m - 1], ts.obs[:, m - 1])


def test_packets_are_conserved_every_step(roll):
    states, ts, _ = roll
    assert (states.arrivals - states.delivered - states.expired == states.queue.sum(axis=(-1, -2))).all()
    live = ~ts.truncated  # rewards count deliveries
    assert (np.diff(states.delivered, axis=1, prepend=0)[live] == ts.reward.sum(-1)[live]).all()
    wait = np.arange(SEEDS) * len(POLICIES) + POLICIES.index("always_wait")
    assert (states.expired[wait, 38] > 50).all() and (states.delivered[wait] == 0).all()
    assert (states.delivered[:, 38] > 0).sum() == SEEDS * (len(POLICIES) - 1)


def test_deterministic_under_same_key(roll_fn, roll):
    again = jax.tree.map(np.asarray, roll_fn(*_batch_args(0)))
    for a, b in zip(jax.tree.leaves(roll), jax.tree.leaves(again)):
        assert np.array_equal(a, b)
    other = jax.tree.map(np.asarray, roll_fn(*_batch_args(1)))
    assert not np.array_equal(roll[0].queue, other[0].queue)


def test_random_access_beats_always_wait(roll):
    ret = roll[1].reward[:, : SMALL["max_steps"]].sum(axis=(1, 2)).reshape(SEEDS, len(POLICIES))
    rnd, ra, wait, first = ret.T
    assert (wait == 0).all() and (ra > 40).all(), ret  # ~ 9 users x 40 steps x 0.25
    # Collision-free access (everyone to its own top-left AP) beats random access.
    assert (first > ra + 20).all(), ret


# --------------------------------------------------------------- exact dynamics
def _state(queue):
    """A hand-made state (numpy, explicit dtypes: weak types would recompile)."""
    n, zero = np.shape(queue)[0], np.int32(0)
    return WirelessState(
        queue=np.asarray(queue, bool), t=zero, arrivals=np.int32(np.sum(queue)), delivered=zero,
        expired=zero, collisions=zero, last_ap=np.full((n,), -1, np.int32), last_success=np.zeros((n,), bool),
    )


@pytest.fixture(scope="module")
def scenarios(vstep):
    """Five hand-made (queue, actions) pairs, each stepped under 400 keys."""
    b = 400
    full, empty = [1, 1, 1], [0, 0, 0]
    cases = {
        # Users 0 and 1 both to AP 1 (0's TR, 1's TL): a collision.
        "collide": ([full, full] + [empty] * 7, [2, 1, 0, 0, 0, 0, 0, 0, 0]),
        # 0 to AP 1, 1 to AP 2: both alone.
        "apart": ([full, full] + [empty] * 7, [2, 2, 0, 0, 0, 0, 0, 0, 0]),
        # 1 "transmits" to AP 1 with an empty queue: it sends nothing, 0 is alone.
        "empty": ([full, empty] + [empty] * 7, [2, 1, 0, 0, 0, 0, 0, 0, 0]),
        # Users 0, 1, 3, 4 all to their shared corner AP 5.
        "four": ([full, full, empty, full, full] + [empty] * 4, [4, 3, 0, 2, 1, 0, 0, 0, 0]),
        # 0 and 2 wait with a packet at its deadline; 1 sends its earliest (slot 1) alone.
        "expiry": ([[1, 0, 1], [0, 1, 1], [1, 1, 0]] + [empty] * 6, [0, 1, 0, 0, 0, 0, 0, 0, 0]),
    }
    states = [_state(q) for q, _ in cases.values()]
    stacked = jax.tree.map(lambda *x: np.repeat(np.stack(x), b, axis=0), *states)
    actions = np.repeat(np.array([a for _, a in cases.values()]), b, axis=0)
    out = vstep(keys(21, len(cases) * b), stacked, actions)
    return {name: jax.tree.map(lambda x: x[i * b:(i + 1) * b], out) for i, name in enumerate(cases)}


def test_collision_fails_both(scenarios):
    new, ts = scenarios["collide"]
    assert (ts.reward == 0).all() and (new.collisions == 2).all()
    assert (new.last_ap[:, :2] == 1).all() and not new.last_success.any()
    assert (new.queue[:, :2, :2] == 1).all()  # nothing left: both still hold their packets
    new, ts = scenarios["four"]
    assert (ts.reward == 0).all() and (new.collisions == 4).all() and (new.last_ap[:, [0, 1, 3, 4]] == 5).all()


def test_lone_senders_succeed_with_success_prob(scenarios):
    new, ts = scenarios["apart"]
    assert abs(ts.reward[:, 0].mean() - 0.8) < 0.08 and abs(ts.reward[:, 1].mean() - 0.8) < 0.08
    assert (new.collisions == 0).all() and (new.last_success == (ts.reward == 1)).all()
    new, ts = scenarios["empty"]
    assert abs(ts.reward[:, 0].mean() - 0.8) < 0.08 and (ts.reward[:, 1:] == 0).all()
    assert (new.last_ap[:, 1:] == -1).all() and (new.collisions == 0).all()


def test_expiry_and_earliest_deadline_first(scenarios):
    new, ts = scenarios["expiry"]
    q = new.queue[:, :, :2]  # the last slot holds this step's random arrival
    assert (q[:, 0] == [0, 1]).all() and (q[:, 2] == [1, 0]).all()
    ok = ts.reward[:, 1] == 1
    assert abs(ok.mean() - 0.8) < 0.08
    assert (q[ok, 1] == [0, 1]).all() and (q[~ok, 1] == [1, 1]).all()
    assert (new.expired == 2).all()
    assert (new.arrivals - new.delivered - new.expired == new.queue.sum((1, 2))).all()
    assert 0.3 < new.queue[:, :, 2].mean() < 0.7  # arrivals with arrival_prob 0.5


# --------------------------------------------------------------------- coupling
def test_coupling_by_hand():
    # Line, default APs: user i reaches APs i, i + 1 -> neighbours share one.
    line = WirelessAccess(num_users=4)
    assert np.array_equal(line.access, [[0, 1], [1, 2], [2, 3], [3, 4]])
    assert np.array_equal(line.coupling, [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]])
    # Line, 6 users on 4 APs: pairs of users sit in the same gap.
    dense = WirelessAccess(num_users=6, num_aps=4)
    assert np.array_equal(dense.access, [[0, 1], [0, 1], [1, 2], [1, 2], [2, 3], [2, 3]])
    pair = np.ones((2, 2), int)
    expected = np.block([[pair, pair, 0 * pair], [pair, pair, pair], [0 * pair, pair, pair]])
    assert np.array_equal(dense.coupling, expected)
    # Grid 2 x 3, APs at the 3 x 4 corners: users sharing a corner are king-move neighbours.
    grid = WirelessAccess(num_users=6, layout="grid", grid_shape=(2, 3))
    assert np.array_equal(grid.access[4], [5, 6, 9, 10])
    assert np.array_equal(grid.coupling, [
        [1, 1, 0, 1, 1, 0],
        [1, 1, 1, 1, 1, 1],
        [0, 1, 1, 0, 1, 1],
        [1, 1, 0, 1, 1, 0],
        [1, 1, 1, 1, 1, 1],
        [0, 1, 1, 0, 1, 1],
    ])
    assert np.array_equal(AutoReset(grid).coupling, grid.coupling)


@pytest.fixture(scope="module")
def probe(roll, vstep):
    """Rewards of one step from 64 sampled reachable states under action variants:
    [S, 1 + N*A + N*P, N] = base, agent j set to each action b, P re-draws of
    everything outside each agent i's coupling neighbourhood."""
    n, a, p = 9, 5, 4
    cpl = WirelessAccess(**SMALL).coupling.astype(bool)
    states = jax.tree.map(lambda x: x[:, 3:35:4].reshape((-1,) + x.shape[2:]), roll[0])  # [S=64, ...]
    s = states.t.shape[0]
    rng = np.random.default_rng(7)
    base = rng.integers(0, a, (s, n))
    one = np.eye(n, dtype=bool)[None, :, None, :]  # [1, j, 1, N]
    setj = np.where(one, np.arange(a)[None, None, :, None], base[:, None, None, :]).reshape(s, n * a, n)
    outside = outside_variants(rng, base, cpl, a, p)
    variants = np.concatenate([base[:, None], setj, outside], axis=1)  # [S, V, N]
    assert s * variants.shape[1] == BATCH
    return variant_rewards(vstep, states, variants), variants, n, a, p


def test_actions_outside_coupling_never_change_reward(probe):
    rew, variants, n, a, p = probe
    base, outside = rew[:, 0], rew[:, 1 + n * a:].reshape(-1, n, p, n)
    own = outside[:, np.arange(n), :, np.arange(n)]  # [N(i), S, P]: r_i when i's outside is re-drawn
    assert np.array_equal(own, np.broadcast_to(base.T[:, :, None], own.shape))
    assert (variants[:, 1 + n * a:] != variants[:, :1]).any()
    assert (outside != base[:, None, None, :]).any()  # the perturbations mattered to someone


def test_every_coupled_action_changes_reward_somewhere(probe):
    rew, _, n, a, _ = probe
    base, setj = rew[:, 0], rew[:, 1:1 + n * a].reshape(-1, n, a, n)  # setj[s, j, b, i]
    changed = (setj != base[:, None, None, :]).any(axis=(0, 2)).T  # [i, j]
    assert np.array_equal(changed, WirelessAccess(**SMALL).coupling.astype(bool))  # inside: some state; outside: none


# --------------------------------------------------------------- scale, misc
def test_1024_users_step_under_jit():
    env = WirelessAccess(num_users=1024, layout="grid")
    assert env.grid_shape == (32, 32) and env.num_aps == 33 * 33
    # Even rows: pairs (2m, 2m + 1) both send to their shared AP (TR of one, TL of the
    # other) and collide; odd rows send to their own TL AP, which nobody else uses.
    c = np.arange(1024) % 32
    even_row = (np.arange(1024) // 32) % 2 == 0
    actions = np.where(even_row, np.where(c % 2 == 0, 2, 1), 1)
    state, ts = jax.jit(env.step)(jax.random.PRNGKey(1), _state(np.ones((1024, env.deadline))), actions)
    assert ts.obs.shape == (1024, env.obs_dim) and ts.obs.dtype == jnp.float32 and ts.reward.shape == (1024,)
    r = np.asarray(ts.reward)
    assert (r[even_row] == 0).all() and int(state.collisions) == 512 and 0.7 < r[~even_row].mean() < 0.9
    assert int(state.arrivals - state.delivered - state.expired) == int(state.queue.sum())
    cp = env.coupling  # users share a corner AP with their king-move neighbours
    assert cp.shape == (1024, 1024) and cp[32].sum() == 6 and cp[32 * 5 + 5].sum() == 9 and cp[0].sum() == 4


def test_render_returns_rgb(env, roll):
    state = jax.tree.map(lambda x: x[1, 20], roll[0])
    assert (state.last_ap >= 0).any()
    img = env.render(state)
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 and img.std() > 0
    img = WirelessAccess(num_users=3).render(_state([[1, 0, 0], [0, 0, 0], [1, 1, 1]]))  # line layout
    assert img.dtype == np.uint8 and img.shape[2] == 3


def test_make_builds_from_registry():
    env = make("wireless", num_users=12, deadline=2)
    assert isinstance(env, WirelessAccess) and env.num_agents == 12 and env.obs_dim == 4


@pytest.mark.parametrize("kwargs, name", [
    (dict(num_users=1), "num_users"), (dict(num_users=4.0), "num_users"), (dict(num_users=True), "num_users"),
    (dict(layout="ring"), "layout"),
    (dict(deadline=0), "deadline"), (dict(deadline=65), "deadline"),
    (dict(arrival_prob=-0.1), "arrival_prob"), (dict(arrival_prob=1.1), "arrival_prob"),
    (dict(arrival_prob=float("nan")), "arrival_prob"),
    (dict(success_prob=1.5), "success_prob"), (dict(success_prob=[0.5, 0.5]), "success_prob"),
    (dict(max_steps=0), "max_steps"),
    (dict(num_aps=1), "num_aps"), (dict(num_aps=(3, 3)), "num_aps"),
    (dict(layout="grid", num_users=9, num_aps=16), "num_aps"),
    (dict(layout="grid", num_users=9, num_aps=(1, 4)), "num_aps"),
    (dict(layout="grid", num_users=6), "grid_shape"),
    (dict(layout="grid", num_users=6, grid_shape=(2, 2)), "grid_shape"),
    (dict(layout="grid", num_users=6, grid_shape=(0, 6)), "grid_shape"),
    (dict(grid_shape=(4, 4)), "grid_shape"),
])
def test_invalid_parameters_raise(kwargs, name):
    with pytest.raises(ValueError, match=name):
        WirelessAccess(**kwargs)
