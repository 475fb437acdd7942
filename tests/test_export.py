"""marl-eval export: synthetic run and sweep directories (CSV rows + a minimal experiment
file) become marl-eval's nested JSON, exactly; and marl-eval's own pipeline, rliable
matrices and aggregate plots read that JSON and report what numpy computes from the rows.

marl-eval (``id-marl-eval``) is imported unconditionally: a missing package fails."""

import csv
import json
import os

import matplotlib

matplotlib.use("Agg")  # marl-eval's plots draw with pyplot

import matplotlib.pyplot as plt
import numpy as np
import pytest
import scipy.stats
import yaml
from marl_eval.plotting_tools import plotting
from marl_eval.utils.data_processing_utils import create_matrices_for_rliable, data_process_pipeline
from marl_eval.utils.diagnose_data_errors import DiagnoseData

from jaxpo.run.export import (ABSOLUTE_COLUMNS, EPISODE_COLUMNS, METRICS_TO_NORMALIZE, env_and_task,
                              experiment_names, marl_eval_results, merge, write_marl_eval)


def write_dir(path, experiment, episodes, absolute=None, file="config.yaml"):
    """A directory as jaxpo writes it: ``experiment`` (YAML data), ``eval_episodes.csv``
    rows and, when given, ``absolute.csv`` rows (dicts by column; ``label`` filled in)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, file), "w") as f:
        yaml.safe_dump(experiment, f)
    for name, columns, rows in (("eval_episodes.csv", EPISODE_COLUMNS, episodes),
                                ("absolute.csv", ABSOLUTE_COLUMNS, absolute)):
        if rows is not None:
            with open(os.path.join(path, name), "w", newline="") as f:
                writer = csv.DictWriter(f, columns, lineterminator="\n")
                writer.writeheader()
                writer.writerows({"label": f"{r['setting']}/seed{r['seed']}", **r} for r in rows)
    return str(path)


def episode_rows(run_id, setting, seed, evals, won=True):
    """``evals``: per evaluation ``(update, env_steps, elapsed_s, [(return, length, won)…])``."""
    return [dict(run_id=run_id, setting=setting, seed=seed, update=u, env_steps=s, elapsed_s=t, episode=e,
                 **{"return": r, "length": n, "won": w if won else ""})
            for u, s, t, eps in evals for e, (r, n, w) in enumerate(eps)]


def absolute_rows(run_id, setting, seed, best, eps, won=True):
    return [dict(run_id=run_id, setting=setting, seed=seed, best_update=best, episode=e,
                 **{"return": r, "length": n, "won": w if won else ""}) for e, (r, n, w) in enumerate(eps)]


SMAX = {"config": {"env": "HeuristicEnemySMAX", "env_kwargs": {"scenario": "2s3z"}}, "support": {"preset": "mappo"}}


def test_a_run_directory_is_exactly_marl_evals_nested_dict(tmp_path):
    # Rows out of order on purpose: steps follow updates, lists follow episodes.
    episodes = [*episode_rows(1, "mappo", 1, [(20, 2560, 9.5, [(0.5, 30, 0), (1.5, 28, 1)])]),
                *episode_rows(0, "mappo", 0, [(20, 2560, 9.0, [(2.0, 40, 1), (1.0, 41, 0)]),
                                              (10, 1280, 4.0, [(0.0, 50, 0), (0.5, 45, 0)])]),
                *episode_rows(1, "mappo", 1, [(10, 1280, 4.5, [(-1.0, 50, 0), (0.25, 47, 0)])])]
    episodes[-1], episodes[-2] = episodes[-2], episodes[-1]
    absolute = [*absolute_rows(0, "mappo", 0, 20, [(2.5, 33, 1), (1.5, 35, 1), (0.5, 60, 0)]),
                *absolute_rows(1, "mappo", 1, 20, [(1.0, 31, 1), (0.0, 60, 0), (2.0, 29, 1)])]
    directory = write_dir(tmp_path / "run", SMAX, episodes, absolute)

    assert marl_eval_results(directory) == {"SMAX": {"2s3z": {"mappo": {
        "seed_0": {
            "step_0": {"step_count": 1280, "elapsed_time": 4.0, "return": [0.0, 0.5], "episode_length": [50, 45],
                       "win_rate": [0.0, 0.0]},
            "step_1": {"step_count": 2560, "elapsed_time": 9.0, "return": [2.0, 1.0], "episode_length": [40, 41],
                       "win_rate": [1.0, 0.0]},
            "absolute_metrics": {"return": [2.5, 1.5, 0.5], "episode_length": [33, 35, 60],
                                 "win_rate": [1.0, 1.0, 0.0]}},
        "seed_1": {
            "step_0": {"step_count": 1280, "elapsed_time": 4.5, "return": [-1.0, 0.25], "episode_length": [50, 47],
                       "win_rate": [0.0, 0.0]},
            "step_1": {"step_count": 2560, "elapsed_time": 9.5, "return": [0.5, 1.5], "episode_length": [30, 28],
                       "win_rate": [0.0, 1.0]},
            "absolute_metrics": {"return": [1.0, 0.0, 2.0], "episode_length": [31, 60, 29],
                                 "win_rate": [1.0, 0.0, 1.0]}},
    }}}}
    # marl-eval finds the absolute metric by a key containing "absolute" beside the steps
    seed = marl_eval_results(directory)["SMAX"]["2s3z"]["mappo"]["seed_0"]
    assert list(seed) == ["step_0", "step_1", "absolute_metrics"]
    # names given explicitly need no experiment file; without absolute.csv: steps only
    os.remove(os.path.join(directory, "config.yaml"))
    os.remove(os.path.join(directory, "absolute.csv"))
    out = marl_eval_results(directory, env_name="smax", task_name="2s3z", algorithm="MAPPO")
    assert list(out["smax"]["2s3z"]["MAPPO"]["seed_1"]) == ["step_0", "step_1"]


def test_names_of_environments_and_algorithms():
    assert env_and_task("HeuristicEnemySMAX", {"scenario": "3m"}) == ("SMAX", "3m")
    assert env_and_task("HeuristicEnemySMAX") == ("SMAX", "HeuristicEnemySMAX")
    assert env_and_task("MPE_simple_spread_v3") == ("MPE", "simple_spread")
    assert env_and_task("MPE_simple_speaker_listener_v4", {}) == ("MPE", "simple_speaker_listener")
    assert env_and_task("public_goods", {"num_agents": 8}) == ("public_goods", "public_goods")


@pytest.mark.parametrize("experiment, algorithm", [
    ({"support": {"preset": "ippo"}}, "ippo"),
    ({"support": {"preset": "khop", "kappa": 2}}, "khop(k=2)"),
    ({"support": {"preset": "custom", "matrices": "m/ring.npz"}}, "custom(ring)"),
    ({"config": {"scheme": "sequential"}, "support": {"preset": "mappo"}}, "happo"),  # jaxpo's happo.yaml
    ({"config": {"scheme": "sequential"}, "support": {"preset": "ippo"}}, "happo(ippo)"),
    ({}, None),  # jaxpo.train's config.yaml: no support section
])
def test_the_algorithm_comes_from_the_support_section(tmp_path, experiment, algorithm):
    experiment = {**experiment, "config": {"env": "public_goods", **experiment.get("config", {})}}
    write_dir(tmp_path, experiment, episode_rows(0, "x", 0, [(1, 8, 1.0, [(1.0, 5, 0)])], won=False))
    assert experiment_names(str(tmp_path)).algorithm == algorithm


MPE = {"config": {"env": "MPE_simple_spread_v3"}, "support": {"preset": "ippo"}}


def sweep_dir(path, settings, experiment=MPE, seeds=(0, 1)):
    """A sweep (no win condition): per setting and seed two evaluations of two episodes."""
    episodes, absolute, run_id = [], [], 0
    for setting in settings:
        for seed in seeds:
            episodes += episode_rows(run_id, setting, seed, [(5, 100, 1.0, [(-3.0, 25, 0), (-2.0, 25, 0)]),
                                                             (10, 200, 2.0, [(-1.0, 25, 0), (-1.5, 25, 0)])],
                                     won=False)
            absolute += absolute_rows(run_id, setting, seed, 10, [(-1.0, 25, 0)], won=False)
            run_id += 1
    return write_dir(path, experiment, episodes, absolute, file="sweep.yaml")


def test_each_setting_of_a_sweep_is_an_algorithm(tmp_path):
    settings = ["lr=0.001,ent_coef=0", "lr=0.003,ent_coef=0"]
    out = marl_eval_results(sweep_dir(tmp_path / "a", settings, {**MPE, "sweep": {"grid": {"lr": [1e-3, 3e-3]}}}))
    algorithms = out["MPE"]["simple_spread"]
    assert list(algorithms) == ["ippo/lr=0.001;ent_coef=0", "ippo/lr=0.003;ent_coef=0"]  # marl-eval forbids commas
    assert all(list(seeds) == ["seed_0", "seed_1"] for seeds in algorithms.values())
    step = algorithms["ippo/lr=0.003;ent_coef=0"]["seed_1"]["step_1"]
    assert step == {"step_count": 200, "elapsed_time": 2.0, "return": [-1.0, -1.5], "episode_length": [25, 25]}
    # a swept preset names the algorithm in the setting itself: no prefix
    swept = {**MPE, "sweep": {"grid": {"preset": ["ippo", "mappo"]}}}
    out = marl_eval_results(sweep_dir(tmp_path / "b", ["preset=ippo", "preset=mappo"], swept))
    assert list(out["MPE"]["simple_spread"]) == ["preset=ippo", "preset=mappo"]
    # told otherwise: a prefix, or a name per setting
    out = marl_eval_results(str(tmp_path / "b"), algorithm="PPO")
    assert list(out["MPE"]["simple_spread"]) == ["PPO/preset=ippo", "PPO/preset=mappo"]
    out = marl_eval_results(str(tmp_path / "b"), algorithm={"preset=ippo": "IPPO", "preset=mappo": "MAPPO"})
    assert list(out["MPE"]["simple_spread"]) == ["IPPO", "MAPPO"]
    with pytest.raises(ValueError, match="same marl-eval algorithm name 'x'"):
        marl_eval_results(str(tmp_path / "b"), algorithm={"preset=ippo": "x", "preset=mappo": "X"})
    with pytest.raises(ValueError, match="no algorithm for settings preset=mappo"):
        marl_eval_results(str(tmp_path / "b"), algorithm={"preset=ippo": "IPPO"})
    # a sweep over the environment is several tasks: refused, unless the names are given
    with pytest.raises(ValueError, match="sweeps the environment"):
        marl_eval_results(sweep_dir(tmp_path / "c", ["env=a"], {**MPE, "sweep": {"grid": {"env": ["a"]}}}))
    out = marl_eval_results(str(tmp_path / "c"), env_name="MPE", task_name="a")
    assert list(out["MPE"]["a"]) == ["ippo/env=a"]


def test_merge_combines_tasks_and_refuses_collisions(tmp_path):
    spread = marl_eval_results(sweep_dir(tmp_path / "spread", ["ippo"], {**MPE, "support": {}}))
    reference = marl_eval_results(sweep_dir(tmp_path / "reference", ["ippo"],
                                            {**MPE, "config": {"env": "MPE_simple_reference_v3"}, "support": {}}))
    merged = merge(spread, reference)
    assert list(merged["MPE"]) == ["simple_spread", "simple_reference"]
    assert merged["MPE"]["simple_reference"] == reference["MPE"]["simple_reference"]
    assert merge(merge(spread), {}) == spread
    with pytest.raises(ValueError, match="MPE/simple_spread/ippo/seed_0 is in more than one"):
        merge(spread, reference, spread)
    with pytest.raises(ValueError, match="differ only in case"):
        merge(spread, {"mpe": reference["MPE"]})


def test_missing_or_malformed_files_are_clear_errors(tmp_path):
    directory = str(tmp_path / "nothing")
    os.makedirs(directory)
    with pytest.raises(ValueError, match=f"'{directory}' has no eval_episodes.csv: run with evaluation on"):
        marl_eval_results(directory)
    good = episode_rows(0, "s", 0, [(1, 8, 1.0, [(1.0, 5, 1)])])
    for rows, message in [
        ([{k: v for k, v in good[0].items() if k != "won"}], "lacks the columns won"),
        ([{**good[0], "env_steps": "many"}], "line 2: column env_steps holds 'many', not an integer"),
        ([{**good[0], "won": 2}], "column won holds '2', not 0, 1 or empty"),
        ([good[0], good[0]], "episode 0 of update 1 of s/seed0 appears twice"),
        ([good[0], {**good[0], "episode": 1, "won": ""}], "won is empty in some rows"),
        ([], "holds no episodes"),
    ]:
        with open(os.path.join(directory, "eval_episodes.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, ["label", *rows[0]] if rows else EPISODE_COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows({"label": "s/seed0", **r} for r in rows)
        with pytest.raises(ValueError, match=message):
            marl_eval_results(directory, env_name="e", task_name="t", algorithm="a")
    write_dir(directory, {}, good)
    os.remove(os.path.join(directory, "config.yaml"))
    with pytest.raises(ValueError, match="neither config.yaml nor sweep.yaml"):
        marl_eval_results(directory)
    write_dir(directory, SMAX, good, absolute_rows(7, "other", 3, 1, [(1.0, 5, 1)]))
    with pytest.raises(ValueError, match="runs never evaluated in eval_episodes.csv: other/seed3"):
        marl_eval_results(directory)


# Two tasks × two algorithms × four seeds × three evaluations; returns drawn so that the
# first step marl-eval visits holds each task's smallest and largest return (its min/max
# scan updates only one of the two per step).
def suite(tmp_path):
    rng = np.random.default_rng(0)
    results, returns = [], {}
    for t, scenario in enumerate(["2s3z", "3m"]):
        experiment = {"config": {"env": "HeuristicEnemySMAX", "env_kwargs": {"scenario": scenario}},
                      "support": {"preset": "ippo"}, "sweep": {"grid": {"lr": [1e-3, 3e-3]}}}
        episodes, absolute, run_id, low, high = [], [], 0, 10.0 * t, 10.0 * t + 20.0
        for setting in ["lr=0.001", "lr=0.003"]:
            for seed in range(4):
                evals = []
                for i in range(3):
                    r = rng.uniform(low + 1, high - 1, size=5)
                    if run_id == 0 and i == 0:
                        r[:2] = low, high
                    evals.append((10 * (i + 1), 1000 * (i + 1), 5.0 * i, [(x, 20 + e, e % 2) for e, x in enumerate(r)]))
                    returns[scenario, setting, seed, i] = r
                episodes += episode_rows(run_id, setting, seed, evals)
                best = rng.uniform(low + 1, high - 1, size=6)
                absolute += absolute_rows(run_id, setting, seed, 30, [(x, 30, e % 2) for e, x in enumerate(best)])
                returns[scenario, setting, seed, "absolute"] = best
                run_id += 1
        results.append(marl_eval_results(write_dir(tmp_path / scenario, experiment, episodes, absolute,
                                                   file="sweep.yaml")))
    path = write_marl_eval(str(tmp_path / "out" / "metrics.json"), merge(*results))
    with open(path) as f:
        return json.load(f), returns


def normalised(returns, scenario, setting, seed, step):
    """marl-eval's min-max normalisation: over every return of the task (all algorithms,
    seeds, steps and the absolute metric), ``(x - min) / (max - min + 1e-6)``."""
    values = np.concatenate([v for k, v in returns.items() if k[0] == scenario])
    return (returns[scenario, setting, seed, step] - values.min()) / (values.max() - values.min() + 1e-6)


def test_marl_evals_own_pipeline_and_aggregates_read_the_export(tmp_path, monkeypatch):
    raw, returns = suite(tmp_path)
    assert raw["SMAX"]["3m"]["ippo/lr=0.003"]["seed_3"]["step_2"]["step_count"] == 3000
    assert DiagnoseData(raw).check_data()["smax"] | {"valid_metrics": True} == dict.fromkeys(
        ["valid_algorithms", "valid_algorithm_names", "valid_runs", "valid_steps", "valid_metrics"], True)
    # (valid_metrics is False for marl-eval's own JsonLogger files too: their steps hold
    # elapsed_time, their absolute_metrics do not)

    data = data_process_pipeline(raw, METRICS_TO_NORMALIZE)
    assert "extra" in data  # the pipeline prints its errors and returns the raw data instead
    assert data["extra"]["environment_list"] == {"smax": ["2s3z", "3m"]}
    assert data["extra"]["algorithm_list"] == ["ippo/lr=0.001", "ippo/lr=0.003"]
    assert (data["extra"]["number_of_runs"], data["extra"]["number_of_steps"]) == (4, 3)
    assert data["extra"]["evaluation_interval"] == {"smax": 1000}  # step_count differences, from 0
    np.testing.assert_allclose(data["smax"]["3m"]["ippo/lr=0.001"]["seed_2"]["step_1"]["norm_return"],
                               normalised(returns, "3m", "lr=0.001", 2, 1))

    matrix, curves = create_matrices_for_rliable(data, "SMAX", METRICS_TO_NORMALIZE)
    assert set(matrix) == {"mean_norm_return", "mean_episode_length", "mean_win_rate"}
    scores = {setting: np.array([[normalised(returns, scenario, setting, seed, "absolute").mean()
                                  for scenario in ["2s3z", "3m"]] for seed in range(4)])
              for setting in ["lr=0.001", "lr=0.003"]}  # [runs, tasks]
    for setting, expected in scores.items():
        np.testing.assert_allclose(matrix["mean_norm_return"][f"ippo/{setting}"], expected)
        np.testing.assert_allclose(matrix["mean_win_rate"][f"ippo/{setting}"], 0.5 * np.ones((4, 2)))
        np.testing.assert_allclose(matrix["mean_episode_length"][f"ippo/{setting}"], 30 * np.ones((4, 2)))
    assert curves["mean_norm_return"]["ippo/lr=0.001"].shape == (4, 2, 3)  # runs, tasks, evaluations
    np.testing.assert_allclose(curves["mean_win_rate"]["ippo/lr=0.003"], 0.4)  # episodes 1, 3 of 5 won

    # marl-eval's bootstraps (50 000 resamples) only move the intervals: 200 keep the test fast
    get_interval_estimates = plotting.rly.get_interval_estimates
    monkeypatch.setattr(plotting.rly, "get_interval_estimates",
                        lambda scores, func, reps: get_interval_estimates(scores, func, reps=200))
    fig, aggregates, _ = plotting.aggregate_scores(matrix, "return", METRICS_TO_NORMALIZE, rounding_decimals=8,
                                                   tabular_results_file_path=str(tmp_path / "aggregate"))
    plt.close(fig)
    for setting, expected in scores.items():
        # marl-eval returns its table's strings "value [low, high]" (it edits a shallow copy)
        reported = {k: float(v.split()[0]) for k, v in aggregates[f"IPPO/{setting}".upper()].items()}
        assert reported["Mean"] == pytest.approx(expected.mean(), abs=1e-7)
        assert reported["IQM"] == pytest.approx(scipy.stats.trim_mean(expected.ravel(), 0.25), abs=1e-7)
        assert reported["Median"] == pytest.approx(np.median(expected.mean(axis=0)), abs=1e-7)  # over tasks
    _, iqm, _ = plotting.sample_efficiency_curves(curves, "return", METRICS_TO_NORMALIZE)
    plt.close("all")  # (it returns the axes, not the figure)
    for setting in ["lr=0.001", "lr=0.003"]:
        per_step = [[[normalised(returns, scenario, setting, seed, i).mean() for scenario in ["2s3z", "3m"]]
                     for seed in range(4)] for i in range(3)]
        np.testing.assert_allclose(iqm[f"IPPO/{setting}".upper()],
                                   [scipy.stats.trim_mean(np.ravel(s), 0.25) for s in per_step])
