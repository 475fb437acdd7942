"""The peer harness (``benchmarks/peer.py``) without the peer's code or any timing: its
arguments refused by name before anything compiles, the compiler options each side gets
(none of jaxpo's with ``--options default``; exactly jaxpo's on both with ``--options
jaxpo``), the alternating order and the ratio arithmetic.

Modules under test: ``benchmarks/peer.py`` and ``benchmarks/throughput.py``'s
``--xla-defaults``, ``--parallel``, ``--config`` (the file's own hyperparameters) and its
environment-only kinds."""

import argparse
import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import peer  # noqa: E402
import throughput  # noqa: E402

import jaxpo  # noqa: E402
from jaxpo.program import compiled  # noqa: E402

CPU_FLAGS = " ".join(f"--{name}={value}" for name, value in compiled.CPU_COMPILER_OPTIONS.items())


def refusal(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        peer.main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, named", [
    (["--setting", "smax", "--pairs", "0"], "argument --pairs: must be a positive integer, got '0'"),
    (["--setting", "go"], "argument --setting: invalid choice: 'go'"),
    (["--setting", "mpe", "--updates", "two"], "argument --updates"),
    (["--setting", "mpe", "--warmup", "-1"], "argument --warmup"),
    (["--setting", "mpe", "--xla-flags=-O3"], "argument --xla-flags: each flag must look like --xla_NAME=VALUE, got '-O3'"),
    (["--setting", "smax", "--num-envs", "6"], "argument --num-envs: Config.num_minibatches (4) must divide"),
    (["--setting", "smax", "--cpu-devices", "0"], "argument --cpu-devices: must be a positive integer"),
    (["--setting", "smax", "--cpu-devices", "3"],
     "argument --cpu-devices: Config.parallel='envs' splits num_envs (128) over 3 devices: num_envs must be a multiple of 3"),
    (["--setting", "smax", "--num-envs", "8", "--cpu-devices", "4"],
     "argument --cpu-devices: Config.parallel='envs': num_minibatches (4) must divide each device's 2 training samples"),
])
def test_bad_arguments_are_refused_by_name(capsys, argv, named):
    assert named in refusal(capsys, ["pair", *argv])


def test_xla_flags_are_given_with_an_equals_sign():
    flags = "--xla_backend_optimization_level=2 --xla_cpu_enable_fast_math=false"
    args = peer.build_parser().parse_args(["pair", "--setting", "mpe", f"--xla-flags={flags}"])
    assert args.xla_flags == flags and args.options == "default" and args.pairs == 3


def write_peer(folder: Path, minibatches: int) -> None:
    (folder / "config").mkdir(parents=True)
    (folder / "ippo_ff_mpe.py").write_text("def make_train(config):\n    raise AssertionError\n")
    (folder / "COMMIT.json").write_text(json.dumps({"commit": "0" * 40}))
    (folder / "config" / "ippo_ff_mpe.yaml").write_text(
        f'"ENV_NAME": "MPE_simple_spread_v3"\n"NUM_ENVS": 16\n"NUM_STEPS": 128\n"TOTAL_TIMESTEPS": 1e7\n'
        f'"UPDATE_EPOCHS": 4\n"NUM_MINIBATCHES": {minibatches}\n"LR": 2.5e-4\n')


