"""Measurements on 8 (fake CPU) devices for test_parallel.py, printed as one JSON line.

Run as a script in a subprocess: the device count is fixed when JAX starts, so the
test session's own JAX (1 device) cannot see 8.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/devices8.py
"""

import dataclasses
import json
import re
import sys
import time

import jax
import numpy as np

from jaxpo import Config, Hyper, trainer

from jaxpo.core import support
from jaxpo.run.driver import run_group
from jaxpo.run.history import MetricsHistory
from jaxpo.run.events import ChunkEvent, Group, Run
from jaxpo.program.parallel import put

COLLECTIVES = r"all-reduce|all-gather|all-to-all|collective-permute|reduce-scatter|collective-broadcast"
UPDATES = 4
SECONDS: list[float] = []  # wall seconds of every run() (compile included), for the report
RUNS_CONFIG = Config(env="MPE_simple_spread_v3", num_envs=4, num_steps=8, updates_per_chunk=2, num_epochs=2,
                     num_minibatches=2, hidden=(16,))
# Data parallel: 16 envs, 2 per device; one minibatch, so the one-device run sees the same batches.
# With the diagnostics, whose statistics must be the whole batch's too.
ENVS_CONFIG = dataclasses.replace(RUNS_CONFIG, num_envs=16, num_minibatches=1, value_norm=True, parallel="envs",
                                  diagnostics=True)
# Exact HAPPO, on an env whose `terminated` is a constant (a carry leaf the same on every device).
SEQUENTIAL_CONFIG = dataclasses.replace(ENVS_CONFIG, env="traffic_grid", env_kwargs={"rows": 2, "cols": 2},
                                        scheme="sequential", share_params=False, num_epochs=1, diagnostics=False)

# A JaxMARL environment whose step has branches of differing device types (SMAX's
# observation features) and the GRU's written-out gradient, data parallel.
RECURRENT_SMAX_CONFIG = dataclasses.replace(ENVS_CONFIG, env="HeuristicEnemySMAX", env_kwargs={"scenario": "3m"},
                                            num_envs=8, num_steps=4, recurrent=True, value_norm=False,
                                            diagnostics=False)


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


def max_rel_diff(a, b, atol: float = 1e-6) -> float:
    """max |a − b| / (1e-5 |b| + atol) over all leaves (NaN where both are NaN ignored;
    NaN in one only: inf): ≤ 1 means within rtol 1e-5 and ``atol``."""
    worst = 0.0
    for x, y in zip(leaves(a), leaves(b), strict=True):
        if x.shape != y.shape or not np.array_equal(np.isnan(x), np.isnan(y)):
            return float("inf")
        both = ~np.isnan(x)
        if both.any():
            worst = max(worst, float(np.max(np.abs(x[both] - y[both]) / (1e-5 * np.abs(y[both]) + atol))))
    return worst


def run(config: Config, num_runs: int, devices=None, pad_to=None):
    """``num_runs`` runs (seeds 0.., three learning rates) for UPDATES updates:
    ``(trainer, final state, metrics [R, U])``."""
    tr = trainer(config, devices)
    hyper = Hyper.stack([Hyper.create(support.ippo(tr.num_agents), lr=float(1e-3 * (1 + r % 3))) for r in range(num_runs)])
    seeds = np.arange(num_runs)
    group = Group(config, [Run(r, f"run{r}", "s", int(s)) for r, s in enumerate(seeds)], UPDATES)
    start = time.perf_counter()
    history = MetricsHistory()  # run_group keeps no metrics: a hook records them
    state, _ = run_group(tr, hyper, seeds, group, [history], pad_to=pad_to)
    SECONDS.append(round(time.perf_counter() - start, 1))
    return tr, state, history(group)


def runs_axis() -> dict:
    """12 runs (padded to 16, 2 per device) on 8 devices, twice, and on one device."""
    tr, state, metrics = run(RUNS_CONFIG, 12)
    _, again, metrics_again = run(RUNS_CONFIG, 12)
    # On one device, padded as the 8 devices must be (12 -> 16 runs): the same shapes.
    _, one_state, one_metrics = run(RUNS_CONFIG, 12, devices=jax.devices()[:1], pad_to=16)
    hyper = Hyper.stack([Hyper.create(support.ippo(3))] * 16)
    hlo = tr.chunk_runs.lower(state, put(hyper, tr.run_sharding)).compile().as_text()
    return {
        "devices": jax.device_count(),
        "metrics_shape": list(metrics["return"].shape),
        "params_vs_one_device": max_rel_diff(state.params, one_state.params),
        "metrics_vs_one_device": max_rel_diff(metrics, one_metrics, atol=1e-4),
        "repeat_bitwise": all(np.array_equal(x, y, equal_nan=True) for x, y in zip(leaves(state), leaves(again)))
        and all(np.array_equal(metrics[k], metrics_again[k], equal_nan=True) for k in metrics),
        "state_leaf_specs": sorted({str(x.sharding.spec) for x in jax.tree.leaves(state)}),
        "state_leaf_devices": sorted({len(x.sharding.device_set) for x in jax.tree.leaves(state)}),
        "chunk_collectives": sorted(set(re.findall(COLLECTIVES, hlo))),
        "compiles": dict(tr.compiles),
        "checkpoint": checkpoint_roundtrip(tr, state, metrics),
    }


