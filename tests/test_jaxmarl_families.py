"""JaxMARL families beyond the three MPE scenarios and SMAX's fixed maps: Switch Riddle,
MPE's single-agent and FACMAC scenarios, SMACv2's random-unit maps, and the names the
adapter refuses. Each is checked against JaxMARL's own step and episode logic."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpo.envs
from jaxpo import Config, runs, train
from jaxpo.core import support
from jaxpo.envs import AutoReset
from jaxpo.envs.jaxmarl import COMPETITIVE_JAXMARL, SUPPORTED_JAXMARL, JaxMARLAdapter
from runtools import cli_curves

NOTHING, SWITCH, TELL = 0, 1, 2


@pytest.fixture(scope="module")
def riddle():
    return JaxMARLAdapter.from_name("switch_riddle")


def test_switch_riddle_sizes_and_one_step_against_jaxmarl(riddle):
    assert (riddle.num_agents, riddle.obs_dim, riddle.num_actions) == (3, 2, 3)
    assert riddle.max_steps == riddle.env.max_steps == 6  # 4N - 6; its counter is tested after the increment
    np.testing.assert_array_equal(riddle.coupling, np.ones((3, 3)))  # one team reward
    key = jax.random.PRNGKey(0)
    state, ts = riddle.reset(key)
    raw_obs, _ = riddle.env.reset(key)
    np.testing.assert_array_equal(ts.obs, np.stack([raw_obs[a] for a in riddle.agents]).astype(np.float32))
    actions = jnp.array([SWITCH, NOTHING, NOTHING], jnp.int32)
    new, ts = riddle.step(jax.random.PRNGKey(1), state, actions)
    raw_obs, raw_new, raw_rew, raw_dones, _ = riddle.env.step_env(
        jax.random.PRNGKey(1), state, {a: actions[i] for i, a in enumerate(riddle.agents)})
    np.testing.assert_array_equal(ts.obs, np.stack([raw_obs[a] for a in riddle.agents]).astype(np.float32))
    np.testing.assert_array_equal(ts.reward, [raw_rew[a] for a in riddle.agents])
    assert int(new.agent_in_room) == int(raw_new.agent_in_room) and bool(ts.done) == bool(raw_dones["__all__"])


def test_switch_riddle_a_tell_terminates_and_the_time_limit_truncates(riddle):
    """The family's rule: the game is decided when the agent in the room tells (±1), even
    on the last step; six steps without a tell are a truncation with reward 0."""
    state, _ = riddle.reset(jax.random.PRNGKey(0))
    tell_all = jnp.full((3,), TELL, jnp.int32)
    _, ts = riddle.step(jax.random.PRNGKey(1), state, tell_all)  # told before everyone visited
    assert bool(ts.terminated) and not bool(ts.truncated)
    np.testing.assert_array_equal(ts.reward, -1.0)
    # Only the agent in the room acts: the others' tells change nothing.
    others_tell = jnp.where(jnp.arange(3) == state.agent_in_room, NOTHING, TELL).astype(jnp.int32)
    _, ts = riddle.step(jax.random.PRNGKey(1), state, others_tell)
    assert not bool(ts.done)
    for t in range(riddle.max_steps):
        last = t == riddle.max_steps - 1
        _, told = riddle.step(jax.random.PRNGKey(t), state, tell_all)
        state, ts = riddle.step(jax.random.PRNGKey(t), state, jnp.zeros((3,), jnp.int32))
        assert bool(ts.truncated) == last and not bool(ts.terminated)
        assert bool(told.terminated) and not bool(told.truncated)  # a tell on the last step too
    np.testing.assert_array_equal(ts.reward, 0.0)
    visited_all = state.replace(has_been=jnp.ones_like(state.has_been))
    _, ts = riddle.step(jax.random.PRNGKey(9), visited_all, tell_all)
    np.testing.assert_array_equal(ts.reward, 1.0)


def test_switch_riddle_random_episodes_follow_the_rule(riddle):
    """A jitted, auto-reset random rollout of 4096 steps: every done is a termination
    exactly when the agent in the room told, else a truncation at the sixth step."""
    env = AutoReset(riddle)

    def step(carry, key):
        state, t = carry
        k_act, k_step = jax.random.split(key)
        actions = jax.random.randint(k_act, (3,), 0, 3)
        told = actions[state.agent_in_room] == TELL
        state, ts = env.step(k_step, state, actions)
        return (state, jnp.where(ts.done, 0, t + 1)), (told, ts.terminated, ts.truncated, ts.reward[0], t + 1)

    state, _ = env.reset(jax.random.PRNGKey(0))
    _, (told, terminated, truncated, reward, length) = jax.jit(lambda s: jax.lax.scan(
        step, (s, jnp.int32(0)), jax.random.split(jax.random.PRNGKey(1), 4096)))(state)
    np.testing.assert_array_equal(terminated, told)
    assert np.all(np.isin(reward[np.asarray(terminated)], [-1.0, 1.0]))
    np.testing.assert_array_equal(reward[~np.asarray(terminated)], 0.0)
    assert 50 < truncated.sum() and 1000 < terminated.sum()  # both kinds of end occur often ((2/3)^6 untold)
    assert not np.any(terminated & truncated)
    np.testing.assert_array_equal(length[np.asarray(truncated)], riddle.max_steps)
    assert np.all(length <= riddle.max_steps)


def test_switch_riddle_trains_a_recurrent_team():
    """The untrained team tells at random and mostly too early (≈ −0.64 per episode); at
    CI size recurrent IPPO learns at least to hold its tongue (≥ 0: measured 0.01 and
    0.13 for seeds 0, 1 after 40 updates)."""
    config = Config(env="switch_riddle", num_envs=32, num_steps=16, updates_per_chunk=10, hidden=(32, 32),
                    recurrent=True, seq_len=8)
    hyper, seeds, _ = runs(support.ippo(3), seeds=[0, 1], lr=3e-3)
    result = train(config, hyper, seeds, num_updates=40, progress=False)
    assert np.all(result.initial_return() < -0.4)
    assert np.all(np.median(result.metrics["return"][:, -10:], axis=1) > -0.15)


# -- Hanabi: turn-based, legal moves as action masks, no time limit -----------------------


@pytest.fixture(scope="module")
def hanabi():
    return JaxMARLAdapter.from_name("hanabi")


def test_hanabi_masks_are_the_legal_moves_and_only_the_player_to_move_acts(hanabi):
    env = hanabi
    assert (env.num_agents, env.obs_dim, env.num_actions) == (2, 658, 21)
    assert env.max_steps == 2 * (50 - 10 + 2) + 8 + 5  # the longest game the rules allow
    np.testing.assert_array_equal(env.coupling, np.ones((2, 2)))
    key = jax.random.PRNGKey(0)
    state, ts = jax.jit(env.reset)(key)  # jitted: Hanabi's eager ops would each compile on their own
    legal = jax.jit(env.env.get_legal_moves)(state)
    np.testing.assert_array_equal(ts.action_mask, np.stack([legal[a] for a in env.agents]).astype(bool))
    mover = int(np.argmax(np.asarray(state.cur_player_idx)))
    noop = np.eye(env.num_actions, dtype=bool)[-1]
    np.testing.assert_array_equal(ts.action_mask[1 - mover], noop)  # the other player can only wait
    assert ts.action_mask[mover].sum() > 1 and not ts.action_mask[mover, -1]
    play_first = jnp.where(jnp.arange(2) == mover, 5, env.num_actions - 1).astype(jnp.int32)  # 5: play card 0
    new, ts = jax.jit(env.step)(key, state, play_first)
    raw_obs, raw_new, raw_rew, raw_dones, _ = jax.jit(env.env.step_env)(key, state, {a: play_first[i] for i, a in
                                                                                    enumerate(env.agents)})
    np.testing.assert_array_equal(ts.obs, np.stack([raw_obs[a] for a in env.agents]))
    np.testing.assert_array_equal(ts.reward, [raw_rew[a] for a in env.agents])
    np.testing.assert_array_equal(new.fireworks, raw_new.fireworks)
    assert int(np.argmax(np.asarray(new.cur_player_idx))) == 1 - mover  # turns alternate


def test_hanabi_random_games_end_as_the_rules_say(hanabi):
    """Random legal play, auto-reset, 2048 steps: every end is a termination (Hanabi has
    no time limit), within ``max_steps``, the reward shared by both players;
    a game's return is its final score, 0 when the lives run out."""
    env = AutoReset(hanabi)

    def step(carry, key):
        state, ts, t, score = carry
        k_act, k_step = jax.random.split(key)
        actions = jax.random.categorical(k_act, jnp.where(ts.action_mask, 0.0, -jnp.inf))
        state, ts = env.step(k_step, state, actions)
        score = score + ts.reward[0]
        out = (ts.terminated, ts.truncated, t + 1, score, ts.reward[0] == ts.reward[1])
        return (state, ts, jnp.where(ts.done, 0, t + 1), jnp.where(ts.done, 0.0, score)), out

    state, ts = env.reset(jax.random.PRNGKey(0))
    carry = (state, ts, jnp.int32(0), jnp.float32(0.0))
    _, (terminated, truncated, length, score, shared) = jax.jit(lambda c: jax.lax.scan(
        step, c, jax.random.split(jax.random.PRNGKey(1), 2048)))(carry)
    terminated = np.asarray(terminated)
    assert not np.any(truncated) and terminated.sum() >= 10
    assert np.all(length <= hanabi.max_steps) and np.all(shared)
    finals = np.asarray(score)[terminated]
    assert np.all((finals >= 0) & (finals <= 25)) and np.all(finals == np.round(finals))


