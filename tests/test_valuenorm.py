"""jaxpo.core.valuenorm against a plain-numpy re-implementation of the MAPPO/HARL
ValueNorm update rule, and jaxpo.losses.huber / value_loss_huber (the critic loss
that consumes the normalised targets) against hand formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core import losses, valuenorm

N = 3


class NumpyValueNorm:
    """float64 re-implementation of the reference update rule (norm_axes leading axes)."""

    def __init__(self, shape, beta=0.99999, epsilon=1e-5, per_element_update=False):
        self.m = np.zeros(shape)
        self.m2 = np.zeros(shape)
        self.d = 0.0
        self.beta, self.epsilon, self.per_element = beta, epsilon, per_element_update
        self.k = len(shape)

    def update(self, x):
        x = np.asarray(x, np.float64)
        axes = tuple(range(x.ndim - self.k))
        w = self.beta ** np.prod([x.shape[a] for a in axes]) if self.per_element else self.beta
        self.m = w * self.m + (1 - w) * x.mean(axis=axes)
        self.m2 = w * self.m2 + (1 - w) * (x**2).mean(axis=axes)
        self.d = w * self.d + (1 - w)

    def mean_var(self):
        d = max(self.d, self.epsilon)
        mean = self.m / d
        return mean, np.maximum(self.m2 / d - mean**2, 1e-2)

    def normalize(self, x):
        mean, var = self.mean_var()
        return (x - mean) / np.sqrt(var)

    def denormalize(self, x):
        mean, var = self.mean_var()
        return x * np.sqrt(var) + mean


def batches(seed, count=8, loc=1.0, scale=2.0):
    """Random [B, N] batches, B alternating 16 / 40 (few shapes: few compilations),
    with per-agent means and spreads."""
    rng = np.random.default_rng(seed)
    agent_loc = loc + rng.normal(size=N)
    agent_scale = scale * rng.uniform(0.5, 1.5, size=N)
    return [
        (agent_loc + agent_scale * rng.normal(size=((16, 40)[k % 2], N))).astype(np.float32)
        for k in range(count)
    ]


update_jit = jax.jit(valuenorm.update, static_argnames="per_element_update")
normalize_jit = jax.jit(valuenorm.normalize)
denormalize_jit = jax.jit(valuenorm.denormalize)
mean_var_jit = jax.jit(valuenorm.running_mean_var)
value_loss_huber_jit = jax.jit(losses.value_loss_huber)


@pytest.mark.parametrize("stat_shape", [(), (N,)], ids=["shared", "per_agent"])
@pytest.mark.parametrize("per_element_update", [False, True])
def test_matches_numpy_reference(stat_shape, per_element_update):
    state = valuenorm.init(stat_shape)
    ref = NumpyValueNorm(stat_shape, per_element_update=per_element_update)
    probe = np.linspace(-4.0, 6.0, 2 * N, dtype=np.float32).reshape(2, N)
    for x in batches(0):
        state = update_jit(state, x, per_element_update=per_element_update)
        ref.update(x)
        mean, var = mean_var_jit(state)
        ref_mean, ref_var = ref.mean_var()
        assert (jnp.shape(mean), jnp.shape(var)) == (stat_shape, stat_shape)
        tol = dict(rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(mean, ref_mean, **tol)
        np.testing.assert_allclose(var, ref_var, **tol)
        np.testing.assert_allclose(normalize_jit(state, probe), ref.normalize(probe), **tol)
        np.testing.assert_allclose(denormalize_jit(state, probe), ref.denormalize(probe), **tol)
    # The raw state too (a Python-float β keeps 1 − β to float32 precision).
    np.testing.assert_allclose(state.debiasing_term, ref.d, rtol=1e-5)
    np.testing.assert_allclose(state.running_mean, ref.m, rtol=1e-5)
    np.testing.assert_allclose(state.running_mean_sq, ref.m2, rtol=1e-5)
    if not per_element_update:
        # Debiased statistics after K updates are the plain average of batch means
        # (β^k ≈ 1): the debiasing term must be doing its job.
        xs = batches(0)
        axes = (0,) if stat_shape else (0, 1)
        np.testing.assert_allclose(
            mean, np.mean([x.mean(axis=axes) for x in xs], axis=0), rtol=1e-4, atol=1e-4
        )


def test_per_agent_statistics_differ_and_shared_pools_agents():
    xs = batches(1)
    shared, per_agent = valuenorm.init(), valuenorm.init((N,))
    for x in xs:
        shared = update_jit(shared, x)
        per_agent = update_jit(per_agent, x)
    # Per agent == N independent scalar normalisers fed one column each.
    for j in range(N):
        single = valuenorm.init()
        for x in xs:
            single = update_jit(single, x[:, j])
        for got, want in zip(mean_var_jit(per_agent), mean_var_jit(single)):
            np.testing.assert_allclose(got[j], want, rtol=1e-6)
    # Shared == one scalar normaliser fed the flattened batch (the reference's
    # ValueNorm(1) on [T·E·N, 1]).
    flat = valuenorm.init()
    for x in xs:
        flat = update_jit(flat, x.reshape(-1))
    np.testing.assert_allclose(mean_var_jit(shared)[0], mean_var_jit(flat)[0], rtol=1e-6)
    means = np.asarray(mean_var_jit(per_agent)[0])
    assert np.ptp(means) > 0.5  # agents really do have different statistics
    # Leading axes [T, E, N] are all averaged: same statistics as [T·E, N].
    per_agent_3d = valuenorm.init((N,))
    for x in xs:
        per_agent_3d = update_jit(per_agent_3d, x.reshape(2, -1, N))
    per_agent_2d = valuenorm.init((N,))
    for x in xs:
        per_agent_2d = update_jit(per_agent_2d, x)
    np.testing.assert_allclose(per_agent_3d.running_mean, per_agent_2d.running_mean, rtol=1e-6)


@pytest.mark.parametrize("stat_shape", [(), (N,)], ids=["shared", "per_agent"])
def test_normalize_denormalize_roundtrip(stat_shape):
    state = valuenorm.init(stat_shape)
    for x in batches(2):
        state = update_jit(state, x)
    x = np.random.default_rng(3).normal(2.0, 5.0, (7, 4, N)).astype(np.float32)
    y = normalize_jit(state, x)
    assert y.shape == x.shape
    np.testing.assert_allclose(denormalize_jit(state, y), x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        normalize_jit(state, denormalize_jit(state, x)), x, rtol=1e-5, atol=1e-5
    )
    assert not np.allclose(y, x, atol=0.1)  # the map is not the identity


def test_fresh_state_and_variance_floor_follow_reference():
    x = np.array([[1.0, -2.0, 3.0]], np.float32)
    # Debiasing term 0 → clamped at ε: mean 0, var floored at 1e-2, so x / 0.1.
    np.testing.assert_allclose(normalize_jit(valuenorm.init((N,)), x), x / 0.1, rtol=1e-6)
    # Constant targets: variance 0 → floor 1e-2.
    state = valuenorm.init()
    for _ in range(3):
        state = update_jit(state, np.full((5, N), 4.0, np.float32))
    mean, var = mean_var_jit(state)
    np.testing.assert_allclose(mean, 4.0, rtol=1e-6)
    np.testing.assert_allclose(var, 1e-2, rtol=1e-6)


def test_jit_vmap_over_states_and_traced_beta():
    R = 4
    betas = jnp.asarray([0.99999, 0.999, 0.9, 0.5], jnp.float32)
    rng = np.random.default_rng(4)
    xs = rng.normal(1.0, 3.0, (6, R, 16, N)).astype(np.float32)  # [K, R, B, N]
    states = jax.tree.map(lambda a: jnp.stack([a] * R), valuenorm.init((N,)))
    step = jax.jit(jax.vmap(valuenorm.update))
    for x in xs:
        states = step(states, x, betas)
    probe = np.linspace(-3.0, 3.0, N, dtype=np.float32)
    out = jax.jit(jax.vmap(valuenorm.normalize, in_axes=(0, None)))(states, probe)
    assert out.shape == (R, N)
    for r in range(R):
        ref = NumpyValueNorm((N,), beta=float(betas[r]))
        for x in xs:
            ref.update(x[r])
        np.testing.assert_allclose(out[r], ref.normalize(probe), rtol=1e-5, atol=1e-5)
    assert not np.allclose(out[0], out[3], atol=1e-2)  # β matters


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shape"):
        valuenorm.update(valuenorm.init((N,)), np.zeros((8, N + 1), np.float32))
    with pytest.raises(ValueError, match="shape"):
        valuenorm.normalize(valuenorm.init((N,)), np.zeros((), np.float32))


# --- Huber critic loss (consumes ValueNorm-normalised targets) ---------------------


def huber_np(e, d):
    out = np.empty_like(e, dtype=np.float64)
    for idx, v in np.ndenumerate(e):
        out[idx] = 0.5 * v * v if abs(v) <= d else d * (abs(v) - 0.5 * d)
    return out


def test_huber_both_branches_and_gradient():
    d = 1.5
    x = np.array([-4.0, -1.5, -1.0, -0.2, 0.0, 0.7, 1.5, 2.0, 9.0], np.float32)
    np.testing.assert_allclose(losses.huber(x, d), huber_np(x, d), rtol=1e-6, atol=1e-7)
    # Below −δ the loss is linear and positive (on-policy's `e > d` test would give 0).
    assert float(losses.huber(np.float32(-4.0), d)) == pytest.approx(1.5 * (4.0 - 0.75))
    # dHuber/dx = clip(x, −δ, δ).
    grad = jax.jit(jax.vmap(jax.grad(losses.huber), in_axes=(0, None)))(x, d)
    np.testing.assert_allclose(grad, np.clip(x, -d, d), rtol=1e-6, atol=1e-7)


def value_batch(seed, B=64):
    rng = np.random.default_rng(seed)
    old = rng.normal(size=(B, N))
    v = old + rng.normal(0.0, 0.4, (B, N))
    ret = old + rng.normal(0.0, 2.0, (B, N))
    return v.astype(np.float32), old.astype(np.float32), ret.astype(np.float32)


@pytest.mark.parametrize("clip", [True, False])
def test_value_loss_huber_matches_formula(clip):
    eps, d = 0.2, 1.0
    v, old, ret = value_batch(5)
    loss = value_loss_huber_jit(v, old, ret, eps, d, clip)

    v64, old64, ret64 = (a.astype(np.float64) for a in (v, old, ret))
    v_clip = old64 + np.clip(v64 - old64, -eps, eps)
    err, err_clip = ret64 - v64, ret64 - v_clip
    l_orig, l_clip = huber_np(err, d), huber_np(err_clip, d)
    per_entry = np.maximum(l_orig, l_clip) if clip else l_orig
    expected = sum(per_entry[:, i].mean() for i in range(N))
    np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-6)
    # Both Huber branches and both sides of the max must occur for this to mean anything.
    assert np.any(np.abs(err) <= d) and np.any(np.abs(err) > d)
    assert np.any(np.abs(err_clip) <= d) and np.any(np.abs(err_clip) > d)
    assert np.any(l_clip > l_orig) and np.any(l_orig > l_clip)
    # clip=True and clip=False really differ on this batch.
    other = value_loss_huber_jit(v, old, ret, eps, d, not clip)
    assert abs(float(other) - float(loss)) > 1e-3


def test_value_loss_huber_large_delta_is_squared_loss_and_grads():
    v, old, ret = value_batch(6)
    # With δ above every error, Huber is ½e² and the loss equals the squared one.
    np.testing.assert_allclose(
        value_loss_huber_jit(v, old, ret, 0.2, 100.0),
        jax.jit(losses.value_loss)(v, old, ret, 0.2),
        rtol=1e-6,
    )
    # Gradient flows only through `values`.
    grad_data = jax.jit(jax.grad(losses.value_loss_huber, argnums=(1, 2)))
    g_old, g_ret = grad_data(v, old, ret, 0.2, 1.0)
    assert not np.any(g_old) and not np.any(g_ret)
    # clip=False gradient = −clip(R − v, −δ, δ) / B per entry (sum over agents, mean over B).
    g = jax.jit(jax.grad(losses.value_loss_huber))(v, old, ret, 0.2, 1.0, False)
    np.testing.assert_allclose(g, -np.clip(ret - v, -1.0, 1.0) / len(v), rtol=1e-5, atol=1e-7)


def test_value_loss_huber_traced_eps_delta_clip_under_vmap():
    v, old, ret = value_batch(7)
    eps = jnp.asarray([0.1, 0.3])
    delta = jnp.asarray([0.5, 2.0])
    clip = jnp.asarray([True, False])
    out = jax.jit(jax.vmap(losses.value_loss_huber, in_axes=(None, None, None, 0, 0, 0)))(
        v, old, ret, eps, delta, clip
    )
    for r in range(2):
        expected = value_loss_huber_jit(v, old, ret, float(eps[r]), float(delta[r]), bool(clip[r]))
        np.testing.assert_allclose(out[r], expected, rtol=1e-6)
