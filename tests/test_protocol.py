"""The benchmark-protocol options, exactly: the shared trunk (``Config.shared_trunk``:
one trunk, a policy and a value branch) against a NumPy forward pass and the
separate-network layout, and the annealed learning rate (``Config.anneal_lr``,
``Hyper.lr_horizon``) in ``learning_rate``, in the optimiser's step, in the logged
``lr`` metric of ``jaxpo.train`` and of the CLI, and in its refusals.

Modules under test: ``jaxpo.core.networks`` and ``jaxpo.core.agents`` (the shared trunk), ``jaxpo.program.learner``
(the annealed rate) and the shipped configs in ``jaxpo/experiments/configs/``."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

import jaxpo
from jaxpo import Config, Hyper, cli
from jaxpo.core import support
from jaxpo.core.networks import MASKED_LOGIT, ActorCritic
from jaxpo.program.compiled import trainer
from jaxpo.program.learner import Learner, learning_rate
from jaxpo.program.parallel import put
from jaxpo.run.driver import run_group
from jaxpo.run.events import Group, Run
from jaxpo.run.report import read_csv
from runtools import reject_nan

N, D, A = 3, 5, 4  # agents, observation width, actions
HIDDEN = (8, 8)
# The tiny program of the training tests here (shared trunk, annealed lr); test_periodic_eval uses the same one.
TINY = Config(env="public_goods", num_envs=4, num_steps=8, updates_per_chunk=2, num_epochs=1, num_minibatches=1,
              hidden=(16,), shared_trunk=True, anneal_lr=True)


def create(shared=True, recurrent=False, shared_trunk=True):
    return ActorCritic.create(num_agents=N, obs_dim=D, num_actions=A, critic_dim=D, hidden=HIDDEN, activation="tanh",
                              shared=shared, recurrent=recurrent, shared_trunk=shared_trunk)


def init_params(net, seed=7):
    """Parameters of ``net``'s layout (``init``'s tree, traced only) drawn N(0, 0.5²): the
    initial biases are all zero, which would hide a missing or misplaced bias."""
    shapes = jax.eval_shape(net.init, jax.random.PRNGKey(0))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: jnp.asarray(0.5 * rng.standard_normal(s.shape), jnp.float32), shapes)


def agent_params(p, i, shared):
    """Agent i's parameter arrays (float64 numpy): per-agent leaves are indexed at i."""
    return jax.tree.map(lambda x: np.asarray(x if shared else x[i], np.float64), p)


def first_layer(p, x, i, shared):
    """Dense_0 of agent i: ``x @ K[:D] + K[D:][i] + b`` with shared parameters (the
    one-hot agent id's row), ``x @ K + b`` per agent."""
    kernel, bias = p["Dense_0"]["kernel"], p["Dense_0"]["bias"]
    if shared:
        assert kernel.shape == (D + N, HIDDEN[0])
        return x @ kernel[:D] + kernel[D:][i] + bias
    assert kernel.shape == (D, HIDDEN[0])
    return x @ kernel + bias


def dense(p, name, x):
    return x @ p[name]["kernel"] + p[name]["bias"]


def branches(p, trunk):
    """The policy branch (Dense_1, head Dense_2) and the value branch (value_Dense_1,
    head value_Dense_2) on the trunk's features: ``(logits [..., A], value [...])``."""
    logits = dense(p, "Dense_2", np.tanh(dense(p, "Dense_1", trunk)))
    value = dense(p, "value_Dense_2", np.tanh(dense(p, "value_Dense_1", trunk)))
    return logits, value[..., 0]


def log_softmax(logits, mask):
    logits = np.where(mask, logits, MASKED_LOGIT)
    top = logits.max(-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))


def count(tree):
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


def hand_count(shared):
    """One trunk (the first layer, with N id rows when shared) and two branches."""
    h1, h2 = HIDDEN
    trunk = (D + (N if shared else 0)) * h1 + h1
    policy = h1 * h2 + h2 + h2 * A + A
    value = h1 * h2 + h2 + h2 * 1 + 1
    return (trunk + policy + value) * (1 if shared else N)


def close(actual, expected, tol=1e-5):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=tol, atol=tol)


# ------------------------------------------------------------------ the shared trunk, feed-forward


