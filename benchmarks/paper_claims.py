"""The analysis's three claims (``docs/design.md`` §1), measured with jaxpo.

Run:  python benchmarks/paper_claims.py                        # all three, full size (~2 h on 2 CPU cores)
      python benchmarks/paper_claims.py --claims 2 3 --quick   # small versions (what the notebook runs)
      python benchmarks/paper_claims.py --claims 3 --envs pg_c1 traffic_c1

One JSON object per line on stdout (also appended to ``OUT/claims.jsonl``); figures
``OUT/claim1.png``, ``claim2.png``, ``claim3.png``. Statistics over seeds are interquartile
means (IQM) with 95% stratified-bootstrap intervals (``jaxpo.report.group_statistics``,
rliable).

**Supports of size m.** ``window(n, m)[k, i] = 1`` iff ``(i − k) mod n < m``: m agents
per row and per column. On the advantage side, ``(S_A, S_R) = (W, I)`` sums m agents'
advantages into each term; on the ratio side, ``(I, W)`` multiplies m agents' ratios
into each term's weight. Both have the signal matrix ``S̃ = S_R @ S_A = W``.

Claim 1 — redundancy. Pairs with equal S̃: team advantage ``(11ᵀ, I)`` vs joint ratio
``(I, 11ᵀ)``, ``window`` 4 on either side, and happo's order-triangular matrices vs their
canonical form ``(S̃, I)``. (a) The first update's policy gradient on one real batch, with
advantages unnormalised (equal to float precision) and batch-normalised (then the
advantage side is divided by std(S_A A) and the ratio side by std(A): parallel, scaled).
(b) Learning curves over seeds in one program, with ``Config.diagnostics`` logging the
gradient SNR and the importance weights' variance, to see whether the curves' difference
follows the variance gap.

Claim 2 — variance ordering. On one batch per seed (public_goods, per-agent rewards,
N = 32, after a short ippo warm-up), per m and side: the per-agent policy-gradient
variance and SNR (``jaxpo.diagnostics.policy_gradient_stats``) at θ_old and after 1, 2
and 4 epochs of updates on that batch, and the variance of the importance weights. Fits
linear (``a + b m``) and exponential (``a · exp(b m)``) models to each curve.

Claim 3 — interior optimum. khop(coupling, κ) for κ = 0 … c + 3 (the declared graph, or
the measured one: ``"graph": "measured"``; a κ whose khop is already the full support is
left to the full support's row) and the full support, seeds, every run of an environment
in one vmapped program; with ``"state_hops"``, khop on each state's own graph
(``Config.interaction_hops``), one program per κ. Per κ: final return (mean of
the last 10% of updates), area under the curve (mean return over training: sample
efficiency) and env steps until the run's smoothed return first reaches 90% of the
best κ's final IQM (the budget when it never does).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxpo import Config, Experiment, Hyper, envs, runs, train

from jaxpo.core import diagnostics, losses, support

from jaxpo.run import report
from jaxpo.program.compiled import Trainer

HERE = os.path.dirname(os.path.abspath(__file__))


def emit(record: dict, out: str | None) -> None:
    """One JSON line on stdout and appended to ``out/claims.jsonl``; silent without ``out``
    (the functions' return values carry everything, e.g. in a notebook)."""
    if out:
        line = json.dumps(record)
        print(line, flush=True)
        with open(os.path.join(out, "claims.jsonl"), "a") as f:
            f.write(line + "\n")


def window(n: int, m: int) -> np.ndarray:
    """float32 [n, n]: ``W[k, i] = 1`` iff ``(i − k) mod n < m`` (m agents per row and column)."""
    k, i = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    return ((i - k) % n < m).astype(np.float32)


def advantage_side(n: int, m: int) -> support.Support:
    return support.custom(window(n, m), np.eye(n), name=f"adv{m}")


def ratio_side(n: int, m: int) -> support.Support:
    return support.custom(np.eye(n), window(n, m), name=f"ratio{m}")


def iqm_ci(scores: np.ndarray) -> dict[str, float]:
    """IQM and its 95% bootstrap interval of scores [n]."""
    stats = report.group_statistics({"x": np.asarray(scores, np.float64)}, reps=2000)["x"]
    return {"iqm": stats["iqm"], "ci": [stats["iqm_ci_low"], stats["iqm_ci_high"]]}


def fit_growth(m: np.ndarray, v: np.ndarray) -> dict[str, float]:
    """Least-squares models of v(m) > 0: linear ``a + b m``, exponential ``a exp(b m)`` and
    power ``a m^p`` (the last two fitted to log v); R² of each on v itself, and v's growth
    from the smallest to the largest m. (p ≈ 1: independent noises adding up; p ≈ 2:
    perfectly correlated ones.)"""
    m, v = np.asarray(m, float), np.maximum(np.asarray(v, float), 1e-30)
    total = np.sum((v - v.mean()) ** 2)
    r2 = lambda pred: float(1 - np.sum((v - pred) ** 2) / total) if total > 0 else float("nan")
    b_lin, a_lin = np.polyfit(m, v, 1)
    b_exp, log_a = np.polyfit(m, np.log(v), 1)
    p, log_c = np.polyfit(np.log(m), np.log(v), 1)
    return {"linear_r2": r2(a_lin + b_lin * m), "exp_r2": r2(np.exp(log_a + b_exp * m)), "exp_rate": float(b_exp),
            "power_r2": r2(np.exp(log_c) * m ** p), "power": float(p), "growth": float(v[-1] / v[0])}


def fit_product(m: np.ndarray, var: np.ndarray) -> dict[str, float]:
    """The multiplicative model of the importance weights' variance: a product of m
    independent mean-1 factors of variance v each has ``Var = (1 + v)^m − 1`` (exponential
    in m; linear, ``m v``, only while ``m v ≪ 1``). Fits ``log(1 + Var) = m log(1 + v)``
    (least squares through 0) and, for comparison, ``Var = b m``; R² of each on Var."""
    m, var = np.asarray(m, float), np.asarray(var, float)
    total = np.sum((var - var.mean()) ** 2)
    r2 = lambda pred: float(1 - np.sum((var - pred) ** 2) / total) if total > 0 else float("nan")
    rate = float(m @ np.log1p(var) / (m @ m))
    return {"factor_variance": float(np.expm1(rate)), "product_r2": r2(np.expm1(rate * m)),
            "linear_r2": r2((m @ var) / (m @ m) * m), "measured_m1": float(var[0]), "growth": float(var[-1] / var[0])}


def advantage_profile(advantages: np.ndarray, n: int) -> dict[str, float]:
    """Per-agent advantages ``[seeds, S, 1, N]`` (S_A = I): their mean over std, and the
    mean correlation between agents 1, 2, 4, … apart on the ring — what decides whether a
    sum of m of them grows in variance like m (independent, zero mean) or like m²."""
    a = advantages.reshape(advantages.shape[0], -1, n)
    out = {"mean_over_std": float(np.mean(a.mean((1, 2)) / a.std((1, 2))))}
    centred = a - a.mean(1, keepdims=True)
    for d in (1, 2, 4, 8):
        if d < n:
            x, y = centred, np.roll(centred, -d, axis=2)
            out[f"correlation_{d}_apart"] = float(np.mean((x * y).mean(1) / (x.std(1) * y.std(1))))
    return out


def batch_gradient(tr: Trainer, actor: Any, data: Any, hyper: Hyper) -> Any:
    """The policy surrogate's gradient over the whole batch (objective, not loss)."""
    samples, advantages = data[0], data[1]

    def objective(params):
        return -losses.policy_loss(tr.log_probs(params, samples), tr.flat_time_major(samples.log_prob),
                                   tr.flat_time_major(advantages), hyper.S_R, hyper.clip_eps)[0]

    return jax.grad(objective)(actor)


def warm_states(tr: Trainer, seeds: list[int], updates: int):
    """``[S]`` states after ``updates`` ippo updates (a policy away from uniform) and the
    next rollout of each, ``(state, traj)``."""
    hyper = Hyper.stack([Hyper.create(support.ippo(tr.num_agents))] * len(seeds))
    state = jax.jit(jax.vmap(tr.init))(jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds)), hyper)
    step = jax.jit(jax.vmap(tr.step))
    for _ in range(updates):
        state, _ = step(state, hyper)
    _, traj, _ = jax.jit(jax.vmap(tr.collect))(state, hyper)
    return state, traj