def test_a_missing_peer_or_unequal_work_is_refused_before_compiling(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(peer, "PEER_DIR", tmp_path / "none")
    err = refusal(capsys, ["pair", "--setting", "mpe"])
    assert "argument --setting" in err and "fetch --from" in err and "github:FLAIROx/JaxMARL" in err
    monkeypatch.setattr(peer, "PEER_DIR", tmp_path / "jaxmarl")
    write_peer(tmp_path / "jaxmarl", minibatches=2)
    err = refusal(capsys, ["pair", "--setting", "mpe"])
    assert "configs differ: num_minibatches 4 != NUM_MINIBATCHES 2" in err


def test_the_peer_config_is_its_yaml_with_envs_and_total_steps_only(monkeypatch, tmp_path):
    monkeypatch.setattr(peer, "PEER_DIR", tmp_path)
    write_peer(tmp_path, minibatches=4)
    assert peer.peer_yaml(tmp_path / "config" / "ippo_ff_mpe.yaml")["TOTAL_TIMESTEPS"] == 1e7  # a float, as hydra reads it
    config = peer.peer_config("mpe", num_envs=1024, updates=3)
    assert config == {"ENV_NAME": "MPE_simple_spread_v3", "NUM_ENVS": 1024, "NUM_STEPS": 128,
                      "TOTAL_TIMESTEPS": 3 * 1024 * 128, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "LR": 2.5e-4}
    assert peer.unequal_work(peer.jaxpo_config("mpe", 1024, 3), config) == []


def args_for(options: str, flags: str = "", cpu_devices: int | None = None) -> argparse.Namespace:
    return argparse.Namespace(setting="mpe", options=options, xla_flags=flags, num_envs=16, seeds=2, warmup=1,
                              updates=3, calls=2, timeout=60.0, cpu_devices=cpu_devices)


def test_each_side_gets_the_same_options(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", CPU_FLAGS)  # an inherited XLA_FLAGS reaches neither side
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/tmp/cache")
    for side in ("peer", "jaxpo"):
        env = peer.side_env(side, args_for("default"), "cpu")
        assert "XLA_FLAGS" not in env and "JAX_COMPILATION_CACHE_DIR" not in env
    assert peer.side_env("peer", args_for("jaxpo"), "cpu")["XLA_FLAGS"] == CPU_FLAGS
    assert "XLA_FLAGS" not in peer.side_env("jaxpo", args_for("jaxpo"), "cpu")  # jaxpo passes them to compile
    assert "XLA_FLAGS" not in peer.side_env("peer", args_for("jaxpo"), "gpu")  # off CPU jaxpo keeps XLA's defaults
    mine = "--xla_backend_optimization_level=2"  # a flag the user names is theirs on both sides
    assert peer.side_env("peer", args_for("jaxpo", mine), "cpu")["XLA_FLAGS"] == \
        f"{mine} --xla_cpu_experimental_ynn_fusion_type="
    assert peer.side_env("jaxpo", args_for("jaxpo", mine), "cpu")["XLA_FLAGS"] == mine
    assert peer.options_in_effect("jaxpo", "cpu", mine) == {"xla_cpu_experimental_ynn_fusion_type": ""}


def test_cpu_devices_reach_both_sides_and_split_jaxpo_s_environments(monkeypatch):
    """``--cpu-devices D``: both processes see D CPU devices, jaxpo's runs with ``parallel: envs``;
    without it an inherited device count reaches neither side (a CPU is one device)."""
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "8")
    parse = throughput.build_parser().parse_args
    for side in ("peer", "jaxpo"):
        assert "JAX_NUM_CPU_DEVICES" not in peer.side_env(side, args_for("jaxpo"), "cpu")
        assert peer.side_env(side, args_for("jaxpo", cpu_devices=2), "cpu")["JAX_NUM_CPU_DEVICES"] == "2"
    assert parse(peer.side_argv("jaxpo", args_for("jaxpo", cpu_devices=2))[2:]).parallel == "envs"
    assert parse(peer.side_argv("jaxpo", args_for("jaxpo"))[2:]).parallel is None  # the config's own layout
    assert "--parallel" not in peer.side_argv("peer", args_for("jaxpo", cpu_devices=2))  # its script, unmodified
    with pytest.raises(SystemExit, match="--phases times each phase on one device"):
        throughput.main(["--phases", "--parallel", "envs", "--num-envs", "8"])


def test_a_single_measurement_of_a_config_file_records_the_file_s_environment(monkeypatch):
    """``--single --config FILE`` (the process the parent starts, or a user's own) measures and
    labels the file's environment, not ``--env``'s default: the env-only kinds time that
    environment, and every record names it."""
    seen = []
    monkeypatch.setattr(throughput, "single", seen.append)
    smax = str(Path(__file__).resolve().parents[1] / "jaxpo/experiments/configs/jaxmarl_ippo_rnn_smax.yaml")
    assert throughput.main(["--single", "--config", smax, "--num-envs", "8"]) == 0
    (args,) = seen
    assert (args.env, dict(args.env_arg)["scenario"], args.num_steps) == ("HeuristicEnemySMAX", "2s3z", 128)
    assert (args.num_envs, args.preset) == ([8], "ippo")  # the command line's E, the file's support
    assert throughput.build_parser().parse_args(["--single"]).env == "MPE_simple_spread_v3"  # the default it replaced


def test_jaxpo_with_default_options_compiles_with_none_of_its_own(monkeypatch):
    """``--options default`` gives throughput.py ``--xla-defaults``, whose trainer's chunk then
    carries no compiler options (``compile`` adds its own to the jit's); the control, built the
    usual way while jaxpo's CPU options are on (the tests' XLA_FLAGS otherwise name them), carries them.
    The init program likewise: none of jaxpo's options at XLA's defaults, its own otherwise."""
    monkeypatch.setattr(compiled, "_known_cpu_options", dict)
    parse = throughput.build_parser().parse_args
    default, own = (parse(peer.side_argv("jaxpo", args_for(o))[2:]) for o in ("default", "jaxpo"))
    assert default.xla_defaults and not own.xla_defaults
    assert throughput.xla_options(default) == {}
    assert throughput.xla_options(own) == compiled.CPU_COMPILER_OPTIONS
    config = jaxpo.Config(env="public_goods", env_kwargs={"num_agents": 2}, num_envs=3, num_steps=2, hidden=(4,),
                          num_minibatches=1, num_epochs=1)
    hyper = jax.tree.map(lambda x: x[None], jaxpo.Hyper.create(jaxpo.support.ippo(2)))
    state = jax.eval_shape(jaxpo.trainer(config).init_runs, jax.random.split(jax.random.PRNGKey(0), 1), hyper)
    for xla_defaults, expected in ((True, ()), (False, tuple(compiled.CPU_COMPILER_OPTIONS.items()))):
        tr = throughput.make_trainer(config, xla_defaults) if xla_defaults else compiled.Trainer(config)
        assert tr.compiler_options == (None if xla_defaults else compiled.CPU_COMPILER_OPTIONS)
        lowered = tr.chunk_runs.lower(state, hyper)
        assert tuple(lowered._lowering._compiler_options_kvs) == expected  # what compile() starts from
        init = tr.init_runs.lower(jax.random.split(jax.random.PRNGKey(0), 1), hyper)
        init_expected = () if xla_defaults else tuple(compiled.CPU_INIT_COMPILER_OPTIONS.items())
        assert tuple(init._lowering._compiler_options_kvs) == init_expected  # init too: every program at XLA's defaults


def test_build_stages_are_jax_s_own_per_program_and_name_jaxpo_s_two():
    """``BuildStages`` records each program built inside its block, under the name jax gives
    it, with the seconds of its trace, lowering and XLA compile; nothing after the block.
    ``Trainer.start`` builds two programs, named ``init`` and ``chunk``."""
    inner = jax.jit(lambda x: jax.numpy.sin(x) * 2)
    x = jax.numpy.ones(3)
    with throughput.BuildStages() as built:
        jax.jit(lambda x: inner(x) + 1).lower(x).compile()
    assert list(built.stages) == ["<lambda>"]
    assert set(built.stages["<lambda>"]) == {"trace_s", "lower_s", "xla_compile_s"}
    jax.jit(lambda x: x * 3).lower(x).compile()
    assert list(built.stages) == ["<lambda>"]
    config = jaxpo.Config(env="public_goods", env_kwargs={"num_agents": 2}, num_envs=3, num_steps=2, hidden=(4,),
                          num_minibatches=1, num_epochs=1)
    tr = compiled.Trainer(config)
    keys = jax.random.split(jax.random.PRNGKey(0), 1)
    hyper = jax.tree.map(lambda x: x[None], jaxpo.Hyper.create(jaxpo.support.ippo(2)))
    with throughput.BuildStages() as built:
        jax.block_until_ready(tr.start(keys, hyper))
    assert {"init", "chunk"} <= set(built.stages)
    for program in ("init", "chunk"):
        assert set(built.stages[program]) == {"trace_s", "lower_s", "xla_compile_s"}
        assert all(seconds > 0 for seconds in built.stages[program].values())


def test_sides_alternate_and_ratios_are_jaxpo_over_peer():
    assert [s for _, s in peer.schedule(3)] == ["peer", "jaxpo", "jaxpo", "peer", "peer", "jaxpo"]
    line = peer.pair_line(1, {"peer": {"env_steps_per_s": 40_000.0}, "jaxpo": {"env_steps_per_s": 52_000.0}})
    assert line["ratio"] == 1.3 and line["order"] == ["jaxpo", "peer"] and line["pair"] == 2
    failed = peer.pair_line(0, {"peer": {"error": "exit 1"}, "jaxpo": {"env_steps_per_s": 52_000.0}})
    assert failed["ratio"] is None
    summary = peer.summarise([{"ratio": 1.3}, {"ratio": 0.9}, failed, {"ratio": 1.1}])
    assert summary["ratios"] == [1.3, 0.9, 1.1] and summary["pairs"] == 4
    assert (summary["ratio_min"], summary["ratio_median"], summary["ratio_max"]) == (0.9, 1.1, 1.3)
    assert peer.summarise([{"ratio": 1.0}, {"ratio": 1.5}])["ratio_median"] == 1.25
    # startup: the peer's one program (its init inside) against jaxpo's start (both of its programs)
    line = peer.pair_line(0, {"peer": {"env_steps_per_s": 1.0, "compile_s": 10.0},
                              "jaxpo": {"env_steps_per_s": 1.0, "start_s": 9.0, "compile_s": None}})
    assert (line["peer_startup_s"], line["jaxpo_startup_s"], line["startup_ratio"]) == (10.0, 9.0, 0.9)
    assert failed["startup_ratio"] is None
    summary = peer.summarise([line, failed, {"ratio": 1.0, "startup_ratio": 1.2}])
    assert summary["startup_ratios"] == [0.9, 1.2] and summary["startup_ratio_max"] == 1.2


def test_the_train_kind_times_jaxpo_s_start_or_the_command_line_s_own_build(capsys):
    """``throughput.py --kinds train``: with the trainer's own options, ``start_s`` is
    ``Trainer.start`` (init and chunk built as the driver builds them); with options of the
    command line's, the chunk is built again with them (``init_compile_s``, ``compile_s``)."""
    tiny = ["--single", "--env", "public_goods", "--env-arg", "num_agents=2", "--num-envs", "2", "--num-steps", "4",
            "--hidden", "4", "--num-epochs", "1", "--num-minibatches", "1", "--kinds", "train", "--chunks", "1",
            "--min-seconds", "0", "--warmup", "0"]
    for extra in ([], ["--backend-opt-level", "0"]):
        assert throughput.main(tiny + extra) == 0
        (line,) = [json.loads(out) for out in capsys.readouterr().out.splitlines()]
        assert line["kind"] == "train" and line["env_steps_per_s"] > 0 and line["updates_timed"] >= 1
        if extra:
            assert line["start_s"] is None and line["init_compile_s"] > 0 and line["compile_s"] > 0
        else:
            assert line["start_s"] > 0 and line["init_compile_s"] is None and line["compile_s"] is None


def test_the_environment_only_kinds_run_on_jaxmarl_environments(capsys):
    """``throughput.py --kinds raw env`` on SMAX: JaxMARL's own step with its action masks
    (the family's ``get_avail_actions``) and jaxpo's adapter, each a line with a rate."""
    env = "HeuristicEnemySMAX"
    assert throughput.main(["--single", "--env", env, "--num-envs", "2", "--num-steps", "2", "--kinds", "raw", "env",
                            "--min-seconds", "0", "--warmup", "0"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["kind"] for line in lines] == ["raw", "env"]
    assert all(line["env"] == env and line["calls_timed"] >= 3 and line["env_steps_per_s"] > 0 for line in lines)


def test_a_config_file_is_measured_with_its_own_hyperparameters_and_a_diverged_run_is_no_measurement(
        capsys, monkeypatch, tmp_path):
    """``throughput.py --config``: the file's ``hyper`` section and support, its annealed
    rate's horizon resolved to its own run length (left at 0 it would be 0 / 0 and every
    parameter NaN); a measurement whose loss is not finite prints an error line, no rate."""
    path = tmp_path / "tiny.yaml"
    path.write_text("config: {env: public_goods, env_kwargs: {num_agents: 2}, num_envs: 2, num_steps: 4, "
                    "updates_per_chunk: 1, num_epochs: 1, num_minibatches: 1, hidden: [4], anneal_lr: true}\n"
                    "hyper: {lr: 0.02, clip_eps: 0.1}\nsupport: {preset: mappo}\nrun: {steps: 48}\n")
    preset, hyper = throughput.file_hyper(str(path), 2)
    assert preset == "mappo"
    np.testing.assert_array_equal(hyper.lr, np.float32([0.02, 0.02]))
    np.testing.assert_array_equal(hyper.clip_eps, np.float32([0.1, 0.1]))
    np.testing.assert_array_equal(hyper.lr_horizon, np.float32([6, 6]))  # 48 steps / (2 envs × 4 steps)
    np.testing.assert_array_equal(hyper.S_A[0], np.ones((2, 2)))  # mappo: the team's advantage
    argv = ["--single", "--config", str(path), "--num-envs", "2", "--kinds", "train", "--chunks", "1", "--min-seconds", "0"]
    assert throughput.main(argv) == 0
    (line,) = [json.loads(out) for out in capsys.readouterr().out.splitlines()]
    assert "error" not in line and line["env_steps_per_s"] > 0 and line["preset"] == "mappo"

    own = throughput.file_hyper

    def diverging(path, runs):  # the file's, with a rate no update survives
        preset, hyper = own(path, runs)
        return preset, hyper.replace(lr=np.full_like(hyper.lr, np.nan))

    monkeypatch.setattr(throughput, "file_hyper", diverging)
    assert throughput.main(argv) == 0
    (line,) = [json.loads(out) for out in capsys.readouterr().out.splitlines()]
    assert line["error"] == "non-finite policy loss in the timed updates" and "env_steps_per_s" not in line
