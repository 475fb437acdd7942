"""Networked public goods (jaxpo.envs.public_goods) and graph helpers (jaxpo.envs.graphs).

The central checks: agent j's action reaches r_i (now and later) iff d(i, j) <= c,
and the defaults form a social dilemma (own gain < cost < team gain).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.envs import AutoReset, make
from jaxpo.envs.graphs import UNREACHABLE, grid, hop_distances, neighbourhood, ring, validate_adjacency
from jaxpo.envs.public_goods import PublicGoods, PublicGoodsState

CASES = {
    "ring8_c1": dict(num_agents=8, graph="ring", radius=1),
    "ring8_c2": dict(num_agents=8, graph="ring", radius=2),
    "grid3x3_c1": dict(num_agents=9, graph="grid", radius=1, rows=3, cols=3),
}


# ---------------------------------------------------------------- graph helpers


def floyd_warshall(a):
    n = a.shape[0]
    d = np.where(a > 0, 1.0, np.inf)
    np.fill_diagonal(d, 0.0)
    for k in range(n):
        d = np.minimum(d, d[:, k : k + 1] + d[k : k + 1, :])
    return d


def random_graph(seed, n=12, p=0.15, symmetric=True):
    rng = np.random.default_rng(seed)
    a = (rng.random((n, n)) < p).astype(np.uint8)
    if symmetric:
        a = np.triu(a, 1)
        a = a | a.T
    np.fill_diagonal(a, 0)
    return a


def test_ring_and_grid_adjacency():
    assert ring(1).tolist() == [[0]]
    assert ring(2).tolist() == [[0, 1], [1, 0]]
    r5 = ring(5)
    assert r5.dtype == np.uint8 and (r5.sum(1) == 2).all() and r5[0, 1] == r5[0, 4] == 1 and r5[0, 2] == 0
    g = grid(2, 3)  # 0 1 2 / 3 4 5
    assert (g == g.T).all() and np.trace(g) == 0 and g.sum() == 2 * (2 * 2 + 3 * 1)
    assert g[0, 1] == g[0, 3] == g[4, 5] == 1 and g[2, 3] == 0  # no wrap between rows


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("symmetric", [True, False])
def test_hop_distances_match_floyd_warshall(seed, symmetric):
    a = random_graph(seed, symmetric=symmetric)  # sparse: usually disconnected
    ref = floyd_warshall(a)
    d = hop_distances(a)
    assert d.dtype == np.int32
    np.testing.assert_array_equal(d, np.where(np.isinf(ref), UNREACHABLE, ref).astype(np.int32))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("c", [0, 1, 2, 5])
def test_neighbourhood_is_matrix_power(seed, c):
    a = random_graph(seed, p=0.2)
    step = (a + np.eye(len(a))) > 0
    ref = np.linalg.matrix_power(step.astype(np.int64), c) > 0
    np.testing.assert_array_equal(neighbourhood(a, c), ref.astype(np.uint8))


def test_hop_distances_at_1024():
    i = np.arange(1024)
    gap = np.abs(i[:, None] - i[None, :])
    np.testing.assert_array_equal(hop_distances(ring(1024)), np.minimum(gap, 1024 - gap))
    r, c = np.divmod(i, 32)
    manhattan = np.abs(r[:, None] - r[None, :]) + np.abs(c[:, None] - c[None, :])
    np.testing.assert_array_equal(hop_distances(grid(32, 32)), manhattan)


@pytest.mark.parametrize(
    "adjacency",
    [np.zeros((2, 3)), np.zeros((0, 0)), np.zeros(4), [[0, 2], [2, 0]], [[0, 1], [0, 0]], [["a", "b"], ["c", "d"]]],
)
def test_validate_adjacency_rejects(adjacency):
    with pytest.raises(ValueError, match="adjacency"):
        validate_adjacency(adjacency)


def test_validate_adjacency_drops_self_loops():
    a = validate_adjacency(np.ones((3, 3), bool))
    assert a.dtype == np.uint8 and np.trace(a) == 0 and a.sum() == 6


# ---------------------------------------------------------------- environment fixtures


def random_actions(key, env):
    return jax.random.randint(key, (env.num_agents,), 0, env.num_actions)


B = 64  # episodes per batched rollout
POLICIES = ("defect", "contribute", "random", "reference", "given")


def make_rollout(env):
    """jitted ``(keys [B, 2], use_reference, actions [B, T, N])`` -> ``(reset_ts, states, timesteps)``.

    B full episodes (T = max_steps) from ``reset(keys[b])``, acting ``actions[:, t]`` or,
    when ``use_reference``, ``env.reference_policy`` (closed loop). ``reset_ts`` is [B, ...];
    ``states`` and ``timesteps`` are after each step, [B, T, ...]. One compile serves
    every policy (no ``lax.switch``: XLA compiles are the slow part of these tests).
    """

    def episode(key, use_reference, actions):
        key_reset, key = jax.random.split(key)
        state, reset_ts = env.reset(key_reset)

        def body(state, xs):
            key_step, given = xs
            act = jnp.where(use_reference, env.reference_policy(None, state), given)
            state, ts = env.step(key_step, state, act)
            return state, (state, ts)

        return reset_ts, *jax.lax.scan(body, state, (jax.random.split(key, env.max_steps), actions))[1]

    return jax.jit(jax.vmap(episode, (0, None, 0)))


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    env = PublicGoods(**CASES[request.param])
    rollout = make_rollout(env)
    n, top, t_max = env.num_agents, env.num_actions - 1, env.max_steps

    def run(policy, seed=0, actions=None, seeds=None):
        """B episodes of ``policy`` (a name in POLICIES); "given" plays ``actions [b <= B, T, N]``
        (padded to B). ``seeds [b]``: episode k starts from PRNGKey(seeds[k]) (equal seeds:
        equal initial stocks and shocks, so only the actions differ)."""
        if seeds is None:
            keys = jax.random.split(jax.random.PRNGKey(seed), B)
        else:
            seeds = np.concatenate([seeds, np.repeat(seeds[:1], B - len(seeds))])
            keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, jnp.uint32))
        if policy == "given":
            actions = np.concatenate([actions, np.repeat(actions[:1], B - len(actions), 0)])
        elif policy == "random":
            actions = np.random.default_rng(seed).integers(0, env.num_actions, (B, t_max, n))
        else:
            actions = np.full((B, t_max, n), top if policy == "contribute" else 0)
        return rollout(keys, policy == "reference", jnp.asarray(actions, jnp.int32))

    return dict(name=request.param, env=env, run=run)


# ---------------------------------------------------------------- coupling


def test_coupling_matrix_is_bfs_radius(case):
    env = case["env"]
    d = hop_distances(env.adjacency)
    np.testing.assert_array_equal(env.coupling, (d <= env.radius).astype(np.uint8))
    assert env.coupling.shape == (env.num_agents, env.num_agents) and (np.diag(env.coupling) == 1).all()
    assert env.radius == CASES[case["name"]]["radius"]


def test_action_reaches_reward_iff_within_radius(case):
    """Empirical dependency matrix over sampled reachable states equals the coupling.

    Each group of 1 + N episodes shares a key and a random action history up to step
    t0 (so a random reachable state); at t0 group member 1 + j flips agent j's action.
    """
    env = case["env"]
    n, top, t_max = env.num_agents, env.num_actions - 1, env.max_steps
    rng = np.random.default_rng(1)
    groups = B // (1 + n)
    reward_changed = np.zeros((n, n), bool)  # [j, i]: flipping a_j changed r_i at some t0
    stock_changed = np.zeros((n, n), bool)
    for rep in range(2):
        t0s = rng.integers(0, 8, groups)
        seqs, seeds = [], []
        for g, t0 in enumerate(t0s):
            acts = rng.integers(0, env.num_actions, (t_max, n))
            seqs.append(acts)
            for j in range(n):
                flipped = acts.copy()
                flipped[t0, j] = top - flipped[t0, j]
                seqs.append(flipped)
            seeds += [100 * rep + g] * (1 + n)
        _, states, ts = case["run"]("given", actions=np.stack(seqs), seeds=np.array(seeds))
        for g, t0 in enumerate(t0s):
            rows = slice(g * (1 + n), (g + 1) * (1 + n))
            r, x = np.asarray(ts.reward[rows, t0]), np.asarray(states.stock[rows, t0])  # [1 + N, N]
            reward_changed |= r[1:] != r[:1]
            stock_changed |= x[1:] != x[:1]
    np.testing.assert_array_equal(reward_changed.T, env.coupling.astype(bool))
    np.testing.assert_array_equal(stock_changed.T, env.coupling.astype(bool))


def test_outside_actions_never_reach_future_rewards(case):
    """Over a whole episode, re-drawing every action outside N_c(i) leaves r_i's path unchanged."""
    env = case["env"]
    rng = np.random.default_rng(0)
    agents = [0, env.num_agents // 2]
    seqs = []
    for i in agents:
        inside = env.coupling[i].astype(bool)
        acts = rng.integers(0, env.num_actions, (env.max_steps, env.num_agents))
        outside_redrawn = np.where(inside, acts, rng.integers(0, env.num_actions, acts.shape))
        inside_flipped = acts.copy()
        inside_flipped[0, np.flatnonzero(inside)[-1]] ^= 1  # one inside agent, first step only
        assert (outside_redrawn != acts).any()
        seqs += [acts, outside_redrawn, inside_flipped]
    _, _, ts = case["run"]("given", actions=np.stack(seqs), seeds=np.full(len(seqs), 7))
    for n, i in enumerate(agents):
        paths = np.asarray(ts.reward[3 * n : 3 * n + 3, :, i])  # [3, T]
        np.testing.assert_array_equal(paths[1], paths[0])
        assert (paths[2] != paths[0]).sum() >= 10  # its stock carries the change forward


# ---------------------------------------------------------------- dilemma


def test_dilemma_gains(case):
    env = case["env"]
    own, team = env.contribution_gain()
    assert (own * (1 + env.noise) < env.cost).all()  # defecting pays on every sample path
    assert (team > env.cost).all()
    own50, team50 = env.contribution_gain(steps_left=50)
    np.testing.assert_allclose(own50, own * (1 - 0.8**50))
    if case["name"].startswith("ring"):
        np.testing.assert_allclose(own, 1 / (2 * env.radius + 1))
        np.testing.assert_allclose(team, 1.0)


def test_no_externality_at_radius_zero():
    env = PublicGoods(radius=0)
    np.testing.assert_array_equal(env.coupling, np.eye(8))
    own, team = env.contribution_gain()
    np.testing.assert_allclose(own, team)
    assert (own > env.cost).all()  # contributing is individually optimal: no dilemma


def test_one_contribution_hurts_self_helps_team(case):
    """Rolled out: j contributing once at t=0 (others fixed) lowers j's return, raises the team's."""
    env = case["env"]
    rng = np.random.default_rng(3)
    acts = rng.integers(0, env.num_actions, (env.max_steps, env.num_agents))
    own_gain, team_gain = env.contribution_gain(steps_left=env.max_steps)
    seqs = np.repeat(acts[None], 2 * env.num_agents, 0)
    for j in range(env.num_agents):  # sequence 2j: j defects at t=0; 2j+1: j contributes
        seqs[2 * j, 0, j], seqs[2 * j + 1, 0, j] = 0, env.num_actions - 1
    _, _, ts = case["run"]("given", actions=seqs, seeds=np.full(len(seqs), 11))
    returns = np.asarray(ts.reward, np.float64).sum(1)  # [B, N]
    for j in range(env.num_agents):
        rets = returns[2 * j], returns[2 * j + 1]
        d_own = rets[1][j] - rets[0][j]
        d_team = rets[1].sum() - rets[0].sum()
        assert -env.cost < d_own < 0 and d_team > 0
        # matches the expected gain up to the productivity shock (±noise)
        assert abs(d_own + env.cost - own_gain[j]) <= env.noise * own_gain[j] + 1e-4
        assert abs(d_team + env.cost - team_gain[j]) <= env.noise * team_gain[j] + 1e-4


def test_episode_returns_ordering(case):
    mean = {name: float(case["run"](name, seed=5)[2].reward.sum(1).mean()) for name in POLICIES[:4]}
    assert mean["reference"] > mean["contribute"] > mean["random"] > mean["defect"]
    assert mean["contribute"] - mean["defect"] > 15.0
    # Expectations (per agent, any graph): initial stock 0.25 * sum_{t=1..T} 0.8^t ≈ 1.0,
    # contributions at rate p add p * sum_t (1 - 0.8^t) - 0.5 * p * T.
    carry = 0.25 * sum(0.8**t for t in range(1, 51))
    fill = sum(1 - 0.8**t for t in range(1, 51))
    assert mean["defect"] == pytest.approx(carry, abs=0.1)
    assert mean["contribute"] == pytest.approx(carry + fill - 25.0, abs=0.15)
    assert mean["random"] == pytest.approx(carry + 0.5 * (fill - 25.0), abs=0.3)


def test_reference_policy(case):
    """Closed loop, it contributes exactly while a contribution's team gain exceeds its cost."""
    env = case["env"]
    _, states, _ = case["run"]("reference", seed=2)
    played = np.asarray(states.contribution)  # [B, T, N]: contribution made at step t
    expected = np.stack([env.contribution_gain(steps_left=env.max_steps - t)[1] > env.cost
                         for t in range(env.max_steps)])  # [T, N]
    np.testing.assert_array_equal(played, np.broadcast_to(expected, played.shape).astype(np.float32))
    assert expected[0].all() and not expected[-1].any()  # contributes early, stops at the end


def test_reference_policy_shape_dtype():
    env = PublicGoods(num_actions=3)
    state, _ = env.reset(jax.random.PRNGKey(0))
    a = env.reference_policy(jax.random.PRNGKey(1), state)
    assert a.shape == (8,) and a.dtype == jnp.int32 and (a == 2).all()


# ---------------------------------------------------------------- protocol


def test_shapes_dtypes(case):
    env = case["env"]
    n, t_max = env.num_agents, env.max_steps
    reset_ts, states, ts = case["run"]("contribute", seed=0)
    for t, lead in ((reset_ts, (B,)), (ts, (B, t_max))):
        assert t.obs.shape == (*lead, n, env.obs_dim) and env.obs_dim == 5 and t.obs.dtype == jnp.float32
        assert t.reward.shape == (*lead, n) and t.reward.dtype == jnp.float32
        assert t.terminated.shape == t.truncated.shape == lead
        assert t.terminated.dtype == t.truncated.dtype == jnp.bool_ and not t.terminated.any()
        assert t.action_mask.shape == (*lead, n, env.num_actions) and bool(t.action_mask.all())
        assert t.global_state.shape == (*lead, n, env.global_state_dim) == (*lead, n, 7)
        assert t.global_state.dtype == jnp.float32
        assert float(jnp.abs(t.obs).max()) <= 1.2 and float(jnp.abs(t.reward).max()) <= 1.2  # O(1)
    np.testing.assert_array_equal(reset_ts.reward, 0.0)
    np.testing.assert_array_equal(ts.truncated, np.broadcast_to(np.arange(1, t_max + 1) == t_max, (B, t_max)))
    assert states.stock.dtype == jnp.float32 and states.t.dtype == jnp.int32
    np.testing.assert_array_equal(states.t[0], np.arange(1, t_max + 1))
    np.testing.assert_allclose(ts.obs[0, :, 0, 4], np.arange(1, t_max + 1) / t_max, rtol=1e-6)
    np.testing.assert_array_equal(ts.obs[..., 2], 1.0)  # own last contribution


def test_dynamics_formula_three_levels():
    """No noise, zero initial stock: one step against the formula, with half contributions."""
    env = PublicGoods(num_agents=5, radius=1, num_actions=3, noise=0.0, init_stock=0.0)
    state, _ = env.reset(jax.random.PRNGKey(0))
    actions = np.array([0, 1, 2, 2, 0])
    state, ts = env.step(jax.random.PRNGKey(1), state, jnp.asarray(actions))
    a = actions / 2
    mean_nbhd = np.array([(a[(i - 1) % 5] + a[i] + a[(i + 1) % 5]) / 3 for i in range(5)])
    np.testing.assert_allclose(state.stock, 0.2 * mean_nbhd, rtol=1e-6)
    np.testing.assert_allclose(ts.reward, 0.2 * mean_nbhd - 0.5 * a, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ts.obs[:, 3], mean_nbhd, rtol=1e-6)


def test_cap_bounds_benefit():
    env = PublicGoods(cap=0.3, noise=0.0, init_stock=1.0)
    state, _ = env.reset(jax.random.PRNGKey(0))
    state = state.replace(stock=jnp.linspace(0.0, 1.0, 8))
    nxt, ts = env.step(jax.random.PRNGKey(1), state, jnp.zeros(8, jnp.int32))
    np.testing.assert_allclose(ts.reward, np.minimum(0.8 * np.linspace(0.0, 1.0, 8), 0.3), rtol=1e-6)
    assert (env.reference_policy(None, state) == (np.asarray(state.stock) < 0.3)).all()


def test_determinism(case):
    a, b, c = case["run"]("random", seed=3), case["run"]("random", seed=3), case["run"]("random", seed=4)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[2].obs, c[2].obs) and not np.array_equal(a[2].reward, c[2].reward)
    # the key alone (same actions) drives the initial stock and the shocks
    d = case["run"]("contribute", seed=3)
    e = case["run"]("contribute", seed=4)
    assert not np.array_equal(d[0].obs, e[0].obs) and not np.array_equal(d[2].reward, e[2].reward)


