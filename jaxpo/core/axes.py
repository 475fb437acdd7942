"""Collectives over a named mapped axis (the devices of a data-parallel run), each the
identity when the axis name is None (one device): the maths layer calls them
unconditionally, so one code path serves one device and many."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import jax
import jax.numpy as jnp


def pmean(x: Any, axis_name: str | None) -> Any:
    """``lax.pmean`` over ``axis_name``; the identity when it is None (one device)."""
    return x if axis_name is None else jax.lax.pmean(x, axis_name)


def is_maximum(name: str) -> bool:
    """Whether the metric ``name`` is a maximum (``*_max``), which equal shares of a batch
    combine by their maximum; every other metric is a mean, combined by the mean."""
    return name.endswith("_max")


def pmean_metrics(metrics: dict[str, Any], axis_name: str | None) -> dict[str, Any]:
    """Metrics of equal shares of a batch combined over ``axis_name``: maxima
    (``is_maximum``) by ``pmax``, everything else by ``pmean``."""
    if axis_name is None:
        return metrics
    return {k: jax.lax.pmax(v, axis_name) if is_maximum(k) else jax.lax.pmean(v, axis_name)
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


def varying_as(x: jax.Array, like: jax.Array) -> jax.Array:
    """Inside ``shard_map``: ``x`` typed as differing between the devices of every axis
    ``like`` differs over. A parameter entering a custom-gradient kernel beside per-device
    data must be, so that its gradient (a sum over the devices' shares) is the cast's
    transpose, as autodiff gives it. The identity outside ``shard_map``."""
    missing = tuple(sorted(jax.typeof(like).mat.varying - jax.typeof(x).mat.varying))
    return jax.lax.pcast(x, missing, to="varying") if missing else x


@contextlib.contextmanager
def selected_branches(axis_name: str | None) -> Iterator[None]:
    """While tracing inside ``shard_map`` over ``axis_name``: every ``lax.cond`` and
    ``lax.switch`` traced in the block computes all its branches and selects the result
    (``jnp.where``, ``lax.select_n``), which is what they become under a ``vmap`` with a
    batched predicate anyway. Code that is not ours (a JaxMARL environment's step) may
    return per-device data from one branch and a constant from the other, which
    ``shard_map``'s typing refuses in a branch but joins in a select. The branches must be
    pure functions (an environment's are). Nothing changes when the axis name is None."""
    if axis_name is None:
        yield
        return
    cond, switch = jax.lax.cond, jax.lax.switch

    def selected_cond(pred, true_fun, false_fun, *operands, **kwargs):
        operands = operands or ((kwargs.pop("operand"),) if "operand" in kwargs else ())
        return jax.tree.map(lambda a, b: jnp.where(pred, a, b), true_fun(*operands), false_fun(*operands))

    def selected_switch(index, branches, *operands, **kwargs):
        operands = operands or ((kwargs.pop("operand"),) if "operand" in kwargs else ())
        index = jnp.clip(index, 0, len(branches) - 1)  # lax.switch's clamping
        outputs = [branch(*operands) for branch in branches]
        return jax.tree.map(lambda *leaves: jax.lax.select_n(index, *jnp.broadcast_arrays(*leaves)), *outputs)

    jax.lax.cond, jax.lax.switch = selected_cond, selected_switch
    try:
        yield
    finally:
        jax.lax.cond, jax.lax.switch = cond, switch
