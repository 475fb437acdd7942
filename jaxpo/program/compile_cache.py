"""JAX's persistent compilation cache, for jaxpo's programs.

A jaxpo program (init, chunk, evaluation) is compiled once per static config; with
the cache on, a later process running the same config loads the compiled program
from disk instead of compiling it again (tracing and lowering still run). The CLI
turns it on by default (``--no-compile-cache`` turns it off; ``--compile-cache DIR``
moves it). XLA keys each entry by the program, the jax/XLA version, the devices and
the compile options, so any change compiles afresh and an entry is never stale.

The cache executes what it finds: like JAX's own, it must be a directory only you
can write to.
"""

from __future__ import annotations

import os

import jax
from jax.experimental.compilation_cache import compilation_cache as _jax_cache

# Programs that compile faster than this are not worth a disk entry (unless the user's
# JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS says otherwise).
MIN_COMPILE_SECONDS = 0.5
USER_THRESHOLD = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def default_dir() -> str:
    """``$JAX_COMPILATION_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/jaxpo/xla``
    (``~/.cache/jaxpo/xla``)."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxpo", "xla")


def enable_compile_cache(path: str | os.PathLike | None = None) -> str:
    """Stores and reuses compiled programs in ``path`` (JAX's persistent compilation cache).

    Affects every later compile of this process; programs that compile in under 0.5 s
    are not stored, or under ``$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` where set (JAX's
    own setting: 0 stores every program). The cache executes what it finds: use a directory
    only you can write to.

    Args:
        path: the cache directory, created if missing (default: ``$JAX_COMPILATION_CACHE_DIR``
            when set, else ``$XDG_CACHE_HOME/jaxpo/xla``, i.e. ``~/.cache/jaxpo/xla``).

    Returns:
        The directory, as an absolute path.

    Raises:
        ValueError: naming ``path`` when it cannot be created or is not writable.
    """
    path = os.path.abspath(os.fspath(default_dir() if path is None else path))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise ValueError(f"compile cache directory {path!r} cannot be created: {err.strerror}") from None
    if not os.access(path, os.W_OK):
        raise ValueError(f"compile cache directory {path!r} is not writable")
    _jax_cache.reset_cache()  # a cache opened earlier in this process would keep its old directory
    _jax_cache.set_cache_dir(path)
    if USER_THRESHOLD not in os.environ:  # a user's threshold stands: JAX read it at import
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path


def disable_compile_cache() -> None:
    """No persistent cache for later compiles of this process."""
    _jax_cache.reset_cache()
    jax.config.update("jax_compilation_cache_dir", None)
