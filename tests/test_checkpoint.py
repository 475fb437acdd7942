"""Checkpoints and exact resume: bitwise equal to an uninterrupted run, across a new
process, a SIGKILL during a save and a sweep of several groups; refusals; corruption."""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import jaxpo
from jaxpo import cli
from runtools import StopAfter
from jaxpo.run import checkpoint
from jaxpo.experiments.sweeps import resume

from conftest import CHUNKS, experiment

FLAGS = ["--env", "public_goods", "--num-envs", "8", "--num-steps", "16", "--updates-per-chunk", "1", "--seeds", "2",
         "--no-progress"]


def final_state(run_dir):
    """The batched state of a run directory's newest checkpoint, on the host."""
    return jax.device_get(checkpoint.restore(run_dir, target=checkpoint.trained_target).state)


def assert_same_run(a, b):
    """Every metric (the CSV, byte for byte) and every leaf of the final state equal."""
    with open(os.path.join(a, "metrics.csv")) as fa, open(os.path.join(b, "metrics.csv")) as fb:
        assert fa.read() == fb.read()
    leaves_a, leaves_b = jax.tree.leaves(final_state(a)), jax.tree.leaves(final_state(b))
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def straight(trained_run):
    return trained_run


def cli_train(*args, timeout=240):
    return subprocess.Popen([sys.executable, "-m", "jaxpo.cli", "train", *FLAGS, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_resume_in_a_new_process_is_bitwise_identical(straight, tmp_path):
    _, straight_dir = straight
    half = cli_train("--steps", str(128 * CHUNKS // 2), "--checkpoint-every", "3", "--out", str(tmp_path),
                     "--name", "run")
    out, _ = half.communicate(timeout=240)
    assert half.returncode == 0, out
    run_dir = str(tmp_path / "run")
    assert checkpoint.steps(run_dir)[-1] == CHUNKS // 2  # a group's last chunk is always saved
    result = resume(run_dir, run={"steps": 128 * CHUNKS})  # this process: K more chunks
    assert result.programs[0].metrics["return"].shape == (2, CHUNKS)
    assert_same_run(run_dir, straight_dir)
    rows = open(os.path.join(run_dir, "metrics.csv")).read().splitlines()
    assert len(rows) == 1 + 2 * CHUNKS  # each (run, update) exactly once


def test_a_run_killed_during_a_save_resumes_to_the_same_result(straight, tmp_path):
    _, straight_dir = straight
    run_dir = str(tmp_path / "run")
    proc = cli_train("--steps", str(128 * CHUNKS * 8), "--checkpoint-every", "1", "--keep", "2",
                     "--out", str(tmp_path), "--name", "run")
    partial = []
    deadline = time.time() + 200
    try:
        while time.time() < deadline and proc.poll() is None:
            partial = glob.glob(os.path.join(run_dir, "checkpoints", "*tmp*"))
            if partial and len(checkpoint.steps(run_dir)) >= 2:
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.002)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed during a save"
    assert partial, "no save was in progress when the run was killed"
    done = checkpoint.steps(run_dir)
    assert len(done) <= 2 + 1  # --keep 2 (and the steps still being deleted)
    result = resume(run_dir, run={"steps": 128 * CHUNKS * 8})
    assert result.programs[0].metrics["return"].shape == (2, CHUNKS * 8)
    # the first CHUNKS updates are the straight run's, to the bit
    rows = open(os.path.join(run_dir, "metrics.csv")).read().splitlines()
    head = open(os.path.join(straight_dir, "metrics.csv")).read().splitlines()
    assert len(rows) == 1 + 2 * CHUNKS * 8
    mine = [r for r in rows[1:] if int(r.split(",")[4]) <= CHUNKS]
    assert mine == head[1:]


def test_a_sweep_of_several_groups_resumes_exactly(tmp_path):
    sweep = {"grid": {"lr": [1e-3, 3e-3]}}
    run = dict(runs_per_group=1, checkpoint_every=2, steps=128 * 6)
    straight = jaxpo.sweep({**experiment(tmp_path, "straight", **run), "sweep": sweep})
    with pytest.raises(KeyboardInterrupt):  # stopped in the second group, after its third chunk
        jaxpo.sweep({**experiment(tmp_path, "cut", **run), "sweep": sweep}, hooks=[StopAfter(9)])
    assert checkpoint.steps(str(tmp_path / "cut"))[-1] == 8  # batch 0 ends at 6, then every 2
    resumed = resume(str(tmp_path / "cut"))
    for a, b in zip(straight.programs, resumed.programs):
        for name in a.metrics:
            np.testing.assert_array_equal(a.metrics[name], b.metrics[name])
    summary = lambda name: open(tmp_path / name / "summary.csv").read()
    assert summary("cut") == summary("straight")
    assert_same_run(str(tmp_path / "cut"), str(tmp_path / "straight"))


def test_resume_refuses_what_would_not_be_the_same_run(straight, tmp_path, capsys):
    _, straight_dir = straight
    run_dir = str(tmp_path / "copy")
    shutil.copytree(straight_dir, run_dir)
    cases = [
        (["--num-envs", "16"], "--num-envs: checkpoint 8, now 16"),  # the library's config.num_envs, as a flag
        (["--seeds", "3"], "the number of runs differs (checkpoint 2, now 3)"),
        (["--lr", "0.01"], "--lr: checkpoint 0.003, now 0.01"),
        (["--name", "other"], "give it without --out and --name"),
    ]
    for flags, message in cases:
        assert cli.main(["train", "--resume", run_dir, *flags]) == 2
        assert message in capsys.readouterr().err, flags
    with pytest.raises(ValueError, match="config.num_envs: checkpoint 8, now 16"):  # Python names the field
        resume(run_dir, config={"num_envs": 16})

    # a checkpoint written by an incompatible jaxpo version
    latest = checkpoint.steps(run_dir)[-1]
    meta_file = os.path.join(run_dir, "checkpoints", str(latest), "meta", "metadata")
    meta = json.load(open(meta_file))
    json.dump({**meta, "jaxpo": "9.0.0"}, open(meta_file, "w"))
    assert cli.main(["train", "--resume", run_dir]) == 2
    err = capsys.readouterr().err
    assert "written by jaxpo 9.0.0" in err and f"this is jaxpo {jaxpo.__version__}" in err


def test_missing_and_corrupted_checkpoints(straight, tmp_path, capsys):
    _, straight_dir = straight
    assert cli.main(["train", "--resume", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli.main(["train", "--resume", str(tmp_path / "empty")]) == 2
    assert "holds no complete checkpoint" in capsys.readouterr().err

    run_dir = str(tmp_path / "copy")
    shutil.copytree(straight_dir, run_dir)
    steps = checkpoint.steps(run_dir)
    for path in glob.glob(os.path.join(run_dir, "checkpoints", str(steps[-1]), "state", "**", "d", "*"),
                          recursive=True):
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)  # torn array data
    with pytest.warns(UserWarning, match=f"checkpoint .*{steps[-1]} cannot be read"):
        found = checkpoint.restore(run_dir, target=checkpoint.trained_target)
    assert found.step == steps[-2]

    for step in steps:  # every checkpoint torn: a clear error, no orbax traceback
        for path in glob.glob(os.path.join(run_dir, "checkpoints", str(step), "meta", "metadata")):
            open(path, "w").write("{not json")
    assert cli.main(["eval", run_dir]) == 2
    err = capsys.readouterr().err
    assert "jaxpo eval: error: no checkpoint in" in err and "Traceback" not in err


def test_the_nan_guard_masks_a_diverging_run_and_the_others_go_on(tmp_path):
    sweep = {"grid": {"lr": [3e-4, 1e30]}}
    masked = jaxpo.sweep({**experiment(tmp_path, "mask", on_nan="mask", steps=128 * 4), "sweep": sweep})
    healthy = jaxpo.sweep({**experiment(tmp_path, "healthy", steps=128 * 4), "sweep": {"grid": {"lr": [3e-4]}}})
    by_label = {row["label"]: row for row in masked.summary}
    assert by_label["lr=1e+30/seed0"]["diverged_at_update"] == 1
    assert np.isnan(by_label["lr=1e+30/seed0"]["final_return"])
    assert by_label["lr=0.0003/seed0"]["diverged_at_update"] == ""
    np.testing.assert_allclose(by_label["lr=0.0003/seed0"]["final_return"],
                               {r["label"]: r for r in healthy.summary}["lr=0.0003/seed0"]["final_return"], rtol=1e-4)
    csv = open(tmp_path / "mask" / "summary.csv").read()
    assert "diverged_at_update" in csv.splitlines()[0]


def test_the_nan_guard_stops_and_keeps_the_last_finite_checkpoint(tmp_path, capsys):
    flags = ["sweep", *FLAGS[:-3], "--seeds", "1", "--no-progress", "--sweep", "lr=0.0003,1e30", "--runs-per-group", "1",
             "--steps", "512", "--checkpoint-every", "1", "--keep", "1", "--out", str(tmp_path), "--name", "stop"]
    assert cli.main(flags) == 1
    err = capsys.readouterr().err
    assert "run 1 (lr=1e+30/seed0) became non-finite by update 1" in err and "--on-nan mask" in err
    run_dir = str(tmp_path / "stop")
    steps = checkpoint.steps(run_dir)
    assert steps == [4]  # the healthy group's last chunk: no non-finite state was saved
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(final_state(run_dir).params))


def test_the_python_train_api_checkpoints_resumes_and_guards(tmp_path):
    config = jaxpo.Config(env="public_goods", num_envs=8, num_steps=16, updates_per_chunk=2)
    hyper, seeds, labels = jaxpo.runs(jaxpo.support.ippo(8), seeds=[0, 1])
    common = dict(labels=labels, progress=False, checkpoint_every=1)
    straight = jaxpo.train(config, hyper, seeds, num_updates=8, out_dir=str(tmp_path / "a"), **common)
    jaxpo.train(config, hyper, seeds, num_updates=4, out_dir=str(tmp_path / "b"), **common)
    resumed = jaxpo.train(config, hyper, seeds, num_updates=8, out_dir=str(tmp_path / "b"), resume=True, **common)
    for name in straight.metrics:
        np.testing.assert_array_equal(straight.metrics[name], resumed.metrics[name])
    for x, y in zip(jax.tree.leaves(straight.state), jax.tree.leaves(resumed.state)):
        np.testing.assert_array_equal(x, y)
    assert open(tmp_path / "a" / "metrics.csv").read() == open(tmp_path / "b" / "metrics.csv").read()

    # these rows are an experiment's (ippo, default scalars, seeds 0 and 1): any door resumes the directory
    again = resume(str(tmp_path / "b"), run={"progress": False})
    np.testing.assert_array_equal(again.programs[0].metrics["return"], straight.metrics["return"])
    other, _, _ = jaxpo.runs(jaxpo.support.ippo(8), seeds=[0, 1], lr=1e-2)
    with pytest.raises(ValueError, match="cannot resume: the experiment differs from the checkpoint's in hyper.lr: checkpoint 0.003, now 0.01"):
        jaxpo.train(config, other, seeds, num_updates=8, out_dir=str(tmp_path / "b"), resume=True, **common)
    diverging, _, _ = jaxpo.runs(jaxpo.support.ippo(8), seeds=[0, 1], lr=1e30)
    with pytest.raises(jaxpo.guard.NonFiniteError, match=r"run 0 \(ippo/seed0\) became non-finite by update 1"):
        jaxpo.train(config, diverging, seeds, num_updates=4, labels=labels, progress=False)


def _history_items(run_dir):
    """Which checkpoint steps of ``run_dir`` hold a ``history`` item (the metrics so far)."""
    return [step for step in checkpoint.steps(run_dir)
            if os.path.exists(os.path.join(run_dir, "checkpoints", str(step), "history"))]


def test_checkpoints_hold_no_metrics_and_a_resume_cuts_the_file_back_to_them(straight, monkeypatch, tmp_path):
    straight_result, straight_dir = straight
    assert checkpoint.steps(straight_dir) and not _history_items(straight_dir)  # metrics.csv holds them
    assert checkpoint.read_meta(straight_dir, checkpoint.steps(straight_dir)[-1])["metrics_file"] == "metrics.csv"
    with pytest.raises(KeyboardInterrupt):  # in chunk 6: the file has 6 chunks' rows, the checkpoint 4
        jaxpo.sweep(experiment(tmp_path, "cut", checkpoint_every=4), hooks=[StopAfter(6)])
    run_dir = str(tmp_path / "cut")
    before = open(os.path.join(run_dir, "metrics.csv")).read()
    assert len(before.splitlines()) == 1 + 2 * 6

    # a crash while the resume writes the file leaves it as it was
    from jaxpo.run import report

    append = report.AppendCSV.append

    def torn(self, rows):
        append(self, list(rows)[:1])
        if self.path.endswith(".resume"):
            raise OSError("disk full")

    monkeypatch.setattr(report.AppendCSV, "append", torn)
    with pytest.raises(OSError, match="disk full"):
        resume(run_dir)
    monkeypatch.undo()
    assert open(os.path.join(run_dir, "metrics.csv")).read() == before
    assert not os.path.exists(os.path.join(run_dir, "metrics.csv.resume"))

    # without a metrics file now (run.log), the metrics are read from the old one, up to the checkpoint
    elsewhere = str(shutil.copytree(run_dir, tmp_path / "elsewhere"))
    kept = resume(elsewhere, run={"log": "tensorboard"})
    for name, values in straight_result.programs[0].metrics.items():
        np.testing.assert_array_equal(values, kept.programs[0].metrics[name], err_msg=name)

    resumed = resume(run_dir)  # rows past the checkpoint dropped, each (run, update) once
    for name, values in straight_result.programs[0].metrics.items():
        np.testing.assert_array_equal(values, resumed.programs[0].metrics[name], err_msg=name)
    assert_same_run(run_dir, straight_dir)
    assert not _history_items(run_dir) and not os.path.exists(os.path.join(run_dir, "metrics.csv.resume"))


def test_checkpoints_that_hold_the_metrics_still_resume(straight, monkeypatch, tmp_path):
    """Steps written before the metrics file held the metrics alone (a ``history`` item,
    no ``metrics_file``) restore, and a resume writes the file's rows from them."""
    _, straight_dir = straight
    init = checkpoint.Checkpointer.__init__

    def as_before(self, run_dir, every, keep, meta, pinned, history):  # as execution calls it
        init(self, run_dir, every, keep, meta, pinned, None if isinstance(history, str) else history)

    monkeypatch.setattr(checkpoint.Checkpointer, "__init__", as_before)
    with pytest.raises(KeyboardInterrupt):
        jaxpo.sweep(experiment(tmp_path, "old", checkpoint_every=4), hooks=[StopAfter(6)])
    monkeypatch.undo()
    run_dir = str(tmp_path / "old")
    assert _history_items(run_dir) == checkpoint.steps(run_dir) == [4]
    assert "metrics_file" not in checkpoint.read_meta(run_dir, 4)
    os.remove(os.path.join(run_dir, "metrics.csv"))  # its rows come from the checkpoint
    resume(run_dir)
    assert_same_run(run_dir, straight_dir)


def test_the_spec_json_orbax_asks_for_every_array_is_the_same_and_not_leaked():
    """``ocp_module`` swaps tensorstore's ``KvStore.Spec.to_json`` (which leaks every string
    it returns) for one that gives the same JSON and whose strings are freed."""
    import tensorstore as ts

    from jaxpo.run.orbax_store import ocp_module

    ocp_module()
    ocp_module()  # swapped once: the original stays the fallback
    assert ts.KvStore.Spec.to_json.jaxpo_without_leak
    specs = [{"driver": "file", "path": "/tmp/a b/q'uote/"}, {"driver": "file", "path": "/tmp/ünï/"},
             {"driver": "ocdbt", "base": {"driver": "file", "path": "/tmp/x/", "file_io_locking": {"mode": "non_atomic"}},
              "cache_pool": "cache_pool#ocdbt", "target_data_file_size": 1000, "path": "a/b"},
             {"driver": "memory"}, {"driver": "file", "path": "/tmp/x/", "file_io_sync": False}]
    for d in specs:
        spec = ts.KvStore.Spec(d)
        assert spec.to_json() == d
        assert ts.KvStore.Spec(spec.to_json(include_defaults=True)) == spec
    path = ts.KvStore.Spec({"driver": "file", "path": "/tmp/one/path/"}).to_json()["path"]
    references = sys.getrefcount(path)  # this name's and the call's (tensorstore's own: one more, never dropped)
    assert references == 2
