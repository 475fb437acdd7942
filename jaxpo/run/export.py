"""Evaluation results as marl-eval JSON (InstaDeep's ``id-marl-eval``, import name
``marl_eval``: the field's rliable-based reporting tool).

    results = merge(marl_eval_results("runs/smax-2s3z"), marl_eval_results("runs/smax-3m"))
    write_marl_eval("metrics.json", results)
    # then, in marl-eval:
    #   data = data_process_pipeline(json.load(open("metrics.json")), ["return"])
    #   matrix, curves = create_matrices_for_rliable(data, "SMAX", ["return"])

The schema (marl-eval 0.0.4: what ``marl_eval.json_tools.JsonLogger`` writes and
``marl_eval.utils.data_processing_utils`` reads)::

    {env_name: {task_name: {algorithm: {"seed_<seed>": {
        "step_<i>": {"step_count": int, "elapsed_time": float,
                     "return": [E floats], "episode_length": [E ints], "win_rate": [E 0.0/1.0]},
        ...,                                   # i = 0, 1, … in evaluation order
        "absolute_metrics": {"return": [...], "episode_length": [...], "win_rate": [...]},
    }}}}}

What the exporter maps, from a run or sweep directory:

* ``eval_episodes.csv`` (one row per evaluated episode) -> the ``step_<i>`` entries: the
  i-th distinct ``update`` of a run, its episodes in ``episode`` order; ``step_count`` =
  ``env_steps`` and ``elapsed_time`` = ``elapsed_s`` as jaxpo wrote them (marl-eval's
  JsonLogger counts time from the first evaluation instead; marl-eval's tools never read
  it). ``return`` -> ``return``, ``length`` -> ``episode_length``, ``won`` -> ``win_rate``.
* ``absolute.csv`` (episodes of each run's best parameters) -> ``absolute_metrics``, a
  sibling of the steps at the seed level, with the same metric names. Without it there
  is no ``absolute_metrics``, and marl-eval's ``create_matrices_for_rliable`` (which
  every aggregate plot needs) refuses the data.

Metric names follow marl-eval's README, example data and tests (``return``,
``win_rate``; pass ``METRICS_TO_NORMALIZE`` = ``["return"]`` to its functions; Mava logs
``mean_episode_return`` instead). ``win_rate`` appears only where the environment has a win
condition: per-episode 0.0/1.0, so its mean is a fraction (Mava's JsonLogger logs one
percentage per evaluation). A non-finite return (a diverged run) stays ``NaN`` (Python's
``json`` reads it; strict JSON parsers do not).

marl-eval's expectations that shape the names: it lowercases every key (so names that
differ only in case would silently overwrite each other: ``merge`` refuses them), forbids
commas in algorithm names (its pipeline prints the error and returns the raw data, so
sweep settings ``lr=0.001,ent_coef=0`` are written ``lr=0.001;ent_coef=0``), and reads the
algorithms, seeds and steps of an environment's *first* task and run everywhere: a suite
merged for it should hold the same algorithms, seeds and number of evaluations per task.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import re
from typing import Any, Mapping

import yaml

from jaxpo.run.periodic_eval import ABSOLUTE_COLUMNS, EPISODE_COLUMNS
from jaxpo.run.report import write_text

EPISODES_FILE, ABSOLUTE_FILE = "eval_episodes.csv", "absolute.csv"
# What to pass as marl-eval's ``metrics_to_normalize`` for these files.
METRICS_TO_NORMALIZE = ["return"]
# Sweep axes that change what the algorithm is (they appear in the setting, so the
# setting alone names it) and axes that change the task (one directory, several tasks).
ALGORITHM_AXES = frozenset({"preset", "kappa", "matrices", "scheme"})
TASK_AXES = frozenset({"env", "env_kwargs"})


@dataclasses.dataclass(frozen=True)
class Names:
    """What a directory's experiment file says about it, in marl-eval's terms.

    ``env_name`` / ``task_name``: see ``env_and_task`` (None when read with
    ``experiment_names(..., task=False)``). ``algorithm``: from the support
    section (``ippo``, ``mappo``, ``khop(k=1)``, ``custom(<file>)``; ``happo`` for the
    sequential scheme with mappo's advantages, ``happo(<support>)`` with others), or None
    when the file has no support section (``jaxpo.train`` runs) or the sweep varies it.
    ``sweep``: the directory holds a sweep (``sweep.yaml``)."""

    env_name: str | None
    task_name: str | None
    algorithm: str | None
    sweep: bool


def env_and_task(env: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """marl-eval's (environment, task) for a jaxpo environment name: SMAX names (such
    as ``HeuristicEnemySMAX``) -> ``("SMAX", <env_kwargs.scenario>)``, ``MPE_simple_spread_v3``
    -> ``("MPE", "simple_spread")``, anything else (``public_goods``) -> ``(env, env)``.
    A SMAX environment without a scenario keeps its own name as the task."""
    env_kwargs = env_kwargs or {}
    if env.endswith("SMAX"):
        scenario = env_kwargs.get("scenario")
        return "SMAX", scenario if isinstance(scenario, str) and scenario else env
    if env.startswith("MPE_"):
        return "MPE", re.sub(r"_v\d+$", "", env[len("MPE_"):])
    return env, env


def experiment_names(directory: str, *, task: bool = True) -> Names:
    """The ``Names`` of a run directory (its ``config.yaml``) or sweep directory (its
    ``sweep.yaml``), read with plain YAML; a ValueError names the directory when neither
    file is there or it says too little. ``task=False``: the algorithm only (environment
    and task None, and a file that names no single task is no error)."""
    sweep = os.path.isfile(os.path.join(directory, "sweep.yaml"))
    path = os.path.join(directory, "sweep.yaml" if sweep else "config.yaml")
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise ValueError(f"{directory!r} has neither config.yaml nor sweep.yaml: pass env_name, task_name and "
                         f"algorithm") from None
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"{path!r} cannot be read: {err}") from None
    section = lambda name: data.get(name) if isinstance(data, Mapping) and isinstance(data.get(name), Mapping) else {}
    config, support, axes = section("config"), section("support"), set()
    if sweep:
        axes = {axis for kind in ("grid", "random") if isinstance(section("sweep").get(kind), Mapping)
                for axis in section("sweep")[kind]}
    env_name = task_name = None
    if task:
        if not isinstance(config.get("env"), str):
            raise ValueError(f"{path!r} names no environment (config.env): pass env_name and task_name")
        if axes & TASK_AXES:  # one task per directory: the names could not say which setting is which task
            raise ValueError(f"{path!r} sweeps the environment ({', '.join(sorted(axes & TASK_AXES))}): export "
                             f"its settings as separate tasks by hand, or pass env_name and task_name")
        env_name, task_name = env_and_task(config["env"], config.get("env_kwargs") or {})
    algorithm = None if axes & ALGORITHM_AXES else _algorithm(config, support)
    return Names(env_name, task_name, algorithm, sweep)


def _algorithm(config: Mapping[str, Any], support: Mapping[str, Any]) -> str | None:
    """The support's name as jaxpo labels a run of it (``khop(k=1)``, ``custom(<file>)``)."""
    preset = support.get("preset")
    if not isinstance(preset, str):
        return None
    name = preset
    if preset == "khop":
        name = f"khop(k={support.get('kappa', 1)})"
    elif preset == "custom" and support.get("matrices"):
        name = f"custom({os.path.splitext(os.path.basename(str(support['matrices'])))[0]})"
    if config.get("scheme") == "sequential":  # exact HAPPO: agents updated in turn, advantages from S_A
        name = "happo" if name == "mappo" else f"happo({name})"
    return name


