"""jaxpo.core.happo: the sequential HAPPO actor update against an explicit per-agent Python loop."""

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxpo.core import happo
from jaxpo.core.kernels.cpu import permutation
from jaxpo.core.modules import MLP, Head, Layout
from jaxpo.core.networks import MASKED_LOGIT
from jaxpo.core.rollout import Transition

N, B, O, A = 3, 32, 4, 5
EPOCHS, MBS = 2, 4
EPS, ENT = 0.2, 0.01
ORDER = (2, 0, 1)
# A large step size so that the later agents' factors move well away from 1.
OPT = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(0.05, eps=1e-5))
MODULE = MLP(Layout((8,), (Head(A),)))


def actor_apply(params, obs, mask):
    """One agent: ``obs [b, O]``, ``mask [b, A]`` -> Categorical ``[b]``."""
    return distrax.Categorical(logits=jnp.where(mask, MODULE.apply(params, obs), MASKED_LOGIT))


@jax.jit
def _setup():
    k_params, k_obs, k_mask, k_act, k_adv = jax.random.split(jax.random.PRNGKey(0), 5)
    params = jax.vmap(lambda k: MODULE.init(k, jnp.zeros((1, O))))(jax.random.split(k_params, N))
    obs = jax.random.normal(k_obs, (B, N, O))
    mask = (jax.random.uniform(k_mask, (B, N, A)) < 0.7).at[..., 0].set(True)
    # Behaviour policy = the initial parameters, as after a rollout.
    dist = jax.vmap(actor_apply, in_axes=(0, 1, 1), out_axes=1)(params, obs, mask)
    action = dist.sample(seed=k_act).astype(jnp.int32)
    batch = Transition(
        obs=obs, action_mask=mask, critic_obs=None, action=action, log_prob=dist.log_prob(action),
        carry=None, first=None, value=None, reward=None, terminated=None, truncated=None, final_value=None,
        episode_return=None, episode_length=None,
    )
    advantages = jax.random.normal(k_adv, (B, N))  # distinct per-agent columns
    return params, batch, advantages


PARAMS, BATCH, ADV = _setup()
KEY = jax.random.PRNGKey(7)


TRACED_ORDERS = []  # order shapes run_trace was traced with


@jax.jit
def run_trace(params, order, key):
    TRACED_ORDERS.append(order.shape)
    opt_state = happo.init_opt_state(OPT, params)
    return happo.sequential_actor_trace(
        actor_apply, params, opt_state, OPT, BATCH, ADV, order, key, clip_eps=EPS, ent_coef=ENT,
            num_epochs=EPOCHS, num_minibatches=MBS,
    )


def _agent(tree, k):
    return jax.tree.map(lambda x: x[k], tree)


def _log_prob(params_k, k, idx):
    """Hand-written masked log-softmax log-prob of agent k's actions at rows ``idx``."""
    logits = jnp.where(BATCH.action_mask[idx, k], MODULE.apply(params_k, BATCH.obs[idx, k]), MASKED_LOGIT)
    logp_all = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(logp_all, BATCH.action[idx, k][:, None], axis=1)[:, 0], logp_all


def _ref_loss(params_k, k, idx, factor):
    """HARL's per-agent actor loss, written out: −mean f·min(ρA, clip(ρ)A) − c·mean H."""
    logp, logp_all = _log_prob(params_k, k, idx)
    ratio = jnp.exp(logp - BATCH.log_prob[idx, k])
    adv = ADV[idx, k]
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - EPS, 1 + EPS) * adv)
    entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=1)
    return -jnp.mean(factor[idx] * surrogate) - ENT * jnp.mean(entropy)


@jax.jit
def _ref_step(params_k, opt_k, k, idx, factor):
    """One plain optimiser step of agent k on minibatch rows ``idx`` (jitted for speed only)."""
    grads = jax.grad(_ref_loss)(params_k, k, idx, factor)
    updates, opt_k = OPT.update(grads, opt_k, params_k)
    return optax.apply_updates(params_k, updates), opt_k


_ref_log_prob = jax.jit(lambda params_k, k: _log_prob(params_k, k, np.arange(B))[0])


