"""Rewards for every cut-off and the model-free baselines against brute force."""

import math

import numpy as np
import pytest

from best_jax.truncate import baselines, lists, rewards


def _brute_f1(labels, k):
  hits = sum(labels[:k])
  total = sum(labels)
  if hits == 0:
    return 0.0
  p, r = hits / k, hits / total
  return 2 * p * r / (p + r)


def _brute_dcg(labels, k):
  return sum((1 if y else -1) / math.log2(n + 2) for n, y in enumerate(labels[:k]))


def test_f1_and_dcg_on_a_hand_made_list():
  labels = np.array([[True, False, True, False]])
  mask = np.ones_like(labels)
  np.testing.assert_allclose(rewards.f1_at_all_k(labels, mask)[0],
                             [2 / 3, 0.5, 0.8, 2 / 3], rtol=1e-6)
  dcg = [1.0, 1 - 1 / math.log2(3), 1 - 1 / math.log2(3) + 0.5,
         1 - 1 / math.log2(3) + 0.5 - 1 / math.log2(5)]
  np.testing.assert_allclose(rewards.dcg_at_all_k(labels, mask)[0], dcg,
                             rtol=1e-6)
  np.testing.assert_allclose(rewards.recall_at_all_k(labels, mask)[0],
                             [0.5, 0.5, 1.0, 1.0])


def test_list_without_relevant_documents_has_zero_f1():
  labels = np.zeros((1, 3), bool)
  mask = np.ones((1, 3), bool)
  np.testing.assert_array_equal(rewards.f1_at_all_k(labels, mask), 0.0)
  np.testing.assert_array_equal(rewards.recall_at_all_k(labels, mask), 0.0)


def test_short_lists_are_masked():
  labels = np.array([[True, False, True, True, True]])  # the last two are padding
  mask = np.array([[True, True, True, False, False]])
  f1 = np.asarray(rewards.f1_at_all_k(labels, mask))[0]
  np.testing.assert_allclose(f1, [2 / 3, 0.5, 0.8, 0.8, 0.8], rtol=1e-6)
  dcg = np.asarray(rewards.dcg_at_all_k(labels, mask))[0]
  assert dcg[3] == dcg[2] == dcg[4]
  assert baselines.fixed_cutoffs(50, mask)[0] == 3
  labels = np.array([[False, False, True, True]])
  mask = np.array([[True, True, False, False]])
  # A fully non-relevant short list: the oracle picks a real rank, not padding.
  assert baselines.oracle_cutoffs(rewards.dcg_at_all_k(labels, mask), mask)[0] == 1


@pytest.mark.parametrize("metric", ["f1", "dcg"])
def test_oracle_fixed_greedy_equal_brute_force(metric):
  rng = np.random.default_rng(7)
  brute = _brute_f1 if metric == "f1" else _brute_dcg
  n = 12
  lengths = rng.integers(1, n + 1, size=30)
  labels = rng.random((30, n)) < 0.3
  mask = np.arange(n)[None] < lengths[:, None]
  r = np.asarray(rewards.at_all_k(metric, labels, mask))
  real = [list(labels[i, :lengths[i]]) for i in range(30)]
  values = [[brute(y, k) for k in range(1, len(y) + 1)] for y in real]
  np.testing.assert_allclose(
      [r[i, k] for i in range(30) for k in range(lengths[i])],
      [v for row in values for v in row], rtol=1e-5, atol=1e-6)
  oracle = baselines.oracle_cutoffs(r, mask)
  assert list(oracle) == [int(np.argmax(v)) + 1 for v in values]
  for k in (1, 5, 10, 50):
    fixed = baselines.fixed_cutoffs(k, mask)
    np.testing.assert_allclose(
        rewards.at_cutoff(r, fixed), [brute(y, min(k, len(y))) for y in real],
        atol=1e-6)
  means = [np.mean([brute(y, min(k, len(y))) for y in real]) for k in range(1, n + 1)]
  assert baselines.greedy_k(r, mask) == int(np.argmax(means)) + 1


def test_robust04_oracle_and_fixed_k_reproduce_the_spec(shared):
  ranked = lists.read(shared("robust04", "rob04_yang19_bm25rm3.top1000.run.gz"),
                      shared("robust04", "qrels.robust2004.txt.gz"), depth=300)
  assert len(ranked.qids) == 250 and ranked.mask_qn.all()
  r = rewards.f1_at_all_k(ranked.labels_qn, ranked.mask_qn)
  oracle = rewards.at_cutoff(r, baselines.oracle_cutoffs(r, ranked.mask_qn))
  assert round(float(np.mean(oracle)), 4) == 0.4435
  for k, expected in ((5, 0.1687), (10, 0.2305), (50, 0.3110)):
    value = rewards.at_cutoff(r, baselines.fixed_cutoffs(k, ranked.mask_qn))
    assert round(float(np.mean(value)), 4) == expected
