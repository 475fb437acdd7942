"""The trained program's mechanics, observed inside the compiled update: bugs that the
maths-level tests cannot see because the loss functions themselves stay correct.

* exact HAPPO draws a fresh random agent order every update (not 0, 1, …, N−1);
* every minibatch row is one whole transition (all N agents of it: the ratio
  product of a term needs all its factors in the same minibatch);
* the entropy coefficient reaches the trained loss and its gradient.

Values are captured with ``jax.debug.callback`` from wrappers around the library's own
functions, in a fresh (uncached) ``Trainer`` compiled under the wrapper.

Modules under test: ``jaxpo.program.learner`` and ``jaxpo.program.compiled``."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxpo import Config, Hyper

from jaxpo.core import happo, losses, support

from jaxpo.program.compiled import Trainer, trainer
from jaxpo.program.learner import Learner

SMALL = dict(num_envs=4, num_steps=8, num_epochs=2, num_minibatches=2, hidden=(16,))


def test_exact_happo_draws_a_fresh_agent_order_every_update(monkeypatch):
    orders = []
    real = happo.sequential_actor_update

    def spy(*args, **kwargs):
        order = args[6]  # (actor_apply, params, opt_state, optimizer, batch, advantages, order, ...)
        jax.debug.callback(lambda o: orders.append(np.asarray(o)), order)
        return real(*args, **kwargs)

    monkeypatch.setattr(happo, "sequential_actor_update", spy)
    config = Config(env="traffic_grid", env_kwargs={"rows": 2, "cols": 2}, scheme="sequential", share_params=False,
                    updates_per_chunk=12, **SMALL)
    tr = Trainer(config)
    state = jax.jit(tr.init)(jax.random.PRNGKey(0), Hyper.create(support.ippo(4)))
    jax.block_until_ready(jax.jit(tr.chunk)(state, Hyper.create(support.ippo(4))))
    assert len(orders) == 12
    assert all(sorted(o.tolist()) == [0, 1, 2, 3] for o in orders)  # permutations of the agents
    assert len({tuple(o) for o in orders}) >= 6  # 24 orders: 12 draws repeat few
    assert {o[0] for o in orders} == {0, 1, 2, 3}  # every agent goes first at some update


def test_every_minibatch_row_is_one_whole_transition(monkeypatch):
    full, rows = [], []
    real_loss, real_advantages = losses.ppo_loss, Learner.advantages

    def loss_spy(**kwargs):
        jax.debug.callback(lambda a, lp: rows.append(np.concatenate([a, lp], axis=1)),
                           kwargs["advantages"], kwargs["old_log_prob"])
        return real_loss(**kwargs)

    def advantages_spy(self, state, traj, hyper):
        advantages, targets = real_advantages(self, state, traj, hyper)
        n = advantages.shape[-1]
        jax.debug.callback(lambda a, lp: full.append(np.concatenate([a.reshape(-1, n), lp.reshape(-1, n)], axis=1)),
                           advantages, traj.log_prob)
        return advantages, targets

    monkeypatch.setattr(losses, "ppo_loss", loss_spy)
    monkeypatch.setattr(Learner, "advantages", advantages_spy)
    config = Config(env="MPE_simple_spread_v3", updates_per_chunk=1, **SMALL)
    tr = Trainer(config)
    hyper = Hyper.create(support.joint(3))  # S_R = 11ᵀ: each term is the product of all 3 ratios
    state = jax.jit(tr.init)(jax.random.PRNGKey(0), hyper)
    jax.block_until_ready(jax.jit(tr.chunk)(state, hyper))
    assert len(full) == 1 and len(rows) == 2 * 2  # epochs × minibatches
    transitions = {tuple(row) for row in full[0]}
    assert len(transitions) == 4 * 8  # E × T distinct transitions
    for minibatch in rows:
        assert minibatch.shape == (4 * 8 // 2, 2 * 3)
        # each row (advantages and old log-probs of the 3 agents) is one transition, whole
        assert all(tuple(row) in transitions for row in minibatch)
    seen = np.concatenate(rows[:2])  # one epoch's minibatches cover every transition once
    assert sorted(map(tuple, seen)) == sorted(transitions)


def test_the_entropy_coefficient_reaches_the_trained_update():
    config = Config(env="MPE_simple_spread_v3", updates_per_chunk=1, **SMALL)
    tr = trainer(config)
    hyper = Hyper.stack([Hyper.create(support.mappo(3), ent_coef=c) for c in (0.0, 0.0, 1.0)])
    keys = jnp.stack([jax.random.PRNGKey(0)] * 3)
    state, metrics = tr.chunk_runs(tr.init_runs(keys, hyper), hyper)
    params = [jax.tree.map(lambda x: np.asarray(x[r]), state.params) for r in range(3)]
    same = lambda a, b: all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    assert same(params[0], params[1])  # the same run twice: identical
    assert not same(params[0], params[2])  # ent_coef changed the update
    # and the logged loss holds the term: loss = policy + vf · value − ent_coef · entropy
    m = {k: np.asarray(v) for k, v in metrics.items()}
    vf = float(Hyper.create(support.mappo(3)).vf_coef)
    for r, c in enumerate((0.0, 0.0, 1.0)):
        np.testing.assert_allclose(m["loss"][r], m["policy_loss"][r] + vf * m["value_loss"][r] - c * m["entropy"][r],
                                   rtol=1e-5, atol=1e-6)
