"""Tests for jaxpo.support: preset matrices, khop reachability, algebra, validation."""

import collections
import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core import support as sp
from jaxpo.core.support import Support

I3 = np.eye(3, dtype=np.float32)
ONES3 = np.ones((3, 3), np.float32)


def ring(n):
    """Undirected ring adjacency [n, n]: i couples with i±1 (mod n)."""
    a = np.zeros((n, n), np.int64)
    for i in range(n):
        a[i, (i + 1) % n] = a[i, (i - 1) % n] = 1
    return a


def grid(rows, cols):
    """4-neighbour grid adjacency, node r * cols + c."""
    n = rows * cols
    a = np.zeros((n, n), bool)
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0)):
                rr, cc = r + dr, c + dc
                if 0 <= rr < rows and 0 <= cc < cols:
                    a[r * cols + c, rr * cols + cc] = True
    return a


def bfs_within(adj, k):
    """Brute force: 1[dist(i -> j) <= k] by BFS along adj[i, j] != 0 edges."""
    n = len(adj)
    out = np.zeros((n, n), np.float32)
    for s in range(n):
        dist = {s: 0}
        q = collections.deque([s])
        while q:
            u = q.popleft()
            for v in range(n):
                if adj[u][v] and v not in dist:
                    dist[v] = dist[u] + 1
                    q.append(v)
        for v, d in dist.items():
            if d <= k:
                out[s, v] = 1
    return out


# ---------------------------------------------------------------- presets


def check(sup, s_a, s_r, name):
    assert sup.name == name
    assert sup.S_A.dtype == np.float32 and sup.S_R.dtype == np.float32
    np.testing.assert_array_equal(sup.S_A, s_a)
    np.testing.assert_array_equal(sup.S_R, s_r)


@pytest.mark.parametrize("n", [1, 3, 4])
def test_ippo_mappo_joint(n):
    eye, ones = np.eye(n), np.ones((n, n))
    check(sp.ippo(n), eye, eye, "ippo")
    check(sp.mappo(n), ones, eye, "mappo")
    check(sp.joint(n), ones, ones, "joint")
    assert sp.ippo(n).num_agents == n


def test_happo_given_order():
    # Agent 2 goes first, then 0, 3, 1: S_R[k, i] = 1 iff k precedes or is i.
    sup = sp.happo(4, order=[2, 0, 3, 1])
    s_r = np.array(
        [
            [1, 1, 0, 1],
            [0, 1, 0, 0],
            [1, 1, 1, 1],
            [0, 1, 0, 1],
        ]
    )
    check(sup, np.eye(4), s_r, "happo")
    # Identity order gives the upper triangle.
    np.testing.assert_array_equal(sp.happo(3, order=np.arange(3)).S_R, np.triu(ONES3))


def test_happo_random_order_is_seeded_permutation():
    n = 7
    a, b, c = sp.happo(n, seed=3), sp.happo(n, seed=3), sp.happo(n, seed=4)
    np.testing.assert_array_equal(a.S_R, b.S_R)
    # The column sums of an order-triangular S_R are the positions 1..n: a permutation.
    np.testing.assert_array_equal(np.sort(a.S_R.sum(0)), np.arange(1, n + 1))
    order = np.argsort(a.S_R.sum(0))
    np.testing.assert_array_equal(order, np.random.default_rng(3).permutation(n))
    np.testing.assert_array_equal(sp.happo(n, order=order).S_R, a.S_R)
    assert not np.array_equal(a.S_R, c.S_R)


@pytest.mark.parametrize(
    "order", [[0, 1], [0, 1, 1], [0, 1, 3], [0.0, 1.0, 2.0], [[0, 1, 2]], ["a", "b", "c"]]
)
def test_happo_bad_order(order):
    with pytest.raises(ValueError, match=r"order must be a permutation of range\(3\)"):
        sp.happo(3, order=order)


@pytest.mark.parametrize("fn", [sp.ippo, sp.mappo, sp.joint, sp.happo])
@pytest.mark.parametrize("n", [0, -1, 2.0, True, "3"])
def test_preset_bad_n(fn, n):
    with pytest.raises(ValueError, match="n must be a positive int"):
        fn(n)


# ---------------------------------------------------------------- khop


