"""Evaluation during training (the benchmark protocol of Mava and marl-eval).

``Evaluator`` is a hook: after the chunk that reaches each multiple of ``every`` env
steps (and after a group's last chunk) it plays ``episodes`` episodes per run with the
runs' current parameters — one compiled call, vmapped over runs and episodes
(``jaxpo.run.evaluate.play_episodes``) — and at a group's end the *absolute metric*:
``absolute_episodes`` (default 10 × ``episodes``) episodes with each run's best
evaluated parameters (best mean return; the first of equals), played ``episodes`` at a
time by the evaluation's compiled program. Files in the run directory, appended per
evaluation like metrics.csv:

    eval.csv           per run and evaluation: episodes, mean return, win rate, episode length
                       (``elapsed_s``: wall seconds since the group started in this process,
                       compile included; a resumed group counts from its restart)
    eval_episodes.csv  per evaluated episode: return, length, won (what marl-eval reads)
    absolute.csv       per episode of the absolute metric
    eval_best.npz      each run's best parameters so far (rewritten atomically on improvement)

Evaluation draws from its own key stream — run r's key at update u is
``fold_in(fold_in(PRNGKey(seed_r), EVAL_STREAM), u)`` — and never touches the
training state, so training is bitwise the same with or without it, and an episode
does not depend on which runs are evaluated beside it; the absolute metric's b-th block
of episodes plays at update ``ABSOLUTE_UPDATE - b`` (2³² − 1 − b). On resume the rows after the
checkpoint are dropped; the evaluations that follow are recomputed bit for bit (so
is the best, which ``eval_best.npz`` keeps). Every process evaluates (the parameters
are gathered); the main one writes.
"""

from __future__ import annotations

import csv
import os
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxpo.core.checks import positive_int
from jaxpo.program.learner import learner
from jaxpo.program.parallel import gather
from jaxpo.run.events import RUN_COLUMNS, ChunkEvent, Group, Hook, Run
from jaxpo.run.evaluate import episode_player
from jaxpo.run.report import AppendCSV, write_atomic, write_csv

EVAL_STREAM = 0x65766131  # "eva1": evaluation's own branch of each run's key
# The absolute metric's block b plays at update ABSOLUTE_UPDATE - b, which no evaluation uses.
ABSOLUTE_UPDATE = 2 ** 32 - 1

EVAL_COLUMNS = (*RUN_COLUMNS, "update", "env_steps", "elapsed_s", "episodes", "return", "win_rate", "episode_length")
EPISODE_COLUMNS = (*RUN_COLUMNS, "update", "env_steps", "elapsed_s", "episode", "return", "length", "won")
ABSOLUTE_COLUMNS = (*RUN_COLUMNS, "best_update", "episode", "return", "length", "won")
FILES = {"eval.csv": EVAL_COLUMNS, "eval_episodes.csv": EPISODE_COLUMNS, "absolute.csv": ABSOLUTE_COLUMNS}


def eval_keys(seeds: Sequence[int], update: int) -> jax.Array:
    """``[R, 2]``: each run's evaluation key at ``update`` (see the module docstring)."""
    def key(seed):
        return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), EVAL_STREAM), update)

    return jax.vmap(key)(jnp.asarray(np.asarray(seeds), jnp.uint32))


def _run_cells(run: Run) -> list:
    return [run.run_id, run.label, run.setting, run.seed]