# ------------------------------------------------------------------ claim 1


def claim1(n: int, seeds: list[int], steps: int, num_envs: int, out: str | None, quick: bool) -> dict:
    base = Config(env="public_goods", env_kwargs={"num_agents": n, "radius": 1}, num_envs=num_envs, num_steps=50,
                  hidden=(32, 32), updates_per_chunk=5 if quick else 10, num_epochs=4, num_minibatches=4)
    happo_support = support.happo(n, seed=0)
    pairs = {
        "team": (support.custom(np.ones((n, n)), np.eye(n), name="team_adv"), support.custom(np.eye(n), np.ones((n, n)), name="joint_ratio")),
        "window4": (advantage_side(n, 4), ratio_side(n, 4)),
        "happo": (happo_support.canonical(), happo_support),
    }
    # (a) one batch: first-update gradients, unnormalised and batch-normalised advantages
    gradients = {}
    for norm in ("none", "batch"):
        tr = Trainer(dataclasses.replace(base, adv_norm=norm))
        state, traj = warm_states(tr, seeds[:1], updates=0)
        state, traj = jax.tree.map(lambda x: x[0], (state, traj))
        data_fn, gradient_fn = jax.jit(tr.training_data), jax.jit(functools.partial(batch_gradient, tr))
        for pair, sups in pairs.items():
            grads = []
            for sup in sups:
                hyper = Hyper.create(sup)
                data = data_fn(state, traj, hyper)
                g = gradient_fn(state.params["actor"], data, hyper)
                grads.append(np.concatenate([np.ravel(x) for x in jax.tree.leaves(g)]).astype(np.float64))
            a, r = grads
            gradients[f"{pair}/{norm}"] = {
                "max_abs_diff_over_max": float(np.abs(a - r).max() / np.abs(r).max()),
                "cosine": float(a @ r / np.linalg.norm(a) / np.linalg.norm(r)),
                "norm_ratio_adv_over_ratio": float(np.linalg.norm(a) / np.linalg.norm(r)),
            }
    emit({"claim": 1, "part": "first_update_gradient", "n": n, "gradients": gradients}, out)

    # (b) learning: every support of every pair, all seeds, one program, diagnostics on
    config = dataclasses.replace(base, diagnostics=True)
    sups = [s for pair in pairs.values() for s in pair]
    hyper, run_seeds, labels = runs(sups, seeds)
    config, updates = Experiment(config=config).replace(run={"steps": steps}).chunking()
    result = train(config, hyper, run_seeds, num_updates=updates, labels=labels, progress=False)
    curves = {}
    last_epoch = config.num_epochs
    for s_index, sup in enumerate(sups):
        rows = slice(s_index * len(seeds), (s_index + 1) * len(seeds))
        ret = result.metrics["return"][rows]
        curves[sup.name] = report.window_means(ret, 0.05)
        emit({"claim": 1, "part": "learning", "support": sup.name, "seeds": len(seeds), "env_steps": steps,
              "final_return": iqm_ci(report.final_mean(ret)),
              "auc_return": iqm_ci(np.nanmean(ret, axis=1)),
              "pg_snr": iqm_ci(np.nanmean(result.metrics["pg_snr"][rows], axis=1)),
              "rho_var_last_epoch": iqm_ci(np.nanmean(result.metrics[f"rho_var_e{last_epoch}"][rows], axis=1)),
              "rho_clip_last_epoch": iqm_ci(np.nanmean(result.metrics[f"rho_clip_e{last_epoch}"][rows], axis=1)),
              "seconds": round(result.seconds, 1)}, out)
    return {"gradients": gradients, "curves": curves, "env_steps": result.env_steps, "pairs": pairs,
            "metrics": result.metrics, "sups": sups, "seeds": len(seeds)}


