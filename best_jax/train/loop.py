"""The one training loop: steps, logs, dev evaluation with model selection
and early stopping, checkpoints, preemption and non-finite stops.

Every regime of `best_jax train` (FirstP/MaxP, MaxP-all, GoldP, BeST's joint
iteration-1 step, BeST iterations ≥ 2, QDS) trains through `fit`:

- `step_fn(state, batch) -> (state, metrics)` is a jitted step; `state` is
  any pytree of `TrainState`s (one, or BeST's (θ⁽⁰⁾, θ⁽¹⁾)); the last one is
  the model that is evaluated and selected.
- Batches come from an `InputPipeline` whose position is checkpointed.
- The host reads device values only every `log_every` steps and at
  evaluations (no sync per step); it then checks that no step produced a
  non-finite loss: `NonFiniteLoss` names the run and the step, and since the
  check runs before every save, the newest checkpoint is the last good one.
- Every `eval_every` steps the model is scored on dev (`evaluate`), the best
  parameters per dev key are kept on the devices, and after `patience`
  evaluations without improvement training stops early.
- A checkpoint (state, best params, record, data position) is saved at every
  evaluation, every `checkpoint_every` steps, and when asked to stop (SIGTERM
  on any process, or orbax's preemption sync point): then `Preempted` is
  raised after the save, and rerunning resumes exactly there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from tqdm.auto import tqdm

from best_jax.errors import TrainingStopped
from best_jax.train.checkpoint import Checkpointer, abstract
from best_jax.train.state import TrainState

Evaluate = Callable[[Any], dict[str, float]]


class NonFiniteLoss(TrainingStopped):
  """A step's loss or gradient was NaN/inf; training stopped."""

  def __init__(self, name: str, step: int, last_checkpoint: int | None):
    where = ("no checkpoint was saved" if last_checkpoint is None else
             f"the last good checkpoint is step {last_checkpoint}")
    super().__init__(f"{name}: training step {step} produced a non-finite "
                     "loss or gradient (nan/inf); stopped without applying "
                     f"or saving it; {where}")


class Preempted(TrainingStopped):
  """Asked to stop (SIGTERM or preemption); saved, resumable."""
  exit_status = 143  # 128 + SIGTERM, as a terminated process reports

  def __init__(self, name: str, step: int):
    super().__init__(f"{name}: asked to stop; saved at step {step}; rerun "
                     "the same command to resume")


@dataclasses.dataclass
class FitResult:
  """The best parameters (device arrays) per dev key, their step and dev
  score; the loss/dev history; the final state; the joint step's selected
  segment positions."""
  best_params: dict[str, Any]
  best_step: dict[str, int]
  best_dev: dict[str, float]
  history: list[dict[str, float]]
  state: Any
  positions: list[int]


def model_params(state: Any) -> Any:
  """The evaluated model's parameters: the last TrainState's."""
  states = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, TrainState))
  return states[-1].params


def _nonfinite_step(state: Any) -> jax.Array:
  states = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, TrainState))
  return max(s.nonfinite_step for s in states)


class _StopFlag:
  """SIGTERM → a flag (main thread only); `asked()` agrees across hosts."""

  def __init__(self):
    self.raised = False

  @contextlib.contextmanager
  def installed(self) -> Iterator[_StopFlag]:
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

  def asked(self) -> bool:
    if jax.process_count() == 1:
      return self.raised
    flags = multihost_utils.process_allgather(np.array([self.raised]))
    return bool(np.any(flags))


