"""The lists form of a state-dependent support: a cost per agent that does not grow with N.

Modules under test: ``jaxpo.envs.base`` (``coupling_lists``, ``interaction_lists``),
wireless's ``interaction_lists``, ``jaxpo.core.state_supports`` (``reach_tables``,
``reach_in_state``, ``restricted_lists``), ``jaxpo.core.sparse.aggregate`` with one weight
set per entry, and ``jaxpo.program.learner`` (which form a run takes). Exact against the
dense form, state by state; the learner's two forms against each other on one rollout.
"""

import csv

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core import losses, sparse, state_supports, support
from jaxpo.envs import Env, make
from jaxpo.program.config import Config, Hyper
from jaxpo.program.learner import Learner
from jaxpo.envs.wireless import WirelessAccess


class Uncoupled(WirelessAccess):
    """Wireless that reports a per-state graph (every pair holding a packet) but no fixed coupling."""

    @property
    def coupling(self):
        return None

    def interaction(self, state):
        holding = state.queue.any(axis=1)
        return (holding[:, None] & holding[None, :]) | jnp.eye(self.num_agents, dtype=bool)


def random_graphs(rng, n, states, density=0.3):
    """A directed fixed graph G [N, N] (diagonal set) and subgraphs G(s) ⊆ G [S, N, N]."""
    fixed = (rng.uniform(size=(n, n)) < density) | np.eye(n, dtype=bool)
    return fixed, fixed & (rng.uniform(size=(states, n, n)) < 0.6)


class Graph(Env):
    """A fixed coupling graph, to read its lists through the Env base class."""

    num_agents = 8

    def __init__(self, coupling):
        self._graph = coupling

    @property
    def coupling(self):
        return self._graph


@pytest.mark.parametrize("name, kwargs", [("wireless", {"num_users": 7}), ("wireless", {"num_users": 9, "layout": "grid"}),
                                          ("public_goods", {}), ("traffic_grid", {})])
def test_coupling_lists_are_the_row_lists_of_coupling(name, kwargs):
    env = make(name, **kwargs)
    np.testing.assert_array_equal(env.coupling_lists, sparse.from_dense(env.coupling).index)
    assert env.coupling_lists.dtype == np.int32


def test_coupling_lists_of_a_directed_graph_and_of_none():
    fixed, _ = random_graphs(np.random.default_rng(1), 8, 0)
    lists = Graph(fixed.astype(np.int32)).coupling_lists
    for i in range(8):  # row i: who can change agent i's reward, ascending, then i again
        members = np.flatnonzero(fixed[i])
        np.testing.assert_array_equal(lists[i, :len(members)], members)
        assert (lists[i, len(members):] == i).all()
    assert Graph(None).coupling_lists is None and Graph(None).interaction_lists(None) is None


def test_wireless_reports_its_graph_on_the_lists_as_the_base_class_reads_it():
    for layout, n in (("line", 6), ("grid", 9)):
        env = make("wireless", num_users=n, layout=layout, arrival_prob=0.4)
        member = np.arange(env.coupling_lists.shape[1]) < np.count_nonzero(env.coupling, axis=1)[:, None]
        for seed in range(12):
            state, _ = env.reset(jax.random.PRNGKey(seed))
            fast, read = env.interaction_lists(state), Env.interaction_lists(env, state)
            np.testing.assert_array_equal(np.asarray(fast)[member], np.asarray(read)[member])


