"""Successive halving with refill (``sweep.schedule: halving``) between chunks of the
compiled sweep; the axes, table and ``Steering`` base are ``jaxpo.run.steering``'s."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxpo.program.config import Hyper
from jaxpo.program.learner import TrainState
from jaxpo.program.parallel import put
from jaxpo.run.steering import PopulationTable, Steering, apply_codes, pad_rows


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


class Halving(Steering):
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
        state, hyper = fn(state, hyper, put(pad_rows(codes, size), replicated),
                          put(np.concatenate([stopped, np.zeros(size - num_runs, bool)]), replicated),
                          put(pad_rows(self.seeds, size), replicated), put(pad_rows(now.astype(np.uint32), size), replicated))
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


def _finite(score: float) -> float:
    """A score to rank by: NaN (no episode ended, or diverged) as -inf."""
    return -math.inf if math.isnan(score) else float(score)