# ------------------------------------------------------------------ claim 2


def claim2(n: int, sizes: list[int], epochs: list[int], seeds: list[int], num_envs: int, num_steps: int,
           out: str | None, warmup: int = 5) -> dict:
    """Two ways of moving away from θ_old, e epochs on the batch: ``own`` — each support's
    own PPO epochs (what training does; the clip on ρ̄ limits how far it moves), and
    ``common`` — the same parameters for every support, moved by ippo's epochs, so both
    sides are measured at one policy displacement. ``warmup``: ippo updates before the
    batch (a longer warm-up fits the critics better: advantages closer to zero mean)."""
    # One epoch per update call: E epochs are E calls on the same batch (Adam continues).
    config = Config(env="public_goods", env_kwargs={"num_agents": n, "radius": 1}, num_envs=num_envs,
                    num_steps=num_steps, hidden=(32, 32), num_epochs=1, num_minibatches=4, adv_norm="none",
                    updates_per_chunk=1)
    tr = Trainer(config)
    state0, traj = warm_states(tr, seeds, updates=warmup)
    keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds) + 1000)
    epoch_key = lambda e: jax.vmap(jax.random.fold_in, (0, None))(keys, e)
    data_fn = jax.jit(jax.vmap(tr.training_data))
    update_fn = jax.jit(jax.vmap(lambda s, d, k, h: tr.update(s, d, k, h)[0]))
    grads_fn = jax.jit(jax.vmap(lambda a, d, h: diagnostics.policy_gradient_stats(tr, a, d, h)))
    weights_fn = jax.jit(jax.vmap(lambda a, d, h: diagnostics.importance_weight_stats(tr, a, d, h)))
    stack = lambda sup: Hyper.stack([Hyper.create(sup)] * len(seeds))

    def moved(state, data, hyper) -> dict[int, Any]:
        """Actor parameters after each of ``epochs`` epochs of ``hyper``'s updates on ``data``."""
        params = {}
        for e in range(max(epochs) + 1):
            params[e] = state.params["actor"]
            new_params, opt_state, _ = update_fn(state, data, epoch_key(e), hyper)
            state = state.replace(params=new_params, opt_state=opt_state)
        return params

    ippo = stack(support.ippo(n))
    ippo_data = data_fn(state0, traj, ippo)
    profile = advantage_profile(np.asarray(ippo_data[1]), n)
    common = moved(state0, ippo_data, ippo)
    table = {}
    for side, make in (("advantage", advantage_side), ("ratio", ratio_side)):
        for m in sizes:
            hyper = stack(make(n, m))
            data = data_fn(state0, traj, hyper)
            for protocol, params in (("own", moved(state0, data, hyper)), ("common", common)):
                for e in epochs:
                    if e == 0 and protocol == "common":
                        continue  # θ_old: the same parameters as "own"
                    g = grads_fn(params[e], data, hyper)
                    w = weights_fn(params[e], data, hyper)
                    variance = np.asarray(g["variance"]).mean(1)  # [seeds], mean over agents
                    snr = np.asarray(g["snr"]).mean(1)
                    table[side, m, protocol, e] = {"variance": variance, "snr": snr, "rho_var": np.asarray(w["variance"])}
                    emit({"claim": 2, "warmup": warmup, "side": side, "m": m, "protocol": protocol, "epochs": e,
                          "seeds": len(seeds),
                          "pg_variance": iqm_ci(variance), "pg_snr": iqm_ci(snr),
                          "rho_var": iqm_ci(np.asarray(w["variance"])), "rho_max": float(np.max(w["max"])),
                          "rho_clip": float(np.mean(w["clip_frac"]))}, out)
    for side, m in [(side, m) for side in ("advantage", "ratio") for m in sizes]:
        table[side, m, "common", 0] = table[side, m, "own", 0]
    fits = {}
    median = lambda side, protocol, e, key: np.array([float(np.median(table[side, m, protocol, e][key])) for m in sizes])
    for side in ("advantage", "ratio"):
        for protocol in ("own", "common"):
            for e in epochs:
                fits[f"{side}/{protocol}/epochs{e}/pg_variance"] = fit_growth(np.array(sizes), median(side, protocol, e, "variance"))
                if side == "ratio" and e > 0:
                    fits[f"ratio/{protocol}/epochs{e}/rho_var"] = fit_product(np.array(sizes), median(side, protocol, e, "rho_var"))
    same = max(float(np.max(np.abs(table["advantage", m, "own", 0]["variance"] - table["ratio", m, "own", 0]["variance"])
                             / table["ratio", m, "own", 0]["variance"])) for m in sizes)
    emit({"claim": 2, "part": "fits", "n": n, "warmup": warmup, "sizes": sizes, "fits": fits,
          "advantages": profile, "theta_old_max_rel_diff_between_sides": same}, out)
    return {"table": table, "fits": fits, "sizes": sizes, "epochs": epochs, "advantages": profile}


