"""Command line: ``jaxpo train``, ``jaxpo sweep`` and ``jaxpo envs``.

Every flag is generated from the experiment's typed fields (``jaxpo.experiment``):
``--num-envs`` from ``Config.num_envs``, ``--lr`` from ``Hyper.lr``, … with choices,
types, defaults and help read from the declarations, so a new field is a new flag.
Values combine in this order: defaults, then ``--config FILE.yaml``, then flags.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import pathlib
import re
import sys
import typing

import numpy as np

from jaxpo.program import parallel
from jaxpo.experiments.experiment import SECTIONS, Experiment, dump_yaml, load_yaml, section_fields, to_dict
from jaxpo.program.fields import choices, coerce, describe, field_docs, optional_inner
from jaxpo.run.report import final_mean

TITLES = {
    "config": "program (static: each distinct value compiles its own program)",
    "hyper": "hyperparameters (traced: one program serves every value)",
    "support": "support matrices (traced)",
    "run": "run settings (the program does not change)",
    "sweep": "sweep",
}
# Fields without a flag of their own: env_kwargs is --env-arg; sweep axes are --sweep; segments come in files.
SPECIAL = {("config", "env_kwargs"), ("sweep", "grid"), ("sweep", "random"), ("sweep", "segments")}


def parse_env_arg(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` -> ``(key, value)``; VALUE is a Python literal when it parses as one."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--env-arg must look like KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        pass  # keep it a string
    return key, value


def _sweep_arg(text: str) -> tuple[str, str, object]:
    from jaxpo.experiments.settings import parse_axis

    try:
        return parse_axis(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _typed_arg(hint, flag: str):
    def convert(text: str):
        try:
            return coerce(text, hint, flag)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {describe(hint)}, got {text!r}") from None

    convert.__name__ = flag  # argparse names the converter in some messages
    return convert


def _add_section(parser: argparse.ArgumentParser, section: str) -> None:
    docs, defaults = field_docs(SECTIONS[section]), to_dict(Experiment())[section]
    metavars = {int: "INT", float: "FLOAT", str: "TEXT"}
    group = parser.add_argument_group(TITLES[section])
    for name, hint in section_fields(section).items():
        if (section, name) in SPECIAL:
            continue
        flag, dest = "--" + name.replace("_", "-"), f"{section}.{name}"
        default = defaults[name]
        doc = docs.get(name, "").replace("``", "").rstrip(".")
        text = f"{doc} (default: {'none' if default is None else default})"
        if hint is bool:
            group.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                               help=text)
        elif typing.get_origin(hint) is tuple:
            item = typing.get_args(hint)[0]
            group.add_argument(flag, dest=dest, nargs="+", type=_typed_arg(item, flag), default=argparse.SUPPRESS,
                               metavar=item.__name__.upper(), help=text)
        else:
            allowed = choices(hint)
            metavar = None if allowed else metavars[optional_inner(hint) or hint]
            # with choices, argparse itself reports "invalid choice: ... (choose from ...)"
            group.add_argument(flag, dest=dest, type=str if allowed else _typed_arg(hint, flag), choices=allowed,
                               default=argparse.SUPPRESS, metavar=metavar, help=text)
    if section == "config":
        group.add_argument("--env-arg", dest="config.env_kwargs", action="append", type=parse_env_arg,
                           default=argparse.SUPPRESS, metavar="KEY=VALUE",
                           help="environment parameter, repeatable (e.g. --env-arg local_ratio=0.5)")
    if section == "sweep":
        group.add_argument("--sweep", dest="sweep.axes", action="append", type=_sweep_arg, default=argparse.SUPPRESS,
                           metavar="NAME=VALUES",
                           help="an axis, repeatable: NAME=V1,V2,... (grid) or NAME=loguniform(LOW,HIGH) | "
                                "uniform(LOW,HIGH) | choice(V1,V2,...) (random, drawn --samples times). NAME: any "
                                "hyperparameter, support field (preset, kappa, matrices) or program field")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxpo",
        description="Cooperative multi-agent policy optimisation defined by support matrices (S_A, S_R).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {
        "train": ("train one setting × seeds (default: κ=1 advantage support on MPE simple_spread)",
                  "Trains in one compiled program; writes <out>/<name>/metrics.csv, summary.csv, groups.csv, "
                  "learning_curve.png and config.yaml."),
        "sweep": ("train a sweep: grid and random axes × seeds, one compiled program per static config",
                  "Writes <out>/<name>/metrics.csv (long format), summary.csv (per run), groups.csv (per setting: "
                  "mean and IQM with 95%% bootstrap CIs), sweep.png and sweep.yaml."),
    }
    for command, (short, description) in commands.items():
        cmd = sub.add_parser(command, help=short, description=description)
        cmd.add_argument("--config", metavar="FILE.yaml", help="load an experiment file; flags override it")
        cmd.add_argument("--print-config", action="store_true",
                         help="print the resolved experiment as YAML (loadable with --config) and exit")
        cmd.add_argument("--resume", metavar="RUN_DIR",
                         help="continue RUN_DIR (e.g. runs/<name>) from its latest complete checkpoint; flags may "
                              "change only how it runs and logs (and --steps, for a run of one group)")
        for section in SECTIONS:
            if section != "sweep" or command == "sweep":
                _add_section(cmd, section)
        _add_processes(cmd)
        _add_compile_cache(cmd)
    envs = sub.add_parser("envs", help="list the environments: agents, spaces and coupling at default parameters")
    envs.add_argument("--names", action="store_true", help="only the names, one per line")
    _add_policy_commands(sub)
    ex = sub.add_parser("export", help="export evaluations as marl-eval JSON",
                        description="Reads eval_episodes.csv and absolute.csv (evaluation during training: "
                                    "--eval-every) of each RUN_DIR and writes one marl-eval JSON file: "
                                    "env -> task -> algorithm -> seed_<n> -> step_<k> / absolute_metrics.")
    ex.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", help="run or sweep directories (a suite: several)")
    ex.add_argument("--out", metavar="FILE.json", default=None,
                    help="where to write (default: RUN_DIR/marl_eval.json for one directory; required for several)")
    ex.add_argument("--env-name", default=None, help="marl-eval's env name (default: from the config, e.g. SMAX)")
    ex.add_argument("--task", default=None, help="marl-eval's task name (default: the map or scenario)")
    ex.add_argument("--algorithm", default=None, help="the algorithm's name (default: the support preset)")
    docs = sub.add_parser("docs", help="serve the documentation site locally (mkdocs serve), or build it",
                          description="Serves the site of the source checkout jaxpo runs from (its mkdocs.yml), "
                                      "rebuilding pages as they are edited; --build writes it instead, strictly.")
    docs.add_argument("--address", default="127.0.0.1:8000", metavar="HOST:PORT", help="where to serve it")
    docs.add_argument("--build", metavar="DIR", default=None,
                      help="build the site into DIR with `mkdocs build --strict` and exit")
    return parser


def _add_compile_cache(cmd: argparse.ArgumentParser) -> None:
    group = cmd.add_argument_group(
        "compile cache", "Compiled programs are kept on disk, so running the same config again skips most of "
        "the compile (JAX's persistent compilation cache).")
    group.add_argument("--compile-cache", metavar="DIR", default=None,
                       help="the cache directory (default: $JAX_COMPILATION_CACHE_DIR, else "
                            "$XDG_CACHE_HOME/jaxpo/xla, i.e. ~/.cache/jaxpo/xla)")
    group.add_argument("--no-compile-cache", dest="compile_cache", action="store_const", const=False,
                       help="compile everything afresh and store nothing")


def use_compile_cache(args: argparse.Namespace) -> None:
    """The persistent compile cache as the flags ask (on by default), before anything compiles."""
    from jaxpo.program.compile_cache import disable_compile_cache, enable_compile_cache

    if args.compile_cache is False:
        disable_compile_cache()
    else:
        enable_compile_cache(args.compile_cache)


def _add_policy_commands(sub) -> None:
    ev = sub.add_parser("eval", help="evaluate the trained policies of a run directory",
                        description="Loads each run's newest checkpoint and plays --episodes episodes per run "
                                    "(compiled, vmapped over episodes and runs); prints JSON and writes "
                                    "RUN_DIR/checkpoint_eval.csv: mean, std and IQM episode return (and win "
                                    "rate). (eval.csv is evaluation during training: --eval-every.)")
    rd = sub.add_parser("render", help="render one episode of a trained policy to a GIF or MP4",
                        description="Plays one episode of a run's trained policy and draws every step with the "
                                    "environment's render (public_goods, traffic_grid, wireless, MPE).")
    for cmd in (ev, rd):
        cmd.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with checkpoints, e.g. runs/<name>")
        cmd.add_argument("--run", type=int, metavar="K", default=None if cmd is ev else 0,
                         help="the run id (as in metrics.csv) " + ("(default: every run)" if cmd is ev else
                                                                   "(default: 0)"))
        cmd.add_argument("--seed", type=int, default=0, help="seed of the episodes (default: 0)")
        mode = cmd.add_mutually_exclusive_group()
        mode.add_argument("--greedy", dest="greedy", action="store_true", default=True,
                          help="take each agent's most likely action (default)")
        mode.add_argument("--sample", dest="greedy", action="store_false", help="sample actions from the policy")
        _add_compile_cache(cmd)
    ev.add_argument("--episodes", type=int, default=100, help="episodes per run (default: 100)")
    rd.add_argument("--out", default="episode.gif", metavar="FILE.gif|FILE.mp4",
                    help="where to write the animation (default: episode.gif)")
    rd.add_argument("--fps", type=int, default=10, help="frames per second (default: 10)")


def cmd_eval(args: argparse.Namespace) -> int:
    """``jaxpo eval``: every checkpointed run (or ``--run K``), one JSON line each, and checkpoint_eval.csv."""
    from jaxpo.run import checkpoint
    from jaxpo.run.evaluate import latest_groups, load_runs, run_episodes, summarize
    from jaxpo.run.report import write_csv

    try:
        if args.episodes < 1:
            raise ValueError(f"--episodes must be a positive integer, got {args.episodes}")
        groups = latest_groups(args.run_dir)
        if not groups:
            checkpoint.restore(args.run_dir)  # raises the precise error
        rows, known = [], []
        for step in sorted(groups.values()):
            config, params, runs, meta = load_runs(args.run_dir, step)
            known += [r["run_id"] for r in runs]
            pick = [i for i, r in enumerate(runs) if args.run in (None, r["run_id"])]
            if not pick:
                continue
            params = _take_runs(params, pick)
            ids = [runs[i]["run_id"] for i in pick]
            returns, won, rate = run_episodes(config, params, ids, args.episodes, args.seed, args.greedy)
            for i, stats in zip(pick, summarize(returns, won, rate)):
                run = runs[i]
                rows.append({"run_id": run["run_id"], "label": run["label"], "setting": run["setting"],
                             "seed": run["seed"], "update": int(meta["chunk"]) * config.updates_per_chunk,
                             "greedy": args.greedy, **stats})
        if not rows:
            raise ValueError(f"--run {args.run} is out of range: the checkpointed runs of {args.run_dir!r} have "
                             f"run ids {min(known)}..{max(known)}")
    except ValueError as err:
        return _error("eval", err)
    header = list(dict.fromkeys(k for row in rows for k in row))
    write_csv(os.path.join(args.run_dir, "checkpoint_eval.csv"), header, [[row.get(h, "") for h in header] for row in rows])
    for row in rows:
        print(json.dumps(row))
    return 0


def _take_runs(tree, index):
    """Leaves ``[R, ...] -> [len(index), ...]``."""
    import jax

    return jax.tree.map(lambda x: x[np.asarray(index)], tree)


def cmd_render(args: argparse.Namespace) -> int:
    """``jaxpo render``: one episode of run ``--run`` to ``--out``."""
    from jaxpo.run.evaluate import check_animation_path, load_policy, render_episode

    try:
        check_animation_path(args.out)  # before the (slower) loading
        policy = load_policy(args.run_dir, run=args.run, greedy=args.greedy)
        frames = render_episode(policy, args.out, seed=args.seed, fps=args.fps)
    except ValueError as err:
        return _error("render", err)
    print(json.dumps({"out": args.out, "frames": frames, "run": policy.run["label"], "update": policy.update}))
    return 0


def _add_processes(cmd: argparse.ArgumentParser) -> None:
    group = cmd.add_argument_group(
        "many processes (hosts)",
        "Start the same command on every process; the runs (or, with --parallel envs, each run's environments) "
        "are split over all their devices, and process 0 writes every output.")
    env = lambda name, type_=str: None if os.environ.get(name) is None else _env_value(name, type_)
    group.add_argument("--coordinator", metavar="HOST:PORT", default=env("JAX_COORDINATOR_ADDRESS"),
                       help="address of process 0, the same for every process (default: $JAX_COORDINATOR_ADDRESS)")
    group.add_argument("--num-processes", type=int, metavar="P", default=env("JAX_NUM_PROCESSES", int),
                       help="number of processes (default: $JAX_NUM_PROCESSES)")
    group.add_argument("--process-id", type=int, metavar="I", default=env("JAX_PROCESS_ID", int),
                       help="this process's index in [0, P) (default: $JAX_PROCESS_ID)")
    group.add_argument("--distributed", action="store_true",
                       help="join a cluster JAX finds itself (TPU pod slices, SLURM, Open MPI): the same command "
                            "on every worker, no other flag")
    group.add_argument("--peer-timeout", type=int, default=30, metavar="SECONDS",
                       help="end with an error when the coordinator cannot be reached, or a peer stops "
                            "answering, for this long (default: 30)")


def _env_value(name: str, type_: type) -> object:
    try:
        return type_(os.environ[name])
    except ValueError:
        raise SystemExit(f"jaxpo: error: environment variable {name} must be an integer, "
                         f"got {os.environ[name]!r}") from None


def start_processes(args: argparse.Namespace) -> None:
    """Joins a multi-process run when the flags ask for one (before JAX starts)."""
    flags = (args.coordinator, args.num_processes, args.process_id)
    if args.distributed and any(f is not None for f in flags):
        raise ValueError("--distributed finds the cluster itself; give it without --coordinator, --num-processes "
                         "and --process-id")
    if args.distributed or any(f is not None for f in flags):
        parallel.initialize(*flags, timeout_s=args.peer_timeout)


def experiment_from_args(args: argparse.Namespace) -> Experiment:
    """Defaults (or, with ``--resume``, the checkpoint's experiment), then ``--config``,
    then the flags given. Raises ValueError naming a bad value."""
    from jaxpo.experiments.sweeps import resume_experiment

    resume = getattr(args, "resume", None)
    if resume and {"run.out", "run.name"} & set(vars(args)):
        raise ValueError("--resume RUN_DIR names the run's directory; give it without --out and --name")
    experiment = resume_experiment(resume) if resume else Experiment()
    if args.config:
        experiment = load_yaml(args.config, base=experiment)
    sections: dict[str, dict] = {}
    for dest, value in vars(args).items():
        if "." in dest:
            section, name = dest.split(".", 1)
            sections.setdefault(section, {})[name] = value
    if "env_kwargs" in sections.get("config", {}):
        sections["config"]["env_kwargs"] = {**experiment.config.env_args, **dict(sections["config"]["env_kwargs"])}
    axes = sections.get("sweep", {}).pop("axes", [])
    for kind, name, values in axes:
        sections["sweep"][kind] = {**getattr(experiment.sweep, kind), **sections["sweep"].get(kind, {}), name: values}
    return experiment.replace(**sections)


def _mean(values: np.ndarray) -> float | None:
    """The mean of the finite ``values``, or None when there is none (JSON has no NaN)."""
    finite = np.asarray(values, np.float64)[np.isfinite(values)]
    return round(float(finite.mean()), 4) if finite.size else None


# Python arguments whose flags are not an experiment field's (``path``: render's --out), and
# experiment fields whose flag is not their name.
ARGUMENT_FLAGS = {"coordinator": "--coordinator", "num_processes": "--num-processes", "process_id": "--process-id",
                  "timeout_s": "--peer-timeout", "run": "--run", "episodes": "--episodes", "path": "--out"}
FIELD_FLAGS = {"env_kwargs": "--env-arg", "grid": "--sweep", "random": "--sweep"}
SECTION = r"(?:config|hyper|support|run|sweep|Config|Hyper)\."
# One pass, so nothing is rewritten twice; never inside a word, path or dotted name.
NAMES = re.compile(r"(?<![\w/.=-])(?:"
                   rf"(?:{SECTION})?(?P<kw>[a-z_]+)='(?P<value>[^']*)'"  # field='value'  -> --field value
                   r"|sweep\.(?:grid|random)\.(?P<axis>\w+)"  # sweep.grid.lr   -> --sweep lr
                   rf"|{SECTION}(?P<field>[a-z_]+)(?![\w.])"  # run.checkpoint_every -> --checkpoint-every
                   r"|`(?P<tick>[a-z_]+)`"  # `process_id`    -> --process-id
                   r"|(?P<arg>[a-z_]+)=(?P<number>-?\d+)(?![\w.])"  # run=7 -> --run 7 (arguments only)
                   r")")


def as_flags(message: str) -> str:
    """A library message in the CLI's words: the fields and arguments it names
    (``run.checkpoint_every``, ``on_nan='mask'``, ``run=7``, a backticked `` `process_id` ``)
    as the flags that set them (``--checkpoint-every``, ``--on-nan mask``, ``--run 7``,
    ``--process-id``). Anything else (run labels such as ``lr=1e+30/seed0``, paths) stays."""
    fields = {name for section in SECTIONS for name in section_fields(section)} | set(FIELD_FLAGS)
    flags = {**{name: "--" + name.replace("_", "-") for name in fields}, **FIELD_FLAGS, **ARGUMENT_FLAGS}

    def flag(m: re.Match) -> str:
        if m["kw"] is not None:
            return f"{flags[m['kw']]} {m['value']}" if m["kw"] in fields else m[0]
        if m["axis"] is not None:
            return f"--sweep {m['axis']}"
        if m["field"] is not None:
            return flags[m["field"]] if m["field"] in fields else m[0]
        if m["tick"] is not None:
            return flags.get(m["tick"], m[0])
        return f"{ARGUMENT_FLAGS[m['arg']]} {m['number']}" if m["arg"] in ARGUMENT_FLAGS else m[0]

    return NAMES.sub(flag, message)


def _error(command: str, err: Exception) -> int:
    message = str(err)  # a config file's errors name its keys, everything else in flags
    print(f"jaxpo {command}: error: {message if message.startswith('config file ') else as_flags(message)}",
          file=sys.stderr)
    return 2


def cmd_run(args: argparse.Namespace) -> int:
    """``jaxpo train`` and ``jaxpo sweep``: check everything, then train."""
    from jaxpo.run.guard import NonFiniteError
    from jaxpo.experiments.sweeps import plan

    try:
        experiment = experiment_from_args(args)
        if args.print_config:
            print(dump_yaml(experiment), end="")
            return 0
        if args.command == "train" and experiment.sweep.axes:
            raise ValueError("this experiment has a sweep section; run it with `jaxpo sweep`")
        start_processes(args)
        ready = plan(experiment, resume=bool(args.resume))
    except (ValueError, ConnectionError) as err:
        return _error(args.command, err)
    try:
        return parallel.exit_on_error(_train if args.command == "train" else _sweep, ready)
    except NonFiniteError as err:
        print(f"jaxpo {args.command}: {as_flags(str(err))}", file=sys.stderr)
        return 1


def _train(ready) -> int:
    from jaxpo.experiments.sweeps import execute

    program = ready.programs[0]
    setting, config = program.settings[0], program.config
    env = config.make_env()
    actions = f"{env.num_actions}-dim continuous actions" if env.continuous else f"{env.num_actions} actions"
    print(f"env: {' '.join(map(str, filter(None, (config.env, config.env_args))))} — {env.num_agents} agents, {actions}")
    print(setting.support.describe())
    print(f"runs: {len(program.runs)} seed(s) × {program.num_updates} updates × {config.steps_per_update} env steps "
          f"= {program.num_updates * config.steps_per_update:,} env steps per run")
    result = execute(ready)
    program = result.programs[0]  # the plan is frozen: how it ran is the result's
    metrics, seconds, first = program.metrics, result.seconds, program.first_chunk_seconds
    trained = program.num_updates - program.resumed_updates  # in this process
    summary = {
        "return_before": _mean(metrics["return"][:, 0]),
        "return_after": _mean(final_mean(metrics["return"])),
        "wall_seconds": round(seconds, 1),
        "compile_seconds": None if np.isnan(first) else round(first, 1),  # None: nothing left to train
        "env_steps_per_second": None if np.isnan(first) else round(
            len(program.runs) * trained * config.steps_per_update / max(seconds - first, 1e-9)),
        "out_dir": ready.out_dir,
    }
    before = "n/a (no episode ended in the first update)" if summary["return_before"] is None else summary["return_before"]
    print(f"return (mean episode return per agent): before {before} → after {summary['return_after']}")
    if "win_rate" in metrics:
        summary["win_rate_before"] = _mean(metrics["win_rate"][:, 0])
        summary["win_rate_after"] = _mean(final_mean(metrics["win_rate"]))
        print(f"win rate: before {summary['win_rate_before']} → after {summary['win_rate_after']}")
    print(json.dumps(summary))
    return 0


def _sweep(ready) -> int:
    from jaxpo.experiments.sweeps import execute

    result = execute(ready, log=print)
    rows = [g for g in result.groups if g["metric"] == "final_return"]
    width = max(len("setting"), *(len(g["setting"]) for g in rows))
    print(f"{'setting':<{width}}  runs  final return: mean [95% CI]     IQM [95% CI]")
    for g in rows:
        print(f"{g['setting']:<{width}}  {g['runs']:>4}  {g['mean']:9.3f} [{g['mean_ci_low']:.3f}, {g['mean_ci_high']:.3f}]"
              f"  {g['iqm']:9.3f} [{g['iqm_ci_low']:.3f}, {g['iqm_ci_high']:.3f}]")
    print(json.dumps({
        "runs": len(result.runs), "settings": len(rows), "programs": len(result.programs),
        "chunk_compiles": [p.compiles for p in result.programs],
        "runs_per_group": [p.group_size for p in result.programs],
        "wall_seconds": round(result.seconds, 1), "out_dir": result.out_dir,
    }))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``jaxpo export``: marl-eval JSON of one or more run directories."""
    from jaxpo.run.export import marl_eval_results, merge, write_marl_eval

    try:
        if args.out is None and len(args.run_dirs) > 1:
            raise ValueError("--out FILE.json is needed to export several run directories into one file")
        out = args.out or os.path.join(args.run_dirs[0], "marl_eval.json")
        results = merge(*(marl_eval_results(d, env_name=args.env_name, task_name=args.task, algorithm=args.algorithm)
                          for d in args.run_dirs))
        write_marl_eval(out, results)
    except ValueError as err:
        return _error("export", err)
    print(json.dumps({"out": out, "run_dirs": args.run_dirs}))
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    """``jaxpo docs``: ``mkdocs serve`` (or ``build --strict``) on the checkout's mkdocs.yml."""
    import importlib.util
    import subprocess

    config = pathlib.Path(__file__).resolve().parents[1] / "mkdocs.yml"
    if not config.exists():
        return _error("docs", ValueError("the documentation is in jaxpo's source repository: clone it and "
                                         "`pip install -e \".[dev]\"` there"))
    if importlib.util.find_spec("mkdocs") is None:
        return _error("docs", ValueError("mkdocs is not installed: `pip install -e \".[dev]\"` in the checkout"))
    command = (["build", "--strict", "--site-dir", args.build] if args.build else
               ["serve", "--dev-addr", args.address])
    return subprocess.call([sys.executable, "-m", "mkdocs", *command, "--config-file", str(config)])


def cmd_envs(args: argparse.Namespace) -> int:
    from jaxpo.envs import describe, make, registered_names

    if args.names:
        print("\n".join(registered_names()))
        return 0
    rows = [["name", "N", "obs", "actions", "continuous", "coupling"]]
    for name in registered_names():  # each with its default parameters
        try:
            facts = describe(make(name))
        except ImportError as exc:  # an optional extra that is not installed: the row says which
            rows.append([name, "?", "?", "?", "?", str(exc)])
            continue
        rows.append([name, *(str(facts[k]) for k in ("num_agents", "obs_dim", "actions", "continuous", "coupling"))])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"train": cmd_run, "sweep": cmd_run, "envs": cmd_envs, "eval": cmd_eval, "render": cmd_render,
                "export": cmd_export, "docs": cmd_docs}
    if hasattr(args, "compile_cache"):
        try:
            use_compile_cache(args)
        except ValueError as err:
            return _error(args.command, err)
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
