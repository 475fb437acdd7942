"""jaxpo.core.diagnostics against independent computations: per-sample gradients from plain
``jax.grad`` of each sample's loss with numpy statistics, importance weights at θ_old,
and the training metrics of ``Config(diagnostics=True)`` against the library functions
on the same data."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo import Config, Hyper

from jaxpo.core import diagnostics, losses, support
from jaxpo.program.compiled import Trainer

SMALL = dict(env="public_goods", env_kwargs={"num_agents": 3}, num_envs=2, num_steps=4, num_epochs=1,
             num_minibatches=1, hidden=(8,), updates_per_chunk=1)
WINDOW = np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1]], np.float32)  # each term's ratio: 2 agents


def _moved_state(tr: Trainer, hyper: Hyper):
    """A state after one update (so the policy is away from the data's θ_old) and the data of the next."""
    state = jax.jit(tr.init)(jax.random.PRNGKey(3), hyper)
    state, _ = jax.jit(tr.step)(state, hyper)
    _, _, data = jax.jit(tr.collect)(state, hyper)
    moved = jax.jit(tr.update)(state, data, jax.random.PRNGKey(9), hyper)[0][0]
    return state, moved, data


def _numpy_stats(g: np.ndarray) -> dict[str, np.ndarray]:
    """g [B, N, P] per-sample, per-agent gradients -> signal, variance, snr [N]."""
    b = g.shape[0]
    mean = g.mean(0)
    signal = (mean ** 2).sum(-1)
    variance = g.var(0, ddof=1).sum(-1)
    return {"signal": signal, "variance": variance, "snr": signal / (variance / b)}


@pytest.mark.parametrize("chunk_elements", [1 << 24, 1])  # one scan step; one sample per step
def test_per_agent_gradient_statistics_match_numpy_on_per_sample_gradients(monkeypatch, chunk_elements):
    monkeypatch.setattr(diagnostics, "_CHUNK_ELEMENTS", chunk_elements)
    # Per-agent parameters: agent k's gradient is the gradient w.r.t. its own slice,
    # which plain jax.grad of each sample's loss gives without any masking.
    tr = Trainer(Config(share_params=False, **SMALL))
    hyper = Hyper.create(support.custom(np.eye(3), WINDOW))
    _, moved, (samples, advantages, _) = _moved_state(tr, hyper)
    actor = moved["actor"]

    def sample_loss(params, sample, advantage):
        batch = jax.tree.map(lambda x: x[None], sample)
        return losses.policy_loss(tr.log_probs(params, batch), tr.flat_time_major(batch.log_prob),
                                  tr.flat_time_major(advantage[None]), hyper.S_R, hyper.clip_eps)[0]

    size = advantages.shape[0]
    grad = jax.jit(jax.grad(sample_loss))  # one program for every sample, not each op eagerly
    per_sample = [grad(actor, jax.tree.map(lambda x: x[b], samples), advantages[b]) for b in range(size)]
    # agent k's slice of every leaf, flattened: [B, N, P_k]; the objective is −loss
    g = -np.stack([np.concatenate([np.asarray(x).reshape(3, -1) for x in jax.tree.leaves(p)], axis=1)
                   for p in per_sample])
    assert np.abs(g).max() > 0 and np.isfinite(g).all()
    expected = _numpy_stats(g.astype(np.float64))
    got = jax.jit(diagnostics.policy_gradient_stats, static_argnums=0)(tr, actor, (samples, advantages, None), hyper)
    for name in ("signal", "variance", "snr"):
        np.testing.assert_allclose(np.asarray(got[name]), expected[name], rtol=2e-4, err_msg=name)
    # the ratio product is away from 1 here, so S_R shaped these gradients
    weights = jax.jit(diagnostics.importance_weight_stats, static_argnums=0)(tr, actor, (samples, advantages, None),
                                                                             hyper)
    assert float(weights["variance"]) > 1e-6


def test_shared_parameter_agent_shares_sum_to_the_gradient():
    tr = Trainer(Config(**SMALL))
    hyper = Hyper.create(support.custom(np.eye(3), WINDOW))
    _, moved, (samples, advantages, _) = _moved_state(tr, hyper)
    actor = moved["actor"]
    # leaves [B, N, ...]: each sample's gradient share of each agent
    shares = jax.jit(diagnostics.sample_gradients, static_argnums=0)(tr, actor, samples, advantages, hyper)

    def batch_objective(params):
        return -losses.policy_loss(tr.log_probs(params, samples), tr.flat_time_major(samples.log_prob),
                                   tr.flat_time_major(advantages), hyper.S_R, hyper.clip_eps)[0]

    full = jax.jit(jax.grad(batch_objective))(actor)
    for share, whole in zip(jax.tree.leaves(shares), jax.tree.leaves(full)):
        np.testing.assert_allclose(np.asarray(share.sum(1).mean(0)), np.asarray(whole), rtol=1e-4, atol=1e-7)
    # every agent has its own non-zero share
    norms = sum(np.square(np.asarray(s)).reshape(*s.shape[:2], -1).sum(-1) for s in jax.tree.leaves(shares))
    assert (norms.sum(0) > 0).all()


@pytest.mark.parametrize("recurrent", [False, True])
def test_importance_weights_are_one_at_theta_old(recurrent):
    tr = Trainer(Config(recurrent=recurrent, **SMALL))
    stats_fn = jax.jit(diagnostics.importance_weight_stats, static_argnums=0)
    # Jitted once, outside the loop: the supports are data, so one program serves all three.
    init, step, collect, log_probs = (jax.jit(f) for f in (tr.init, tr.step, tr.collect, tr.log_probs))
    for sup in (support.ippo(3), support.joint(3), support.custom(np.eye(3), WINDOW)):
        hyper = Hyper.create(sup)
        state = init(jax.random.PRNGKey(0), hyper)
        state, _ = step(state, hyper)
        _, _, (samples, advantages, targets) = collect(state, hyper)
        actor = state.params["actor"]
        # Given the behaviour log-probabilities, every weight is exactly 1, whatever S_R.
        replayed = jnp.swapaxes(log_probs(actor, samples).reshape(samples.log_prob.shape[1], -1, 3), 0, 1)
        exact = stats_fn(tr, actor, (samples.replace(log_prob=replayed), advantages, targets), hyper)
        assert {k: float(v) for k, v in exact.items()} == {"mean": 1.0, "variance": 0.0, "max": 1.0, "clip_frac": 0.0}
        # Against the rollout's own log-probabilities: XLA evaluates the network in
        # another batch layout there, which may differ in the last bit of log π.
        stats = stats_fn(tr, actor, (samples, advantages, targets), hyper)
        assert abs(float(stats["mean"]) - 1) < 1e-6 and float(stats["variance"]) < 1e-12
        assert abs(float(stats["max"]) - 1) < 1e-6 and float(stats["clip_frac"]) == 0


def test_training_metrics_are_the_library_statistics_of_the_same_update():
    # One minibatch, two epochs: epoch 1 runs at θ_old, epoch 2 at the parameters one
    # full-batch Adam step later.
    config = Config(diagnostics=True, **{**SMALL, "num_epochs": 2})
    tr = Trainer(config)
    hyper = Hyper.create(support.custom(np.eye(3), WINDOW))
    state = jax.jit(tr.init)(jax.random.PRNGKey(1), hyper)
    state, _ = jax.jit(tr.step)(state, hyper)
    _, metrics = jax.jit(tr.step)(state, hyper)
    _, _, data = jax.jit(tr.collect)(state, hyper)

    grads = jax.jit(diagnostics.policy_gradient_stats, static_argnums=0)(tr, state.params["actor"], data, hyper)
    for name in ("signal", "variance", "snr"):
        np.testing.assert_allclose(float(metrics[f"pg_{name}"]), float(grads[name].mean()), rtol=1e-5)
    epoch1 = [float(metrics[f"rho_{name}_e1"]) for name in ("mean", "var", "max", "clip")]
    np.testing.assert_allclose(epoch1, [1.0, 0.0, 1.0, 0.0], atol=1e-6)  # θ_old (to the last bit of log π)

    one_epoch = Trainer(dataclasses.replace(config, num_epochs=1, diagnostics=False))
    after_one = jax.jit(one_epoch.update)(state, data, jax.random.PRNGKey(0), hyper)[0][0]
    expected = jax.jit(diagnostics.importance_weight_stats, static_argnums=0)(tr, after_one["actor"], data, hyper)
    assert float(expected["variance"]) > 1e-6
    for name, short in (("mean", "mean"), ("variance", "var"), ("max", "max"), ("clip_frac", "clip")):
        np.testing.assert_allclose(float(metrics[f"rho_{short}_e2"]), float(expected[name]), rtol=1e-3, atol=1e-6,
                                   err_msg=name)


def test_diagnostics_are_off_by_default_and_refused_for_exact_happo():
    names = Trainer(Config(**SMALL)).metric_names()
    assert not [n for n in names if n.startswith(("pg_", "rho_"))]
    with pytest.raises(ValueError, match="Config.diagnostics is for the simultaneous scheme"):
        Config(diagnostics=True, scheme="sequential", share_params=False, **SMALL)
