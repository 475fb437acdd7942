"""jaxpo.losses against hand-written numpy formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core import losses

N, B, EPS = 3, 64, 0.2
I3 = np.eye(N)
ONES = np.ones((N, N))


def happo_S_R(order):
    """S_R[k, i] = 1 iff k precedes or is i in `order`."""
    pos = np.argsort(order)
    return (pos[:, None] <= pos[None, :]).astype(np.float64)


_rng = np.random.default_rng(1)
SUPPORTS = {
    "ippo": (I3, I3),
    "mappo": (ONES, I3),
    "happo": (I3, happo_S_R(np.array([2, 0, 1]))),
    "joint": (ONES, ONES),
    "random": (_rng.uniform(0.0, 1.5, (N, N)), (_rng.uniform(size=(N, N)) < 0.5) * 1.0),
}

aggregate_jit = jax.jit(losses.aggregate_advantages)
policy_loss_jit = jax.jit(losses.policy_loss)
value_loss_jit = jax.jit(losses.value_loss)
normalize_jit = jax.jit(losses.normalize_advantages, static_argnames="scope")


def textbook_ppo(log_prob, old_log_prob, adv, eps):
    """Single-agent clipped surrogate loss, [B] inputs."""
    ratio = np.exp(log_prob - old_log_prob)
    return -np.mean(np.minimum(ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv))


def random_batch(seed, scale=0.4):
    rng = np.random.default_rng(seed)
    old = rng.normal(-1.0, 0.3, (B, N))
    new = old + rng.normal(0.0, scale, (B, N))  # big enough to clip both ways
    adv = rng.normal(size=(B, N))
    return new.astype(np.float32), old.astype(np.float32), adv.astype(np.float32)


def test_happo_order_triangular():
    S_R = happo_S_R(np.array([2, 0, 1]))  # order: agent 2 first, then 0, then 1
    np.testing.assert_array_equal(S_R, [[1, 1, 0], [0, 1, 0], [1, 1, 1]])


@pytest.mark.parametrize("name", sorted(SUPPORTS))
def test_policy_loss_matches_formula(name):
    S_A, S_R = SUPPORTS[name]
    new, old, adv = random_batch(2)
    agg = aggregate_jit(jnp.asarray(adv), jnp.asarray(S_A, jnp.float32))
    loss, metrics = policy_loss_jit(new, old, agg, jnp.asarray(S_R, jnp.float32), EPS)

    # Hand formula, float64, explicit loops over terms and factors.
    log_rho = new.astype(np.float64) - old
    a_hat = np.zeros((B, N))
    rho_bar = np.ones((B, N))
    for i in range(N):
        for j in range(N):
            a_hat[:, i] += S_A[i, j] * adv[:, j]
        for k in range(N):
            if S_R[k, i]:
                rho_bar[:, i] *= np.exp(log_rho[:, k])
    np.testing.assert_allclose(agg, a_hat, rtol=1e-5, atol=1e-5)
    surr = np.minimum(rho_bar * a_hat, np.clip(rho_bar, 1 - EPS, 1 + EPS) * a_hat)
    expected = -sum(surr[:, i].mean() for i in range(N))
    # Clipping must bind in both directions for the test to mean anything.
    assert np.any((rho_bar > 1 + EPS) & (a_hat > 0))
    assert np.any((rho_bar < 1 - EPS) & (a_hat < 0))
    np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        metrics["clip_frac"], np.mean(np.abs(rho_bar - 1) > EPS), atol=1e-6
    )
    np.testing.assert_allclose(
        metrics["approx_kl"], np.mean(np.exp(log_rho) - 1 - log_rho), rtol=1e-4, atol=1e-7
    )


def test_ippo_is_sum_of_single_agent_ppo():
    new, old, adv = random_batch(3)
    loss, _ = policy_loss_jit(new, old, adv, jnp.eye(N), EPS)
    expected = sum(textbook_ppo(new[:, k], old[:, k], adv[:, k], EPS) for k in range(N))
    np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-6)


def test_product_is_clipped_as_one_weight():
    # Each factor 1.15 lies inside [0.8, 1.2]; their product 1.3225 does not.
    log_ratio = np.log(1.15)
    old = np.zeros((1, 2), np.float32)
    new = np.full((1, 2), log_ratio, np.float32)
    adv = np.ones((1, 2), np.float32)  # positive: the upper clip binds
    S_R = jnp.ones((2, 2))
    loss, metrics = policy_loss_jit(new, old, adv, S_R, EPS)
    clipped_product = 2 * -(1 + EPS)  # two terms, each −min(1.3225, 1.2)
    per_factor = 2 * -(1.15 * 1.15)  # clip each factor (no-op), then multiply
    np.testing.assert_allclose(loss, clipped_product, rtol=1e-6)
    assert abs(per_factor - clipped_product) > 0.1
    np.testing.assert_allclose(metrics["clip_frac"], 1.0)
    # The clipped weight is constant: no gradient flows.
    grad = jax.jit(jax.grad(lambda lp: losses.policy_loss(lp, old, adv, S_R, EPS)[0]))(new)
    np.testing.assert_array_equal(grad, 0.0)


def _logit_grad(S_R, logits, old, adv, actions):
    """d loss / d logits, [B, N, A]; log_prob from per-agent softmax logits."""

    def loss_fn(lg):
        lp = jnp.take_along_axis(jax.nn.log_softmax(lg), actions[..., None], -1)[..., 0]
        return losses.policy_loss(lp, old, adv, S_R, EPS)[0]

    return jax.grad(loss_fn)(logits)


_logit_grad_jit = jax.jit(_logit_grad)


@pytest.mark.parametrize("name,separable", [("ippo", True), ("mappo", True), ("joint", False)])
def test_gradient_separates_per_agent_under_identity_ratio(name, separable):
    """S_R = I: agent k's logit gradient depends only on agent k's data."""
    _, S_R = SUPPORTS[name]
    S_R = jnp.asarray(S_R, jnp.float32)
    rng = np.random.default_rng(4)
    n_act = 4
    logits = rng.normal(size=(B, N, n_act)).astype(np.float32)
    actions = rng.integers(0, n_act, (B, N))
    old = np.log(rng.uniform(0.1, 0.5, (B, N))).astype(np.float32)
    adv = rng.normal(size=(B, N)).astype(np.float32)
    g = _logit_grad_jit(S_R, logits, old, adv, actions)

    # Perturb every input of agent 0 only.
    logits2, old2, adv2, actions2 = logits.copy(), old.copy(), adv.copy(), actions.copy()
    logits2[:, 0] += rng.normal(size=(B, n_act)).astype(np.float32)
    old2[:, 0] += 0.3
    adv2[:, 0] = rng.normal(size=B)
    actions2[:, 0] = (actions2[:, 0] + 1) % n_act
    g2 = _logit_grad_jit(S_R, logits2, old2, adv2, actions2)

    assert not np.allclose(g[:, 0], g2[:, 0])  # agent 0's own gradient changed
    others_unchanged = np.allclose(g[:, 1:], g2[:, 1:], rtol=0, atol=1e-7)
    assert others_unchanged == separable


def test_value_loss_matches_formula():
    rng = np.random.default_rng(5)
    old_v = rng.normal(size=(B, N)).astype(np.float32)
    v = (old_v + rng.normal(0, 0.5, (B, N))).astype(np.float32)
    ret = rng.normal(size=(B, N)).astype(np.float32)
    loss = value_loss_jit(v, old_v, ret, EPS)
    expected = 0.0
    n_clipped_wins = 0
    for b in range(B):
        for k in range(N):
            unclipped = (float(v[b, k]) - ret[b, k]) ** 2
            step = min(max(float(v[b, k]) - old_v[b, k], -EPS), EPS)
            clipped = (old_v[b, k] + step - ret[b, k]) ** 2
            n_clipped_wins += clipped > unclipped
            expected += 0.5 * max(unclipped, clipped) / B
    assert 0 < n_clipped_wins < B * N  # both branches of the max are exercised
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_entropy_and_ppo_loss_total():
    new, old, adv = random_batch(6)
    rng = np.random.default_rng(6)
    v, old_v, ret = (rng.normal(size=(B, N)).astype(np.float32) for _ in range(3))
    ent = rng.uniform(0.5, 1.5, (B, N)).astype(np.float32)
    S_R = jnp.asarray(SUPPORTS["happo"][1], jnp.float32)
    total, m = jax.jit(losses.ppo_loss)(new, old, adv, v, old_v, ret, ent, S_R, EPS, 0.5, 0.01)
    pi, _ = policy_loss_jit(new, old, adv, S_R, EPS)
    vl = value_loss_jit(v, old_v, ret, EPS)
    ent_ref = ent.astype(np.float64).sum(-1).mean()
    np.testing.assert_allclose(m["entropy"], ent_ref, rtol=1e-6)
    np.testing.assert_allclose(total, pi + 0.5 * vl - 0.01 * ent_ref, rtol=1e-5, atol=1e-6)
    assert set(m) == {"policy_loss", "value_loss", "entropy", "clip_frac", "approx_kl", "loss"}
    assert all(jnp.shape(x) == () for x in m.values())
    np.testing.assert_allclose(m["policy_loss"], pi, rtol=1e-6)
    np.testing.assert_allclose(m["value_loss"], vl, rtol=1e-6)
    np.testing.assert_allclose(m["loss"], total)


def test_normalize_scopes():
    rng = np.random.default_rng(7)
    adv = (rng.normal(size=(5, 4, N)) * [1.0, 3.0, 10.0] + [0.0, 2.0, -5.0]).astype(np.float32)
    np.testing.assert_array_equal(normalize_jit(adv, scope="none"), adv)
    a64 = adv.astype(np.float64)
    batch = (a64 - a64.mean()) / (a64.std() + 1e-8)
    agent = (a64 - a64.mean((0, 1))) / (a64.std((0, 1)) + 1e-8)
    np.testing.assert_allclose(normalize_jit(adv, scope="batch"), batch, atol=1e-5)
    np.testing.assert_allclose(normalize_jit(adv, scope="agent"), agent, atol=1e-5)
    assert not np.allclose(batch, agent, atol=1e-2)


def test_normalize_bad_scope():
    with pytest.raises(ValueError, match="scope"):
        losses.normalize_advantages(jnp.zeros((4, N)), "per_agent")


def test_traced_support_and_eps_under_vmap():
    """S_R and ε may be traced: vmapping over them matches separate calls."""
    new, old, adv = random_batch(8)
    S_Rs = jnp.stack([jnp.asarray(SUPPORTS[n][1], jnp.float32) for n in ("ippo", "happo")])
    eps = jnp.array([0.1, 0.3])
    batched = jax.jit(jax.vmap(losses.policy_loss, in_axes=(None, None, None, 0, 0)))
    out, _ = batched(new, old, adv, S_Rs, eps)
    for b in range(2):
        np.testing.assert_allclose(
            out[b], policy_loss_jit(new, old, adv, S_Rs[b], eps[b])[0], rtol=1e-6
        )
