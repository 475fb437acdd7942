"""jaxpo: cooperative multi-agent policy optimisation defined by support matrices.

    >>> import jaxpo
    >>> config = jaxpo.Config(env="MPE_simple_spread_v3")
    >>> hyper, seeds, labels = jaxpo.runs(jaxpo.support.mappo(3), seeds=[0, 1])
    >>> result = jaxpo.train(config, hyper, seeds, num_updates=50, labels=labels)
    >>> sweep = jaxpo.sweep("sweep_public_goods", run={"seeds": 4})  # a shipped experiment file
"""

__version__ = "0.1.0"

from jaxpo import envs, losses, support
from jaxpo.compile_cache import enable_compile_cache
from jaxpo.config import Config, Hyper
from jaxpo.driver import Hook, TrainResult, train
from jaxpo.evaluate import Policy, evaluate, load_policy, render_episode
from jaxpo.experiment import Experiment, RunSettings, SupportSpec, SweepSpec, dump_yaml, load_yaml
from jaxpo.learner import Trainer, TrainState, trainer
from jaxpo.support import Support, make_support
from jaxpo.sweeps import SweepResult, resume, runs, sweep

__all__ = [
    "Config", "Experiment", "Hook", "Hyper", "Policy", "RunSettings", "Support", "SupportSpec", "SweepResult", "SweepSpec",
    "Trainer", "TrainResult", "TrainState", "dump_yaml", "enable_compile_cache", "envs", "evaluate", "load_policy",
    "load_yaml", "losses", "make_support", "render_episode", "resume", "runs", "support", "sweep", "train", "trainer",
]