def test_khop_ring6_hand():
    a = ring(6)
    check(sp.khop(a, 0), np.eye(6), np.eye(6), "khop(k=0)")
    expected_k1 = np.array(
        [
            [1, 1, 0, 0, 0, 1],
            [1, 1, 1, 0, 0, 0],
            [0, 1, 1, 1, 0, 0],
            [0, 0, 1, 1, 1, 0],
            [0, 0, 0, 1, 1, 1],
            [1, 0, 0, 0, 1, 1],
        ]
    )
    np.testing.assert_array_equal(sp.khop(a, 1).S_A, expected_k1)
    # k = 2: all but the antipode; k = 3 (the diameter) and beyond: everyone.
    np.testing.assert_array_equal(sp.khop(a, 2).S_A, 1 - np.roll(np.eye(6), 3, axis=1))
    np.testing.assert_array_equal(sp.khop(a, 3).S_A, np.ones((6, 6)))
    np.testing.assert_array_equal(sp.khop(a, 100).S_A, np.ones((6, 6)))


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_khop_matches_bfs(k):
    for adj in (ring(6), grid(2, 3)):
        sup = sp.khop(adj, k)
        np.testing.assert_array_equal(sup.S_A, bfs_within(adj, k))
        np.testing.assert_array_equal(sup.S_R, np.eye(len(adj)))


def test_khop_grid_2x3_hand():
    # Nodes  0 1 2 / 3 4 5; graph distance = Manhattan distance.
    rc = np.array([(r, c) for r in range(2) for c in range(3)])
    manhattan = np.abs(rc[:, None, :] - rc[None, :, :]).sum(-1)
    for k in range(4):
        np.testing.assert_array_equal(sp.khop(grid(2, 3), k).S_A, manhattan <= k)


def test_khop_directed_and_nonbinary():
    # coupling[i, j] != 0: j's action changes i's reward. Chain 0 <- 1 <- 2 <- 3: each
    # agent's action reaches the rewards of the agents below it, which its credit sums.
    adj = np.zeros((4, 4))
    adj[0, 1] = adj[1, 2] = 2.5  # any non-zero is an edge
    adj[2, 3] = True
    adj[3, 3] = 1  # a self-loop changes nothing
    np.testing.assert_array_equal(sp.khop(adj, 1).S_A, np.eye(4) + np.eye(4, k=-1))
    np.testing.assert_array_equal(sp.khop(adj, 2).S_A, np.eye(4) + np.eye(4, k=-1) + np.eye(4, k=-2))
    np.testing.assert_array_equal(sp.khop(adj, 3).S_A, np.tril(np.ones((4, 4))))
    np.testing.assert_array_equal(sp.khop(adj, 3).S_A, bfs_within(adj != 0, 3).T)


def test_khop_ring_1024():
    n = 1024
    sup = sp.khop(ring(n), 3)
    np.testing.assert_array_equal(sup.S_A.sum(1), np.full(n, 7))
    d = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    np.testing.assert_array_equal(sup.S_A, np.minimum(d, n - d) <= 3)


@pytest.mark.parametrize(
    "adj,k,match",
    [
        (np.ones((2, 3)), 1, r"adjacency must be a square \[N, N\]"),
        (np.ones(3), 1, r"adjacency must be a square \[N, N\]"),
        (np.zeros((0, 0)), 1, r"adjacency must be a square \[N, N\] matrix with N >= 1"),
        ([[0, np.nan], [1, 0]], 1, "adjacency must be finite"),
        ([["0", "1"], ["1", "0"]], 1, "adjacency must be a numeric"),
        (ring(4), -1, "k must be an int >= 0"),
        (ring(4), 1.0, "k must be an int >= 0"),
        (ring(4), True, "k must be an int >= 0"),
    ],
)
def test_khop_bad_input(adj, k, match):
    with pytest.raises(ValueError, match=match):
        sp.khop(adj, k)


# ---------------------------------------------------------------- algebra


def test_signal_exact():
    sup = sp.custom([[1, 2], [3, 4]], [[1, 1], [0, 1]])
    # signal[k, j] = Σ_i S_R[k, i] S_A[i, j]
    np.testing.assert_array_equal(sup.signal(), [[4, 6], [3, 4]])
    assert sup.signal().dtype == np.float32


