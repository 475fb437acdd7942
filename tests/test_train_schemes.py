"""Options of the one training loop: exact HAPPO (sequential scheme), MAPPO's value
normalisation and Huber critic loss.

Modules under test: ``jaxpo.program.learner``, ``jaxpo.core.happo``, ``jaxpo.core.valuenorm``, ``jaxpo.core.losses``."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core import support, valuenorm
from jaxpo.core.gae import gae
from jaxpo import Config, Hyper, runs, train, trainer

UPDATES = 4
SEQUENTIAL = Config(
    env="MPE_simple_spread_v3", num_envs=4, num_steps=16, updates_per_chunk=2,
    num_epochs=2, num_minibatches=2, hidden=(16,), share_params=False, scheme="sequential",
)
MAPPO = dataclasses.replace(
    SEQUENTIAL, scheme="simultaneous", share_params=True, critic_input="global",
    value_norm=True, value_loss="huber", aggregate_in="reward",
)


def test_sequential_scheme_trains_and_ignores_S_R():
    """HAPPO's sequential scheme takes its ratio products from the agent order, so S_R
    has no effect: two supports differing only in S_R train bit-identically."""
    a = Hyper.create(support.ippo(3))
    b = Hyper.create(support.happo(3, order=[2, 0, 1]))
    res = train(SEQUENTIAL, Hyper.stack([a, b]), [0, 0], num_updates=UPDATES, progress=False)
    for name, values in res.metrics.items():
        if name not in ("return", "episode_length"):  # NaN in updates where no episode ended
            assert np.all(np.isfinite(values)), name
        np.testing.assert_array_equal(values[0], values[1], err_msg=name)
    assert {"factor_mean", "factor_min", "factor_max", "joint_ratio_dev"} <= set(res.metrics)
    # every agent's actor moved, each with its own Adam state (count = epochs × minibatches × updates)
    first = trainer(SEQUENTIAL).init(jax.random.PRNGKey(0), a)
    moved = jax.tree.map(lambda x, y: np.abs(np.asarray(x[0]) - np.asarray(y)).reshape(3, -1).max(1),
                         res.state.params["actor"], first.params["actor"])
    assert np.all(np.stack(jax.tree.leaves(moved)).max(0) > 0)
    counts = [np.asarray(x) for x in jax.tree.leaves(res.state.opt_state["actor"]) if np.asarray(x).dtype == np.int32]
    assert any(c.shape == (2, 3) and np.all(c == 2 * 2 * 4) for c in counts)


def test_sequential_needs_per_agent_parameters():
    with pytest.raises(ValueError, match="needs share_params=False"):
        dataclasses.replace(SEQUENTIAL, share_params=True)
    with pytest.raises(ValueError, match="scheme must be one of"):
        dataclasses.replace(SEQUENTIAL, scheme="alternating")
    with pytest.raises(ValueError, match="value_loss must be one of"):
        dataclasses.replace(MAPPO, value_loss="l1")
    with pytest.raises(ValueError, match="huber_delta must be > 0"):
        Hyper.create(support.mappo(3), huber_delta=0.0)


@pytest.fixture(scope="module")
def mappo_result():
    hyper, seeds, labels = runs(support.mappo(3), seeds=[0, 1])
    return train(MAPPO, hyper, seeds, num_updates=UPDATES, labels=labels, progress=False)


def test_value_norm_tracks_the_returns(mappo_result):
    state = mappo_result.state.value_norm
    # debiasing term 1 − β^k after k = epochs × minibatches × updates normaliser updates
    k = MAPPO.num_epochs * MAPPO.num_minibatches * UPDATES
    np.testing.assert_allclose(state.debiasing_term, 1 - 0.99999**k, rtol=1e-3)
    mean, var = jax.vmap(valuenorm.running_mean_var)(state)
    assert mean.shape == (2, 3) and np.all(np.asarray(mean) < 0)  # MPE returns are negative
    for name in ("value_loss", "policy_loss", "entropy"):
        assert np.all(np.isfinite(mappo_result.metrics[name])), name


def test_gae_runs_on_denormalised_values(mappo_result):
    """With value normalisation the critic's outputs are denormalised before GAE."""
    tr = trainer(MAPPO)
    state = jax.tree.map(lambda x: x[0], mappo_result.state)
    hyper = jax.tree.map(lambda x: x[0], mappo_result.hyper)
    from jaxpo.core.rollout import rollout

    _, traj = rollout(tr.env, tr.net, state.params, state.rollout, jax.random.PRNGKey(3), MAPPO.num_steps, "global")
    _, targets = tr.advantages(state, traj, hyper)
    values = valuenorm.denormalize(state.value_norm, traj.value)
    next_values = valuenorm.denormalize(state.value_norm, traj.final_value)
    rewards = traj.reward @ hyper.S_A.T  # aggregate_in="reward"
    flags = lambda x: jnp.broadcast_to(x[..., None], rewards.shape)
    _, expected = gae(rewards, values, next_values, flags(traj.terminated), flags(traj.truncated),
                      hyper.gamma, hyper.gae_lambda)
    np.testing.assert_allclose(targets, expected, rtol=1e-5, atol=1e-5)
    # and differs from GAE on the raw (normalised) outputs
    _, raw = gae(rewards, traj.value, traj.final_value,
                 flags(traj.terminated), flags(traj.truncated), hyper.gamma, hyper.gae_lambda)
    assert not np.allclose(targets, raw, atol=1e-2)


