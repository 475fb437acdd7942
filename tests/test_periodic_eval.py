"""Evaluation during training (``jaxpo.run.periodic_eval``): it leaves training bitwise
unchanged; it runs on its schedule; its episodes are exactly ``play_episodes`` with
the checkpointed parameters and the run's own key stream (independent of the other
runs); the absolute metric replays each run's best; a killed run resumes to the same
files; bad arguments are named; and marl-eval reads the export of a real run."""

import copy
import csv
import os
import types

import jax
import numpy as np
import pytest
from marl_eval.utils.data_processing_utils import data_process_pipeline

import jaxpo
from jaxpo import Config, cli
from jaxpo.program.learner import learner
from jaxpo.run import checkpoint
from jaxpo.run.evaluate import load_runs, play_episodes
from jaxpo.run.events import ChunkEvent, Group, Run, chunk_updates
from jaxpo.run.export import METRICS_TO_NORMALIZE, marl_eval_results
from jaxpo.run.periodic_eval import (ABSOLUTE_COLUMNS, ABSOLUTE_UPDATE, EPISODE_COLUMNS, EVAL_COLUMNS, Evaluator,
                                     eval_keys)
from runtools import StopAfter  # after the evaluation of that chunk, before its checkpoint

# The tiny program of test_protocol (one compile serves both files): S = 32 env steps per
# update, K = 2 updates per chunk, 64 env steps per chunk.
TINY = Config(env="public_goods", num_envs=4, num_steps=8, updates_per_chunk=2, num_epochs=1, num_minibatches=1,
              hidden=(16,), shared_trunk=True, anneal_lr=True)
UPDATES = 12  # 6 chunks, ending at env steps 64, 128, ..., 384
EVERY = 150  # multiples 150, 300 are crossed in chunks 2 (128 -> 192) and 4 (256 -> 320); chunk 5 is the last
EVAL_UPDATES = [6, 10, 12]
EPISODES = 3
SEEDS = [0, 1]
EVAL = dict(eval_every=EVERY, eval_episodes=EPISODES)


def batch(seeds=SEEDS):
    # mappo (team advantages): its greedy policy still changes between evaluations and both
    # runs' best comes after update 6 (ippo soon always defects: episodes would no longer
    # depend on the parameters, and the best would never move)
    return jaxpo.runs(jaxpo.support.mappo(8), seeds=seeds)


def train(out_dir=None, seeds=SEEDS, **kwargs):
    hyper, seeds, labels = batch(seeds)
    return jaxpo.train(TINY, hyper, seeds, num_updates=UPDATES, labels=labels, progress=False,
                       out_dir=None if out_dir is None else str(out_dir), **kwargs)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def header(path):
    with open(path, newline="") as f:
        return next(csv.reader(f))


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """``(TrainResult, run dir)``: 2 runs × 12 updates with evaluation and a checkpoint
    after every chunk (all kept)."""
    out = tmp_path_factory.mktemp("eval") / "straight"
    return train(out, checkpoint_every=1, keep=20, **EVAL), str(out)


