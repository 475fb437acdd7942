"""The best advantage-support radius is the coupling radius: on networked public goods
with coupling radius c = 1, κ = 1 learns to cooperate, independent learners (κ = 0)
learn to defect, and both move well away from the random policy.

Modules under test: ``jaxpo.core.support`` (``khop``) and the training program, on ``jaxpo.envs.public_goods``."""

import jax
import numpy as np
import pytest

import jaxpo
from jaxpo import Config, runs, train

RANDOM_RETURN = 11.5  # per-agent episode return of uniform random actions (tests/test_public_goods.py)


@pytest.fixture(scope="module")
def result():
    config = Config(
        env="public_goods", env_kwargs=dict(num_agents=8, radius=1), num_envs=16, num_steps=50,
        updates_per_chunk=10, hidden=(32, 32),
    )
    env = config.make_env()
    supports = [jaxpo.make_support("khop", env.num_agents, kappa=k, coupling=env.coupling) for k in (0, 1)]
    hyper, seeds, labels = runs(supports, seeds=[0, 1])
    return train(config, hyper, seeds, num_updates=60, labels=labels, progress=False)


def test_random_policy_reference(result):
    # The untrained (near-uniform) policy scores like the random one in the first update.
    np.testing.assert_allclose(result.initial_return(), RANDOM_RETURN, atol=1.0)


def test_kappa_equal_to_coupling_radius_cooperates(result):
    final = result.final_return()
    independent, neighbourhood = final[:2], final[2:]
    # all-contribute scores 22, all-defect 1 (per agent and episode)
    assert np.all(neighbourhood > RANDOM_RETURN + 8), final
    assert np.all(independent < RANDOM_RETURN - 8), final
    assert neighbourhood.min() > independent.max() + 15, final


def own_return_of_agent0(result, run, learned: bool, episodes: int = 4) -> float:
    """Agent 0's mean episode return when it plays run ``run``'s learned policy (or
    uniform actions) and every other agent acts uniformly at random."""
    import distrax
    import jax.numpy as jnp

    from jaxpo.core.rollout import reset, rollout
    from jaxpo import trainer

    tr = trainer(result.config)
    params = jax.tree.map(lambda x: x[run], result.state.params)
    is_agent0 = (jnp.arange(tr.num_agents) == 0)[:, None]

    def policy(params, obs, mask):
        logits = tr.net.policy(params, obs, mask).logits if learned else jnp.zeros(mask.shape)
        return distrax.Categorical(logits=jnp.where(is_agent0, logits, 0.0))

    state = reset(tr.env, tr.net, jax.random.PRNGKey(7), result.config.num_envs,
                  result.config.critic_input)
    _, traj = rollout(tr.env, tr.net, params, state, jax.random.PRNGKey(8), episodes * tr.env.max_steps,
                      result.config.critic_input, policy=policy)
    return float(traj.reward[..., 0].sum(0).mean()) / episodes


def test_independent_learners_learn_their_best_response(result):
    """In a social dilemma the independent learners' team return falls *below* random
    (defection is each agent's dominant strategy); what they learn still beats random
    on their own objective: against random partners, agent 0's learned policy earns
    it more than random actions do."""
    random_own = own_return_of_agent0(result, run=0, learned=False)
    for run in (0, 1):
        learned_own = own_return_of_agent0(result, run=run, learned=True)
        # full defection gains ≈ +4 (cost saved 12.5, own share of the benefit lost ≈ 8.3)
        assert learned_own > random_own + 3, (learned_own, random_own)
