"""State-dependent advantage supports: ``S_A(s) = S_A ⊙ khop(G(s), κ)`` per state.

Where coupling follows the state (wireless users that both hold a packet), an environment
reports each state's graph G(s) ⊆ G, a subgraph of its fixed ``coupling`` G
(``Env.interaction``). ``Config.interaction_hops`` = κ then credits agent i, at each step
and environment, with the advantages of the agents whose rewards its action reaches
within κ hops of G(s), weighted by the run's ``S_A``. S_A(s) depends on the state alone,
never on the actions, so the canonical structure holds state by state. Two forms, as for
the fixed supports (``jaxpo.core.sparse``), both exact:

* **dense** (``restricted_to_state``): G(s) as ``[N, N]`` (``Env.interaction``), κ boolean
  matrix products per state, one ``[N, N]`` S_A(s) per state: O(κ·N³) per state.
* **lists** (``restricted_lists``): G(s) as flags on G's row lists
  (``Env.interaction_lists``, ``[N, K]``), reach followed over G's κ-hop row lists
  (``ReachTables``, K_κ agents per row, built once on the host): since G(s) ⊆ G, a state's
  κ-hop neighbourhood lies inside the fixed one. O(κ·N·K_κ²) per state — a cost per agent
  that does not grow with N — and one ``[N, K_κ]`` weight set per state.

A run takes the lists form when its S_A is neighbour lists (``Hyper.create``'s
``support_form``), the dense form otherwise (``PerState``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxpo.core import support
from jaxpo.core.sparse import NeighbourLists, from_dense
from jaxpo.envs import Env

_HIGHEST = jax.lax.Precision.HIGHEST


def khop_per_state(interaction: chex.Array, hops: int) -> chex.Array:
    """The κ-hop advantage support of each state's own coupling graph:
    ``1[((G(s) + I)^κ)ᵀ > 0]``, as ``jaxpo.core.support.khop`` builds it from a fixed graph.

    Args:
        interaction: bool ``[..., N, N]``, one graph per state (``interaction[..., i, j]``:
            agent j's action there can change agent i's reward; ``Env.interaction``).
        hops: κ, a static int ≥ 0 (κ boolean matrix products per state).

    Returns:
        float32 ``[..., N, N]``: entry ``[i, j]`` is 1 where agent i's action reaches agent
        j's reward within κ hops of that state's graph.

    Examples:
        >>> import jax.numpy as jnp
        >>> chain = jnp.array([[0, 1, 0], [0, 0, 1], [0, 0, 0]], bool)
        >>> khop_per_state(chain, 1).tolist()
        [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]
    """
    n = jnp.shape(interaction)[-1]
    step = (interaction | jnp.eye(n, dtype=bool)).astype(jnp.float32)
    reach = jnp.broadcast_to(jnp.eye(n, dtype=jnp.float32), step.shape)
    for _ in range(hops):
        reach = (jnp.matmul(reach, step, precision=_HIGHEST) > 0).astype(jnp.float32)
    return jnp.swapaxes(reach, -1, -2)


def restricted_to_state(S_A: chex.Array, interaction: chex.Array, hops: int) -> chex.Array:
    """The dense form: ``S_A ⊙ khop_per_state(interaction, κ)``, one matrix per state.

    Args:
        S_A: ``[N, N]`` dense advantage support (may be traced).
        interaction: bool ``[..., N, N]``, one coupling graph per state.
        hops: κ, a static int ≥ 0.

    Returns:
        float32 ``[..., N, N]``.

    Raises:
        ValueError: if ``S_A`` is neighbour lists (their per-state form is ``restricted_lists``).
    """
    if isinstance(S_A, NeighbourLists):
        raise ValueError("S_A is neighbour lists: their per-state support is restricted_lists, from "
                         "Env.interaction_lists")
    return S_A * khop_per_state(interaction, hops)


@dataclasses.dataclass(frozen=True)
class ReachTables:
    """Where κ hops of any G(s) ⊆ G can lead, from a fixed graph G's row lists (numpy).

    Attributes:
        index: int32 ``[N, K_κ]``: row i lists the agents whose reward agent i's action
            reaches within κ hops of G, ascending (i among them), padded with i.
        member: bool ``[N, K_κ]``: False on padding.
        edge: int32 ``[N, K_κ, K_κ]``: ``edge[i, q, p]`` is the position, in the flattened
            ``[N·K]`` flags of ``Env.interaction_lists``, of "agent ``index[i, q]``'s action
            can change agent ``index[i, p]``'s reward", or N·K (a flag that is always
            False) where G has no such edge.
        hops: κ.
    """

    index: np.ndarray
    member: np.ndarray
    edge: np.ndarray
    hops: int


def reach_tables(coupling_lists: np.ndarray, hops: int) -> ReachTables:
    """The ``ReachTables`` of κ hops over G (host side, once per program).

    Args:
        coupling_lists: int32 ``[N, K]``, G's row lists (``Env.coupling_lists``: row i, the
            agents whose action can change agent i's reward, ascending, padded with i).
        hops: κ, an int ≥ 0.

    Returns:
        ``ReachTables`` with K_κ the most agents one action reaches within κ hops of G.
    """
    lists = np.asarray(coupling_lists, np.int64)
    n, k = lists.shape
    graph = np.zeros((n, n), bool)
    graph[np.arange(n)[:, None], lists] = True
    reached = support.khop(graph, hops).S_A  # [N, N]: row i, the rewards i's action reaches in G
    index = from_dense(reached).index.astype(np.int64)  # [N, K_κ]
    member = np.arange(index.shape[1]) < np.count_nonzero(reached, axis=1)[:, None]
    # the row list of every target p, compared with every source q: [N, K_κ (q), K_κ (p), K]
    match = lists[index][:, None, :, :] == index[:, :, None, None]
    position = index[:, None, :] * k + match.argmax(axis=-1)  # the first match: padding repeats an agent
    edge = np.where(match.any(axis=-1), position, n * k).astype(np.int32)
    return ReachTables(index=index.astype(np.int32), member=member, edge=edge, hops=int(hops))


def reach_in_state(flags: chex.Array, tables: ReachTables) -> chex.Array:
    """Which agents' rewards each agent's action reaches within κ hops of each state's graph.

    Args:
        flags: bool ``[..., N, K]``, one state's graph per entry (``Env.interaction_lists``).
        tables: ``reach_tables`` of the fixed graph the flags sit on.

    Returns:
        bool ``[..., N, K_κ]``: entry ``[i, p]`` is True where agent i's action reaches agent
        ``tables.index[i, p]``'s reward within κ hops of that state's graph (False on padding).
    """
    lead = jnp.shape(flags)[:-2]
    flat = jnp.reshape(flags, (*lead, -1))
    flat = jnp.concatenate([flat, jnp.zeros((*lead, 1), bool)], axis=-1)  # the N·K slot: no edge
    step = jnp.take(flat, jnp.asarray(tables.edge), axis=-1)  # [..., N, K_κ (from q), K_κ (to p)]
    own = jnp.asarray(tables.index == np.arange(tables.index.shape[0])[:, None])
    reach = jnp.broadcast_to(own, (*lead, *tables.index.shape))
    for _ in range(tables.hops):
        reach = reach | jnp.any(reach[..., :, None] & step, axis=-2)
    return reach & jnp.asarray(tables.member)


def restricted_lists(S_A: chex.Array | NeighbourLists, flags: chex.Array, tables: ReachTables) -> NeighbourLists:
    """The lists form: ``S_A ⊙ khop(G(s), κ)`` as one weight set per state on
    ``tables.index``.

    Args:
        S_A: ``[N, N]`` advantage support, dense or neighbour lists by rows (may be traced).
        flags: bool ``[..., N, K]``, one state's graph per entry (``Env.interaction_lists``).
        tables: ``reach_tables(coupling_lists, κ)`` of the environment's fixed graph.

    Returns:
        Row ``NeighbourLists`` with ``index [N, K_κ]`` (``tables.index``) and float32
        ``weight [..., N, K_κ]``: ``S_A[i, index[i, p]]`` where agent i's action reaches that
        agent's reward within κ hops of the state's graph, 0 elsewhere. Entries of S_A
        outside G's κ-hop lists are 0 in every state (G(s) ⊆ G).
    """
    index = jnp.asarray(tables.index)
    if isinstance(S_A, NeighbourLists):  # S_A's weight at each of the tables' positions
        same = S_A.index[:, None, :] == index[:, :, None]  # [N, K_κ, K_S]
        weight = jnp.sum(jnp.where(same, S_A.weight[:, None, :], 0.0), axis=-1)
    else:
        weight = jnp.take_along_axis(jnp.asarray(S_A, jnp.float32), index, axis=1)
    return NeighbourLists(index=index, weight=weight * reach_in_state(flags, tables), by_column=False)


class PerState:
    """A run's state-dependent S_A (``Config.interaction_hops`` = κ) on one environment:
    what the rollout stores of each state, and the S_A(s) built from it. The form follows
    the run's S_A: neighbour lists take the lists form, a dense S_A the dense form.

    Args:
        env: the environment (``Env.interaction``; for the lists form also ``coupling``).
        hops: κ, an int ≥ 0.
    """

    def __init__(self, env: Env, hops: int):
        self.env, self.hops = env, hops

    @functools.cached_property
    def tables(self) -> ReachTables:
        """``reach_tables`` of the environment's fixed coupling (the lists form's).

        Raises:
            ValueError: if the environment has no fixed ``coupling``.
        """
        lists = self.env.coupling_lists
        if lists is None:
            raise ValueError(f"config.interaction_hops with an S_A of neighbour lists needs an environment with a "
                             f"fixed coupling graph (Env.coupling) for the lists to sit on; {self.env.name!r} has "
                             f"none: create the Hyper with support_form='dense'")
        return reach_tables(lists, self.hops)

    def graph(self, S_A: chex.Array | NeighbourLists) -> Callable[[Any], jax.Array]:
        """The function of one state whose value the rollout stores for ``support``:
        ``Env.interaction_lists`` (``[N, K]``) for neighbour lists, ``Env.interaction``
        (``[N, N]``) for a dense ``S_A``.

        Args:
            S_A: the run's advantage support (its type picks the form).

        Returns:
            ``state -> bool array``.

        Raises:
            ValueError: for neighbour lists on an environment without a fixed ``coupling``
                (before anything is traced).
        """
        if isinstance(S_A, NeighbourLists):
            _ = self.tables  # built, or refused, before the rollout
            return self.env.interaction_lists
        return self.env.interaction

    def support(self, S_A: chex.Array | NeighbourLists, stored: chex.Array) -> chex.Array | NeighbourLists:
        """S_A(s) of every stored state.

        Args:
            S_A: the run's advantage support, dense ``[N, N]`` or row lists.
            stored: what ``graph`` stored, bool ``[..., N, N]`` or ``[..., N, K]``.

        Returns:
            ``restricted_to_state``'s ``[..., N, N]`` or ``restricted_lists``' lists.
        """
        if isinstance(S_A, NeighbourLists):
            return restricted_lists(S_A, stored, self.tables)
        return restricted_to_state(S_A, stored, self.hops)


__all__ = ["PerState", "ReachTables", "khop_per_state", "reach_in_state", "reach_tables", "restricted_lists", "restricted_to_state"]
