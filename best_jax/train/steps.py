"""The pure train and score steps (jitted once by `trainer.build_trainer`).

Batches are dicts of arrays whose leading axis is the example axis:

  input_ids, attention_mask, token_type_ids  [batch, group, length]
  labels                                     [batch, group] (float or int)
  mask                                       [batch, group] bool, real items
  example_mask                               [batch] bool, real examples

Group is 2 for the pairwise hinge (positive, negative) and 1 + n for the
cross-entropies. The loss is the mean over valid groups of the per-group loss;
the step sums and counts over micro-batches so that gradient accumulation is
the same computation as one large batch.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from best_jax.train import losses as losses_lib
from best_jax.train.state import TrainState

Batch = Mapping[str, jax.Array]

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
TRAIN_KEYS = MODEL_INPUTS + ("labels", "mask", "example_mask")


def _loss_sum(graphdef: nnx.GraphDef, params: nnx.State, batch: Batch,
              loss_fn: losses_lib.LossFn, dropout_key: jax.Array | None):
  """(sum of group losses, number of valid groups) for one (micro-)batch."""
  model = nnx.merge(graphdef, params)
  rngs = None if dropout_key is None else nnx.Rngs(dropout=dropout_key)
  scores_bg = model(*(batch[name] for name in MODEL_INPUTS), rngs=rngs)
  group = loss_fn(scores_bg, batch["labels"], where=batch["mask"])
  return losses_lib.masked_sum(group.loss,
                               group.valid & batch["example_mask"])


def _micro_batches(batch: Batch, steps: int,
                   sharding: jax.NamedSharding | None) -> Batch:
  """[batch, ...] → [steps, batch / steps, ...]; micro-batch j holds the
  examples j, j + steps, j + 2 steps, …, so every device keeps its rows."""
  def split(array):
    size = array.shape[0]
    if size % steps:
      raise ValueError(f"batch size {size} is not a multiple of "
                       f"accumulation_steps {steps}")
    array = array.reshape((size // steps, steps) + array.shape[1:])
    array = jnp.swapaxes(array, 0, 1)
    if sharding is not None:
      spec = jax.P(None, *sharding.spec)
      array = jax.lax.with_sharding_constraint(
          array, jax.NamedSharding(sharding.mesh, spec))
    return array
  return {name: split(batch[name]) for name in TRAIN_KEYS}


def _accumulator(array) -> jnp.dtype:
  """Gradients are summed in at least float32."""
  return jnp.promote_types(array.dtype, jnp.float32)


def loss_and_gradients(graphdef: nnx.GraphDef, params: nnx.State,
                       batch: Batch, loss_fn: losses_lib.LossFn,
                       step_key: jax.Array | None,
                       accumulation_steps: int = 1,
                       batch_sharding: jax.NamedSharding | None = None):
  """(loss sum, group count, gradient of the loss sum), at least float32.

  With `accumulation_steps` k > 1 the batch is split into k micro-batches
  whose sums are added: the same quantities as one pass over the batch.
  """
  grad_fn = jax.value_and_grad(_loss_sum, argnums=1, has_aux=True)
  if accumulation_steps == 1:
    (total, count), grads = grad_fn(graphdef, params, batch, loss_fn,
                                    step_key)
    return total, count, jax.tree.map(lambda g: g.astype(_accumulator(g)),
                                      grads)

  def accumulate(carry, micro):
    total, count, grads = carry
    index, micro_batch = micro
    key = None if step_key is None else jax.random.fold_in(step_key, index)
    (micro_total, micro_count), micro_grads = grad_fn(
        graphdef, params, micro_batch, loss_fn, key)
    grads = jax.tree.map(lambda a, g: a + g.astype(a.dtype), grads,
                         micro_grads)
    return (total + micro_total, count + micro_count, grads), None

  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, _accumulator(p)), params)
  micro = (jnp.arange(accumulation_steps),
           _micro_batches(batch, accumulation_steps, batch_sharding))
  loss_dtype = jax.eval_shape(
      lambda: _loss_sum(graphdef, params, jax.tree.map(lambda a: a[0],
                                                       micro[1]),
                        loss_fn, None))[0].dtype
  init = (jnp.zeros((), loss_dtype), jnp.zeros((), loss_dtype), zeros)
  (total, count, grads), _ = jax.lax.scan(accumulate, init, micro)
  return total, count, grads


def train_step(state: TrainState, batch: Batch, *, graphdef: nnx.GraphDef,
               tx: optax.GradientTransformation, schedule: optax.Schedule,
               loss_fn: losses_lib.LossFn, accumulation_steps: int = 1,
               batch_sharding: jax.NamedSharding | None = None,
               ) -> tuple[TrainState, dict[str, jax.Array]]:
  """One optimizer update; returns the new state and scalar metrics.

  Dropout uses `fold_in(root key, step)` (and the micro-batch index). If the
  loss or gradient norm is not finite, the update is not applied and
  `nonfinite_step` records the step; once set, the state no longer changes.
  """
  step_key = jax.random.fold_in(state.root_key(), state.step)
  total, count, grads = loss_and_gradients(
      graphdef, state.params, batch, loss_fn, step_key, accumulation_steps,
      batch_sharding)
  denominator = jnp.maximum(count, 1.0)
  loss = total / denominator
  grads = jax.tree.map(lambda g: g / denominator, grads)
  grad_norm = optax.global_norm(grads)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  apply = finite & (state.nonfinite_step < 0)

  def update(_):
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    return optax.apply_updates(state.params, updates), opt_state

  # A branch, not a select over every parameter and moment: the skipped
  # update is never computed and the kept state is not copied.
  params, opt_state = jax.lax.cond(
      apply, update, lambda _: (state.params, state.opt_state), None)
  nonfinite_step = jnp.where(
      (state.nonfinite_step < 0) & ~finite, state.step, state.nonfinite_step)
  new_state = state.replace(
      step=jnp.where(apply, state.step + 1, state.step),
      params=params, opt_state=opt_state, nonfinite_step=nonfinite_step)
  metrics = {
      "loss": loss,
      "grad_norm": grad_norm,
      "learning_rate": jnp.asarray(schedule(state.step), jnp.float32),
      "groups": count,
  }
  return new_state, metrics


def score_step(params: nnx.State, batch: Batch, *,
               graphdef: nnx.GraphDef) -> jax.Array:
  """Scores `[batch, ..., length]` inputs without dropout → [batch, ...]."""
  model = nnx.merge(graphdef, params)
  return model(*(batch[name] for name in MODEL_INPUTS))


def check_batch(batch: Mapping[str, Any], keys=TRAIN_KEYS) -> None:
  """Raises ValueError naming a missing batch array."""
  missing = [name for name in keys if name not in batch]
  if missing:
    raise ValueError(f"batch lacks {missing}; it has {sorted(batch)}")
