"""JaxMARL's own IPPO scripts against jaxpo's configs of the same name, side by side.

    python benchmarks/peer.py fetch [--from GITDIR] [--rev REV]
    python benchmarks/peer.py pair --setting smax|mpe [--pairs 3] [--options default|jaxpo]
        [--updates N] [--warmup 1] [--calls 2] [--num-envs E] [--seeds R] [--xla-flags="--xla_A=1 --xla_B=2"]
        [--cpu-devices D]

``fetch`` copies JaxMARL's ``baselines/IPPO/{ippo_rnn_smax,ippo_ff_mpe}.py`` and their
``config/*.yaml``, unmodified, from a JaxMARL git directory (a clone or a bare mirror) into
``.peer/jaxmarl/`` (ignored by git; no peer code enters the project), with the commit in
``.peer/jaxmarl/COMMIT.json``.

``pair`` runs the two sides alternately (peer, jaxpo, jaxpo, peer, peer, jaxpo, ...), each
in its own fresh process, and prints JSON lines on stdout (everything else on stderr):

* the peer: its script imported from ``.peer/jaxmarl/`` as it is, its ``make_train(config)``
  on its own yaml with two overrides, ``NUM_ENVS`` = E and ``TOTAL_TIMESTEPS`` = updates × E ×
  ``NUM_STEPS`` (so ``NUM_UPDATES`` = updates). As the script's own ``main`` does, the train
  function is vmapped over R keys split from ``PRNGKey(SEED)``; jitted, lowered and compiled
  (``compile_s``), ``--warmup`` untimed calls, then ``--calls`` timed calls, each a whole
  training of the updates from its initialisation. ``hydra`` and ``omegaconf`` (used by the
  scripts' ``main`` only) are stubbed in ``sys.modules`` where they are not installed, and
  ``wandb`` always: each update's host callback calls ``wandb.log``, which would log (or,
  without ``wandb.init``, raise); the stub's does nothing, the callback itself still runs.
* jaxpo: ``benchmarks/throughput.py --config jaxpo/experiments/configs/jaxmarl_<name>.yaml
  --kinds train`` at the same E, R, warm-up calls and timed calls of a chunk of the same
  number of updates (its ``init`` is a separate program, run before and not timed).

Both sides do the same work per update (E × ``NUM_STEPS`` env steps, the same epochs and
minibatches; ``pair`` refuses configs that disagree). ``--options default``: XLA's default
compiler options on both sides (jaxpo via ``throughput.py --xla-defaults``); ``--options
jaxpo``: jaxpo's options on this backend (``jaxpo.program.compiled.compiler_options``) on
both, the peer's through ``XLA_FLAGS``. ``--xla-flags`` go to both sides' ``XLA_FLAGS``; an
option they name is left to them on both sides, as jaxpo does. An inherited ``XLA_FLAGS``
and the persistent compile cache (``JAX_COMPILATION_CACHE_DIR``) are removed from both
sides' environment, so the options are the stated ones and compiles are real.

``--cpu-devices D`` sets ``JAX_NUM_CPU_DEVICES=D`` in both sides' environment (otherwise an
inherited one is removed: a CPU is one device), so on a CPU each side has D devices; jaxpo
runs its config with ``parallel: envs`` (``throughput.py --parallel envs``: each run's
environments split over the D devices, the gradient averaged over them), the peer's
script as it is (its program uses one device). It is not an XLA option, and it is not a
leaner program: it is jaxpo's data parallelism, which the peer's script does not have.

Lines: one per process (``side``, the settings, ``compile_s``, ``timed_s``, ``call_s``,
``env_steps_per_s`` = calls × updates × E × T × R / ``timed_s``, ``peak_rss_mib``, backend,
device, versions, commits, ``xla_options``, ``load_avg`` before and after, ``config``: the
side's key settings; jaxpo's ``start_s`` instead of ``compile_s``), one per pair (``ratio`` =
jaxpo / peer env-steps/s; ``startup_ratio`` = jaxpo / peer startup seconds) and a last one
with the ratios' min, median and max and the startup ratios.

Startup is what a side takes before its first update can run: the peer's ``compile_s`` (its
one program, initialisation inside, jitted, lowered and compiled), jaxpo's ``start_s``
(``Trainer.start``: its init and chunk programs built at once, as its driver builds them,
and init run). Counting jaxpo's chunk alone would leave out its init program's build.
Where the startup goes, stage by stage, as jax records it on both sides
(``throughput.BuildStages``): the peer's ``compile_stages`` and jaxpo's ``start_stages``,
``{program: {"trace_s", "lower_s", "xla_compile_s"}}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEER_DIR = ROOT / ".peer" / "jaxmarl"
PEER_SUBDIR = "baselines/IPPO"
SETTINGS = {  # setting: (peer script, its config, jaxpo's config of the same name, default updates)
    "smax": ("ippo_rnn_smax.py", "config/ippo_rnn_smax.yaml", "jaxpo/experiments/configs/jaxmarl_ippo_rnn_smax.yaml", 5),
    "mpe": ("ippo_ff_mpe.py", "config/ippo_ff_mpe.yaml", "jaxpo/experiments/configs/jaxmarl_ippo_ff_mpe.yaml", 3),
}
DEFAULT_MIRROR = "/work/.mirror/FLAIROx+JaxMARL/repo"
# jaxpo's names of the settings that make equal work, and the peer's (``pair`` checks they agree)
EQUAL_WORK = (("env", "ENV_NAME"), ("num_envs", "NUM_ENVS"), ("num_steps", "NUM_STEPS"), ("num_epochs", "UPDATE_EPOCHS"),
              ("num_minibatches", "NUM_MINIBATCHES"))
PEER_KEYS = ("MAP_NAME", "ENV_KWARGS", "TOTAL_TIMESTEPS", "NUM_UPDATES", "NUM_ACTORS", "MINIBATCH_SIZE",
             "FC_DIM_SIZE", "GRU_HIDDEN_DIM", "ACTIVATION", "LR", "ANNEAL_LR", "SEED")
JAXPO_KEYS = ("env", "env_kwargs", "num_envs", "num_steps", "num_epochs", "num_minibatches", "updates_per_chunk",
              "hidden", "recurrent", "shared_trunk", "critic_input")
JAXPO_FIELDS = ("start_s", "start_stages", "compile_s", "init_compile_s", "timed_s", "env_steps_per_s",
                "baseline_rss_mib", "peak_rss_mib", "device_peak_mib", "backend", "device_kind", "num_devices",
                "jax_version", "xla_defaults", "parallel")
HOW_TO_GET = ("get a JaxMARL git directory with the session's fetch tool (source github:FLAIROx/JaxMARL), "
              "or `git clone https://github.com/FLAIROx/JaxMARL`, then run "
              "`python benchmarks/peer.py fetch --from PATH`")


def throughput():
    """``benchmarks/throughput.py`` as a module (the jaxpo side, and its helpers), imported on
    first use: it imports jax and jaxpo, which argument errors need not wait for."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import throughput as module

    return module


