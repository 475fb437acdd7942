"""Support matrices as padded neighbour lists: O(N·K) aggregation instead of O(N²).

A support matrix M ``[N, N]`` with at most K non-zeros per list (a row of S_A, a
column of S_R) is stored as ``NeighbourLists``:

    index  int32   [..., N, K]   the non-zero positions of list i, ascending, then padding
    weight float32 [..., N, K]   their values; padding has weight 0 and index i

and applied as a gather and a sum over K (``aggregate``):

    y[..., i] = Σ_k weight[i, k] · x[..., index[i, k]]

* ``by_column=False`` (S_A): list i is row i, ``M[i, index[i, k]] = weight[i, k]``, so
  ``y = M x``, i.e. ``Â_i = Σ_j S_A[i, j] A_j``.
* ``by_column=True`` (S_R): list i is column i, ``M[index[i, k], i] = weight[i, k]``, so
  ``y = Mᵀ x``, i.e. ``log ρ̄_i = Σ_k S_R[k, i] log ρ_k``.

Both leaves are traced (``Hyper`` leaves), so supports with different patterns but the
same K share one compiled program; ``stack`` pads K to the batch's largest. The form is
chosen per matrix by ``choose_form``: ``"auto"`` takes the sparse form when
N ≥ ``SPARSE_MIN_AGENTS`` (32) and K ≤ N · ``SPARSE_MAX_FILL`` (N / 16): khop on a ring or
grid, ippo and S_R = I at scale; the dense ``[N, N]`` array otherwise (mappo, joint,
happo's S_R, wide khop, any small N); ``"dense"`` / ``"sparse"`` force one. Both forms
are exact: a list holds every non-zero of its row (column), and padding adds ``0 · x_i``;
they differ only in the order of the float32 sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

SupportForm = Literal["auto", "dense", "sparse"]
SUPPORT_FORMS: tuple[str, ...] = get_args(SupportForm)
# "auto" rule, measured on CPU (gradient of both aggregations over 65k agent entries,
# vmapped over one run): the gather costs about as much per list entry as the dense
# product per 16 columns, so the lists win when K <= N / 16; below 32 agents the dense
# product is cheap either way.
SPARSE_MIN_AGENTS = 32
SPARSE_MAX_FILL = 1 / 16


@struct.dataclass
class NeighbourLists:
    """A support matrix ``[..., N, N]`` as padded neighbour lists (module docstring).

    Attributes:
      index: int32 ``[..., N, K]``, positions in ``[0, N)``.
      weight: float32 ``[..., N, K]``, 0 on padding (with more leading axes than
        ``index``: one matrix per leading entry on the same lists; ``shape`` is then
        ``index``'s).
      by_column: static; lists are columns (S_R's use) rather than rows (S_A's).
    """

    index: Any
    weight: Any
    by_column: bool = struct.field(pytree_node=False, default=False)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape ``[..., N, N]`` of the matrix it stands for (as a dense array's)."""
        shape = tuple(np.shape(self.index))
        return shape[:-1] + (shape[-2],)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def width(self) -> int:
        """K, the list length."""
        return int(np.shape(self.index)[-1])

    def to_dense(self) -> np.ndarray:
        """The matrix as float32 numpy ``[..., N, N]`` (host side)."""
        weight = np.asarray(self.weight, np.float32)
        index = np.broadcast_to(np.asarray(self.index), weight.shape)  # one index set for every weight set
        *lead, n, k = index.shape
        out = np.zeros((int(np.prod(lead, dtype=np.int64)), n, n), np.float32)
        b = np.arange(out.shape[0])[:, None, None]
        np.add.at(out, (b, np.arange(n)[None, :, None], index.reshape(-1, n, k)), weight.reshape(-1, n, k))
        out = out.reshape(*lead, n, n)
        return np.swapaxes(out, -1, -2) if self.by_column else out


def from_dense(matrix: Any, by_column: bool = False, width: int | None = None) -> NeighbourLists:
    """Neighbour lists of a float ``[N, N]`` matrix (host side, numpy leaves).

    Args:
      matrix: ``[N, N]`` array.
      by_column: list the columns (for S_R) instead of the rows (for S_A).
      width: K; default the largest count of non-zeros in a list (at least 1). A
        larger K (up to N) pads; a smaller one raises ValueError.
    """
    m = np.asarray(matrix, np.float32)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"matrix must be a square [N, N] array, got shape {m.shape}")
    lists = m.T if by_column else m
    n = lists.shape[0]
    size = np.count_nonzero(lists, axis=1)
    need = max(int(size.max(initial=0)), 1)
    if width is None:
        width = need
    elif isinstance(width, bool) or not isinstance(width, (int, np.integer)) or not need <= width <= n:
        raise ValueError(f"width must be an int in [{need}, {n}] (at least the most non-zeros in one list), "
                         f"got {width!r}")
    order = np.argsort(lists == 0, axis=1, kind="stable")[:, :width]  # non-zeros first, ascending
    member = np.arange(width) < size[:, None]
    index = np.where(member, order, np.arange(n)[:, None]).astype(np.int32)
    weight = np.where(member, np.take_along_axis(lists, order, axis=1), 0.0)
    return NeighbourLists(index=index, weight=weight.astype(np.float32), by_column=by_column)


