"""BeST's joint iteration-1 step (SPEC §1; Kim et al., CIKM 2021).

θ⁽⁰⁾ and θ⁽¹⁾ both start from the pretrained encoder. One jitted step scores
every training segment of every document with θ⁽⁰⁾, trains θ⁽⁰⁾ on all of
them (Eq.3: segment j of the positive against segment j of each negative,
padded segments masked out), takes θ⁽⁰⁾'s stop-gradient argmax segment of
every document (dropout off) and trains θ⁽¹⁾ on those (Eq.2). The loss is
the sum of the two means; each model gets its own guarded update. Later
iterations (a frozen θ⁽ⁿ⁾ selects, a fresh θ⁽ⁿ⁺¹⁾ trains with the plain
step) and early stopping are the experiment's (`experiment.stages`).

With `in_batch_negatives` (a bi-encoder), θ⁽¹⁾'s loss is the plain step's:
the batch's other selected segments are negatives too, so BeST-1 trains
under the objective of every other regime; θ⁽⁰⁾'s Eq.3 groups stay each
query's own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from best_jax.models.unpadding import TokenBudget
from best_jax.train import losses as losses_lib
from best_jax.train import steps as steps_lib
from best_jax.train import token_budget
from best_jax.train.state import TrainState

PAIRINGS = ("same", "random")


def masked_argmax(scores_xs: jax.Array, mask_xs: jax.Array
                  ) -> tuple[jax.Array, jax.Array]:
  """Best valid segment per row: `(index_x, valid_x)`.

  Ties go to the earlier segment. A row without any valid segment gets index
  0 and `valid = False` (never NaN, never an index that points at padding of
  a row that has real segments).
  """
  masked = jnp.where(mask_xs, scores_xs.astype(jnp.float32), -jnp.inf)
  valid_x = jnp.any(mask_xs, axis=-1)
  index_x = jnp.where(valid_x, jnp.argmax(masked, axis=-1), 0)
  return index_x.astype(jnp.int32), valid_x


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


def joint_train_step(states: tuple[TrainState, TrainState],
                     batch: dict[str, jax.Array],
                     budget: TokenBudget | None = None,
                     *, graphdef: nnx.GraphDef,
                     tx: optax.GradientTransformation,
                     schedule: optax.Schedule, loss_fn: losses_lib.LossFn,
                     pairing: str = "same", select_with_dropout: bool = False,
                     accumulation_steps: int = 1,
                     batch_sharding: jax.NamedSharding | None = None,
                     fixed_order: bool = False,
                     in_batch_negatives: bool = False
                     ) -> tuple[tuple[TrainState, TrainState],
                                dict[str, jax.Array]]:
  """BeST iteration 1: updates θ⁽⁰⁾ (Eq.3) and θ⁽¹⁾ (Eq.2) in one step.

  Args:
    states: (θ⁽⁰⁾, trained on all segments; θ⁽¹⁾, trained on θ⁽⁰⁾'s argmax
      segments).
    batch: `input_ids`, `attention_mask`, `token_type_ids` `[B, G, S, L]`,
      `labels` `[B, G]` (positive first), `mask` `[B, G, S]` (real segments),
      `example_mask` `[B]`.
    graphdef, tx, schedule, loss_fn, accumulation_steps, batch_sharding,
      fixed_order, in_batch_negatives: as in `steps.train_step` (both models
      share the architecture and the optimizer; micro-batches split the
      examples as there; in-batch negatives are θ⁽¹⁾'s, see above).
    pairing: Eq.3's negative segment: `same` index or a `random` valid one.
    select_with_dropout: select with θ⁽⁰⁾'s training forward pass (cheaper)
      instead of a separate dropout-free one (default).
    budget: static; θ⁽⁰⁾ encodes the segment rows unpadded in it, as in
      `steps.train_step` (θ⁽¹⁾'s selected rows stay padded: which rows they
      are is known only inside the step).

  Returns:
    (states, metrics): `loss`, `loss0`, `loss1`, `grad_norm0/1`,
    `learning_rate`, and `selected` `[B, G]` (θ⁽⁰⁾'s argmax segments, -1
    for documents without a segment).
  """
  state0, state1 = states
  budget = token_budget.on_shards(budget, batch_sharding, fixed_order)

  def sums_fn(params, micro, key):
    params0, params1 = params
    key0, key1 = jax.random.fold_in(key, 0), jax.random.fold_in(key, 1)
    mask_bgs, labels_bg = micro["mask"], micro["labels"]
    example_b = micro["example_mask"]
    doc_valid_bg = jnp.any(mask_bgs, axis=-1)
    scores0_bgs = steps_lib.batch_scores(nnx.merge(graphdef, params0), micro,
                                         nnx.Rngs(dropout=key0), budget)
    if select_with_dropout:
      selection_bgs = jax.lax.stop_gradient(scores0_bgs)
    else:
      frozen = nnx.merge(graphdef, jax.lax.stop_gradient(params0))
      selection_bgs = jax.lax.stop_gradient(
          steps_lib.batch_scores(frozen, micro, budget=budget))
    selected_bg, _ = masked_argmax(selection_bgs, mask_bgs)
    scores_bsg, where_bsg = _eq3_scores(scores0_bgs, mask_bgs, pairing,
                                        jax.random.fold_in(key0, 1))
    labels_bsg = jnp.broadcast_to(labels_bg[:, None, :], scores_bsg.shape)
    group0 = loss_fn(scores_bsg, labels_bsg, where=where_bsg)
    sums0 = losses_lib.masked_sum(group0.loss,
                                  group0.valid & example_b[:, None])
    index = selected_bg[..., None, None]
    chosen = dict(micro, mask=doc_valid_bg, **{
        name: jnp.take_along_axis(micro[name], index, axis=2)[:, :, 0]
        for name in steps_lib.MODEL_INPUTS})
    sums1 = steps_lib.group_loss_sum(
        nnx.merge(graphdef, params1), chosen, loss_fn,
        nnx.Rngs(dropout=key1), in_batch_negatives)
    return (sums0, sums1), jnp.where(doc_valid_bg, selected_bg, -1)

  key = jax.random.fold_in(state0.root_key(), state0.step)
  ((total0, count0), (total1, count1)), (grads0, grads1), selected = (
      steps_lib.loss_and_gradients(sums_fn, (state0.params, state1.params),
                                   batch, key, accumulation_steps,
                                   batch_sharding, fixed_order))
  loss0 = total0 / jnp.maximum(count0, 1.0)
  loss1 = total1 / jnp.maximum(count1, 1.0)
  grads0 = jax.tree.map(lambda g: g / jnp.maximum(count0, 1.0), grads0)
  grads1 = jax.tree.map(lambda g: g / jnp.maximum(count1, 1.0), grads1)
  learning_rate = jnp.asarray(schedule(state0.step), jnp.float32)
  state0, norm0 = steps_lib.guarded_update(state0, loss0, grads0, tx)
  state1, norm1 = steps_lib.guarded_update(state1, loss1, grads1, tx)
  metrics = {"loss": loss0 + loss1, "loss0": loss0, "loss1": loss1,
             "grad_norm0": norm0, "grad_norm1": norm1,
             "learning_rate": learning_rate, "selected": selected}
  return (state0, state1), metrics


def joint_settings(config) -> dict[str, Any]:
  """`build_joint_step`'s settings in an experiment's config."""
  t = config.train
  return dict(loss_name=t.loss, pairing=config.best.pairing,
              select_with_dropout=config.best.select_with_dropout,
              accumulation_steps=t.get("accumulation_steps", 1),
              in_batch_negatives=t.get("in_batch_negatives", False))


def build_joint_step(trainer, loss_name: str, pairing: str = "same",
                     select_with_dropout: bool = False,
                     accumulation_steps: int = 1,
                     in_batch_negatives: bool = False) -> Callable:
  """Jits `joint_train_step` once with the trainer's shardings (donated)."""
  if pairing not in PAIRINGS:
    raise ValueError(f"pairing must be one of {PAIRINGS}, not {pairing!r}")
  step = functools.partial(
      joint_train_step, graphdef=trainer.graphdef, tx=trainer.tx,
      schedule=trainer.schedule, loss_fn=losses_lib.get_loss(loss_name),
      pairing=pairing, select_with_dropout=select_with_dropout,
      accumulation_steps=accumulation_steps,
      batch_sharding=trainer.batch_sharding,
      fixed_order=trainer.fixed_order_reduction,
      in_batch_negatives=in_batch_negatives)
  shardings = (trainer.state_shardings, trainer.state_shardings)
  replicated = jax.NamedSharding(trainer.mesh, jax.P())
  with jax.set_mesh(trainer.mesh):
    jitted = jax.jit(step, in_shardings=(shardings, trainer.batch_sharding),
                     out_shardings=(shardings, replicated),
                     donate_argnums=0, static_argnums=2)

  def call(states, batch, budget=None):
    with jax.set_mesh(trainer.mesh):
      return jitted(states, batch, budget)
  call.lower = lambda states, batch, budget=None: jitted.lower(
      states, batch, budget)
  return call


def should_continue(dev_by_iteration: Sequence[float]) -> bool:
  """Iterate again only while the last iteration improved dev MRR."""
  return len(dev_by_iteration) < 2 or dev_by_iteration[-1] > max(
      dev_by_iteration[:-1])