@pytest.mark.parametrize("shared", [True, False], ids=["shared_params", "per_agent_params"])
def test_a_feed_forward_shared_trunk_is_one_trunk_and_two_branches(shared):
    net = create(shared=shared)
    assert net.shared_trunk and net.critic is None
    layout = jax.eval_shape(net.init, jax.random.PRNGKey(0))
    assert layout["critic"] == {}
    assert count(layout) == hand_count(shared)
    # the separate layout has a second first layer: exactly one trunk more
    separate = jax.eval_shape(create(shared=shared, shared_trunk=False).init, jax.random.PRNGKey(0))
    assert count(separate) - count(layout) == ((D + (N if shared else 0)) * HIDDEN[0] + HIDDEN[0]) * (1 if shared else N)
    assert set(layout["actor"]["params"]) == {"Dense_0", "Dense_1", "Dense_2", "value_Dense_1", "value_Dense_2"}

    params = init_params(net)
    rng = np.random.default_rng(1)
    obs = rng.standard_normal((6, N, D)).astype(np.float32)
    mask = rng.random((6, N, A)) < 0.6
    mask[..., 0] = True
    logits, values = np.zeros((6, N, A)), np.zeros((6, N))
    for i in range(N):
        p = agent_params(params["actor"]["params"], i, shared)
        trunk = np.tanh(first_layer(p, np.asarray(obs[:, i], np.float64), i, shared))
        logits[:, i], values[:, i] = branches(p, trunk)
    expected = log_softmax(logits, mask)

    @jax.jit
    def outputs(params, obs, mask):
        carry, first = net.initial_carry((6,)), jnp.zeros((6,), bool)
        _, step_dist, step_values = net.step(params, carry, obs, mask, obs, first)
        seq = lambda x: x[:, None]
        seq_dist, seq_values = net.unroll(params, carry, seq(obs), seq(mask), seq(obs), seq(first))
        return {"policy": net.policy(params, obs, mask).logits, "value": net.value(params, obs),
                "step_logits": step_dist.logits, "step_value": step_values,
                "unroll_logits": seq_dist.logits[:, 0], "unroll_value": seq_values[:, 0],
                "unroll_policy": net.unroll_policy(params["actor"], carry["actor"], seq(obs), seq(mask),
                                                   seq(first)).logits[:, 0],
                "unroll_value_only": net.unroll_value(params, carry, seq(obs), seq(first))[:, 0],
                "next_value": net.next_value(params, carry, obs), "carry": carry}

    out = outputs(params, obs, mask)
    assert out["carry"]["actor"].shape == out["carry"]["critic"].shape == (6, N, 0)
    for name in ("policy", "step_logits", "unroll_logits", "unroll_policy"):
        close(out[name], expected)
    for name in ("value", "step_value", "unroll_value", "unroll_value_only", "next_value"):
        close(out[name], values)


# ------------------------------------------------------------------ the shared trunk, recurrent


def gru_cell(p, h, x):
    """flax's GRUCell: r, z gates; n = tanh(W_in x + b_in + r * (W_hn h + b_hn))."""
    sigmoid = lambda v: 1 / (1 + np.exp(-v))
    lin = lambda name, v: v @ p[name]["kernel"] + p[name].get("bias", 0.0)
    r = sigmoid(lin("ir", x) + lin("hr", h))
    z = sigmoid(lin("iz", x) + lin("hz", h))
    n = np.tanh(lin("in", x) + r * lin("hn", h))
    return (1 - z) * n + z * h


@pytest.fixture(scope="module", params=[True, False], ids=["shared_params", "per_agent_params"])
def recurrent(request):
    """``(net, params, inputs, reference)``: a recurrent shared-trunk net with random
    parameters, B = 3 sequences of L = 7 steps from random hidden states with episodes
    starting inside them, and the NumPy forward pass: logits [L, B, N, A] (log-softmax,
    masked), values [L, B, N] and the hidden state after each step [L, B, N, H]."""
    shared = request.param
    net = create(shared=shared, recurrent=True)
    params = init_params(net)
    L, B = 7, 3
    rng = np.random.default_rng(3)
    obs = rng.standard_normal((L, B, N, D)).astype(np.float32)
    mask = np.ones((L, B, N, A), bool)
    mask[..., 1] = False
    first = np.zeros((L, B), bool)
    first[2, 0] = first[0, 1] = first[5, 1] = first[4, 2] = True
    h0 = {"actor": rng.standard_normal((B, N, HIDDEN[0])).astype(np.float32), "critic": np.zeros((B, N, 0), np.float32)}
    logits, values, hidden = np.zeros((L, B, N, A)), np.zeros((L, B, N)), np.zeros((L, B, N, HIDDEN[0]))
    for i in range(N):
        p = agent_params(params["actor"]["params"], i, shared)
        h = np.asarray(h0["actor"][:, i], np.float64)
        for t in range(L):
            h = np.where(first[t][:, None], 0.0, h)
            h = gru_cell(p["GRUCell_0"], h, np.tanh(first_layer(p, np.asarray(obs[t, :, i], np.float64), i, shared)))
            hidden[t, :, i] = h
            logits[t, :, i], values[t, :, i] = branches(p, h)
    reference = {"logits": log_softmax(logits, mask), "values": values, "hidden": hidden}
    return net, params, (h0, obs, mask, first), reference


