"""Loggers read back: TensorBoard event files (tensorboard's own reader) and offline
W&B run files (one W&B run per jaxpo run); unknown logger names are refused."""

import glob
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from jaxpo import cli
from jaxpo.run.loggers import parse_loggers

from conftest import CHUNKS


def test_tensorboard_has_one_series_per_run_and_metric_and_the_hyperparameters(trained_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result, run_dir = trained_run
    metrics = result.programs[0].metrics
    runs = sorted(os.listdir(os.path.join(run_dir, "tensorboard")))
    assert runs == ["000-khop_k1_seed0", "001-khop_k1_seed1"]
    for r, name in enumerate(runs):
        events = EventAccumulator(os.path.join(run_dir, "tensorboard", name))
        events.Reload()
        assert set(events.Tags()["scalars"]) == set(metrics)
        for metric in ("loss", "grad_norm", "return"):
            scalars = events.Scalars(metric)
            finite = np.isfinite(metrics[metric][r])
            assert [s.step for s in scalars] == list(result.programs[0].env_steps[finite])
            np.testing.assert_allclose([s.value for s in scalars], metrics[metric][r][finite], rtol=1e-6)
        assert "_hparams_/session_start_info" in events.summary_metadata  # the HParams tab
        assert len(events.Scalars("loss")) == CHUNKS


def wandb_records(path):
    """The records of a ``.wandb`` file (a LevelDB-style log: 32 KiB blocks, each record
    a 7-byte header: crc32, little-endian length, type 1 full / 2 first / 3 middle / 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    records, pos, pending, block = [], 7, b"", 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # too little room for a header: the block is padded
            pos += block - pos % block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        pending += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


# In a subprocess: the wandb SDK leaves its threads and service process running in the
# process that used it, and a test worker goes on to run hundreds of other tests.
WANDB_SCRIPT = """
import sys, numpy as np, jaxpo
sys.path.insert(0, {tests!r})
from conftest import experiment
result = jaxpo.sweep(experiment({out!r}, "wb", log="wandb", steps=128 * 4))
np.save({losses!r}, result.programs[0].metrics["loss"])
"""


def test_wandb_offline_writes_one_run_per_jaxpo_run(tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    losses = tmp_path / "losses.npy"
    script = WANDB_SCRIPT.format(tests=os.path.dirname(__file__), out=str(tmp_path), losses=str(losses))
    with open(tmp_path / "log.txt", "w") as log:  # a file, not a pipe: nothing left running can hold it open
        proc = subprocess.run([sys.executable, "-c", script], env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=600)
    assert proc.returncode == 0, (tmp_path / "log.txt").read_text()[-3000:]
    losses_of = np.load(losses)
    files = sorted(glob.glob(str(tmp_path / "wb" / "wandb" / "offline-run-*" / "run-*.wandb")))
    assert len(files) == 2 and not (tmp_path / "wb" / "metrics.csv").exists()  # csv not asked for
    seen = {}
    for path in files:
        records = wandb_records(path)
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        history = [r.history for r in records if r.WhichOneof("record_type") == "history"]
        config = {item.key: item.value_json for item in run.config.update}
        seen[run.display_name] = (run.run_group, config, history)
    assert set(seen) == {"khop(k=1)/seed0", "khop(k=1)/seed1"}
    for r, label in enumerate(sorted(seen)):
        group, config, history = seen[label]
        assert group == "wb" and config["seed"] == str(r) and config["hyper.lr"] == "0.003"
        assert len(history) == 4
        losses = [float(next(i.value_json for i in h.item if (i.key or i.nested_key[0]) == "loss")) for h in history]
        np.testing.assert_allclose(losses, losses_of[r], rtol=1e-6)


@pytest.mark.parametrize("text, message", [
    ("csv,tensorbord", "unknown logger 'tensorbord'; loggers: csv, tensorboard, wandb"),
    ("csv,csv", "logger named twice"),
])
def test_unknown_loggers_are_refused(text, message, capsys):
    with pytest.raises(ValueError, match=message):
        parse_loggers(text)
    assert cli.main(["train", "--log", text]) == 2
    assert message in capsys.readouterr().err