# ------------------------------------------------------------------ claim 3

ENVS = {  # name -> (env, env kwargs, radius c, Config options)
    "pg_c1": ("public_goods", {"num_agents": 32, "radius": 1}, 1, {}),
    "pg_c2": ("public_goods", {"num_agents": 32, "radius": 2}, 2, {}),
    # The variance side of the trade-off made larger: 4x fewer samples per update and
    # 9x the productivity noise (u ~ U[0.1, 1.9]) — what the analysis says makes a
    # larger-than-needed advantage support costly.
    "pg_c1_noisy_small_batch": ("public_goods", {"num_agents": 32, "radius": 1, "noise": 0.9}, 1, {"num_envs": 4}),
    "traffic_c1": ("traffic_grid", {"rows": 6, "cols": 6}, 1, {}),
    # c = 2 where, on the dynamics alone, a (c − 1)-hop credit should get the decision
    # wrong: a full contribution's value to the 3 agents within 1 hop is 3/5 of its team
    # value 1, below the cost 0.7 (at the default cost 0.5 it is above). Measured: κ = 1
    # learns the team optimum anyway (docs/analysis.md, claim 3).
    "pg_c2_cost07": ("public_goods", {"num_agents": 32, "radius": 2, "cost": 0.7}, 2, {}),
    # Users on a line between access points: a collision couples the two neighbours that
    # share an AP, and a user's reward counts only its own deliveries (c = 1). A user with
    # an empty queue acts on nothing: "wireless_line" trains it like the others (as its
    # recorded rows did, before environments reported active agents), "_active" leaves
    # it out of the objective and of its neighbours' credit (a state-dependent support),
    # and adds khop on each state's own graph ("state_hops": Config.interaction_hops, over
    # mappo's ones; users coupled only while both hold a packet), one program per κ.
    "wireless_line": ("wireless", {"num_users": 16}, 1, {"active_agents": False}),
    "wireless_line_active": ("wireless", {"num_users": 16}, 1, {"active_agents": True, "state_hops": (1, 2, 3)}),
    # Four JaxNav robots, each rewarded for its own driving alone (rew_lambda=1): two
    # robots couple only while they are close enough to touch or to sense each other
    # (jaxnav's per-state graph). The declared graph is complete (any two can meet), so
    # every static κ >= 1 is the full support and only κ = 0 is run beside it. 32 lidar
    # beams instead of 200 and 200-step episodes make a run fit a CPU session.
    "jaxnav_local": ("jaxnav", {"num_agents": 4, "rew_lambda": 1.0, "lidar_num_beams": 32, "max_steps": 200}, 1,
                     {"state_hops": (1, 2)}),
    # MPE simple_spread at its default rewards, khop on the graph measure_coupling finds
    # ("graph": "measured"; MEASURED_SETTINGS): complete, the landmark-coverage term being
    # everyone's, so again κ = 0 against the full support.
    "mpe_spread": ("MPE_simple_spread_v3", {}, 1, {"graph": "measured"}),
}


