"""BeST's training iterations (SPEC §1; Kim et al., CIKM 2021).

- Iteration 1 (`joint_train_step`): θ⁽⁰⁾ and θ⁽¹⁾ both start from the
  pretrained encoder. One jitted step scores the ≤ k_train leading segments of
  every document with θ⁽⁰⁾, trains θ⁽⁰⁾ on all of them (Eq.3: segment j of the
  positive against segment j of each negative, padded segments masked out),
  takes θ⁽⁰⁾'s stop-gradient argmax segment of every document (dropout off)
  and trains θ⁽¹⁾ on those (Eq.2). The loss is the sum of the two means.
- Iteration n+1 (`experiment`): the frozen θ⁽ⁿ⁾ selects a segment for every
  training (query, document) pair; a *fresh* θ⁽ⁿ⁺¹⁾ from the pretrained
  weights trains on the selected segments with the plain train step.
- Every iteration is a whole training run with early stopping and model
  selection on dev MRR (`run_iteration`); iterating stops when an iteration's
  best dev MRR does not improve on the previous one (`should_continue`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

from best_jax.data.files import atomic_write
from best_jax.select.selection import masked_argmax
from best_jax.train import losses as losses_lib
from best_jax.train import steps as steps_lib
from best_jax.train.state import TrainState

PAIRINGS = ("same", "random")


# ------------------------------------------------------- joint iteration-1 step

def _eq3_scores(scores_bgs: jax.Array, mask_bgs: jax.Array, pairing: str,
                key: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Groups `[B, S, G]` for Eq.3: segment j of the positive with segment j
  (`same`) or a random valid segment (`random`) of each negative."""
  scores_bsg = jnp.swapaxes(scores_bgs, 1, 2)
  mask_bsg = jnp.swapaxes(mask_bgs, 1, 2)
  if pairing == "same":
    return scores_bsg, mask_bsg
  count_bg = jnp.sum(mask_bgs, axis=-1)
  uniform_bgs = jax.random.uniform(key, scores_bgs.shape)
  pick_bgs = jnp.minimum((uniform_bgs * count_bg[..., None]).astype(jnp.int32),
                         jnp.maximum(count_bg[..., None] - 1, 0))
  random_bgs = jnp.take_along_axis(scores_bgs, pick_bgs, axis=-1)
  is_positive_g = jnp.arange(scores_bgs.shape[1]) == 0
  mixed_bgs = jnp.where(is_positive_g[None, :, None], scores_bgs, random_bgs)
  valid_bgs = jnp.where(is_positive_g[None, :, None], mask_bgs,
                        (count_bg > 0)[..., None])
  return jnp.swapaxes(mixed_bgs, 1, 2), jnp.swapaxes(valid_bgs, 1, 2)


def _apply(state: TrainState, loss: jax.Array, grads: Any,
           tx: optax.GradientTransformation) -> tuple[TrainState, jax.Array]:
  """One guarded update, as in `steps.train_step`: a non-finite loss or
  gradient leaves the state unchanged and records the step."""
  grad_norm = optax.global_norm(grads)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  apply = finite & (state.nonfinite_step < 0)
  keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(apply, n, o),
                                       new, old)
  nonfinite = jnp.where((state.nonfinite_step < 0) & ~finite, state.step,
                        state.nonfinite_step)
  return state.replace(step=jnp.where(apply, state.step + 1, state.step),
                       params=keep(params, state.params),
                       opt_state=keep(opt_state, state.opt_state),
                       nonfinite_step=nonfinite), grad_norm


