"""What a bench result was measured on: CPU, devices, library versions, commit.

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
            "libtpu", "jax-cuda13-plugin", "jax-cuda12-plugin")


def cpu_info() -> dict:
  """CPU model, logical cores and current clock from /proc/cpuinfo."""
  model, mhz = platform.processor() or platform.machine(), None
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model in ("", platform.machine()):
          model = value.strip()
        elif key.strip() == "cpu MHz" and mhz is None:
          mhz = float(value)
  except OSError:
    pass
  return {"model": model, "cores": os.cpu_count(), "mhz": mhz}


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
      "platform": platform.platform(),
      "python": sys.version.split()[0],
      "backend": jax.default_backend(),
      "device_kind": devices[0].device_kind,
      "device_count": len(devices),
      "process_count": jax.process_count(),
      "versions": versions,
      "git_commit": commit,
  }
