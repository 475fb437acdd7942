"""Checkpoints and exact resume (orbax).

A checkpoint is one orbax step in ``<run dir>/checkpoints/<step>/``, the step being the
number of chunks the whole plan has trained (group after group). It holds

    state    every non-empty leaf of the batched ``TrainState`` (params, optimiser
             states, env and hidden states, value-norm statistics, keys, update counter),
             as global arrays; restored onto the trainer's shardings
    history  (only a run without a metrics file) the group's metrics so far: name ->
             float64 [R, chunks done × K] (orbax reserves the item name "metrics"). A run
             with one (``metrics.csv``, the CSV logger, on by default) keeps them there
             alone: its steps hold the file's name and the metric names (meta
             ``metrics_file``, ``metric_names``), never a history that grows with every
             update, and a resume cuts the file back to the checkpoint's chunk
             (``jaxpo.run.loggers.MetricsCSV.resume``). Steps with a ``history`` item (every
             step written before) still restore and resume.
    meta     JSON: format, jaxpo version, which group and chunk, the run table, the
             resolved experiment (or config) and digests of the traced values
    population  (steered sweeps only: PBT, halving, replay) the population's history,
             the runs' current Hyper and the window of the metric it scores (bounded:
             its last ``ready`` chunks), as they were before the step that follows this
             chunk (resume repeats it)

Zero-size leaves (the feed-forward carry ``[R, E, N, 0]``) are not saved (orbax refuses
them) and are rebuilt as zeros. orbax writes a step into a temporary directory and
renames it when complete, so a save cut short by a crash is never read; a step that
fails to read (truncated or corrupted files) is reported and the one before it used.
Nothing is unpickled: arrays are tensorstore files and meta is JSON.

The last ``keep`` steps are kept, and also every group's final step (sweeps need the
metrics of finished groups, and ``jaxpo eval`` their policies) and any step marked
with ``pin`` (the last finite state before a run diverged).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import warnings
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from jaxpo._version import __version__
from jaxpo.core.checks import FieldError, Ref, positive_int
from jaxpo.program.config import Config, config_from_dict, config_to_dict
from jaxpo.program.fields import plain
from jaxpo.program.compiled import trainer
from jaxpo.run.events import ChunkEvent, Group, Hook
from jaxpo.run.orbax_store import checkpoint_manager, ocp_module
from jaxpo.run.history import MetricsHistory

FORMAT = 3  # 3: the rollout carries only the TimeStep fields it acts on (rollout.acted_on)
DIRECTORY = "checkpoints"


def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(os.path.abspath(run_dir), DIRECTORY)


def _name(path) -> str:
    return ".".join(str(getattr(k, "name", getattr(k, "key", getattr(k, "idx", k)))) for k in path)


def flatten_state(state: Any) -> dict[str, Any]:
    """``{dotted path: leaf}`` of every non-empty leaf (``params.actor.Dense_0.kernel``)."""
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    return {_name(path): leaf for path, leaf in leaves if np.prod(leaf.shape) > 0}


def unflatten_state(flat: Mapping[str, Any], abstract: Any) -> Any:
    """The tree of ``abstract`` (``ShapeDtypeStruct``s with shardings) filled from
    ``flat``; zero-size leaves rebuilt as zeros on their sharding."""
    paths, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    leaves = [flat[_name(p)] if np.prod(x.shape) > 0 else jnp.zeros(x.shape, x.dtype, device=x.sharding)
              for p, x in paths]
    return jax.tree_util.tree_unflatten(treedef, leaves)


def digest(tree: Any) -> dict[str, str]:
    """``{field: sha256 of its bytes}`` for each leaf of ``tree`` (e.g. the batched
    Hyper): two runs resume compatibly only with identical traced values."""
    return {_name(path): hashlib.sha256(np.ascontiguousarray(np.asarray(leaf)).tobytes()).hexdigest()[:16]
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


class Checkpointer(Hook):
    """Saves after each group's last chunk, and every ``every`` chunks of the plan (0: never).

    A run that diverges (``diverge``) pins the latest step, the last finite state before
    it. Saves are asynchronous: the arrays are copied off the devices, then written in the
    background while training goes on; ``close`` waits for the last one.

    Args:
        run_dir: the run directory (checkpoints go to its ``checkpoints/``).
        every: save every this many chunks of the plan, besides each group's last (0: only those).
        keep: the latest steps kept (besides the groups' final and the pinned ones).
        meta: what every step records besides the position (the run table and config
            are added per group, the diverged runs per chunk).
        pinned: steps kept for good (a resumed plan's).
        history: where the group's metrics so far are kept. A file name (the run's
            ``metrics.csv``, in ``run_dir``): there alone, a step saves only their names.
            ``(group, names) -> {name: [R, U]}`` (``jaxpo.run.history``): a step saves
            them (a run without a metrics file). None: this hook records them in memory
            itself (a ``MetricsHistory``) and a step saves them.

    Raises:
        ValueError: ``every`` or ``keep`` is not a valid count.
    """

    def __init__(self, run_dir: str, every: int, keep: int = 3, meta: Mapping[str, Any] | None = None,
                 pinned: Sequence[int] = (),
                 history: str | Callable[[Group, Sequence[str]], Mapping[str, np.ndarray]] | None = None):
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(f"checkpoint_every must be a non-negative integer (chunks; 0: only each group's "
                             f"final state), got {every!r}")
        positive_int(keep, "run.keep", shown="keep")
        self.every, self.meta = every, dict(meta or {})
        self.recorded = MetricsHistory() if history is None else None
        self.history = history or self.recorded
        self.pinned = set(pinned)
        self.manager = checkpoint_manager(checkpoint_dir(run_dir), keep, self.pinned)
        self.last_step: int | None = None

    def diverge(self, event: ChunkEvent) -> None:
        self.pin_latest()

    def start(self, group: Group) -> None:
        if self.recorded is not None:
            self.recorded.start(group)

    def chunk(self, event: ChunkEvent) -> None:
        if self.recorded is not None:
            self.recorded.chunk(event)
        group, done = event.group, event.index + 1
        step = group.chunk_offset + done
        if (not self.every or step % self.every) and done < group.num_chunks:
            return
        if done == group.num_chunks:
            self.pinned.add(step)
        # A copy: the next chunk donates (overwrites) the state's buffers while orbax writes.
        state = jax.tree.map(jnp.copy, flatten_state(event.state))
        meta = {**self.meta, "format": FORMAT, "jaxpo": __version__, "step": step, "group": group.index,
                "config": config_to_dict(group.config), "diverged": dict(event.diverged),
                "chunk": done, "num_chunks": group.num_chunks, "num_updates": group.num_updates,
                "runs": [dataclasses.asdict(r) for r in group.runs],
                "state_runs": int(jax.tree.leaves(event.state)[0].shape[0]), "pinned": sorted(self.pinned),
                "leaves": {k: [list(v.shape), str(v.dtype)] for k, v in state.items()}}
        items = {"state": state}
        if isinstance(self.history, str):  # kept in the run's metrics file: their names only
            meta.update(metrics_file=self.history, metric_names=list(event.metrics))
        else:
            items["history"] = dict(self.history(group, list(event.metrics)))
        if event.population is not None:  # a steered sweep: its history and the runs' current Hyper
            meta["population"] = True
            items["population"] = dict(event.population())
        ocp = ocp_module()
        self.manager.save(step, args=ocp.args.Composite(
            **{name: ocp.args.StandardSave(item) for name, item in items.items()},
            meta=ocp.args.JsonSave(plain(meta))), force=True)
        self.last_step = step

    def pin_latest(self) -> None:
        """Keeps the latest saved step for good (e.g. the last one before a run diverged)."""
        if self.last_step is not None:
            self.pinned.add(self.last_step)

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


def check_shared(directory: str) -> None:
    """In a multi-process run, after process 0 made ``directory``: raises the same
    ValueError on every process when some process cannot see it (each process writes
    its own shards of a checkpoint there)."""
    if jax.process_count() == 1:
        return
    multihost_utils.sync_global_devices("jaxpo: run directory made")  # a name every process gives alike
    seen = np.asarray(multihost_utils.process_allgather(np.asarray(os.path.isdir(directory))))
    if not seen.all():
        blind = ", ".join(str(i) for i in np.flatnonzero(~seen))
        raise ValueError(f"run directory {directory!r} is not visible to process {blind}: checkpoints need storage "
                         f"every process sees (a shared file system), or none: checkpoint=False (--no-checkpoint)")


@dataclasses.dataclass
class Restored:
    """A checkpoint read back: its ``step``, ``meta``, the group's ``metrics``
    ``[R, chunks × K]`` (None where the run's metrics file holds them: meta
    ``metrics_file``) and (when asked for) the batched ``state``."""

    step: int
    meta: dict[str, Any]
    metrics: dict[str, np.ndarray] | None
    state: Any = None
    population: dict[str, np.ndarray] | None = None  # a steered sweep's history and Hyper

    @property
    def chunk(self) -> int:
        return int(self.meta["chunk"])


def steps(run_dir: str) -> list[int]:
    """The complete checkpoint steps of a run directory, oldest first ([] if none)."""
    directory = checkpoint_dir(run_dir)
    if not os.path.isdir(directory):
        return []
    with contextlib.closing(checkpoint_manager(directory, 1, read_only=True)) as manager:
        return sorted(manager.all_steps())


def _readable_error(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def read_meta(run_dir: str, step: int) -> dict[str, Any]:
    """A step's meta; a ValueError naming the step when it cannot be read."""
    ocp = ocp_module()
    try:
        with contextlib.closing(checkpoint_manager(checkpoint_dir(run_dir), 1, read_only=True)) as manager:
            return dict(manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta)
    except Exception as err:
        raise ValueError(f"checkpoint {os.path.join(checkpoint_dir(run_dir), str(step))} cannot be read "
                         f"({_readable_error(err)})") from None


def restore(run_dir: str, target: Callable[[dict], Any] | None = None, step: int | None = None,
            accept: Callable[[dict], bool] = lambda meta: True) -> Restored:
    """The newest readable checkpoint of ``run_dir`` (or ``step``) that ``accept``s its
    meta. ``target(meta)`` gives the abstract batched state (``ShapeDtypeStruct``s with
    shardings) to restore onto; without it only meta and metrics are read.

    A step whose files cannot be read is reported with a warning and the one before it
    is tried. Raises ValueError when the directory holds no complete, readable checkpoint.
    """
    directory = checkpoint_dir(run_dir)
    if not os.path.isdir(os.path.abspath(run_dir)):
        raise ValueError(f"run directory {run_dir!r} does not exist")
    candidates = steps(run_dir) if step is None else [step]
    if not candidates:
        raise ValueError(f"{run_dir!r} holds no complete checkpoint (looked in {directory}); "
                         f"it was trained without checkpoints (checkpoint=False, --no-checkpoint), or stopped before its first")
    ocp = ocp_module()
    problems = []
    for s in reversed(candidates):
        try:
            meta = read_meta(run_dir, s)
            if not accept(meta):
                continue
            check_format(meta, run_dir)
            items = {"meta": ocp.args.JsonRestore()}  # and the history, where the step holds it
            if "metrics_file" not in meta:
                items["history"] = ocp.args.StandardRestore()
            if meta.get("population"):
                items["population"] = ocp.args.StandardRestore()
            abstract = None
            if target is not None:
                abstract = target(meta)
                _check_leaves(meta, flatten_state(abstract), run_dir)
                items["state"] = ocp.args.StandardRestore(flatten_state(abstract))
            with contextlib.closing(checkpoint_manager(directory, 1, read_only=True)) as manager:
                out = manager.restore(s, args=ocp.args.Composite(**items))
            state = None if abstract is None else unflatten_state(out.state, abstract)
            metrics = {k: np.asarray(v, np.float64) for k, v in out.history.items()} if "history" in items else None
            population = {k: np.asarray(v) for k, v in out.population.items()} if "population" in items else None
            return Restored(s, meta, metrics, state, population)
        except IncompatibleCheckpoint:
            raise
        except Exception as err:  # orbax/tensorstore report corrupt files in many types
            problems.append(f"step {s}: {_readable_error(err)}")
        warnings.warn(f"checkpoint {os.path.join(directory, str(s))} cannot be read ({problems[-1]}); "
                      f"trying the one before it")
    if problems:
        raise ValueError(f"no checkpoint in {directory} can be read: " + "; ".join(problems))
    raise ValueError(f"no checkpoint in {directory} matches what was asked for")


class IncompatibleCheckpoint(ValueError):
    """A readable checkpoint that this jaxpo cannot resume."""


def check_format(meta: Mapping[str, Any], run_dir: str) -> None:
    version, mine = str(meta.get("jaxpo", "?")), __version__
    if meta.get("format") != FORMAT or version.split(".")[:2] != mine.split(".")[:2]:
        raise IncompatibleCheckpoint(f"the checkpoint in {run_dir!r} was written by jaxpo {version} (checkpoint "
                                     f"format {meta.get('format')}); this is jaxpo {mine} (format {FORMAT}), which "
                                     f"cannot resume it")


def _check_leaves(meta: Mapping[str, Any], expected: Mapping[str, Any], run_dir: str) -> None:
    """The saved state has exactly the leaves (names, shapes, dtypes) the program expects."""
    want = {k: [list(v.shape), str(v.dtype)] for k, v in expected.items()}
    saved = meta.get("leaves", {})
    for name in sorted(set(want) | set(saved)):
        if want.get(name) != saved.get(name):
            raise IncompatibleCheckpoint(f"the checkpoint in {run_dir!r} does not fit this program: state leaf "
                                         f"{name} is {saved.get(name, 'absent')} there, "
                                         f"{want.get(name, 'absent')} here")


def differences(saved: Mapping[str, Any], now: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``["config.num_envs: checkpoint 16, now 32", …]`` between two nested mappings."""
    out = []
    for key in sorted(set(saved) | set(now), key=str):
        a, b = saved.get(key, "<absent>"), now.get(key, "<absent>")
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: checkpoint {a!r}, now {b!r}")
    return out


def config_of(meta: Mapping[str, Any]) -> Config:
    """The static ``Config`` of the group a checkpoint belongs to."""
    return config_from_dict(meta["config"], source="the checkpoint's config")


def trained_target(meta: Mapping[str, Any]) -> Any:
    """``restore``'s target for a checkpoint read on its own: the group's state on the
    program its meta names (all devices)."""
    return trainer(config_of(meta)).abstract_state(meta["state_runs"])


# What may differ on resume: how a run is shown, logged and checkpointed, and where it is.
FREE_ON_RESUME = ("run.progress", "run.bootstrap_reps", "run.log", "run.checkpoint", "run.checkpoint_every", "run.keep",
                  "run.on_nan", "run.runs_per_group", "run.out", "run.name")


def check_resumable(meta: Mapping[str, Any], experiment: Mapping[str, Any], program_runs: Sequence[int],
                    program_chunks: Sequence[int], traced: Sequence[Mapping[str, str]]) -> list[int]:
    """Refuses to resume ``meta``'s checkpoint as ``experiment`` (``to_dict`` form, with
    ``program_runs`` runs and ``program_chunks`` chunks per group, and ``traced``: the
    digests of each program's traced values, per static config) when they differ in
    anything but ``FREE_ON_RESUME`` (or ``run.steps``, for a run of one group, if no
    shorter than what is trained); returns the saved group sizes, which the resumed
    plan must keep."""
    saved_runs, sizes = list(meta["program_runs"]), list(meta["group_sizes"])
    if saved_runs != list(program_runs):
        raise _refusal(f"cannot resume: the number of runs differs (checkpoint {sum(saved_runs)}, "
                       f"now {sum(program_runs)}): ", differences(meta["experiment"], experiment))
    diffs = [d for d in differences(meta["experiment"], experiment) if d.split(":")[0] not in FREE_ON_RESUME]
    # what the sections do not show: the traced values, labels and seeds (jaxpo.train's own rows)
    diffs += [f"program {p}'s {d.split(':')[0]} (its runs' traced values, labels or seeds)"
              for p, (saved, now) in enumerate(zip(meta["traced"], traced)) for d in differences(saved, now)]
    one_group = len(sizes) == 1 and sizes[0] >= saved_runs[0]
    if one_group:
        diffs = [d for d in diffs if not d.startswith("run.steps:")]
    if diffs:
        hint = "" if one_group else " (run.steps can change only for a run of one group)"
        raise _refusal("cannot resume: the experiment differs from the checkpoint's in ", diffs, hint)
    if one_group and meta["chunk"] > program_chunks[0]:
        raise ValueError(f"cannot resume with run.steps={experiment['run']['steps']}: the checkpoint has trained "
                         f"{meta['chunk']} chunks, more than the {program_chunks[0]} asked for")
    return sizes


def _refusal(reason: str, diffs: Sequence[str], hint: str = "") -> FieldError:
    """The refusal to resume, each difference (``"config.num_envs: checkpoint 8, now 16"``)
    naming its field as a ``Ref`` so that each door writes it in its own words."""
    parts: list = [reason]
    for i, diff in enumerate(diffs):
        path, colon, rest = diff.partition(":")
        parts += ["; " * bool(i), *((Ref(path), colon + rest) if colon else (diff,))]
    return FieldError.saying(diffs[0].partition(":")[0] if diffs else "", *parts, hint)
