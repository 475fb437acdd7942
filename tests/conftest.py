"""Fixtures shared by test files: one small run with checkpoints and loggers, trained
once per session (checkpoint, logger and evaluation tests all read it). The session
shares one persistent compile cache, with every subprocess it starts (CLI runs,
multi-device and multi-process tests, notebooks): the same program compiles once."""

import gc
import os
import shutil
import tempfile

import pytest

CHUNKS = 16  # of one update each; 128 env steps per update
EXPERIMENT = {"config": {"env": "public_goods", "num_envs": 8, "num_steps": 16, "updates_per_chunk": 1},
              "run": {"seeds": 2, "progress": False, "steps": 128 * CHUNKS}}


# Seconds per module on the 2-core CI machine (one run of the whole suite, nothing else
# running, with the tests' compiler options), slowest first. xdist (--dist loadscope
# --no-loadscope-reorder) deals modules out in collection order, the next to whichever
# worker is about to run dry: the longest start first and the short ones fill the end, so
# neither worker idles while the other finishes a long module. The rest follow in their
# usual order.
SLOWEST_FIRST = {
    "test_multiprocess.py": 310, "test_jaxmarl_families.py": 282, "test_jaxmarl_control.py": 236,
    "test_parallel.py": 217, "test_docs.py": 210, "test_kernels.py": 176, "test_speed.py": 158,
    "03_paper_claims.ipynb": 140, "test_checkpoint.py": 137, "test_evaluate.py": 134, "test_state_supports.py": 109,
    "test_learning_policies.py": 96, "test_population.py": 96, "test_coupling.py": 82, "test_protocol.py": 78,
    "test_train_schemes.py": 77, "test_diagnostics.py": 76, "test_recurrent.py": 68, "test_audit.py": 64,
    "02_sweeps.ipynb": 52,
}


# XLA options the tests compile with on top of jaxpo's own: XLA:CPU's older loop emitters
# for fusions instead of its MLIR fusion emitters compile a chunk about 30% faster, and
# the suite mostly compiles (docs/speed.md, "Compile time"). Values agree with jaxpo's
# default to float32 rounding; jaxpo's programs keep the fusion emitters (SMAX runs 3%
# faster with them).
TEST_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": "false"}


def experiment(out, name, **run):
    """The shared small experiment, written to ``out/name``, with ``run`` settings over it."""
    return {**EXPERIMENT, "run": {**EXPERIMENT["run"], "out": str(out), "name": name, **run}}


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """``(SweepResult, run dir)``: 2 seeds × 16 updates on public_goods, a checkpoint
    every 4 chunks, CSV and TensorBoard logs."""
    import jaxpo

    out = tmp_path_factory.mktemp("trained")
    result = jaxpo.sweep(experiment(out, "run", checkpoint_every=4, log="csv,tensorboard"))
    return result, str(out / "run")


def pytest_configure(config):
    from jaxpo.program.compile_cache import enable_compile_cache

    if os.environ.get("CI") and hasattr(config.option, "overwrite"):
        # CI keeps what the notebooks printed and drew (nbmake --overwrite, in its clean
        # clone), so the site it builds next shows them; a developer's notebooks stay as committed.
        config.option.overwrite = True

    # Every program the tests build compiles with jaxpo's own CPU options
    # (jaxpo.program.compiled.CPU_COMPILER_OPTIONS: LLVM at -O1, 1.15-1.4x less compile for a
    # chunk; no YNNPACK fusions, SMAX's rollout 2x faster): the tests' reference jits and the
    # JaxMARL environments they step too, to the same values within float32 rounding; and
    # TEST_COMPILER_OPTIONS, for compile time. Set before any computation starts the
    # backend; subprocesses inherit them.
    from jaxpo.program.compiled import CPU_COMPILER_OPTIONS

    flags = os.environ.get("XLA_FLAGS", "")
    for name, value in {**CPU_COMPILER_OPTIONS, **TEST_COMPILER_OPTIONS}.items():
        if name not in flags:
            flags = f"{flags} --{name}={value}".strip()
    os.environ["XLA_FLAGS"] = flags
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # an xdist worker shares the controller's cache
    cache = os.environ["JAX_COMPILATION_CACHE_DIR"] if worker else tempfile.mkdtemp(prefix="jaxpo-test-xla-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = cache  # subprocesses, and the CLI's default
    enable_compile_cache(cache)
    store_every_program()
    # Python's cyclic GC less often: tracing allocates millions of objects and a worker's heap
    # holds over a million live ones, so each full collection walks them all for little garbage
    # (test_evaluate and test_train_schemes serially: 6.3 s in the collector of 130 s, 1.5 s of
    # 125 s with these thresholds, and 1.35M objects alive at the end against 1.32M).
    gc.set_threshold(10_000, 50, 100)
    if not worker:
        config.jaxpo_compile_cache = cache  # removed by the process that made it


def store_every_program():
    """The session's cache keeps every program, not only those over jaxpo's 0.5 s: the tests
    build thousands of small ones (eager ops, reference jits of fresh closures) whose HLO
    repeats across tests and workers, which jax's in-memory caches miss and the disk cache
    finds (test_recurrent, test_networks and test_encoders: 87 s serially without it, 68 s
    with it)."""
    import jax

    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def pytest_runtest_setup(item):
    store_every_program()  # again: an in-process `jaxpo train` sets the CLI's threshold


def pytest_collection_modifyitems(items):
    rank = lambda item: -SLOWEST_FIRST.get(os.path.basename(item.nodeid.split("::")[0]), 0)
    items.sort(key=rank)  # stable: each module's tests keep their order


def pytest_unconfigure(config):
    shutil.rmtree(getattr(config, "jaxpo_compile_cache", ""), ignore_errors=True)
