"""The CNN torso for image observations (``Config.encoder``, ``jaxpo.core.modules.Layout.encode``): its
forward pass against NumPy convolutions (shared parameters with agent ids, per-agent,
shared trunk), what makes it a CNN (each feature sees only its receptive field, and
moving the picture moves the features; an MLP on the flattened image has neither),
and how a Config chooses it from the environment's ``obs_shape``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo import Config
from jaxpo.core.networks import ActorCritic
from jaxpo.program.learner import Learner

N, A = 2, 4  # agents, actions
IMAGE = (5, 6, 3)  # H, W, C
D = int(np.prod(IMAGE))
CONV = ((4, 3), (3, 1), (2, 3))  # (features, kernel) per layer: receptive radius 1 + 0 + 1 = 2
HIDDEN = (8, 8)


def create(shared=True, shared_trunk=False, recurrent=False, critic_dim=D):
    return ActorCritic.create(num_agents=N, obs_dim=D, num_actions=A, critic_dim=critic_dim, hidden=HIDDEN,
                              activation="relu", shared=shared, recurrent=recurrent, shared_trunk=shared_trunk,
                              conv=CONV, image_shape=IMAGE, critic_conv=not shared_trunk)


def random_params(net, seed=3):
    """Parameters of ``net``'s layout drawn N(0, 0.5²) (the initial biases are zero,
    which would hide a missing or misplaced one)."""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(net.init, jax.random.PRNGKey(0))
    return jax.tree.map(lambda s: jnp.asarray(0.5 * rng.standard_normal(s.shape), jnp.float32), shapes)


def conv_same(x, kernel, bias):
    """NumPy: ``x [B, H, W, C]``, ``kernel [k, k, C, F]`` -> ``[B, H, W, F]``, stride 1,
    zero padding of (k - 1) // 2 before and k // 2 after (XLA's "SAME")."""
    k, (h, w) = kernel.shape[0], x.shape[1:3]
    padded = np.pad(x, ((0, 0), ((k - 1) // 2, k // 2), ((k - 1) // 2, k // 2), (0, 0)))
    out = sum(padded[:, i:i + h, j:j + w] @ kernel[i, j] for i in range(k) for j in range(k))
    return out + bias


def torso(p, images):
    """The CNN on ``images [B, H, W, C]``, relu after each layer, flattened row-major: ``[B, H·W·F]``."""
    x = images
    for i in range(len(CONV)):
        x = np.maximum(conv_same(x, p[f"Conv_{i}"]["kernel"], p[f"Conv_{i}"]["bias"]), 0.0)
    return x.reshape(len(x), -1)


def mlp(p, x, agent, ids, prefix=""):
    """Dense_0 (with agent ``agent``'s one-hot id row when ``ids``), relu, Dense_1, relu, Dense_2."""
    kernel = p["Dense_0"]["kernel"]
    x = x @ kernel[:x.shape[-1]] + (kernel[x.shape[-1]:][agent] if ids else 0.0) + p["Dense_0"]["bias"]
    for name in (f"{prefix}Dense_1", f"{prefix}Dense_2"):
        x = np.maximum(x, 0.0) @ p[name]["kernel"] + p[name]["bias"]
    return x


def numpy_params(tree, agent, shared):
    return jax.tree.map(lambda x: np.asarray(x if shared else x[agent], np.float64), tree)["params"]


@pytest.mark.parametrize("shared", [True, False], ids=["shared_params", "per_agent_params"])
def test_actor_and_critic_are_the_cnn_then_the_mlp(shared):
    net = create(shared)
    params = random_params(net)
    obs = np.random.default_rng(0).standard_normal((7, N, D)).astype(np.float32)
    logits, values = net.actor(params["actor"], obs), net.value(params, obs)
    assert logits.shape == (7, N, A) and values.shape == (7, N)
    for agent in range(N):
        images = obs[:, agent].astype(np.float64).reshape((7,) + IMAGE)
        actor, critic = (numpy_params(params[k], agent, shared) for k in ("actor", "critic"))
        np.testing.assert_allclose(logits[:, agent], mlp(actor, torso(actor, images), agent, shared),
                                   rtol=2e-4, atol=2e-4)
        np.testing.assert_allclose(values[:, agent], mlp(critic, torso(critic, images), agent, shared)[:, 0],
                                   rtol=2e-4, atol=2e-4)


def test_a_shared_trunk_shares_the_cnn_and_a_recurrent_net_runs_it_before_the_gru():
    trunk = create(shared_trunk=True)
    params = random_params(trunk)
    assert params["critic"] == {} and "Conv_0" in params["actor"]["params"]
    assert not any(k.startswith("value_Conv") for k in params["actor"]["params"])  # one CNN, two branches
    obs = np.random.default_rng(1).standard_normal((5, N, D)).astype(np.float32)
    p = numpy_params(params["actor"], 0, True)
    features = torso(p, obs[:, 1].astype(np.float64).reshape((5,) + IMAGE))
    np.testing.assert_allclose(trunk.value(params, obs)[:, 1], mlp(p, features, 1, True, "value_")[:, 0],
                               rtol=2e-4, atol=2e-4)
    gru = create(recurrent=True)
    gru_params = gru.init(jax.random.PRNGKey(0))
    dense0 = gru_params["actor"]["params"]["Dense_0"]["kernel"]
    assert dense0.shape == (IMAGE[0] * IMAGE[1] * CONV[-1][0] + N, HIDDEN[0])  # the GRU reads the CNN's features
    carry = gru.initial_carry((3,))
    _, dist = gru.policy_step(gru_params["actor"], carry["actor"], jnp.asarray(obs[:3]), jnp.ones((3, N, A), bool),
                              jnp.ones((3,), bool))
    assert np.all(np.isfinite(np.asarray(dist.logits)))


def encoder_features(seed=0):
    """The CNN torso's last convolution (per-agent parameters at init), read from the
    actor's forward pass: ``images [B, H, W, C] -> [B, H, W, F]``."""
    net = create(shared=False)
    params = jax.tree.map(lambda x: x[0], net.init(jax.random.PRNGKey(seed))["actor"])
    last = f"Conv_{len(CONV) - 1}"

    def features(images):
        flat = jnp.asarray(images.reshape(len(images), -1), jnp.float32)
        _, seen = net.actor.module.apply(params, flat, capture_intermediates=lambda m, _: m.name == last,
                                         mutable=["intermediates"])
        return np.asarray(seen["intermediates"][last]["__call__"][0])

    return features


def test_each_feature_sees_its_receptive_field_and_moving_the_image_moves_the_features():
    """What a CNN is for: local, translation-equivariant features. Changing one pixel
    changes the features within the receptive radius (2 here) of it and nowhere else,
    and an image shifted by one column gives the features shifted by one column (away
    from the zero-padded border). The same test run on an MLP's first layer fails both."""
    features = encoder_features()
    rng = np.random.default_rng(0)
    image = rng.standard_normal((1,) + IMAGE)
    poked = image.copy()
    poked[0, 2, 1] += 3.0
    changed = np.abs(features(poked) - features(image)).max(-1)[0] > 1e-6  # [H, W]
    rows, cols = np.meshgrid(np.arange(IMAGE[0]), np.arange(IMAGE[1]), indexing="ij")
    within = (np.abs(rows - 2) <= 2) & (np.abs(cols - 1) <= 2)
    assert not np.any(changed & ~within), changed  # nothing outside the receptive field moves
    assert changed[2, 1] and changed.sum() > 4  # the pixel's own cell and its neighbours do

    wide = rng.standard_normal((1, IMAGE[0], IMAGE[1] + 1, IMAGE[2]))
    left, right = wide[:, :, :-1], wide[:, :, 1:]  # the same scene, seen one column apart
    interior = slice(2, IMAGE[1] - 3)  # columns at least the radius from both borders in both views
    np.testing.assert_allclose(features(right)[:, :, interior], features(left)[:, :, 3:IMAGE[1] - 2], atol=1e-5)

    # An MLP's first layer on the flattened image: one pixel moves every feature, and shifting moves nothing along.
    kernel = np.random.default_rng(1).standard_normal((D, 16))
    dense = lambda x: x.reshape(len(x), -1) @ kernel
    assert np.all(np.abs(dense(poked) - dense(image)) > 1e-6)
    assert not np.allclose(dense(right), dense(left), atol=1e-2)


@pytest.mark.parametrize("encoder, image, expected", [
    ("auto", True, True), ("auto", False, False), ("mlp", True, False), ("cnn", True, True)])
def test_the_config_chooses_the_cnn_from_the_observation_shape(encoder, image, expected):
    env, kwargs = ("overcooked", {"layout": "cramped_room"}) if image else ("public_goods", {})
    config = Config(env=env, env_kwargs=kwargs, encoder=encoder, conv_features=(8, 4), conv_kernels=(3, 1),
                    hidden=(16,))
    learner = Learner(config)
    params = learner.net.init(jax.random.PRNGKey(0))
    convs = sorted(k for k in params["actor"]["params"] if k.startswith("Conv"))
    assert convs == (["Conv_0", "Conv_1"] if expected else [])
    if expected:
        assert params["actor"]["params"]["Conv_0"]["kernel"].shape == (3, 3, learner.env.obs_shape[-1], 8)
        assert "Conv_0" in params["critic"]["params"]  # the local critic reads the images with its own CNN


def test_bad_encoder_settings_are_named():
    with pytest.raises(ValueError, match="Config.encoder must be one of"):
        Config(env="overcooked", encoder="resnet")
    with pytest.raises(ValueError, match=r"Config.conv_kernels needs one kernel size per conv_features layer"):
        Config(env="overcooked", conv_features=(8, 8), conv_kernels=(3,))
    with pytest.raises(ValueError, match="Config.conv_features must be a non-empty tuple of positive ints"):
        Config(env="overcooked", conv_features=(8, 0), conv_kernels=(3, 3))
    with pytest.raises(ValueError, match="Config.encoder='cnn' needs image observations"):
        Learner(Config(env="public_goods", encoder="cnn"))
    with pytest.raises(ValueError, match=r"a CNN torso needs image_shape \(H, W, C\) with H·W·C = obs_dim"):
        ActorCritic.create(N, D + 1, A, D + 1, conv=CONV, image_shape=IMAGE)
