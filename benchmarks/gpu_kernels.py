"""GPU kernels and launches per loop body of jaxpo's training program and JaxMARL's, compiled
for an NVIDIA H100 on a machine without a GPU, as JSON lines.

Its own virtual environment (the CUDA plugin wheels; never a dependency of jaxpo or its CI):

    python3 -m venv /work/venvs/cuda
    /work/venvs/cuda/bin/python -m pip install uv
    /work/venvs/cuda/bin/python -m uv pip install -e . "jax==0.10.2" "jaxlib==0.10.2" \\
        "jax-cuda12-plugin==0.10.2" "jax-cuda12-pjrt==0.10.2"      # the four versions must match

Run (from the repository root; about 4 minutes on 2 CPU cores):

    /work/venvs/cuda/bin/python benchmarks/gpu_kernels.py            # all four programs
    /work/venvs/cuda/bin/python benchmarks/gpu_kernels.py --programs jaxpo-mpe peer-mpe --out -

Each program compiles in its own subprocess with ``JAX_PLATFORMS=cpu`` (the plugin then
registers without a CUDA driver), ``--xla_gpu_enable_cub_radix_sort=false`` (CUB's sort
queries a device while compiling) and ``--xla_dump_to``, against the compile-only devices of
``jax.experimental.topologies.get_topology_desc("cuda", "1x1x1", target_config=<h100_sxm.txtpb>)``
(``--target-config``; default ``/work/shared/tools/compile-targets/h100_sxm.txtpb``).

Programs, one update per call, one run:

* ``jaxpo-mpe`` / ``jaxpo-smax``: ``jaxpo.trainer(config, devices=<the H100>).chunk_runs``
  of ``jaxpo/experiments/configs/jaxmarl_ippo_ff_mpe.yaml`` (1024 envs) and
  ``jaxmarl_ippo_rnn_smax.yaml`` (128 envs), ``updates_per_chunk`` 1. The line says which
  kernel set (``jaxpo.core.kernels.for_platform``) the trainer's platform chose.
* ``peer-mpe`` / ``peer-smax``: JaxMARL's own ``baselines/IPPO/ippo_ff_mpe.py`` and
  ``ippo_rnn_smax.py`` with their yaml configs, read from the JaxMARL mirror's HEAD
  (``--peer-repo``) into the ignored ``.peer/jaxmarl/`` and imported unmodified (hydra,
  omegaconf and wandb stubbed in ``sys.modules``); ``make_train(config)`` with NUM_ENVS as
  above, TOTAL_TIMESTEPS = NUM_STEPS × NUM_ENVS (one update), vmapped over one seed as its
  ``main`` does. Its per-update ``io_callback`` (wandb logging) cannot be lowered without a
  device: the callback is dropped and its operands are returned from the program instead
  (``keep_callback_operands``), so XLA keeps computing what the callback would have read.

What is counted (sources: the thunk sequence, ``*thunk_sequence_after_thunk_passes.txt``,
and the optimized HLO, ``*gpu_after_optimizations.txt``):

* Loops: every ``while`` of the optimized HLO, matched to the thunk sequence's ``kWhile``
  thunks by schedule order within each computation. Its role comes from the source lines of
  the ops in its body (the HLO's stack frames: jaxpo's ``rollout.<locals>.one_step``,
  ``gae.<locals>.backward_step``, ``bootstrap_values``; the peer's ``_env_step``,
  ``_get_advantages``), its trip count (``known_trip_count``) and its nesting: ``rollout``, ``gae``, ``bootstrap`` (jaxpo's data-dependent loop over the steps
  that ended an episode), ``epoch``, ``minibatch``, ``gru`` / ``gru_backward`` (a loop of
  sequence-length trip count inside a minibatch; backward when its ops are from a transpose),
  ``rollout_inner`` (a loop inside the rollout's step: the environment's own).
* ``launches``: the top-level thunks of one iteration of the body (a command buffer, i.e.
  one CUDA graph, is one launch; a nested loop is not counted, it has its own line);
  ``kernels``: the leaf thunks inside them (kernels, copies; a dynamic-slice fusion is its
  one leaf); ``condition_kernels``: the loop condition's.
* ``bytes_read`` / ``bytes_written``: per iteration, from the optimized HLO of the body:
  each launched instruction's operands and result, a fusion parameter that is only
  dynamic-sliced or gathered counted at the slice's size, a dynamic-update-slice result at
  the update's size (in place), as XLA's cost analysis counts them. Not a measurement.
* ``ops``: per launched HLO instruction of the body, its name, bytes and the source lines
  (repository files first) of the ops fused into it: where each kernel comes from.

One JSON object per loop per program, and one per program (``loop`` null: compile seconds,
``memory_analysis`` sizes), go to ``--out`` (default
``benchmarks/results/gpu-kernels/h100.jsonl``); a table goes to stderr. Counts are a proxy for
launch-bound cost, not a time: no autotuning without a device, XLA's own sort instead of CUB's.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import types

ROOT = pathlib.Path(__file__).resolve().parents[1]
TARGET = "/work/shared/tools/compile-targets/h100_sxm.txtpb"
PEER_REPO = "/work/.mirror/FLAIROx+JaxMARL/repo"
PROGRAMS = {  # name: (side, jaxpo config or peer script, peer config, num_envs)
    "jaxpo-mpe": ("jaxpo", "jaxpo/experiments/configs/jaxmarl_ippo_ff_mpe.yaml", None, 1024),
    "peer-mpe": ("peer", "baselines/IPPO/ippo_ff_mpe.py", "baselines/IPPO/config/ippo_ff_mpe.yaml", 1024),
    "jaxpo-smax": ("jaxpo", "jaxpo/experiments/configs/jaxmarl_ippo_rnn_smax.yaml", None, 128),
    "peer-smax": ("peer", "baselines/IPPO/ippo_rnn_smax.py", "baselines/IPPO/config/ippo_rnn_smax.yaml", 128),
}
# Function names (innermost frames) that identify a loop body's role, both sides.
ROLE_FUNCTIONS = {
    "rollout": ("rollout.<locals>.one_step", "_env_step"),
    "gae": ("gae.<locals>.backward_step", "_get_advantages"),
    "bootstrap": ("bootstrap_values.<locals>.block",),
}
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
               "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
NOT_LAUNCHED = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "while", "after-all",
                "partition-id", "replica-id", "opt-barrier", "conditional", "call"}


# ---------------------------------------------------------------- the peer's script


def extract_peer(repo: str = PEER_REPO, dest: pathlib.Path = ROOT / ".peer" / "jaxmarl") -> tuple[pathlib.Path, str]:
    """JaxMARL's IPPO baselines (scripts and configs) from the mirror's HEAD into ``dest``
    (ignored by git; never committed): ``(dest, commit)``."""
    git = ["git", f"--git-dir={repo}"]
    commit = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    for spec in PROGRAMS.values():
        for path in spec[1:3]:
            if path and path.startswith("baselines/"):
                text = subprocess.run(git + ["show", f"HEAD:{path}"], check=True, capture_output=True).stdout
                (dest / path).parent.mkdir(parents=True, exist_ok=True)
                (dest / path).write_bytes(text)
    (dest / "COMMIT").write_text(commit + "\n")
    return dest, commit


def stub_modules() -> None:
    """hydra, omegaconf and wandb as the scripts use them at import: a decorator, a name, a module."""
    hydra = types.ModuleType("hydra")
    hydra.main = lambda *a, **k: (lambda fn: fn)
    omegaconf = types.ModuleType("omegaconf")
    omegaconf.OmegaConf = types.SimpleNamespace(to_container=lambda c, **k: c)
    wandb = types.ModuleType("wandb")
    wandb.init = wandb.log = lambda *a, **k: None
    for module in (hydra, omegaconf, wandb):
        sys.modules.setdefault(module.__name__, module)


@contextlib.contextmanager
def keep_callback_operands(kept: list):
    """While tracing: ``io_callback`` drops the callback and ``lax.scan`` carries its operands
    out of every scan body as extra outputs; those of the outermost scan land in ``kept``."""
    import jax

    pending, real_scan, real_callback = [], jax.lax.scan, jax.experimental.io_callback

    def callback(fn, result_shape, *args, **kwargs):
        (pending[-1] if pending else kept).append(args)

    def scan(f, init=None, xs=None, length=None, **kwargs):
        def body(carry, x):
            pending.append([])
            carry, y = f(carry, x)
            return carry, (y, pending.pop())

        carry, (ys, operands) = real_scan(body, init, xs, length, **kwargs)
        if operands:
            (pending[-1] if pending else kept).append(operands)
        return carry, ys

    jax.lax.scan, jax.experimental.io_callback = scan, callback
    try:
        yield
    finally:
        jax.lax.scan, jax.experimental.io_callback = real_scan, real_callback


# ---------------------------------------------------------------- compiling (child)


def compile_program(name: str, target: str, peer_repo: str) -> dict:
    """Compiles ``name`` for the H100 target (XLA_FLAGS already carry the dump folder)."""
    import importlib.util

    import jax
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    side, source, peer_config, num_envs = PROGRAMS[name]
    devices = topologies.get_topology_desc(platform="cuda", topology="1x1x1",
                                           target_config=open(target).read()).devices
    info = dict(device_kind=devices[0].device_kind, jax_version=jax.__version__, num_envs=num_envs)
    start = time.perf_counter()
    if side == "jaxpo":
        import dataclasses

        import jaxpo
        from jaxpo.core.kernels import for_platform
        from jaxpo.experiments.experiment import load_yaml

        config = dataclasses.replace(load_yaml(str(ROOT / source)).config, num_envs=num_envs, updates_per_chunk=1)
        tr = jaxpo.trainer(config, devices=devices)
        info.update(config=source, platform=tr.learner.platform, kernel_set=for_platform(tr.learner.platform).name)
        compiled = tr.chunk_runs.lower(tr.abstract_state(1), tr._abstract_hyper(1)).compile()
    else:
        import yaml

        folder, commit = extract_peer(peer_repo)
        stub_modules()
        spec = importlib.util.spec_from_file_location(f"peer_{name.replace('-', '_')}", folder / source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        config = yaml.safe_load((folder / peer_config).read_text())
        config.update(NUM_ENVS=num_envs, NUM_SEEDS=1, TOTAL_TIMESTEPS=config["NUM_STEPS"] * num_envs)
        train = module.make_train(config)

        def one_seed(rng):
            kept = []
            with keep_callback_operands(kept):
                out = train(rng)
            return out, kept

        sharding = NamedSharding(Mesh(np.asarray(devices), ("runs",)), PartitionSpec())
        rngs = jax.ShapeDtypeStruct((1, 2), np.uint32, sharding=sharding)
        compiled = jax.jit(jax.vmap(one_seed)).lower(rngs).compile()
        info.update(script=source, config=peer_config, jaxmarl_commit=commit)
    info["compile_s"] = round(time.perf_counter() - start, 1)
    memory = compiled.memory_analysis()
    info["memory_analysis"] = {k: getattr(memory, k) for k in dir(memory) if k.endswith("_in_bytes")}
    return info


# ---------------------------------------------------------------- reading the dump


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape (a tuple: all its elements)."""
    total = 0
    for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shape):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * DTYPE_BYTES.get(dtype, 4)
    return total


