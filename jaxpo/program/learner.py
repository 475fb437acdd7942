"""The learner: pure ``init`` / ``step`` / ``chunk`` functions for one static ``Config``.

One train step = rollout → per-agent GAE → S_A aggregation → epochs × minibatches of
the support-matrix PPO update (or exact sequential HAPPO). A chunk is a ``lax.scan``
of K steps. Everything here is a function of arrays for one run: no device, mesh,
jit or host. ``jaxpo.program.compiled.Trainer`` vmaps these over runs, lays them out
on devices and compiles them; evaluation builds a ``Learner`` alone (its env and
networks). A data-parallel program maps the learner over a named device axis
(``axis``): its statistics, loss and metrics are then averaged over it.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

import jaxpo.envs as envs
from jaxpo.core import accumulate, diagnostics, happo, losses, state_supports, valuenorm
from jaxpo.core.axes import pmean, pmean_metrics
from jaxpo.core.gae import gae
from jaxpo.core.kernels import Unroll, for_platform
from jaxpo.core.networks import ActorCritic
from jaxpo.core.rollout import RolloutState, critic_input_dim, epochs, reset, rollout, to_sequences
from jaxpo.program.config import Config, Hyper
from jaxpo.program.optimiser import clipped_adam, learning_rate


@struct.dataclass
class TrainState:
    """Everything one run carries between train steps (a pytree; batched as ``[R, ...]``).

    ``Trainer.init_runs`` builds it and ``Trainer.chunk_runs`` advances it; a checkpoint
    stores it. Shapes below are one run's; a batch of R runs adds a leading ``[R]``.

    Attributes:
        params: the network parameters ``{"actor", "critic"}`` (per-agent parameter sets
            stacked on an agent axis N when ``Config.share_params`` is false).
        opt_state: the optimiser's state (gradient-norm clip, then Adam) for ``params``; with
            ``Config.scheme`` "sequential", ``{"actor", "critic"}`` with one Adam state per agent actor.
        rollout: what carries over between rollouts (``jaxpo.core.rollout.RolloutState``): the E
            environments' states, last timestep (``obs [E, N, O]``), hidden states ``[E, N, H]``.
        value_norm: the value normaliser's running statistics ``[N]`` (one per agent critic);
            None without ``Config.value_norm``.
        key: the run's PRNG key, split once per train step.
        update: int32 ``[]``, the train steps done.
    """

    params: Any
    opt_state: Any
    rollout: RolloutState
    value_norm: valuenorm.ValueNormState | None  # [N] statistics; None without value_norm
    key: jax.Array
    update: jax.Array  # int32 [] — train steps done


class Learner:
    """The pure learner of one static ``Config`` (all its functions vmappable over runs):

      ``init(key, hyper) -> TrainState``
      ``step(state, hyper) -> (state, metrics)`` — one train step: rollout → GAE →
        aggregation → epochs × minibatches.
      ``chunk(state, hyper) -> (state, metrics [K])`` — ``lax.scan`` of K steps.

    A step's parts, for diagnostics and experiments on one batch: ``collect`` (its
    rollout and training data), ``update`` (its epochs on given data), and the replay
    ``policy`` / ``log_probs`` of stored samples.

    Args:
        config: the static configuration.
        axis: the device axis a data-parallel program maps it over (None: one device per run).
        platform: the platform its programs run on, whose kernels the networks and the
            minibatch shuffle use, and whose loop unrolling applies where ``config.unroll``
            is None (``jaxpo.core.kernels.for_platform``; None: ``jax.default_backend()``).

    Raises:
        ValueError: what ``Config.make_env``, ``Config.cnn_layers`` and
            ``jaxpo.core.networks.ActorCritic.create`` raise.
    """

    def __init__(self, config: Config, axis: str | None = None, platform: str | None = None):
        self.config, self.axis, self.platform = config, axis, platform
        self.kernels = for_platform(platform)
        self.unroll = self.kernels.unroll if config.unroll is None else Unroll(*[config.unroll] * 3)
        self.env = envs.AutoReset(config.make_env(), active=config.active_agents)
        self.critic_dim = critic_input_dim(self.env, config.critic_input)
        hops = config.interaction_hops
        self.per_state = None if hops is None else state_supports.PerState(self.env, hops)
        conv = config.cnn_layers(self.env)
        self.image_obs = bool(conv)
        self.net = ActorCritic.create(
            num_agents=self.env.num_agents, obs_dim=self.env.obs_dim, num_actions=self.env.num_actions,
            critic_dim=self.critic_dim,
            hidden=config.hidden,
            activation=config.activation,
            shared=config.share_params,
            recurrent=config.recurrent,
            continuous=self.env.continuous,
            shared_trunk=config.shared_trunk,
            agent_ids=config.agent_ids,
            conv=conv,
            image_shape=self.env.obs_shape if conv else (),
            critic_conv=config.critic_input == "local",
            platform=platform,
        )

    @property
    def num_agents(self) -> int:
        return self.env.num_agents

    def init(self, key: jax.Array, hyper: Hyper) -> TrainState:
        key_params, key_env, key = jax.random.split(key, 3)
        params = self.net.init(key_params)
        optimizer = clipped_adam(hyper)
        if self.config.scheme == "sequential":  # one Adam state per agent actor, as in HARL
            opt_state = {"actor": happo.init_opt_state(optimizer, params["actor"]),
                         "critic": optimizer.init(params["critic"])}
        else:
            opt_state = optimizer.init(params)
        return TrainState(
            params=params,
            opt_state=opt_state,
            rollout=reset(self.env, self.net, key_env, self.config.num_envs, self.config.critic_input),
            value_norm=valuenorm.init((self.num_agents,)) if self.config.value_norm else None,
            key=key,
            update=jnp.zeros((), jnp.int32),
        )

    def _unroll_inputs(self, batch: Any) -> tuple[Any, jax.Array, Any]:
        """``(h0, first [L, b], time_major)`` for a minibatch of b sequences ``[b, L, ...]``:
        the hidden states stored at each sequence's start and a time-major view."""
        h0 = jax.tree.map(lambda h: h[:, 0], batch.carry)
        time_major = lambda x: jnp.swapaxes(x, 0, 1)
        return h0, time_major(batch.first), time_major

    def _flat(self, x: jax.Array) -> jax.Array:
        """``[L, b, N] -> [L * b, N]``: the losses take one batch axis."""
        return x.reshape(-1, self.num_agents)

    def policy(self, actor_params: Any, batch: Any) -> Any:
        """The actor's distribution over a minibatch of b sequences of L steps (leaves
        ``[b, L, N, ...]``; L = 1 for feed-forward networks), time-major ``[L, b, N]``:
        sequences are replayed from their stored hidden states, resetting them where
        episodes start, exactly as in the rollout."""
        h0, first, tm = self._unroll_inputs(batch)
        return self.net.unroll_policy(actor_params, h0["actor"], tm(batch.obs), tm(batch.action_mask), first)

    def flat_time_major(self, x: jax.Array) -> jax.Array:
        """``[b, L, N] -> [L * b, N]``: the rows in the order of ``log_probs``."""
        return self._flat(jnp.swapaxes(x, 0, 1))

    def log_probs(self, actor_params: Any, batch: Any) -> jax.Array:
        """``[L * b, N]``: each agent's log-probability of its stored action under
        ``actor_params`` (``policy``'s replay of the b sequences), time-major rows."""
        return self._flat(self.policy(actor_params, batch).log_prob(jnp.swapaxes(batch.action, 0, 1)))

    def _loss(self, params: Any, batch: Any, advantages: jax.Array, targets: jax.Array, hyper: Hyper):
        """PPO loss on a minibatch of b sequences of L steps (leaves ``[b, L, N, ...]``),
        actor and critic replayed as in ``policy``."""
        h0, first, tm = self._unroll_inputs(batch)
        dist, values = self.net.unroll(params, h0, tm(batch.obs), tm(batch.action_mask), tm(batch.critic_input), first)
        flat = self._flat  # [L, b, N] -> [L * b, N]
        return losses.ppo_loss(
            log_prob=flat(dist.log_prob(tm(batch.action))),
            old_log_prob=flat(tm(batch.log_prob)),
            advantages=flat(tm(advantages)),
            values=flat(values),
            old_values=flat(tm(batch.value)),
            returns=flat(tm(targets)),
            entropy=flat(dist.entropy()),
            S_R=hyper.S_R,
            clip_eps=hyper.clip_eps,
            vf_coef=hyper.vf_coef,
            ent_coef=hyper.ent_coef,
            huber_delta=self._huber_delta(hyper),
            weight_stats=self.config.diagnostics,
            active=None if batch.active is None else flat(tm(batch.active)),
        )

    def _critic_loss(self, critic_params: Any, batch: Any, advantages: jax.Array, targets: jax.Array, hyper: Hyper):
        """The critic's share of the loss alone (the sequential scheme trains actors apart)."""
        h0, first, tm = self._unroll_inputs(batch)
        values = self.net.unroll_value({"critic": critic_params}, h0, tm(batch.critic_input), first)
        flat_tm = lambda x: self._flat(tm(x))
        v_loss = losses.value_loss(self._flat(values), flat_tm(batch.value), flat_tm(targets), hyper.clip_eps,
                                   self._huber_delta(hyper))
        return hyper.vf_coef * v_loss, {"value_loss": v_loss}

    def _happo_inputs(self, sequences: Any, advantages: jax.Array) -> tuple[Any, jax.Array, tuple]:
        """Sequences ``[S, L, N, ...]`` in HAPPO's agent-major layout ``[S, N, L, ...]``
        (feed-forward: ``[S, N, ...]``, L = 1 dropped): ``(batch, advantages, extra_inputs)``,
        the extra inputs of recurrent actors being ``h0 [S, N, H]`` and ``first [S, N, L]``."""
        batch = sequences.replace(carry=None, first=None, critic_obs=None, value=None)
        if not self.config.recurrent:
            drop_steps = lambda x: x[:, 0]
            return jax.tree.map(drop_steps, batch), drop_steps(advantages), ()
        agent_major = lambda x: jnp.swapaxes(x, 1, 2)
        first = sequences.first[:, None, :]
        first = jnp.broadcast_to(first, (first.shape[0], self.num_agents, first.shape[2]))
        extra = (sequences.carry["actor"][:, 0], first)
        return jax.tree.map(agent_major, batch), agent_major(advantages), extra

    def _huber_delta(self, hyper: Hyper) -> jax.Array | None:
        return hyper.huber_delta if self.config.value_loss == "huber" else None

    def _epochs(self, loss_fn, params, opt_state, value_norm, data, key, optimizer, hyper):
        """``num_epochs`` × ``num_minibatches`` optimiser steps of
        ``loss_fn(params, batch, advantages, targets, hyper)`` on reshuffled minibatches
        of ``data`` (``[B, ...]`` leaves). With value normalisation the statistics are
        first updated with the minibatch's returns, which are then normalised
        (MAPPO's reference order). Returns ``((params, opt_state, value_norm), metrics)``,
        metrics being ``loss_fn``'s and ``grad_norm`` (the gradient's global norm before
        clipping), each ``[num_epochs, num_minibatches]``.
        """
        cfg = self.config
        # Data parallel: the gradient of the devices' mean loss. (The gradient w.r.t.
        # replicated params is already summed over the axis, so a pmean of local
        # gradients would be D× too large.)
        def mean_loss(*args):
            loss, metrics = loss_fn(*args)
            return pmean(loss, self.axis), pmean_metrics(metrics, self.axis)

        grad_fn = accumulate.blockwise(jax.value_and_grad(mean_loss, has_aux=True), self.gradient_blocks(data),
                                       num_row_args=3)  # (batch, advantages, targets)

        def minibatch_update(carry, minibatch):
            params, opt_state, norm = carry
            batch, adv, tgt = minibatch
            if cfg.value_norm:
                norm = valuenorm.update(norm, tgt, axis_name=self.axis)
                tgt = valuenorm.normalize(norm, tgt)
            (_, metrics), grads = grad_fn(params, batch, adv, tgt, hyper)
            metrics = {**metrics, "grad_norm": optax.global_norm(grads)}  # before clipping
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state, norm), metrics

        return epochs(minibatch_update, (params, opt_state, value_norm), data, key, cfg.num_epochs, cfg.num_minibatches,
                      self.platform, self.unroll.minibatch)

    def gradient_blocks(self, data: Any) -> int:
        """How many equal blocks each minibatch's gradient is computed in, for ``data``
        (``training_data``'s, leaves ``[B, ...]``): ``Config.gradient_rows``, by default the
        platform's (``jaxpo.core.accumulate``), for a feed-forward network of dense layers on one
        device whose loss is a mean over all rows; otherwise 1. A recurrent network would
        replay fewer sequences per step, a CNN's blocks were never measured, masked
        metrics (``active``) are means over unequal counts, and each block would add
        the devices' collectives."""
        cfg, samples = self.config, jax.tree.leaves(data)[0].shape[0] // self.config.num_minibatches
        one_pass = cfg.recurrent or self.image_obs or data[0].active is not None or self.axis is not None
        rows = self.kernels.gradient_rows if cfg.gradient_rows is None else cfg.gradient_rows
        return 1 if one_pass else accumulate.gradient_blocks(samples, self.num_agents, rows)

    def advantages(self, state: TrainState, traj: Any, hyper: Hyper) -> tuple[jax.Array, jax.Array]:
        """``(advantages, value targets)``, each ``[T, E, N]``, for a rollout ``traj``.

        Per-agent GAE (truncated steps bootstrap from the final observation's value; on
        denormalised values under value normalisation), S_A applied to rewards or to
        advantages, then advantage normalisation. Targets are unnormalised returns.
        Where ``traj.active`` is given, an inactive agent's column leaves S_A and its
        advantages are 0 and out of the normalisation's statistics. GAE runs on as
        before: an agent's return is defined whether or not it acts (a dead SMAX unit
        still receives the team reward, a wireless user with an empty queue receives
        packets later), so its critic learns it in every state and the step before it
        stops acting bootstraps from that value.
        """
        cfg = self.config
        values, next_values = traj.value, traj.final_value
        if cfg.value_norm:
            values = valuenorm.denormalize(state.value_norm, values)
            next_values = valuenorm.denormalize(state.value_norm, next_values)
        rewards, active, S_A = traj.reward, traj.active, self.advantage_support(hyper, traj)
        if cfg.aggregate_in == "reward":
            rewards = losses.aggregate_advantages(rewards, S_A, active)
        flags = lambda x: jnp.broadcast_to(x[..., None], rewards.shape)
        advantages, targets = gae(
            rewards, values, next_values, flags(traj.terminated), flags(traj.truncated),
            hyper.gamma, hyper.gae_lambda, self.unroll.gae,
        )
        if cfg.aggregate_in == "advantage":
            advantages = losses.aggregate_advantages(advantages, S_A, active)
        return losses.normalize_advantages(advantages, cfg.adv_norm, self.axis, active), targets

    def advantage_support(self, hyper: Hyper, traj: Any) -> Any:
        """The S_A that aggregates ``traj``'s advantages: ``hyper.S_A``, or with
        ``Config.interaction_hops`` one per step and environment, built from each stored
        state's graph (``jaxpo.core.state_supports.PerState.support``)."""
        return hyper.S_A if self.per_state is None else self.per_state.support(hyper.S_A, traj.interaction)

    def training_data(self, state: TrainState, traj: Any, hyper: Hyper) -> tuple[Any, jax.Array, jax.Array]:
        """The samples of one update from a rollout ``traj`` (leaves ``[T, E, ...]``):
        ``(sequences, advantages, targets)``, leaves ``[S, L, ...]`` — S = E·T/L sequences
        of L consecutive steps (L = 1 feed-forward), all N agents of a step together in
        one sample. ``sequences`` keeps only the transition fields the loss reads, and of
        the hidden states only each sequence's first (``carry [S, 1, N, H]``, what a
        sequence is replayed from: gathering all L of them costs update time,
        ``docs/speed.md``); advantages are aggregated and normalised."""
        advantages, targets = self.advantages(state, traj, hyper)
        loss_inputs = traj.replace(
            reward=None, terminated=None, truncated=None, final_value=None,
            episode_return=None, episode_length=None, episode_won=None, carry=None, interaction=None,
        )
        seq_len = self.config.sequence_length
        sequences, advantages, targets = jax.tree.map(lambda x: to_sequences(x, seq_len),
                                                      (loss_inputs, advantages, targets))
        starts = jax.tree.map(lambda h: to_sequences(h[::seq_len], 1), traj.carry)  # [S, 1, N, H]
        return sequences.replace(carry=starts), advantages, targets

    def update(self, state: TrainState, data: Any, key: jax.Array, hyper: Hyper) -> tuple[tuple[Any, Any, Any], dict]:
        """``num_epochs`` × ``num_minibatches`` optimiser steps from ``state``'s parameters
        on ``data`` (``training_data``'s): ``((params, opt_state, value_norm), metrics)``,
        each metric ``[num_epochs, num_minibatches]`` (exact HAPPO: the actors' and the
        critics' metrics, as ``happo.sequential_actor_update`` and ``_epochs`` shape them)."""
        cfg = self.config
        optimizer = clipped_adam(hyper, learning_rate(cfg, hyper, state.update))
        if cfg.scheme == "simultaneous":
            return self._epochs(self._loss, state.params, state.opt_state, state.value_norm, data, self._own(key),
                                optimizer, hyper)
        # exact HAPPO: actors one after another, then the critics
        key_order, key_actor, key_epochs = jax.random.split(key, 3)
        order = jax.random.permutation(key_order, self.num_agents)
        batch, actor_advantages, extra = self._happo_inputs(data[0], data[1])
        actor, actor_opt, actor_metrics = happo.sequential_actor_update(
            self.net.agent_policy, state.params["actor"], state.opt_state["actor"], optimizer,
            batch, actor_advantages, order, self._own(key_actor), clip_eps=hyper.clip_eps, ent_coef=hyper.ent_coef,
            num_epochs=cfg.num_epochs, num_minibatches=cfg.num_minibatches, extra_inputs=extra, axis_name=self.axis,
            platform=self.platform, unroll=self.unroll.minibatch,
        )
        (critic, critic_opt, norm), critic_metrics = self._epochs(
            self._critic_loss, state.params["critic"], state.opt_state["critic"], state.value_norm,
            data, self._own(key_epochs), optimizer, hyper,
        )
        params = {"actor": actor, "critic": critic}
        opt_state = {"actor": actor_opt, "critic": critic_opt}
        return (params, opt_state, norm), {**actor_metrics, **critic_metrics}

    @staticmethod
    def step_keys(state: TrainState) -> tuple[jax.Array, jax.Array, jax.Array]:
        """A step's keys, split once from ``state.key``: ``(next state's key, rollout, update)``."""
        return tuple(jax.random.split(state.key, 3))

    def collect(self, state: TrainState, hyper: Hyper, key: jax.Array | None = None) -> tuple[RolloutState, Any, Any]:
        """The rollout the next ``step`` from ``state`` collects (``key``: its rollout key,
        by default the one that step draws): ``(rollout state after it, traj [T, E, ...],
        its training_data)``."""
        key = self.step_keys(state)[1] if key is None else key
        cfg = self.config
        rollout_state, traj = rollout(
            self.env, self.net, state.params, state.rollout, key, cfg.num_steps, cfg.critic_input,
            axis_name=self.axis, unroll=self.unroll.rollout, bootstrap=self.kernels.bootstrap,
            pack_stores=self.kernels.pack_stores,
            interaction=None if self.per_state is None else self.per_state.graph(hyper.S_A),
        )
        return rollout_state, traj, self.training_data(state, traj, hyper)

    def step(self, state: TrainState, hyper: Hyper) -> tuple[TrainState, dict[str, jax.Array]]:
        cfg = self.config
        key, key_rollout, key_epochs = self.step_keys(state)
        rollout_state, traj, data = self.collect(state, hyper, key_rollout)
        (params, opt_state, norm), loss_metrics = self.update(state, data, key_epochs, hyper)
        diagnosed = {}
        if cfg.diagnostics:  # static: without the flag the program is unchanged
            moments = {name: loss_metrics.pop(name) for name in losses.WEIGHT_MOMENTS}
            diagnosed = diagnostics.training_metrics(self, state.params["actor"], data, hyper, moments,
                                                     loss_metrics["clip_frac"])

        total = lambda x: jnp.sum(x) if self.axis is None else jax.lax.psum(jnp.sum(x), self.axis)
        episodes = total(traj.episode_length > 0)
        mean_or_nan = lambda x: jnp.where(episodes > 0, total(x) / jnp.maximum(episodes, 1), jnp.nan)
        metrics = {
            "return": mean_or_nan(traj.episode_return),
            "episode_length": mean_or_nan(traj.episode_length.astype(jnp.float32)),
            "episodes": episodes,
            "reward": pmean(traj.reward.mean(), self.axis),
            **({} if traj.episode_won is None else {"win_rate": mean_or_nan(traj.episode_won)}),
            **({"lr": learning_rate(cfg, hyper, state.update)} if cfg.anneal_lr else {}),
            **jax.tree.map(jnp.mean, loss_metrics),
            **diagnosed,
        }
        new_state = TrainState(
            params=params, opt_state=opt_state, rollout=rollout_state, value_norm=norm, key=key,
            update=state.update + 1,
        )
        return new_state, metrics

    def _own(self, key: jax.Array) -> jax.Array:
        """A minibatch-shuffle key: data parallel, each device's own (it shuffles its own
        share of the batch); everything else (e.g. HAPPO's agent order) stays shared."""
        return key if self.axis is None else jax.random.fold_in(key, jax.lax.axis_index(self.axis))

    def chunk(self, state: TrainState, hyper: Hyper) -> tuple[TrainState, dict[str, jax.Array]]:
        """K = ``updates_per_chunk`` train steps under ``lax.scan``; metrics ``[K]``.
        How many chunks run is the driver's business."""
        return jax.lax.scan(
            lambda s, _: self.step(s, hyper), state, None, length=self.config.updates_per_chunk
        )


@functools.lru_cache(maxsize=16)
def learner(config: Config) -> Learner:
    """The (cached) one-device ``Learner`` of ``config``: its env and networks, for
    evaluation, rendering and analysis without compiling a training program."""
    if not isinstance(config, Config):
        raise ValueError(f"config must be a jaxpo.Config, got {type(config).__name__}")
    return Learner(config)
