"""The run table of ``jaxpo.train``: every run's traced values (its ``Hyper`` row), label
and seed, as given in Python, kept as data in ``hyper.npz`` beside the run's files."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from jaxpo.program.config import Hyper
from jaxpo.run.checkpoint import flatten_state
from jaxpo.run.report import write_atomic

FILE = "hyper.npz"


@dataclasses.dataclass(frozen=True)
class RunTable:
    """R runs given as data: ``hyper`` ``[R, ...]``, ``labels`` (R names) and ``seeds`` int ``[R]``."""

    hyper: Hyper
    labels: Sequence[str]
    seeds: np.ndarray

    def write(self, path: str) -> None:
        """Writes the table as one ``.npz`` (atomically): ``labels``, ``seeds`` and one
        ``[R, ...]`` array per Hyper field (``S_A``, ``lr``, ...).

        Args:
            path: the file to write.
        """
        rows = {name: np.asarray(leaf) for name, leaf in flatten_state(self.hyper).items()}

        def save(target: str) -> None:
            with open(target, "wb") as f:
                np.savez(f, labels=np.array(list(self.labels)), seeds=np.asarray(self.seeds), **rows)

        write_atomic(path, save)
