"""Rollout: ``lax.scan`` of vmapped environment and policy steps with auto-reset.

Shapes: E environments, N agents, O observation width, C critic-input width,
A actions; a rollout of T steps stacks every field on a leading time axis,
giving ``[T, E, N, ...]``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Literal, get_args

import jax
import jax.numpy as jnp
from flax import struct

from jaxpo.envs import AutoReset, TimeStep
from jaxpo.core.axes import varying, selected_branches
from jaxpo.core.kernels import for_platform
from jaxpo.core.networks import ActorCritic

CriticInput = Literal["local", "global", "agent"]
CRITIC_INPUTS: tuple[str, ...] = get_args(CriticInput)


def critic_input_dim(env: AutoReset, critic_input: str) -> int:
    """Per-agent width C of the critic's input for ``critic_input``."""
    if critic_input not in CRITIC_INPUTS:
        raise ValueError(f"critic_input must be one of {CRITIC_INPUTS}, got {critic_input!r}")
    global_dim = env.global_state_dim if env.global_state_dim is not None else env.num_agents * env.obs_dim
    return {"local": env.obs_dim, "global": global_dim, "agent": global_dim + env.obs_dim}[critic_input]


def critic_features(obs: jax.Array, global_state: jax.Array | None, critic_input: str) -> jax.Array:
    """The critic's input ``[..., N, C]`` from ``obs [..., N, O]``.

    ``"local"``: the agent's own observation. ``"global"``: the environment's global
    state when it has one, otherwise every agent's observation concatenated (the
    same vector for each agent; shared critics still see the agent id).
    ``"agent"``: an agent-specific global state — the global state followed by the
    agent's own observation (MAPPO's agent-specific state, in its generic form).
    """
    if critic_input == "local":
        return obs
    if global_state is None:
        n = obs.shape[-2]
        joint = obs.reshape(*obs.shape[:-2], 1, n * obs.shape[-1])
        global_state = jnp.broadcast_to(joint, (*obs.shape[:-2], n, n * obs.shape[-1]))
    if critic_input == "agent":
        return jnp.concatenate([global_state, obs], axis=-1)
    return global_state


@struct.dataclass
class RolloutState:
    """What carries over between rollouts.

    Attributes:
        env_state: the environments' states, batched over ``[E]``.
        timestep: the last ``TimeStep`` (``obs [E, N, O]`` etc.), to act on next, as
            ``acted_on`` keeps it.
        carry: the networks' hidden states ``{"actor", "critic"}: [E, N, H]``
            (H = 0 for feed-forward networks).
        first: bool [E] — ``timestep.obs`` starts an episode (hidden states reset).
        episode_return: float32 [E, N] — reward summed so far in the running episodes.
        episode_length: int32 [E].
    """

    env_state: Any
    timestep: TimeStep
    carry: dict[str, jax.Array]
    first: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array


@struct.dataclass
class Transition:
    """One step of E environments; a rollout stacks these to ``[T, E, ...]``.

    Attributes:
        obs: [E, N, O]; action_mask: bool [E, N, A]; critic_obs: [E, N, C], or
            None when the critic reads the actor's observation (``"local"``: not
            stored twice); ``critic_input`` is the critic's input either way.
        carry: hidden states ``{"actor", "critic"}: [E, N, H]`` entering the step,
            before the reset that ``first`` applies; first: bool [E].
        action: int32 [E, N] (discrete) or float32 [E, N, A] (continuous);
        log_prob: [E, N]; value: [E, N] — from the acting policy.
        reward: [E, N]; terminated, truncated: bool [E].
        final_value: [E, N] — the critic's value of the observation the step reached,
            before any reset (the bootstrap target of a truncation).
        episode_return: [E] — team-mean return of the episode that ended at this step
            (0 where none ended); episode_length: int32 [E] likewise.
        episode_won: bool [E] — an episode ended in a win at this step; None for
            environments without a win condition.
        active: bool [E, N] — the agents whose actions acted at this step (``obs``'s
            state); None where the environment reports none (every agent acts) or the
            program does not mask inactive agents (``Config.active_agents``).
        interaction: bool [E, N, N] — the coupling graph of the state each environment
            acted in (``Env.interaction``), or ``[E, N, K]``, that graph on the fixed
            coupling's row lists (``Env.interaction_lists``), for a per-state khop support
            (``Config.interaction_hops``); None otherwise.
    """

    obs: jax.Array
    action_mask: jax.Array
    critic_obs: jax.Array
    carry: dict[str, jax.Array]
    first: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_value: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    episode_won: jax.Array | None = None
    active: jax.Array | None = None
    interaction: jax.Array | None = None

    @property
    def critic_input(self) -> jax.Array:
        """``[..., N, C]``: what the critic reads (``obs`` for a local critic)."""
        return self.obs if self.critic_obs is None else self.critic_obs


