"""The flax modules of one agent's network: its layers (``Dense``, ``Conv``, ``GRU``)
and the two networks built from them (``MLP``, ``GRUNet``), both made of a ``Layout``.

Every layer creates ``nn.Dense``/``nn.Conv``/``nn.GRUCell``'s parameters (names, shapes,
initial values) on every platform and computes with its platform's kernels
(``jaxpo.core.kernels``): a checkpoint trained on one platform runs on another.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.errors import ScopeParamShapeError

from jaxpo.core.kernels import for_platform

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}


def orthogonal(scale: float = 1.0, iterations: int = 60) -> Callable[..., jax.Array]:
    """Orthogonal initialiser for ``[in, out]`` kernels (conv kernels ``[kh, kw, in, out]``
    as ``[kh·kw·in, out]``, like flax's), computed with matrix products only.

    flax's ``orthogonal`` takes a QR decomposition, which on CPU calls LAPACK through a
    multi-threaded OpenBLAS; called on XLA's thread pool next to other work (vmapped
    inits of several runs) it can deadlock. The orthogonal polar factor of a Gaussian
    matrix is Haar distributed like QR's, and Newton–Schulz iterations
    ``X ← 1.5 X − 0.5 X XᵀX`` reach it from ``M / ‖M‖_F`` (singular values in (0, 1],
    each grows ×1.5 per step until quadratic convergence at 1). The same initialiser
    serves every platform, so initial parameters do not depend on where they are made.

    Args:
        scale: the gain the orthogonal matrix is multiplied by.
        iterations: Newton–Schulz steps.

    Returns:
        ``init(key, shape, dtype) -> kernel``; it raises ValueError for a shape of fewer
        than 2 dimensions.
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


def param(module: nn.Module, name: str, init: Callable[..., jax.Array], shape: Sequence[int]) -> jax.Array:
    """``module.param(name, init, shape)``, without tracing ``init`` when the parameter exists.

    On every apply, flax's ``param`` checks an existing parameter's shape by tracing its
    initialiser (``jax.eval_shape``): for ``orthogonal``, a normal draw and the
    Newton–Schulz loop, per layer, in every program that applies the network. The shape
    is known here, so it is compared directly, with flax's error.

    Args:
        module: the module, inside its compact method.
        name: the parameter's name in ``module``.
        init: ``init(key, shape) -> value``, called only when the parameter is created.
        shape: the parameter's shape.

    Returns:
        The parameter: the existing one, or ``init``'s new one.

    Raises:
        ScopeParamShapeError: flax's, if the existing parameter's shape is not ``shape``.
    """
    if not module.has_variable("params", name):
        return module.param(name, init, shape)
    value = module.get_variable("params", name)
    if np.shape(value) != tuple(shape):
        raise ScopeParamShapeError(name, module.scope.path_text, np.shape(value), tuple(shape))
    return value


class Weights(nn.Module):
    """The kernel ``[in, features]`` (and bias) of a Dense layer, returned rather than
    applied: the same names, shapes and initial values as ``nn.Dense``."""

    features: int
    use_bias: bool
    kernel_init: Callable[..., jax.Array]

    @nn.compact
    def __call__(self, in_dim: int) -> tuple[jax.Array, jax.Array]:
        kernel = param(self, "kernel", self.kernel_init, (in_dim, self.features))
        if not self.use_bias:
            return kernel, jnp.zeros((self.features,), kernel.dtype)
        return kernel, param(self, "bias", nn.initializers.zeros, (self.features,))


class Dense(nn.Module):
    """``nn.Dense`` (the same parameters and initial values): ``x [..., D] -> [..., features]``.

    With ``num_ids`` N > 0 it is the Dense on ``[x, one_hot(agent)]`` for inputs
    ``[..., N, D]``, without building the one-hot: ``x @ kernel[:D] + kernel[D:] + bias``
    (row i of ``kernel[D:]`` is agent i's id weights), at O(D) instead of O(D + N) work
    per agent: what keeps shared networks' cost per agent flat in N."""

    features: int
    kernel_init: Callable[..., jax.Array]
    num_ids: int = 0
    platform: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        d = x.shape[-1]
        kernel = param(self, "kernel", self.kernel_init, (d + self.num_ids, self.features))
        bias = param(self, "bias", nn.initializers.zeros, (self.features,))
        kernels = for_platform(self.platform)
        y = kernels.affine(x, kernel[:d], bias)
        return y + kernel[d:] if self.num_ids else y