CONTINUOUS = dataclasses.replace(SEQUENTIAL, env_kwargs={"action_type": "Continuous"})


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(recurrent=True, seq_len=8),
        dict(scheme="simultaneous", share_params=True, recurrent=True, seq_len=8, value_norm=True),
    ],
    ids=["sequential", "sequential-recurrent", "recurrent"],
)
def test_gaussian_policies_train_in_every_scheme(options):
    """Continuous actions through exact HAPPO (per-agent Gaussian actors, feed-forward
    and GRU) and through a recurrent, value-normalised simultaneous update: finite metrics, float actions,
    and the learned log-std moves."""
    config = dataclasses.replace(CONTINUOUS, **options)
    tr = trainer(config)
    assert tr.env.continuous and tr.net.continuous
    hyper = Hyper.create(support.mappo(3), lr=1e-2)
    res = train(config, hyper, [0], num_updates=UPDATES, progress=False)
    for name, values in res.metrics.items():
        if name not in ("return", "episode_length"):
            assert np.all(np.isfinite(values)), name
    log_std = np.asarray(res.state.params["actor"]["params"]["log_std"])
    assert log_std.shape == ((1, 5) if config.share_params else (1, 3, 5))
    assert np.abs(log_std).max() > 1e-3  # initialised at 0
    assert res.state.rollout.timestep.action_mask.shape == (1, 4, 3, 5)


def test_critic_inputs():
    """local: own obs; global: world state, else all observations; agent: global + own obs."""
    from jaxpo.core.rollout import critic_features, critic_input_dim

    obs = jnp.arange(2 * 3 * 4, dtype=jnp.float32).reshape(2, 3, 4)  # [E, N, O]
    joint = np.broadcast_to(np.asarray(obs).reshape(2, 1, 12), (2, 3, 12))
    np.testing.assert_array_equal(critic_features(obs, None, "local"), obs)
    np.testing.assert_array_equal(critic_features(obs, None, "global"), joint)
    np.testing.assert_array_equal(critic_features(obs, None, "agent"), np.concatenate([joint, obs], -1))
    world = jnp.ones((2, 3, 5))
    np.testing.assert_array_equal(critic_features(obs, world, "global"), world)
    np.testing.assert_array_equal(critic_features(obs, world, "agent"), np.concatenate([world, obs], -1))
    env = trainer(SEQUENTIAL).env  # MPE: no world state, 3 agents × 18
    assert [critic_input_dim(env, c) for c in ("local", "global", "agent")] == [18, 54, 72]
    with pytest.raises(ValueError, match="critic_input must be one of"):
        critic_input_dim(env, "oracle")
