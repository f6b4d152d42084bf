"""Multi-host start-up and process-0-only side effects.

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

Side effects in a multi-process job happen on process 0 only:
`is_main_process()`, `main_process_logging()` (silences the `best_jax` logger
elsewhere) and `write_on_main(path, write)` (an atomic write by process 0, then
a barrier so every process can read the file). Compiled code never branches on
the process index.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import IO

from best_jax.data.files import atomic_write
from best_jax.errors import InputError

_ENV_SWITCH = "BEST_JAX_DISTRIBUTED"
_ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
_ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
_ENV_PROCESS_ID = "JAX_PROCESS_ID"
_ENV_CPU_COLLECTIVES = "BEST_JAX_CPU_COLLECTIVES"

_initialized = False


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
  import jax  # pylint: disable=g-import-not-at-top

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


def process_index() -> int:
  import jax  # pylint: disable=g-import-not-at-top
  return jax.process_index()


def process_count() -> int:
  import jax  # pylint: disable=g-import-not-at-top
  return jax.process_count()


def is_main_process() -> bool:
  """True on process 0 (and in every single-process run)."""
  return process_index() == 0


class _MainProcessFilter(logging.Filter):

  def filter(self, record: logging.LogRecord) -> bool:
    return is_main_process()


_FILTER = _MainProcessFilter()


def main_process_logging(logger: str = "best_jax") -> logging.Logger:
  """Returns `logger`, silenced on every process but 0 (idempotent)."""
  log = logging.getLogger(logger)
  if _FILTER not in log.filters:
    log.addFilter(_FILTER)
  return log


def barrier(name: str) -> None:
  """Waits until every process reaches the barrier `name` (no-op if one)."""
  if process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


def write_on_main(path: str | os.PathLike, write: Callable[[IO], None],
                  mode: str = "w", *, sync: bool = True) -> bool:
  """Process 0 writes `path` atomically with `write(file)`; returns if it did.

  With `sync`, all processes then wait at a barrier, so the file exists for
  everyone when this returns. Every process must call it (same order).
  """
  wrote = False
  if is_main_process():
    with atomic_write(path, mode) as f:
      write(f)
    wrote = True
  if sync:
    # Named by the file name: the directory may differ between hosts.
    barrier(f"best_jax.write_on_main:{os.path.basename(os.fspath(path))}")
  return wrote