@pytest.fixture(scope="module")
def params_at(straight):
    """update -> params [R, ...] of the straight run's checkpoint after that update."""
    _, run_dir = straight
    steps = checkpoint.steps(run_dir)
    assert steps == list(range(1, UPDATES // TINY.updates_per_chunk + 1))
    out = {}
    for step in steps:
        config, params, runs, meta = load_runs(run_dir, step)
        assert config == TINY and [r["seed"] for r in runs] == SEEDS
        out[int(meta["chunk"]) * TINY.updates_per_chunk] = params
    return out


def play(params, seeds, update, episodes):
    """``play_episodes`` by hand, as numpy: ``(returns, won, lengths)`` ``[R, episodes]``."""
    out = play_episodes(TINY, learner(TINY).env, params, eval_keys(seeds, update), episodes, True)
    return tuple(None if x is None else np.asarray(x) for x in jax.device_get(out))


def absolute_by_hand(params, blocks, episodes):
    """The absolute metric's ``episodes`` as ``play`` plays them, E at a time: ``(returns,
    won, lengths)``, each ``[R, episodes]`` (won None: public_goods has no win)."""
    played = [play(params, SEEDS, ABSOLUTE_UPDATE - b, EPISODES) for b in range(blocks)]
    assert all(won is None for _, won, _ in played)
    joined = lambda i: np.concatenate([block[i] for block in played], axis=1)[:, :episodes]
    return joined(0), None, joined(2)


def one_run(params, r):
    return jax.tree.map(lambda x: x[r:r + 1], params)


# ------------------------------------------------------------------ training is unchanged


def test_evaluation_leaves_training_bitwise_unchanged(straight):
    result, _ = straight
    plain = train()  # no evaluation, no files
    assert plain.evaluation is None and result.evaluation is not None
    assert set(plain.metrics) == set(result.metrics)
    for name in plain.metrics:
        assert np.array_equal(plain.metrics[name], result.metrics[name], equal_nan=True), name
    leaves, plain_leaves = jax.tree.leaves(result.state), jax.tree.leaves(plain.state)
    assert len(leaves) == len(plain_leaves)
    for a, b in zip(leaves, plain_leaves):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ------------------------------------------------------------------ the schedule


def expected_evaluations(steps_per_update, k, every, chunks):
    """The last update of each chunk in which a multiple of ``every`` env steps falls
    (``(before, after]``), and of the last chunk: the documented schedule, from the multiples."""
    per_chunk = steps_per_update * k
    chunk_of = {(m * every - 1) // per_chunk for m in range(1, chunks * per_chunk // every + 1)}
    return [(c + 1) * k for c in sorted(chunk_of | {chunks - 1})]


@pytest.mark.parametrize("num_envs, num_steps, k, every, chunks", [
    (4, 8, 2, EVERY, 6),  # the real run's
    (4, 8, 1, 32, 5),  # every update
    (4, 8, 1, 31, 5),  # every update (a multiple in each)
    (4, 8, 3, 1000, 4),  # never a multiple: the last chunk only
    (2, 8, 2, 64, 4),  # chunks of 32 steps: every other chunk
    (4, 4, 2, 48, 7),  # chunks of 32: multiples 48, 96, 144, 192 in chunks 1, 2, 4, 5
])
def test_evaluations_follow_the_documented_schedule(num_envs, num_steps, k, every, chunks):
    config = Config(env="public_goods", num_envs=num_envs, num_steps=num_steps, updates_per_chunk=k, num_minibatches=1)
    runs = [Run(0, "a/seed0", "a", 0), Run(1, "a/seed1", "a", 1)]
    evaluator = Evaluator(every, 2, absolute_episodes=0)
    played = []

    def fake_play(group, params, update, episodes):
        played.append(update)
        return np.full((2, episodes), float(update)), None, np.ones((2, episodes), np.int32)

    evaluator._play = fake_play  # the schedule alone, nothing compiled
    group = Group(config, runs, chunks * k)
    state = types.SimpleNamespace(params={"w": np.zeros((2, 1))})
    for i in range(chunks):
        updates, env_steps = chunk_updates(config, i)
        evaluator.chunk(ChunkEvent(group, i, updates, env_steps, {}, state, 0.0))
    assert played == expected_evaluations(config.steps_per_update, k, every, chunks)
    assert [u for u, *_ in evaluator.results[1]] == played
    assert [s for _, s, *_ in evaluator.results[1]] == [u * config.steps_per_update for u in played]


def test_the_files_hold_each_evaluation(straight):
    result, run_dir = straight
    assert expected_evaluations(TINY.steps_per_update, TINY.updates_per_chunk, EVERY, 6) == EVAL_UPDATES
    for r in range(len(SEEDS)):
        evaluations = result.evaluation.results[r]
        assert [e[0] for e in evaluations] == EVAL_UPDATES
        assert [e[1] for e in evaluations] == [u * TINY.steps_per_update for u in EVAL_UPDATES]
        assert all(e[2].shape == e[4].shape == (EPISODES,) and e[3] is None for e in evaluations)  # no win flag
    assert header(os.path.join(run_dir, "eval.csv")) == list(EVAL_COLUMNS)
    assert header(os.path.join(run_dir, "eval_episodes.csv")) == list(EPISODE_COLUMNS)
    summary, episodes = rows(os.path.join(run_dir, "eval.csv")), rows(os.path.join(run_dir, "eval_episodes.csv"))
    assert len(summary) == len(EVAL_UPDATES) * len(SEEDS)
    assert len(episodes) == len(EVAL_UPDATES) * len(SEEDS) * EPISODES
    for row in summary:
        r, update = int(row["run_id"]), int(row["update"])
        assert row["label"] == f"mappo/seed{SEEDS[r]}" and row["setting"] == "mappo" and int(row["seed"]) == SEEDS[r]
        assert int(row["env_steps"]) == update * TINY.steps_per_update and int(row["episodes"]) == EPISODES
        assert row["win_rate"] == ""  # public_goods has no win condition
        mine = [e for e in episodes if e["run_id"] == row["run_id"] and e["update"] == row["update"]]
        assert [int(e["episode"]) for e in mine] == list(range(EPISODES))
        assert all(e["won"] == "" and e["env_steps"] == row["env_steps"] and e["elapsed_s"] == row["elapsed_s"]
                   for e in mine)
        returns = np.array([float(e["return"]) for e in mine])
        lengths = np.array([int(e["length"]) for e in mine])
        np.testing.assert_allclose(float(row["return"]), returns.mean(), rtol=1e-6)
        np.testing.assert_allclose(float(row["episode_length"]), lengths.mean(), rtol=1e-6)
        (_, _, want, _, want_lengths), = [e for e in result.evaluation.results[r] if e[0] == update]
        np.testing.assert_array_equal(returns.astype(np.float32), want)
        np.testing.assert_array_equal(lengths, want_lengths)
    # evaluations at later updates of a run come later in the file and later in time
    times = [float(row["elapsed_s"]) for row in summary if row["run_id"] == "0"]
    assert times == sorted(times)


# ------------------------------------------------------------------ the episodes themselves


def test_each_evaluation_is_play_episodes_with_the_checkpointed_parameters(straight, params_at):
    result, _ = straight
    for i, update in enumerate(EVAL_UPDATES):
        for r, seed in enumerate(SEEDS):
            # one run alone, with its own key: what the other runs are does not matter
            returns, won, lengths = play(one_run(params_at[update], r), [seed], update, EPISODES)
            got_update, _, got_returns, got_won, got_lengths = result.evaluation.results[r][i]
            assert got_update == update and won is None and got_won is None
            np.testing.assert_array_equal(got_returns, returns[0])
            np.testing.assert_array_equal(got_lengths, lengths[0])
    # the parameters and the key matter: another update's parameters, or another update's key, play differently
    returns = play(one_run(params_at[EVAL_UPDATES[0]], 0), [SEEDS[0]], EVAL_UPDATES[1], EPISODES)[0]
    assert not np.array_equal(returns[0], result.evaluation.results[0][0][2])
    returns = play(one_run(params_at[EVAL_UPDATES[1]], 0), [SEEDS[0]], EVAL_UPDATES[1], EPISODES)[0]
    np.testing.assert_array_equal(returns[0], result.evaluation.results[0][1][2])
    assert not np.array_equal(play(one_run(params_at[4], 0), [SEEDS[0]], EVAL_UPDATES[1], EPISODES)[0][0], returns[0])


def test_the_evaluation_key_stream_is_the_documented_one():
    """``fold_in(fold_in(PRNGKey(seed), EVAL_STREAM), update)``, EVAL_STREAM = "eva1": run
    r's key depends on its seed and the update alone."""
    for update in (6, 10, 2 ** 32 - 1):
        keys = np.asarray(eval_keys([0, 1, 7], update))
        for r, seed in enumerate([0, 1, 7]):
            expected = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), 0x65766131), update)
            np.testing.assert_array_equal(keys[r], np.asarray(expected))
            np.testing.assert_array_equal(np.asarray(eval_keys([seed], update))[0], keys[r])
        assert len({tuple(k) for k in keys}) == 3
    assert not np.array_equal(eval_keys([0], 6), eval_keys([0], 10))


