"""The optimiser of every learner and its learning rate: gradient-norm clipping, then Adam."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxpo.program.config import Config, Hyper


def clipped_adam(hyper: Hyper, lr: jax.Array | None = None) -> optax.GradientTransformation:
    """The gradient's global norm clipped to ``hyper.max_grad_norm``, then Adam at ``lr``
    (None: ``hyper.lr``). Built inside the traced function: both may be traced arrays.

    Args:
        hyper: the run's ``Hyper``.
        lr: the learning rate (``learning_rate``'s), or None for ``hyper.lr``.

    Returns:
        The optax transformation.
    """
    lr = hyper.lr if lr is None else lr
    return optax.chain(optax.clip_by_global_norm(hyper.max_grad_norm), optax.adam(lr, eps=1e-5))


def learning_rate(config: Config, hyper: Hyper, update: jax.Array) -> jax.Array:
    """The learning rate of update ``update`` (train steps done before it, from 0):
    ``lr``, or with ``anneal_lr`` ``lr · max(0, 1 − update / lr_horizon)`` — JaxMARL's
    and Mava's ``1 − (count // (epochs · minibatches)) / num_updates``, which is
    constant within an update. The optimiser state is the same either way.

    Args:
        config: the static configuration (its ``anneal_lr``).
        hyper: the run's ``Hyper`` (``lr``, ``lr_horizon``).
        update: int32 ``[]``, the train steps done.

    Returns:
        float32 ``[]``.
    """
    if not config.anneal_lr:
        return hyper.lr
    return hyper.lr * jnp.maximum(0.0, 1.0 - update / hyper.lr_horizon)
