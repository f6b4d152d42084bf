"""Multi-host start-up, and agreement between the processes of a job.

`maybe_initialize()` joins the processes of a multi-host job with
`jax.distributed.initialize()`, but only when asked: by its `enable` argument,
by `BEST_JAX_DISTRIBUTED=1`, or by a coordinator address in the environment
(`JAX_COORDINATOR_ADDRESS`). It must run before any JAX operation. It never
runs on a plain single-host start, so laptops and unit tests are untouched.

Environment read here (all optional):

  BEST_JAX_DISTRIBUTED     1: initialize (cluster auto-detection on TPU VMs,
                           SLURM, Open MPI); 0: never, even with the others.
  JAX_COORDINATOR_ADDRESS  host:port of process 0 (also read by JAX itself).
  JAX_NUM_PROCESSES        process count, when not auto-detected.
  JAX_PROCESS_ID           this process's index, when not auto-detected.
  BEST_JAX_CPU_COLLECTIVES collectives for CPU devices across processes
                           (default "gloo" when the platform is CPU).

In a multi-process job every process runs the same code; files are written by
process 0 (`best_jax.train.workdir`), and what process 0 reads is handed to
the others with `broadcast_json`, so every process makes the same decisions
without reading files it did not write. Per-step decisions agree through
`HostMax`, over the coordinator's key-value store rather than the devices.
Compiled code never branches on the process index.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from typing import Any

import jax
import numpy as np
from jax._src import distributed as jax_distributed  # The coordination client.
from jax.experimental import multihost_utils

from best_jax.errors import InputError

_ENV_SWITCH = "BEST_JAX_DISTRIBUTED"
_ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
_ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
_ENV_PROCESS_ID = "JAX_PROCESS_ID"
_ENV_CPU_COLLECTIVES = "BEST_JAX_CPU_COLLECTIVES"

_initialized = False
_HOST_MAX_TIMEOUT_MS = 30 * 60 * 1000
_host_max_names = itertools.count()


def requested(enable: bool | None = None,
              environ: dict[str, str] | None = None) -> bool:
  """Whether a multi-process start is asked for (argument, then environment)."""
  environ = os.environ if environ is None else environ
  if enable is not None:
    return enable
  switch = environ.get(_ENV_SWITCH, "").strip().lower()
  if switch in ("0", "false", "no", "off"):
    return False
  if switch in ("1", "true", "yes", "on"):
    return True
  if switch:
    raise InputError(f"{_ENV_SWITCH}={switch!r}: use 1 or 0")
  return bool(environ.get(_ENV_COORDINATOR))


def _env_int(environ, name: str) -> int | None:
  value = environ.get(name)
  if value is None or value == "":
    return None
  try:
    return int(value)
  except ValueError:
    raise InputError(f"{name}={value!r} is not an integer") from None


def maybe_initialize(enable: bool | None = None, *,
                     coordinator_address: str | None = None,
                     num_processes: int | None = None,
                     process_id: int | None = None,
                     timeout_s: int = 300) -> bool:
  """Calls `jax.distributed.initialize` when asked; returns whether it did.

  Call it first thing in `main`, before any JAX operation. Arguments left at
  None come from the environment (see the module docstring), and what is still
  missing is auto-detected by JAX (TPU VM metadata, SLURM, Open MPI).

  Args:
    enable: True/False overrides the environment; None reads it.
    coordinator_address: `host:port` of process 0.
    num_processes: number of processes in the job.
    process_id: index of this process.
    timeout_s: how long to wait for the other processes to join.
  """
  global _initialized
  if _initialized or not requested(enable):
    return _initialized
  environ = os.environ
  platforms = (environ.get("JAX_PLATFORMS") or "").lower()
  if platforms.startswith("cpu") or environ.get(_ENV_CPU_COLLECTIVES):
    # Cross-process collectives on CPU devices need an implementation; gloo
    # ships with jaxlib. Accelerators use their own (ICI/DCN, NCCL).
    jax.config.update("jax_cpu_collectives_implementation",
                      environ.get(_ENV_CPU_COLLECTIVES, "gloo"))
  jax.distributed.initialize(
      coordinator_address=(coordinator_address
                           or environ.get(_ENV_COORDINATOR) or None),
      num_processes=(num_processes if num_processes is not None
                     else _env_int(environ, _ENV_NUM_PROCESSES)),
      process_id=(process_id if process_id is not None
                  else _env_int(environ, _ENV_PROCESS_ID)),
      initialization_timeout=timeout_s)
  _initialized = True
  logging.getLogger("best_jax").info(
      "jax.distributed: process %d of %d, %d local / %d global devices",
      jax.process_index(), jax.process_count(), jax.local_device_count(),
      jax.device_count())
  return True


def is_main_process() -> bool:
  """True on process 0 (and in every single-process run)."""
  return jax.process_index() == 0


def broadcast_json(value: Any) -> Any:
  """Process 0's `value` (JSON-able) on every process; every process calls it.

  Used for decisions that depend on files only process 0 reads (e.g. whether
  a stage of the experiment has finished), so all processes agree.
  """
  if jax.process_count() == 1:
    return value
  data = np.frombuffer(json.dumps(value).encode() if is_main_process()
                       else b"", np.uint8)
  size = int(multihost_utils.broadcast_one_to_all(np.int32(len(data))))
  buffer = np.zeros(size, np.uint8)
  buffer[:len(data)] = data
  buffer = np.asarray(multihost_utils.broadcast_one_to_all(buffer))
  return json.loads(buffer.tobytes().decode())


class HostMax:
  """The largest of one integer per process, call after call; every process
  makes the same calls in the same order.

  The values travel through `jax.distributed`'s coordination service (set,
  barrier, read): host only. A device collective (`process_allgather`) would
  queue behind the steps already dispatched, so the host would wait for
  each step to finish before dispatching the next. Process 0 deletes a
  call's keys at the next call, once every process has read them.
  """

  def __init__(self):
    self.prefix = f"best_jax/host_max/{next(_host_max_names)}"
    self.calls = 0

  def __call__(self, value: int) -> int:
    if jax.process_count() == 1:
      return int(value)
    # JAX exposes no public handle on the client; orbax reads it the same way.
    client = jax_distributed.global_state.client
    key = f"{self.prefix}/{self.calls}"
    client.key_value_set(f"{key}/{jax.process_index()}", str(int(value)))
    client.wait_at_barrier(key, _HOST_MAX_TIMEOUT_MS)
    values = [int(v) for _, v in client.key_value_dir_get(key)]
    if self.calls and is_main_process():
      client.key_value_delete(f"{self.prefix}/{self.calls - 1}")
    self.calls += 1
    return max(values)
