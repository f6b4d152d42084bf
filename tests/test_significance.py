"""Paired t-test and Wilcoxon over per-query values of two runs."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from best_jax.errors import InputError
from best_jax.evaluate import significance


def _per_query(values):
  return {str(i): {"map": v} for i, v in enumerate(values)}


def test_matches_scipy_on_common_queries():
  a = [0.1, 0.4, 0.35, 0.8, 0.5, 0.2]
  b = [0.2, 0.5, 0.3, 0.9, 0.7, 0.25]
  per_query_b = _per_query(b)
  per_query_b["extra"] = {"map": 1.0}  # not in run a: ignored
  test = significance.paired_test(_per_query(a), per_query_b, "map")
  assert test.num_queries == 6
  assert test.mean_a == pytest.approx(sum(a) / 6)
  assert test.mean_b == pytest.approx(sum(b) / 6)
  assert test.t_test_p == pytest.approx(stats.ttest_rel(a, b).pvalue)
  assert test.wilcoxon_p == pytest.approx(stats.wilcoxon(a, b).pvalue)
  assert 0 < test.t_test_p < 0.1  # b is better on 5 of 6 queries


def test_identical_runs_give_p_one():
  a = _per_query([0.1, 0.4, 0.4, 0.0])
  test = significance.paired_test(a, a, "map")
  assert (test.t_test_p, test.wilcoxon_p) == (1.0, 1.0)


def test_single_differing_query_gives_nan_not_an_error():
  test = significance.paired_test(_per_query([0.1]), _per_query([0.3]), "map")
  assert math.isnan(test.t_test_p) and math.isnan(test.wilcoxon_p)


def test_no_common_query():
  with pytest.raises(InputError):
    significance.paired_test({"1": {"map": 0.1}}, {"2": {"map": 0.1}}, "map")


def test_cluster_test_flips_whole_clusters_exactly():
  """Four articles with summed differences 1, 0.5, 2.5, -0.5: p is the
  share of the 16 sign patterns of whole articles whose |sum| reaches the
  observed 3.5 (the queries of an article never flip apart)."""
  a = {"q1": 1.0, "q2": 1.0, "q3": 2.5, "q4": 0.0, "q5": 1.0}
  b = {"q1": 0.0, "q2": 0.0, "q3": 0.0, "q4": 0.5, "q5": 1.5}
  clusters = {"q1": "A", "q2": "B", "q3": "C", "q4": "D", "q5": "B"}
  sums = np.array([1.0, 0.5, 2.5, -0.5])  # A, B (1 - 0.5), C, D
  observed = abs(sums.sum())
  flips = [abs((np.array(s) * sums).sum()) >= observed - 1e-12
           for s in itertools.product((1, -1), repeat=4)]
  test = significance.cluster_test(a, b, clusters)
  assert (test.unit, test.num_clusters) == ("article", 4)
  assert test.p == pytest.approx(np.mean(flips))
  # Three articles that all favour a: 2 of 8 patterns, p = 0.25, however
  # many questions each holds (a per-query test would find p ~ 0).
  many_a = {f"q{i}": 1.0 + 0.01 * i for i in range(300)}
  many_b = {q: 0.0 for q in many_a}
  by_article = {q: str(i % 3) for i, q in enumerate(many_a)}
  assert significance.cluster_test(many_a, many_b, by_article).p == 0.25
  alone = significance.cluster_test(many_a, many_b, None)
  assert (alone.unit, alone.num_clusters) == ("query", 300)
  assert alone.p < 0.001
  assert significance.cluster_test(a, a, clusters).p == 1.0


def test_a_query_without_a_cluster_is_its_own_cluster():
  """A query the map leaves out (no relevant document, say) is one more
  cluster, not a KeyError."""
  a = {"q1": 1.0, "q2": 1.0, "q3": 0.5}
  b = {"q1": 0.0, "q2": 0.0, "q3": 0.0}
  test = significance.cluster_test(a, b, {"q1": "A", "q2": "A"})
  assert test.num_clusters == 2
  # Sums 2 (A) and 0.5 (q3): 2 of the 4 sign patterns reach |2.5|.
  assert test.p == pytest.approx(0.5)
