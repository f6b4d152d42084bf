"""A small training loop: steps, periodic logs and checkpoints, resume.

`fit` resumes from the newest checkpoint in its checkpointer (state and data
position), runs train steps up to `num_steps`, logs mean metrics every
`log_every` steps (one host transfer per log, none per step), saves every
`checkpoint_every` steps and at the end, and on preemption (orbax's sync
point, or SIGTERM on a single host) saves and returns early.

A non-finite loss or gradient stops training with `NonFiniteLossError` naming
the step. The train step refuses to apply that update (and every later one),
and the loop checks before each save, so the bad state is never saved and the
newest checkpoint stays the last good one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import signal
import threading
from typing import Any, Callable, Iterator, Mapping, Protocol

import jax
import numpy as np
import tqdm

from best_jax.errors import TrainingStopped
from best_jax.train.checkpoint import Checkpointer
from best_jax.train.state import TrainState
from best_jax.train.trainer import Trainer

logger = logging.getLogger(__name__)

HostBatch = Mapping[str, np.ndarray]


class NonFiniteLossError(TrainingStopped):
  """The loss or gradient became NaN/inf; training stopped."""

  def __init__(self, step: int, last_checkpoint: int | None,
               directory: str | None):
    self.step = step
    self.last_checkpoint = last_checkpoint
    where = ("no checkpoint was saved" if last_checkpoint is None else
             f"the latest checkpoint is step {last_checkpoint} in "
             f"{directory}")
    super().__init__(
        f"training step {step} produced a non-finite loss or gradient "
        f"(nan/inf); training stopped without applying or saving it; {where}")


class BatchSource(Protocol):
  """An iterator of host batches whose position can be saved and restored."""

  def __next__(self) -> HostBatch: ...

  def get_state(self) -> Any:
    """A JSON-serialisable position (an int or a small dict)."""

  def set_state(self, state: Any) -> None: ...


class IndexedBatches:
  """Batch `i` is `batch_fn(i)`; the position is the next index."""

  def __init__(self, batch_fn: Callable[[int], HostBatch], position: int = 0):
    self._batch_fn = batch_fn
    self.position = position

  def __iter__(self) -> Iterator[HostBatch]:
    return self

  def __next__(self) -> HostBatch:
    batch = self._batch_fn(self.position)
    self.position += 1
    return batch

  def get_state(self) -> int:
    return self.position

  def set_state(self, state: int) -> None:
    self.position = int(state)


@dataclasses.dataclass
class FitResult:
  state: TrainState
  start_step: int  # The step resumed from (0 for a fresh start).
  step: int
  preempted: bool
  history: list[dict[str, float]]  # One entry per log: step and mean metrics.


class _SigtermFlag:
  """Turns SIGTERM into a flag while training (main thread only)."""

  def __init__(self):
    self.raised = False

  @contextlib.contextmanager
  def installed(self):
    if threading.current_thread() is not threading.main_thread():
      yield self
      return
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum, frame):
      del signum, frame
      self.raised = True
    signal.signal(signal.SIGTERM, handler)
    try:
      yield self
    finally:
      signal.signal(signal.SIGTERM, previous)


def _mean_metrics(pending: list[dict[str, jax.Array]]) -> dict[str, float]:
  host = jax.device_get(pending)
  return {name: float(np.mean([m[name] for m in host])) for name in host[0]}


def fit(trainer: Trainer, batches: BatchSource, *, num_steps: int,
        config: Mapping[str, Any], seed: int = 0,
        checkpointer: Checkpointer | None = None, checkpoint_every: int = 0,
        log_every: int = 10, log_fn: Callable[[dict[str, float]], None]
        | None = None, progress: bool = False,
        stop_after: int | None = None) -> FitResult:
  """Trains until `num_steps` updates have been applied.

  Args:
    trainer: from `build_trainer`.
    batches: host batches; its position is saved with each checkpoint.
    num_steps: total number of updates of the run (also when resuming).
    config: the run's configuration (JSON-able), saved with checkpoints.
    seed: initialises parameters and dropout when there is no checkpoint.
    checkpointer: resume from and save to it; None trains without.
    checkpoint_every: save every this many steps (0: only at the end).
    log_every: log mean metrics every this many steps.
    log_fn: receives each log entry (default: the `logging` module).
    progress: show a tqdm progress bar.
    stop_after: return (after saving) once this step is reached, as if
      preempted; for tests and time-limited jobs.

  Returns:
    The final state and step, whether training stopped early, and the logs.

  Raises:
    NonFiniteLossError: when a step's loss or gradient is not finite.
  """
  if hasattr(config, "to_dict"):  # An ml_collections.ConfigDict.
    config = config.to_dict()
  config = json.loads(json.dumps(dict(config)))  # As it reads back.
  state, step = None, 0
  last_saved = None
  if checkpointer is not None and checkpointer.latest_step() is not None:
    state, saved_config, position = checkpointer.restore(
        trainer.abstract_state)
    batches.set_state(position)
    step = last_saved = checkpointer.latest_step()
    if saved_config != config:
      logger.warning("resuming from %s with a configuration that differs "
                     "from the saved one", checkpointer.directory)
    logger.info("resumed from step %d in %s", step, checkpointer.directory)
  if state is None:
    state = trainer.init(seed)
  start_step = step
  log_fn = log_fn or (lambda entry: logger.info("%s", entry))

  def check_finite():
    bad = int(jax.device_get(state.nonfinite_step))
    if bad >= 0:
      if checkpointer is not None:
        checkpointer.wait_until_finished()
      raise NonFiniteLossError(
          bad + 1, last_saved,
          None if checkpointer is None else checkpointer.directory)

  def save():
    nonlocal last_saved
    check_finite()
    if checkpointer is not None and last_saved != step:
      checkpointer.save(step, state, config=config,
                        data_position=batches.get_state())
      last_saved = step

  history: list[dict[str, float]] = []
  pending: list[dict[str, jax.Array]] = []
  preempted = False
  with _SigtermFlag().installed() as sigterm, tqdm.tqdm(
      total=num_steps, initial=step, disable=not progress,
      desc="train") as bar:
    while step < num_steps:
      state, metrics = trainer.train_step(state, trainer.put(next(batches)))
      step += 1
      pending.append(metrics)
      bar.update(1)
      if step % log_every == 0 or step == num_steps:
        entry = {"step": step, **_mean_metrics(pending)}
        pending = []
        history.append(entry)
        log_fn(entry)
        check_finite()
      if ((checkpoint_every and step % checkpoint_every == 0)
          or step == num_steps):
        save()
      stop = (stop_after is not None and step >= stop_after) or sigterm.raised
      if checkpointer is not None:
        stop = stop or checkpointer.reached_preemption(step)
      if stop and step < num_steps:
        save()
        preempted = True
        break
  check_finite()
  if checkpointer is not None:
    checkpointer.wait_until_finished()
  return FitResult(state=state, start_step=start_step, step=step,
                   preempted=preempted,
                   history=history)
