"""What the host loop tells its hooks: the run table, groups of runs, chunk events,
and the chunk arithmetic they share. A leaf: it imports nothing of jaxpo, so the
checkpointer, the NaN guard, the loggers and evaluation depend on it and never on
the driver.

    class Hook:
        start(group)        before a group's first chunk
        chunk(event)        after each chunk (``ChunkEvent``: metrics, state, timing)
        diverge(event)      a run of the group just turned non-finite (before a stop)
        end(group, state)   after a group's last chunk
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np

# The columns that name a run in every per-run file (metrics.csv, summary.csv, eval).
RUN_COLUMNS = ("run_id", "label", "setting", "seed")


@dataclasses.dataclass(frozen=True)
class Run:
    """One row of the run table: ``run_id`` (unique in its output), ``label``
    (``<setting>/seed<k>``), ``setting`` (what its seeds share), ``seed`` and the
    swept ``values`` that define the setting."""

    run_id: int
    label: str
    setting: str
    seed: int
    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def setting_of(label: str) -> str:
    """The setting a run belongs to: its label without the ``/seed<k>`` suffix."""
    return label.rsplit("/seed", 1)[0]


@dataclasses.dataclass(frozen=True)
class Resumed:
    """Where a group starts again: the batched ``state`` after ``chunk`` chunks and the
    ``metrics`` name -> [R, chunk × K] of those chunks (from a checkpoint)."""

    chunk: int
    state: Any
    metrics: dict[str, np.ndarray]
    population: Mapping[str, np.ndarray] | None = None  # a steered sweep's history and Hyper (``Population.saved``)


@dataclasses.dataclass(frozen=True)
class Group:
    """Runs trained together by one program call (R of them; padding not included).

    ``config``: their static ``Config`` (only ``updates_per_chunk`` and
    ``steps_per_update`` are read here). ``index``: its place among the groups of a
    plan; ``chunk_offset``: the chunks of the plan's groups before it (checkpoint steps
    count chunks of the whole plan); ``resumed``: set when it continues from a checkpoint."""

    config: Any
    runs: Sequence[Run]
    num_updates: int
    index: int = 0
    chunk_offset: int = 0
    resumed: Resumed | None = None

    @property
    def num_chunks(self) -> int:
        return self.num_updates // self.config.updates_per_chunk


# run_id -> (first non-finite update, the metric names that were not finite)
Diverged = Mapping[int, tuple[int, list[str]]]


@dataclasses.dataclass(frozen=True)
class ChunkEvent:
    """What hooks see after a chunk: ``metrics`` name -> float64 ``[R, K]`` for the
    group's runs (a diverged run's NaN from its divergence on), ``updates`` /
    ``env_steps`` ``[K]`` (per run, counted from 1), the batched ``state`` (padding rows
    included), wall ``seconds`` so far, and ``diverged``: every run of the plan found
    non-finite so far (``newly_diverged``: the run ids found in this chunk)."""

    group: Group
    index: int
    updates: np.ndarray
    env_steps: np.ndarray
    metrics: dict[str, np.ndarray]
    state: Any
    seconds: float
    diverged: Diverged = dataclasses.field(default_factory=dict)
    newly_diverged: tuple[int, ...] = ()
    # a steered sweep: called, what a checkpoint keeps of its population (before this chunk's step)
    population: Callable[[], Mapping[str, np.ndarray]] | None = None


class Hook:
    """Base class of the host loop's hooks; override what you need (each default does nothing).

    Pass hooks to ``jaxpo.train``, ``jaxpo.sweep`` or ``jaxpo.resume`` (``hooks=[...]``);
    they are called on every process, for each group of runs, in this order: ``start``
    before a group's first chunk, ``diverge`` then ``chunk`` after each chunk (``diverge``
    only when a run just turned non-finite), ``end`` after its last chunk. R is the
    group's number of runs, K ``Config.updates_per_chunk``.
    """

    def start(self, group: Group) -> None:
        """Called before a group's first chunk (also when it resumes from a checkpoint).

        Args:
            group: the runs about to train together: ``config``, ``runs`` (the run table's
                rows), ``num_updates``, ``index`` in the plan, and ``resumed`` when it continues
                from a checkpoint.
        """

    def chunk(self, event: ChunkEvent) -> None:
        """Called after each chunk of K updates.

        Args:
            event: what the chunk produced: ``metrics`` name -> float64 ``[R, K]`` (a diverged
                run's NaN from its divergence on), ``updates`` / ``env_steps`` ``[K]`` (per
                run, counted from 1), the batched ``state`` (padding rows included), wall
                ``seconds`` so far, ``index`` (the chunk, from 0) and ``diverged``.
        """

    def diverge(self, event: ChunkEvent) -> None:
        """Called when a run of the group just turned non-finite, before the loop stops (or masks it).

        Args:
            event: the chunk's event (as in ``chunk``); ``event.newly_diverged`` holds the run
                ids found in this chunk and ``event.diverged`` maps each diverged run id to
                ``(first non-finite update, the metric names that were not finite)``.
        """

    def end(self, group: Group, state: Any) -> None:
        """Called after a group's last chunk.

        Args:
            group: the runs that trained (as in ``start``).
            state: their final batched ``TrainState`` ``[R', ...]`` (R' ≥ R: padding rows
                included).
        """


def close_hooks(hooks: Sequence[Hook]) -> None:
    """Closes the hooks that hold files, writers or threads (those with a ``close``)."""
    for hook in hooks:
        if hasattr(hook, "close"):
            hook.close()


def chunk_updates(config: Any, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """``(updates, env steps)`` per run after each update of chunk ``chunk`` (from 0):
    int ``[K]`` each, updates counted from 1."""
    updates = np.arange(chunk * config.updates_per_chunk, (chunk + 1) * config.updates_per_chunk) + 1
    return updates, updates * config.steps_per_update


def env_steps_per_update(config: Any, num_updates: int) -> np.ndarray:
    """Environment steps per run after each of ``num_updates`` updates: int ``[U]``."""
    return config.steps_per_update * np.arange(1, num_updates + 1)
