"""The compiled training step and its driver: vmap over seeds × traced configs,
determinism, results on disk, config validation.

Modules under test: ``jaxpo.program.learner``, ``jaxpo.program.compiled``, ``jaxpo.run.driver`` and ``jaxpo.experiments.train``."""

import dataclasses
import threading

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpo
from jaxpo.core import support
from jaxpo import Config, Hyper, runs, train, trainer
from jaxpo.program.compiled import over_runs
from jaxpo.run.report import read_csv

UPDATES = 4
TINY = Config(
    env="MPE_simple_spread_v3",
    num_envs=4,
    num_steps=16,
    updates_per_chunk=2,
    num_epochs=2,
    num_minibatches=2,
    hidden=(16,),
)


@pytest.fixture(scope="module")
def batch():
    """4 runs; each of runs 1-3 differs from run 0 in one thing: seed, lr, support."""
    ippo, joint = Hyper.create(support.ippo(3), lr=1e-3), Hyper.create(support.joint(3), lr=1e-3)
    hyper = Hyper.stack([ippo, ippo, ippo.replace(lr=jnp.float32(5e-3)), joint])
    return hyper, np.array([0, 1, 0, 0]), ["ippo/seed0", "ippo/seed1", "ippo-lr/seed0", "joint/seed0"]


@pytest.fixture(scope="module")
def result(batch, tmp_path_factory):
    hyper, seeds, labels = batch
    out = tmp_path_factory.mktemp("run")
    return train(TINY, hyper, seeds, num_updates=UPDATES, labels=labels, out_dir=str(out), progress=False)


def test_metrics_shapes_and_values(result):
    r, u = 4, UPDATES
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "reward", "episodes"):
        assert result.metrics[name].shape == (r, u), name
        assert np.all(np.isfinite(result.metrics[name])), name
    # MPE episodes last 26 steps (JaxMARL's max_steps + 1, see the adapter): 4 envs ×
    # 16 steps per update end 0 or 4 episodes;
    # the return is NaN exactly for updates in which no episode ended.
    episodes = result.metrics["episodes"]
    assert set(np.unique(episodes)) == {0.0, 4.0}
    np.testing.assert_array_equal(np.isnan(result.metrics["return"]), episodes == 0)
    np.testing.assert_array_equal(result.metrics["episode_length"][episodes > 0], trainer(TINY).env.max_steps)
    np.testing.assert_array_equal(result.env_steps, TINY.steps_per_update * np.arange(1, u + 1))
    # Entropy starts near log(5) per agent (summed over 3 agents).
    assert abs(result.metrics["entropy"][0, 0] - 3 * np.log(5)) < 0.05


def test_same_seed_bitwise_identical_and_seeds_differ(batch, result):
    hyper, seeds, labels = batch
    again = train(TINY, hyper, seeds, num_updates=UPDATES, labels=labels, progress=False)
    for name, values in result.metrics.items():
        np.testing.assert_array_equal(values, again.metrics[name], err_msg=name)
    # runs 0 and 1 share the support but not the seed (nor the learning rate).
    assert not np.array_equal(result.metrics["reward"][0], result.metrics["reward"][1])


def test_vmapped_runs_are_independent_of_their_batch_companions(batch, result):
    """Each run of a vmapped batch is the same computation as on its own: permuting
    the batch permutes the results (same compiled program, other companions)."""
    hyper, seeds, labels = batch
    perm = np.array([2, 3, 0, 1])
    permuted = train(TINY, jax.tree.map(lambda x: x[perm], hyper), seeds[perm], num_updates=UPDATES, progress=False)
    for name in ("return", "policy_loss", "value_loss", "entropy"):
        np.testing.assert_allclose(permuted.metrics[name], result.metrics[name][perm], rtol=1e-5, atol=1e-6)


