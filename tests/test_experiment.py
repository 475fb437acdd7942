"""The typed experiment: fields read once, config files, the generated CLI and --print-config.

Nothing here compiles a training program."""

import dataclasses
import json
import pathlib
import typing

import numpy as np
import pytest
import yaml

import jaxpo
from jaxpo import Experiment, Hyper, cli, dump_yaml, load_yaml
from jaxpo.cli import parser as cli_parser
from jaxpo.experiments.experiment import SECTIONS, config_path, section_fields, shipped_configs, to_dict
from jaxpo.program.fields import FrozenArray, choices, coerce, field_docs
from jaxpo.core.losses import NORMALIZE_SCOPES
from jaxpo.core.networks import ACTIVATIONS
from jaxpo.core.rollout import CRITIC_INPUTS
from jaxpo.core.support import PRESETS
from jaxpo.experiments.sweeps import plan


def test_options_are_declared_once_as_types():
    """Validation, the CLI and the maths modules read the same Literal types."""
    hints = section_fields("config")
    assert choices(hints["adv_norm"]) == NORMALIZE_SCOPES
    assert choices(hints["critic_input"]) == CRITIC_INPUTS
    assert choices(hints["activation"]) == tuple(ACTIVATIONS)
    assert choices(section_fields("support")["preset"]) == (*PRESETS, "custom")
    text = help_text("train")
    for field in ("adv_norm", "critic_input", "activation", "aggregate_in", "scheme", "value_loss"):
        allowed = ",".join(choices(hints[field]))
        assert f"{{{allowed}}}" in text, field


def help_text(command: str) -> str:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return sub.format_help()


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_every_field_has_a_flag_with_its_doc(command):
    """Flags are generated from the fields: every Config, Hyper, support and run field is
    settable, and its docstring line is its help."""
    text = " ".join(help_text(command).split())
    special = {"env_kwargs": "--env-arg"}
    for section in ("config", "hyper", "support", "run"):
        docs = field_docs(SECTIONS[section])
        for name in section_fields(section):
            assert special.get(name, "--" + name.replace("_", "-")) in text, (section, name)
            if name not in special:
                first_words = " ".join(docs[name].replace("``", "").rstrip(".").split()[:4])
                assert first_words in text, (section, name, first_words)
    assert ("--sweep NAME=VALUES" in text) == (command == "sweep")
    assert ("--samples" in text) == (command == "sweep")


def test_a_new_field_appears_in_the_cli(monkeypatch):
    """Adding a field to Config is enough for a flag to exist (generated, not listed)."""
    fields = dict(section_fields("config"), new_option=typing.Literal["a", "b"])
    monkeypatch.setattr(cli_parser, "section_fields", lambda section: fields if section == "config" else section_fields(section))
    monkeypatch.setattr(cli_parser, "to_dict", lambda e: {**to_dict(e), "config": {**to_dict(e)["config"], "new_option": "a"}})
    assert "--new-option {a,b}" in help_text("train")


@pytest.mark.parametrize(
    "value, hint, expected",
    [
        ("3", int, 3), (3, int, 3), ("1e-4", float, 1e-4), (2, float, 2.0), ("yes", bool, True), (False, bool, False),
        ("none", int | None, None), ("8", int | None, 8), ("64,64", tuple[int, ...], (64, 64)),
        ([32], tuple[int, ...], (32,)), (16, tuple[int, ...], (16,)), ("(8, 8)", tuple[int, ...], (8, 8)),
        ("batch", typing.Literal["none", "batch"], "batch"),
    ],
)
def test_coerce_by_type(value, hint, expected):
    assert coerce(value, hint, "x") == expected


