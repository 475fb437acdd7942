"""The benchmark suite (``jaxpo.experiments.protocol``, run by benchmarks/protocol.py) at CI size: it trains a (task, method)
from its reference config with evaluation, writes the tables and marl-eval's JSON, skips
what is finished, and continues a killed task from its checkpoint to the same results."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from jaxpo.run.report import read_csv

from jaxpo.experiments import protocol
from runtools import StopAfter

TINY = ["--suite", "mpe", "--tasks", "simple_spread", "--methods", "ippo", "--steps", "512", "--seeds", "2",
        "--evaluations", "2", "--eval-episodes", "2", "--checkpoint-every", "1",
        "--set", "config.num_envs=4", "--set", "config.num_steps=16", "--set", "config.hidden=16",
        "--set", "config.updates_per_chunk=2"]


def rows(path, drop=("elapsed_s",)):
    return {k: v for k, v in read_csv(path).items() if k not in drop}


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite")
    assert protocol.main([*TINY, "--out", str(out)]) == 0
    return out


def test_the_suite_trains_evaluates_and_writes_its_tables(straight):
    task = straight / "simple_spread-ippo"
    evals = read_csv(str(task / "eval.csv"))
    assert sorted(set(evals["update"].tolist())) == [4, 8]  # every 256 steps = 4 updates of 64, and the last
    results = json.loads((straight / "results.json").read_text())["simple_spread-ippo"]
    assert results["seeds"] == 2 and results["env_steps"] == 512 and results["config"] == "jaxmarl_ippo_ff_mpe.yaml"
    final = [evals["return"][(evals["seed"] == s) & (evals["update"] == 8)][0] for s in sorted(set(evals["seed"]))]
    assert min(final) <= results["final_return"]["iqm"] <= max(final)
    assert tuple(results["final_return"].values()) == protocol.iqm_ci(final)  # seeded: a re-export gives the same
    data = json.loads((straight / "marl_eval.json").read_text())
    assert sorted(data["MPE"]["simple_spread"]["ippo"]) == ["seed_30", "seed_31"]  # the reference's seed 30
    assert "| simple_spread | ippo | 512 × 2 |" in (straight / "results.md").read_text()
    assert (straight / "curves.png").stat().st_size > 0


def test_the_intervals_are_seeded_and_leave_the_callers_random_stream_alone():
    values = np.random.default_rng(0).normal(size=10)
    state = np.random.get_state()
    first = protocol.iqm_ci(values)
    assert protocol.iqm_ci(values) == first and first[1] < first[0] < first[2]
    assert protocol.iqm_ci(values, seed=1) != first
    np.testing.assert_equal(np.random.get_state(), state)


def test_a_finished_task_is_skipped(straight):
    metrics = straight / "simple_spread-ippo" / "metrics.csv"
    before = metrics.stat().st_mtime_ns
    assert protocol.main([*TINY, "--out", str(straight)]) == 0
    assert metrics.stat().st_mtime_ns == before


def test_a_task_kept_as_results_only_keeps_its_row_and_marl_eval_entries(straight, tmp_path):
    # a device's results-only copy: eval.csv and summary.csv, no per-episode files
    shutil.copytree(straight, tmp_path, dirs_exist_ok=True)
    for name in ("eval_episodes.csv", "absolute.csv"):
        (tmp_path / "simple_spread-ippo" / name).unlink()
    assert protocol.main([*TINY, "--out", str(tmp_path)]) == 0
    for name in ("results.json", "marl_eval.json"):
        assert json.loads((tmp_path / name).read_text()) == json.loads((straight / name).read_text()), name


def test_a_killed_task_continues_to_the_same_results(straight, tmp_path):
    with pytest.raises(KeyboardInterrupt):  # in the second chunk, before its checkpoint
        protocol.main([*TINY, "--out", str(tmp_path)], hooks=[StopAfter(2)])
    task = tmp_path / "simple_spread-ippo"
    assert not (task / "summary.csv").exists() and (task / "checkpoints").is_dir()
    assert protocol.main([*TINY, "--out", str(tmp_path)]) == 0
    for name in ("eval.csv", "eval_episodes.csv", "absolute.csv", "metrics.csv"):
        np.testing.assert_equal(rows(str(task / name)), rows(str(straight / "simple_spread-ippo" / name)), name)


def test_bad_suite_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        protocol.main(["--tasks", "not_a_map"])
    assert "--tasks: unknown task 'not_a_map'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        protocol.main(["--set", "num_envs=4"])
    assert "SECTION.FIELD=VALUE" in capsys.readouterr().err


def test_chunks_are_sized_so_evaluations_keep_the_protocols_cadence():
    # SMAX reference: 128 envs x 128 steps = 16,384 steps per update; 10M steps / 200 evaluations
    # = 50,000 -> 3 updates per chunk (the config's own 10 would evaluate every 163,840 steps)
    assert protocol.eval_chunk("smax", "ippo", protocol.task_sections("smax", "3s5z", "ippo"), 50_000) == 3
    # MPE reference: 16 envs x 128 steps = 2,048 per update; an explicit --set wins over the rule
    sections = protocol.task_sections("mpe", "simple_spread", "mappo")
    assert protocol.eval_chunk("mpe", "mappo", sections, 50_000) == 24
    assert protocol.eval_chunk("mpe", "mappo", {"config": {**sections["config"], "num_envs": "64"}}, 50_000) == 6
    assert protocol.eval_chunk("mpe", "mappo", sections, 100) == 1  # never below one update


def test_the_tables_in_the_docs_are_the_suites_own():
    # the guide shows results.md's rows verbatim; the README's GPU rows carry results.json's numbers
    root = Path(__file__).resolve().parents[1]
    guide = (root / "docs/guides/benchmark-protocol.md").read_text()
    tables = sorted((root / "benchmarks/results").glob("protocol-*/**/results.md"))  # the suites and their extra maps
    assert len(tables) >= 5, tables
    for table in tables:
        for row in table.read_text().splitlines()[2:]:
            assert row in guide, (table, row)
    readme = (root / "README.md").read_text()
    results = json.loads((root / "benchmarks/results/protocol-gpu/results.json").read_text())
    for row in results.values():
        published = " / ".join(map(str, protocol.PUBLISHED_SMAX[row["task"]]))
        line = (f"| {row['task']} | {row['method'].upper()} | {protocol.interval(row['final_win_rate'], 100)} | "
                f"{protocol.interval(row['absolute_win_rate'], 100)} | {published} |")
        assert line in readme, line
