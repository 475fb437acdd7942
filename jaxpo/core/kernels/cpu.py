"""Kernels written for XLA's CPU backend: the same values as XLA's own ops (to float
rounding; tested against them in ``tests/test_kernels.py``), in forms XLA:CPU runs
faster. Each form's measurement is in ``docs/speed.md``.

* ``matmul``: every dense product as one 2-D product over the flattened leading axes
  (XLA's CPU dot is slower with several non-contracting axes).
* ``affine``: ``matmul`` plus a bias, its kernel and bias gradients one product
  ``[x, 1]ᵀ @ g`` (``product_grads``; the GRU's gradient too): XLA:CPU runs a bias's sum
  over many rows on its own far slower.
* ``conv``: a stride-1, same-padded convolution as one product over image patches (im2col),
  its bias's gradient one matrix-vector product (``add_bias``).
* ``gru_scan``: the GRU recurrence with a written-out gradient: the reverse loop carries
  only ``∂h`` and the weight gradient is one product after it.
* ``dense_pair``: two layers reading the same input as one product, kernels side by side.
* ``permutation``: the epoch shuffle with each sort round's keys packed into one uint32,
  which XLA:CPU sorts without calling a compiled comparator.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp

from jaxpo.core.axes import varying_as
from jaxpo.core.kernels.recurrence import gru_forward, reset_carry


def matmul(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """``x [..., D] @ kernel [D, F] -> [..., F]`` as one ``[M, D] @ [D, F]`` product over
    the flattened leading axes."""
    return (x.reshape(-1, x.shape[-1]) @ kernel).reshape(*x.shape[:-1], kernel.shape[-1])


def product_grads(x: jax.Array, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The gradients of ``x @ kernel + bias`` from the output's gradient ``g``: ``x [..., D]``,
    ``g [..., F]`` -> ``(∂kernel [D, F], ∂bias [F])``, as one product ``[x, 1]ᵀ @ g`` over the
    flattened leading axes. XLA:CPU runs the bias's sum over many rows on its own (a
    reduction, or a matrix-vector product) far slower than as one more row of the
    kernel's product (``docs/speed.md``)."""
    rows, g_rows = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
    ones = jnp.ones((rows.shape[0], 1), rows.dtype)
    both = jax.lax.dot_general(jnp.concatenate([rows, ones], axis=1), g_rows, (((0,), (0,)), ((), ())))
    return both[:-1], both[-1]


def add_bias(y: jax.Array, bias: jax.Array) -> jax.Array:
    """``y [..., F] + bias [F]``, the bias's gradient one ``ones [M] @ g [M, F]`` product
    (XLA:CPU runs the sum as a slow windowed reduction). For a product whose input is too
    wide to copy with a column of ones (``conv``'s image patches)."""
    return _add_bias(y, varying_as(bias, y))


@jax.custom_vjp
def _add_bias(y: jax.Array, bias: jax.Array) -> jax.Array:
    return y + bias


def _row_sum(g: jax.Array) -> jax.Array:
    rows = g.reshape(-1, g.shape[-1])
    return jnp.ones(rows.shape[0], g.dtype) @ rows


_add_bias.defvjp(lambda y, bias: (y + bias, None), lambda _, g: (g, _row_sum(g)))


