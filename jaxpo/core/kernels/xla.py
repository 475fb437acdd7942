"""XLA's own ops, the kernels of every platform but CPU: flax ``nn.Dense`` and
``nn.Conv``'s products, autodiff of the GRU's ``lax.scan``, two dense layers as two
products, and ``jax.random.permutation`` for the epoch shuffle."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jaxpo.core.kernels.recurrence import gru_forward


def dense(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """``x [..., D] @ kernel [D, F] -> [..., F]``, contracted as ``nn.Dense`` contracts it."""
    return jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))


def affine(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    """``x [..., D] @ kernel [D, F] + bias [F]``, as ``nn.Dense``."""
    return dense(x, kernel) + bias


def conv(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    """A stride-1, "SAME"-padded convolution as ``nn.Conv`` runs it: ``x [..., H, W, C]``,
    ``kernel [k, k, C, F]``, ``bias [F]`` -> ``[..., H, W, F]`` (leading axes flattened
    into one batch axis and back)."""
    batch = x.shape[:-3]
    y = jax.lax.conv_general_dilated(x.reshape(-1, *x.shape[-3:]), kernel, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return y.reshape(*batch, *y.shape[1:]) + bias


def dense_pair(x: jax.Array, first: tuple[jax.Array, jax.Array], second: tuple[jax.Array, jax.Array],
               activation: Callable[[jax.Array], jax.Array]) -> tuple[jax.Array, jax.Array]:
    """Two activated dense layers on the same ``x [..., D]``, each ``(kernel [D, W], bias
    [W])``: ``(activation(x @ k1 + b1), activation(x @ k2 + b2))``."""
    return tuple(activation(affine(x, kernel, bias)) for kernel, bias in (first, second))


def gru_scan(w_h: jax.Array, b_h: jax.Array, h0: jax.Array, x_proj: jax.Array,
             first: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The GRU recurrence (``jaxpo.core.kernels.recurrence.gru_forward``), differentiated
    by autodiff: ``w_h [H, 3H]``, ``b_h [3H]``, ``h0 [..., H]``, ``x_proj [L, ..., 3H]``,
    ``first bool [L, *P]`` -> ``(h_L [..., H], hs [L, ..., H])``."""
    return gru_forward(dense, w_h, b_h, h0, x_proj, first)[0]


def permutation(key: jax.Array, n: int) -> jax.Array:
    """int32 ``[n]``: ``jax.random.permutation(key, n)``."""
    return jax.random.permutation(key, n).astype(jnp.int32)
