"""Config, the compiled training step and the driver loop.

* ``Config`` — *static* fields: everything that fixes shapes and loop lengths
  (environment, sizes, network, update schedule, string options). Hashable; one
  compiled program per config.
* ``Hyper`` — *traced* fields: learning rate, clip ε, γ, λ, loss coefficients and
  the support matrices S_A, S_R. All arrays, so one compiled program is vmapped
  over a batch of them (seeds × hyperparameters × supports).
* ``Trainer`` — pure ``init`` / ``step`` / ``chunk`` functions for one config; the
  chunk (``lax.scan`` of K train steps) is jitted and vmapped over runs.
* ``train`` — the Python driver: loops over chunks with a progress bar and writes
  ``runs/<name>/metrics.csv`` and ``learning_curve.png``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os
import time
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxpo import envs, happo, losses, valuenorm
from jaxpo.gae import gae
from jaxpo.networks import ACTIVATIONS, ActorCritic
from jaxpo.rollout import CRITIC_INPUTS, RolloutState, critic_input_dim, reset, rollout, shuffled_minibatches, to_sequences
from jaxpo.support import Support

ADV_NORM_SCOPES = ("none", "batch", "agent")
AGGREGATE_IN = ("advantage", "reward")
SCHEMES = ("simultaneous", "sequential")
VALUE_LOSSES = ("mse", "huber")


@dataclasses.dataclass(frozen=True)
class Config:
    """Static configuration: fixes shapes, loop lengths and code paths.

    Attributes:
        env: environment name (``jaxpo.envs.make``); env_kwargs: its parameters.
        num_envs: E, environments stepped in parallel per run.
        num_steps: T, rollout length per update.
        num_updates: total train steps; updates_per_chunk: K, steps per compiled chunk
            (the driver logs and reports between chunks).
        num_epochs, num_minibatches: PPO epochs over the T×E batch and minibatches per
            epoch; minibatches shuffle transitions (sequences, when recurrent) and keep
            all N agents together.
        hidden, activation: layer widths and nonlinearity for actor and critic.
        recurrent: GRU actor and critic (``Dense(hidden[0]) → GRU → Dense(hidden[1:])``)
            with hidden states reset exactly where episodes start, in the rollout and
            when sequences are replayed in the loss.
        seq_len: recurrent only — the rollout is cut into sequences of this many steps
            (each replayed from the hidden state stored at its start, MAPPO's
            ``data_chunk_length``); None: the whole rollout (T). Must divide T.
        share_params: one parameter set with agent-id input, or per-agent stacked sets.
        critic_input: "local" (own observation), "global" (world state, else all
            observations concatenated) or "agent" (that global state followed by the
            agent's own observation: an agent-specific state).
        adv_norm: advantage normalisation scope: "none", "batch" or "agent".
        aggregate_in: where S_A is applied — "advantage" (after per-agent GAE) or
            "reward" (before GAE; critic i then learns the aggregated return).
        scheme: "simultaneous" — every agent's term of the support-matrix objective in
            one gradient step; "sequential" — exact HAPPO: agents updated one after
            another in a fresh random order, each weighted by the detached product of
            the already-updated agents' ratios (``jaxpo.happo``). Sequential needs
            per-agent parameters and ignores S_R (the order plays its role).
        value_norm: MAPPO's running value normaliser (``jaxpo.valuenorm``, one per agent
            critic): critics predict normalised values, GAE runs on denormalised ones,
            statistics are updated with each minibatch's returns.
        value_loss: "mse" (clipped squared error) or "huber" (clipped Huber with
            δ = ``Hyper.huber_delta``, MAPPO's critic loss).
    """

    env: str = "MPE_simple_spread_v3"
    env_kwargs: Any = ()
    num_envs: int = 16
    num_steps: int = 128
    num_updates: int = 100
    updates_per_chunk: int = 10
    num_epochs: int = 4
    num_minibatches: int = 4
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    share_params: bool = True
    critic_input: str = "local"
    adv_norm: str = "batch"
    aggregate_in: str = "advantage"
    scheme: str = "simultaneous"
    value_norm: bool = False
    value_loss: str = "mse"
    recurrent: bool = False
    seq_len: int | None = None

    def __post_init__(self):
        kwargs = self.env_kwargs
        if isinstance(kwargs, Mapping):
            kwargs = tuple(sorted(kwargs.items()))
        object.__setattr__(self, "env_kwargs", tuple(kwargs))
        object.__setattr__(self, "hidden", tuple(self.hidden))
        for field in ("num_envs", "num_steps", "num_updates", "updates_per_chunk", "num_epochs", "num_minibatches"):
            value = getattr(self, field)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Config.{field} must be a positive integer, got {value!r}")
        if self.seq_len is not None:
            if not self.recurrent:
                raise ValueError("Config.seq_len is for recurrent networks only (recurrent=True); "
                                 "feed-forward training shuffles single transitions")
            if not isinstance(self.seq_len, (int, np.integer)) or isinstance(self.seq_len, bool) or self.seq_len < 1:
                raise ValueError(f"Config.seq_len must be a positive integer or None, got {self.seq_len!r}")
            if self.num_steps % self.seq_len:
                raise ValueError(f"Config.seq_len ({self.seq_len}) must divide num_steps ({self.num_steps})")
        if self.num_sequences % self.num_minibatches:
            unit = "sequences" if self.recurrent else "transitions"
            raise ValueError(
                f"Config.num_minibatches ({self.num_minibatches}) must divide the number of {unit} per update, "
                f"num_envs * num_steps / sequence length ({self.num_envs} * {self.num_steps} / "
                f"{self.sequence_length} = {self.num_sequences})"
            )
        if self.num_updates % self.updates_per_chunk:
            raise ValueError(
                f"Config.updates_per_chunk ({self.updates_per_chunk}) must divide num_updates ({self.num_updates})"
            )
        for field, allowed in (
            ("critic_input", CRITIC_INPUTS),
            ("adv_norm", ADV_NORM_SCOPES),
            ("aggregate_in", AGGREGATE_IN),
            ("activation", tuple(ACTIVATIONS)),
            ("scheme", SCHEMES),
            ("value_loss", VALUE_LOSSES),
        ):
            if getattr(self, field) not in allowed:
                raise ValueError(f"Config.{field} must be one of {allowed}, got {getattr(self, field)!r}")
        if self.scheme == "sequential" and self.share_params:
            raise ValueError("Config.scheme='sequential' (exact HAPPO) needs share_params=False: "
                             "agents are updated one after another, each with its own parameters")
        if not self.hidden or any(not isinstance(h, (int, np.integer)) or h < 1 for h in self.hidden):
            raise ValueError(f"Config.hidden must be a non-empty tuple of positive ints, got {self.hidden!r}")

    @property
    def sequence_length(self) -> int:
        """L, steps per training sequence: ``seq_len`` or T when recurrent, 1 otherwise."""
        if not self.recurrent:
            return 1
        return self.num_steps if self.seq_len is None else self.seq_len

    @property
    def num_sequences(self) -> int:
        """Training sequences per update: E × T / L."""
        return self.num_envs * self.num_steps // self.sequence_length

    @property
    def num_chunks(self) -> int:
        return self.num_updates // self.updates_per_chunk

    @property
    def steps_per_update(self) -> int:
        """Environment steps (of all E environments) per train step: T × E."""
        return self.num_steps * self.num_envs

    def make_env(self) -> envs.Env:
        return envs.make(self.env, **dict(self.env_kwargs))


@struct.dataclass
class Hyper:
    """Traced hyperparameters — all arrays, so a batch of them is vmapped.

    Scalars are float32 ``[]`` (``[R]`` when batched over R runs); ``S_A``, ``S_R``
    are float32 ``[N, N]`` (``[R, N, N]``).
    """

    lr: jax.Array
    clip_eps: jax.Array
    gamma: jax.Array
    gae_lambda: jax.Array
    vf_coef: jax.Array
    ent_coef: jax.Array
    max_grad_norm: jax.Array
    huber_delta: jax.Array
    S_A: jax.Array
    S_R: jax.Array

    @classmethod
    def create(
        cls,
        support: Support,
        lr: float = 3e-3,
        clip_eps: float = 0.2,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        vf_coef: float = 0.5,
        ent_coef: float = 0.01,
        max_grad_norm: float = 0.5,
        huber_delta: float = 10.0,
    ) -> "Hyper":
        """One run's hyperparameters; ``support`` gives S_A and S_R."""
        scalars = dict(
            lr=lr, clip_eps=clip_eps, gamma=gamma, gae_lambda=gae_lambda,
            vf_coef=vf_coef, ent_coef=ent_coef, max_grad_norm=max_grad_norm, huber_delta=huber_delta,
        )
        for name, value in scalars.items():
            if not isinstance(value, (int, float, np.floating, np.integer)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        for name in ("lr", "clip_eps", "max_grad_norm", "huber_delta"):
            if scalars[name] <= 0:
                raise ValueError(f"{name} must be > 0, got {scalars[name]}")
        for name in ("gamma", "gae_lambda"):
            if not 0 <= scalars[name] <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {scalars[name]}")
        for name in ("vf_coef", "ent_coef"):
            if scalars[name] < 0:
                raise ValueError(f"{name} must be >= 0, got {scalars[name]}")
        if not isinstance(support, Support):
            raise ValueError(f"support must be a jaxpo.support.Support, got {type(support).__name__}")
        support.validate()
        return cls(
            **{k: jnp.asarray(v, jnp.float32) for k, v in scalars.items()},
            S_A=jnp.asarray(support.S_A, jnp.float32),
            S_R=jnp.asarray(support.S_R, jnp.float32),
        )

    @staticmethod
    def stack(hypers: Sequence["Hyper"]) -> "Hyper":
        """Stacks R single-run ``Hyper`` values into one batched ``Hyper`` ``[R, ...]``."""
        if not hypers:
            raise ValueError("hypers must be a non-empty sequence of Hyper")
        shapes = {h.S_A.shape for h in hypers}
        if len(shapes) != 1:
            raise ValueError(f"all hypers must have the same number of agents, got S_A shapes {sorted(shapes)}")
        return jax.tree.map(lambda *xs: jnp.stack(xs), *hypers)


@struct.dataclass
class TrainState:
    """Everything one run carries between train steps (a pytree; batched as ``[R, ...]``)."""

    params: Any
    opt_state: Any
    rollout: RolloutState
    value_norm: valuenorm.ValueNormState | None  # [N] statistics; None without value_norm
    key: jax.Array
    update: jax.Array  # int32 [] — train steps done


def _optimizer(hyper: Hyper) -> optax.GradientTransformation:
    # Built inside the traced function: lr and max_grad_norm are traced arrays.
    return optax.chain(optax.clip_by_global_norm(hyper.max_grad_norm), optax.adam(hyper.lr, eps=1e-5))


class Trainer:
    """The compiled training program for one static ``Config``.

    Pure functions (all vmappable over runs):
      ``init(key, hyper) -> TrainState``
      ``step(state, hyper) -> (state, metrics)`` — one train step: rollout → GAE →
        aggregation → epochs × minibatches.
      ``chunk(state, hyper) -> (state, metrics [K])`` — ``lax.scan`` of K steps.
    Batched, jitted versions over a leading run axis R: ``init_runs``, ``chunk_runs``.
    """

    def __init__(self, config: Config):
        self.config = config
        self.env = envs.AutoReset(config.make_env())
        self.critic_dim = critic_input_dim(self.env, config.critic_input)
        self.net = ActorCritic.create(
            num_agents=self.env.num_agents,
            obs_dim=self.env.obs_dim,
            num_actions=self.env.num_actions,
            critic_dim=self.critic_dim,
            hidden=config.hidden,
            activation=config.activation,
            shared=config.share_params,
            recurrent=config.recurrent,
            continuous=self.env.continuous,
        )
        self.init_runs = jax.jit(jax.vmap(self.init))
        self.chunk_runs = jax.jit(jax.vmap(self.chunk), donate_argnums=0)

    @property
    def num_agents(self) -> int:
        return self.env.num_agents

    def init(self, key: jax.Array, hyper: Hyper) -> TrainState:
        key_params, key_env, key = jax.random.split(key, 3)
        params = self.net.init(key_params)
        optimizer = _optimizer(hyper)
        if self.config.scheme == "sequential":  # one Adam state per agent actor, as in HARL
            opt_state = {"actor": happo.init_opt_state(optimizer, params["actor"]),
                         "critic": optimizer.init(params["critic"])}
        else:
            opt_state = optimizer.init(params)
        return TrainState(
            params=params,
            opt_state=opt_state,
            rollout=reset(self.env, self.net, key_env, self.config.num_envs),
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

    def _loss(self, params: Any, batch: Any, advantages: jax.Array, targets: jax.Array, hyper: Hyper):
        """PPO loss on a minibatch of b sequences of L steps (leaves ``[b, L, N, ...]``;
        L = 1 for feed-forward networks): sequences are replayed from their stored
        hidden states, resetting them where episodes start, exactly as in the rollout."""
        h0, first, tm = self._unroll_inputs(batch)
        dist = self.net.unroll_policy(params["actor"], h0["actor"], tm(batch.obs), tm(batch.action_mask), first)
        values = self.net.unroll_value(params["critic"], h0["critic"], tm(batch.critic_obs), first)
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
        )

    def _critic_loss(self, critic_params: Any, batch: Any, advantages: jax.Array, targets: jax.Array, hyper: Hyper):
        """The critic's share of the loss alone (the sequential scheme trains actors apart)."""
        h0, first, tm = self._unroll_inputs(batch)
        values = self.net.unroll_value(critic_params, h0["critic"], tm(batch.critic_obs), first)
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
        (MAPPO's reference order). Returns ``((params, opt_state, value_norm), metrics)``.
        """
        cfg = self.config
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        def minibatch_update(carry, minibatch):
            params, opt_state, norm = carry
            batch, adv, tgt = minibatch
            if cfg.value_norm:
                norm = valuenorm.update(norm, tgt)
                tgt = valuenorm.normalize(norm, tgt)
            (_, metrics), grads = grad_fn(params, batch, adv, tgt, hyper)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state, norm), metrics

        def epoch(carry, key):
            return jax.lax.scan(minibatch_update, carry, shuffled_minibatches(key, data, cfg.num_minibatches))

        return jax.lax.scan(epoch, (params, opt_state, value_norm), jax.random.split(key, cfg.num_epochs))

    def advantages(self, state: TrainState, traj: Any, hyper: Hyper) -> tuple[jax.Array, jax.Array]:
        """``(advantages, value targets)``, each ``[T, E, N]``, for a rollout ``traj``.

        Per-agent GAE (truncated steps bootstrap from the final observation's value; on
        denormalised values under value normalisation), S_A applied to rewards or to
        advantages, then advantage normalisation. Targets are unnormalised returns.
        """
        cfg = self.config
        values, next_values = traj.value, traj.final_value
        if cfg.value_norm:
            values = valuenorm.denormalize(state.value_norm, values)
            next_values = valuenorm.denormalize(state.value_norm, next_values)
        rewards = traj.reward
        if cfg.aggregate_in == "reward":
            rewards = losses.aggregate_advantages(rewards, hyper.S_A)
        flags = lambda x: jnp.broadcast_to(x[..., None], rewards.shape)
        advantages, targets = gae(
            rewards, values, next_values, flags(traj.terminated), flags(traj.truncated),
            hyper.gamma, hyper.gae_lambda,
        )
        if cfg.aggregate_in == "advantage":
            advantages = losses.aggregate_advantages(advantages, hyper.S_A)
        return losses.normalize_advantages(advantages, cfg.adv_norm), targets

    def step(self, state: TrainState, hyper: Hyper) -> tuple[TrainState, dict[str, jax.Array]]:
        cfg = self.config
        key, key_rollout, key_epochs = jax.random.split(state.key, 3)
        rollout_state, traj = rollout(
            self.env, self.net, state.params, state.rollout, key_rollout, cfg.num_steps, cfg.critic_input
        )
        advantages, targets = self.advantages(state, traj, hyper)

        # [T, E] -> [S, L]: S sequences of L steps (L = 1 feed-forward); agents stay
        # together in each sample. Only the fields the loss reads are shuffled.
        loss_inputs = traj.replace(
            reward=None, terminated=None, truncated=None, final_value=None,
            episode_return=None, episode_length=None, episode_won=None,
        )
        data = jax.tree.map(lambda x: to_sequences(x, cfg.sequence_length), (loss_inputs, advantages, targets))
        optimizer = _optimizer(hyper)
        if cfg.scheme == "simultaneous":
            (params, opt_state, norm), loss_metrics = self._epochs(
                self._loss, state.params, state.opt_state, state.value_norm, data, key_epochs, optimizer, hyper
            )
        else:  # exact HAPPO: actors one after another, then the critics
            key_order, key_actor, key_epochs = jax.random.split(key_epochs, 3)
            order = jax.random.permutation(key_order, self.num_agents)
            batch, actor_advantages, extra = self._happo_inputs(data[0], data[1])
            actor, actor_opt, actor_metrics = happo.sequential_actor_update(
                self.net.agent_policy, state.params["actor"], state.opt_state["actor"], optimizer,
                batch, actor_advantages, order, key_actor, hyper.clip_eps, hyper.ent_coef,
                cfg.num_epochs, cfg.num_minibatches, extra_inputs=extra,
            )
            (critic, critic_opt, norm), critic_metrics = self._epochs(
                self._critic_loss, state.params["critic"], state.opt_state["critic"], state.value_norm,
                data, key_epochs, optimizer, hyper,
            )
            params = {"actor": actor, "critic": critic}
            opt_state = {"actor": actor_opt, "critic": critic_opt}
            loss_metrics = {**actor_metrics, **critic_metrics}

        episodes = jnp.sum(traj.episode_length > 0)
        mean_or_nan = lambda total: jnp.where(episodes > 0, total / jnp.maximum(episodes, 1), jnp.nan)
        metrics = {
            "return": mean_or_nan(traj.episode_return.sum()),
            "episode_length": mean_or_nan(traj.episode_length.sum().astype(jnp.float32)),
            "episodes": episodes,
            "reward": traj.reward.mean(),
            **({} if traj.episode_won is None else {"win_rate": mean_or_nan(traj.episode_won.sum())}),
            **jax.tree.map(jnp.mean, loss_metrics),
        }
        new_state = TrainState(
            params=params, opt_state=opt_state, rollout=rollout_state, value_norm=norm, key=key,
            update=state.update + 1,
        )
        return new_state, metrics

    def chunk(self, state: TrainState, hyper: Hyper) -> tuple[TrainState, dict[str, jax.Array]]:
        """K = ``updates_per_chunk`` train steps under ``lax.scan``; metrics ``[K]``.

        ``self.config.num_updates`` is not used here: the driver decides how many chunks run.
        """
        return jax.lax.scan(
            lambda s, _: self.step(s, hyper), state, None, length=self.config.updates_per_chunk
        )


def trainer(config: Config) -> Trainer:
    """The (cached) ``Trainer`` for ``config``.

    The compiled chunk does not depend on how many chunks run, so configs that differ
    only in ``num_updates`` share one ``Trainer`` and its compiled code.
    """
    return _trainer(dataclasses.replace(config, num_updates=config.updates_per_chunk))


@functools.lru_cache(maxsize=16)
def _trainer(program: Config) -> Trainer:
    return Trainer(program)


@dataclasses.dataclass
class TrainResult:
    """What ``train`` returns.

    Attributes:
        config: the static config. labels: one name per run (R).
        seeds: int [R]. hyper: the batched ``Hyper`` ``[R, ...]``.
        metrics: name -> float64 [R, U] per train step.
        env_steps: int [U] — environment steps per run after each train step.
        state: final batched ``TrainState``.
        out_dir: where the CSV and PNG were written (None if not written).
        seconds: wall time of the run; compile_seconds: of the first chunk (incl. compile).
    """

    config: Config
    labels: list[str]
    seeds: np.ndarray
    hyper: Hyper
    metrics: dict[str, np.ndarray]
    env_steps: np.ndarray
    state: TrainState
    out_dir: str | None
    seconds: float
    compile_seconds: float

    def final(self, metric: str = "return", last: float = 0.1) -> np.ndarray:
        """Mean of ``metric`` over the last ``last`` fraction of train steps, per run ``[R]``."""
        u = self.metrics[metric].shape[1]
        k = max(1, int(round(u * last)))
        return np.nanmean(self.metrics[metric][:, -k:], axis=1)

    def final_return(self, last: float = 0.1) -> np.ndarray:
        """Mean return over the last ``last`` fraction of train steps, per run ``[R]``."""
        return self.final("return", last)

    def initial_return(self) -> np.ndarray:
        """Return of the untrained policy (first train step's rollout), per run ``[R]``."""
        return self.metrics["return"][:, 0]

    def plot(self, path: str | None = None):
        from jaxpo.report import plot_learning_curves

        return plot_learning_curves(self, path)


def runs(supports: Support | Sequence[Support], seeds: Sequence[int] = (0,), **hparams) -> tuple[Hyper, np.ndarray, list[str]]:
    """The grid supports × seeds as one batch: ``(Hyper [R], seeds [R], labels)``.

    ``hparams`` are ``Hyper.create`` keywords shared by every run.
    """
    supports = [supports] if isinstance(supports, Support) else list(supports)
    seeds = [int(s) for s in seeds]
    if not supports or not seeds:
        raise ValueError("supports and seeds must be non-empty")
    grid = list(itertools.product(supports, seeds))
    hyper = Hyper.stack([Hyper.create(sup, **hparams) for sup, _ in grid])
    return hyper, np.array([s for _, s in grid]), [f"{sup.name}/seed{s}" for sup, s in grid]


def train(
    config: Config,
    hyper: Hyper,
    seeds: Sequence[int] | np.ndarray,
    *,
    labels: Sequence[str] | None = None,
    out_dir: str | None = None,
    progress: bool = True,
) -> TrainResult:
    """Trains R runs in one compiled program and returns their metrics.

    Args:
        config: static configuration.
        hyper: batched ``Hyper`` with leading axis R (see ``runs``/``Hyper.stack``), or a
            single ``Hyper`` used for every seed.
        seeds: R integer seeds (one per run).
        labels: R run names for the CSV/plot (default ``run{i}``).
        out_dir: if given, ``metrics.csv`` (rewritten atomically after every chunk, so a
            crash never leaves a torn file) and ``learning_curve.png`` are written there.
        progress: show a tqdm progress bar over chunks.
    """
    from jaxpo.report import plot_learning_curves, write_metrics_csv

    seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
    if seeds.size == 0:
        raise ValueError("seeds must hold at least one integer seed")
    num_runs = seeds.size
    if hyper.S_A.ndim == 2:  # one Hyper for every seed
        hyper = Hyper.stack([hyper] * num_runs)
    if hyper.S_A.ndim != 3 or hyper.S_A.shape[0] != num_runs:
        raise ValueError(f"hyper must be batched over {num_runs} runs (one per seed), got S_A {hyper.S_A.shape}")
    labels = list(labels) if labels is not None else [f"run{i}" for i in range(num_runs)]
    if len(labels) != num_runs:
        raise ValueError(f"labels must have one entry per run ({num_runs}), got {len(labels)}")
    tr = trainer(config)
    if hyper.S_A.shape[1:] != (tr.num_agents, tr.num_agents):
        raise ValueError(
            f"support matrices are {hyper.S_A.shape[1]}x{hyper.S_A.shape[2]} but the environment "
            f"{config.env!r} has {tr.num_agents} agents"
        )

    start = time.perf_counter()
    state = tr.init_runs(jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, jnp.uint32)), hyper)
    chunks: list[dict[str, np.ndarray]] = []
    compile_seconds = math.nan
    bar = _progress(config.num_chunks, progress)
    for i in range(config.num_chunks):
        state, metrics = tr.chunk_runs(state, hyper)
        metrics = jax.device_get(metrics)  # one small transfer per chunk
        if i == 0:
            compile_seconds = time.perf_counter() - start
        chunks.append(metrics)
        collected = {k: np.concatenate([c[k] for c in chunks], axis=1).astype(np.float64) for k in chunks[0]}
        env_steps = config.steps_per_update * np.arange(1, collected["return"].shape[1] + 1)
        if out_dir is not None:
            write_metrics_csv(os.path.join(out_dir, "metrics.csv"), labels, seeds, env_steps, collected)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(ret=f"{np.nanmean(collected['return'][:, -1]):.3f}")
    if bar is not None:
        bar.close()
    result = TrainResult(
        config=config, labels=labels, seeds=seeds, hyper=hyper, metrics=collected, env_steps=env_steps,
        state=state, out_dir=out_dir, seconds=time.perf_counter() - start, compile_seconds=compile_seconds,
    )
    if out_dir is not None:
        plot_learning_curves(result, os.path.join(out_dir, "learning_curve.png"))
    return result


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="train", unit="chunk")
