"""PBT inside the compiled sweep (``jaxpo.run.population``): exploit and explore exactly
against a NumPy reference (who copies whom, what is copied and what is not, the explored
values), and a PBT sweep end to end: lineage, one compile, bitwise resume, bad input."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpo
from jaxpo import Config, Hyper, trainer
from jaxpo.core.support import make_support
from jaxpo.experiments.sweeps import plan
from jaxpo.run.population import exploit_explore
from jaxpo.run.steering import Axis, PopulationTable, window_scores
from jaxpo.run.report import read_csv
from runtools import StopAfter

R = 8
CONFIG = Config(env="public_goods", num_envs=4, num_steps=8, updates_per_chunk=1, hidden=(8,), recurrent=True,
                value_norm=True)
AXES = (Axis("lr", "loguniform", low=1e-4, high=1e-2, field="lr"),
        Axis("ent_coef", "values", values=(0.0, 0.01, 0.02), field="ent_coef"),
        Axis("preset", "category", values=("ippo", "mappo")))


@pytest.fixture(scope="module")
def batch():
    """Eight initialised runs of a small recurrent program with value normalisation:
    ``(state, hyper, codes, supports)``; the hidden states made non-zero."""
    tr = trainer(CONFIG)
    env = tr.env
    supports = Hyper.stack([Hyper.create(make_support(p, env.num_agents)) for p in ("ippo", "mappo")])
    lrs = np.geomspace(1e-4, 1e-2, R).astype(np.float32)
    ents = np.array([0.0, 0.01, 0.02, 0.0, 0.01, 0.02, 0.0, 0.01], np.float32)
    presets = np.arange(R) % 2
    hyper = Hyper.stack([Hyper.create(make_support(("ippo", "mappo")[p], env.num_agents), lr=float(lr), ent_coef=float(e))
                         for lr, e, p in zip(lrs, ents, presets)])
    state = tr.init_runs(jax.vmap(jax.random.PRNGKey)(jnp.arange(R, dtype=jnp.uint32)), hyper)
    carry = jax.tree.map(lambda h: h + 1.0, state.rollout.carry)
    state = state.replace(rollout=state.rollout.replace(carry=carry))
    codes = np.stack([lrs, ents, presets.astype(np.float32)], axis=1)
    return state, hyper, codes, supports


def reference_parents(key, scores, populations, fraction):
    """NumPy: rank each population (NaN last, ties to the lower index); each of the
    bottom floor(P·fraction) copies the member of the top as many picked by its draw."""
    k_parent, _ = jax.random.split(key)
    u = np.asarray(jax.random.uniform(k_parent, (len(scores),)))
    s = np.where(np.isnan(scores), -np.inf, scores)
    parents = np.arange(len(s))
    for pop in np.unique(populations):
        members = np.flatnonzero(populations == pop)
        order = sorted(members, key=lambda r: (-s[r], r))  # best first
        cut = int(np.floor(len(members) * fraction))
        for r in order[len(members) - cut:] if cut else []:
            parents[r] = order[int(np.floor(u[r] * cut))]
    return parents


def reference_explore(key, codes, copied, table):
    """NumPy: per axis, a copied run resamples with probability ``resample`` (uniform in
    log space for loguniform, a value for values / category), else multiplies by a
    drawn factor clipped to the axis's range (numbers) or keeps its parent's (category)."""
    _, k_explore = jax.random.split(key)
    out = codes.copy()
    for a, (axis, k) in enumerate(zip(table.axes, jax.random.split(k_explore, len(table.axes)))):
        k_resample, k_draw, k_factor = jax.random.split(k, 3)
        resample = np.asarray(jax.random.uniform(k_resample, (len(codes),))) < table.resample
        u = np.asarray(jax.random.uniform(k_draw, (len(codes),)))
        factor = np.asarray(table.perturb, np.float32)[np.asarray(jax.random.randint(k_factor, (len(codes),), 0,
                                                                                     len(table.perturb)))]
        for r in np.flatnonzero(copied):
            n = len(axis.values)
            if axis.kind == "category":
                out[r, a] = min(int(u[r] * n), n - 1) if resample[r] else codes[r, a]
            elif resample[r]:
                out[r, a] = (np.exp(np.log(axis.low) + np.float32(u[r]) * (np.log(axis.high) - np.log(axis.low)))
                             if axis.kind == "loguniform" else axis.values[min(int(u[r] * n), n - 1)])
            else:
                low, high = axis.bounds
                out[r, a] = np.clip(np.float32(codes[r, a]) * factor[r], low, high)
    return out


@pytest.mark.parametrize("populations,scores", [
    (np.zeros(R, np.int32), np.array([3.0, 1.0, np.nan, 7.0, 5.0, 5.0, 0.5, 2.0], np.float32)),
    (np.array([0, 1] * 4, np.int32), np.array([1.0, 8.0, 2.0, 6.0, 3.0, 7.0, 4.0, 5.0], np.float32)),
])
def test_exploit_and_explore_match_the_numpy_reference(batch, populations, scores):
    state, hyper, codes, supports = batch
    table = PopulationTable(AXES, populations, supports, (2,), fraction=0.25 if populations.max() == 0 else 0.5,
                            perturb=(0.8, 1.25), resample=0.5)
    key = jax.random.PRNGKey(7)
    new_state, new_hyper, new_codes, parents = jax.jit(
        lambda *a: exploit_explore(*a, table=table))(state, hyper, jnp.asarray(codes), jnp.asarray(scores), key)
    parents = np.asarray(parents)
    want = reference_parents(key, scores, populations, table.fraction)
    np.testing.assert_array_equal(parents, want)
    copied = parents != np.arange(R)
    if populations.max() == 0:  # the two worst (NaN last) copy from the two best
        assert sorted(np.flatnonzero(copied)) == [2, 6] and set(parents[copied]) <= {3, 4}
    else:  # within each seed: two of four copy, from the best two of their own population
        assert copied.sum() == 4 and all(populations[parents[r]] == populations[r] for r in range(R))

    rows = lambda tree, idx: jax.tree.map(lambda x: np.asarray(x)[idx], tree)
    eq = lambda a, b: jax.tree.map(np.testing.assert_array_equal, a, b)
    # copied: the parent's learner; kept: the run's own environments, keys, update count
    eq(rows(new_state.params, slice(None)), rows(state.params, parents))
    eq(rows(new_state.opt_state, slice(None)), rows(state.opt_state, parents))
    eq(rows(new_state.value_norm, slice(None)), rows(state.value_norm, parents))
    eq(new_state.rollout.env_state, state.rollout.env_state)
    eq(new_state.rollout.timestep, state.rollout.timestep)
    eq(new_state.key, state.key)
    eq(new_state.update, state.update)
    for h_new, h_old in zip(jax.tree.leaves(new_state.rollout.carry), jax.tree.leaves(state.rollout.carry)):
        h_new, h_old = np.asarray(h_new), np.asarray(h_old)
        np.testing.assert_array_equal(h_new[~copied], h_old[~copied])
        assert (h_new[copied] == 0).all() and (h_old[copied] != 0).all()

    explored = reference_explore(key, codes[parents], copied, table)
    np.testing.assert_allclose(np.asarray(new_codes), explored, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(new_codes)[~copied], codes[~copied])
    allowed = np.array([0.0, 0.01, 0.02, 0.008, 0.016, 0.0125, 0.02])  # kept, drawn, or × 0.8 / 1.25 clipped to 0.02
    assert np.isclose(np.asarray(new_codes)[:, 1, None], allowed, rtol=1e-6, atol=0).any(axis=1).all()
    # the Hyper follows the codes: scalars are the codes, S_A / S_R the support table's row
    np.testing.assert_array_equal(np.asarray(new_hyper.lr), np.asarray(new_codes)[:, 0])
    np.testing.assert_array_equal(np.asarray(new_hyper.ent_coef), np.asarray(new_codes)[:, 1])
    preset = np.asarray(new_codes)[:, 2].astype(int)
    np.testing.assert_array_equal(np.asarray(new_hyper.S_A), np.asarray(supports.S_A)[preset])
    np.testing.assert_array_equal(np.asarray(new_hyper.S_R), np.asarray(supports.S_R)[preset])
    np.testing.assert_array_equal(np.asarray(new_hyper.clip_eps), np.asarray(hyper.clip_eps)[parents])


def test_scores_are_the_windows_mean_return_and_nan_without_episodes():
    returns = np.array([[1.0, np.nan, 3.0, 5.0], [np.nan, np.nan, np.nan, np.nan], [9.0, 9.0, np.nan, np.nan]])
    np.testing.assert_array_equal(window_scores(returns, 3), [4.0, np.nan, 9.0])


PBT = {"config": {"env": "public_goods", "num_envs": 8, "num_steps": 16, "updates_per_chunk": 2, "hidden": [16]},
       "run": {"steps": 8 * 16 * 2 * 6, "seeds": 2, "progress": False, "checkpoint_every": 1, "eval_every": 512,
               "eval_episodes": 2, "log": "csv,tensorboard"},
       "sweep": {"grid": {"preset": ["ippo", "mappo"]}, "random": {"lr": {"loguniform": [1e-3, 1e-2]}}, "samples": 2,
                 "schedule": "pbt", "ready": 2, "fraction": 0.25, "resample": 0.3}}


def pbt(out, name, **run):
    return {**PBT, "run": {**PBT["run"], "out": str(out), "name": name, **run}}


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    out = tmp_path_factory.mktemp("pbt")
    return jaxpo.sweep(pbt(out, "straight")), out / "straight"


def test_a_pbt_sweep_steps_in_one_program_and_writes_its_lineage(straight):
    result, run_dir = straight
    (program,) = result.programs
    assert program.compiles == 1 and program.population.compiles == 1  # the chunk and the step, once each
    assert (run_dir / "population.png").read_bytes()[:4] == b"\x89PNG"  # trajectories and lineage tree
    lineage = read_csv(str(run_dir / "lineage.csv"))
    steps = sorted(set(lineage["env_steps"].tolist()))
    assert steps == [0, 512, 1024]  # the start, then after chunks 2 and 4 of 256 steps (never after the last, 6)
    start = lineage["env_steps"] == 0
    np.testing.assert_array_equal(lineage["parent_id"][start], lineage["run_id"][start])
    for step in steps[1:]:
        rows = lineage["env_steps"] == step
        copied = rows & (lineage["parent_id"] != lineage["run_id"])
        assert copied.sum() == 2  # floor(8 × 0.25)
        assert set(np.asarray(lineage["preset"])[rows]) <= {"ippo", "mappo"}
        assert ((lineage["lr"][rows] >= 1e-3 * (1 - 1e-6)) & (lineage["lr"][rows] <= 1e-2 * (1 + 1e-6))).all()
    # with evaluation on, the runs are ranked on it: each step's scores are that update's evaluation
    evals = read_csv(str(run_dir / "eval.csv"))
    for step in steps[1:]:
        rows, at = lineage["env_steps"] == step, evals["env_steps"] == step
        np.testing.assert_allclose(lineage["score"][rows], evals["return"][at], rtol=1e-5)


@pytest.mark.parametrize("chunks", [3, 4])
def test_a_killed_pbt_sweep_resumes_bitwise(straight, tmp_path, chunks):
    # killed in chunk 3 (before its checkpoint): resumes from chunk 2's, whose PBT step it repeats;
    # killed in chunk 4: resumes from chunk 3's, with the Hyper that step explored
    with pytest.raises(KeyboardInterrupt):
        jaxpo.sweep(pbt(tmp_path, "killed"), hooks=[StopAfter(chunks)])
    jaxpo.resume(str(tmp_path / "killed"))
    _, run_dir = straight
    for name in ("lineage.csv", "summary.csv"):
        assert (tmp_path / "killed" / name).read_text() == (run_dir / name).read_text()
    for metric in ("loss", "return"):
        np.testing.assert_array_equal(read_csv(str(tmp_path / "killed" / "metrics.csv"))[metric],
                                      read_csv(str(run_dir / "metrics.csv"))[metric])
    for metric in ("return", "episode_length"):  # evaluation during training sees the same learners
        np.testing.assert_array_equal(read_csv(str(tmp_path / "killed" / "eval.csv"))[metric],
                                      read_csv(str(run_dir / "eval.csv"))[metric])


def test_a_diverged_member_is_replaced_and_the_sweep_goes_on(tmp_path):
    # lr 1e30 diverges in its first update; within each seed the healthy run's learner and
    # lr (perturbed by 1, never resampled) replace it after chunk 1, under on_nan "stop"
    spec = pbt(tmp_path, "nan", steps=8 * 16 * 2 * 3)
    spec["sweep"] = {"grid": {"lr": [3e-4, 1e30]}, "schedule": "pbt", "ready": 1, "fraction": 0.5,
                     "population": "seed", "perturb": [1.0], "resample": 0.0}
    spec["run"] = {**spec["run"], "seeds": 4}
    result = jaxpo.sweep(spec)
    lineage = read_csv(str(tmp_path / "nan" / "lineage.csv"))
    first = lineage["env_steps"] == 256
    diverged = np.asarray(lineage["lr"])[lineage["env_steps"] == 0] > 1
    np.testing.assert_array_equal(lineage["parent_id"][first] != lineage["run_id"][first], diverged)
    assert (lineage["lr"][first] == 3e-4).all()
    loss = result.programs[0].metrics["loss"]  # [8, 6]: masked from the divergence to the step, then trained again
    assert np.isnan(loss[diverged, :2]).all() and np.isfinite(loss[~diverged]).all() and np.isfinite(loss[:, 2:]).all()
    assert all(row["diverged_at_update"] == "" for row in result.summary)  # replaced, so alive again


@pytest.mark.parametrize("change,message", [
    ({"sweep": {"grid": {"num_envs": [4, 8]}}}, "static Config field"),
    ({"run": {"runs_per_group": 4}}, "ranks its 8 runs in one program call"),
    ({"sweep": {"fraction": 0.05}}, "is less than one run"),
    ({"sweep": {"ready": 0}}, "sweep.ready >= 1"),
    ({"sweep": {"perturb": [0.8, -1]}}, "positive factors"),
])
def test_bad_pbt_settings_are_refused_by_name(tmp_path, change, message):
    spec = pbt(tmp_path, "bad")
    spec = {k: {**spec.get(k, {}), **change.get(k, {})} for k in {*spec, *change}}
    with pytest.raises(ValueError, match=message):
        plan(spec)


# ------------------------------------------------------------------ successive halving

HALVING = {"config": {**PBT["config"], "hidden": [12]},  # its own program, so its compiles are counted from 0
           "run": {"steps": 8 * 16 * 2 * 8, "seeds": 1, "progress": False, "checkpoint_every": 1},
           "sweep": {"random": {"lr": {"loguniform": [1e-4, 1e-1]}, "preset": {"choice": ["ippo", "mappo"]}},
                     "samples": 8, "schedule": "halving", "ready": 2, "fraction": 0.5}}


def halving(out, name):
    return {**HALVING, "run": {**HALVING["run"], "out": str(out), "name": name}}


@pytest.fixture(scope="module")
def halved(tmp_path_factory):
    out = tmp_path_factory.mktemp("halving")
    return jaxpo.sweep(halving(out, "straight")), out / "straight"


def reference_stops(lineage, fraction, ready_steps):
    """NumPy, from lineage.csv alone: at each step, each slot's trial joins the scores of
    its rung (trained steps / ready) and stops when at least n − floor(n · fraction) of
    the n scores there are higher (NaN lowest). Returns {env_steps: set of stopped run ids}."""
    steps = sorted(set(lineage["env_steps"].tolist()) - {0})
    runs = sorted(set(lineage["run_id"].tolist()))
    start = {r: 0 for r in runs}
    records, stops = {}, {}
    for step in steps:
        rows = {int(r): s for r, s, e in zip(lineage["run_id"], lineage["score"], lineage["env_steps"]) if e == step}
        score = {r: -np.inf if np.isnan(s) else s for r, s in rows.items()}
        rung = {r: (step - start[r]) // ready_steps for r in runs}
        for r in runs:
            records.setdefault(rung[r], []).append(score[r])
        stops[step] = {r for r in runs if sum(v > score[r] for v in records[rung[r]])
                       >= len(records[rung[r]]) - np.floor(len(records[rung[r]]) * fraction)}
        for r in stops[step]:
            start[r] = step
    return stops


def test_halving_stops_by_rung_and_refills_without_a_recompile(halved):
    result, run_dir = halved
    (program,) = result.programs
    assert program.compiles == 1 and program.population.compiles == 1  # chunk and refill: once each
    assert (run_dir / "population.png").read_bytes()[:4] == b"\x89PNG"
    lineage = read_csv(str(run_dir / "lineage.csv"))
    stops = reference_stops(lineage, 0.5, 8 * 16 * 2 * 2)
    for step, stopped in stops.items():
        rows = lineage["env_steps"] == step
        assert set(np.asarray(lineage["run_id"])[rows & (lineage["parent_id"] == -1)]) == stopped, step
    assert len(stops[512]) == 4  # the first rung: plain successive halving, 8 -> 4
    samples = read_csv(str(run_dir / "samples.csv"))
    assert len(samples["trial"]) == 8 + sum(len(s) for s in stops.values())  # every sample listed once
    assert samples["budget_env_steps"].sum() == 8 * 2048  # the slots never idle: 8 runs × the budget
    assert (samples["budget_env_steps"] % 512 == 0).all()
    for trial, lr in zip(samples["trial"], samples["lr"]):
        if trial >= 8:  # a refill's values are its own stream's draw
            assert abs(lr - float(program.population.draw(int(trial))[0])) <= 1e-6 * lr
    assert (samples["lr"] >= 1e-4 * (1 - 1e-6)).all() and (samples["lr"] <= 1e-1 * (1 + 1e-6)).all()


def test_a_refill_starts_the_stopped_slots_from_scratch_and_touches_nothing_else(batch):
    from jaxpo.run.halving import refill

    state, hyper, codes, supports = batch
    tr = trainer(CONFIG)
    table = PopulationTable(AXES, np.zeros(R, np.int32), supports, (2,))
    stopped = np.array([0, 1, 0, 0, 1, 0, 0, 1], bool)
    new_codes = codes.copy()
    new_codes[stopped] = [[3e-3, 0.02, 1.0]] * 3
    seeds, trials = np.arange(R, dtype=np.uint32) + 100, np.arange(R, dtype=np.uint32) + 8
    new_state, new_hyper = jax.jit(lambda *a: refill(tr.learner.init, *a, table=table))(
        state, hyper, jnp.asarray(new_codes), jnp.asarray(stopped), jnp.asarray(seeds), jnp.asarray(trials))
    keys = jax.vmap(lambda s, t: jax.random.fold_in(jax.random.PRNGKey(s), t))(seeds, trials)
    fresh = jax.jit(jax.vmap(tr.learner.init))(keys, new_hyper)
    for new, old, init in zip(jax.tree.leaves(new_state), jax.tree.leaves(state), jax.tree.leaves(fresh)):
        new, old, init = np.asarray(new), np.asarray(old), np.asarray(init)
        np.testing.assert_array_equal(new[stopped], init[stopped])
        np.testing.assert_array_equal(new[~stopped], old[~stopped])
    np.testing.assert_array_equal(np.asarray(new_hyper.lr)[stopped], np.float32(3e-3))
    np.testing.assert_array_equal(np.asarray(new_hyper.S_A)[stopped], np.asarray(supports.S_A)[[1, 1, 1]])
    np.testing.assert_array_equal(np.asarray(new_hyper.S_A)[~stopped], np.asarray(hyper.S_A)[~stopped])


def test_a_killed_halving_sweep_resumes_bitwise(halved, tmp_path):
    with pytest.raises(KeyboardInterrupt):  # in chunk 5: resumes from chunk 4's checkpoint and repeats its step
        jaxpo.sweep(halving(tmp_path, "killed"), hooks=[StopAfter(5)])
    jaxpo.resume(str(tmp_path / "killed"))
    _, run_dir = halved
    for name in ("lineage.csv", "samples.csv", "summary.csv"):
        assert (tmp_path / "killed" / name).read_text() == (run_dir / name).read_text(), name


# ------------------------------------------------------------------ the best member's schedule, replayed


def reference_ancestry(lineage, run_id):
    """From lineage.csv alone: [(env_steps, the run the learner trained in from there)],
    walking back from ``run_id`` through parent_id."""
    steps = sorted(set(lineage["env_steps"].tolist()), reverse=True)
    where, chain = run_id, []
    for step in steps:
        row = (lineage["env_steps"] == step) & (lineage["run_id"] == where)
        chain.append((step, where))
        where = int(lineage["parent_id"][row][0])
    return chain[::-1]


def test_the_best_members_schedule_replays_through_the_cli(tmp_path):
    from jaxpo import cli
    from jaxpo.experiments.experiment import load_yaml

    # scored on the training return (no evaluation), where this sweep's best learner changes values on its way
    result = jaxpo.sweep(pbt(tmp_path, "sweep", eval_every=0, log="csv"))
    run_dir = tmp_path / "sweep"
    replay = load_yaml(str(run_dir / "best_schedule.yaml"))
    lineage = read_csv(str(run_dir / "lineage.csv"))
    best = int(open(run_dir / "best_schedule.yaml").read().split("(run ")[1].split(")")[0])
    chain = reference_ancestry(lineage, best)
    value = lambda step, run, name: np.asarray(lineage[name])[(lineage["env_steps"] == step) & (lineage["run_id"] == run)][0]
    root = chain[0][1]
    assert replay.run.seed == result.programs[0].runs[root].seed and replay.run.seeds == 1
    assert replay.hyper.lr == pytest.approx(value(0, root, "lr"), rel=1e-6)
    assert replay.support.preset == value(0, root, "preset")
    changes = [(step, run) for (step, run), (_, before) in zip(chain[1:], chain) if (value(step, run, "lr"), value(
        step, run, "preset")) != (value(step - 512, before, "lr"), value(step - 512, before, "preset"))]
    assert [seg["env_steps"] for seg in replay.sweep.segments] == [step for step, _ in changes]
    assert len(changes) >= 1  # this sweep's best learner changed values on its way (else the test shows little)
    for seg, (step, run) in zip(replay.sweep.segments, changes):
        assert seg["lr"] == pytest.approx(value(step, run, "lr"), rel=1e-6) and seg["preset"] == value(step, run, "preset")

    assert cli.main(["train", "--config", str(run_dir / "best_schedule.yaml"), "--out", str(tmp_path),
                     "--no-progress"]) == 0
    replayed = tmp_path / f"{replay.run.name}"
    assert replayed != run_dir
    rows = read_csv(str(replayed / "lineage.csv"))
    assert rows["env_steps"].tolist() == [0] + [s["env_steps"] for s in replay.sweep.segments]
    # until its first change the learner is its root ancestor's: the same seed, values and updates
    first = replay.sweep.segments[0]["env_steps"] // 128
    mine = read_csv(str(replayed / "metrics.csv"))["loss"][:first]
    theirs = result.programs[0].metrics["loss"][root, :first]
    np.testing.assert_allclose(mine, theirs, rtol=1e-4)  # one run, not eight in a batch: float rounding only


@pytest.mark.parametrize("segments,message", [
    ([{"env_steps": 300, "lr": 1e-3}], "multiples of the env steps per chunk"),
    ([{"env_steps": 512, "lr": 1e-3}, {"env_steps": 512, "lr": 2e-3}], "increasing"),
    ([{"env_steps": 512, "num_envs": 4}], "traced names"),
    ([{"env_steps": 512, "lr": -1}], "sweep.segments\\[0\\].lr"),
    ([{"lr": 1e-3}], "env_steps: positive int"),
])
def test_bad_replay_segments_are_refused_by_name(tmp_path, segments, message):
    spec = {**pbt(tmp_path, "bad"), "sweep": {"schedule": "replay", "segments": segments}}
    with pytest.raises(ValueError, match=message):
        plan(spec)
