"""State-dependent supports: active agents, and khop on each state's own coupling graph.

An environment says which agents act (an inactive one leaves the objective) and, where
its coupling follows the state, the graph of each state (``Config.interaction_hops``
builds that step's khop S_A from it).

Modules under test: ``jaxpo.envs.base`` (``TimeStep.active``, ``Env.interaction``,
``AutoReset``), the SMAX and JaxNav families' and wireless's ``active``, wireless's
``interaction``, ``jaxpo.core.rollout`` (``Transition.active``, ``interaction``),
``jaxpo.core.losses`` (the masks, per-sample S_A), ``jaxpo.core.state_supports`` and
``jaxpo.core.happo`` (the masks) and ``jaxpo.program.learner`` (aggregation and
normalisation with them). Exact parts against numpy in float64; the learner's against
a numpy reference of the same rollout.
"""

import csv
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from jaxpo.core import losses, state_supports, support
from jaxpo.envs import Env, TimeStep, make
from jaxpo.experiments.experiment import CONFIGS_DIR
from jaxpo.program.config import Config, Hyper
from jaxpo.program.learner import Learner


class Relay(Env):
    """Two agents, episodes of 6 steps ended by the time limit. Agent 0 always acts;
    agent 1 acts in the first ``lives`` states of an episode (0: never). Each agent
    earns 0.5 a step plus its own action (0 or 1) where it acts: a dead unit's team
    reward, and an action that pays only while it counts."""

    name = "relay"
    num_agents, obs_dim, num_actions, max_steps = 2, 2, 2, 6

    def __init__(self, lives: int = 3):
        self.lives = lives

    def _timestep(self, t, reward, truncated):
        obs = jnp.stack([jnp.full((2,), t / 6.0), jnp.arange(2.0)], axis=-1)
        return TimeStep(obs=obs, reward=reward, terminated=jnp.asarray(False), truncated=truncated,
                        action_mask=jnp.ones((2, 2), bool), active=self._active(t))

    def _active(self, t):
        return jnp.stack([jnp.asarray(True), t < self.lives])

    def reset(self, key):
        t = jnp.zeros((), jnp.int32)
        return t, self._timestep(t, jnp.zeros(2), jnp.asarray(False))

    def step(self, key, t, actions):
        reward = 0.5 + jnp.where(self._active(t), actions.astype(jnp.float32), 0.0)
        return t + 1, self._timestep(t + 1, reward, t + 1 >= self.max_steps)


def relay_config(lives: int, **overrides) -> Config:
    fields = dict(env=f"{__name__}:Relay", env_kwargs={"lives": lives}, num_envs=2, num_steps=12, num_epochs=1,
                  num_minibatches=2, hidden=(8,), updates_per_chunk=1, share_params=False)
    return Config(**{**fields, **overrides})


@pytest.fixture(scope="module")
def relay_rollout():
    """A rollout of Relay (lives 3) with mappo's support, and the learner's training data."""
    learner = Learner(relay_config(3))
    hyper = Hyper.create(support.mappo(2))
    state = learner.init(jax.random.PRNGKey(0), hyper)
    _, traj, (sequences, advantages, targets) = learner.collect(state, hyper)
    return learner, hyper, jax.device_get(traj), np.asarray(advantages)


def test_the_rollout_stores_who_acted(relay_rollout):
    _, _, traj, _ = relay_rollout
    t = np.arange(12)[:, None] % 6  # the state each step acted in, per environment
    np.testing.assert_array_equal(traj.active[..., 0], True)
    np.testing.assert_array_equal(traj.active[..., 1], np.broadcast_to(t < 3, (12, 2)))
    # an inactive agent's action paid nothing: only the team's 0.5
    np.testing.assert_array_equal(traj.reward[..., 1][~traj.active[..., 1]], 0.5)


