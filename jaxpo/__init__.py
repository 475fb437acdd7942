"""jaxpo: cooperative multi-agent policy optimisation defined by support matrices.

    >>> import jaxpo
    >>> config = jaxpo.Config(env="MPE_simple_spread_v3")
    >>> hyper, seeds, labels = jaxpo.runs(jaxpo.support.mappo(3), seeds=[0, 1])
    >>> result = jaxpo.train(config, hyper, seeds, num_updates=50, labels=labels)
    >>> sweep = jaxpo.sweep("sweep_public_goods", run={"seeds": 4})  # a shipped experiment file

The package is layered, lowest first; a layer imports only those below it (the
contract in ``pyproject.toml``, checked by ``lint-imports``):

    jaxpo.envs         environments on the array protocol (the top-level envs/ folder)
    jaxpo.core         the maths: pure functions of arrays (supports, losses, GAE, networks, rollout)
    jaxpo.program      the compiled program: Config/Hyper, the learner, devices and hosts
    jaxpo.run          the host loop and its hooks: events, driver, guard, checkpoints, loggers, eval
    jaxpo.experiments  typed experiments, config files, sweep axes, sweeps, ``train``
    jaxpo.cli          the command line
"""

import importlib
import importlib.abc
import importlib.util
import sys
from typing import TYPE_CHECKING

from jaxpo import _malloc
from jaxpo._version import __version__

_malloc.cap_arenas()  # first, before anything starts a thread: why in jaxpo._malloc

# Every public name and the module that defines it. Imported on first use (PEP 562):
# ``import jaxpo`` stays cheap, and the package's own modules import ``jaxpo.envs``
# without pulling in every layer above them.
PUBLIC = {
    "envs": "jaxpo.envs",
    "losses": "jaxpo.core.losses", "support": "jaxpo.core.support",
    "Support": "jaxpo.core.support", "make_support": "jaxpo.core.support",
    "Config": "jaxpo.program.config", "Hyper": "jaxpo.program.config",
    "Trainer": "jaxpo.program.compiled", "trainer": "jaxpo.program.compiled", "TrainState": "jaxpo.program.learner",
    "enable_compile_cache": "jaxpo.program.compile_cache",
    "Hook": "jaxpo.run.events",
    "Policy": "jaxpo.run.evaluate", "evaluate": "jaxpo.run.evaluate", "load_policy": "jaxpo.run.evaluate",
    "render_episode": "jaxpo.run.evaluate",
    **{name: "jaxpo.experiments.experiment"
       for name in ("Experiment", "RunSettings", "SupportSpec", "SweepSpec", "dump_yaml", "load_yaml")},
    **{name: "jaxpo.experiments.sweeps" for name in ("SweepResult", "resume", "runs", "sweep")},
    "TrainResult": "jaxpo.experiments.train", "train": "jaxpo.experiments.train",
}
# Where each module of the flat layout of jaxpo 0.1 lives now: ``jaxpo.<module>`` still
# names it (``from jaxpo import rollout``, ``import jaxpo.rollout``: the same module object).
MOVED = {
    **{name: "core" for name in ("axes", "diagnostics", "gae", "happo", "networks", "rollout", "sparse", "valuenorm")},
    **{name: "program" for name in ("compile_cache", "compiled", "config", "fields", "learner", "parallel")},
    **{name: "run" for name in ("checkpoint", "driver", "evaluate", "events", "guard", "loggers", "report")},
    **{name: "experiments" for name in ("experiment", "settings", "sweeps")},
}
MODULES = {"envs", "losses", "support"}  # public names that are modules


def _alias_of(fullname: str) -> str | None:
    """The module that ``jaxpo.<name>`` stands for (``jaxpo.support``: ``jaxpo.core.support``), or None."""
    package, _, name = fullname.partition(".")
    if package != "jaxpo" or "." in name:
        return None
    if name in MODULES and PUBLIC[name] != fullname:
        return PUBLIC[name]
    return f"jaxpo.{MOVED[name]}.{name}" if name in MOVED else None


class _ModuleAliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``import jaxpo.support`` (and every other alias) a statement that works: the
    name is bound to the very module object it stands for, imported only when asked for."""

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if _alias_of(fullname) else None

    def create_module(self, spec):
        module = importlib.import_module(_alias_of(spec.name))
        spec.loader_state = module.__spec__  # importlib sets __spec__ to the alias's: exec_module puts it back
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = module.__spec__.loader_state  # the real module ran its code when it was imported


if not any(isinstance(finder, _ModuleAliases) for finder in sys.meta_path):  # once, even if jaxpo is reloaded
    sys.meta_path.append(_ModuleAliases())


def __getattr__(name: str):
    if name in PUBLIC:
        module = importlib.import_module(PUBLIC[name])
        value = module if name in MODULES else getattr(module, name)
    elif name in MOVED:
        value = importlib.import_module(f"jaxpo.{MOVED[name]}.{name}")
    else:
        raise AttributeError(f"module 'jaxpo' has no attribute {name!r}")
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC, *MOVED})


if TYPE_CHECKING:  # what editors and type checkers see
    from jaxpo import envs
    from jaxpo.core import losses, support
    from jaxpo.core.support import Support, make_support
    from jaxpo.experiments.experiment import Experiment, RunSettings, SupportSpec, SweepSpec, dump_yaml, load_yaml
    from jaxpo.experiments.sweeps import SweepResult, resume, runs, sweep
    from jaxpo.experiments.train import TrainResult, train
    from jaxpo.program.compile_cache import enable_compile_cache
    from jaxpo.program.config import Config, Hyper
    from jaxpo.program.compiled import Trainer, trainer
    from jaxpo.program.learner import TrainState
    from jaxpo.run.evaluate import Policy, evaluate, load_policy, render_episode
    from jaxpo.run.events import Hook

__all__ = sorted(PUBLIC)
