"""The recall-constraint decision rule (AttnCut paper, "recall constraint").

A second model classifies each position k into B ordered bins of R@k. With
m = AttnCut's best position and j = the first position whose predicted bin
reaches σ: output m if m ≥ j, otherwise the next-best positions of AttnCut
are tried until one is > j. A bin b "reaches" σ when its lower edge b/B ≥ σ
(`rule="lower_edge"`, the conservative reading) or when it holds σ or more,
b ≥ ⌊σ·B⌋ (`rule="contains"`). When no position reaches σ, j is the last rank.
All cut-offs are 1-based.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

RULES = ("lower_edge", "contains")


def min_bin(sigma: float, bins: int, rule: str = "lower_edge") -> int:
  """The smallest recall bin that reaches σ."""
  if rule == "lower_edge":
    return math.ceil(sigma * bins - 1e-9)
  if rule == "contains":
    return math.floor(sigma * bins + 1e-9)
  raise ValueError(f"unknown recall rule {rule!r}; use one of {RULES}")


def first_reaching(bin_logits_bnc, mask_bn, sigma: float,
                   rule: str = "lower_edge") -> np.ndarray:
  """j: the first real position whose predicted (argmax) bin reaches σ."""
  bins = bin_logits_bnc.shape[-1]
  predicted = jnp.argmax(bin_logits_bnc, axis=-1)
  reaches = jnp.logical_and(predicted >= min_bin(sigma, bins, rule), mask_bn)
  length = jnp.sum(mask_bn, axis=-1)
  return np.asarray(jnp.where(jnp.any(reaches, axis=-1),
                              jnp.argmax(reaches, axis=-1) + 1, length))


def constrained_cutoffs(cut_logits_bn, bin_logits_bnc, mask_bn, sigma: float,
                        rule: str = "lower_edge") -> np.ndarray:
  """The cut-off of each list under the minimal-recall requirement σ."""
  mask = jnp.asarray(mask_bn)
  scores = jnp.where(mask, cut_logits_bn, -jnp.inf)
  m = jnp.argmax(scores, axis=-1) + 1
  j = jnp.asarray(first_reaching(bin_logits_bnc, mask, sigma, rule))
  k = jnp.arange(1, mask.shape[-1] + 1)
  later = jnp.logical_and(k[None] > j[:, None], mask)
  next_best = jnp.argmax(jnp.where(later, scores, -jnp.inf), axis=-1) + 1
  fallback = jnp.where(jnp.any(later, axis=-1), next_best, j)
  return np.asarray(jnp.where(m >= j, m, fallback))


def oracle_cutoffs(rewards_bn, recall_bn, mask_bn, sigma: float) -> np.ndarray:
  """Brute force: the best reward among cut-offs with R@k ≥ σ (any k if none)."""
  mask = jnp.asarray(mask_bn)
  ok = jnp.logical_and(mask, recall_bn >= sigma - 1e-9)
  ok = jnp.where(jnp.any(ok, axis=-1, keepdims=True), ok, mask)
  return np.asarray(jnp.argmax(jnp.where(ok, rewards_bn, -jnp.inf), -1) + 1)
