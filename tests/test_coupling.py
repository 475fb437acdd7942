"""Measured coupling (jaxpo.envs.coupling): it recovers the declared graphs of jaxpo's own
environments exactly, shows what couples the JaxMARL families, honours its policy, only
grows with the horizon, refuses bad arguments before compiling, and stands in for a
declared graph in the khop support (``support.graph: measured``). MABrax's is measured in
test_jaxmarl_control.py, on that module's hopper.

Each measurement compiles one program, so the settings are the smallest that still show
each mechanism: few states, short rollouts (``max_time``), few alternatives."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpo
from jaxpo.envs import Env, TimeStep, make, measure_coupling
from jaxpo.envs.coupling import MEASURED_SETTINGS, graph_radius, hops_to_cover
from jaxpo.envs.graphs import hop_distances, ring


class Chain(Env):
    """N agents on a directed chain: ``r_i = a_i (1 + a_{i+1})`` (the last: ``a_i``), two
    actions, no state but the clock, and no declared coupling. Agent i+1's action changes
    r_i exactly when ``a_i = 1``; agent i's own always does."""

    name = "chain"

    def __init__(self, num_agents: int = 4, max_steps: int = 8):
        self.num_agents, self.max_steps = num_agents, max_steps
        self.obs_dim, self.num_actions = 2, 2

    def _timestep(self, t, reward):
        n = self.num_agents
        obs = jnp.broadcast_to(jnp.stack([t / self.max_steps, 1.0]).astype(jnp.float32), (n, 2))
        return TimeStep(obs=obs, reward=reward, terminated=jnp.zeros((), bool), truncated=t >= self.max_steps,
                        action_mask=jnp.ones((n, 2), bool))

    def reset(self, key):
        return jnp.zeros((), jnp.int32), self._timestep(jnp.zeros((), jnp.int32), jnp.zeros(self.num_agents))

    def step(self, key, t, actions):
        a = actions.astype(jnp.float32)
        reward = a * (1.0 + jnp.append(a[1:], 0.0))
        return t + 1, self._timestep(t + 1, reward)


CHAIN_GRAPH = np.eye(4, dtype=np.uint8) + np.eye(4, k=1, dtype=np.uint8)  # graph[i, i + 1]: a_{i+1} reaches r_i


def constant_policy(action):
    return lambda key, ts: jnp.full((ts.obs.shape[0],), action, jnp.int32)


# ------------------------------------------------------------ jaxpo's own environments


@pytest.mark.parametrize("radius, graph_radius_of_ring", [(1, 4), (2, 2)])
def test_public_goods_ring_is_recovered_exactly(radius, graph_radius_of_ring):
    """Stocks are fed by the contributions within c hops and nothing else, and a changed
    contribution always changes them (the shock is >= 1 - noise > 0): every declared edge
    fires in every sample, no other ever does."""
    env = make("public_goods", num_agents=8, radius=radius)
    measured = measure_coupling(env, num_states=4)  # radius 1: the program test_cli's envs --coupling runs
    np.testing.assert_array_equal(measured.graph, env.coupling)
    np.testing.assert_array_equal(measured.frequency, env.coupling.astype(float))
    assert measured.radius == graph_radius_of_ring and measured.max_hops == 1
    np.testing.assert_array_equal(measured.samples, 4)  # two actions: one alternative per state


@pytest.fixture(scope="module")
def traffic():
    env = make("traffic_grid", rows=2, cols=3, max_steps=30)
    return env, measure_coupling(env, num_states=24), measure_coupling(env, num_states=24, horizon=3)


def test_traffic_grid_road_graph_is_recovered_exactly(traffic):
    env, one_step, _ = traffic
    np.testing.assert_array_equal(one_step.graph, env.coupling)
    assert one_step.max_hops == 1 and one_step.radius == 2


def test_a_longer_horizon_only_adds_edges(traffic):
    """The same key draws the same states, actions and alternatives at every horizon, so
    each sample that changed a reward within one step still does within three. Vehicles
    move one intersection a step: within three steps the influence travels three hops at
    most, and it does travel past the road neighbours."""
    env, one_step, three_steps = traffic
    assert np.all(three_steps.frequency >= one_step.frequency)
    assert np.all(three_steps.graph >= one_step.graph) and three_steps.graph.sum() > one_step.graph.sum()
    hops = hop_distances(env.coupling)
    assert np.all(three_steps.frequency[hops > 3] == 0) and three_steps.max_hops in (2, 3)