def test_hanabi_reference_config_trains_a_team_that_scores(tmp_path):
    """Random legal play bombs out (score 0: JaxMARL takes the fireworks back when the
    lives run out). Through the CLI with JaxMARL's IPPO-FF settings for Hanabi
    (``jaxmarl_ippo_ff_hanabi``: one relu trunk over the legal moves, two heads) at CI
    size and lr 3e-3, IPPO learns to play safe cards: measured medians over updates
    41-50 of 1.97 and 3.19 for seeds 0, 1. This is the file's CLI test too."""
    returns = cli_curves(tmp_path, "--config", "jaxmarl_ippo_ff_hanabi", "--num-envs", "32", "--num-steps", "64",
                         "--updates-per-chunk", "10", "--hidden", "128", "128", "--lr", "3e-3",
                         "--steps", str(50 * 32 * 64), "--seeds", "2", "--seed", "0")  # [seeds, updates]
    print("hanabi return per 5 updates:", np.round(returns[:, ::5], 2))
    assert np.all(returns[:, 0] < 0.2)
    assert np.all(np.median(returns[:, -10:], axis=1) > 1.0)


# -- Overcooked v1 and v2: images flattened, shaped reward, every end a truncation -----------


@pytest.mark.parametrize("name, layout, shape", [("overcooked", "coord_ring", (5, 5, 26)),
                                                 ("overcooked_v2", "cramped_room", (4, 5, 30))])
