"""What every steered sweep shares (``sweep.schedule``: pbt, halving, replay): the axes
it moves, its table, and ``Steering``, the host side that steps a program's runs between
chunks.

Axis values live in ``codes`` ``[R, A]`` float32: a number axis holds the value, a
category axis the index of its value. ``Axis`` and ``PopulationTable`` describe them.
The kinds of step live beside this module: PBT in ``jaxpo.run.population``, successive
halving in ``jaxpo.run.halving``, schedule replay in ``jaxpo.run.replay``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxpo.core.checks import positive_int
from jaxpo.program.config import Hyper
from jaxpo.program.learner import TrainState
from jaxpo.program.parallel import gather

KINDS = ("uniform", "loguniform", "values", "category")


@dataclasses.dataclass(frozen=True)
class Axis:
    """One steered axis. ``kind``: ``uniform`` / ``loguniform`` (a number drawn from
    ``[low, high]``), ``values`` (a number drawn from ``values``), ``category`` (a support
    field: the code is an index into ``values``). ``field``: the ``Hyper`` scalar a number
    axis sets (None for support axes, which set S_A and S_R together through the table)."""

    name: str
    kind: str
    values: tuple = ()
    low: float = 0.0
    high: float = 0.0
    field: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Axis.kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind in ("values", "category") and not self.values:
            raise ValueError(f"axis {self.name!r} ({self.kind}) needs its values")

    @property
    def bounds(self) -> tuple[float, float]:
        """The range a perturbed number is clipped to."""
        if self.kind == "values":
            return float(min(self.values)), float(max(self.values))
        return self.low, self.high

    def decode(self, code: float) -> Any:
        """The axis value a code stands for (for lineage.csv and replay files)."""
        # a number as its float32 value prints (0.001, not 0.0010000000474974513)
        return self.values[int(code)] if self.kind == "category" else float(str(np.float32(code)))


@dataclasses.dataclass(frozen=True)
class PopulationTable:
    """Everything a step needs besides the runs' state.

    ``axes``: the steered axes, in ``codes`` column order. ``support_axes``: the positions
    (in ``axes``) of the support axes, whose codes index the rows of ``supports`` (a
    ``Hyper`` whose S_A / S_R hold every combination of their values, ``[C, ...]``, row
    ``ravel_multi_index(codes)``; None without support axes). ``populations``: int
    ``[R]``, runs with equal ids rank together (padding rows: a population of their own).
    """

    axes: tuple[Axis, ...]
    populations: np.ndarray
    supports: Hyper | None = None
    support_axes: tuple[int, ...] = ()
    fraction: float = 0.25
    perturb: tuple[float, ...] = (0.8, 1.25)
    resample: float = 0.25

    def padded(self, size: int) -> "PopulationTable":
        """Padding rows ``R..size`` as populations of one (never copied, never copying)."""
        pops = np.asarray(self.populations)
        extra = -1 - np.arange(size - len(pops))
        return dataclasses.replace(self, populations=np.concatenate([pops, extra]).astype(np.int32))


def apply_codes(hyper: Hyper, codes: jax.Array, rows: jax.Array, table: PopulationTable) -> Hyper:
    """``hyper`` ``[R]`` with every number axis's field set to its code, and where
    ``rows`` (bool ``[R]``) S_A / S_R set to the support table's row for the support
    axes' codes (elsewhere the codes already describe them)."""
    for a, axis in enumerate(table.axes):
        if axis.field is not None:
            hyper = hyper.replace(**{axis.field: codes[:, a].astype(getattr(hyper, axis.field).dtype)})
    if table.support_axes:
        sizes = [len(table.axes[a].values) for a in table.support_axes]
        row = jnp.ravel_multi_index(tuple(codes[:, a].astype(jnp.int32) for a in table.support_axes), sizes,
                                    mode="clip")
        pick = lambda stack, own: jnp.where(rows.reshape((-1,) + (1,) * (own.ndim - 1)), stack[row], own)
        hyper = hyper.replace(S_A=jax.tree.map(pick, table.supports.S_A, hyper.S_A),
                              S_R=jax.tree.map(pick, table.supports.S_R, hyper.S_R))
    return hyper


