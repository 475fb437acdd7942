"""Regression tests from a mutation audit: each test fails under one planted bug that
passed the rest of the suite.

* the bootstrap value of a truncated step comes from the final observation (and final
  global state), not from the reset one;
* ``on_nan="mask"`` masks exactly the diverged runs (no neighbour of theirs);
* greedy (and sampled) continuous actions are 0 on masked (padding) action dimensions;
* a sweep group of mixed settings trains each run with its own ``Hyper`` row;
* the data-parallel value normaliser's statistics are the whole batch's (numeric,
  on 8 fake CPU devices in a subprocess).

Modules under test: ``jaxpo.core.rollout`` (truncation), ``jaxpo.run.evaluate``, ``jaxpo.run.guard``,
``jaxpo.experiments.execution`` (mixed settings in a group) and ``jaxpo.core.valuenorm`` over devices."""

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import jax
import numpy as np
import pytest
from conftest import experiment

import jaxpo
from jaxpo import Config, Hyper
from jaxpo.run.evaluate import Policy
from jaxpo.run.guard import EPISODE_METRICS, NanGuard
from jaxpo.program.compiled import trainer
from jaxpo.core.rollout import critic_features, reset, rollout

# ------------------------------------------------------------- 1. truncation bootstrap

# public_goods without productivity noise: a step is a function of (state, actions) alone,
# so the test can replay the rollout's actions through the raw env. Episodes of 4 steps;
# observations and global states end with the time fraction t / max_steps (1 at the
# truncation, 0 after the reset), so final and reset observations always differ.
TRUNC_STEPS = 4
TRUNC_ENVS = 4
TRUNC_KWARGS = {"num_agents": 3, "max_steps": TRUNC_STEPS, "noise": 0.0}


@pytest.fixture(scope="module", params=["local", "global", "agent"])
def truncated_rollout(request):
    """One episode (from reset to its truncation) of 4 envs under an untrained policy, the
    same actions replayed through the raw env, and the critic's value of every step's
    final (pre-reset) critic input computed independently of the rollout."""
    critic_input = request.param
    config = Config(env="public_goods", env_kwargs=TRUNC_KWARGS, num_envs=TRUNC_ENVS, num_steps=TRUNC_STEPS,
                    hidden=(8,), critic_input=critic_input)
    tr = trainer(config)
    raw = tr.env.env  # the env AutoReset wraps: its step never resets
    params = tr.net.init(jax.random.PRNGKey(3))

    @jax.jit
    def run(params, key):
        key_reset, key_run = jax.random.split(key)
        start = reset(tr.env, tr.net, key_reset, TRUNC_ENVS, critic_input)
        end, traj = rollout(tr.env, tr.net, params, start, key_run, TRUNC_STEPS, critic_input)

        def replay(env_state, action):  # the raw env from the same start, with the same actions
            env_state, ts = jax.vmap(raw.step)(jax.random.split(key, TRUNC_ENVS), env_state, action)
            return env_state, (ts.obs, ts.global_state)

        _, (final_obs, final_global) = jax.lax.scan(replay, start.env_state, traj.action)
        expected = tr.net.value(params, critic_features(final_obs, final_global, critic_input))
        reset_value = tr.net.value(params, critic_features(end.timestep.obs, end.timestep.global_state, critic_input))
        return traj, end, final_obs, expected, reset_value

    out = jax.device_get(run(params, jax.random.PRNGKey(11)))
    return (critic_input, *out)


def test_truncated_steps_bootstrap_from_the_final_observation(truncated_rollout):
    critic_input, traj, end, final_obs, expected, reset_value = truncated_rollout
    # The episode is cut by the time limit at its last step only; nothing terminates.
    assert traj.truncated[-1].all() and not traj.truncated[:-1].any() and not traj.terminated.any()
    # The replay is the rollout's own stream: its observations before the end are the rollout's.
    np.testing.assert_allclose(final_obs[:-1], traj.obs[1:], rtol=1e-6, atol=1e-7)
    # Teeth: at the truncation the final observation is not the reset one, nor are their values.
    assert not np.allclose(final_obs[-1], end.timestep.obs)
    assert np.abs(expected[-1] - reset_value).min() > 1e-4, (critic_input, expected[-1], reset_value)
    np.testing.assert_allclose(traj.final_value[-1], expected[-1], rtol=1e-5, atol=1e-6,
                               err_msg=f"critic_input={critic_input}: truncated steps must bootstrap from the "
                                       f"value of the final observation, not the reset one")
    np.testing.assert_allclose(traj.final_value, expected, rtol=1e-5, atol=1e-6, err_msg=critic_input)


