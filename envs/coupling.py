"""Measured coupling: whose actions change whose rewards, found by stepping the environment.

An environment is a pure function of its key, state and actions, so agent j's
influence on agent i's reward can be measured by counterfactuals. From each of
``num_states`` states (each visited by ``policy`` in an ``AutoReset`` rollout, after a
number of steps drawn uniformly from ``[0, max_time)``, so mid-episode states too):

1. draw the base actions ``a_1, …, a_h`` from ``policy`` (``h = horizon``; the later
   ones are open-loop: drawn at the sampled state, fixed in advance) and a key per step;
2. step h times with them: the base rewards ``r [h, N]``;
3. for every agent j and every alternative ``b`` of its first action, step h times again
   with ``a_1[j] := b`` and everything else (the other agents' actions, the later actions,
   the keys) the same: the rewards ``r' [h, N]``.

These h steps are the environment's own, without resets: a branch's rewards after its
episode ended count as 0.

Alternatives. Discrete: the actions j's ``action_mask`` allows other than ``a_1[j]``,
all of them when there are at most ``alternatives``, else ``alternatives`` of them
drawn without replacement; a state where j has fewer adds fewer samples. Continuous:
``alternatives`` uniform draws of j's action vector within its bounds.

A sample (state, j, b) *changed* r_i when ``|r_i - r'_i| > tolerance`` at one of the h
steps. Then ``frequency[i, j]`` is the fraction of j's samples that changed r_i and
``graph[i, j] = 1`` where it exceeds ``threshold`` (the diagonal always 1, as in
declared graphs). The keys are shared, so an edge seen is an effect of j's action and
nothing else, as long as the environment's random draws do not depend on the actions
(jaxpo's own environments draw the same numbers whatever the actions). An edge can only
be missed: an influence the visited states and alternatives never showed (a sparse
reward that the policy never reaches); more states, or a policy that visits the states
where it acts, shrink that risk.

Cost: one rollout of ``max_time`` steps per state, then ``num_states × (1 + N × K) × h``
steps (K alternatives per agent), all in one jitted program: the states' rollouts vmapped,
their probes vmapped in batches of about ``BRANCHES`` branches.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from .base import AutoReset, Env, TimeStep
from .graphs import UNREACHABLE, hop_distances
from .params import check_int, check_real, is_number

BRANCHES = 4096
"""About how many counterfactual branches (each an environment state stepped h times) are
stepped at once; ``measure_coupling`` probes its states in batches of that size."""

Policy = Callable[[jax.Array, TimeStep], jax.Array]
"""``policy(key, timestep) -> actions``: int32 ``[N]`` (continuous: float32 ``[N, A]``) for one,
unbatched ``TimeStep``."""


@dataclasses.dataclass(frozen=True)
class Coupling:
    """A measured coupling graph and the statistics behind it (``measure_coupling``).

    Attributes:
        frequency: float64 [N, N] — ``frequency[i, j]``: the fraction of agent j's samples
            (state × alternative first action) in which r_i changed by more than
            ``tolerance`` at one of the ``horizon`` steps.
        magnitude: float64 [N, N] — the mean over j's samples of the largest ``|Δr_i|``
            over the horizon (0 where nothing changed).
        graph: uint8 [N, N] — ``1[frequency > threshold]`` with a unit diagonal:
            ``graph[i, j] = 1`` when agent j's action was seen to change agent i's reward.
        samples: int64 [N] — agent j's samples: states times the alternatives it had
            (0: j never had an action to vary, so its column is empty).
        radius: the radius of the symmetrised graph ``graph | graph.T`` (the least, over
            agents, of the largest hop distance to another agent): how many hops of it
            reach every agent from the most central one; None when it is disconnected.
        max_hops: the smallest κ for which ``khop(reference, κ)`` credits every
            measured influence (its ``S_A`` covers ``graph``'s transpose: the largest hop
            distance, along ``reference``'s edges, of an
            agent i to an agent j with ``graph[i, j] = 1``), where ``reference`` is the
            declared graph when there is one, else ``graph`` itself (then 0 or 1);
            None when the declared graph misses a measured edge entirely.
        declared: uint8 [N, N] — the environment's declared ``coupling``, or None.
        num_states: states sampled.
        horizon: steps h over which a change counts.
        alternatives: the most alternative first actions per agent and state.
        max_time: states were visited after a number of steps drawn from ``[0, max_time)``.
        threshold: the frequency an edge must exceed.
        tolerance: the reward change that counts as a change.
    """

    frequency: np.ndarray
    magnitude: np.ndarray
    graph: np.ndarray
    samples: np.ndarray
    radius: int | None
    max_hops: int | None
    declared: np.ndarray | None
    num_states: int
    horizon: int
    alternatives: int
    max_time: int
    threshold: float
    tolerance: float


def measure_coupling(env: Env, key: Any = 0, *, num_states: int = 64, horizon: int = 1, alternatives: int = 4,
                     policy: Policy | None = None, threshold: float = 0.0, tolerance: float = 1e-6,
                     max_time: int | None = None) -> Coupling:
    """Measures which agents' actions change which agents' rewards (the module docstring says how).

    Args:
        env: the environment (an ``Env``): ``AutoReset`` wraps it for the rollouts; the
            probes step it as it is.
        key: a JAX PRNG key or an int seed (≥ 0).
        num_states: states sampled, an int ≥ 1.
        horizon: h ≥ 1: a change of r_i at any of the h steps from the varied action counts.
        alternatives: the most alternative first actions per agent and state, an int ≥ 1.
        policy: ``policy(key, timestep) -> actions`` for one unbatched ``TimeStep``, what
            visits the states and draws the base actions (None: uniform over each agent's
            ``action_mask``; continuous: uniform within the action bounds, ``[0, 1]`` where
            the environment states none, on the existing dimensions).
        threshold: in ``[0, 1)``; an edge where ``frequency`` exceeds it (0: any change seen).
        tolerance: ≥ 0; a reward change larger than this counts (float rounding does not).
        max_time: states are visited after ``[0, max_time)`` steps, an int ≥ 1 (None:
            ``env.max_steps``; with auto-reset, later times fall in later episodes).

    Returns:
        The ``Coupling``: frequency, magnitude and graph ``[N, N]``, radius, max_hops and
            the settings.

    Raises:
        ValueError: before anything compiles, naming the argument: ``env`` is not an
            ``Env`` or is discrete with a single action, ``key`` is neither a PRNG key
            nor an int ≥ 0, a count or number is out of its range, ``policy`` is not
            callable or does not return actions of the environment's shape and kind.
    """
    if not isinstance(env, Env):
        raise ValueError(f"env must be a jaxpo.envs.Env (e.g. jaxpo.envs.make(...)), got {type(env).__name__}")
    if not env.continuous and env.num_actions < 2:
        raise ValueError(f"env has a single action (num_actions={env.num_actions}): there is nothing to vary")
    key = _as_key(key)
    num_states = check_int(num_states, "num_states", 1)
    horizon = check_int(horizon, "horizon", 1)
    alternatives = check_int(alternatives, "alternatives", 1)
    threshold = check_real(threshold, "threshold", 0.0, 1.0, high_open=True)
    tolerance = check_real(tolerance, "tolerance", 0.0)
    max_time = check_int(env.max_steps if max_time is None else max_time, "max_time", 1)
    if policy is not None and not callable(policy):
        raise ValueError(f"policy must be a callable policy(key, timestep) -> actions, got {policy!r}")
    policy = uniform_policy(env) if policy is None else _checked_policy(AutoReset(env), policy)
    count = alternatives if env.continuous else min(alternatives, env.num_actions - 1)
    program = _program(env, policy, _alternatives(env, count), 1 + env.num_agents * count, num_states, horizon,
                       max_time, tolerance)
    changed, magnitude, samples = (np.asarray(x, np.float64) for x in jax.jit(program)(key))
    per_sample = np.maximum(samples, 1.0)[None, :]  # columns of agents without samples stay 0
    frequency, magnitude = changed / per_sample, magnitude / per_sample
    graph = (frequency > threshold).astype(np.uint8)
    np.fill_diagonal(graph, 1)
    declared = None if env.coupling is None else (np.asarray(env.coupling) != 0).astype(np.uint8)
    return Coupling(frequency=frequency, magnitude=magnitude, graph=graph, samples=samples.astype(np.int64),
                    radius=graph_radius(graph), max_hops=hops_to_cover(graph, graph if declared is None else declared),
                    declared=declared, num_states=num_states, horizon=horizon, alternatives=alternatives,
                    max_time=max_time, threshold=threshold, tolerance=tolerance)


MEASURED_SETTINGS = {"key": 0, "num_states": 64, "horizon": 2, "alternatives": 4}
"""The fixed settings of ``measured_graph``: seed 0, so the graph is the same every time;
two steps, since an action that acts through a velocity (MPE's particles) reaches the
reward one step late and a one-step measurement would see nothing."""


@functools.lru_cache(maxsize=8)
def measured_graph(env: Env) -> np.ndarray:
    """The graph ``measure_coupling`` finds with ``MEASURED_SETTINGS``, computed once per
    environment object: what stands in for a declared coupling (``support.graph: measured``).

    Args:
        env: the environment.

    Returns:
        uint8 [N, N], read-only: ``graph[i, j] = 1`` when agent j's action was seen to change
            agent i's reward within two steps (diagonal 1).

    Raises:
        ValueError: as ``measure_coupling``.
    """
    graph = measure_coupling(env, **MEASURED_SETTINGS).graph
    graph.flags.writeable = False  # shared by every caller of the cache
    return graph


def graph_radius(graph: Any) -> int | None:
    """The radius of the undirected graph ``graph | graph.T``.

    Args:
        graph: ``[N, N]`` 0/1 (the diagonal is ignored).

    Returns:
        The least, over nodes, of the largest hop distance to another node (0 for N = 1),
            or None when the graph is disconnected.
    """
    g = np.asarray(graph) != 0
    radius = int(hop_distances(g | g.T).max(axis=1).min())
    return None if radius >= UNREACHABLE else radius


def hops_to_cover(graph: Any, reference: Any) -> int | None:
    """The smallest κ for which ``khop(reference, κ)`` credits every edge of ``graph``:
    its ``S_A`` (the transpose of the κ-hop reachability) covers ``graph``'s transpose.

    Args:
        graph: ``[N, N]`` 0/1, the edges to cover (the diagonal is always covered).
        reference: ``[N, N]`` 0/1, the graph whose hops count (its direction: i → j).

    Returns:
        The largest hop distance in ``reference`` from i to j over the edges
            ``graph[i, j] = 1`` (0 when ``graph`` has none off the diagonal), or None
            when some edge's j is unreachable from its i.
    """
    g = np.asarray(graph) != 0
    r = np.asarray(reference) != 0
    hops = int(hop_distances(r)[g].max())  # the diagonal is in g: the max is at least 0
    return None if hops >= UNREACHABLE else hops


def uniform_policy(env: Env) -> Policy:
    """The default policy: uniform over each agent's available actions.

    Args:
        env: the environment; a continuous one's bounds are its ``action_low`` /
            ``action_high`` (``[N, A]``, the JaxMARL adapter's) where it has them, else 0 and 1.

    Returns:
        ``policy(key, timestep) -> actions``: int32 ``[N]`` drawn uniformly over
            ``action_mask``; continuous: float32 ``[N, A]`` uniform within the bounds on the
            existing dimensions (``action_mask``), 0 on padding.
    """
    if not env.continuous:
        return lambda key, ts: jax.random.categorical(key, jnp.where(ts.action_mask, 0.0, -jnp.inf)).astype(jnp.int32)
    while isinstance(env, AutoReset):
        env = env.env
    low = jnp.asarray(getattr(env, "action_low", 0.0), jnp.float32)
    high = jnp.asarray(getattr(env, "action_high", 1.0), jnp.float32)

    def policy(key, ts):
        mask = ts.action_mask
        return jnp.where(mask, jax.random.uniform(key, mask.shape, jnp.float32, low, high), 0.0)

    return policy


def _as_key(key: Any) -> jax.Array:
    """A PRNG key from a key or an int seed, or a ValueError naming ``key``."""
    if is_number(key, integral=True) and key >= 0:
        return jax.random.PRNGKey(int(key))
    if isinstance(key, (jax.Array, np.ndarray)):
        if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ():
            return key
        if key.dtype == np.uint32 and key.shape == (2,):
            return jnp.asarray(key)
    raise ValueError(f"key must be a JAX PRNG key (jax.random.PRNGKey(seed)) or an int seed >= 0, got {key!r}")


def _checked_policy(env: AutoReset, policy: Policy) -> Policy:
    """``policy`` once its output's shape and kind are checked by tracing (nothing compiles)."""
    _, ts = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    want = (env.num_agents, env.num_actions) if env.continuous else (env.num_agents,)
    try:
        out = jax.eval_shape(policy, jax.random.PRNGKey(0), ts)
    except Exception as err:  # whatever the user's code raises while tracing
        raise ValueError(f"policy(key, timestep) failed on one unbatched TimeStep: {err}") from err
    kind = jnp.floating if env.continuous else jnp.integer
    if getattr(out, "shape", None) != want or not jnp.issubdtype(out.dtype, kind):
        raise ValueError(f"policy must return {'float' if env.continuous else 'int'} actions of shape {want} for one "
                         f"TimeStep, got {getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")
    return policy


def _alternatives(env: Env, count: int) -> Callable:
    """``draw(key, timestep, first) -> (alternatives, valid)``: K = ``count`` alternative first
    actions per agent, int32 ``[N, K]`` (continuous: float32 ``[N, K, A]``), and bool ``[N, K]``."""
    if env.continuous:
        uniform = uniform_policy(env)
        return lambda key, ts, first: (jax.vmap(lambda k: uniform(k, ts), out_axes=1)(jax.random.split(key, count)),
                                       jnp.ones((env.num_agents, count), bool))

    def draw(key, ts, first):
        # Random scores on the allowed actions, -inf elsewhere: the top K are K distinct
        # allowed actions drawn without replacement (all of them when K = A - 1).
        allowed = ts.action_mask & (jnp.arange(env.num_actions) != first[:, None])
        scores = jnp.where(allowed, jax.random.gumbel(key, allowed.shape), -jnp.inf)
        top, index = jax.lax.top_k(scores, count)
        return index.astype(jnp.int32), top > -jnp.inf

    return draw


def _program(env: Env, policy: Policy, draw: Callable, branches: int, num_states: int, horizon: int,
             max_time: int, tolerance: float) -> Callable:
    """``program(key) -> (changed, magnitude, samples)``: counts summed over the states,
    ``[N, N]`` (row i: the reward, column j: the varied agent), ``[N, N]`` and ``[N]``;
    ``branches`` is a state's probe count, ``1 + N K``.

    Every draw is keyed by what it is for (``fold_in`` by step), never by ``horizon``, so
    the same key gives the same states, base actions and alternatives at any horizon and
    a longer horizon can only add changes.
    """

    auto = AutoReset(env)

    def visit(key):  # one state of a live episode, after a uniformly drawn number of steps
        k_reset, k_time, k_roll = jax.random.split(key, 3)
        stop = jax.random.randint(k_time, (), 0, max_time)

        def body(carry, t):
            k_act, k_step = jax.random.split(jax.random.fold_in(k_roll, t))
            moved = auto.step(k_step, carry[0], policy(k_act, carry[1]))
            return jax.tree.map(lambda new, old: jnp.where(t < stop, new, old), moved, carry), None

        start = auto.reset(k_reset)
        return start if max_time == 1 else jax.lax.scan(body, start, jnp.arange(max_time - 1))[0]

    def probe(key, state, ts):  # counts of one state
        k_act, k_alt, k_step = jax.random.split(key, 3)
        steps = jnp.arange(horizon)
        actions = jax.vmap(lambda t: policy(jax.random.fold_in(k_act, t), ts))(steps)  # [h, N(, A)]
        step_keys = jax.vmap(lambda t: jax.random.fold_in(k_step, t))(steps)

        def rewards(first):  # [h, N]: h steps, the first with actions ``first``; 0 once the episode ended
            def body(carry, xs):
                (s, live), (k, a) = carry, xs
                s, out = env.step(k, s, a)
                return (s, live & ~out.done), jnp.where(live, out.reward, 0.0)

            return jax.lax.scan(body, (state, jnp.ones((), bool)), (step_keys, actions.at[0].set(first)))[1]

        alts, valid = draw(k_alt, ts, actions[0])  # [N, K(, A)], [N, K]
        n, k = valid.shape
        varied = jax.vmap(lambda j, b: actions[0].at[j].set(b))(jnp.repeat(jnp.arange(n), k),
                                                               alts.reshape(n * k, *alts.shape[2:]))
        # The base and every varied branch in one vmapped call: the step is traced once here.
        out = jax.vmap(rewards)(jnp.concatenate([actions[:1], varied]))  # [1 + N K, h, N]
        delta = jnp.abs(out[1:] - out[0]).max(axis=1).reshape(n, k, n) * valid[..., None]  # [N (j), K, N (i)]
        return (delta > tolerance).sum(1).T, delta.sum(1).T, valid.sum(1)

    # States are probed a batch at a time (lax.map), each batch vmapped: the batch is the
    # largest divisor of num_states that keeps it near BRANCHES branches (1 + N K per
    # state), so memory stays bounded at large N and no remainder batch compiles apart.
    batch = max(d for d in range(1, num_states + 1) if num_states % d == 0 and (d == 1 or d * branches <= BRANCHES))

    def program(key):
        k_visit, k_probe = jax.random.split(key)
        states, timesteps = jax.vmap(visit)(jax.random.split(k_visit, num_states))
        keys = jax.random.split(k_probe, num_states)
        counts = jax.lax.map(lambda x: probe(*x), (keys, states, timesteps), batch_size=batch)
        return jax.tree.map(lambda x: x.astype(jnp.float32).sum(0), counts)

    return program


__all__ = ["MEASURED_SETTINGS", "Coupling", "Policy", "graph_radius", "hops_to_cover", "measure_coupling", "measured_graph",
           "uniform_policy"]
