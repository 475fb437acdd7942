"""jaxpo environments: the array protocol, jaxpo's own networked environments and
the JaxMARL adapter, all reachable by name through ``make``.

    >>> from jaxpo import envs
    >>> env = envs.make("MPE_simple_spread_v3", local_ratio=0.5)
    >>> env = envs.make("traffic_grid", rows=8, cols=8)

``REGISTRY`` maps the names of jaxpo's own environments to where their classes live,
``name -> "module:Class"`` (imported on first use): ``public_goods``
(``PublicGoods``), ``traffic_grid`` (``TrafficGrid``), ``wireless``
(``WirelessAccess``), ``cacc`` (``CACC``: the Catch-up and Slow-down platoons of
Chu et al., ICLR 2020, by its ``scenario`` argument) and ``memory_cue`` (``MemoryCue``). A user's environment is
registered the same way, by import path or as the class itself
(``REGISTRY["ring_match"] = RingMatch``), or named without registering as
``"module:Class"``. ``make`` takes these names and the supported JaxMARL names;
``registered_names`` lists the registered and the JaxMARL ones.

``measure_coupling`` measures an environment's coupling graph by stepping it
(``jaxpo.envs.coupling``): for environments that declare none, or to check one that does.
"""

from __future__ import annotations

import importlib
import inspect

import numpy as np

from .base import AutoReset, Env, TimeStep, follows_state
from .coupling import Coupling, measure_coupling

# jaxpo's own environments: name -> "module:Class" (imported on first use) or an Env class.
REGISTRY: dict[str, str | type[Env]] = {
    "public_goods": "jaxpo.envs.public_goods:PublicGoods",
    "traffic_grid": "jaxpo.envs.traffic:TrafficGrid",
    "wireless": "jaxpo.envs.wireless:WirelessAccess",
    "cacc": "jaxpo.envs.cacc:CACC",
    "memory_cue": "jaxpo.envs.memory:MemoryCue",
}
"""Environment name -> ``"module:Class"`` (imported on first use) or an ``Env`` class:
what ``make`` finds by name. Add a user's environment with ``REGISTRY[name] = MyEnv``."""


def registered_names() -> list[str]:
    """The environment names ``make`` accepts.

    Returns:
        The sorted names of jaxpo's own environments (``REGISTRY``), then the sorted
            names of the registered JaxMARL families (``jaxpo.envs.jaxmarl.supported_names``).
    """
    from .jaxmarl import supported_names

    return sorted(REGISTRY) + sorted(supported_names())


def describe(env: Env) -> dict:
    """One line's facts about an environment.

    Args:
        env: the environment to describe (any ``Env``, wrapped or not).

    Returns:
        A dict with ``num_agents`` (N), ``obs_dim`` (the observation width O),
            ``actions`` (``"Discrete(A)"`` or ``"Box(A)"``: the largest agent's action
            space, smaller ones padded), ``continuous`` (bool) and ``coupling``:
            ``"complete"`` (all ones), ``"none"`` (the identity), ``"graph, mean degree d"``
            (d: the mean number of others an agent's reward depends on) or ``"unknown"``
            (``env.coupling`` is None), followed by ``", per state"`` where the
            environment also gives each state's graph (``Env.interaction``, what
            ``Config.interaction_hops`` needs).
    """
    continuous = bool(getattr(env, "continuous", False))
    coupling = env.coupling
    if coupling is None:
        graph = "unknown"
    elif np.all(coupling == 1):
        graph = "complete"
    elif np.array_equal(coupling, np.eye(env.num_agents)):
        graph = "none"
    else:
        degree = (np.asarray(coupling) != 0).sum(axis=1) - np.diagonal(np.asarray(coupling) != 0)
        graph = f"graph, mean degree {degree.mean():.3g}"
    if follows_state(env):
        graph += ", per state"
    return {"num_agents": env.num_agents, "obs_dim": env.obs_dim,
            "actions": f"{'Box' if continuous else 'Discrete'}({env.num_actions})", "continuous": continuous,
            "coupling": graph}


def make(name: str, **kwargs) -> Env:
    """Builds an environment by name.

    The result follows the array protocol; wrap it in ``AutoReset`` for rollouts.

    Args:
        name: a registered environment (``REGISTRY``), an environment class's import
            path ``"module:Class"`` (the module importable: installed or on
            ``PYTHONPATH``), or a JaxMARL environment name (wrapped by
            ``jaxpo.envs.jaxmarl.JaxMARLAdapter``); see ``registered_names``.
        **kwargs: the environment's keyword parameters (its constructor's, or for
            JaxMARL ``JaxMARLAdapter.from_name``'s), e.g. ``rows=8`` for ``traffic_grid``.

    Returns:
        The environment, an ``Env``.

    Raises:
        ValueError: if ``name`` is not a non-empty string, is neither registered, an
            importable ``"module:Class"`` naming an ``Env`` subclass, nor a supported
            JaxMARL name, or ``kwargs`` holds parameters the environment does not take
            (the message lists its parameters).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"env name must be a non-empty string, got {name!r}")
    if name in REGISTRY or ":" in name:
        cls = _env_class(name, REGISTRY.get(name, name))
        known = [p for p in inspect.signature(cls).parameters if p != "self"]
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            raise ValueError(f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for env "
                             f"{name!r}; its parameters: {', '.join(known)}")
        return cls(**kwargs)
    from .jaxmarl import JaxMARLAdapter

    return JaxMARLAdapter.from_name(name, **kwargs)


def _env_class(name: str, entry: str | type) -> type[Env]:
    """The class a registry entry or a ``"module:Class"`` name stands for."""
    if isinstance(entry, str):
        module_name, _, cls_name = entry.partition(":")
        try:
            entry = getattr(importlib.import_module(module_name), cls_name)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"env {name!r}: cannot import {cls_name!r} from module {module_name!r} ({err}); an "
                             "environment class is named 'module:Class', the module installed or on PYTHONPATH") from err
    if not (isinstance(entry, type) and issubclass(entry, Env)):
        raise ValueError(f"env {name!r} must name a subclass of jaxpo.envs.Env, got {entry!r}")
    return entry


__all__ = ["AutoReset", "Coupling", "Env", "TimeStep", "describe", "follows_state", "make", "measure_coupling",
           "registered_names", "REGISTRY"]
