"""Orbax checkpoints of a training run: state, config and data position.

One checkpoint per saved step, written asynchronously, the newest
`max_to_keep` kept. Each holds three items:

  state  the TrainState (params, optimizer state, step, RNG key), sharded
  config the run's configuration as JSON
  data   the data position (an int or a small JSON dict)

Orbax writes each checkpoint to a temporary directory and renames it when
complete, so a process killed mid-save leaves the previous checkpoints intact
and `latest_step` never points at a partial one.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp

from best_jax.train.state import TrainState

STATE, CONFIG, DATA = "state", "config", "data"


class Checkpointer:
  """A thin wrapper around `ocp.CheckpointManager` for TrainStates."""

  def __init__(self, directory: str | os.PathLike, *, max_to_keep: int = 3,
               async_save: bool = True):
    self.directory = os.path.abspath(os.fspath(directory))
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=True,
        enable_async_checkpointing=async_save)
    self._manager = ocp.CheckpointManager(
        self.directory, options=options, item_names=(STATE, CONFIG, DATA))

  def latest_step(self) -> int | None:
    """The newest complete checkpoint's step, or None."""
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def reached_preemption(self, step: int) -> bool:
    """True when the cluster asks every host to save and stop at `step`."""
    return self._manager.reached_preemption(step)

  def save(self, step: int, state: TrainState, *, config: dict[str, Any],
           data_position: Any) -> None:
    """Starts saving `state` as checkpoint `step` (returns before it is
    written; device arrays are copied first, so `state` may be donated)."""
    self._manager.save(
        step,
        args=ocp.args.Composite(**{
            STATE: ocp.args.StandardSave(state),
            CONFIG: ocp.args.JsonSave(config),
            DATA: ocp.args.JsonSave({"position": data_position}),
        }),
        force=True)

  def restore(self, abstract_state: TrainState, step: int | None = None,
              ) -> tuple[TrainState, dict[str, Any], Any]:
    """(state, config, data position) of checkpoint `step` (default newest).

    `abstract_state` gives shapes, dtypes and shardings: every array is read
    directly into its shards.
    """
    if step is None:
      step = self.latest_step()
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}")
    restored = self._manager.restore(
        step,
        args=ocp.args.Composite(**{
            STATE: ocp.args.StandardRestore(abstract_state),
            CONFIG: ocp.args.JsonRestore(),
            DATA: ocp.args.JsonRestore(),
        }))
    return restored[STATE], restored[CONFIG], restored[DATA]["position"]

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


def abstract_like(state: TrainState) -> TrainState:
  """ShapeDtypeStructs (with shardings) of a concrete state."""
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
      state)
