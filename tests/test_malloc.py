"""``jaxpo._malloc``: ``import jaxpo`` caps glibc's malloc arenas (counted by glibc's own
``malloc_stats``), leaves a limit the user set alone, and does nothing off glibc."""

import os
import subprocess
import sys
import types

import pytest

from jaxpo import _malloc

THREADS = 12  # more than ARENAS; glibc's own limit (8 per core) leaves more than ARENAS on any machine

# Threads that are all alive at once, each allocating, filling and checking a block of its own:
# glibc gives each one a new arena up to its limit. Then one "Arena N:" line per arena, on stderr.
COUNT = """
import ctypes, threading
{prelude}
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
all_started = threading.Barrier({threads})
def allocate(i):
    all_started.wait()
    block = libc.malloc(1 << 16)
    ctypes.memset(block, i, 1 << 16)
    assert ctypes.string_at(block, 1 << 16) == bytes([i]) * (1 << 16)
    libc.free(block)
threads = [threading.Thread(target=allocate, args=(i,)) for i in range({threads})]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc.malloc_stats()
"""

glibc_only = pytest.mark.skipif(not (sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION")),
                                reason="malloc arenas are glibc's (Linux)")


def arenas(prelude: str, **env: str) -> int:
    """How many arenas a fresh process has after ``prelude`` and THREADS allocating threads."""
    base = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}
    proc = subprocess.run([sys.executable, "-c", COUNT.format(prelude=prelude, threads=THREADS)],
                          capture_output=True, text=True, timeout=60, env={**base, **env})
    assert proc.returncode == 0, proc.stderr
    return sum(line.startswith("Arena ") for line in proc.stderr.splitlines())


@glibc_only
def test_import_jaxpo_caps_the_arenas_of_threads_started_after():
    assert arenas("") > _malloc.ARENAS  # glibc's default: the count sees the threads' arenas
    assert arenas("import jaxpo") == _malloc.ARENAS


@glibc_only
def test_a_limit_the_user_set_stands():
    assert arenas("import jaxpo", MALLOC_ARENA_MAX="6") == 6  # not ARENAS
    assert arenas("import jaxpo", GLIBC_TUNABLES="glibc.malloc.arena_max=3") == 3


def test_nothing_is_done_off_linux_or_where_the_user_chose(monkeypatch):
    assert _malloc.user_chose_arenas({"MALLOC_ARENA_MAX": "8"})
    assert _malloc.user_chose_arenas({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=8"})
    assert not _malloc.user_chose_arenas({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"})
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    calls = []
    musl = types.SimpleNamespace(mallopt=lambda *args: calls.append(args) or 1)  # no gnu_get_libc_version
    monkeypatch.setattr(_malloc.ctypes, "CDLL", lambda name: musl)
    assert _malloc.cap_arenas() is False and calls == []
    monkeypatch.setattr(sys, "platform", "darwin")
    assert _malloc.cap_arenas() is False
