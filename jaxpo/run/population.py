"""Population-based training inside the compiled sweep: exploit and explore between chunks.

A PBT sweep trains its population (the runs of one static config, or each seed's runs)
like any sweep; every ``ready`` chunks it ranks each population on a score (the mean
return over the updates since the last step) and

    exploit  the bottom ``fraction`` of each population copies the learner of a member
             of its top ``fraction``, drawn uniformly: actor and critic parameters,
             optimiser state, value normaliser. The copier keeps its own environments,
             observations and keys; its hidden states are zeroed (the network that made
             them is gone, and a diverged run's are not finite);
    explore  each PBT axis of a copier is resampled from its sweep distribution with
             probability ``resample``, else (numbers only) multiplied by a factor drawn
             from ``perturb`` and clipped to the axis's range. Support axes (preset,
             kappa, matrices) are categories: resampled or kept.

The step is one jitted function over the runs axis (``exploit_explore``: gathers by
parent index), so it runs unchanged with the runs sharded over devices and processes;
its random choices come from ``fold_in(PRNGKey(seed), chunk)``, so a resumed sweep
repeats them bitwise. Only scores (from the metrics the host already holds), parent
indices and axis values cross to the host.

Axis values live in ``codes`` ``[R, A]`` float32: a number axis holds the value, a
category axis the index of its value. ``Axis`` and ``PopulationTable`` describe them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxpo.program.config import Hyper
from jaxpo.program.learner import TrainState
from jaxpo.program.parallel import gather, put

KINDS = ("uniform", "loguniform", "values", "category")


@dataclasses.dataclass(frozen=True)
class Axis:
    """One PBT axis. ``kind``: ``uniform`` / ``loguniform`` (a number drawn from
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
    def numeric(self) -> bool:
        return self.kind != "category"

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
    """Everything exploit/explore needs besides the runs' state.

    ``axes``: the PBT axes, in ``codes`` column order. ``support_axes``: the positions
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


def ranks(scores: jax.Array, populations: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(rank, size)`` int ``[R]``: each run's place in its population (0: best; NaN
    scores last; ties to the lower index) and its population's size."""
    s = jnp.where(jnp.isnan(scores), -jnp.inf, scores)
    idx = jnp.arange(s.shape[0])
    same = populations[:, None] == populations[None, :]
    above = (s[None, :] > s[:, None]) | ((s[None, :] == s[:, None]) & (idx[None, :] < idx[:, None]))
    return jnp.sum(same & above, axis=1), jnp.sum(same, axis=1)


def choose_parents(key: jax.Array, scores: jax.Array, populations: jax.Array, fraction: float) -> jax.Array:
    """int ``[R]``: each run's parent. A run in the bottom ``floor(size · fraction)`` of
    its population gets a member of the top as many, drawn uniformly; others themselves."""
    rank, size = ranks(scores, populations)
    cut = jnp.floor(size * fraction).astype(jnp.int32)
    bottom = (cut > 0) & (rank >= size - cut)
    pick = jnp.floor(jax.random.uniform(key, scores.shape) * jnp.maximum(cut, 1)).astype(jnp.int32)
    same = populations[:, None] == populations[None, :]
    parent = jnp.argmax(same & (rank[None, :] == pick[:, None]), axis=1)
    return jnp.where(bottom, parent, jnp.arange(scores.shape[0]))


def explore(key: jax.Array, codes: jax.Array, copied: jax.Array, table: PopulationTable) -> jax.Array:
    """float32 ``[R, A]``: the parents' codes ``codes`` explored where ``copied``."""
    columns = []
    for a, (axis, k) in enumerate(zip(table.axes, jax.random.split(key, max(len(table.axes), 1)))):
        k_resample, k_draw, k_factor = jax.random.split(k, 3)
        rows = codes.shape[0]
        resample = jax.random.uniform(k_resample, (rows,)) < table.resample
        u = jax.random.uniform(k_draw, (rows,))
        values = jnp.asarray(axis.values if axis.kind == "values" else [0.0], jnp.float32)
        pick = jnp.minimum(jnp.floor(u * len(axis.values)).astype(jnp.int32), max(len(axis.values) - 1, 0))
        if axis.kind == "category":
            drawn, kept = pick.astype(jnp.float32), codes[:, a]
        else:
            if axis.kind == "uniform":
                drawn = axis.low + u * (axis.high - axis.low)
            elif axis.kind == "loguniform":
                drawn = jnp.exp(np.log(axis.low) + u * (np.log(axis.high) - np.log(axis.low)))
            else:
                drawn = values[pick]
            factors = jnp.asarray(table.perturb, jnp.float32)
            factor = factors[jax.random.randint(k_factor, (rows,), 0, len(table.perturb))]
            low, high = axis.bounds
            kept = jnp.clip(codes[:, a] * factor, low, high)
        columns.append(jnp.where(copied, jnp.where(resample, drawn, kept), codes[:, a]).astype(jnp.float32))
    return jnp.stack(columns, axis=1) if columns else codes


def exploit_explore(state: TrainState, hyper: Hyper, codes: jax.Array, scores: jax.Array, key: jax.Array,
                    table: PopulationTable) -> tuple[TrainState, Hyper, jax.Array, jax.Array]:
    """One PBT step over a batch of R runs (see the module docstring).

    Args:
        state: the runs' ``TrainState`` ``[R, ...]``.
        hyper: their ``Hyper`` ``[R, ...]``.
        codes: float32 ``[R, A]``, their PBT axes' values (``table.axes``).
        scores: float ``[R]``, higher is better; NaN ranks last.
        key: this step's PRNG key.
        table: the axes, populations and support table.
    Returns ``(state, hyper, codes, parents)``: the new batch and int ``[R]`` parents.
    """
    k_parent, k_explore = jax.random.split(key)
    populations = jnp.asarray(table.populations)
    parents = choose_parents(k_parent, scores, populations, table.fraction)
    copied = parents != jnp.arange(parents.shape[0])
    take = lambda tree: jax.tree.map(lambda x: x[parents], tree)
    # the learner is the parent's; the environments, their keys and the update count stay the run's own
    carry = jax.tree.map(lambda h: jnp.where(copied.reshape((-1,) + (1,) * (h.ndim - 1)), 0, h), state.rollout.carry)
    state = state.replace(params=take(state.params), opt_state=take(state.opt_state),
                          value_norm=take(state.value_norm), rollout=state.rollout.replace(carry=carry))
    hyper, codes = take(hyper), explore(k_explore, take(codes), copied, table)
    for a, axis in enumerate(table.axes):
        if axis.field is not None:
            hyper = hyper.replace(**{axis.field: codes[:, a].astype(getattr(hyper, axis.field).dtype)})
    if table.support_axes:
        sizes = [len(table.axes[a].values) for a in table.support_axes]
        row = jnp.ravel_multi_index(tuple(codes[:, a].astype(jnp.int32) for a in table.support_axes), sizes,
                                    mode="clip")
        pick = lambda stack, own: jnp.where(copied.reshape((-1,) + (1,) * (own.ndim - 1)), stack[row], own)
        hyper = hyper.replace(S_A=jax.tree.map(pick, table.supports.S_A, hyper.S_A),
                              S_R=jax.tree.map(pick, table.supports.S_R, hyper.S_R))
    return state, hyper, codes, parents


def step_key(seed: int, chunk: int) -> jax.Array:
    """The key of the PBT step after plan chunk ``chunk``: a function of both alone."""
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


class Population:
    """The host side of a PBT sweep's program: when to step, the jitted step on the
    trainer's shardings, the current codes and the lineage so far.

    ``lineage``: rows ``(chunk, run index, parent index, codes [A])``; chunk -1 holds
    the initial values. ``ready``: chunks between steps; ``seed``: of the step keys;
    ``metric``: the per-update metric scored over the last ``ready`` chunks."""

    def __init__(self, table: PopulationTable, codes: np.ndarray, ready: int, seed: int, metric: str = "return"):
        if ready < 1:
            raise ValueError(f"ready must be a positive number of chunks, got {ready!r}")
        self.table, self.ready, self.seed, self.metric = table, int(ready), int(seed), metric
        self.codes = np.asarray(codes, np.float32)
        num_runs = len(self.codes)
        self.chunks: list[int] = [-1]
        self.parents: list[np.ndarray] = [np.arange(num_runs)]
        self.history: list[np.ndarray] = [self.codes.copy()]
        self._compiled: dict[int, Any] = {}
        self.compiles = 0  # traces of the step (one per program and size)
        self.on_step: Callable[["Population"], None] | None = None  # after each step and load (lineage.csv)

    def due(self, chunk: int, num_chunks: int) -> bool:
        """A step follows chunk ``chunk`` (from 0) of a group of ``num_chunks``: every
        ``ready`` chunks, never after the last."""
        return (chunk + 1) % self.ready == 0 and chunk + 1 < num_chunks

    def program(self, tr: Any, size: int):
        """The step jitted for ``tr``'s shardings and ``size`` runs (padding included)."""
        if size not in self._compiled:
            table = self.table.padded(size)
            replicated = NamedSharding(tr.mesh, P())
            def fn(*args):
                self.compiles += 1  # runs at trace time only
                return exploit_explore(*args, table=table)

            self._compiled[size] = (jax.jit(fn, out_shardings=(tr.state_sharding, tr.run_sharding, replicated,
                                                                replicated)), replicated)
        return self._compiled[size]

    def step(self, tr: Any, chunk: int, state: TrainState, hyper: Hyper, metrics: dict[str, np.ndarray],
             key_index: int | None = None) -> tuple[TrainState, Hyper, np.ndarray]:
        """The PBT step after the group's chunk ``chunk`` (from 0): ``metrics`` name ->
        ``[R, U]`` (the group's so far, U ≥ ``ready`` chunks); ``key_index``: the plan
        chunk its key is folded from (default ``chunk``). Returns the new state and
        hyper (on the devices) and the parents ``[R]``."""
        size = int(jax.tree.leaves(state.params)[0].shape[0])
        num_runs = len(self.codes)
        scores = window_scores(metrics[self.metric][:num_runs], self.ready * tr.config.updates_per_chunk)
        fn, replicated = self.program(tr, size)
        padded = lambda x: np.concatenate([x, np.repeat(x[-1:], size - num_runs, axis=0)])
        codes = put(padded(self.codes), replicated)
        scores = put(padded(scores).astype(np.float32), replicated)
        key = put(np.asarray(step_key(self.seed, chunk if key_index is None else key_index)), replicated)
        state, hyper, codes, parents = fn(state, hyper, codes, scores, key)
        self.codes = np.asarray(gather(codes))[:num_runs]
        parents = np.asarray(gather(parents))[:num_runs]
        self.record(chunk, parents)
        return state, hyper, parents

    def record(self, chunk: int, parents: np.ndarray) -> None:
        self.chunks.append(int(chunk))
        self.parents.append(np.asarray(parents))
        self.history.append(self.codes.copy())
        if self.on_step is not None:
            self.on_step(self)

    # -------------------------------------------------- checkpoints

    def saved(self, hyper: Hyper) -> dict[str, np.ndarray]:
        """What a checkpoint keeps: the lineage so far and the runs' current ``hyper``
        (``[R, ...]``, padding included; as ``hyper.<i>`` leaves)."""
        leaves = {f"hyper.{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(gather(hyper)))}
        return {"chunks": np.asarray(self.chunks, np.int64), "parents": np.stack(self.parents).astype(np.int64),
                "codes": np.stack(self.history).astype(np.float32), **leaves}

    def load(self, saved: dict[str, np.ndarray], hyper: Hyper) -> Hyper:
        """Continues from a checkpoint's ``saved``; returns its Hyper (host arrays) in
        the tree of ``hyper``."""
        self.chunks = [int(c) for c in np.asarray(saved["chunks"])]
        self.parents = list(np.asarray(saved["parents"]))
        self.history = list(np.asarray(saved["codes"], np.float32))
        self.codes = self.history[-1].copy()
        if self.on_step is not None:
            self.on_step(self)
        leaves, treedef = jax.tree.flatten(hyper)
        return jax.tree.unflatten(treedef, [np.asarray(saved[f"hyper.{i}"]) for i in range(len(leaves))])

    # -------------------------------------------------- lineage

    def lineage_rows(self, run_ids: Sequence[int], steps_per_chunk: int) -> tuple[list[str], list[list[Any]]]:
        """``(header, rows)`` of lineage.csv: per step and run, the env steps per run
        when it happened (0: the start), run id, the parent's run id and every axis's
        value after it. ``steps_per_chunk``: env steps per run in a chunk."""
        header = ["env_steps", "run_id", "parent_id", *[a.name for a in self.table.axes]]
        rows = []
        for chunk, parents, codes in zip(self.chunks, self.parents, self.history):
            for r, run_id in enumerate(run_ids):
                rows.append([(chunk + 1) * steps_per_chunk, run_id, run_ids[int(parents[r])],
                             *[axis.decode(codes[r, a]) for a, axis in enumerate(self.table.axes)]])
        return header, rows
