"""The time an update's matrix products alone take on this machine: a floor under a
recurrent shared-trunk config's training (SMAX's ``jaxmarl_ippo_rnn_smax.yaml``).

    python benchmarks/product_floor.py [--config FILE.yaml] [--num-envs E] [--rounds 5]

Every matrix product of one update — the rollout's forward passes (T steps of E·N rows),
and per minibatch the forward products over its M rows, their weight gradients (rows
contracted) and input gradients, and the GRU's recurrent product ``[b, H] @ [H, 3H]``
run 2·L times in sequence (forward, and the carry's gradient backward) — is timed alone,
as a jitted product of its own shape compiled with jaxpo's CPU options, best of
``--rounds`` rounds. The shapes are those jaxpo's kernels use: the GRU's three input
kernels as one ``[D, 3H]`` product, a shared trunk's two head layers as one
``[H, W1 + W2]`` product (``jaxpo.core.kernels.cpu``), the first layer without an input
gradient. One JSON line per product (shape, count per update, GFLOP/s, seconds per
update) and a last line with the sums: ``floor_s`` is what the products would take at
those rates with nothing else running. The environment's own time
(``throughput.py --kinds raw``) and everything that is not a product (elementwise work,
the loss, Adam, the shuffle, the runtime's per-op cost) come on top.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[1] / "jaxpo/experiments/configs/jaxmarl_ippo_rnn_smax.yaml"


def products(config, params: dict, num_agents: int) -> list[dict]:
    """``[{name, phase, m, k, n, count, contract_rows}]``: each product of one update.

    Args:
        config: a recurrent ``Config`` with a shared trunk.
        params: the actor's parameters (``net.init(key)["actor"]``, the trunk and both heads).
        num_agents: N.

    Returns:
        One entry per product shape; ``contract_rows`` marks a weight gradient
            (``[M, k]ᵀ @ [M, n]``, rows contracted).
    """
    from flax.traverse_util import flatten_dict

    kernels = {path[-2]: leaf.shape for path, leaf in flatten_dict(params).items() if path[-1] == "kernel"}
    if not (config.recurrent and config.shared_trunk and "hr" in kernels):
        raise SystemExit("product_floor.py is written for recurrent configs with a shared trunk (a GRU)")
    d_in, width = kernels["Dense_0"]
    hidden = kernels["hr"][0]
    rows = config.steps_per_update * num_agents // config.num_minibatches  # M, a minibatch's rows
    seqs = rows // config.sequence_length  # b
    steps, minibatches = config.sequence_length, config.num_epochs * config.num_minibatches
    (k1, w1), (_, v1) = kernels["Dense_1"], kernels["value_Dense_1"]  # the heads' hidden layers, one product
    layers = [("embed", d_in, width, False), ("gru_input", width, 3 * hidden, True), ("heads_hidden", k1, w1 + v1, True),
              ("actor_out", *kernels["Dense_2"], True), ("value_out", *kernels["value_Dense_2"], True)]
    rollout_rows = config.num_envs * num_agents
    out = [dict(name=f"rollout {n}", phase="rollout", m=rollout_rows, k=k, n=f, count=config.num_steps, contract_rows=False)
           for n, k, f, _ in layers]
    out.append(dict(name="rollout gru_recurrent", phase="rollout", m=rollout_rows, k=hidden, n=3 * hidden,
                    count=config.num_steps, contract_rows=False))
    for n, k, f, input_grad in layers:
        out.append(dict(name=f"{n} forward", phase="update rows", m=rows, k=k, n=f, count=minibatches, contract_rows=False))
        out.append(dict(name=f"{n} weight gradient", phase="update rows", m=rows, k=k, n=f, count=minibatches,
                        contract_rows=True))
        if input_grad:
            out.append(dict(name=f"{n} input gradient", phase="update rows", m=rows, k=f, n=k, count=minibatches,
                            contract_rows=False))
    out.append(dict(name="gru_recurrent weight gradient", phase="update rows", m=rows, k=hidden, n=3 * hidden,
                    count=minibatches, contract_rows=True))
    out.append(dict(name="gru_recurrent step, forward and backward", phase="update sequential", m=seqs, k=hidden,
                    n=3 * hidden, count=2 * steps * minibatches, contract_rows=False))
    return out


def seconds_per_call(m: int, k: int, n: int, contract_rows: bool, rounds: int, options: dict) -> float:
    """Best of ``rounds`` mean seconds of a jitted ``[m, k] @ [k, n]`` (``[m, k]ᵀ @ [m, n]``
    with ``contract_rows``), compiled with ``options``."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((m, k), jnp.float32)
    b = jnp.ones((m, n) if contract_rows else (k, n), jnp.float32)
    dims = (((0,), (0,)), ((), ())) if contract_rows else (((1,), (0,)), ((), ()))
    fn = jax.jit(lambda a, b: jax.lax.dot_general(a, b, dims)).lower(a, b).compile(options)
    calls = max(3, int(2e9 / (2 * m * k * n)))  # about 2 GFLOP a round
    fn(a, b).block_until_ready()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = fn(a, b)
        out.block_until_ready()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(CONFIG), help="a recurrent shared-trunk experiment file")
    p.add_argument("--num-envs", type=int, default=None, help="E (default: the file's)")
    p.add_argument("--rounds", type=int, default=5, help="rounds per product; the best counts")
    args = p.parse_args(argv)
    import jax

    import jaxpo
    from jaxpo.program import compiled

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from throughput import file_config

    config = file_config(args.config, args.num_envs)
    tr = jaxpo.trainer(config)
    options = compiled.compiler_options("cpu") if jax.default_backend() == "cpu" else {}
    total: dict[str, float] = {}
    for item in products(config, tr.net.init(jax.random.PRNGKey(0))["actor"], tr.num_agents):
        call_s = seconds_per_call(item["m"], item["k"], item["n"], item["contract_rows"], args.rounds, options)
        flops = 2.0 * item["m"] * item["k"] * item["n"]
        line = dict(item, gflops_per_s=round(flops / call_s / 1e9, 1), seconds_per_update=round(call_s * item["count"], 4),
                    gflop_per_update=round(flops * item["count"] / 1e9, 2))
        total[item["phase"]] = total.get(item["phase"], 0.0) + line["seconds_per_update"]
        print(json.dumps(line), flush=True)
    print(json.dumps(dict(summary=True, config=args.config, num_envs=config.num_envs, seconds_per_update=
                          {k: round(v, 3) for k, v in total.items()}, floor_s=round(sum(total.values()), 3),
                          env_steps_per_update=config.steps_per_update, backend=jax.default_backend(),
                          jax_version=jax.__version__, xla_options=options)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