def marl_eval_results(directory: str, *, env_name: str | None = None, task_name: str | None = None,
                      algorithm: str | Mapping[str, str] | None = None) -> dict[str, Any]:
    """A directory's evaluations as marl-eval's nested dict (the schema in the module
    docstring): ``{env_name: {task_name: {algorithm: {"seed_<seed>": {...}}}}}``.

    Args:
        directory: a run or sweep directory holding ``eval_episodes.csv`` (and, when the
            runs played their absolute-metric episodes, ``absolute.csv``).
        env_name, task_name: default: from the experiment file (``env_and_task``).
        algorithm: a name, or a mapping setting -> name for every setting. A name
            (default: ``Names.algorithm``) is used as it is for a run directory of one
            setting and becomes ``<algorithm>/<setting>`` for each setting otherwise (each
            setting of a sweep is its own algorithm); without a name, the setting alone.
            Commas become ``;`` (marl-eval forbids them).
    Returns:
        The dict; algorithms in the order their settings first appear, seeds in
        increasing order, steps ``step_0`` … then ``absolute_metrics``.
    Raises:
        ValueError naming the directory: no ``eval_episodes.csv``, a malformed row or
        column, absolute episodes of a run that was never evaluated, or two settings
        whose names coincide (marl-eval lowercases them).
    """
    runs = _read_runs(directory, EPISODES_FILE, EPISODE_COLUMNS, step="update")
    absolute = {}
    if os.path.isfile(os.path.join(directory, ABSOLUTE_FILE)):
        absolute = _read_runs(directory, ABSOLUTE_FILE, ABSOLUTE_COLUMNS, step="best_update")
    unknown = sorted(set(absolute) - set(runs))
    if unknown:
        raise ValueError(f"{os.path.join(directory, ABSOLUTE_FILE)!r} holds runs never evaluated in "
                         f"{EPISODES_FILE}: {', '.join(f'{s}/seed{k}' for s, k in unknown)}")
    wins = {won is not None for run in [*runs.values(), *absolute.values()] for ep in run.values()
            for won in ep["won"]}
    if len(wins) > 1:
        raise ValueError(f"{directory!r}: column won is empty in some rows and set in others (it is empty "
                         f"exactly when the environment has no win condition)")
    names = None
    if env_name is None or task_name is None or algorithm is None:
        names = experiment_names(directory, task=env_name is None or task_name is None)
    env_name = env_name if env_name is not None else names.env_name
    task_name = task_name if task_name is not None else names.task_name
    settings = list(dict.fromkeys(setting for setting, _ in runs))
    sweep = names.sweep if names is not None else os.path.isfile(os.path.join(directory, "sweep.yaml"))
    algorithms = _algorithm_names(directory, settings, algorithm if algorithm is not None else names.algorithm,
                                  sweep)
    task: dict[str, dict[str, Any]] = {}
    for (setting, seed) in sorted(runs, key=lambda key: (settings.index(key[0]), key[1])):
        steps = {f"step_{i}": {"step_count": ep["env_steps"], "elapsed_time": ep["elapsed_s"], **_metrics(ep)}
                 for i, (_, ep) in enumerate(sorted(runs[setting, seed].items()))}
        if (setting, seed) in absolute:
            (ep,) = absolute[setting, seed].values()  # one best update per run (checked on reading)
            steps["absolute_metrics"] = _metrics(ep)
        task.setdefault(algorithms[setting], {})[f"seed_{seed}"] = steps
    return {env_name: {task_name: task}}


