"""Many processes: ``jaxpo sweep`` started as two local processes × 4 CPU devices gives
bitwise the metrics of one process with 8 devices, only process 0 writes, and a dead
peer or an unreachable coordinator ends the run with an error in bounded time.

Every process is a real ``python -m jaxpo.cli`` with a timeout, so a hang fails.

Modules under test: ``jaxpo.program.parallel`` and ``jaxpo.cli`` (its process flags)."""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from jaxpo.run.report import read_csv

EXPERIMENT = """
config: {env: public_goods, env_kwargs: {num_agents: 3, max_steps: 8}, num_envs: 4, num_steps: 8, updates_per_chunk: 2, num_epochs: 1,
         num_minibatches: 1, hidden: [16]}
run: {steps: 128, seeds: 8, name: mp, progress: false, bootstrap_reps: 100}
sweep: {grid: {lr: [0.001, 0.003]}}
"""
TIMEOUT = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def start(args: list[str], devices: int) -> subprocess.Popen:
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": str(devices), "JAX_PLATFORMS": "cpu"}
    # The session's XLA options (tests/conftest.py) less a device count: JAX_NUM_CPU_DEVICES is it.
    env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", ""))
    return subprocess.Popen([sys.executable, "-m", "jaxpo.cli", "sweep", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, timeout: float = TIMEOUT) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"process did not finish in {timeout} s:\n{err[-3000:]}")
    return proc.returncode, out, err


def peers(config: str, out: list[str], port: int, timeout: int = 30, flags: list[str] = ()) -> list[subprocess.Popen]:
    return [start(["--config", config, "--out", out[i], "--coordinator", f"localhost:{port}", "--num-processes", "2",
                   "--process-id", str(i), "--peer-timeout", str(timeout), *flags], devices=4) for i in range(2)]


@pytest.fixture(scope="module")
def experiment_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mp") / "mp.yaml"
    path.write_text(EXPERIMENT)
    return str(path)


@pytest.fixture(scope="module")
def one_process(experiment_file, tmp_path_factory):
    """The reference of both two-process tests: one process with 8 devices, 256 env steps
    (8 updates; its first 4 are a 128-step run's, bitwise), no checkpoint."""
    one = str(tmp_path_factory.mktemp("one"))
    code, _, err = finish(start(["--config", experiment_file, "--out", one, "--steps", "256", "--no-checkpoint"],
                                devices=8))
    assert code == 0, err[-3000:]
    return os.path.join(one, "mp")


def test_two_processes_equal_one_process_bitwise(experiment_file, one_process, tmp_path):
    two, quiet = (str(tmp_path / d) for d in ("two", "quiet"))
    procs = peers(experiment_file, [two, quiet], free_port(), flags=["--no-checkpoint"])  # no shards to write
    results = [finish(p) for p in procs]
    for i, (code, _, err) in enumerate(results):
        assert code == 0, f"process {i}:\n{err[-3000:]}"
    assert "runs per group: 16" in results[0][1]  # 16 runs in one group over 2 × 4 devices

    single, multi = read_csv(os.path.join(one_process, "metrics.csv")), read_csv(os.path.join(two, "mp", "metrics.csv"))
    assert len(multi["run_id"]) == 16 * 4  # runs × updates
    for name in single:
        a, b = np.asarray(single[name])[:16 * 4], np.asarray(multi[name])  # the first two chunks: updates 1..4
        if a.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=name)
            assert np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)]), name
        else:
            assert a.tolist() == b.tolist(), name
    assert sorted(os.listdir(os.path.join(two, "mp"))) == sorted(os.listdir(one_process))
    assert not os.path.exists(quiet)  # process 1 writes nothing


def test_two_processes_checkpoint_and_one_process_resumes_bitwise(experiment_file, one_process, tmp_path):
    """Both processes write their shards of each checkpoint into one shared directory;
    one process with 8 devices resumes it (another mesh, another process count) and
    trains on, bitwise as one process trained straight through."""
    shared = str(tmp_path / "shared")
    flags, port = ["--checkpoint-every", "1"], free_port()
    procs = [start(["--config", experiment_file, "--out", shared, *flags, "--coordinator", f"localhost:{port}",
                    "--num-processes", "2", "--process-id", str(i)], devices=4) for i in range(2)]
    for i, (code, _, err) in enumerate(finish(p) for p in procs):
        assert code == 0, f"process {i}:\n{err[-3000:]}"
    state_dir = os.path.join(shared, "mp", "checkpoints", "2", "state")
    assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(state_dir))
    code, _, err = finish(start(["--resume", os.path.join(shared, "mp"), "--steps", "256"], devices=8))
    assert code == 0, err[-3000:]
    with open(os.path.join(shared, "mp", "metrics.csv")) as a, open(os.path.join(one_process, "metrics.csv")) as b:
        assert a.read() == b.read()  # as one process trained straight through