def test_a_runs_evaluations_do_not_depend_on_the_other_runs(straight):
    result, _ = straight
    alone = train(seeds=[1], absolute_episodes=0, **EVAL)  # seed 1 trained and evaluated by itself
    assert alone.evaluation.absolute == {}
    for (u, s, returns, won, lengths), (u1, s1, returns1, won1, lengths1) in zip(
            result.evaluation.results[1], alone.evaluation.results[0], strict=True):
        assert (u, s, won) == (u1, s1, won1)
        np.testing.assert_array_equal(returns, returns1)
        np.testing.assert_array_equal(lengths, lengths1)
    # and the two runs of the group do differ (the comparison could fail)
    assert not np.array_equal(result.evaluation.results[0][0][2], result.evaluation.results[1][0][2])


def test_the_absolute_metric_replays_each_runs_best_parameters(straight, params_at):
    result, run_dir = straight
    summary = rows(os.path.join(run_dir, "eval.csv"))
    absolute = rows(os.path.join(run_dir, "absolute.csv"))
    assert header(os.path.join(run_dir, "absolute.csv")) == list(ABSOLUTE_COLUMNS)
    episodes = 10 * EPISODES  # the default: 10 × eval_episodes
    assert len(absolute) == episodes * len(SEEDS)
    best = best_updates(run_dir)
    for r in range(len(SEEDS)):
        mine = [row for row in absolute if int(row["run_id"]) == r]
        assert {int(row["best_update"]) for row in mine} == {best[r]}
        assert [int(row["episode"]) for row in mine] == list(range(episodes))
        assert result.evaluation.absolute[r][0] == best[r]
    with np.load(os.path.join(run_dir, "eval_best.npz")) as saved:
        assert [int(saved[f"{r}/update"]) for r in range(len(SEEDS))] == best
        for r in range(len(SEEDS)):
            assert float(saved[f"{r}/score"]) == max(float(row["return"]) for row in summary if int(row["run_id"]) == r)
            for i, leaf in enumerate(jax.tree.leaves(params_at[best[r]])):
                np.testing.assert_array_equal(saved[f"{r}/leaf{i}"], leaf[r])
    # the best parameters, stacked, in 10 blocks of EPISODES: block b on the key stream's update 2**32 - 1 - b
    params = jax.tree.map(lambda *xs: np.stack(xs), *[jax.tree.map(lambda x: x[r], params_at[best[r]])
                                                      for r in range(len(SEEDS))])
    returns, _, lengths = absolute_by_hand(params, 10, episodes)
    assert ABSOLUTE_UPDATE == 2 ** 32 - 1
    for r in range(len(SEEDS)):
        mine = [row for row in absolute if int(row["run_id"]) == r]
        np.testing.assert_array_equal(np.float32([float(row["return"]) for row in mine]), returns[r])
        np.testing.assert_array_equal([int(row["length"]) for row in mine], lengths[r])
        assert all(row["won"] == "" for row in mine)
        np.testing.assert_array_equal(result.evaluation.absolute[r][1], returns[r])


