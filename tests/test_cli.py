"""`jaxpo train`: the default experiment learns; options, outputs and bad input."""

import json

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo import cli
from jaxpo.cli import training
from jaxpo.core.networks import MASKED_LOGIT
from jaxpo.run.report import read_csv
from jaxpo import Config, trainer
from runtools import completed_episodes, reject_nan

LEARN_STEPS = 204_800  # 100 updates of the default experiment (its full run is 1,024,000)


def random_policy_returns(config: Config, num_steps: int = 500) -> np.ndarray:
    """Episode returns (mean over agents) of the uniform random policy on ``config.env``."""
    uniform = lambda params, obs, mask: distrax.Categorical(logits=jnp.where(mask, 0.0, MASKED_LOGIT))
    params = trainer(config).net.init(jax.random.PRNGKey(0))
    return completed_episodes(config, params, num_steps, jax.random.PRNGKey(1), jax.random.PRNGKey(2), uniform)[0]


def test_summary_numbers_are_valid_json():
    """A mean with nothing finite to average (no episode ended) is null, never NaN."""
    assert training._mean(np.array([np.nan, np.nan])) is None
    assert training._mean(np.array([1.0, np.nan, 2.0])) == 1.5
    assert json.loads(json.dumps({"return_before": training._mean(np.array([np.nan]))}),
                      parse_constant=reject_nan) == {"return_before": None}


def test_default_experiment_learns(tmp_path, capsys):
    code = cli.main(["train", "--steps", str(LEARN_STEPS), "--out", str(tmp_path), "--name", "default", "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1], parse_constant=reject_nan)
    assert "signal = S_R @ S_A" in out and "khop(k=1)" in out
    assert "return (mean episode return per agent): before" in out

    csv = read_csv(str(tmp_path / "default" / "metrics.csv"))
    returns = csv["return"]
    assert len(returns) == LEARN_STEPS // Config().steps_per_update
    assert (tmp_path / "default" / "learning_curve.png").stat().st_size > 10_000

    config = Config()  # the default experiment's program
    random_returns = random_policy_returns(config)
    random_mean = random_returns.mean()
    episodes_in_window = csv["episodes"][-10:].sum()
    standard_error = random_returns.std() / np.sqrt(episodes_in_window)
    margin = 3.0  # return units; a random policy's window mean lies within a few standard errors
    assert margin > 10 * standard_error, (margin, standard_error)
    # the untrained policy is (near-)uniform: its first-update return is random-like
    assert abs(summary["return_before"] - random_mean) < 1.5
    final = np.mean(returns[-10:])
    print(f"random {random_mean:.2f} ± {standard_error:.2f}; trained {final:.2f}")
    assert final > random_mean + margin, (final, random_mean)


def test_help_documents_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--env", "--env-arg", "--preset", "--kappa", "--num-envs", "--steps", "--seeds", "--out",
                   "--recurrent", "--seq-len", "--scheme", "--value-norm", "--critic-input"):
        assert option in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--preset", "vdn"], "invalid choice: 'vdn'"),
        (["train", "--num-envs", "two"], "expected an integer, got 'two'"),
        (["train", "--hidden", "64", "x"], "expected an integer, got 'x'"),
        (["train", "--sweep", "lr=1e-3"], "unrecognized arguments: --sweep"),
        (["sweep", "--sweep", "lr"], "--sweep must look like NAME=V1,V2,..."),
        (["train", "--env-arg", "local_ratio"], "KEY=VALUE"),
    ],
)
def test_bad_arguments_exit_with_usage(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--env", "no_such_env"], "no_such_env"),
        (["train", "--num-envs", "0"], "--num-envs must be a positive integer, got 0"),
        (["train", "--env-arg", "local_ratio=2.0"], "local_ratio"),
        (["train", "--preset", "khop", "--kappa", "-1"], "k"),
        (["train", "--seq-len", "4"], "--seq-len is for recurrent networks only"),
        (["train", "--env", "HeuristicEnemySMAX", "--env-arg", "scenario=3x"], "unknown SMAX scenario '3x'"),
        (["train", "--interaction-hops", "1"], "--interaction-hops needs an environment whose coupling graph follows"),
    ],
)
def test_invalid_values_are_reported_not_raised(argv, message, capsys):
    assert cli.main(argv + ["--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxpo train: error:") and message in err


def test_envs_lists_every_name_with_its_sizes_spaces_and_coupling(capsys):
    from jaxpo.envs import registered_names

    assert cli.main(["envs"]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:]}
    assert sorted(rows) == sorted(registered_names())
    assert rows["hanabi"] == ["2", "658", "Discrete(21)", "False", "complete"]
    assert rows["MPE_simple_facmac_3a_v1"] == ["3", "16", "Box(5)", "True", "complete"]
    assert rows["memory_cue"][-1] == "none" and rows["public_goods"][-4:] == ["graph,", "mean", "degree", "2"]
    assert rows["jaxnav"] == ["2", "205", "Box(2)", "True", "complete,", "per", "state"]
    assert rows["wireless"][-6:] == ["graph,", "mean", "degree", "1.88,", "per", "state"]
    assert rows["halfcheetah_6x1"] == ["6", "9", "Box(1)", "True", "graph,", "mean", "degree", "1.67"]
    assert rows["ant_4x2"] == ["4", "18", "Box(2)", "True", "complete"]
    assert cli.main(["envs", "--names"]) == 0
    assert capsys.readouterr().out.split() == registered_names()


