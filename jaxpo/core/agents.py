"""N agents' networks and the two ways an actor-critic lays them out.

``AgentNetwork`` applies one per-agent module (``jaxpo.core.modules.MLP`` or ``GRUNet``)
to every agent, with shared or per-agent parameters. ``SeparateNetworks`` and
``SharedTrunk`` are the actor-critic's layouts (``jaxpo.core.networks.ActorCritic.heads``):
each answers the actor's outputs, the critic's values, or both, for any way of running
a network (``stepping``, ``unrolling``, ``feed_forward``: a ``Run``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol

import jax
import jax.numpy as jnp

from jaxpo.core.modules import MLP, GRUNet


@dataclasses.dataclass(frozen=True)
class AgentNetwork:
    """A feed-forward or GRU network applied to every agent, with shared or per-agent parameters.

    Attributes:
        module: the per-agent ``MLP`` or ``GRUNet``.
        num_agents: N.
        in_dim: per-agent input width D (before the agent id).
        shared: one parameter set for all agents (whose first layer also sees a
            one-hot agent id when the module's ``num_ids`` = N) or a stacked set per agent.
    """

    module: MLP | GRUNet
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


# How a network runs: (network, params, hidden state, input) -> (hidden state after, outputs).
Run = Callable[[AgentNetwork, Any, Any, jax.Array], tuple[Any, jax.Array]]


def stepping(first: jax.Array) -> Run:
    """One step (``AgentNetwork.step``), hidden states reset where ``first bool [...]``."""
    return lambda net, params, h, x: net.step(params, h, x, first)


def unrolling(first: jax.Array) -> Run:
    """A time-major sequence (``AgentNetwork.unroll``) from ``h``; the hidden state returned is ``h``."""
    return lambda net, params, h, xs: (h, net.unroll(params, h, xs, first))


def feed_forward(net: AgentNetwork, params: Any, h: Any, x: jax.Array) -> tuple[Any, jax.Array]:
    """A feed-forward network's outputs; ``h`` passes through untouched."""
    return h, net(params, x)


class Heads(Protocol):
    """An actor-critic layout: where the policy's outputs and the values come from.

    ``policy`` returns ``(actor carry', policy outputs [..., A or 2A])``; ``value`` and
    ``both`` take and return the carry ``{"actor", "critic"}``, values ``[..., N]``.
    """

    critic_carry_dim: int

    def init(self, key: jax.Array) -> dict[str, Any]: ...

    def policy(self, run: Run, actor_params: Any, h: Any, obs: jax.Array) -> tuple[Any, jax.Array]: ...

    def value(self, run: Run, params: dict[str, Any], carry: dict[str, Any],
              critic_obs: jax.Array) -> tuple[Any, jax.Array]: ...

    def both(self, run: Run, params: dict[str, Any], carry: dict[str, Any], obs: jax.Array,
             critic_obs: jax.Array) -> tuple[dict[str, Any], jax.Array, jax.Array]: ...


@dataclasses.dataclass(frozen=True)
class SeparateNetworks:
    """Actor and critic as two networks, each with its own parameters and hidden state.

    Attributes:
        actor: outputs ``[..., N, A]`` (``2A`` continuous).
        critic: outputs ``[..., N, 1]``, the value.
    """

    actor: AgentNetwork
    critic: AgentNetwork

    @property
    def critic_carry_dim(self) -> int:
        return self.critic.carry_dim

    def init(self, key: jax.Array) -> dict[str, Any]:
        key_actor, key_critic = jax.random.split(key)
        return {"actor": self.actor.init(key_actor), "critic": self.critic.init(key_critic)}

    def policy(self, run: Run, actor_params: Any, h: Any, obs: jax.Array) -> tuple[Any, jax.Array]:
        return run(self.actor, actor_params, h, obs)

    def value(self, run: Run, params: dict[str, Any], carry: dict[str, Any], critic_obs: jax.Array):
        h, values = run(self.critic, params["critic"], carry["critic"], critic_obs)
        return h, values[..., 0]

    def both(self, run: Run, params: dict[str, Any], carry: dict[str, Any], obs: jax.Array, critic_obs: jax.Array):
        h_actor, out = self.policy(run, params["actor"], carry["actor"], obs)
        h_critic, values = self.value(run, params, carry, critic_obs)
        return {"actor": h_actor, "critic": h_critic}, out, values


@dataclasses.dataclass(frozen=True)
class SharedTrunk:
    """One network for actor and critic: a trunk and two heads, outputs ``[..., N, out + 1]``
    with the value last. The critic reads the actor's input and has no parameters or
    hidden state of its own (``params["critic"]`` is empty, its carry zero-width).

    Attributes:
        actor: the actor-critic's network.
    """

    actor: AgentNetwork
    critic_carry_dim: int = 0

    def init(self, key: jax.Array) -> dict[str, Any]:
        key_actor, _ = jax.random.split(key)
        return {"actor": self.actor.init(key_actor), "critic": {}}

    def policy(self, run: Run, actor_params: Any, h: Any, obs: jax.Array) -> tuple[Any, jax.Array]:
        h, out = run(self.actor, actor_params, h, obs)
        return h, out[..., :-1]

    def value(self, run: Run, params: dict[str, Any], carry: dict[str, Any], critic_obs: jax.Array):
        _, out = run(self.actor, params["actor"], carry["actor"], critic_obs)
        return carry, out[..., -1]

    def both(self, run: Run, params: dict[str, Any], carry: dict[str, Any], obs: jax.Array, critic_obs: jax.Array):
        h_actor, out = run(self.actor, params["actor"], carry["actor"], obs)
        return {"actor": h_actor, "critic": carry["critic"]}, out[..., :-1], out[..., -1]
