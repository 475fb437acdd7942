"""What the analysis says to watch: each agent's policy-gradient noise and the
importance weights' drift (``docs/design.md`` §1).

Aggregating m agents in the advantage (S_A) sums m advantage noises into each term;
aggregating them in the ratio (S_R) multiplies m likelihood ratios into its weight,
whose spread compounds once the policy leaves θ_old. These functions measure both, on
any ``TrainState`` and rollout, for any (S_A, S_R). Pure and jittable; vmap them over
runs like the learner. ``Config(diagnostics=True)`` logs them as training metrics.

**Per-agent policy gradient.** Agent k's gradient is the part of the surrogate's
gradient that flows through its own log-probabilities,
``g_k = Σ_t (∂J/∂log π_k(t)) ∇θ log π_k(t)`` with J the clipped surrogate objective
(``losses.policy_loss``, negated). With per-agent parameters it is the gradient with
respect to agent k's parameters; with shared parameters it is agent k's share of the
gradient (the shares sum to it). Per sample b (a transition; for recurrent policies a
sequence) ``g_bk``; the update's gradient is ``ḡ_k = mean_b g_bk``. Per agent:

* ``signal``   ``‖ḡ_k‖²``;
* ``variance`` ``Σ_b ‖g_bk − ḡ_k‖² / (B − 1)``, the trace of one sample's covariance;
* ``snr``      ``‖ḡ_k‖² / (variance / B)``, the batch gradient's squared norm over the
  variance of that estimate (0 where the variance is 0).

**Importance weights** ``ρ̄_i = exp(Σ_k S_R[k, i] log ρ_k)`` of every (sample, term):
mean, variance, max and the fraction outside ``[1 − ε, 1 + ε]``.

Typical use, on a state mid-training::

    tr = jaxpo.trainer(config)
    _, _, data = tr.collect(state, hyper)              # the next update's samples
    grads = policy_gradient_stats(tr, state.params["actor"], data, hyper)   # [N] each
    weights = importance_weight_stats(tr, params_after["actor"], data, hyper)
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp

from jaxpo.core import losses
from jaxpo.core.axes import varying


class Replay(Protocol):
    """What the diagnostics need of a learner (``jaxpo.Trainer`` is one): its agent
    count, the mapped device axis of a data-parallel run (None: one device), and the
    replay of stored samples under given actor parameters."""

    num_agents: int
    axis: str | None

    def log_probs(self, actor_params: Any, batch: Any) -> jax.Array:
        """``[L * b, N]`` log-probabilities of the stored actions of b sequences ``[b, L, N, ...]``."""

    def flat_time_major(self, x: jax.Array) -> jax.Array:
        """``[b, L, N] -> [L * b, N]``, the rows in the order of ``log_probs``."""


Hyper = Any  # the run's traced values (jaxpo.Hyper): S_R and clip_eps are read

# Elements of one scan step's per-sample, per-agent gradients (bounds the memory).
_CHUNK_ELEMENTS = 1 << 24


def sample_gradients(tr: Replay, actor_params: Any, samples: Any, advantages: jax.Array, hyper: Hyper) -> Any:
    """Each sample's per-agent policy gradient ``g_bk`` (module docstring).

    Args:
      tr: the run's learner (``Replay``; e.g. the ``Trainer`` of its config).
      actor_params: the actor parameters to differentiate at (one run's).
      samples: b samples, leaves ``[b, L, N, ...]`` (``Trainer.training_data``'s sequences).
      advantages: ``[b, L, N]`` the term advantages Â (aggregated, normalised).
      hyper: the run's ``Hyper`` (S_R, clip ε).

    Returns:
      A pytree like ``actor_params`` whose leaves are ``[b, N, *leaf shape]``: the
      gradient of sample b's objective through agent k's log-probabilities only.
    """
    n = tr.num_agents
    # Data parallel: typed per device, or the gradient would be summed over the devices'
    # samples (the transpose of replicated parameters is a psum).
    actor_params = varying(actor_params, tr.axis)

    def agent_gradients(sample, advantage):  # one sample: leaves [L, N, ...]
        batch = jax.tree.map(lambda x: x[None], sample)
        old_log_prob = tr.flat_time_major(batch.log_prob)
        advantage = tr.flat_time_major(advantage[None])
        active = None if batch.active is None else tr.flat_time_major(batch.active)

        def objective(params, agent):
            log_prob = tr.log_probs(params, batch)  # [L, N]
            live = jnp.arange(n) == agent  # the gradient flows through this agent's column only
            log_prob = jnp.where(live, log_prob, jax.lax.stop_gradient(log_prob))
            loss, _ = losses.policy_loss(log_prob, old_log_prob, advantage, hyper.S_R, hyper.clip_eps, active=active)
            return -loss

        return jax.vmap(jax.grad(objective), in_axes=(None, 0))(actor_params, jnp.arange(n))

    return jax.vmap(agent_gradients)(samples, advantages)


def _sum(x: jax.Array, axis_name: str | None) -> jax.Array:
    return x if axis_name is None else jax.lax.psum(x, axis_name)


def policy_gradient_stats(tr: Replay, actor_params: Any, data: Any, hyper: Hyper) -> dict[str, jax.Array]:
    """Per-agent signal, variance and SNR of the policy gradient (module docstring).

    Args:
      tr: the run's learner (``Replay``; e.g. the ``Trainer`` of its config).
      actor_params: the actor parameters (usually θ_old: the state's, before the update).
      data: ``(samples, advantages, targets)`` as ``Trainer.training_data`` / ``collect``
        return them (leaves ``[S, L, ...]``); targets are not read. Data parallel, each
        device's share: the statistics are those of the whole batch.
      hyper: the run's ``Hyper``.

    Returns:
      ``{"signal", "variance", "snr"}``, each float32 ``[N]``. The per-sample gradients
      are accumulated in chunks (a ``lax.scan``), so memory stays bounded for any S.
    """
    samples, advantages = data[0], data[1]
    size = advantages.shape[0]
    params_size = sum(x.size for x in jax.tree.leaves(actor_params))
    chunk = _largest_divisor(size, max(1, _CHUNK_ELEMENTS // (tr.num_agents * params_size)))
    chunked = jax.tree.map(lambda x: x.reshape(size // chunk, chunk, *x.shape[1:]), (samples, advantages))

    def accumulate(totals, chunk_data):
        grads = sample_gradients(tr, actor_params, *chunk_data, hyper)  # leaves [c, N, ...]
        total, squares = totals
        total = jax.tree.map(lambda t, g: t + g.sum(0), total, grads)
        squares = squares + sum(jnp.square(g).reshape(*g.shape[:2], -1).sum((0, 2)) for g in jax.tree.leaves(grads))
        return (total, squares), None

    n = tr.num_agents
    zeros = varying((jax.tree.map(lambda p: jnp.zeros((n, *p.shape), p.dtype), actor_params), jnp.zeros(n)), tr.axis)
    (total, squares), _ = jax.lax.scan(accumulate, zeros, chunked)
    count = _sum(jnp.asarray(size, jnp.float32), tr.axis)
    mean = jax.tree.map(lambda t: _sum(t, tr.axis) / count, total)
    signal = sum(jnp.square(m).reshape(n, -1).sum(1) for m in jax.tree.leaves(mean))
    # Σ_b ‖g_b − ḡ‖² = Σ_b ‖g_b‖² − B ‖ḡ‖²; rounding may leave it a hair below 0.
    variance = jnp.maximum(_sum(squares, tr.axis) - count * signal, 0.0) / jnp.maximum(count - 1, 1)
    noise = variance / count
    snr = jnp.where(noise > 0, signal / jnp.where(noise > 0, noise, 1.0), 0.0)
    return {"signal": signal, "variance": variance, "snr": snr}


def _largest_divisor(n: int, at_most: int) -> int:
    """The largest divisor of ``n`` that is ``<= at_most`` (static sizes)."""
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)


def weight_stats(moments: dict[str, jax.Array], clip_frac: jax.Array) -> dict[str, jax.Array]:
    """``{"mean", "variance", "max", "clip_frac"}`` of ρ̄ from its ``losses.weight_moments``."""
    dev = moments["rho_dev"]
    return {"mean": 1.0 + dev, "variance": jnp.maximum(moments["rho_dev_sq"] - jnp.square(dev), 0.0),
            "max": moments["rho_max"], "clip_frac": clip_frac}


def importance_weight_stats(tr: Replay, actor_params: Any, data: Any, hyper: Hyper) -> dict[str, jax.Array]:
    """Statistics of the term importance weights ``ρ̄_i`` of every (sample, term) of
    ``data`` under ``actor_params`` against the behaviour policy that collected it.

    Args: as ``policy_gradient_stats`` (data parallel: over the whole batch).

    Returns:
      ``{"mean", "variance", "max", "clip_frac"}``, float32 scalars; ``clip_frac`` is the
      fraction with ``|ρ̄_i − 1| > ε`` (of the active entries, where the samples say which
      agents act: an inactive agent's ratio is in no product). At the behaviour
      parameters, with any S_R, ρ̄ = 1.
    """
    samples = data[0]
    log_ratio = tr.log_probs(actor_params, samples) - tr.flat_time_major(samples.log_prob)
    active = None if samples.active is None else tr.flat_time_major(samples.active)
    if active is not None:  # an inactive agent's ratio is in no product (jaxpo.core.losses)
        log_ratio = jnp.where(active, log_ratio, 0.0)
    rho_bar = jnp.exp(losses.aggregate_log_ratio(log_ratio, hyper.S_R))
    clip_frac = losses.clip_fraction(rho_bar, hyper.clip_eps, active)
    moments = losses.pmean_metrics({**losses.weight_moments(rho_bar), "clip_frac": clip_frac}, tr.axis)
    return weight_stats(moments, moments["clip_frac"])


def training_metrics(tr: Replay, actor_params: Any, data: Any, hyper: Hyper,
                     moments: dict[str, jax.Array], clip_frac: jax.Array) -> dict[str, jax.Array]:
    """The metrics ``Config(diagnostics=True)`` adds to a train step.

    Args:
      actor_params: θ_old, the parameters that collected ``data``.
      moments: ``losses.WEIGHT_MOMENTS`` of each minibatch, ``[num_epochs, M]`` each, and
      clip_frac: ``[num_epochs, M]``, as the update's minibatch losses computed them
        (every sample is in one minibatch per epoch, so their means over M are the
        whole batch's; the max is the max).

    Returns:
      ``pg_signal``, ``pg_variance``, ``pg_snr``: ``policy_gradient_stats`` at θ_old,
      averaged over agents; ``rho_mean_e<e>``, ``rho_var_e<e>``, ``rho_max_e<e>``,
      ``rho_clip_e<e>`` for epochs e = 1…num_epochs: the weights that multiplied the
      advantages in that epoch (epoch 1's first minibatch is at θ_old, where ρ̄ = 1).
    """
    grads = policy_gradient_stats(tr, actor_params, data, hyper)
    metrics = {f"pg_{name}": jnp.mean(value) for name, value in grads.items()}
    per_epoch = {name: jnp.max(m, 1) if name == "rho_max" else jnp.mean(m, 1) for name, m in moments.items()}
    stats = weight_stats(per_epoch, jnp.mean(clip_frac, 1))
    short = {"mean": "mean", "variance": "var", "max": "max", "clip_frac": "clip"}
    for epoch in range(clip_frac.shape[0]):
        metrics.update({f"rho_{short[name]}_e{epoch + 1}": value[epoch] for name, value in stats.items()})
    return metrics