def joint_train_step(state0: TrainState, state1: TrainState,
                     batch: dict[str, jax.Array], *, graphdef: nnx.GraphDef,
                     tx: optax.GradientTransformation,
                     schedule: optax.Schedule, loss_fn: losses_lib.LossFn,
                     pairing: str = "same", select_with_dropout: bool = False
                     ) -> tuple[TrainState, TrainState, dict[str, jax.Array]]:
  """BeST iteration 1: updates θ⁽⁰⁾ (Eq.3) and θ⁽¹⁾ (Eq.2) in one step.

  Args:
    state0: θ⁽⁰⁾, trained on all leading segments.
    state1: θ⁽¹⁾, trained on θ⁽⁰⁾'s argmax segments.
    batch: `input_ids`, `attention_mask`, `token_type_ids` `[B, G, S, L]`,
      `labels` `[B, G]` (positive first), `mask` `[B, G, S]` (real segments),
      `example_mask` `[B]`.
    graphdef, tx, schedule, loss_fn: as in `steps.train_step` (both models
      share the architecture and the optimizer).
    pairing: Eq.3's negative segment: `same` index or a `random` valid one.
    select_with_dropout: select with θ⁽⁰⁾'s training forward pass (cheaper)
      instead of a separate dropout-free one (default).

  Returns:
    (state0, state1, metrics): `loss0`, `loss1`, `grad_norm0/1`,
    `learning_rate`, and `selected` `[B, G]` (θ⁽⁰⁾'s argmax segments).
  """
  key0 = jax.random.fold_in(state0.root_key(), state0.step)
  key1 = jax.random.fold_in(state1.root_key(), state1.step)
  inputs = tuple(batch[name] for name in steps_lib.MODEL_INPUTS)
  mask_bgs = batch["mask"]
  labels_bg = batch["labels"]
  example_b = batch["example_mask"]
  doc_valid_bg = jnp.any(mask_bgs, axis=-1)

  if not select_with_dropout:
    frozen = nnx.merge(graphdef, state0.params)
    selection_scores = jax.lax.stop_gradient(frozen(*inputs))
    selected_bg, _ = masked_argmax(selection_scores, mask_bgs)

  def loss(params0, params1):
    model0 = nnx.merge(graphdef, params0)
    scores0_bgs = model0(*inputs, rngs=nnx.Rngs(dropout=key0))
    scores_bsg, where_bsg = _eq3_scores(
        scores0_bgs, mask_bgs, pairing, jax.random.fold_in(key0, 1))
    labels_bsg = jnp.broadcast_to(labels_bg[:, None, :], scores_bsg.shape)
    group0 = loss_fn(scores_bsg, labels_bsg, where=where_bsg)
    sum0, count0 = losses_lib.masked_sum(
        group0.loss, group0.valid & example_b[:, None])
    if select_with_dropout:
      selected, _ = masked_argmax(jax.lax.stop_gradient(scores0_bgs),
                                  mask_bgs)
    else:
      selected = selected_bg
    index = selected[..., None, None]
    chosen = [jnp.take_along_axis(x, index, axis=2)[:, :, 0] for x in inputs]
    model1 = nnx.merge(graphdef, params1)
    scores1_bg = model1(*chosen, rngs=nnx.Rngs(dropout=key1))
    group1 = loss_fn(scores1_bg, labels_bg, where=doc_valid_bg)
    sum1, count1 = losses_lib.masked_sum(group1.loss,
                                         group1.valid & example_b)
    loss0 = sum0 / jnp.maximum(count0, 1.0)
    loss1 = sum1 / jnp.maximum(count1, 1.0)
    return loss0 + loss1, (loss0, loss1, selected)

  grad_fn = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)
  (_, (loss0, loss1, selected)), (grads0, grads1) = grad_fn(state0.params,
                                                           state1.params)
  learning_rate = jnp.asarray(schedule(state0.step), jnp.float32)
  state0, norm0 = _apply(state0, loss0, grads0, tx)
  state1, norm1 = _apply(state1, loss1, grads1, tx)
  metrics = {"loss": loss0 + loss1, "loss0": loss0, "loss1": loss1,
             "grad_norm0": norm0, "grad_norm1": norm1,
             "learning_rate": learning_rate,
             "selected": jnp.where(doc_valid_bg, selected, -1)}
  return state0, state1, metrics


def build_joint_step(trainer, loss_name: str, pairing: str = "same",
                     select_with_dropout: bool = False) -> Callable:
  """Jits `joint_train_step` once with the trainer's shardings (donated)."""
  if pairing not in PAIRINGS:
    raise ValueError(f"pairing must be one of {PAIRINGS}, not {pairing!r}")
  step = functools.partial(
      joint_train_step, graphdef=trainer.graphdef, tx=trainer.tx,
      schedule=trainer.schedule, loss_fn=losses_lib.get_loss(loss_name),
      pairing=pairing, select_with_dropout=select_with_dropout)
  shardings = trainer.state_shardings
  replicated = jax.NamedSharding(trainer.mesh, jax.P())
  with jax.set_mesh(trainer.mesh):
    jitted = jax.jit(step,
                     in_shardings=(shardings, shardings,
                                   trainer.batch_sharding),
                     out_shardings=(shardings, shardings, replicated),
                     donate_argnums=(0, 1))

  def call(state0, state1, batch):
    with jax.set_mesh(trainer.mesh):
      return jitted(state0, state1, batch)
  return call


# ------------------------------------------------ one iteration, early stopped

@dataclasses.dataclass
class IterationResult:
  """What an iteration leaves, per dev aggregation (e.g. `first`, `max`):
  the best params (host arrays), their step and dev MRR; and its history."""
  name: str
  best_params: dict[str, Any]
  best_step: dict[str, int]
  best_dev: dict[str, float]
  history: list[dict[str, float]]
  final_params: tuple[Any, ...] = ()
  selected_positions: list[int] = dataclasses.field(default_factory=list)

  def summary(self) -> dict[str, Any]:
    return {"name": self.name, "best_step": self.best_step,
            "best_dev": self.best_dev, "history": self.history,
            "selected_positions": self.selected_positions}