def _closing(text: str, start: int) -> int:
    """Index just past the bracket that closes ``text[start]``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    return len(text)


Instr = collections.namedtuple("Instr", "name shape opcode operands attrs root")


def parse_hlo(text: str) -> tuple[dict, str, dict]:
    """``(computations {name: [Instr] in schedule order}, entry name, stack frames
    {id: (file, line, function, parent id)})`` of an optimized HLO module's text."""
    comps, entry, current = {}, None, None
    sections = collections.defaultdict(dict)
    section = None
    for line in text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = line
            continue
        if section and re.match(r"^\d+ ", line):
            key, value = line.split(" ", 1)
            sections[section][int(key)] = value
            continue
        section = None
        head = re.match(r"^(ENTRY )?%([\w.\-]+) \(.*\{$", line)
        if head:
            current = comps.setdefault(head.group(2), [])
            entry = head.group(2) if head.group(1) else entry
            continue
        m = re.match(r"^\s+(ROOT )?%([\w.\-]+) = (.*)$", line)
        if current is None or not m:
            continue
        rest = m.group(3)
        cut = _closing(rest, 0) if rest.startswith("(") else rest.index(" ")
        shape, rest = rest[:cut], rest[cut:].lstrip()
        op = re.match(r"([\w\-]+)\(", rest)
        if not op:
            continue
        close = _closing(rest, op.end() - 1)
        inside = rest[op.end():close - 1]
        operands = [inside] if op.group(1) == "parameter" else re.findall(r"%([\w.\-]+)", inside)
        current.append(Instr(m.group(2), shape, op.group(1), operands, rest[close:], bool(m.group(1))))
    unquote = lambda s: s.strip().strip('"')
    frames = {}
    for fid, value in sections["StackFrames"].items():
        loc, parent = map(int, re.findall(r"=(\d+)", value))
        fields = dict(re.findall(r"(\w+)=(\d+)", sections["FileLocations"].get(loc, "")))
        frames[fid] = (unquote(sections["FileNames"].get(int(fields.get("file_name_id", 0)), "?")),
                       int(fields.get("line", 0)),
                       unquote(sections["FunctionNames"].get(int(fields.get("function_name_id", 0)), "?")),
                       parent - 1)  # the dump prints a parent's id + 1 (0: none)
    return comps, entry, frames