def claim3(names: list[str], seeds: list[int], steps: int, out: str | None, quick: bool) -> dict:
    results = {}
    for name in names:
        env_name, kwargs, c, options = ENVS[name]
        state_hops, graph = options.get("state_hops", ()), options.get("graph", "declared")
        options = {key: value for key, value in options.items() if key not in ("state_hops", "graph")}
        if quick:  # the notebook's size: 8 agents, fewer κ
            kwargs = {**kwargs, "num_agents": 8} if env_name == "public_goods" else {"rows": 2, "cols": 4}
        env = envs.make(env_name, **kwargs)
        n = env.num_agents
        coupling = envs.coupling.measured_graph(env) if graph == "measured" else env.coupling
        full = support.mappo(n)
        # a κ whose reach is already every agent is the full support: run once, as "full"
        khops = {k: support.khop(coupling, k) for k in range(0, c + 2 if quick else c + 4)}
        khops = {k: sup for k, sup in khops.items() if not np.array_equal(sup.S_A, full.S_A)}
        sups = [*khops.values(), full]
        labels = [str(k) for k in khops] + ["full"]
        config = Config(env=env_name, env_kwargs=kwargs, **{"num_envs": 16, "num_steps": 50, "hidden": (32, 32),
                                                              "updates_per_chunk": 5 if quick else 10, **options})
        hyper, run_seeds, run_labels = runs(sups, seeds)
        config, updates = Experiment(config=config).replace(run={"steps": steps}).chunking()
        start = time.perf_counter()
        result = train(config, hyper, run_seeds, num_updates=updates, labels=run_labels, progress=False)
        ret = result.metrics["return"].reshape(len(sups), len(seeds), -1)
        for k in state_hops:  # a static option: one program each
            state_hyper, state_seeds, state_labels = runs([support.mappo(n)], seeds)
            state = train(dataclasses.replace(config, interaction_hops=k), state_hyper, state_seeds,
                          num_updates=updates, labels=state_labels, progress=False)
            ret = np.concatenate([ret, state.metrics["return"].reshape(1, len(seeds), -1)])
            labels.append(f"{k} (state)")
        smooth = np.stack([report.window_means(r, 0.05) for r in ret])  # [K, S, U']
        final = np.stack([report.final_mean(r) for r in ret])  # [K, S]
        best = max(iqm_ci(f)["iqm"] for f in final)
        target = 0.9 * best if best > 0 else best / 0.9  # negative returns (costs): within 1/0.9 of the best
        steps_axis = result.env_steps[len(result.env_steps) - smooth.shape[2]:]
        reached = smooth >= target
        to_target = np.where(reached.any(2), steps_axis[np.argmax(reached, axis=2)], result.env_steps[-1]).astype(float)
        rows = []
        for k, label in enumerate(labels):
            row = {"claim": 3, "env": name, "c": c, "n": n, "kappa": label, "seeds": len(seeds),
                   "env_steps": int(result.env_steps[-1]), "final_return": iqm_ci(final[k]),
                   "auc_return": iqm_ci(np.nanmean(ret[k], axis=1)), "steps_to_90pct": iqm_ci(to_target[k]),
                   "reached_90pct": int(reached[k].any(1).sum()), "target": float(target)}
            rows.append(row)
            emit(row, out)
        emit({"claim": 3, "env": name, "part": "timing", "runs": len(run_seeds),
              "seconds": round(time.perf_counter() - start, 1)}, out)
        results[name] = {"rows": rows, "labels": labels, "smooth": smooth, "steps": steps_axis, "c": c}
    return results


