"""Saving and loading one trained truncation model (orbax + a JSON header)."""

from __future__ import annotations

import json
import os

import ml_collections
import orbax.checkpoint as ocp
from flax import nnx

from best_jax.data.files import atomic_write, read_text
from best_jax.errors import InputError
from best_jax.truncate import train

_HEADER = "truncation_model.json"


def save(path: str, model, config: ml_collections.ConfigDict,
         in_features: int, depth: int) -> None:
  """Writes the model's parameters and what is needed to rebuild it."""
  path = os.path.abspath(path)
  os.makedirs(path, exist_ok=True)
  _, state = nnx.split(model)
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(os.path.join(path, "state"), state, force=True)
    checkpointer.wait_until_finished()
  with atomic_write(os.path.join(path, _HEADER)) as f:
    json.dump({"config": config.to_dict(), "in_features": in_features,
               "depth": depth}, f, indent=1)


def load(path: str):
  """Returns (model, config) saved by `save`."""
  path = os.path.abspath(path)
  header_path = os.path.join(path, _HEADER)
  if not os.path.exists(header_path):
    raise InputError(f"not a truncation model directory (no {_HEADER})", path)
  header = json.loads(read_text(header_path))
  config = ml_collections.ConfigDict(header["config"])
  abstract = nnx.eval_shape(lambda: train.new_model(
      config, header["in_features"], header["depth"]))
  graphdef, abstract_state = nnx.split(abstract)
  with ocp.StandardCheckpointer() as checkpointer:
    state = checkpointer.restore(os.path.join(path, "state"), abstract_state)
  return nnx.merge(graphdef, state), config, header
