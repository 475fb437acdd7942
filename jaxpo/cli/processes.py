"""The command line's options for many processes (hosts) and for the persistent compile cache.

``--coordinator``, ``--num-processes``, ``--process-id`` (each defaulting to JAX's
environment variable), ``--distributed`` and ``--peer-timeout`` join a multi-process
run (``jaxpo.program.parallel.initialize``) before JAX starts; ``--compile-cache`` /
``--no-compile-cache`` choose where compiled programs are kept
(``jaxpo.program.compile_cache``).
"""

from __future__ import annotations

import argparse
import os

from jaxpo.program import parallel


def add_compile_cache(cmd: argparse.ArgumentParser) -> None:
    """Adds ``--compile-cache DIR`` and ``--no-compile-cache`` to a command.

    Args:
        cmd: the command's parser.
    """
    group = cmd.add_argument_group(
        "compile cache", "Compiled programs are kept on disk, so running the same config again skips most of "
        "the compile (JAX's persistent compilation cache). Programs that compile in under 0.5 s are not stored; "
        "$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS, where set, is the threshold instead.")
    group.add_argument("--compile-cache", metavar="DIR", default=None,
                       help="the cache directory (default: $JAX_COMPILATION_CACHE_DIR, else "
                            "$XDG_CACHE_HOME/jaxpo/xla, i.e. ~/.cache/jaxpo/xla)")
    group.add_argument("--no-compile-cache", dest="compile_cache", action="store_const", const=False,
                       help="compile everything afresh and store nothing")


def use_compile_cache(args: argparse.Namespace) -> None:
    """Turns the persistent compile cache on or off as the flags ask (on by default),
    before anything compiles.

    Args:
        args: the parsed flags (``compile_cache``: a directory, None, or False for off).

    Raises:
        ValueError: if the cache directory cannot be used.
    """
    from jaxpo.program.compile_cache import disable_compile_cache, enable_compile_cache

    if args.compile_cache is False:
        disable_compile_cache()
    else:
        enable_compile_cache(args.compile_cache)


def add_processes(cmd: argparse.ArgumentParser) -> None:
    """Adds the flags of a multi-process run to a command (defaults from JAX's environment variables).

    Args:
        cmd: the command's parser.
    """
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
    """Environment variable ``name`` as ``type_``; a bad one ends the command with a usage error."""
    try:
        return type_(os.environ[name])
    except ValueError:
        raise SystemExit(f"jaxpo: error: environment variable {name} must be an integer, "
                         f"got {os.environ[name]!r}") from None


def start_processes(args: argparse.Namespace) -> None:
    """Joins a multi-process run when the flags ask for one (before JAX starts).

    Args:
        args: the parsed flags: ``coordinator``, ``num_processes``, ``process_id``,
            ``distributed``, ``peer_timeout``.

    Raises:
        ValueError: if ``--distributed`` comes with the explicit flags, or they are
            incomplete or out of range (a ``FieldError`` naming the argument).
        ConnectionError: if the coordinator cannot be reached in time.
    """
    flags = (args.coordinator, args.num_processes, args.process_id)
    if args.distributed and any(f is not None for f in flags):
        raise ValueError("--distributed finds the cluster itself; give it without --coordinator, --num-processes "
                         "and --process-id")
    if args.distributed or any(f is not None for f in flags):
        parallel.initialize(*flags, timeout_s=args.peer_timeout)
