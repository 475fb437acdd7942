"""What a training program is: ``Config`` (static, fixes the compiled program) and
``Hyper`` (traced, vmapped over runs).

* ``Config`` — environment, sizes, network, update schedule, options. Hashable; one
  compiled program per distinct value. How long a run trains is *not* here
  (``jaxpo.experiments.experiment.RunSettings``), so runs of any length share a program.
* ``Hyper`` — learning rate, clip ε, γ, λ, coefficients and the support matrices
  S_A, S_R: arrays inside the program, so one program is vmapped over a batch of
  them (seeds × hyperparameters × supports). Its scalar fields, with their defaults
  and allowed ranges, are also the ``hyper`` section of config files and CLI flags.

Each option's allowed values are declared once, as a ``Literal`` type (here or in the
module that consumes the option); validation, config files and the CLI read them
from the type (``jaxpo.program.fields``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Literal, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import jaxpo.envs as envs
from jaxpo.envs.params import is_number

from jaxpo.core import sparse
from jaxpo.core.checks import FieldError, Part, Setting, positive_int
from jaxpo.program.fields import choices, coerce, freeze, plain, thaw, type_hints
from jaxpo.core.losses import AdvNorm
from jaxpo.core.networks import Activation, Encoder
from jaxpo.program.parallel import Parallel
from jaxpo.core.rollout import CriticInput
from jaxpo.core.sparse import SupportForm
from jaxpo.core.support import Support

AggregateIn = Literal["advantage", "reward"]
Scheme = Literal["simultaneous", "sequential"]
ValueLoss = Literal["mse", "huber"]


@dataclasses.dataclass(frozen=True)
class Config:
    """Static configuration: fixes shapes, loop lengths and code paths (one compile each).

    Frozen and hashable: one compiled program per distinct value (``jaxpo.trainer``). How
    long a run trains is not a field (``jaxpo.RunSettings``), so runs of any length
    share a program. Every field is validated on construction.

    Raises:
        FieldError: (a ValueError, ``jaxpo.core.checks``; its path is ``config.<field>``)
            if a field is not of its type or allowed values (positive integers,
            booleans, the listed choices, non-empty tuples of positive ints), or fields
            disagree: ``num_minibatches`` does not divide the E × T / L samples of an update,
            ``seq_len`` is set without ``recurrent`` or does not divide ``num_steps``,
            ``conv_kernels`` and ``conv_features`` differ in length, ``scheme`` "sequential"
            with ``share_params``, ``diagnostics`` or ``shared_trunk`` with the sequential
            scheme, or ``shared_trunk`` with a ``critic_input`` other than "local".

    Attributes:
        env: environment name, a non-empty string (``jaxpo envs`` lists them).
        env_kwargs: the environment's parameters (a mapping; array values are hashed by value).
        num_envs: E, environments stepped in parallel per run.
        num_steps: T, rollout length per update.
        updates_per_chunk: K, train steps per compiled chunk (``lax.scan``); the driver
            logs, reports and checkpoints between chunks.
        num_epochs: PPO epochs over each rollout's T×E batch.
        num_minibatches: minibatches per epoch; they shuffle transitions (sequences, when
            recurrent) and keep all N agents together. Must divide the batch.
        hidden: layer widths of actor and critic (a non-empty tuple of positive ints; an int
            is one layer).
        activation: nonlinearity of actor and critic: "tanh", "relu" or "gelu".
        share_params: one parameter set with an agent-id input (true), or per-agent
            parameter sets stacked on an agent axis (false).
        agent_ids: shared parameters see a one-hot agent id (true; MAPPO's and Mava's
            add_agent_id) or nothing tells the agents apart but their observations (false;
            JaxMARL's IPPO and MAPPO networks). Ignored with per-agent parameters.
        critic_input: "local" (own observation), "global" (world state, else all
            observations concatenated) or "agent" (that global state followed by the
            agent's own observation).
        adv_norm: advantage normalisation scope: "none", "batch" (one mean and std over the
            batch) or "agent" (per agent).
        aggregate_in: where S_A is applied: "advantage" (to advantages after per-agent GAE)
            or "reward" (to rewards before GAE; critic i then learns the aggregated return).
        scheme: "simultaneous" (every term of the support-matrix objective in one
            gradient step) or "sequential" (exact HAPPO: agents updated one after another
            in a fresh random order; needs share_params false; ignores S_R).
        value_norm: MAPPO's running value normaliser (one per agent critic; GAE runs on
            denormalised values).
        value_loss: "mse" (clipped squared error) or "huber" (clipped Huber with
            δ = huber_delta, MAPPO's critic loss).
        recurrent: GRU actor and critic, hidden states reset exactly where episodes start.
        active_agents: where the environment reports which agents act (SMAX's living
            units, JaxNav's driving robots, wireless users holding a packet), an
            inactive agent leaves the objective: its term and entropy, its ratio from
            every product and its advantage from every credit (MAPPO's death masking,
            as a state-dependent support); its critic still learns its return. No
            effect where the environment reports none; false: inactive agents train
            like active ones (JaxMARL's and Mava's reference scripts).
        interaction_hops: κ ≥ 0 of a state-dependent khop, or None (the default): each
            step's S_A is the hyperparameters' S_A where agent i's action reaches agent
            j's reward within κ hops of that state's own coupling graph
            (``Env.interaction``, e.g. wireless users that both hold a packet) and 0
            elsewhere; with S_A = mappo's ones that is khop on the state's graph. Dense
            supports only; the environment must report its per-state graph.
        encoder: the observation's torso before the first dense layer: "cnn" (convolutions
            over the image, for environments whose ``obs_shape`` is (H, W, C)), "mlp"
            (none: the flattened observation), or "auto" (cnn exactly when the observations
            are images). A critic reading the local observation gets its own CNN; one
            reading a global state, none.
        conv_features: the CNN's channels per layer (JaxMARL's Overcooked CNN: 32, 32, 32).
        conv_kernels: the CNN's square kernel size per layer, same padding, stride 1
            (JaxMARL's: 5, 3, 3); as many as conv_features.
        shared_trunk: one trunk for actor and critic — the first layer (and the GRU when
            recurrent), then a policy and a value head each with the ``hidden[1:]``
            layers (JaxMARL IPPO's ``ActorCriticRNN``); the critic reads the actor's
            observation (critic_input local). Simultaneous scheme only.
        anneal_lr: the learning rate decays linearly from ``lr`` to 0 over ``lr_horizon``
            updates (by default the run's own), constant within an update — JaxMARL's and
            Mava's schedule, ``lr · (1 − u / U)`` at update u (from 0) of U.
        seq_len: recurrent only: training sequence length L (must divide num_steps;
            None = the whole rollout).
        unroll: iterations of the rollout, GAE and minibatch loops per ``lax.scan``
            iteration (a positive integer), or None: the platform's own
            (``jaxpo.core.kernels.Kernels.unroll``). The schedule XLA compiles, not the values.
        gradient_rows: the most rows (samples × agents) in a block of a feed-forward
            minibatch's gradient (a positive integer; at least the minibatch's rows: one
            pass), or None: the platform's own (``jaxpo.core.kernels.Kernels.gradient_rows``;
            ``Learner.gradient_blocks`` says which networks use blocks). The schedule, not the values.
        parallel: how a program uses D devices: "runs" splits the runs (seeds, settings)
            over them; "envs" splits each run's environments over them, data parallel
            (num_envs must be a multiple of D), for runs too large for one device.
        diagnostics: also log, per update, the policy gradient's signal, noise and
            signal-to-noise ratio at θ_old (``pg_*``, means over agents) and the importance
            weights' statistics per epoch (``rho_*_e<epoch>``); see ``jaxpo.core.diagnostics``.
            Costs per update about N backward passes of the batch; off, the program is
            unchanged. Simultaneous scheme only.
    """

    env: str = "MPE_simple_spread_v3"
    env_kwargs: Mapping[str, Any] = ()
    num_envs: int = 32
    num_steps: int = 64
    updates_per_chunk: int = 10
    num_epochs: int = 4
    num_minibatches: int = 4
    hidden: tuple[int, ...] = (64, 64)
    activation: Activation = "tanh"
    share_params: bool = True
    agent_ids: bool = True
    critic_input: CriticInput = "local"
    adv_norm: AdvNorm = "batch"
    aggregate_in: AggregateIn = "advantage"
    scheme: Scheme = "simultaneous"
    value_norm: bool = False
    value_loss: ValueLoss = "mse"
    recurrent: bool = False
    active_agents: bool = True
    interaction_hops: int | None = None
    encoder: Encoder = "auto"
    conv_features: tuple[int, ...] = (32, 32, 32)
    conv_kernels: tuple[int, ...] = (5, 3, 3)
    shared_trunk: bool = False
    anneal_lr: bool = False
    seq_len: int | None = None
    unroll: int | None = None
    gradient_rows: int | None = None
    parallel: Parallel = "runs"
    diagnostics: bool = False

    def __post_init__(self):
        if not isinstance(self.env, str) or not self.env:
            raise _invalid("env", f"must be a non-empty environment name, got {self.env!r}")
        try:  # a mapping, or the (name, value) pairs a Config stores
            kwargs = dict(self.env_kwargs)
        except (TypeError, ValueError):
            kwargs = None
        if kwargs is None or not all(isinstance(k, str) for k in kwargs):
            raise _invalid("env_kwargs", f"must be a mapping of parameter names to values, got {self.env_kwargs!r}")
        object.__setattr__(self, "env_kwargs", freeze(kwargs))
        for field, hint in type_hints(Config).items():
            value = getattr(self, field)
            if hint is int:
                positive_int(value, f"config.{field}", shown=f"Config.{field}")
            if hint is bool and not isinstance(value, (bool, np.bool_)):
                raise _invalid(field, f"must be true or false, got {value!r}")
            allowed = choices(hint)
            if allowed is not None and value not in allowed:
                raise _invalid(field, f"must be one of {allowed}, got {value!r}")
        for field in ("hidden", "conv_features", "conv_kernels"):  # an int is one layer
            widths = getattr(self, field)
            if isinstance(widths, (int, np.integer)) and not isinstance(widths, bool):
                widths = (widths,)
            widths = tuple(widths)
            object.__setattr__(self, field, widths)
            if not widths or any(not isinstance(h, (int, np.integer)) or isinstance(h, bool) or h < 1 for h in widths):
                raise _invalid(field, f"must be a non-empty tuple of positive ints, got {widths!r}")
        if len(self.conv_features) != len(self.conv_kernels):
            raise _invalid("conv_kernels", f"needs one kernel size per conv_features layer: got "
                                           f"{len(self.conv_kernels)} for {len(self.conv_features)} ({self.conv_kernels!r})")
        if self.seq_len is not None:
            if not self.recurrent:
                raise _invalid("seq_len", "is for recurrent networks only (recurrent=True); "
                                          "feed-forward training shuffles single transitions")
            if not isinstance(self.seq_len, (int, np.integer)) or isinstance(self.seq_len, bool) or self.seq_len < 1:
                raise _invalid("seq_len", f"must be a positive integer or None, got {self.seq_len!r}")
            if self.num_steps % self.seq_len:
                raise _invalid("seq_len", f"({self.seq_len}) must divide num_steps ({self.num_steps})")
        for field in ("unroll", "gradient_rows"):  # None: the platform's own
            if getattr(self, field) is not None:
                positive_int(getattr(self, field), f"config.{field}", shown=f"Config.{field}")
        hops = self.interaction_hops
        if hops is not None and not (is_number(hops, integral=True) and hops >= 0):
            raise _invalid("interaction_hops", f"must be an integer >= 0 or None, got {self.interaction_hops!r}")
        if self.num_sequences % self.num_minibatches:
            unit = "sequences" if self.recurrent else "transitions"
            raise _invalid(
                "num_minibatches",
                f"({self.num_minibatches}) must divide the number of {unit} per update, "
                f"num_envs * num_steps / sequence length ({self.num_envs} * {self.num_steps} / "
                f"{self.sequence_length} = {self.num_sequences})"
            )
        if self.diagnostics and self.scheme == "sequential":
            raise _invalid("diagnostics", "is for the simultaneous scheme: exact HAPPO (scheme='sequential') "
                                          "has no support-matrix importance weights to measure")
        if self.shared_trunk and self.critic_input != "local":
            raise _invalid("shared_trunk", "needs ", Setting("config.critic_input", "local", "critic_input"),
                           " (the critic reads the trunk's features of the actor's observation), got ",
                           Setting("config.critic_input", self.critic_input, "critic_input"))
        if self.shared_trunk and self.scheme == "sequential":
            raise _invalid("shared_trunk", "is for the simultaneous scheme: exact HAPPO (scheme='sequential') "
                                           "updates each agent's actor apart from the critics")
        if self.scheme == "sequential" and self.share_params:
            raise FieldError.saying("config.scheme", Setting("config.scheme", "sequential", "Config.scheme"),
                                    " (exact HAPPO) needs share_params=False: "
                                    "agents are updated one after another, each with its own parameters")

    @property
    def env_args(self) -> dict[str, Any]:
        """The environment's keyword arguments as given (arrays as numpy arrays)."""
        return {k: thaw(v) for k, v in self.env_kwargs}

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
    def steps_per_update(self) -> int:
        """Environment steps (of all E environments) per train step: T × E."""
        return self.num_steps * self.num_envs

    def make_env(self) -> envs.Env:
        """The environment ``env`` built with ``env_kwargs`` (``jaxpo.envs.make``; cached).

        Returns:
            The environment on the array protocol, without ``AutoReset``.

        Raises:
            ValueError: if ``env`` is not a known environment name or ``env_kwargs`` holds a
                parameter the environment does not have or rejects (``jaxpo.envs.make``);
                ``interaction_hops`` set for an environment without a per-state coupling
                graph (``Env.interaction``).
        """
        env = _make_env(self.env, self.env_kwargs)
        if self.interaction_hops is not None and not envs.follows_state(env):
            raise _invalid("interaction_hops", "needs an environment whose coupling graph follows the state "
                                               f"(Env.interaction); {env.name!r} reports none")
        return env

    def cnn_layers(self, env: envs.Env) -> tuple[tuple[int, int], ...]:
        """The CNN torso for ``env``'s observations, or none (see ``encoder``).

        Args:
            env: the environment (``make_env()``); its ``obs_shape`` is (H, W, C) for images.

        Returns:
            ``(features, kernel)`` per conv layer, from ``conv_features`` and
                ``conv_kernels``; ``()`` for no CNN (encoder "mlp", or "auto" on flat
                observations).

        Raises:
            ValueError: if ``encoder`` is "cnn" and the observations are not images.
        """
        image = len(env.obs_shape) == 3
        if self.encoder == "cnn" and not image:
            raise FieldError.saying("config.encoder", Setting("config.encoder", "cnn", "Config.encoder"),
                                    f" needs image observations (H, W, C); {self.env} observes flat vectors of shape "
                                    f"{tuple(env.obs_shape)}: use encoder 'mlp' or 'auto'")
        if self.encoder == "mlp" or not image:
            return ()
        return tuple(zip(self.conv_features, self.conv_kernels))


def _invalid(field: str, *parts: Part) -> FieldError:
    """The error about ``Config.<field>``, its path ``config.<field>``."""
    return FieldError(f"config.{field}", *parts, shown=f"Config.{field}")


def config_to_dict(config: Config) -> dict[str, Any]:
    """Plain data (YAML/JSON-ready) for every field of ``config``; ``config_from_dict``
    reads it back to an equal ``Config``."""
    values = {name: getattr(config, name) for name in type_hints(Config)}
    return plain({**values, "env_kwargs": dict(config.env_kwargs)})


def config_from_dict(data: Mapping[str, Any], source: str = "config") -> Config:
    """A ``Config`` from plain data (defaults for missing fields); a ValueError names
    ``source`` and the bad field."""
    hints = type_hints(Config)
    unknown = [k for k in data if k not in hints]
    if unknown:
        raise ValueError(f"{source}: unknown key config.{unknown[0]}; config has: {', '.join(hints)}")
    try:
        return Config(**{k: coerce(v, hints[k], f"config.{k}") for k, v in data.items()})
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None


@functools.lru_cache(maxsize=32)
def _make_env(name: str, frozen_kwargs: tuple) -> envs.Env:
    # Cached: building a JaxMARL env (SMAX maps) is not free, and validation builds it too.
    return envs.make(name, **{k: thaw(v) for k, v in frozen_kwargs})


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The allowed range of a scalar hyperparameter: ``low`` < (or ≤) x ≤ ``high``."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False

    def __str__(self) -> str:
        if self.high is not None:
            return f"in [{self.low:g}, {self.high:g}]"
        return f"{'>' if self.low_open else '>='} {self.low:g}"

    def check(self, path: str, value: Any, shown: str | None = None) -> float:
        """``value`` as a float, checked to lie in the range.

        Args:
            path: the field's path (``hyper.lr``), for the error.
            value: the value.
            shown: how the error names the field (default: ``path``).

        Returns:
            ``float(value)``.

        Raises:
            FieldError: if ``value`` is not a finite number within the range.
        """
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or not math.isfinite(value):
            raise FieldError(path, f"must be a finite number, got {value!r}", shown=shown)
        below = value <= self.low if self.low_open else value < self.low
        if below or (self.high is not None and value > self.high):
            raise FieldError(path, f"must be {self}, got {value:g}", shown=shown)
        return float(value)


POSITIVE, NON_NEGATIVE, UNIT = Bounds(0.0, low_open=True), Bounds(0.0), Bounds(0.0, 1.0)


def _scalar(default: float, bounds: Bounds):
    return struct.field(default=default, metadata={"bounds": bounds})


@struct.dataclass
class Hyper:
    """Traced hyperparameters — arrays inside the program, so a batch of them is vmapped.

    Scalars are float32 ``[]`` (``[R]`` when batched over R runs). ``S_A``, ``S_R`` are
    each a float32 ``[N, N]`` array (``[R, N, N]``) or, for a sparse support, its padded
    neighbour lists (``jaxpo.core.sparse.NeighbourLists``, leaves ``[N, K]`` / ``[R, N, K]``;
    ``.shape`` is still ``[R,] N, N``): S_A by rows, S_R by columns. Build one with
    ``Hyper.create(support, **scalars)`` and batch R of them with ``Hyper.stack``; a
    ``Hyper()`` of Python floats without matrices holds the defaults (the ``hyper``
    section of an experiment). Defaults and allowed ranges are below (``scalar_bounds``).

    Attributes:
        lr: Adam learning rate (default 3e-3; > 0).
        clip_eps: PPO clip ε on each term's importance weight, also the value clip
            (default 0.2; > 0).
        gamma: discount γ (default 0.99; in [0, 1]).
        gae_lambda: GAE λ (default 0.95; in [0, 1]).
        vf_coef: value-loss coefficient (default 0.5; ≥ 0).
        ent_coef: entropy-bonus coefficient (default 0.01; ≥ 0).
        max_grad_norm: global gradient-norm clip (default 0.5; > 0).
        huber_delta: δ of the Huber value loss, value_loss huber only (default 10; > 0).
        lr_horizon: U, the updates over which ``Config.anneal_lr`` decays the learning
            rate to 0; 0 (the default) = the run's own number of updates (filled in when
            runs are planned: ``with_horizon``); ≥ 0. Ignored without anneal_lr.
        S_A: advantage support ``[N, N]`` (or its row lists), from the support.
        S_R: ratio support ``[N, N]`` (or its column lists), from the support.
    """

    lr: Any = _scalar(3e-3, POSITIVE)
    clip_eps: Any = _scalar(0.2, POSITIVE)
    gamma: Any = _scalar(0.99, UNIT)
    gae_lambda: Any = _scalar(0.95, UNIT)
    vf_coef: Any = _scalar(0.5, NON_NEGATIVE)
    ent_coef: Any = _scalar(0.01, NON_NEGATIVE)
    max_grad_norm: Any = _scalar(0.5, POSITIVE)
    huber_delta: Any = _scalar(10.0, POSITIVE)
    lr_horizon: Any = _scalar(0.0, NON_NEGATIVE)
    S_A: Any = None
    S_R: Any = None

    @staticmethod
    def scalar_bounds() -> dict[str, Bounds]:
        """The allowed range of each scalar (sweepable) hyperparameter.

        Returns:
            ``{name: Bounds}`` in field order (``str(bounds)`` reads e.g. "> 0", "in [0, 1]").
        """
        return {f.name: f.metadata["bounds"] for f in dataclasses.fields(Hyper) if "bounds" in f.metadata}

    def scalars(self) -> dict[str, Any]:
        """The scalar fields' values.

        Returns:
            ``{name: value}`` in field order: floats, or arrays ``[]`` / ``[R]``.
        """
        return {name: getattr(self, name) for name in self.scalar_bounds()}

    @classmethod
    def create(cls, support: Support, *, support_form: SupportForm = "auto", **scalars: float) -> "Hyper":
        """One run's hyperparameters as float32 (numpy) arrays.

        Args:
            support: the support matrices (a ``jaxpo.Support``, validated): S_A and S_R ``[N, N]``.
            support_form: "auto" stores each matrix as neighbour lists when it is sparse
                (N ≥ 32 and at most N/16 non-zeros per row of S_A / column of S_R; see
                ``jaxpo.core.sparse``) and dense otherwise; "dense" / "sparse" force one form.
                Both forms give the same objective (up to float rounding of the sums).
            **scalars: scalar hyperparameters by name (``lr=1e-3``), each within its
                ``scalar_bounds``; omitted ones take their defaults.

        Returns:
            A ``Hyper`` with scalars float32 ``[]`` and S_A, S_R ``[N, N]`` (or their
                neighbour lists ``[N, K]``).

        Raises:
            ValueError: naming the bad value: an unknown hyperparameter name, a scalar that
                is not a finite number within its bounds, ``support`` not a ``Support`` or
                failing its validation, or an unknown ``support_form``.
        """
        bounds = cls.scalar_bounds()
        unknown = sorted(set(scalars) - set(bounds))
        if unknown:
            raise ValueError(f"unknown hyperparameter {unknown[0]!r}; known: {', '.join(bounds)}")
        values = {**cls().scalars(), **scalars}
        values = {name: bounds[name].check(f"hyper.{name}", value, shown=name) for name, value in values.items()}
        if not isinstance(support, Support):
            raise ValueError(f"support must be a jaxpo.support.Support, got {type(support).__name__}")
        support.validate()
        # numpy, not device arrays: a sweep builds thousands of these; stacking moves them once
        return cls(
            **{k: np.asarray(v, np.float32) for k, v in values.items()},
            S_A=sparse.choose_form(support.S_A, support_form),
            S_R=sparse.choose_form(support.S_R, support_form, by_column=True),
        )

    def with_horizon(self, num_updates: int) -> "Hyper":
        """This ``Hyper`` (one run or a batch) with every ``lr_horizon`` of 0 set to ``num_updates``.

        That is the run's own length, the horizon ``anneal_lr`` means by default; non-zero
        horizons are kept.

        Args:
            num_updates: the run's number of updates (train steps).

        Returns:
            A copy whose ``lr_horizon`` is float32 ``[]`` (``[R]`` for a batch).
        """
        horizon = np.asarray(self.lr_horizon, np.float32)
        return self.replace(lr_horizon=np.where(horizon == 0, np.float32(num_updates), horizon).astype(np.float32))

    @staticmethod
    def stack(hypers: Sequence["Hyper"]) -> "Hyper":
        """Stacks R single-run ``Hyper`` values into one batched ``Hyper`` ``[R, ...]``.

        Sparse matrices are padded to the batch's largest K (``jaxpo.core.sparse.stack``); a
        batch mixing dense and sparse forms of one matrix is stacked dense.

        Args:
            hypers: R single-run values (``create``'s), all for the same N agents.

        Returns:
            A ``Hyper`` of jnp arrays: scalars ``[R]``, S_A and S_R ``[R, N, N]`` (or
                neighbour lists ``[R, N, K]``).

        Raises:
            ValueError: if ``hypers`` is empty or its values differ in the number of agents.
        """
        if not hypers:
            raise ValueError("hypers must be a non-empty sequence of Hyper")
        shapes = {np.shape(h.S_A) for h in hypers}
        if len(shapes) != 1:
            raise ValueError(f"all hypers must have the same number of agents, got S_A shapes {sorted(shapes)}")
        scalars = jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *(h.replace(S_A=None, S_R=None) for h in hypers))
        return scalars.replace(S_A=sparse.stack([h.S_A for h in hypers]), S_R=sparse.stack([h.S_R for h in hypers]))