class Conv(nn.Module):
    """A stride-1, same-padded ``kernel × kernel`` convolution, ``x [..., H, W, C] ->
    [..., H, W, features]``, with flax ``nn.Conv``'s parameters (``kernel [k, k, C, F]``,
    ``bias [F]``), initial values and outputs."""

    features: int
    kernel: int
    kernel_init: Callable[..., jax.Array]
    platform: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = param(self, "kernel", self.kernel_init, (self.kernel, self.kernel, x.shape[-1], self.features))
        bias = param(self, "bias", nn.initializers.zeros, (self.features,))
        kernels = for_platform(self.platform)
        return kernels.conv(x, kernel, bias)


class GRU(nn.Module):
    """flax's ``GRUCell`` run over a time-major sequence, with the same parameters
    (``ir, iz, in`` input and ``hr, hz, hn`` recurrent Dense layers) and equations:

        r = σ(W_ir x + b_ir + W_hr h),  z = σ(W_iz x + b_iz + W_hz h),
        n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)),  h' = (1 − z) ⊙ n + z ⊙ h

    ``(h0 [..., H], xs [L, ..., D], first bool [L, *P]) -> (h_L [..., H], hs [L, ..., H])``,
    h zeroed before every step whose ``first`` is set. The input projections of all L
    steps are one ``[D, 3H]`` product before the loop, and the loop body one ``[H, 3H]``
    product (the kernels' ``gru_scan``) instead of six small ones.
    """

    features: int
    kernel_init: Callable[..., jax.Array]
    recurrent_kernel_init: Callable[..., jax.Array]
    platform: str | None = None

    @nn.compact
    def __call__(self, h: jax.Array, xs: jax.Array, first: jax.Array) -> tuple[jax.Array, jax.Array]:
        d, hidden, kernels = xs.shape[-1], self.features, for_platform(self.platform)
        weights = lambda name, init, bias, width: Weights(hidden, bias, init, name=name)(width)
        w_i, b_i = zip(*(weights(g, self.kernel_init, True, d) for g in ("ir", "iz", "in")))
        w_h, b_h = zip(*(weights(g, self.recurrent_kernel_init, g == "hn", hidden) for g in ("hr", "hz", "hn")))
        x_proj = kernels.affine(xs, jnp.concatenate(w_i, axis=1), jnp.concatenate(b_i))  # [L, ..., 3H]
        # b_h: [0, 0, b_hn]
        return kernels.gru_scan(jnp.concatenate(w_h, axis=1), jnp.concatenate(b_h), h, x_proj, first)


@dataclasses.dataclass(frozen=True)
class Head:
    """An output branch after the trunk: its own ``hidden[1:]`` layers and an output layer.

    Attributes:
        out_dim: the output width.
        out_scale: the output layer's orthogonal init scale.
        log_std: also output a learned, state-independent log-std (init 0) per output,
            after the outputs (a Gaussian policy's mean and log-std): width ``2 * out_dim``.
        prefix: the branch's layer names' prefix (``value_`` gives ``value_Dense_1``, …).
    """

    out_dim: int
    out_scale: float = 1.0
    log_std: bool = False
    prefix: str = ""