def test_a_lone_run_is_its_batch_s_computation_traced_without_vmap(batch, result):
    """One run (or one per device) calls the learner directly, where a batch vmaps it
    (``over_runs``): run 3 trained alone gives what it gave among four."""
    hyper, seeds, labels = batch
    alone = train(TINY, jax.tree.map(lambda x: x[3:], hyper), seeds[3:], num_updates=UPDATES, progress=False)
    for name in ("return", "policy_loss", "value_loss", "entropy", "grad_norm"):
        np.testing.assert_allclose(alone.metrics[name][0], result.metrics[name][3], rtol=1e-5, atol=1e-6)
    seen = []
    double = over_runs(lambda x: seen.append(isinstance(x, jax.core.Tracer)) or 2 * x)
    for runs in (1, 2):
        np.testing.assert_array_equal(double(np.ones((runs, 3))), np.full((runs, 3), 2.0))
    assert seen == [False, True]  # one run: its own values, not a batch tracer


def test_traced_lr_and_support_change_the_result(result):
    """Same seed, so the first rollout is identical; the update differs by the traced value."""
    loss = result.metrics["policy_loss"]
    np.testing.assert_array_equal(result.metrics["reward"][0, 0], result.metrics["reward"][2:, 0])
    assert not np.allclose(loss[0, 1:], loss[2, 1:])  # lr
    assert not np.allclose(loss[0], loss[3])  # support: ippo vs joint


def test_one_hyper_broadcasts_over_seeds():
    hyper = Hyper.create(support.mappo(3))
    res = train(TINY, hyper, [0, 1, 2, 3], num_updates=UPDATES, progress=False)
    assert res.metrics["return"].shape == (4, UPDATES)
    assert res.labels == ["run0", "run1", "run2", "run3"]


def test_results_on_disk(result):
    csv = read_csv(f"{result.out_dir}/metrics.csv")
    assert len(csv["label"]) == 4 * UPDATES
    # appended chunk by chunk: rows are (chunk, run, update) ordered; select run 0 by label
    first = np.array(csv["label"]) == "ippo/seed0"
    np.testing.assert_array_equal(csv["update"][first], np.arange(1, UPDATES + 1))
    np.testing.assert_array_equal(csv["run_id"][first], 0)
    np.testing.assert_array_equal(csv["policy_loss"][first], result.metrics["policy_loss"][0])
    with open(f"{result.out_dir}/learning_curve.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_chunk_has_no_host_callbacks(batch):
    """Metrics leave once per chunk: the compiled chunk contains no host callback."""
    hyper, seeds, _ = batch
    tr = trainer(TINY)
    state = tr.init(jax.random.PRNGKey(0), jax.tree.map(lambda x: x[0], hyper))
    jaxpr = str(jax.make_jaxpr(tr.chunk)(state, jax.tree.map(lambda x: x[0], hyper)))
    assert "callback" not in jaxpr


def test_start_builds_the_chunk_beside_init_and_the_first_chunk_compiles_nothing(batch):
    """``Trainer.start``: init's XLA compile on its own thread while the chunk is traced,
    lowered and compiled on the caller's; the state is init's, and the first chunk call
    then compiles nothing (its build landed in ``chunk_runs``'s own cache)."""
    hyper, seeds, _ = batch
    tr = jaxpo.program.compiled.Trainer(dataclasses.replace(TINY, hidden=(12,)))  # its own, uncompiled
    keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, jnp.uint32))
    again = jaxpo.program.compiled.Trainer(tr.config)  # the same programs, built one after the other
    expected = again.chunk_runs(again.init_runs(keys, hyper), hyper)
    compiled_on = []
    listener = lambda event, seconds, **_: (compiled_on.append(threading.current_thread().name)
                                            if event == "/jax/core/compile/backend_compile_duration" else None)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        state = tr.start(keys, hyper)
        built = list(compiled_on)
        chex.assert_trees_all_equal(state, again.init_runs(keys, hyper))
        after_one_chunk = tr.chunk_runs(state, hyper)  # donates state
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert sorted(name.startswith("jaxpo-init-compile") for name in built) == [False, True]
    assert compiled_on == built and tr.compiles == {"init": 1, "chunk": 1}
    chex.assert_trees_all_equal(after_one_chunk, expected)


