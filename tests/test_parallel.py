"""Devices: runs split over 8 devices, one run's environments split over 8 devices
(data parallel), measured in subprocesses started with 8 fake CPU devices
(``tests/devices8.py``); and the arguments of a multi-process start.

Module under test: ``jaxpo.program.parallel`` (and the ``Trainer``'s shardings, ``jaxpo.program.compiled``)."""

import json
import os
import subprocess
import sys

import pytest

from jaxpo.program import parallel

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 1.0  # devices8.max_rel_diff: 1 = rtol 1e-5, atol 1e-6


def start_devices8(part: str) -> subprocess.Popen:
    env = {**os.environ, "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen([sys.executable, os.path.join(HERE, "devices8.py"), part], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def measured():
    """Both parts run at once (one compile each at a time; CI has two cores)."""
    procs = {part: start_devices8(part) for part in ("runs", "envs")}
    out = {}
    for part, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            for p in procs.values():
                p.kill()
            pytest.fail(f"devices8.py {part} did not finish in 900 s")
        assert proc.returncode == 0, f"devices8.py {part} failed:\n{stderr[-4000:]}"
        out.update(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_runs_split_over_devices_match_one_device(measured):
    runs = measured["runs"]
    assert runs["devices"] == 8
    assert runs["metrics_shape"] == [12, 4]  # 12 runs padded to 16; the padding never leaves
    assert runs["params_vs_one_device"] <= TOLERANCE
    assert runs["metrics_vs_one_device"] <= TOLERANCE


def test_sharded_runs_are_bitwise_repeatable(measured):
    assert measured["runs"]["repeat_bitwise"] is True


def test_every_state_leaf_is_split_over_the_runs(measured):
    runs = measured["runs"]
    assert runs["state_leaf_specs"] == ["P('runs',)"]
    assert runs["state_leaf_devices"] == [8]
    assert runs["compiles"] == {"init": 1, "chunk": 1}  # the second batch reused the program


@pytest.mark.parametrize("part", ["runs", "envs"])
def test_sharded_checkpoints_restore_bitwise_onto_any_mesh(measured, part):
    """Saved from 8 devices, restored onto the same shardings (and continued) and onto one
    device: every leaf bitwise equal (the envs layout: rollout split, the rest replicated)."""
    restored = measured[part]["checkpoint"]
    assert restored["bitwise"] is True and restored["same_shardings"] is True
    assert restored["one_device_bitwise"] is True and restored["one_device_devices"] == [1]
    assert restored["continued_bitwise"] is True


def test_runs_program_has_no_collective(measured):
    assert measured["runs"]["chunk_collectives"] == []


def test_data_parallel_update_equals_one_device_update(measured):
    envs = measured["envs"]
    assert envs["params_vs_one_device"] <= TOLERANCE
    assert envs["value_norm_vs_one_device"] <= TOLERANCE
    # Every logged metric is the whole batch's, not one device's share (diagnostics included).
    assert {"pg_snr", "rho_max_e2"} <= set(envs["metrics_vs_one_device"])
    assert all(v <= TOLERANCE for v in envs["metrics_vs_one_device"].values()), envs["metrics_vs_one_device"]


def test_data_parallel_gradient_is_not_scaled_by_devices(measured):
    # Adam would hide a constant factor in the parameters; the logged gradient norm does not.
    assert abs(measured["envs"]["grad_norm_ratio"] - 1.0) < 1e-4


def test_data_parallel_params_identical_on_every_device(measured):
    envs = measured["envs"]
    assert envs["param_devices"] == 8 and envs["params_identical_on_devices"] is True
    assert envs["rollout_specs"] == ["P(None, 'envs')"]


def test_data_parallel_exact_happo_shares_the_agent_order(measured):
    sequential = measured["sequential"]
    assert sequential["params_identical_on_devices"] is True
    assert sequential["params_vs_one_device"] <= TOLERANCE


def test_data_parallel_trains_smax_with_a_recurrent_policy(measured):
    """SMAX's step returns a constant from one branch and per-device data from the other
    (``jaxpo.core.axes.selected_branches``); the CPU kernels' custom gradients take
    replicated weights beside per-device data (``jaxpo.core.axes.varying_as``)."""
    smax = measured["recurrent_smax"]
    assert smax["params_vs_one_device"] <= TOLERANCE
    assert smax["return_vs_one_device"] <= TOLERANCE
    assert smax["params_identical_on_devices"] is True


def test_data_parallel_bad_splits_name_the_setting(measured):
    errors = measured["errors"]
    assert "num_envs (12)" in errors["num_envs"] and "multiple of 8" in errors["num_envs"]
    assert "num_minibatches (32)" in errors["num_minibatches"]


@pytest.mark.parametrize("kwargs, message", [
    ({"num_processes": 2, "process_id": 0}, "missing: `coordinator`"),  # Python names the argument
    ({"coordinator": "localhost:1234", "num_processes": 2}, "missing: `process_id`"),
    ({"coordinator": "localhost", "num_processes": 2, "process_id": 0}, "HOST:PORT"),
    ({"coordinator": "localhost:1234", "num_processes": 0, "process_id": 0}, "`num_processes` must be a positive"),
    ({"coordinator": "localhost:1234", "num_processes": 2, "process_id": 2}, "`process_id` must be an integer in [0, 2)"),
])
def test_multiprocess_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        parallel.initialize(**kwargs)


def test_padded_size():
    assert [parallel.padded_size(r, 8) for r in (1, 8, 9, 12, 16)] == [8, 8, 16, 16, 16]