def positive_int(text: str) -> int:
    value = int(text) if text.lstrip("-").isdigit() else None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def count(text: str) -> int:
    value = int(text) if text.lstrip("-").isdigit() else None
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def xla_flags(text: str) -> str:
    bad = [t for t in text.split() if not (t.startswith("--xla_") and "=" in t)]
    if bad:
        raise argparse.ArgumentTypeError(f"each flag must look like --xla_NAME=VALUE, got {bad[0]!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="peer.py", description="JaxMARL's IPPO scripts against jaxpo (module docstring).")
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="copy the peer's scripts and configs into .peer/jaxmarl/")
    f.add_argument("--from", dest="source", default=os.environ.get("JAXMARL_GIT", DEFAULT_MIRROR),
                   help="a JaxMARL clone or bare git directory (default $JAXMARL_GIT or the session mirror)")
    f.add_argument("--rev", default="HEAD", help="the commit to take the files from")
    for name in ("pair", "side"):
        q = sub.add_parser(name, help="alternate pairs of processes, JSON lines" if name == "pair" else argparse.SUPPRESS)
        q.add_argument("--setting", required=True, choices=sorted(SETTINGS))
        q.add_argument("--options", default="default", choices=("default", "jaxpo"),
                       help="XLA's default compiler options on both sides, or jaxpo's on both")
        q.add_argument("--updates", type=positive_int, default=None,
                       help="updates per call on both sides (default: smax 5, mpe 3)")
        q.add_argument("--warmup", type=count, default=1, help="untimed calls after compiling")
        q.add_argument("--calls", type=positive_int, default=2, help="timed calls")
        q.add_argument("--num-envs", type=positive_int, default=None, help="E (default: the configs' own)")
        q.add_argument("--seeds", type=positive_int, default=1, help="R runs in one program (peer: vmap over keys)")
        q.add_argument("--xla-flags", type=xla_flags, default="", help="XLA_FLAGS for both sides, after an equals sign: --xla-flags='--xla_A=1 --xla_B=2'")
        q.add_argument("--cpu-devices", type=positive_int, default=None,
                       help="JAX_NUM_CPU_DEVICES for both sides; jaxpo splits its environments over them")
        q.add_argument("--timeout", type=seconds, default=900.0, help="seconds per measuring process (jaxpo's throughput.py parent: 30 more)")
        if name == "pair":
            q.add_argument("--pairs", type=positive_int, default=3, help="pairs of processes, alternating order")
        q.set_defaults(parser=q)
    return p


