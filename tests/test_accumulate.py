"""``jaxpo.core.accumulate``: a minibatch's loss, metrics and gradient over equal blocks
are the whole minibatch's (to float rounding), and the learner computes them so where
its platform asks and the loss allows."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core import accumulate


@pytest.mark.parametrize("samples, rows_per_sample, max_rows, blocks", [
    (32768, 3, 4096, 32),  # JaxMARL's MPE minibatch: 1024 samples, 3072 rows a block
    (512, 3, 4096, 1),  # a small minibatch fits whole
    (12, 1, 5, 3),  # 12 / 2 = 6 rows do not fit, 12 / 3 = 4 do
    (6, 5000, 4096, 6),  # no block of several samples fits: one sample each
    (32768, 3, None, 1),  # the platform asks for no blocks
])
def test_the_fewest_equal_blocks_that_fit(samples, rows_per_sample, max_rows, blocks):
    assert accumulate.gradient_blocks(samples, rows_per_sample, max_rows) == blocks


def test_blocks_combine_to_the_whole_batch_s_loss_metrics_and_gradient():
    """A loss that is a mean over rows, with a mean metric and a maximum, and an argument
    given whole to every block: the combined blocks equal one pass over all rows."""
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    params = {"w": jax.random.normal(keys[0], (5, 3)), "b": jax.random.normal(keys[1], (3,))}
    x, y = jax.random.normal(keys[2], (24, 5)), jax.random.normal(keys[3], (24, 3))

    def loss(params, x, y, scale):
        out = jnp.tanh(x @ params["w"] + params["b"])
        err = scale * jnp.square(out - y)
        return jnp.mean(err), {"err_mean": jnp.mean(out), "err_max": jnp.max(err)}

    whole = jax.value_and_grad(loss, has_aux=True)
    blocked = accumulate.blockwise(whole, 4, num_row_args=2)
    (w_loss, w_metrics), w_grads = jax.jit(whole)(params, x, y, 2.0)
    (b_loss, b_metrics), b_grads = jax.jit(blocked)(params, x, y, 2.0)
    np.testing.assert_allclose(b_loss, w_loss, rtol=1e-6)
    assert set(b_metrics) == set(w_metrics)
    for name in w_metrics:
        np.testing.assert_allclose(b_metrics[name], w_metrics[name], rtol=1e-6, err_msg=name)
    for name in params:
        np.testing.assert_allclose(b_grads[name], w_grads[name], rtol=1e-5, atol=1e-7, err_msg=name)
    # each block saw a quarter of the rows: a loss of the first block alone differs
    assert not np.allclose(whole(params, x[:6], y[:6], 2.0)[1]["w"], w_grads["w"])


def _learner(rows, axis=None, **changes):
    from jaxpo import Config
    from jaxpo.program.learner import Learner

    config = Config(**{**dict(env="MPE_simple_spread_v3", num_envs=8, num_steps=16, num_epochs=2,
                              num_minibatches=2, hidden=(16, 16)), **changes})
    learner = Learner(config, axis, platform="cpu")
    learner.kernels = dataclasses.replace(learner.kernels, gradient_rows=rows)
    return learner


def _training_data(learner):
    """The shapes of one rollout's training data (``Learner.collect``'s), traced only."""
    from jaxpo import Hyper
    from jaxpo.core import support

    hyper = Hyper.create(support.ippo(learner.num_agents))
    state = jax.eval_shape(learner.init, jax.random.PRNGKey(0), hyper)
    return jax.eval_shape(lambda s: learner.collect(s, hyper)[2], state)


def _two_steps(learner):
    from jaxpo import Hyper
    from jaxpo.core import support

    hyper = Hyper.create(support.ippo(learner.num_agents))
    step = jax.jit(learner.step)
    state = jax.jit(learner.init)(jax.random.PRNGKey(3), hyper)
    state, _ = step(state, hyper)
    state, metrics = step(state, hyper)
    data = jax.eval_shape(lambda s: learner.collect(s, hyper)[2], state)
    return state, metrics, learner.gradient_blocks(data), step.lower(state, hyper).as_text()


@pytest.mark.parametrize("scheme", ["simultaneous", "sequential"])
def test_a_learner_s_gradient_in_blocks_trains_the_same(scheme):
    """Two train steps of a feed-forward MPE learner, each minibatch's gradient over 8
    blocks (64 samples × 3 agents = 192 rows: 24 rows a block) against one pass: the
    same parameters and metrics to float rounding; exact HAPPO's critics too."""
    config = dict(scheme=scheme, share_params=scheme == "simultaneous")
    state, metrics, blocks, program = _two_steps(_learner(24, **config))
    state_ref, metrics_ref, blocks_ref, program_ref = _two_steps(_learner(None, **config))
    assert (blocks, blocks_ref) == (8, 1)
    assert program != program_ref
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(state_ref.params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert set(metrics) == set(metrics_ref)
    for name in metrics:
        np.testing.assert_allclose(metrics[name], metrics_ref[name], rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("changes", [
    dict(recurrent=True),  # a GRU would replay fewer sequences a step
    dict(env="HeuristicEnemySMAX", env_kwargs={"scenario": "3m"}),  # masked metrics: means over unequal counts
    dict(env="overcooked", num_envs=2),  # a CNN's blocks were never measured
    dict(),  # the control: the same learner otherwise blocks
])
def test_no_blocks_where_they_would_not_pay_or_not_combine(changes):
    learner = _learner(8, **changes)
    assert learner.image_obs == (changes.get("env") == "overcooked")
    data = _training_data(learner)
    assert learner.gradient_blocks(data) == (1 if changes else 32)  # 64 samples × 3 agents, 6 rows a block


def test_a_data_parallel_learner_keeps_one_pass():
    """Each block would add the devices' collectives: the same learner on an axis of devices."""
    from jaxpo.program.parallel import ENV_AXIS

    learner = _learner(8)
    data = _training_data(learner)
    assert learner.gradient_blocks(data) == 32
    assert _learner(8, axis=ENV_AXIS).gradient_blocks(data) == 1


def test_config_gradient_rows_overrides_the_platform_s_block_size():
    """``Config.gradient_rows`` sets the block size in place of the kernel set's: blocks where
    the platform has none, one pass where it has some; a size that is not a positive
    integer is refused before anything is built, naming the field."""
    from jaxpo import Config

    blocks = lambda learner: learner.gradient_blocks(_training_data(learner))
    assert blocks(_learner(None, gradient_rows=24)) == 8  # 192 rows a minibatch: 8 blocks of 24
    assert blocks(_learner(4096, gradient_rows=192)) == 1  # the whole minibatch fits one block
    assert blocks(_learner(8)) == 32  # the kernel set's, where the config leaves it out
    for bad in (0, -4, 2.5, "4096", True):
        with pytest.raises(ValueError, match=r"Config\.gradient_rows must be a positive integer"):
            Config(env="MPE_simple_spread_v3", gradient_rows=bad)