def affine(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    """``x [..., D] @ kernel [D, F] + bias [F]`` (``matmul``), its kernel and bias gradients
    one product (``product_grads``) where D ≤ 2F. A wider input (a CNN torso's flattened
    features) costs more to copy with a column of ones than the bias's own sum: there the
    bias is ``add_bias``'s (both measured, ``docs/speed.md``)."""
    if kernel.shape[0] > 2 * kernel.shape[1]:
        return add_bias(matmul(x, kernel), bias)
    return _affine(x, varying_as(kernel, x), varying_as(bias, x))


@jax.custom_vjp
def _affine(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    return matmul(x, kernel) + bias


def _affine_bwd(saved, g):
    x, kernel = saved
    return (matmul(g, kernel.T), *product_grads(x, g))


_affine.defvjp(lambda x, kernel, bias: (matmul(x, kernel) + bias, (x, kernel)), _affine_bwd)


def conv(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    """A stride-1, same-padded convolution: ``x [..., H, W, C]``, ``kernel [k, k, C, F]``,
    ``bias [F]`` -> ``[..., H, W, F]``, as one matrix product over image patches, and
    ``add_bias``: appending a column of ones to the patches (``affine``) would copy the
    update's largest array, which costs more than the bias's own sum (``docs/speed.md``).
    Padding is XLA's "SAME": (k - 1) // 2 before, k // 2 after."""
    k, (h, w, c) = kernel.shape[0], x.shape[-3:]
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + [((k - 1) // 2, k // 2)] * 2 + [(0, 0)])
    # Patch channel (i·k + j)·C + c is pixel (row + i, col + j)'s channel c: kernel[i, j, c] flattened.
    patches = jnp.concatenate([x[..., i:i + h, j:j + w, :] for i in range(k) for j in range(k)], axis=-1)
    return add_bias(matmul(patches, kernel.reshape(k * k * c, kernel.shape[-1])), bias)


def dense_pair(x: jax.Array, first: tuple[jax.Array, jax.Array], second: tuple[jax.Array, jax.Array],
               activation: Callable[[jax.Array], jax.Array]) -> tuple[jax.Array, jax.Array]:
    """Two activated dense layers on the same ``x [..., D]``, each ``(kernel [D, W], bias
    [W])``, as one ``[D, 2W]`` product: ``(activation(x @ k1 + b1), activation(x @ k2 + b2))``."""
    kernel, bias = (jnp.concatenate(w, axis=-1) for w in zip(first, second))
    return tuple(jnp.split(activation(affine(x, kernel, bias)), 2, axis=-1))


def gru_scan(w_h: jax.Array, b_h: jax.Array, h0: jax.Array, x_proj: jax.Array,
             first: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The GRU recurrence over a time-major sequence: ``w_h [H, 3H]``, ``b_h [3H]``,
    ``h0 [..., H]``, input projections ``x_proj [L, ..., 3H]``, ``first bool [L, *P]``
    -> ``(h_L [..., H], hs [L, ..., H])``.

    Its gradient is written out (``_gru_scan_bwd``) rather than left to autodiff of the
    scan, which accumulates ``∂W_h`` with a small ``[H, b] @ [b, 3H]`` product in every
    step of the reverse loop: here the loop carries only ``∂h`` and the weight gradient
    is one ``[H, L·b] @ [L·b, 3H]`` product after it. The gradients equal autodiff's to
    float rounding (``tests/test_networks.py``)."""
    return _gru_scan(varying_as(w_h, x_proj), varying_as(b_h, x_proj), h0, x_proj, first)


@jax.custom_vjp
def _gru_scan(w_h, b_h, h0, x_proj, first):
    return gru_forward(matmul, w_h, b_h, h0, x_proj, first)[0]


def _gru_scan_fwd(w_h, b_h, h0, x_proj, first):
    return gru_forward(matmul, w_h, b_h, h0, x_proj, first)


def _gru_scan_bwd(saved, cotangents):
    w_h, h0, hs, first, (r, z, n, hn) = saved
    d_last, d_hs = cotangents
    h_in = reset_carry(jnp.concatenate([h0[None], hs[:-1]]), first)  # [L, ..., H]: what each step read
    w_t = w_h.T

    def step(dh, inputs):  # dh: ∂loss/∂h' of this step, from later steps
        d_out, h_in, r, z, n, hn, first = inputs
        dh = dh + d_out
        d_xn = dh * (1.0 - z) * (1.0 - n * n)
        d_xz = dh * (h_in - n) * z * (1.0 - z)
        d_xr = d_xn * hn * r * (1.0 - r)
        d_gates = jnp.concatenate([d_xr, d_xz, d_xn * r], axis=-1)  # ∂ of h_in @ w_h + b_h
        dh_in = dh * z + matmul(d_gates, w_t)
        return reset_carry(dh_in, first), (d_gates, jnp.concatenate([d_xr, d_xz, d_xn], axis=-1))

    d_h0, (d_gates, d_x) = jax.lax.scan(step, d_last, (d_hs, h_in, r, z, n, hn, first), reverse=True)
    return (*product_grads(h_in, d_gates), d_h0, d_x, None)


_gru_scan.defvjp(_gru_scan_fwd, _gru_scan_bwd)


def permutation_rounds(n: int) -> tuple[int, int]:
    """``(index_bits, rounds)`` of ``permutation(key, n)``: its keys' low ``index_bits``
    hold a position, the other ``32 - index_bits`` are random, and ``rounds`` is the
    fewest with ``(2 ** (32 - index_bits)) ** rounds >= n ** 3`` (``jax.random.permutation``'s
    margin against key collisions, which it keeps with 32 random bits a round)."""
    index_bits = max(1, (n - 1).bit_length())
    return index_bits, math.ceil(3 * math.log2(max(n, 2)) / (32 - index_bits))


def permutation(key: jax.Array, n: int) -> jax.Array:
    """int32 ``[n]``: a random permutation of ``range(n)``, built as
    ``jax.random.permutation`` builds it — rounds of a stable sort by random keys, as
    many as make key collisions in every round improbable — with each round's stable
    tie-break (the position) packed into the low bits of its 32-bit keys
    (``permutation_rounds``). XLA:CPU sorts a single uint32 operand with ``std::less``
    instead of calling the compiled comparator. ``n`` over 2**24 leaves fewer than 8
    random bits a round: then it is ``jax.random.permutation``."""
    index_bits, rounds = permutation_rounds(n)
    if index_bits > 24:
        return jax.random.permutation(key, n).astype(jnp.int32)
    position = jnp.arange(n, dtype=jnp.uint32)
    perm = position
    for round_key in jax.random.split(key, rounds):
        # 16 random bits or fewer a round: 16-bit draws, half the random numbers to generate
        draw = jax.random.bits(round_key, (n,), jnp.uint16 if index_bits >= 16 else jnp.uint32)
        keys = (draw.astype(jnp.uint32) << index_bits) | position  # the shift drops the draw's excess bits
        perm = perm[jnp.sort(keys) & ((1 << index_bits) - 1)]
    return perm.astype(jnp.int32)
