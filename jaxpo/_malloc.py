"""The one process-wide setting jaxpo makes to the C allocator: glibc's malloc arenas
capped at ``ARENAS`` (Linux with glibc only; elsewhere nothing is done).

Why. glibc gives a thread an arena of its own when it first allocates, up to 8 per
core, and each arena keeps what is freed into it for reuse. orbax starts about twenty
short-lived threads for every checkpoint save (its event loops' executors, its
serialize, write and commit threads), and their allocations land in arena after
arena: with glibc's default, a run's resident memory kept growing with its saves and
evaluations (``benchmarks/memory.py``) while the Python heap stayed flat. With four
arenas it stays flat, at a small cost in CPU training speed; fewer cost more.
``docs/speed.md``, "Memory over a long run", holds the measurements of both.

When. glibc fixes how many arenas it will make the first time it needs a ninth one, so
the cap is set on ``import jaxpo``, before jaxpo starts any thread (JAX's, orbax's,
tensorstore's). A process that already has more arenas keeps them and makes no more.

Where a user chose for themselves (``MALLOC_ARENA_MAX`` or the ``glibc.malloc.arena_max``
tunable in ``GLIBC_TUNABLES``), their choice stands.
"""

from __future__ import annotations

import ctypes
import os
import sys

ARENAS = 4
M_ARENA_MAX = -8  # mallopt's parameter number for the arena limit (glibc's malloc.h)


def user_chose_arenas(environ=os.environ) -> bool:
    """Whether the environment sets glibc's arena limit itself."""
    return "MALLOC_ARENA_MAX" in environ or "glibc.malloc.arena_max" in environ.get("GLIBC_TUNABLES", "")


def cap_arenas(limit: int = ARENAS) -> bool:
    """Caps glibc's malloc arenas at ``limit`` for this process; True where it did.

    False, doing nothing, off Linux, under a C library other than glibc (musl, for
    one, has no arenas), or where the user set the limit (``user_chose_arenas``)."""
    if not sys.platform.startswith("linux") or user_chose_arenas():
        return False
    try:
        libc = ctypes.CDLL(None)  # the symbols the process already has: its C library's among them
        libc.gnu_get_libc_version  # glibc's alone
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_ARENA_MAX, limit) == 1  # mallopt answers 1 on success
