"""What the speed work guarantees without timing anything: the compiled train step does
no more arithmetic than its network needs (XLA's own flop count against the analytical
minimum), and the CLI's persistent compile cache is written once and then reused,
giving the same results (``jaxpo.program.cost``, ``jaxpo.program.compile_cache``).

Modules under test: ``jaxpo.program.cost`` and ``jaxpo.program.compile_cache``."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpo

from jaxpo.program.cost import dense_flops, min_flops_per_env_step, phase_costs


def test_minimum_flops_count_each_dense_layer_by_hand():
    tr = jaxpo.trainer(jaxpo.Config(env="public_goods", env_kwargs={"num_agents": 4}, hidden=(8,)))
    o = tr.env.obs_dim  # actor o -> 8 -> A, critic o -> 8 -> 1
    forward = 2 * (o * 8 + 8 * tr.env.num_actions) + 2 * (o * 8 + 8 * 1)
    first = 2 * (o * 8) * 2
    epochs = 3
    assert min_flops_per_env_step(tr, epochs) == 4 * (forward + epochs * (3 * forward - first))


@pytest.mark.parametrize("share_params", [True, False])
def test_the_train_step_costs_within_a_few_percent_of_its_network_minimum(share_params):
    """XLA's flops per env step (rollout + advantages + epochs × minibatches; of the
    lowered programs, which the compiled ones match to 0.1%) against the network's
    analytical minimum (forward passes in the rollout, forward and backward in
    each epoch). Above it by the loss, Adam (per parameter, so minibatches of 512 samples
    keep it small), the environment and the truncation bootstrap (one block of E rows
    when costed); a redundant pass (a second forward, a duplicated epoch, a bootstrap
    critic at every step) would put it far above. Shapes only: nothing runs."""
    config = jaxpo.Config(num_envs=32, num_steps=32, num_epochs=4, num_minibatches=2, share_params=share_params)
    tr = jaxpo.trainer(config)
    hyper = jaxpo.Hyper.create(jaxpo.support.ippo(tr.num_agents))
    hyper = jax.tree.map(lambda x: jnp.expand_dims(x, 0), hyper)
    state = jax.eval_shape(tr.init_runs, jax.random.split(jax.random.PRNGKey(0), 1), hyper)
    flops = phase_costs(tr, state, hyper, optimized=False)["flops_per_env_step"]
    minimum = min_flops_per_env_step(tr, config.num_epochs)
    assert flops["total"] == pytest.approx(sum(v for k, v in flops.items() if k != "total"), abs=1.0)
    assert minimum <= flops["total"] <= 1.15 * minimum, (flops, minimum)
    rollout_minimum = tr.num_agents * dense_flops(tr)[0]  # one forward pass of every agent's networks
    # policy and value once (1.10× with the env and sampling); a critic pass per step for the bootstrap would be ≥ 1.5×
    assert flops["rollout"] < 1.3 * rollout_minimum, (flops, rollout_minimum)


def test_a_recurrent_shared_trunk_costs_its_network_minimum_too():
    """The SMAX reference's layout (one embedding + GRU for actor and critic, no agent ids)
    at a small size: XLA's flops per env step (lowered), costed with one-step training sequences so
    the GRU's replay is one loop body, against the kernels' analytical count. The rollout
    runs the trunk once per step (the bootstrap only per block of ended steps); a second
    trunk pass would double it, and a replay run twice would double the update."""
    config = jaxpo.Config(env="public_goods", num_envs=16, num_steps=16, num_epochs=2, num_minibatches=2,
                          hidden=(32, 32), recurrent=True, shared_trunk=True, agent_ids=False)
    tr = jaxpo.trainer(config)
    hyper = jax.tree.map(lambda x: jnp.expand_dims(x, 0), jaxpo.Hyper.create(jaxpo.support.ippo(tr.num_agents)))
    state = jax.eval_shape(tr.init_runs, jax.random.split(jax.random.PRNGKey(0), 1), hyper)
    flops = phase_costs(tr, state, hyper, optimized=False)["flops_per_env_step"]
    minimum = min_flops_per_env_step(tr, config.num_epochs)
    forward = tr.num_agents * dense_flops(tr)[0]
    assert 0.9 * minimum <= flops["total"] <= 1.25 * minimum, (flops, minimum)
    assert flops["rollout"] < 1.3 * forward, (flops, forward)  # measured 1.13×
    assert flops["update"] < 1.25 * (minimum - forward), (flops, minimum)  # one replay per epoch, not two


TRAIN = ["train", "--env", "public_goods", "--num-envs", "8", "--num-steps", "16", "--updates-per-chunk", "2",
         "--steps", "512", "--no-progress"]


def _train(out: Path, name: str, *flags: str, env: dict | None = None) -> dict:
    """``jaxpo train`` (TRAIN) in a subprocess."""
    proc = subprocess.run([sys.executable, "-m", "jaxpo.cli", *TRAIN, "--out", str(out), "--name", name, *flags],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _entries(cache: Path) -> set[str]:
    return {p.name for p in cache.iterdir()} if cache.exists() else set()


# Every program stored (JAX's own threshold, which jaxpo leaves to a user who sets it): by
# default the cache skips programs that compile in under 0.5 s, and a program near that line
# may fall on either side in two runs on a loaded machine, which would show as a new entry.
STORE_ALL = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def test_cli_compile_cache_is_written_once_then_reused_with_the_same_results(tmp_path):
    cache = tmp_path / "cache"
    _train(tmp_path, "first", "--compile-cache", str(cache), env=STORE_ALL)
    written = _entries(cache)
    assert any(name.startswith("jit_") for name in written), written  # the init and chunk programs
    _train(tmp_path, "second", "--compile-cache", str(cache), env=STORE_ALL)
    assert _entries(cache) == written  # every program came from the cache: nothing new compiled
    first, second = ((tmp_path / name / "metrics.csv").read_text() for name in ("first", "second"))
    assert first == second


_TINY_PROGRAM = """
import sys, jax, jax.numpy as jnp
from jaxpo.program import compile_cache
compile_cache.enable_compile_cache(sys.argv[1])
jax.jit(lambda x: x * 2 + 1)(jnp.arange(3.0)).block_until_ready()  # compiles in milliseconds
"""


@pytest.mark.parametrize("threshold, stored", [(None, False), ("0", True)])
def test_a_users_jax_cache_threshold_stands(tmp_path, threshold, stored):
    """A program that compiles in milliseconds is not stored under jaxpo's 0.5 s threshold,
    and is where the user set JAX's own to 0."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"}
    if threshold is not None:
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = threshold
    cache = tmp_path / "cache"
    proc = subprocess.run([sys.executable, "-c", _TINY_PROGRAM, str(cache)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any(name.startswith("jit_") for name in _entries(cache)) == stored, _entries(cache)


def test_no_compile_cache_stores_nothing_even_where_jax_is_told_to(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    summary = _train(tmp_path, "run", "--no-compile-cache", env={"JAX_COMPILATION_CACHE_DIR": str(cache)})
    assert _entries(cache) == set()
    assert np.isfinite(summary["return_after"])


def test_a_compile_cache_that_cannot_be_created_is_refused_by_name(tmp_path, capsys):
    from jaxpo.cli import main

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main([*TRAIN, "--out", str(tmp_path), "--compile-cache", str(blocker / "cache")]) == 2
    err = capsys.readouterr().err
    assert "compile cache directory" in err and str(blocker / "cache") in err
    assert not (tmp_path / "runs").exists()


# Run in a fresh process without XLA_FLAGS: the tests' own XLA_FLAGS (conftest) set these options.
_CPU_OPTIONS_CHECK = r"""
import json, os
import jax, numpy as np
from jaxpo.program import compiled

ours = compiled.compiler_options("cpu")
units = np.random.default_rng(0).normal(size=(2, 128, 10, 10, 2)).astype(np.float32)
weights = np.random.default_rng(1).normal(size=(128, 10, 10)).astype(np.float32)
sum_over_units = lambda x, w: (x * w[..., None]).sum(2)  # SMAX's per-unit sums, [128, 10, 2] per env step
default, tuned = (jax.jit(sum_over_units, compiler_options=options).lower(units[0], weights).compile()
                  for options in (None, ours))
os.environ["XLA_FLAGS"] = "--xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"
compiled._known_cpu_options.cache_clear()
user_set = compiled.compiler_options("cpu")
del os.environ["XLA_FLAGS"]
compiled.CPU_COMPILER_OPTIONS["xla_no_such_option"] = 1
compiled._known_cpu_options.cache_clear()
print(json.dumps(dict(
    ours=ours, user_set=user_set, unknown=compiled.compiler_options("cpu"), gpu=compiled.compiler_options("gpu"),
    ynn=[program.as_text().count("__ynn_fusion") for program in (default, tuned)],
    error=float(np.abs(tuned(units[1], weights) - default(units[1], weights)).max()),
)))
"""


def test_cpu_programs_keep_small_reductions_out_of_ynnpack_unless_xla_flags_say_otherwise():
    """XLA's default hands an environment's small sums to YNNPACK (0.5 ms a call in SMAX's
    step); jaxpo's CPU options keep them in XLA's own loops, to the same values. An
    option ``XLA_FLAGS`` names, or one this XLA does not know, is left to XLA."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", _CPU_OPTIONS_CHECK], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["ours"] == {"xla_backend_optimization_level": 1, "xla_cpu_experimental_ynn_fusion_type": ""}
    assert got["ynn"][0] > 0 and got["ynn"][1] == 0, got["ynn"]  # the default's fusion is gone from ours
    assert got["error"] < 1e-5
    assert got["user_set"] == {"xla_backend_optimization_level": 1}
    assert got["unknown"] == got["ours"]  # the unknown option dropped, the others kept
    assert got["gpu"] is None


# Fresh process without XLA_FLAGS: the tests' own (conftest) already name the init option.
_INIT_OPTIONS_CHECK = r"""
import json
import jax, numpy as np
import jaxpo
from jaxpo.program import compiled

config = jaxpo.Config(env="public_goods", env_kwargs={"num_agents": 3}, num_envs=4, num_steps=8, hidden=(16, 16),
                      recurrent=True, num_minibatches=1, num_epochs=1)
tr = compiled.Trainer(config)
keys = jax.random.split(jax.random.PRNGKey(3), 2)
hyper = jax.tree.map(lambda x: np.stack([x, x]), jaxpo.Hyper.create(jaxpo.support.ippo(3)))
lowered = tr.init_runs.lower(keys, hyper)
with_emitters = {**compiled.INIT_COMPILER_OPTIONS, "xla_cpu_use_fusion_emitters": True}
ours, theirs = (jax.jit(jax.vmap(tr.learner.init), compiler_options=options)(keys, hyper)
                for options in (compiled.init_compiler_options("cpu"), with_emitters))
same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)))
print(json.dumps(dict(
    cpu=compiled.init_compiler_options("cpu"), gpu=compiled.init_compiler_options("gpu"),
    lowered=dict(lowered._lowering._compiler_options_kvs), same=same,
    defaults=dict(compiled.Trainer(config, xla_defaults=True).init_runs.lower(keys, hyper)._lowering._compiler_options_kvs),
)))
"""


def test_the_init_program_is_built_for_compile_time_to_the_same_values():
    """init runs once per group: on CPU it compiles without backend optimisation and with
    XLA:CPU's older loop emitters (about 40% less compile), to the values the fusion
    emitters give, bit for bit; other platforms drop the CPU-only option; at XLA's
    defaults (``xla_defaults``) it carries none of jaxpo's."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", _INIT_OPTIONS_CHECK], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["cpu"] == {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
    assert got["lowered"] == got["cpu"]  # what the trainer's init_runs compiles with
    assert got["gpu"] == {"xla_backend_optimization_level": 0}
    assert got["defaults"] == {}
    assert got["same"]
