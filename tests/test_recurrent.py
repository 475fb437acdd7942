"""GRU actor and critic: hidden states reset exactly at episode boundaries, in the
network, in the rollout and when the loss replays sequences.

Modules under test: ``jaxpo.core.networks``, ``jaxpo.core.modules`` (``GRUNet``) and ``jaxpo.core.rollout``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core import support
from jaxpo.core.networks import ActorCritic
from jaxpo.core.rollout import Transition, bootstrap_values, rollout, to_sequences
from jaxpo import Config, Hyper, train, trainer

N, O, A, C = 3, 5, 4, 7
L, B, K = 9, 4, 4  # sequence length, batch, boundary position


@pytest.fixture(scope="module", params=[True, False], ids=["shared", "per_agent"])
def gru(request):
    net = ActorCritic.create(N, O, A, C, hidden=(16, 8), shared=request.param, recurrent=True)
    params = net.init(jax.random.PRNGKey(0))
    # Larger weights: outputs then depend strongly on the hidden state.
    return net, jax.tree.map(lambda x: 3.0 * x, params)


def test_sequence_crossing_a_boundary_equals_a_fresh_sequence_after_it(gru):
    net, params = gru
    k_h, k_x = jax.random.split(jax.random.PRNGKey(1))
    h0 = jax.random.normal(k_h, (B, N, 16))
    xs = jax.random.normal(k_x, (L, B, N, O))
    first = jnp.zeros((L, B), bool).at[K, :2].set(True)  # batch rows 0, 1 start an episode at K

    unroll = jax.jit(net.actor.unroll)
    ys = unroll(params["actor"], h0, xs, first)
    fresh = unroll(params["actor"], jnp.zeros_like(h0), xs[K:], jnp.zeros((L - K, B), bool))
    np.testing.assert_allclose(ys[K:, :2], fresh[:, :2], rtol=1e-6, atol=1e-6)
    # The reset is what makes them equal: rows 2, 3 carry their history across K.
    assert np.abs(np.asarray(ys[K:, 2:] - fresh[:, 2:])).max() > 1e-2
    # The same through one-step calls, as the rollout makes them.
    h, outs, step = h0, [], jax.jit(net.actor.step)  # one compile, not one per operation
    for t in range(L):
        h, y = step(params["actor"], h, xs[t], first[t])
        outs.append(y)
    np.testing.assert_allclose(jnp.stack(outs), ys, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bootstrap", ["gather", "all"])
@pytest.mark.parametrize("ends", [0, 2, 13], ids=["last_only", "one_block", "several_blocks"])
def test_bootstrap_values_evaluate_every_ended_step_and_reuse_the_next_value_elsewhere(gru, ends, bootstrap):
    """``final_value[t]``: where step t ended an episode (or is the last) the critic on
    the reached observation from the hidden state the step left — gathered E rows at a
    time (13 ended steps of E = 4 envs take four blocks) or all in one pass; elsewhere
    the next step's value, untouched (random values here, so a recomputation would show)."""
    net, params = gru
    T, E = 6, B
    keys = jax.random.split(jax.random.PRNGKey(7), 5)
    carry = {"actor": jax.random.normal(keys[0], (T, E, N, 16)), "critic": jax.random.normal(keys[1], (T, E, N, 16))}
    last_carry = jax.tree.map(lambda c: c[0] + 1.0, carry)
    final_input = jax.random.normal(keys[2], (T, E, N, C))
    value = jax.random.normal(keys[3], (T, E, N))
    ended = np.zeros(T * E, bool)
    ended[np.random.default_rng(ends).choice((T - 1) * E, ends, replace=False)] = True
    ended = ended.reshape(T, E)
    terminated, truncated = ended & (np.arange(E) % 2 == 0), ended & (np.arange(E) % 2 == 1)
    zeros = jnp.zeros((T, E))
    traj = Transition(obs=None, action_mask=None, critic_obs=None, carry=carry, first=zeros, action=zeros,
                      log_prob=zeros, value=value, reward=zeros, terminated=jnp.asarray(terminated),
                      truncated=jnp.asarray(truncated), final_value=None, episode_return=zeros, episode_length=zeros)
    final_value = np.asarray(jax.jit(lambda t, c, x: bootstrap_values(net, params, t, c, x, bootstrap))(traj, last_carry, final_input))

    after = jax.tree.map(lambda c, last: jnp.concatenate([c[1:], last[None]]), carry, last_carry)
    dense = np.asarray(net.next_value(params, after, final_input))  # every step evaluated
    own_pass = ended.copy()
    own_pass[-1] = True
    np.testing.assert_allclose(final_value[own_pass], dense[own_pass], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(final_value[:-1][~own_pass[:-1]], np.asarray(value)[1:][~own_pass[:-1]])
    assert np.abs(dense[:-1][~own_pass[:-1]] - np.asarray(value)[1:][~own_pass[:-1]]).min() > 1e-4  # teeth


def test_agent_policy_replays_the_stacked_recurrent_policy():
    """HAPPO's per-agent path (one agent's parameters, batch-major sequences) gives that
    agent's column of the stacked, vmapped policy, resets included."""
    net = ActorCritic.create(N, O, A, C, hidden=(16, 8), shared=False, recurrent=True)
    params = jax.tree.map(lambda x: 3.0 * x, net.init(jax.random.PRNGKey(2)))
    k_h, k_x = jax.random.split(jax.random.PRNGKey(3))
    h0 = jax.random.normal(k_h, (B, N, 16))
    xs = jax.random.normal(k_x, (L, B, N, O))
    mask = jnp.ones((L, B, N, A), bool)
    first = jnp.zeros((L, B), bool).at[K, 1].set(True).at[2, 3].set(True)
    stacked = net.unroll_policy(params["actor"], h0, xs, mask, first).logits  # [L, B, N, A]
    for m in range(N):
        agent = jax.tree.map(lambda x: x[m], params["actor"])
        dist = net.agent_policy(agent, xs[:, :, m].swapaxes(0, 1), mask[:, :, m].swapaxes(0, 1), h0[:, m], first.T)
        np.testing.assert_allclose(dist.logits, stacked[:, :, m].swapaxes(0, 1), rtol=1e-5, atol=1e-5)


def test_feed_forward_networks_have_zero_width_carries():
    net = ActorCritic.create(N, O, A, C, hidden=(8,))
    carry = net.initial_carry((2,))
    assert carry["actor"].shape == (2, N, 0) and carry["critic"].shape == (2, N, 0)
    with pytest.raises(ValueError, match="recurrent network needs its hidden state"):
        gru_net = ActorCritic.create(N, O, A, C, hidden=(8,), recurrent=True)
        gru_net.actor(gru_net.init(jax.random.PRNGKey(0))["actor"], jnp.ones((2, N, O)))


RECURRENT = Config(
    env="public_goods", env_kwargs=dict(num_agents=4, max_steps=5), num_envs=3, num_steps=12,
    updates_per_chunk=1, num_epochs=2, num_minibatches=3, hidden=(16, 16),
    recurrent=True, seq_len=4, critic_input="global",
)


@pytest.fixture(scope="module")
def replay():
    """A rollout of the recurrent trainer's env (5-step episodes, auto-reset), cut into
    sequences of 4 steps as the loss sees them, and the loss's replay of them."""
    tr = trainer(RECURRENT)
    state = tr.init(jax.random.PRNGKey(0), Hyper.create(support.ippo(4)))
    params = jax.tree.map(lambda x: 3.0 * x, state.params)

    @jax.jit
    def run():
        _, traj = rollout(tr.env, tr.net, params, state.rollout, jax.random.PRNGKey(1), 12, "global")
        seqs = jax.tree.map(lambda x: to_sequences(x, 4), traj)
        h0, first, tm = tr.learner._unroll_inputs(seqs)
        dist = tr.net.unroll_policy(params["actor"], h0["actor"], tm(seqs.obs), tm(seqs.action_mask), first)
        values = tr.net.unroll_value(params, h0, tm(seqs.critic_obs), first)
        no_reset = tr.net.unroll_value(params, h0, tm(seqs.critic_obs), jnp.zeros_like(first))
        return traj, seqs, tm(dist.log_prob(tm(seqs.action))), tm(values), tm(no_reset)

    return jax.device_get(run())


def test_loss_replay_of_sequences_reproduces_the_rollout(replay):
    traj, seqs, log_prob, values, no_reset = replay
    # Episodes of 5 steps in sequences of 4: boundaries fall inside sequences, and
    # sequences start mid-episode from their stored hidden state.
    assert seqs.first[:, 1:].any() and (~seqs.first[:, 0]).any()
    np.testing.assert_allclose(log_prob, seqs.log_prob, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, seqs.value, rtol=1e-5, atol=1e-5)
    # Without the resets inside the sequences the replay would differ.
    inside = np.broadcast_to(np.cumsum(seqs.first[:, 1:], axis=1)[..., None] > 0, no_reset[:, 1:].shape)
    assert np.abs(no_reset[:, 1:] - seqs.value[:, 1:])[inside].max() > 1e-3


def test_truncation_bootstrap_continues_the_episode(replay):
    traj = replay[0]
    done = traj.terminated | traj.truncated
    assert done.any() and traj.truncated[done].all()  # public goods: time limit only
    # Where no episode ended, the value of the reached observation is the next step's value.
    cont = ~done[:-1]
    np.testing.assert_allclose(traj.final_value[:-1][cont], traj.value[1:][cont], rtol=1e-5, atol=1e-5)


def test_recurrent_training_runs_and_is_deterministic():
    hyper = Hyper.create(support.khop(np.eye(4), 0), lr=1e-3)
    first = train(RECURRENT, hyper, [0, 1], num_updates=2, progress=False)
    again = train(RECURRENT, hyper, [0, 1], num_updates=2, progress=False)
    for name, values in first.metrics.items():
        assert np.all(np.isfinite(values[:, 1:])) or name in ("return", "episode_length"), name
        np.testing.assert_array_equal(values, again.metrics[name], err_msg=name)
    assert not np.array_equal(first.metrics["policy_loss"][0], first.metrics["policy_loss"][1])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(seq_len=4), "seq_len is for recurrent networks only"),
        (dict(recurrent=True, seq_len=5), r"seq_len \(5\) must divide num_steps \(12\)"),
        (dict(recurrent=True, seq_len=0), "seq_len must be a positive integer"),
        (dict(recurrent=True, seq_len=4, num_minibatches=4), r"must divide the number of sequences"),
    ],
)
def test_bad_recurrent_config(kwargs, match):
    base = dict(env="public_goods", num_envs=3, num_steps=12, num_minibatches=1)
    with pytest.raises(ValueError, match=match):
        Config(**{**base, **kwargs})
