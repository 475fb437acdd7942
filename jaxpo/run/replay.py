"""Schedule replay (``sweep.schedule: replay``): fixed traced values set at chunk
boundaries, what a PBT member's ``best_schedule.yaml`` trains. The axes, table and
``Steering`` base are ``jaxpo.run.steering``'s."""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import numpy as np

from jaxpo.program.parallel import put
from jaxpo.run.steering import PopulationTable, Steering, apply_codes, pad_rows


class ScheduleReplay(Steering):
    """A fixed schedule of traced values (``sweep.schedule: replay``): after the group
    chunks in ``segments`` (chunk -> codes ``[A]``), every run takes those values. What
    ``best_schedule.yaml`` trains: a PBT member's schedule, as one run of its own.

    Args:
        table: the axes (every name a segment sets) and the support table.
        codes: float32 ``[R, A]``, the values before the first segment.
        segments: group chunk -> float32 ``[A]``, the codes set after that chunk.
        on_step: called with the replay after each step and load (the lineage files).
    """

    kind = "replay"

    def __init__(self, table: PopulationTable, codes: np.ndarray, segments: dict[int, np.ndarray],
                 on_step: Callable[[Steering], None] | None = None):
        super().__init__(table, codes, ready=1, seed=0, on_step=on_step)
        self.segments = {int(c): np.asarray(v, np.float32) for c, v in segments.items()}

    def due(self, chunk: int, num_chunks: int) -> bool:
        return chunk in self.segments and chunk + 1 < num_chunks

    def _apply(self, tr, size, key_index, chunk, state, hyper, scores):
        num_runs = len(self.codes)
        codes = np.repeat(self.segments[chunk][None], num_runs, axis=0)
        table = self.table.padded(size)
        fn, replicated = self._jit(tr, size, lambda h, c: apply_codes(h, c, jnp.ones(size, bool), table),
                                   lambda rep: tr.run_sharding)
        return state, fn(hyper, put(pad_rows(codes, size), replicated)), codes, np.arange(num_runs)
