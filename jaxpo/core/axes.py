"""Collectives over a named mapped axis (the devices of a data-parallel run), each the
identity when the axis name is None (one device): the maths layer calls them
unconditionally, so one code path serves one device and many."""

from __future__ import annotations

from typing import Any

import jax


def pmean(x: Any, axis_name: str | None) -> Any:
    """``lax.pmean`` over ``axis_name``; the identity when it is None (one device)."""
    return x if axis_name is None else jax.lax.pmean(x, axis_name)


def pmean_metrics(metrics: dict[str, Any], axis_name: str | None) -> dict[str, Any]:
    """Metrics of equal shares of a batch combined over ``axis_name``: maxima
    (``*_max``) by ``pmax``, everything else by ``pmean``."""
    if axis_name is None:
        return metrics
    return {k: jax.lax.pmax(v, axis_name) if k.endswith("_max") else jax.lax.pmean(v, axis_name)
            for k, v in metrics.items()}


def varying(tree: Any, axis_name: str | None) -> Any:
    """Inside ``shard_map``: every leaf typed as differing between the devices of
    ``axis_name``. A scan carry built from per-device data must be, even where a value
    is the same everywhere (an environment's constant ``terminated``, a fresh factor of
    ones). The identity when ``axis_name`` is None."""
    if axis_name is None:
        return tree
    cast = lambda x: x if axis_name in jax.typeof(x).mat.varying else jax.lax.pcast(x, (axis_name,), to="varying")
    return jax.tree.map(cast, tree)
