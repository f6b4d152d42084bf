"""Paired significance tests between two runs over their common queries."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping

import numpy as np
from scipy import stats

from best_jax.errors import InputError


@dataclasses.dataclass(frozen=True)
class PairedTest:
  """One metric compared over the queries both runs were evaluated on.

  p-values are two-sided: 1.0 when every per-query difference is 0, NaN when a
  single query is compared and it differs (no test is defined).
  """
  metric: str
  num_queries: int
  mean_a: float
  mean_b: float
  t_test_p: float
  wilcoxon_p: float


def paired_test(per_query_a: Mapping[str, Mapping[str, float]],
                per_query_b: Mapping[str, Mapping[str, float]],
                metric: str) -> PairedTest:
  """Paired t-test and Wilcoxon signed-rank test of `metric`, run a vs run b.

  Args:
    per_query_a, per_query_b: `{qid: {metric: value}}` as `trec_eval.evaluate`
      returns them.
    metric: the metric name to compare.

  Raises:
    InputError: the runs share no evaluated query.
  """
  qids = [qid for qid in per_query_a if qid in per_query_b]
  if not qids:
    raise InputError("the two runs have no evaluated query in common")
  a = np.array([per_query_a[q][metric] for q in qids], dtype=np.float64)
  b = np.array([per_query_b[q][metric] for q in qids], dtype=np.float64)
  t_p, w_p = _p_values(a, b)
  return PairedTest(metric, len(qids), float(a.mean()), float(b.mean()), t_p,
                    w_p)


def _p_values(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
  differences = a - b
  if not np.any(differences):  # identical per query: no evidence of change
    return 1.0, 1.0
  if len(a) < 2:
    return float("nan"), float("nan")
  with warnings.catch_warnings():
    # Constant differences make scipy warn about precision loss (p is 0).
    warnings.simplefilter("ignore", RuntimeWarning)
    t_p = float(stats.ttest_rel(a, b).pvalue)
    # Zero differences are dropped (zero_method="wilcox"), as is usual in IR.
    w_p = float(stats.wilcoxon(a, b, zero_method="wilcox").pvalue)
  return t_p, w_p