def test_the_recurrent_shared_trunk_is_the_embedding_and_the_gru(recurrent):
    net, params, (h0, obs, mask, first), reference = recurrent
    assert net.initial_carry((2,))["critic"].shape == (2, N, 0)  # no critic hidden state of its own
    p = params["actor"]["params"]
    assert set(p) == {"Dense_0", "GRUCell_0", "Dense_1", "Dense_2", "value_Dense_1", "value_Dense_2"}
    # the actor's network of the separate layout plus a value branch, nothing else
    separate = jax.eval_shape(create(net.actor.shared, recurrent=True, shared_trunk=False).init, jax.random.PRNGKey(0))
    assert count(params) == count(separate["actor"]) + count(p["value_Dense_1"]) + count(p["value_Dense_2"])

    @jax.jit
    def unrolled(params, h0, obs, mask, first):
        dist, values = net.unroll(params, h0, obs, mask, obs, first)
        return (dist.logits, values, net.unroll_policy(params["actor"], h0["actor"], obs, mask, first).logits,
                net.unroll_value(params, h0, obs, first))

    logits, values, policy_logits, value_only = unrolled(params, h0, obs, mask, first)
    close(logits, reference["logits"])
    close(policy_logits, reference["logits"])
    close(values, reference["values"])
    close(value_only, reference["values"])


def test_recurrent_stepping_equals_the_unroll_and_next_value_continues_the_episode(recurrent):
    net, params, (h0, obs, mask, first), reference = recurrent

    @jax.jit
    def step(params, carry, policy_carry, obs, mask, first):
        """One acting step (and the actor's alone), and the bootstrap value of ``obs`` as a
        continuation of the carried episode (next_value, and a step with first False)."""
        bootstrap = net.next_value(params, carry, obs)
        _, _, continued = net.step(params, carry, obs, mask, obs, jnp.zeros_like(first))
        carry, dist, values = net.step(params, carry, obs, mask, obs, first)
        policy_carry, policy_dist = net.policy_step(params["actor"], policy_carry, obs, mask, first)
        return carry, dist.logits, values, policy_carry, policy_dist.logits, bootstrap, continued

    carry, policy_carry = h0, h0["actor"]
    for t in range(first.shape[0]):
        carry, logits, values, policy_carry, policy_logits, bootstrap, continued = step(
            params, carry, policy_carry, obs[t], mask[t], first[t])
        assert carry["critic"].shape == (first.shape[1], N, 0)
        close(carry["actor"], reference["hidden"][t])  # the same hidden states
        close(policy_carry, reference["hidden"][t])
        close(logits, reference["logits"][t])
        close(policy_logits, reference["logits"][t])
        close(values, reference["values"][t])
        np.testing.assert_array_equal(bootstrap, continued)  # next_value is a step with first False
        for b in np.flatnonzero(~first[t]):  # where no episode starts, that is this step's value
            close(bootstrap[b], reference["values"][t, b])
        if first[t].any():  # and where one does, it is not (it continues the old episode)
            b = np.flatnonzero(first[t])[0]
            assert np.abs(np.asarray(bootstrap[b]) - reference["values"][t, b]).max() > 1e-3


def value_gradients(net, params, h0, obs, first):
    return jax.jit(jax.grad(lambda p: net.unroll_value(p, h0, obs, first).sum()))(params)


def policy_gradients(net, params, h0, obs, mask, first):
    loss = lambda p: net.unroll_policy(p["actor"], h0["actor"], obs, mask, first).logits.sum(-1).std()
    return jax.jit(jax.grad(loss))(params)


