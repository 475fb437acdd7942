"""Running value normaliser of MAPPO / HARL ("ValueNorm"), in functional form.

The critic learns *normalised* targets: returns are normalised with running
statistics before the value loss, and critic outputs are denormalised before GAE.
Statistics are exponential moving averages of the batch mean and mean-of-squares,
with a debiasing term (as in Adam) so early estimates are not pulled towards 0:

    w    = β                       (β^count with per_element_update)
    m    ← w m  + (1 − w) mean(x)
    m2   ← w m2 + (1 − w) mean(x²)
    d    ← w d  + (1 − w)                         (debiasing term, starts at 0)
    mean = m / max(d, ε),  var = max(m2 / max(d, ε) − mean², 1e-2)
    normalize(x) = (x − mean) / sqrt(var),  denormalize(y) = y · sqrt(var) + mean

Reference: ``class ValueNorm`` in marlbenchmark/on-policy
``onpolicy/utils/valuenorm.py`` and PKU-MARL/HARL ``harl/common/valuenorm.py``
(identical maths). Their defaults, kept here: β = 0.99999, ε = 1e-5,
per_element_update = False (the constructor's defaults in both files), variance
floor 1e-2 (hard-coded in ``running_mean_var``). Both references build
``ValueNorm(1)`` — one normaliser for the critic — in on-policy
``onpolicy/algorithms/r_mappo/r_mappo.py`` and HARL
``harl/runners/on_policy_base_runner.py``; ``use_valuenorm`` defaults to True
(on-policy ``onpolicy/config.py``, HARL ``harl/configs/algos_cfgs/mappo.yaml``). The
reference updates the statistics with the minibatch's returns inside
``cal_value_loss``, just before normalising them (on-policy ``r_mappo.py``, HARL
``harl/algorithms/critics/v_critic.py``).

Shapes. The state has a *stat shape* S: ``()`` for one normaliser shared by all
agents, or ``(N,)`` for one per agent. ``update`` takes ``x`` of shape ``[..., *S]``
and averages over every leading axis, keeping the trailing S axes: with S = ``()`` and
``x [T, E, N]`` all agents pool into one statistic (the reference's shared-critic
MAPPO, which flattens agents into the batch); with S = ``(N,)`` each agent keeps its
own (the reference's separated-policy runner, one trainer and normaliser per agent).
``normalize`` / ``denormalize`` broadcast the statistics over the same leading axes.

β and ε may be traced (they never enter Python control flow); ``per_element_update``
is a static Python bool. A batch of states (leading run axis) is handled by
``jax.vmap``.
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
from flax import struct

BETA = 0.99999
EPSILON = 1e-5
VAR_FLOOR = 1e-2  # hard-coded lower clamp on the variance in the reference


@struct.dataclass
class ValueNormState:
    """Running statistics (a pytree).

    Attributes:
      running_mean: ``S`` (``[]`` shared or ``[N]`` per agent), EMA of batch means.
      running_mean_sq: ``S``, EMA of batch means of squares.
      debiasing_term: ``[]``, EMA of 1 (the total weight given so far; starts at 0).
    """

    running_mean: chex.Array
    running_mean_sq: chex.Array
    debiasing_term: chex.Array


def init(shape: tuple[int, ...] = (), dtype=jnp.float32) -> ValueNormState:
    """Zero statistics of stat shape ``shape`` (``()`` shared, ``(N,)`` per agent)."""
    shape = tuple(shape)
    return ValueNormState(
        running_mean=jnp.zeros(shape, dtype),
        running_mean_sq=jnp.zeros(shape, dtype),
        debiasing_term=jnp.zeros((), dtype),
    )


def _check(state: ValueNormState, x: chex.Array) -> tuple[int, ...]:
    """Returns the leading (averaged) axes of ``x``; raises if its tail is not S."""
    stat_shape = jnp.shape(state.running_mean)
    chex.assert_equal_shape([state.running_mean, state.running_mean_sq])
    chex.assert_rank(state.debiasing_term, 0)
    k = len(stat_shape)
    if jnp.ndim(x) < k or tuple(jnp.shape(x)[jnp.ndim(x) - k :]) != stat_shape:
        raise ValueError(
            f"x must have shape [..., *{stat_shape}] to match the normaliser; got {jnp.shape(x)}"
        )
    return tuple(range(jnp.ndim(x) - k))


def update(
    state: ValueNormState,
    x: chex.Array,
    beta: chex.Numeric = BETA,
    per_element_update: bool = False,
    axis_name: str | None = None,
) -> ValueNormState:
    """Folds the batch ``x`` into the running statistics.

    Args:
      state: statistics with stat shape S.
      x: ``[..., *S]`` targets (e.g. returns ``[B, N]``); averaged over all leading axes.
      beta: decay β per update; may be traced.
      per_element_update: static. If True the decay is ``β^count`` with ``count``
        the number of entries averaged per statistic, so each sample (rather than
        each batch) counts as one step.
      axis_name: when the batch is split into equal shares over the devices of this
        mapped axis, the statistics are those of the whole batch.

    Returns:
      The updated state.
    """
    axes = _check(state, x)
    dtype = state.running_mean.dtype
    x = jnp.asarray(x, dtype)
    batch_mean = jnp.mean(x, axis=axes)
    batch_sq_mean = jnp.mean(jnp.square(x), axis=axes)
    count = 1
    if axis_name is not None:
        batch_mean, batch_sq_mean = jax.lax.pmean((batch_mean, batch_sq_mean), axis_name)
    if per_element_update:  # entries averaged per statistic, over all devices
        count = math.prod(jnp.shape(x)[a] for a in axes) * (1 if axis_name is None else jax.lax.axis_size(axis_name))
    # w = β^count and 1 − w via log1p/expm1 of (β − 1): 1 − β^count for β ≈ 1 would
    # otherwise lose most of its digits to cancellation in float32. A Python-float
    # β gives β − 1 in float64 (as the reference's Python-float weight does); a
    # float32 array β is rounded first, which rescales the raw state by
    # (1 − β₃₂)/(1 − β) (≈ 1.0014 at 0.99999) but cancels in the debiased mean/var.
    log_weight = count * jnp.log1p(jnp.asarray(beta - 1.0, dtype))
    weight = jnp.exp(log_weight)
    one_minus = -jnp.expm1(log_weight)
    return ValueNormState(
        running_mean=weight * state.running_mean + one_minus * batch_mean,
        running_mean_sq=weight * state.running_mean_sq + one_minus * batch_sq_mean,
        debiasing_term=weight * state.debiasing_term + one_minus,
    )


def running_mean_var(
    state: ValueNormState, epsilon: chex.Numeric = EPSILON
) -> tuple[chex.Array, chex.Array]:
    """Debiased ``(mean, var)``, each of stat shape S.

    ``mean = m / max(d, ε)``, ``var = max(m2 / max(d, ε) − mean², 1e-2)``. Before the
    first update (d = 0) this gives mean 0, var 1e-2, as the reference does.
    """
    debias = jnp.maximum(state.debiasing_term, epsilon)
    mean = state.running_mean / debias
    mean_sq = state.running_mean_sq / debias
    var = jnp.maximum(mean_sq - jnp.square(mean), VAR_FLOOR)
    return mean, var


def normalize(state: ValueNormState, x: chex.Array, epsilon: chex.Numeric = EPSILON) -> chex.Array:
    """``(x − mean) / sqrt(var)``; ``x [..., *S]`` → same shape."""
    _check(state, x)
    mean, var = running_mean_var(state, epsilon)
    return (x - mean) / jnp.sqrt(var)


def denormalize(
    state: ValueNormState, x: chex.Array, epsilon: chex.Numeric = EPSILON
) -> chex.Array:
    """``x · sqrt(var) + mean``, the inverse of ``normalize``; ``x [..., *S]`` → same shape."""
    _check(state, x)
    mean, var = running_mean_var(state, epsilon)
    return x * jnp.sqrt(var) + mean
