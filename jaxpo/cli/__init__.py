"""The command line: ``jaxpo train``, ``sweep``, ``eval``, ``render``, ``export``,
``envs`` and ``docs``.

``jaxpo.cli.parser`` builds the parser from the experiment's typed fields;
``jaxpo.cli.training`` runs train and sweep; ``jaxpo.cli.tools`` the commands on
run directories and the environment list; ``jaxpo.cli.processes`` the options of
multi-process runs and of the compile cache; ``jaxpo.cli.errors`` names each error's
fields as the flags that set them.
"""

from __future__ import annotations

import sys

from jaxpo.cli.errors import report
from jaxpo.cli.parser import build_parser, parse_env_arg
from jaxpo.cli.processes import use_compile_cache
from jaxpo.cli.tools import cmd_docs, cmd_envs, cmd_eval, cmd_export, cmd_render
from jaxpo.cli.training import cmd_run

__all__ = ["build_parser", "main", "parse_env_arg"]

COMMANDS = {"train": cmd_run, "sweep": cmd_run, "envs": cmd_envs, "eval": cmd_eval, "render": cmd_render,
            "export": cmd_export, "docs": cmd_docs}


def main(argv: list[str] | None = None) -> int:
    """Runs one command of the command line (the ``jaxpo`` console script).

    Args:
        argv: the arguments after the program's name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 when a run diverged, 2 for a usage error.
    """
    args = build_parser().parse_args(argv)
    if hasattr(args, "compile_cache"):
        try:
            use_compile_cache(args)
        except ValueError as err:
            return report(args.command, err)
    return COMMANDS[args.command](args)


