"""JaxMARLAdapter (jaxpo.envs.jaxmarl): JaxMARL envs in the array protocol, checked against
JaxMARL itself; the family registry (a toy family registered and built by name) and every
family's argument checks.

Compiles dominate the runtime. Each env gets two "pair" functions (``reset2``,
``step2``) returning the adapter's result and JaxMARL's own dict result. They run
eagerly: the adapter then calls JaxMARL's jitted ``reset``/``step_env``, and the
direct JaxMARL call with the same arguments hits the same cache, so JaxMARL's
functions compile once per env. Jitted adapters are tested where jit is the point (a jitted,
vmapped, scanned rollout; local_ratio).
"""

import sys
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import jaxpo.envs
from jaxpo.envs import AutoReset
from jaxpo.envs.jaxmarl import SUPPORTED_JAXMARL, Family, JaxMARLAdapter, register, registry
from jaxpo.envs.jaxmarl.loading import load_jaxmarl, quiet_import

load_jaxmarl()
from jaxmarl.environments.multi_agent_env import MultiAgentEnv  # noqa: E402  (after the quiet import)
from jaxmarl.environments.spaces import Box, Discrete  # noqa: E402

MPE_NAMES = ("MPE_simple_spread_v3", "MPE_simple_reference_v3", "MPE_simple_speaker_listener_v4")


def with_pairs(env):
    """env plus pairs: reset2(key) -> ((state, ts), (raw_obs, raw_state));
    step2(key, state, actions) -> ((state, ts), (raw_obs, raw_state, raw_rew, raw_dones))."""

    def reset2(key):
        return env.reset(key), env.env.reset(key)

    def step2(key, state, actions):
        raw = env.env.step_env(key, state, {a: actions[i] for i, a in enumerate(env.agents)})
        return env.step(key, state, actions), raw[:4]

    return SimpleNamespace(env=env, reset2=reset2, step2=step2)


@pytest.fixture(scope="module")
def mpe():
    return {name: with_pairs(JaxMARLAdapter.from_name(name)) for name in MPE_NAMES}


def random_actions(env, key):
    """int32 [N]: a uniformly random real action per agent."""
    return jax.random.randint(key, (env.num_agents,), 0, jnp.asarray(env.agent_num_actions)).astype(jnp.int32)


def stack(d, agents):
    return np.stack([np.asarray(d[a]) for a in agents])


def check_timestep(env, ts):
    n, o, a = env.num_agents, env.obs_dim, env.num_actions
    assert ts.obs.shape == (n, o) and ts.obs.dtype == jnp.float32
    assert ts.reward.shape == (n,) and ts.reward.dtype == jnp.float32
    assert ts.terminated.shape == () and ts.terminated.dtype == jnp.bool_
    assert ts.truncated.shape == () and ts.truncated.dtype == jnp.bool_
    assert ts.action_mask.shape == (n, a) and ts.action_mask.dtype == jnp.bool_
    if env.global_state_dim is None:
        assert ts.global_state is None
    else:
        assert ts.global_state.shape == (n, env.global_state_dim) and ts.global_state.dtype == jnp.float32


