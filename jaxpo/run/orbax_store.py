"""How jaxpo drives orbax: its module, imported on use, and a checkpoint manager whose
steps are kept by recency and by pin (a diverged run's last finite step). What a
checkpoint holds and how a run resumes are ``jaxpo.run.checkpoint``'s."""

from __future__ import annotations

import logging
import sys


def ocp_module():
    """``orbax.checkpoint``, with its I/O counters switched off (below)."""
    import orbax.checkpoint as ocp  # imported on use: it starts threads and is slow to import

    # orbax reads tensorstore's I/O counters around every array write and read, only to log
    # them, and each read leaks its objects (tensorstore 0.1.86: ~15 KB a save): None skips
    # them. A private function of orbax's: where a release moves it, nothing is replaced.
    utils = sys.modules.get("orbax.checkpoint._src.serialization.tensorstore_utils")
    if hasattr(utils, "get_tensorstore_raw_bytes"):
        utils.get_tensorstore_raw_bytes = lambda direction=None: None
    return ocp


class _QuietReadOnly(logging.Filter):
    """Drops orbax's warnings that a manager we open read-only is read-only."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "is read only" not in message and "read_only=True" not in message


logging.getLogger("absl").addFilter(_QuietReadOnly())


class _Pinned:
    """An orbax preservation policy: keep the steps in ``steps`` (a set, grown later)."""

    def __init__(self, steps: set[int]):
        self.steps = steps

    def should_preserve(self, checkpoints, *, context) -> list[bool]:
        return [info.step in self.steps for info in checkpoints]


def checkpoint_manager(directory: str, keep: int, pinned: set[int] | None = None, read_only: bool = False):
    """An orbax ``CheckpointManager`` over ``directory`` with jaxpo's items (state, history,
    population, meta): the latest ``keep`` steps and the ``pinned`` ones are kept."""
    ocp = ocp_module()
    policies = ocp.checkpoint_managers
    policy = None
    if not read_only:
        policy = policies.AnyPreservationPolicy([policies.LatestN(keep), _Pinned(pinned if pinned is not None else set())])
    options = ocp.CheckpointManagerOptions(create=not read_only, read_only=read_only, preservation_policy=policy,
                                           enable_async_checkpointing=True)
    handlers = {"state": ocp.StandardCheckpointHandler(), "history": ocp.StandardCheckpointHandler(),
                "population": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
    return ocp.CheckpointManager(directory, options=options, item_handlers=handlers)
