"""Truncation losses: RAML targets by hand, masking, and no NaN."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from best_jax.truncate import losses


def test_raml_target_is_softmax_of_reward_over_tau_by_hand():
  r = np.array([[0.2, 0.5, 0.1, 9.0]], np.float32)
  mask = np.array([[True, True, True, False]])
  q = np.asarray(losses.raml_targets(r, where=mask, tau=0.95))[0]
  e = [math.exp(0.2 / 0.95), math.exp(0.5 / 0.95), math.exp(0.1 / 0.95)]
  np.testing.assert_allclose(q, [x / sum(e) for x in e] + [0.0], rtol=1e-6)


def test_raml_loss_is_cross_entropy_with_soft_targets():
  logits = np.array([[1.0, 2.0, 0.5, 100.0]], np.float32)
  r = np.array([[0.2, 0.5, 0.1, 0.0]], np.float32)
  mask = np.array([[True, True, True, False]])
  q = np.asarray(losses.raml_targets(r, where=mask, tau=0.95))[0, :3]
  log_p = logits[0, :3] - np.log(np.exp(logits[0, :3]).sum())
  expected = -(q * log_p).sum()
  assert float(losses.raml_loss(logits, r, where=mask)) == pytest.approx(
      expected, rel=1e-6)


def test_mle_is_one_hot_at_the_best_cut():
  logits = np.array([[0.0, 1.0, 2.0]], np.float32)
  r = np.array([[0.3, 0.9, 0.1]], np.float32)
  mask = np.ones((1, 3), bool)
  log_p = logits[0] - np.log(np.exp(logits[0]).sum())
  assert float(losses.mle_loss(logits, r, where=mask)) == pytest.approx(
      -log_p[1], rel=1e-6)


def test_expected_reward_loss_by_hand():
  logits = np.array([[0.0, math.log(3.0)]], np.float32)  # p = (1/4, 3/4)
  r = np.array([[0.4, 0.8]], np.float32)
  loss = losses.expected_reward_loss(logits, r, where=np.ones((1, 2), bool))
  assert float(loss) == pytest.approx(-(0.25 * 0.4 + 0.75 * 0.8), rel=1e-6)


def test_bicut_loss_by_hand():
  # p_end = 0.5 everywhere: relevant docs cost (1-α)/2, non-relevant α/2.
  logits = np.zeros((1, 3, 2), np.float32)
  labels = np.array([[True, False, True]])
  mask = np.array([[True, True, False]])
  loss = losses.bicut_loss(logits, labels, where=mask, alpha=0.3)
  assert float(loss) == pytest.approx((0.7 * 0.5 + 0.3 * 0.5) / 2, rel=1e-6)


def test_recall_bins_and_loss():
  recall = np.array([[0.0, 0.19, 0.2, 0.59, 0.8, 1.0]], np.float32)
  np.testing.assert_array_equal(losses.recall_bins(recall, 5),
                                [[0, 0, 1, 2, 4, 4]])
  logits = np.zeros((1, 6, 5), np.float32)
  loss = losses.recall_bin_loss(logits, recall, where=np.ones((1, 6), bool))
  assert float(loss) == pytest.approx(math.log(5), rel=1e-6)


@pytest.mark.parametrize("name", ["raml", "mle", "expected", "reinforce"])
def test_fully_masked_lists_are_ignored_and_never_nan(name):
  logits = jnp.array([[1.0, 2.0, 3.0], [5.0, -1.0, 0.0]])
  r = jnp.array([[0.1, 0.6, 0.2], [0.3, 0.3, 0.3]])
  mask = jnp.array([[True, True, True], [False, False, False]])
  kwargs = {"key": jax.random.key(0)} if name == "reinforce" else {}
  fn = {"raml": losses.raml_loss, "mle": losses.mle_loss,
        "expected": losses.expected_reward_loss,
        "reinforce": losses.reinforce_loss}[name]
  both = fn(logits, r, where=mask, **kwargs)
  first = fn(logits[:1], r[:1], where=mask[:1], **kwargs)
  grads = jax.grad(lambda x: fn(x, r, where=mask, **kwargs))(logits)
  if name != "reinforce":  # different samples per batch shape
    assert float(both) == pytest.approx(float(first), rel=1e-6)
  assert np.isfinite(float(both))
  assert np.all(np.isfinite(grads)) and np.all(grads[1] == 0)
  none = fn(logits, r, where=jnp.zeros_like(mask), **kwargs)
  assert float(none) == 0.0


def test_reinforce_gradient_favours_the_better_cut():
  logits = jnp.zeros((1, 2))
  r = jnp.array([[0.0, 1.0]])
  grad = jax.grad(lambda x: losses.reinforce_loss(
      x, r, where=jnp.ones((1, 2), bool), key=jax.random.key(3),
      samples=64))(logits)
  assert grad[0, 1] < 0 < grad[0, 0]  # descent raises the logit of k = 2