def test_an_inactive_agents_advantage_leaves_every_credit_and_the_statistics(relay_rollout):
    """Per-agent GAE as without masks (an agent's return is defined whether it acts or
    not), then mappo's team credit over the active agents, normalised over the active
    entries, 0 at the inactive ones."""
    learner, hyper, traj, advantages = relay_rollout
    gamma, lam = float(hyper.gamma), float(hyper.gae_lambda)
    active = traj.active.astype(np.float64)
    terminated = np.broadcast_to(traj.terminated[..., None], traj.reward.shape)
    done = terminated | traj.truncated[..., None]
    own = np.zeros_like(traj.reward, dtype=np.float64)
    following = np.zeros(traj.reward.shape[1:])
    for t in reversed(range(12)):
        delta = traj.reward[t] + gamma * (1 - terminated[t]) * traj.final_value[t] - traj.value[t]
        following = delta + gamma * lam * (1 - done[t]) * following
        own[t] = following
    credit = (own * active) @ np.ones((2, 2)).T  # mappo: S_A = 11ᵀ over the active columns
    entries = credit[active.astype(bool)]
    expected = np.where(active.astype(bool), (credit - entries.mean()) / (entries.std() + 1e-8), 0.0)
    # training data is [S, L, N] with L = 1: S = T·E sequences, time-major within env
    np.testing.assert_allclose(advantages.reshape(12, 2, 2), expected, rtol=1e-4, atol=1e-5)


def test_masks_leave_every_part_of_the_loss_as_numpy_says():
    rng = np.random.default_rng(0)
    b, n, eps = 16, 3, 0.2
    with jax.enable_x64(True):
        new, old, adv, entropy = (rng.normal(size=(b, n)) for _ in range(4))
        new = old + 0.3 * new  # ratios away from 1, some clipped
        active = rng.uniform(size=(b, n)) < 0.6
        S_R = np.triu(np.ones((n, n)))  # term i multiplies the ratios of agents 0..i
        pi_loss, metrics = losses.policy_loss(new, old, adv, S_R, eps, active=active)
        rho_bar = np.exp((np.where(active, new - old, 0.0)) @ S_R)
        surrogate = np.minimum(rho_bar * adv, np.clip(rho_bar, 1 - eps, 1 + eps) * adv)
        np.testing.assert_allclose(pi_loss, -np.sum(np.where(active, surrogate, 0.0)) / b, rtol=1e-12)
        np.testing.assert_allclose(metrics["clip_frac"], np.mean(np.abs(rho_bar - 1)[active] > eps), rtol=1e-12)
        np.testing.assert_allclose(losses.entropy_bonus(entropy, active), np.sum(entropy[active]) / b, rtol=1e-12)
        # an inactive agent's log-probability gets no gradient from any term
        grad = jax.grad(lambda lp: losses.policy_loss(lp, old, adv, S_R, eps, active=active)[0])(new)
        assert np.all(np.asarray(grad)[~active] == 0.0) and np.any(np.asarray(grad)[active] != 0.0)
        # all active: the unmasked computation, value for value
        everyone = np.ones((b, n), bool)
        assert losses.policy_loss(new, old, adv, S_R, eps, active=everyone)[0] == losses.policy_loss(
            new, old, adv, S_R, eps)[0]


def test_aggregation_and_normalisation_follow_the_active_entries():
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        adv = rng.normal(size=(5, 4, 3))
        active = rng.uniform(size=(5, 4, 3)) < 0.7
        S_A = rng.uniform(size=(3, 3))
        np.testing.assert_allclose(losses.aggregate_advantages(adv, S_A, active),
                                   np.where(active, adv, 0.0) @ S_A.T, rtol=1e-12)
        for scope, axes in (("batch", None), ("agent", (0, 1))):
            out = np.asarray(losses.normalize_advantages(adv, scope, active=active))
            masked = np.ma.masked_array(adv, ~active)
            mean, std = masked.mean(axis=axes, keepdims=True), masked.std(axis=axes, keepdims=True)
            np.testing.assert_allclose(out, np.where(active, (adv - mean) / (std + 1e-8), 0.0), rtol=1e-10)
        np.testing.assert_array_equal(losses.normalize_advantages(adv, "none", active=active),
                                      np.where(active, adv, 0.0))


@pytest.mark.parametrize("scheme", ["simultaneous", "sequential"])
def test_an_agent_that_never_acts_gets_no_gradient_from_its_steps(scheme):
    """Relay with lives 0: agent 1 never acts. Per-agent parameters: its actor leaves the
    update exactly as it came (Adam's step of a zero gradient is zero) while agent 0's
    moves, and both critics learn their returns. Without the mask (active_agents false)
    agent 1's actor moves too (checked in the simultaneous scheme)."""
    hyper = Hyper.create(support.mappo(2) if scheme == "simultaneous" else support.happo(2))
    moved = {}
    for masked in (True, False) if scheme == "simultaneous" else (True,):
        learner = Learner(relay_config(0, scheme=scheme, active_agents=masked))
        state = learner.init(jax.random.PRNGKey(1), hyper)
        after, _ = jax.jit(learner.step)(state, hyper)
        moved[masked] = {
            part: [any(bool(jnp.any(a[k] != b[k])) for a, b in zip(jax.tree.leaves(state.params[part]),
                                                                 jax.tree.leaves(after.params[part])))
                   for k in range(2)]
            for part in ("actor", "critic")
        }
    assert moved[True] == {"actor": [True, False], "critic": [True, True]}, moved
    assert scheme == "sequential" or moved[False]["actor"] == [True, True], moved


