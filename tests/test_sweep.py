"""Sweeps: one compiled program per static config, groups of runs, outputs, bad input,
and a sweep killed mid-way."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

import jaxpo
from jaxpo import Experiment, Hyper, load_yaml
from jaxpo.run.report import read_csv
from jaxpo.experiments.settings import parse_axis, settings
from jaxpo.experiments.sweeps import plan

# A small program of its own (no other test compiles it): 4 agents on a ring, episodes of
# 10 steps, so every update of 4 envs × 10 steps ends 4 episodes.
BASE = Experiment().replace(
    config={"env": "public_goods", "env_kwargs": {"num_agents": 4, "max_steps": 10}, "num_envs": 4, "num_steps": 10,
            "updates_per_chunk": 2, "num_epochs": 1, "num_minibatches": 2, "hidden": [8]},
    run={"steps": 160, "progress": False, "bootstrap_reps": 500},  # 4 updates of 40 env steps: 2 chunks
)
UPDATES = 4


@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory):
    """lr × κ × 4 seeds = 36 runs in groups of 16 (the last padded from 4 to 16)."""
    out = tmp_path_factory.mktemp("sweeps")
    tr = jaxpo.trainer(settings(BASE)[0].config)
    before = dict(tr.compiles)
    result = jaxpo.sweep(BASE, run={"seeds": 4, "out": str(out), "name": "grid", "runs_per_group": 16},
                         sweep={"grid": {"lr": [1e-3, 3e-3, 1e-2], "kappa": [0, 1, 2]}})
    return result, tr, {k: tr.compiles[k] - before[k] for k in before}


def test_a_3x3x4_sweep_compiles_the_chunk_once(grid_sweep):
    result, tr, compiles = grid_sweep
    assert len(result.runs) == 36 and len(result.programs) == 1
    program = result.programs[0]
    assert program.group_size == 16 and program.compiles == 1
    assert compiles == {"init": 1, "chunk": 1}  # traces = compiled signatures
    assert tr.chunk_runs._cache_size() == 1  # and jit's own cache agrees


def test_sweep_outputs(grid_sweep):
    result, _, _ = grid_sweep
    out = result.out_dir
    assert sorted(os.listdir(out)) == ["checkpoints", "groups.csv", "metrics.csv", "summary.csv", "sweep.png", "sweep.yaml"]
    metrics = read_csv(f"{out}/metrics.csv")
    assert len(metrics["run_id"]) == 36 * UPDATES
    for name in ("label", "setting", "seed", "lr", "kappa", "update", "env_steps", "return", "policy_loss"):
        assert name in metrics, name
    for run in result.runs:  # every run once per update, none of the padding
        rows = metrics["run_id"] == run.run_id
        np.testing.assert_array_equal(metrics["update"][rows], np.arange(1, UPDATES + 1))
        assert {metrics["label"][i] for i in np.flatnonzero(rows)} == {run.label}
        assert set(metrics["kappa"][rows]) == {run.values["kappa"]} and set(metrics["seed"][rows]) == {run.seed}
    np.testing.assert_array_equal(np.unique(metrics["env_steps"]), 40 * np.arange(1, UPDATES + 1))

    summary = read_csv(f"{out}/summary.csv")
    assert len(summary["run_id"]) == 36
    assert np.all(summary["best_return"] >= summary["final_return"])
    np.testing.assert_allclose(summary["final_return"], np.concatenate([
        result.programs[0].metrics["return"][:, -1]]), rtol=1e-6)  # 10% of 4 updates: the last one

    groups = read_csv(f"{out}/groups.csv")
    assert len(groups["setting"]) == 9 and set(groups["metric"]) == {"final_return"}
    assert np.all(groups["runs"] == 4)
    assert np.all(groups["mean_ci_low"] <= groups["mean"]) and np.all(groups["mean"] <= groups["mean_ci_high"])
    assert np.all(groups["iqm_ci_low"] <= groups["iqm"]) and np.all(groups["iqm"] <= groups["iqm_ci_high"])
    for i, setting in enumerate(groups["setting"]):
        scores = summary["final_return"][np.array(summary["setting"]) == setting]
        np.testing.assert_allclose(groups["mean"][i], scores.mean(), rtol=1e-6)
        np.testing.assert_allclose(groups["iqm"][i], np.sort(scores)[1:3].mean(), rtol=1e-6)  # IQM of 4 values

    with open(f"{out}/sweep.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert load_yaml(f"{out}/sweep.yaml") == result.experiment  # the resolved sweep file
    assert result.experiment.sweep.grid == {"lr": [1e-3, 3e-3, 1e-2], "kappa": [0, 1, 2]}


def test_each_run_trains_what_its_setting_says(grid_sweep):
    """The last group (4 runs padded to 16 by repeating the last) against the same 16 rows
    built by hand and trained by ``jaxpo.train`` (the same compiled program): seeds, lr
    and κ reach the program and padding never shows in the outputs — bitwise."""
    result, tr, _ = grid_sweep
    runs = result.runs[-4:]
    assert {r.setting for r in runs} == {"lr=0.01,kappa=2"} and [r.seed for r in runs] == [0, 1, 2, 3]
    env = BASE.config.make_env()
    hyper = Hyper.create(jaxpo.support.khop(env.coupling, 2), lr=1e-2)
    seeds = [0, 1, 2, 3] + [3] * 12
    direct = jaxpo.train(BASE.config, hyper, seeds, num_updates=UPDATES, progress=False)
    assert tr.compiles["chunk"] == 1  # no new program
    swept = result.programs[0].metrics
    for name, values in swept.items():
        np.testing.assert_array_equal(values[-4:], direct.metrics[name][:4], err_msg=name)
    # and κ matters: κ = 0 runs of the same seeds and lr differ
    kappa0 = [i for i, r in enumerate(result.runs) if r.setting == "lr=0.01,kappa=0"]
    assert not np.allclose(swept["policy_loss"][kappa0], direct.metrics["policy_loss"][:4])


def test_a_static_axis_runs_one_program_per_value_into_the_same_files(grid_sweep, tmp_path):
    # 2 draws × 8 seeds = 16 runs per program: the num_envs=4 program is the grid sweep's
    # (same config, same group size), so only num_envs=2 compiles.
    _, tr, _ = grid_sweep
    result = jaxpo.sweep(BASE, run={"seeds": 8, "out": str(tmp_path), "name": "static", "runs_per_group": 16},
                         sweep={"grid": {"num_envs": [2, 4]}, "random": {"lr": {"loguniform": [1e-3, 1e-2]}},
                                "samples": 2})
    assert [p.config.num_envs for p in result.programs] == [2, 4]
    assert [p.compiles for p in result.programs] == [1, 0] and tr.compiles["chunk"] == 1
    metrics = read_csv(f"{tmp_path}/static/metrics.csv")
    steps = {n: set(metrics["env_steps"][metrics["num_envs"] == n]) for n in (2, 4)}
    assert max(steps[2]) == max(steps[4]) == 160  # the same env-step budget per run
    assert len(metrics["run_id"]) == 16 * (8 + 4)  # E=2: 8 updates of 20 steps; E=4: 4 of 40
    lrs = sorted(set(metrics["lr"]))
    assert len(lrs) == 2 and all(1e-3 <= lr <= 1e-2 for lr in lrs)
    assert len(read_csv(f"{tmp_path}/static/groups.csv")["setting"]) == 4


def test_random_axes_are_reproducible_and_follow_their_distribution():
    sweep = {"random": {"lr": {"loguniform": [1e-4, 1e-1]}, "gamma": {"uniform": [0.9, 0.99]},
                        "preset": {"choice": ["ippo", "mappo"]}}, "samples": 400, "sample_seed": 3}
    first, again = settings(BASE.replace(sweep=sweep)), settings(BASE.replace(sweep=sweep))
    assert [s.values for s in first] == [s.values for s in again] and len(first) == 400
    lr = np.array([s.values["lr"] for s in first])
    gamma = np.array([s.values["gamma"] for s in first])
    assert 1e-4 <= lr.min() and lr.max() <= 1e-1 and 0.9 <= gamma.min() and gamma.max() <= 0.99
    assert abs(np.mean(np.log10(lr)) - (-2.5)) < 0.15  # log-uniform: mean exponent halfway
    assert abs(np.mean(lr < 1e-2) - 2 / 3) < 0.1
    assert {s.values["preset"] for s in first} == {"ippo", "mappo"}
    other = settings(BASE.replace(sweep={**sweep, "sample_seed": 4}))
    assert [s.values for s in other] != [s.values for s in first]


def test_grid_order_labels_and_supports():
    points = settings(BASE.replace(sweep={"grid": {"lr": [1e-3, 3e-3], "kappa": [0, 1]}}))
    assert [s.label for s in points] == ["lr=0.001,kappa=0", "lr=0.001,kappa=1", "lr=0.003,kappa=0", "lr=0.003,kappa=1"]
    np.testing.assert_array_equal(points[0].hyper.S_A, np.eye(4))
    assert float(points[3].hyper.lr) == pytest.approx(3e-3) and points[3].support.name == "khop(k=1)"
    assert settings(BASE)[0].label == "khop(k=1)"  # no axes: the support's name


def test_custom_supports_from_files(tmp_path):
    np.savez(tmp_path / "ring.npz", S_A=np.ones((4, 4)), S_R=np.eye(4))
    (tmp_path / "own.yaml").write_text(yaml.safe_dump({"S_A": np.eye(4).tolist(), "S_R": np.eye(4).tolist()}))
    points = settings(BASE.replace(support={"preset": "custom"},
                                   sweep={"grid": {"matrices": [str(tmp_path / "ring.npz"), str(tmp_path / "own.yaml")]}}))
    assert [p.support.name for p in points] == ["custom(ring)", "custom(own)"]
    np.testing.assert_array_equal(points[0].hyper.S_A, np.ones((4, 4)))


def test_parse_axis():
    assert parse_axis("lr=1e-4,3e-4") == ("grid", "lr", ["1e-4", "3e-4"])
    assert parse_axis("hidden=(8,8),(16,)") == ("grid", "hidden", ["(8,8)", "(16,)"])
    assert parse_axis("lr=loguniform(1e-4, 1e-2)") == ("random", "lr", {"loguniform": ["1e-4", "1e-2"]})
    assert parse_axis("preset=choice(ippo,mappo)") == ("random", "preset", {"choice": ["ippo", "mappo"]})


@pytest.mark.parametrize(
    "sweep, message",
    [
        ({"grid": {"learning_rate": [1e-3]}}, "'learning_rate' is not a sweepable name; sweepable: lr, clip_eps"),
        ({"grid": {"steps": [1, 2]}}, "'steps' is a run setting"),
        ({"grid": {"lr": []}}, "sweep.grid.lr must be a non-empty list"),
        ({"grid": {"lr": ["fast", 1e-3]}}, r"sweep.grid.lr\[0\] must be a number, got 'fast'"),
        ({"grid": {"lr": [1e-3, -1.0]}}, r"sweep.grid.lr\[1\] must be > 0, got -1"),
        ({"grid": {"gamma": [1.5]}}, r"sweep.grid.gamma\[0\] must be in \[0, 1\]"),
        ({"grid": {"kappa": [0, 1.5]}}, r"sweep.grid.kappa\[1\] must be an integer"),
        ({"random": {"lr": {"loguniform": [0, 1e-2]}}, "samples": 2}, "loguniform bounds must be > 0"),
        ({"random": {"lr": {"loguniform": [-1e-3, 1e-2]}}, "samples": 2}, "loguniform bounds must be > 0"),
        ({"random": {"lr": {"uniform": [1e-2, 1e-3]}}, "samples": 2}, "needs low < high"),
        ({"random": {"lr": {"uniform": ["a", 1]}}, "samples": 2}, "must be \\[low, high\\], two numbers"),
        ({"random": {"lr": {"normal": [0, 1]}}, "samples": 2}, "must be one of {loguniform"),
        ({"random": {"lr": {"loguniform": [1e-4, 1e-2]}}}, "sweep.samples is 0"),
        ({"samples": 3}, "sweep.samples is set but the sweep has no random axes"),
        ({"random": {"num_envs": {"uniform": [1, 8]}}, "samples": 2}, "use choice for 'num_envs'"),
        ({"grid": {"lr": [1e-3]}, "random": {"lr": {"uniform": [1e-3, 1e-2]}}, "samples": 2}, "both a grid and a random"),
        ({"grid": {"num_minibatches": [3]}}, "setting num_minibatches=3: Config.num_minibatches .3. must divide"),
        ({"grid": {"preset": ["ippo"], "kappa": [0, 1]}}, "the kappa axis needs support.preset khop"),
        ({"grid": {"preset": ["vdn"]}}, r"sweep.grid.preset\[0\] must be one of ippo, mappo"),
    ],
)
def test_bad_sweeps_are_refused_before_anything_compiles(tmp_path, sweep, message):
    with pytest.raises(ValueError, match=message):
        plan(BASE, run={"out": str(tmp_path), "name": "bad"}, sweep=sweep)
    assert not (tmp_path / "bad" / "metrics.csv").exists()


def test_a_custom_support_of_the_wrong_size_is_refused(tmp_path):
    np.savez(tmp_path / "small.npz", S_A=np.eye(3), S_R=np.eye(3))
    with pytest.raises(ValueError, match="is for N = 3 agents but the environment has 4 agents"):
        plan(BASE, run={"out": str(tmp_path)}, support={"preset": "custom", "matrices": str(tmp_path / "small.npz")})
    with pytest.raises(ValueError, match="support.matrices: no such file"):
        plan(BASE, run={"out": str(tmp_path)}, support={"preset": "custom", "matrices": str(tmp_path / "none.npz")})
    (tmp_path / "half.yaml").write_text("S_A: [[1]]\n")
    with pytest.raises(ValueError, match="must hold S_A and S_R"):
        plan(BASE, run={"out": str(tmp_path)}, support={"preset": "custom", "matrices": str(tmp_path / "half.yaml")})


def test_array_env_arguments_work(tmp_path):
    """An adjacency matrix as an env argument is hashed by value (part of the program key)."""
    ring = np.roll(np.eye(4), 1, 1) + np.roll(np.eye(4), -1, 1)
    ready = plan(BASE, run={"out": str(tmp_path)}, config={"env_kwargs": {"graph": ring, "num_agents": 4, "max_steps": 10}},
                 sweep={"grid": {"lr": [1e-3, 2e-3]}})
    assert len(ready.programs) == 1 and len(ready.programs[0].runs) == 2
    np.testing.assert_array_equal(ready.programs[0].config.make_env().adjacency, ring)


def test_a_killed_sweep_leaves_valid_csvs(tmp_path):
    """SIGKILL in the middle: metrics.csv holds whole chunks only, each run's updates in order."""
    config = tmp_path / "long.yaml"
    config.write_text(jaxpo.dump_yaml(BASE.replace(run={"steps": 40 * 400, "seeds": 2, "out": str(tmp_path),
                                                        "name": "killed"},
                                                   sweep={"grid": {"lr": [1e-3, 3e-3]}})))
    proc = subprocess.Popen([sys.executable, "-m", "jaxpo.cli", "sweep", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = tmp_path / "killed" / "metrics.csv"
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            if path.exists() and path.read_text().count("\n") > 1 + 4 * 2 * 3:  # more than 3 chunks
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the sweep ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    metrics = read_csv(str(path))
    assert 0 < len(metrics["run_id"]) < 4 * 400
    for run_id in range(4):
        updates = metrics["update"][metrics["run_id"] == run_id]
        assert len(updates) % 2 == 0  # whole chunks of K = 2 updates
        np.testing.assert_array_equal(updates, np.arange(1, len(updates) + 1))
    assert np.all(np.isfinite(metrics["policy_loss"]))


def test_the_interquartile_mean_is_rliables_bit_for_bit():
    """The bootstrap's statistic is jaxpo's own IQM (SciPy's dispatch made rliable's cost
    ~0.2 ms a call): equal to rliable's ``aggregate_iqm`` exactly, at every size (the cut
    rounds down), with ties, and on rliable's ``[runs, tasks]`` shape."""
    from rliable import metrics as rmetrics

    from jaxpo.run.report import interquartile_mean

    rng = np.random.default_rng(0)
    for n in range(1, 41):
        for x in (rng.normal(size=n) * 1e3, rng.integers(0, 3, size=n).astype(float), rng.normal(size=(n, 3))):
            assert interquartile_mean(x) == rmetrics.aggregate_iqm(x), (n, x)


def test_single_run_statistics_skip_the_bootstrap_and_equal_rliable():
    """One run per setting: every bootstrap resample is that run, so the statistics are
    computed without rliable's 2000 resamples (seconds at the end of every single-seed
    train) and equal what rliable gives."""
    from rliable import library as rly
    from rliable import metrics as rmetrics

    from jaxpo.run.report import group_statistics

    scores = {"a": np.array([1.5]), "b": np.array([np.nan, -2.0]), "none": np.array([np.nan])}
    fast = group_statistics(scores)
    both = lambda x: np.array([rmetrics.aggregate_mean(x), rmetrics.aggregate_iqm(x)])
    points, intervals = rly.get_interval_estimates({"a": np.array([[1.5]]), "b": np.array([[-2.0]])}, both, reps=50)
    for setting in ("a", "b"):
        (mean, iqm), ((mean_lo, iqm_lo), (mean_hi, iqm_hi)) = points[setting], intervals[setting]
        assert fast[setting] == dict(runs=1, mean=mean, mean_ci_low=mean_lo, mean_ci_high=mean_hi, iqm=iqm,
                                     iqm_ci_low=iqm_lo, iqm_ci_high=iqm_hi)
    assert fast["none"]["runs"] == 0 and np.isnan(fast["none"]["mean"])
    two = group_statistics({"a": np.array([1.0, 3.0])})["a"]  # more than one run: bootstrapped intervals
    assert two["mean"] == 2.0 and 1.0 <= two["mean_ci_low"] < two["mean_ci_high"] <= 3.0
