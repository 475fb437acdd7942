"""A sweep's settings: its grid and random axes, checked, typed and expanded.

Axes name any ``Hyper`` scalar or support field (traced: one program serves them all)
or any ``Config`` field (static: one program per value). ``settings(experiment)``
returns every point of the sweep as a ``Setting`` (config, support, hyperparameters),
each checked before anything compiles; errors name the axis, the value and the setting.

Grid axes are crossed (cartesian product, in the order given); random axes
(``loguniform``, ``uniform``, ``choice``) are drawn ``samples`` times from
``sample_seed`` and each draw is crossed with the grid.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any, Mapping

import numpy as np

from jaxpo.core.checks import FieldError, Ref
from jaxpo.program.config import Config, Hyper
from jaxpo.experiments.experiment import Experiment, format_value, section_fields, typed_value
from jaxpo.program.fields import coerce
from jaxpo.core.support import Support

DISTRIBUTIONS = ("loguniform", "uniform", "choice")


def sweepable() -> dict[str, str]:
    """``{name: section}`` of every name a sweep may vary."""
    names = {name: "hyper" for name in Hyper.scalar_bounds()}
    names.update({name: "support" for name in section_fields("support")})
    names.update({name: "config" for name in section_fields("config")})
    return names


def split_top_level(text: str) -> list[str]:
    """``"1,(2,3),4" -> ["1", "(2,3)", "4"]``: commas outside brackets separate values."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return parts


def parse_axis(text: str) -> tuple[str, str, Any]:
    """A ``--sweep`` flag: ``NAME=V1,V2,…`` (a grid axis) or ``NAME=loguniform(LOW,HIGH)``,
    ``uniform(LOW,HIGH)``, ``choice(V1,V2,…)`` (a random axis). Returns
    ``(kind, name, values)`` with kind ``"grid"`` or ``"random"``; values stay text
    until the sweep coerces them to the field's type."""
    if "=" not in text:
        raise ValueError(f"--sweep must look like NAME=V1,V2,... or NAME=loguniform(LOW,HIGH), got {text!r}")
    name, spec = (part.strip() for part in text.split("=", 1))
    match = re.fullmatch(r"(\w+)\((.*)\)", spec)
    if match and match.group(1) in DISTRIBUTIONS:
        return "random", name, {match.group(1): split_top_level(match.group(2))}
    return "grid", name, split_top_level(spec)


def _check_axes(experiment: Experiment) -> None:
    spec, names = experiment.sweep, sweepable()
    for kind, axes in (("grid", spec.grid), ("random", spec.random)):
        for name in axes:
            if name not in names:
                why = "is a run setting" if name in section_fields("run") else "is not a sweepable name"
                raise FieldError.saying(f"sweep.{kind}", Ref(f"sweep.{kind}"),
                                        f": {name!r} {why}; sweepable: {', '.join(names)}")
    both = set(spec.grid) & set(spec.random)
    if both:
        raise ValueError(f"sweep: {sorted(both)[0]!r} is both a grid and a random axis")
    for name, values in spec.grid.items():
        if not isinstance(values, list) or not values:
            raise FieldError(f"sweep.grid.{name}", f"must be a non-empty list of values, got {values!r}")
    if spec.random and spec.samples < 1:
        raise FieldError.saying("sweep.samples", f"sweep has random axes ({', '.join(spec.random)}) but ",
                                Ref("sweep.samples"), " is 0; set ", Ref("sweep.samples"), " to the number of draws")
    if spec.samples and not spec.random:
        raise FieldError.saying("sweep.samples", Ref("sweep.samples"), " is set but the sweep has no random axes")


def _typed(name: str, value: Any, path: str, item: str = "") -> Any:
    """``value`` as the type of sweepable field ``name``, or a ``FieldError`` about axis
    ``path`` (``sweep.grid.lr``) that names the ``item`` (``[0]``); whether it fits the
    rest of its setting is checked when the setting is built."""
    try:
        return typed_value(sweepable()[name], name, value, path)
    except FieldError as err:
        raise FieldError.saying(path, Ref(path), item, *err.parts[1:]) from None