def test_happo_masks_an_inactive_agents_samples_and_its_factor():
    from jaxpo.core import happo

    rng = np.random.default_rng(2)
    new, old, adv, factor = (rng.normal(size=(8,)) for _ in range(4))
    active = np.arange(8) < 5
    loss, metrics = happo.happo_policy_loss(jnp.asarray(new), old_log_prob=old, advantages=adv, factor=factor,
                                            clip_eps=0.2, active=active)
    ratio = np.exp(new - old)
    surrogate = factor * np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv)
    np.testing.assert_allclose(loss, -np.sum(surrogate[active]) / 8, rtol=1e-5)
    np.testing.assert_allclose(metrics["approx_kl"], np.mean((ratio - 1 - (new - old))[active]), rtol=1e-4)


def test_smax_reports_its_living_allies_and_the_peer_reference_configs_do_not_mask():
    learner = Learner(Config(env="HeuristicEnemySMAX", env_kwargs={"scenario": "3m"}, num_envs=2, num_steps=8,
                             num_minibatches=1, hidden=(8,)))
    timestep = jax.eval_shape(learner.env.reset, jax.random.PRNGKey(0))[1]
    assert timestep.active.shape == (3,) and timestep.active.dtype == bool
    off = Learner(Config(env="HeuristicEnemySMAX", env_kwargs={"scenario": "3m"}, num_envs=2, num_steps=8,
                         num_minibatches=1, hidden=(8,), active_agents=False))
    assert jax.eval_shape(off.env.reset, jax.random.PRNGKey(0))[1].active is None
    for name in ("jaxmarl_ippo_rnn_smax", "jaxmarl_mappo_homogenous_rnn_smax", "mava_rec_ippo_smax",
                 "mava_rec_mappo_smax"):
        config = yaml.safe_load(open(os.path.join(CONFIGS_DIR, f"{name}.yaml")).read())["config"]
        assert config["active_agents"] is False, name


def test_jaxnav_reports_the_robots_whose_action_still_acts():
    """Three robots, two driven into each other: JaxNav (not evaporating) keeps them in
    place, not done, and every action of theirs gives the same next state and rewards;
    they are inactive from the crash on, the third robot active throughout. With a
    turning penalty (``weight_w``) a crashed robot's action changes its own reward, so
    it stays active."""
    env = make("jaxnav", num_agents=3)
    start, timestep = env.reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(timestep.active, [True, True, True])
    state = start.replace(pos=start.pos.at[1].set(start.pos[0] + jnp.array([0.5, 0.0])))
    state, timestep = env.step(jax.random.PRNGKey(1), state, jnp.array([[1.0, 0.3], [1.0, -0.3], [0.5, 0.0]]))
    np.testing.assert_array_equal(state.move_term, [True, True, False])
    np.testing.assert_array_equal(state.done, [False, False, False])
    np.testing.assert_array_equal(timestep.active, [False, False, True])
    outcomes = {str(jax.tree.leaves(env.step(jax.random.PRNGKey(2), state, jnp.array([[v, w], [0.0, 0.0], [0.5, 0.0]]))))
                for v, w in [(0.0, 0.0), (1.0, 0.6), (0.5, -0.6)]}
    assert len(outcomes) == 1  # the crashed robot's action changes nothing
    done = state.replace(done=jnp.array([False, False, True]))
    np.testing.assert_array_equal(env.family.active(env.env, done), [False, False, False])
    penalised = make("jaxnav", num_agents=3, weight_w=-0.1)
    np.testing.assert_array_equal(penalised.family.active(penalised.env, state), [True, True, True])