# ---------------------------------------------------------------- configs


def peer_yaml(path) -> dict:
    """A peer config as hydra reads it: YAML with OmegaConf's floats (``1e7`` is a float)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
        r"^(?:[-+]?[0-9]+(?:_[0-9]+)*\.[0-9]*(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+(?:_[0-9]+)*[eE][-+]?[0-9]+"
        r"|\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+0123456789."))
    with open(path) as f:
        return yaml.load(f, Loader=Loader)


def peer_config(setting: str, num_envs: int, updates: int) -> dict:
    """The peer's yaml with the harness's two overrides: ``NUM_ENVS`` and ``TOTAL_TIMESTEPS``
    (``updates`` × ``NUM_ENVS`` × ``NUM_STEPS``, so ``NUM_UPDATES`` is ``updates``)."""
    config = peer_yaml(PEER_DIR / SETTINGS[setting][1])
    config["NUM_ENVS"] = num_envs
    config["TOTAL_TIMESTEPS"] = updates * num_envs * config["NUM_STEPS"]
    return config


def jaxpo_config(setting: str, num_envs: int | None, updates: int):
    """jaxpo's config of ``setting`` at E = ``num_envs`` (None: the file's own) and K =
    ``updates``, as ``throughput.py --config`` reads it (``Config``'s checks included)."""
    return throughput().file_config(str(ROOT / SETTINGS[setting][2]), num_envs, updates)


def unequal_work(config, peer: dict) -> list[str]:
    """The settings on which jaxpo's ``config`` and the peer's config dict disagree."""
    return [f"{ours} {getattr(config, ours)!r} != {theirs} {peer[theirs]!r}"
            for ours, theirs in EQUAL_WORK if getattr(config, ours) != peer[theirs]]


def check_args(args) -> None:
    """Fills the defaults and refuses, naming the argument, what cannot run, before anything
    compiles: an E jaxpo's config checks refuse, a missing peer, configs of unequal work."""
    parser, (script, _, _, updates) = args.parser, SETTINGS[args.setting]
    args.updates = args.updates or updates
    try:
        config = jaxpo_config(args.setting, args.num_envs, args.updates)
    except ValueError as err:
        parser.error(f"argument --num-envs: {err}")
    args.num_envs = config.num_envs
    if (args.cpu_devices or 1) > 1:  # jaxpo's own check of its environments' split (Trainer's)
        from jaxpo.program.compiled import _check_env_split

        try:
            _check_env_split(dataclasses.replace(config, parallel="envs"), args.cpu_devices)
        except ValueError as err:
            parser.error(f"argument --cpu-devices: {err}")
    if not (PEER_DIR / script).is_file() or not (PEER_DIR / "COMMIT.json").is_file():
        parser.error(f"argument --setting: the peer's {script} is not in {PEER_DIR}: {HOW_TO_GET}")
    unequal = unequal_work(config, peer_config(args.setting, args.num_envs, args.updates))
    if unequal:
        parser.error(f"argument --setting: jaxpo's and the peer's {args.setting} configs differ: " + "; ".join(unequal))


# ---------------------------------------------------------------- the peer's process


def stub_modules() -> list[str]:
    """``hydra`` and ``omegaconf`` in ``sys.modules`` where not installed (the scripts use them
    in ``main`` only); ``wandb`` always (its ``log``, called by each update's callback, does
    nothing). The names stubbed."""
    import importlib.util
    import types

    stubbed = []
    if importlib.util.find_spec("hydra") is None:
        sys.modules["hydra"] = types.SimpleNamespace(main=lambda *a, **k: (lambda fn: fn))
        stubbed.append("hydra")
    if importlib.util.find_spec("omegaconf") is None:
        to_container = staticmethod(lambda config, **kwargs: config)
        sys.modules["omegaconf"] = types.SimpleNamespace(OmegaConf=type("OmegaConf", (), {"to_container": to_container}))
        stubbed.append("omegaconf")
    sys.modules["wandb"] = types.SimpleNamespace(log=lambda *a, **k: None, init=lambda *a, **k: None)
    return stubbed + ["wandb"]


def measure_peer(args) -> dict:
    """The peer's side (module docstring): its own ``make_train``, vmapped over R keys."""
    import importlib.metadata
    import importlib.util

    stubbed = stub_modules()
    script = PEER_DIR / SETTINGS[args.setting][0]
    spec = importlib.util.spec_from_file_location(f"jaxmarl_peer_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import jax

    config = peer_config(args.setting, args.num_envs, args.updates)
    train = module.make_train(config)  # fills NUM_UPDATES, NUM_ACTORS, MINIBATCH_SIZE
    if config["NUM_UPDATES"] != args.updates:
        raise RuntimeError(f"the peer's NUM_UPDATES is {config['NUM_UPDATES']}, not {args.updates}")
    keys = jax.random.split(jax.random.PRNGKey(config["SEED"]), args.seeds)  # as its main does
    baseline = throughput().rss_mib()
    t0 = time.perf_counter()
    with throughput().BuildStages() as built:
        compiled = jax.jit(jax.vmap(train)).lower(keys).compile()
    compile_s = time.perf_counter() - t0
    for _ in range(args.warmup):
        jax.block_until_ready(compiled(keys))
    call_s, t0 = [], time.perf_counter()
    for _ in range(args.calls):
        out = compiled(keys)
        if args.calls > 1:  # each call's end, for the line's call_s (the last one's block ends the timing)
            jax.block_until_ready(out)
        call_s.append(time.perf_counter() - t0 - sum(call_s))
    jax.block_until_ready(out)
    timed_s = time.perf_counter() - t0
    env_steps = args.calls * args.updates * args.num_envs * config["NUM_STEPS"] * args.seeds
    commit = json.loads((PEER_DIR / "COMMIT.json").read_text())["commit"]
    return dict(
        num_steps=config["NUM_STEPS"], calls=args.calls, compile_s=round(compile_s, 3), compile_stages=built.stages,
        timed_s=round(timed_s, 4),
        call_s=[round(s, 3) for s in call_s], env_steps_per_s=round(env_steps / timed_s, 1),
        baseline_rss_mib=round(baseline, 1), peak_rss_mib=round(throughput().rss_mib(), 1),
        device_peak_mib=throughput()._round(throughput().device_peak_mib()), backend=jax.default_backend(),
        device_kind=jax.devices()[0].device_kind, jax_version=jax.__version__,
        jaxmarl_version=importlib.metadata.version("jaxmarl"), peer_commit=commit[:7], stubbed=stubbed,
        config={theirs: config[theirs] for _, theirs in EQUAL_WORK} | {k: config[k] for k in PEER_KEYS if k in config},
    )


def side(args) -> int:
    """The hidden ``side`` command: the peer's process; its line on stdout, all else on stderr."""
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # the script's prints must not corrupt the JSON
    try:
        record = measure_peer(args)
    finally:
        sys.stdout = real_stdout
    print(json.dumps(record), flush=True)
    return 0


# ---------------------------------------------------------------- options and processes


def options_in_effect(options: str, backend: str, flags: str) -> dict:
    """The compiler options both sides compile with besides ``flags`` (``--xla-flags``): none
    for ``default``; for ``jaxpo``, jaxpo's own on ``backend`` less those ``flags`` name, as
    ``jaxpo.program.compiled.compiler_options`` leaves those to ``XLA_FLAGS``."""
    from jaxpo.program.compiled import CPU_COMPILER_OPTIONS

    if options == "default" or backend != "cpu":  # off CPU jaxpo keeps XLA's defaults
        return {}
    return {name: value for name, value in CPU_COMPILER_OPTIONS.items() if name not in flags}


def side_env(which: str, args, backend: str) -> dict:
    """The environment of a side's process: no inherited ``XLA_FLAGS`` or compile cache;
    ``--xla-flags`` on both; for the peer the options in effect as flags too (jaxpo's
    process passes them to ``compile`` itself, or none with ``--xla-defaults``)."""
    unset = ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR", "JAX_NUM_CPU_DEVICES")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    own = options_in_effect(args.options, backend, args.xla_flags) if which == "peer" else {}
    flags = " ".join([args.xla_flags] + [f"--{name}={value}" for name, value in own.items()]).strip()
    devices = {"JAX_NUM_CPU_DEVICES": str(args.cpu_devices)} if args.cpu_devices else {}
    return {**env, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1", **({"XLA_FLAGS": flags} if flags else {}), **devices}


def side_argv(which: str, args) -> list[str]:
    """The command of a side's process."""
    common = ["--num-envs", str(args.num_envs), "--seeds", str(args.seeds), "--warmup", str(args.warmup)]
    if which == "peer":
        return [sys.executable, os.path.abspath(__file__), "side", "--setting", args.setting, "--options", args.options,
                "--updates", str(args.updates), "--calls", str(args.calls), *common]
    return [sys.executable, os.path.abspath(throughput().__file__), "--config", str(ROOT / SETTINGS[args.setting][2]),
            "--kinds", "train", "--updates-per-chunk", str(args.updates), "--chunks", str(args.calls),
            "--min-seconds", "0", "--timeout", str(args.timeout), *common] \
        + (["--xla-defaults"] if args.options == "default" else []) \
        + (["--parallel", "envs"] if (args.cpu_devices or 1) > 1 else [])


def schedule(pairs: int) -> list[tuple[int, str]]:
    """``(pair, side)`` in running order: the peer first in even pairs, jaxpo first in odd ones."""
    return [(i, s) for i in range(pairs) for s in (("peer", "jaxpo") if i % 2 == 0 else ("jaxpo", "peer"))]


def pair_line(i: int, records: dict) -> dict:
    """Pair ``i``'s line from its two records: each side's env-steps/s and jaxpo / peer, and
    each side's startup (the seconds before its first update can run) and jaxpo / peer."""
    rate = {s: records.get(s, {}).get("env_steps_per_s") for s in ("peer", "jaxpo")}
    ratio = round(rate["jaxpo"] / rate["peer"], 3) if rate["peer"] and rate["jaxpo"] else None
    # the peer's one program holds its initialisation; jaxpo's start builds both of its programs
    startup = {"peer": records.get("peer", {}).get("compile_s"), "jaxpo": records.get("jaxpo", {}).get("start_s")}
    startup_ratio = round(startup["jaxpo"] / startup["peer"], 3) if startup["peer"] and startup["jaxpo"] else None
    return dict(pair=i + 1, order=[s for j, s in schedule(i + 1) if j == i], peer_env_steps_per_s=rate["peer"],
                jaxpo_env_steps_per_s=rate["jaxpo"], ratio=ratio, peer_startup_s=startup["peer"],
                jaxpo_startup_s=startup["jaxpo"], startup_ratio=startup_ratio)


def summarise(lines: list[dict]) -> dict:
    """Pair lines -> the last line: their ratios' min, median and max (a pair without a ratio left out)."""
    ratios = [line["ratio"] for line in lines if line.get("ratio") is not None]
    out = dict(summary=True, pairs=len(lines), ratios=ratios)
    if ratios:
        out.update(ratio_min=min(ratios), ratio_median=round(statistics.median(ratios), 3), ratio_max=max(ratios))
    startup = [line["startup_ratio"] for line in lines if line.get("startup_ratio") is not None]
    if startup:
        out.update(startup_ratios=startup, startup_ratio_max=max(startup))
    return out


def load_avg() -> list[float]:
    """The 1/5/15-minute load averages, also printed to stderr."""
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"[peer] load average {load}", file=sys.stderr, flush=True)
    return load


def jaxpo_commit() -> str | None:
    """jaxpo's commit, ``+dirty`` with uncommitted changes (``$JAXPO_COMMIT`` without a git checkout)."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return os.environ.get("JAXPO_COMMIT")
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def run_side(which: str, args, backend: str, commit: str | None) -> dict:
    """Runs one side's process; its line (with an ``error`` field where it gave none)."""
    env, before, start = side_env(which, args, backend), load_avg(), time.perf_counter()
    print(f"[peer] {which} {args.setting} E={args.num_envs} R={args.seeds} options={args.options} "
          f"XLA_FLAGS={env.get('XLA_FLAGS', '')!r} cpu_devices={args.cpu_devices}", file=sys.stderr, flush=True)
    out, error = {}, None
    limit = args.timeout + (30 if which == "jaxpo" else 0)  # throughput.py's parent gives its child args.timeout
    try:
        proc = subprocess.run(side_argv(which, args), env=env, stdout=subprocess.PIPE, text=True, timeout=limit)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        out = lines[-1] if lines else {}
        error = out.get("error") or (None if proc.returncode == 0 and out else f"exit {proc.returncode}")
    except subprocess.TimeoutExpired:
        error = f"timed out after {limit:g} s"
    if which == "jaxpo" and out and not error:  # throughput.py's train line, in this harness's fields
        out = dict(num_steps=out["num_steps"], calls=out["chunks_timed"], **{k: out.get(k) for k in JAXPO_FIELDS},
                   jaxpo_commit=commit, config={k: out.get(k) for k in JAXPO_KEYS})
    record = dict(side=which, setting=args.setting, options=args.options, cpu_devices=args.cpu_devices,
                  xla_flags=env.get("XLA_FLAGS", ""),
                  xla_options=options_in_effect(args.options, backend, args.xla_flags), num_envs=args.num_envs,
                  runs=args.seeds, updates=args.updates, warmup=args.warmup, **out)
    return dict(record, **({"error": error} if error else {}), load_avg_before=before, load_avg_after=load_avg(),
                process_wall_s=round(time.perf_counter() - start, 1))


def pair(args) -> int:
    """The ``pair`` command: alternating processes, their lines, each pair's ratio, the summary."""
    if os.environ.get("XLA_FLAGS"):
        print(f"[peer] the inherited XLA_FLAGS {os.environ['XLA_FLAGS']!r} are not passed on: use --xla-flags",
              file=sys.stderr)
    probe = subprocess.run([sys.executable, "-c", "import jax; print(jax.default_backend())"],
                           env=side_env("jaxpo", args, ""), capture_output=True, text=True, timeout=300)
    backend = probe.stdout.split()[-1] if probe.returncode == 0 and probe.stdout.split() else "unknown"
    commit = jaxpo_commit()
    settings = dict(setting=args.setting, options=args.options, num_envs=args.num_envs, runs=args.seeds,
                    updates=args.updates, backend=backend, cpu_devices=args.cpu_devices)
    records, lines = {}, []
    for i, which in schedule(args.pairs):
        record = run_side(which, args, backend, commit)
        print(json.dumps(record), flush=True)
        records.setdefault(i, {})[which] = record
        if len(records[i]) == 2:
            lines.append({**pair_line(i, records[i]), **settings})
            print(json.dumps(lines[-1]), flush=True)
    print(json.dumps({**summarise(lines), **settings}), flush=True)
    return 0 if all(line["ratio"] is not None for line in lines) else 1


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "fetch":
        return fetch(args)
    check_args(args)
    return side(args) if args.command == "side" else pair(args)



def fetch(args) -> int:
    """Copies the peer's files at ``--rev`` into ``.peer/jaxmarl/``; records the commit."""
    src = Path(args.source)
    git = ["git", f"--git-dir={src if (src / 'HEAD').is_file() else src / '.git'}"]
    rev = subprocess.run(git + ["rev-parse", "--verify", f"{args.rev}^{{commit}}"], capture_output=True, text=True)
    if rev.returncode != 0:
        raise SystemExit(f"peer.py fetch: no JaxMARL commit {args.rev!r} in {str(src)!r} "
                         f"({rev.stderr.strip() or 'not a git directory'}): {HOW_TO_GET}")
    commit, files = rev.stdout.strip(), {}
    for script, config, _, _ in SETTINGS.values():
        for name in (script, config):
            show = subprocess.run(git + ["show", f"{commit}:{PEER_SUBDIR}/{name}"], capture_output=True)
            if show.returncode != 0:
                raise SystemExit(f"peer.py fetch: {PEER_SUBDIR}/{name} is not in JaxMARL {commit[:7]}: "
                                 f"{show.stderr.decode().strip()}")
            (PEER_DIR / name).parent.mkdir(parents=True, exist_ok=True)
            (PEER_DIR / name).write_bytes(show.stdout)
            files[f"{PEER_SUBDIR}/{name}"] = hashlib.sha256(show.stdout).hexdigest()
    record = dict(repo="FLAIROx/JaxMARL", commit=commit, source=str(src), files=files)
    (PEER_DIR / "COMMIT.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"JaxMARL {commit[:7]}: {len(files)} files in {PEER_DIR}", file=sys.stderr)
    return 0




if __name__ == "__main__":
    sys.exit(main())