@pytest.mark.parametrize("kwargs", [dict(num_users=5), dict(num_users=6, layout="grid", grid_shape=(2, 3))],
                         ids=["line", "grid"])
def test_wireless_shared_access_points_are_recovered_exactly(kwargs):
    """Users collide only at an access point they share: those pairs, and no others."""
    env = make("wireless", **kwargs)
    measured = measure_coupling(env, num_states=32, max_time=1)  # reset fills the queues
    np.testing.assert_array_equal(measured.graph, env.coupling)
    assert measured.max_hops == 1


# ------------------------------------------------------------ JaxMARL families


def test_smax_team_reward_couples_every_ally():
    env = make("HeuristicEnemySMAX", scenario="3m")
    measured = measure_coupling(env, num_states=16, alternatives=2, max_time=40)
    assert np.all(measured.frequency == measured.frequency[0])  # one team reward: every row the same
    np.testing.assert_array_equal(measured.graph, np.ones((3, 3)))


def test_overcooked_delivery_is_one_team_reward():
    """A delivery pays both cooks: seen from states where a cook holds a soup near the
    counter, which random resets (``random_reset``) reach; from the fixed start a random
    policy never delivers, and the measurement then shows no coupling at all."""
    env = make("overcooked", layout="cramped_room", random_reset=True)
    measured = measure_coupling(env, num_states=256, alternatives=5, max_time=1)
    np.testing.assert_array_equal(measured.frequency[0], measured.frequency[1])
    np.testing.assert_array_equal(measured.graph, np.ones((2, 2)))


@pytest.fixture(scope="module")
def spread():
    return make("MPE_simple_spread_v3", local_ratio=0.0), make("MPE_simple_spread_v3", local_ratio=1.0)


def test_mpe_actions_reach_rewards_one_step_late(spread):
    """JaxMARL's MPE moves a particle with its old velocity before the action's force
    changes it: no action changes any reward of its own step, not even its agent's own."""
    team, _ = spread
    np.testing.assert_array_equal(measure_coupling(team, num_states=8, max_time=1).frequency, 0.0)


def test_mpe_spread_coverage_term_couples_every_agent(spread):
    """With local_ratio 0 every agent's reward is the landmark coverage term, the same for
    all: moving agent j changes it when j is the agent nearest to some landmark."""
    team, _ = spread
    measured = measure_coupling(team, num_states=16, horizon=2, max_time=1)
    assert np.all(measured.frequency == measured.frequency[0]) and np.all(measured.frequency > 0)
    np.testing.assert_array_equal(measured.graph, np.ones((3, 3)))


def test_mpe_spread_collisions_couple_agents_that_meet(spread):
    """With local_ratio 1 an agent's reward is minus its collisions, so only agents that
    meet couple, a whole collision at a time (a change is at least 1). Uniform actions
    rarely bring them together; a policy that steers every agent to the centre does."""
    _, local = spread

    def to_centre(key, ts):  # obs[2:4] is the agent's position; actions 1/2 push -x/+x, 3/4 -y/+y
        pos = ts.obs[:, 2:4]
        axis = jnp.argmax(jnp.abs(pos), axis=1)  # along the farther axis
        return (jnp.where(jnp.take_along_axis(pos, axis[:, None], 1)[:, 0] > 0, 1, 2) + 2 * axis).astype(jnp.int32)

    measured = measure_coupling(local, num_states=64, horizon=2, policy=to_centre, max_time=20)
    np.testing.assert_array_equal(measured.graph, np.ones((3, 3)))
    total_change = measured.magnitude * measured.samples  # summed |Δr_i| over agent j's samples
    np.testing.assert_allclose(total_change, np.round(total_change), atol=1e-3)  # whole collisions
    assert np.all(measured.magnitude >= measured.frequency - 1e-6)


def test_jaxnav_rewards_blended_with_the_team_mean_couple_both_robots():
    """JaxNav's default reward is ``0.5 own + 0.5 team mean``: a change of one robot's own
    reward changes both robots' rewards, in exactly the same samples."""
    env = make("jaxnav")
    measured = measure_coupling(env, num_states=8, alternatives=2, max_time=1)
    np.testing.assert_array_equal(measured.frequency[0], measured.frequency[1])
    assert np.all((measured.frequency > 0) & (measured.frequency <= 1))
    np.testing.assert_array_equal(measured.graph, np.ones((2, 2)))


# ------------------------------------------------------------ the measurement itself