def test_jaxnav_interaction_holds_every_robot_whose_action_reaches_a_reward():
    """At rew_lambda=1, four robots crowded into a 1.6 m square (random headings and
    speeds, some crashed or done; 512 states): for every robot j, seven alternatives of
    its action (a standstill, full speed straight and turning, turning in place, one
    random draw), the others' actions and the key fixed. Every reward a changed action
    changes is an edge of the state's graph; pairs beyond the contact distance are left
    out, so the graph is not the complete one."""
    from jaxpo.envs.jaxmarl.jaxnav import contact_distance

    # square robots (Grid-Rand-Poly); 64 lidar beams instead of 200 keep the test short
    env = make("jaxnav", num_agents=4, rew_lambda=1.0, lidar_num_beams=64)
    nav, n = env.env, 4
    start, _ = env.reset(jax.random.PRNGKey(0))
    high = np.array([nav.max_v, nav.max_w], np.float32)
    corners = np.array([[0, 0], [1, 0], [1, 1], [1, -1], [0, 1], [0, -1]], np.float32) * high
    mid_speed, speed_spread = np.array([0.5, 0]) * high, np.array([0.5, 1]) * high  # v in [0, max_v], |w| <= max_w

    def crowd(key):
        k = jax.random.split(key, 6)
        return start.replace(
            pos=start.pos[0] + jax.random.uniform(k[0], (n, 2), minval=-0.8, maxval=0.8),
            theta=jax.random.uniform(k[1], (n,), minval=-np.pi, maxval=np.pi),
            vel=mid_speed + jax.random.uniform(k[2], (n, 2), minval=-1, maxval=1) * speed_spread,
            move_term=jax.random.bernoulli(k[3], 0.15, (n,)),
            done=jax.random.bernoulli(k[4], 0.1, (n,)))

    @jax.jit
    def probe(key):  # (graph [N, N], changed [N, N]: changed[i, j] = j's action changed r_i, gap [N, N])
        state = crowd(key)
        k_act, k_alt, k_step = jax.random.split(key, 3)
        base = jax.random.uniform(k_act, (n, 2), minval=-1, maxval=1) * high
        alternatives = jnp.concatenate([corners, jax.random.uniform(k_alt, (1, 2), minval=-1, maxval=1) * high])

        def rewards(actions):
            return env.step(k_step, state, actions)[1].reward

        r0 = rewards(base)
        varied = jax.vmap(lambda j: jax.vmap(lambda b: rewards(base.at[j].set(b)))(alternatives))(jnp.arange(n))
        changed = jnp.any(jnp.abs(varied - r0) > 1e-6, axis=1).T  # [j, alt, i] -> [i, j]
        gap = jnp.linalg.norm(state.pos[:, None] - state.pos[None], axis=-1)
        return env.interaction(state), changed, gap

    graphs, changed, gaps = map(np.asarray, jax.vmap(probe)(jax.random.split(jax.random.PRNGKey(1), 512)))
    off = ~np.eye(n, dtype=bool)
    assert not np.any(changed & ~graphs), "a reward changed by a robot outside the state's graph"
    assert (changed & off).sum() >= 10  # robots did reach each other's rewards
    # bodies 0.71 m apart touch at most: farther changes are the lidar proximity term's
    assert gaps[changed & off].max() > 0.75
    reach = contact_distance(nav) + 2 * nav.max_v * nav.dt
    assert np.all(graphs[off & (gaps > reach)] == 0)
    assert np.sum(off & (gaps > reach)) >= 500 and np.sum(graphs & off) >= 500  # both kinds of pair occur
    assert graphs.all(axis=(1, 2)).mean() < 0.2  # few states' graphs are complete


def test_jaxnav_interaction_below_rew_lambda_one_is_every_active_robot():
    env = make("jaxnav", num_agents=3)  # rew_lambda 0.5: r_j enters everyone's reward via the mean
    state, _ = env.reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(env.interaction(state), np.ones((3, 3), bool))
    done = state.replace(done=jnp.array([False, True, False]))
    # robot 1's own reward no longer counts, but the team mean still reaches it
    np.testing.assert_array_equal(env.interaction(done), [[1, 0, 1], [1, 1, 1], [1, 0, 1]])
    crashed = state.replace(move_term=jnp.array([True, False, False]))  # kept in place: its action moves nothing
    np.testing.assert_array_equal(env.interaction(crashed), [[1, 1, 1], [0, 1, 1], [0, 1, 1]])


