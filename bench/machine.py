"""What a bench result was measured on: CPU (model, ISA flags), threads and
the environment that sets them, XLA flags, devices, library versions, commit.

CPU speed ratios depend on all of these and on what else runs on the cores
(docs/measurements.md, "Speed vs PyTorch"), so every bench JSON carries them.

Imported by the bench scripts beside it (`python bench/NAME.py` puts this
folder on sys.path).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata

PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "array-record",
            "libtpu", "jax-cuda13-plugin", "jax-cuda12-plugin", "torch",
            "transformers")
# Vector and matrix extensions that decide which CPU kernels run.
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni",
             "avx512_fp16", "amx_bf16", "amx_tile", "asimd", "sve")
# Environment variables that set thread pools or kernel choices.
THREAD_ENV = ("XLA_FLAGS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
              "MKL_DEBUG_CPU_TYPE", "KMP_AFFINITY", "OMP_PROC_BIND",
              "TF_ENABLE_ONEDNN_OPTS", "JAX_PLATFORMS")


def cpu_info() -> dict:
  """CPU model, logical cores, cores this process may use, current clock,
  and the vector/matrix ISA flags present (from /proc/cpuinfo)."""
  model, mhz = platform.processor() or platform.machine(), None
  flags: set[str] = set()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model in ("", platform.machine()):
          model = value.strip()
        elif key == "cpu MHz" and mhz is None:
          mhz = float(value)
        elif key in ("flags", "Features") and not flags:
          flags = set(value.split())
  except OSError:
    pass
  return {"model": model, "cores": os.cpu_count(),
          "usable_cores": len(os.sched_getaffinity(0)), "mhz": mhz,
          "isa": [flag for flag in ISA_FLAGS if flag in flags],
          "flags": sorted(flags)}


def threads() -> dict:
  """Thread-pool settings: the environment that sets them, and torch's
  pools when torch is loaded (the reference side of a comparison)."""
  info = {"environment": {name: os.environ[name] for name in THREAD_ENV
                          if name in os.environ}}
  torch = sys.modules.get("torch")
  if torch is not None:
    info["torch_intra_op"] = torch.get_num_threads()
    info["torch_inter_op"] = torch.get_num_interop_threads()
    config = torch.__config__.show()
    info["torch_blas"] = next((line.strip(" -") for line in config.splitlines()
                               if "Math Kernel Library" in line
                               or "OpenBLAS" in line), None)
  return info


def load_average() -> list[float]:
  """1, 5 and 15 minute load averages (other work on the cores)."""
  return [round(x, 2) for x in os.getloadavg()]


def cpu_seconds() -> dict:
  """CPU seconds so far: busy on the whole machine, taken by the hypervisor
  (steal), and used by this process and its children (Linux /proc/stat)."""
  with open("/proc/stat", encoding="utf-8") as f:
    ticks = [int(x) for x in f.readline().split()[1:9]]
  user, nice, system, _, _, irq, softirq, steal = ticks
  per_second = os.sysconf("SC_CLK_TCK")
  return {"busy": (user + nice + system + irq + softirq) / per_second,
          "steal": steal / per_second, "own": sum(os.times()[:4])}


def other_work(before: dict, after: dict, wall: float) -> dict:
  """Cores kept busy by other processes, and stolen by the hypervisor, on
  average between two `cpu_seconds()` readings `wall` seconds apart: what a
  load average only hints at, for the bench's own interval."""
  others = (after["busy"] - before["busy"]) - (after["own"] - before["own"])
  return {"other_processes_cores": round(max(others, 0.0) / wall, 3),
          "steal_cores": round((after["steal"] - before["steal"]) / wall, 3)}


def summary_line(info: dict) -> str:
  """One printed line: processor, ISA, threads, versions, XLA flags."""
  cpu, versions = info["cpu"], info["versions"]
  env = info["threads"]["environment"]
  parts = [f"{cpu['model']} ({cpu['usable_cores']}/{cpu['cores']} cores, "
           f"{','.join(cpu['isa']) or 'no listed ISA flags'})",
           f"python {info['python']}",
           *(f"{name} {versions[name]}" for name in
             ("jax", "jaxlib", "torch", "transformers") if name in versions)]
  if "torch_intra_op" in info["threads"]:
    parts.append(f"torch threads {info['threads']['torch_intra_op']}")
  parts.append(f"XLA_FLAGS={env.get('XLA_FLAGS', '') or '(none)'}")
  parts += [f"{k}={v}" for k, v in env.items() if k != "XLA_FLAGS"]
  return "machine: " + "; ".join(parts)


def describe() -> dict:
  """Machine, device and version facts for a bench JSON file."""
  import jax  # pylint: disable=g-import-not-at-top
  versions = {}
  for name in PACKAGES:
    try:
      versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
      pass
  try:
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True,
        cwd=os.path.dirname(os.path.abspath(__file__)), timeout=10,
        check=False).stdout.strip() or None
  except (OSError, subprocess.TimeoutExpired):
    commit = None
  devices = jax.devices()
  return {
      "cpu": cpu_info(),
      "threads": threads(),
      "load_average": load_average(),
      "platform": platform.platform(),
      "python": sys.version.split()[0],
      "backend": jax.default_backend(),
      "device_kind": devices[0].device_kind,
      "device_count": len(devices),
      "process_count": jax.process_count(),
      "versions": versions,
      "git_commit": commit,
  }
