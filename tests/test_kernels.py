"""``jaxpo.core.kernels``: the CPU kernel set (``kernels.cpu``) and XLA's own ops
(``kernels.xla``) compute the same values and gradients (to float rounding) from the same
parameters, so a network trained on one platform runs on another."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core import kernels
from jaxpo.core.networks import ActorCritic

TOL = dict(rtol=2e-5, atol=2e-6)


def assert_trees_close(a, b, **tol):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **(tol or TOL))


def both(fn, *args):
    """``fn(kernel set, *args)`` and its gradient in every argument, for CPU and XLA."""
    value_and_grad = lambda k: jax.jit(jax.value_and_grad(lambda *a: jnp.sum(jnp.sin(fn(k, *a))),
                                                           argnums=tuple(range(len(args)))))(*args)
    return [(jax.jit(lambda *a: fn(k, *a))(*args), value_and_grad(k)) for k in (kernels.CPU, kernels.XLA)]


def test_the_platform_picks_the_kernel_set():
    assert kernels.for_platform("cpu") is kernels.CPU
    assert kernels.for_platform("gpu") is kernels.for_platform("tpu") is kernels.for_platform("xla") is kernels.XLA
    assert kernels.for_platform(None) is kernels.for_platform(jax.default_backend())


@pytest.mark.parametrize("batch", [(7,), (2, 3, 4)])
def test_dense_is_the_same_product(batch):
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    x, kernel = jax.random.normal(keys[0], (*batch, 5)), jax.random.normal(keys[1], (5, 6))
    (cpu, cpu_grad), (xla, xla_grad) = both(lambda k, x, w: k.dense(x, w), x, kernel)
    assert cpu.shape == (*batch, 6)
    assert_trees_close(cpu, xla)
    assert_trees_close(cpu_grad, xla_grad)
    np.testing.assert_allclose(cpu, np.asarray(x, np.float64) @ np.asarray(kernel, np.float64), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch", [(7,), (2, 3, 4), (40, 33)])
def test_affine_is_the_same_layer(batch):
    """The CPU set's kernel and bias gradients (one product with a column of ones) are the
    sums over the leading axes that numpy gives."""
    keys = jax.random.split(jax.random.PRNGKey(4), 3)
    x, kernel, bias = (jax.random.normal(keys[0], (*batch, 5)), jax.random.normal(keys[1], (5, 6)),
                       jax.random.normal(keys[2], (6,)))
    (cpu, cpu_grad), (xla, xla_grad) = both(lambda k, x, w, b: k.affine(x, w, b), x, kernel, bias)
    assert cpu.shape == (*batch, 6)
    assert_trees_close(cpu, xla)
    assert_trees_close(cpu_grad, xla_grad)
    x64 = np.asarray(x, np.float64).reshape(-1, 5)
    g = np.cos(x64 @ np.asarray(kernel, np.float64) + np.asarray(bias, np.float64))  # ∂ sum(sin(x @ w + b))
    d_x, d_w, d_b = cpu_grad[1]
    np.testing.assert_allclose(d_w, x64.T @ g, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(d_b, g.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_x.reshape(-1, 5), g @ np.asarray(kernel, np.float64).T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_conv_is_the_same_convolution(k):
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    x, kernel = jax.random.normal(keys[0], (2, 3, 5, 4, 3)), jax.random.normal(keys[1], (k, k, 3, 6))
    bias = jnp.linspace(-1.0, 1.0, 6)
    (cpu, cpu_grad), (xla, xla_grad) = both(lambda ks, x, w, b: ks.conv(x, w, b), x, kernel, bias)
    assert cpu.shape == (2, 3, 5, 4, 6)
    assert_trees_close(cpu, xla, rtol=2e-5, atol=2e-5)
    assert_trees_close(cpu_grad, xla_grad, rtol=2e-5, atol=2e-5)


def test_dense_pair_is_two_layers():
    keys = jax.random.split(jax.random.PRNGKey(2), 5)
    x = jax.random.normal(keys[0], (4, 3, 5))
    first = (jax.random.normal(keys[1], (5, 6)), jax.random.normal(keys[2], (6,)))
    second = (jax.random.normal(keys[3], (5, 6)), jax.random.normal(keys[4], (6,)))
    (cpu, cpu_grad), (xla, xla_grad) = both(lambda k, x, a, b: jnp.stack(k.dense_pair(x, a, b, jnp.tanh)),
                                            x, first, second)
    assert_trees_close(cpu, xla)
    assert_trees_close(cpu_grad, xla_grad)


def test_the_gru_scan_is_the_same_recurrence_and_gradient():
    """The CPU set's written-out gradient against autodiff of XLA's scan, episode starts inside."""
    length, batch, hidden = 9, (2, 3), 5
    keys = jax.random.split(jax.random.PRNGKey(3), 5)
    w_h = jax.random.normal(keys[0], (hidden, 3 * hidden)) * 0.5
    b_h = jax.random.normal(keys[1], (3 * hidden,))
    h0 = jax.random.normal(keys[2], (*batch, hidden))
    x_proj = jax.random.normal(keys[3], (length, *batch, 3 * hidden))
    first = jax.random.uniform(keys[4], (length, *batch)) < 0.25
    (cpu, cpu_grad), (xla, xla_grad) = both(lambda k, *a: jnp.concatenate([k.gru_scan(*a, first)[0][None],
                                                                           k.gru_scan(*a, first)[1]]),
                                            w_h, b_h, h0, x_proj)
    assert_trees_close(cpu, xla)
    assert_trees_close(cpu_grad, xla_grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [1, 5, 1000, 65537])
def test_both_permutations_are_permutations(n):
    key = jax.random.PRNGKey(4)
    for k in (kernels.CPU, kernels.XLA):
        perm = np.asarray(jax.jit(k.permutation, static_argnums=1)(key, n))
        assert perm.dtype == np.int32
        np.testing.assert_array_equal(np.sort(perm), np.arange(n))


@pytest.mark.parametrize("recurrent, shared_trunk, conv", [(False, False, False), (False, True, True),
                                                          (True, False, True), (True, True, False)])
def test_the_actor_critic_is_the_same_on_both_kernel_sets(recurrent, shared_trunk, conv):
    """The same parameters on every platform (a checkpoint moves), and the same outputs and
    gradients: a feed-forward or GRU actor-critic, separate or on one trunk, with a CNN torso."""
    n, obs_dim, actions = 3, 12, 4
    create = lambda platform: ActorCritic.create(
        n, obs_dim, actions, obs_dim, hidden=(8, 6), recurrent=recurrent, shared_trunk=shared_trunk,
        conv=((4, 3), (2, 1)) if conv else (), image_shape=(2, 2, 3) if conv else (),
        critic_conv=conv and not shared_trunk, platform=platform)
    cpu_net, xla_net = create("cpu"), create("xla")
    params = jax.jit(cpu_net.init)(jax.random.PRNGKey(5))
    assert_trees_close(params, jax.jit(xla_net.init)(jax.random.PRNGKey(5)), rtol=0, atol=0)
    length, envs = 5, 2
    obs = jax.random.normal(jax.random.PRNGKey(6), (length, envs, n, obs_dim))
    mask = jnp.ones((length, envs, n, actions), bool)
    first = jax.random.bernoulli(jax.random.PRNGKey(7), 0.3, (length, envs))

    def outputs(net, params):
        carry = net.initial_carry((envs,))
        dist, values = net.unroll(params, carry, obs, mask, obs, first)
        _, step_dist, step_values = net.step(params, carry, obs[0], mask[0], obs[0], first[0])
        return dist.logits, values, step_dist.logits, step_values

    def gradient(net):
        return jax.grad(lambda p: sum(jnp.sum(jnp.sin(x)) for x in outputs(net, p)))(params)

    assert_trees_close(jax.jit(outputs, static_argnums=0)(cpu_net, params),
                       jax.jit(outputs, static_argnums=0)(xla_net, params))
    assert_trees_close(jax.jit(gradient, static_argnums=0)(cpu_net), jax.jit(gradient, static_argnums=0)(xla_net),
                       rtol=1e-4, atol=1e-5)


def test_a_learner_trains_on_the_xla_kernels():
    """A train step on XLA's own ops (the GPU and TPU default), run here on CPU: a GRU
    actor-critic under exact HAPPO, whose epochs shuffle with ``jax.random.permutation``."""
    from jaxpo import Config, Hyper
    from jaxpo.core import support
    from jaxpo.program.learner import Learner

    config = Config(env="traffic_grid", env_kwargs={"rows": 2, "cols": 2}, num_envs=4, num_steps=8, num_epochs=2,
                    num_minibatches=2, hidden=(8,), recurrent=True, seq_len=4, scheme="sequential",
                    share_params=False)
    hyper = Hyper.create(support.ippo(4))
    metrics = {}
    for platform in ("cpu", "xla"):
        learner = Learner(config, platform=platform)
        state = jax.jit(learner.init)(jax.random.PRNGKey(0), hyper)
        _, metrics[platform] = jax.jit(learner.step)(state, hyper)
    assert set(metrics["xla"]) == set(metrics["cpu"])
    for name, value in metrics["xla"].items():  # NaN only where no episode ended ("return" of none), as on CPU
        np.testing.assert_array_equal(np.isfinite(value), np.isfinite(metrics["cpu"][name]), err_msg=name)
    assert np.isfinite(metrics["xla"]["policy_loss"]) and np.isfinite(metrics["xla"]["value_loss"])
    # The rollout precedes any shuffle: the same episodes on both kernel sets.
    np.testing.assert_allclose(metrics["xla"]["reward"], metrics["cpu"]["reward"], rtol=1e-5)


@pytest.mark.parametrize("scheme", ["simultaneous", "sequential"])
def test_unrolled_loops_train_the_same(scheme):
    """``Config.unroll`` changes the schedule of the rollout, GAE and minibatch loops, not
    what they compute: two train steps at unroll 3 (not dividing T = 8 nor the 4
    minibatches) against the platform's default, the same parameters and metrics."""
    import dataclasses

    from jaxpo import Config, Hyper
    from jaxpo.core import support
    from jaxpo.program.learner import Learner

    config = Config(env="traffic_grid", env_kwargs={"rows": 2, "cols": 2}, num_envs=4, num_steps=8, num_epochs=2,
                    num_minibatches=4, hidden=(8,), scheme=scheme, share_params=scheme == "simultaneous")
    hyper = Hyper.create(support.ippo(4))
    out, programs = {}, {}
    for unroll in (None, 3):
        learner = Learner(dataclasses.replace(config, unroll=unroll))
        assert learner.unroll == (kernels.for_platform().unroll if unroll is None else (3, 3, 3))
        step = jax.jit(learner.step)
        state = jax.jit(learner.init)(jax.random.PRNGKey(0), hyper)
        programs[unroll] = step.lower(state, hyper).as_text()
        state, _ = step(state, hyper)
        out[unroll] = step(state, hyper)
    assert programs[None] != programs[3]  # the loops did unroll
    assert_trees_close(out[None][0].params, out[3][0].params, rtol=1e-5, atol=1e-6)
    assert_trees_close(out[None][1], out[3][1], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("unroll", [0, -1, 1.5, True, "2"])
def test_unroll_must_be_a_positive_integer(unroll):
    from jaxpo import Config

    with pytest.raises(ValueError, match=r"config\.unroll|Config\.unroll"):
        Config(unroll=unroll)


def test_packed_stores_hold_the_same_rollout_and_metrics():
    """``rollout.Stores``: a rollout whose steps store one wide array per dtype (XLA's
    schedule) gives the very ``Transition`` of one that stores each output apart, recurrent
    hidden states and per-env flags included; a minibatch's scalar metrics likewise."""
    from jaxpo import Config, Hyper
    from jaxpo.core import support
    from jaxpo.core.rollout import Stores, rollout
    from jaxpo.program.learner import Learner

    config = Config(env="traffic_grid", env_kwargs={"rows": 2, "cols": 2, "max_steps": 5}, num_envs=4, num_steps=8,
                    hidden=(8,), recurrent=True, critic_input="global")
    learner = Learner(config)
    state = jax.jit(learner.init)(jax.random.PRNGKey(0), Hyper.create(support.ippo(4)))
    run = lambda packed: jax.jit(lambda s: rollout(learner.env, learner.net, s.params, s.rollout, s.key, 8, "global",
                                                   pack_stores=packed))(state)
    (end_a, apart), (end_p, packed) = run(False), run(True)
    assert jax.tree.structure(apart) == jax.tree.structure(packed)
    for x, y in zip(jax.tree.leaves((apart, end_a)), jax.tree.leaves((packed, end_p))):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert np.asarray(apart.terminated | apart.truncated).any()  # episodes ended: the flags were exercised

    stores = Stores(True)
    metrics = {"loss": jnp.float32(1.5), "count": jnp.int32(3), "per_agent": jnp.arange(4.0)}
    stacked = jax.tree.map(lambda x: jnp.stack([x, 2 * x]), stores.pack(metrics, lead=0))
    assert set(stacked) == {"float32", "int32"}  # one array per dtype
    assert_trees_close(stores.unpack(stacked), jax.tree.map(lambda x: jnp.stack([x, 2 * x]), metrics), rtol=0, atol=0)
