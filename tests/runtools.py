"""Helpers shared by the tests: episodes of a fixed policy, the baselines that
trained policies are compared with, and a hook that interrupts training.

Imported as a plain module (`from runtools import ...`), like envtools.
"""

import jax

from jaxpo.core.rollout import reset, rollout
from jaxpo import Config, trainer
from jaxpo.run.events import Hook


def completed_episodes(config: Config, params, num_steps: int, reset_key, rollout_key, policy=None):
    """The episodes completed in ``num_steps`` steps of each of ``config.num_envs``
    environments from reset, acting with ``params`` (or ``policy``, as in
    ``jaxpo.rollout.rollout``): ``(returns [M] (mean over agents), wins bool [M] or
    None for environments without a win flag)``, as numpy."""
    tr = trainer(config)

    @jax.jit
    def run(rollout_state, key):
        return rollout(tr.env, tr.net, params, rollout_state, key, num_steps, config.critic_input, policy=policy)[1]

    traj = jax.device_get(run(reset(tr.env, tr.net, reset_key, config.num_envs, config.critic_input), rollout_key))
    ended = traj.episode_length > 0
    return traj.episode_return[ended], None if traj.episode_won is None else traj.episode_won[ended]


class StopAfter(Hook):
    """Interrupts training after ``chunks`` chunks in all, as a crash would: after the
    hooks before the caller's (loggers, evaluation) and before the checkpointer."""

    def __init__(self, chunks):
        self.left = chunks

    def chunk(self, event):
        self.left -= 1
        if self.left == 0:
            raise KeyboardInterrupt
