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

from best_jax.evaluate import metrics

METRICS = ("f1", "dcg")


def _hits(labels_bn, mask_bn):
  return jnp.cumsum(jnp.logical_and(labels_bn, mask_bn), axis=-1,
                    dtype=jnp.float32)


def f1_at_all_k(labels_bn, mask_bn):
  """F1@k for k = 1..N (recall over the relevant documents in the list)."""
  return metrics.truncation_f1_curve(labels_bn, where=mask_bn)


def recall_at_all_k(labels_bn, mask_bn):
  """R@k for k = 1..N over the relevant documents in the list."""
  hits = _hits(labels_bn, mask_bn)
  n_relevant = hits[..., -1:]
  return hits / jnp.maximum(n_relevant, 1.0)


def dcg_at_all_k(labels_bn, mask_bn):
  """±1 DCG@k for k = 1..N (non-relevant documents count −1)."""
  return metrics.truncation_dcg_curve(labels_bn, where=mask_bn)


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