def test_canonical_algebra():
    rng = np.random.default_rng(0)
    n = 5
    s_a = rng.uniform(0, 2, (n, n)).astype(np.float32)
    s_r = np.maximum(rng.integers(0, 2, (n, n)), np.eye(n, dtype=np.int64))
    sup = sp.custom(s_a, s_r, name="r")
    can = sup.canonical()
    assert can.name == "canonical(r)"
    np.testing.assert_array_equal(can.S_R, np.eye(n))
    np.testing.assert_array_equal(can.S_A, sup.signal())
    np.testing.assert_allclose(can.signal(), sup.signal(), rtol=1e-6)
    can.validate(n)

    ip = sp.ippo(4)
    np.testing.assert_array_equal(ip.canonical().S_A, ip.S_A)
    np.testing.assert_array_equal(ip.canonical().S_R, ip.S_R)

    # Redundancy: the team sum may sit in either matrix.
    np.testing.assert_array_equal(sp.custom(ONES3, I3).signal(), sp.custom(I3, ONES3).signal())
    np.testing.assert_array_equal(sp.joint(4).signal(), 4 * np.ones((4, 4)))
    np.testing.assert_array_equal(sp.happo(4, seed=1).signal(), sp.happo(4, seed=1).S_R)
    np.testing.assert_array_equal(sp.mappo(3).signal(), ONES3)


# ---------------------------------------------------------------- construction / validation


def test_inputs_lists_numpy_jax():
    a = [[1, 0.5], [0, 1]]
    r = [[True, False], [False, True]]
    for conv in (list, np.asarray, jnp.asarray):
        sup = sp.custom(conv(a), conv(r))
        assert isinstance(sup.S_A, np.ndarray) and sup.S_A.dtype == np.float32
        np.testing.assert_array_equal(sup.S_A, a)
        np.testing.assert_array_equal(sup.S_R, np.eye(2))


def test_frozen_and_copied():
    src = np.eye(2, dtype=np.float32)
    sup = sp.custom(src, src)
    src[0, 0] = 5  # the Support keeps its own copy
    assert sup.S_A[0, 0] == 1
    with pytest.raises(ValueError):
        sup.S_A[0, 0] = 2  # read-only array
    with pytest.raises(dataclasses.FrozenInstanceError):
        sup.name = "x"
    assert sup.validate() is sup


def test_zero_advantage_row_is_fine_when_ratio_spreads_signal():
    # Term 1 carries no advantage, but agent 1's ratio also multiplies term 0.
    sup = sp.custom([[1, 0], [0, 0]], [[1, 0], [1, 1]])
    np.testing.assert_array_equal(sup.signal(), [[1, 0], [1, 0]])


NAN = float("nan")
INF = float("inf")


@pytest.mark.parametrize(
    "s_a,s_r,match",
    [
        (np.ones((2, 3)), np.ones((2, 3)), r"S_A must be a square \[N, N\] matrix, got shape \(2, 3\)"),
        (np.ones(3), np.ones(3), r"S_A must be a square"),
        (np.eye(2), np.ones((2, 2, 2)), r"S_R must be a square"),
        (np.eye(2), np.eye(3), r"S_A and S_R must have the same shape"),
        (np.zeros((0, 0)), np.zeros((0, 0)), "N >= 1 agents, got N = 0"),
        ([[1, NAN], [0, 1]], I3[:2, :2], r"S_A must be finite, got nan at \[0, 1\]"),
        (np.eye(2), [[1, 0], [INF, 1]], r"S_R must be finite, got inf at \[1, 0\]"),
        ([[1, -0.5], [0, 1]], np.eye(2), r"S_A must be non-negative, got -0.5 at \[0, 1\]"),
        (np.eye(2), [[1, 0], [-1, 1]], r"S_R must be non-negative, got -1 at \[1, 0\]"),
        (np.eye(2), [[1, 0.5], [0, 1]], r"S_R entries must be 0 or 1.*got 0.5 at \[0, 1\] \(1 such"),
        (np.eye(2), [[1, 2], [0, 1]], r"S_R entries must be 0 or 1.*got 2 at \[0, 1\]"),
        (np.diag([1, 0, 1]), I3, "agent 1 receives no learning signal"),
        (np.eye(3), np.diag([1, 1, 0]), "agent 2 receives no learning signal"),
        (np.zeros((3, 3)), I3, r"agent 0 receives no learning signal.*\[0, 1, 2\]"),
        (np.full((2, 2), 3e38), np.ones((2, 2)), "overflows float32"),
        ([["a", "b"], ["c", "d"]], np.eye(2), "S_A must be a numeric"),
        (np.eye(2), None, "S_R must be a numeric"),
        (np.eye(2), np.eye(2) * 1j, "S_R must be a numeric"),
        ([[1, 0], [0]], np.eye(2), "S_A must be a numeric"),  # ragged
    ],
)
def test_custom_bad_input(s_a, s_r, match):
    with pytest.raises(ValueError, match=match):
        sp.custom(s_a, s_r)