def check_obs(env, ts, raw_obs):
    """ts.obs rows are JaxMARL's observations in agent order, zero-padded at the end."""
    for i, agent in enumerate(env.agents):
        size = raw_obs[agent].shape[0]
        np.testing.assert_allclose(ts.obs[i, :size], raw_obs[agent], rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(ts.obs[i, size:], 0.0)


def test_sizes_and_coupling(mpe):
    expected = {  # (N, O, A) from JaxMARL's spaces
        "MPE_simple_spread_v3": (3, 18, 5),
        "MPE_simple_reference_v3": (2, 21, 50),  # 5 moves x 10 messages
        "MPE_simple_speaker_listener_v4": (2, 11, 5),
    }
    for name, p in mpe.items():
        env = p.env
        assert (env.num_agents, env.obs_dim, env.num_actions) == expected[name]
        assert env.agents == tuple(env.env.agents)
        assert env.global_state_dim is None
        np.testing.assert_array_equal(env.coupling, np.ones((env.num_agents, env.num_agents)))
        # JaxMARL's MPE ends on the step where the *pre-step* counter reaches max_steps.
        assert env.max_steps == env.env.max_steps + 1 == 26


@pytest.mark.parametrize("name", MPE_NAMES)
def test_reset_step_match_jaxmarl(mpe, name):
    p = mpe[name]
    env, key = p.env, jax.random.PRNGKey(3)
    (state, ts), (raw_obs, _) = p.reset2(key)
    check_timestep(env, ts)
    check_obs(env, ts, raw_obs)
    np.testing.assert_array_equal(ts.reward, 0.0)
    assert not ts.terminated and not ts.truncated
    assert ts.won is None  # MPE has no win condition
    # MPE has no action masks: every real action is available, padding is not.
    np.testing.assert_array_equal(ts.action_mask, np.arange(env.num_actions) < env.agent_num_actions[:, None])

    for t in range(3):
        k_act, k_step = jax.random.split(jax.random.fold_in(key, t))
        actions = random_actions(env, k_act)
        (new_state, ts), (raw_obs, raw_state, raw_rew, _) = p.step2(k_step, state, actions)
        check_timestep(env, ts)
        check_obs(env, ts, raw_obs)
        np.testing.assert_allclose(ts.reward, stack(raw_rew, env.agents), rtol=1e-6)
        np.testing.assert_array_equal(new_state.p_pos, raw_state.p_pos)
        np.testing.assert_array_equal(new_state.p_vel, raw_state.p_vel)
        assert int(new_state.step) == t + 1
        assert not ts.terminated and not ts.truncated
        state = new_state


def test_padding_speaker_listener(mpe):
    p = mpe["MPE_simple_speaker_listener_v4"]
    env = p.env
    np.testing.assert_array_equal(env.agent_num_actions, [3, 5])  # speaker, listener
    (state, ts), _ = p.reset2(jax.random.PRNGKey(1))
    np.testing.assert_array_equal(ts.action_mask, [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(ts.obs[0, 3:], 0.0)  # speaker obs: 3 of 11 entries
    # A padded speaker action never reaches JaxMARL: it acts as action 0 (which, unlike
    # an out-of-range index, writes the speaker's message into the listener's obs).
    key = jax.random.PRNGKey(2)
    (_, padded), _ = p.step2(key, state, jnp.array([4, 1], jnp.int32))
    (_, zero), _ = p.step2(key, state, jnp.array([0, 1], jnp.int32))
    (_, one), _ = p.step2(key, state, jnp.array([1, 1], jnp.int32))
    np.testing.assert_array_equal(padded.obs, zero.obs)
    np.testing.assert_array_equal(padded.reward, zero.reward)
    assert not np.array_equal(zero.obs, one.obs)  # the speaker's action is visible


@pytest.mark.parametrize("name", ["MPE_simple_spread_v3", "MPE_simple_reference_v3"])
def test_truncation_at_time_limit(mpe, name):
    p = mpe[name]
    env, key = p.env, jax.random.PRNGKey(4)
    (state, _), _ = p.reset2(key)
    truncated, terminated = [], []
    for t in range(env.max_steps):
        k_act, k_step = jax.random.split(jax.random.fold_in(key, t))
        (state, ts), (_, _, _, raw_dones) = p.step2(k_step, state, random_actions(env, k_act))
        assert bool(ts.done) == bool(raw_dones["__all__"])
        truncated.append(bool(ts.truncated))
        terminated.append(bool(ts.terminated))
    assert truncated == [False] * (env.max_steps - 1) + [True]
    assert not any(terminated)
    assert int(state.step) == env.max_steps


def test_auto_reset_keeps_final_obs(mpe):
    p = mpe["MPE_simple_spread_v3"]
    env = p.env
    wrapped = AutoReset(env)  # eager: reuses the env's compiled reset/step_env
    key = jax.random.PRNGKey(5)
    state, ts = wrapped.reset(key)
    np.testing.assert_array_equal(ts.final_obs, ts.obs)
    actions = jnp.zeros((env.num_agents,), jnp.int32)
    for t in range(env.max_steps):
        prev_state = state
        k = jax.random.fold_in(key, t)
        state, ts = wrapped.step(k, prev_state, actions)
        assert bool(ts.truncated) == (t == env.max_steps - 1)
        assert not bool(ts.terminated)
        assert int(state.step) == (0 if t == env.max_steps - 1 else t + 1)  # restarts
    # The truncating step: final_obs is the un-reset observation, obs a fresh reset's.
    k_step, k_reset = jax.random.split(k)
    (_, raw), _ = p.step2(k_step, prev_state, actions)
    (_, fresh), _ = p.reset2(k_reset)
    assert bool(raw.truncated)
    np.testing.assert_allclose(ts.final_obs, raw.obs, rtol=1e-6)
    np.testing.assert_allclose(ts.obs, fresh.obs, rtol=1e-6)
    np.testing.assert_allclose(ts.reward, raw.reward, rtol=1e-6)
    assert not np.allclose(ts.obs, ts.final_obs)


def test_jit_vmap_scan_over_episodes(mpe):
    """One jitted program: 8 envs vmapped, AutoReset, lax.scan over a full episode."""
    p = mpe["MPE_simple_spread_v3"]
    env = p.env
    wrapped = AutoReset(env)
    num_envs, horizon = 8, env.max_steps + 1

    @jax.jit
    def rollout(key):
        keys = jax.random.split(key, num_envs)
        states, ts0 = jax.vmap(wrapped.reset)(keys)

        def body(states, k):
            ks = jax.random.split(k, num_envs)
            actions = jax.vmap(lambda kk: random_actions(env, kk))(ks)
            states, ts = jax.vmap(wrapped.step)(ks, states, actions)
            return states, (ts, actions)

        _, (ts, actions) = jax.lax.scan(body, states, jax.random.split(key, horizon))
        return keys, states, ts0, ts, actions

    key = jax.random.PRNGKey(7)
    keys, states, ts0, ts, actions = rollout(key)
    assert ts0.obs.shape == (num_envs, 3, 18) and ts0.action_mask.shape == (num_envs, 3, 5)
    assert ts.obs.shape == (horizon, num_envs, 3, 18) and ts.reward.shape == (horizon, num_envs, 3)
    assert ts.final_obs.shape == ts.obs.shape and ts.action_mask.shape == (horizon, num_envs, 3, 5)
    assert ts.terminated.shape == ts.truncated.shape == (horizon, num_envs)
    # Every env truncates exactly at its last step (then starts over), never terminates.
    expected = np.zeros((horizon, num_envs), bool)
    expected[env.max_steps - 1] = True
    np.testing.assert_array_equal(ts.truncated, expected)
    assert not ts.terminated.any()
    # Batched first steps equal single-env (eager) steps.
    ks = jax.random.split(jax.random.split(key, horizon)[0], num_envs)
    for i in (0, 5):
        state_i = jax.tree.map(lambda x: x[i], states)
        _, ts_i = wrapped.step(ks[i], state_i, actions[0, i])
        np.testing.assert_allclose(ts.obs[0, i], ts_i.obs, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ts.reward[0, i], ts_i.reward, rtol=1e-5, atol=1e-6)
    assert not np.allclose(ts.obs[0, 0], ts.obs[0, 5])


def test_local_ratio_passed_through(mpe):
    # Same state and actions; the default env has local_ratio 0.5, the other 0.
    key = jax.random.PRNGKey(6)
    actions = jnp.array([1, 2, 3], jnp.int32)
    p = mpe["MPE_simple_spread_v3"]
    zero = JaxMARLAdapter.from_name("MPE_simple_spread_v3", local_ratio=0.0)
    assert (p.env.env.local_ratio, zero.env.local_ratio) == (0.5, 0.0)
    (state, _), _ = p.reset2(key)
    (new_state, ts_half), _ = p.step2(key, state, actions)
    _, ts_zero = jax.jit(zero.step)(key, state, actions)
    # Global term -sum_l min_i |p_i - l| over the new positions.
    pos = np.asarray(new_state.p_pos)
    dist = np.linalg.norm(pos[:3, None, :] - pos[None, 3:, :], axis=-1)  # [agent, landmark]
    global_rew = -dist.min(axis=0).sum()
    np.testing.assert_allclose(ts_zero.reward, np.full(3, global_rew), rtol=1e-5)
    # local_ratio 0.5: half the global term plus half of -(agents collided with).
    local = 2.0 * (np.asarray(ts_half.reward) - 0.5 * global_rew)
    np.testing.assert_allclose(local, np.round(local), atol=1e-4)
    assert (np.round(local) <= 0).all()
    assert not np.allclose(ts_half.reward, ts_zero.reward)


def test_bad_input_raises(mpe):
    with pytest.raises(ValueError, match="MPE_simple_spread_v3"):  # lists the supported names
        JaxMARLAdapter.from_name("no_such_env")
    with pytest.raises(ValueError, match="MPE_simple_tag_v3"):  # competitive: not supported
        JaxMARLAdapter.from_name("MPE_simple_tag_v3")
    with pytest.raises(ValueError, match="MPE_simple_spread_v3.*local_ratio"):
        JaxMARLAdapter.from_name("MPE_simple_spread_v3", local_ratio=2.0)
    with pytest.raises(ValueError, match="local_ration"):  # MPE would swallow the typo
        JaxMARLAdapter.from_name("MPE_simple_spread_v3", local_ration=0.3)
    with pytest.raises(ValueError, match="unknown SMAX scenario '3x'.*2s3z"):
        JaxMARLAdapter.from_name("HeuristicEnemySMAX", scenario="3x")
    with pytest.raises(ValueError, match="MultiAgentEnv"):
        JaxMARLAdapter(object())
    env = mpe["MPE_simple_spread_v3"].env
    state = None  # shapes are checked before the state is touched
    with pytest.raises(ValueError, match="actions"):
        env.step(jax.random.PRNGKey(0), state, jnp.zeros((2,), jnp.int32))
    with pytest.raises(ValueError, match="actions"):
        env.step(jax.random.PRNGKey(0), state, jnp.zeros((3,), jnp.float32))


def test_make_and_registry():
    env = jaxpo.envs.make("MPE_simple_spread_v3", local_ratio=0.25)
    assert isinstance(env, JaxMARLAdapter) and env.name == "MPE_simple_spread_v3"
    assert env.num_agents == 3 and env.env.local_ratio == 0.25
    assert set(SUPPORTED_JAXMARL) <= set(jaxpo.envs.registered_names())


# -- SMAX: world state, action masks, termination vs truncation ------------------------


@pytest.fixture(scope="module")
def smax():
    p = with_pairs(JaxMARLAdapter.from_name("HeuristicEnemySMAX", max_steps=20))
    p.avail = p.env.env.get_avail_actions  # JaxMARL-jitted; shares the adapter's compile
    return p


def test_smax_reset_and_step_match_jaxmarl(smax):
    env = smax.env
    assert (env.num_agents, env.num_actions, env.global_state_dim) == (5, 10, 120)
    assert env.max_steps == 21  # JaxMARL's max_steps + 1, as for MPE
    np.testing.assert_array_equal(env.coupling, np.ones((5, 5)))
    (state, ts), (raw_obs, _) = smax.reset2(jax.random.PRNGKey(0))
    check_timestep(env, ts)
    check_obs(env, ts, raw_obs)
    np.testing.assert_allclose(ts.global_state, np.tile(raw_obs["world_state"], (5, 1)), rtol=1e-6)
    avail = stack(smax.avail(state), env.agents).astype(bool)
    np.testing.assert_array_equal(ts.action_mask, avail)
    assert not avail.all() and avail.any()  # attacks out of range at the start

    key = jax.random.PRNGKey(1)
    actions = jnp.array([0, 1, 2, 3, 4], jnp.int32)
    (new_state, ts), (raw_obs, _, raw_rew, _) = smax.step2(key, state, actions)
    check_timestep(env, ts)
    check_obs(env, ts, raw_obs)
    np.testing.assert_allclose(ts.global_state[3], raw_obs["world_state"], rtol=1e-6)
    np.testing.assert_allclose(ts.reward, stack(raw_rew, env.agents), rtol=1e-6)
    np.testing.assert_array_equal(ts.action_mask, stack(smax.avail(new_state), env.agents))
    assert int(new_state.state.step) == 1  # the counter lives in the nested SMAX state
    assert not ts.done


def _with(state, step=None, kill_enemies=False):
    """The state with the step counter set and/or every enemy at zero health."""
    inner = state.state
    if step is not None:
        inner = inner.replace(step=jnp.full_like(inner.step, step))
    if kill_enemies:
        inner = inner.replace(unit_health=inner.unit_health.at[5:].set(0.0))
    return state.replace(state=inner)


def test_smax_termination_vs_truncation(smax):
    env = smax.env
    (state, _), _ = smax.reset2(jax.random.PRNGKey(0))
    key, stop = jax.random.PRNGKey(2), jnp.full((5,), 4, jnp.int32)  # 4: stop
    # Time limit with the battle undecided: truncation.
    (_, ts), raw = smax.step2(key, _with(state, step=env.max_steps - 1), stop)
    assert bool(raw[3]["__all__"])
    assert bool(ts.truncated) and not bool(ts.terminated)
    # One step earlier: nothing ends.
    (_, ts), _ = smax.step2(key, _with(state, step=env.max_steps - 2), stop)
    assert not bool(ts.truncated) and not bool(ts.terminated)
    # Battle won (all enemies dead) mid-episode: termination, with the win bonus.
    (_, ts), _ = smax.step2(key, _with(state, kill_enemies=True), stop)
    assert bool(ts.terminated) and not bool(ts.truncated)
    assert (ts.reward >= 1.0).all()
    # Won on the last step: still a termination (terminal state, nothing to bootstrap).
    (_, ts), _ = smax.step2(key, _with(state, step=env.max_steps - 1, kill_enemies=True), stop)
    assert bool(ts.terminated) and not bool(ts.truncated)


def test_smax_won_flag(smax):
    """won: enemies all dead with an ally alive (JaxMARL's win bonus); a draw or a loss is not a win."""
    env = smax.env
    (state, ts), _ = smax.reset2(jax.random.PRNGKey(0))
    assert not bool(ts.won)
    key, stop = jax.random.PRNGKey(2), jnp.full((5,), 4, jnp.int32)
    (_, ts), _ = smax.step2(key, state, stop)
    assert not bool(ts.won) and not bool(ts.done)
    (_, ts), _ = smax.step2(key, _with(state, kill_enemies=True), stop)
    assert bool(ts.won)
    inner = state.state
    draw = state.replace(state=inner.replace(unit_health=jnp.zeros_like(inner.unit_health)))
    (_, ts), _ = smax.step2(key, draw, stop)
    assert bool(ts.terminated) and not bool(ts.won) and (ts.reward < 1.0).all()
    lost = state.replace(state=inner.replace(unit_health=inner.unit_health.at[:5].set(0.0)))
    (_, ts), _ = smax.step2(key, lost, stop)
    assert bool(ts.terminated) and not bool(ts.won)


@pytest.mark.parametrize("scenario, allies, actions", [("3m", 3, 8), ("2s3z", 5, 10)])
def test_smax_scenarios_by_name(scenario, allies, actions):
    env = JaxMARLAdapter.from_name("HeuristicEnemySMAX", scenario=scenario)
    assert (env.num_agents, env.num_actions) == (allies, actions)  # 4 moves, stop, one attack per enemy
    assert env.env.num_enemies == allies
    _, ts = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    assert ts.global_state.shape == (allies, env.global_state_dim)


# -- MPE with continuous actions ---------------------------------------------------------


@pytest.fixture(scope="module")
def mpe_continuous():
    return {
        name: with_pairs(JaxMARLAdapter.from_name(name, action_type="Continuous"))
        for name in ("MPE_simple_spread_v3", "MPE_simple_speaker_listener_v4")
    }


def test_continuous_spread_matches_jaxmarl_with_clipped_actions(mpe_continuous):
    p = mpe_continuous["MPE_simple_spread_v3"]
    env = p.env
    assert env.continuous and AutoReset(env).continuous
    assert (env.num_agents, env.obs_dim, env.num_actions) == (3, 18, 5)
    np.testing.assert_array_equal(env.action_low, 0.0)
    np.testing.assert_array_equal(env.action_high, 1.0)
    key = jax.random.PRNGKey(3)
    (state, ts), (raw_obs, _) = p.reset2(key)
    check_timestep(env, ts)
    check_obs(env, ts, raw_obs)
    assert ts.action_mask.all()  # every action dimension exists
    actions = jax.random.uniform(jax.random.PRNGKey(4), (3, 5), minval=-0.5, maxval=1.5)
    state2, ts2 = env.step(key, state, actions)
    raw_obs, raw_state, raw_rew, _ = env.env.step_env(
        key, state, {a: jnp.clip(actions[i], 0.0, 1.0) for i, a in enumerate(env.agents)}
    )[:4]
    check_timestep(env, ts2)
    check_obs(env, ts2, raw_obs)
    np.testing.assert_allclose(ts2.reward, stack(raw_rew, env.agents), rtol=1e-6)
    np.testing.assert_array_equal(state2.p_vel, raw_state.p_vel)
    # Unclipped, the out-of-range actions would push harder: the clip is what reached the env.
    _, unclipped = env.env.step_env(key, state, {a: actions[i] for i, a in enumerate(env.agents)})[:2]
    assert not np.allclose(raw_state.p_vel, unclipped.p_vel)
    # Continuous actions move the agents: velocity follows action[2] - action[1], action[4] - action[3].
    push = jnp.zeros((3, 5)).at[:, 2].set(1.0)
    moved, _ = env.step(key, state, push)
    assert (np.asarray(moved.p_vel[:3, 0]) > np.asarray(state.p_vel[:3, 0])).all()


def test_continuous_padding_speaker_listener(mpe_continuous):
    p = mpe_continuous["MPE_simple_speaker_listener_v4"]
    env = p.env
    np.testing.assert_array_equal(env.agent_num_actions, [3, 5])
    (state, ts), _ = p.reset2(jax.random.PRNGKey(1))
    np.testing.assert_array_equal(ts.action_mask, [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    key = jax.random.PRNGKey(2)
    actions = jnp.full((2, 5), 0.5)
    _, base = env.step(key, state, actions)
    _, padded = env.step(key, state, actions.at[0, 3:].set(9.0))  # the speaker's padding dims
    np.testing.assert_array_equal(base.obs, padded.obs)
    _, spoken = env.step(key, state, actions.at[0, 0].set(1.0))  # a real speaker dim
    assert not np.array_equal(base.obs, spoken.obs)


def test_continuous_bad_actions(mpe_continuous):
    env = mpe_continuous["MPE_simple_spread_v3"].env
    with pytest.raises(ValueError, match=r"float array of shape \(3, 5\) \(continuous env\)"):
        env.step(jax.random.PRNGKey(0), None, jnp.zeros((3,), jnp.int32))
    with pytest.raises(ValueError, match=r"float array of shape \(3, 5\)"):
        env.step(jax.random.PRNGKey(0), None, jnp.zeros((3, 4), jnp.float32))


def test_quiet_import_survives_jaxmarl_stream_reset(capsys):
    # jaxmarl's mabrax module does exactly this while importing, then jaxmarl prints.
    before = (sys.stdout, sys.stderr)
    with quiet_import():
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        print("Importing submoduled environments...")
    assert (sys.stdout, sys.stderr) == before
    assert capsys.readouterr().out == ""


# -- the family registry: one module per family, arguments checked before building ------------


@struct.dataclass
class CoinState:
    step: jax.Array
    side: jax.Array


class CoinCall(MultiAgentEnv):
    """Two players call a coin's hidden side each step; calling the same side decides the
    game (reward 1 each when it is the coin's side)."""

    def __init__(self, max_steps: int = 4):
        super().__init__(num_agents=2)
        self.observation_spaces = {a: Box(0.0, 1.0, (2,)) for a in self.agents}
        self.action_spaces = {a: Discrete(2) for a in self.agents}
        self.max_steps = max_steps

    def reset(self, key):
        state = CoinState(step=jnp.int32(0), side=jax.random.bernoulli(key).astype(jnp.int32))
        return {a: jnp.zeros(2) for a in self.agents}, state

    def step_env(self, key, state, actions):
        agree = actions["agent_0"] == actions["agent_1"]
        new = state.replace(step=state.step + 1)
        reward = (agree & (actions["agent_0"] == state.side)).astype(jnp.float32)
        done = agree | (new.step >= self.max_steps)
        obs = {a: jax.nn.one_hot(actions[a], 2) for a in self.agents}
        return obs, new, {a: reward for a in self.agents}, {"agent_0": done, "agent_1": done, "__all__": done}, {}


class CoinFamily(Family):
    """A family is one module like this: what differs from the base's defaults."""

    title = "Coin"
    names = ("coin_call",)

    def parameters(self, name):
        return {"max_steps": 4}

    def build(self, name, kwargs):
        return CoinCall(**kwargs)

    def terminal(self, env, state, actions, next_state):
        return actions["agent_0"] == actions["agent_1"]  # a call both made decides the game

    def coupling(self, env, num_agents):
        return np.ones((num_agents, num_agents), np.float32)


def test_a_new_family_is_one_registered_module(monkeypatch):
    monkeypatch.setattr(registry, "FAMILIES", dict(registry.FAMILIES))  # the toy family leaves with the test
    register(CoinFamily())
    assert "coin_call" in jaxpo.envs.registered_names()
    env = jaxpo.envs.make("coin_call", max_steps=3)
    assert isinstance(env, JaxMARLAdapter) and env.family.title == "Coin" and env.max_steps == 3
    assert env.coupling.sum() == 4 and env.num_actions == 2 and env.global_state_dim is None
    state, ts = env.reset(jax.random.PRNGKey(0))
    state, ts = env.step(jax.random.PRNGKey(1), state, jnp.asarray([0, 1]))
    assert not ts.done
    _, decided = env.step(jax.random.PRNGKey(2), state, jnp.asarray([1, 1]))
    assert bool(decided.terminated) and not bool(decided.truncated)
    state, _ = env.step(jax.random.PRNGKey(2), state, jnp.asarray([1, 0]))
    _, late = env.step(jax.random.PRNGKey(3), state, jnp.asarray([1, 0]))  # the third step: the time limit
    assert bool(late.truncated) and not bool(late.terminated)
    with pytest.raises(ValueError, match="max_steps for env 'coin_call' must be an integer, got '3'"):
        jaxpo.envs.make("coin_call", max_steps="3")
    with pytest.raises(ValueError, match=r"for JaxMARL env 'coin_call': unknown \['sides'\]; known: \['max_steps'\]"):
        jaxpo.envs.make("coin_call", sides=3)
    with pytest.raises(ValueError, match="registered to Coin already"):
        register(SimpleNamespace(names=("coin_call",), needs_arguments=(), title="Other"))
    with pytest.raises(ValueError, match="cannot render here: JaxMARL's visualisers are wired in for MPE, SMAX"):
        env.render(state)


# One argument of the wrong kind per family: (name, argument, value, message).
WRONG_ARGUMENTS = [
    ("MPE_simple_spread_v3", "local_ratio", "high", "local_ratio for env 'MPE_simple_spread_v3' must be a number, got 'high'"),
    ("MPE_simple_facmac_v1", "view_radius", "far", "view_radius for env 'MPE_simple_facmac_v1' must be a number"),
    ("HeuristicEnemySMAX", "scenario", 3,
     "scenario for env 'HeuristicEnemySMAX' must be a map name or a jaxmarl Scenario, got 3; known: .*2s3z"),
    ("LearnedPolicyEnemySMAX", "scenario", 3, "pass policy="),
    ("switch_riddle", "num_agents", "3", "num_agents for env 'switch_riddle' must be an integer, got '3'"),
    ("hanabi", "num_agents", 2.5, "num_agents for env 'hanabi' must be an integer, got 2.5"),
    ("overcooked", "layout", 3, "layout for env 'overcooked' must be a layout name or a layout dict, got 3; "
     "known: cramped_room"),
    ("overcooked", "random_reset", "yes", "random_reset for env 'overcooked' must be true or false, got 'yes'"),
    ("overcooked_v2", "layout", 3, "layout for env 'overcooked_v2' must be a layout name or a jaxmarl Layout, got 3; "
     "known: cramped_room"),
    ("overcooked_v2", "layout", "nope", "unknown Overcooked v2 layout 'nope'; known: cramped_room"),
    ("jaxnav", "map_id", 3, "map_id for env 'jaxnav' must be a map name, got 3; known: Grid-Rand"),
    ("jaxnav", "map_id", "Nowhere", "unknown JaxNav map 'Nowhere'; known: Grid-Rand"),
    ("jaxnav", "map_id", "Grid-Rand", "map_id 'Grid-Rand': JaxMARL's GridMapCircleAgents does not implement a robot's "
     "collision with the map, so its step cannot run"),  # its disc robots: the step raises NotImplementedError
    ("jaxnav", "map_id", "Grid-Rand-Barn", "map_id 'Grid-Rand-Barn' places one robot: num_agents must be 1, got 2"),
    ("hopper_3x1", "episode_length", "long", "episode_length for env 'hopper_3x1' must be an integer, got 'long'"),
]


@pytest.mark.parametrize("name, argument, value, message", WRONG_ARGUMENTS,
                         ids=[f"{n}-{a}={v!r}" for n, a, v, _ in WRONG_ARGUMENTS])
def test_an_argument_of_the_wrong_kind_is_a_one_line_error_naming_it(name, argument, value, message):
    with pytest.raises(ValueError, match=message) as raised:
        jaxpo.envs.make(name, **{argument: value})
    assert "\n" not in str(raised.value)


def test_every_family_checks_its_arguments():
    checked = {registry.FAMILIES[name].title for name, *_ in WRONG_ARGUMENTS}
    assert checked == {family.title for family in registry.families()}


@pytest.mark.parametrize("family", registry.families(), ids=lambda family: family.title)
def test_an_unknown_parameter_is_refused_with_the_known_ones(family):
    name = (*family.names, *family.needs_arguments)[0]
    expected = "no_such_parameter" if family.more_parameters else r"unknown \['no_such_parameter'\]; known: \["
    with pytest.raises(ValueError, match=expected):
        jaxpo.envs.make(name, no_such_parameter=1)
