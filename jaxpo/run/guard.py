"""The NaN/inf guard: each chunk's metrics and each run's parameters checked on the host.

No callback runs inside the program: after a chunk the driver already holds the
metrics ``[R, K]``; the parameters are reduced on the devices to one flag per run.
A run whose loss terms, gradient norm, rewards, returns (where an episode ended) or
parameters are not finite is reported by run, update and metric; then

    on_nan="stop"  (default) the run stops cleanly with ``NonFiniteError``
    on_nan="mask"  (sweeps) the other runs go on; the run is marked in the summary
                   (``diverged_at_update``) and its metrics stay NaN

Either way the last checkpoint saved before the divergence is kept for good. The
guard is a step of the loop (``jaxpo.run.driver.run_group``), not a hook: it checks a
chunk before any hook sees it, so loggers and checkpoints see masked metrics and the
``diverged`` table in the event; hooks hear of a new divergence (``Hook.diverge``,
where the checkpointer pins its latest step) before a stop, and in stop mode no
non-finite state is saved.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxpo.core.checks import NamedMessage, Setting
from jaxpo.run.events import ChunkEvent, Group
from jaxpo.program.parallel import gather

OnNan = Literal["stop", "mask"]
# Metrics that are NaN by design when no episode ended in an update.
EPISODE_METRICS = ("return", "episode_length", "win_rate")


class NonFiniteError(NamedMessage, RuntimeError):
    """A run's loss, parameters or returns stopped being finite; its message's parts
    name the ``run.on_nan`` setting (``jaxpo.core.checks``)."""

    def __init__(self, *parts):
        self.parts = parts
        super().__init__(self.named())


@jax.jit
def finite_params(params) -> jax.Array:
    """bool ``[R]``: every parameter of each run is finite (``params`` batched ``[R, ...]``)."""
    flags = [jnp.isfinite(x).reshape(x.shape[0], -1).all(axis=1) for x in jax.tree.leaves(params)]
    return jnp.stack(flags).all(axis=0)


class NanGuard:
    """See the module docstring. ``log`` gets one line per divergence in mask mode;
    ``diverged``: what a resumed plan's checkpoint recorded."""

    def __init__(self, on_nan: OnNan = "stop", log: Callable[[str], None] | None = None,
                 diverged: Mapping[Any, Any] | None = None):
        if on_nan not in ("stop", "mask"):
            raise ValueError(f"on_nan must be 'stop' or 'mask', got {on_nan!r}")
        self.on_nan, self.log = on_nan, log or (lambda line: None)
        # run_id -> (update, metric names)
        self.diverged: dict[int, tuple[int, list[str]]] = {int(k): tuple(v) for k, v in (diverged or {}).items()}

    def check(self, group: Group, updates: np.ndarray, metrics: dict[str, np.ndarray],
              params: Any) -> tuple[dict[str, np.ndarray], tuple[int, ...]]:
        """A chunk's ``metrics`` (name -> ``[R, K]``) with every diverged run's NaN from
        its divergence on (a copy), and the ids of the runs found non-finite in it."""
        runs = group.runs
        ok_params = np.asarray(gather(finite_params(params)))[:len(runs)]
        episodes = metrics.get("episodes")
        masked = {name: np.array(values) for name, values in metrics.items()}
        new = []
        for r, run in enumerate(runs):
            if run.run_id not in self.diverged:
                bad = np.zeros(len(updates), bool)
                names = []
                for name, values in metrics.items():
                    row = ~np.isfinite(values[r])
                    if name in EPISODE_METRICS and episodes is not None:
                        row &= episodes[r] > 0
                    if row.any():
                        names.append(name)
                        bad |= row
                if not ok_params[r]:
                    names.append("params")
                if not names:
                    continue
                self.diverged[run.run_id] = (int(updates[np.argmax(bad)] if bad.any() else updates[-1]), names)
                new.append(run.run_id)
            from_k = int(np.searchsorted(updates, self.diverged[run.run_id][0]))
            for values in masked.values():
                values[r, from_k:] = np.nan
        return masked, tuple(new)

    def revive(self, run_ids) -> None:
        """Forgets the divergence of ``run_ids`` (PBT replaced their learners): their
        metrics count again from the next chunk."""
        for run_id in run_ids:
            self.diverged.pop(int(run_id), None)

    def report(self, event: ChunkEvent) -> None:
        """After the hooks heard of ``event.newly_diverged``: stop with a
        ``NonFiniteError``, or (mask mode) log a warning per run and go on."""
        labels = {run.run_id: run.label for run in event.group.runs}
        for run_id in event.newly_diverged:
            update, names = self.diverged[run_id]
            message = f"run {run_id} ({labels[run_id]}) became non-finite by update {update}: {', '.join(names)}"
            if self.on_nan == "stop":
                raise NonFiniteError(f"{message}. Stopped (", Setting("run.on_nan", "stop", "on_nan"),
                                     "); every checkpoint saved before it is kept. Lower the learning rate, or use ",
                                     Setting("run.on_nan", "mask", "on_nan"), " to let the other runs go on.")
            self.log(f"warning: {message}; its metrics are NaN from there on, the other runs go on (on_nan='mask')")
