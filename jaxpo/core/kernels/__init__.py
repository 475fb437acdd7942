"""Platform kernels: the few operations the model and the update spend their time in,
in the form each platform runs best, chosen by platform name.

``for_platform("cpu")`` is ``CPU`` (``jaxpo.core.kernels.cpu``: forms written for
XLA:CPU); every other platform gets ``XLA`` (``jaxpo.core.kernels.xla``: XLA's own
ops). Both compute the same values to float rounding and read the same parameters, so
a checkpoint trained on one platform runs on another. A kernel set:

* ``dense(x [..., D], kernel [D, F]) -> [..., F]``
* ``affine(x [..., D], kernel [D, F], bias [F]) -> [..., F]``: ``dense`` plus a bias
* ``conv(x [..., H, W, C], kernel [k, k, C, F], bias [F]) -> [..., H, W, F]`` (stride 1, same padding)
* ``gru_scan(w_h [H, 3H], b_h [3H], h0 [..., H], x_proj [L, ..., 3H], first [L, *P])
  -> (h_L, hs [L, ..., H])``
* ``dense_pair(x, (k1, b1), (k2, b2), activation) -> (y1, y2)``: two layers on one input
* ``permutation(key, n) -> int32 [n]``: the epoch shuffle

and four choices of schedule, which change how the values are computed, not the values:
the platform's ``unroll`` (how many iterations of the rollout, GAE and minibatch loops
each ``lax.scan`` iteration runs; ``Config.unroll`` overrides it for all three), its
``bootstrap`` (``jaxpo.core.rollout.bootstrap_values``: the few reached observations
gathered in a data-dependent loop, or all of them in one pass), its ``pack_stores``
(``jaxpo.core.rollout.Stores``) and its ``gradient_rows`` (a feed-forward network's
minibatch gradient computed over blocks of at most this many rows,
``jaxpo.core.accumulate``; None: in one pass; ``Config.gradient_rows`` overrides it).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax

from jaxpo.core.kernels import cpu, xla


class Unroll(NamedTuple):
    """Iterations per ``lax.scan`` iteration of each per-step loop of an update (True:
    the whole loop, no loop left)."""

    rollout: int | bool = 1  # environment + policy steps
    gae: int | bool = 1  # GAE's backward steps
    minibatch: int | bool = 1  # an epoch's minibatch updates


@dataclasses.dataclass(frozen=True)
class Kernels:
    """One platform's kernel set (the signatures are in the module docstring).

    Attributes:
        name: ``"cpu"`` or ``"xla"``.
        dense: a product without a bias (the GRU's recurrent weights).
        affine: a dense layer: its product and bias.
        conv: a convolution layer: its product and bias.
        gru_scan: the GRU recurrence over a sequence, differentiable.
        dense_pair: two activated dense layers reading one input.
        permutation: a random permutation of ``range(n)``.
        unroll: the loops' unrolling on this platform.
        bootstrap: ``"gather"`` or ``"all"`` (``jaxpo.core.rollout.bootstrap_values``).
        pack_stores: the per-step loops store one wide array per dtype (``jaxpo.core.rollout.Stores``).
        gradient_rows: the most rows (samples × agents) of a block of a feed-forward
            network's minibatch gradient (``jaxpo.core.accumulate``); None: one block.
    """

    name: str
    dense: Callable
    affine: Callable
    conv: Callable
    gru_scan: Callable
    dense_pair: Callable
    permutation: Callable
    unroll: Unroll = Unroll()
    bootstrap: str = "gather"
    pack_stores: bool = False
    gradient_rows: int | None = None


# On XLA:CPU, blocks of a few thousand rows keep a feed-forward network's activations in
# the cache through its forward and backward passes (docs/speed.md).
CPU = Kernels("cpu", cpu.matmul, cpu.affine, cpu.conv, cpu.gru_scan, cpu.dense_pair, cpu.permutation,
              gradient_rows=4096)
# XLA:GPU launches each kernel of a GAE step on its own (too few for a CUDA graph) and
# fuses the whole unrolled recursion into the few kernels of one step; the bootstrap's
# data-dependent loop costs a device-to-host wait per iteration; each narrow per-step
# store is a launch outside the step's CUDA graph (benchmarks/gpu_kernels.py). On CPU,
# packing the stores made SMAX's rollout slower (docs/speed.md).
XLA = Kernels("xla", xla.dense, xla.affine, xla.conv, xla.gru_scan, xla.dense_pair, xla.permutation, Unroll(gae=True), "all", True)


def for_platform(platform: str | None = None) -> Kernels:
    """The kernel set of ``platform``.

    Args:
        platform: a device's ``platform`` (``"cpu"``, ``"gpu"``, ``"tpu"``), or a kernel
            set's name (``"xla"`` gives XLA's own ops on any platform); None:
            ``jax.default_backend()``.

    Returns:
        ``CPU`` for ``"cpu"``, else ``XLA``.
    """
    return CPU if (platform or jax.default_backend()) == "cpu" else XLA