@pytest.mark.parametrize("hops", [0, 1, 2, 3, 6])
def test_the_lists_form_is_the_dense_form_state_by_state(hops):
    """Random directed G and G(s) ⊆ G; S_A random weights, dense and as lists; the
    padding flags random too (they must not matter). Equal to the bit."""
    rng = np.random.default_rng(hops)
    n = 9
    fixed, graphs = random_graphs(rng, n, 16)
    env = Graph(fixed.astype(np.int32))
    lists = env.coupling_lists  # [N, K]
    flags = np.take_along_axis(graphs, np.broadcast_to(lists, (16, *lists.shape)), axis=2)  # [S, N, K]
    padding = np.arange(lists.shape[1]) >= fixed.sum(axis=1)[:, None]
    flags = np.where(padding, rng.uniform(size=flags.shape) < 0.5, flags)
    S_A = (rng.uniform(size=(n, n)) * (rng.uniform(size=(n, n)) < 0.7)).astype(np.float32)
    tables = state_supports.reach_tables(lists, hops)
    expected = np.asarray(state_supports.restricted_to_state(jnp.asarray(S_A), jnp.asarray(graphs), hops))
    for form in (jnp.asarray(S_A), jax.tree.map(jnp.asarray, sparse.from_dense(S_A))):
        got = state_supports.restricted_lists(form, jnp.asarray(flags), tables)
        assert got.weight.shape == (16, n, tables.index.shape[1])
        np.testing.assert_array_equal(got.to_dense(), expected)
    assert 0 < (expected > 0).mean() < (S_A > 0).mean()  # the states cut some credit, not all


def test_reach_tables_hold_each_agents_khop_neighbourhood_of_the_fixed_graph():
    fixed, _ = random_graphs(np.random.default_rng(4), 10, 0, density=0.2)
    tables = state_supports.reach_tables(Graph(fixed.astype(np.int32)).coupling_lists, 2)
    S_A = support.khop(fixed, 2).S_A
    for i in range(10):
        np.testing.assert_array_equal(tables.index[i][tables.member[i]], np.flatnonzero(S_A[i]))
    # every fixed edge inside a row's neighbourhood is addressed; nothing else is
    n, k = fixed.shape[0], Graph(fixed.astype(np.int32)).coupling_lists.shape[1]
    for i, q, p in np.ndindex(tables.edge.shape):
        source, target = tables.index[i, q], tables.index[i, p]
        assert (tables.edge[i, q, p] < n * k) == bool(fixed[target, source])


def test_lists_with_a_weight_set_per_entry_aggregate_as_each_entrys_matrix():
    rng = np.random.default_rng(5)
    with jax.enable_x64(True):
        index = np.stack([np.sort(rng.choice(6, 3, replace=False)) for _ in range(6)]).astype(np.int32)
        lists = sparse.NeighbourLists(index=index, weight=rng.normal(size=(5, 4, 6, 3)))
        adv = rng.normal(size=(5, 4, 6))
        expected = np.einsum("teik,teik->tei", adv[..., index], lists.weight)
        np.testing.assert_allclose(losses.aggregate_advantages(adv, lists), expected, rtol=1e-12)
        with pytest.raises(ValueError, match=r"weights per entry must be \[\.\.\., N, K\]"):
            losses.aggregate_advantages(adv[:2], lists)


def wireless_learner(**kwargs) -> Learner:
    return Learner(Config(env="wireless", env_kwargs={"num_users": 16, "layout": "grid"}, num_envs=3, num_steps=8,
                          num_minibatches=2, num_epochs=1, hidden=(8,), updates_per_chunk=1, interaction_hops=2,
                          **kwargs))


