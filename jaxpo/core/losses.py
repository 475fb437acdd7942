"""The support-matrix clipped surrogate, the clipped value losses and the entropy bonus.

Pure functions. N agents; the last axis of every per-agent array is the agent axis.

* ``S_A[i, j]`` — weight of agent j's advantage in term i: ``Â_i = Σ_j S_A[i, j] A_j``.
* ``S_R[k, i] = 1`` — agent k's ratio is a factor of term i:
  ``log ρ̄_i = Σ_k S_R[k, i] log ρ_k``.
* Objective ``L = Σ_i E[min(ρ̄_i Â_i, clip(ρ̄_i, 1 − ε, 1 + ε) Â_i)]``: the product
  ``ρ̄_i`` is clipped as one importance weight; terms are *summed* and the batch is
  *averaged*. Summing (not averaging) over terms makes ippo (S_A = S_R = I) with
  per-agent parameters give agent k exactly its own single-agent PPO gradient.

**Active agents.** Where an environment reports which agents act (``active [..., N]``:
a SMAX unit alive, a JaxNav robot neither crashed nor done), the supports follow the
state: an inactive agent's advantage leaves every credit (``S_A``'s column), its ratio
leaves every product (``S_R``'s row) and its own term leaves the objective, with its
entropy:
``S_A(s) = S_A · diag(m)``, ``S_R(s) = diag(m) · S_R`` and term i weighted by ``m_i``,
so the signal of state s is ``diag(m) S_R diag(m) S_A diag(m)``. Terms stay summed and
the batch averaged over all its entries (inactive ones count as zero), the unbiased
estimate of ``Σ_i E[m_i(s) · surrogate_i]``; MAPPO's death masking averages over the
active entries instead. The value loss keeps every entry: an agent's return is defined
whether or not it acts, and GAE reads its value in every state. ``active`` None is
every agent at every step: the same computation as without it.

Every matrix, ε and coefficient may be a traced value (the train function is
vmapped over them), so none of them enters Python control flow. A support is either
a dense ``[N, N]`` array or its padded neighbour lists (``jaxpo.core.sparse``, chosen by
``Hyper.create``); the aggregation functions dispatch on that type, statically.
Data inputs (old log-probs, advantages, old values, returns) are wrapped in ``stop_gradient``:
gradients flow only through the current ``log_prob``, ``values`` and ``entropy``.
"""

from __future__ import annotations

from typing import Literal, get_args

import chex
import jax
import jax.numpy as jnp
import optax

from jaxpo.core import sparse
from jaxpo.core.axes import pmean, pmean_metrics  # noqa: F401 (jaxpo.losses.pmean, as before)
from jaxpo.core.sparse import NeighbourLists
from jaxpo.core.state_supports import khop_per_state, restricted_to_state  # noqa: F401 (jaxpo.losses.*, as before)

AdvNorm = Literal["none", "batch", "agent"]  # advantage-normalisation scopes
NORMALIZE_SCOPES: tuple[str, ...] = get_args(AdvNorm)
_EPS = 1e-8
# Full-precision contraction: the default matmul precision on TPU/GPU may round to
# bf16/tf32, which would perturb log-ratio sums that get exponentiated.
_HIGHEST = jax.lax.Precision.HIGHEST


def _check_support(x: chex.Array, S: chex.Array | NeighbourLists, name: str, by_column: bool,
                   per_sample: bool = False) -> None:
    if jnp.ndim(x) < 1:
        raise ValueError(f"expected a trailing agent axis [..., N]; got shape {jnp.shape(x)}")
    n = jnp.shape(x)[-1]
    if isinstance(S, NeighbourLists):
        if S.by_column != by_column:
            lists = "columns" if by_column else "rows"
            raise ValueError(f"{name} as neighbour lists must list its {lists} (by_column={by_column})")
        if S.shape != (n, n):
            raise ValueError(f"{name} must stand for an [N, N] = [{n}, {n}] matrix, got lists {jnp.shape(S.index)}")
        return
    if per_sample and jnp.ndim(S) > 2:
        if jnp.shape(S) != (*jnp.shape(x), n):
            raise ValueError(f"{name} per sample must be [..., N, N] = {(*jnp.shape(x), n)}, got {jnp.shape(S)}")
        return
    chex.assert_shape(S, (n, n))


