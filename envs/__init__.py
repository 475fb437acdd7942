"""jaxpo environments: the array protocol, jaxpo's own networked environments and
the JaxMARL adapter, all reachable by name through :func:`make`.

    >>> from jaxpo import envs
    >>> env = envs.make("MPE_simple_spread_v3", local_ratio=0.5)
    >>> env = envs.make("traffic_grid", rows=8, cols=8)
"""

from __future__ import annotations

import importlib
import inspect

import numpy as np

from .base import AutoReset, Env, TimeStep

# jaxpo's own environments: name -> "module:Class" (imported on first use).
REGISTRY: dict[str, str] = {
    "public_goods": "jaxpo.envs.public_goods:PublicGoods",
    "traffic_grid": "jaxpo.envs.traffic:TrafficGrid",
    "wireless": "jaxpo.envs.wireless:WirelessAccess",
    "memory_cue": "jaxpo.envs.memory:MemoryCue",
}


def registered_names() -> list[str]:
    """Names :func:`make` accepts besides any JaxMARL environment name."""
    from .jaxmarl_adapter import SUPPORTED_JAXMARL

    return sorted(REGISTRY) + sorted(SUPPORTED_JAXMARL)


def describe(env: Env) -> dict:
    """One line's facts about ``env``: its agents N, observation width O, action space
    (``Discrete(A)`` or ``Box(A)``; the largest agent's, smaller ones padded), whether it
    is continuous, and its coupling: ``complete``, ``none`` (identity), ``graph, mean
    degree d`` (the others an agent's reward depends on), or ``unknown``."""
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
    return {"num_agents": env.num_agents, "obs_dim": env.obs_dim,
            "actions": f"{'Box' if continuous else 'Discrete'}({env.num_actions})", "continuous": continuous,
            "coupling": graph}


def make(name: str, **kwargs) -> Env:
    """Builds environment ``name`` with keyword parameters ``kwargs``.

    ``name`` is one of jaxpo's own environments (``REGISTRY``) or a JaxMARL
    environment name (wrapped by :class:`~jaxpo.envs.jaxmarl_adapter.JaxMARLAdapter`).
    The result follows the array protocol; wrap it in :class:`AutoReset` for rollouts.
    Unknown parameters are a ValueError that lists the environment's parameters.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"env name must be a non-empty string, got {name!r}")
    if name in REGISTRY:
        module_name, cls_name = REGISTRY[name].split(":")
        cls = getattr(importlib.import_module(module_name), cls_name)
        known = [p for p in inspect.signature(cls).parameters if p != "self"]
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            raise ValueError(f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for env "
                             f"{name!r}; its parameters: {', '.join(known)}")
        return cls(**kwargs)
    from .jaxmarl_adapter import JaxMARLAdapter

    return JaxMARLAdapter.from_name(name, **kwargs)


__all__ = ["AutoReset", "Env", "TimeStep", "describe", "make", "registered_names", "REGISTRY"]
