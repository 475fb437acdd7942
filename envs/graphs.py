"""Small graph helpers for networked environments (plain numpy, host side).

Graphs are dense 0/1 adjacency matrices ``[n, n]`` (``np.uint8``) without self
loops; ``adjacency[i, j] = 1`` is an edge i → j. Nodes of a ``rows × cols`` grid
are numbered row-major: node ``r * cols + c``.

Distances are hop counts from a breadth-first search run from every node at once
over the edge list, so the total work is O(n · edges). Unreachable pairs get :data:`UNREACHABLE`, a
large value, so ``distances <= c`` is correct without special cases.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .params import check_int

UNREACHABLE: int = int(np.iinfo(np.int32).max)
"""Distance reported by :func:`hop_distances` for pairs with no path."""


def ring(n: int) -> np.ndarray:
    """Cycle graph: node i is linked to i ± 1 (mod n). uint8 ``[n, n]``.

    n = 1 has no edges; n = 2 is a single edge.
    """
    n = check_int(n, "n", 1)
    a = np.zeros((n, n), np.uint8)
    i = np.arange(n)
    a[i, (i + 1) % n] = 1
    a[i, (i - 1) % n] = 1
    np.fill_diagonal(a, 0)  # n = 1 would otherwise link the node to itself
    return a


def grid(rows: int, cols: int) -> np.ndarray:
    """4-neighbour grid without wrap-around, nodes row-major. uint8 ``[rows*cols, rows*cols]``."""
    rows = check_int(rows, "rows", 1)
    cols = check_int(cols, "cols", 1)
    n = rows * cols
    a = np.zeros((n, n), np.uint8)
    idx = np.arange(n).reshape(rows, cols)
    right = (idx[:, :-1].ravel(), idx[:, 1:].ravel())
    down = (idx[:-1, :].ravel(), idx[1:, :].ravel())
    for u, v in (right, down):
        a[u, v] = 1
        a[v, u] = 1
    return a


def validate_adjacency(adjacency: Any, num_nodes: int | None = None, symmetric: bool = True,
                       name: str = "adjacency") -> np.ndarray:
    """Checks a user-given adjacency and returns it as uint8 ``[n, n]`` without self loops.

    Args:
      adjacency: array-like ``[n, n]`` of 0/1 (or bool) entries, n ≥ 1.
      num_nodes: the required n, or None for any.
      symmetric: require ``adjacency == adjacency.T`` (undirected graph).
      name: the parameter name used in error messages.

    Self loops (diagonal entries) are accepted and dropped: a node is at distance 0
    from itself anyway.

    Raises:
      ValueError: naming ``name`` and what was expected.
    """
    try:
        a = np.asarray(adjacency)
    except Exception as e:  # ragged lists and the like
        raise ValueError(f"{name} must be a square [n, n] array of 0/1 entries: {e}") from None
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise ValueError(f"{name} must be a square [n, n] array with n >= 1, got shape {a.shape}")
    if num_nodes is not None and a.shape[0] != num_nodes:
        raise ValueError(f"{name} must have shape [{num_nodes}, {num_nodes}] (num_agents), got {a.shape}")
    if not (a.dtype == bool or np.issubdtype(a.dtype, np.number)):
        raise ValueError(f"{name} must hold 0/1 or bool entries, got dtype {a.dtype}")
    if not np.all((a == 0) | (a == 1)):
        raise ValueError(f"{name} entries must be 0 or 1")
    a = a.astype(np.uint8)
    if symmetric and not np.array_equal(a, a.T):
        raise ValueError(f"{name} must be symmetric (an undirected graph)")
    np.fill_diagonal(a, 0)
    return a


def _bfs(a: np.ndarray, max_depth: int | None) -> np.ndarray:
    """All-sources BFS on a validated uint8 adjacency; distances > max_depth stay UNREACHABLE."""
    n = a.shape[0]
    dist = np.full(n * n, UNREACHABLE, np.int32)  # flat: pair (s, v) at s * n + v
    seen = np.zeros(n * n, bool)  # 1 byte per pair: cache-friendlier than dist for lookups
    owner = np.empty(n * n, np.int32)  # scratch for de-duplicating a level's pairs
    # Out-neighbours padded to the largest degree; padding points at the node itself,
    # which is always visited (distance 0) and so is dropped like any visited pair.
    deg = a.sum(1, dtype=np.int64)
    width = max(int(deg.max()), 1)
    order = np.argsort(a == 0, axis=1, kind="stable")[:, :width]  # neighbours first
    nbr = np.where(np.arange(width) < deg[:, None], order, np.arange(n)[:, None])
    # Frontier as flat (source, node) pairs: all sources expand together, one level per loop.
    f = np.arange(n, dtype=np.int64) * (n + 1)
    dist[f] = 0
    seen[f] = True
    depth = 0
    while f.size and (max_depth is None or depth < max_depth):
        depth += 1
        src_base = f - f % n
        f = (src_base[:, None] + nbr[f % n]).ravel()
        f = f[~seen[f]]
        # Keep one copy of each pair: whichever duplicate's write lands in `owner`.
        k = np.arange(f.size, dtype=np.int32)
        owner[f] = k
        f = f[owner[f] == k]
        dist[f] = depth
        seen[f] = True
    return dist.reshape(n, n)


def hop_distances(adjacency: Any) -> np.ndarray:
    """Hop distance ``d[i, j]`` along edges i → j. int32 ``[n, n]``.

    ``d[i, i] = 0``; pairs with no path get :data:`UNREACHABLE`. Directed graphs are
    allowed (the adjacency must still be square 0/1).
    """
    return _bfs(validate_adjacency(adjacency, symmetric=False), None)


def neighbourhood(adjacency: Any, c: int) -> np.ndarray:
    """Nodes within c hops, self included: ``1[d(i, j) <= c]``. uint8 ``[n, n]``.

    Equals ``1[(A + I)^c > 0]``; only c BFS levels are expanded.
    """
    c = check_int(c, "c", 0)
    return (_bfs(validate_adjacency(adjacency, symmetric=False), c) <= c).astype(np.uint8)


__all__ = ["UNREACHABLE", "grid", "hop_distances", "neighbourhood", "ring", "validate_adjacency"]
