"""JaxMARL environments in jaxpo's array protocol (docs/design.md §3).

:class:`JaxMARLAdapter` wraps a JaxMARL ``MultiAgentEnv`` with discrete or continuous
(``Box``) actions so that it speaks dicts of agents on the inside and stacked arrays
on the outside:

    >>> env = JaxMARLAdapter.from_name("MPE_simple_spread_v3", local_ratio=0.5)
    >>> state, ts = env.reset(key)                     # ts.obs: float32 [N, O]
    >>> state, ts = env.step(key, state, actions)      # actions: int32 [N]
    >>> env = JaxMARLAdapter.from_name("MPE_simple_spread_v3", action_type="Continuous")
    >>> state, ts = env.step(key, state, actions)      # actions: float32 [N, A], clipped to the Box
    >>> env = JaxMARLAdapter.from_name("HeuristicEnemySMAX", scenario="3m")

The rooms: ``adapter`` (the shared adapter, which knows no family), ``family`` (what a
family states, and the defaults), ``registry`` (families by name), ``loading`` (the
lazy, quiet JaxMARL import), and one module per family, each stating its names and
arguments, observation layout, action masks, world state, coupling, win rule and
renderer: ``mpe``, ``smax``, ``switch_riddle``, ``hanabi``, ``overcooked``,
``overcooked_v2``, ``jaxnav``, ``mabrax``. Importing this package registers them in
that order (the order ``SUPPORTED_JAXMARL`` lists their names in); JaxMARL itself is
imported on first use (it takes seconds and prints to stdout on import).
"""

# The shipped families, registered in this order (a new family's module is named here, or imported by its user).
from . import mpe, smax, switch_riddle, hanabi, overcooked, overcooked_v2, jaxnav, mabrax  # noqa: F401, I001
from .adapter import JaxMARLAdapter
from .family import Family
from .mabrax import MABRAX
from .registry import COMPETITIVE_JAXMARL, FAMILIES, register, supported_names
from .smax import LEARNED_ENEMY_SMAX

SUPPORTED_JAXMARL: tuple[str, ...] = supported_names()
"""The JaxMARL names of the families shipped with jaxpo, each a cooperative task (one team of
learners with a common goal) verified by tests/test_jaxmarl_{adapter,families,control}.py."""

__all__ = ["COMPETITIVE_JAXMARL", "FAMILIES", "Family", "JaxMARLAdapter", "LEARNED_ENEMY_SMAX", "MABRAX",
           "SUPPORTED_JAXMARL", "register", "supported_names"]