def attr(instr: Instr, key: str) -> str | None:
    m = re.search(rf"\b{key}=%?([\w.\-]+)", instr.attrs)
    return m.group(1) if m else None


def frame_chain(frames: dict, fid: int | None) -> list[tuple[str, int, str]]:
    """Innermost first: ``(file, line, function)`` of a stack frame and its callers."""
    chain, seen = [], set()
    while fid in frames and fid not in seen:
        seen.add(fid)
        file, line, function, fid2 = frames[fid]
        chain.append((file, line, function))
        fid = fid2
    return chain


def own_frame(chain: list, peer_script: str | None) -> str | None:
    """The innermost frame in this repository or the peer's script, as ``path:line function``."""
    for file, line, function in chain:
        if peer_script and file.endswith(peer_script):
            return f"{peer_script.rsplit('/', 1)[-1]}:{line} {function}"
        if file.startswith(str(ROOT)) and "/.peer/" not in file and not file.endswith("gpu_kernels.py"):
            return f"{os.path.relpath(file, ROOT)}:{line} {function}"
    return f"{os.path.basename(chain[0][0])}:{chain[0][1]} {chain[0][2]}" if chain else None


def parse_thunks(text: str, metadata: str = "") -> list:
    """The thunk sequence as a tree: ``[{"kind", "name", "children", "condition", "body"}]``,
    ``name`` the HLO instruction a thunk runs (``metadata``: the dump's ``*thunk_metadata.txt``,
    whose ``thunk_id`` is the sequence's number), else the kernel's name."""
    names = {int(i): a for a, i in re.findall(r'profile_annotation: "([^"]*)"\s*thunk_id: (\d+)', metadata)}
    lines = [(len(l) - len(l.lstrip()), l.strip()) for l in text.splitlines() if l.strip()]

    def node(i):
        m = re.match(r"(\d+): (k\w+)\s+\[[^\]]*\]\s*(\S*)", lines[i][1])
        name = (names.get(int(m.group(1))) or m.group(3)) if m and m.group(2) != "kCommandBuffer" else ""
        return {"kind": m.group(2) if m else lines[i][1], "name": name, "children": [], "condition": [], "body": []}

    def block(i, indent):
        out = []
        while i < len(lines) and lines[i][0] >= indent and lines[i][1] not in ("condition:", "body:"):
            item, own = node(i), lines[i][0]
            i += 1
            if item["kind"] == "kWhile":
                if i < len(lines) and lines[i][1] == "condition:":
                    item["condition"], i = block(i + 1, own + 4)
                if i < len(lines) and lines[i][1] == "body:":
                    item["body"], i = block(i + 1, own + 4)
            elif i < len(lines) and lines[i][0] > own and lines[i][1] not in ("condition:", "body:"):
                item["children"], i = block(i, lines[i][0])
            out.append(item)
        return out, i

    return block(0, 0)[0]