def test_interaction_hops_take_a_jaxmarl_family_only_where_it_has_a_per_state_graph():
    Config(env="jaxnav", env_kwargs={"rew_lambda": 1.0}, interaction_hops=1).make_env()
    with pytest.raises(ValueError, match="interaction_hops needs an environment whose coupling graph follows"):
        Config(env="MPE_simple_spread_v3", interaction_hops=1).make_env()


def test_wireless_reports_the_users_holding_a_packet():
    env = make("wireless", num_users=4)
    state, timestep = env.reset(jax.random.PRNGKey(3))
    np.testing.assert_array_equal(timestep.active, np.asarray(state.queue).any(axis=1))
    empty = state.replace(queue=state.queue.at[1].set(False))
    # an empty queue's action changes nothing: every action gives the same next state
    outcomes = {str(jax.tree.leaves(env.step(jax.random.PRNGKey(4), empty, jnp.array([0, a, 0, 0])))) for a in range(3)}
    assert len(outcomes) == 1


def test_wireless_interaction_is_exactly_the_pairs_whose_actions_collide():
    """success_prob 1: a user alone at an AP always delivers, so agent j's action changes
    agent i's reward from a state exactly when some pair of their actions (the others
    waiting) collides. Checked by stepping every pair of actions from 24 states."""
    env = make("wireless", num_users=5, success_prob=1.0, arrival_prob=0.4)
    states = []
    for seed in range(24):
        state, _ = env.reset(jax.random.PRNGKey(seed))
        if seed % 2:  # and some states a step later
            state, _ = env.step(jax.random.PRNGKey(100 + seed), state, jnp.asarray(np.arange(5) % 3))
        states.append(state)
    choices = np.array([(a, b) for a in range(3) for b in range(3)])

    def rewards(state, i, j):  # [9, N]: the rewards of every (a_i, a_j), the others waiting
        acts = jnp.zeros((9, 5), jnp.int32).at[:, i].set(choices[:, 0]).at[:, j].set(choices[:, 1])
        return jax.vmap(lambda a: env.step(jax.random.PRNGKey(7), state, a)[1].reward)(acts)

    rewards = jax.jit(rewards)  # i and j traced: one program for every pair
    for state in states:
        graph = np.asarray(env.interaction(state))
        assert np.all(np.diag(graph))
        for i in range(5):
            for j in range(5):
                if i != j:
                    r_i = np.asarray(rewards(state, i, j))[:, i].reshape(3, 3)  # [a_i, a_j]
                    assert graph[i, j] == bool(np.any(r_i != r_i[:, :1])), (i, j, graph)
    assert 0 < np.mean([np.asarray(env.interaction(s)).sum() for s in states]) - 5 < 8  # some edges, not all


def test_khop_per_state_is_the_khop_preset_of_each_graph():
    rng = np.random.default_rng(11)
    graphs = rng.uniform(size=(4, 3, 6, 6)) < 0.25
    for hops in (0, 1, 2, 5):
        out = np.asarray(state_supports.khop_per_state(jnp.asarray(graphs), hops))
        for index in np.ndindex(4, 3):
            np.testing.assert_array_equal(out[index], support.khop(graphs[index], hops).S_A, err_msg=str(index))


def test_a_per_sample_advantage_support_aggregates_each_sample_with_its_own_matrix():
    rng = np.random.default_rng(12)
    with jax.enable_x64(True):
        adv, S_A = rng.normal(size=(5, 4, 3)), rng.uniform(size=(5, 4, 3, 3))
        expected = np.einsum("tej,teij->tei", adv, S_A)
        np.testing.assert_allclose(losses.aggregate_advantages(adv, S_A), expected, rtol=1e-12)
        with pytest.raises(ValueError, match=r"S_A per sample must be \[\.\.\., N, N\]"):
            losses.aggregate_advantages(adv, S_A[:2])