def reference(params, order, key):
    """Explicit per-agent loop (no scan): returns final params, factors used, snapshots."""
    agents = [_agent(params, k) for k in range(N)]
    opts = [OPT.init(p) for p in agents]
    agent_keys = jax.random.split(key, N)
    factor = jnp.ones(B)
    factors, snapshots = [], []
    for m in order:
        factors.append(factor)
        for epoch_key in jax.random.split(agent_keys[m], EPOCHS):
            perm = np.asarray(permutation(epoch_key, B))
            for idx in np.split(perm, MBS):
                agents[m], opts[m] = _ref_step(agents[m], opts[m], m, idx, factor)
        new_logp = _ref_log_prob(agents[m], m)
        factor = factor * jnp.exp(new_logp - BATCH.log_prob[:, m])
        snapshots.append(jax.tree.map(lambda *xs: jnp.stack(xs), *agents))
    return snapshots[-1], factors, factor, snapshots


def assert_trees_close(a, b, atol=1e-6):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=atol), a, b)


@pytest.fixture(scope="module")
def ref():
    return reference(PARAMS, ORDER, KEY)


def test_factors_and_params_match_explicit_loop(ref):
    ref_params, ref_factors, ref_joint, _ = ref
    params, opt_state, trace = run_trace(PARAMS, jnp.array(ORDER), KEY)
    np.testing.assert_array_equal(trace["agent"], ORDER)
    for p in range(N):
        np.testing.assert_allclose(trace["factor"][p], ref_factors[p], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trace["joint_ratio"], ref_joint, rtol=1e-5, atol=1e-6)
    assert_trees_close(params, ref_params)
    # The comparison is not vacuous: later agents really train with factors away from 1.
    assert np.max(np.abs(ref_factors[2] - 1.0)) > 0.05
    # Each agent's Adam count advanced only by its own EPOCHS × MBS steps.
    np.testing.assert_array_equal(opt_state[1][0].count, [EPOCHS * MBS] * N)


def test_first_factor_is_exactly_one():
    _, _, trace = run_trace(PARAMS, jnp.array(ORDER), KEY)
    np.testing.assert_array_equal(trace["factor"][0], np.ones(B, np.float32))


def test_not_yet_updated_agents_are_unchanged(ref):
    """Stopping after 2 of 3 positions: updated agents match the loop, the last is untouched."""
    steps = 2
    snapshot = ref[3][steps - 1]
    params, _, _ = run_trace(PARAMS, jnp.array(ORDER[:steps]), KEY)
    for k in range(N):
        if k in ORDER[:steps]:
            assert_trees_close(_agent(params, k), _agent(snapshot, k))
        else:
            jax.tree.map(np.testing.assert_array_equal, _agent(params, k), _agent(PARAMS, k))


