"""Fixtures shared by test files: one small run with checkpoints and loggers, trained
once per session (checkpoint, logger and evaluation tests all read it)."""

import pytest

CHUNKS = 16  # of one update each; 128 env steps per update
EXPERIMENT = {"config": {"env": "public_goods", "num_envs": 8, "num_steps": 16, "updates_per_chunk": 1},
              "run": {"seeds": 2, "progress": False, "steps": 128 * CHUNKS}}


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