def reaches(layers):
    """{layer: whether any of its gradient is non-zero}."""
    return {name: any(bool(np.any(np.asarray(g) != 0)) for g in jax.tree.leaves(layer)) for name, layer in layers.items()}


def test_the_critic_trains_the_trunk_and_only_its_own_branch(recurrent):
    net, params, (h0, obs, mask, first), _ = recurrent
    grads = value_gradients(net, params, h0, obs, first)["actor"]["params"]
    # the trunk (embedding and GRU) and the value branch get the value's gradient; the policy branch none
    assert reaches(grads) == {"Dense_0": True, "GRUCell_0": True, "value_Dense_1": True, "value_Dense_2": True,
                              "Dense_1": False, "Dense_2": False}
    assert np.all(np.asarray(grads["Dense_0"]["kernel"]) != 0)  # every trunk weight (agent ids too) reaches it
    pgrads = policy_gradients(net, params, h0, obs, mask, first)["actor"]["params"]
    assert reaches(pgrads) == {"Dense_0": True, "GRUCell_0": True, "Dense_1": True, "Dense_2": True,
                               "value_Dense_1": False, "value_Dense_2": False}

    # separate networks: the value never reaches the actor's parameters
    separate = create(net.actor.shared, recurrent=True, shared_trunk=False)
    sgrads = value_gradients(separate, init_params(separate), {"actor": h0["actor"], "critic": h0["actor"]}, obs, first)
    assert not any(reaches(sgrads["actor"]["params"]).values())
    assert all(reaches(sgrads["critic"]["params"]).values())


# ------------------------------------------------------------------ configuration


@pytest.mark.parametrize("kwargs", [dict(critic_input="global"), dict(critic_input="agent"),
                                    dict(scheme="sequential", share_params=False)],
                         ids=["global_critic", "agent_critic", "sequential"])
def test_a_shared_trunk_needs_a_local_critic_and_the_simultaneous_scheme(kwargs):
    with pytest.raises(ValueError, match="Config.shared_trunk"):
        Config(env="public_goods", shared_trunk=True, **kwargs)
    Config(env="public_goods", shared_trunk=False, **kwargs)  # fine without it
    with pytest.raises(ValueError, match=r"critic_dim \(7\) must equal obs_dim \(5\)"):
        ActorCritic.create(N, D, A, 7, shared_trunk=True)


# ------------------------------------------------------------------ the annealed learning rate


def test_learning_rate_is_the_linear_decay_constant_within_an_update():
    hyper = Hyper.create(support.ippo(8), lr=0.01, lr_horizon=8)
    for u in [0, 1, 3, 5, 7, 8, 9, 20]:
        expected = np.float32(0.01) * max(np.float32(0), np.float32(1) - np.float32(u) / np.float32(8))
        got = learning_rate(TINY, hyper, jnp.int32(u))
        assert got.dtype == jnp.float32
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)
        assert learning_rate(dataclasses.replace(TINY, anneal_lr=False), hyper, jnp.int32(u)) == np.float32(0.01)
    assert learning_rate(TINY, hyper, jnp.int32(8)) == 0.0 and learning_rate(TINY, hyper, jnp.int32(30)) == 0.0
    # batched over runs (as the program vmaps it): each run's own lr and horizon
    batch = Hyper.stack([hyper, Hyper.create(support.ippo(8), lr=0.002, lr_horizon=4)])
    rates = jax.vmap(lambda h: learning_rate(TINY, h, jnp.int32(2)))(batch)
    np.testing.assert_allclose(rates, [0.01 * 0.75, 0.002 * 0.5], rtol=1e-6)


@pytest.fixture(scope="module")
def trained():
    """``jaxpo.train`` of TINY, 2 runs × 4 updates: run 0 at lr 0.003 with the default
    horizon (the run's length), run 1 at lr 0.01 with its own horizon of 2 updates."""
    hyper = Hyper.stack([Hyper.create(support.ippo(8), lr=0.003), Hyper.create(support.ippo(8), lr=0.01, lr_horizon=2)])
    return jaxpo.train(TINY, hyper, [0, 1], num_updates=4, labels=["a", "b"], progress=False)


