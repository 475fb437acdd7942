"""JaxMARL's continuous-control families: robot navigation (JaxNav: per-agent rewards,
lidar, a world state per agent) and Multi-Agent Brax (agents driving one body's joints,
unequal observations, brax's own time limit). Each is checked against the family's own
step and episode logic, its coupling graph (declared, and for MABrax measured), its
missing-extra error and a learning test."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpo.envs
from jaxpo import Config, runs, train
from jaxpo.core import support
from jaxpo.envs import AutoReset
from jaxpo.envs.jaxmarl import mabrax
from jaxpo.envs.jaxmarl.mabrax import MABRAX
from runtools import cli_curves


def play(env, num_envs, num_steps, act, seed=0, compiler_options=None):
    """A jitted rollout of ``env`` (an ``AutoReset`` one starts new episodes, a bare one
    runs on past its end) with actions ``act(key) -> [N, A]``: per step, the JaxMARL state
    before it, the actions, the state after it and the TimeStep, stacked ``[T, E, ...]``.
    ``compiler_options``: XLA's, for the rollout's one program."""

    def step(state, key):
        k_act, k_step = jax.random.split(key)
        actions = act(k_act)
        new, ts = env.step(k_step, state, actions)
        return new, (state, actions, new, ts)

    def run(key):
        state, _ = env.reset(key)
        return jax.lax.scan(step, state, jax.random.split(jax.random.fold_in(key, 1), num_steps))[1]

    return jax.jit(jax.vmap(run, out_axes=1), compiler_options=compiler_options)(
        jax.random.split(jax.random.PRNGKey(seed), num_envs))


# -- JaxNav: robots driving to goals; an episode ends when all arrived or crashed -------------


@pytest.fixture(scope="module")
def nav():
    return jaxpo.envs.make("jaxnav", max_steps=60)


def test_jaxnav_sizes_and_one_step_against_jaxmarl(nav):
    assert (nav.num_agents, nav.obs_dim, nav.num_actions, nav.continuous, nav.max_steps) == (2, 205, 2, True, 60)
    np.testing.assert_array_equal(nav.coupling, np.ones((2, 2)))  # rewards blended with the team mean; robots collide
    key = jax.random.PRNGKey(0)
    state, ts = nav.reset(key)
    np.testing.assert_array_equal(ts.global_state, nav.env.get_world_state(state))  # one world state per agent
    assert ts.global_state.shape == (2, nav.global_state_dim)
    actions = jnp.array([[0.8, 0.3], [0.5, -0.2]], jnp.float32)
    new, ts = nav.step(jax.random.PRNGKey(1), state, actions)
    raw_obs, raw_new, raw_rew, raw_dones, _ = nav.env.step_env(
        jax.random.PRNGKey(1), state, {a: actions[i] for i, a in enumerate(nav.agents)})
    np.testing.assert_array_equal(ts.obs, np.stack([raw_obs[a] for a in nav.agents]))
    np.testing.assert_array_equal(ts.reward, [raw_rew[a] for a in nav.agents])  # per-agent rewards
    np.testing.assert_array_equal(ts.global_state, nav.env.get_world_state(raw_new))
    np.testing.assert_array_equal(new.pos, raw_new.pos)
    assert bool(ts.done) == bool(raw_dones["__all__"]) is False
    # Actions outside the Box are clipped to it before JaxNav sees them.
    clipped = nav.step(jax.random.PRNGKey(1), state, 10.0 * actions)[0]
    bounded = nav.step(jax.random.PRNGKey(1), state, jnp.clip(10.0 * actions, nav.action_low, nav.action_high))[0]
    np.testing.assert_array_equal(clipped.pos, bounded.pos)


def test_jaxnav_random_episodes_end_as_its_rules_say(nav):
    """Random driving, 64 episodes of up to 60 steps: the first end of each is a
    termination exactly when every robot is at its goal or has crashed (JaxNav's own
    flags after the step), else a truncation at the 60th step; both kinds occur."""
    act = lambda key: jax.random.uniform(key, (2, 2), minval=-1.0, maxval=1.0)
    _, _, after, ts = play(nav, 64, nav.max_steps, act)  # one episode per env, steps after its end ignored
    done, terminated, truncated = (np.asarray(x) for x in (ts.done, ts.terminated, ts.truncated))
    first = done & (np.cumsum(done, axis=0) == 1)  # [T, E]: each episode's end
    assert np.all(first.sum(0) == 1)  # every episode ends within 60 steps
    arrived_or_crashed = np.asarray(jnp.all(after.goal_reached | after.move_term, axis=-1))
    np.testing.assert_array_equal(terminated[first], arrived_or_crashed[first])
    np.testing.assert_array_equal(truncated[first], ~arrived_or_crashed[first])
    steps = np.broadcast_to(np.arange(1, nav.max_steps + 1)[:, None], done.shape)
    assert np.all(steps[first & truncated] == nav.max_steps)
    assert np.all(done[:-1] <= arrived_or_crashed[:-1])  # nothing ends early but by the robots' own flags
    assert terminated[first].sum() > 5 and truncated[first].sum() > 5


def test_jaxnav_discrete_actions_are_fifteen_and_all_legal():
    env = jaxpo.envs.make("jaxnav", act_type="Discrete")
    assert (env.num_actions, env.continuous) == (15, False)
    _, ts = env.reset(jax.random.PRNGKey(0))
    assert ts.action_mask.shape == (2, 15) and bool(ts.action_mask.all())


def test_jaxnav_trains_robots_that_stop_crashing():
    """Random driving crashes into the map's walls (−4 each): ≈ −2.2 and −2.8 per
    episode for seeds 0, 1. At CI size IPPO learns to stop crashing (medians of updates
    10–14: −0.83 and −0.77; standing still costs the time penalty, −0.6 over 60 steps);
    reaching the goals (+4) takes far longer and is not tested here."""
    config = Config(env="jaxnav", env_kwargs=dict(max_steps=60), num_envs=32, num_steps=60, updates_per_chunk=5,
                    hidden=(64, 64))
    hyper, seeds, _ = runs(support.ippo(2), seeds=[0, 1], lr=1e-3)
    result = train(config, hyper, seeds, num_updates=15, progress=False)
    print("jaxnav return per update:", np.round(result.metrics["return"], 2))
    assert np.all(result.initial_return() < -1.8)
    assert np.all(np.median(result.metrics["return"][:, -5:], axis=1) > -1.2)


# -- Multi-Agent Brax: one body, its joints split among the agents ------------------------------


@pytest.fixture(scope="module")
def hopper():
    return jaxpo.envs.make("hopper_3x1", episode_length=40)


def test_mabrax_sizes_coupling_and_one_step_against_jaxmarl(hopper):
    assert (hopper.num_agents, hopper.num_actions, hopper.continuous, hopper.max_steps) == (3, 1, True, 40)
    assert list(hopper._obs_sizes) == [8, 9, 8] and hopper.obs_dim == 9  # unequal: zero-padded
    np.testing.assert_array_equal(hopper.coupling, [[1, 1, 0], [1, 1, 1], [0, 1, 1]])  # thigh - leg - foot
    key = jax.random.PRNGKey(0)
    state, ts = hopper.reset(key)
    actions = jnp.array([[0.5], [-0.3], [0.9]], jnp.float32)
    _, ts = hopper.step(key, state, actions)
    raw_obs, raw_new, raw_rew, _, _ = hopper.env.step_env(key, state, {a: actions[i] for i, a in
                                                                      enumerate(hopper.agents)})
    expected = np.stack([np.pad(raw_obs[a], (0, 9 - raw_obs[a].size)) for a in hopper.agents])
    np.testing.assert_array_equal(ts.obs, expected)
    np.testing.assert_array_equal(ts.reward, np.full(3, raw_rew["__all__"]))  # one team reward


@pytest.mark.parametrize("name, graph", [
    ("halfcheetah_6x1", [(0, 1), (1, 2), (0, 3), (3, 4), (4, 5)]),  # bfoot-bshin-bthigh-fthigh-fshin-ffoot
    ("ant_4x2", [(i, j) for i in range(4) for j in range(i + 1, 4)]),  # four legs on one torso
    ("walker2d_2x3", [(0, 1)]),
])
def test_mabrax_coupling_is_the_bodys_joint_graph(name, graph):
    env = jaxpo.envs.make(name)
    expected = np.eye(env.num_agents)
    for i, j in graph:
        expected[i, j] = expected[j, i] = 1
    np.testing.assert_array_equal(env.coupling, expected)


def test_mabrax_measured_coupling_is_complete_not_the_body_graph(hopper):
    """MABrax's reward is one team reward (forward speed, every joint's control cost), so
    every agent's action reaches every reward at once (jaxpo.envs.measure_coupling); the
    declared body graph says whose joints act on each other directly, and khop on it
    needs its diameter in hops to cover the measured graph."""
    measured = jaxpo.envs.measure_coupling(hopper, num_states=2, alternatives=1, max_time=1)
    np.testing.assert_array_equal(measured.frequency, np.ones((3, 3)))
    assert np.all(measured.magnitude == measured.magnitude[0])  # one reward: every row the same
    np.testing.assert_array_equal(measured.declared, hopper.coupling)
    assert measured.max_hops == 2  # thigh to foot


def test_mabrax_a_fall_terminates_and_the_time_limit_truncates(hopper):
    """brax's rule: the hopper is unhealthy (fell) -> a termination; 40 steps upright ->
    a truncation (brax's ``info["truncation"]``); a fall on the 40th step terminates."""
    flail = lambda key: jax.random.uniform(key, (3, 1), minval=-1.0, maxval=1.0)
    # brax's step is a large program run here once: LLVM at -O0 compiles it in 7.5 s, not
    # 12.4 s, and runs it in 1.5 s, not 0.2 s (the same episodes)
    before, actions, _, ts = play(AutoReset(hopper), 16, 200, flail,
                                  compiler_options={"xla_backend_optimization_level": 0})
    steps = np.asarray(before.info["steps"]).astype(int) + 1  # brax's step count after the step
    done, terminated, truncated = (np.asarray(x) for x in (ts.done, ts.terminated, ts.truncated))
    assert np.all(steps <= 40) and np.all(steps[truncated] == 40)
    np.testing.assert_array_equal(done & (steps < 40), terminated & (steps < 40))  # early ends are falls
    assert (terminated & (steps < 40)).sum() > 10 and truncated.sum() > 0  # flailing falls, and sometimes lasts
    assert not np.any(terminated & truncated)
    # A fall moved to the last step: the same state and actions with brax's counter at 39.
    t, e = (int(i[0]) for i in np.nonzero(terminated & (steps < 40)))
    falling = jax.tree.map(lambda x: x[t, e], before)
    last = falling.replace(info={**falling.info, "steps": jnp.full_like(falling.info["steps"], 39)})
    _, ts = hopper.step(jax.random.PRNGKey(0), last, actions[t, e])
    assert bool(ts.terminated) and not bool(ts.truncated)
    upright = jax.tree.map(lambda x: x[0, 0], before)  # the first step of an episode: healthy
    _, ts = hopper.step(jax.random.PRNGKey(0), upright.replace(info={**upright.info, "steps": jnp.full_like(
        upright.info["steps"], 39)}), actions[0, 0])
    assert bool(ts.truncated) and not bool(ts.terminated)


def test_mabrax_without_brax_names_the_extra_and_refuses_its_auto_reset(monkeypatch):
    with pytest.raises(ValueError, match="auto_reset=True for 'hopper_3x1': jaxpo resets episodes itself"):
        jaxpo.envs.make("hopper_3x1", auto_reset=True)
    monkeypatch.setattr(mabrax, "brax_env_class", lambda: None)  # as if brax were not installed
    with pytest.raises(ImportError, match=r'needs brax, an optional extra: pip install "jaxpo\[mabrax\]"'):
        jaxpo.envs.make("ant_4x2")


def test_the_mabrax_reference_config_trains_a_hopper_that_stays_up(tmp_path):
    """JaxMARL's IPPO-FF settings for Multi-Agent Brax (``jaxmarl_ippo_ff_mabrax``: a
    Gaussian policy, separate actor and critic, annealed learning rate), through the CLI,
    on three agents (thigh, leg, foot) of one hopper with 100-step episodes: the untrained
    team falls within a few dozen steps (return ≈ 32 for seeds 0, 1); after 3 updates it
    stays up for ≈ 100 (healthy reward 1 per step; measured medians of updates 6-10: 114
    and 110). This is the file's CLI test too: its own body, ant_4x2, is not stepped in
    CI (its coupling graph is tested above), so brax compiles one training program, not two."""
    returns = cli_curves(tmp_path, "--config", "jaxmarl_ippo_ff_mabrax", "--env", "hopper_3x1", "--env-arg",
                         "episode_length=100", "--num-envs", "32", "--num-steps", "50", "--updates-per-chunk", "10",
                         "--steps", str(10 * 32 * 50), "--seeds", "2", "--seed", "0")  # [seeds, updates]
    print("hopper return per update:", np.round(returns, 1))
    assert np.all(returns[:, 0] < 45.0)
    assert np.all(np.median(returns[:, -5:], axis=1) > 80.0)


def test_every_mabrax_name_is_supported():
    assert set(MABRAX) <= set(jaxpo.envs.registered_names())
