"""Truncation losses, rax-style: `fn(logits, targets, *, where, ...) -> scalar`.

`where` is the boolean mask of real ranks `[B, N]`. Softmaxes run in float32
over real ranks only; a fully masked list contributes nothing (never NaN) and
the mean is over lists with at least one real rank.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_NEG = -1e9  # Finite "minus infinity": keeps fully masked rows NaN-free.


def _masked_log_softmax(logits_bn, where_bn):
  logits = jnp.where(where_bn, logits_bn.astype(jnp.float32), _NEG)
  return jax.nn.log_softmax(logits, axis=-1)


def _mean_over_lists(loss_b, where_bn):
  valid_b = jnp.any(where_bn, axis=-1)
  return jnp.sum(jnp.where(valid_b, loss_b, 0.0)) / jnp.maximum(
      jnp.sum(valid_b), 1)


def raml_targets(rewards_bn, *, where, tau: float = 0.95):
  """q_k = softmax_k(r_k / τ) over real ranks; 0 at padding."""
  q = jax.nn.softmax(jnp.where(where, rewards_bn.astype(jnp.float32) / tau,
                               _NEG), axis=-1)
  return jnp.where(where, q, 0.0)


def soft_label_loss(logits_bn, targets_bn, *, where):
  """−Σ_k q_k log p_k, p = softmax over real ranks (mean over lists)."""
  log_p = _masked_log_softmax(logits_bn, where)
  loss_b = -jnp.sum(jnp.where(where, targets_bn * log_p, 0.0), axis=-1)
  return _mean_over_lists(loss_b, where)


def raml_loss(logits_bn, rewards_bn, *, where, tau: float = 0.95):
  """AttnCut's RAML loss with soft targets softmax(r/τ)."""
  return soft_label_loss(logits_bn,
                         raml_targets(rewards_bn, where=where, tau=tau),
                         where=where)


def mle_loss(logits_bn, rewards_bn, *, where):
  """Cross-entropy with a one-hot target at the best cut (smallest k on ties)."""
  best_b = jnp.argmax(jnp.where(where, rewards_bn, -jnp.inf), axis=-1)
  target = jax.nn.one_hot(best_b, rewards_bn.shape[-1], dtype=jnp.float32)
  return soft_label_loss(logits_bn, target, where=where)


def expected_reward_loss(logits_bn, rewards_bn, *, where):
  """Choppy's loss −Σ_k p_k r_k."""
  p = jnp.exp(_masked_log_softmax(logits_bn, where))
  loss_b = -jnp.sum(jnp.where(where, p * rewards_bn, 0.0), axis=-1)
  return _mean_over_lists(loss_b, where)


def reinforce_loss(logits_bn, rewards_bn, *, where, key, samples: int = 8):
  """REINFORCE: −(r_k − b) log p_k for k ~ p, b = the mean sampled reward."""
  log_p = _masked_log_softmax(logits_bn, where)
  k_sb = jax.random.categorical(key, jax.lax.stop_gradient(log_p),
                                shape=(samples,) + log_p.shape[:-1])
  k_bs = jnp.moveaxis(k_sb, 0, -1)
  reward_bs = jnp.take_along_axis(rewards_bn.astype(jnp.float32), k_bs, -1)
  advantage_bs = reward_bs - jnp.mean(reward_bs, axis=-1, keepdims=True)
  chosen_bs = jnp.take_along_axis(log_p, k_bs, axis=-1)
  loss_b = -jnp.mean(jax.lax.stop_gradient(advantage_bs) * chosen_bs, axis=-1)
  return _mean_over_lists(loss_b, where)


def bicut_loss(logits_bn2, labels_bn, *, where, alpha: float = 0.5):
  """BiCut's loss, normalised by the list length r.

  With p_n = P(end-of-list at n): Σ_n [α·I(y_n = 0)·(1 − p_n) +
  (1 − α)·I(y_n = 1)·p_n] / r — continuing past a non-relevant document costs
  α, ending at a relevant one costs 1 − α.
  """
  p_end = jax.nn.softmax(logits_bn2.astype(jnp.float32), axis=-1)[..., 1]
  cost = jnp.where(labels_bn, (1.0 - alpha) * p_end, alpha * (1.0 - p_end))
  length_b = jnp.maximum(jnp.sum(where, axis=-1), 1)
  loss_b = jnp.sum(jnp.where(where, cost, 0.0), axis=-1) / length_b
  return _mean_over_lists(loss_b, where)


def recall_bins(recall_bn, bins: int = 5):
  """Ordered bin of R@k: bin b holds recalls in [b/B, (b+1)/B), 1.0 in B−1."""
  return jnp.minimum(jnp.floor(recall_bn * bins), bins - 1).astype(jnp.int32)


def recall_bin_loss(logits_bnc, recall_bn, *, where, bins: int = 5):
  """MLE of each position's recall bin (mean over real positions, then lists)."""
  log_p = jax.nn.log_softmax(logits_bnc.astype(jnp.float32), axis=-1)
  target = recall_bins(recall_bn, bins)
  nll = -jnp.take_along_axis(log_p, target[..., None], axis=-1)[..., 0]
  count_b = jnp.maximum(jnp.sum(where, axis=-1), 1)
  loss_b = jnp.sum(jnp.where(where, nll, 0.0), axis=-1) / count_b
  return _mean_over_lists(loss_b, where)
