"""Steered sweeps: population-based training, successive halving and schedule replay,
between chunks of the compiled sweep.

A PBT sweep trains its population (the runs of one static config, or each seed's runs)
like any sweep; every ``ready`` chunks it ranks each population on a score (the mean
return over the updates since the last step; with evaluation on, the evaluation's) and

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
repeats them bitwise. Only scores, parent indices and axis values cross to the host.
``Halving`` stops the bottom of each rung and refills the slot with a new trial
(``refill``: a fresh init where stopped); ``Replay`` sets fixed values at chunk
boundaries (what a PBT member's ``best_schedule.yaml`` trains).

Axis values live in ``codes`` ``[R, A]`` float32: a number axis holds the value, a
category axis the index of its value. ``Axis`` and ``PopulationTable`` describe them.
"""

from __future__ import annotations

import dataclasses
import math
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
    codes = explore(k_explore, take(codes), copied, table)
    return state, apply_codes(take(hyper), codes, copied, table), codes, parents


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


def refill(learner_init: Callable, state: TrainState, hyper: Hyper, codes: jax.Array, stopped: jax.Array,
           seeds: jax.Array, trials: jax.Array, table: PopulationTable) -> tuple[TrainState, Hyper]:
    """Successive halving's refill over a batch of R runs: where ``stopped`` (bool
    ``[R]``), a new trial starts from scratch (learner, environments, keys, update count:
    ``learner_init`` with key ``fold_in(PRNGKey(seed), trial)``) with the axis values
    ``codes`` (float32 ``[R, A]``); elsewhere nothing changes."""
    keys = jax.vmap(lambda s, t: jax.random.fold_in(jax.random.PRNGKey(s), t))(seeds, trials)
    hyper = apply_codes(hyper, codes, stopped, table)
    fresh = jax.vmap(learner_init)(keys, hyper)
    where = lambda new, old: jnp.where(stopped.reshape((-1,) + (1,) * (old.ndim - 1)), new, old)
    return jax.tree.map(where, fresh, state), hyper


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
    """The host side of a steered sweep's program (PBT here; ``Halving`` below): when to
    step, the jitted step on the trainer's shardings, the current codes and the history
    of every step: ``chunks`` (the group chunk after which it ran; -1: the start),
    ``parents`` ``[R]`` (PBT: whose learner each run copied; halving: -1 where a new
    trial started), ``history`` (codes ``[R, A]`` after it) and ``scores`` ``[R]`` (what
    ranked the runs). ``ready``: chunks between steps; ``seed``: of the step's random
    choices; ``metric``: the per-update metric scored over the last ``ready`` chunks,
    unless ``scorer`` is set (with evaluation on: the evaluation's mean return)."""

    kind = "pbt"

    def __init__(self, table: PopulationTable, codes: np.ndarray, ready: int, seed: int, seeds: Sequence[int] = (),
                 metric: str = "return"):
        if ready < 1:
            raise ValueError(f"ready must be a positive number of chunks, got {ready!r}")
        self.table, self.ready, self.seed, self.metric = table, int(ready), int(seed), metric
        self.codes = np.asarray(codes, np.float32)
        self.seeds = np.asarray(seeds if len(seeds) else np.zeros(len(self.codes)), np.uint32)  # each run's seed
        num_runs = len(self.codes)
        self.chunks: list[int] = [-1]
        self.parents: list[np.ndarray] = [np.arange(num_runs)]
        self.history: list[np.ndarray] = [self.codes.copy()]
        self.scores: list[np.ndarray] = [np.full(num_runs, np.nan)]
        self._compiled: dict[int, Any] = {}
        self.compiles = 0  # traces of the step (one per program and size)
        self.on_step: Callable[["Population"], None] | None = None  # after each step and load (lineage.csv)
        # (state, updates so far) -> float [R] scores; None: the window's mean training return
        self.scorer: Callable[[TrainState, int], np.ndarray] | None = None

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
        """The step after the group's chunk ``chunk`` (from 0): ``metrics`` name ->
        ``[R, U]`` (the group's so far, U ≥ ``ready`` chunks); ``key_index``: the plan
        chunk its key is folded from (default ``chunk``). Returns the new state and
        hyper (on the devices) and the parents ``[R]``."""
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
        """PBT: exploit and explore on the devices."""
        table = self.table.padded(size)
        fn, replicated = self._jit(tr, size, lambda *a: exploit_explore(*a, table=table),
                                   lambda rep: (tr.state_sharding, tr.run_sharding, rep, rep))
        num_runs = len(self.codes)
        state, hyper, codes, parents = fn(state, hyper, put(_pad(self.codes, size), replicated),
                                          put(_pad(scores, size).astype(np.float32), replicated),
                                          put(np.asarray(step_key(self.seed, key_index)), replicated))
        return state, hyper, np.asarray(gather(codes))[:num_runs], np.asarray(gather(parents))[:num_runs]

    def record(self, chunk: int, parents: np.ndarray, scores: np.ndarray) -> None:
        self.chunks.append(int(chunk))
        self.parents.append(np.asarray(parents))
        self.history.append(self.codes.copy())
        self.scores.append(np.asarray(scores, np.float64))
        if self.on_step is not None:
            self.on_step(self)

    # -------------------------------------------------- checkpoints

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

    # -------------------------------------------------- what it writes

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