# ---------------------------------------------- 3. masked continuous action dimensions


@pytest.fixture(scope="module")
def speaker_listener():
    """MPE speaker-listener with continuous actions: the speaker has 3 action dimensions,
    the listener 5, so the speaker's last 2 are padding (masked False). Untrained
    parameters with the Gaussian means moved away from 0 (the actor's head bias + 1)."""
    config = Config(env="MPE_simple_speaker_listener_v4", env_kwargs={"action_type": "Continuous"}, hidden=(8,))
    tr = trainer(config)
    params = tr.net.init(jax.random.PRNGKey(0))
    head = f"Dense_{len(config.hidden)}"  # layers are Dense_0, Dense_1, ... in order
    params["actor"]["params"][head]["bias"] = params["actor"]["params"][head]["bias"] + 1.0
    env = config.make_env()
    _, ts = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(1), 4))  # obs [4, 2, O]
    return config, tr, params, ts


def test_greedy_and_sampled_continuous_actions_are_zero_on_masked_dimensions(speaker_listener):
    config, tr, params, ts = speaker_listener
    mask = np.asarray(ts.action_mask)
    np.testing.assert_array_equal(mask[0], [[True] * 3 + [False] * 2, [True] * 5])  # the padding this needs
    mean = np.asarray(tr.net.policy(params, ts.obs, ts.action_mask).mean)
    assert np.abs(mean[~mask]).min() > 0.5  # teeth: the means on padding are far from 0
    greedy = np.asarray(jax.jit(Policy(config, params, {}, 0).act)(jax.random.PRNGKey(2), ts.obs, ts.action_mask))
    np.testing.assert_array_equal(greedy[~mask], 0.0, err_msg="greedy actions on masked dimensions must be 0")
    np.testing.assert_array_equal(greedy[mask], mean[mask])  # and the mean where the dimension exists
    sampled = np.asarray(jax.jit(Policy(config, params, {}, 0, greedy=False).act)(
        jax.random.PRNGKey(2), ts.obs, ts.action_mask))
    np.testing.assert_array_equal(sampled[~mask], 0.0, err_msg="sampled actions on masked dimensions must be 0")
    assert np.all(sampled[mask] != mean[mask])  # a real sample where the dimension exists


# --------------------------------------------------------------- shared: 4-run sweeps

# The conftest experiment (public_goods, 8 agents), smaller networks and 2 updates per chunk,
# as sweeps of exactly 4 runs in one group: one program, shared by both sweep tests below. 4 updates:
# 2 chunks, so the guard sees runs that diverged in an earlier chunk too, and a divergence
# inside a chunk of two updates.
SWEEP_RUNS = 4
SWEEP_STEPS = 128 * 4


def four_run_sweep(out, name: str, grid: dict, log=None, **run) -> jaxpo.SweepResult:
    spec = experiment(out, name, seeds=1, steps=SWEEP_STEPS, runs_per_group=SWEEP_RUNS, **run)
    config = {**spec["config"], "updates_per_chunk": 2, "hidden": [16], "num_epochs": 2, "num_minibatches": 2}
    spec = {**spec, "config": config, "sweep": {"grid": grid}}
    return jaxpo.sweep(spec, log=log)


@pytest.fixture(scope="module")
def masked_sweep(tmp_path_factory):
    """lr = 3e-4, 1e30, 1e31, 1e-3 (one seed each), on_nan mask: the middle two diverge at
    once; the healthy runs sit at both ends of the group, next to them, so masking a
    neighbour of a diverged run (index ± 1) hits a healthy one."""
    lines = []
    result = four_run_sweep(tmp_path_factory.mktemp("audit_mask"), "mask", {"lr": [3e-4, 1e30, 1e31, 1e-3]},
                            log=lines.append, on_nan="mask")
    return result, lines


