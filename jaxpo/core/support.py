"""Support matrices (S_A, S_R): presets, validation, signal and canonical form.

docs/design.md §1. With N agents:

* ``S_A[i, j]`` (non-negative) is the weight of agent j's advantage in the credit of
  objective term i: ``Â_i = Σ_j S_A[i, j] · A_j``.
* ``S_R[k, i]`` (0/1) is 1 when agent k's ratio ρ_k is a factor of term i's
  importance weight: ``ρ̄_i = Π_k ρ_k^{S_R[k, i]}``. Column i lists term i's factors.
* The signal matrix ``S̃ = S_R @ S_A``: at θ = θ_old the gradient of agent k's policy
  is ``Σ_j S̃[k, j] · E[∇log π_k · A_j]``. The expected objective depends on the pair
  only through S̃, so ``canonical()`` returns the equivalent ``(S̃, I)``.

Everything here is host-side numpy (float32); the training code converts the
matrices to jnp arrays itself, so they can be traced (and vmapped over) as data.
An algorithm is a preset, i.e. a pair of matrices, never a separate code path.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal, get_args

import numpy as np

from jaxpo.core.checks import positive_int

__all__ = [
    "PRESETS",
    "Support",
    "custom",
    "happo",
    "ippo",
    "joint",
    "khop",
    "make_support",
    "mappo",
    "stack_supports",
]

Preset = Literal["ippo", "mappo", "happo", "joint", "khop"]
PRESETS: tuple[str, ...] = get_args(Preset)

# describe() prints full matrices up to this many agents, per-row summaries above.
_DESCRIBE_MAX_AGENTS = 16


def _as_matrix(x: Any, arg: str) -> np.ndarray:
    """Converts lists / numpy / jax arrays to a fresh read-only float32 numpy array.

    Only the dtype is checked here (shape checks belong to ``validate``).
    """
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as e:  # ragged lists, tracers, ...
        raise ValueError(f"{arg} must be a numeric [N, N] array, got {type(x).__name__}: {e}") from e
    if arr.dtype.kind not in "biuf":  # bool, int, uint, float; not str/object/complex
        raise ValueError(
            f"{arg} must be a numeric [N, N] array (bool, int or float), got dtype {arr.dtype}"
        )
    out = np.array(arr, dtype=np.float32, copy=True)
    out.setflags(write=False)  # Support is frozen: its matrices must not change after validation
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class Support:
    """A pair of support matrices (S_A, S_R); see the module docstring for the conventions.

    Construction converts both matrices to read-only float32 numpy arrays (lists, numpy
    or jax arrays of bool, int or float are accepted); it checks only their dtype, and
    ``validate()`` checks the structure. The presets and ``custom`` return validated
    supports. Instances are frozen and compare by identity (``eq=False``).

    Attributes:
        S_A: float32 ``[N, N]``, non-negative advantage weights; ``Â_i = Σ_j S_A[i, j] A_j``.
        S_R: float32 ``[N, N]``, 0/1; ``S_R[k, i] = 1`` iff ρ_k is a factor of term i's weight.
        name: label used in logs and ``describe()``.

    Raises:
        ValueError: if ``S_A`` or ``S_R`` is not a numeric array (ragged, string, object or
            complex input), or ``name`` is not a str.

    Examples:
        >>> import numpy as np
        >>> Support(S_A=np.ones((2, 2)), S_R=np.eye(2), name="team").validate().num_agents
        2
    """

    S_A: np.ndarray
    S_R: np.ndarray
    name: str = "custom"

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise ValueError(f"name must be a str, got {type(self.name).__name__}")
        object.__setattr__(self, "S_A", _as_matrix(self.S_A, "S_A"))
        object.__setattr__(self, "S_R", _as_matrix(self.S_R, "S_R"))

    @property
    def num_agents(self) -> int:
        """N, the number of agents (rows of ``S_A``), as an int."""
        return int(self.S_A.shape[0])

    def signal(self) -> np.ndarray:
        """The signal matrix ``S̃ = S_R @ S_A``.

        Row k holds the weights of every agent's advantage in agent k's policy gradient:
        at θ = θ_old it is ``Σ_j S̃[k, j] · E[∇log π_k · A_j]``.

        Returns:
            float32 ``[N, N]`` array ``S_R @ S_A`` (the product is accumulated in float64).

        Examples:
            >>> mappo(2).signal()
            array([[1., 1.],
                   [1., 1.]], dtype=float32)
        """
        return (self.S_R.astype(np.float64) @ self.S_A.astype(np.float64)).astype(np.float32)

    def canonical(self) -> Support:
        """The equivalent support ``(S̃, I)``: same signal, per-agent ratios only.

        The expected objective depends on ``(S_A, S_R)`` only through ``S̃ = S_R @ S_A``,
        so the canonical form trains to the same expected gradient at θ = θ_old.

        Returns:
            A new Support with ``S_A = self.signal()``, ``S_R = I`` (``[N, N]``) and name
            ``"canonical(<name>)"``; it is not validated.

        Examples:
            >>> joint(2).canonical().S_A
            array([[2., 2.],
                   [2., 2.]], dtype=float32)
        """
        return Support(
            S_A=self.signal(),
            S_R=np.eye(self.num_agents, dtype=np.float32),
            name=f"canonical({self.name})",
        )

    def validate(self, num_agents: int | None = None) -> Support:
        """Checks the structure and returns ``self``; raises ValueError naming the problem.

        Checks: both matrices 2-D, square, same shape, N ≥ 1 (and N == ``num_agents``,
        the environment's agent count, when given); all entries finite and
        non-negative; S_R entries exactly 0 or 1; every row of the signal matrix
        ``S_R @ S_A`` non-zero. Rows of S̃ index *agents*: agent k's policy gradient
        is ``Σ_j S̃[k, j] E[∇log π_k A_j]``, so a zero row k means agent k's policy
        never receives a gradient (it is not trained at all).

        Args:
            num_agents: the environment's agent count N, a positive int; None skips the
                agent-count check.

        Returns:
            ``self``, so that calls chain (``Support(...).validate()``).

        Raises:
            ValueError: if a matrix is not a square 2-D ``[N, N]`` array, the shapes differ,
                N is 0, ``num_agents`` is not a positive int or differs from N, an entry
                is not finite or is negative, an S_R entry is neither 0 nor 1, the signal
                matrix overflows float32, or a row of the signal matrix is all zero.
        """
        for arg, m in (("S_A", self.S_A), ("S_R", self.S_R)):
            if m.ndim != 2 or m.shape[0] != m.shape[1]:
                raise ValueError(f"{arg} must be a square [N, N] matrix, got shape {m.shape}")
        if self.S_A.shape != self.S_R.shape:
            raise ValueError(
                f"S_A and S_R must have the same shape [N, N], got S_A {self.S_A.shape} "
                f"and S_R {self.S_R.shape}"
            )
        n = self.num_agents
        if n == 0:
            raise ValueError("S_A and S_R must be [N, N] with N >= 1 agents, got N = 0")
        if num_agents is not None:
            num_agents = positive_int(num_agents, "num_agents")
            if n != num_agents:
                raise ValueError(
                    f"support '{self.name}' is for N = {n} agents but the environment has "
                    f"{num_agents} agents; S_A and S_R must be [{num_agents}, {num_agents}]"
                )
        for arg, m in (("S_A", self.S_A), ("S_R", self.S_R)):
            if not np.all(np.isfinite(m)):
                i, j = np.argwhere(~np.isfinite(m))[0]
                raise ValueError(f"{arg} must be finite, got {m[i, j]} at [{i}, {j}]")
            if np.any(m < 0):
                i, j = np.argwhere(m < 0)[0]
                raise ValueError(
                    f"{arg} must be non-negative, got {m[i, j]:g} at [{i}, {j}]"
                )
        bad = (self.S_R != 0) & (self.S_R != 1)
        if np.any(bad):
            i, j = np.argwhere(bad)[0]
            raise ValueError(
                f"S_R entries must be 0 or 1 (ratio k is or is not a factor of term i), "
                f"got {self.S_R[i, j]:g} at [{i}, {j}] ({int(bad.sum())} such entries)"
            )
        with np.errstate(over="ignore"):  # reported just below
            sig = self.signal()
        if not np.all(np.isfinite(sig)):
            raise ValueError("the signal matrix S_R @ S_A overflows float32; S_A weights are too large")
        dead = np.flatnonzero(~np.any(sig > 0, axis=1))
        if dead.size:
            more = f" (agents without signal: {dead[:10].tolist()}{'...' if dead.size > 10 else ''})"
            raise ValueError(
                f"agent {dead[0]} receives no learning signal: row {dead[0]} of the signal "
                f"matrix S_R @ S_A is all zero, so its policy gradient is zero{more}"
            )
        return self

    def describe(self) -> str:
        """Human-readable summary: name, S_A, S_R and the signal matrix side by side.

        Zeros print as '.'. Above 16 agents the matrices are summarised per row
        (range of non-zeros and of row sums) instead of printed. A last line notes
        when S_R = I (canonical form). Assumes a validated support.

        Returns:
            The multi-line summary, without a trailing newline.

        Examples:
            >>> print(mappo(2).describe())
            Support 'mappo': N = 2 agents
              S_A (advantage)   S_R (ratio)   signal = S_R @ S_A
              1 1               1 .           1 1
              1 1               . 1           1 1
              S_R = I: per-agent ratios (canonical form)
        """
        n = self.num_agents
        sig = self.signal()
        lines = [f"Support '{self.name}': N = {n} agents"]
        titles = ("S_A (advantage)", "S_R (ratio)", "signal = S_R @ S_A")
        mats = (self.S_A, self.S_R, sig)
        if n <= _DESCRIBE_MAX_AGENTS:
            blocks = [_format_matrix(m) for m in mats]
            widths = [max(len(t), len(b[0])) for t, b in zip(titles, blocks)]
            lines.append("  " + "   ".join(t.ljust(w) for t, w in zip(titles, widths)).rstrip())
            for r in range(n):
                lines.append("  " + "   ".join(b[r].ljust(w) for b, w in zip(blocks, widths)).rstrip())
        else:
            for t, m in zip(titles, mats):
                nnz = np.count_nonzero(m, axis=1)
                sums = m.sum(axis=1, dtype=np.float64)
                lines.append(
                    f"  {t:<20} non-zeros/row {nnz.min()}..{nnz.max()}, "
                    f"row sums {sums.min():g}..{sums.max():g}"
                )
        if np.array_equal(self.S_R, np.eye(n, dtype=np.float32)):
            lines.append("  S_R = I: per-agent ratios (canonical form)")
        return "\n".join(lines)


def _format_matrix(m: np.ndarray) -> list[str]:
    """Rows of ``m`` as right-aligned strings, zeros as '.'."""
    cells = [["." if v == 0 else f"{v:g}" for v in row] for row in m]
    w = max(len(c) for row in cells for c in row)
    return [" ".join(c.rjust(w) for c in row) for row in cells]


# ---------------------------------------------------------------- presets


def ippo(n: int) -> Support:
    """Independent PPO (IPPO): S_A = I, S_R = I (each agent its own advantage and ratio).

    Args:
        n: number of agents, a positive int.

    Returns:
        A validated Support named ``"ippo"`` with ``[n, n]`` matrices.

    Raises:
        ValueError: if ``n`` is not a positive int.
    """
    n = positive_int(n, "n")
    eye = np.eye(n, dtype=np.float32)
    return Support(S_A=eye, S_R=eye, name="ippo").validate()


def mappo(n: int) -> Support:
    """MAPPO: team advantage, per-agent ratios: S_A = 11ᵀ, S_R = I.

    Args:
        n: number of agents, a positive int.

    Returns:
        A validated Support named ``"mappo"`` with ``[n, n]`` matrices.

    Raises:
        ValueError: if ``n`` is not a positive int.
    """
    n = positive_int(n, "n")
    return Support(
        S_A=np.ones((n, n), np.float32), S_R=np.eye(n, dtype=np.float32), name="mappo"
    ).validate()


def happo(n: int, order: Sequence[int] | np.ndarray | None = None, seed: int = 0) -> Support:
    """Matrix form of HAPPO: S_A = I, S_R order-triangular.

    ``S_R[k, i] = 1`` iff k precedes i in ``order`` or k == i, so term i's weight is
    the product of the ratios of i and every agent before it. (Exact sequential HAPPO
    is an update scheme, not a matrix; see docs/design.md §1.)

    Args:
        n: number of agents, a positive int.
        order: the agent order, a permutation of ``range(n)`` as ints (shape ``[n]``,
            ``order[0]`` first); when None, it is ``np.random.default_rng(seed).permutation(n)``.
        seed: seed of the random order; used only when ``order`` is None.

    Returns:
        A validated Support named ``"happo"`` with ``[n, n]`` matrices.

    Raises:
        ValueError: if ``n`` is not a positive int, or ``order`` is not an integer
            permutation of ``range(n)``.

    Examples:
        >>> happo(3, order=[2, 0, 1]).S_R
        array([[1., 1., 0.],
               [0., 1., 0.],
               [1., 1., 1.]], dtype=float32)
    """
    n = positive_int(n, "n")
    if order is None:
        perm = np.random.default_rng(seed).permutation(n)
    else:
        arr = np.asarray(order)
        if (
            arr.shape != (n,)
            or arr.dtype.kind not in "iu"
            or not np.array_equal(np.sort(arr), np.arange(n))
        ):
            raise ValueError(f"order must be a permutation of range({n}), got {order!r}")
        perm = arr.astype(np.int64)
    pos = np.empty(n, np.int64)
    pos[perm] = np.arange(n)  # pos[k] = place of agent k in the order
    s_r = (pos[:, None] <= pos[None, :]).astype(np.float32)
    return Support(S_A=np.eye(n, dtype=np.float32), S_R=s_r, name="happo").validate()


def joint(n: int) -> Support:
    """Single-agent reduction: S_A = 11ᵀ, S_R = 11ᵀ (signal n·11ᵀ).

    Every term weighs the team advantage by the joint ratio of all agents.

    Args:
        n: number of agents, a positive int.

    Returns:
        A validated Support named ``"joint"`` with ``[n, n]`` matrices.

    Raises:
        ValueError: if ``n`` is not a positive int.
    """
    n = positive_int(n, "n")
    ones = np.ones((n, n), np.float32)
    return Support(S_A=ones, S_R=ones, name="joint").validate()


def khop(adjacency: Any, k: int) -> Support:
    """κ-hop neighbourhood advantage: S_A = 1[((A_G + I)^k)ᵀ > 0], S_R = I.

    ``S_A[i, j] = 1`` iff agent i's action reaches agent j's reward within k hops: a
    path j → … → i of at most k edges following the direction of ``adjacency``. Agent
    i's credit then sums the advantages of the agents its action can affect, which is
    the part of the team's return its policy gradient depends on (the coupling's
    transpose; the same matrix for a symmetric graph). Reachability is computed by
    repeated 0/1 matrix products (exact in float32 for N < 2^24, no overflow) and stops
    early at the fixed point, so a large k costs at most diameter-many products.

    Args:
        adjacency: ``[N, N]`` coupling graph, 0/1 or bool (any non-zero is an edge):
            ``adjacency[i, j] != 0`` means agent j's action can change agent i's reward
            (``jaxpo.envs.base.Env.coupling``). Need not be symmetric. Lists, numpy or
            jax arrays.
        k: hops, int ≥ 0 (k = 0 gives ippo's S_A = I).

    Returns:
        A validated Support named ``khop_name(k)`` (``"khop(k=<k>)"``) with ``[N, N]``
        matrices.

    Raises:
        ValueError: if ``adjacency`` is not a numeric, finite, square ``[N, N]`` array
            with N ≥ 1, or ``k`` is not an int ≥ 0.

    Examples:
        >>> khop([[0, 1, 0], [0, 0, 1], [0, 0, 0]], k=1).S_A  # 1 reaches 0's reward, 2 reaches 1's
        array([[1., 0., 0.],
               [1., 1., 0.],
               [0., 1., 1.]], dtype=float32)
    """
    a = _as_matrix(adjacency, "adjacency")
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise ValueError(f"adjacency must be a square [N, N] matrix with N >= 1, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("adjacency must be finite (0/1 or bool entries)")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be an int >= 0 (number of hops), got {k!r}")
    n = a.shape[0]
    step = ((a != 0) | np.eye(n, dtype=bool)).astype(np.float32)  # A_G + I, as 0/1
    reach = np.eye(n, dtype=np.float32)
    for _ in range(int(k)):
        nxt = ((reach @ step) > 0).astype(np.float32)
        if np.array_equal(nxt, reach):
            break  # fixed point: further hops add nothing
        reach = nxt
    # reach[j, i]: i's action reaches j's reward; agent i's credit is row i of its transpose
    return Support(S_A=np.ascontiguousarray(reach.T), S_R=np.eye(n, dtype=np.float32),
                   name=khop_name(int(k))).validate()


def khop_name(k: int) -> str:
    """The name that ``khop(G, k)`` gives its support.

    Args:
        k: the number of hops.

    Returns:
        ``"khop(k=<k>)"``, e.g. ``"khop(k=2)"`` for k = 2.
    """
    return f"khop(k={k})"


def preset_of_name(name: str) -> tuple[str, int | None] | None:
    """Parses a preset's own support name back into ``(preset, kappa)``.

    The inverse of the names the presets give: ``"mappo"`` -> ``("mappo", None)``,
    ``"khop(k=2)"`` -> ``("khop", 2)``.

    Args:
        name: a Support's ``name``.

    Returns:
        ``(preset, kappa)``: the preset (one of ``PRESETS``) and, for khop, its hop
        count (None for the other presets); None for any other name (including a
        bare ``"khop"``).
    """
    if name in PRESETS and name != "khop":
        return name, None
    match = re.fullmatch(re.escape(khop_name(0)).replace("0", r"(\d+)"), name)
    return ("khop", int(match.group(1))) if match else None


def custom(S_A: Any, S_R: Any, name: str = "custom") -> Support:
    """A validated Support from any ``[N, N]`` matrices (lists, numpy or jax arrays).

    Args:
        S_A: ``[N, N]`` non-negative advantage weights; ``Â_i = Σ_j S_A[i, j] A_j``.
        S_R: ``[N, N]`` 0/1 ratio support; ``S_R[k, i] = 1`` iff ρ_k is a factor of term i.
        name: label used in logs and ``describe()``.

    Returns:
        ``Support(S_A, S_R, name).validate()``.

    Raises:
        ValueError: if a matrix is not numeric, ``name`` is not a str, or the pair fails
            ``Support.validate`` (shape, entries, or an agent without signal).

    Examples:
        >>> custom([[1, 1], [0, 1]], [[1, 0], [0, 1]], name="leader").signal()
        array([[1., 1.],
               [0., 1.]], dtype=float32)
    """
    return Support(S_A=S_A, S_R=S_R, name=name).validate()


def make_support(
    preset: str,
    num_agents: int,
    *,
    kappa: int | None = None,
    coupling: Any = None,
    order: Sequence[int] | np.ndarray | None = None,
    seed: int = 0,
) -> Support:
    """The single entry point used by the CLI and config: a named preset for ``num_agents``.

    Args:
        preset: one of ``PRESETS``: ``"ippo"``, ``"mappo"``, ``"happo"``, ``"joint"``, ``"khop"``.
        num_agents: the environment's agent count N, a positive int.
        kappa: hops for ``"khop"``, an int ≥ 0 (None: 1); must be None for other presets.
        coupling: the environment's ``[N, N]`` coupling graph, needed by ``"khop"`` and
            ignored by the others (environments pass it whatever the preset).
        order: the agent order for ``"happo"``, a permutation of ``range(N)`` (see
            ``happo``); must be None for other presets.
        seed: seed of ``"happo"``'s random order when ``order`` is None; ignored otherwise.

    Returns:
        A Support validated against ``num_agents``, named as the preset names it
        (e.g. ``"mappo"``, ``"khop(k=2)"``).

    Raises:
        ValueError: if ``preset`` is not one of ``PRESETS``, ``num_agents`` is not a
            positive int, ``kappa`` is given for a preset other than ``"khop"`` or
            ``order`` for one other than ``"happo"``, ``"khop"`` gets no ``coupling`` or
            one that is not numeric ``[num_agents, num_agents]``, or the preset itself
            rejects its arguments (see ``happo`` and ``khop``).

    Examples:
        >>> make_support("mappo", 3).name
        'mappo'
        >>> make_support("khop", 3, kappa=2, coupling=[[0, 1, 0], [0, 0, 1], [0, 0, 0]]).name
        'khop(k=2)'
    """
    if not isinstance(preset, str) or preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}; got {preset!r}")
    num_agents = positive_int(num_agents, "num_agents")
    if kappa is not None and preset != "khop":
        raise ValueError(f"kappa is only used by preset 'khop', got kappa={kappa!r} with preset {preset!r}")
    if order is not None and preset != "happo":
        raise ValueError(f"order is only used by preset 'happo', got order with preset {preset!r}")
    if preset == "ippo":
        sup = ippo(num_agents)
    elif preset == "mappo":
        sup = mappo(num_agents)
    elif preset == "happo":
        sup = happo(num_agents, order=order, seed=seed)
    elif preset == "joint":
        sup = joint(num_agents)
    else:  # khop
        if coupling is None:
            raise ValueError(
                "preset 'khop' needs the environment's coupling graph (an [N, N] adjacency "
                "of whose actions influence whose reward), but this environment declares "
                "none; pass coupling=... (jaxpo.envs.measure_coupling(env).graph measures one) "
                "or choose ippo/mappo/happo/joint"
            )
        c = _as_matrix(coupling, "coupling")
        if c.shape != (num_agents, num_agents):
            raise ValueError(
                f"coupling must be [num_agents, num_agents] = [{num_agents}, {num_agents}] "
                f"(the environment's agent count), got shape {c.shape}"
            )
        sup = khop(c, 1 if kappa is None else kappa)
    return sup.validate(num_agents)


def stack_supports(supports: Iterable[Support]) -> tuple[np.ndarray, np.ndarray]:
    """Stacks supports for a vmapped sweep.

    Each support is validated first.

    Args:
        supports: K ≥ 1 Supports, all with the same number of agents N.

    Returns:
        ``(S_A, S_R)``: the stacked ``S_A`` and the stacked ``S_R``, each a float32
        ``[K, N, N]`` array in the order given.

    Raises:
        ValueError: if ``supports`` is empty, an element is not a Support or fails
            ``Support.validate``, or the supports differ in N.

    Examples:
        >>> S_A, S_R = stack_supports([ippo(3), mappo(3)])
        >>> S_A.shape, S_R.shape
        ((2, 3, 3), (2, 3, 3))
    """
    sups = list(supports)
    if not sups:
        raise ValueError("supports must be a non-empty sequence of Support")
    for idx, s in enumerate(sups):
        if not isinstance(s, Support):
            raise ValueError(f"supports[{idx}] must be a Support, got {type(s).__name__}")
        s.validate()
    ns = [s.num_agents for s in sups]
    if len(set(ns)) != 1:
        raise ValueError(
            f"supports must all have the same number of agents N to stack, got N = {ns}"
        )
    return np.stack([s.S_A for s in sups]), np.stack([s.S_R for s in sups])