def test_the_policy_draws_the_states_and_base_actions():
    """In the chain, a_{i+1} reaches r_i only when a_i = 1: always under the all-ones
    policy, never under the all-zeros one, sometimes under the default uniform one."""
    env = Chain()
    ones = measure_coupling(env, num_states=4, policy=constant_policy(1))
    zeros = measure_coupling(env, num_states=4, policy=constant_policy(0))
    uniform = measure_coupling(env, num_states=32)
    np.testing.assert_array_equal(ones.frequency, CHAIN_GRAPH.astype(float))
    np.testing.assert_array_equal(zeros.frequency, np.eye(4))
    np.testing.assert_array_equal(zeros.graph, np.eye(4))
    assert np.all((uniform.frequency[CHAIN_GRAPH == 1] > 0)) and np.all(uniform.frequency[0, 1] < 1)
    np.testing.assert_array_equal(uniform.graph, CHAIN_GRAPH)
    # No declared graph: hops count along the measured one, and the chain is connected.
    assert uniform.declared is None and uniform.max_hops == 1 and uniform.radius == 2


def test_radius_and_hops_by_hand():
    path = np.eye(4, k=1) + np.eye(4, k=-1)  # 0 - 1 - 2 - 3
    assert graph_radius(path) == 2 and graph_radius(np.eye(3)) is None and graph_radius(np.ones((1, 1))) == 0
    assert hops_to_cover(np.ones((4, 4)), path) == 3 and hops_to_cover(np.eye(4), path) == 0
    assert hops_to_cover(np.ones((6, 6)), ring(6)) == 3
    assert hops_to_cover(np.ones((2, 2)), np.eye(2)) is None  # the reference misses an edge


@pytest.mark.parametrize("kwargs, message", [
    ({"num_states": 0}, "num_states must be an integer >= 1, got 0"),
    ({"horizon": 1.5}, "horizon must be an integer >= 1, got 1.5"),
    ({"alternatives": 0}, "alternatives must be an integer >= 1"),
    ({"threshold": 1.0}, r"threshold must be a finite number in \[0, 1\), got 1.0"),
    ({"tolerance": -1e-3}, r"tolerance must be a finite number in \[0, inf\)"),
    ({"max_time": 0}, "max_time must be an integer >= 1"),
    ({"key": -1}, "key must be a JAX PRNG key"),
    ({"key": "seed"}, "key must be a JAX PRNG key"),
    ({"policy": 3}, r"policy must be a callable policy\(key, timestep\) -> actions"),
    ({"policy": lambda key, ts: jnp.zeros((3,), jnp.int32)}, r"policy must return int actions of shape \(4,\)"),
    ({"policy": lambda key, ts: jnp.zeros((4,))}, r"policy must return int actions of shape \(4,\)"),
])
def test_bad_arguments_are_named_before_anything_compiles(kwargs, message):
    with pytest.raises(ValueError, match=message):
        measure_coupling(Chain(), **kwargs)


def test_env_must_be_an_env():
    with pytest.raises(ValueError, match="env must be a jaxpo.envs.Env"):
        measure_coupling("public_goods")


# ------------------------------------------------------------ khop on a measured graph


def test_khop_trains_on_a_measured_graph(monkeypatch, tmp_path):
    """An environment that declares no coupling: khop refuses its declared graph (naming the
    way out) and builds on the measured one, exactly the chain's, then trains."""
    from jaxpo.experiments.settings import settings

    monkeypatch.setitem(jaxpo.envs.REGISTRY, "chain", Chain)
    experiment = {"config": {"env": "chain", "num_envs": 4, "num_steps": 8, "updates_per_chunk": 1, "hidden": [8]},
                  "support": {"preset": "khop", "kappa": 2},
                  "run": {"steps": 64, "progress": False, "checkpoint": False, "out": str(tmp_path), "name": "m"}}
    with pytest.raises(ValueError, match=r"env 'chain' declares none; set support.graph='measured'"):
        settings(jaxpo.Experiment().replace(**experiment))
    experiment["support"]["graph"] = "measured"
    (setting,) = settings(jaxpo.Experiment().replace(**experiment))
    np.testing.assert_array_equal(setting.support.S_A, jaxpo.support.khop(CHAIN_GRAPH, 2).S_A)
    assert MEASURED_SETTINGS["horizon"] == 2
    result = jaxpo.sweep(experiment)
    assert len(result.summary) == 1 and np.isfinite(result.summary[0]["final_return"])
