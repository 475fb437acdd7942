"""Actor and critic networks with shared or per-agent parameters.

Both act on arrays with the agent axis second to last: observations
``[..., N, O]`` give logits ``[..., N, A]`` and values ``[..., N]``.

* Shared parameters: one MLP for all agents; a one-hot agent id is appended to the
  input so that agents can still behave differently.
* Per-agent parameters: every leaf carries a leading agent axis ``[N, ...]`` and the
  MLP is vmapped over the agent axis (no agent id needed).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}

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


class MLP(nn.Module):
    """Orthogonally initialised MLP, ``[..., D] -> [..., out_dim]`` (PPO's usual init)."""

    hidden: Sequence[int]
    out_dim: int
    activation: str = "tanh"
    out_scale: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for width in self.hidden:
            x = act(nn.Dense(width, kernel_init=orthogonal(np.sqrt(2.0)))(x))
        return nn.Dense(self.out_dim, kernel_init=orthogonal(self.out_scale))(x)


def _masked_categorical(logits: jax.Array, action_mask: jax.Array) -> distrax.Categorical:
    return distrax.Categorical(logits=jnp.where(action_mask, logits, MASKED_LOGIT))


@dataclasses.dataclass(frozen=True)
class AgentNetwork:
    """An MLP applied to every agent, with shared or per-agent parameters.

    Attributes:
        module: the per-agent MLP.
        num_agents: N.
        in_dim: per-agent input width D (before the agent id).
        shared: one parameter set for all agents (input gets a one-hot id) or a
            stacked set per agent.
    """

    module: MLP
    num_agents: int
    in_dim: int
    shared: bool

    def init(self, key: jax.Array) -> Any:
        """Parameters: a flax pytree, with a leading ``[N]`` axis when not shared."""
        if self.shared:
            return self.module.init(key, jnp.zeros((1, self.in_dim + self.num_agents)))
        keys = jax.random.split(key, self.num_agents)
        return jax.vmap(lambda k: self.module.init(k, jnp.zeros((1, self.in_dim))))(keys)

    def __call__(self, params: Any, x: jax.Array) -> jax.Array:
        """``x [..., N, D] -> [..., N, out_dim]``."""
        if x.shape[-2:] != (self.num_agents, self.in_dim):
            raise ValueError(f"network input must be [..., {self.num_agents}, {self.in_dim}], got {x.shape}")
        if self.shared:
            ids = jnp.broadcast_to(jnp.eye(self.num_agents, dtype=x.dtype), (*x.shape[:-1], self.num_agents))
            return self.module.apply(params, jnp.concatenate([x, ids], axis=-1))
        per_agent = jax.vmap(self.module.apply, in_axes=(0, -2), out_axes=-2)
        return per_agent(params, x)


@dataclasses.dataclass(frozen=True)
class ActorCritic:
    """Categorical actor and state-value critic for N agents.

    ``params`` is ``{"actor": ..., "critic": ...}``.
    """

    actor: AgentNetwork
    critic: AgentNetwork

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
    ) -> "ActorCritic":
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        hidden = tuple(int(h) for h in hidden)
        if not hidden or min(hidden) < 1:
            raise ValueError(f"hidden must be a non-empty sequence of positive widths, got {hidden}")
        actor = MLP(hidden, num_actions, activation, out_scale=0.01)  # near-uniform initial policy
        critic = MLP(hidden, 1, activation, out_scale=1.0)
        return cls(
            actor=AgentNetwork(actor, num_agents, obs_dim, shared),
            critic=AgentNetwork(critic, num_agents, critic_dim, shared),
        )

    def init(self, key: jax.Array) -> dict[str, Any]:
        key_actor, key_critic = jax.random.split(key)
        return {"actor": self.actor.init(key_actor), "critic": self.critic.init(key_critic)}

    def policy(self, params: dict[str, Any], obs: jax.Array, action_mask: jax.Array) -> distrax.Categorical:
        """``obs [..., N, O]``, ``action_mask bool [..., N, A]`` -> distribution with batch shape ``[..., N]``.

        Masked actions get a logit of ``MASKED_LOGIT``: zero probability, so they are
        never sampled and add nothing to log-probabilities or entropy.
        """
        return _masked_categorical(self.actor(params["actor"], obs), action_mask)

    def agent_policy(self, agent_actor_params: Any, obs: jax.Array, action_mask: jax.Array) -> distrax.Categorical:
        """One agent's policy from its slice of *per-agent* actor parameters.

        ``agent_actor_params``: ``params["actor"]`` indexed at one agent (no agent axis);
        ``obs [..., O]``, ``action_mask bool [..., A]`` -> distribution with batch shape ``[...]``.
        Used by the sequential (HAPPO) scheme, which updates one agent at a time.
        """
        if self.actor.shared:
            raise ValueError("agent_policy needs per-agent parameters (shared=False)")
        return _masked_categorical(self.actor.module.apply(agent_actor_params, obs), action_mask)

    def value(self, params: dict[str, Any], critic_obs: jax.Array) -> jax.Array:
        """``critic_obs [..., N, C] -> values [..., N]``."""
        return self.critic(params["critic"], critic_obs)[..., 0]
