"""Short fixed-seed learning runs for the wider policy classes: SMAX 3m (masked
discrete actions, win rate) and MPE simple_spread with Gaussian continuous actions.

Each run is compared with the *untrained* policy it started from, measured on
enough episodes that the required margin is many standard errors wide.

Modules under test: the whole training program (``jaxpo.program.learner``) on ``jaxpo.envs`` tasks."""

import jax
import numpy as np
import pytest

from jaxpo.core import support
from jaxpo import Config, runs, train, trainer
from runtools import completed_episodes

SMAX_3M = Config(
    env="HeuristicEnemySMAX", env_kwargs={"scenario": "3m"}, num_envs=64, num_steps=64,
    updates_per_chunk=10, hidden=(64, 64),
)
MPE_CONTINUOUS = Config(
    env="MPE_simple_spread_v3", env_kwargs={"action_type": "Continuous"}, num_envs=32, num_steps=64,
    updates_per_chunk=10, hidden=(64, 64),
)


def untrained_episodes(config: Config, hyper, seed: int, num_steps: int):
    """``(returns, wins)`` of the episodes the initial (untrained) policy of run ``seed``
    completes in ``num_steps`` steps of every env; ``wins`` is None without a win flag."""
    params = trainer(config).init(jax.random.PRNGKey(seed), hyper).params
    return completed_episodes(config, params, num_steps, jax.random.PRNGKey(seed + 100), jax.random.PRNGKey(seed + 200))


def test_smax_3m_win_rate_rises():
    hyper, seeds, _ = runs(support.ippo(3), seeds=[0], lr=1e-3)
    result = train(SMAX_3M, hyper, seeds, num_updates=40, progress=False)
    _, wins = untrained_episodes(SMAX_3M, jax.tree.map(lambda x: x[0], hyper), 0, 200)
    untrained = wins.mean()
    final = result.final("win_rate", last=0.1)[0]
    print(f"SMAX 3m win rate: untrained {untrained:.3f} over {wins.size} episodes "
          f"(first update {result.metrics['win_rate'][0, 0]:.3f}) → final {final:.3f}")
    assert wins.size >= 400
    assert untrained < 0.05
    assert final > untrained + 0.25  # measured: 0.000 (695 episodes) → 0.58


def test_mpe_continuous_return_improves():
    hyper, seeds, _ = runs(support.khop(np.ones((3, 3)), 1), seeds=[0, 1], lr=1e-3, ent_coef=0.0)
    result = train(MPE_CONTINUOUS, hyper, seeds, num_updates=100, progress=False)
    assert trainer(MPE_CONTINUOUS).env.continuous
    final = result.final_return(last=0.1)
    returns, _ = untrained_episodes(MPE_CONTINUOUS, jax.tree.map(lambda x: x[0], hyper), 0, 40 * 26)
    untrained, se = returns.mean(), returns.std() / np.sqrt(returns.size)
    print(f"MPE continuous return: untrained {untrained:.2f} ± {se:.2f} → final {final}")
    margin = 4.0
    assert margin > 10 * se  # the margin is not noise
    assert (final > untrained + margin).all()  # measured: untrained −26.4, final −20.4 / −20.8
