"""Actor and critic networks: feed-forward or GRU, shared or per-agent parameters,
categorical or Gaussian actions, separate networks or one shared trunk.

Both act on arrays with the agent axis second to last: observations
``[..., N, O]`` give actor outputs ``[..., N, A]`` and values ``[..., N]``.

* Shared parameters: one network for all agents; a one-hot agent id is appended to
  the input (unless ``agent_ids`` is off) so that agents can still behave differently.
* Per-agent parameters: every leaf carries a leading agent axis ``[N, ...]`` and the
  network is vmapped over the agent axis (no agent id needed).
* Recurrent (GRU) networks carry a hidden state ``[..., N, H]`` per agent. Every
  network has one: feed-forward ones a zero-width ``[..., N, 0]`` carry, so the
  rollout and the loss handle both without a branch. A step whose ``first`` flag
  is set (its observation starts an episode) sees a zero hidden state.
* Actions: discrete (masked categorical over A actions) or continuous (diagonal
  Gaussian over an A-wide action vector, state-independent learned log-std;
  masked dimensions — padding for agents with fewer — contribute nothing).
* Image observations (Overcooked) may go through a CNN torso first (``conv``): the
  flat ``[..., H·W·C]`` input is viewed as ``[..., H, W, C]`` images, convolved, and
  flattened again before the first dense layer; the rest of the network is unchanged.

The per-agent flax modules are ``jaxpo.core.modules``; what they compute with on each
platform is ``jaxpo.core.kernels``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal, Sequence

import distrax
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxpo.core.agents import AgentNetwork, Heads, SeparateNetworks, SharedTrunk, feed_forward, stepping, unrolling
from jaxpo.core.modules import ACTIVATIONS, MLP, GRUNet, Head, Layout

Activation = Literal[tuple(ACTIVATIONS)]  # the names of jaxpo.core.modules.ACTIVATIONS, as a type
# "auto": a CNN torso when the observations are images (H, W, C), else none.
Encoder = Literal["auto", "mlp", "cnn"]

# Masked logits: large but finite, so that 0 * logit stays 0 in the entropy.
MASKED_LOGIT = -1e9


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
NO_CARRY = {"actor": None, "critic": None}  # what feed-forward calls pass as hidden states


def _checked(obs_dim: int, critic_dim: int, hidden: Sequence[int], activation: str,
             conv: Sequence[tuple[int, int]], image_shape: Sequence[int], critic_conv: bool, shared_trunk: bool):
    """``(hidden, conv, image_shape)`` as int tuples, or the ValueError ``create`` raises."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    hidden = tuple(int(h) for h in hidden)
    if not hidden or min(hidden) < 1:
        raise ValueError(f"hidden must be a non-empty sequence of positive widths, got {hidden}")
    conv = tuple((int(f), int(k)) for f, k in conv)
    image_shape = tuple(int(d) for d in image_shape)
    if conv and (len(image_shape) != 3 or int(np.prod(image_shape)) != obs_dim):
        raise ValueError(f"a CNN torso needs image_shape (H, W, C) with H·W·C = obs_dim ({obs_dim}), "
                         f"got {image_shape}")
    if critic_conv and conv and critic_dim != obs_dim:
        raise ValueError(f"critic_conv: the critic's CNN reads the observation images, so critic_dim "
                         f"({critic_dim}) must equal obs_dim ({obs_dim})")
    if shared_trunk and critic_dim != obs_dim:
        raise ValueError(f"a shared trunk reads the actor's observation, so critic_dim ({critic_dim}) "
                         f"must equal obs_dim ({obs_dim})")
    return hidden, conv, image_shape