def test_overcooked_matches_jaxmarl_with_its_shaped_reward(name, layout, shape):
    sparse = jaxpo.envs.make(name, layout=layout)
    shaped = jaxpo.envs.make(name, layout=layout, shaped_reward=0.5)
    assert (sparse.num_agents, sparse.num_actions, sparse.obs_shape, sparse.obs_dim) == (2, 6, shape, np.prod(shape))
    assert sparse.max_steps == 400 and not sparse.continuous
    np.testing.assert_array_equal(sparse.coupling, np.ones((2, 2)))
    key = jax.random.PRNGKey(0)

    def step(state, key):  # random actions: JaxMARL's step and both adapters' from the same state
        actions = jax.random.randint(key, (2,), 0, 6)
        raw_obs, new, raw_rew, _, info = sparse.env.step_env(key, state, {a: actions[i] for i, a in
                                                                         enumerate(sparse.agents)})
        ts, ts_shaped = sparse.step(key, state, actions)[1], shaped.step(key, state, actions)[1]
        raw = jnp.stack([raw_obs[a].reshape(-1) for a in sparse.agents])
        bonus = jnp.stack([info["shaped_reward"][a] for a in sparse.agents]).astype(jnp.float32)
        sparse_reward = jnp.stack([raw_rew[a] for a in sparse.agents])
        errors = (jnp.abs(ts.obs - raw).max(), jnp.abs(ts.reward - sparse_reward).max(),
                  jnp.abs(ts_shaped.reward - ts.reward - 0.5 * bonus).max())
        return new, (errors, bonus.sum())

    rollout = jax.vmap(lambda s, k: jax.lax.scan(step, s, jax.random.split(k, 300)))  # 32 envs × 300 steps
    states = jax.jit(jax.vmap(sparse.env.reset))(jax.random.split(key, 32))[1]
    lasts, (errors, bonus) = jax.jit(rollout)(states, jax.random.split(jax.random.PRNGKey(1), 32))
    last = jax.tree.map(lambda x: x[0], lasts)
    assert all(float(e.max()) <= 1e-6 for e in errors), [float(e.max()) for e in errors]
    assert float(bonus.sum()) > 0  # random play pays some shaped reward: the sum above was tested
    interact = jnp.full((2,), 5, jnp.int32)
    sparse_step = jax.jit(sparse.step)
    # Overcooked ends only at its time limit: a truncation.
    _, ts = sparse_step(key, last.replace(step=jnp.int32(sparse.max_steps - 1)), interact)
    assert bool(ts.truncated) and not bool(ts.terminated)
    _, ts = sparse_step(key, last.replace(step=jnp.int32(sparse.max_steps - 2)), interact)
    assert not bool(ts.done)