def test_checkpoints_on_storage_one_process_cannot_see_are_a_clear_error(experiment_file, tmp_path):
    """Checkpoints (on by default) take every process's shards: run directories that are
    not one shared directory end both processes with the same error, not a hang."""
    procs = peers(experiment_file, [str(tmp_path / "a"), str(tmp_path / "b")], free_port())
    for code, _, err in (finish(p, timeout=120) for p in procs):
        assert code == 2, err[-3000:]
        assert "is not visible to process 1" in err and "storage every process sees" in err, err[-3000:]


def test_dead_peer_ends_the_run_with_an_error(experiment_file, tmp_path):
    timeout = 10
    procs = peers(experiment_file, [str(tmp_path / "a"), str(tmp_path / "b")], free_port(), timeout, ["--no-checkpoint"])
    # Wait until process 0 has joined and planned the sweep (its first log line), then kill process 1.
    lines = iter(procs[0].stdout.readline, "")
    assert any("runs (" in line for line in lines), procs[0].stderr.read()[-3000:]
    procs[1].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    code, _, err = finish(procs[0], timeout=120)
    waited = time.monotonic() - killed
    procs[1].wait()
    assert code != 0
    assert "stopped sending heartbeats" in err, err[-3000:]
    assert waited < 6 * timeout, waited


def test_unreachable_coordinator_is_a_clear_error(experiment_file, tmp_path):
    port = free_port()  # nothing listens there
    start_time = time.monotonic()
    code, _, err = finish(start(["--config", experiment_file, "--out", str(tmp_path), "--coordinator",
                                 f"localhost:{port}", "--num-processes", "2", "--process-id", "1",
                                 "--peer-timeout", "2"], devices=4), timeout=120)
    assert code == 2
    assert f"coordinator localhost:{port} cannot be reached after 2 s" in err
    assert time.monotonic() - start_time < 60


@pytest.mark.parametrize("args, message", [
    (["--num-processes", "2", "--process-id", "0"], "missing: --coordinator"),
    (["--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "5"], "--process-id must be an integer in [0, 2) for --num-processes 2"),
    (["--distributed", "--num-processes", "2"], "--distributed finds the cluster itself"),
])
def test_bad_process_flags_name_the_flag(args, message, capsys):
    from jaxpo import cli

    assert cli.main(["sweep", *args, "--no-progress"]) == 2
    assert message in capsys.readouterr().err


PBT_FLAGS = ["--schedule", "pbt", "--ready", "1", "--fraction", "0.25", "--resample", "0.5", "--steps", "256",
             "--no-checkpoint"]


def test_a_pbt_sweep_is_the_same_on_one_device_eight_devices_and_two_processes(experiment_file, tmp_path):
    """PBT's exploit/explore is one jitted gather over the runs axis: with the 16 runs split
    over 8 devices, or over two processes × 4 devices (the gather then crosses processes),
    the lineage is the one-device lineage and the metrics are its metrics (bitwise between
    8 devices and two processes; to float rounding on one device, where XLA batches the
    runs differently)."""
    dirs = {name: str(tmp_path / name) for name in ("one", "eight", "two", "quiet")}
    solo = [start(["--config", experiment_file, "--out", dirs[n], *PBT_FLAGS], devices=d) for n, d in (("one", 1),
                                                                                                      ("eight", 8))]
    port = free_port()
    procs = [start(["--config", experiment_file, "--out", (dirs["two"], dirs["quiet"])[i], *PBT_FLAGS,
                    "--coordinator", f"localhost:{port}", "--num-processes", "2", "--process-id", str(i)], devices=4)
             for i in range(2)]
    for i, (code, _, err) in enumerate(finish(p) for p in [*solo, *procs]):
        assert code == 0, f"process {i}:\n{err[-3000:]}"
    read = lambda name, file: open(os.path.join(dirs[name], "mp", file)).read()
    lineage = read("one", "lineage.csv")
    assert lineage.count("\n") == 1 + 16 * 4  # the start and a step after chunks 1, 2 and 3 of 4
    copies = [row for row in lineage.splitlines()[1:] if row.split(",")[1] != row.split(",")[2]]
    assert len(copies) == 4 * 3  # floor(16 × 0.25) runs copied at each step
    assert read("eight", "lineage.csv") == lineage and read("two", "lineage.csv") == lineage
    assert read("two", "metrics.csv") == read("eight", "metrics.csv")
    one, eight = read_csv(os.path.join(dirs["one"], "mp", "metrics.csv")), read_csv(os.path.join(dirs["eight"], "mp",
                                                                                                  "metrics.csv"))
    for name in ("loss", "return", "grad_norm"):
        np.testing.assert_allclose(one[name], eight[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert not os.path.exists(dirs["quiet"])
