"""Where a group's per-update metrics are read back from: the run's ``metrics.csv``
(``CSVHistory``), or, where no such file is written (no output directory, a logger
list without csv, a process other than the main one), memory (``MetricsHistory``: the
one place the host keeps every update's metrics, and only then).

Either is a hook (it learns each group's metric names, and memory its values) and a
``source(group, names=None) -> {name: float64 [R, U]}`` of the updates so far (names
None: every metric of the group's program): what results read, after the run or
during it, and, only where there is no metrics file, what a checkpoint saves.
"""

from __future__ import annotations

import array
import csv
from typing import Mapping, Sequence

import numpy as np

from jaxpo.run.events import ChunkEvent, Group, Hook


class _History(Hook):
    """Each group's metric names, learnt from its chunks (or its checkpoint)."""

    def __init__(self):
        self.names: dict[int, list[str]] = {}

    def start(self, group: Group) -> None:
        if group.resumed is not None and group.resumed.metrics is not None:
            self.add(group, group.resumed.metrics)

    def add(self, group: Group, metrics: Mapping[str, np.ndarray]) -> None:
        """Records a group's checkpointed metrics ``[R, U]`` (a resumed plan's groups)."""
        self.learn(group, list(metrics))

    def learn(self, group: Group, names: Sequence[str]) -> None:
        """Records a group's metric names (a resumed group whose metrics the file holds)."""
        self.names[group.index] = list(names)

    def chunk(self, event: ChunkEvent) -> None:
        self.names.setdefault(event.group.index, list(event.metrics))


class MetricsHistory(_History):
    """Every chunk's metrics of every group, in memory (a run without a metrics file)."""

    def __init__(self):
        super().__init__()
        self.groups: dict[int, list[Mapping[str, np.ndarray]]] = {}

    def start(self, group: Group) -> None:
        self.groups[group.index] = []
        super().start(group)

    def add(self, group: Group, metrics: Mapping[str, np.ndarray]) -> None:
        super().add(group, metrics)
        self.groups[group.index] = [metrics]

    def chunk(self, event: ChunkEvent) -> None:
        super().chunk(event)
        self.groups[event.group.index].append(event.metrics)

    def __call__(self, group: Group, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        parts = self.groups[group.index]
        return {name: np.concatenate([p[name] for p in parts], axis=1) for name in names or self.names[group.index]}


class CSVHistory(_History):
    """The metrics of a group read back from ``metrics.csv`` (long format: one row per run
    and update, floats written as their ``repr``, so they read back bitwise).

    Args:
        path: the run's ``metrics.csv``.
    """

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def __call__(self, group: Group, names: Sequence[str] | None = None,
                 updates: int | None = None) -> dict[str, np.ndarray]:
        """``updates``: read only the rows up to that update (a file that holds rows
        past a checkpoint); None: every row."""
        names = list(names or self.names[group.index])
        index = {str(run.run_id): r for r, run in enumerate(group.runs)}
        # typed arrays, not lists of float objects: a read leaves no Python objects behind
        columns = [[array.array("d") for _ in group.runs] for _ in names]
        with open(self.path, newline="") as f:
            rows = csv.reader(f)
            header = next(rows)
            at, update = [header.index(name) for name in names], header.index("update")
            for row in rows:
                r = index.get(row[0])
                if r is not None and (updates is None or int(row[update]) <= updates):
                    for column, i in zip(columns, at):
                        column[r].append(float(row[i]))
        return {name: np.array([np.frombuffer(a, np.float64) for a in column]).reshape(len(group.runs), -1)
                for name, column in zip(names, columns)}
