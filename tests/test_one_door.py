"""One path for Python and the command line, and the defaults a new user meets:
``jaxpo.train`` and ``jaxpo train`` write the same run directory; every run keeps its
trained state, so ``eval`` and ``render`` work straight after; run names need no
quoting; bad input gets one clear line.

Modules under test: ``jaxpo.experiments.train``, ``jaxpo.experiments.sweeps`` and ``jaxpo.cli``."""

import json
import os
import re
import shutil

import numpy as np
import pytest

import jaxpo
from jaxpo import cli
from jaxpo.run import checkpoint

ENV = ["--env", "public_goods", "--num-envs", "8", "--num-steps", "16", "--updates-per-chunk", "2"]
UPDATES = 4  # of 128 env steps each
FILES = ("config.yaml", "metrics.csv", "summary.csv", "groups.csv", "learning_curve.png")


def python_train(out_dir, **kwargs):
    config = jaxpo.Config(env="public_goods", num_envs=8, num_steps=16, updates_per_chunk=2)
    support = jaxpo.support.khop(config.make_env().coupling, 1)  # the default experiment's support
    hyper, seeds, labels = jaxpo.runs(support, seeds=[0, 1])
    return jaxpo.train(config, hyper, seeds, num_updates=UPDATES, labels=labels, out_dir=str(out_dir),
                       progress=False, **kwargs)