@dataclasses.dataclass(frozen=True)
class ActorCritic:
    """Actor (categorical or Gaussian) and state-value critic for N agents.

    ``params`` is ``{"actor": ..., "critic": ...}``; a hidden state ("carry") is
    ``{"actor": [..., N, H], "critic": [..., N, H]}`` (H = 0 when feed-forward).

    With a shared trunk (``critic`` None) the actor's network is the whole
    actor-critic — one trunk, a policy and a value head — so ``params["critic"]`` is
    empty, the critic reads the actor's observation and carries no hidden state of its
    own. Which of the two layouts runs is decided once (``heads``); every method below
    works for both: ``step``/``unroll`` run actor and critic together, ``policy_step``/
    ``unroll_policy``/``policy`` the actor alone, ``next_value``/``unroll_value``/``value``
    the critic alone (one step, a sequence, feed-forward).

    Attributes:
        actor: the actor's network (with a shared trunk: the actor-critic's).
        critic: the critic's network, or None with a shared trunk.
        continuous: Gaussian actions (true) or categorical (false).
    """

    actor: AgentNetwork
    critic: AgentNetwork | None
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
        shared_trunk: bool = False,
        agent_ids: bool = True,
        conv: Sequence[tuple[int, int]] = (),
        image_shape: Sequence[int] = (),
        critic_conv: bool = False,
        platform: str | None = None,
    ) -> "ActorCritic":
        """The networks of N agents.

        Args:
            num_agents: N.
            obs_dim: the actor's per-agent input width O.
            num_actions: discrete action count, or the action vector's width when ``continuous``.
            critic_dim: the critic's per-agent input width C.
            hidden: the hidden layers' widths (the first is the trunk's, and the GRU's).
            activation: a name in ``jaxpo.core.modules.ACTIVATIONS``.
            shared: one parameter set for all agents (false: one per agent).
            recurrent: a GRU after the first layer.
            continuous: Gaussian actions.
            shared_trunk: one trunk for actor and critic (the critic then reads the
                actor's input: ``critic_dim`` must equal ``obs_dim``).
            agent_ids: shared networks see each agent's one-hot id (false: only its input).
            conv: ``(features, kernel)`` per CNN layer before the first dense layer, for
                observations that are flattened ``image_shape`` (H, W, C) images.
            image_shape: (H, W, C) of the observations, with ``conv``.
            critic_conv: the critic has its own CNN (it reads the same images), else none.
            platform: whose kernels the networks compute with
                (``jaxpo.core.kernels.for_platform``; None: ``jax.default_backend()``).

        Returns:
            The ``ActorCritic``.

        Raises:
            ValueError: for an unknown activation, empty or non-positive ``hidden``, an
                ``image_shape`` that does not match ``obs_dim``, or a critic that cannot
                read the actor's images or input.
        """
        hidden, conv, image_shape = _checked(obs_dim, critic_dim, hidden, activation, conv, image_shape,
                                             critic_conv, shared_trunk)
        module = GRUNet if recurrent else MLP
        ids = num_agents if shared and agent_ids else 0  # one network for all agents, told apart by their ids
        layout = functools.partial(Layout, hidden, activation=activation, num_ids=ids, platform=platform)
        cnn = dict(conv=conv, image_shape=image_shape if conv else ())
        # out_scale 0.01: a near-uniform initial policy (near-zero Gaussian mean).
        policy = Head(num_actions, out_scale=0.01, log_std=continuous)
        value = Head(1, out_scale=1.0)
        if shared_trunk:
            trunk = module(layout((policy, dataclasses.replace(value, prefix="value_")), **cnn))
            return cls(AgentNetwork(trunk, num_agents, obs_dim, shared), None, continuous)
        actor = module(layout((policy,), **cnn))
        critic = module(layout((value,), **(cnn if critic_conv else {})))
        return cls(AgentNetwork(actor, num_agents, obs_dim, shared), AgentNetwork(critic, num_agents, critic_dim, shared),
                   continuous)

    @functools.cached_property
    def heads(self) -> Heads:
        """The layout's actor and critic paths, chosen once: ``SharedTrunk`` or ``SeparateNetworks``."""
        return SharedTrunk(self.actor) if self.critic is None else SeparateNetworks(self.actor, self.critic)

    @property
    def recurrent(self) -> bool:
        return self.actor.recurrent

    @property
    def shared_trunk(self) -> bool:
        return self.critic is None

    def init(self, key: jax.Array) -> dict[str, Any]:
        """Parameters ``{"actor", "critic"}`` (``"critic"`` empty with a shared trunk)."""
        return self.heads.init(key)

    def initial_carry(self, batch_shape: Sequence[int]) -> dict[str, jax.Array]:
        """Zero hidden states ``{"actor", "critic"}: [*batch_shape, N, H]``."""
        zeros = lambda width: jnp.zeros((*batch_shape, self.actor.num_agents, width), jnp.float32)
        return {"actor": zeros(self.actor.carry_dim), "critic": zeros(self.heads.critic_carry_dim)}

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
        carry, out, values = self.heads.both(stepping(first), params, carry, obs, critic_obs)
        return carry, self.distribution(out, action_mask), values

    def unroll(
        self, params: dict[str, Any], h0: dict[str, jax.Array], obs: jax.Array, action_mask: jax.Array,
        critic_obs: jax.Array, first: jax.Array,
    ) -> tuple[Distribution, jax.Array]:
        """Time-major sequences, actor and critic together: ``h0 {"actor", "critic"}:
        [..., N, H]``, ``obs [L, ..., N, O]``, ``action_mask [L, ..., N, A]``,
        ``critic_obs [L, ..., N, C]``, ``first [L, ...]`` -> ``(distribution with batch
        [L, ..., N], values [L, ..., N])`` (a shared trunk runs once for both)."""
        _, out, values = self.heads.both(unrolling(first), params, h0, obs, critic_obs)
        return self.distribution(out, action_mask), values

    def policy_step(self, actor_params: Any, carry: jax.Array, obs: jax.Array, action_mask: jax.Array,
                    first: jax.Array) -> tuple[jax.Array, Distribution]:
        """The actor alone, one step: ``carry [..., N, H]`` (the actor's), ``obs [..., N, O]``,
        ``action_mask [..., N, A]``, ``first bool [...]`` -> ``(carry', distribution)``."""
        carry, out = self.heads.policy(stepping(first), actor_params, carry, obs)
        return carry, self.distribution(out, action_mask)

    def unroll_policy(
        self, actor_params: Any, h0: jax.Array, obs: jax.Array, action_mask: jax.Array, first: jax.Array
    ) -> Distribution:
        """Time-major sequences: ``h0 [..., N, H]``, ``obs [L, ..., N, O]``, ``action_mask
        [L, ..., N, A]``, ``first [L, ...]`` -> distribution with batch ``[L, ..., N]``."""
        return self.distribution(self.heads.policy(unrolling(first), actor_params, h0, obs)[1], action_mask)

    def policy(self, params: dict[str, Any], obs: jax.Array, action_mask: jax.Array) -> Distribution:
        """Feed-forward: ``obs [..., N, O]``, ``action_mask bool [..., N, A]`` -> distribution
        with batch shape ``[..., N]`` (see ``distribution`` for the masks)."""
        return self.distribution(self.heads.policy(feed_forward, params["actor"], None, obs)[1], action_mask)

    def next_value(self, params: dict[str, Any], carry: dict[str, jax.Array], critic_obs: jax.Array) -> jax.Array:
        """Value ``[..., N]`` of an observation that continues the episode whose hidden
        states are ``carry`` (``[..., N, H]`` each): the bootstrap of a truncation."""
        first = jnp.zeros(critic_obs.shape[:-2], bool)
        return self.heads.value(stepping(first), params, carry, critic_obs)[1]

    def unroll_value(self, params: dict[str, Any], h0: dict[str, jax.Array], critic_obs: jax.Array,
                     first: jax.Array) -> jax.Array:
        """Time-major: ``h0 {"actor", "critic"}: [..., N, H]``, ``critic_obs [L, ..., N, C]``,
        ``first [L, ...]`` -> values ``[L, ..., N]``."""
        return self.heads.value(unrolling(first), params, h0, critic_obs)[1]

    def value(self, params: dict[str, Any], critic_obs: jax.Array) -> jax.Array:
        """Feed-forward: ``critic_obs [..., N, C] -> values [..., N]``."""
        return self.heads.value(feed_forward, params, NO_CARRY, critic_obs)[1]

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
        if self.shared_trunk:
            raise ValueError("agent_policy needs separate actor and critic networks (no shared trunk)")
        apply = functools.partial(self.actor.module.apply, agent_actor_params)
        if not self.recurrent:
            return self.distribution(apply(obs), action_mask)
        time_major = lambda x: jnp.swapaxes(x, 0, 1)
        out = time_major(apply(h0, time_major(obs), time_major(first))[1])
        return self.distribution(out, action_mask)