@pytest.mark.parametrize(
    "value, hint, message",
    [
        ("three", int, "x must be an integer, got 'three'"), (2.5, int, "x must be an integer"),
        (True, int, "x must be an integer"), ("fast", float, "x must be a number"), ("maybe", bool, "true or false"),
        ("global", typing.Literal["none", "batch"], "x must be one of none, batch"), (3, str, "x must be a string"),
        ("a,b", tuple[int, ...], r"x\[0\] must be an integer"),
    ],
)
def test_coerce_errors_name_the_field_and_the_form(value, hint, message):
    with pytest.raises(ValueError, match=message):
        coerce(value, hint, "x")


def test_yaml_round_trip_of_every_section():
    ring = np.roll(np.eye(6), 1, 1) + np.roll(np.eye(6), -1, 1)
    experiment = Experiment().replace(
        config={"env": "public_goods", "env_kwargs": {"graph": ring, "num_agents": 6}, "hidden": [32, 16],
                "recurrent": True, "seq_len": 8, "value_norm": True},
        hyper={"lr": 1e-4, "ent_coef": 0.0},
        support={"preset": "mappo"},
        run={"steps": 1000, "seeds": 3, "name": "x", "runs_per_group": 2},
        sweep={"grid": {"lr": [1e-3, 3e-3], "hidden": [[8], [16, 16]]}, "random": {"gamma": {"uniform": [0.9, 0.99]}},
               "samples": 2},
    )
    text = dump_yaml(experiment)
    again = Experiment().replace(**yaml.safe_load(text))
    assert again == experiment and dump_yaml(again) == text
    assert isinstance(dict(again.config.env_kwargs)["graph"], FrozenArray)
    np.testing.assert_array_equal(again.config.env_args["graph"], ring)
    assert "adv_norm: batch" in text and "hidden: [32, 16]" in text


def test_print_config_loads_back_to_the_same_experiment(tmp_path, capsys):
    argv = ["train", "--config", "mappo", "--lr", "1e-4", "--hidden", "32", "32", "--no-value-norm",
            "--env-arg", "local_ratio=0.25", "--seeds", "3", "--print-config"]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    path = tmp_path / "resolved.yaml"
    path.write_text(text)
    expected = load_yaml("mappo").replace(hyper={"lr": 1e-4}, config={"hidden": (32, 32), "value_norm": False,
                                                                          "env_kwargs": {"local_ratio": 0.25}},
                                          run={"seeds": 3})
    assert load_yaml(str(path)) == expected
    assert cli.main(["train", "--config", str(path), "--print-config"]) == 0
    assert capsys.readouterr().out == text  # printing the loaded file gives the file


