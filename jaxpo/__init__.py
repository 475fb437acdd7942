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

__version__ = "0.1.0"

import importlib

from jaxpo import envs
from jaxpo.core import losses, support
from jaxpo.core.support import Support, make_support
from jaxpo.experiments.experiment import Experiment, RunSettings, SupportSpec, SweepSpec, dump_yaml, load_yaml
from jaxpo.experiments.sweeps import SweepResult, resume, runs, sweep
from jaxpo.experiments.train import TrainResult, train
from jaxpo.program.compile_cache import enable_compile_cache
from jaxpo.program.config import Config, Hyper
from jaxpo.program.learner import Trainer, TrainState, trainer
from jaxpo.run.evaluate import Policy, evaluate, load_policy, render_episode
from jaxpo.run.events import Hook

# Where each module of the flat layout of jaxpo 0.1 lives now: ``jaxpo.<module>`` still
# names it (``from jaxpo import rollout``).
MOVED = {
    **{name: "core" for name in ("axes", "diagnostics", "gae", "happo", "networks", "rollout", "sparse", "valuenorm")},
    **{name: "program" for name in ("compile_cache", "config", "fields", "learner", "parallel")},
    **{name: "run" for name in ("checkpoint", "driver", "evaluate", "events", "guard", "loggers", "report")},
    **{name: "experiments" for name in ("experiment", "settings", "sweeps")},
}


def __getattr__(name: str):
    if name in MOVED:
        return importlib.import_module(f"jaxpo.{MOVED[name]}.{name}")
    raise AttributeError(f"module 'jaxpo' has no attribute {name!r}")


__all__ = [
    "Config", "Experiment", "Hook", "Hyper", "Policy", "RunSettings", "Support", "SupportSpec", "SweepResult", "SweepSpec",
    "Trainer", "TrainResult", "TrainState", "dump_yaml", "enable_compile_cache", "envs", "evaluate", "load_policy",
    "load_yaml", "losses", "make_support", "render_episode", "resume", "runs", "support", "sweep", "train", "trainer",
]