def test_jit_vmap_8_envs():
    """vmap over 8 environments: shapes, and each environment independent of the others."""
    env = PublicGoods()

    @jax.jit
    def reset_and_step(keys, actions):
        states, ts0 = jax.vmap(env.reset)(keys)
        states, ts = jax.vmap(env.step)(keys, states, actions)
        return ts0, states, ts

    keys = jax.random.split(jax.random.PRNGKey(2), 8)
    actions = jax.random.randint(jax.random.PRNGKey(3), (8, 8), 0, 2)
    ts0, states, ts = reset_and_step(keys, actions)
    assert ts0.obs.shape == ts.obs.shape == (8, 8, 5) and ts.reward.shape == (8, 8) and ts.truncated.shape == (8,)
    assert ts.global_state.shape == (8, 8, 7) and states.stock.shape == (8, 8)
    perm = np.array([3, 0, 7, 1, 6, 2, 5, 4])
    _, states_p, ts_p = reset_and_step(keys[perm], actions[perm])
    np.testing.assert_array_equal(ts_p.reward, ts.reward[perm])
    np.testing.assert_array_equal(states_p.stock, states.stock[perm])
    assert not np.array_equal(ts.reward[0], ts.reward[1])


def test_autoreset_truncates_at_max_steps():
    env = AutoReset(PublicGoods(max_steps=5))
    state, ts = env.reset(jax.random.PRNGKey(0))

    def body(state, k):
        ka, ks = jax.random.split(k)
        state, ts = env.step(ks, state, random_actions(ka, env))
        return state, ts

    _, traj = jax.jit(lambda s: jax.lax.scan(body, s, jax.random.split(jax.random.PRNGKey(1), 12)))(state)
    truncated = np.asarray(traj.truncated)
    np.testing.assert_array_equal(np.flatnonzero(truncated), [4, 9])
    assert not np.asarray(traj.terminated).any()
    frac_final, frac_obs = np.asarray(traj.final_obs[:, 0, 4]), np.asarray(traj.obs[:, 0, 4])
    np.testing.assert_allclose(frac_final[truncated], 1.0)  # the true last observation is kept
    np.testing.assert_allclose(frac_obs[truncated], 0.0)  # the next episode's first
    np.testing.assert_array_equal(traj.final_obs[~truncated], traj.obs[~truncated])