def aggregate_advantages(advantages: chex.Array, S_A: chex.Array | NeighbourLists,
                         active: chex.Array | None = None) -> chex.Array:
    """Term advantages ``Â_i = Σ_j S_A[i, j] A_j`` (``Σ_j S_A[i, j] m_j A_j`` with ``active``).

    Computed at full matmul precision (dense) or as a gather and sum (neighbour lists).

    Args:
        advantages: ``[..., N]`` per-agent advantages A_j (any leading axes, agent axis last).
        S_A: ``[N, N]`` advantage support (row i = weights of term i), or its row lists
            (``jaxpo.core.sparse.NeighbourLists`` with ``by_column=False``, ``[N, K]`` leaves:
            O(N·K) instead of O(N²)), or one dense matrix per entry, ``[..., N, N]``
            (a state-dependent support, ``jaxpo.core.state_supports``), or row lists whose
            weights are one set per entry (``[..., N, K]``, the same module); may be traced.
        active: bool ``[..., N]`` (``advantages``' shape) or None: the agents acting at each
            entry; an inactive agent's advantage leaves every credit.

    Returns:
        ``[..., N]`` term advantages Â_i.

    Raises:
        ValueError: if ``advantages`` has no trailing agent axis, or ``S_A`` as neighbour
            lists lists columns or does not stand for an ``[N, N]`` matrix.
        AssertionError: if a dense ``S_A`` is not ``[N, N]`` (chex shape check).

    Examples:
        >>> import jax.numpy as jnp
        >>> aggregate_advantages(jnp.array([1.0, 2.0, 3.0]), jnp.ones((3, 3))).tolist()
        [6.0, 6.0, 6.0]
    """
    _check_support(advantages, S_A, "S_A", by_column=False, per_sample=True)
    if active is not None:
        advantages = jnp.where(active, advantages, 0.0)
    if isinstance(S_A, NeighbourLists):
        return sparse.aggregate(advantages, S_A)
    if jnp.ndim(S_A) > 2:  # one matrix per entry
        return jnp.einsum("...j,...ij->...i", advantages, S_A, precision=_HIGHEST)
    return jnp.einsum("...j,ij->...i", advantages, S_A, precision=_HIGHEST)


def aggregate_log_ratio(log_ratio: chex.Array, S_R: chex.Array | NeighbourLists) -> chex.Array:
    """Log of the term importance weights ``log ρ̄_i = Σ_k S_R[k, i] log ρ_k``.

    Computed at full matmul precision (dense) or as a gather and sum (neighbour lists).

    Args:
        log_ratio: ``[..., N]`` per-agent ``log π_k(a_k|o_k) − log π_k,old(a_k|o_k)``.
        S_R: ``[N, N]`` 0/1 ratio support (column i = factors of term i), or its column
            lists (``NeighbourLists`` with ``by_column=True``, ``[N, K]`` leaves); may be traced.

    Returns:
        ``[..., N]`` ``log ρ̄_i``.

    Raises:
        ValueError: if ``log_ratio`` has no trailing agent axis, or ``S_R`` as neighbour
            lists lists rows or does not stand for an ``[N, N]`` matrix.
        AssertionError: if a dense ``S_R`` is not ``[N, N]`` (chex shape check).

    Examples:
        >>> import jax.numpy as jnp
        >>> S_R = jnp.array([[1.0, 1.0], [0.0, 1.0]])  # term 1 weighs ρ_0 ρ_1
        >>> aggregate_log_ratio(jnp.array([0.25, 0.5]), S_R).tolist()
        [0.25, 0.75]
    """
    _check_support(log_ratio, S_R, "S_R", by_column=True)
    if isinstance(S_R, NeighbourLists):
        return sparse.aggregate(log_ratio, S_R)
    return jnp.einsum("...k,ki->...i", log_ratio, S_R, precision=_HIGHEST)