def _algorithm_names(directory: str, settings: list[str], algorithm: str | Mapping[str, str] | None,
                     sweep: bool) -> dict[str, str]:
    """setting -> marl-eval algorithm name (``marl_eval_results``' rule), commas replaced."""
    if isinstance(algorithm, Mapping):
        missing = [s for s in settings if s not in algorithm]
        if missing:
            raise ValueError(f"{directory!r}: algorithm names no algorithm for settings {', '.join(missing)}")
        names = {s: str(algorithm[s]) for s in settings}
    elif algorithm and len(settings) == 1 and not sweep:
        names = {settings[0]: algorithm}
    else:
        names = {s: f"{algorithm}/{s}" if algorithm else s for s in settings}
    names = {s: name.replace(",", ";") for s, name in names.items()}
    by_name: dict[str, list[str]] = {}
    for setting, name in names.items():
        by_name.setdefault(name.lower(), []).append(setting)
    for name, clash in by_name.items():
        if len(clash) > 1:  # one would overwrite the other's seeds
            raise ValueError(f"{directory!r}: settings {', '.join(map(repr, clash))} get the same marl-eval "
                             f"algorithm name {name!r} (marl-eval lowercases names and forbids commas); "
                             f"give each its own name (algorithm: a mapping setting -> name)")
    return names


def _metrics(episodes: Mapping[str, Any]) -> dict[str, list]:
    out = {"return": episodes["return"], "episode_length": episodes["length"]}
    if episodes["won"] and episodes["won"][0] is not None:
        out["win_rate"] = [float(w) for w in episodes["won"]]
    return out


# ------------------------------------------------------------------ reading the CSVs


