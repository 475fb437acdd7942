"""Devices and hosts: the mesh a program runs on, global arrays in, host arrays out,
and starting many processes.

Two ways to use D devices (``Config.parallel``):

* ``"runs"`` — the runs axis R is split over the devices (R padded to a multiple
  of D). Runs are independent, so the program has no collective at all.
* ``"envs"`` — one run's E environments are split over the devices (E/D each,
  ``shard_map``); parameters stay replicated. Normalisation statistics, the loss
  and the metrics are averaged over the devices, so the update equals the one-device
  update on the same E environments.

Many hosts: ``initialize`` joins this process to the others (``jax.distributed``);
then ``jax.devices()`` lists every process's devices, the mesh spans them all, each
process places only its own shards (``put``), ``gather`` brings results to every
process, and only the main process writes outputs.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from typing import Any, Callable, Literal, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding

from jaxpo.core.checks import FieldError, Ref, Setting, positive_int

Parallel = Literal["runs", "envs"]
ENV_AXIS = "envs"  # the mapped axis name inside the data-parallel program


def make_mesh(parallel: Parallel, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh over ``devices`` (default: every device of every process) whose one
    axis is named ``parallel``; Auto axis types (XLA partitions what is not annotated)."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices or not all(isinstance(d, jax.Device) for d in devices) or len(set(devices)) != len(devices):
        raise ValueError(f"devices must be distinct jax devices (e.g. jax.devices()[:4]), got {devices!r}")
    return Mesh(np.asarray(devices), (parallel,), axis_types=(AxisType.Auto,))



def padded_size(num_runs: int, num_devices: int) -> int:
    """The smallest multiple of ``num_devices`` that holds ``num_runs`` runs."""
    return -(-num_runs // num_devices) * num_devices


def put(tree: Any, sharding: NamedSharding) -> Any:
    """Global arrays laid out by ``sharding`` from host values every process holds in
    full; each process builds only the shards of its own devices."""
    def place(x):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(place, tree)


def gather(tree: Any) -> Any:
    """Host (numpy) copies of global arrays, on every process: shards held by other
    processes are all-gathered."""
    def fetch(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(jax.device_get(x))

    return jax.tree.map(fetch, tree)


def agree(values: Sequence[int]) -> list[int]:
    """Process 0's ``values`` on every process (e.g. sizes derived from local free memory,
    which every process must choose alike)."""
    if jax.process_count() == 1:
        return list(values)
    return [int(v) for v in multihost_utils.broadcast_one_to_all(np.asarray(values, np.int64))]


def is_main_process() -> bool:
    """True on the process that writes outputs (process 0; the only one when single-host)."""
    return jax.process_index() == 0


def initialize(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
               timeout_s: int = 60) -> None:
    """Joins this process to a multi-process run (``jax.distributed.initialize``), before
    any other JAX call.

    With no arguments JAX finds the cluster itself (TPU pods, SLURM, Open MPI, or the
    ``JAX_COORDINATOR_ADDRESS`` / ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` environment
    variables). Otherwise ``coordinator`` is ``HOST:PORT`` of process 0, which every
    process names, ``num_processes`` P ≥ 1 and ``process_id`` in [0, P). A coordinator
    that cannot be reached, or a peer that stops answering, ends this process with an
    error after about ``timeout_s`` seconds instead of hanging.

    Args:
        coordinator: ``HOST:PORT`` of process 0 (None: JAX finds the cluster).
        num_processes: P, the number of processes.
        process_id: this process's index in [0, P).
        timeout_s: seconds to wait for the coordinator and for each peer.

    Raises:
        FieldError: naming the argument (``jaxpo.core.checks``): some but not all of the
            three given, a malformed coordinator, P < 1, or an index out of range.
        ConnectionError: if the coordinator cannot be reached within ``timeout_s``.
    """
    timeout_s = positive_int(timeout_s, "timeout_s", shown="`timeout_s`")
    given = {"coordinator": coordinator, "num_processes": num_processes, "process_id": process_id}
    if any(v is not None for v in given.values()):
        missing = [name for name, v in given.items() if v is None]
        if missing:
            names = [part for m in missing for part in (", ", Ref(m, f"`{m}`"))][1:]
            raise FieldError.saying(missing[0], "a multi-process run needs ", Ref("coordinator", "`coordinator`"),
                                    " (HOST:PORT), ", Ref("num_processes", "`num_processes`"), " and ",
                                    Ref("process_id", "`process_id`"), " together; missing: ", *names)
        host, _, port = str(coordinator).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise FieldError("coordinator", f"must be HOST:PORT (e.g. 10.0.0.1:1234), got {coordinator!r}",
                             shown="`coordinator`")
        num_processes = positive_int(num_processes, "num_processes", shown="`num_processes`")
        if isinstance(process_id, bool) or not isinstance(process_id, int) or not 0 <= process_id < num_processes:
            raise FieldError("process_id", f"must be an integer in [0, {num_processes}) for ",
                             Setting("num_processes", num_processes), f", got {process_id!r}", shown="`process_id`")
        if process_id != 0:
            _wait_for(host, int(port), timeout_s)
    jax.distributed.initialize(coordinator, num_processes, process_id, initialization_timeout=timeout_s,
                               heartbeat_timeout_seconds=timeout_s)


def exit_on_error(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; in a multi-process run an exception ends this process at once
    (traceback printed, exit status 1): a process that exits normally would wait for
    its peers at shutdown while they wait for it in the next collective. Its peers
    then stop within the peer timeout ("tasks are unhealthy (stopped sending heartbeats)")."""
    if jax.process_count() == 1:
        return fn(*args)
    try:
        return fn(*args)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def _wait_for(host: str, port: int, timeout_s: float) -> None:
    """Raises a ``ConnectionError`` naming ``host:port`` if nothing accepts a connection
    there within ``timeout_s`` seconds (JAX's own wait ends in an abort, not an error)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(5.0, timeout_s)):
                return
        except OSError as err:
            if time.monotonic() > deadline:
                raise ConnectionError(f"coordinator {host}:{port} cannot be reached after {timeout_s:g} s: "
                                      f"{err.strerror or err}; start process 0 first, and check the address "
                                      f"and firewall") from None
            time.sleep(0.5)


def describe() -> str:
    """One line: processes, devices, platform (for logs)."""
    return (f"process {jax.process_index()}/{jax.process_count()}, {jax.local_device_count()} local of "
            f"{jax.device_count()} {jax.devices()[0].platform} devices, host {os.uname().nodename}")
