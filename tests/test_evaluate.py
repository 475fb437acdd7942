"""Evaluation and rendering of trained policies: `jaxpo eval`, `jaxpo.evaluate`,
`jaxpo.load_policy`, `jaxpo render`; bad input."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

import jaxpo
from jaxpo import cli
from jaxpo.run.evaluate import Policy, episode_frames
from jaxpo.program.compiled import trainer
from jaxpo.run.report import read_csv


def test_eval_reports_every_run_and_matches_the_python_api(trained_run, capsys):
    _, run_dir = trained_run
    assert cli.main(["eval", run_dir, "--episodes", "32"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [row["run_id"] for row in lines] == [0, 1] and all(row["update"] == 16 for row in lines)
    table = read_csv(os.path.join(run_dir, "checkpoint_eval.csv"))
    np.testing.assert_allclose(table["mean_return"], [row["mean_return"] for row in lines])
    for row in lines:
        assert row["std_return"] >= 0 and row["episodes"] == 32 and row["episodes_per_second"] > 0
        assert row["mean_length"] == 50  # public_goods episodes last max_steps
        policy = jaxpo.load_policy(run_dir, run=row["run_id"])
        stats = jaxpo.evaluate(policy, episodes=32)
        np.testing.assert_allclose(stats["mean_return"], row["mean_return"], rtol=1e-6)
        np.testing.assert_allclose(stats["iqm_return"], row["iqm_return"], rtol=1e-6)


def test_eval_on_the_training_environment_with_a_parameter_changed(trained_run, capsys):
    _, run_dir = trained_run
    assert cli.main(["eval", run_dir, "--episodes", "16", "--env-arg", "max_steps=100"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [row["run_id"] for row in lines] == [0, 1]
    for row in lines:
        assert row["env.max_steps"] == 100 and row["mean_length"] == 100
        policy = jaxpo.load_policy(run_dir, run=row["run_id"])
        stats = jaxpo.evaluate(policy, jaxpo.envs.make("public_goods", max_steps=100), episodes=16)
        np.testing.assert_allclose(stats["mean_return"], row["mean_return"], rtol=1e-6)
        assert stats["mean_length"] == 100
    table = read_csv(os.path.join(run_dir, "checkpoint_eval.csv"))  # earlier tests' rows are kept beside these
    assert [float(m) for m, n in zip(table["env.max_steps"], table["episodes"]) if n == 16] == [100, 100]
    assert cli.main(["eval", run_dir, "--env-arg", "num_agents=9"]) == 2
    assert "env has num_agents=9 but the policy was trained with num_agents=8" in capsys.readouterr().err
    assert cli.main(["eval", run_dir, "--env-arg", "no_such=1"]) == 2
    assert "unknown parameter no_such for env 'public_goods'" in capsys.readouterr().err


def test_eval_keeps_earlier_evaluations_and_replaces_a_repeated_one(trained_run, tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    shutil.copytree(trained_run[1], run_dir)
    table_path = os.path.join(run_dir, "checkpoint_eval.csv")
    if os.path.exists(table_path):
        os.remove(table_path)

    def evaluate(*flags):
        assert cli.main(["eval", run_dir, "--episodes", "8", *flags]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]

    first = evaluate()
    changed = evaluate("--env-arg", "max_steps=20")
    evaluate()  # the first evaluation again: its rows are replaced, not added
    other_seed = evaluate("--run", "1", "--seed", "3")
    table = read_csv(table_path)
    assert list(table["run_id"]) == [0, 1, 0, 1, 1] and list(table["eval_seed"]) == [0, 0, 0, 0, 3]
    assert table["env.max_steps"] == ["20", "20", "", "", ""]
    np.testing.assert_allclose(table["mean_return"], [row["mean_return"] for row in [*changed, *first, *other_seed]])
    assert all(row["mean_length"] == 20 for row in changed) and table["mean_length"].tolist() == [20, 20, 50, 50, 50]


def test_the_trained_policy_beats_the_untrained_one(trained_run):
    _, run_dir = trained_run
    policy = jaxpo.load_policy(run_dir, run=0)
    untrained = Policy(policy.config, trainer(policy.config).net.init(jax.random.PRNGKey(0)), policy.run, 0)
    trained, before = jaxpo.evaluate(policy, episodes=64), jaxpo.evaluate(untrained, episodes=64)
    # public_goods: contributing pays off over time; 16 updates lift the return by ~8
    assert trained["mean_return"] > before["mean_return"] + 3, (trained, before)
    sampled = jaxpo.evaluate(policy, episodes=64, greedy=False)
    assert sampled["mean_return"] != trained["mean_return"]
    # another environment of the same shapes: longer episodes collect more
    longer = jaxpo.evaluate(policy, jaxpo.envs.make("public_goods", max_steps=100), episodes=64)
    assert longer["mean_return"] > trained["mean_return"] + 5
    with pytest.raises(ValueError, match="env has num_agents=9 but the policy was trained with num_agents=8"):
        jaxpo.evaluate(policy, jaxpo.envs.make("public_goods", num_agents=9))


def test_load_policy_gives_a_pure_act(trained_run):
    _, run_dir = trained_run
    policy = jaxpo.load_policy(run_dir, run=1)
    env = policy.config.make_env()
    _, ts = env.reset(jax.random.PRNGKey(0))
    act = jax.jit(policy.act)
    actions = act(jax.random.PRNGKey(1), ts.obs, ts.action_mask)
    assert actions.shape == (env.num_agents,)
    np.testing.assert_array_equal(actions, act(jax.random.PRNGKey(2), ts.obs, ts.action_mask))  # greedy
    logits = policy.net.policy(policy.params, ts.obs, ts.action_mask).logits
    np.testing.assert_array_equal(actions, np.argmax(logits, axis=-1))


def test_render_writes_one_frame_per_step(trained_run, tmp_path, capsys):
    import imageio.v3 as iio

    _, run_dir = trained_run
    out = str(tmp_path / "episode.gif")
    assert cli.main(["render", run_dir, "--out", out, "--run", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["frames"] == 50
    frames = iio.imread(out, index=None)
    env = jaxpo.load_policy(run_dir).config.make_env()
    assert frames.shape[:3] == (env.max_steps, 320, 320)  # public_goods episodes last max_steps = 50
    assert len({frames[t].tobytes() for t in range(len(frames))}) > 10  # the frames change
    shorter = str(tmp_path / "shorter.gif")  # the training environment with a parameter changed
    assert cli.main(["render", run_dir, "--out", shorter, "--run", "1", "--env-arg", "max_steps=20"]) == 0
    assert json.loads(capsys.readouterr().out)["frames"] == 20
    np.testing.assert_array_equal(iio.imread(shorter, index=None)[0], frames[0])  # the same reset
    mp4 = str(tmp_path / "episode.mp4")  # imageio-ffmpeg (the mp4 extra)
    assert cli.main(["render", run_dir, "--out", mp4, "--run", "1"]) == 0
    capsys.readouterr()
    assert iio.imread(mp4, index=None, plugin="FFMPEG").shape == (env.max_steps, 320, 320, 3)


def test_mpe_renders_through_jaxmarls_visualiser():
    env = jaxpo.envs.make("MPE_simple_spread_v3")
    state, _ = env.reset(jax.random.PRNGKey(0))
    first = env.render(state)
    for t in range(3):
        state, _ = env.step(jax.random.PRNGKey(t), state, np.array([1, 2, 3]))
    assert first.dtype == np.uint8 and first.ndim == 3 and first.shape[2] == 3
    assert not np.array_equal(first, env.render(state))


@pytest.mark.parametrize("name, kwargs", [("overcooked", dict(layout="cramped_room")),
                                          ("overcooked_v2", dict(layout="cramped_room")),
                                          ("HeuristicEnemySMAX", dict(scenario="3m")), ("jaxnav", {})])
def test_jaxmarl_families_render_through_their_own_visualisers(name, kwargs):
    env = jaxpo.envs.make(name, **kwargs)
    step = jax.jit(env.step)  # one program, not hundreds of eager ops (Overcooked: 10 s eager, 4 s jitted)
    state, _ = jax.jit(env.reset)(jax.random.PRNGKey(0))
    first = env.render(state)
    assert first.dtype == np.uint8 and first.ndim == 3 and first.shape[2] == 3 and first.std() > 10  # a picture
    move = (lambda t: np.full((env.num_agents, 2), 0.8, np.float32)) if env.continuous else \
        (lambda t: np.asarray(jax.random.randint(jax.random.PRNGKey(t), (env.num_agents,), 0, 4)))
    for t in range(8):  # SMAX: moves (actions 0-3), Overcooked: moves and stays, JaxNav: drive ahead
        state, _ = step(jax.random.PRNGKey(t), state, move(t))
    last = env.render(state)
    assert first.shape == last.shape and not np.array_equal(first, last)


def test_mabrax_has_no_headless_visualiser():
    with pytest.raises(ValueError, match="cannot render here: JaxMARL's visualisers are wired in for MPE, SMAX"):
        jaxpo.envs.make("hopper_3x1").render(None)


def test_bad_eval_and_render_input(trained_run, tmp_path, capsys):
    _, run_dir = trained_run
    assert cli.main(["eval", run_dir, "--run", "7"]) == 2
    err = capsys.readouterr().err
    assert "--run 7 is out of range" in err and "run ids 0..1" in err
    assert cli.main(["eval", run_dir, "--episodes", "0"]) == 2
    assert "--episodes must be a positive integer" in capsys.readouterr().err
    assert cli.main(["render", run_dir, "--out", str(tmp_path / "x.png")]) == 2
    assert "--out must end in .gif or .mp4" in capsys.readouterr().err
    assert cli.main(["render", run_dir, "--run", "9"]) == 2
    assert "--run 9 is not among the checkpointed runs" in capsys.readouterr().err
    config = jaxpo.Config(env="memory_cue")
    no_render = Policy(config, trainer(config).net.init(jax.random.PRNGKey(0)), {}, 0)
    with pytest.raises(ValueError, match="'memory_cue' cannot render"):
        episode_frames(no_render)


@pytest.mark.parametrize("config", [
    {"recurrent": True, "seq_len": 8},  # act carries a hidden state
    {"env_kwargs": {"action_type": "Continuous"}},  # greedy = the Gaussian's mean where the dimension exists
], ids=["recurrent", "continuous"])
def test_recurrent_and_continuous_policies_load_evaluate_and_render(config, tmp_path):
    base = {"env": "MPE_simple_spread_v3", "num_envs": 8, "num_steps": 16, "updates_per_chunk": 1}
    jaxpo.sweep({"config": {**base, **config}, "run": {"steps": 128, "out": str(tmp_path), "name": "r",
                                                       "progress": False, "checkpoint_every": 1}})
    policy = jaxpo.load_policy(str(tmp_path / "r"))
    env = policy.config.make_env()
    _, ts = env.reset(jax.random.PRNGKey(0))
    out = policy.act(jax.random.PRNGKey(1), ts.obs, ts.action_mask)
    if policy.net.recurrent:
        actions, carry = out
        assert carry.shape == policy.initial_carry().shape and np.abs(carry).sum() > 0
    else:
        actions = out
        mean = policy.net.policy(policy.params, ts.obs, ts.action_mask).mean
        np.testing.assert_array_equal(actions, np.where(ts.action_mask, mean, 0.0))
    assert actions.shape == ((3,) if policy.net.recurrent else (3, 5))
    stats = jaxpo.evaluate(policy, episodes=8)
    assert np.isfinite(stats["mean_return"]) and stats["episodes"] == 8
    assert jaxpo.render_episode(policy, str(tmp_path / "e.gif")) == env.max_steps  # MPE: 26 steps, no early end