def choose_form(matrix: Any, form: str = "auto", by_column: bool = False) -> np.ndarray | NeighbourLists:
    """``matrix [N, N]`` in the requested form: a float32 numpy array (dense) or
    ``NeighbourLists`` (sparse); ``"auto"`` applies the rule of the module docstring."""
    if form not in SUPPORT_FORMS:
        raise ValueError(f"support_form must be one of {SUPPORT_FORMS}, got {form!r}")
    m = np.asarray(matrix, np.float32)
    if form == "auto":
        n = m.shape[0]
        width = int(np.count_nonzero(m, axis=0 if by_column else 1).max(initial=0))
        form = "sparse" if n >= SPARSE_MIN_AGENTS and width <= SPARSE_MAX_FILL * n else "dense"
    return from_dense(m, by_column) if form == "sparse" else m


def _pad(lists: NeighbourLists, width: int) -> NeighbourLists:
    """Pads a single ``[N, K]`` list set to width ``width`` (weight 0, index = own row)."""
    index, weight = np.asarray(lists.index), np.asarray(lists.weight)
    n, extra = index.shape[0], width - index.shape[1]
    return lists.replace(
        index=np.concatenate([index, np.broadcast_to(np.arange(n, dtype=np.int32)[:, None], (n, extra))], axis=1),
        weight=np.concatenate([weight, np.zeros((n, extra), np.float32)], axis=1),
    )


def stack(matrices: Sequence[np.ndarray | NeighbourLists]) -> jax.Array | NeighbourLists:
    """Stacks R single-run matrices ``[N, N]`` into one batch ``[R, N, N]`` as jnp arrays.

    All sparse (same ``by_column``): lists padded to the largest K, ``[R, N, K]``
    leaves. All dense, or a mix (made dense): a float32 ``[R, N, N]`` array.
    """
    sparse = [isinstance(m, NeighbourLists) for m in matrices]
    if all(sparse) and len({m.by_column for m in matrices}) == 1:
        width = max(m.width for m in matrices)
        padded = [_pad(m, width) for m in matrices]
        return jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *padded)
    dense = [m.to_dense() if s else np.asarray(m, np.float32) for m, s in zip(matrices, sparse)]
    return jnp.asarray(np.stack(dense))


def aggregate(x: jax.Array, lists: NeighbourLists) -> jax.Array:
    """``y[..., i] = Σ_k weight[..., i, k] · x[..., index[i, k]]``: ``x [..., N]`` -> ``[..., N]``.

    ``lists.index`` is ``[N, K]``; ``lists.weight`` is ``[N, K]``, or ``[..., N, K]`` with
    ``x``'s leading axes for one weight set per entry (a state-dependent support,
    ``jaxpo.core.state_supports``). Both may be traced; O(N·K) per leading element.
    """
    if np.ndim(lists.index) != 2 or np.shape(lists.index)[0] != np.shape(x)[-1]:
        raise ValueError(
            f"expected neighbour lists [N, K] for x [..., N] with N = {np.shape(x)[-1]}, got index "
            f"{np.shape(lists.index)}")
    if np.ndim(lists.weight) > 2:  # one weight set per entry
        if np.shape(lists.weight) != (*np.shape(x), lists.width):
            raise ValueError(f"neighbour-list weights per entry must be [..., N, K] = "
                             f"{(*np.shape(x), lists.width)}, got {np.shape(lists.weight)}")
        gathered = jnp.take(x, lists.index, axis=-1)  # [..., N, K]
        return jnp.einsum("...nk,...nk->...n", gathered, lists.weight, precision=jax.lax.Precision.HIGHEST)
    # Agents first, so the gather copies whole rows [...] (and its transpose, in the
    # gradient, adds whole rows), and the sum over K as a contraction: on CPU, gathering
    # scalars, or reducing the gathered [N, K, ...] with a sum, measured 4-8x slower
    # inside a vmap over one run.
    rows = jnp.moveaxis(x, -1, 0)  # [N, ...]
    shape = rows.shape
    gathered = jnp.take(rows.reshape(shape[0], -1), lists.index, axis=0, mode="clip")  # [N, K, M]
    out = jnp.einsum("nkm,nk->nm", gathered, lists.weight, precision=jax.lax.Precision.HIGHEST)
    return jnp.moveaxis(out.reshape(shape), 0, -1)


__all__ = ["NeighbourLists", "SUPPORT_FORMS", "SupportForm", "aggregate", "choose_form", "from_dense", "stack"]