def test_a_new_group_s_abstract_state_and_metric_names_trace_init_once(monkeypatch):
    """The driver's first look at a config (``metric_names``, which builds ``abstract_state``)
    traces one run's init once, vmapped over the runs: the hyperparameters' layout needs no
    trace of its own, and the metric names reuse the trace."""
    traced = []
    init = jaxpo.program.learner.Learner.init
    monkeypatch.setattr(jaxpo.program.learner.Learner, "init", lambda self, *a: (traced.append(1), init(self, *a))[1])
    tr = jaxpo.program.compiled.Trainer(dataclasses.replace(TINY, hidden=(10,)))  # its own, untraced
    state = tr.abstract_state(2)
    assert len(traced) == 1 and state.update.shape == (2,)
    assert "loss" in " ".join(tr.metric_names(2)) and len(traced) == 1


def test_equal_configs_share_the_compiled_trainer():
    """Run length is not part of the program; equal configs (array env arguments
    compared by value) share one Trainer and its compiled code."""
    assert trainer(TINY) is trainer(dataclasses.replace(TINY))
    assert trainer(TINY) is not trainer(dataclasses.replace(TINY, num_envs=8))
    ring = np.roll(np.eye(4), 1, axis=1) + np.roll(np.eye(4), -1, axis=1)
    a = Config(env="public_goods", env_kwargs={"graph": ring, "num_agents": 4}, num_envs=2, num_steps=8)
    b = Config(env="public_goods", env_kwargs={"graph": ring.tolist(), "num_agents": 4}, num_envs=2, num_steps=8)
    assert a == b and hash(a) == hash(b) and trainer(a) is trainer(b)
    assert a != dataclasses.replace(a, env_kwargs={"graph": np.eye(4), "num_agents": 4})
    assert trainer(a).num_agents == 4


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(num_envs=0), "num_envs must be a positive integer"),
        (dict(num_steps=2.5), "num_steps must be a positive integer"),
        (dict(num_minibatches=3), "num_minibatches .* must divide"),
        (dict(critic_input="oracle"), "critic_input must be one of"),
        (dict(adv_norm="global"), "adv_norm must be one of"),
        (dict(aggregate_in="ratio"), "aggregate_in must be one of"),
        (dict(hidden=()), "hidden must be a non-empty"),
        (dict(activation="sigmoid"), "activation must be one of"),
    ],
)
def test_config_validation(changes, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(TINY, **changes)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(lr=0.0), "lr must be > 0"),
        (dict(gamma=1.5), r"gamma must be in \[0, 1\]"),
        (dict(clip_eps=float("nan")), "clip_eps must be a finite number"),
        (dict(ent_coef=-0.1), "ent_coef must be >= 0"),
    ],
)
def test_hyper_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Hyper.create(support.ippo(3), **kwargs)


def test_support_of_wrong_size_is_rejected():
    hyper = Hyper.create(support.ippo(2))
    with pytest.raises(ValueError, match="has 3 agents"):
        train(TINY, hyper, [0], num_updates=UPDATES, progress=False)


def test_bad_run_arguments():
    hyper, seeds, labels = runs(support.ippo(3), seeds=[0, 1])
    with pytest.raises(ValueError, match="batched over 3 runs"):
        train(TINY, hyper, [0, 1, 2], num_updates=UPDATES, progress=False)
    with pytest.raises(ValueError, match="one entry per run"):
        train(TINY, hyper, seeds, num_updates=UPDATES, labels=["a"], progress=False)
    with pytest.raises(ValueError, match=r"num_updates must be a positive multiple of Config.updates_per_chunk \(2\)"):
        train(TINY, hyper, seeds, num_updates=5, progress=False)
    with pytest.raises(ValueError, match="same number of agents"):
        Hyper.stack([Hyper.create(support.ippo(2)), Hyper.create(support.ippo(3))])


def test_unknown_env_is_a_clear_error():
    with pytest.raises(ValueError, match="MPE_nope"):
        dataclasses.replace(TINY, env="MPE_nope").make_env()


def test_public_api():
    from jaxpo.experiments import sweeps
    from jaxpo.program import config
    from jaxpo.experiments import train

    assert jaxpo.train is train.train and jaxpo.Config is config.Config and jaxpo.sweep is sweeps.sweep