def test_overcooked_cnn_reference_config_trains_a_team_on_the_shaped_reward(tmp_path):
    """Through the CLI with JaxMARL's IPPO-CNN settings for Overcooked
    (``jaxmarl_ippo_cnn_overcooked``: a CNN trunk shared by actor and critic), on
    cramped_room with 100-step episodes and the shaped reward (the peers anneal it in;
    here it stays on), two 8-channel 3×3 layers and lr 5e-3 without annealing: the
    untrained team earns ≈ 1 per episode, IPPO 28–31 after 20 updates (measured
    2026-12-05: 0.6 / 1.3 at the start, medians of the last 5 updates 30.8 / 28.0 for
    seeds 0, 1; with 16 channels 30.0 / 24.0 for 20% more CPU, the convolutions being
    most of a chunk's arithmetic). Deliveries (the sparse reward) take far longer and are
    not tested here. This is the file's CLI test too."""
    returns = cli_curves(tmp_path, "--config", "jaxmarl_ippo_cnn_overcooked", "--env-arg", "layout=cramped_room",
                         "--env-arg", "max_steps=100", "--num-envs", "32", "--num-steps", "100", "--updates-per-chunk",
                         "10", "--num-minibatches", "4", "--hidden", "64", "64", "--conv-features", "8", "8",
                         "--conv-kernels", "3", "3", "--no-anneal-lr", "--lr", "5e-3", "--steps", str(20 * 32 * 100),
                         "--seeds", "2", "--seed", "0")  # [seeds, updates]
    print("overcooked return per 2 updates:", np.round(returns[:, ::2], 1))
    assert "Conv_0" in jaxpo.load_policy(str(tmp_path / "run")).params["actor"]["params"]  # the file's CNN trunk
    assert np.all(returns[:, 0] < 3.0)
    assert np.all(np.median(returns[:, -5:], axis=1) > 15.0)