def normalize_advantages(advantages: chex.Array, scope: str, axis_name: str | None = None,
                         active: chex.Array | None = None) -> chex.Array:
    """Standardise advantages: ``(A − mean) / (std + 1e-8)``.

    Args:
        advantages: ``[B..., N]`` (any leading axes, agent axis last).
        scope: static string, one of ``NORMALIZE_SCOPES``. ``"none"`` returns the input;
            ``"batch"`` uses one mean/std over all entries; ``"agent"`` uses a mean/std per
            agent over all leading axes.
        axis_name: when the batch is split into equal shares over the devices of this
            mapped axis, the statistics are those of the whole batch; None: one device.
        active: bool ``[B..., N]`` or None: the statistics are those of the active
            entries, and the inactive ones are 0 (their terms leave the objective).

    Returns:
        ``[B..., N]`` normalised advantages (``advantages`` itself for ``"none"`` without
        ``active``).

    Raises:
        ValueError: if ``scope`` is not one of ``"none"``, ``"batch"``, ``"agent"``, or
            ``advantages`` is a scalar (no trailing agent axis).

    Examples:
        >>> import jax.numpy as jnp
        >>> normalize_advantages(jnp.array([[1.0, 2.0], [3.0, 4.0]]), "agent").tolist()
        [[-1.0, -1.0], [1.0, 1.0]]
    """
    if scope not in NORMALIZE_SCOPES:
        raise ValueError(f"scope must be one of {NORMALIZE_SCOPES}; got {scope!r}")
    if jnp.ndim(advantages) < 1:
        raise ValueError(
            f"advantages must have a trailing agent axis [B..., N]; got shape "
            f"{jnp.shape(advantages)}"
        )
    if scope == "none":
        return advantages if active is None else jnp.where(active, advantages, 0.0)
    axes = None if scope == "batch" else tuple(range(jnp.ndim(advantages) - 1))
    mean, std = mean_std(advantages, axes, axis_name, active)
    normalized = (advantages - mean) / (std + _EPS)
    return normalized if active is None else jnp.where(active, normalized, 0.0)


# The raw importance-weight moments ``policy_loss(weight_stats=True)`` adds to its metrics.
WEIGHT_MOMENTS = ("rho_dev", "rho_dev_sq", "rho_max")


def weight_moments(rho_bar: chex.Array) -> dict[str, chex.Array]:
    """Moments of the term importance weights ``ρ̄`` that combine exactly over equal-sized batches.

    ``rho_dev = mean(ρ̄ − 1)``, ``rho_dev_sq = mean((ρ̄ − 1)²)`` (centred at 1, the value
    at θ_old, so the variance ``rho_dev_sq − rho_dev²`` keeps its precision when ρ̄ is
    near 1) and ``rho_max = max ρ̄``. Means combine over devices by ``pmean``, the
    maximum by ``pmax``.

    Args:
        rho_bar: term importance weights ρ̄, any shape (e.g. ``[B, N]``).

    Returns:
        Dict with the scalar arrays ``"rho_dev"``, ``"rho_dev_sq"`` and ``"rho_max"``
        (the keys of ``WEIGHT_MOMENTS``).
    """
    dev = rho_bar - 1.0
    return {"rho_dev": jnp.mean(dev), "rho_dev_sq": jnp.mean(jnp.square(dev)), "rho_max": jnp.max(rho_bar)}


def clip_fraction(rho_bar: chex.Array, clip_eps: chex.Numeric, where: chex.Array | None = None) -> chex.Array:
    """Fraction of the importance weights ``ρ̄`` with ``|ρ̄ − 1| > ε``.

    Args:
        rho_bar: importance weights ρ̄, a float array of any shape (e.g. ``[B, N]``).
        clip_eps: scalar clip range ε; may be traced.
        where: bool, ``rho_bar``'s shape, or None: count only these entries (``masked_mean``).

    Returns:
        Scalar array in ``[0, 1]``, of ``rho_bar``'s dtype.

    Examples:
        >>> import jax.numpy as jnp
        >>> float(clip_fraction(jnp.array([1.0, 1.3, 0.7, 1.1]), 0.2))
        0.5
    """
    return masked_mean((jnp.abs(rho_bar - 1.0) > clip_eps).astype(rho_bar.dtype), where)


