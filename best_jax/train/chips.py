"""Accelerator chips: memory per chip and peak bf16 FLOP/s, for AOT and MFU.

Peaks are dense bf16 matrix-multiply rates: TPU figures by spec, the H200's
as measured (BENCHMARKS.md). JAX shows one device per chip on all of these
(v4 and v5p as megacore), so per-chip figures are per-device figures.
"""

from __future__ import annotations

import dataclasses

GIB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class Chip:
  name: str
  hbm_bytes: int
  peak_bf16_flops: float


CHIPS = {
    "v4": Chip("TPU v4", 32 * GIB, 275e12),
    "v5e": Chip("TPU v5e", 16 * GIB, 197e12),
    "v5p": Chip("TPU v5p", 95 * GIB, 459e12),
    "h200": Chip("NVIDIA H200", 141 * 10**9, 790e12),
}

# jax `device_kind` strings → CHIPS keys.
_DEVICE_KINDS = {
    "tpu v4": "v4",
    "tpu v5 lite": "v5e",
    "tpu v5e": "v5e",
    "tpu v5": "v5p",
    "tpu v5p": "v5p",
    "nvidia h200": "h200",
}


def chip_for_topology(topology_name: str) -> Chip:
  """The chip of a topology name like `v5e:4x4` or `v4:2x2x4`."""
  generation = topology_name.split(":")[0].lower()
  if generation not in CHIPS:
    raise KeyError(f"unknown TPU generation {generation!r} in "
                   f"{topology_name!r}; known: {sorted(CHIPS)}")
  return CHIPS[generation]


def chip_for_device_kind(device_kind: str) -> Chip | None:
  """The chip of a jax `device.device_kind`, or None (e.g. a CPU)."""
  kind = device_kind.strip().lower()
  if kind in _DEVICE_KINDS:
    return CHIPS[_DEVICE_KINDS[kind]]
  if kind.startswith("nvidia h200"):  # e.g. "NVIDIA H200 NVL"
    return CHIPS["h200"]
  return None