def test_the_learner_takes_either_form_to_the_same_update():
    """Wireless 4×4 with interaction_hops = 2 and mappo's ones, dense and as lists: the
    same rollout, the same per-state supports (to the bit), the same advantages, and the
    same parameters after a train step (to float32 rounding)."""
    learner = wireless_learner()
    dense, lists = Hyper.create(support.mappo(16)), Hyper.create(support.mappo(16), support_form="sparse")
    state = learner.init(jax.random.PRNGKey(5), dense)
    (_, traj_d, data_d), (_, traj_l, data_l) = learner.collect(state, dense), learner.collect(state, lists)
    assert traj_d.interaction.shape == (8, 3, 16, 16) and traj_l.interaction.shape == (8, 3, 16, 9)
    np.testing.assert_array_equal(traj_d.action, traj_l.action)
    S_dense = np.asarray(learner.advantage_support(dense, traj_d))
    np.testing.assert_array_equal(learner.advantage_support(lists, traj_l).to_dense(), S_dense)
    assert 0 < S_dense.mean() < 1
    np.testing.assert_allclose(data_l[1], data_d[1], rtol=1e-5, atol=1e-6)
    (params_d, _, _), _ = learner.update(state, data_d, jax.random.PRNGKey(6), dense)
    (params_l, _, _), _ = learner.update(state, data_l, jax.random.PRNGKey(6), lists)
    for a, b in zip(jax.tree.leaves(params_d), jax.tree.leaves(params_l)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_lists_need_a_fixed_coupling_to_sit_on():
    learner = Learner(Config(env=f"{__name__}:Uncoupled", env_kwargs={"num_users": 4}, num_envs=2, num_steps=4,
                             num_minibatches=1, hidden=(8,), interaction_hops=1))
    hyper = Hyper.create(support.mappo(4), support_form="sparse")
    state = jax.eval_shape(learner.init, jax.random.PRNGKey(0), hyper)
    with pytest.raises(ValueError, match="fixed coupling graph.*support_form='dense'"):
        jax.eval_shape(learner.step, state, hyper)
    dense = Hyper.create(support.mappo(4))  # the dense form needs none
    jax.eval_shape(learner.step, jax.eval_shape(learner.init, jax.random.PRNGKey(0), dense), dense)


def test_the_lists_forms_cost_per_agent_does_not_grow_with_n():
    """XLA's count of the compiled per-state support, per agent: the same flops at 64,
    256 and 1024 wireless users (κ = 2); the dense form's grow with N²."""
    def per_agent(n, form):
        env = make("wireless", num_users=n)
        flags = jax.ShapeDtypeStruct((8, 4, n, env.coupling_lists.shape[1]), bool)
        if form == "lists":
            tables = state_supports.reach_tables(env.coupling_lists, 2)
            S_A = sparse.from_dense(support.khop(env.coupling, 2).S_A)
            fn = jax.jit(lambda S, f: state_supports.restricted_lists(S, f, tables).weight)
        else:
            S_A, flags = jnp.ones((n, n)), jax.ShapeDtypeStruct((8, 4, n, n), bool)
            fn = jax.jit(lambda S, g: state_supports.restricted_to_state(S, g, 2))
        return fn.lower(S_A, flags).compile().cost_analysis()["flops"] / n

    lists = [per_agent(n, "lists") for n in (64, 256, 1024)]
    assert lists[0] > 0 and lists == [lists[0]] * 3
    dense = [per_agent(n, "dense") for n in (32, 64)]
    assert dense[1] > 3.5 * dense[0] and dense[0] > 10 * lists[0]


def test_a_khop_run_of_64_users_trains_on_each_states_graph_through_the_cli(tmp_path):
    """64 users: khop(1) is stored as neighbour lists ("auto"), so the run takes the lists
    form, and trains."""
    from jaxpo import cli

    code = cli.main(["train", "--env", "wireless", "--env-arg", "num_users=64", "--preset", "khop", "--kappa", "1",
                     "--interaction-hops", "1", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2",
                     "--hidden", "8", "--updates-per-chunk", "2", "--steps", "128", "--seeds", "2", "--out",
                     str(tmp_path), "--name", "lists", "--no-progress"])
    assert code == 0
    assert isinstance(Hyper.create(support.khop(make("wireless", num_users=64).coupling, 1)).S_A,
                      sparse.NeighbourLists)
    rows = list(csv.DictReader(open(tmp_path / "lists" / "metrics.csv")))
    assert len(rows) == 2 * 2 and all(np.isfinite(float(row["loss"])) for row in rows)