def masked_mean(x: chex.Array, where: chex.Array | None) -> chex.Array:
    """Mean of ``x`` over its entries where ``where`` is True.

    Args:
        x: float array of any shape.
        where: bool, ``x``'s shape, or None: every entry.

    Returns:
        Scalar array: the mean over the selected entries (0 when none is selected).

    Examples:
        >>> import jax.numpy as jnp
        >>> float(masked_mean(jnp.array([1.0, 2.0, 6.0]), jnp.array([True, False, True])))
        3.5
    """
    if where is None:
        return jnp.mean(x)
    return jnp.sum(jnp.where(where, x, 0.0)) / jnp.maximum(jnp.sum(where, dtype=x.dtype), 1.0)


def mean_std(x: chex.Array, axes: tuple[int, ...] | None, axis_name: str | None = None,
             where: chex.Array | None = None) -> tuple[chex.Array, chex.Array]:
    """Mean and (population) standard deviation of ``x`` over ``axes``, kept as size-1 axes.

    Args:
        x: float array of any shape.
        axes: the axes to reduce; None: all of them.
        axis_name: a mapped axis over whose devices ``x`` is split into equal shares; the
            statistics are then those of the whole, gathered by ``pmean``. None: one device.
        where: bool, ``x``'s shape, or None: the statistics of the entries where it is
            True only (a reduction with none of them: mean 0, std 0).

    Returns:
        ``(mean, std)``: two arrays of ``x``'s rank, with size 1 along ``axes`` (along
        every axis when ``axes`` is None).

    Examples:
        >>> import jax.numpy as jnp
        >>> mean, std = mean_std(jnp.array([[1.0, 2.0], [3.0, 4.0]]), (0,))
        >>> mean.tolist(), std.tolist()
        ([[2.0, 3.0]], [[1.0, 1.0]])
    """
    if where is not None:  # sums over the devices' shares, as ratios of their means
        count = jnp.maximum(pmean(jnp.sum(where, axis=axes, keepdims=True, dtype=x.dtype), axis_name), _EPS)
        total = lambda y: pmean(jnp.sum(jnp.where(where, y, 0.0), axis=axes, keepdims=True), axis_name)
        mean = total(x) / count
        return mean, jnp.sqrt(total(jnp.square(x - mean)) / count)
    mean = pmean(jnp.mean(x, axis=axes, keepdims=True), axis_name)
    return mean, jnp.sqrt(pmean(jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True), axis_name))