def permutation(key: jax.Array, n: int, platform: str | None = None) -> jax.Array:
    """int32 ``[n]``: a random permutation of ``range(n)``, the epoch shuffle, by the
    kernels of ``platform`` (``jaxpo.core.kernels``: on CPU ``kernels.cpu.permutation``,
    elsewhere ``jax.random.permutation``; None: ``jax.default_backend()``)."""
    return for_platform(platform).permutation(key, n)


def minibatch_rows(key: jax.Array, batch_size: int, num_minibatches: int, platform: str | None = None) -> jax.Array:
    """int32 ``[M, B / M]``: a random permutation of the B sample indices (``permutation``
    on ``platform``) cut into M minibatches. An epoch scans over these rows and gathers
    each minibatch from the batch itself (``take_rows``): no shuffled copy of the whole
    batch is made."""
    size = batch_size // num_minibatches
    return permutation(key, batch_size, platform).reshape(num_minibatches, size)


def take_rows(data: Any, rows: jax.Array) -> Any:
    """Leaves ``[B, ...]`` at ``rows [b]``: ``[b, ...]``. Everything at one index of B
    (e.g. all N agents of a transition) stays together."""
    return jax.tree.map(lambda x: x[rows], data)


def epochs(step: Callable[[Any, Any], tuple[Any, Any]], carry: Any, data: Any, key: jax.Array, num_epochs: int,
           num_minibatches: int, platform: str | None = None, unroll: int = 1) -> tuple[Any, Any]:
    """``num_epochs`` × ``num_minibatches`` calls ``carry, metrics = step(carry, minibatch)``
    on minibatches of ``data`` (leaves ``[B, ...]``), reshuffled every epoch: epoch e
    permutes with ``split(key, num_epochs)[e]`` (``minibatch_rows`` on ``platform``). The
    one epoch loop of both update schemes; ``unroll`` minibatches per ``lax.scan``
    iteration. Returns ``(carry, metrics)``, metrics leaves
    ``[num_epochs, num_minibatches, ...]``."""
    batch_size = jax.tree.leaves(data)[0].shape[0]
    stores = Stores(for_platform(platform).pack_stores)

    def minibatch(carry, rows):
        carry, metrics = step(carry, take_rows(data, rows))
        return carry, stores.pack(metrics, lead=0)

    def epoch(carry, epoch_key):
        rows = minibatch_rows(epoch_key, batch_size, num_minibatches, platform)
        return jax.lax.scan(minibatch, carry, rows, unroll=unroll)

    carry, stored = jax.lax.scan(epoch, carry, jax.random.split(key, num_epochs))
    return carry, stores.unpack(stored)


