"""Resumable checkpoints of one training iteration (orbax, synchronous).

Saved at every dev evaluation: the train state(s) (params, optimizer state,
step, RNG), the best params so far (host arrays, for model selection) and a
JSON record of the loop (data position = step, history, early-stopping
counters). A killed run restarts from the latest save and, because batches are
a pure function of the step, sees the same data as an uninterrupted run.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp


def _abstract(tree: Any) -> Any:
  return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


class IterationCheckpoint:
  """Orbax manager over `directory` keeping the `max_to_keep` latest saves."""

  def __init__(self, directory: str | os.PathLike, max_to_keep: int = 1):
    self.directory = os.path.abspath(os.fspath(directory))
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                             create=True))
    self._best = None

  def save(self, step: int, states: tuple[Any, ...], *, best_params: Any,
           extra: dict[str, Any]) -> None:
    """Saves and waits, so a kill after it returns loses nothing."""
    self._manager.save(step, args=ocp.args.Composite(
        states=ocp.args.StandardSave(tuple(states)),
        best=ocp.args.StandardSave(best_params),
        extra=ocp.args.JsonSave(extra)))
    self._manager.wait_until_finished()

  def restore(self, like_states: tuple[Any, ...]
              ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """(states, extra) of the latest save, shaped and sharded like
    `like_states`, or None when nothing was saved."""
    step = self._manager.latest_step()
    if step is None:
      return None
    extra = self._manager.restore(step, args=ocp.args.Composite(
        extra=ocp.args.JsonRestore()))["extra"]
    like_params = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
        like_states[-1].params)
    like_best = {key: like_params for key in extra["best_dev"]}
    restored = self._manager.restore(step, args=ocp.args.Composite(
        states=ocp.args.StandardRestore(_abstract(tuple(like_states))),
        best=ocp.args.StandardRestore(like_best),
        extra=ocp.args.JsonRestore()))
    self._best = jax.tree.map(lambda x: jax.device_get(x), restored["best"])
    return tuple(restored["states"]), dict(restored["extra"])

  def best_params(self) -> Any:
    return self._best

  def close(self) -> None:
    self._manager.close()


def save_params(path: str | os.PathLike, params: Any) -> None:
  """Saves a (host or device) params tree to a new directory `path`."""
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(os.path.abspath(os.fspath(path)), params, force=True)
  checkpointer.wait_until_finished()


def load_params(path: str | os.PathLike, like: Any) -> Any:
  """Restores a params tree saved by `save_params`, as host arrays."""
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                          like)
  restored = ocp.StandardCheckpointer().restore(
      os.path.abspath(os.fspath(path)), abstract)
  return jax.tree.map(lambda x: jax.device_get(x), restored)
