"""The command line's parser, generated from the experiment's typed fields.

Every flag of ``jaxpo train`` / ``jaxpo sweep`` comes from a field of a section
(``jaxpo.experiments.experiment``): ``--num-envs`` from ``Config.num_envs``, ``--lr``
from ``Hyper.lr``, … with choices, types, defaults and help read from the
declarations, so a new field is a new flag. A flag's value lands in ``args`` under
its field's path (``config.num_envs``).
"""

from __future__ import annotations

import argparse
import ast
import typing

from jaxpo.cli.processes import add_compile_cache, add_processes
from jaxpo.experiments.experiment import SECTIONS, Experiment, section_fields, to_dict
from jaxpo.program.fields import choices, coerce, describe, field_docs, optional_inner

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
    """Reads one ``--env-arg``.

    Args:
        text: ``KEY=VALUE``; VALUE is a Python literal when it parses as one, else a string.

    Returns:
        ``(key, value)``.

    Raises:
        argparse.ArgumentTypeError: if there is no ``=``.
    """
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--env-arg must look like KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        pass  # keep it a string
    return key, value


def _sweep_arg(text: str) -> tuple[str, str, object]:
    """One ``--sweep NAME=VALUES`` as ``(kind, name, values)`` (``jaxpo.experiments.settings.parse_axis``)."""
    from jaxpo.experiments.settings import parse_axis

    try:
        return parse_axis(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _typed_arg(hint, flag: str):
    """The converter of a flag's text to its field's type ``hint`` (``jaxpo.program.fields.coerce``)."""
    def convert(text: str):
        try:
            return coerce(text, hint, flag)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {describe(hint)}, got {text!r}") from None

    convert.__name__ = flag  # argparse names the converter in some messages
    return convert


def _add_section(parser: argparse.ArgumentParser, section: str) -> None:
    """Adds a flag per field of ``section``, its value stored under the field's path (``config.num_envs``)."""
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
                                "hyperparameter, support field (preset, kappa, graph, matrices) or program field")


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxpo`` command's parser, every subcommand and flag.

    Returns:
        The parser; ``train`` / ``sweep`` flags store their values under the fields'
            paths, so ``args`` maps straight onto the experiment's sections.
    """
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
        add_processes(cmd)
        add_compile_cache(cmd)
    envs = sub.add_parser("envs", help="list the environments: agents, spaces and coupling at default parameters",
                          description="Lists every environment; --coupling NAME measures one environment's coupling "
                                      "by stepping it (jaxpo.envs.measure_coupling) instead.")
    envs.add_argument("--names", action="store_true", help="only the names, one per line")
    envs.add_argument("--coupling", metavar="NAME", default=None,
                      help="measure NAME's coupling: which agents' actions change which agents' rewards")
    envs.add_argument("--env-arg", dest="env_kwargs", action="append", type=parse_env_arg, default=[],
                      metavar="KEY=VALUE", help="with --coupling: an environment parameter, repeatable")
    envs.add_argument("--horizon", type=int, default=1, metavar="H",
                      help="with --coupling: a change within H steps counts (default: 1)")
    envs.add_argument("--num-states", type=int, default=64, metavar="S",
                      help="with --coupling: states sampled (default: 64)")
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


def _add_policy_commands(sub) -> None:
    """Adds ``jaxpo eval`` and ``jaxpo render``, which read a run directory's checkpoints."""
    ev = sub.add_parser("eval", help="evaluate the trained policies of a run directory",
                        description="Loads each run's newest checkpoint and plays --episodes episodes per run "
                                    "(compiled, vmapped over episodes and runs); prints JSON and writes "
                                    "RUN_DIR/checkpoint_eval.csv: mean, std and IQM episode return, mean episode "
                                    "length (and win rate). (eval.csv is evaluation during training: --eval-every.)")
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
        cmd.add_argument("--env-arg", dest="env_kwargs", action="append", type=parse_env_arg, default=[],
                         metavar="KEY=VALUE", help="play on the training environment with this parameter changed, "
                                                   "repeatable; its shapes must stay (e.g. --env-arg max_steps=200)")
        add_compile_cache(cmd)
    ev.add_argument("--episodes", type=int, default=100, help="episodes per run (default: 100)")
    rd.add_argument("--out", default="episode.gif", metavar="FILE.gif|FILE.mp4",
                    help="where to write the animation (default: episode.gif)")
    rd.add_argument("--fps", type=int, default=10, help="frames per second (default: 10)")
