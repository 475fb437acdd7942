"""Helpers shared by the tests: episodes of a fixed policy, the baselines that
trained policies are compared with, a hook that interrupts training, and a CLI run's
learning curves and summary line.

Imported as a plain module (`from runtools import ...`), like envtools.
"""

import os

import jax
import numpy as np

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


def cli_curves(out_dir, *args: str, metric: str = "return") -> np.ndarray:
    """``jaxpo train *args`` into ``out_dir/run`` (in this process, no progress bar) and
    its ``metric`` per run and update, ``[R, U]``, from metrics.csv (one row each; NaN
    where a row is missing)."""
    from jaxpo import cli
    from jaxpo.run.report import read_csv

    assert cli.main(["train", *args, "--out", str(out_dir), "--name", "run", "--no-progress"]) == 0
    rows = read_csv(os.path.join(str(out_dir), "run", "metrics.csv"))
    run, update = np.asarray(rows["run_id"], int), np.asarray(rows["update"], int) - 1
    assert len(set(zip(run, update))) == len(run), "metrics.csv repeats a (run, update) row"
    curves = np.full((run.max() + 1, update.max() + 1), np.nan)
    curves[run, update] = rows[metric]
    return curves


def reject_nan(name):
    """``json.loads``' ``parse_constant``: the CLI's summary line must be valid JSON (no NaN)."""
    raise AssertionError(f"{name} is not valid JSON")