def test_interaction_hops_build_each_steps_support_from_its_state():
    """Wireless with config.interaction_hops = 2 and mappo's ones: each step's S_A is
    khop(2) of the graph of the state it acted in, and that graph is the environment's."""
    learner = Learner(Config(env="wireless", env_kwargs={"num_users": 6}, num_envs=3, num_steps=8, num_minibatches=2,
                             num_epochs=1, hidden=(8,), updates_per_chunk=1, interaction_hops=2))
    hyper = Hyper.create(support.mappo(6))
    state = learner.init(jax.random.PRNGKey(5), hyper)
    _, traj, _ = learner.collect(state, hyper)
    S_A = np.asarray(learner.advantage_support(hyper, traj))
    graphs = np.asarray(traj.interaction)
    assert S_A.shape == (8, 3, 6, 6) and graphs.any(axis=(2, 3)).all()
    for t, e in np.ndindex(8, 3):
        np.testing.assert_array_equal(S_A[t, e], support.khop(graphs[t, e], 2).S_A)
    first = jax.tree.map(lambda x: x[0], state.rollout.env_state)
    np.testing.assert_array_equal(graphs[0, 0], learner.env.interaction(first))
    assert 0 < S_A.mean() < 1  # the states' graphs are neither empty nor complete
    with pytest.raises(ValueError, match="interaction_hops"):
        Learner(Config(env="public_goods", interaction_hops=1))
    with pytest.raises(ValueError, match="interaction_hops must be an integer >= 0"):
        Config(env="wireless", interaction_hops=-1)


def test_a_state_dependent_khop_trains_through_python_and_the_cli(tmp_path):
    """Two seeds of wireless with a per-state khop(1) over mappo's ones, from Python and
    from the command line: finite metrics, the same program either way."""
    from jaxpo import cli
    from jaxpo.experiments.train import train

    config = Config(env="wireless", env_kwargs={"num_users": 4}, num_envs=4, num_steps=16, num_minibatches=2,
                    hidden=(8,), updates_per_chunk=2, interaction_hops=1)
    result = train(config, Hyper.create(support.mappo(4)), [0, 1], num_updates=4, progress=False, checkpoint=False)
    assert np.isfinite(result.metrics["loss"]).all() and result.metrics["loss"].shape[:2] == (2, 4)
    code = cli.main(["train", "--env", "wireless", "--env-arg", "num_users=4", "--preset", "mappo", "--interaction-hops",
                     "1", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--hidden", "8",
                     "--updates-per-chunk", "2", "--steps", "128", "--seeds", "2", "--out", str(tmp_path), "--name",
                     "state_khop", "--no-progress"])
    assert code == 0
    rows = list(csv.DictReader(open(tmp_path / "state_khop" / "metrics.csv")))
    assert len(rows) == 2 * 2 and all(np.isfinite(float(row["loss"])) for row in rows)  # 2 seeds × 2 updates


def test_without_active_agents_or_a_state_graph_the_program_is_unchanged():
    """Where the environment reports no active agents (public_goods), the mask option
    traces the same train step, equation for equation; on SMAX, switching it off leaves
    nothing of it in the rollout."""
    def step_jaxpr(**options):
        learner = Learner(Config(env="public_goods", num_envs=2, num_steps=4, num_minibatches=1, hidden=(8,),
                                 updates_per_chunk=1, **options))
        hyper = Hyper.create(support.mappo(learner.num_agents))
        state = jax.eval_shape(learner.init, jax.random.PRNGKey(0), hyper)
        return str(jax.make_jaxpr(learner.step)(state, hyper))

    assert step_jaxpr(active_agents=True) == step_jaxpr(active_agents=False)
    learner = Learner(Config(env="HeuristicEnemySMAX", env_kwargs={"scenario": "3m"}, num_envs=2, num_steps=4,
                             num_minibatches=1, hidden=(8,), active_agents=False))
    hyper = Hyper.create(support.mappo(3))
    traj = jax.eval_shape(lambda key: learner.collect(learner.init(key, hyper), hyper)[1], jax.random.PRNGKey(0))
    assert traj.active is None and traj.interaction is None


def test_the_gradient_diagnostics_see_the_masked_objective():
    """Relay with lives 0 under the joint ratio (S_R = 11ᵀ: agent 1's ratio is a factor of
    agent 0's term): the per-sample gradient through agent 1's log-probabilities is zero,
    as in the objective the update follows; agent 0's is not."""
    from jaxpo.core import diagnostics

    learner = Learner(relay_config(0))
    hyper = Hyper.create(support.joint(2))
    state = learner.init(jax.random.PRNGKey(2), hyper)
    _, _, (samples, advantages, _) = learner.collect(state, hyper)
    first = lambda x: x[:6]
    grads = diagnostics.sample_gradients(learner, state.params["actor"], jax.tree.map(first, samples),
                                         first(advantages), hyper)  # leaves [b, N (through agent k), ...]
    through = lambda k: max(float(jnp.abs(leaf[:, k]).max()) for leaf in jax.tree.leaves(grads))
    assert through(1) == 0.0 and through(0) > 0.0
