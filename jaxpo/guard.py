"""The NaN/inf guard: each chunk's metrics and each run's parameters checked on the host.

No callback runs inside the program: after a chunk the driver already holds the
metrics ``[R, K]``; the parameters are reduced on the devices to one flag per run.
A run whose loss terms, gradient norm, rewards, returns (where an episode ended) or
parameters are not finite is reported by run, update and metric; then

    on_nan="stop"  (default) the run stops cleanly with ``NonFiniteError``
    on_nan="mask"  (sweeps) the other runs go on; the run is marked in the summary
                   (``diverged_at_update``) and its metrics stay NaN

Either way the last checkpoint saved before the divergence is kept for good. The
guard is the first hook after a chunk: loggers and checkpoints see masked metrics,
and in stop mode no non-finite state is saved.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxpo.driver import ChunkEvent, Hook
from jaxpo.parallel import gather

OnNan = Literal["stop", "mask"]
# Metrics that are NaN by design when no episode ended in an update.
EPISODE_METRICS = ("return", "episode_length", "win_rate")


class NonFiniteError(RuntimeError):
    """A run's loss, parameters or returns stopped being finite."""


@jax.jit
def finite_params(params) -> jax.Array:
    """bool ``[R]``: every parameter of each run is finite (``params`` batched ``[R, ...]``)."""
    flags = [jnp.isfinite(x).reshape(x.shape[0], -1).all(axis=1) for x in jax.tree.leaves(params)]
    return jnp.stack(flags).all(axis=0)


class NanGuard(Hook):
    """See the module docstring. ``pin`` is called once per newly diverged run (e.g. a
    ``Checkpointer.pin_latest``); ``log`` gets one line per divergence."""

    def __init__(self, on_nan: OnNan = "stop", pin: Callable[[], None] | None = None,
                 log: Callable[[str], None] | None = None, diverged: Mapping[Any, Any] | None = None):
        if on_nan not in ("stop", "mask"):
            raise ValueError(f"on_nan must be 'stop' or 'mask', got {on_nan!r}")
        self.on_nan, self.pin, self.log = on_nan, pin, log or (lambda line: None)
        # run_id -> (update, metric names); a resumed run passes what its checkpoint recorded
        self.diverged: dict[int, tuple[int, list[str]]] = {int(k): tuple(v) for k, v in (diverged or {}).items()}

    def chunk(self, event: ChunkEvent) -> None:
        runs = event.batch.runs
        ok_params = np.asarray(gather(finite_params(event.state.params)))[:len(runs)]
        episodes = event.metrics.get("episodes")
        for r, run in enumerate(runs):
            if run.run_id in self.diverged:
                self._mask(event, r, self.diverged[run.run_id][0])
                continue
            bad = np.zeros(len(event.updates), bool)
            names = []
            for name, values in event.metrics.items():
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
            update = int(event.updates[np.argmax(bad)] if bad.any() else event.updates[-1])
            self.diverged[run.run_id] = (update, names)
            message = (f"run {run.run_id} ({run.label}) became non-finite by update {update}: "
                       f"{', '.join(names)}")
            if self.pin is not None:
                self.pin()
            if self.on_nan == "stop":
                raise NonFiniteError(f"{message}. Stopped (--on-nan stop); the last checkpoint before it is kept. "
                                     f"Lower the learning rate, or use --on-nan mask to let the other runs go on.")
            self.log(f"warning: {message}; its metrics are NaN from there on, the other runs go on (--on-nan mask)")
            self._mask(event, r, update)

    @staticmethod
    def _mask(event: ChunkEvent, r: int, update: int) -> None:
        """Run ``r``'s metrics from ``update`` on become NaN (in place: every later hook
        and the results see them so), so no statistic counts a diverged run."""
        from_k = int(np.searchsorted(event.updates, update))
        for values in event.metrics.values():
            values[r, from_k:] = np.nan
