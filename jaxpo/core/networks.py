"""Actor and critic networks: feed-forward or GRU, shared or per-agent parameters,
categorical or Gaussian actions.

Both act on arrays with the agent axis second to last: observations
``[..., N, O]`` give actor outputs ``[..., N, A]`` and values ``[..., N]``.

* Shared parameters: one network for all agents; a one-hot agent id is appended to
  the input so that agents can still behave differently.
* Per-agent parameters: every leaf carries a leading agent axis ``[N, ...]`` and the
  network is vmapped over the agent axis (no agent id needed).
* Recurrent (GRU) networks carry a hidden state ``[..., N, H]`` per agent. Every
  network has one: feed-forward ones a zero-width ``[..., N, 0]`` carry, so the
  rollout and the loss handle both without a branch. A step whose ``first`` flag
  is set (its observation starts an episode) sees a zero hidden state.
* Actions: discrete (masked categorical over A actions) or continuous (diagonal
  Gaussian over an A-wide action vector, state-independent learned log-std;
  masked dimensions — padding for agents with fewer — contribute nothing).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Literal, Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}
Activation = Literal[tuple(ACTIVATIONS)]  # the names above, as a type

# Masked logits: large but finite, so that 0 * logit stays 0 in the entropy.
MASKED_LOGIT = -1e9


def orthogonal(scale: float = 1.0, iterations: int = 60) -> Callable[..., jax.Array]:
    """Orthogonal initialiser for ``[in, out]`` kernels, computed with matrix products only.

    flax's ``orthogonal`` takes a QR decomposition, which on CPU calls LAPACK through a
    multi-threaded OpenBLAS; called on XLA's thread pool next to other work (vmapped
    inits of several runs) it deadlocked here. The orthogonal polar factor of a Gaussian
    matrix is Haar distributed like QR's, and Newton–Schulz iterations
    ``X ← 1.5 X − 0.5 X XᵀX`` reach it from ``M / ‖M‖_F`` (singular values in (0, 1],
    each grows ×1.5 per step until quadratic convergence at 1).
    """

    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        if len(shape) != 2:
            raise ValueError(f"orthogonal init expects a 2-D kernel shape, got {shape}")
        m = jax.random.normal(key, shape, jnp.float32)
        wide = shape[0] < shape[1]
        x = (m.T if wide else m) / jnp.linalg.norm(m)
        x = jax.lax.fori_loop(0, iterations, lambda _, x: 1.5 * x - 0.5 * x @ (x.T @ x), x)
        return (scale * (x.T if wide else x)).astype(dtype)

    return init


class IdDense(nn.Module):
    """``nn.Dense`` on ``[x, one_hot(agent)]`` without building the one-hot:
    ``x [..., N, D] -> [..., N, features]`` as ``x @ kernel[:D] + kernel[D:] + bias``
    (row i of ``kernel[D:]`` is agent i's id weights). The same parameters, and
    initial values, as the Dense on the concatenation, at O(D) instead of O(D + N)
    work per agent: what keeps shared networks' cost per agent flat in N."""

    features: int
    num_ids: int
    kernel_init: Callable[..., jax.Array]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        d = x.shape[-1]
        kernel = self.param("kernel", self.kernel_init, (d + self.num_ids, self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        return x @ kernel[:d] + kernel[d:] + bias


class MLP(nn.Module):
    """Orthogonally initialised MLP, ``[..., D] -> [..., out_dim]`` (PPO's usual init).

    With ``log_std`` the output is ``[..., 2 * out_dim]``: the head's output (a
    Gaussian mean) followed by a learned, state-independent log-std (init 0). With
    ``num_ids`` N > 0 the input is ``[..., N, D]`` and each agent's one-hot id is an
    implicit extra input of the first layer (``IdDense``). Layers are named
    ``Dense_0``, ``Dense_1``, … in order.
    """

    hidden: Sequence[int]
    out_dim: int
    activation: str = "tanh"
    out_scale: float = 1.0
    log_std: bool = False
    num_ids: int = 0

    def dense(self, index: int, features: int, scale: float) -> nn.Module:
        """Layer ``index`` (0 = the input layer, which sees the agent ids)."""
        if index == 0 and self.num_ids:
            return IdDense(features, self.num_ids, orthogonal(scale), name="Dense_0")
        return nn.Dense(features, kernel_init=orthogonal(scale), name=f"Dense_{index}")

    def trunk(self, x: jax.Array) -> jax.Array:
        for i, width in enumerate(self.hidden):
            x = ACTIVATIONS[self.activation](self.dense(i, width, np.sqrt(2.0))(x))
        return x

    def head(self, x: jax.Array) -> jax.Array:
        out = self.dense(len(self.hidden), self.out_dim, self.out_scale)(x)
        if not self.log_std:
            return out
        log_std = self.param("log_std", nn.initializers.zeros, (self.out_dim,))
        return jnp.concatenate([out, jnp.broadcast_to(log_std, out.shape)], axis=-1)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.head(self.trunk(x))


def reset_carry(h: jax.Array, first: jax.Array) -> jax.Array:
    """Hidden state ``h [*P, ..., H]`` zeroed where ``first bool [*P]`` is set (a new
    episode starts); e.g. ``h [E, N, H]`` with ``first [E]``."""
    return jnp.where(first.reshape(first.shape + (1,) * (h.ndim - first.ndim)), 0.0, h)


class GRUNet(MLP):
    """A recurrent network over a time-major sequence, H = ``hidden[0]``:

        ``(h0 [..., H], xs [L, ..., D], first bool [L, *P]) -> (h_L [..., H], ys [L, ..., out])``

    Dense(H) → GRU cell → Dense(``hidden[1:]``) → head (purejaxrl's and MAPPO's
    recurrent layout: embed, recur, then feed-forward). The hidden state is zeroed
    before every step whose ``first`` is set (``first``'s shape is a prefix of the
    batch shape ``[...]``). Only the cell runs inside the scan; the layers around it
    see all L steps at once (a scan iteration's fixed cost dominates on CPU).
    """

    @property
    def carry_dim(self) -> int:
        return self.hidden[0]

    @nn.compact
    def __call__(self, h: jax.Array, xs: jax.Array, first: jax.Array) -> tuple[jax.Array, jax.Array]:
        act = ACTIVATIONS[self.activation]
        xs = act(self.dense(0, self.hidden[0], np.sqrt(2.0))(xs))

        def step(cell, h, inputs):
            x, new_episode = inputs
            return cell(reset_carry(h, new_episode), x)

        scan = nn.scan(step, variable_broadcast="params", split_rngs={"params": False})
        # Our orthogonal init for the recurrent kernel too: flax's default takes a QR (see `orthogonal`).
        cell = nn.GRUCell(self.hidden[0], kernel_init=orthogonal(), recurrent_kernel_init=orthogonal())
        h, ys = scan(cell, h, (xs, first))
        for i, width in enumerate(self.hidden[1:], start=1):
            ys = act(self.dense(i, width, np.sqrt(2.0))(ys))
        return h, self.head(ys)


@dataclasses.dataclass(frozen=True)
class AgentNetwork:
    """A feed-forward or GRU network applied to every agent, with shared or per-agent parameters.

    Attributes:
        module: the per-agent ``MLP`` or ``GRUNet``.
        num_agents: N.
        in_dim: per-agent input width D (before the agent id).
        shared: one parameter set for all agents (whose first layer also sees a
            one-hot agent id: the module's ``num_ids`` = N) or a stacked set per agent.
    """

    module: MLP
    num_agents: int
    in_dim: int
    shared: bool

    @property
    def recurrent(self) -> bool:
        return isinstance(self.module, GRUNet)

    @property
    def carry_dim(self) -> int:
        """H, the per-agent hidden-state width (0 when feed-forward)."""
        return self.module.carry_dim if self.recurrent else 0

    def init(self, key: jax.Array) -> Any:
        """Parameters: a flax pytree, with a leading ``[N]`` axis when not shared."""
        n = self.num_agents if self.shared else 1  # shared: the ids need the agent axis
        if self.recurrent:  # h0 [n, H], a sequence of one step, first [1]
            args = lambda: (jnp.zeros((n, self.carry_dim)), jnp.zeros((1, n, self.in_dim)), jnp.zeros((1,), bool))
        else:
            args = lambda: (jnp.zeros((n, self.in_dim)),)
        if self.shared:
            return self.module.init(key, *args())
        return jax.vmap(lambda k: self.module.init(k, *args()))(jax.random.split(key, self.num_agents))

    def _inputs(self, x: jax.Array) -> jax.Array:
        if x.shape[-2:] != (self.num_agents, self.in_dim):
            raise ValueError(f"network input must be [..., {self.num_agents}, {self.in_dim}], got {x.shape}")
        return x

    def _apply(self, params: Any, *args: jax.Array, agent_axes: tuple | None = None) -> Any:
        """The module on arguments with an agent axis (``agent_axes``, default -2 for
        each; None for none), vmapped over agents when per-agent; outputs ``[..., N, ·]``."""
        if self.shared:
            return self.module.apply(params, *args)
        in_axes = (0,) + (agent_axes or (-2,) * len(args))
        return jax.vmap(self.module.apply, in_axes=in_axes, out_axes=-2)(params, *args)

    def _recur(self, params: Any, h0: jax.Array, xs: jax.Array, first: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Recurrent: ``h0 [..., N, H]``, ``xs [L, ..., N, D]``, ``first [L, ...]`` ->
        ``(h_L [..., N, H], ys [L, ..., N, out])``."""
        return self._apply(params, h0, self._inputs(xs), first, agent_axes=(-2, -2, None))

    def __call__(self, params: Any, x: jax.Array) -> jax.Array:
        """Feed-forward only: ``x [..., N, D] -> [..., N, out]``."""
        if self.recurrent:
            raise ValueError("a recurrent network needs its hidden state: use step() or unroll()")
        return self._apply(params, self._inputs(x))

    def step(self, params: Any, h: jax.Array, x: jax.Array, first: jax.Array) -> tuple[jax.Array, jax.Array]:
        """One step: ``h [..., N, H]``, ``x [..., N, D]``, ``first bool [...]`` ->
        ``(h' [..., N, H], y [..., N, out])``; h is zeroed first where ``first``."""
        if not self.recurrent:
            return h, self(params, x)
        h, ys = self._recur(params, h, x[None], first[None])
        return h, ys[0]

    def unroll(self, params: Any, h0: jax.Array, xs: jax.Array, first: jax.Array) -> jax.Array:
        """A sequence, time-major: ``h0 [..., N, H]``, ``xs [L, ..., N, D]``,
        ``first bool [L, ...]`` -> ``ys [L, ..., N, out]`` (a scan when recurrent)."""
        if not self.recurrent:
            return self(params, xs)
        return self._recur(params, h0, xs, first)[1]


@struct.dataclass
class MaskedDiagGaussian:
    """Diagonal Gaussian over an ``[..., A]`` action vector whose masked dimensions do not exist.

    Built on ``distrax.Normal``; a masked dimension (padding, for agents with fewer
    action dimensions) samples 0 and adds nothing to ``log_prob`` or ``entropy``.
    Batch shape ``[...]``; event shape ``[A]``. A pytree, so it vmaps like distrax's
    distributions (the rollout samples per environment).
    """

    mean: jax.Array
    log_std: jax.Array
    mask: jax.Array

    @property
    def normal(self) -> distrax.Normal:
        return distrax.Normal(self.mean, jnp.exp(self.log_std))

    def sample(self, *, seed: jax.Array) -> jax.Array:
        return jnp.where(self.mask, self.normal.sample(seed=seed), 0.0)

    def log_prob(self, action: jax.Array) -> jax.Array:
        return jnp.sum(jnp.where(self.mask, self.normal.log_prob(action), 0.0), axis=-1)

    def entropy(self) -> jax.Array:
        return jnp.sum(jnp.where(self.mask, self.normal.entropy(), 0.0), axis=-1)


Distribution = distrax.Categorical | MaskedDiagGaussian


@dataclasses.dataclass(frozen=True)
class ActorCritic:
    """Actor (categorical or Gaussian) and state-value critic for N agents.

    ``params`` is ``{"actor": ..., "critic": ...}``; a hidden state ("carry") is
    ``{"actor": [..., N, H], "critic": [..., N, H]}`` (H = 0 when feed-forward).
    """

    actor: AgentNetwork
    critic: AgentNetwork
    continuous: bool = False

    @classmethod
    def create(
        cls,
        num_agents: int,
        obs_dim: int,
        num_actions: int,
        critic_dim: int,
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        shared: bool = True,
        recurrent: bool = False,
        continuous: bool = False,
    ) -> "ActorCritic":
        """``num_actions``: discrete action count, or the action vector's width when ``continuous``."""
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        hidden = tuple(int(h) for h in hidden)
        if not hidden or min(hidden) < 1:
            raise ValueError(f"hidden must be a non-empty sequence of positive widths, got {hidden}")
        module = GRUNet if recurrent else MLP
        # out_scale 0.01: a near-uniform initial policy (near-zero Gaussian mean).
        actor = module(hidden, num_actions, activation, out_scale=0.01, log_std=continuous)
        critic = module(hidden, 1, activation, out_scale=1.0)
        if shared:  # one network for all agents, told apart by their ids
            actor, critic = actor.clone(num_ids=num_agents), critic.clone(num_ids=num_agents)
        return cls(
            actor=AgentNetwork(actor, num_agents, obs_dim, shared),
            critic=AgentNetwork(critic, num_agents, critic_dim, shared),
            continuous=continuous,
        )

    @property
    def recurrent(self) -> bool:
        return self.actor.recurrent

    def init(self, key: jax.Array) -> dict[str, Any]:
        key_actor, key_critic = jax.random.split(key)
        return {"actor": self.actor.init(key_actor), "critic": self.critic.init(key_critic)}

    def initial_carry(self, batch_shape: Sequence[int]) -> dict[str, jax.Array]:
        """Zero hidden states ``{"actor", "critic"}: [*batch_shape, N, H]``."""
        n = self.actor.num_agents
        return {
            "actor": jnp.zeros((*batch_shape, n, self.actor.carry_dim), jnp.float32),
            "critic": jnp.zeros((*batch_shape, n, self.critic.carry_dim), jnp.float32),
        }

    def distribution(self, out: jax.Array, action_mask: jax.Array) -> Distribution:
        """The action distribution, batch ``[...]``, from actor outputs ``out [..., A]``
        (``[..., 2A]`` when continuous) and ``action_mask bool [..., A]``.

        Discrete: masked actions get a logit of ``MASKED_LOGIT`` — zero probability,
        never sampled, nothing added to log-probabilities or entropy. Continuous: the
        mask marks which action dimensions exist.
        """
        if self.continuous:
            mean, log_std = jnp.split(out, 2, axis=-1)
            return MaskedDiagGaussian(mean, log_std, action_mask)
        return distrax.Categorical(logits=jnp.where(action_mask, out, MASKED_LOGIT))

    def step(
        self, params: dict[str, Any], carry: dict[str, jax.Array], obs: jax.Array, action_mask: jax.Array,
        critic_obs: jax.Array, first: jax.Array,
    ) -> tuple[dict[str, jax.Array], Distribution, jax.Array]:
        """One acting step: ``carry [..., N, H]``, ``obs [..., N, O]``, ``action_mask
        [..., N, A]``, ``critic_obs [..., N, C]``, ``first bool [...]`` ->
        ``(carry', distribution with batch [..., N], values [..., N])``."""
        h_actor, out = self.actor.step(params["actor"], carry["actor"], obs, first)
        h_critic, values = self.critic.step(params["critic"], carry["critic"], critic_obs, first)
        return {"actor": h_actor, "critic": h_critic}, self.distribution(out, action_mask), values[..., 0]

    def next_value(self, params: dict[str, Any], critic_carry: jax.Array, critic_obs: jax.Array) -> jax.Array:
        """Value ``[..., N]`` of an observation that continues the episode whose critic
        hidden state is ``critic_carry [..., N, H]`` (the bootstrap of a truncation)."""
        first = jnp.zeros(critic_obs.shape[:-2], bool)
        return self.critic.step(params["critic"], critic_carry, critic_obs, first)[1][..., 0]

    def unroll_policy(
        self, actor_params: Any, h0: jax.Array, obs: jax.Array, action_mask: jax.Array, first: jax.Array
    ) -> Distribution:
        """Time-major sequences: ``h0 [..., N, H]``, ``obs [L, ..., N, O]``, ``action_mask
        [L, ..., N, A]``, ``first [L, ...]`` -> distribution with batch ``[L, ..., N]``."""
        return self.distribution(self.actor.unroll(actor_params, h0, obs, first), action_mask)

    def unroll_value(self, critic_params: Any, h0: jax.Array, critic_obs: jax.Array, first: jax.Array) -> jax.Array:
        """Time-major: ``h0 [..., N, H]``, ``critic_obs [L, ..., N, C]``, ``first [L, ...]``
        -> values ``[L, ..., N]``."""
        return self.critic.unroll(critic_params, h0, critic_obs, first)[..., 0]

    def policy(self, params: dict[str, Any], obs: jax.Array, action_mask: jax.Array) -> Distribution:
        """Feed-forward: ``obs [..., N, O]``, ``action_mask bool [..., N, A]`` -> distribution
        with batch shape ``[..., N]`` (see ``distribution`` for the masks)."""
        return self.distribution(self.actor(params["actor"], obs), action_mask)

    def agent_policy(
        self, agent_actor_params: Any, obs: jax.Array, action_mask: jax.Array,
        h0: jax.Array | None = None, first: jax.Array | None = None,
    ) -> Distribution:
        """One agent's policy from its slice of *per-agent* actor parameters.

        ``agent_actor_params``: ``params["actor"]`` indexed at one agent (no agent axis).
        Feed-forward: ``obs [..., O]``, ``action_mask bool [..., A]`` -> distribution with
        batch shape ``[...]`` (``h0``, ``first`` ignored). Recurrent: batch-major
        sequences ``obs [b, L, O]``, ``action_mask [b, L, A]``, ``h0 [b, H]``,
        ``first bool [b, L]`` -> batch ``[b, L]``. Used by the sequential (HAPPO)
        scheme, which updates one agent at a time.
        """
        if self.actor.shared:
            raise ValueError("agent_policy needs per-agent parameters (shared=False)")
        apply = functools.partial(self.actor.module.apply, agent_actor_params)
        if not self.recurrent:
            return self.distribution(apply(obs), action_mask)
        time_major = lambda x: jnp.swapaxes(x, 0, 1)
        out = time_major(apply(h0, time_major(obs), time_major(first))[1])
        return self.distribution(out, action_mask)

    def value(self, params: dict[str, Any], critic_obs: jax.Array) -> jax.Array:
        """Feed-forward: ``critic_obs [..., N, C] -> values [..., N]``."""
        return self.critic(params["critic"], critic_obs)[..., 0]
