"""Paired t-test and Wilcoxon over per-query values of two runs."""

import math

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