def policy_loss(
    log_prob: chex.Array,
    old_log_prob: chex.Array,
    advantages: chex.Array,
    S_R: chex.Array,
    clip_eps: chex.Numeric,
    weight_stats: bool = False,
    active: chex.Array | None = None,
) -> tuple[chex.Array, dict[str, chex.Array]]:
    """Support-matrix clipped surrogate loss (negated objective, to minimise).

    ``ρ̄_i = exp(Σ_k S_R[k, i] (log_prob_k − old_log_prob_k))`` and

        loss = − Σ_i mean_b min(ρ̄_i Â_i, clip(ρ̄_i, 1 − ε, 1 + ε) Â_i)

    (sum over terms, mean over the batch). The product ρ̄_i is clipped as one
    weight, not factor by factor.

    ``old_log_prob`` and ``advantages`` are wrapped in ``stop_gradient``; the metrics
    carry no gradient.

    Args:
        log_prob: ``[B, N]`` per-agent ``log π_k(a_k|o_k)`` under the current policy.
        old_log_prob: ``[B, N]`` the same under the behaviour policy.
        advantages: ``[B, N]`` term advantages Â_i, already aggregated with S_A
            (``aggregate_advantages``) and normalised.
        S_R: ``[N, N]`` 0/1 ratio support or its column lists (``aggregate_log_ratio``);
            may be traced.
        clip_eps: scalar ε; may be traced.
        weight_stats: static; also return the moments of ρ̄ (``weight_moments``, over
            every entry).
        active: bool ``[B, N]`` or None: an inactive agent's ratio leaves every product
            and its term the objective (the module docstring).

    Returns:
        ``(loss, metrics)``: the scalar loss, and a dict of scalar metrics: ``"clip_frac"``
        (fraction of (b, i) with ``|ρ̄_i − 1| > ε``), ``"approx_kl"`` (mean over b and
        agents k of ``(ρ_k − 1) − log ρ_k``, per-agent ratios) — each over the active
        entries with ``active`` — and, with ``weight_stats``, the ``WEIGHT_MOMENTS``.

    Raises:
        AssertionError: if ``log_prob``, ``old_log_prob`` and ``advantages`` are not all
            rank 2 with one shape, or a dense ``S_R`` is not ``[N, N]`` (chex checks).
        ValueError: if ``S_R`` as neighbour lists lists rows or does not stand for an
            ``[N, N]`` matrix.
    """
    chex.assert_rank([log_prob, old_log_prob, advantages], 2)
    chex.assert_equal_shape([log_prob, old_log_prob, advantages])
    old_log_prob = jax.lax.stop_gradient(old_log_prob)
    advantages = jax.lax.stop_gradient(advantages)

    log_ratio = log_prob - old_log_prob  # [B, N], per agent k
    if active is not None:
        log_ratio = jnp.where(active, log_ratio, 0.0)
    rho_bar = jnp.exp(aggregate_log_ratio(log_ratio, S_R))  # [B, N], per term i
    clipped = jnp.clip(rho_bar, 1.0 - clip_eps, 1.0 + clip_eps)
    surrogate = jnp.minimum(rho_bar * advantages, clipped * advantages)
    if active is not None:
        surrogate = jnp.where(active, surrogate, 0.0)
    loss = -jnp.sum(jnp.mean(surrogate, axis=0))

    rho_bar = jax.lax.stop_gradient(rho_bar)
    log_ratio = jax.lax.stop_gradient(log_ratio)
    metrics = {
        "clip_frac": clip_fraction(rho_bar, clip_eps, active),
        "approx_kl": masked_mean(jnp.expm1(log_ratio) - log_ratio, active),
        **(weight_moments(rho_bar) if weight_stats else {}),
    }
    return loss, metrics


def value_loss(
    values: chex.Array,
    old_values: chex.Array,
    returns: chex.Array,
    clip_eps: chex.Numeric,
    huber_delta: chex.Numeric | None = None,
) -> chex.Array:
    """PPO clipped value loss, per agent critic.

        0.5 · max((v − R)², (v_old + clip(v − v_old, −ε, ε) − R)²)

    summed over agents, averaged over the batch; with ``huber_delta`` given, the
    clipped Huber loss ``value_loss_huber`` (MAPPO's critic loss) instead.
    ``old_values`` and ``returns`` are wrapped in ``stop_gradient``.

    Args:
        values: ``[B, N]`` current critic values.
        old_values: ``[B, N]`` values at rollout time.
        returns: ``[B, N]`` value targets.
        clip_eps: scalar ε; may be traced.
        huber_delta: None for the squared error; otherwise the scalar Huber δ > 0 of
            ``value_loss_huber`` (may be traced). Whether it is None is static.

    Returns:
        Scalar loss.

    Raises:
        AssertionError: if ``values``, ``old_values`` and ``returns`` are not all rank 2
            with one shape (chex checks).
    """
    if huber_delta is not None:
        return value_loss_huber(values, old_values, returns, clip_eps, delta=huber_delta)
    return _clipped_value_loss(values, old_values, returns, clip_eps, lambda e: 0.5 * jnp.square(e), True)