# ------------------------------------------------------------- 2. --on-nan mask


def test_the_nan_mask_marks_exactly_the_diverged_runs(masked_sweep):
    result, lines = masked_sweep
    assert len(result.programs) == 1 and result.programs[0].group_size == SWEEP_RUNS
    metrics = result.programs[0].metrics
    episodes = metrics["episodes"]
    updates = episodes.shape[1]
    rows = {row["label"]: row for row in result.summary}
    assert sorted(rows) == ["lr=0.0003/seed0", "lr=0.001/seed0", "lr=1e+30/seed0", "lr=1e+31/seed0"]
    diverged = {"lr=1e+30/seed0", "lr=1e+31/seed0"}
    for r, run in enumerate(result.programs[0].runs):
        row = rows[run.label]
        if run.label not in diverged:
            assert row["diverged_at_update"] == "", (run.label, row["diverged_at_update"])
            assert run.run_id not in result.diverged, run.label
            for name, values in metrics.items():
                seen = episodes[r] > 0 if name in EPISODE_METRICS else np.ones(updates, bool)
                assert np.isfinite(values[r][seen]).all(), f"healthy run {run.label} has non-finite {name}: {values[r]}"
            assert np.isfinite(row["final_return"]), run.label
            continue
        at = row["diverged_at_update"]
        assert isinstance(at, int) and 1 <= at <= updates, (run.label, at)
        assert result.diverged[run.run_id][0] == at
        for name, values in metrics.items():
            assert np.isnan(values[r, at - 1:]).all(), f"diverged run {run.label}: {name} not NaN from update {at}: {values[r]}"
            seen = episodes[r, :at - 1] > 0 if name in EPISODE_METRICS else np.ones(at - 1, bool)
            assert np.isfinite(values[r, :at - 1][seen]).all(), \
                f"diverged run {run.label}: {name} non-finite before its diverged_at_update {at}: {values[r]}"
        assert np.isnan(row["final_return"])
    warned = [line for line in lines if "became non-finite" in line]
    assert len(warned) == 2 and all("lr=1e+3" in line for line in warned), warned


def test_the_guards_check_masks_only_its_run_from_its_update():
    """``NanGuard.check`` on a synthetic chunk of 4 runs × updates 3, 4: run r turns
    non-finite at update 4; only its row is masked, from update 4 on."""
    for r in range(SWEEP_RUNS):
        metrics = {"loss": np.arange(8.0).reshape(SWEEP_RUNS, 2), "episodes": np.ones((SWEEP_RUNS, 2))}
        metrics["loss"][r, 1] = np.inf
        group = SimpleNamespace(runs=[SimpleNamespace(run_id=i, label=f"run{i}") for i in range(SWEEP_RUNS)])
        masked, new = NanGuard("mask").check(group, np.array([3, 4]), metrics, {"w": np.ones((SWEEP_RUNS, 1))})
        assert new == (r,)
        expected = np.zeros((SWEEP_RUNS, 2), bool)
        expected[r, 1] = True  # run r from update 4 on
        for name, values in masked.items():
            np.testing.assert_array_equal(np.isnan(values), expected, err_msg=f"check(run {r} at update 4): {name}")


# ------------------------------------------------------- 4. Hyper rows of a sweep group