def _typed_distribution(name: str, dist: Any) -> dict[str, list]:
    """Random axis ``name``'s ``{kind: args}`` checked and typed: choice values as the field's
    type, loguniform / uniform bounds as numbers with low < high (and low > 0 for loguniform)."""
    where = f"sweep.random.{name}"
    if not isinstance(dist, Mapping) or len(dist) != 1 or next(iter(dist)) not in DISTRIBUTIONS:
        raise FieldError(where, f"must be one of {{loguniform: [low, high]}}, {{uniform: [low, high]}}, "
                         f"{{choice: [values]}}, got {dist!r}")
    (kind, args), = dist.items()
    if not isinstance(args, list) or not args:
        raise FieldError.saying(where, Ref(where), f".{kind} must be a non-empty list, got {args!r}")
    if kind == "choice":
        return {kind: [_typed(name, v, where, f".choice[{i}]") for i, v in enumerate(args)]}
    if sweepable()[name] != "hyper":
        raise FieldError.saying(where, Ref(where), f": {kind} draws numbers, so it is for hyperparameters; "
                                                   f"use choice for {name!r}")
    try:
        low, high = (coerce(v, float, where) for v in args)
    except ValueError:
        raise FieldError.saying(where, Ref(where), f".{kind} must be [low, high], two numbers, got {args!r}") from None
    if not low < high:
        raise FieldError.saying(where, Ref(where), f".{kind} needs low < high, got [{low:g}, {high:g}]")
    if kind == "loguniform" and low <= 0:
        raise FieldError.saying(where, Ref(where), f".loguniform bounds must be > 0, got [{low:g}, {high:g}]")
    return {kind: [low, high]}


def typed_spec(experiment: Experiment) -> Experiment:
    """The experiment with its sweep axes checked and their values typed (what the
    resolved sweep file records). Errors name the axis and the value."""
    _check_axes(experiment)
    spec = experiment.sweep
    grid = {name: [_typed(name, v, f"sweep.grid.{name}", f"[{i}]") for i, v in enumerate(values)]
            for name, values in spec.grid.items()}
    random = {name: _typed_distribution(name, dist) for name, dist in spec.random.items()}
    return dataclasses.replace(experiment, sweep=dataclasses.replace(spec, grid=grid, random=random))


def _draw(name: str, dist: dict[str, list], rng: np.random.Generator, samples: int) -> list:
    """``samples`` draws of random axis ``name`` from a typed ``{kind: args}``."""
    (kind, args), = dist.items()
    if kind == "choice":
        return [args[i] for i in rng.integers(0, len(args), size=samples)]
    low, high = args
    draws = np.exp(rng.uniform(np.log(low), np.log(high), size=samples)) if kind == "loguniform" \
        else rng.uniform(low, high, size=samples)
    return [_typed(name, float(v), f"sweep.random.{name}") for v in draws]


@dataclasses.dataclass(frozen=True)
class Setting:
    """One point of a sweep: its label, swept ``values``, static ``config`` (with the
    chunk length the run length asks for), ``num_updates``, ``support`` and ``hyper``."""

    label: str
    values: Mapping[str, Any]
    config: Config
    num_updates: int
    support: Support
    hyper: Hyper


def settings(experiment: Experiment) -> list[Setting]:
    """Every setting of the sweep, each fully checked (config, env, support, hyper),
    before anything compiles. Errors name the axis and the setting."""
    spec = typed_spec(experiment).sweep
    rng = np.random.default_rng(spec.sample_seed)
    drawn = [_draw(name, dist, rng, spec.samples) for name, dist in spec.random.items()]
    points = [dict(zip(spec.grid, combo)) for combo in itertools.product(*spec.grid.values())]
    if spec.random:
        points = [{**p, **dict(zip(spec.random, sample))} for p in points for sample in zip(*drawn)]
    names = sweepable()
    out, labels = [], {}
    for values in points:
        label = ",".join(f"{k}={format_value(v)}" for k, v in values.items())
        try:
            by_section = {s: {k: v for k, v in values.items() if names[k] == s} for s in ("config", "hyper", "support")}
            point = experiment.replace(**by_section)
            if "kappa" in values and point.support.preset != "khop":
                raise FieldError.saying("support.kappa", "the kappa axis needs ", Ref("support.preset"),
                                        f" khop, got {point.support.preset!r}")
            config, num_updates = point.chunking()
            env = config.make_env()
            support = point.support.build(env)
            hyper = Hyper.create(support, **point.hyper.scalars())
            if config.anneal_lr:  # its default horizon: the run's own length
                hyper = hyper.with_horizon(num_updates)
        except FieldError as err:  # which setting, and still which field
            raise FieldError.saying(err.path, f"setting {label}: " if label else "", *err.parts) from None
        except ValueError as err:
            raise ValueError(f"setting {label}: {err}" if label else str(err)) from None
        label = label or support.name
        labels[label] = labels.get(label, 0) + 1
        if labels[label] > 1:  # equal draws of a random axis: keep labels unique
            label = f"{label}#{labels[label]}"
        out.append(Setting(label, values, config, num_updates, support, hyper))
    return out