def test_clip_applies_to_own_ratio_only():
    """Factor far from 1, own ratio inside the clip range: gradient = −f·∇ρ·A / B, not 0."""
    ratio = jnp.array([0.9, 1.1, 1.5, 0.5])  # b2 above 1+ε with A > 0: clipped
    adv = jnp.array([1.0, -2.0, 1.0, 1.0])
    factor = jnp.array([5.0, 0.1, 5.0, 3.0])  # a clipped product f·ρ would kill b0
    old = jnp.zeros(4)
    loss_fn = jax.jit(lambda lp: happo.happo_policy_loss(lp, old_log_prob=old, advantages=adv, factor=factor, clip_eps=EPS)[0])
    grad = jax.jit(jax.grad(loss_fn))(jnp.log(ratio))
    # d/dlogρ of −f·ρ·A/B is −f·ρ·A/B where the unclipped branch is active.
    active = np.array([1.0, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(grad, -active * factor * ratio * adv / 4, rtol=1e-6)
    assert grad[0] != 0.0
    expected_loss = -np.mean(factor * np.minimum(ratio * adv, np.clip(ratio, 1 - EPS, 1 + EPS) * adv))
    np.testing.assert_allclose(loss_fn(jnp.log(ratio)), expected_loss, rtol=1e-6)


def test_no_gradient_through_factor():
    """Agent m's loss, with its factor built from the earlier agents' current params."""
    params = jax.tree.map(lambda x: x * 1.3, PARAMS)  # ratios away from 1
    m, earlier = ORDER[2], ORDER[:2]
    rows = np.arange(B)

    def loss_of_all(params, factor_fn):
        log_ratio = lambda k: _log_prob(_agent(params, k), k, rows)[0] - BATCH.log_prob[:, k]
        factor = factor_fn(jnp.exp(sum(log_ratio(k) for k in earlier)))
        lp = _log_prob(_agent(params, m), m, rows)[0]
        return happo.happo_policy_loss(lp, old_log_prob=BATCH.log_prob[:, m], advantages=ADV[:, m], factor=factor,
                                       clip_eps=EPS)[0]

    grads = jax.jit(jax.grad(loss_of_all), static_argnums=1)(params, lambda f: f)
    norm = lambda k: sum(float(jnp.sum(jnp.abs(g[k]))) for g in jax.tree.leaves(grads))
    for k in earlier:
        assert norm(k) == 0.0
    assert norm(m) > 0.0
    # Sanity (the check can fail): an undetached factor would pass gradient to earlier agents.
    leaky = lambda p: -jnp.mean(
        jnp.exp(sum(_log_prob(_agent(p, k), k, rows)[0] - BATCH.log_prob[:, k] for k in earlier))
    )
    leaky_grads = jax.jit(jax.grad(leaky))(params)
    assert sum(float(jnp.sum(jnp.abs(g[earlier[0]]))) for g in jax.tree.leaves(leaky_grads)) > 0.0


def test_order_is_traced_one_compile():
    p1, _, _ = run_trace(PARAMS, jnp.array([2, 0, 1]), KEY)
    p2, _, _ = run_trace(PARAMS, jnp.array([1, 2, 0]), KEY)
    assert TRACED_ORDERS.count((N,)) == 1
    assert not np.allclose(p1["params"]["Dense_0"]["kernel"], p2["params"]["Dense_0"]["kernel"])


def test_metrics_and_vmap_over_runs():
    """Batched over runs as in ``Trainer.chunk_runs``: each run draws its own order."""

    def update(params, order, key):
        opt_state = happo.init_opt_state(OPT, params)
        return happo.sequential_actor_update(
            actor_apply, params, opt_state, OPT, BATCH, ADV, order, key, clip_eps=EPS, ent_coef=ENT,
            num_epochs=EPOCHS, num_minibatches=MBS,
        )

    orders = jnp.array([[2, 0, 1], [1, 2, 0]])
    stacked = jax.tree.map(lambda x: jnp.stack([x, x]), PARAMS)
    params, _, metrics = jax.jit(jax.vmap(update, in_axes=(0, 0, None)))(stacked, orders, KEY)
    for r in range(2):
        single, _, trace = run_trace(PARAMS, orders[r], KEY)
        assert_trees_close(_agent(params, r), single, atol=1e-5)
        np.testing.assert_allclose(metrics["entropy"][r], trace["entropy"].sum(), rtol=1e-5)
        np.testing.assert_allclose(metrics["factor_max"][r], trace["factor"].max(), rtol=1e-5)
    expected = {"policy_loss", "entropy", "clip_frac", "approx_kl", "factor_mean", "factor_std",
                "factor_min", "factor_max", "joint_ratio_dev"}
    assert set(metrics) == expected
    assert all(np.all(np.isfinite(v)) for v in metrics.values())
    assert np.all(metrics["factor_min"] < 1.0) and np.all(metrics["factor_max"] > 1.0)


def test_rejects_bad_shapes():
    opt_state = happo.init_opt_state(OPT, PARAMS)
    with pytest.raises(ValueError, match="num_minibatches"):
        happo.sequential_actor_update(
            actor_apply, PARAMS, opt_state, OPT, BATCH, ADV, jnp.array(ORDER), KEY, clip_eps=EPS, ent_coef=ENT,
            num_epochs=1, num_minibatches=5,
        )
    with pytest.raises(AssertionError):
        happo.sequential_actor_update(
            actor_apply, PARAMS, opt_state, OPT, BATCH, ADV[:, :2], jnp.array(ORDER), KEY, clip_eps=EPS, ent_coef=ENT,
            num_epochs=1, num_minibatches=4,
        )


def test_an_inactive_agents_ratio_leaves_the_later_agents_factors():
    """The first agent in the order acts in the second half of the batch only: the agent
    after it trains with the factor 1 exactly on the first half, and with the first
    agent's moved ratio on the second."""
    active = jnp.ones((B, N), bool).at[: B // 2, ORDER[0]].set(False)
    _, _, trace = jax.jit(lambda params: happo.sequential_actor_trace(
        actor_apply, params, happo.init_opt_state(OPT, params), OPT, BATCH.replace(active=active), ADV,
        jnp.array(ORDER), KEY, clip_eps=EPS, ent_coef=ENT, num_epochs=EPOCHS, num_minibatches=MBS))(PARAMS)
    second = np.asarray(trace["factor"][1])
    assert np.all(second[: B // 2] == 1.0)
    assert np.mean(second[B // 2:] != 1.0) > 0.9, second
