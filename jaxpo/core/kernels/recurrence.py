"""The GRU recurrence both kernel sets share: flax ``GRUCell``'s equations over a
time-major sequence, its matrix product passed in (``dense``), so each platform's set
runs the same forward pass with its own product."""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

Product = Callable[[jax.Array, jax.Array], jax.Array]  # x [..., D], kernel [D, F] -> [..., F]


def reset_carry(h: jax.Array, first: jax.Array) -> jax.Array:
    """Hidden state ``h [*P, ..., H]`` zeroed where ``first bool [*P]`` is set (a new
    episode starts); e.g. ``h [E, N, H]`` with ``first [E]``.

    Args:
        h: the hidden state ``[*P, ..., H]``.
        first: bool ``[*P]``, a prefix of ``h``'s shape.

    Returns:
        ``h`` with the rows of set ``first`` flags zeroed.
    """
    return jnp.where(first.reshape(first.shape + (1,) * (h.ndim - first.ndim)), 0.0, h)


def gru_cell(dense: Product, h: jax.Array, x: jax.Array, first: jax.Array, w_h: jax.Array, b_h: jax.Array):
    """One GRU step from input projections ``x [..., 3H]`` (r, z, n blocks) and the
    previous ``h [..., H]``, zeroed where ``first`` (a prefix of its batch shape):
    ``(h', (r, z, n, hn))``, the gates being what a written-out backward pass needs."""
    h = reset_carry(h, first)
    xr, xz, xn = jnp.split(x, 3, axis=-1)
    hr, hz, hn = jnp.split(dense(h, w_h) + b_h, 3, axis=-1)
    r, z = nn.sigmoid(xr + hr), nn.sigmoid(xz + hz)
    n = jnp.tanh(xn + r * hn)
    return (1.0 - z) * n + z * h, (r, z, n, hn)


def gru_forward(dense: Product, w_h: jax.Array, b_h: jax.Array, h0: jax.Array, x_proj: jax.Array,
                first: jax.Array):
    """The recurrence as a ``lax.scan``: ``w_h [H, 3H]``, ``b_h [3H]``, ``h0 [..., H]``,
    ``x_proj [L, ..., 3H]``, ``first bool [L, *P]`` -> ``((h_L [..., H], hs [L, ..., H]),
    saved)``, ``saved`` being what ``jaxpo.core.kernels.cpu.gru_scan``'s backward pass reads."""
    def step(h, inputs):
        h, gates = gru_cell(dense, h, *inputs, w_h, b_h)
        return h, (h, gates)

    h_last, (hs, gates) = jax.lax.scan(step, h0, (x_proj, first))
    return (h_last, hs), (w_h, h0, hs, first, gates)