def leaves(thunks: list) -> list[str]:
    """Names of the leaf thunks (kernels, copies) inside ``thunks``, not inside nested loops."""
    out = []
    for t in thunks:
        if t["kind"] == "kWhile":
            continue
        out += leaves(t["children"]) if t["children"] else [t["name"] or t["kind"]]
    return out


def placements(thunks: list) -> dict[str, str]:
    """HLO name -> how it is launched: ``graph`` (inside a command buffer) or its thunk kind."""
    out = {}
    for t in thunks:
        if t["kind"] == "kCommandBuffer":
            out.update({name: "graph" for name in leaves(t["children"])})
        elif t["kind"] != "kWhile":
            out[t["name"]] = t["kind"]
    return out


def launch_names(thunks: list) -> list[str]:
    """One iteration's launches: a command buffer as ``graph[n]`` (n leaves), else the HLO name and thunk kind."""
    return [f"graph[{len(leaves(t['children']))}]" if t["kind"] == "kCommandBuffer" else f"{t['name']} ({t['kind']})"
            for t in thunks if t["kind"] != "kWhile"]


class Module:
    """An optimized HLO module with its stack frames, and what one launched instruction costs."""

    def __init__(self, text: str, peer_script: str | None):
        self.comps, self.entry, self.frames = parse_hlo(text)
        self.peer_script = peer_script
        self.shapes = {i.name: i.shape for comp in self.comps.values() for i in comp}

    def io_bytes(self, instr: Instr) -> tuple[int, int]:
        """``(read, written)`` bytes of a launched instruction (module docstring)."""
        called = self.comps.get(attr(instr, "calls") or "")
        if not called:
            return sum(shape_bytes(self.shapes.get(o, "")) for o in instr.operands), shape_bytes(instr.shape)
        params = {int(i.operands[0]): i for i in called if i.opcode == "parameter"}
        users = collections.defaultdict(list)
        for i in called:
            for k, o in enumerate(i.operands):
                users[o].append((i, k))

        def uses(name):  # the uses of a value, through bitcasts
            found = []
            for u, k in users.get(name, []):
                found += uses(u.name) if u.opcode == "bitcast" else [(u, k)]
            return found

        read = 0
        for n, operand in enumerate(instr.operands):
            found = uses(params[n].name) if n in params else []
            sliced = [u for u, k in found if u.opcode in ("dynamic-slice", "gather", "slice") and k == 0]
            in_place = [u for u, k in found if u.opcode == "dynamic-update-slice" and k == 0]
            if found and len(sliced) + len(in_place) == len(found):
                read += sum(shape_bytes(u.shape) for u in sliced)  # an updated buffer is not read
            else:
                read += shape_bytes(self.shapes.get(operand, ""))
        by_name = {i.name: i for i in called}
        root = next((i for i in called if i.root), None)
        outs = [root] if root is None or root.opcode != "tuple" else [by_name.get(o) for o in root.operands]
        written = 0
        for out in filter(None, outs):
            while out.opcode == "bitcast" and out.operands[0] in by_name:
                out = by_name[out.operands[0]]
            written += shape_bytes(by_name[out.operands[1]].shape if out.opcode == "dynamic-update-slice"
                                   else out.shape)
        return read, written

    def sources(self, instr: Instr, depth: int = 0) -> collections.Counter:
        """Source lines of an instruction and of everything fused into it."""
        found = collections.Counter()
        fid = re.search(r"stack_frame_id=(\d+)", instr.attrs)
        if fid:
            found[own_frame(frame_chain(self.frames, int(fid.group(1))), self.peer_script)] += 1
        for i in self.comps.get(attr(instr, "calls") or "", []) if depth < 3 else []:
            found.update(self.sources(i, depth + 1))
        found.pop(None, None)
        return found

    def functions(self, comp: str) -> set[str]:
        """Every function on the stack of any op of a computation (fusions included, not nested loops)."""
        names = set()
        for instr in self.comps.get(comp, []):
            for i in [instr] + self.comps.get(attr(instr, "calls") or "", []):
                fid = re.search(r"stack_frame_id=(\d+)", i.attrs)
                if fid:
                    names.update(f for _, _, f in frame_chain(self.frames, int(fid.group(1))))
        return names

    def transposed(self, comp: str) -> bool:
        """Whether the computation's ops come from a backward pass (jax's ``transpose`` name stack)."""
        return any("transpose(" in (re.search(r'op_name="([^"]*)"', i.attrs) or [None, ""])[1]
                   for i in self.comps.get(comp, []))