def to_host(tree: Any) -> Any:
  """A host (numpy) copy of a device pytree, e.g. the best params so far."""
  return jax.tree.map(np.asarray, jax.device_get(tree))


def run_iteration(name: str, states: tuple[TrainState, ...],
                  step_fn: Callable, batch_fn: Callable[[int], Any], *,
                  num_steps: int,
                  evaluate: Callable[[Any], dict[str, float]],
                  eval_every: int, patience: int, log_every: int = 10,
                  checkpoint: Any = None, log: Callable[[str], None] = print
                  ) -> IterationResult:
  """Trains until `num_steps` or until dev MRR stops improving.

  Args:
    name: shown in logs and progress bars.
    states: one TrainState (plain step) or two (θ⁽⁰⁾, θ⁽¹⁾: joint step); the
      last one is the model evaluated and selected.
    step_fn: `(*states, device batch) -> (*states, metrics)`.
    batch_fn: `step -> device batch` (deterministic in the step, so a resumed
      run sees the same data).
    num_steps: most updates.
    evaluate: `host params -> {key: dev MRR}`; the best params are kept per
      key (e.g. FirstP and MaxP aggregation of the same training run).
    eval_every: updates between dev evaluations (and checkpoints).
    patience: evaluations in a row where no key improved before stopping
      (0: never stop early).
    log_every: updates between loss records in the history.
    checkpoint: an `IterationCheckpoint`, or None (no resume).
    log: where log lines go.
  """
  history: list[dict[str, float]] = []
  best: dict[str, tuple[float, int, Any]] = {}
  start, since_best, positions = 0, 0, []
  if checkpoint is not None:
    restored = checkpoint.restore(states)
    if restored is not None:
      states, extra = restored
      start = extra["step"]
      history, since_best = extra["history"], extra["since_best"]
      positions = extra.get("positions", [])
      params = checkpoint.best_params()
      best = {k: (extra["best_dev"][k], extra["best_step"][k], params[k])
              for k in extra["best_dev"]}
      log(f"{name}: resumed at step {start} (best dev "
          f"{ {k: round(v[0], 4) for k, v in best.items()} })")
  stopped = since_best >= patience > 0
  bar = tqdm(total=num_steps, initial=start, desc=name, unit="step",
             mininterval=2.0)
  step = start
  pending = []
  while step < num_steps and not stopped:
    *states, metrics = step_fn(*states, batch_fn(step))
    states = tuple(states)
    step += 1
    bar.update(1)
    if "selected" in metrics:
      pending.append(metrics.pop("selected"))
    if step % log_every == 0 or step == num_steps:
      values = {k: float(v) for k, v in jax.device_get(metrics).items()}
      bar.set_postfix(loss=f"{values['loss']:.4f}")
      history.append({"step": step, **values})
    if step % eval_every == 0 or step == num_steps:
      for selected in jax.device_get(pending):
        positions.extend(int(x) for x in np.asarray(selected).ravel()
                         if x >= 0)
      pending = []
      params = to_host(states[-1].params)
      devs = {k: float(v) for k, v in evaluate(params).items()}
      history.append({"step": step, **{f"dev_mrr_{k}": v
                                       for k, v in devs.items()}})
      log(f"{name}: step {step} dev MRR@10 "
          + ", ".join(f"{k} {v:.4f}" for k, v in devs.items()))
      improved = False
      for key, dev in devs.items():
        if key not in best or dev > best[key][0]:
          best[key] = (dev, step, params)
          improved = True
      since_best = 0 if improved else since_best + 1
      stopped = since_best >= patience > 0
      if checkpoint is not None:
        checkpoint.save(step, states,
                        best_params={k: v[2] for k, v in best.items()},
                        extra={"step": step, "history": history,
                               "since_best": since_best,
                               "best_dev": {k: v[0] for k, v in best.items()},
                               "best_step": {k: v[1] for k, v in best.items()},
                               "positions": positions})
  bar.close()
  if stopped:
    log(f"{name}: early stop at step {step}")
  return IterationResult(
      name, {k: v[2] for k, v in best.items()},
      {k: v[1] for k, v in best.items()}, {k: v[0] for k, v in best.items()},
      history, tuple(to_host(s.params) for s in states), positions)


def should_continue(dev_by_iteration: Sequence[float]) -> bool:
  """Iterate again only while the last iteration improved dev MRR."""
  return len(dev_by_iteration) < 2 or dev_by_iteration[-1] > max(
      dev_by_iteration[:-1])


def write_summary(results: Sequence[IterationResult], path: str) -> None:
  with atomic_write(path) as f:
    json.dump([r.summary() for r in results], f, indent=1)
    f.write("\n")
