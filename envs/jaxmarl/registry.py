"""The JaxMARL families by name.

A family is one module: a :class:`~jaxpo.envs.jaxmarl.family.Family` subclass stating its
names, arguments, observation layout, action masks, world state, coupling, win rule and
renderer, and a :func:`register` call at its end. Importing the module makes its names
buildable by :meth:`JaxMARLAdapter.from_name <jaxpo.envs.jaxmarl.JaxMARLAdapter.from_name>`
and ``jaxpo.envs.make``: a user's family by importing its file (tests/test_jaxmarl_adapter.py
registers a toy one), a shipped family by its name in ``jaxpo.envs.jaxmarl``'s import line,
which fixes the order the names are listed in. Nothing else changes: the adapter asks the
family, never the name.
"""

from __future__ import annotations

from typing import Any

from .family import Family

FAMILIES: dict[str, Family] = {}
"""JaxMARL name -> the family that builds it, in the order the families registered."""

# JaxMARL names that are not one cooperative team (teams with opposed rewards): refused by name.
COMPETITIVE_JAXMARL: tuple[str, ...] = (
    "MPE_simple_tag_v3", "MPE_simple_world_comm_v3", "MPE_simple_crypto_v3", "MPE_simple_push_v3",
    "MPE_simple_adversary_v3", "SMAX", "coin_game", "storm", "storm_2p", "storm_np",
)  # fmt: skip


def register(family: Family) -> Family:
    """Makes a family's names buildable by name.

    Args:
        family: the family (an instance of a ``Family`` subclass).

    Returns:
        ``family``, so a module can write ``register(MyFamily())``.

    Raises:
        ValueError: if one of its names is registered to another family already.
    """
    for name in (*family.names, *family.needs_arguments):
        if name in FAMILIES and FAMILIES[name] is not family:
            raise ValueError(f"JaxMARL name {name!r} is registered to {FAMILIES[name].title} already")
        FAMILIES[name] = family
    return family


def families() -> list[Family]:
    """The registered families, each once, in the order they registered.

    Returns:
        The families.
    """
    return list(dict.fromkeys(FAMILIES.values(), None))


def supported_names() -> tuple[str, ...]:
    """The JaxMARL names that build with their default arguments.

    Returns:
        Every registered family's ``names``, in registration order.
    """
    return tuple(name for family in families() for name in family.names)


def family_named(name: str) -> Family:
    """The family that builds a JaxMARL name.

    Args:
        name: a JaxMARL environment name.

    Returns:
        Its registered family.

    Raises:
        ValueError: for a competitive JaxMARL name or one no family registered; the
            message lists the supported names.
    """
    supported = ", ".join(supported_names())
    if name in COMPETITIVE_JAXMARL:
        raise ValueError(f"JaxMARL env {name!r} is not a cooperative task (its teams' rewards are opposed); "
                         f"jaxpo trains one cooperative team. Cooperative JaxMARL envs: {supported}")
    if name not in FAMILIES:
        raise ValueError(f"unknown JaxMARL env name {name!r}; supported: {supported} "
                         "(other discrete JaxMARL envs can be wrapped as JaxMARLAdapter(jaxmarl.make(name)))")
    return FAMILIES[name]


def family_of(env: Any) -> Family:
    """The family a JaxMARL instance belongs to.

    Args:
        env: a JaxMARL ``MultiAgentEnv``.

    Returns:
        The first registered family that handles it, else the base ``Family`` (the
        defaults for a JaxMARL environment of no known family).
    """
    return next((family for family in families() if family.handles(env)), Family())
