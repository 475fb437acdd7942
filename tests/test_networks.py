"""Actor/critic networks: masks, shared vs per-agent parameters."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core.kernels import cpu
from jaxpo.core.networks import ActorCritic

N, O, A, C = 3, 5, 4, 7


@pytest.fixture(scope="module", params=[True, False], ids=["shared", "per_agent"])
def net_and_params(request):
    net = ActorCritic.create(N, O, A, C, hidden=(8,), shared=request.param)
    params = net.init(jax.random.PRNGKey(0))
    # scale the actor's last layer up so the policy is far from uniform
    params["actor"] = jax.tree.map(lambda x: 30.0 * x, params["actor"])
    return net, params


def test_masked_actions_get_no_mass_no_samples_no_entropy(net_and_params):
    net, params = net_and_params
    obs = jax.random.normal(jax.random.PRNGKey(1), (64, N, O))
    mask = jax.random.bernoulli(jax.random.PRNGKey(2), 0.5, (64, N, A)).at[..., 0].set(True)
    dist = net.policy(params, obs, mask)
    probs = np.asarray(dist.probs)
    assert np.all(probs[~np.asarray(mask)] == 0.0)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    samples = dist.sample(seed=jax.random.PRNGKey(3), sample_shape=(200,))  # [200, 64, N]
    chosen = np.take_along_axis(np.asarray(mask)[None], np.asarray(samples)[..., None], axis=-1)
    assert chosen.all()
    # entropy and log-probs are those of the distribution renormalised over available actions
    logits = np.asarray(net.actor(params["actor"], obs), np.float64)
    logits = np.where(mask, logits, -np.inf)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    p = np.exp(logp)
    entropy = -np.where(mask, p * np.where(mask, logp, 0.0), 0.0).sum(-1)
    np.testing.assert_allclose(dist.entropy(), entropy, rtol=1e-4, atol=1e-5)
    assert np.all(np.isfinite(np.asarray(dist.entropy())))
    a = np.asarray(samples[0])
    np.testing.assert_allclose(dist.log_prob(a), np.take_along_axis(logp, a[..., None], -1)[..., 0], rtol=1e-4, atol=1e-5)


def test_parameter_layout(net_and_params):
    net, params = net_and_params
    leaves = jax.tree.leaves(params["actor"])
    if net.actor.shared:
        assert all(x.shape[0] != N or x.ndim == 1 for x in leaves)
        first_kernel = params["actor"]["params"]["Dense_0"]["kernel"]
        assert first_kernel.shape == (O + N, 8)  # observation + one-hot agent id
    else:
        assert all(x.shape[0] == N for x in leaves)
    values = net.value(params, jnp.ones((2, 6, N, C)))
    assert values.shape == (2, 6, N)


def test_per_agent_parameters_are_independent():
    net = ActorCritic.create(N, O, A, C, hidden=(8,), shared=False)
    params = net.init(jax.random.PRNGKey(0))
    obs = jnp.ones((4, N, O))
    before = net.actor(params["actor"], obs)
    bumped = jax.tree.map(lambda x: x.at[1].add(0.5), params["actor"])
    after = net.actor(bumped, obs)
    np.testing.assert_array_equal(before[:, [0, 2]], after[:, [0, 2]])
    assert not np.allclose(before[:, 1], after[:, 1])
    # agent_policy on agent 1's slice is agent 1's column of the stacked policy
    agent1 = jax.tree.map(lambda x: x[1], params["actor"])
    np.testing.assert_allclose(net.agent_policy(agent1, obs[:, 1], jnp.ones((4, A), bool)).logits,
                               jax.nn.log_softmax(before[:, 1]), rtol=1e-5, atol=1e-6)


def test_bad_input_shapes():
    net = ActorCritic.create(N, O, A, C, shared=True)
    params = net.init(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"network input must be \[..., 3, 5\]"):
        net.actor(params["actor"], jnp.ones((2, N, O + 1)))
    with pytest.raises(ValueError, match="activation must be one of"):
        ActorCritic.create(N, O, A, C, activation="swish")
    with pytest.raises(ValueError, match="agent_policy needs per-agent parameters"):
        net.agent_policy(params["actor"], jnp.ones((2, O)), jnp.ones((2, A), bool))


@pytest.mark.parametrize("shape", [(5, 8), (8, 5), (64, 64), (67, 1)])
def test_orthogonal_init(shape):
    from jaxpo.core.modules import orthogonal

    w = np.asarray(orthogonal(2.0)(jax.random.PRNGKey(0), shape), np.float64)
    small = min(shape)
    gram = w.T @ w if shape[0] >= shape[1] else w @ w.T
    np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=2e-5)
    assert not np.allclose(w, np.asarray(orthogonal(2.0)(jax.random.PRNGKey(1), shape)))


def _layers_and_inputs(kernel_init):
    from jaxpo.core import modules

    layout = modules.Layout(hidden=(8, 8), heads=(modules.Head(2, log_std=True), modules.Head(1, prefix="value_")))
    return {
        "Dense": (modules.Dense(4, kernel_init), (jnp.ones((2, 3)),)),
        "Conv": (modules.Conv(4, 3, kernel_init), (jnp.ones((2, 5, 5, 2)),)),
        "GRU": (modules.GRU(4, kernel_init, kernel_init),
                (jnp.zeros((2, 4)), jnp.ones((3, 2, 3)), jnp.zeros((3, 2), bool))),
        "MLP": (modules.MLP(layout), (jnp.ones((2, 3)),)),
    }


@pytest.mark.parametrize("kind", ["Dense", "Conv", "GRU", "MLP"])
def test_applying_a_layer_calls_no_initialiser_and_still_checks_its_parameters_shapes(kind, monkeypatch):
    """flax's ``param`` traces an existing parameter's initialiser on every apply to check
    its shape; jaxpo's layers compare the shape they know, with flax's error."""
    import flax.linen as nn
    from flax.errors import ScopeParamShapeError
    from flax.traverse_util import flatten_dict, unflatten_dict

    from jaxpo.core import modules

    calls = []

    def counted(init):
        def init_and_count(*args, **kwargs):
            calls.append(init)
            return init(*args, **kwargs)
        return init_and_count

    orthogonal = modules.orthogonal
    monkeypatch.setattr(modules, "orthogonal", lambda *args, **kwargs: counted(orthogonal(*args, **kwargs)))
    monkeypatch.setattr(nn.initializers, "zeros", counted(nn.initializers.zeros))
    layer, inputs = _layers_and_inputs(counted(orthogonal()))[kind]
    params = layer.init(jax.random.PRNGKey(0), *inputs)
    created = len(calls)
    assert created == len(jax.tree.leaves(params))  # each parameter initialised once, when created
    jax.block_until_ready(layer.apply(params, *inputs))
    assert len(calls) == created
    flat = flatten_dict(params)
    path = next(path for path in flat if path[-1] == "kernel")
    flat[path] = jnp.zeros((flat[path].shape[0] + 1,) + flat[path].shape[1:])
    with pytest.raises(ScopeParamShapeError, match="kernel"):
        layer.apply(unflatten_dict(flat), *inputs)


@pytest.mark.parametrize("batch", [(6,), (2, 3)])
def test_the_gru_scans_written_out_gradient_equals_autodiff_of_the_scan(batch):
    """``gru_scan``'s hand-written backward pass (weight gradient after the loop) against
    autodiff of the same forward scan, every input and both outputs (the last state and
    the sequence), with episode starts (``first``) inside the sequence and at step 0."""
    length, hidden = 9, 5
    keys = jax.random.split(jax.random.PRNGKey(3), 7)
    w_h = jax.random.normal(keys[0], (hidden, 3 * hidden)) * 0.5
    b_h = jax.random.normal(keys[1], (3 * hidden,))
    h0 = jax.random.normal(keys[2], (*batch, hidden))
    x_proj = jax.random.normal(keys[3], (length, *batch, 3 * hidden))
    first = (jax.random.uniform(keys[4], (length, *batch)) < 0.25).at[0].set(jnp.arange(batch[-1]) % 2 == 0)
    w_last, w_seq = jax.random.normal(keys[5], (*batch, hidden)), jax.random.normal(keys[6], (length, *batch, hidden))
    assert first.any() and not first.all()

    def loss(scan):
        def f(*args):
            h_last, hs = scan(*args, first)
            return jnp.sum(h_last * w_last) + jnp.sum(jnp.tanh(hs) * w_seq)
        return jax.value_and_grad(f, argnums=(0, 1, 2, 3))

    autodiff = lambda *args: cpu._gru_scan_fwd(*args)[0]
    (value, grads), (ref_value, ref_grads) = (loss(s)(w_h, b_h, h0, x_proj) for s in (cpu.gru_scan, autodiff))
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)  # the same forward pass (fused differently)
    for name, g, ref in zip(("w_h", "b_h", "h0", "x_proj"), grads, ref_grads):
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-6, err_msg=name)
    # Where an episode starts at step 0, nothing flows back into h0.
    starts = np.asarray(first[0])
    assert np.all(np.asarray(grads[2])[starts] == 0) and np.all(np.abs(np.asarray(grads[2])[~starts]) > 0)