def metas(run_dir):
    return [checkpoint.read_meta(run_dir, step) for step in checkpoint.steps(run_dir)]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The same experiment trained through the CLI and through ``jaxpo.train``, each
    written to ``<tmp>/run`` (the directory's path is part of config.yaml) and the CLI's
    moved aside: ``(cli dir, python dir, python result)``."""
    root = tmp_path_factory.mktemp("door")
    flags = ["train", *ENV, "--seeds", "2", "--steps", str(UPDATES * 128), "--no-progress", "--out", str(root),
             "--name", "run"]
    assert cli.main(flags) == 0
    shutil.move(root / "run", root / "cli")
    result = python_train(root / "run")
    return str(root / "cli"), str(root / "run"), result


def test_python_and_the_cli_write_the_same_files_and_checkpoints(both):
    cli_dir, py_dir, result = both
    for name in FILES:
        with open(os.path.join(cli_dir, name), "rb") as a, open(os.path.join(py_dir, name), "rb") as b:
            assert a.read() == b.read(), name
    # jaxpo.train also keeps the rows it was given: its run table, hyper.npz
    assert sorted(os.listdir(cli_dir)) == sorted(set(os.listdir(py_dir)) - {"hyper.npz"})
    saved = np.load(os.path.join(py_dir, "hyper.npz"))
    assert saved["labels"].tolist() == result.labels and saved["seeds"].tolist() == [0, 1]
    np.testing.assert_array_equal(saved["lr"], np.asarray(result.hyper.lr))
    assert metas(cli_dir) == metas(py_dir)  # the same metadata: experiment, runs, traced digests
    assert "hyper" in metas(py_dir)[-1]["sections"]  # every section describes the runs


def test_either_door_resumes_the_others_directory(both, tmp_path):
    cli_dir, py_dir, result = both
    cli_copy, py_copy = (shutil.copytree(d, tmp_path / name) for d, name in ((cli_dir, "cli"), (py_dir, "py")))
    assert cli.main(["train", "--resume", str(py_copy), "--steps", str(UPDATES * 128 * 2), "--no-progress"]) == 0
    longer = jaxpo.resume(str(cli_copy), run={"steps": UPDATES * 128 * 2, "progress": False})
    assert jaxpo.load_policy(str(py_copy)).update == longer.programs[0].num_updates == 2 * UPDATES
    np.testing.assert_array_equal(result.metrics["return"], longer.programs[0].metrics["return"][:, :UPDATES])
    assert open(cli_copy / "metrics.csv").read() == open(py_copy / "metrics.csv").read()


def test_a_default_run_keeps_its_policy_and_eval_and_render_work(both, tmp_path, capsys):
    cli_dir, _, _ = both
    assert checkpoint.steps(cli_dir), "the default run saved no checkpoint"
    capsys.readouterr()
    assert cli.main(["eval", cli_dir, "--episodes", "2"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["run_id"] for r in rows] == [0, 1] and all(r["update"] == UPDATES for r in rows)
    gif = str(tmp_path / "episode.gif")
    assert cli.main(["render", cli_dir, "--out", gif]) == 0
    assert os.path.getsize(gif) > 0


def test_no_checkpoint_opts_out(tmp_path, capsys):
    flags = ["train", *ENV, "--steps", "256", "--no-progress", "--out", str(tmp_path), "--name", "bare"]
    assert cli.main([*flags, "--no-checkpoint"]) == 0
    assert not os.path.exists(tmp_path / "bare" / "checkpoints")
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "bare")]) == 2
    err = capsys.readouterr().err
    assert "holds no complete checkpoint" in err and "--no-checkpoint" in err, err
    assert cli.main([*flags, "--no-checkpoint", "--checkpoint-every", "2"]) == 2
    assert "--checkpoint-every=2 asks for periodic checkpoints, but --checkpoint is off" in capsys.readouterr().err
    python = jaxpo.Config(env="public_goods", num_envs=8, num_steps=16, updates_per_chunk=2)
    hyper, seeds, _ = jaxpo.runs(jaxpo.support.ippo(8), seeds=[0])
    jaxpo.train(python, hyper, seeds, num_updates=2, out_dir=str(tmp_path / "py"), progress=False, checkpoint=False)
    assert os.path.exists(tmp_path / "py" / "metrics.csv") and not os.path.exists(tmp_path / "py" / "checkpoints")
    with pytest.raises(ValueError, match=r"^checkpoint_every must be >= 0"):  # named as train's argument
        jaxpo.train(python, hyper, seeds, num_updates=2, out_dir=str(tmp_path / "py2"), checkpoint_every=-1)


def test_a_directory_holding_checkpoints_is_resumed_never_trained_over(both, tmp_path, capsys):
    cli_dir, _, result = both
    copy = shutil.copytree(cli_dir, tmp_path / "run")
    before = {step: checkpoint.read_meta(str(copy), step) for step in checkpoint.steps(str(copy))}
    with pytest.raises(ValueError, match="already holds the checkpoints of a run: resume it"):
        python_train(copy)
    flags = ["train", *ENV, "--seeds", "2", "--steps", str(UPDATES * 128), "--no-progress", "--out", str(tmp_path),
             "--name", "run"]
    assert cli.main(flags) == 2
    assert "already holds the checkpoints of a run: resume it" in capsys.readouterr().err
    assert {step: checkpoint.read_meta(str(copy), step) for step in checkpoint.steps(str(copy))} == before
    assert open(copy / "metrics.csv").read() == open(os.path.join(cli_dir, "metrics.csv")).read()  # untouched


def test_rows_no_experiment_describes_are_kept_in_hyper_npz(tmp_path):
    config = jaxpo.Config(env="public_goods", num_envs=8, num_steps=16, updates_per_chunk=2)
    hyper, seeds, labels = jaxpo.runs([jaxpo.support.ippo(8), jaxpo.support.mappo(8)], seeds=[3, 4], lr=1e-3)
    run_dir = tmp_path / "mixed"
    jaxpo.train(config, hyper, seeds, num_updates=2, labels=labels, out_dir=str(run_dir), progress=False)
    saved = np.load(run_dir / "hyper.npz")
    assert saved["labels"].tolist() == labels and saved["seeds"].tolist() == [3, 4, 3, 4]
    np.testing.assert_array_equal(saved["S_A"], np.asarray(hyper.S_A))
    np.testing.assert_array_equal(saved["lr"], np.asarray(hyper.lr))
    text = open(run_dir / "config.yaml").read()
    assert "\nhyper:" not in text and "\nsupport:" not in text and "hyper.npz" in text
    loaded = jaxpo.load_yaml(str(run_dir / "config.yaml"))  # the sections it holds load back
    assert loaded.config == config and loaded.run.seeds == 4
    assert metas(str(run_dir))[-1]["sections"] == ["config", "run"]
    with pytest.raises(ValueError, match="resume them by calling jaxpo.train with the same arguments"):
        jaxpo.resume(str(run_dir))


def test_metrics_read_back_from_the_run_directory_equal_those_kept_in_memory(both):
    _, _, result = both  # its metrics are read from metrics.csv
    config = jaxpo.Config(env="public_goods", num_envs=8, num_steps=16, updates_per_chunk=2)
    hyper, seeds, labels = jaxpo.runs(jaxpo.support.khop(config.make_env().coupling, 1), seeds=[0, 1])
    kept = jaxpo.train(config, hyper, seeds, num_updates=UPDATES, labels=labels, progress=False)  # no files
    assert kept.metrics.keys() == result.metrics.keys()
    for name, values in kept.metrics.items():
        np.testing.assert_array_equal(values, result.metrics[name], err_msg=name)
        assert values.dtype == result.metrics[name].dtype == np.float64


def _write_meta_as_before_sections(run_dir, described):
    """Rewrites every checkpoint's meta as checkpoints wrote it before ``sections``: a ``described`` flag."""
    for step in checkpoint.steps(str(run_dir)):
        path = os.path.join(checkpoint.checkpoint_dir(str(run_dir)), str(step), "meta", "metadata")
        with open(path) as f:
            meta = json.load(f)
        del meta["sections"]
        meta["described"] = described
        with open(path, "w") as f:
            json.dump(meta, f)


def test_checkpoints_that_say_described_still_resume(both, tmp_path):
    _, py_dir, result = both
    old = shutil.copytree(py_dir, tmp_path / "old")
    _write_meta_as_before_sections(old, True)
    longer = jaxpo.resume(str(old), run={"steps": UPDATES * 128 * 2, "progress": False})
    np.testing.assert_array_equal(result.metrics["return"], longer.programs[0].metrics["return"][:, :UPDATES])
    refused = shutil.copytree(py_dir, tmp_path / "refused")
    _write_meta_as_before_sections(refused, False)
    with pytest.raises(ValueError, match="resume them by calling jaxpo.train with the same arguments"):
        jaxpo.resume(str(refused))


def test_default_run_names_need_no_quoting(tmp_path, capsys):
    assert cli.main(["train", *ENV, "--steps", "256", "--no-progress", "--no-checkpoint", "--out", str(tmp_path)]) == 0
    (name,) = os.listdir(tmp_path)
    assert re.fullmatch(r"public_goods-khop_k1-\d{8}-\d{6}", name), name


@pytest.mark.parametrize("flags, message", [
    (["--env", "public_goods", "--env-arg", "bogus=3"],
     "unknown parameter bogus for env 'public_goods'; its parameters: num_agents, graph, radius"),
    (["--env", "traffic_grid", "--env-arg", "lanes=2", "--env-arg", "speed=1"],
     "unknown parameters lanes, speed for env 'traffic_grid'; its parameters: rows, cols"),
    (["--env", "MPE_simple_spread_v3", "--env-arg", "bogus=3"], "unknown ['bogus']"),
    (["--num-envs", "8", "--num-steps", "16", "--num-minibatches", "3"], "--num-minibatches (3) must divide"),
])
def test_bad_train_input_is_one_line_that_names_the_flag(flags, message, capsys):
    assert cli.main(["train", *flags, "--no-progress", "--steps", "256"]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "sweep" not in err


def test_every_own_environment_rejects_unknown_parameters():
    for name in sorted(jaxpo.envs.REGISTRY):
        with pytest.raises(ValueError, match=rf"unknown parameter bogus for env '{name}'; its parameters: "):
            jaxpo.envs.make(name, bogus=1)


def test_a_users_environment_is_a_registered_class_or_an_import_path(monkeypatch):
    from jaxpo.envs.memory import MemoryCue

    monkeypatch.setitem(jaxpo.envs.REGISTRY, "my_cue", MemoryCue)
    assert jaxpo.envs.make("my_cue", delay=5).max_steps == 6
    assert jaxpo.envs.make("jaxpo.envs.memory:MemoryCue", delay=2).max_steps == 3
    with pytest.raises(ValueError, match=r"unknown parameter bogus for env 'jaxpo.envs.memory:MemoryCue'"):
        jaxpo.envs.make("jaxpo.envs.memory:MemoryCue", bogus=1)
    with pytest.raises(ValueError, match=r"cannot import 'X' from module 'no_such_module'.*installed or on PYTHONPATH"):
        jaxpo.envs.make("no_such_module:X")
    with pytest.raises(ValueError, match=r"env 'numpy:ndarray' must name a subclass of jaxpo.envs.Env"):
        jaxpo.envs.make("numpy:ndarray")
    monkeypatch.setitem(jaxpo.envs.REGISTRY, "not_an_env", dict)
    with pytest.raises(ValueError, match=r"env 'not_an_env' must name a subclass of jaxpo.envs.Env"):
        jaxpo.envs.make("not_an_env")
