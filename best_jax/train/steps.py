"""The pure train step and its parts (jitted once by `trainer.build_trainer`).

Batches are dicts of arrays whose leading axis is the example axis:

  input_ids, attention_mask, token_type_ids  [batch, group, length]
  labels                                     [batch, group] (float or int)
  mask                                       [batch, group] bool, real items
  example_mask                               [batch] bool, real examples

Group is 2 for the pairwise hinge (positive, negative) and 1 + n for the
cross-entropies. A bi-encoder's batch also holds its queries apart,
`query_ids`/`query_mask` `[batch, query length]`, and the segments are
`[CLS] segment [SEP]` rows and `doc_ids` `[batch, group]` names each
row's document; `batch_scores` scores both layouts, and with
`in_batch_negatives` every other segment of the batch is a negative too
(except those of the query's own positive documents). The loss is the mean
over valid groups of the per-group loss.
`loss_and_gradients` sums and counts over micro-batches, so that gradient
accumulation is the same computation as one large batch; `guarded_update`
applies an update only when it is finite. Both serve every step: this plain
one and BeST's joint iteration-1 step (`train.best`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from best_jax.models.unpadding import TokenBudget
from best_jax.train import losses as losses_lib
from best_jax.train import token_budget
from best_jax.train.state import TrainState

Batch = Mapping[str, jax.Array]
# (params, batch, dropout key) -> (((loss sum, group count), ...), aux)
SumsFn = Callable[[Any, Batch, jax.Array], tuple[tuple, Any]]

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
QUERY_INPUTS = ("query_ids", "query_mask")
TRAIN_KEYS = MODEL_INPUTS + ("labels", "mask", "example_mask")


def batch_scores(model: nnx.Module, batch: Batch,
                 rngs: nnx.Rngs | None = None,
                 budget: TokenBudget | None = None) -> jax.Array:
  """Scores `[B, ...]` of the batch's segment rows `[B, ..., L]`.

  A cross-encoder reads `[CLS] query [SEP] segment [SEP]` rows (unpadded
  with a `budget`); a bi-encoder's batch (one with `query_ids`) embeds the
  queries `[B, Lq]` and the segments apart and compares them
  (`models.bi_encoder`).
  """
  segments = tuple(batch[name] for name in MODEL_INPUTS)
  if budget is not None:
    if "query_ids" in batch:
      raise ValueError("unpadded encoding is for cross-encoder rows")
    return model(*segments, rngs=rngs, budget=budget)
  if "query_ids" not in batch:
    return model(*segments, rngs=rngs)
  query_bh = model.embed(batch["query_ids"], batch["query_mask"], rngs=rngs)
  return model.score(query_bh, model.embed(*segments, rngs=rngs))


def _in_batch(model: nnx.Module, batch: Batch, rngs: nnx.Rngs | None):
  """A bi-encoder's scores of every query against every segment of the
  batch, `[B, B·G]`, with labels and a mask: a query's own group keeps its
  labels; another query's documents are negatives, unless that query is the
  same one (a repeated query's documents are left out) or, with `doc_ids`
  `[B, G]` in the batch, the document is one of the query's positives
  (another query's segment of it may hold this query's answer)."""
  labels_bg, mask_bg = batch["labels"], batch["mask"]
  num_b, num_g = labels_bg.shape
  query_bh = model.embed(batch["query_ids"], batch["query_mask"], rngs=rngs)
  segments_bgh = model.embed(*(batch[n] for n in MODEL_INPUTS), rngs=rngs)
  flat_nh = segments_bgh.reshape(num_b * num_g, -1)
  scores_bn = model.score(query_bh, jnp.broadcast_to(
      flat_nh[None], (num_b,) + flat_nh.shape))
  group_n = jnp.arange(num_b * num_g) // num_g
  own_bn = jnp.arange(num_b)[:, None] == group_n[None, :]
  same_bb = jnp.all(batch["query_ids"][:, None] == batch["query_ids"][None],
                    axis=-1)
  real_n = mask_bg.reshape(-1) & batch["example_mask"][group_n]
  where_bn = real_n[None] & (own_bn | ~same_bb[:, group_n])
  if "doc_ids" in batch:
    doc_n = batch["doc_ids"].reshape(-1)
    positive_bgn = ((labels_bg > 0)[..., None]
                    & (batch["doc_ids"][..., None] == doc_n[None, None]))
    where_bn &= own_bn | ~jnp.any(positive_bgn, axis=1)
  labels_bn = jnp.where(own_bn, labels_bg.reshape(-1)[None], 0)
  return scores_bn, labels_bn.astype(labels_bg.dtype), where_bn


def group_loss_sum(model: nnx.Module, batch: Batch,
                   loss_fn: losses_lib.LossFn, rngs: nnx.Rngs | None,
                   in_batch_negatives: bool = False,
                   budget: TokenBudget | None = None
                   ) -> tuple[jax.Array, jax.Array]:
  """(sum of group losses, number of valid groups) of `[B, G, L]` rows."""
  if in_batch_negatives:
    scores, labels, where = _in_batch(model, batch, rngs)
  else:
    scores = batch_scores(model, batch, rngs, budget)
    labels, where = batch["labels"], batch["mask"]
  group = loss_fn(scores, labels, where=where)
  return losses_lib.masked_sum(group.loss,
                               group.valid & batch["example_mask"])


def micro_batches(batch: Batch, steps: int,
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
  return {name: split(array) for name, array in batch.items()}


def _merge_micro(array: jax.Array) -> jax.Array:
  """Inverse of `micro_batches` for a per-example output `[steps, b, ...]`."""
  steps, per = array.shape[:2]
  return jnp.swapaxes(array, 0, 1).reshape((steps * per,) + array.shape[2:])


def _accumulator(array) -> jnp.dtype:
  """Gradients are summed in at least float32."""
  return jnp.promote_types(array.dtype, jnp.float32)


def _value_and_grad(sums_fn: SumsFn, params: Any, batch: Batch,
                    key: jax.Array):
  def objective(p):
    sums, aux = sums_fn(p, batch, key)
    return sum(total for total, _ in sums), (sums, aux)
  (_, (sums, aux)), grads = jax.value_and_grad(objective, has_aux=True)(
      params)
  return sums, jax.tree.map(lambda g: g.astype(_accumulator(g)), grads), aux


def _fixed_order_sum(x_d: jax.Array, sharding: jax.NamedSharding
                     ) -> jax.Array:
  """The sum over the leading shard axis `[D, ...]` (sharded like a batch),
  in one fixed order: an all-to-all gives each device 1/D of every shard's
  values, it adds them locally, and an all-gather reassembles the total.
  Only the local add does arithmetic, so the result is the same bits
  however the D devices are spread over processes (an all-reduce's order is
  not). Memory and traffic are those of a reduce-scatter + all-gather."""
  mesh, axis = sharding.mesh, sharding.spec[0]
  shards, shape = x_d.shape[0], x_d.shape[1:]
  flat = x_d.reshape(shards, -1)
  size = flat.shape[1]
  flat = jnp.pad(flat, ((0, 0), (0, -size % shards)))
  flat = jax.lax.with_sharding_constraint(
      flat, jax.NamedSharding(mesh, jax.P(axis, None)))
  flat = jax.lax.with_sharding_constraint(
      flat, jax.NamedSharding(mesh, jax.P(None, axis)))
  total = jax.lax.with_sharding_constraint(
      jnp.sum(flat, axis=0), jax.NamedSharding(mesh, jax.P()))
  return total[:size].reshape(shape)


def _value_and_grad_by_shard(sums_fn: SumsFn, params: Any, batch: Batch,
                             key: jax.Array, sharding: jax.NamedSharding):
  """`_value_and_grad` on each data shard (shard d: the d-th block of
  examples, dropout key `fold_in(key, d)`), the shards' sums and gradients
  then added by `_fixed_order_sum`."""
  mesh, axis = sharding.mesh, sharding.spec[0]
  shards = token_budget.data_shards(sharding)

  def split(array):
    array = array.reshape((shards, array.shape[0] // shards)
                          + array.shape[1:])
    return jax.lax.with_sharding_constraint(
        array, jax.NamedSharding(mesh, jax.P(axis)))
  keys = jax.vmap(lambda d: jax.random.fold_in(key, d))(jnp.arange(shards))
  sums, grads, aux = jax.vmap(
      lambda b, k: _value_and_grad(sums_fn, params, b, k))(
          jax.tree.map(split, batch), keys)
  add = lambda x: _fixed_order_sum(x, sharding)  # pylint: disable=unnecessary-lambda-assignment
  return (jax.tree.map(add, sums), jax.tree.map(add, grads),
          jax.tree.map(lambda a: a.reshape((-1,) + a.shape[2:]), aux))


def loss_and_gradients(sums_fn: SumsFn, params: Any, batch: Batch,
                       key: jax.Array, accumulation_steps: int = 1,
                       batch_sharding: jax.NamedSharding | None = None,
                       fixed_order: bool = False):
  """(sums, gradient of the summed loss sums, aux), at least float32.

  `sums_fn` returns `((loss sum, count), ...)` (one pair per loss) and a
  per-example aux output. With `accumulation_steps` k > 1 the batch is split
  into k micro-batches (dropout key `fold_in(key, j)` for micro-batch j) whose
  sums and gradients are added: the same quantities as one pass. With
  `fixed_order` (`train.fixed_order_reduction`) the data shards' sums and
  gradients are added in one fixed order (`_fixed_order_sum`), so a run
  gives the same bits on 1 process × 8 devices as on 2 × 4; each shard then
  draws its own dropout (the results depend on the number of data shards),
  in-batch negatives would stay within a shard, and the total is
  replicated (`experiment.checks` refuses the last two cases: in-batch
  negatives, a model axis over 1).
  """
  def value_and_grad(batch, key):
    if fixed_order and batch_sharding is not None:
      return _value_and_grad_by_shard(sums_fn, params, batch, key,
                                      batch_sharding)
    return _value_and_grad(sums_fn, params, batch, key)

  if accumulation_steps == 1:
    return value_and_grad(batch, key)
  micro = micro_batches(batch, accumulation_steps, batch_sharding)

  def accumulate(carry, x):
    index, micro_batch = x
    sums, grads, aux = value_and_grad(micro_batch,
                                      jax.random.fold_in(key, index))
    carry = jax.tree.map(lambda a, b: a + b.astype(a.dtype), carry,
                         (sums, grads))
    return carry, aux

  first = jax.tree.map(lambda a: a[0], micro)
  shapes = jax.eval_shape(lambda: value_and_grad(first, key)[:2])
  init = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
  (sums, grads), aux = jax.lax.scan(
      accumulate, init, (jnp.arange(accumulation_steps), micro))
  return sums, grads, jax.tree.map(_merge_micro, aux)


def guarded_update(state: TrainState, loss: jax.Array, grads: Any,
                   tx: optax.GradientTransformation
                   ) -> tuple[TrainState, jax.Array]:
  """Applies `grads` unless the loss or gradient is not finite; then the
  state keeps its values and records the step in `nonfinite_step`, and once
  set it never changes again. Returns (state, gradient norm)."""
  grad_norm = optax.global_norm(grads)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  apply = finite & (state.nonfinite_step < 0)

  def update(_):
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    return optax.apply_updates(state.params, updates), opt_state

  # A branch, not a select over every parameter and moment: a skipped
  # update is never computed and the kept state is not copied.
  params, opt_state = jax.lax.cond(
      apply, update, lambda _: (state.params, state.opt_state), None)
  nonfinite_step = jnp.where(
      (state.nonfinite_step < 0) & ~finite, state.step, state.nonfinite_step)
  return state.replace(
      step=jnp.where(apply, state.step + 1, state.step),
      params=params, opt_state=opt_state,
      nonfinite_step=nonfinite_step), grad_norm


def train_step(state: TrainState, batch: Batch,
               budget: TokenBudget | None = None,
               *, graphdef: nnx.GraphDef,
               tx: optax.GradientTransformation, schedule: optax.Schedule,
               loss_fn: losses_lib.LossFn, accumulation_steps: int = 1,
               batch_sharding: jax.NamedSharding | None = None,
               in_batch_negatives: bool = False, fixed_order: bool = False,
               ) -> tuple[TrainState, dict[str, jax.Array]]:
  """One optimizer update; returns the new state and scalar metrics.

  Dropout uses `fold_in(root key, step)` (and the micro-batch index, and
  with `fixed_order` the data shard's). With `in_batch_negatives`
  (bi-encoders), a micro-batch's other segments are negatives of each query
  too; `fixed_order` as in `loss_and_gradients`. With a `budget` (static),
  cross-encoder rows are encoded unpadded, its tokens and attention groups
  per unit, a unit being one data shard's rows of one micro-batch; every
  unit must fit (`train.token_budget`).
  """
  budget = token_budget.on_shards(budget, batch_sharding, fixed_order)

  def sums_fn(params, micro_batch, key):
    model = nnx.merge(graphdef, params)
    return (group_loss_sum(model, micro_batch, loss_fn,
                           nnx.Rngs(dropout=key), in_batch_negatives,
                           budget),), None

  step_key = jax.random.fold_in(state.root_key(), state.step)
  ((total, count),), grads, _ = loss_and_gradients(
      sums_fn, state.params, batch, step_key, accumulation_steps,
      batch_sharding, fixed_order)
  denominator = jnp.maximum(count, 1.0)
  loss = total / denominator
  grads = jax.tree.map(lambda g: g / denominator, grads)
  learning_rate = jnp.asarray(schedule(state.step), jnp.float32)
  state, grad_norm = guarded_update(state, loss, grads, tx)
  return state, {"loss": loss, "grad_norm": grad_norm,
                 "learning_rate": learning_rate, "groups": count}
