"""Rewards r_k of a list cut after rank k, for every k at once.

All functions take `labels_bn` (bool, relevant) and `mask_bn` (bool, real rank)
over `[..., N]` and return float32 `[..., N]`, where entry k-1 is the metric of
the list cut after rank k. Padded positions (k beyond the list) get the value
of the full list, so a cut there means "keep everything"; use `mask_bn` to
exclude them where a choice must be a real rank.

  F1@k  = 2·P@k·R@k / (P@k + R@k) = 2·hits@k / (k + R_list), R over the
          relevant documents in the list (0 when the list has none).
  DCG@k = Σ_{n≤k} y_n / log2(n + 1), y = +1 relevant, −1 non-relevant.
  R@k   = hits@k / R_list (0 when the list has none).
"""

from __future__ import annotations

import jax.numpy as jnp

METRICS = ("f1", "dcg")


def _hits(labels_bn, mask_bn):
  return jnp.cumsum(jnp.logical_and(labels_bn, mask_bn), axis=-1,
                    dtype=jnp.float32)


def _fill_padding(values_bn, mask_bn):
  """Carries the last real value into the padded tail."""
  n = values_bn.shape[-1]
  length = jnp.sum(mask_bn, axis=-1, keepdims=True)
  last = jnp.take_along_axis(values_bn, jnp.maximum(length - 1, 0), axis=-1)
  k = jnp.arange(1, n + 1)
  return jnp.where(k <= length, values_bn, jnp.where(length > 0, last, 0.0))


def f1_at_all_k(labels_bn, mask_bn):
  """F1@k for k = 1..N (recall over the relevant documents in the list)."""
  hits = _hits(labels_bn, mask_bn)
  n_relevant = hits[..., -1:]
  k = jnp.arange(1, hits.shape[-1] + 1, dtype=jnp.float32)
  f1 = 2.0 * hits / (k + n_relevant)
  return _fill_padding(f1, mask_bn)


def recall_at_all_k(labels_bn, mask_bn):
  """R@k for k = 1..N over the relevant documents in the list."""
  hits = _hits(labels_bn, mask_bn)
  n_relevant = hits[..., -1:]
  return hits / jnp.maximum(n_relevant, 1.0)


def dcg_at_all_k(labels_bn, mask_bn):
  """±1 DCG@k for k = 1..N (non-relevant documents count −1)."""
  n = labels_bn.shape[-1]
  gains = jnp.where(labels_bn, 1.0, -1.0) / jnp.log2(
      jnp.arange(2, n + 2, dtype=jnp.float32))
  gains = jnp.where(mask_bn, gains, 0.0)
  return jnp.cumsum(gains, axis=-1)


def at_all_k(metric: str, labels_bn, mask_bn):
  """`f1_at_all_k` or `dcg_at_all_k` by name."""
  if metric == "f1":
    return f1_at_all_k(labels_bn, mask_bn)
  if metric == "dcg":
    return dcg_at_all_k(labels_bn, mask_bn)
  raise ValueError(f"unknown truncation metric {metric!r}; use one of {METRICS}")


def at_cutoff(rewards_bn, cutoffs_b):
  """The reward of each list cut after rank `cutoffs_b` (1-based)."""
  index = jnp.clip(jnp.asarray(cutoffs_b) - 1, 0, rewards_bn.shape[-1] - 1)
  return jnp.take_along_axis(rewards_bn, index[..., None], axis=-1)[..., 0]
