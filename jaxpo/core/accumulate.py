"""A minibatch's loss and gradient computed over equal blocks of its samples and combined.

The PPO loss is a mean over a minibatch's rows, so over equal blocks the mean of the
blocks' losses and gradients is the minibatch's own, to float rounding, and so are its
metrics: means averaged, maxima (``*_max``) maximised, as ``jaxpo.core.axes.pmean_metrics``
combines the equal shares of devices. What changes is where the work happens: on XLA:CPU
a feed-forward network's forward and backward passes over a whole minibatch stream every
layer's activations (``[rows, F]``, tens of MB at JaxMARL's MPE sizes) through memory
several times; block by block they stay in the cache (``docs/speed.md``).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxpo.core.axes import is_maximum


def gradient_blocks(samples: int, rows_per_sample: int, max_rows: int | None) -> int:
    """How many equal blocks a minibatch's gradient is computed in.

    Args:
        samples: the minibatch's samples M.
        rows_per_sample: the loss's rows per sample (its N agents).
        max_rows: the most rows a block may hold; None: one block.

    Returns:
        The fewest blocks dividing M evenly whose rows number at most ``max_rows`` (M
        blocks of one sample each where no block of several fits).
    """
    if max_rows is None:
        return 1
    fits = (n for n in range(1, samples + 1) if samples % n == 0 and samples // n * rows_per_sample <= max_rows)
    return next(fits, samples)


def combine_metrics(metrics: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Metrics of equal blocks, stacked ``[blocks]``, as the whole batch's: maxima
    (``jaxpo.core.axes.is_maximum``) by their maximum, everything else by its mean."""
    return {k: jnp.max(v, axis=0) if is_maximum(k) else jnp.mean(v, axis=0) for k, v in metrics.items()}


def blockwise(value_and_grad: Callable, num_blocks: int, num_row_args: int) -> Callable:
    """``value_and_grad`` computed over ``num_blocks`` equal blocks and combined.

    Args:
        value_and_grad: ``f(params, *rows, *rest) -> ((loss, metrics), grads)`` (a
            ``jax.value_and_grad`` with ``has_aux``) whose loss and metrics are means over
            the rows (maxima for ``*_max`` metrics).
        num_blocks: B, dividing the rows' leading axis M.
        num_row_args: how many arguments after ``params`` are row-major (leaves ``[M, ...]``);
            the rest are passed to every block as they are.

    Returns:
        A function of ``value_and_grad``'s arguments with its outputs: the loss, metrics
        and gradient of the whole M rows, from a ``lax.scan`` over the B blocks;
        ``value_and_grad`` itself where B is 1.
    """
    if num_blocks == 1:
        return value_and_grad

    def combined(params: Any, *args: Any) -> tuple[tuple[jax.Array, dict], Any]:
        rows, rest = args[:num_row_args], args[num_row_args:]
        blocks = jax.tree.map(lambda x: x.reshape(num_blocks, x.shape[0] // num_blocks, *x.shape[1:]), rows)

        def block(total, rows_of_block):
            (loss, metrics), grads = value_and_grad(params, *rows_of_block, *rest)
            return jax.tree.map(jnp.add, total, grads), (loss, metrics)

        total, (losses, metrics) = jax.lax.scan(block, jax.tree.map(jnp.zeros_like, params), blocks)
        grads = jax.tree.map(lambda g: g / num_blocks, total)
        return (jnp.mean(losses), combine_metrics(metrics)), grads

    return combined
