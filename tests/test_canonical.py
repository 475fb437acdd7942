"""Canonical structure of the support-matrix objective on an enumerable one-step game.

N agents with tabular softmax policies (logits θ_k [A]) play one step; agent j gets
r_j(a_1..a_N) from a fixed random table. With A_j(a) = r_j(a) − E_{π_old}[r_j], the
expected objective

    L(θ) = Σ_a π_old(a) Σ_i min(ρ̄_i(a) Â_i(a), clip(ρ̄_i(a)) Â_i(a))

is computed exactly by enumerating all joint actions. At θ = θ_old its gradient for
agent k must be Σ_j S̃[k, j] E[∇log π_k · A_j] with S̃ = S_R @ S_A: the objective's
signal depends on (S_A, S_R) only through S̃.

With state-dependent supports (active agents: a state s says which agents act, m(s)),
the supports of state s are ``S_A · M`` and ``M · S_R`` with term i weighted by m_i
(``M = diag(m(s))``), so the signal of state s is ``S̃(s) = M S_R M S_A M`` and the
canonical structure holds state by state: the pair's gradient is that of
``(S̃(s), I)`` applied in each state.

Modules under test: ``jaxpo.core.support`` (``canonical``) and ``jaxpo.core.losses``."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpo.core import losses, state_supports

EPS = 0.2
GAMES = [(2, 3), (3, 2)]  # (agents, actions)


@pytest.fixture(autouse=True)
def _float64():
    # Exact enumeration in float64 so gradients can be compared at ~1e-10.
    with jax.enable_x64(True):
        yield


def make_game(n_agents, n_actions, seed=0):
    rng = np.random.default_rng(seed)
    joint = np.array(list(itertools.product(range(n_actions), repeat=n_agents)))  # [M, N]
    rewards = rng.normal(size=(len(joint), n_agents))  # r_j(a), [M, N]
    theta_old = rng.normal(size=(n_agents, n_actions))  # non-uniform behaviour policy
    return joint, rewards, theta_old


def np_softmax(x):
    z = np.exp(x - x.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def per_agent_advantages(joint, rewards, theta_old):
    """A_j(a) = r_j(a) − E_{π_old}[r_j] and π_old(a); [M, N] and [M]."""
    p_old = np_softmax(theta_old)
    pi_old = np.prod(p_old[np.arange(joint.shape[1]), joint], axis=1)
    return rewards - pi_old @ rewards, pi_old


@jax.jit
def _objective_grad(S_A, S_R, joint, adv, pi_old, theta_old, active=None):
    m, n = joint.shape
    agents = jnp.arange(n)
    old_log_prob = jax.nn.log_softmax(theta_old)[agents, joint]  # [M, N]
    active = None if active is None else jnp.broadcast_to(active, (m, n))  # one state: the same agents act
    a_hat = losses.aggregate_advantages(adv, S_A, active)
    # policy_loss averages over the batch; we need the π_old-weighted sum. Since
    # min(ρ c Â, clip(ρ) c Â) = c · min(ρ Â, clip(ρ) Â) for c > 0, scaling Â by
    # c(a) = M · π_old(a) > 0 turns the batch mean into Σ_a π_old(a) (...).
    a_hat = a_hat * (m * pi_old)[:, None]

    def objective(theta):
        log_prob = jax.nn.log_softmax(theta)[agents, joint]
        loss, _ = losses.policy_loss(log_prob, old_log_prob, a_hat, S_R, EPS, active=active)
        return -loss  # L = −loss

    return jax.grad(objective)(theta_old)


def expected_objective_grad(S_A, S_R, joint, rewards, theta_old, active=None):
    """∇_θ L at θ = θ_old via jaxpo.losses and jax.grad, ``active [N]`` the agents acting
    (None: all); [N, A]."""
    adv, pi_old = per_agent_advantages(joint, rewards, theta_old)
    args = (S_A, S_R, joint, adv, pi_old, theta_old) + (() if active is None else (active,))
    grad = np.asarray(_objective_grad(*(jnp.asarray(x) for x in args)))
    assert grad.dtype == np.float64  # the tolerances below rely on x64
    return grad


def closed_form_grad(S_tilde, joint, rewards, theta_old):
    """Σ_j S̃[k, j] E_{π_old}[∇_θk log π_k(a_k) A_j(a)], by enumeration in numpy; [N, A]."""
    adv, pi_old = per_agent_advantages(joint, rewards, theta_old)
    n, n_act = theta_old.shape
    p_old = np_softmax(theta_old)
    grad = np.zeros((n, n_act))
    for a, w, adv_a in zip(joint, pi_old, adv):
        for k in range(n):
            score = -p_old[k].copy()  # ∇_θk log softmax(θ_k)[a_k] = e_{a_k} − softmax(θ_k)
            score[a[k]] += 1.0
            for j in range(n):
                grad[k] += S_tilde[k, j] * w * score * adv_a[j]
    return grad


def random_support(n, seed):
    rng = np.random.default_rng(seed)
    S_A = rng.uniform(0.0, 1.0, (n, n))
    S_R = (rng.uniform(size=(n, n)) < 0.5).astype(np.float64)
    np.fill_diagonal(S_R, 1.0)
    S_R[0, n - 1], S_R[n - 1, 0] = 1.0, 0.0  # S_R ≠ I and S_R ≠ S_Rᵀ
    return S_A, S_R


@pytest.mark.parametrize("n,n_act", GAMES)
def test_advantage_and_ratio_support_interchangeable(n, n_act):
    game = make_game(n, n_act)
    ones, eye = np.ones((n, n)), np.eye(n)
    g_adv = expected_objective_grad(ones, eye, *game)  # mappo: aggregate in advantage
    g_ratio = expected_objective_grad(eye, ones, *game)  # aggregate in ratio
    np.testing.assert_allclose(g_adv, g_ratio, rtol=0, atol=1e-10)
    assert np.abs(g_adv).max() > 1e-2  # non-trivial gradient


@pytest.mark.parametrize("n,n_act", GAMES)
def test_random_support_equals_its_canonical_form(n, n_act):
    game = make_game(n, n_act, seed=1)
    S_A, S_R = random_support(n, seed=2)
    g = expected_objective_grad(S_A, S_R, *game)
    g_canonical = expected_objective_grad(S_R @ S_A, np.eye(n), *game)
    np.testing.assert_allclose(g, g_canonical, rtol=0, atol=1e-10)
    # Transposing S_R changes S̃ and must change the gradient (the convention matters).
    g_transposed = expected_objective_grad(S_R.T @ S_A, np.eye(n), *game)
    assert np.abs(g - g_transposed).max() > 1e-3


@pytest.mark.parametrize("n,n_act", GAMES)
def test_different_signal_matrix_gives_different_gradient(n, n_act):
    game = make_game(n, n_act, seed=3)
    g_ippo = expected_objective_grad(np.eye(n), np.eye(n), *game)
    g_mappo = expected_objective_grad(np.ones((n, n)), np.eye(n), *game)
    assert np.abs(g_ippo - g_mappo).max() > 1e-3


@pytest.mark.parametrize("n,n_act", GAMES)
@pytest.mark.parametrize("support", ["ippo", "mappo", "joint", "random"])
def test_gradient_matches_closed_form(n, n_act, support):
    game = make_game(n, n_act, seed=4)
    eye, ones = np.eye(n), np.ones((n, n))
    S_A, S_R = {
        "ippo": (eye, eye),
        "mappo": (ones, eye),
        "joint": (ones, ones),
        "random": random_support(n, seed=5),
    }[support]
    g = expected_objective_grad(S_A, S_R, *game)
    expected = closed_form_grad(S_R @ S_A, *game)
    np.testing.assert_allclose(g, expected, rtol=1e-9, atol=1e-12)


def state_dependent_game(n, n_act, seed):
    """Three states with probabilities p(s), each its own reward table and its own active
    agents (everyone; all but agent 1; all but agent 0), one behaviour policy."""
    joint, _, theta_old = make_game(n, n_act, seed)
    tables = [make_game(n, n_act, seed + 10 + s)[1] for s in range(3)]
    masks = [np.ones(n, bool), np.arange(n) != 1, np.arange(n) != 0]
    p = np.random.default_rng(seed).dirichlet(np.ones(3))
    return joint, theta_old, list(zip(p, tables, masks))


@pytest.mark.parametrize("n,n_act", GAMES)
def test_active_agents_hold_the_canonical_structure_state_by_state(n, n_act):
    """Masked (S_A, S_R) gives the gradient of the closed form with S̃(s) = M S_R M S_A M
    in each state, and so of the per-state canonical pair (S̃(s), I) unmasked; the
    unmasked pair's gradient differs (the masks matter)."""
    joint, theta_old, states = state_dependent_game(n, n_act, seed=6)
    S_A, S_R = random_support(n, seed=7)
    masked = canonical = closed = unmasked = 0.0
    for p, rewards, m in states:
        M = np.diag(m.astype(np.float64))
        signal = M @ S_R @ M @ S_A @ M
        masked = masked + p * expected_objective_grad(S_A, S_R, joint, rewards, theta_old, active=m)
        canonical = canonical + p * expected_objective_grad(signal, np.eye(n), joint, rewards, theta_old)
        closed = closed + p * closed_form_grad(signal, joint, rewards, theta_old)
        unmasked = unmasked + p * expected_objective_grad(S_A, S_R, joint, rewards, theta_old)
    np.testing.assert_allclose(masked, closed, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(masked, canonical, rtol=0, atol=1e-10)
    assert np.abs(masked).max() > 1e-2 and np.abs(masked - unmasked).max() > 1e-3


@pytest.mark.parametrize("n,n_act", GAMES)
def test_a_state_dependent_khop_holds_the_canonical_structure_state_by_state(n, n_act):
    """Each state its own coupling graph G(s) and S_A(s) = khop_per_state(G(s), 1), given to
    the loss as one matrix per sample: the gradient is the closed form's with
    S̃(s) = S_R S_A(s), and that of the per-state canonical pair (S_R S_A(s), I)."""
    joint, theta_old, states = state_dependent_game(n, n_act, seed=8)
    _, S_R = random_support(n, seed=9)
    rng = np.random.default_rng(10)
    pair = canonical = closed = 0.0
    for p, rewards, _ in states:
        graph = rng.uniform(size=(n, n)) < 0.5
        S_A = np.asarray(state_supports.khop_per_state(jnp.asarray(graph), 1), np.float64)
        per_sample = np.broadcast_to(S_A, (len(joint), n, n))
        pair = pair + p * expected_objective_grad(per_sample, S_R, joint, rewards, theta_old)
        canonical = canonical + p * expected_objective_grad(S_R @ S_A, np.eye(n), joint, rewards, theta_old)
        closed = closed + p * closed_form_grad(S_R @ S_A, joint, rewards, theta_old)
    np.testing.assert_allclose(pair, closed, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pair, canonical, rtol=0, atol=1e-10)
    assert np.abs(pair).max() > 1e-2
