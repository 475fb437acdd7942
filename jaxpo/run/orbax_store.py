"""How jaxpo drives orbax: its module, imported on use, and a checkpoint manager whose
steps are kept by recency and by pin (a diverged run's last finite step). What a
checkpoint holds and how a run resumes are ``jaxpo.run.checkpoint``'s."""

from __future__ import annotations

import ast
import logging
import sys


def ocp_module():
    """``orbax.checkpoint``, with its I/O counters switched off (below) and tensorstore's
    ``KvStore.Spec.to_json`` without its leak (``_spec_to_json_without_leak``)."""
    import orbax.checkpoint as ocp  # imported on use: it starts threads and is slow to import

    # orbax reads tensorstore's I/O counters around every array write and read, only to log
    # them, and each read leaks its objects (tensorstore 0.1.86: ~15 KB a save): None skips
    # them. A private function of orbax's: where a release moves it, nothing is replaced.
    utils = sys.modules.get("orbax.checkpoint._src.serialization.tensorstore_utils")
    if hasattr(utils, "get_tensorstore_raw_bytes"):
        utils.get_tensorstore_raw_bytes = lambda direction=None: None
    _spec_to_json_without_leak()
    return ocp


def _spec_to_json_without_leak() -> None:
    """Replaces ``tensorstore.KvStore.Spec.to_json`` with one that returns the same JSON
    without leaking it.

    tensorstore (0.1.86) leaks every string of the JSON that ``to_json`` returns (two
    references too many, so they are never freed). orbax calls it for every array it
    writes with OCDBT (``_build_ocdbt_kvstore_tspec``) and twice more to merge a save's
    files: ~220 B of Python strings an array, growing with every save. The spec's
    ``repr``, which does not leak, prints the same JSON as a Python literal; it is
    parsed and used only where it names the very same spec (read back and compared),
    otherwise (e.g. a non-ASCII path, which ``repr`` prints as escaped bytes) the
    original ``to_json`` answers, as it does for ``include_defaults=True``."""
    import tensorstore as ts

    spec_type = ts.KvStore.Spec
    leaky = spec_type.to_json
    if getattr(leaky, "jaxpo_without_leak", False):
        return

    def to_json(self, include_defaults: bool = False):
        if not include_defaults:
            text, head = repr(self), "KvStore.Spec("
            try:
                value = ast.literal_eval(text[len(head):-1]) if text.startswith(head) and text.endswith(")") else None
                if isinstance(value, dict) and spec_type(value) == self:
                    return value
            except Exception:  # not a literal, or not a spec: the original answers
                pass
        return leaky(self, include_defaults=include_defaults)

    to_json.__doc__, to_json.jaxpo_without_leak = leaky.__doc__, True
    spec_type.to_json = to_json


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