def fit(name: str, state: Any, step_fn: Callable, batches, *, num_steps: int,
        evaluate: Evaluate, eval_every: int, patience: int = 0,
        log_every: int = 10, checkpoint_every: int = 0,
        checkpointer: Checkpointer | None = None,
        log: Callable[[str], None] = print) -> FitResult:
  """Trains `state` for `num_steps` steps (fewer if stopped early).

  Args:
    name: the run's name in logs, progress bars and errors.
    state: initial state (ignored when `checkpointer` has a checkpoint).
    step_fn: `(state, batch) -> (state, metrics)`; a `selected` metric
      (`[B, G]` segment indices, -1 for none) is collected as positions.
    batches: an `InputPipeline` (iterator with `get_state`/`set_state`).
    num_steps: total number of steps of the run (also when resuming).
    evaluate: `device params -> {key: dev score}` (higher is better); the
      best parameters are kept per key (e.g. FirstP and MaxP aggregation).
    eval_every: steps between evaluations (and the last step).
    patience: evaluations without improvement before stopping (0: never).
    log_every: steps between history entries (mean metrics).
    checkpoint_every: extra saves every this many steps (0: none).
    checkpointer: where to resume from and save to (None: no checkpoints).
    log: receives log lines.

  Raises:
    NonFiniteLoss: a step's loss or gradient was not finite.
    Preempted: asked to stop; the state was saved first.
  """
  history: list[dict[str, float]] = []
  best: dict[str, tuple[float, int, Any]] = {}
  since_best, positions, step, last_saved = 0, [], 0, None
  pending: list[dict[str, Any]] = []  # metrics since the last history entry
  if checkpointer is not None and checkpointer.latest_step() is not None:
    keys = checkpointer.record()["best_dev"]
    like = abstract(model_params(state))
    state, best_params, record, position = checkpointer.restore(
        abstract(state), {k: like for k in keys})
    step = last_saved = record["step"]
    history, since_best = record["history"], record["since_best"]
    positions = record["positions"]
    # Exact as floats, and averaged in float64 below: the next entry's
    # mean is the uninterrupted run's whatever the metrics' dtypes.
    pending = record.get("pending", [])
    best = {k: (record["best_dev"][k], record["best_step"][k],
                best_params[k]) for k in keys}
    if step < num_steps:
      batches.set_state(position)
    log(f"{name}: resumed at step {step} (best dev "
        f"{ {k: round(v[0], 4) for k, v in best.items()} })")
  stopped = since_best >= patience > 0
  selected = []

  def save():
    nonlocal last_saved
    if checkpointer is not None and last_saved != step:
      checkpointer.save(step, state=state,
                        best={k: v[2] for k, v in best.items()},
                        record={"step": step, "history": history,
                                "since_best": since_best,
                                "best_dev": {k: v[0] for k, v in best.items()},
                                "best_step": {k: v[1] for k, v in best.items()},
                                "positions": positions,
                                "pending": [{k: float(v) for k, v in m.items()}
                                            for m in jax.device_get(pending)]},
                        data=batches.get_state())
      last_saved = step

  with tqdm(total=num_steps, initial=step, desc=name, unit="step",
            mininterval=2.0, disable=jax.process_index() != 0) as bar, \
       _StopFlag().installed() as stop_flag:
    while step < num_steps and not stopped:
      state, metrics = step_fn(state, next(batches))
      step += 1
      bar.update(1)
      if "selected" in metrics:
        selected.append(metrics.pop("selected"))
      pending.append(metrics)
      at_log = step % log_every == 0 or step == num_steps
      at_eval = step % eval_every == 0 or step == num_steps
      at_save = at_eval or (checkpoint_every and step % checkpoint_every == 0)
      # One host sync at logs and saves; a single process also notices a
      # SIGTERM at once (several must agree, which needs a collective).
      if not (at_log or at_save or (stop_flag.raised and
                                    jax.process_count() == 1)):
        continue
      bad, chosen = jax.device_get((_nonfinite_step(state), selected))
      if int(bad) >= 0:
        raise NonFiniteLoss(name, int(bad) + 1, last_saved)
      positions.extend(int(x) for s in chosen for x in np.ravel(s) if x >= 0)
      selected = []
      if at_log:
        values = jax.device_get(pending)
        # A step resumed from a checkpoint may lack a metric that the steps
        # after it report (e.g. `unpadded`): each is averaged where present.
        names = dict.fromkeys(k for v in values for k in v)
        entry = {k: float(np.mean([v[k] for v in values if k in v],
                                  dtype=np.float64)) for k in names}
        history.append({"step": step, **entry})
        bar.set_postfix(loss=f"{entry['loss']:.4f}")
        pending = []
      if at_eval:
        params = model_params(state)
        devs = {k: float(v) for k, v in evaluate(params).items()}
        history.append({"step": step, **{f"dev_mrr_{k}": v
                                         for k, v in devs.items()}})
        log(f"{name}: step {step} dev MRR@10 "
            + ", ".join(f"{k} {v:.4f}" for k, v in devs.items()))
        improved = [k for k, v in devs.items() if k not in best
                    or v > best[k][0]]
        for key in improved:
          best[key] = (devs[key], step, jax.tree.map(lambda x: x.copy(),
                                                     params))
        since_best = 0 if improved else since_best + 1
        stopped = since_best >= patience > 0
      stop_now = stop_flag.asked() or (
          checkpointer is not None and checkpointer.reached_preemption(step))
      if at_save or stop_now:
        save()
      if stop_now and step < num_steps and not stopped:
        if checkpointer is not None:
          checkpointer.wait_until_finished()
        raise Preempted(name, step)
  if int(jax.device_get(_nonfinite_step(state))) >= 0:
    raise NonFiniteLoss(name, int(jax.device_get(_nonfinite_step(state))) + 1,
                        last_saved)
  if checkpointer is not None:
    checkpointer.wait_until_finished()
  if stopped:
    log(f"{name}: early stop at step {step}")
  return FitResult(
      best_params={k: v[2] for k, v in best.items()},
      best_step={k: v[1] for k, v in best.items()},
      best_dev={k: v[0] for k, v in best.items()},
      history=history, state=state, positions=positions)
