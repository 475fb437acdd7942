"""``jaxpo.core.kernels.cpu.permutation``, the minibatch shuffle on CPU: ``jax.random.permutation``'s
construction (rounds of a stable sort by random keys) with each round's tie-break
packed into the low bits of its keys, checked against numpy's stable argsort of the
same random draws."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core.kernels.cpu import permutation, permutation_rounds
from jaxpo.core.rollout import minibatch_rows


def reference(key: jax.Array, n: int) -> np.ndarray:
    """Rounds of a stable sort of the current order by the random part of the keys."""
    index_bits, rounds = permutation_rounds(n)
    order = np.arange(n)
    for round_key in jax.random.split(key, rounds):
        draw = jax.random.bits(round_key, (n,), jnp.uint16 if index_bits >= 16 else jnp.uint32)
        random_part = np.asarray(draw).astype(np.uint64) % 2 ** (32 - index_bits)
        order = order[np.argsort(random_part, kind="stable")]
    return order


@pytest.mark.parametrize("n", [1, 2, 5, 1000, 65536, 65537])
def test_permutation_is_rounds_of_a_stable_sort_by_random_keys(n):
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        perm = np.asarray(jax.jit(permutation, static_argnums=1)(key, n))
        assert perm.dtype == np.int32
        np.testing.assert_array_equal(perm, reference(key, n))
        np.testing.assert_array_equal(np.sort(perm), np.arange(n))


def test_permutation_rounds_keep_jax_margin_against_key_collisions():
    for n in [2, 3, 100, 2048, 16384, 65536, 65537, 131072, 1_000_000, 2 ** 24]:
        index_bits, rounds = permutation_rounds(n)
        assert 2 ** (index_bits - 1) < n <= 2 ** index_bits  # positions fit, no bit wasted
        random_bits = 32 - index_bits
        assert 2 ** (random_bits * rounds) >= n ** 3 > 2 ** (random_bits * (rounds - 1))
    assert permutation_rounds(131072) == (17, 4)  # the MPE reference batch: 15 random bits, 4 rounds


def test_permutation_beyond_2_pow_24_is_jax_random_permutation():
    key, n = jax.random.PRNGKey(0), 2 ** 24 + 1  # traced, not run: too few random bits a round to pack
    ours = jax.make_jaxpr(lambda k: permutation(k, n))(key)
    jaxs = jax.make_jaxpr(lambda k: jax.random.permutation(k, n).astype(jnp.int32))(key)
    assert str(ours) == str(jaxs)


def test_minibatch_rows_cut_one_permutation_into_minibatches():
    key = jax.random.PRNGKey(7)
    rows = np.asarray(minibatch_rows(key, 96, 4))
    assert rows.shape == (4, 24)
    np.testing.assert_array_equal(rows.reshape(-1), reference(key, 96))
