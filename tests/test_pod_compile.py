"""``benchmarks/pod_compile.py`` without libtpu: the collective count of optimized HLO (on
written HLO text, and on programs compiled for 8 fake CPU devices in a subprocess) and
the errors its arguments give. The TPU compiles themselves need the benchmark's own
environment and are not run here."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "pod_compile.py"


def load_script():
    spec = importlib.util.spec_from_file_location("pod_compile", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pod = load_script()

HLO = """
ENTRY %main {
  %p = f32[16,64]{1,0:T(8,128)} parameter(0)
  %all-reduce = f32[16]{0:T(128)S(1)} all-reduce(%p), channel_id=1, to_apply=%add
  %fusion.3 = s32[]{:T(128)} fusion(%all-reduce), kind=kLoop, calls=%fused
  %ag-start = (f32[1,64]{1,0}, f32[16,64]{1,0}) all-gather-start(%p), dimensions={0}
  %ag-done = f32[16,64]{1,0} all-gather-done(%ag-start)
  %cp = (bf16[8]{0}, u32[2]{0}) collective-permute(%x), source_target_pairs={{0,1}}
  %rs = f32[4]{0} reduce-scatter(%p), dimensions={0}, to_apply=%add
}
"""


def test_collectives_counts_each_instruction_once_with_its_result_bytes():
    found = pod.collectives(HLO)
    assert found == {"all-reduce": {"count": 1, "bytes": 64},  # the fusion reading it is not one
                     "all-gather": {"count": 1, "bytes": 16 * 64 * 4},  # the -done only, not the -start
                     "collective-permute": {"count": 1, "bytes": 8 * 2 + 2 * 4},  # a tuple: both parts
                     "reduce-scatter": {"count": 1, "bytes": 16}}


def test_no_collective_gives_an_empty_count():
    assert pod.collectives("%a = f32[4]{0} add(%b, %c)\n%d = f32[4]{0} fusion(%a), calls=%all-reduce-like") == {}


@pytest.mark.parametrize("name", ["v9:4x4", "v5e", "v5e:4", "4x4", "v5e:4x4x4x4"])
def test_an_unknown_slice_names_the_argument(name):
    with pytest.raises(ValueError, match="--slice"):
        pod.slice_kind(name)


def test_an_unknown_config_program_or_layout_names_the_argument():
    with pytest.raises(ValueError, match="--config"):
        pod.load_config("mappo_smac")
    with pytest.raises(ValueError, match="--program"):
        pod.compile_line("train", "mpe", "v5e:4x4", "runs")
    with pytest.raises(ValueError, match="--layout"):
        pod.compile_line("evaluate", "mpe", "v5e:4x4", "envs")


def test_cli_refuses_an_unknown_slice_before_compiling(capsys):
    with pytest.raises(SystemExit):
        pod.main(["--slice", "v9:4x4"])
    assert "--slice" in capsys.readouterr().err


PROBE = f"""
import importlib.util, json, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
spec = importlib.util.spec_from_file_location("pod_compile", {str(SCRIPT)!r})
pod = importlib.util.module_from_spec(spec); spec.loader.exec_module(pod)
mesh = Mesh(jax.devices(), ("d",))
x = jax.ShapeDtypeStruct((8, 32), jnp.float32, sharding=NamedSharding(mesh, P("d")))
count = lambda fn: pod.collectives(jax.jit(fn).lower(x).compile().as_text())
split = jax.shard_map(lambda a: a * 2, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
summed = jax.shard_map(lambda a: jax.lax.psum(a, "d"), mesh=mesh, in_specs=P("d"), out_specs=P("d"))
gathered = jax.shard_map(lambda a: jax.lax.all_gather(a, "d", tiled=True), mesh=mesh, in_specs=P("d"),
                         out_specs=P("d"))
print(json.dumps({{"devices": jax.device_count(), "split": count(split), "summed": count(summed),
                  "gathered": count(gathered)}}))
"""


def test_collectives_of_programs_compiled_for_8_cpu_devices():
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"}
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == 8
    assert out["split"] == {}  # each device its own rows: nothing crosses
    assert out["summed"] == {"all-reduce": {"count": 1, "bytes": 32 * 4}}  # one device's [1, 32] block
    assert list(out["gathered"]) == ["all-gather"] and out["gathered"]["all-gather"]["bytes"] == 8 * 32 * 4
