"""Cut-offs that need no model: Oracle, Fixed-k and Greedy-k.

Cut-offs are 1-based ranks: cut-off k keeps the top k documents.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def oracle_cutoffs(rewards_bn, mask_bn) -> np.ndarray:
  """The best real k of each list by its own labels (smallest k on ties)."""
  masked = jnp.where(mask_bn, rewards_bn, -jnp.inf)
  return np.asarray(jnp.argmax(masked, axis=-1) + 1)


def fixed_cutoffs(k: int, mask_bn) -> np.ndarray:
  """Keeps the top `k` documents (the whole list when it is shorter)."""
  if k < 1:
    raise ValueError(f"fixed cut-off k must be at least 1, got {k}")
  lengths = np.asarray(mask_bn).sum(axis=-1)
  return np.maximum(np.minimum(k, lengths), 1)


def greedy_k(rewards_bn, mask_bn) -> int:
  """The single k (1..N) with the best mean reward over the given lists.

  Rewards past the end of a short list are those of the whole list (see
  `rewards`), so every k is defined for every list. Ties take the smallest k.
  """
  del mask_bn  # Padded positions already carry the whole-list reward.
  mean_n = jnp.mean(jnp.asarray(rewards_bn, jnp.float32), axis=0)
  return int(jnp.argmax(mean_n)) + 1
