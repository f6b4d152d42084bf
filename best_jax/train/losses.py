"""Ranking losses over groups `[..., group]`, one value per group, in float32.

(float64 inputs stay float64; bfloat16 and float16 are computed in float32.)

Each loss takes scores and labels of shape `[..., group]` and a boolean item
mask `where`, and returns a `GroupLoss`: the loss of every group and whether
that group counts (it has something to learn from). A group that does not count
has loss 0 and never NaN, also when every item is masked. Reduce with
`masked_sum` / `masked_mean`, which is what train steps do (sum and count, so
gradient accumulation is exact).

- `pairwise_hinge`: mean over the valid pairs (label_i > label_j) of
  `max(0, 1 - s_i + s_j)`; with one positive and one negative this is BeST's
  `l(y1, y2) = max(0, 1 - y1 + y2)`.
- `sigmoid_cross_entropy`: pointwise binary cross-entropy, mean over valid
  items (labels clipped to [0, 1]).
- `softmax_cross_entropy`: cross-entropy of the softmax over the group's valid
  items against the labels normalised to sum to 1; groups without a positive
  label do not count.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import rax


class GroupLoss(NamedTuple):
  """Per-group loss values [...] (0 where not valid) and validity [...] bool."""
  loss: jax.Array
  valid: jax.Array


LossFn = Callable[..., GroupLoss]


def _at_least_float32(dtype) -> jnp.dtype:
  """float32 for bf16/f16/f32 (and integers); float64 stays float64."""
  return jnp.promote_types(dtype, jnp.float32)


def _prepare(scores: jax.Array, labels: jax.Array, where: jax.Array | None):
  scores = scores.astype(_at_least_float32(scores.dtype))
  labels = labels.astype(scores.dtype)
  if where is None:
    where = jnp.ones(scores.shape, bool)
  if where.dtype != jnp.bool_:
    raise TypeError(f"`where` must be boolean, got {where.dtype}")
  # Masked items may hold anything (even inf); keep them out of the algebra.
  scores = jnp.where(where, scores, 0.0)
  return scores, labels, where


def pairwise_hinge(scores: jax.Array, labels: jax.Array, *,
                   where: jax.Array | None = None) -> GroupLoss:
  """Mean hinge loss over the group's valid pairs with label_i > label_j."""
  scores, labels, where = _prepare(scores, labels, where)
  # rax flattens the pairs of a group into its last axis.
  sum_over_pairs = lambda a, where: jnp.sum(a, axis=-1, where=where)
  loss_sum = rax.pairwise_hinge_loss(scores, labels, where=where,
                                     reduce_fn=sum_over_pairs)
  pairs = ((labels[..., :, None] > labels[..., None, :])
           & where[..., :, None] & where[..., None, :])
  num_pairs = jnp.sum(pairs, axis=(-2, -1))
  valid = num_pairs > 0
  loss = jnp.where(valid, loss_sum / jnp.maximum(num_pairs, 1), 0.0)
  return GroupLoss(loss, valid)


def sigmoid_cross_entropy(scores: jax.Array, labels: jax.Array, *,
                          where: jax.Array | None = None) -> GroupLoss:
  """Mean binary cross-entropy of sigmoid(score) over the valid items."""
  scores, labels, where = _prepare(scores, labels, where)
  item_loss = rax.pointwise_sigmoid_loss(scores, labels, where=where,
                                         reduce_fn=None)
  num_items = jnp.sum(where, axis=-1)
  valid = num_items > 0
  loss_sum = jnp.sum(item_loss, axis=-1, where=where)
  loss = jnp.where(valid, loss_sum / jnp.maximum(num_items, 1), 0.0)
  return GroupLoss(loss, valid)


def softmax_cross_entropy(scores: jax.Array, labels: jax.Array, *,
                          where: jax.Array | None = None) -> GroupLoss:
  """Softmax cross-entropy over the valid items; needs a positive label."""
  scores, labels, where = _prepare(scores, labels, where)
  valid = jnp.any(where & (labels > 0), axis=-1)
  # Groups without a valid item would see log-softmax over all -inf; give them
  # one harmless valid item instead (their loss is discarded below).
  safe_where = where | ~jnp.any(where, axis=-1, keepdims=True)
  loss = rax.softmax_loss(scores, labels, where=safe_where,
                          label_fn=rax.utils.normalize_probabilities,
                          reduce_fn=None)
  return GroupLoss(jnp.where(valid, loss, 0.0), valid)


LOSSES: dict[str, LossFn] = {
    "pairwise_hinge": pairwise_hinge,
    "sigmoid_cross_entropy": sigmoid_cross_entropy,
    "softmax_cross_entropy": softmax_cross_entropy,
}


def get_loss(name: str) -> LossFn:
  """The loss called `name` (a key of `LOSSES`)."""
  if name not in LOSSES:
    raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}")
  return LOSSES[name]


def masked_sum(values: jax.Array, where: jax.Array) -> tuple[jax.Array,
                                                             jax.Array]:
  """(sum of `values` where `where`, number of such entries), float32."""
  values = values.astype(_at_least_float32(values.dtype))
  total = jnp.sum(jnp.where(where, values, 0.0))
  return total, jnp.sum(where).astype(values.dtype)


def masked_mean(values: jax.Array, where: jax.Array) -> jax.Array:
  """Mean of `values` where `where`; 0 when nothing is selected."""
  total, count = masked_sum(values, where)
  return total / jnp.maximum(count, 1.0)