def test_overcooked_bad_layout_and_misplaced_shaped_reward_are_refused():
    with pytest.raises(ValueError, match="unknown Overcooked layout 'nope'; known: cramped_room"):
        jaxpo.envs.make("overcooked", layout="nope")
    with pytest.raises(ValueError, match="shaped_reward is Overcooked's"):
        jaxpo.envs.make("switch_riddle", shaped_reward=1.0)


# -- MPE: the single-agent scenario and FACMAC's predators against a heuristic prey ----------


def test_mpe_simple_is_one_agent_matching_jaxmarl():
    env = jaxpo.envs.make("MPE_simple_v3")
    assert (env.num_agents, env.obs_dim, env.num_actions, env.max_steps) == (1, 4, 5, 26)
    key = jax.random.PRNGKey(0)
    state, _ = env.reset(key)
    new, ts = env.step(key, state, jnp.array([3], jnp.int32))
    raw_obs, raw_new, raw_rew, _, _ = env.env.step_env(key, state, {"agent_0": jnp.int32(3)})
    np.testing.assert_allclose(ts.obs[0], raw_obs["agent_0"], rtol=1e-6)
    np.testing.assert_allclose(ts.reward[0], raw_rew["agent_0"], rtol=1e-6)
    np.testing.assert_array_equal(new.p_pos, raw_new.p_pos)


@pytest.mark.parametrize("name, predators", [("MPE_simple_facmac_3a_v1", 3), ("MPE_simple_facmac_6a_v1", 6)])
def test_facmac_controls_the_predators_and_jaxmarl_moves_the_prey(name, predators):
    env = jaxpo.envs.make(name)
    assert env.continuous and env.num_agents == predators and len(env.env.agents) > predators
    assert env.agents == tuple(env.env.adversaries)  # the prey (good agents) are not jaxpo's
    np.testing.assert_array_equal(env.coupling, np.ones((predators, predators)))
    key = jax.random.PRNGKey(0)
    state, _ = env.reset(key)
    actions = jax.random.uniform(key, (predators, env.num_actions))
    new, ts = jax.jit(env.step)(key, state, actions)
    raw = {a: actions[i] for i, a in enumerate(env.agents)}
    raw.update({a: jnp.zeros((5,)) for a in env.env.good_agents})  # ignored: the heuristic moves the prey
    raw_obs, raw_new, raw_rew, _, _ = env.env.step_env(key, state, raw)
    np.testing.assert_allclose(ts.obs, np.stack([raw_obs[a] for a in env.agents]), rtol=1e-6)
    np.testing.assert_allclose(ts.reward, [raw_rew[a] for a in env.agents], rtol=1e-6)
    np.testing.assert_allclose(new.p_pos, raw_new.p_pos, rtol=1e-6)
    assert len(set(np.asarray(ts.reward).tolist())) == 1  # the predators share one reward
    # Every FACMAC episode ends at MPE's time limit: a truncation.
    _, ts = env.step(key, state.replace(step=jnp.int32(env.max_steps - 1)), actions)
    assert bool(ts.truncated) and not bool(ts.terminated)


# -- SMACv2: random unit types and start positions at every reset --------------------------


def test_smacv2_maps_draw_units_and_positions_at_each_reset():
    env = jaxpo.envs.make("HeuristicEnemySMAX", scenario="smacv2_5_units")
    assert (env.num_agents, env.env.num_enemies, env.num_actions) == (5, 5, 10)
    reset = jax.jit(jax.vmap(env.reset))
    states, ts = reset(jax.random.split(jax.random.PRNGKey(0), 8))
    types, positions = np.asarray(states.state.unit_types), np.asarray(states.state.unit_positions)
    assert len({tuple(row) for row in types}) > 1  # unit types differ across resets
    assert len({tuple(row.ravel().round(3)) for row in positions}) == 8
    assert ts.obs.shape == (8, 5, env.obs_dim) and ts.global_state.shape == (8, 5, env.global_state_dim)