def loops(module: Module, thunks: list, comp: str, depth: int = 0, parent=None) -> list[dict]:
    """Every while loop of ``comp`` (and nested), matched to its ``kWhile`` thunk in order."""
    whiles = [i for i in module.comps.get(comp, []) if i.opcode == "while"]
    thunk_whiles = [t for t in thunks if t["kind"] == "kWhile"]
    thunk_whiles += [t for t in thunks for t in t["children"] if t["kind"] == "kWhile"]
    if len(whiles) != len(thunk_whiles):
        raise RuntimeError(f"{comp}: {len(whiles)} HLO while loops but {len(thunk_whiles)} kWhile thunks")
    out = []
    for instr, thunk in zip(whiles, thunk_whiles):
        body = attr(instr, "body")
        trip = re.search(r'"known_trip_count":\{"n":"(\d+)"', instr.attrs)
        launched = [i for i in module.comps[body] if i.opcode not in NOT_LAUNCHED]
        io = [module.io_bytes(i) for i in launched]
        placed = placements(thunk["body"])
        record = dict(
            hlo_while=instr.name, body=body, depth=depth, parent=parent,
            trip_count=int(trip.group(1)) if trip else None,
            launches=sum(t["kind"] != "kWhile" for t in thunk["body"]),
            kernels=len(leaves(thunk["body"])),
            nested_loops=sum(t["kind"] == "kWhile" for t in thunk["body"]),
            condition_kernels=len(leaves(thunk["condition"])),
            hlo_launched=len(launched),
            bytes_read=sum(r for r, _ in io), bytes_written=sum(w for _, w in io),
            launch_list=launch_names(thunk["body"]),
            ops=[dict(name=i.name, launch=placed.get(i.name), read=r, written=w,
                      sources=[s for s, _ in module.sources(i).most_common(3)])
                 for i, (r, w) in zip(launched, io)],
            _functions=module.functions(body), _transposed=module.transposed(body),
        )
        out.append(record)
        out += loops(module, thunk["body"], body, depth + 1, instr.name)
    return out