def _keep_rows(path: str, header: Sequence[str], keep) -> None:
    """Rewrites the CSV at ``path`` (atomically) with the rows ``keep(row dict)`` accepts."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    write_csv(path, header, [[row[h] for h in header] for row in rows if keep(row)])


class Evaluator(Hook):
    """Evaluation during training and the absolute metric (see the module docstring).

    Args:
        every: env steps per run between evaluations (> 0).
        episodes: E, episodes per run and evaluation.
        greedy: the most likely action (true) or a sample.
        absolute_episodes: episodes of the absolute metric (None: 10 × E; 0: none).
        out_dir: the run directory for the files (None: nothing written).
        loggers: ``RunLogger``s (TensorBoard, W&B) that also get each evaluation's means
            as ``eval_return``, ``eval_win_rate``, ``eval_episode_length``.
        resume: the plan continues from a checkpoint: keep the files and the best so far.
        write: this process writes (the main one).

    ``results``: run id -> list of ``(update, env_steps, returns [E], won [E] or None,
    lengths [E])``; ``absolute``: run id -> ``(best update, returns, won, lengths)``.
    """

    def __init__(self, every: int, episodes: int, greedy: bool = True, absolute_episodes: int | None = None,
                 out_dir: str | None = None, loggers: Sequence[Any] = (), resume: bool = False, write: bool = True):
        for name, value in (("every", every), ("episodes", episodes)):
            positive_int(value, f"run.eval_{name}", shown=f"evaluation {name}")
        self.every, self.episodes, self.greedy = int(every), int(episodes), bool(greedy)
        self.absolute_episodes = 10 * self.episodes if absolute_episodes is None else int(absolute_episodes)
        if self.absolute_episodes < 0:
            raise ValueError(f"absolute_episodes must be >= 0, got {absolute_episodes!r}")
        self.loggers, self.results, self.absolute = list(loggers), {}, {}
        self.best: dict[int, tuple[float, int, Any]] = {}  # run id -> (mean return, update, params)
        self.out_dir = out_dir if write else None
        self.files: dict[str, AppendCSV] = {}
        if self.out_dir is not None:
            for name, header in FILES.items():
                path = os.path.join(self.out_dir, name)
                self.files[name] = AppendCSV(path, header, keep=resume and os.path.exists(path))
            if resume:
                self.best = self._load_best()

    @property
    def _best_path(self) -> str:
        return os.path.join(self.out_dir, "eval_best.npz")

    def start(self, group: Group) -> None:
        if group.resumed is None or self.out_dir is None:
            return
        ids = {str(run.run_id) for run in group.runs}
        after = group.resumed.chunk * group.config.updates_per_chunk
        for name in ("eval.csv", "eval_episodes.csv"):  # what comes after the checkpoint comes again
            _keep_rows(self.files[name].path, FILES[name], lambda row: row["run_id"] not in ids or int(row["update"]) <= after)
        _keep_rows(self.files["absolute.csv"].path, ABSOLUTE_COLUMNS, lambda row: row["run_id"] not in ids)

    def _play(self, group: Group, params: Any, update: int, episodes: int):
        """``(returns, won or None, lengths)``, each ``[R, episodes]``, for the group's runs."""
        seeds = [run.seed for run in group.runs]
        play = episode_player(group.config, learner(group.config).env, episodes, self.greedy)
        out = play(params, eval_keys(seeds, update))
        return tuple(None if x is None else np.asarray(x) for x in jax.device_get(out))

    def chunk(self, event: ChunkEvent) -> None:
        group, per_update = event.group, event.group.config.steps_per_update
        before, after = int(event.env_steps[0]) - per_update, int(event.env_steps[-1])
        if after // self.every == before // self.every and event.index != group.num_chunks - 1:
            return
        update, num_runs = int(event.updates[-1]), len(group.runs)
        params = jax.tree.map(lambda x: x[:num_runs], gather(event.state.params))
        returns, won, lengths = self._play(group, params, update, self.episodes)
        improved = False
        for r, run in enumerate(group.runs):
            if run.run_id in event.diverged:
                continue  # non-finite parameters: nothing to evaluate
            self.results.setdefault(run.run_id, []).append(
                (update, after, returns[r], None if won is None else won[r], lengths[r]))
            score = float(returns[r].mean())
            if run.run_id not in self.best or score > self.best[run.run_id][0]:
                self.best[run.run_id] = (score, update, jax.tree.map(lambda x: np.asarray(x[r]), params))
                improved = True
        self._write(event, group, update, after, returns, won, lengths)
        if improved and self.out_dir is not None:
            self._save_best()

    def _write(self, event: ChunkEvent, group: Group, update: int, env_steps: int, returns, won, lengths) -> None:
        if self.out_dir is None and not self.loggers:
            return
        summary, episodes = [], []
        for r, run in enumerate(group.runs):
            if run.run_id in event.diverged:
                continue
            win = "" if won is None else float(won[r].mean())
            means = {"eval_return": float(returns[r].mean()), "eval_episode_length": float(lengths[r].mean()),
                     **({} if won is None else {"eval_win_rate": win})}
            for logger in self.loggers:
                logger.record(run, update, env_steps, means)
            head = [*_run_cells(run), update, env_steps, round(event.seconds, 3)]
            summary.append([*head, self.episodes, means["eval_return"], win, means["eval_episode_length"]])
            episodes += [[*head, e, float(returns[r, e]), int(lengths[r, e]), "" if won is None else int(won[r, e])]
                         for e in range(self.episodes)]
        for logger in self.loggers:
            logger.flush()
        if self.out_dir is not None:
            self.files["eval.csv"].append(summary)
            self.files["eval_episodes.csv"].append(episodes)

    def end(self, group: Group, state: Any) -> None:
        runs = [run for run in group.runs if run.run_id in self.best]
        if not self.absolute_episodes or not runs:
            return
        treedef = jax.tree.structure(state.params)  # saved bests are leaves: their tree is the state's
        as_tree = lambda p: jax.tree.unflatten(treedef, p) if isinstance(p, _Leaves) else p
        # Every run of the group gets parameters (one never evaluated borrows another's, its
        # episodes dropped), as host arrays, and the episodes are played E at a time: each
        # block is a call of the evaluation's compiled program, so the absolute metric adds none.
        best = [as_tree(self.best.get(run.run_id, self.best[runs[0].run_id])[2]) for run in group.runs]
        params = jax.tree.map(lambda *xs: np.stack(xs), *best)
        blocks = [self._play(group, params, ABSOLUTE_UPDATE - b, self.episodes)
                  for b in range(-(-self.absolute_episodes // self.episodes))]
        returns, won, lengths = (None if parts[0] is None else np.concatenate(parts, axis=1)[:, :self.absolute_episodes]
                                 for parts in zip(*blocks))
        rows = []
        for r, run in enumerate(group.runs):
            if run.run_id not in self.best:
                continue
            best_update = self.best[run.run_id][1]
            self.absolute[run.run_id] = (best_update, returns[r], None if won is None else won[r], lengths[r])
            rows += [[*_run_cells(run), best_update, e, float(returns[r, e]), int(lengths[r, e]),
                      "" if won is None else int(won[r, e])] for e in range(self.absolute_episodes)]
        if self.out_dir is not None:
            self.files["absolute.csv"].append(rows)

    def _save_best(self) -> None:
        arrays = {}
        for run_id, (score, update, params) in self.best.items():
            arrays[f"{run_id}/score"], arrays[f"{run_id}/update"] = np.float64(score), np.int64(update)
            leaves = params if isinstance(params, _Leaves) else jax.tree.leaves(params)  # a best loaded on resume
            for i, leaf in enumerate(leaves):
                arrays[f"{run_id}/leaf{i}"] = leaf

        def save(tmp: str) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)

        write_atomic(self._best_path, save)

    def _load_best(self) -> dict[int, tuple[float, int, list]]:
        """The best so far as saved; its parameters as leaves (``_Leaves``), rebuilt into
        the state's params tree when the absolute metric needs them."""
        if not os.path.exists(self._best_path):
            return {}
        with np.load(self._best_path) as data:
            ids = sorted({int(k.split("/")[0]) for k in data.files})
            best = {}
            for run_id in ids:
                leaves = [data[f"{run_id}/leaf{i}"] for i in range(sum(k.startswith(f"{run_id}/leaf") for k in data.files))]
                best[run_id] = (float(data[f"{run_id}/score"]), int(data[f"{run_id}/update"]), _Leaves(leaves))
        return best


class _Leaves(list):
    """Saved parameter leaves, in ``jax.tree.leaves`` order, awaiting their tree."""
