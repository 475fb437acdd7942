"""How the command line names what an error is about: the flag that sets each field.

A library error that carries its field (``jaxpo.core.checks.FieldError``, and any
message whose parts name fields) is written with the flags from ``flag_names``, a
table built from the experiment's typed fields: ``config.num_envs`` reads
``--num-envs``, ``on_nan='mask'`` reads ``--on-nan mask``. Any other error, a config
file's among them (those name the file's keys), is shown as it is.
"""

from __future__ import annotations

import functools
import sys

from jaxpo.core.checks import NamedMessage
from jaxpo.experiments.experiment import SECTIONS, section_fields
from jaxpo.experiments.settings import sweepable

# The functions' arguments that a command's own flags set (render's ``path`` is --out).
ARGUMENT_FLAGS = {"coordinator": "--coordinator", "num_processes": "--num-processes", "process_id": "--process-id",
                  "timeout_s": "--peer-timeout", "run": "--run", "episodes": "--episodes", "path": "--out"}
# Fields whose flag is not their name; segments have none (they come in files).
FIELD_FLAGS = {"config.env_kwargs": "--env-arg", "sweep.grid": "--sweep", "sweep.random": "--sweep"}
NO_FLAG = {"sweep.segments"}


@functools.lru_cache(maxsize=1)
def flag_names() -> dict[str, str]:
    """The flag of every field and argument an error can name.

    Returns:
        path -> flag: ``{"config.num_envs": "--num-envs", "sweep.grid.lr": "--sweep lr",
            "process_id": "--process-id", …}``.
    """
    names = {f"{section}.{name}": "--" + name.replace("_", "-")
             for section in SECTIONS for name in section_fields(section)}
    names.update({f"sweep.{kind}.{axis}": f"--sweep {axis}" for axis in sweepable() for kind in ("grid", "random")})
    names.update(FIELD_FLAGS)
    names.update(ARGUMENT_FLAGS)
    return {path: flag for path, flag in names.items() if path not in NO_FLAG}


def in_flags(err: BaseException) -> str:
    """The error's message in the command line's words.

    Args:
        err: any exception; one whose message names fields (a ``FieldError``, a
            ``NonFiniteError``) has them written as flags.

    Returns:
        The message.
    """
    return err.named(flag_names(), flags=True) if isinstance(err, NamedMessage) else str(err)


def report(command: str, err: BaseException) -> int:
    """Prints ``jaxpo <command>: error: <message>`` to stderr.

    Args:
        command: the command's name (``train``, ``eval``, …).
        err: the error, its fields named as flags (``in_flags``).

    Returns:
        2, the exit status of a usage error.
    """
    print(f"jaxpo {command}: error: {in_flags(err)}", file=sys.stderr)
    return 2
