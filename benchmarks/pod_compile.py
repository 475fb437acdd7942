"""Compiles jaxpo's programs for TPU pod slices on a machine without TPUs, as JSON lines.

libtpu's compile-only topologies (``jax.experimental.topologies.get_topology_desc``) stand
in for the pod: a program sharded over their devices lowers and compiles as on the slice,
and ``memory_analysis()`` gives each device's memory. Nothing runs. Its own environment
(never a dependency of jaxpo or of CI), with jax and jaxlib pinned to libtpu's jax:

    python3 -m venv /work/venvs/tpu && /work/venvs/tpu/bin/pip install uv
    /work/venvs/tpu/bin/python -m uv pip install -e . "jax[tpu]==0.10.2"

Run (default: every program, config, slice and layout below; ``--program`` and the other
choices narrow it):

    nice -n 5 /work/venvs/tpu/bin/python benchmarks/pod_compile.py \\
        --out benchmarks/results/pod-compile/tpu.jsonl
    python benchmarks/pod_compile.py --table benchmarks/results/pod-compile/tpu.jsonl  # Markdown

Programs and layouts:
    chunk     ``Trainer.chunk_runs``, K updates. runs: R runs split over the D devices
              (``Config.parallel="runs"``); envs: one run's environments split over them.
    pbt       PBT's exploit/explore step (``jaxpo.run.population.exploit_explore``, jitted
              as ``Population`` does) on the chunk's layout of the state.
    evaluate  ``jaxpo.run.evaluate.play_episodes`` over R runs × ``--episodes`` episodes.
              runs: the runs' parameters split over the devices as the chunk leaves them;
              one-chip: all R on one device, as ``jaxpo.run.periodic_eval`` calls it (the
              parameters gathered to the host, played on the default device).

R = ``--runs-per-device`` × D. The envs layout needs ``num_envs`` a multiple of D whose
per-device share ``num_minibatches`` divides: it takes the config's, raised to the first
such (the line's ``num_envs``). jaxpo's programs hold no host callback, so each compiles
as it runs. A config that cannot be laid out, or a program that does not trace or
compile, gives a line with ``error`` (the stage and the exception's first lines).

A line: program, config, slice, chips, devices, hosts, layout, num_runs, num_envs, episodes,
lower_s, compile_s, memory (bytes per device, ``memory_analysis()``'s: argument, output,
alias, temp, generated_code; peak, XLA's ``peak_memory_in_bytes``; bound, the larger of
peak and argument + output − alias + temp: on TPU the two disagree either way, a temp of
0 under a peak above the arguments, or a temp above the peak), hbm_per_device, fits
(bound ≤ it), collectives (per kind in the optimized HLO: instructions and their result bytes; an
instruction inside a loop runs every iteration), expected (the kinds the layout allows)
and unexpected_collectives (a kind outside them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from typing import Any

GIB = 2 ** 30
# HBM per chip (Cloud TPU system-architecture pages: cloud.google.com/tpu/docs/v5e
# "16 GB", /v4 "32 GiB", /v5p "95 GB"; read here as GiB). A compile-only v4 topology has
# two devices per chip (one per TensorCore, no megacore), each with half the chip's HBM.
HBM_PER_CHIP = {"v5e": 16 * GIB, "v4": 32 * GIB, "v5p": 95 * GIB}
DEFAULT_SLICES = ("v5e:4x4", "v4:4x4x4", "v5e:16x16")
CONFIGS = {"mpe": "jaxmarl_ippo_ff_mpe", "smax": "jaxmarl_ippo_rnn_smax"}
PROGRAMS = ("chunk", "pbt", "evaluate")
LAYOUTS = {"chunk": ("runs", "envs"), "pbt": ("runs", "envs"), "evaluate": ("runs", "one-chip")}
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute", "collective-broadcast",
         "ragged-all-to-all")
# What each layout allows (compiled.py, parallel.py, population.py, docs/design.md §4):
# runs are independent (no collective); one run's environments over the devices average
# gradients, normaliser statistics, loss and metrics (all-reduce); PBT over runs split
# across devices copies a parent's learner into another run's place (the gather by parent
# index), which XLA does by moving rows between devices: all-gather, all-to-all,
# collective-permute, or an all-reduce of zero-padded rows.
MOVES = ("all-reduce", "all-gather", "all-to-all", "collective-permute")
EXPECTED = {("chunk", "runs"): (), ("chunk", "envs"): ("all-reduce",), ("pbt", "runs"): MOVES,
            ("pbt", "envs"): (), ("evaluate", "runs"): (), ("evaluate", "one-chip"): ()}
BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
         "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
# `%name = TYPE kind(` with TYPE an array or a tuple of them; an async pair counts at its -done
# (a `kind-start(` does not match).
INSTRUCTION = re.compile(r"=\s*(\(.*?\)|\S+)\s+(" + "|".join(KINDS) + r")(-done)?\(")
ARRAY = re.compile(r"\b(" + "|".join(BYTES) + r")\[([\d,]*)\]")


def collectives(hlo: str) -> dict[str, dict[str, int]]:
    """``{kind: {"count", "bytes"}}`` of the collective instructions in HLO text (kinds
    with none left out): synchronous ones and the ``-done`` half of async pairs, bytes of
    their results."""
    found: dict[str, dict[str, int]] = {}
    for line in hlo.splitlines():
        match = INSTRUCTION.search(line)
        if match is None:
            continue
        size = sum(BYTES[dtype] * _product(dims) for dtype, dims in ARRAY.findall(match.group(1)))
        entry = found.setdefault(match.group(2), {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += size
    return found


def _product(dims: str) -> int:
    total = 1
    for d in filter(None, dims.split(",")):
        total *= int(d)
    return total


def slice_kind(name: str) -> str:
    """The chip generation of a slice name such as ``v5e:4x4``, or a ValueError naming ``--slice``."""
    kind, _, shape = str(name).partition(":")
    if kind not in HBM_PER_CHIP or not re.fullmatch(r"\d+(x\d+){1,2}", shape):
        raise ValueError(f"--slice: {name!r} is not a TPU slice name GEN:SHAPE with GEN one of "
                         f"{', '.join(HBM_PER_CHIP)} (e.g. {', '.join(DEFAULT_SLICES)})")
    return kind


def topology(name: str) -> list:
    """The compile-only devices of slice ``name`` (libtpu's), or a ValueError naming ``--slice``."""
    slice_kind(name)
    from jax.experimental import topologies

    try:
        return list(topologies.get_topology_desc(name, "tpu").devices)
    except Exception as err:  # libtpu refuses a shape it does not know
        raise ValueError(f"--slice: libtpu has no topology {name!r}: {str(err).splitlines()[0]}") from None


def load_config(name: str):
    """The ``Config`` of a reference config (``CONFIGS``), or a ValueError naming ``--config``."""
    if name not in CONFIGS:
        raise ValueError(f"--config: {name!r} is not one of {', '.join(CONFIGS)}")
    from jaxpo.experiments.experiment import load_yaml

    return load_yaml(CONFIGS[name]).config


def env_split(config, num_devices: int):
    """``config`` with ``parallel="envs"`` and ``num_envs`` the first multiple of the
    devices, from the config's own, that the data-parallel program accepts."""
    from jaxpo.program.compiled import _check_env_split

    envs = -(-config.num_envs // num_devices) * num_devices
    for _ in range(64):
        candidate = dataclasses.replace(config, parallel="envs", num_envs=envs)
        try:
            _check_env_split(candidate, num_devices)
            return candidate
        except ValueError:
            envs += num_devices
    raise ValueError(f"no num_envs up to {envs} splits over {num_devices} devices")


def program(name: str, config, layout: str, devices: list, runs_per_device: int, episodes: int):
    """``(jitted function, abstract arguments, config it was built for, R)``."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding

    from jaxpo import trainer
    from jaxpo.run.evaluate import play_episodes

    parallel = "envs" if layout == "envs" else "runs"
    config = env_split(config, len(devices)) if parallel == "envs" else dataclasses.replace(config, parallel="runs")
    tr = trainer(config, devices)
    size = runs_per_device * tr.run_multiple if parallel == "runs" else runs_per_device
    state, hyper = tr.abstract_state(size), tr._abstract_hyper(size)
    if name == "chunk":
        return tr.chunk_runs, (state, hyper), config, size
    if name == "pbt":
        return (*_pbt(tr, size, state, hyper), config, size)
    placed = SingleDeviceSharding(devices[0]) if layout == "one-chip" else NamedSharding(tr.mesh, P("runs"))
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=placed), state.params)
    keys = jax.ShapeDtypeStruct((size, 2), np.uint32, sharding=placed)
    play = jax.jit(lambda p, k: play_episodes(config, tr.env, p, k, episodes, True),
                   compiler_options=tr.compiler_options)
    return play, (params, keys), config, size


def _pbt(tr, size: int, state, hyper):
    """PBT's step as ``Population._apply`` jits it, for one steered learning-rate axis."""
    import jax
    import numpy as np

    from jaxpo.run.population import Population, exploit_explore
    from jaxpo.run.steering import Axis, PopulationTable

    axes = (Axis("lr", "loguniform", low=1e-4, high=1e-2, field="lr"),)
    table = PopulationTable(axes, np.zeros(size, np.int32))
    population = Population(table, np.full((size, 1), 1e-3, np.float32), ready=1, seed=0)
    fn, replicated = population._jit(tr, size, lambda *a: exploit_explore(*a, table=table),
                                     lambda rep: (tr.state_sharding, tr.run_sharding, rep, rep))
    spec = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=replicated)
    return fn, (state, hyper, spec((size, 1), np.float32), spec((size,), np.float32), spec((2,), np.uint32))


def compile_line(name: str, config_name: str, slice_name: str, layout: str, runs_per_device: int = 1,
                 episodes: int = 32) -> dict[str, Any]:
    """One JSON line (see the module docstring) for one program, config, slice and layout."""
    if name not in PROGRAMS:
        raise ValueError(f"--program: {name!r} is not one of {', '.join(PROGRAMS)}")
    if layout not in LAYOUTS[name]:
        raise ValueError(f"--layout: {name} has layouts {', '.join(LAYOUTS[name])}, not {layout!r}")
    devices = topology(slice_name)
    kind = slice_kind(slice_name)
    chips = len({tuple(d.coords) for d in devices})
    hbm = HBM_PER_CHIP[kind] * chips // len(devices)
    line = {"program": name, "config": config_name, "slice": slice_name, "chips": chips, "devices": len(devices),
            "hosts": len({d.process_index for d in devices}), "layout": layout}
    try:
        fn, args, config, size = program(name, load_config(config_name), layout, devices, runs_per_device, episodes)
    except ValueError as err:
        return {**line, "error": str(err)}
    line.update(num_runs=size, num_envs=config.num_envs, episodes=episodes if name == "evaluate" else None)
    start = time.perf_counter()
    try:
        lowered = fn.lower(*args)
        lowered_at = time.perf_counter()
        compiled = lowered.compile()
    except Exception as err:  # a program jax cannot trace or XLA cannot compile: the finding itself
        stage = "compile" if "lowered" in locals() else "lower"
        return {**line, "error": f"{stage}: {type(err).__name__}: {_first_lines(str(err))}"}
    done = time.perf_counter()
    mem = compiled.memory_analysis()
    memory = {k: int(getattr(mem, f"{k}_size_in_bytes")) for k in
              ("argument", "output", "alias", "temp", "generated_code")}
    memory["peak"] = int(mem.peak_memory_in_bytes)
    memory["bound"] = max(memory["peak"], memory["argument"] + memory["output"] - memory["alias"] + memory["temp"])
    found = collectives(compiled.as_text())
    expected = EXPECTED[(name, layout)]
    return {**line, "lower_s": round(lowered_at - start, 1), "compile_s": round(done - lowered_at, 1),
            "memory": memory, "hbm_per_device": hbm, "fits": memory["bound"] <= hbm, "collectives": found,
            "expected": list(expected), "unexpected_collectives": any(k not in expected for k in found)}


def table(path: str) -> str:
    """The lines of ``path`` as a Markdown table: R × E (evaluation: R × episodes), memory
in MiB per device (bound, arguments, temp)."""
    mib = lambda b: f"{b / 2 ** 20:,.1f}"
    rows = ["| program | config | slice (chips / devices / hosts) | layout | R × E | compile s | memory MiB: "
            "bound · args · temp | collectives (count, bytes) | fits |", "|" + " --- |" * 9]
    with open(path) as f:
        for line in map(json.loads, f):
            where = f"{line['slice']} ({line['chips']} / {line['devices']} / {line['hosts']})"
            if "error" in line:
                rows.append(f"| {line['program']} | {line['config']} | {where} | {line['layout']} | | | "
                            f"error: {line['error'].split('. ')[0]} | | |")
                continue
            mem = line["memory"]
            found = ", ".join(f"{k} {v['count']} ({v['bytes']:,} B)" for k, v in line["collectives"].items())
            flag = " **unexpected**" if line["unexpected_collectives"] else ""
            per_run = f"{line['episodes']} episodes" if line["program"] == "evaluate" else line["num_envs"]
            rows.append(f"| {line['program']} | {line['config']} | {where} | {line['layout']} | {line['num_runs']} × "
                        f"{per_run} | {line['compile_s']} | {mib(mem['bound'])} · {mib(mem['argument'])} · "
                        f"{mib(mem['temp'])} | {found or 'none'}{flag} | {'yes' if line['fits'] else '**no**'} |")
    return "\n".join(rows)


def _first_lines(text: str, count: int = 3) -> str:
    return " ".join(line.strip() for line in text.strip().splitlines()[:count])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", nargs="+", choices=PROGRAMS, default=list(PROGRAMS))
    parser.add_argument("--config", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--slice", nargs="+", default=list(DEFAULT_SLICES), help="e.g. v5e:4x4 v4:4x4x4 v5p:4x4x8")
    parser.add_argument("--layout", nargs="+", choices=("runs", "envs", "one-chip"),
                        help="default: each program's own (chunk, pbt: runs envs; evaluate: runs one-chip)")
    parser.add_argument("--runs-per-device", type=int, default=1, help="R = this × D (runs layouts)")
    parser.add_argument("--episodes", type=int, default=32, help="evaluation episodes per run")
    parser.add_argument("--out", help="also append the lines to this file")
    parser.add_argument("--table", metavar="JSONL", help="print the lines of this file as a Markdown table; no compile")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    if args.runs_per_device < 1 or args.episodes < 1:
        parser.error("--runs-per-device and --episodes must be positive integers")
    for check in (slice_kind, topology):  # the names first: a bad one costs no libtpu start
        for name in args.slice:
            try:
                check(name)
            except ValueError as err:
                parser.error(str(err))
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host's own backend; the TPU is compile-only
    for slice_name in args.slice:
        for config_name in args.config:
            for name in args.program:
                for layout in [lay for lay in LAYOUTS[name] if args.layout is None or lay in args.layout]:
                    line = json.dumps(compile_line(name, config_name, slice_name, layout, args.runs_per_device,
                                                   args.episodes))
                    print(line, flush=True)
                    if args.out:
                        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
                        with open(args.out, "a") as f:
                            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