def _read_runs(directory: str, file: str, columns: tuple[str, ...], step: str) -> dict[tuple[str, int], dict]:
    """``{(setting, seed): {step value: {"env_steps", "elapsed_s", "return": [E],
    "length": [E], "won": [E] (None: no win condition)}}}`` from one of the CSVs, every
    value checked; episodes in ``episode`` order."""
    path = os.path.join(directory, file)
    if not os.path.isfile(path):
        if file == EPISODES_FILE:
            raise ValueError(f"{directory!r} has no {file}: run with evaluation on (it writes one row per "
                             f"evaluated episode, which marl-eval needs)")
        raise ValueError(f"{directory!r} has no {file}")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path!r} is not a jaxpo {file}: it lacks the columns {', '.join(missing)} "
                             f"(expected {','.join(columns)})")
        rows = [(reader.line_num, row) for row in reader]
    if not rows:
        raise ValueError(f"{path!r} holds no episodes")
    out: dict[tuple[str, int], dict] = {}
    run_ids: dict[tuple[str, int], int] = {}
    for line, row in rows:
        value = lambda column, kind: _parse(row.get(column), kind, path, line, column)
        key = (row["setting"], value("seed", "int"))
        if run_ids.setdefault(key, value("run_id", "int")) != value("run_id", "int"):
            raise ValueError(f"{path!r} line {line}: runs {run_ids[key]} and {row['run_id']} are both "
                             f"setting {key[0]!r}, seed {key[1]}")
        at = out.setdefault(key, {}).setdefault(value(step, "int"), {"episodes": {}})
        if step == "update":
            for column, kind in (("env_steps", "int"), ("elapsed_s", "float")):
                if at.setdefault(column, value(column, kind)) != value(column, kind):
                    raise ValueError(f"{path!r} line {line}: {column} differs between episodes of update "
                                     f"{row[step]} of {key[0]}/seed{key[1]}")
        episode = value("episode", "int")
        if episode in at["episodes"]:
            raise ValueError(f"{path!r} line {line}: episode {episode} of {step} {row[step]} of "
                             f"{key[0]}/seed{key[1]} appears twice")
        at["episodes"][episode] = (value("return", "float"), value("length", "int"), value("won", "won"))
    for key, steps in out.items():
        if step == "best_update" and len(steps) > 1:
            raise ValueError(f"{path!r}: run {key[0]}/seed{key[1]} has several best_update values "
                             f"{sorted(steps)}")
        for at in steps.values():
            by_index = at.pop("episodes")
            episodes = [by_index[e] for e in sorted(by_index)]
            at.update({name: [ep[i] for ep in episodes] for i, name in enumerate(("return", "length", "won"))})
    return out


def _parse(text: str | None, kind: str, path: str, line: int, column: str) -> Any:
    """A cell as ``int`` (written as ``3`` or ``3.0``), ``float`` (``nan`` allowed) or
    ``won`` (empty: None; else 0 or 1), or a ValueError naming the file, line and column."""
    text = (text or "").strip()
    if kind == "won" and text == "":
        return None
    try:
        number = float(text)
    except ValueError:
        number = None
    if kind == "float" and number is not None:
        return number
    if kind == "int" and number is not None and math.isfinite(number) and number.is_integer():
        return int(number)
    if kind == "won" and number in (0.0, 1.0):
        return int(number)
    wanted = {"int": "an integer", "float": "a number", "won": "0, 1 or empty"}[kind]
    raise ValueError(f"{path!r} line {line}: column {column} holds {text!r}, not {wanted}")


# ------------------------------------------------------------------ suites and files


def merge(*results: Mapping[str, Any]) -> dict[str, Any]:
    """Several ``marl_eval_results`` (a suite of tasks, algorithms or seeds) as one dict.
    Raises a ValueError on a collision: the same environment, task, algorithm and seed
    twice, or names at one level that differ only in case (marl-eval lowercases keys, so
    one would silently replace the other). Unlike marl-eval's ``concatenate_json_files``,
    it never renumbers a colliding seed."""
    out: dict[str, Any] = {}
    for result in results:
        for env, tasks in result.items():
            for task, algorithms in tasks.items():
                for algorithm, seeds in algorithms.items():
                    for seed, steps in seeds.items():
                        level, path = out, []
                        for key in (env, task, algorithm):
                            level = level.setdefault(_same_key(level, key, path), {})
                            path.append(key)
                        if _same_key(level, seed, path) in level:
                            raise ValueError(f"marl-eval results collide: {'/'.join([*path, seed])} is in more "
                                             f"than one of the results merged")
                        level[seed] = steps
    return out


def _same_key(level: Mapping[str, Any], key: str, path: list[str]) -> str:
    """``key``, refusing a different key of ``level`` that lowercases to the same name."""
    for other in level:
        if other != key and other.lower() == key.lower():
            raise ValueError(f"marl-eval results collide: {'/'.join([*path, other])} and "
                             f"{'/'.join([*path, key])} differ only in case (marl-eval lowercases names)")
    return key


def write_marl_eval(path: str, results: Mapping[str, Any]) -> str:
    """Writes ``results`` as marl-eval JSON to ``path`` atomically (never a torn file);
    mappings indented, each metric's list of episodes on one line. Returns ``path``."""
    write_text(path, _json(results) + "\n")
    return path


def _json(value: Any, depth: int = 0) -> str:
    if isinstance(value, Mapping) and value:
        pad = "  " * (depth + 1)
        items = (f"{pad}{json.dumps(str(k))}: {_json(v, depth + 1)}" for k, v in value.items())
        return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"
    return json.dumps(value)
