"""Sparse supports (jaxpo.core.sparse): neighbour lists equal the dense matrices exactly —
round trips, aggregation against numpy, every 0/1 matrix of 2 and 3 agents, random
sparse supports, the presets — and a train run gives the same parameters in both forms."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo import Config, Hyper, train

from jaxpo.core import losses, sparse, support
from jaxpo.envs.graphs import grid, ring
from jaxpo.core.sparse import NeighbourLists

aggregate_batch = jax.jit(jax.vmap(sparse.aggregate, in_axes=(None, 0)))  # one x, R list sets


def reference(x: np.ndarray, m: np.ndarray, by_column: bool) -> np.ndarray:
    """float64 numpy: ``x @ mᵀ`` (rows: Σ_j m[i, j] x_j) or ``x @ m`` (columns: Σ_k m[k, i] x_k)."""
    m = np.asarray(m, np.float64)
    return x.astype(np.float64) @ (m if by_column else m.T)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("by_column", [False, True])
def test_every_01_matrix_of_small_n(n, by_column):
    """All 2^(n·n) 0/1 matrices: exact round trip, and the gather-sum equals the
    product exactly (integer inputs, so every float32 sum is exact)."""
    mats = np.array([np.reshape(bits, (n, n)) for bits in itertools.product([0, 1], repeat=n * n)], np.float32)
    lists = [sparse.from_dense(m, by_column, width=n) for m in mats]
    for m, lst in zip(mats, lists):
        np.testing.assert_array_equal(lst.to_dense(), m)
    stacked = jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *lists)
    x = np.arange(1, 4 * n + 1, dtype=np.float32).reshape(4, n) * np.array([1, -3, 7][:n], np.float32)
    got = np.asarray(aggregate_batch(x, stacked))
    want = np.stack([reference(x, m, by_column) for m in mats])
    np.testing.assert_array_equal(got, want)


def test_lists_layout_and_default_width():
    m = np.array([[0, 2, 0, 5], [0, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 3]], np.float32)
    lst = sparse.from_dense(m)
    assert lst.width == 3 and lst.shape == (4, 4) and lst.ndim == 2 and lst.index.dtype == np.int32
    np.testing.assert_array_equal(lst.index, [[1, 3, 0], [1, 1, 1], [0, 1, 2], [3, 3, 3]])  # padding: own row
    np.testing.assert_array_equal(lst.weight, [[2, 5, 0], [0, 0, 0], [1, 1, 1], [3, 0, 0]])
    cols = sparse.from_dense(m, by_column=True)
    assert cols.width == 2 and cols.by_column
    np.testing.assert_array_equal(cols.to_dense(), m)
    np.testing.assert_array_equal(sparse.from_dense(m, width=4).to_dense(), m)


def test_random_sparse_supports_match_dense():
    """Random non-negative weights on random sparse patterns (empty rows included):
    term advantages, term log-ratios and the loss gradient agree in both forms."""
    rng = np.random.default_rng(0)
    n, b = 40, 32
    s_a = rng.uniform(0.1, 2.0, (n, n)) * (rng.uniform(size=(n, n)) < 0.08)
    s_r = np.eye(n) + (rng.uniform(size=(n, n)) < 0.05) * (1 - np.eye(n))
    x = rng.normal(size=(b, n)).astype(np.float32)
    la, lr = sparse.from_dense(s_a), sparse.from_dense(s_r, by_column=True)
    np.testing.assert_allclose(losses.aggregate_advantages(x, la), reference(x, s_a, False), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(losses.aggregate_log_ratio(x, lr), reference(x, s_r, True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(losses.aggregate_advantages(x, la),
                               losses.aggregate_advantages(x, jnp.asarray(s_a, jnp.float32)), rtol=1e-5, atol=1e-5)

    old = rng.normal(size=(b, n)).astype(np.float32)
    adv = np.asarray(losses.aggregate_advantages(x, la))
    grad = jax.jit(jax.grad(lambda lp, S_R: losses.policy_loss(lp, old, adv, S_R, 0.2)[0]))
    new = old + 0.1 * rng.normal(size=(b, n)).astype(np.float32)
    np.testing.assert_allclose(grad(new, lr), grad(new, jnp.asarray(s_r, jnp.float32)), rtol=1e-5, atol=1e-6)


N_PRESET = 8
PRESETS = {
    "ippo": support.ippo(N_PRESET),
    "mappo": support.mappo(N_PRESET),
    "happo": support.happo(N_PRESET, seed=3),
    "joint": support.joint(N_PRESET),
    "khop": support.khop(ring(N_PRESET), 1),
}


@jax.jit
def _loss_and_grad(log_prob, old_log_prob, adv, S_A, S_R):
    def loss(lp):
        a_hat = losses.aggregate_advantages(adv, S_A)
        return losses.policy_loss(lp, old_log_prob, a_hat, S_R, 0.2)[0]

    return jax.value_and_grad(loss)(log_prob)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_dense_and_sparse_agree(name):
    sup = PRESETS[name]
    dense, lists = Hyper.create(sup, support_form="dense"), Hyper.create(sup, support_form="sparse")
    assert isinstance(lists.S_A, NeighbourLists) and isinstance(lists.S_R, NeighbourLists) and lists.S_R.by_column
    assert isinstance(dense.S_A, np.ndarray) and lists.S_A.shape == dense.S_A.shape == (N_PRESET, N_PRESET)
    np.testing.assert_array_equal(lists.S_A.to_dense(), sup.S_A)
    np.testing.assert_array_equal(lists.S_R.to_dense(), sup.S_R)
    rng = np.random.default_rng(1)
    old = rng.normal(size=(16, N_PRESET)).astype(np.float32)
    new = old + 0.05 * rng.normal(size=old.shape).astype(np.float32)
    adv = rng.normal(size=old.shape).astype(np.float32)
    loss_d, grad_d = _loss_and_grad(new, old, adv, dense.S_A, dense.S_R)
    loss_s, grad_s = _loss_and_grad(new, old, adv, lists.S_A, lists.S_R)
    np.testing.assert_allclose(loss_s, loss_d, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grad_s, grad_d, rtol=1e-5, atol=1e-7)


def test_auto_rule():
    def forms(sup):
        h = Hyper.create(sup)
        return tuple("dense" if isinstance(m, np.ndarray) else f"sparse:{m.width}" for m in (h.S_A, h.S_R))

    assert forms(support.khop(ring(64), 1)) == ("sparse:3", "sparse:1")
    assert forms(support.khop(grid(16, 16), 1)) == ("sparse:5", "sparse:1")
    assert forms(support.khop(ring(64), 2)) == ("dense", "sparse:1")  # K = 5 > 64 / 16
    assert forms(support.khop(ring(16), 1)) == ("dense", "dense")  # below SPARSE_MIN_AGENTS
    assert forms(support.mappo(64)) == ("dense", "sparse:1")
    assert forms(support.happo(64)) == ("sparse:1", "dense")
    assert forms(support.joint(64)) == ("dense", "dense")
    with pytest.raises(ValueError, match="support_form must be one of"):
        Hyper.create(support.ippo(4), support_form="csr")


def test_stack_pads_to_the_largest_list_and_densifies_a_mix():
    n = 64
    narrow, wide = Hyper.create(support.ippo(n)), Hyper.create(support.khop(ring(n), 1))
    both = Hyper.stack([narrow, wide])
    assert both.S_A.index.shape == (2, n, 3) and both.S_A.shape == (2, n, n) and np.ndim(both.S_A) == 3
    np.testing.assert_array_equal(both.S_A.index[0, :, 1:], np.broadcast_to(np.arange(n)[:, None], (n, 2)))
    np.testing.assert_array_equal(both.S_A.weight[0, :, 1:], 0.0)
    np.testing.assert_array_equal(both.S_A.to_dense(), np.stack([np.eye(n), wide.S_A.to_dense()]))
    mixed = Hyper.stack([wide, Hyper.create(support.mappo(n))])
    assert isinstance(mixed.S_A, jax.Array) and isinstance(mixed.S_R, NeighbourLists)
    np.testing.assert_array_equal(mixed.S_A, np.stack([wide.S_A.to_dense(), np.ones((n, n))]))


def test_bad_lists_are_clear_errors():
    m = np.eye(4, dtype=np.float32)
    with pytest.raises(ValueError, match="width must be an int in"):
        sparse.from_dense(np.ones((4, 4)), width=2)
    with pytest.raises(ValueError, match="matrix must be a square"):
        sparse.from_dense(np.ones((4, 3)))
    with pytest.raises(ValueError, match="S_A as neighbour lists must list its rows"):
        losses.aggregate_advantages(np.ones((2, 4)), sparse.from_dense(m, by_column=True))
    with pytest.raises(ValueError, match="S_R as neighbour lists must list its columns"):
        losses.aggregate_log_ratio(np.ones((2, 4)), sparse.from_dense(m))
    with pytest.raises(ValueError, match=r"S_A must stand for an \[N, N\] = \[3, 3\]"):
        losses.aggregate_advantages(np.ones((2, 3)), sparse.from_dense(m))


def test_training_is_the_same_in_both_forms():
    """Two runs (a khop S_A with a two-factor S_R, and ippo padded to the same K) give
    the same parameters with dense matrices and with neighbour lists."""
    n = 8
    config = Config(env="public_goods", env_kwargs={"num_agents": n}, num_envs=2, num_steps=8,
                    updates_per_chunk=1, num_epochs=1, num_minibatches=1, hidden=(8,))
    previous = np.roll(np.eye(n), 1, axis=1)  # S_R[k, k + 1] = 1: term k + 1 also carries ρ_k
    sups = [support.custom(support.khop(ring(n), 1).S_A, np.eye(n) + previous), support.ippo(n)]
    results = {}
    for form in ("dense", "sparse"):
        hyper = Hyper.stack([Hyper.create(s, support_form=form) for s in sups])
        results[form] = train(config, hyper, [0, 1], num_updates=2, progress=False)
    assert isinstance(results["sparse"].hyper.S_R, NeighbourLists)
    for d, s in zip(jax.tree.leaves(results["dense"].state.params), jax.tree.leaves(results["sparse"].state.params)):
        np.testing.assert_allclose(s, d, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results["sparse"].metrics["policy_loss"], results["dense"].metrics["policy_loss"],
                               rtol=1e-4, atol=1e-5)