def test_jaxpo_train_logs_the_annealed_rate_of_every_update(trained):
    np.testing.assert_array_equal(trained.hyper.lr_horizon, np.float32([4, 2]))  # 0 became the run's length
    u = np.arange(4, dtype=np.float32)
    expected = np.stack([np.float32(0.003) * (1 - u / np.float32(4)),
                         np.float32(0.01) * np.maximum(np.float32(0), 1 - u / np.float32(2))])
    assert trained.metrics["lr"].shape == (2, 4)
    np.testing.assert_allclose(trained.metrics["lr"], expected, rtol=1e-6, atol=0)
    assert trained.metrics["lr"][1, 2] == trained.metrics["lr"][1, 3] == 0.0  # past its horizon: 0, not negative
    assert "lr" in trainer(TINY).metric_names()
    assert "lr" not in trainer(dataclasses.replace(TINY, anneal_lr=False)).metric_names()  # a constant rate: no lr


@pytest.fixture(scope="module")
def one_batch(trained):
    """A TINY learner, run 0's trained state and the training data of its next rollout."""
    learner = Learner(TINY)
    hyper = Hyper.create(support.ippo(8), lr=0.01, lr_horizon=8)
    state = jax.tree.map(lambda x: x[0], trained.state)
    _, _, data = jax.jit(learner.collect)(state, hyper)
    return learner, hyper, state, data


def test_the_optimiser_steps_with_the_annealed_rate(one_batch):
    learner, hyper, state, data = one_batch
    constant = Learner(dataclasses.replace(TINY, anneal_lr=False))
    annealed_update, constant_update = jax.jit(learner.update), jax.jit(constant.update)
    key = jax.random.PRNGKey(5)
    leaves = lambda tree: [np.asarray(x) for x in jax.tree.leaves(tree)]
    start = leaves(state.params)
    for u in [0, 2, 5, 7]:
        (params, opt_state, _), _ = annealed_update(state.replace(update=jnp.int32(u)), data, key, hyper)
        lr = np.float32(0.01) * (np.float32(1) - np.float32(u) / np.float32(8))
        (expected, expected_opt, _), _ = constant_update(state, data, key, hyper.replace(lr=lr))
        for a, b in zip(leaves(params), leaves(expected)):  # the same float32 rate: the same step, exactly
            np.testing.assert_array_equal(a, b)
        for a, b in zip(leaves(opt_state), leaves(expected_opt)):  # Adam's moments do not see the rate
            np.testing.assert_array_equal(a, b)
        assert any(not np.array_equal(a, b) for a, b in zip(leaves(params), start)), u  # it did train
    for u in [8, 11]:  # the horizon reached: a learning rate of 0 leaves the parameters exactly as they were
        (params, opt_state, _), _ = annealed_update(state.replace(update=jnp.int32(u)), data, key, hyper)
        for a, b in zip(leaves(params), start):
            np.testing.assert_array_equal(a, b)
        assert any(not np.array_equal(a, b) for a, b in zip(leaves(opt_state), leaves(state.opt_state)))


def test_run_group_and_trainer_start_refuse_an_annealed_rate_without_a_horizon():
    """A horizon of 0 is the run's own length only once resolved (``with_horizon``); left at 0
    the first update's rate is 0 / 0. Both ways in refuse it before building anything."""
    hyper = Hyper.stack([Hyper.create(support.ippo(8), lr_horizon=4), Hyper.create(support.ippo(8))])
    runs = [Run(0, "a", "a", 0), Run(1, "b", "b", 1)]
    refused = r"Config.anneal_lr needs each run's Hyper.lr_horizon > 0"
    with pytest.raises(ValueError, match=refused):
        run_group(trainer(TINY), hyper, np.array([0, 1]), Group(TINY, runs, 4))
    tr = trainer(TINY)
    keys, built = jax.vmap(jax.random.PRNGKey)(jnp.arange(2, dtype=jnp.uint32)), dict(tr.compiles)
    for given in (hyper, put(hyper, tr.run_sharding)):  # host values, and placed as the driver places them
        with pytest.raises(ValueError, match=refused):
            tr.start(keys, given)
    assert tr.compiles == built  # nothing traced
    # resolved, the same runs start, and learn at a finite rate
    state = tr.start(keys, hyper.with_horizon(4))
    _, metrics = tr.chunk_runs(state, hyper.with_horizon(4))
    assert np.all(np.isfinite(np.asarray(metrics["lr"]))) and np.all(np.asarray(metrics["lr"]) > 0)


