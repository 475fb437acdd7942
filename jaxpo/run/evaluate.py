"""Trained policies: load one from a run's checkpoint, evaluate it, render an episode.

    policy = jaxpo.load_policy("runs/<name>", run=0)    # a pure act(key, obs, mask)
    stats = jaxpo.evaluate(policy, episodes=100)        # compiled, vmapped over episodes
    jaxpo.render_episode(policy, "episode.gif")          # the env's render, via imageio

Evaluation runs ``episodes`` environments side by side, each for exactly one
episode (``env.max_steps`` steps cover the longest); the return is the team-mean
episode return, as in training. ``jaxpo eval`` does this for every checkpointed run
at once (vmapped over runs too) and writes ``checkpoint_eval.csv``; evaluation
during training is ``jaxpo.run.periodic_eval``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import time
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxpo.core.checks import FieldError, Setting, positive_int
from jaxpo.run import checkpoint
from jaxpo.program.config import Config
from jaxpo.envs import AutoReset, Env
from jaxpo.program.compiled import compiler_options
from jaxpo.program.learner import learner
from jaxpo.core.networks import ActorCritic, MaskedDiagGaussian


@dataclasses.dataclass(frozen=True)
class Policy:
    """One run's trained actor, a pure function of arrays (``jaxpo.load_policy`` loads one).

    ``act(key, obs [N, O], mask [N, A]) -> actions [N]`` (``[N, A]`` continuous; any
    leading batch axes allowed); a ``Policy`` is also callable as ``act``. Recurrent
    actors carry a hidden state: ``act(key, obs, mask, carry, first) -> (actions, carry)``,
    starting from ``initial_carry()``.

    Attributes:
        config: the static ``Config`` the run trained with (its env and networks).
        params: the run's network parameters ``{"actor", "critic"}`` (no run axis).
        run: its row of the run table: ``run_id``, ``label``, ``setting``, ``seed``, ``values``.
        update: the train steps behind these parameters.
        greedy: act with the most likely action (true) instead of a sample (false).
    """

    config: Config
    params: Any  # {"actor", "critic"} of one run
    run: dict[str, Any]  # its row of the run table (run_id, label, setting, seed, values)
    update: int  # train steps behind these parameters
    greedy: bool = True

    @functools.cached_property
    def net(self) -> ActorCritic:
        """The actor-critic networks of ``config`` (those of its cached learner)."""
        return learner(self.config).net

    def initial_carry(self, batch_shape: tuple[int, ...] = ()) -> jax.Array:
        """The actor's hidden state at an episode's start: zeros.

        Args:
            batch_shape: leading batch axes, e.g. ``(E,)`` for E environments.

        Returns:
            float32 ``[*batch_shape, N, H]`` (H = 0 for a feed-forward actor).
        """
        return self.net.initial_carry(batch_shape)["actor"]

    def act(self, key: jax.Array, obs: jax.Array, mask: jax.Array, carry: jax.Array | None = None,
            first: jax.Array | None = None):
        """Actions for one step of observations (also ``policy(key, obs, mask, ...)``).

        Args:
            key: a PRNG key (used only when not ``greedy``).
            obs: observations ``[..., N, O]`` (any leading batch axes).
            mask: available actions ``[..., N, A]``.
            carry: recurrent only: the hidden state ``[..., N, H]`` (default
                ``initial_carry`` of the batch axes); ignored by feed-forward actors.
            first: recurrent only: bool ``[...]``, true where ``obs`` starts an episode (the
                hidden state is reset there; default false); ignored by feed-forward actors.

        Returns:
            Feed-forward: the actions, int ``[..., N]`` (float ``[..., N, A]`` for continuous
                actions). Recurrent: ``(actions, carry)``, carry ``[..., N, H]`` to pass on.
        """
        if not self.net.recurrent:
            return choose(self.net.policy(self.params, obs, mask), key, self.greedy)
        carry = self.initial_carry(obs.shape[:-2]) if carry is None else carry
        first = jnp.zeros(obs.shape[:-2], bool) if first is None else first
        return self.step(key, obs, mask, carry, first)

    __call__ = act

    def step(self, key: jax.Array, obs: jax.Array, mask: jax.Array, carry: jax.Array,
             first: jax.Array) -> tuple[jax.Array, jax.Array]:
        """One acting step for either kind of actor: the step evaluation and rendering scan.

        Args:
            key: a PRNG key (used only when not ``greedy``).
            obs: observations ``[..., N, O]``.
            mask: available actions ``[..., N, A]``.
            carry: the hidden state ``[..., N, H]`` (``initial_carry``; H = 0 feed-forward).
            first: bool ``[...]``, true where ``obs`` starts an episode (recurrent actors reset
                their hidden state there).

        Returns:
            ``(actions, carry')``: actions int ``[..., N]`` (float ``[..., N, A]`` continuous)
                and the next hidden state (feed-forward: ``carry`` unchanged).
        """
        if not self.net.recurrent:
            return choose(self.net.policy(self.params, obs, mask), key, self.greedy), carry
        carry, dist = self.net.policy_step(self.params["actor"], carry, obs, mask, first)
        return choose(dist, key, self.greedy), carry


def choose(dist: Any, key: jax.Array, greedy: bool) -> jax.Array:
    """The most likely action (``greedy``) or a sample."""
    if not greedy:
        return dist.sample(seed=key)
    if isinstance(dist, MaskedDiagGaussian):
        return jnp.where(dist.mask, dist.mean, 0.0)
    return dist.mode()


def latest_groups(run_dir: str) -> dict[int, int]:
    """``{group index: newest checkpoint step of that group}`` for a run directory."""
    newest: dict[int, int] = {}
    for step in checkpoint.steps(run_dir):
        try:
            meta = checkpoint.read_meta(run_dir, step)
        except ValueError as err:  # an unreadable step: the group's previous one serves
            warnings.warn(str(err))
            continue
        checkpoint.check_format(meta, run_dir)  # another jaxpo's checkpoint: a clear error
        newest[int(meta["group"])] = step
    return newest


def load_runs(run_dir: str, step: int) -> tuple[Config, Any, list[dict], dict]:
    """``(config, params [R, ...] (padding dropped), run table, meta)`` of one checkpoint."""
    found = checkpoint.restore(run_dir, target=checkpoint.trained_target, step=step)
    runs = found.meta["runs"]
    params = jax.tree.map(lambda x: np.asarray(jax.device_get(x))[:len(runs)], found.state.params)
    return checkpoint.config_of(found.meta), params, runs, found.meta


def load_policy(run_dir: str, run: int = 0, greedy: bool = True) -> Policy:
    """A run's trained policy from the newest checkpoint of ``run_dir`` holding it.

    Args:
        run_dir: the run directory of a ``jaxpo.train`` / ``jaxpo.sweep`` with checkpoints.
        run: the run's ``run_id`` (its row of the run table).
        greedy: the policy acts with the most likely action (true) or samples (false).

    Returns:
        The ``Policy``: the run's parameters, config and run-table row, ``update`` the train
            steps of that checkpoint.

    Raises:
        ValueError: if ``run_dir`` does not exist or holds no checkpoint, a checkpoint was
            written by an incompatible jaxpo, or no checkpoint holds run ``run``.
    """
    groups = latest_groups(run_dir)
    if not groups:
        checkpoint.restore(run_dir)  # raises the clear error: no directory / no checkpoint
    tables = {step: checkpoint.read_meta(run_dir, step)["runs"] for step in groups.values()}
    for step, runs in sorted(tables.items(), reverse=True):
        ids = [r["run_id"] for r in runs]
        if run in ids:
            config, params, runs, meta = load_runs(run_dir, step)
            r = ids.index(run)
            return Policy(config, jax.tree.map(lambda x: jnp.asarray(x[r]), params), runs[r],
                          int(meta["chunk"]) * config.updates_per_chunk, greedy)
    known = sorted(r["run_id"] for runs in tables.values() for r in runs)
    raise FieldError.saying("run", Setting("run", run), f" is not among the checkpointed runs of {run_dir!r} "
                                                       f"(run ids {known[0]}..{known[-1]})")


@struct.dataclass
class EpisodeLoop:
    """The state of ``episode_loop``: environments ``[*B]`` acted on by one policy.

    Attributes:
        env_state: the environments' states.
        timestep: their last ``TimeStep`` (``obs [*B, N, O]``), acted on next.
        carry: the actor's hidden state ``[*B, N, H]``.
        first: bool ``[*B]``, ``timestep`` starts an episode.
        running: bool ``[*B]``, the first episode has not ended yet.
        returns: float32 ``[*B]``, the first episode's team-mean return so far.
        won: bool ``[*B]``, it ended in a win (false for environments without a win condition).
        lengths: int32 ``[*B]``, its steps so far.
    """

    env_state: Any
    timestep: Any
    carry: jax.Array
    first: jax.Array
    running: jax.Array
    returns: jax.Array
    won: jax.Array
    lengths: jax.Array


def episode_loop(policy: Policy, reset: Callable, step: Callable, key: jax.Array, num_steps: int,
                 batch_shape: tuple[int, ...], record: Callable[[EpisodeLoop], Any] = lambda loop: None):
    """``num_steps`` steps of ``policy`` from a reset, scoring each environment's first
    episode: the one loop evaluation and rendering share.

    Args:
        policy: the acting policy.
        reset: ``reset(key) -> (env_state, timestep)`` of the ``batch_shape`` environments.
        step: ``step(key, env_state, actions) -> (env_state, timestep)`` of them all.
        key: the PRNG key: split into the reset's and one per step (each split into the
            action's and the environments').
        num_steps: the steps (``env.max_steps`` covers the longest episode).
        batch_shape: the environments' batch shape ``[*B]``.
        record: what to keep of each step, from the loop state it starts in.

    Returns:
        ``(the final EpisodeLoop, record's outputs stacked [num_steps, ...])``.
    """
    key_reset, key = jax.random.split(key)
    env_state, timestep = reset(key_reset)
    start = EpisodeLoop(env_state, timestep, policy.initial_carry(batch_shape), jnp.ones(batch_shape, bool),
                        jnp.ones(batch_shape, bool), jnp.zeros(batch_shape), jnp.zeros(batch_shape, bool),
                        jnp.zeros(batch_shape, jnp.int32))

    def one_step(loop: EpisodeLoop, key: jax.Array):
        key_act, key_env = jax.random.split(key)
        ts = loop.timestep
        actions, carry = policy.step(key_act, ts.obs, ts.action_mask, loop.carry, loop.first)
        env_state, ts = step(key_env, loop.env_state, actions)
        won = loop.won if ts.won is None else loop.won | (loop.running & ts.done & ts.won)
        after = EpisodeLoop(env_state, ts, carry, ts.done, loop.running & ~ts.done,
                            loop.returns + jnp.where(loop.running, ts.reward.mean(-1), 0.0), won,
                            loop.lengths + loop.running)
        return after, record(loop)

    return jax.lax.scan(one_step, start, jax.random.split(key, num_steps))


@functools.partial(jax.jit, static_argnames=("config", "env", "episodes", "greedy"))
def play_episodes(config: Config, env: Any, params: Any, keys: jax.Array, episodes: int, greedy: bool):
    """One episode in each of ``episodes`` copies of ``env`` (an ``AutoReset`` env), for
    runs ``params [R, ...]``, run r drawing from ``keys[r]`` alone (so its episodes do
    not depend on which runs are evaluated with it): ``(returns [R, episodes] (team
    mean), won bool [R, episodes] or None, lengths int32 [R, episodes])``. XLA's default
    options (it is also called inside other jitted programs, which jax allows only
    without compiler options); ``episode_player`` is the program alone, with jaxpo's."""
    def batched(fn: Callable) -> Callable:  # fn on every copy, each with its own key
        return lambda key, *args: jax.vmap(fn)(jax.random.split(key, episodes), *args)

    def one_run(params, key):
        policy = Policy(config, params, {}, 0, greedy)
        final, _ = episode_loop(policy, batched(env.reset), batched(env.step), key, env.max_steps, (episodes,))
        return final.returns, final.won, final.lengths

    returns, won, lengths = jax.vmap(one_run)(params, keys)
    has_win = jax.eval_shape(env.reset, keys[0])[1].won is not None
    return returns, won if has_win else None, lengths


def evaluate(policy: Policy, env: Env | None = None, episodes: int = 100, seed: int = 0,
             greedy: bool | None = None) -> dict[str, float]:
    """Mean, std and IQM of ``episodes`` episode returns of ``policy``, and its win rate.

    The episodes run side by side, compiled and vmapped, each for exactly one episode; a
    return is the team-mean episode return, as in training.

    Args:
        policy: the trained policy (``load_policy``).
        env: another environment of the same shapes (agents, observation size, actions;
            e.g. ``jaxpo.envs.make(name, **other_kwargs)``); default the one the policy
            was trained on.
        episodes: the number of episodes, a positive integer.
        seed: the PRNG seed (folded with the run's ``run_id``).
        greedy: most likely actions (true) or samples (false); default ``policy.greedy``.

    Returns:
        ``{"episodes", "mean_return", "std_return", "iqm_return", "mean_length",
            "episodes_per_second"}`` (the rate after compiling), plus ``"win_rate"`` where
            the environment has one.

    Raises:
        ValueError: if ``episodes`` is not a positive integer, or ``env`` is not a
            ``jaxpo.envs.Env`` or differs from the policy's in ``num_agents``, ``obs_dim``,
            ``num_actions`` or ``continuous``.
    """
    greedy = policy.greedy if greedy is None else greedy
    params = jax.tree.map(lambda x: jnp.asarray(x)[None], policy.params)
    played = run_episodes(policy.config, params, [policy.run.get("run_id", 0)], episodes, seed, greedy, env)
    return summarize(*played)[0]


def environment_with(config: Config, changes: dict[str, Any]) -> Env:
    """``config``'s environment with some of its parameters changed (``Config.make_env``).

    Args:
        config: a trained run's config.
        changes: ``{parameter: value}`` over ``config.env_kwargs``.

    Returns:
        The environment; evaluating on it checks its shapes against the policy's.

    Raises:
        ValueError: for a parameter the environment does not take (the registry's error,
            naming the ones it does) or a value it refuses.
    """
    return dataclasses.replace(config, env_kwargs={**config.env_args, **changes}).make_env()


def _compatible(config: Config, env: Env | None) -> AutoReset:
    """``env`` ready to evaluate a policy of ``config`` on, or a ValueError naming what differs."""
    trained = learner(config).env
    if env is None:
        return trained
    if not isinstance(env, Env):
        raise ValueError(f"env must be a jaxpo.envs.Env (e.g. jaxpo.envs.make(...)), got {type(env).__name__}")
    env = env if isinstance(env, AutoReset) else AutoReset(env)
    for attr in ("num_agents", "obs_dim", "num_actions", "continuous"):
        if getattr(env, attr) != getattr(trained, attr):
            raise ValueError(f"env has {attr}={getattr(env, attr)} but the policy was trained with "
                             f"{attr}={getattr(trained, attr)} ({config.env!r})")
    return env


@functools.cache
def episode_player(config: Config, env: Any, episodes: int, greedy: bool) -> Callable:
    """``play_episodes`` of ``(config, env, episodes, greedy)`` as a program of its own,
    compiled with jaxpo's options for the default device's platform
    (``jaxpo.program.compiled.compiler_options``): ``(params [R, ...], keys [R, 2]) ->
    (returns, won, lengths)``, each ``[R, episodes]``."""
    return jax.jit(lambda params, keys: play_episodes(config, env, params, keys, episodes, greedy),
                   compiler_options=compiler_options(jax.default_backend()))


def run_episodes(config: Config, params: Any, run_ids: Any, episodes: int, seed: int, greedy: bool,
                 env: Env | None = None):
    """``(returns [R, episodes], won [R, episodes] or None, lengths [R, episodes], episodes
    per second)`` for runs ``params [R, ...]`` with ids ``run_ids [R]`` (on ``env``, default
    the config's)."""
    episodes = positive_int(episodes, "episodes")
    keys = jax.vmap(jax.random.fold_in, (None, 0))(jax.random.PRNGKey(seed), jnp.asarray(run_ids, jnp.uint32))
    play = episode_player(config, _compatible(config, env), int(episodes), bool(greedy))
    jax.block_until_ready(play(params, keys))  # compile
    start = time.perf_counter()
    returns, won, lengths = jax.device_get(play(params, keys))
    rate = returns.size / (time.perf_counter() - start)
    return np.asarray(returns), None if won is None else np.asarray(won), np.asarray(lengths), rate


# What ``summarize`` measures; its other column, "episodes", names the evaluation.
STATISTICS = ("mean_return", "std_return", "iqm_return", "mean_length", "win_rate", "episodes_per_second")


def summarize(returns: np.ndarray, won: np.ndarray | None, lengths: np.ndarray, rate: float) -> list[dict[str, float]]:
    """Per run: episodes, mean, std and IQM (interquartile mean) return, mean episode
    length, win rate."""
    from jaxpo.run.report import interquartile_mean

    rows = []
    for r in range(returns.shape[0]):
        row = {"episodes": int(returns.shape[1]), "mean_return": float(returns[r].mean()),
               "std_return": float(returns[r].std()), "iqm_return": float(interquartile_mean(returns[r])),
               "mean_length": float(lengths[r].mean())}
        if won is not None:
            row["win_rate"] = float(won[r].mean())
        rows.append({**row, "episodes_per_second": round(rate, 1)})
    return rows


def episode_frames(policy: Policy, seed: int = 0, env: Env | None = None) -> list[np.ndarray]:
    """One episode of ``policy`` drawn with its environment's ``render`` (or ``env``'s,
    of the same shapes): one RGB frame per step (the state each action was taken in),
    ``[T] × uint8 [H, W, 3]``; the steps are ``episode_loop``'s on the raw environment."""
    env = _compatible(policy.config, env).env  # the raw env: its state stays that of the episode that ends
    if not callable(getattr(env, "render", None)):
        raise ValueError(f"environment {policy.config.env!r} cannot render (it has no render method)")

    @functools.partial(jax.jit, compiler_options=compiler_options(jax.default_backend()))
    def play(key):  # each step's state (the one its action was taken in) and whether the episode runs
        record = lambda loop: (loop.env_state, loop.running)
        return episode_loop(policy, env.reset, env.step, key, env.max_steps, (), record)[1]

    states, running = jax.device_get(play(jax.random.PRNGKey(seed)))
    steps = int(np.asarray(running).sum())
    return [np.asarray(env.render(jax.tree.map(lambda x: x[t], states)))[..., :3] for t in range(steps)]


def check_animation_path(path: str) -> str:
    """The suffix of ``path`` (``.gif`` or ``.mp4``), or a ValueError."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in (".gif", ".mp4"):
        raise FieldError("path", f"must end in .gif or .mp4, got {path!r}", shown="`path`")
    if suffix == ".mp4" and importlib.util.find_spec("imageio_ffmpeg") is None:
        raise ValueError("writing .mp4 needs the imageio-ffmpeg package (pip install 'jaxpo[mp4]'); or write a .gif")
    return suffix


def render_episode(policy: Policy, path: str, seed: int = 0, fps: int = 10, env: Env | None = None) -> int:
    """Writes one episode of ``policy`` to ``path``, drawn with its environment's ``render``.

    One RGB frame per step (the state each action was taken in), written with imageio;
    the parent directory is created if missing.

    Args:
        policy: the trained policy (``load_policy``).
        path: the output file, ending in ``.gif``, or ``.mp4`` with the imageio-ffmpeg
            plugin (``pip install 'jaxpo[mp4]'``).
        seed: the PRNG seed of the episode.
        fps: frames per second of the animation.
        env: another environment of the same shapes (``evaluate``'s); default the one
            the policy was trained on.

    Returns:
        The number of frames (the episode's steps).

    Raises:
        ValueError: if ``path`` ends in neither ``.gif`` nor ``.mp4``, ``.mp4`` is asked for
            without imageio-ffmpeg, the environment has no ``render`` method, or ``env``
            differs from the policy's in its shapes.
    """
    import imageio.v3 as iio

    suffix = check_animation_path(path)
    frames = episode_frames(policy, seed, env)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if suffix == ".gif":
        iio.imwrite(path, np.stack(frames), duration=1000 / fps, loop=0)
    else:
        iio.imwrite(path, np.stack(frames), fps=fps, plugin="FFMPEG")
    return len(frames)