def test_ring_1024_under_jit():
    env = PublicGoods(num_agents=1024, radius=3)
    assert (env.coupling.sum(1) == 7).all()

    @jax.jit
    def three_steps(keys):
        states, _ = jax.vmap(env.reset)(keys)
        for _ in range(3):
            states, ts = jax.vmap(env.step)(keys, states, jnp.ones((2, 1024), jnp.int32))
        return ts

    ts = three_steps(jax.random.split(jax.random.PRNGKey(0), 2))
    assert ts.obs.shape == (2, 1024, 5) and bool(jnp.isfinite(ts.reward).all())
    assert ts.global_state.shape == (2, 1024, 7)


def test_make_registry():
    env = make("public_goods", num_agents=6, radius=2)
    assert isinstance(env, PublicGoods) and env.num_agents == 6 and env.coupling.sum() == 6 * 5


def test_custom_adjacency():
    a = np.zeros((4, 4), np.uint8)
    a[0, 1] = a[1, 0] = a[1, 2] = a[2, 1] = 1  # path 0-1-2, node 3 isolated
    env = PublicGoods(num_agents=4, graph=a, radius=1)
    np.testing.assert_array_equal(env.coupling, [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]])


INVALID = [
    (dict(num_agents=0), "num_agents"),
    (dict(num_agents=2.0), "num_agents"),
    (dict(radius=-1), "radius"),
    (dict(radius=1.5), "radius"),
    (dict(radius=True), "radius"),
    (dict(graph="torus"), "graph"),
    (dict(graph=np.zeros((3, 3))), "graph"),  # wrong size for num_agents=8
    (dict(graph=np.triu(np.ones((8, 8)), 1)), "graph"),  # not symmetric
    (dict(graph=2 * ring(8)), "graph"),  # not 0/1
    (dict(graph="grid"), "rows"),  # 8 is not a square
    (dict(graph="grid", num_agents=9, rows=2, cols=4), "rows"),
    (dict(graph="grid", num_agents=9, rows=0), "rows"),
    (dict(graph="ring", rows=2, cols=4), "rows"),
    (dict(max_steps=0), "max_steps"),
    (dict(num_actions=1), "num_actions"),
    (dict(decay=1.0), "decay"),
    (dict(decay=-0.1), "decay"),
    (dict(benefit=0.0), "benefit"),
    (dict(cost=-1.0), "cost"),
    (dict(cost=float("nan")), "cost"),
    (dict(noise=1.0), "noise"),
    (dict(init_stock=-0.5), "init_stock"),
    (dict(cap=0.0), "cap"),
]


@pytest.mark.parametrize("kwargs,param", INVALID, ids=[f"{p}-{i}" for i, (_, p) in enumerate(INVALID)])
def test_invalid_parameters(kwargs, param):
    with pytest.raises(ValueError, match=param):
        PublicGoods(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(), dict(graph="grid", num_agents=9), dict(num_agents=64, radius=2)])
def test_render_rgb(kwargs):
    env = PublicGoods(**kwargs)
    n = env.num_agents
    state = PublicGoodsState(stock=np.linspace(0, 1, n, dtype=np.float32),
                             contribution=(np.arange(n) % 2).astype(np.float32), t=np.int32(3))
    img = env.render(state)
    assert img.dtype == np.uint8 and img.shape == (320, 320, 3)
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 10  # something was drawn
