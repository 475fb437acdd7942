"""The CNN torso's convolution, A/B: jaxpo's ``Conv`` (one matrix product over image
patches) against flax's ``nn.Conv`` (XLA's convolution), in the Overcooked training
program of ``tests/test_jaxmarl_families.py`` (cramped_room, 32 envs × 100 steps,
two 16-channel 3×3 layers, 2 seeds vmapped), ``--updates`` train steps.

Run:  python benchmarks/cnn_torso.py [--kind ours flax] [--updates 10]

One JSON line per kind: env_steps_per_s after the first chunk (the two runs' steps
together), compile_s (the first chunk, compile included), peak_rss_mb; each kind in its
own process.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import flax.linen as nn
import jax

import jaxpo.core.modules as modules
from jaxpo import Config, runs, train
from jaxpo.core import support


class FlaxConv(nn.Module):
    """``modules.Conv``'s interface on flax's ``nn.Conv`` (same padding, stride 1)."""

    features: int
    kernel: int
    kernel_init: object
    platform: object = None  # the CPU and XLA kernels are jaxpo.core.kernels; this is flax's layer itself

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Conv(self.features, (self.kernel, self.kernel), kernel_init=self.kernel_init, name="inner")(x)


def measure(kind: str, updates: int) -> dict:
    modules.Conv = FlaxConv if kind == "flax" else OURS
    chunk = updates // 2
    config = Config(env="overcooked", env_kwargs=dict(layout="cramped_room", shaped_reward=1.0, max_steps=100),
                    num_envs=32, num_steps=100, updates_per_chunk=chunk, hidden=(64, 64), conv_features=(16, 16),
                    conv_kernels=(3, 3))
    hyper, seeds, _ = runs(support.ippo(2), seeds=[0, 1], lr=2.5e-3)
    result = train(config, hyper, seeds, num_updates=updates, progress=False)
    steps = (updates - chunk) * config.num_envs * config.num_steps * len(seeds)
    return dict(kind=kind, updates=updates, runs=len(seeds), compile_s=round(result.compile_seconds, 2),
                env_steps_per_s=round(steps / (result.seconds - result.compile_seconds), 1),
                peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                backend=jax.default_backend())


OURS = modules.Conv


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", nargs="+", choices=["ours", "flax"], default=["ours", "flax"])
    p.add_argument("--updates", type=int, default=10, help="train steps (even: two chunks)")
    args = p.parse_args(argv)
    if args.updates < 2 or args.updates % 2:
        raise SystemExit("--updates must be even and at least 2")
    if len(args.kind) == 1:
        print(json.dumps(measure(args.kind[0], args.updates)), flush=True)
        return 0
    for kind in args.kind:  # each in a fresh process: jaxpo keeps one compiled program per Config in memory
        subprocess.run([sys.executable, __file__, "--kind", kind, "--updates", str(args.updates)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
