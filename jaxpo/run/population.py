"""Population-based training between chunks of the compiled sweep (``sweep.schedule: pbt``).

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
             kappa, graph, matrices) are categories: resampled or kept.

The step is one jitted function over the runs axis (``exploit_explore``: gathers by
parent index), so it runs unchanged with the runs sharded over devices and processes;
its random choices come from ``fold_in(PRNGKey(seed), chunk)``, so a resumed sweep
repeats them bitwise. Only scores, parent indices and axis values cross to the host.
The axes, table and the ``Steering`` base are ``jaxpo.run.steering``'s.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxpo.program.config import Hyper
from jaxpo.program.learner import TrainState
from jaxpo.program.parallel import gather, put
from jaxpo.run.steering import PopulationTable, Steering, apply_codes, pad_rows, step_key


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


class Population(Steering):
    """PBT's host side (see the module docstring and ``Steering`` for its arguments):
    exploit and explore every ``ready`` chunks."""

    kind = "pbt"

    def _apply(self, tr, size, key_index, chunk, state, hyper, scores):
        """PBT: exploit and explore on the devices."""
        table = self.table.padded(size)
        fn, replicated = self._jit(tr, size, lambda *a: exploit_explore(*a, table=table),
                                   lambda rep: (tr.state_sharding, tr.run_sharding, rep, rep))
        num_runs = len(self.codes)
        state, hyper, codes, parents = fn(state, hyper, put(pad_rows(self.codes, size), replicated),
                                          put(pad_rows(scores, size).astype(np.float32), replicated),
                                          put(np.asarray(step_key(self.seed, key_index)), replicated))
        return state, hyper, np.asarray(gather(codes))[:num_runs], np.asarray(gather(parents))[:num_runs]


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