def test_the_absolute_metric_is_blocks_of_the_evaluations_program(straight, params_at):
    """Every run of the group, E episodes at a time: the absolute metric adds no compiled
    program. Here run 0 has no best (it borrows run 1's; its episodes are dropped) and 7
    episodes are 3 blocks of E = 3, the last cut short."""
    result, _ = straight
    group = Group(TINY, [Run(r, f"mappo/seed{s}", "mappo", s) for r, s in enumerate(SEEDS)], UPDATES)
    evaluator = Evaluator(EVERY, EPISODES, absolute_episodes=7)
    evaluator.best = {1: (0.0, 6, jax.tree.map(lambda x: x[1], params_at[6]))}
    programs = play_episodes._cache_size()  # the straight run's evaluations compiled theirs
    evaluator.end(group, result.state)
    assert play_episodes._cache_size() == programs
    assert list(evaluator.absolute) == [1]
    best_update, returns, won, lengths = evaluator.absolute[1]
    expected_returns, _, expected_lengths = absolute_by_hand(params_at[6], 3, 7)
    assert best_update == 6 and won is None
    np.testing.assert_array_equal(returns, expected_returns[1])
    np.testing.assert_array_equal(lengths, expected_lengths[1])


def test_no_absolute_metric_when_asked_for_none(tmp_path):
    result = train(tmp_path / "no_absolute", absolute_episodes=0, checkpoint=False, **EVAL)
    assert result.evaluation.absolute == {}
    assert rows(str(tmp_path / "no_absolute" / "absolute.csv")) == []
    assert len(rows(str(tmp_path / "no_absolute" / "eval.csv"))) == len(EVAL_UPDATES) * len(SEEDS)


