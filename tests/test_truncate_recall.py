"""The recall-constraint decision rule on constructed cases."""

import numpy as np

from best_jax.truncate import recall


def _bins(predicted, bins=5):
  """Logits whose argmax is `predicted` per position."""
  logits = np.zeros((1, len(predicted), bins), np.float32)
  logits[0, np.arange(len(predicted)), predicted] = 1.0
  return logits


def test_min_bin_rules():
  assert [recall.min_bin(s, 5) for s in (0, 0.3, 0.5, 0.7)] == [0, 2, 3, 4]
  assert [recall.min_bin(s, 5, "contains") for s in (0, 0.3, 0.5, 0.7)] == [
      0, 1, 2, 3]


def test_m_at_or_after_j_is_kept():
  cut = np.array([[0.0, 0.1, 0.2, 5.0, 0.3, 0.2]], np.float32)  # m = 4
  bins = _bins([0, 1, 2, 3, 4, 4])  # bin ≥ 3 (σ = 0.5) first at k = 4: j = 4
  mask = np.ones((1, 6), bool)
  assert recall.first_reaching(bins, mask, 0.5)[0] == 4
  assert recall.constrained_cutoffs(cut, bins, mask, 0.5)[0] == 4
  assert recall.constrained_cutoffs(cut, bins, mask, 0.0)[0] == 4


def test_m_before_j_takes_the_next_best_position_after_j():
  cut = np.array([[5.0, 0.1, 0.2, 0.0, 0.3, 0.9, 0.4]], np.float32)  # m = 1
  bins = _bins([0, 1, 2, 4, 4, 4, 4])  # σ = 0.7 needs bin 4: j = 4
  mask = np.ones((1, 7), bool)
  # Positions > 4: k = 5, 6, 7 with scores 0.3, 0.9, 0.4 -> 6.
  assert recall.constrained_cutoffs(cut, bins, mask, 0.7)[0] == 6


def test_no_reaching_position_falls_back_to_the_whole_list():
  cut = np.array([[5.0, 0.1, 0.2, 9.0]], np.float32)
  mask = np.array([[True, True, True, False]])  # the fourth rank is padding
  bins = _bins([0, 1, 1, 4])
  assert recall.first_reaching(bins, mask, 0.7)[0] == 3
  assert recall.constrained_cutoffs(cut, bins, mask, 0.7)[0] == 3


def test_oracle_under_constraint_is_brute_force():
  f1 = np.array([[0.5, 0.4, 0.45, 0.3]], np.float32)
  rec = np.array([[0.2, 0.4, 0.6, 1.0]], np.float32)
  mask = np.ones((1, 4), bool)
  assert [int(recall.oracle_cutoffs(f1, rec, mask, s)[0])
          for s in (0.0, 0.3, 0.5, 0.7)] == [1, 3, 3, 4]
