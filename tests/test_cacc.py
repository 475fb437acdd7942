"""Tests of cooperative adaptive cruise control (envs/cacc.py).

The dynamics are checked against a float64 numpy transcription of the equations in
``CACC``'s docstring (``reference_step``, ``reference_obs``), written here without the
JAX code: one transition by hand, then every step of AutoReset rollouts of both
scenarios (reference, random and mixed policies, 650 steps: collisions, their hold,
truncation and resets included). Compilation dominates on CPU, so the module compiles
one rollout per scenario and one batched step (module-scope fixtures; tests/envtools.py
says why test-side randomness comes from numpy).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpo
from jaxpo.envs import AutoReset, describe, make
from jaxpo.envs.cacc import CACC, CACCState

from envtools import batch_args, batched_step, keys, rollout_fn, variant_rewards

# Catch-up at the original's settings; slow-down with every option changed, so both
# settings of each are exercised: raw rewards, no safety term, episodes ending on the
# collision step, own observations only.
ENVS = {
    "catchup": CACC("catchup"),
    "slowdown": CACC("slowdown", reward_norm=1.0, safety_weight=0.0, collision_hold=1, neighbour_obs=False),
}
N, T, SEEDS = 8, 650, 2
POLICIES = ("reference", "random", "mostly_reference")
BATCH = 64 * 33  # the batched step's one batch size (= the coupling probe's 64 states x 33 variants)


# ------------------------------------------------------------ the equations, in numpy
def desired_speed(h):
    return np.where(h <= 5, 0.0, np.where(h >= 35, 30.0, 15.0 * (1 - np.cos(np.pi * (h - 5) / 30))))


def leader(lead_start, t):
    return lead_start + (15.0 - lead_start) * min(t, 299) / 299


def reference_step(env, h, v, u, lead_start, t, collided, actions):
    """One step from float64 state arrays: ((h', v', u', t', collided'), reward [N],
    terminated, truncated)."""
    alpha, beta = np.array([(0, 0), (0.5, 0), (0, 0.5), (0.5, 0.5)])[actions].T
    ahead = np.r_[leader(lead_start, t), v[:-1]]
    command = alpha * (desired_speed(h) - v) + beta * (ahead - v)
    v2 = np.clip(v + np.clip(command, -2.5, 2.5) * 0.1, 0.0, 30.0)
    u2 = (v2 - v) / 0.1
    h2 = h + 0.05 * (ahead + np.r_[leader(lead_start, t + 1), v2[:-1]] - v - v2)
    crash = bool(collided) or h2.min() < 1.0
    cost = (h2 - 20) ** 2 + (v2 - 15) ** 2 + 0.1 * u2 ** 2 + env.safety_weight * np.minimum(h2 - 10, 0) ** 2
    reward = (np.full(len(h), -1000.0) if crash else -cost) / env.reward_norm
    if collided:
        h2, v2, u2 = h, v, u
    over = t + 1 >= env.max_steps
    terminated = crash and ((t + 1) % env.collision_hold == 0 or over)
    return (h2, v2, u2, t + 1, crash), reward, terminated, over and not terminated


def reference_obs(env, h, v, u, lead_start, t):
    ahead = np.r_[leader(lead_start, t), v[:-1]]
    own = np.stack([(v - 15) / 15, np.clip((ahead - v) / 5, -2, 2), np.clip((desired_speed(h) - v) / 5, -2, 2),
                    (h + (ahead - v) * 0.1 - 20) / 20, u / 2.5], axis=1)
    if not env.neighbour_obs:
        return own
    zero = np.zeros((1, 5))
    return np.concatenate([own, np.r_[zero, own[:-1]], np.r_[own[1:], zero]], axis=1)


def as64(state, *index):
    """A state's fields at ``index`` as float64 numpy (h, v, u, lead_start, t, collided)."""
    pick = lambda x: np.asarray(x)[index]
    return (pick(state.headway).astype(np.float64), pick(state.speed).astype(np.float64),
            pick(state.accel).astype(np.float64), float(pick(state.lead_start)), int(pick(state.t)),
            bool(pick(state.collided)))


def make_state(h, v, u=None, lead_start=15.0, t=0, collided=False):
    """A hand-made state (numpy, explicit dtypes: weak types would recompile)."""
    return CACCState(headway=np.asarray(h, np.float32), speed=np.asarray(v, np.float32),
                     accel=np.zeros(len(h), np.float32) if u is None else np.asarray(u, np.float32),
                     lead_start=np.float32(lead_start), t=np.int32(t), collided=np.bool_(collided))


# ------------------------------------------------------------------------ fixtures
def _policies(env):
    """Called as policy(state, rand): rand [N] numpy-drawn uniform actions."""
    return [
        lambda s, rand: env.reference_policy(None, s),
        lambda s, rand: rand,
        lambda s, rand: jnp.where(rand == 0, 1, 3),  # the human OVM with a quarter of the leader-blind (0.5, 0)
    ]


@pytest.fixture(scope="module")
def rolls():
    """Per scenario: numpy (states, timesteps, actions) [E, T, ...] of E = SEEDS x 3
    policies, and the reset states [E] the rollouts started from."""
    out = {}
    for i, (name, env) in enumerate(ENVS.items()):
        auto = AutoReset(env)
        step_keys, rand, policy_id = batch_args(i, SEEDS, T, len(POLICIES), num_agents=N, num_actions=4)
        roll = jax.tree.map(np.asarray, rollout_fn(auto, _policies(env))(step_keys, rand, policy_id))
        first = jax.tree.map(np.asarray, jax.vmap(lambda k: auto.reset(k)[0])(step_keys[:, 0]))
        out[name] = roll, first
    return out


@pytest.fixture(scope="module")
def vstep():
    """Batched step of the catch-up env for hand-made states and the probe: one compile at BATCH."""
    return batched_step(ENVS["catchup"].step, BATCH)


# ------------------------------------------------------------------- by hand
def test_a_transition_by_hand(vstep):
    # Vehicle 0 is slow behind the leader (15 m/s): both gains, 2.5 m/s² at the limit;
    # vehicle 1 follows it with the leader gain only: -2.5; vehicle 2 is at the stop
    # headway (V = 0), headway gain only: -2 m/s², and inside the safety margin;
    # vehicle 3 coasts (action 0) behind it; 4..7 coast at the equilibrium (h, v) = (20, 15).
    h = [20, 20, 5, 20, 20, 20, 20, 20]
    v = [10, 15, 4, 15, 15, 15, 15, 15]
    state = make_state(h, v, u=[0, 0, 0, 0, 0, 0, 0, 1.0])
    new, ts = vstep(keys(0, 1), jax.tree.map(lambda x: np.asarray(x)[None], state), np.array([[3, 2, 1, 0, 0, 0, 0, 0]]))
    new, ts = jax.tree.map(lambda x: x[0], (new, ts))
    np.testing.assert_allclose(new.speed, [10.25, 14.75, 3.8, 15, 15, 15, 15, 15], rtol=1e-6)
    np.testing.assert_allclose(new.accel, [2.5, -2.5, -2, 0, 0, 0, 0, 0], atol=2e-5)
    # h0' = 20 + 0.05 (15 + 15 - 10 - 10.25), h1' = 20 + 0.05 (10 + 10.25 - 15 - 14.75), ...
    np.testing.assert_allclose(new.headway, [20.4875, 19.525, 6.0975, 18.89, 20, 20, 20, 20], rtol=1e-6)
    # r0 = -(0.4875² + 4.75² + 0.1·2.5²); r2 adds the safety term 5 (6.0975 - 10)²; /800.
    raw = [-23.42515625, -0.913125, -395.2670375, -1.2321, 0, 0, 0, 0]
    np.testing.assert_allclose(ts.reward * 800, raw, rtol=1e-5, atol=1e-4)
    assert new.t == 1 and not new.collided and not ts.terminated and not ts.truncated
    # Vehicle 0 sees itself, no one ahead (zeros), vehicle 1 behind; vehicle 7 no one behind.
    v_des = 15 * (1 - math.cos(math.pi * 15.4875 / 30))
    np.testing.assert_allclose(ts.obs[0, :5], [-4.75 / 15, 0.95, (v_des - 10.25) / 5, 0.475 / 20 + 0.4875 / 20, 1.0],
                               rtol=1e-5)
    assert (ts.obs[0, 5:10] == 0).all() and np.array_equal(ts.obs[0, 10:], ts.obs[1, :5])
    assert np.array_equal(ts.obs[7, 5:10], ts.obs[6, :5]) and (ts.obs[7, 10:] == 0).all()
    np.testing.assert_allclose(ts.obs[4, :5], [0, 0, 0, 0, 0], atol=1e-6)  # equilibrium
    np.testing.assert_allclose(ts.obs[7, 4], 0.0)  # the state's accel is the step's, not the one given


def test_every_step_follows_the_equations(rolls):
    """Each step of each rollout, from the state it started in, is the numpy transcription's
    to float32 precision: next state, reward, ends, and the observation it reached."""
    for name, env in ENVS.items():
        (states, ts, actions), first = rolls[name]
        starts = jax.tree.map(lambda a, b: np.concatenate([a[:, None], b[:, :-1]], axis=1), first, states)
        e = states.t.shape[0]
        reward, obs = np.zeros(ts.reward.shape), np.zeros(ts.final_obs.shape)
        ends = np.zeros((e, T, 2), bool)
        moved = np.zeros((e, T, 3, N))  # the next (h, v, u), compared where the episode goes on
        flags = np.zeros((e, T, 2), int)  # the next (t, collided)
        for i in range(e):
            for k in range(T):
                h, v, u, lead, t, collided = as64(starts, i, k)
                (h2, v2, u2, t2, crash), reward[i, k], *end = reference_step(env, h, v, u, lead, t, collided, actions[i, k])
                ends[i, k], moved[i, k], flags[i, k] = end, (h2, v2, u2), (t2, crash)
                obs[i, k] = reference_obs(env, h2, v2, u2, lead, t2)
        np.testing.assert_allclose(ts.reward, reward, rtol=1e-5, atol=1e-4, err_msg=name)
        assert np.array_equal(np.stack([ts.terminated, ts.truncated], -1), ends), name
        np.testing.assert_allclose(ts.final_obs, obs, rtol=1e-5, atol=2e-5, err_msg=name)
        going = ~ends.any(-1)  # else AutoReset started the next episode
        got = np.stack([states.headway, states.speed, states.accel], axis=2)
        np.testing.assert_allclose(got[going], moved[going], rtol=1e-6, atol=2e-5, err_msg=name)
        assert np.array_equal(np.stack([states.t, states.collided], -1)[going], flags[going]), name
        assert np.array_equal(states.lead_start[going], starts.lead_start[going]), name


def test_rollouts_reach_every_case(rolls):
    """The step-by-step check above saw collisions, their hold, truncation and resets."""
    (states, ts, _), _ = rolls["catchup"]
    random = np.arange(SEEDS) * len(POLICIES) + POLICIES.index("random")
    assert ts.terminated[random].any(axis=1).all()  # random gains collide
    held = states.collided & ~ts.terminated
    assert held.any() and (ts.reward[held] == -1000 / 800).all()
    ends = np.nonzero(ts.terminated)
    assert ((states.t[ts.terminated] == 0) & ((np.asarray(ends[1]) + 1) % 60 == 0)).all()  # reset at t % 60 == 0
    (states, ts, _), _ = rolls["slowdown"]
    crash = ts.reward[..., 0] == -1000
    assert crash.any() and np.array_equal(crash, ts.terminated)  # collision_hold=1: the collision step ends it


# ------------------------------------------------------------- episode settings
@pytest.mark.parametrize("name", ENVS)
def test_reset_distribution(name):
    env = ENVS[name]
    state, ts = jax.tree.map(np.asarray, jax.jit(jax.vmap(env.reset))(keys(11, 4000)))
    draw = (state.headway[:, 0] if name == "catchup" else state.speed[:, 0]) / (20 if name == "catchup" else 15) - 1.5
    assert draw.min() >= 0 and draw.max() < 1
    ks = np.max(np.abs(np.sort(draw) - (np.arange(4000) + 0.5) / 4000))  # Kolmogorov-Smirnov: uniform on [0, 1)
    assert ks < 0.03, ks
    if name == "catchup":
        assert (state.headway[:, 1:] == 20).all() and (state.speed == 15).all() and (state.lead_start == 15).all()
    else:
        assert (state.headway == 20).all() and (state.speed == state.speed[:, :1]).all()
        assert np.array_equal(state.lead_start, state.speed[:, 0])
    assert (state.accel == 0).all() and (state.t == 0).all() and not state.collided.any()
    assert (ts.reward == 0).all() and not (ts.terminated | ts.truncated).any()
    for i in range(3):
        h, v, u, lead, t, _ = as64(state, i)
        np.testing.assert_allclose(ts.obs[i], reference_obs(env, h, v, u, lead, t), rtol=1e-6, atol=1e-6)


def test_leader_profile_is_the_originals_linspace():
    env = ENVS["slowdown"]
    t = np.arange(700)
    for start in (15.0, 22.5, 37.4):
        expected = np.r_[np.linspace(start, 15.0, 300), np.full(400, 15.0)]
        np.testing.assert_allclose(jax.jit(env.leader_speed)(np.float32(start), t), expected, rtol=1e-6)


def test_the_reference_policy_drives_full_episodes_truncated_at_600(rolls):
    for name in ENVS:
        (states, ts, _), _ = rolls[name]
        ref = np.arange(SEEDS) * len(POLICIES) + POLICIES.index("reference")
        expected = np.zeros(T, bool)
        expected[599] = True
        assert (ts.truncated[ref] == expected).all() and not ts.terminated[ref].any() and not states.collided[ref].any()
        assert (states.t[ref, 599] == 0).all() and (states.t[ref, 598] == 599).all() and (states.t[ref, 600] == 1).all()
        assert not np.array_equal(ts.final_obs[ref, 599], ts.obs[ref, 599])  # the reset's obs, the step's final_obs
        assert np.array_equal(ts.final_obs[ref, 598], ts.obs[ref, 598])


def test_collision_penalises_everyone_and_ends_at_the_hold(vstep):
    """Vehicle 2 closes on vehicle 1 at 0.6 m/s from 1.05 m: coasting, its headway falls to
    0.99 < 1; braking (2.5 m/s²) keeps it at 1.0025. The collision pays -G to every vehicle,
    then the platoon stands still, paying -G, until t is a multiple of 60 (or the episode's end)."""
    h, v = [20, 20, 1.05, 20, 20, 20, 20, 20], [15, 15, 15.6, 15, 15, 15, 15, 15]
    coast, brake = np.zeros(N, np.int32), np.array([0, 0, 1, 0, 0, 0, 0, 0])
    starts = [make_state(h, v, t=57), make_state(h, v, t=57), make_state(h, v, t=597)]
    stack = lambda states: jax.tree.map(lambda *x: np.stack(x), *states)
    state, ts = vstep(keys(1, 3), stack(starts), np.stack([coast, brake, coast]))
    assert (ts.reward[[0, 2]] == -1000 / 800).all() and state.collided[[0, 2]].all()
    assert not state.collided[1] and (ts.reward[1] > -1000 / 800).all() and ts.reward[1, 0] == 0  # no collision
    np.testing.assert_allclose(state.headway[0, 2], 0.99, rtol=1e-6)  # the colliding step still moves
    assert not ts.terminated.any() and not ts.truncated.any()
    for t in (59, 60):  # two more steps: standing still, -G each, terminated at t = 60 (and at max_steps)
        before = state
        state, ts = vstep(keys(t, 3), state, np.stack([brake, brake, brake]))
        assert (state.t == [t, t, t + 540]).all() and (ts.reward[[0, 2]] == -1000 / 800).all()
        assert np.array_equal(state.headway[[0, 2]], before.headway[[0, 2]])
        assert np.array_equal(state.speed[[0, 2]], before.speed[[0, 2]])
        assert list(ts.terminated[[0, 2]]) == [t == 60, t == 60] and not ts.truncated[[0, 2]].any()


# --------------------------------------------------------------------- coupling
def test_coupling_is_the_directed_chain():
    expected = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]])
    assert np.array_equal(CACC(num_vehicles=4).coupling, expected)
    env = ENVS["catchup"]
    assert np.array_equal(AutoReset(env).coupling, env.coupling) and env.coupling.sum() == 2 * N - 1
    assert describe(env)["coupling"] == "graph, mean degree 0.875"
    # khop credits a vehicle with the rewards its action reaches: its own and its follower's
    credit = np.eye(4) + np.eye(4, k=1)
    assert np.array_equal(jaxpo.support.khop(CACC(num_vehicles=4).coupling, 1).S_A, credit)