def test_the_cli_trains_with_a_shared_trunk_and_an_annealed_rate(tmp_path):
    argv = ["train", "--env", "public_goods", "--num-envs", "4", "--num-steps", "8", "--updates-per-chunk", "2",
            "--num-epochs", "1", "--num-minibatches", "1", "--hidden", "16", "--shared-trunk", "--anneal-lr",
            "--lr", "0.004", "--steps", str(6 * TINY.steps_per_update), "--seeds", "2", "--out", str(tmp_path),
            "--name", "cli", "--no-progress"]
    assert cli.main(argv) == 0
    recorded = yaml.safe_load((tmp_path / "cli" / "config.yaml").read_text())
    assert recorded["config"]["shared_trunk"] is True and recorded["config"]["anneal_lr"] is True
    metrics = read_csv(str(tmp_path / "cli" / "metrics.csv"))
    assert len(metrics["lr"]) == 2 * 6
    u = metrics["update"] - 1  # the logged update counts from 1; its rate is that of update u (from 0)
    np.testing.assert_allclose(metrics["lr"], np.float32(0.004) * (1 - u.astype(np.float32) / np.float32(6)),
                               rtol=1e-6)
    policy = jaxpo.load_policy(str(tmp_path / "cli"), run=1)
    assert policy.params["critic"] == {} and policy.config.shared_trunk  # what a checkpoint gives back