def _clipped_value_loss(values, old_values, returns, clip_eps, error_loss, clip) -> chex.Array:
    """``max(f(R − v), f(R − v_clip))`` (only ``f(R − v)`` when not ``clip``) with
    ``v_clip = v_old + clip(v − v_old, −ε, ε)``; summed over agents, mean over batch."""
    chex.assert_rank([values, old_values, returns], 2)
    chex.assert_equal_shape([values, old_values, returns])
    old_values = jax.lax.stop_gradient(old_values)
    returns = jax.lax.stop_gradient(returns)
    clipped_values = old_values + jnp.clip(values - old_values, -clip_eps, clip_eps)
    loss_original = error_loss(returns - values)
    loss_clipped = error_loss(returns - clipped_values)
    per_entry = jnp.where(clip, jnp.maximum(loss_original, loss_clipped), loss_original)
    return jnp.mean(jnp.sum(per_entry, axis=-1))


def huber(x: chex.Array, delta: chex.Numeric) -> chex.Array:
    """Elementwise Huber function: ``½ x²`` for ``|x| ≤ δ``, ``δ (|x| − ½ δ)`` otherwise.

    Args:
        x: float array of any shape.
        delta: scalar δ > 0; may be traced.

    Returns:
        Array shaped like ``x``.

    Examples:
        >>> import jax.numpy as jnp
        >>> huber(jnp.array([0.5, -3.0]), 1.0).tolist()
        [0.125, 2.5]
    """
    return optax.losses.huber_loss(x, delta=delta)


def value_loss_huber(
    values: chex.Array,
    old_values: chex.Array,
    returns: chex.Array,
    clip_eps: chex.Numeric,
    delta: chex.Numeric = 10.0,
    clip: chex.Numeric = True,
) -> chex.Array:
    """Clipped Huber value loss of MAPPO / HARL, per agent critic.

        v_clip = v_old + clip(v − v_old, −ε, ε)
        loss   = max(huber(R − v, δ), huber(R − v_clip, δ))   (only huber(R − v, δ)
                                                              when ``clip`` is False)

    summed over agents, averaged over the batch (as ``value_loss``). Reference:
    ``cal_value_loss`` in marlbenchmark/on-policy
    ``onpolicy/algorithms/r_mappo/r_mappo.py`` and PKU-MARL/HARL
    ``harl/algorithms/critics/v_critic.py``; defaults ``huber_delta = 10``,
    ``use_huber_loss``/``use_clipped_value_loss`` True (on-policy
    ``onpolicy/config.py``, HARL ``harl/configs/algos_cfgs/mappo.yaml``). There the
    targets are first normalised with ValueNorm (``jaxpo.core.valuenorm``: ``update`` with
    the returns, then ``normalize``), so ``returns`` should be the normalised
    returns and ``values``/``old_values`` the critic's normalised outputs.
    Differences from the reference: it averages over every (batch, agent) entry
    (×1/N relative to this sum over agents) and can weight by active masks; and
    on-policy's ``huber_loss`` (``onpolicy/utils/util.py``) tests ``e > d`` instead of
    ``|e| > d``, giving zero loss for errors below −δ — this follows HARL's
    ``harl/utils/models_tools.py``, the standard Huber function.

    ``old_values`` and ``returns`` are wrapped in ``stop_gradient``.

    Args:
        values: ``[B, N]`` current critic values.
        old_values: ``[B, N]`` values at rollout time.
        returns: ``[B, N]`` value targets.
        clip_eps: scalar ε; may be traced.
        delta: scalar Huber δ > 0; may be traced.
        clip: whether to take the max with the clipped loss; a bool, may be traced.

    Returns:
        Scalar loss.

    Raises:
        AssertionError: if ``values``, ``old_values`` and ``returns`` are not all rank 2
            with one shape (chex checks).
    """
    return _clipped_value_loss(values, old_values, returns, clip_eps, lambda e: huber(e, delta), clip)