def to_sequences(x: jax.Array, seq_len: int) -> jax.Array:
    """``[T, E, ...] -> [T / L * E, L, ...]``: every environment's rollout cut into
    consecutive sequences of L = ``seq_len`` steps (sequence index = chunk · E + env)."""
    t, e = x.shape[:2]
    x = x.reshape(t // seq_len, seq_len, e, *x.shape[2:])
    return jnp.swapaxes(x, 1, 2).reshape(t // seq_len * e, seq_len, *x.shape[3:])


def env_keys(key: jax.Array, num_envs: int, axis_name: str | None = None) -> jax.Array:
    """One key per environment, ``[E]``: ``split(key, E)``. When the environments are
    split over the devices of ``axis_name`` (E per device), this device's slice of
    ``split(key, E × D)``: every environment draws the same stream however many
    devices share them."""
    if axis_name is None:
        return jax.random.split(key, num_envs)
    total = num_envs * jax.lax.axis_size(axis_name)
    start = jax.lax.axis_index(axis_name) * num_envs
    return jax.lax.dynamic_slice_in_dim(jax.random.split(key, total), start, num_envs)


def acted_on(timestep: TimeStep, critic_input: str) -> TimeStep:
    """The part of a step's ``TimeStep`` the next step reads, which is all the rollout
    carries: without the pre-reset ``final_obs``/``final_global_state`` (read in the
    step that made them), and without ``global_state`` when the critic reads local
    observations. A carried field is part of the training state a chunk returns, so XLA
    must compute it even when nothing reads it (JaxNav's world state repeats its lidar,
    twice a step with the auto-reset's; ``docs/speed.md``)."""
    return timestep.replace(global_state=None if critic_input == "local" else timestep.global_state,
                            final_obs=None, final_global_state=None)


def reset(env: AutoReset, net: ActorCritic, key: jax.Array, num_envs: int, critic_input: str,
          axis_name: str | None = None) -> RolloutState:
    """Resets ``num_envs`` environments (this device's share when they are split over
    ``axis_name``) and the network's hidden states; the state ``rollout`` continues with
    the same ``critic_input``."""
    env_state, timestep = jax.vmap(env.reset)(env_keys(key, num_envs, axis_name))
    return RolloutState(
        env_state=env_state,
        timestep=acted_on(timestep, critic_input),
        carry=net.initial_carry((num_envs,)),
        first=jnp.ones((num_envs,), bool),
        episode_return=jnp.zeros((num_envs, env.num_agents), jnp.float32),
        episode_length=jnp.zeros((num_envs,), jnp.int32),
    )


def rollout(
    env: AutoReset,
    net: ActorCritic,
    params: Any,
    state: RolloutState,
    key: jax.Array,
    num_steps: int,
    critic_input: str,
    policy: Callable[..., Any] | None = None,
    axis_name: str | None = None,
    unroll: int = 1,
    bootstrap: str = "gather",
    pack_stores: bool = False,
    interaction: Callable[[Any], jax.Array] | None = None,
) -> tuple[RolloutState, Transition]:
    """Runs ``num_steps`` steps of every environment under the current policy.

    Returns the carried state and the stacked ``Transition`` ``[T, E, ...]``.
    ``policy`` overrides the network's action distribution (``(params, obs, mask) ->
    distribution``), e.g. a uniform one for baselines; values and hidden states
    still come from the network. Each environment draws its actions and transitions
    from its own key (``env_keys``), so splitting the environments over the devices
    of ``axis_name`` changes nothing but where they run; those keys are drawn for all
    steps before the loop, in one batch. ``unroll``: steps per ``lax.scan`` iteration;
    ``bootstrap``: how ``bootstrap_values`` evaluates the reached observations;
    ``pack_stores``: each step's outputs stored as one array per dtype (``Stores``);
    ``interaction``: a function of one state whose value each step stores, the state's
    coupling graph (``Env.interaction`` or ``Env.interaction_lists``); None stores none.
    """
    num_envs = state.episode_length.shape[0]
    sample = jax.vmap(lambda dist, key: dist.sample(seed=key))  # per environment

    def step_keys(key: jax.Array) -> jax.Array:  # [2, E, 2]: each environment's action and step keys
        return jnp.swapaxes(jax.vmap(jax.random.split)(env_keys(key, num_envs, axis_name)), 0, 1)

    def one_step(state: RolloutState, keys: jax.Array):
        key_act, key_env = keys
        ts = state.timestep
        critic_obs = critic_features(ts.obs, ts.global_state, critic_input)
        carry, dist, value = net.step(params, state.carry, ts.obs, ts.action_mask, critic_obs, state.first)
        if policy is not None:
            dist = policy(params, ts.obs, ts.action_mask)
        action = sample(dist, key_act)
        log_prob = dist.log_prob(action)

        with selected_branches(axis_name):
            env_state, next_ts = jax.vmap(env.step)(key_env, state.env_state, action)
        done = next_ts.done
        final_critic_obs = critic_features(next_ts.final_obs, next_ts.final_global_state, critic_input)
        episode_return = state.episode_return + next_ts.reward
        episode_length = state.episode_length + 1
        transition = Transition(
            obs=ts.obs,
            action_mask=ts.action_mask,
            critic_obs=None if critic_input == "local" else critic_obs,
            carry=state.carry,
            first=None,  # the previous step's done: after the scan
            action=action if net.continuous else action.astype(jnp.int32),
            log_prob=log_prob,
            value=value,
            reward=next_ts.reward,
            terminated=next_ts.terminated,
            truncated=next_ts.truncated,
            final_value=None,  # bootstrap_values, after the scan
            episode_return=jnp.where(done, episode_return.mean(-1), 0.0),
            episode_length=jnp.where(done, episode_length, 0),
            episode_won=None if next_ts.won is None else done & next_ts.won,
            active=ts.active,
            interaction=None if interaction is None else jax.vmap(interaction)(state.env_state),
        )
        state = RolloutState(
            env_state=env_state,
            timestep=acted_on(next_ts, critic_input),
            carry=carry,
            first=done,
            episode_return=jnp.where(done[:, None], 0.0, episode_return),
            episode_length=jnp.where(done, 0, episode_length),
        )
        return varying(state, axis_name), stores.pack((transition, final_critic_obs))

    # Every step's keys in one batch: in the loop, the hash rounds of E small splits are a
    # chain of tiny kernels per step on a GPU; the keys are the same.
    keys = jax.vmap(step_keys)(jax.random.split(key, num_steps))  # [T, 2, E, 2]
    first, stores = state.first, Stores(pack_stores)
    state, stored = jax.lax.scan(one_step, state, keys, unroll=unroll)
    traj, final_input = stores.unpack(stored)
    # A step starts an episode where the one before it ended: one store fewer per step.
    traj = traj.replace(first=jnp.concatenate([first[None], (traj.terminated | traj.truncated)[:-1]]))
    final_value = bootstrap_values(net, params, traj, state.carry, final_input, bootstrap)
    return state, traj.replace(final_value=final_value)


class Stores:
    """What a loop's iterations store for a scan to stack: their outputs as they are, or,
    ``packed``, as one wide array per dtype (``pack``), unpacked after the loop. A scan
    stacks each output apart, a store every iteration; on a GPU each is a kernel XLA
    launches on its own, outside the iteration's CUDA graph, while on a CPU packing is
    one more copy of the outputs (``jaxpo.core.kernels.Kernels.pack_stores``)."""

    def __init__(self, packed: bool):
        self.packed, self.layout = packed, None

    def pack(self, tree: Any, lead: int = 1) -> Any:
        """An iteration's outputs (leaves sharing ``lead`` leading axes), as stored."""
        if not self.packed:
            return tree
        stored, self.layout = pack(tree, lead)
        return stored

    def unpack(self, stacked: Any) -> Any:
        """What the scan stacked of ``pack``'s results, as the outputs' tree."""
        return unpack(stacked, *self.layout) if self.packed else stacked


def pack(tree: Any, lead: int = 1) -> tuple[dict[str, jax.Array], tuple[Any, list]]:
    """A loop iteration's outputs (leaves sharing ``lead`` leading axes, e.g. ``[E, ...]``)
    as one ``[*lead axes, K]`` array per dtype, and the layout ``unpack`` undoes it with."""
    leaves, treedef = jax.tree.flatten(tree)
    groups: dict[str, list[jax.Array]] = {}
    for leaf in leaves:
        groups.setdefault(leaf.dtype.name, []).append(leaf.reshape(*leaf.shape[:lead], -1))
    packed = {name: jnp.concatenate(parts, axis=lead) for name, parts in groups.items()}
    return packed, (treedef, [(leaf.dtype.name, leaf.shape[lead:]) for leaf in leaves])


def unpack(stacked: dict[str, jax.Array], treedef: Any, specs: list) -> Any:
    """``pack``'s outputs stacked by scans (``[..., K]`` per dtype, e.g. ``[T, E, K]``)
    as the tree of ``[..., *shape]`` leaves they came from."""
    offsets = dict.fromkeys(stacked, 0)
    leaves = []
    for name, shape in specs:
        size, start = math.prod(shape), offsets[name]
        block = stacked[name][..., start:start + size]
        leaves.append(block.reshape(*block.shape[:-1], *shape))
        offsets[name] = start + size
    return jax.tree.unflatten(treedef, leaves)


def bootstrap_values(net: ActorCritic, params: Any, traj: Transition, last_carry: dict[str, jax.Array],
                     final_input: jax.Array, bootstrap: str = "gather") -> jax.Array:
    """``final_value [T, E, N]`` of a rollout ``traj`` (leaves ``[T, E, ...]``): the
    critic's value of the observation each step reached, before any reset.

    Where the episode continues that observation is the next step's, and so is its
    value: ``value[t + 1]`` (same hidden state, no reset). Only the last step and the
    steps that ended an episode (few: about E·T / episode length) need a pass of their
    own, on ``final_input [T, E, N, C]`` (the critic's input of the reached observation)
    and the hidden state the step left (``traj.carry[t + 1]``, ``last_carry [E, N, H]``
    for the last). ``bootstrap`` "gather": those are gathered E at a time and evaluated
    in blocks until none is left, instead of a second critic pass at every step of the
    rollout (a loop whose length depends on the data); "all": one critic pass over all
    T·E reached observations, kept where needed (no data-dependent loop: on a GPU each of
    its iterations waits for the device to say whether another is needed).
    """
    num_steps, num_envs = traj.terminated.shape
    size = num_steps * num_envs
    left = (traj.terminated | traj.truncated).at[-1].set(True).reshape(size)  # [T·E]
    final_value = jnp.concatenate([traj.value[1:], jnp.zeros_like(traj.value[:1])]).reshape(size, -1)
    after = jax.tree.map(lambda c, last: jnp.concatenate([c[1:], last[None]]), traj.carry, last_carry)
    rows = lambda x, index: x.reshape(size, *x.shape[2:])[index]  # [T, E, ...] at flat indices
    if bootstrap == "all":
        flat = lambda x: x.reshape(size, *x.shape[2:])
        values = net.next_value(params, jax.tree.map(flat, after), flat(final_input))
        return jnp.where(left[:, None], values, final_value).reshape(traj.value.shape)
    if bootstrap != "gather":
        raise ValueError(f"bootstrap must be 'gather' or 'all', got {bootstrap!r}")

    def block(carry):
        final_value, left = carry
        index = jnp.nonzero(left, size=num_envs, fill_value=size)[0]  # up to E of them; size = none
        clipped = jnp.minimum(index, size - 1)
        values = net.next_value(params, jax.tree.map(lambda c: rows(c, clipped), after), rows(final_input, clipped))
        return final_value.at[index].set(values, mode="drop"), left.at[index].set(False, mode="drop")

    final_value, _ = jax.lax.while_loop(lambda c: c[1].any(), block, (final_value, left))
    return final_value.reshape(traj.value.shape)