def _pad(x: np.ndarray, size: int) -> np.ndarray:
    """``[R, ...] -> [size, ...]``, repeating the last row."""
    x = np.asarray(x)
    return np.concatenate([x, np.repeat(x[-1:], size - len(x), axis=0)])


class Halving(Population):
    """Successive halving with refill (``sweep.schedule: halving``). Every ``ready``
    chunks, each run's trial has trained a multiple of ``ready`` chunks: its rung. Its
    score joins every score recorded at that rung (in its population), and a trial in
    the bottom ``floor(n · fraction)`` of those n stops (ASHA's rule; at the first step
    all trials share rung 1, which is plain successive halving). A stopped run's slot
    starts a new trial at once, in the same program: a fresh learner and environments
    (key ``fold_in(PRNGKey(seed), trial)``) with every axis drawn from its sweep
    distribution (stream ``[schedule_seed, trial]``), so the group stays full and the
    chunk compiles once. ``trials()`` lists every trial with the budget it got."""

    kind = "halving"

    def _apply(self, tr, size, key_index, chunk, state, hyper, scores):
        num_runs = len(self.codes)
        trials, start = self._slot_trials()

        def rung(r: int, after: int, trial_of: np.ndarray) -> tuple[int, int]:  # (population, rung) of slot r's trial
            return int(self.table.populations[r]), (after - start[int(trial_of[r])]) // self.ready

        records: dict[tuple[int, int], list[float]] = {}
        for after, earlier, trial_of in zip(self.chunks[1:], self.scores[1:], trials):  # earlier steps' scores
            for r in range(num_runs):
                records.setdefault(rung(r, after, trial_of), []).append(_finite(earlier[r]))
        keys = [rung(r, chunk, trials[-1]) for r in range(num_runs)]
        for r, key in enumerate(keys):
            records.setdefault(key, []).append(_finite(scores[r]))
        stopped = np.zeros(num_runs, bool)
        for r, key in enumerate(keys):
            n, better = len(records[key]), sum(v > _finite(scores[r]) for v in records[key])
            stopped[r] = better >= n - math.floor(n * self.table.fraction)
        codes, now = self.codes.copy(), trials[-1].copy()
        for r in np.flatnonzero(stopped):  # the next trial numbers, in slot order
            now[r] = len(start) + int(np.sum(stopped[:r]))
            codes[r] = self.draw(now[r])
        table = self.table.padded(size)
        fn, replicated = self._jit(tr, size, lambda *a: refill(tr.learner.init, *a, table=table),
                                   lambda rep: (tr.state_sharding, tr.run_sharding))
        state, hyper = fn(state, hyper, put(_pad(codes, size), replicated),
                          put(np.concatenate([stopped, np.zeros(size - num_runs, bool)]), replicated),
                          put(_pad(self.seeds, size), replicated), put(_pad(now.astype(np.uint32), size), replicated))
        return state, hyper, codes, np.where(stopped, -1, np.arange(num_runs))

    def draw(self, trial: int) -> np.ndarray:
        """float32 ``[A]``: trial ``trial``'s axis codes, from its own stream."""
        rng = np.random.default_rng([self.seed, trial])
        codes = []
        for axis in self.table.axes:
            u = rng.uniform()
            if axis.kind == "uniform":
                codes.append(axis.low + u * (axis.high - axis.low))
            elif axis.kind == "loguniform":
                codes.append(math.exp(math.log(axis.low) + u * (math.log(axis.high) - math.log(axis.low))))
            else:
                pick = min(int(u * len(axis.values)), len(axis.values) - 1)
                codes.append(axis.values[pick] if axis.kind == "values" else pick)
        return np.asarray(codes, np.float32)

    def _slot_trials(self) -> tuple[list[np.ndarray], dict[int, int]]:
        """``(trials, start)``: ``trials[s]``, the trial in each slot after history entry
        ``s`` (0: the start), and trial -> the group chunk after which it started (-1:
        the sweep's start). Trials 0..R-1 start the sweep; each refill takes the next
        number, in slot order."""
        slot_trial = np.arange(len(self.codes))
        start = {int(t): -1 for t in slot_trial}
        trials = [slot_trial.copy()]
        for chunk, parents in zip(self.chunks[1:], self.parents[1:]):
            for r in np.flatnonzero(parents < 0):
                slot_trial[r] = len(start)
                start[int(slot_trial[r])] = chunk
            trials.append(slot_trial.copy())
        return trials, start

    def trials(self, run_ids: Sequence[int], steps_per_chunk: int, last_chunk: int) -> tuple[list[str], list[list]]:
        """``(header, rows)`` of samples.csv: every trial, its run (slot), axis values,
        the env steps per run when it started and stopped (``last_chunk``'s end for
        those still training), the budget it got, its last score and the rung it reached."""
        header = ["trial", "run_id", "start_env_steps", "end_env_steps", "budget_env_steps", "last_score", "rung",
                  "stopped", *[a.name for a in self.table.axes]]
        trials, start = self._slot_trials()
        found: dict[int, dict[str, Any]] = {}  # trial -> its slot, codes, last score, the chunk it stopped after
        for s, trial_of in enumerate(trials):
            for r, trial in enumerate(trial_of):
                found.setdefault(int(trial), {"slot": r, "codes": self.history[s][r], "last": np.nan, "end": None})
            if s:  # step s scored the trials that held the slots before it, and replaced some
                for r, trial in enumerate(trials[s - 1]):
                    found[int(trial)]["last"] = self.scores[s][r]
                    if trial_of[r] != trial:
                        found[int(trial)]["end"] = self.chunks[s]
        rows = []
        for trial, t in sorted(found.items()):
            began, end = start[trial], last_chunk if t["end"] is None else t["end"]
            rows.append([trial, run_ids[t["slot"]], (began + 1) * steps_per_chunk, (end + 1) * steps_per_chunk,
                         (end - began) * steps_per_chunk, t["last"], (end - began) // self.ready,
                         t["end"] is not None, *[axis.decode(t["codes"][a]) for a, axis in enumerate(self.table.axes)]])
        return header, rows