# ------------------------------------------------------------------ figures


def plot_claim1(res: dict, path: str | None):
    import matplotlib.pyplot as plt

    pairs = res["pairs"]
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 3.4), squeeze=False)
    steps = res["env_steps"][len(res["env_steps"]) - next(iter(res["curves"].values())).shape[1]:]
    for ax, (pair, sups) in zip(axes[0], pairs.items()):
        for sup, style in zip(sups, ("-", "--")):
            curve = res["curves"][sup.name]
            mean = np.nanmean(curve, 0)
            low, high = report.bootstrap_band(curve)
            ax.plot(steps, mean, style, label=sup.name)
            ax.fill_between(steps, low, high, alpha=0.2)
        ax.set_title(f"{pair}: same S̃ = S_R S_A")
        ax.set_xlabel("env steps")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("return (mean, 95% CI)")
    fig.tight_layout()
    return report.save_figure(fig, path)


def plot_claim2(res: dict, path: str | None):
    import matplotlib.pyplot as plt

    table, sizes, epochs = res["table"], res["sizes"], res["epochs"]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.8))
    for row, protocol in zip(axes, ("own", "common")):
        for e_index, e in enumerate(epochs):
            for side, style in (("advantage", "-"), ("ratio", "--")):
                med = lambda key: np.array([float(np.median(table[side, m, protocol, e][key])) for m in sizes])
                color = f"C{e_index}"
                row[0].plot(sizes, med("variance"), style, color=color, marker="o", label=f"{side}, {e} epochs")
                row[1].plot(sizes, med("snr"), style, color=color, marker="o")
                if side == "ratio" and e > 0:
                    row[2].plot(sizes, med("rho_var"), style, color=color, marker="o", label=f"{e} epochs")
        moved = "each support's own epochs" if protocol == "own" else "ippo's epochs (one θ for all)"
        for ax, title in zip(row, ("policy-gradient variance", "gradient SNR", "Var ρ̄, ratio side")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("support size m")
            ax.set_title(f"{title}\nθ moved by {moved}", fontsize=9)
        row[0].legend(fontsize=7)
        row[2].legend(fontsize=7)
    fig.tight_layout()
    return report.save_figure(fig, path)


def plot_claim3(res: dict, path: str | None):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(res), 3, figsize=(13, 3.3 * len(res)), squeeze=False)
    for row, (name, r) in zip(axes, res.items()):
        for k, label in enumerate(r["labels"]):
            mean = np.nanmean(r["smooth"][k], 0)
            row[0].plot(r["steps"], mean, label=f"κ={label}")
        row[0].set_title(f"{name} (c = {r['c']})")
        row[0].set_xlabel("env steps")
        row[0].xaxis.set_major_formatter(lambda steps, _: f"{steps / 1000:g}k")  # 150000 → 150k: no overlap
        row[0].legend(fontsize=7, ncol=2)
        x = np.arange(len(r["labels"]))
        for ax, key, title in ((row[1], "auc_return", "mean return over training (AUC)"),
                               (row[2], "final_return", "final return")):
            iqm = np.array([rw[key]["iqm"] for rw in r["rows"]])
            ci = np.array([rw[key]["ci"] for rw in r["rows"]])
            ax.errorbar(x, iqm, yerr=[iqm - ci[:, 0], ci[:, 1] - iqm], fmt="o", capsize=3)
            labels = r["labels"]  # a κ left out was the full support (claim3): c's line goes there
            ax.axvline(labels.index(str(r["c"]) if str(r["c"]) in labels else "full"), color="grey", ls=":")
            ax.set_xticks(x, [label.replace(" (state)", "\nstate") for label in labels])
            ax.set_xlabel("κ (dotted: coupling radius c)")
            ax.set_title(f"{title}, IQM, 95% CI")
    fig.tight_layout()
    return report.save_figure(fig, path)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, nargs="+", default=[1, 2, 3], choices=[1, 2, 3])
    parser.add_argument("--quick", action="store_true", help="small sizes (the notebook's)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per setting (default 8; quick 2)")
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS), help="claim 3's environments")
    parser.add_argument("--steps", type=int, default=None, help="env steps per run, claims 1 and 3")
    parser.add_argument("--warmup", type=int, default=5, help="claim 2: ippo updates before its batch")
    parser.add_argument("--epochs", type=int, nargs="+", default=None,
                        help="claim 2: epochs at which to measure (default 0 1 2 4 8; quick 0 1 2 4)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "paper_claims"))
    args = parser.parse_args(argv)
    if args.seeds is not None and args.seeds < 1:
        parser.error(f"--seeds must be a positive integer, got {args.seeds}")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps must be a positive integer, got {args.steps}")
    if args.warmup < 0 or any(e < 0 for e in args.epochs or []):
        parser.error("--warmup and --epochs must be >= 0")
    os.makedirs(args.out, exist_ok=True)
    seeds = list(range(args.seeds or (2 if args.quick else 8)))
    q = args.quick
    if 1 in args.claims:
        res = claim1(8 if q else 16, seeds, args.steps or (8_000 if q else 120_000), 8 if q else 16, args.out, q)
        plot_claim1(res, os.path.join(args.out, "claim1.png"))
    if 2 in args.claims:
        sizes = [1, 2, 4, 8] if q else [1, 2, 4, 8, 16, 32]
        epochs = sorted(set(args.epochs or ([0, 1, 2, 4] if q else [0, 1, 2, 4, 8])) | {0})
        res = claim2(8 if q else 32, sizes, epochs, seeds, 8 if q else 16, 16 if q else 32, args.out, args.warmup)
        plot_claim2(res, os.path.join(args.out, f"claim2{'' if args.warmup == 5 else f'_warmup{args.warmup}'}.png"))
    if 3 in args.claims:
        res = claim3(args.envs[:1] if q else args.envs, seeds, args.steps or (8_000 if q else 160_000), args.out, q)
        plot_claim3(res, os.path.join(args.out, "claim3.png"))


if __name__ == "__main__":
    sys.exit(main())