# ------------------------------------------------------------------ kill and resume


def best_updates(run_dir):
    """Each run's update of best mean evaluation return (the first of equals), from eval.csv."""
    summary = rows(os.path.join(run_dir, "eval.csv"))
    out = []
    for r in range(len(SEEDS)):
        mine = [row for row in summary if int(row["run_id"]) == r]
        out.append(int(mine[int(np.argmax([float(row["return"]) for row in mine]))]["update"]))
    return out


def without_elapsed(path):
    return [{k: v for k, v in row.items() if k != "elapsed_s"} for row in rows(path)]


@pytest.mark.parametrize("checkpoint_every, chunks, last_checkpoint", [
    (1, 4, 3),  # the checkpoint after update 6 follows its evaluation: that row is kept, not repeated
    (1, 3, 2),  # killed after the evaluation at update 6, before its checkpoint: that row is redone
    # after the evaluation at update 10 and a checkpoint at 8: its row and best are redone; then run 1
    # improves at update 12 while run 0's best is still the one read back from eval_best.npz
    (2, 5, 4),
])
def test_a_killed_run_resumes_to_the_same_evaluations(straight, tmp_path, checkpoint_every, chunks, last_checkpoint):
    _, straight_dir = straight
    # (some run's best comes after the checkpoint: the resumed process must recompute it)
    assert max(best_updates(straight_dir)) > last_checkpoint * TINY.updates_per_chunk
    cut = tmp_path / "cut"
    settings = dict(checkpoint_every=checkpoint_every, keep=20, **EVAL)
    with pytest.raises(KeyboardInterrupt):
        train(cut, hooks=[StopAfter(chunks)], **settings)
    assert checkpoint.steps(str(cut))[-1] == last_checkpoint
    done = [int(row["update"]) for row in rows(str(cut / "eval.csv")) if row["run_id"] == "0"]
    assert done == [u for u in EVAL_UPDATES if u <= chunks * TINY.updates_per_chunk]  # evaluated up to the kill
    train(cut, resume=True, **settings)
    for name in ("eval.csv", "eval_episodes.csv"):
        assert without_elapsed(str(cut / name)) == without_elapsed(os.path.join(straight_dir, name)), name
    with open(cut / "absolute.csv") as a, open(os.path.join(straight_dir, "absolute.csv")) as b:
        assert a.read() == b.read()
    with np.load(cut / "eval_best.npz") as a, np.load(os.path.join(straight_dir, "eval_best.npz")) as b:
        assert sorted(a.files) == sorted(b.files)
        for name in a.files:
            np.testing.assert_array_equal(a[name], b[name])


def stub_evaluator(out_dir, scores, resume=False):
    """An Evaluator whose episodes are stubbed: ``scores[update]`` gives each run's return."""
    evaluator = Evaluator(32, 2, absolute_episodes=4, out_dir=out_dir, resume=resume)
    evaluator._play = lambda group, params, update, episodes: (
        np.repeat(np.float32(scores[update])[:, None], episodes, 1), None, np.ones((2, episodes), np.int32))
    return evaluator