def test_envs_coupling_prints_the_measured_graph_beside_the_declared_one(capsys):
    """public_goods on a ring of 8, radius 1 (test_coupling measures the same program):
    each row is agent i's reward, each column the agent whose action varied."""
    assert cli.main(["envs", "--coupling", "public_goods", "--num-states", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "public_goods: N = 8; 4 states, horizon 1, up to 4 alternative actions per agent and state"
    rows = [line.split() for line in lines[2:10]]
    assert rows[0] == ["0", "100", "100", ".", ".", ".", ".", ".", "100", "11.....1", "11.....1"]
    assert rows[3] == ["3", ".", ".", "100", "100", "100", ".", ".", ".", "..111...", "..111..."]
    assert lines[10].startswith("radius 4 ") and lines[10].endswith("from kappa = 1")
    assert lines[11] == "measured graph == declared"


@pytest.mark.parametrize("argv, message", [
    (["--coupling", "public_goods", "--horizon", "0"], "horizon must be an integer >= 1, got 0"),
    (["--coupling", "public_goods", "--env-arg", "bogus=1"], "unknown parameter bogus for env 'public_goods'"),
    (["--coupling", "no_such_env"], "unknown JaxMARL env name 'no_such_env'"),
])
def test_envs_coupling_bad_input_is_reported(argv, message, capsys):
    assert cli.main(["envs", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxpo envs: error:") and message in err


def test_envs_says_which_extra_a_family_needs(capsys, monkeypatch):
    from jaxpo.envs.jaxmarl import mabrax

    monkeypatch.setattr(mabrax, "brax_env_class", lambda: None)  # as if brax were not installed
    assert cli.main(["envs"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert 'needs brax, an optional extra: pip install "jaxpo[mabrax]"' in rows["walker2d_2x3"]
    assert rows["jaxnav"].split()[1:] == ["2", "205", "Box(2)", "True", "complete,", "per", "state"]


def test_every_flag_an_error_can_name_is_a_flag_of_the_parser():
    from jaxpo.cli.errors import flag_names

    parser = cli.build_parser()
    options = {option for sub in parser._subparsers._group_actions[0].choices.values()
               for action in sub._actions for option in action.option_strings}
    for path, flag in flag_names().items():
        assert flag.split()[0] in options, (path, flag)
    assert flag_names()["config.num_envs"] == "--num-envs" and flag_names()["sweep.grid.lr"] == "--sweep lr"
    assert "sweep.segments" not in flag_names()  # segments come in files: no flag to name


def test_an_error_names_its_field_as_each_door_calls_it():
    from jaxpo.cli.errors import in_flags
    from jaxpo.core.checks import FieldError

    with pytest.raises(FieldError) as info:
        Config(shared_trunk=True, critic_input="global")
    err = info.value
    assert err.path == "config.shared_trunk"
    assert str(err).startswith("Config.shared_trunk needs critic_input='local' (")
    assert in_flags(err).startswith("--shared-trunk needs --critic-input local (")
    assert in_flags(err).endswith("got --critic-input global")