def test_validate_num_agents():
    sup = sp.ippo(3)
    assert sup.validate(3) is sup
    with pytest.raises(ValueError, match="environment has 4 agents"):
        sup.validate(4)
    with pytest.raises(ValueError, match="num_agents must be a positive int"):
        sup.validate(0)


def test_bad_name():
    with pytest.raises(ValueError, match="name must be a str"):
        Support(np.eye(2), np.eye(2), name=3)


def test_construction_does_not_validate_structure():
    # Documented split: construction converts, validate() checks.
    sup = Support(np.diag([1.0, 0.0]), np.eye(2))
    with pytest.raises(ValueError, match="agent 1 receives no learning signal"):
        sup.validate()


# ---------------------------------------------------------------- make_support


def test_make_support_presets():
    for name, direct in (
        ("ippo", sp.ippo(4)),
        ("mappo", sp.mappo(4)),
        ("joint", sp.joint(4)),
        ("happo", sp.happo(4, seed=5)),
    ):
        sup = sp.make_support(name, 4, seed=5, coupling=ring(4))  # coupling ignored here
        check(sup, direct.S_A, direct.S_R, name)
    check(sp.make_support("happo", 3, order=[1, 2, 0]), I3, sp.happo(3, order=[1, 2, 0]).S_R, "happo")
    # khop: kappa defaults to 1.
    np.testing.assert_array_equal(sp.make_support("khop", 6, coupling=ring(6)).S_A, bfs_within(ring(6), 1))
    np.testing.assert_array_equal(
        sp.make_support("khop", 6, kappa=2, coupling=ring(6)).S_A, bfs_within(ring(6), 2)
    )
    assert set(sp.PRESETS) == {"ippo", "mappo", "happo", "joint", "khop"}


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        (("a2c", 3), {}, "preset must be one of ippo, mappo, happo, joint, khop; got 'a2c'"),
        ((None, 3), {}, "preset must be one of"),
        (("khop", 3), {}, "preset 'khop' needs the environment's coupling graph.*declares none"),
        (("khop", 3), {"coupling": ring(4)}, r"coupling must be \[num_agents, num_agents\] = \[3, 3\]"),
        (("khop", 3), {"coupling": ring(3), "kappa": -1}, "k must be an int >= 0"),
        (("mappo", 3), {"kappa": 2}, "kappa is only used by preset 'khop'"),
        (("ippo", 3), {"order": [0, 1, 2]}, "order is only used by preset 'happo'"),
        (("happo", 3), {"order": [0, 1]}, "order must be a permutation"),
        (("ippo", 0), {}, "num_agents must be a positive int"),
    ],
)
def test_make_support_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        sp.make_support(*args, **kwargs)


# ---------------------------------------------------------------- stack / describe


def test_stack_supports():
    sups = [sp.ippo(4), sp.mappo(4), sp.happo(4, order=[3, 2, 1, 0])]
    s_a, s_r = sp.stack_supports(iter(sups))
    assert s_a.shape == s_r.shape == (3, 4, 4)
    assert s_a.dtype == s_r.dtype == np.float32
    for i, s in enumerate(sups):
        np.testing.assert_array_equal(s_a[i], s.S_A)
        np.testing.assert_array_equal(s_r[i], s.S_R)


@pytest.mark.parametrize(
    "sups,match",
    [
        ([sp.ippo(3), sp.ippo(4)], r"same number of agents N to stack, got N = \[3, 4\]"),
        ([], "non-empty"),
        ([sp.ippo(3), np.eye(3)], r"supports\[1\] must be a Support"),
        ([Support(np.zeros((2, 2)), np.eye(2))], "agent 0 receives no learning signal"),
    ],
)
def test_stack_supports_errors(sups, match):
    with pytest.raises(ValueError, match=match):
        sp.stack_supports(sups)


def test_describe_small():
    sup = sp.custom([[0.5, 2], [0, 3]], [[1, 1], [0, 1]], name="mine")
    text = sup.describe()
    assert "mine" in text and "N = 2" in text
    rows = [line.split() for line in text.splitlines()[2:4]]
    # Each row line: S_A row, S_R row, signal row (zeros as '.').
    assert rows[0] == ["0.5", "2", "1", "1", "0.5", "5"]
    assert rows[1] == [".", "3", ".", "1", ".", "3"]
    assert "S_R = I" not in text
    assert "S_R = I" in sup.canonical().describe()


def test_describe_large_summarises():
    text = sp.khop(ring(40), 3).describe()
    assert "khop(k=3)" in text and "N = 40" in text
    assert len(text.splitlines()) < 10
    assert "non-zeros/row 7..7, row sums 7..7" in text