def test_a_best_loaded_on_resume_is_kept_beside_a_later_improvement(tmp_path):
    """After a resume, one run improves while the other's best is still the one read from
    eval_best.npz: both are saved, and the absolute metric plays each one's best."""
    config = Config(env="public_goods", num_envs=4, num_steps=8, updates_per_chunk=1, num_minibatches=1)
    group = Group(config, [Run(0, "a/seed0", "a", 0), Run(1, "a/seed1", "a", 1)], 2)
    scores = {1: [1.0, 1.0], 2: [2.0, 0.5], 2 ** 32 - 1: [0.0, 0.0]}
    params = lambda update: {"b": np.full((2, 1), float(update)), "w": np.arange(6.0).reshape(2, 3) * update}
    event = lambda i: ChunkEvent(group, i, *chunk_updates(config, i), {}, types.SimpleNamespace(params=params(i + 1)),
                                 0.0)
    before = stub_evaluator(str(tmp_path), scores)
    before.chunk(event(0))  # both runs' best: update 1
    after = stub_evaluator(str(tmp_path), scores, resume=True)
    after.chunk(event(1))  # run 0 improves at update 2; run 1 keeps the best it loaded
    with np.load(tmp_path / "eval_best.npz") as saved:
        assert [int(saved["0/update"]), int(saved["1/update"])] == [2, 1]
        assert [float(saved["0/score"]), float(saved["1/score"])] == [2.0, 1.0]
        np.testing.assert_array_equal(saved["0/leaf1"], params(2)["w"][0])
        np.testing.assert_array_equal(saved["1/leaf1"], params(1)["w"][1])
    played = {}

    def play_best(group, params, update, episodes):
        played.update(params=params, updates=played.get("updates", []) + [update])
        return np.zeros((2, episodes), np.float32), None, np.ones((2, episodes), np.int32)

    after._play = play_best
    after.end(group, types.SimpleNamespace(params=params(2)))
    assert played["updates"] == [2 ** 32 - 1, 2 ** 32 - 2]  # 4 episodes: two blocks of E = 2
    np.testing.assert_array_equal(played["params"]["w"], np.stack([params(2)["w"][0], params(1)["w"][1]]))
    assert [after.absolute[r][0] for r in (0, 1)] == [2, 1]


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("kwargs, message", [
    (dict(eval_every=-1), "eval_every must be >= 0"),
    (dict(eval_every=EVERY, eval_episodes=0), "eval_episodes must be a positive integer, got 0"),
    (dict(eval_every=EVERY, absolute_episodes=-1), "absolute_episodes must be >= 0"),
])
def test_bad_evaluation_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        train(**kwargs)
    assert "run." not in str(err.value)  # jaxpo.train's argument, not the experiment's field


def test_bad_evaluation_flags_and_hook_arguments(capsys):
    assert cli.main(["train", "--env", "public_goods", "--eval-every", "-1", "--no-progress"]) == 2
    assert "--eval-every must be >= 0" in capsys.readouterr().err
    assert cli.main(["train", "--env", "public_goods", "--eval-every", "100", "--eval-episodes", "0",
                     "--no-progress"]) == 2
    assert "--eval-episodes must be a positive integer" in capsys.readouterr().err
    for args, message in [((0, 3), "evaluation every must be a positive integer"),
                          ((10, 0), "evaluation episodes must be a positive integer"),
                          ((10, 3, True, -1), "absolute_episodes must be >= 0")]:
        with pytest.raises(ValueError, match=message):
            Evaluator(*args)


# ------------------------------------------------------------------ marl-eval


def test_marl_eval_reads_the_export_of_a_real_run(straight):
    result, run_dir = straight
    raw = marl_eval_results(run_dir)
    assert list(raw) == ["public_goods"] and list(raw["public_goods"]) == ["public_goods"]
    seeds = raw["public_goods"]["public_goods"]["mappo"]
    assert list(seeds) == [f"seed_{s}" for s in SEEDS]
    absolute = rows(os.path.join(run_dir, "absolute.csv"))
    for r, seed in enumerate(SEEDS):
        steps = seeds[f"seed_{seed}"]
        assert list(steps) == [f"step_{i}" for i in range(len(EVAL_UPDATES))] + ["absolute_metrics"]
        assert [steps[f"step_{i}"]["step_count"] for i in range(len(EVAL_UPDATES))] == \
            [u * TINY.steps_per_update for u in EVAL_UPDATES]
        for i, (_, _, returns, _, lengths) in enumerate(result.evaluation.results[r]):
            np.testing.assert_array_equal(np.float32(steps[f"step_{i}"]["return"]), returns)
            assert steps[f"step_{i}"]["episode_length"] == lengths.tolist()
            assert "win_rate" not in steps[f"step_{i}"]
        assert len(steps["absolute_metrics"]["return"]) == 10 * EPISODES
        assert steps["absolute_metrics"]["return"] == [float(row["return"]) for row in absolute
                                                       if int(row["run_id"]) == r]
    data = data_process_pipeline(copy.deepcopy(raw), METRICS_TO_NORMALIZE)
    assert "extra" in data  # (on a problem the pipeline prints it and returns the raw data)
    assert data["extra"]["number_of_runs"] == len(SEEDS)
    assert data["extra"]["number_of_steps"] == len(EVAL_UPDATES)
    normalised = data["public_goods"]["public_goods"]["mappo"]["seed_0"]["step_0"]["norm_return"]
    assert len(normalised) == EPISODES