# -- names refused ---------------------------------------------------------------------


def test_learned_policy_enemies_play_smax_with_the_given_policy():
    """LearnedPolicyEnemySMAX: the enemies act by the given flax policy. One that always
    stops (SMAX's action 4) never attacks, so idle allies keep full health for 40 steps;
    JaxMARL's heuristic enemies, from the same start, wound them."""
    import distrax
    import flax.linen as nn

    class Idle(nn.Module):  # (distribution, value) from enemy observations [enemies, O]
        @nn.compact
        def __call__(self, obs):
            logits = jnp.zeros(obs.shape[:-1] + (8,)).at[..., 4].set(50.0) + 0.0 * nn.Dense(8)(obs)
            return distrax.Categorical(logits=logits), jnp.zeros(obs.shape[:-1])

    with pytest.raises(ValueError, match="pass policy= \\(a flax module"):
        jaxpo.envs.make("LearnedPolicyEnemySMAX", scenario="3m")
    heuristic = jaxpo.envs.make("HeuristicEnemySMAX", scenario="3m")
    params = Idle().init(jax.random.PRNGKey(0), jnp.zeros((3, heuristic.obs_dim)))
    learned = jaxpo.envs.make("LearnedPolicyEnemySMAX", scenario="3m", policy=Idle(), params=params)
    assert (learned.num_agents, learned.num_actions, learned.max_steps) == (3, 8, 101)

    def ally_health(env):
        def step(state, key):
            state, _ = env.step(key, state, jnp.full((3,), 4, jnp.int32))  # allies stop
            return state, state.state.unit_health[:3]
        state, _ = env.reset(jax.random.PRNGKey(0))
        return np.asarray(jax.jit(lambda s: jax.lax.scan(step, s, jax.random.split(jax.random.PRNGKey(1), 40)))(
            state)[1])

    untouched, wounded = ally_health(learned), ally_health(heuristic)
    np.testing.assert_array_equal(untouched, np.broadcast_to(untouched[0], untouched.shape))
    assert wounded[-1].sum() < wounded[0].sum()


@pytest.mark.parametrize("name", ["SMAX", "MPE_simple_tag_v3", "coin_game"])
def test_competitive_names_are_refused_as_not_cooperative(name):
    assert name in COMPETITIVE_JAXMARL
    with pytest.raises(ValueError, match=f"{name}' is not a cooperative task.*switch_riddle"):
        jaxpo.envs.make(name)


def test_every_supported_name_is_registered():
    assert set(SUPPORTED_JAXMARL) <= set(jaxpo.envs.registered_names())
    assert not set(COMPETITIVE_JAXMARL) & set(SUPPORTED_JAXMARL)


@pytest.mark.parametrize("name", ["jaxmarl_ippo_ff_overcooked", "jaxmarl_ippo_rnn_overcooked_v2"])
def test_the_shipped_reference_configs_train_through_the_cli(name, tmp_path):
    """Each file at CI size (its own network kind: MLP, CNN + GRU). The other files train
    through the CLI in the learning tests: ``jaxmarl_ippo_cnn_overcooked`` (CNN, shared
    trunk) and ``jaxmarl_ippo_ff_hanabi`` (shared trunk over the legal moves) above,
    ``jaxmarl_ippo_ff_mabrax`` (a Gaussian policy on a brax body) in test_jaxmarl_control.py."""
    loss = cli_curves(tmp_path, "--config", name, "--num-envs", "4", "--num-steps", "16", "--updates-per-chunk", "2",
                      "--num-minibatches", "2", "--hidden", "16", "16", "--steps", str(2 * 4 * 16), "--seeds", "1",
                      metric="loss")  # [1 run, 2 updates]; a missing row would stay NaN
    assert loss.shape == (1, 2) and np.all(np.isfinite(loss))
