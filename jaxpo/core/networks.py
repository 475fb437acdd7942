"""Actor and critic networks: feed-forward or GRU, shared or per-agent parameters,
categorical or Gaussian actions.

Both act on arrays with the agent axis second to last: observations
``[..., N, O]`` give actor outputs ``[..., N, A]`` and values ``[..., N]``.

* Shared parameters: one network for all agents; a one-hot agent id is appended to
  the input (unless ``agent_ids`` is off) so that agents can still behave differently.
* Per-agent parameters: every leaf carries a leading agent axis ``[N, ...]`` and the
  network is vmapped over the agent axis (no agent id needed).
* Recurrent (GRU) networks carry a hidden state ``[..., N, H]`` per agent. Every
  network has one: feed-forward ones a zero-width ``[..., N, 0]`` carry, so the
  rollout and the loss handle both without a branch. A step whose ``first`` flag
  is set (its observation starts an episode) sees a zero hidden state.
* Actions: discrete (masked categorical over A actions) or continuous (diagonal
  Gaussian over an A-wide action vector, state-independent learned log-std;
  masked dimensions — padding for agents with fewer — contribute nothing).
* Image observations (Overcooked) may go through a CNN torso first (``conv``): the
  flat ``[..., H·W·C]`` input is viewed as ``[..., H, W, C]`` images, convolved, and
  flattened again before the first dense layer; the rest of the network is unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Literal, Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}
Activation = Literal[tuple(ACTIVATIONS)]  # the names above, as a type
# "auto": a CNN torso when the observations are images (H, W, C), else none.
Encoder = Literal["auto", "mlp", "cnn"]

# Masked logits: large but finite, so that 0 * logit stays 0 in the entropy.
MASKED_LOGIT = -1e9


def orthogonal(scale: float = 1.0, iterations: int = 60) -> Callable[..., jax.Array]:
    """Orthogonal initialiser for ``[in, out]`` kernels (conv kernels ``[kh, kw, in, out]``
    as ``[kh·kw·in, out]``, like flax's), computed with matrix products only.

    flax's ``orthogonal`` takes a QR decomposition, which on CPU calls LAPACK through a
    multi-threaded OpenBLAS; called on XLA's thread pool next to other work (vmapped
    inits of several runs) it deadlocked here. The orthogonal polar factor of a Gaussian
    matrix is Haar distributed like QR's, and Newton–Schulz iterations
    ``X ← 1.5 X − 0.5 X XᵀX`` reach it from ``M / ‖M‖_F`` (singular values in (0, 1],
    each grows ×1.5 per step until quadratic convergence at 1).
    """

    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        if len(shape) < 2:
            raise ValueError(f"orthogonal init expects a kernel shape of 2 or more dimensions, got {shape}")
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        m = jax.random.normal(key, (rows, cols), jnp.float32)
        wide = rows < cols
        x = (m.T if wide else m) / jnp.linalg.norm(m)
        x = jax.lax.fori_loop(0, iterations, lambda _, x: 1.5 * x - 0.5 * x @ (x.T @ x), x)
        return (scale * (x.T if wide else x)).reshape(shape).astype(dtype)

    return init


def matmul(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """``x [..., D] @ kernel [D, F] -> [..., F]`` as one ``[M, D] @ [D, F]`` product over
    the flattened leading axes. XLA's CPU dot is markedly slower with several
    non-contracting axes: a 64-64 MLP on ``[1, 32768, 3, 18]`` inputs ran its forward
    pass 3.6× and its gradient 1.4× slower than on the same rows as ``[98304, 18]``."""
    return (x.reshape(-1, x.shape[-1]) @ kernel).reshape(*x.shape[:-1], kernel.shape[-1])


class _Weights(nn.Module):
    """The kernel ``[in, features]`` (and bias) of a Dense layer, returned rather than
    applied: the same names, shapes and initial values as ``nn.Dense``."""

    features: int
    use_bias: bool
    kernel_init: Callable[..., jax.Array]

    @nn.compact
    def __call__(self, in_dim: int) -> tuple[jax.Array, jax.Array]:
        kernel = self.param("kernel", self.kernel_init, (in_dim, self.features))
        if not self.use_bias:
            return kernel, jnp.zeros((self.features,), kernel.dtype)
        return kernel, self.param("bias", nn.initializers.zeros, (self.features,))


class Dense(nn.Module):
    """``nn.Dense`` (the same parameters and initial values), its product through
    ``matmul``: ``x [..., D] -> [..., features]``.

    With ``num_ids`` N > 0 it is the Dense on ``[x, one_hot(agent)]`` for inputs
    ``[..., N, D]``, without building the one-hot: ``x @ kernel[:D] + kernel[D:] + bias``
    (row i of ``kernel[D:]`` is agent i's id weights), at O(D) instead of O(D + N) work
    per agent: what keeps shared networks' cost per agent flat in N."""

    features: int
    kernel_init: Callable[..., jax.Array]
    num_ids: int = 0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        d = x.shape[-1]
        kernel = self.param("kernel", self.kernel_init, (d + self.num_ids, self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        y = matmul(x, kernel[:d])
        return (y + kernel[d:] if self.num_ids else y) + bias


class Conv(nn.Module):
    """A stride-1, same-padded ``kernel × kernel`` convolution as one matrix product over
    image patches (im2col): ``x [..., H, W, C] -> [..., H, W, features]``, with flax
    ``nn.Conv``'s parameters (``kernel [k, k, C, F]``, ``bias [F]``), initial values and
    outputs. In the Overcooked training program XLA's CPU convolution ran 8.9× slower and
    compiled 3.8× longer (``benchmarks/cnn_torso.py``; one vmapped layer's gradient alone
    ran at parity, so the cost lies in the program around it, not profiled further).
    Padding is XLA's "SAME": (k - 1) // 2 before, k // 2 after."""

    features: int
    kernel: int
    kernel_init: Callable[..., jax.Array]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k, (h, w, c) = self.kernel, x.shape[-3:]
        kernel = self.param("kernel", self.kernel_init, (k, k, c, self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + [((k - 1) // 2, k // 2)] * 2 + [(0, 0)])
        # Patch channel (i·k + j)·C + c is pixel (row + i, col + j)'s channel c: kernel[i, j, c] flattened.
        patches = jnp.concatenate([x[..., i:i + h, j:j + w, :] for i in range(k) for j in range(k)], axis=-1)
        return matmul(patches, kernel.reshape(k * k * c, self.features)) + bias


class MLP(nn.Module):
    """Orthogonally initialised MLP, ``[..., D] -> [..., out_dim]`` (PPO's usual init).

    With ``log_std`` the output is ``[..., 2 * out_dim]``: the head's output (a
    Gaussian mean) followed by a learned, state-independent log-std (init 0). With
    ``num_ids`` N > 0 the input is ``[..., N, D]`` and each agent's one-hot id is an
    implicit extra input of the first layer (``Dense``'s ``num_ids``). Layers are named
    ``Dense_0``, ``Dense_1``, … in order.

    With ``value_head`` the network is an actor-critic on one trunk (JaxMARL IPPO's
    ``ActorCritic``): the first layer is shared, then two branches of the remaining
    ``hidden[1:]`` layers — the actor's head as above and a value head (``value_Dense_*``,
    init scale 1) — whose outputs are concatenated: ``[..., out + 1]``, the value last.

    With ``conv`` (``(features, kernel)`` per layer) and ``image_shape`` (H, W, C) the
    input ``[..., H·W·C]`` first passes a CNN torso (``encode``), which the trunk shares.
    """

    hidden: Sequence[int]
    out_dim: int
    activation: str = "tanh"
    out_scale: float = 1.0
    log_std: bool = False
    num_ids: int = 0
    value_head: bool = False
    conv: tuple[tuple[int, int], ...] = ()
    image_shape: tuple[int, ...] = ()

    def encode(self, x: jax.Array) -> jax.Array:
        """The CNN torso (identity without ``conv``): ``x [..., H·W·C]``, row-major
        flattened images, viewed as ``[..., H, W, C]``; each layer a stride-1, same-padded
        ``kernel × kernel`` convolution (orthogonal init, scale √2) and the activation
        (JaxMARL's Overcooked CNN); flattened again: ``[..., H·W·features_last]``."""
        if not self.conv:
            return x
        x = x.reshape(x.shape[:-1] + tuple(self.image_shape))
        for i, (features, kernel) in enumerate(self.conv):
            layer = Conv(features, kernel, orthogonal(np.sqrt(2.0)), name=f"Conv_{i}")
            x = ACTIVATIONS[self.activation](layer(x))
        return x.reshape(x.shape[:-3] + (-1,))

    def dense(self, index: int, features: int, scale: float, prefix: str = "") -> nn.Module:
        """Layer ``index`` of a branch (0 = the input layer, which sees the agent ids)."""
        ids = self.num_ids if index == 0 else 0
        return Dense(features, orthogonal(scale), ids, name=f"{prefix}Dense_{index}")

    def layers(self, x: jax.Array, start: int, stop: int | None = None, prefix: str = "") -> jax.Array:
        """Hidden layers ``start`` … ``stop - 1`` (default: to the last) of a branch."""
        for i, width in enumerate(self.hidden[start:stop], start=start):
            x = ACTIVATIONS[self.activation](self.dense(i, width, np.sqrt(2.0), prefix)(x))
        return x

    def head(self, x: jax.Array) -> jax.Array:
        out = self.dense(len(self.hidden), self.out_dim, self.out_scale)(x)
        if not self.log_std:
            return out
        log_std = self.param("log_std", nn.initializers.zeros, (self.out_dim,))
        return jnp.concatenate([out, jnp.broadcast_to(log_std, out.shape)], axis=-1)

    def branches(self, x: jax.Array) -> jax.Array:
        """Everything after the first layer: the actor's layers and head, and with
        ``value_head`` the value branch's, concatenated. The two branches' first layers
        read the same trunk output, so they run as one product with their kernels side
        by side (one ``[H, 2W]`` matrix product is markedly faster than two ``[H, W]``)."""
        if not self.value_head:
            return self.head(self.layers(x, 1))
        actor = value = x
        if len(self.hidden) > 1:
            width, act = self.hidden[1], ACTIVATIONS[self.activation]
            weights = [_Weights(width, True, orthogonal(np.sqrt(2.0)), name=f"{prefix}Dense_1")(x.shape[-1])
                       for prefix in ("", "value_")]
            kernel, bias = (jnp.concatenate(w, axis=-1) for w in zip(*weights))
            actor, value = jnp.split(act(matmul(x, kernel) + bias), 2, axis=-1)
        out = self.head(self.layers(actor, 2))
        value = self.dense(len(self.hidden), 1, 1.0, "value_")(self.layers(value, 2, prefix="value_"))
        return jnp.concatenate([out, value], axis=-1)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.branches(self.layers(self.encode(x), 0, 1))


def reset_carry(h: jax.Array, first: jax.Array) -> jax.Array:
    """Hidden state ``h [*P, ..., H]`` zeroed where ``first bool [*P]`` is set (a new
    episode starts); e.g. ``h [E, N, H]`` with ``first [E]``."""
    return jnp.where(first.reshape(first.shape + (1,) * (h.ndim - first.ndim)), 0.0, h)


def _gru_cell(h: jax.Array, x: jax.Array, first: jax.Array, w_h: jax.Array, b_h: jax.Array):
    """One GRU step from input projections ``x [..., 3H]`` (r, z, n blocks) and the
    previous ``h [..., H]``, zeroed where ``first`` (a prefix of its batch shape):
    ``(h', (r, z, n, hn))``, the gates being what the backward pass needs."""
    h = reset_carry(h, first)
    xr, xz, xn = jnp.split(x, 3, axis=-1)
    hr, hz, hn = jnp.split(matmul(h, w_h) + b_h, 3, axis=-1)
    r, z = nn.sigmoid(xr + hr), nn.sigmoid(xz + hz)
    n = jnp.tanh(xn + r * hn)
    return (1.0 - z) * n + z * h, (r, z, n, hn)


@jax.custom_vjp
def gru_scan(w_h: jax.Array, b_h: jax.Array, h0: jax.Array, x_proj: jax.Array,
             first: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The GRU recurrence over a time-major sequence: ``w_h [H, 3H]``, ``b_h [3H]``,
    ``h0 [..., H]``, input projections ``x_proj [L, ..., 3H]``, ``first bool [L, *P]``
    -> ``(h_L [..., H], hs [L, ..., H])``.

    Its gradient is written out (``_gru_scan_bwd``) rather than left to autodiff of the
    scan, which accumulates ``∂W_h`` with a small ``[H, b] @ [b, 3H]`` product in every
    step of the reverse loop: here the loop carries only ``∂h`` and the weight gradient is
    one ``[H, L·b] @ [L·b, 3H]`` product after it. Measured on 2 CPU cores at the SMAX
    reference's minibatch (L 128, b 160, H 128): forward and backward 150 ms against
    203 ms, and the reference program's update phase 3.33 s against 3.53 s
    (``benchmarks/throughput.py --phases``). The gradients equal autodiff's to float
    rounding (tests/test_networks.py)."""
    return _gru_scan_fwd(w_h, b_h, h0, x_proj, first)[0]


def _gru_scan_fwd(w_h, b_h, h0, x_proj, first):
    def step(h, inputs):
        h, gates = _gru_cell(h, *inputs, w_h, b_h)
        return h, (h, gates)

    h_last, (hs, gates) = jax.lax.scan(step, h0, (x_proj, first))
    return (h_last, hs), (w_h, h0, hs, first, gates)


def _gru_scan_bwd(saved, cotangents):
    w_h, h0, hs, first, (r, z, n, hn) = saved
    d_last, d_hs = cotangents
    h_in = reset_carry(jnp.concatenate([h0[None], hs[:-1]]), first)  # [L, ..., H]: what each step read
    w_t = w_h.T

    def step(dh, inputs):  # dh: ∂loss/∂h' of this step, from later steps
        d_out, h_in, r, z, n, hn, first = inputs
        dh = dh + d_out
        d_xn = dh * (1.0 - z) * (1.0 - n * n)
        d_xz = dh * (h_in - n) * z * (1.0 - z)
        d_xr = d_xn * hn * r * (1.0 - r)
        d_gates = jnp.concatenate([d_xr, d_xz, d_xn * r], axis=-1)  # ∂ of h_in @ w_h + b_h
        dh_in = dh * z + matmul(d_gates, w_t)
        return reset_carry(dh_in, first), (d_gates, jnp.concatenate([d_xr, d_xz, d_xn], axis=-1))

    d_h0, (d_gates, d_x) = jax.lax.scan(step, d_last, (d_hs, h_in, r, z, n, hn, first), reverse=True)
    rows = lambda x: x.reshape(-1, x.shape[-1])  # [L·b, ·]
    d_w = rows(h_in).T @ rows(d_gates)
    return d_w, rows(d_gates).sum(0), d_h0, d_x, None


gru_scan.defvjp(_gru_scan_fwd, _gru_scan_bwd)


class GRU(nn.Module):
    """flax's ``GRUCell`` run over a time-major sequence, with the same parameters
    (``ir, iz, in`` input and ``hr, hz, hn`` recurrent Dense layers) and equations:

        r = σ(W_ir x + b_ir + W_hr h),  z = σ(W_iz x + b_iz + W_hz h),
        n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)),  h' = (1 − z) ⊙ n + z ⊙ h

    ``(h0 [..., H], xs [L, ..., D], first bool [L, *P]) -> (h_L [..., H], hs [L, ..., H])``,
    h zeroed before every step whose ``first`` is set. Why not ``nn.scan`` of the cell:
    the input projections of all L steps are one ``[D, 3H]`` matrix product before the
    loop, and the loop body one ``[H, 3H]`` product instead of six small ones — a scan
    iteration's work, forward and backward, is what recurrent training spends its time
    on (``gru_scan``, whose gradient is written out for the same reason).
    """

    features: int
    kernel_init: Callable[..., jax.Array]
    recurrent_kernel_init: Callable[..., jax.Array]

    @nn.compact
    def __call__(self, h: jax.Array, xs: jax.Array, first: jax.Array) -> tuple[jax.Array, jax.Array]:
        d, hidden = xs.shape[-1], self.features
        weights = lambda name, init, bias, width: _Weights(hidden, bias, init, name=name)(width)
        w_i, b_i = zip(*(weights(g, self.kernel_init, True, d) for g in ("ir", "iz", "in")))
        w_h, b_h = zip(*(weights(g, self.recurrent_kernel_init, g == "hn", hidden) for g in ("hr", "hz", "hn")))
        x_proj = matmul(xs, jnp.concatenate(w_i, axis=1)) + jnp.concatenate(b_i)  # [L, ..., 3H]
        # b_h: [0, 0, b_hn]
        return gru_scan(jnp.concatenate(w_h, axis=1), jnp.concatenate(b_h), h, x_proj, first)


class GRUNet(MLP):
    """A recurrent network over a time-major sequence, H = ``hidden[0]``:

        ``(h0 [..., H], xs [L, ..., D], first bool [L, *P]) -> (h_L [..., H], ys [L, ..., out])``

    [CNN →] Dense(H) → GRU cell → Dense(``hidden[1:]``) → head (purejaxrl's and MAPPO's
    recurrent layout: embed, recur, then feed-forward); with ``value_head`` the
    embedding and GRU are the shared trunk (JaxMARL IPPO's ``ActorCriticRNN``). The hidden state is zeroed
    before every step whose ``first`` is set (``first``'s shape is a prefix of the
    batch shape ``[...]``). Only the recurrence runs inside the scan (``GRU``); the
    layers around it see all L steps at once (a scan iteration's fixed cost dominates on CPU).
    """

    @property
    def carry_dim(self) -> int:
        return self.hidden[0]

    @nn.compact
    def __call__(self, h: jax.Array, xs: jax.Array, first: jax.Array) -> tuple[jax.Array, jax.Array]:
        # Our orthogonal init for the recurrent kernel too: flax's default takes a QR (see `orthogonal`).
        gru = GRU(self.hidden[0], orthogonal(), orthogonal(), name="GRUCell_0")
        h, ys = gru(h, self.layers(self.encode(xs), 0, 1), first)
        return h, self.branches(ys)


@dataclasses.dataclass(frozen=True)
class AgentNetwork:
    """A feed-forward or GRU network applied to every agent, with shared or per-agent parameters.

    Attributes:
        module: the per-agent ``MLP`` or ``GRUNet``.
        num_agents: N.
        in_dim: per-agent input width D (before the agent id).
        shared: one parameter set for all agents (whose first layer also sees a
            one-hot agent id when the module's ``num_ids`` = N) or a stacked set per agent.
    """

    module: MLP
    num_agents: int
    in_dim: int
    shared: bool

    @property
    def recurrent(self) -> bool:
        return isinstance(self.module, GRUNet)

    @property
    def carry_dim(self) -> int:
        """H, the per-agent hidden-state width (0 when feed-forward)."""
        return self.module.carry_dim if self.recurrent else 0

    def init(self, key: jax.Array) -> Any:
        """Parameters: a flax pytree, with a leading ``[N]`` axis when not shared."""
        n = self.num_agents if self.shared else 1  # shared: the ids need the agent axis
        if self.recurrent:  # h0 [n, H], a sequence of one step, first [1]
            args = lambda: (jnp.zeros((n, self.carry_dim)), jnp.zeros((1, n, self.in_dim)), jnp.zeros((1,), bool))
        else:
            args = lambda: (jnp.zeros((n, self.in_dim)),)
        if self.shared:
            return self.module.init(key, *args())
        return jax.vmap(lambda k: self.module.init(k, *args()))(jax.random.split(key, self.num_agents))

    def _inputs(self, x: jax.Array) -> jax.Array:
        if x.shape[-2:] != (self.num_agents, self.in_dim):
            raise ValueError(f"network input must be [..., {self.num_agents}, {self.in_dim}], got {x.shape}")
        return x

    def _apply(self, params: Any, *args: jax.Array, agent_axes: tuple | None = None) -> Any:
        """The module on arguments with an agent axis (``agent_axes``, default -2 for
        each; None for none), vmapped over agents when per-agent; outputs ``[..., N, ·]``."""
        if self.shared:
            return self.module.apply(params, *args)
        in_axes = (0,) + (agent_axes or (-2,) * len(args))
        return jax.vmap(self.module.apply, in_axes=in_axes, out_axes=-2)(params, *args)

    def _recur(self, params: Any, h0: jax.Array, xs: jax.Array, first: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Recurrent: ``h0 [..., N, H]``, ``xs [L, ..., N, D]``, ``first [L, ...]`` ->
        ``(h_L [..., N, H], ys [L, ..., N, out])``."""
        return self._apply(params, h0, self._inputs(xs), first, agent_axes=(-2, -2, None))

    def __call__(self, params: Any, x: jax.Array) -> jax.Array:
        """Feed-forward only: ``x [..., N, D] -> [..., N, out]``."""
        if self.recurrent:
            raise ValueError("a recurrent network needs its hidden state: use step() or unroll()")
        return self._apply(params, self._inputs(x))

    def step(self, params: Any, h: jax.Array, x: jax.Array, first: jax.Array) -> tuple[jax.Array, jax.Array]:
        """One step: ``h [..., N, H]``, ``x [..., N, D]``, ``first bool [...]`` ->
        ``(h' [..., N, H], y [..., N, out])``; h is zeroed first where ``first``."""
        if not self.recurrent:
            return h, self(params, x)
        h, ys = self._recur(params, h, x[None], first[None])
        return h, ys[0]

    def unroll(self, params: Any, h0: jax.Array, xs: jax.Array, first: jax.Array) -> jax.Array:
        """A sequence, time-major: ``h0 [..., N, H]``, ``xs [L, ..., N, D]``,
        ``first bool [L, ...]`` -> ``ys [L, ..., N, out]`` (a scan when recurrent)."""
        if not self.recurrent:
            return self(params, xs)
        return self._recur(params, h0, xs, first)[1]


@struct.dataclass
class MaskedDiagGaussian:
    """Diagonal Gaussian over an ``[..., A]`` action vector whose masked dimensions do not exist.

    Built on ``distrax.Normal``; a masked dimension (padding, for agents with fewer
    action dimensions) samples 0 and adds nothing to ``log_prob`` or ``entropy``.
    Batch shape ``[...]``; event shape ``[A]``. A pytree, so it vmaps like distrax's
    distributions (the rollout samples per environment).
    """

    mean: jax.Array
    log_std: jax.Array
    mask: jax.Array

    @property
    def normal(self) -> distrax.Normal:
        return distrax.Normal(self.mean, jnp.exp(self.log_std))

    def sample(self, *, seed: jax.Array) -> jax.Array:
        return jnp.where(self.mask, self.normal.sample(seed=seed), 0.0)

    def log_prob(self, action: jax.Array) -> jax.Array:
        return jnp.sum(jnp.where(self.mask, self.normal.log_prob(action), 0.0), axis=-1)

    def entropy(self) -> jax.Array:
        return jnp.sum(jnp.where(self.mask, self.normal.entropy(), 0.0), axis=-1)


Distribution = distrax.Categorical | MaskedDiagGaussian


@dataclasses.dataclass(frozen=True)
class ActorCritic:
    """Actor (categorical or Gaussian) and state-value critic for N agents.

    ``params`` is ``{"actor": ..., "critic": ...}``; a hidden state ("carry") is
    ``{"actor": [..., N, H], "critic": [..., N, H]}`` (H = 0 when feed-forward).

    With a shared trunk (``critic`` None) the actor's network is the whole
    actor-critic — one trunk, a policy and a value head (``MLP.value_head``) — so
    ``params["critic"]`` is empty, the critic reads the actor's observation and
    carries no hidden state of its own; every method below works for both layouts.
    """

    actor: AgentNetwork
    critic: AgentNetwork | None
    continuous: bool = False

    @classmethod
    def create(
        cls,
        num_agents: int,
        obs_dim: int,
        num_actions: int,
        critic_dim: int,
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        shared: bool = True,
        recurrent: bool = False,
        continuous: bool = False,
        shared_trunk: bool = False,
        agent_ids: bool = True,
        conv: Sequence[tuple[int, int]] = (),
        image_shape: Sequence[int] = (),
        critic_conv: bool = False,
    ) -> "ActorCritic":
        """``num_actions``: discrete action count, or the action vector's width when
        ``continuous``. ``shared_trunk``: one trunk for actor and critic (the critic
        then reads the actor's input: ``critic_dim`` must equal ``obs_dim``).
        ``agent_ids``: shared networks see each agent's one-hot id (false: only its input).
        ``conv``: ``(features, kernel)`` per CNN layer before the first dense layer, for
        observations that are flattened ``image_shape`` (H, W, C) images; the critic has
        its own CNN when ``critic_conv`` (it reads the same images), else none."""
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        hidden = tuple(int(h) for h in hidden)
        if not hidden or min(hidden) < 1:
            raise ValueError(f"hidden must be a non-empty sequence of positive widths, got {hidden}")
        conv = tuple((int(f), int(k)) for f, k in conv)
        image_shape = tuple(int(d) for d in image_shape)
        if conv and (len(image_shape) != 3 or int(np.prod(image_shape)) != obs_dim):
            raise ValueError(f"a CNN torso needs image_shape (H, W, C) with H·W·C = obs_dim ({obs_dim}), "
                             f"got {image_shape}")
        if critic_conv and conv and critic_dim != obs_dim:
            raise ValueError(f"critic_conv: the critic's CNN reads the observation images, so critic_dim "
                             f"({critic_dim}) must equal obs_dim ({obs_dim})")
        if shared_trunk and critic_dim != obs_dim:
            raise ValueError(f"a shared trunk reads the actor's observation, so critic_dim ({critic_dim}) "
                             f"must equal obs_dim ({obs_dim})")
        module = GRUNet if recurrent else MLP
        ids = num_agents if shared and agent_ids else 0  # one network for all agents, told apart by their ids
        # out_scale 0.01: a near-uniform initial policy (near-zero Gaussian mean).
        cnn = dict(conv=conv, image_shape=image_shape if conv else ())
        actor = module(hidden, num_actions, activation, out_scale=0.01, log_std=continuous, num_ids=ids,
                       value_head=shared_trunk, **cnn)
        critic = None if shared_trunk else module(hidden, 1, activation, out_scale=1.0, num_ids=ids,
                                                  **(cnn if critic_conv else {}))
        return cls(
            actor=AgentNetwork(actor, num_agents, obs_dim, shared),
            critic=None if critic is None else AgentNetwork(critic, num_agents, critic_dim, shared),
            continuous=continuous,
        )

    @property
    def recurrent(self) -> bool:
        return self.actor.recurrent

    @property
    def shared_trunk(self) -> bool:
        return self.critic is None

    def init(self, key: jax.Array) -> dict[str, Any]:
        key_actor, key_critic = jax.random.split(key)
        critic = {} if self.shared_trunk else self.critic.init(key_critic)
        return {"actor": self.actor.init(key_actor), "critic": critic}

    def initial_carry(self, batch_shape: Sequence[int]) -> dict[str, jax.Array]:
        """Zero hidden states ``{"actor", "critic"}: [*batch_shape, N, H]``."""
        n = self.actor.num_agents
        critic_dim = 0 if self.shared_trunk else self.critic.carry_dim
        return {
            "actor": jnp.zeros((*batch_shape, n, self.actor.carry_dim), jnp.float32),
            "critic": jnp.zeros((*batch_shape, n, critic_dim), jnp.float32),
        }

    def _split(self, out: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        """The actor network's output as ``(policy outputs [..., A or 2A], values [...] or
        None)``: with a shared trunk its last column is the value."""
        if self.shared_trunk:
            return out[..., :-1], out[..., -1]
        return out, None

    def distribution(self, out: jax.Array, action_mask: jax.Array) -> Distribution:
        """The action distribution, batch ``[...]``, from actor outputs ``out [..., A]``
        (``[..., 2A]`` when continuous) and ``action_mask bool [..., A]``.

        Discrete: masked actions get a logit of ``MASKED_LOGIT`` — zero probability,
        never sampled, nothing added to log-probabilities or entropy. Continuous: the
        mask marks which action dimensions exist.
        """
        if self.continuous:
            mean, log_std = jnp.split(out, 2, axis=-1)
            return MaskedDiagGaussian(mean, log_std, action_mask)
        return distrax.Categorical(logits=jnp.where(action_mask, out, MASKED_LOGIT))

    def step(
        self, params: dict[str, Any], carry: dict[str, jax.Array], obs: jax.Array, action_mask: jax.Array,
        critic_obs: jax.Array, first: jax.Array,
    ) -> tuple[dict[str, jax.Array], Distribution, jax.Array]:
        """One acting step: ``carry [..., N, H]``, ``obs [..., N, O]``, ``action_mask
        [..., N, A]``, ``critic_obs [..., N, C]``, ``first bool [...]`` ->
        ``(carry', distribution with batch [..., N], values [..., N])``."""
        h_actor, out = self.actor.step(params["actor"], carry["actor"], obs, first)
        out, values = self._split(out)
        h_critic = carry["critic"]
        if values is None:
            h_critic, values = self.critic.step(params["critic"], carry["critic"], critic_obs, first)
            values = values[..., 0]
        return {"actor": h_actor, "critic": h_critic}, self.distribution(out, action_mask), values

    def policy_step(self, actor_params: Any, carry: jax.Array, obs: jax.Array, action_mask: jax.Array,
                    first: jax.Array) -> tuple[jax.Array, Distribution]:
        """The actor alone, one step: ``carry [..., N, H]`` (the actor's), ``obs [..., N, O]``,
        ``action_mask [..., N, A]``, ``first bool [...]`` -> ``(carry', distribution)``."""
        carry, out = self.actor.step(actor_params, carry, obs, first)
        return carry, self.distribution(self._split(out)[0], action_mask)

    def next_value(self, params: dict[str, Any], carry: dict[str, jax.Array], critic_obs: jax.Array) -> jax.Array:
        """Value ``[..., N]`` of an observation that continues the episode whose hidden
        states are ``carry`` (``[..., N, H]`` each): the bootstrap of a truncation."""
        first = jnp.zeros(critic_obs.shape[:-2], bool)
        if self.shared_trunk:
            return self._split(self.actor.step(params["actor"], carry["actor"], critic_obs, first)[1])[1]
        return self.critic.step(params["critic"], carry["critic"], critic_obs, first)[1][..., 0]

    def unroll(
        self, params: dict[str, Any], h0: dict[str, jax.Array], obs: jax.Array, action_mask: jax.Array,
        critic_obs: jax.Array, first: jax.Array,
    ) -> tuple[Distribution, jax.Array]:
        """Time-major sequences, actor and critic together: ``h0 {"actor", "critic"}:
        [..., N, H]``, ``obs [L, ..., N, O]``, ``action_mask [L, ..., N, A]``,
        ``critic_obs [L, ..., N, C]``, ``first [L, ...]`` -> ``(distribution with batch
        [L, ..., N], values [L, ..., N])`` (a shared trunk runs once for both)."""
        out, values = self._split(self.actor.unroll(params["actor"], h0["actor"], obs, first))
        if values is None:
            values = self.critic.unroll(params["critic"], h0["critic"], critic_obs, first)[..., 0]
        return self.distribution(out, action_mask), values

    def unroll_policy(
        self, actor_params: Any, h0: jax.Array, obs: jax.Array, action_mask: jax.Array, first: jax.Array
    ) -> Distribution:
        """Time-major sequences: ``h0 [..., N, H]``, ``obs [L, ..., N, O]``, ``action_mask
        [L, ..., N, A]``, ``first [L, ...]`` -> distribution with batch ``[L, ..., N]``."""
        return self.distribution(self._split(self.actor.unroll(actor_params, h0, obs, first))[0], action_mask)

    def unroll_value(self, params: dict[str, Any], h0: dict[str, jax.Array], critic_obs: jax.Array,
                     first: jax.Array) -> jax.Array:
        """Time-major: ``h0 {"actor", "critic"}: [..., N, H]``, ``critic_obs [L, ..., N, C]``,
        ``first [L, ...]`` -> values ``[L, ..., N]``."""
        if self.shared_trunk:
            return self._split(self.actor.unroll(params["actor"], h0["actor"], critic_obs, first))[1]
        return self.critic.unroll(params["critic"], h0["critic"], critic_obs, first)[..., 0]

    def policy(self, params: dict[str, Any], obs: jax.Array, action_mask: jax.Array) -> Distribution:
        """Feed-forward: ``obs [..., N, O]``, ``action_mask bool [..., N, A]`` -> distribution
        with batch shape ``[..., N]`` (see ``distribution`` for the masks)."""
        return self.distribution(self._split(self.actor(params["actor"], obs))[0], action_mask)

    def agent_policy(
        self, agent_actor_params: Any, obs: jax.Array, action_mask: jax.Array,
        h0: jax.Array | None = None, first: jax.Array | None = None,
    ) -> Distribution:
        """One agent's policy from its slice of *per-agent* actor parameters.

        ``agent_actor_params``: ``params["actor"]`` indexed at one agent (no agent axis).
        Feed-forward: ``obs [..., O]``, ``action_mask bool [..., A]`` -> distribution with
        batch shape ``[...]`` (``h0``, ``first`` ignored). Recurrent: batch-major
        sequences ``obs [b, L, O]``, ``action_mask [b, L, A]``, ``h0 [b, H]``,
        ``first bool [b, L]`` -> batch ``[b, L]``. Used by the sequential (HAPPO)
        scheme, which updates one agent at a time.
        """
        if self.actor.shared:
            raise ValueError("agent_policy needs per-agent parameters (shared=False)")
        if self.shared_trunk:
            raise ValueError("agent_policy needs separate actor and critic networks (no shared trunk)")
        apply = functools.partial(self.actor.module.apply, agent_actor_params)
        if not self.recurrent:
            return self.distribution(apply(obs), action_mask)
        time_major = lambda x: jnp.swapaxes(x, 0, 1)
        out = time_major(apply(h0, time_major(obs), time_major(first))[1])
        return self.distribution(out, action_mask)

    def value(self, params: dict[str, Any], critic_obs: jax.Array) -> jax.Array:
        """Feed-forward: ``critic_obs [..., N, C] -> values [..., N]``."""
        if self.shared_trunk:
            return self._split(self.actor(params["actor"], critic_obs))[1]
        return self.critic(params["critic"], critic_obs)[..., 0]
