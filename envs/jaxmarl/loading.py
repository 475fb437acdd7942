"""Importing JaxMARL: lazily, once, and without the text it prints while importing.

JaxMARL takes seconds to import and prints "Importing submoduled environments..." to
stdout, so nothing in ``jaxpo.envs`` imports it at module level. A family imports from
JaxMARL inside its methods, after :func:`load_jaxmarl` (which imports every JaxMARL
environment module; ``JaxMARLAdapter.from_name`` and ``Family.classes`` call it first),
or inside :func:`quiet_import` (brax, which JaxMARL imports only if it is installed).
"""

from __future__ import annotations

import contextlib
import functools
import io
import sys
from types import ModuleType


@contextlib.contextmanager
def quiet_import():
    """Swallows stdout for the duration and leaves ``sys.stdout``/``sys.stderr`` as found.

    ``contextlib.redirect_stdout`` alone does not work: JaxMARL's mabrax module sets
    ``sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__`` while importing, which
    drops any redirect (pytest's capture included) before the print. So the dunder
    streams are pointed at the sink / the current stderr for the duration too.

    Yields:
        Nothing; the body runs with stdout swallowed.
    """
    saved = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    sink = io.StringIO()
    sys.stdout = sys.__stdout__ = sink
    sys.__stderr__ = sys.stderr
    try:
        yield
    finally:
        sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__ = saved


@functools.cache
def load_jaxmarl() -> ModuleType:
    """Imports ``jaxmarl`` once, quietly.

    Returns:
        The ``jaxmarl`` module (its environment modules imported with it).
    """
    with quiet_import():
        import jaxmarl
    return jaxmarl