@dataclasses.dataclass(frozen=True)
class Layout:
    """What one agent's network is made of, and how its layers are built.

    ``[CNN torso →] Dense(hidden[0]) → trunk output → each head's Dense(hidden[1:]) →
    its output layer``; the heads' outputs are concatenated in order. Layers are named
    ``Dense_0``, ``Dense_1``, … (a head's with its prefix) and ``Conv_0``, … . Orthogonal
    init (PPO's usual), scale √2 for hidden and conv layers.

    Attributes:
        hidden: the hidden layers' widths (the first is the trunk's).
        heads: the output branches: one (a policy or a value) or two (a policy and a value
            on one trunk, JaxMARL IPPO's ``ActorCritic``), whose first layers run as the
            kernels' ``dense_pair``.
        activation: a name in ``ACTIVATIONS``.
        num_ids: N > 0: the input is ``[..., N, D]`` and each agent's one-hot id is an
            implicit extra input of the first layer (``Dense``'s ``num_ids``).
        conv: ``(features, kernel)`` per CNN layer before the first dense layer.
        image_shape: (H, W, C) of the flattened image inputs the CNN reads.
        platform: whose kernels compute (``jaxpo.core.kernels.for_platform``).
    """

    hidden: tuple[int, ...]
    heads: tuple[Head, ...]
    activation: str = "tanh"
    num_ids: int = 0
    conv: tuple[tuple[int, int], ...] = ()
    image_shape: tuple[int, ...] = ()
    platform: str | None = None

    def encode(self, x: jax.Array) -> jax.Array:
        """The CNN torso (identity without ``conv``): ``x [..., H·W·C]``, row-major
        flattened images, viewed as ``[..., H, W, C]``; each layer a stride-1, same-padded
        ``kernel × kernel`` convolution and the activation (JaxMARL's Overcooked CNN);
        flattened again: ``[..., H·W·features_last]``. Call inside a module's compact method."""
        if not self.conv:
            return x
        x = x.reshape(x.shape[:-1] + tuple(self.image_shape))
        for i, (features, kernel) in enumerate(self.conv):
            layer = Conv(features, kernel, orthogonal(np.sqrt(2.0)), self.platform, name=f"Conv_{i}")
            x = ACTIVATIONS[self.activation](layer(x))
        return x.reshape(x.shape[:-3] + (-1,))

    def dense(self, index: int, features: int, scale: float, prefix: str = "") -> Dense:
        """Layer ``index`` of a branch (0 = the input layer, which sees the agent ids)."""
        ids = self.num_ids if index == 0 else 0
        return Dense(features, orthogonal(scale), ids, self.platform, name=f"{prefix}Dense_{index}")

    def layers(self, x: jax.Array, start: int, stop: int | None = None, prefix: str = "") -> jax.Array:
        """Hidden layers ``start`` … ``stop - 1`` (default: to the last) of a branch."""
        for i, width in enumerate(self.hidden[start:stop], start=start):
            x = ACTIVATIONS[self.activation](self.dense(i, width, np.sqrt(2.0), prefix)(x))
        return x

    def output(self, module: nn.Module, head: Head, x: jax.Array) -> jax.Array:
        """``head``'s output layer on its last hidden features ``x``; ``module`` holds its log-std."""
        out = self.dense(len(self.hidden), head.out_dim, head.out_scale, head.prefix)(x)
        if not head.log_std:
            return out
        log_std = param(module, "log_std", nn.initializers.zeros, (head.out_dim,))
        return jnp.concatenate([out, jnp.broadcast_to(log_std, out.shape)], axis=-1)

    def branches(self, module: nn.Module, x: jax.Array) -> jax.Array:
        """Everything after the trunk output ``x``: every head's layers and output,
        concatenated. Two heads' first layers read the same ``x``: one ``dense_pair``."""
        inputs, start = [x] * len(self.heads), 1
        if len(self.heads) == 2 and len(self.hidden) > 1:  # both heads' layer 1 read x: one dense_pair
            init = orthogonal(np.sqrt(2.0))
            weights = [Weights(self.hidden[1], True, init, name=f"{head.prefix}Dense_1")(x.shape[-1])
                       for head in self.heads]
            inputs, start = for_platform(self.platform).dense_pair(x, *weights, ACTIVATIONS[self.activation]), 2
        return jnp.concatenate([self.output(module, head, self.layers(h, start, prefix=head.prefix))
                                for head, h in zip(self.heads, inputs)], axis=-1)


class MLP(nn.Module):
    """A feed-forward network, ``[..., D] -> [..., out]`` (``out``: the heads' widths
    together), made of ``layout`` (see ``Layout``).

    Attributes:
        layout: its layers.
    """

    layout: Layout

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.layout.branches(self, self.layout.layers(self.layout.encode(x), 0, 1))


class GRUNet(nn.Module):
    """A recurrent network over a time-major sequence, H = ``layout.hidden[0]``:

        ``(h0 [..., H], xs [L, ..., D], first bool [L, *P]) -> (h_L [..., H], ys [L, ..., out])``

    [CNN →] Dense(H) → GRU cell → the heads (purejaxrl's and MAPPO's recurrent layout:
    embed, recur, then feed-forward; with two heads the embedding and GRU are the shared
    trunk, JaxMARL IPPO's ``ActorCriticRNN``). The hidden state is zeroed before every
    step whose ``first`` is set (``first``'s shape is a prefix of the batch shape
    ``[...]``). Only the recurrence runs inside the scan; the layers around it see all L
    steps at once.

    Attributes:
        layout: its layers.
    """

    layout: Layout

    @property
    def carry_dim(self) -> int:
        """H, the hidden state's width."""
        return self.layout.hidden[0]

    @nn.compact
    def __call__(self, h: jax.Array, xs: jax.Array, first: jax.Array) -> tuple[jax.Array, jax.Array]:
        layout = self.layout
        # The orthogonal init for the recurrent kernel too: flax's default takes a QR (see `orthogonal`).
        gru = GRU(layout.hidden[0], orthogonal(), orthogonal(), layout.platform, name="GRUCell_0")
        h, ys = gru(h, layout.layers(layout.encode(xs), 0, 1), first)
        return h, layout.branches(self, ys)
