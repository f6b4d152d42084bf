"""Orbax checkpoints: a training run's resumable state, and finished params.

`Checkpointer` keeps the newest `max_to_keep` checkpoints of one training
run, written asynchronously. Each holds four items:

  state   the TrainState pytree (one state, or BeST's (θ⁽⁰⁾, θ⁽¹⁾)), sharded
  best    the best parameters so far per dev key (model selection), sharded
  record  the loop's JSON record (history, best dev scores, patience, ...)
  data    the input pipeline's position

Orbax writes each checkpoint to a temporary directory and renames it when
complete, so a process killed mid-save leaves the previous checkpoints intact
and `latest_step` never points at a partial one. Restoring reads every array
directly into its shards (the abstract trees carry the shardings): parameters
never pass through one host. `save_params`/`load_params` do the same for the
finished parameters of a stage. Paths may be local or `gs://` URIs.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath

STATE, BEST, RECORD, DATA = "state", "best", "record", "data"

# Orbax splits each replicated array among its replicas, each writing a slice
# ("replica-parallel"); every slice is one eager device op (~0.6 ms on CPU).
# Below about a MiB per slice that costs more than it spreads: a tiny model's
# state on 8 devices took 1.4-1.7 s a save, mostly slicing, 0.54-0.75 s
# without. Larger arrays (a BERT-base embedding table: 11.7 MB per slice of
# 8) are still split.
MIN_REPLICA_SLICE_BYTES = 1 << 20


def _register_array_handler() -> None:
  """Orbax's default jax.Array handler, plus the minimum slice size."""
  default = ocp.type_handlers.get_type_handler(jax.Array)
  handler = ocp.type_handlers.ArrayHandler(
      min_slice_bytes_for_replica_parallel=MIN_REPLICA_SLICE_BYTES,
      # Per-process array metadata, checked when a save is finalised (no
      # public constructor for it in orbax 0.12).
      array_metadata_store=default._array_metadata_store)  # pylint: disable=protected-access
  absl = logging.getLogger("absl")  # orbax warns "overriding": we mean it.
  level = absl.level
  absl.setLevel(logging.ERROR)
  try:
    ocp.type_handlers.register_type_handler(jax.Array, handler, override=True)
  finally:
    absl.setLevel(level)


_register_array_handler()


def _path(directory: str | os.PathLike) -> epath.Path:
  directory = os.fspath(directory)
  return epath.Path(directory if "://" in directory
                    else os.path.abspath(directory))


def abstract(tree: Any) -> Any:
  """ShapeDtypeStructs (with shardings) of a tree of arrays."""
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                     sharding=getattr(x, "sharding", None)),
      tree)


class Checkpointer:
  """Async orbax checkpoints of one training run (see the module doc)."""

  def __init__(self, directory: str | os.PathLike, *, max_to_keep: int = 2,
               async_save: bool = True):
    self.directory = _path(directory)
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=True,
        enable_async_checkpointing=async_save)
    self._manager = ocp.CheckpointManager(
        self.directory, options=options,
        item_names=(STATE, BEST, RECORD, DATA))

  def latest_step(self) -> int | None:
    """The newest complete checkpoint's step, or None (same on every
    process: orbax reads it from the checkpoint directory)."""
    return self._manager.latest_step()

  def reached_preemption(self, step: int) -> bool:
    """True when the cluster asks every host to save and stop at `step`."""
    return self._manager.reached_preemption(step)

  def save(self, step: int, *, state: Any, best: Any,
           record: dict[str, Any], data: Any) -> None:
    """Starts saving (returns before it is written; device arrays are copied
    first, so `state` may be donated right after, and the JSON items are
    serialised now, so their lists may grow right after)."""
    record, data = json.loads(json.dumps(record)), json.loads(json.dumps(data))
    items = {STATE: ocp.args.StandardSave(state),
             RECORD: ocp.args.JsonSave(record),
             DATA: ocp.args.JsonSave({"position": data})}
    if best:  # Empty until the first evaluation.
      items[BEST] = ocp.args.StandardSave(best)
    self._manager.save(step, args=ocp.args.Composite(**items), force=True)

  def record(self, step: int | None = None) -> dict[str, Any]:
    """The JSON record of checkpoint `step` (default the newest)."""
    step = self.latest_step() if step is None else step
    return dict(self._manager.restore(step, args=ocp.args.Composite(**{
        RECORD: ocp.args.JsonRestore()}))[RECORD])

  def restore(self, abstract_state: Any, abstract_best: Any,
              step: int | None = None) -> tuple[Any, Any, dict, Any]:
    """(state, best, record, data position) of checkpoint `step` (default
    the newest), each array read into the sharding its abstract leaf has."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}")
    items = {STATE: ocp.args.StandardRestore(abstract_state),
             RECORD: ocp.args.JsonRestore(), DATA: ocp.args.JsonRestore()}
    if abstract_best:
      items[BEST] = ocp.args.StandardRestore(abstract_best)
    restored = self._manager.restore(step, args=ocp.args.Composite(**items))
    return (restored[STATE], restored[BEST] if abstract_best else {},
            dict(restored[RECORD]), restored[DATA]["position"])

  def wait_until_finished(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending saves and releases the manager."""
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()


def save_params(directory: str | os.PathLike, params: Any) -> None:
  """Saves a tree of (sharded) arrays to a new directory and waits."""
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(_path(directory), params, force=True)
    checkpointer.wait_until_finished()


def load_params(directory: str | os.PathLike, like: Any) -> Any:
  """Restores a tree saved by `save_params` into the shardings of `like`
  (ShapeDtypeStructs with shardings, or arrays)."""
  with ocp.StandardCheckpointer() as checkpointer:
    return checkpointer.restore(_path(directory), abstract(like))