def assign_roles(found: list[dict], num_epochs: int = 4) -> None:
    """Names each loop's role (module docstring). By nesting first: a loop of ``num_epochs``
    iterations around another is the epoch loop, the loop inside it the minibatch loop, a loop
    inside that a GRU's; then by the functions its body's ops come from."""
    by_name = {r["hlo_while"]: r for r in found}
    nested = collections.Counter(r["parent"] for r in found)
    for r in found:  # parents come before their loops
        functions, transposed = r.pop("_functions"), r.pop("_transposed")
        parent = by_name.get(r["parent"], {}).get("loop")
        if parent in ("rollout", "rollout_inner"):
            r["loop"] = "rollout_inner"  # a loop inside the environment's step (SMAX's units)
        elif parent == "minibatch":
            r["loop"] = "gru_backward" if transposed else "gru"
        elif parent == "epoch":
            r["loop"] = "minibatch"
        elif nested[r["hlo_while"]] and r["trip_count"] == num_epochs:
            r["loop"] = "epoch"
        else:
            r["loop"] = next((role for role in ("gae", "bootstrap", "rollout") if any(
                f.endswith(n) for f in functions for n in ROLE_FUNCTIONS[role])), "update" if nested[r["hlo_while"]]
                else "other")


# ---------------------------------------------------------------- driving (parent)


def analyse(name: str, dump: pathlib.Path) -> list[dict]:
    """The loop records of the program dumped in ``dump``."""
    hlo = max(dump.glob("*gpu_after_optimizations.txt"), key=lambda p: p.stat().st_size)
    prefix = hlo.name.split(".sm_")[0]
    metadata = next(dump.glob(f"{prefix}*thunk_metadata.txt"), None)
    thunks = parse_thunks(next(dump.glob(f"{prefix}*thunk_sequence_after_thunk_passes.txt")).read_text(),
                          metadata.read_text() if metadata else "")
    side, source = PROGRAMS[name][:2]
    module = Module(hlo.read_text(), source if side == "peer" else None)
    found = loops(module, thunks, module.entry)
    assign_roles(found)
    return found