def test_an_action_changes_exactly_its_own_and_its_followers_reward(rolls, vstep):
    """From 64 collision-free rollout states (headways above 5 m: one step closes a gap by at
    most 0.1/2 x 2 x 37.5 = 3.75 m, so no variant collides), each vehicle j's action set to
    each of the 4 values, the others fixed: the rewards that change are r_j and r_{j+1},
    never another, and each of those changes somewhere."""
    pool = []
    for name in ENVS:
        (states, _, _), _ = rolls[name]
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), states)
        ok = ~flat.collided & (flat.headway.min(axis=1) > 5)
        pool.append(jax.tree.map(lambda x: x[ok][:: max(1, ok.sum() // 32)][:32], flat))
    states = jax.tree.map(lambda *x: np.concatenate(x), *pool)
    s = states.t.shape[0]
    assert s == 64
    rng = np.random.default_rng(3)
    base = rng.integers(0, 4, (s, N))
    one = np.eye(N, dtype=bool)[None, :, None, :]  # [1, j, 1, N]
    setj = np.where(one, np.arange(4)[None, None, :, None], base[:, None, None, :]).reshape(s, N * 4, N)
    rewards = variant_rewards(vstep, states, np.concatenate([base[:, None], setj], axis=1))
    assert not (rewards == -1000 / 800).all(axis=-1).any()  # no variant collided
    changed = rewards[:, 1:].reshape(s, N, 4, N) != rewards[:, :1, None, :]  # [s, j, b, i]
    assert np.array_equal(changed.any(axis=(0, 2)).T, ENVS["catchup"].coupling.astype(bool))


def test_a_collision_reaches_every_reward(vstep):
    """The penalty is outside the chain: vehicle 2 braking or not decides the collision
    of the test above, and with it vehicle 0's reward, two vehicles ahead."""
    h, v = [20, 20, 1.05, 20, 20, 20, 20, 20], [15, 15, 15.6, 15, 15, 15, 15, 15]
    state = jax.tree.map(lambda x: np.stack([x, x]), make_state(h, v))
    _, ts = vstep(keys(2, 2), state, np.array([[0] * 8, [0, 0, 1, 0, 0, 0, 0, 0]]))
    assert ts.reward[0, 0] == -1000 / 800 and ts.reward[1, 0] == 0


# ------------------------------------------------------------------ the protocol
def test_shapes_and_dtypes(rolls):
    for name, env in ENVS.items():
        (states, ts, actions), _ = rolls[name]
        e = SEEDS * len(POLICIES)
        assert env.num_actions == 4 and env.obs_dim == (15 if env.neighbour_obs else 5)
        assert ts.obs.shape == (e, T, N, env.obs_dim) and ts.obs.dtype == np.float32
        assert ts.reward.shape == (e, T, N) and ts.reward.dtype == np.float32
        assert ts.terminated.dtype == bool and ts.truncated.dtype == bool and ts.action_mask.all()
        assert states.headway.dtype == np.float32 and states.t.dtype == np.int32 and ts.global_state is None
        assert env.max_steps == 600


def test_make_builds_from_the_registry():
    env = make("cacc", scenario="slowdown", num_vehicles=4, neighbour_obs=False)
    assert isinstance(env, CACC) and env.num_agents == 4 and env.obs_dim == 5 and env.scenario == "slowdown"
    assert make("cacc").scenario == "catchup"


@pytest.mark.parametrize("kwargs, name", [
    (dict(scenario="merge"), "scenario"), (dict(scenario=1), "scenario"),
    (dict(num_vehicles=0), "num_vehicles"), (dict(num_vehicles=8.0), "num_vehicles"), (dict(num_vehicles=True), "num_vehicles"),
    (dict(reward_norm=0), "reward_norm"), (dict(reward_norm=float("inf")), "reward_norm"),
    (dict(safety_weight=-1), "safety_weight"), (dict(safety_weight=float("nan")), "safety_weight"),
    (dict(collision_hold=0), "collision_hold"), (dict(collision_hold=1.5), "collision_hold"),
    (dict(neighbour_obs=1), "neighbour_obs"), (dict(neighbour_obs="yes"), "neighbour_obs"),
    (dict(max_steps=0), "max_steps"),
])
def test_invalid_parameters_raise(kwargs, name):
    with pytest.raises(ValueError, match=name):
        CACC(**kwargs)


def test_a_shipped_config_trains_two_updates(tmp_path):
    from runtools import cli_curves

    curves = cli_curves(tmp_path, "--config", "cacc_slowdown_khop1", "--num-envs", "2", "--num-steps", "60",
                        "--updates-per-chunk", "2", "--hidden", "16", "--steps", "240", "--seeds", "1")
    assert curves.shape == (1, 2)


def test_the_original_metric_of_a_trained_run_matches_an_episode_played_by_hand(tmp_path):
    """``benchmarks/cacc_metric.py``'s R̄ (N·G/L on the evaluation environment, from
    jaxpo's evaluation program) against the mean over steps of the vehicles' summed raw
    rewards, from the same episode stepped one step at a time here."""
    import sys
    from pathlib import Path

    from runtools import cli_curves

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import cacc_metric
    from jaxpo.run.evaluate import latest_groups, load_runs

    cli_curves(tmp_path, "--config", "cacc_catchup_khop1", "--num-envs", "2", "--num-steps", "60",
               "--updates-per-chunk", "2", "--hidden", "16", "--steps", "240", "--seeds", "2")
    run_dir = str(tmp_path / "run")
    config, params, runs, _ = load_runs(run_dir, max(latest_groups(run_dir).values()))
    episodes, seed, run = 3, 7, 1
    r_bar, lengths, max_steps = cacc_metric.original_metric(config, params, [r["run_id"] for r in runs], episodes, seed)
    assert r_bar.shape == lengths.shape == (2, episodes) and max_steps == 600

    # episode 0 of run 1 with evaluate.episode_loop's keys: greedy actions, so only the environment's keys matter
    env = AutoReset(make("cacc", scenario="catchup", safety_weight=0.0, reward_norm=1.0))
    policy = jaxpo.load_policy(run_dir, run=runs[run]["run_id"])
    key_reset, key = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), runs[run]["run_id"]))
    state, ts = env.reset(jax.random.split(key_reset, episodes)[0])
    step, act = jax.jit(env.step), jax.jit(policy.act)
    summed = []
    for t, key_t in enumerate(jax.random.split(key, max_steps)):
        key_act, key_env = jax.random.split(key_t)
        state, ts = step(jax.random.split(key_env, episodes)[0], state, act(key_act, ts.obs, ts.action_mask))
        summed.append(float(np.sum(np.asarray(ts.reward, np.float64))))
        if bool(ts.done):
            break
    assert lengths[run, 0] == len(summed)
    np.testing.assert_allclose(r_bar[run, 0], np.mean(summed), rtol=1e-5)
    lines = cacc_metric.score(run_dir, episodes, seed)
    assert [line["kind"] for line in lines] == ["run", "run", "config"]
    np.testing.assert_allclose(lines[run]["r_bar"], r_bar[run].mean(), rtol=1e-6)
    assert lines[-1]["episodes"] == 2 * episodes and 0 <= lines[-1]["collided"] <= 1
