"""jaxpo: cooperative multi-agent policy optimisation defined by support matrices.

    >>> import jaxpo
    >>> config = jaxpo.Config(env="MPE_simple_spread_v3", num_updates=50)
    >>> support = jaxpo.support.mappo(3)
    >>> hyper, seeds, labels = jaxpo.runs(support, seeds=[0, 1])
    >>> result = jaxpo.train(config, hyper, seeds, labels=labels)
"""

__version__ = "0.1.0"

from jaxpo import envs, losses, support
from jaxpo.support import Support, make_support
from jaxpo.train import Config, Hyper, Trainer, TrainResult, TrainState, runs, train, trainer

__all__ = [
    "Config", "Hyper", "Support", "Trainer", "TrainResult", "TrainState",
    "envs", "losses", "make_support", "runs", "support", "train", "trainer",
]