def step_key(seed: int, chunk: int) -> jax.Array:
    """The key of the step after plan chunk ``chunk``: a function of both alone."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), chunk)


def window_scores(returns: np.ndarray, window: int) -> np.ndarray:
    """float64 ``[R]``: the mean of each run's last ``window`` per-update returns
    (``returns`` ``[R, U]``; updates where no episode ended are NaN and skipped); NaN
    where none ended or the run diverged."""
    recent = np.asarray(returns, np.float64)[:, -window:]
    seen = np.isfinite(recent)
    total = np.where(seen, recent, 0.0).sum(axis=1)
    count = seen.sum(axis=1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def pad_rows(x: np.ndarray, size: int) -> np.ndarray:
    """``[R, ...] -> [size, ...]``, repeating the last row."""
    x = np.asarray(x)
    return np.concatenate([x, np.repeat(x[-1:], size - len(x), axis=0)])


Scorer = Callable[[TrainState, int], np.ndarray]  # (state, updates so far) -> float [R] scores


class Steering:
    """The host side of a steered program: when to step, the jitted step on the
    trainer's shardings, the current codes and the history of every step: ``chunks``
    (the group chunk after which it ran; -1: the start), ``parents`` ``[R]`` (PBT: whose
    learner each run copied; halving: -1 where a new trial started), ``history`` (codes
    ``[R, A]`` after it) and ``scores`` ``[R]`` (what ranked the runs).

    Args:
        table: the axes, populations and support table.
        codes: float32 ``[R, A]``, each run's starting axis codes.
        ready: chunks between steps.
        seed: of the step's random choices.
        seeds: each run's seed (a halving refill's key).
        metric: the per-update metric scored over the last ``ready`` chunks, unless
            ``scorer`` is given.
        scorer: ``(state, updates so far) -> float [R]``, what ranks the runs (with
            evaluation on: the evaluation's mean return); None: the window's mean of ``metric``.
        on_step: called with the steering after each step and load (the lineage files).

    Raises:
        ValueError: ``ready`` is not positive.
    """

    kind = "steering"

    def __init__(self, table: PopulationTable, codes: np.ndarray, ready: int, seed: int, seeds: Sequence[int] = (),
                 metric: str = "return", scorer: Scorer | None = None,
                 on_step: Callable[["Steering"], None] | None = None):
        positive_int(ready, "sweep.ready", shown="ready (chunks between steps)")
        self.table, self.ready, self.seed, self.metric = table, int(ready), int(seed), metric
        self.codes = np.asarray(codes, np.float32)
        self.seeds = np.asarray(seeds if len(seeds) else np.zeros(len(self.codes)), np.uint32)
        num_runs = len(self.codes)
        self.chunks: list[int] = [-1]
        self.parents: list[np.ndarray] = [np.arange(num_runs)]
        self.history: list[np.ndarray] = [self.codes.copy()]
        self.scores: list[np.ndarray] = [np.full(num_runs, np.nan)]
        self._compiled: dict[int, Any] = {}
        self.compiles = 0  # traces of the step (one per program and size)
        self.scorer, self.on_step = scorer, on_step

    def due(self, chunk: int, num_chunks: int) -> bool:
        """A step follows chunk ``chunk`` (from 0) of a group of ``num_chunks``: every
        ``ready`` chunks, never after the last."""
        return (chunk + 1) % self.ready == 0 and chunk + 1 < num_chunks

    def _jit(self, tr: Any, size: int, fn: Callable, out_shardings: Callable) -> Any:
        """``fn`` jitted once per size, counting its traces; ``out_shardings(replicated)``."""
        if size not in self._compiled:
            def counted(*args):
                self.compiles += 1  # runs at trace time only
                return fn(*args)

            replicated = NamedSharding(tr.mesh, P())
            self._compiled[size] = jax.jit(counted, out_shardings=out_shardings(replicated),
                                           compiler_options=tr.compiler_options), replicated
        return self._compiled[size]

    def step(self, tr: Any, chunk: int, state: TrainState, hyper: Hyper, metrics: dict[str, np.ndarray],
             key_index: int | None = None) -> tuple[TrainState, Hyper, np.ndarray]:
        """The step after the group's chunk ``chunk`` (from 0).

        Args:
            tr: the program's ``Trainer``.
            chunk: the group chunk (from 0) the step follows.
            state: the runs' batched ``TrainState`` (padding included).
            hyper: their batched ``Hyper``.
            metrics: name -> ``[R, W]``, the group's latest updates (W ≥ ``ready`` chunks'
                updates, or all of them when fewer were trained).
            key_index: the plan chunk its key is folded from (default ``chunk``).

        Returns:
            ``(state, hyper, parents)``: the new state and hyper (on the devices) and
            the parents int ``[R]``.
        """
        num_runs = len(self.codes)
        per_chunk = tr.config.updates_per_chunk
        scores = self.score(state, metrics[self.metric][:num_runs], (chunk + 1) * per_chunk, per_chunk)
        size = int(jax.tree.leaves(state.params)[0].shape[0])
        index = chunk if key_index is None else key_index
        state, hyper, codes, parents = self._apply(tr, size, index, chunk, state, hyper, scores)
        self.codes = np.asarray(codes, np.float32)
        self.record(chunk, parents, scores)
        return state, hyper, parents

    def score(self, state: TrainState, returns: np.ndarray, update: int, updates_per_chunk: int) -> np.ndarray:
        """float64 ``[R]``: the runs' scores after ``update`` updates: ``scorer``'s, or the
        mean of ``returns`` ``[R, U]`` over the last ``ready`` chunks."""
        if self.scorer is not None:
            return np.asarray(self.scorer(state, update), np.float64)
        return window_scores(returns, self.ready * updates_per_chunk)

    def _apply(self, tr, size, key_index, chunk, state, hyper, scores):
        """The kind's step: ``(state, hyper, codes [R, A], parents [R])``."""
        raise NotImplementedError

    def record(self, chunk: int, parents: np.ndarray, scores: np.ndarray) -> None:
        """Appends a step to the history and tells ``on_step``."""
        self.chunks.append(int(chunk))
        self.parents.append(np.asarray(parents))
        self.history.append(self.codes.copy())
        self.scores.append(np.asarray(scores, np.float64))
        if self.on_step is not None:
            self.on_step(self)

    def saved(self, hyper: Hyper) -> dict[str, np.ndarray]:
        """What a checkpoint keeps: the history so far and the runs' current ``hyper``
        (``[R, ...]``, padding included; as ``hyper.<i>`` leaves)."""
        leaves = {f"hyper.{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(gather(hyper)))}
        return {"chunks": np.asarray(self.chunks, np.int64), "parents": np.stack(self.parents).astype(np.int64),
                "codes": np.stack(self.history).astype(np.float32), "scores": np.stack(self.scores), **leaves}

    def load(self, saved: dict[str, np.ndarray], hyper: Hyper) -> Hyper:
        """Continues from a checkpoint's ``saved``; returns its Hyper (host arrays) in
        the tree of ``hyper``."""
        self.chunks = [int(c) for c in np.asarray(saved["chunks"])]
        self.parents = list(np.asarray(saved["parents"]))
        self.history = list(np.asarray(saved["codes"], np.float32))
        self.scores = list(np.asarray(saved["scores"], np.float64))
        self.codes = self.history[-1].copy()
        if self.on_step is not None:
            self.on_step(self)
        leaves, treedef = jax.tree.flatten(hyper)
        return jax.tree.unflatten(treedef, [np.asarray(saved[f"hyper.{i}"]) for i in range(len(leaves))])

    def lineage_rows(self, run_ids: Sequence[int], steps_per_chunk: int) -> tuple[list[str], list[list[Any]]]:
        """``(header, rows)`` of lineage.csv: per step and run, the env steps per run
        when it happened (0: the start), run id, the parent's run id (halving: -1 for a
        new trial), the score that ranked it and every axis's value after it.
        ``steps_per_chunk``: env steps per run in a chunk."""
        header = ["env_steps", "run_id", "parent_id", "score", *[a.name for a in self.table.axes]]
        rows = []
        for chunk, parents, codes, scores in zip(self.chunks, self.parents, self.history, self.scores):
            for r, run_id in enumerate(run_ids):
                parent = int(parents[r])
                rows.append([(chunk + 1) * steps_per_chunk, run_id, run_ids[parent] if parent >= 0 else -1,
                             scores[r], *[axis.decode(codes[r, a]) for a, axis in enumerate(self.table.axes)]])
        return header, rows