def measure(name: str, args) -> list[dict]:
    """Compiles ``name`` in a subprocess and reads its dump: the program's line, then its loops'."""
    side, source, _, num_envs = PROGRAMS[name]
    keep = pathlib.Path(args.dump) / name if args.dump else None
    with (contextlib.nullcontext(str(keep)) if keep else tempfile.TemporaryDirectory(prefix="gpu-kernels-")) as dump:
        if keep and args.reuse_dump and any(keep.glob("*thunk_sequence_after_thunk_passes.txt")):
            info = json.loads((keep / "program.json").read_text())
            common = dict(program=name, side=side, env=name.split("-")[1], num_envs=num_envs)
            return [info] + [{**common, **r} for r in analyse(name, keep)]
        flags = [os.environ.get("XLA_FLAGS", ""), "--xla_gpu_enable_cub_radix_sort=false",
                 f"--xla_dump_to={dump}", "--xla_dump_hlo_module_re=.*(traced|one_seed).*"]
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(filter(None, flags))}
        argv = [sys.executable, __file__, "--single", name, "--target-config", args.target_config,
                "--peer-repo", args.peer_repo]
        print(f"[gpu_kernels] {name}: compiling for the H100 target ...", file=sys.stderr, flush=True)
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode or not lines:
            tail = " | ".join(proc.stderr.strip().splitlines()[-5:])
            return [dict(program=name, side=side, loop=None, error=f"exit {proc.returncode}: {tail}")]
        program = dict(program=name, side=side, loop=None, **json.loads(lines[-1]))
        if keep:
            (keep / "program.json").write_text(json.dumps(program))
        found = analyse(name, pathlib.Path(dump))
    common = dict(program=name, side=side, env=name.split("-")[1], num_envs=num_envs)
    return [program] + [{**common, **r} for r in found]


TABLE_LOOPS = ("rollout", "rollout_inner", "gae", "bootstrap", "epoch", "minibatch", "gru", "gru_backward")


def table(records: list[dict]) -> str:
    """Launches / kernels / bytes per iteration of each loop body, jaxpo beside the peer."""
    rows = ["| env | loop | trip | jaxpo launches / kernels | peer launches / kernels | jaxpo MB r/w | peer MB r/w |",
            "|---|---|---|---|---|---|---|"]
    by = collections.defaultdict(list)
    for r in records:
        if r.get("loop"):
            by[(r["env"], r["loop"], r["side"])].append(r)
    mb = lambda r: f"{r['bytes_read'] / 2**20:.2f} / {r['bytes_written'] / 2**20:.2f}"
    for env in ("mpe", "smax"):
        for loop in TABLE_LOOPS + tuple(sorted({k[1] for k in by} - set(TABLE_LOOPS))):
            mine, peer = by.get((env, loop, "jaxpo"), []), by.get((env, loop, "peer"), [])
            for i in range(max(len(mine), len(peer))):
                a, b = (mine[i] if i < len(mine) else None), (peer[i] if i < len(peer) else None)
                trip = "/".join(str(x["trip_count"]) for x in (a, b) if x)
                cell = lambda x: f"{x['launches']} / {x['kernels']}" if x else "—"
                rows.append(f"| {env} | {loop} | {trip} | {cell(a)} | {cell(b)} | {mb(a) if a else '—'} | "
                            f"{mb(b) if b else '—'} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--programs", nargs="+", choices=list(PROGRAMS), default=list(PROGRAMS))
    p.add_argument("--out", default=str(ROOT / "benchmarks/results/gpu-kernels/h100.jsonl"),
                   help="JSON lines file ('-': stdout)")
    p.add_argument("--target-config", default=TARGET, help="XLA GPU target description (.txtpb)")
    p.add_argument("--peer-repo", default=PEER_REPO, help="JaxMARL's git directory (a bare mirror)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per program")
    p.add_argument("--dump", help="keep each program's XLA dump in DUMP/<program>/ (default: a temporary folder)")
    p.add_argument("--reuse-dump", action="store_true", help="with --dump: read a program's kept dump, not compile")
    p.add_argument("--single", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.single:  # the child: compile, print the program's line
        real_stdout, sys.stdout = sys.stdout, sys.stderr
        info = compile_program(args.single, args.target_config, args.peer_repo)
        print(json.dumps(info), file=real_stdout, flush=True)
        return 0
    records = [r for name in args.programs for r in measure(name, args)]
    text = "".join(json.dumps(r) + "\n" for r in records)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.out).write_text(text)
    print(table(records), file=sys.stderr)
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