def test_a_group_of_mixed_settings_trains_each_run_with_its_own_hyper(tmp_path):
    """lr × preset, 4 settings in one group of 4 runs, against the same compiled program
    run by hand (``init_runs``, then ``chunk_runs`` per chunk, as the driver does) on the
    rows built by hand — not through ``jaxpo.train``, which may share the sweep's path:
    bitwise per run and metric."""
    grid = {"lr": [3e-4, 3e-3], "preset": ["ippo", "mappo"]}
    result = four_run_sweep(tmp_path, "mixed", grid, seed=5)
    program = result.programs[0]
    assert len(result.programs) == 1 and program.group_size == SWEEP_RUNS and len(program.runs) == SWEEP_RUNS
    assert [r.setting for r in program.runs] == ["lr=0.0003,preset=ippo", "lr=0.0003,preset=mappo",
                                                 "lr=0.003,preset=ippo", "lr=0.003,preset=mappo"]
    n = program.config.make_env().num_agents
    presets = {"ippo": jaxpo.support.ippo(n), "mappo": jaxpo.support.mappo(n)}
    hyper = Hyper.stack([Hyper.create(presets[r.values["preset"]], lr=r.values["lr"]) for r in program.runs])
    seeds = np.array([r.seed for r in program.runs])
    assert seeds.tolist() == [5] * SWEEP_RUNS
    tr = jaxpo.trainer(program.config)
    state = tr.init_runs(np.asarray(jax.vmap(jax.random.PRNGKey)(seeds.astype(np.uint32))), hyper)
    chunks = []
    for _ in range(program.num_updates // program.config.updates_per_chunk):
        state, metrics = tr.chunk_runs(state, hyper)
        chunks.append(jax.device_get(metrics))
    direct = {k: np.concatenate([np.asarray(c[k], np.float64) for c in chunks], axis=1) for k in chunks[0]}
    assert sorted(direct) == sorted(program.metrics)
    for name, values in program.metrics.items():
        for r, run in enumerate(program.runs):
            np.testing.assert_array_equal(values[r], direct[name][r],
                                          err_msg=f"{name} of run {run.label}: not trained with its own Hyper row")
    # teeth: the four settings train differently
    loss = direct["policy_loss"]
    assert all(not np.array_equal(loss[a], loss[b]) for a in range(SWEEP_RUNS) for b in range(a))


# ------------------------------------------ 5. data-parallel value normaliser (8 devices)

# Run in a subprocess: the device count is fixed when JAX starts. One update's epochs
# (one epoch, one minibatch: the whole batch) on 8 devices, each holding 1/8 of the same
# training data, against the one-device update on all of it. The normaliser state goes
# in and out per device (stacked [8, ...], split over the devices), so a normaliser that
# skips its pmean neither crashes nor hides: each device would return its own share's
# statistics. Compared: the raw state and the debiased (mean, var) normalisation uses.
# Also valuenorm.update itself, with and without per_element_update.
VALUE_NORM_SCRIPT = textwrap.dedent(r"""
    import dataclasses, json
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import PartitionSpec as P
    from jaxpo import Config, Hyper, support, trainer
    from jaxpo.core import valuenorm
    from jaxpo.program.parallel import ENV_AXIS

    assert jax.device_count() == 8, jax.devices()
    FIELDS = ("running_mean", "running_mean_sq", "debiasing_term")
    lists = lambda norm: {f: np.asarray(getattr(norm, f)).tolist() for f in FIELDS}
    config = Config(env="public_goods", env_kwargs={"num_agents": 3, "max_steps": 5}, num_envs=16, num_steps=8,
                    updates_per_chunk=1, num_epochs=1, num_minibatches=1, hidden=(8,), value_norm=True)
    one = trainer(config, jax.devices()[:1])
    dp = trainer(dataclasses.replace(config, parallel="envs"))
    hyper = Hyper.create(support.ippo(3))
    key = jax.random.PRNGKey(4)
    state = jax.jit(one.init)(jax.random.PRNGKey(0), hyper)  # zero statistics: the update's batch is all they hold
    _, _, data = jax.jit(one.collect)(state, hyper)
    (_, _, norm_one), _ = jax.jit(one.update)(state, data, key, hyper)
    targets = np.asarray(data[2])  # [S, 1, N]: what the normaliser averages
    share_means = targets.reshape(8, -1, targets.shape[-1]).mean(1)  # [8, N]: each device's share alone

    def per_device(params, opt_state, norms, data, key, hyper):
        s = state.replace(params=params, opt_state=opt_state, rollout=None,
                          value_norm=jax.tree.map(lambda x: x[0], norms))
        (_, _, norm), _ = dp.update(s, data, key, hyper)
        return jax.tree.map(lambda x: x[None], norm)

    stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (8, *x.shape)), state.value_norm)
    mapped = jax.jit(jax.shard_map(per_device, mesh=dp.mesh, in_specs=(P(), P(), P(ENV_AXIS), P(ENV_AXIS), P(), P()),
                                   out_specs=P(ENV_AXIS)))
    norm_dp = mapped(state.params, state.opt_state, stacked, data, key, hyper)
    mean_var = lambda norm: [np.asarray(x).tolist() for x in valuenorm.running_mean_var(norm)]
    dp_mean_var = [mean_var(jax.tree.map(lambda x: x[d], norm_dp)) for d in range(8)]

    # valuenorm.update alone: x [8 * 6, 3] split in 8 equal shares
    x = jax.random.normal(jax.random.PRNGKey(7), (48, 3)) * jnp.arange(1.0, 49.0)[:, None]
    prior = valuenorm.init((3,))
    update = {}
    for per_element in (False, True):
        f = lambda x: jax.tree.map(lambda y: y[None], valuenorm.update(prior, x, 0.9, per_element, axis_name=ENV_AXIS))
        shards = jax.jit(jax.shard_map(f, mesh=dp.mesh, in_specs=P(ENV_AXIS), out_specs=P(ENV_AXIS)))(x)
        whole = jax.jit(valuenorm.update, static_argnums=3)(prior, x, 0.9, per_element)
        update[str(per_element)] = {"shards": lists(shards), "whole": lists(whole)}
    print(json.dumps({"one": lists(norm_one), "dp": lists(norm_dp), "update": update,
                      "one_mean_var": mean_var(norm_one), "dp_mean_var": dp_mean_var,
                      "batch_mean": targets.mean((0, 1)).tolist(), "share_means": share_means.tolist()}))
""")


@pytest.fixture(scope="module")
def value_norm_8_devices():
    env = {**os.environ, "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", VALUE_NORM_SCRIPT], env=env, capture_output=True, text=True,
                          check=False, timeout=600)
    assert proc.returncode == 0, f"the 8-device script failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _max_rel_diff(a, b, atol: float = 0.0) -> float:
    """max |a − b| / (1e-5 |b| + atol): ≤ 1 means within rtol 1e-5 (and ``atol``)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / (1e-5 * np.abs(b) + atol)))


def test_data_parallel_value_norm_statistics_are_the_whole_batchs(value_norm_8_devices):
    out = value_norm_8_devices
    # teeth: each device's share alone has other statistics than the whole batch
    np.testing.assert_allclose(out["one_mean_var"][0], out["batch_mean"], rtol=1e-4)
    share_gap = np.abs(np.asarray(out["share_means"]) - out["batch_mean"]).max(axis=1)
    assert np.all(share_gap > 1e-3 * np.abs(out["batch_mean"]).max()), share_gap
    one, dp = out["one"], out["dp"]
    for field, whole in one.items():
        shards = np.asarray(dp[field])
        assert shards.shape == (8, *np.shape(whole)), (field, shards.shape)
        for d in range(8):  # every device holds the one-device statistics of the whole batch
            assert _max_rel_diff(shards[d], whole, atol=1e-12) <= 1.0, \
                f"{field} on device {d}: {shards[d]} vs one device {whole} (a share's, not the batch's?)"
    for d, (mean, var) in enumerate(out["dp_mean_var"]):
        assert _max_rel_diff(mean, out["one_mean_var"][0], atol=1e-6) <= 1.0, \
            f"normaliser mean on device {d}: {mean} vs one device {out['one_mean_var'][0]}"
        assert _max_rel_diff(var, out["one_mean_var"][1], atol=1e-6) <= 1.0, \
            f"normaliser var on device {d}: {var} vs one device {out['one_mean_var'][1]}"
    for per_element, got in out["update"].items():
        for field, whole in got["whole"].items():
            for d, share in enumerate(np.asarray(got["shards"][field])):
                assert _max_rel_diff(share, whole, atol=1e-6) <= 1.0, \
                    f"valuenorm.update(per_element_update={per_element}) {field} on device {d}: {share} vs {whole}"