def test_flags_override_the_file_and_sweep_flags_add_axes(tmp_path, capsys):
    assert cli.main(["sweep", "--config", "sweep_public_goods", "--sweep", "ent_coef=loguniform(1e-4,1e-1)",
                     "--samples", "2", "--sweep", "kappa=0,1", "--print-config"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert data["sweep"]["grid"] == {"lr": [0.001, 0.003, 0.01], "kappa": ["0", "1"]}  # text until typed by the sweep
    assert data["sweep"]["random"] == {"ent_coef": {"loguniform": ["1e-4", "1e-1"]}} and data["sweep"]["samples"] == 2


@pytest.mark.parametrize("name", shipped_configs())
def test_shipped_configs_are_complete_and_valid(name):
    """Each shipped file loads, names only known keys, and plans (env, support, hyper
    checked) without compiling; the reference options are what docs/concepts.md's methods table says."""
    experiment = load_yaml(config_path(name))
    ready = plan(experiment, run={"out": "/tmp/jaxpo-test-plan", "name": name})
    assert ready.programs and all(p.runs for p in ready.programs)
    if name in ("mappo", "happo"):
        cfg = experiment.config
        assert (cfg.aggregate_in, cfg.critic_input, cfg.value_norm, cfg.value_loss) == ("reward", "global", True, "huber")
        assert experiment.support.preset == "mappo"
        assert (cfg.scheme, cfg.share_params) == (("sequential", False) if name == "happo" else ("simultaneous", True))
    if name == "sweep_mpe":
        assert sum(len(p.runs) for p in ready.programs) == 256 and len(ready.programs) == 1


@pytest.mark.parametrize(
    "text, message",
    [
        ("config: {num_env: 3}", "unknown key config.num_env; config has: env, env_kwargs, num_envs"),
        ("config: {num_envs: three}", "config.num_envs must be an integer, got 'three'"),
        ("config: {value_norm: maybe}", "config.value_norm must be true or false"),
        ("config: {adv_norm: global}", "config.adv_norm must be one of none, batch, agent"),
        ("config: {env_kwargs: [1, 2]}", "env_kwargs must be a mapping"),
        ("hyper: {lr: -1}", "hyper.lr must be > 0, got -1"),
        ("hyper: {S_A: [[1]]}", "unknown key hyper.S_A"),
        ("runs: {seeds: 2}", "unknown section 'runs'"),
        ("[1, 2]", "must be a mapping of sections"),
        ("config: [1", "is not valid YAML"),
        ("run: {name: a/b}", "run.name must be a plain directory name"),
    ],
)
def test_bad_config_files_are_clear_errors(tmp_path, capsys, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_yaml(str(path))
    assert cli.main(["train", "--config", str(path)]) == 2
    assert message.split(" got")[0] in capsys.readouterr().err


def test_missing_config_file_lists_the_shipped_ones(capsys):
    # The listing is the configs directory itself, sorted; the reference configs must be among them.
    configs = pathlib.Path(jaxpo.__file__).parent / "experiments" / "configs"
    names = sorted(path.stem for path in configs.glob("*.yaml"))
    assert {"ippo", "mappo", "jaxmarl_ippo_rnn_smax", "mava_rec_mappo_smax", "jaxmarl_ippo_ff_hanabi"} <= set(names)
    assert cli.main(["train", "--config", "nope.yaml"]) == 2
    assert (f"config file 'nope.yaml' does not exist (shipped configs: {', '.join(names)})"
            in capsys.readouterr().err)


def test_unwritable_output_is_refused_before_anything_runs(capsys):
    assert cli.main(["train", "--out", "/proc/jaxpo", "--name", "x"]) == 2
    assert "output directory '/proc/jaxpo/x' cannot be written" in capsys.readouterr().err


def test_train_refuses_a_sweep_file(capsys):
    assert cli.main(["train", "--config", "sweep_public_goods"]) == 2
    assert "run it with `jaxpo sweep`" in capsys.readouterr().err


def test_hyper_defaults_and_bounds_live_on_the_fields():
    defaults = Hyper().scalars()
    assert defaults == {"lr": 3e-3, "clip_eps": 0.2, "gamma": 0.99, "gae_lambda": 0.95, "vf_coef": 0.5,
                        "ent_coef": 0.01, "max_grad_norm": 0.5, "huber_delta": 10.0, "lr_horizon": 0.0}
    assert to_dict(Experiment())["hyper"] == defaults
    assert {k: str(b) for k, b in Hyper.scalar_bounds().items()}["gamma"] == "in [0, 1]"
    assert str(Hyper.scalar_bounds()["lr_horizon"]) == ">= 0"  # 0: the run's own length
    with pytest.raises(ValueError, match="unknown hyperparameter 'lrr'"):
        Hyper.create(__import__("jaxpo").support.ippo(2), lrr=1.0)


def test_run_length_is_not_part_of_the_program():
    """steps → updates, rounded up to whole chunks; a run shorter than a chunk runs one
    chunk of its own length."""
    base = Experiment()
    config, updates = base.replace(run={"steps": 100_000}).chunking()
    assert config == base.config and updates == 50  # 49 updates of 2048 steps, rounded up to 5 chunks of 10
    config, updates = base.replace(run={"steps": 3 * 2048}).chunking()
    assert config == dataclasses.replace(base.config, updates_per_chunk=3) and updates == 3
    assert json.dumps(to_dict(base))  # plain data throughout
