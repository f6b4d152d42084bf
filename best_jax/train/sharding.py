"""Sharding from configuration: the device mesh, logical-axis rules, placement.

Models name logical axes only ('vocab', 'embed', 'mlp', 'heads', 'kv'; batches
use 'batch'); the configuration maps them to mesh axes, T5X style:

  config.mesh.shape = (-1, 1); config.mesh.axis_names = ('data', 'model')
  config.logical_axis_rules = (('batch', 'data'), ('vocab', 'model'),
                               ('mlp', 'model'), ('heads', 'model'),
                               ('embed', None), ('kv', None))

The mesh axes are `AxisType.Auto`, chosen on purpose: parameters and batches
get explicit shardings at the jit boundary (`in_shardings`/`out_shardings`)
and XLA propagates them through the model, so model code stays mesh-agnostic.
Explicit axes would make every einsum and reshape in the model state its output
sharding.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from flax import nnx

Rules = Sequence[tuple[str, str | None]]

# The logical name of the leading (example) axis of every batch array.
BATCH_AXIS = "batch"

# T5X's standard rules: data parallel over 'data', tensor parallel over
# 'model'. Configs use these unless an experiment needs other rules.
STANDARD_LOGICAL_AXIS_RULES = (
    ("batch", "data"), ("vocab", "model"), ("mlp", "model"),
    ("heads", "model"), ("embed", None), ("kv", None))


def make_mesh(shape: Sequence[int], axis_names: Sequence[str],
              devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
  """A mesh with Auto axes; one -1 in `shape` takes the remaining devices."""
  devices = list(jax.devices() if devices is None else devices)
  shape = list(shape)
  if len(shape) != len(axis_names):
    raise ValueError(f"mesh shape {shape} and axis names {axis_names} differ "
                     "in length")
  if shape.count(-1) > 1:
    raise ValueError(f"mesh shape {shape} has more than one -1")
  if -1 in shape:
    known = math.prod(s for s in shape if s != -1)
    if len(devices) % known:
      raise ValueError(f"{len(devices)} devices do not fill mesh {shape}")
    shape[shape.index(-1)] = len(devices) // known
  if math.prod(shape) != len(devices):
    raise ValueError(f"mesh shape {shape} needs {math.prod(shape)} devices, "
                     f"{len(devices)} given")
  axis_types = (jax.sharding.AxisType.Auto,) * len(shape)
  return jax.make_mesh(tuple(shape), tuple(axis_names), axis_types=axis_types,
                       devices=devices)


def mesh_axis(rules: Rules, logical: str) -> str | None:
  """The mesh axis that a logical axis maps to (None: replicated)."""
  return dict(rules).get(logical)


def _spec_for(logical_axes: Sequence[str | None], shape: Sequence[int],
              mesh: jax.sharding.Mesh, rules: Mapping[str, str | None],
              where: str) -> jax.P:
  """Maps logical axes to mesh axes; a dimension that the mesh axis does not
  divide, or a mesh axis already used by an earlier dimension, is replicated."""
  used, spec = set(), []
  for logical, size in zip(logical_axes, shape):
    axis = None if logical is None else rules.get(logical, logical)
    if axis is not None and axis not in mesh.shape:
      raise ValueError(f"{where}: logical axis {logical!r} maps to {axis!r}, "
                       f"which is not a mesh axis {tuple(mesh.axis_names)}; "
                       "add a logical_axis_rules entry for it")
    if axis is not None and (axis in used or size % mesh.shape[axis]):
      axis = None
    if axis is not None:
      used.add(axis)
    spec.append(axis)
  return jax.P(*spec)


def param_shardings(abstract_params: Any, mesh: jax.sharding.Mesh,
                    rules: Rules) -> Any:
  """NamedShardings for an (abstract) nnx.State of parameters.

  The result has the structure of `abstract_params` (each Variable holds a
  NamedSharding), so it serves as jit in/out shardings directly. Each
  parameter's logical axes come from its `out_sharding` metadata; a parameter
  without it is replicated.
  """
  rules = dict(rules)

  def sharding(path, variable):
    value = variable.get_value()
    axes = variable.get_metadata().get("out_sharding") or (None,) * value.ndim
    where = "/".join(str(getattr(k, "key", k)) for k in path)
    return variable.replace(jax.NamedSharding(
        mesh, _spec_for(axes, value.shape, mesh, rules, where)))

  return jax.tree.map_with_path(
      sharding, abstract_params,
      is_leaf=lambda x: isinstance(x, nnx.Variable))


def batch_sharding(mesh: jax.sharding.Mesh, rules: Rules) -> jax.NamedSharding:
  """Leading (example) axis over the batch mesh axis; the rest replicated."""
  return jax.NamedSharding(mesh, jax.P(mesh_axis(rules, BATCH_AXIS)))


def replicated(mesh: jax.sharding.Mesh) -> jax.NamedSharding:
  return jax.NamedSharding(mesh, jax.P())


def batch_multiple(mesh: jax.sharding.Mesh, rules: Rules) -> int:
  """Every global batch size must be a multiple of this."""
  axis = mesh_axis(rules, BATCH_AXIS)
  return 1 if axis is None else mesh.shape[axis]


def put_batch(batch: Mapping[str, np.ndarray],
              sharding: jax.NamedSharding) -> dict[str, jax.Array]:
  """Host arrays (this process's rows) → global arrays sharded by example.

  Every process passes an equal share: the global batch has
  `rows × process_count` rows (the input pipeline is the product's path;
  this serves single batches, e.g. benchmarks and AOT checks).
  """
  out = {}
  for name, array in batch.items():
    array = np.asarray(array)
    shape = (len(array) * jax.process_count(),) + array.shape[1:]
    out[name] = jax.make_array_from_process_local_data(sharding, array, shape)
  return out
