"""The driver: the host loop over compiled chunks.

``run_group`` trains one group of runs that share a static ``Config`` in one compiled
program: ``start`` (``init_runs``, the chunk compiled beside it) once, then ``chunk_runs``
chunk after chunk. Between chunks the metrics come to the host once (``[R, K]`` arrays,
no per-update callback), the NaN guard checks them (a step of the loop:
``jaxpo.run.guard``) and every hook (``jaxpo.run.events.Hook``: loggers, checkpoints,
evaluation, progress) sees them.
Plans of many groups (``jaxpo.experiments.execution.execute``, behind ``jaxpo.train``,
``jaxpo.sweep`` and the CLI) call it once per group.
"""

from __future__ import annotations

import collections
import functools
import math
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxpo.program.config import Hyper
from jaxpo.program.compiled import Trainer, check_lr_horizon
from jaxpo.program.learner import TrainState
from jaxpo.program.parallel import gather, padded_size, put
from jaxpo.run.events import ChunkEvent, Group, Hook, chunk_updates
from jaxpo.run.guard import NanGuard
from jaxpo.run.steering import Steering


def pad_runs(tree: Any, size: int) -> Any:
    """Host leaves ``[R, ...] -> [size, ...]`` by repeating the last run (R ≤ size): a
    group of fewer runs reuses the program compiled for ``size``, or fills every device;
    padded rows are dropped after."""
    def pad(x):
        x = np.asarray(x)
        return np.concatenate([x, np.repeat(x[-1:], size - x.shape[0], axis=0)])

    return jax.tree.map(pad, tree)


def run_group(tr: Trainer, hyper: Hyper, seeds: np.ndarray, group: Group, hooks: Sequence[Hook] = (),
              pad_to: int | None = None, guard: NanGuard | None = None, population: Steering | None = None
              ) -> tuple[TrainState, float]:
    """Trains ``group`` for ``group.num_updates`` updates, calling ``hooks`` after every chunk.

    Each chunk's metrics go to the hooks and are not kept: what a run's history needs
    (files, results) a hook records (``jaxpo.run.loggers.MetricsCSV``,
    ``jaxpo.run.history.MetricsHistory``); a steered group keeps only the window its
    steering scores (and its checkpoints save that window, not the history).

    Args:
        tr: the program's ``Trainer``.
        hyper: the runs' ``Hyper`` ``[R, ...]``.
        seeds: int ``[R]``.
        group: the group (``group.resumed``: start from its state and chunk).
        hooks: called around the group and after every chunk.
        pad_to: run the program compiled for that many runs (≥ R); either way the runs
            are padded to a multiple of ``tr.run_multiple`` (the devices they are split over).
        guard: checks every chunk first (default: a stopping ``NanGuard``).
        population: a steered sweep's ``Steering`` (``jaxpo.run.steering``), stepped after
            the chunks it is ``due``; every event can fetch its history and the runs'
            Hyper for a checkpoint, and a resumed group repeats the step that followed
            its saved chunk.

    Returns:
        ``(state, seconds)``: the final batched state (padding included; global arrays)
        and the seconds of the first chunk run (compile included; NaN when none ran).

    Raises:
        ValueError: ``Config.anneal_lr`` without each run's ``lr_horizon``.
        NonFiniteError: a run diverged under a stopping guard.

    Every process of a multi-process run calls this with the same arguments.
    """
    num_runs = len(seeds)
    check_lr_horizon(tr.config, hyper.lr_horizon)  # before a resumed group's chunks, too
    guard = guard or NanGuard()
    size = padded_size(pad_to or num_runs, tr.run_multiple)
    keys = np.asarray(jax.vmap(jax.random.PRNGKey)(jnp.asarray(np.asarray(seeds), jnp.uint32)))
    hyper, keys = put(pad_runs((hyper, keys), size), tr.run_sharding)
    for hook in hooks:
        hook.start(group)
    start = time.perf_counter()
    window: collections.deque = collections.deque(maxlen=population.ready if population is not None else 0)
    if group.resumed is None:
        state, done = tr.start(keys, hyper), 0  # init, and the chunk built beside it
    else:
        state, done = group.resumed.state, group.resumed.chunk
        if population is not None:  # its window as saved (a step written before: the tail of the metrics)
            saved = group.resumed.population
            window.append(saved["window"] if "window" in saved else
                          group.resumed.metrics[population.metric][:, -window.maxlen * tr.config.updates_per_chunk:])
            hyper = put(population.load(saved, hyper), tr.run_sharding)
            if done and population.due(done - 1, group.num_chunks):  # the step after the saved chunk
                state, hyper = _population_step(tr, population, group, done - 1, state, hyper, window, guard)
    first_chunk_seconds = math.nan
    for i in range(done, group.num_chunks):
        state, metrics = tr.chunk_runs(state, hyper)
        metrics = {k: np.asarray(v[:num_runs], np.float64) for k, v in gather(metrics).items()}
        seconds = time.perf_counter() - start
        if i == done:
            first_chunk_seconds = seconds
        updates, env_steps = chunk_updates(tr.config, i)
        metrics, new = guard.check(group, updates, metrics, state.params)
        if population is not None:
            window.append(metrics[population.metric])
        saved = functools.partial(_saved, population, hyper, window) if population is not None else None
        event = ChunkEvent(group, i, updates, env_steps, metrics, state, seconds, dict(guard.diverged), new, saved)
        if new:
            for hook in hooks:
                hook.diverge(event)
            guard.report(event)
        for hook in hooks:
            hook.chunk(event)
        if population is not None and population.due(i, group.num_chunks):
            state, hyper = _population_step(tr, population, group, i, state, hyper, window, guard)
    for hook in hooks:
        hook.end(group, state)
    return state, first_chunk_seconds


def _saved(population: Steering, hyper: Hyper, window: collections.deque) -> dict[str, np.ndarray]:
    """What a checkpoint keeps of a steered group: the population's history, the runs'
    Hyper and the window its next step scores (its metric's last ``ready`` chunks,
    ``[R, ≤ ready × K]``: bounded, where the group's whole history would grow)."""
    return {**population.saved(hyper), "window": np.concatenate(list(window), axis=1)}


def _population_step(tr: Trainer, population: Steering, group: Group, chunk: int, state: TrainState, hyper: Hyper,
                     window: collections.deque, guard: NanGuard) -> tuple[TrainState, Hyper]:
    """The population's step after the group's chunk ``chunk``, scored on ``window`` (its
    metric's last ``ready`` chunks, ``[R, K]`` each); runs whose learner was replaced
    (copied, or a new trial) are no longer diverged."""
    returns = np.concatenate(list(window), axis=1)
    state, hyper, parents = population.step(tr, chunk, state, hyper, {population.metric: returns},
                                            key_index=group.chunk_offset + chunk)
    guard.revive(run.run_id for r, run in enumerate(group.runs) if parents[r] != r)
    return state, hyper