def entropy_bonus(entropy: chex.Array, active: chex.Array | None = None) -> chex.Array:
    """Policy entropy summed over agents, averaged over the batch.

    Args:
        entropy: ``[B, N]`` per-agent policy entropies.
        active: bool ``[B, N]`` or None: inactive entries count as zero.

    Returns:
        Scalar ``mean_b Σ_k entropy[b, k]``.

    Raises:
        AssertionError: if ``entropy`` is not rank 2 (chex check).
    """
    chex.assert_rank(entropy, 2)
    if active is not None:
        entropy = jnp.where(active, entropy, 0.0)
    return jnp.mean(jnp.sum(entropy, axis=-1))


def ppo_loss(
    log_prob: chex.Array,
    old_log_prob: chex.Array,
    advantages: chex.Array,
    values: chex.Array,
    old_values: chex.Array,
    returns: chex.Array,
    entropy: chex.Array,
    S_R: chex.Array,
    clip_eps: chex.Numeric,
    vf_coef: chex.Numeric,
    ent_coef: chex.Numeric,
    huber_delta: chex.Numeric | None = None,
    weight_stats: bool = False,
    active: chex.Array | None = None,
) -> tuple[chex.Array, dict[str, chex.Array]]:
    """Total loss ``policy_loss + vf_coef · value_loss − ent_coef · entropy_bonus``.

    ``clip_eps`` is used for both the policy ratio and the value clipping. Every scalar
    and S_R may be traced. The value loss is ``value_loss`` (squared error), or
    ``value_loss_huber`` with δ = ``huber_delta`` when that is given (MAPPO's critic loss).

    Args:
        log_prob: ``[B, N]`` per-agent ``log π_k(a_k|o_k)`` under the current policy.
        old_log_prob: ``[B, N]`` the same under the behaviour policy.
        advantages: ``[B, N]`` term advantages Â_i, aggregated with S_A and normalised.
        values: ``[B, N]`` current critic values.
        old_values: ``[B, N]`` critic values at rollout time.
        returns: ``[B, N]`` value targets.
        entropy: ``[B, N]`` per-agent policy entropies under the current policy.
        S_R: ``[N, N]`` 0/1 ratio support or its column lists (``NeighbourLists`` with
            ``by_column=True``).
        clip_eps: scalar ε for the policy ratio and the value clipping.
        vf_coef: scalar weight of the value loss.
        ent_coef: scalar weight of the entropy bonus (subtracted).
        huber_delta: None for the squared-error value loss, else the scalar Huber δ > 0.
        weight_stats: static; also return the ``WEIGHT_MOMENTS`` of ρ̄.
        active: bool ``[B, N]`` or None: the agents acting at each sample; an inactive
            agent leaves the policy loss and the entropy (the module docstring).

    Returns:
        ``(loss, metrics)``: the scalar total loss, and a dict of scalar metrics
        ``"policy_loss"``, ``"value_loss"``, ``"entropy"``, ``"clip_frac"``,
        ``"approx_kl"``, ``"loss"`` and, with ``weight_stats``, the ``WEIGHT_MOMENTS`` of ρ̄.

    Raises:
        AssertionError: if the per-agent inputs are not all rank 2 of one shape ``[B, N]``
            or a dense ``S_R`` is not ``[N, N]`` (chex checks).
        ValueError: if ``S_R`` as neighbour lists lists rows or does not stand for an
            ``[N, N]`` matrix.
    """
    chex.assert_equal_shape([log_prob, values, entropy])
    pi_loss, pi_metrics = policy_loss(log_prob, old_log_prob, advantages, S_R, clip_eps, weight_stats, active)
    v_loss = value_loss(values, old_values, returns, clip_eps, huber_delta)
    ent = entropy_bonus(entropy, active)
    loss = pi_loss + vf_coef * v_loss - ent_coef * ent
    metrics = {
        "policy_loss": pi_loss,
        "value_loss": v_loss,
        "entropy": ent,
        **pi_metrics,
        "loss": loss,
    }
    return loss, metrics