def checkpoint_roundtrip(tr, state, metrics) -> dict:
    """Saves ``state`` (sharded over 8 devices) with the driver's checkpointer, restores it
    onto the same layout and onto one device, and continues one chunk from the restored
    copy and from the original."""
    import tempfile

    from jaxpo.run import checkpoint

    directory = tempfile.mkdtemp()
    size = jax.tree.leaves(state)[0].shape[0]
    group = Group(tr.config, [Run(r, f"run{r}", "s", r) for r in range(len(metrics["return"]))], UPDATES)
    saver = checkpoint.Checkpointer(directory, every=1)
    saver.start(group)
    updates = np.arange(1, UPDATES + 1)
    saver.chunk(ChunkEvent(group, group.num_chunks - 1, updates, updates, metrics, state, 0.0))
    saver.close()
    target = lambda tr_: (lambda meta: tr_.abstract_state(meta["state_runs"]))
    restored = checkpoint.restore(directory, target=target(tr)).state
    one = checkpoint.restore(directory, target=target(trainer(tr.config, jax.devices()[:1]))).state
    hyper = put(Hyper.stack([Hyper.create(support.ippo(tr.num_agents))] * size), tr.run_sharding)
    copy = jax.tree.map(lambda x: jax.device_put(np.asarray(x), x.sharding), state)  # chunk_runs donates
    after, _ = tr.chunk_runs(copy, hyper)
    after_restored, _ = tr.chunk_runs(restored, hyper)
    restored = checkpoint.restore(directory, target=target(tr)).state
    return {
        "bitwise": all(np.array_equal(x, y) for x, y in zip(leaves(state), leaves(restored))),
        "same_shardings": all(x.sharding == y.sharding for x, y in zip(jax.tree.leaves(state), jax.tree.leaves(restored))),
        "one_device_bitwise": all(np.array_equal(x, y) for x, y in zip(leaves(state), leaves(one))),
        "one_device_devices": sorted({len(x.sharding.device_set) for x in jax.tree.leaves(one)}),
        "continued_bitwise": all(np.array_equal(x, y, equal_nan=True)
                                 for x, y in zip(leaves(after), leaves(after_restored))),
    }


def identical_on_devices(tree) -> bool:
    """Every leaf's copies on the devices (replicated arrays) are bitwise equal."""
    shards = [[np.asarray(s.data) for s in x.addressable_shards] for x in jax.tree.leaves(tree)]
    return all(all(np.array_equal(s, copies[0]) for s in copies) for copies in shards)


def envs_axis() -> dict:
    """Two runs, each with its 16 environments split over 8 devices, and on one device."""
    tr, state, metrics = run(ENVS_CONFIG, 2)
    _, one_state, one_metrics = run(ENVS_CONFIG, 2, devices=jax.devices()[:1])
    return {
        "params_vs_one_device": max_rel_diff(state.params, one_state.params),
        "value_norm_vs_one_device": max_rel_diff(state.value_norm, one_state.value_norm),
        "grad_norm_ratio": float(np.mean(metrics["grad_norm"] / one_metrics["grad_norm"])),
        "metrics_vs_one_device": {k: max_rel_diff(metrics[k], one_metrics[k], atol=1e-4) for k in metrics},
        "params_identical_on_devices": identical_on_devices(state.params),
        "param_devices": len(jax.tree.leaves(state.params)[0].addressable_shards),
        "rollout_specs": sorted({str(x.sharding.spec) for x in jax.tree.leaves(state.rollout)}),
        "compiles": dict(tr.compiles),
        "checkpoint": checkpoint_roundtrip(tr, state, metrics),
    }


def envs_sequential() -> dict:
    """Exact HAPPO data parallel: the agent order is shared, the shuffles are per device."""
    tr, state, _ = run(SEQUENTIAL_CONFIG, 1)
    _, one_state, _ = run(SEQUENTIAL_CONFIG, 1, devices=jax.devices()[:1])
    return {
        "params_vs_one_device": max_rel_diff(state.params, one_state.params),
        "params_identical_on_devices": identical_on_devices(state.params),
    }


def envs_recurrent_smax() -> dict:
    """SMAX with a GRU policy, its 8 environments split over 8 devices, and on one device."""
    tr, state, metrics = run(RECURRENT_SMAX_CONFIG, 1)
    _, one_state, one_metrics = run(RECURRENT_SMAX_CONFIG, 1, devices=jax.devices()[:1])
    return {
        "params_vs_one_device": max_rel_diff(state.params, one_state.params),
        "return_vs_one_device": max_rel_diff(metrics["return"], one_metrics["return"], atol=1e-4),
        "params_identical_on_devices": identical_on_devices(state.params),
    }


def envs_errors() -> dict:
    errors = {}
    for name, config in {"num_envs": dataclasses.replace(ENVS_CONFIG, num_envs=12),
                         "num_minibatches": dataclasses.replace(ENVS_CONFIG, num_minibatches=32)}.items():
        try:
            trainer(config)
            errors[name] = None
        except ValueError as err:
            errors[name] = str(err)
    return errors


if __name__ == "__main__":
    part = sys.argv[1] if len(sys.argv) > 1 else "all"
    out = {}
    if part in ("runs", "all"):
        out["runs"] = runs_axis()
    if part in ("envs", "all"):
        out["envs"] = envs_axis()
        out["sequential"] = envs_sequential()
        out["recurrent_smax"] = envs_recurrent_smax()
        out["errors"] = envs_errors()
    out[f"{part}_seconds"] = SECONDS
    print(json.dumps(out))
