"""κ-hop supports (jaxpo.core.support) built from the environments' own coupling graphs,
and what jaxpo.envs.AutoReset passes on from the environment it wraps."""

import numpy as np

from jaxpo import envs

from jaxpo.core import support


def ring_distance(n: int) -> np.ndarray:
    i = np.arange(n)
    d = np.abs(i[:, None] - i[None, :])
    return np.minimum(d, n - d)


def test_khop_on_public_goods_ring():
    env = envs.make("public_goods", num_agents=6, radius=1)
    d = ring_distance(6)
    np.testing.assert_array_equal(env.coupling, d <= 1)
    for k in range(4):
        sup = support.khop(env.coupling, k)
        np.testing.assert_array_equal(sup.S_A, (d <= k).astype(np.float32))
        np.testing.assert_array_equal(sup.S_R, np.eye(6))
    # coupling radius 2: one hop of its coupling graph already reaches distance 2
    wide = envs.make("public_goods", num_agents=6, radius=2)
    np.testing.assert_array_equal(support.khop(wide.coupling, 1).S_A, (d <= 2).astype(np.float32))


def test_khop_on_traffic_grid():
    env = envs.make("traffic_grid", rows=2, cols=3)
    # intersections numbered row-major:  0 1 2 / 3 4 5
    one_hop = np.array(
        [
            [1, 1, 0, 1, 0, 0],
            [1, 1, 1, 0, 1, 0],
            [0, 1, 1, 0, 0, 1],
            [1, 0, 0, 1, 1, 0],
            [0, 1, 0, 1, 1, 1],
            [0, 0, 1, 0, 1, 1],
        ]
    )
    np.testing.assert_array_equal(env.coupling, one_hop)
    np.testing.assert_array_equal(support.khop(env.coupling, 0).S_A, np.eye(6))
    np.testing.assert_array_equal(support.khop(env.coupling, 1).S_A, one_hop)
    rows, cols = np.divmod(np.arange(6), 3)
    manhattan = np.abs(rows[:, None] - rows[None]) + np.abs(cols[:, None] - cols[None])
    np.testing.assert_array_equal(support.khop(env.coupling, 2).S_A, manhattan <= 2)
    np.testing.assert_array_equal(support.khop(env.coupling, 3).S_A, np.ones((6, 6)))


def test_make_support_uses_the_env_coupling():
    env = envs.make("wireless", num_users=4)
    sup = support.make_support("khop", env.num_agents, kappa=1, coupling=env.coupling)
    np.testing.assert_array_equal(sup.S_A, env.coupling)
    assert support.make_support("khop", env.num_agents, kappa=0, coupling=env.coupling).S_A.trace() == 4


def test_autoreset_passes_on_what_its_callers_use_and_nothing_else():
    cue = envs.make("memory_cue", num_agents=2)
    wrapped = envs.AutoReset(cue)
    assert (wrapped.num_agents, wrapped.obs_dim, wrapped.max_steps) == (cue.num_agents, cue.obs_dim, cue.max_steps)
    assert wrapped.reference_policy == cue.reference_policy and wrapped.obs_shape == cue.obs_shape
    assert getattr(wrapped, "render", None) is None  # memory_cue draws nothing: no render to pass on
    traffic = envs.make("traffic_grid", rows=2, cols=2)
    assert envs.AutoReset(traffic).render == traffic.render
    assert not hasattr(envs.AutoReset(traffic), "arrival_rate") and hasattr(traffic, "arrival_rate")