class Replay(Population):
    """A fixed schedule of traced values (``sweep.schedule: replay``): after the group
    chunks in ``segments`` (chunk -> codes ``[A]``), every run takes those values. What
    ``best_schedule.yaml`` trains: a PBT member's schedule, as one run of its own."""

    kind = "replay"

    def __init__(self, table: PopulationTable, codes: np.ndarray, segments: dict[int, np.ndarray]):
        super().__init__(table, codes, ready=1, seed=0)
        self.segments = {int(c): np.asarray(v, np.float32) for c, v in segments.items()}

    def due(self, chunk: int, num_chunks: int) -> bool:
        return chunk in self.segments and chunk + 1 < num_chunks

    def _apply(self, tr, size, key_index, chunk, state, hyper, scores):
        num_runs = len(self.codes)
        codes = np.repeat(self.segments[chunk][None], num_runs, axis=0)
        table = self.table.padded(size)
        fn, replicated = self._jit(tr, size, lambda h, c: apply_codes(h, c, jnp.ones(size, bool), table),
                                   lambda rep: tr.run_sharding)
        return state, fn(hyper, put(_pad(codes, size), replicated)), codes, np.arange(num_runs)


def ancestry(population: Population, run: int) -> list[tuple[int, int, np.ndarray]]:
    """The schedule the learner in ``run`` lived through: ``[(chunk, run it trained in,
    codes [A])]`` from the start (chunk -1), one entry per step: after step s the
    learner trained in run x_s with that run's codes; x_last = ``run`` and
    x_{s-1} = the parent x_s copied at step s. (PBT only: a halving trial starts afresh.)"""
    if population.kind != "pbt":
        raise ValueError(f"ancestry follows PBT's copies; a {population.kind} schedule has none")
    chain = [run]
    for parents in reversed(population.parents[1:]):
        chain.append(int(parents[chain[-1]]))
    chain.reverse()
    return [(chunk, x, codes[x]) for chunk, x, codes in zip(population.chunks, chain, population.history)]


def _finite(score: float) -> float:
    """A score to rank by: NaN (no episode ended, or diverged) as -inf."""
    return -math.inf if math.isnan(score) else float(score)