REFERENCE = {  # file -> values its source sets (JaxMARL / Mava), checked after loading
    "jaxmarl_ippo_rnn_smax.yaml": dict(env="HeuristicEnemySMAX", num_envs=128, num_steps=128, hidden=(128, 128),
                                       activation="relu", recurrent=True, shared_trunk=True, agent_ids=False,
                                       anneal_lr=True, lr=0.004, clip_eps=0.05),
    "jaxmarl_mappo_homogenous_rnn_smax.yaml": dict(env="HeuristicEnemySMAX", num_envs=128, critic_input="global",
                                                   recurrent=True, shared_trunk=False, anneal_lr=True, lr=0.002,
                                                   ent_coef=0.0),
    "jaxmarl_ippo_ff_mpe.yaml": dict(env="MPE_simple_spread_v3", num_envs=16, num_steps=128, hidden=(64, 64),
                                     activation="tanh", recurrent=False, agent_ids=False, anneal_lr=True, lr=0.00025),
    "jaxmarl_ippo_ff_overcooked.yaml": dict(env="overcooked", num_envs=16, num_steps=128, hidden=(64, 64),
                                            activation="tanh", encoder="mlp", anneal_lr=True, lr=0.00025,
                                            lr_horizon=2441),
    "jaxmarl_ippo_cnn_overcooked.yaml": dict(env="overcooked", num_envs=64, num_steps=256, num_minibatches=16,
                                             hidden=(64, 64), activation="relu", encoder="cnn",
                                             conv_features=(32, 32, 32), conv_kernels=(5, 3, 3), shared_trunk=True,
                                             agent_ids=False, anneal_lr=True, lr=0.0005, steps=305 * 16384),
    "jaxmarl_ippo_rnn_overcooked_v2.yaml": dict(env="overcooked_v2", num_envs=256, num_steps=256,
                                                num_minibatches=64, hidden=(128, 128), activation="relu",
                                                encoder="cnn", conv_features=(128, 128, 8, 16, 32, 32),
                                                conv_kernels=(1, 1, 1, 3, 3, 3), recurrent=True, shared_trunk=True,
                                                agent_ids=False, anneal_lr=True, lr=0.00025, max_grad_norm=0.5,
                                                steps=457 * 65536),
    "jaxmarl_ippo_ff_mabrax.yaml": dict(env="ant_4x2", num_envs=64, num_steps=300, hidden=(64, 64),
                                        activation="tanh", shared_trunk=False, agent_ids=False, anneal_lr=True,
                                        lr=0.001, vf_coef=4.5, ent_coef=2e-6, max_grad_norm=2.0, steps=520 * 19200),
    "jaxmarl_ippo_ff_hanabi.yaml": dict(env="hanabi", num_envs=1024, num_steps=128, hidden=(512, 512),
                                        activation="relu", shared_trunk=True, agent_ids=False, anneal_lr=False,
                                        lr=0.0005, ent_coef=0.01),
    "mava_rec_ippo_smax.yaml": dict(env="HeuristicEnemySMAX", recurrent=True, anneal_lr=False, lr=0.00025,
                                    eval_every=20480, eval_episodes=32, eval_greedy=False, absolute_episodes=320),
    "mava_rec_mappo_smax.yaml": dict(env="HeuristicEnemySMAX", recurrent=True, critic_input="global",
                                     eval_every=20480, eval_episodes=32, eval_greedy=False),
}
OVERCOOKED_KWARGS = {
    "jaxmarl_ippo_ff_overcooked.yaml": {"layout": "coord_ring", "shaped_reward": 1.0},
    "jaxmarl_ippo_cnn_overcooked.yaml": {"layout": "counter_circuit", "shaped_reward": 1.0},
    "jaxmarl_ippo_rnn_overcooked_v2.yaml": {"layout": "grounded_coord_simple", "agent_view_size": 2,
                                            "negative_rewards": True, "sample_recipe_on_delivery": True,
                                            "random_agent_positions": True, "shaped_reward": 1.0},
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_each_reference_config_plans_with_its_sources_values(name, tmp_path):
    from jaxpo.experiments.sweeps import plan
    from jaxpo.experiments.experiment import load_yaml
    import jaxpo.experiments

    path = f"{jaxpo.experiments.__path__[0]}/configs/{name}"
    experiment = load_yaml(path)
    values = {**vars(experiment.config), **experiment.hyper.scalars(), **vars(experiment.run)}
    for key, expected in REFERENCE[name].items():
        assert values[key] == pytest.approx(expected) if isinstance(expected, float) else values[key] == expected, key
    if experiment.config.env == "HeuristicEnemySMAX":  # JaxMARL's SMAX settings in every SMAX file
        assert dict(experiment.config.env_kwargs) == {"scenario": "2s3z", "see_enemy_actions": True,
                                                      "walls_cause_death": True, "attack_mode": "closest"}
    if name in OVERCOOKED_KWARGS:
        assert dict(experiment.config.env_kwargs) == OVERCOOKED_KWARGS[name]
    (program,) = plan(path, run={"out": str(tmp_path)}).programs  # every setting checked, nothing compiled
    assert program.config == experiment.config.__class__(**{**vars(experiment.config),
                                                            "updates_per_chunk": program.config.updates_per_chunk})


def test_the_smax_reference_trains_through_the_cli_and_exports_for_marl_eval(tmp_path, capsys):
    """JaxMARL's ippo_rnn_smax at CI size (its network, annealing, no agent ids), with
    evaluation during training, then ``jaxpo export``: marl-eval's SMAX/2s3z entry with
    per-episode win rates. The CLI's SMAX run reports its win rate too (the header line,
    the summary, metrics.csv's column)."""
    import json
    import jaxpo.experiments

    path = f"{jaxpo.experiments.__path__[0]}/configs/jaxmarl_ippo_rnn_smax.yaml"
    argv = ["train", "--config", path, "--num-envs", "4", "--num-steps", "16", "--updates-per-chunk", "2",
            "--hidden", "16", "16", "--steps", str(4 * 4 * 16), "--seeds", "2", "--eval-every", "64",
            "--eval-episodes", "2", "--out", str(tmp_path), "--name", "smax", "--no-progress"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    env_kwargs = "{'attack_mode': 'closest', 'scenario': '2s3z', 'see_enemy_actions': True, 'walls_cause_death': True}"
    assert f"HeuristicEnemySMAX {env_kwargs} — 5 agents, 10 actions" in out
    summary = json.loads(out.strip().splitlines()[-1], parse_constant=reject_nan)
    assert 0.0 <= summary["win_rate_after"] <= 1.0 and "win rate: before" in out
    assert "win_rate" in (tmp_path / "smax" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert cli.main(["export", str(tmp_path / "smax")]) == 0
    data = json.loads((tmp_path / "smax" / "marl_eval.json").read_text())
    seeds = data["SMAX"]["2s3z"]["ippo"]
    assert sorted(seeds) == ["seed_0", "seed_1"]
    steps = {k: v for k, v in seeds["seed_0"].items() if k.startswith("step_")}
    assert [v["step_count"] for v in steps.values()] == [128, 256]  # after the chunks crossing 64-step multiples
    assert all(set(v["win_rate"]) <= {0.0, 1.0} and len(v["win_rate"]) == 2 for v in steps.values())
    assert len(seeds["seed_0"]["absolute_metrics"]["return"]) == 20  # 10 × eval_episodes
    metrics = read_csv(str(tmp_path / "smax" / "metrics.csv"))
    np.testing.assert_allclose(metrics["lr"][metrics["run_id"] == 0], 0.004 * (1 - np.arange(4) / 4), rtol=1e-6)
