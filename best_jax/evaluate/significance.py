"""Paired significance tests between two runs over their common queries.

Per query: the paired t-test and the Wilcoxon signed-rank test. Per cluster
(`cluster_test`): a paired randomization test that flips the sign of whole
clusters' differences (e.g. squad_longdoc's articles: questions about one
article are not independent), exact over every sign pattern up to
`EXACT_CLUSTERS` clusters, else Monte Carlo.
"""

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
  t_p, w_p = paired_p_values(a, b)
  return PairedTest(metric, len(qids), float(a.mean()), float(b.mean()), t_p,
                    w_p)


def paired_p_values(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
  """Two-sided (paired t-test, Wilcoxon signed-rank) p-values of `a - b`.

  1.0 when every difference is 0; NaN for fewer than two queries.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
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
    # Exact distribution for n <= 50 non-zero differences (scipy's limit),
    # else the normal approximation; scipy's "auto" would fall back to a
    # permutation test that takes minutes on a few dozen queries with zeros.
    exact = np.count_nonzero(differences) <= 50
    w_p = float(stats.wilcoxon(a, b, zero_method="wilcox",
                               method="exact" if exact else "approx").pvalue)
  return t_p, w_p


# 2^13 = 8,192 sign patterns: enumerated; above, `RESAMPLES` random ones.
EXACT_CLUSTERS = 13
RESAMPLES = 10_000


@dataclasses.dataclass(frozen=True)
class ClusterTest:
  """A paired randomization test over clusters of queries.

  `unit` names a cluster ("article", or "query" where no cluster map
  exists: then it is a per-query randomization test).
  """
  unit: str
  num_clusters: int
  p: float


def cluster_test(a: Mapping[str, float], b: Mapping[str, float],
                 clusters: Mapping[str, str] | None, unit: str = "article",
                 seed: int = 0) -> ClusterTest:
  """Two-sided p of the mean difference a - b over their common queries,
  under random sign flips of each cluster's summed differences.

  Args:
    a, b: `{qid: value}`.
    clusters: `{qid: cluster}`; None: every query its own (`unit` "query");
      a query missing from the map is a cluster of its own.
    unit: what a cluster is, for the tables.
    seed: the Monte Carlo draws (more than `EXACT_CLUSTERS` clusters).
  """
  qids = [q for q in a if q in b]
  if clusters is None:
    clusters, unit = {}, "query"
  # A query the map leaves out (e.g. one without a relevant document) is a
  # cluster of its own.
  cluster_of = {q: clusters.get(q, f"query {q}") for q in qids}
  names = sorted(set(cluster_of.values()))
  index = {c: i for i, c in enumerate(names)}
  sums_c = np.zeros(len(names))
  np.add.at(sums_c, [index[cluster_of[q]] for q in qids],
            [a[q] - b[q] for q in qids])
  if not np.any(sums_c):
    return ClusterTest(unit, len(names), 1.0)
  if len(names) < 2:
    return ClusterTest(unit, len(names), float("nan"))
  exact = len(names) <= EXACT_CLUSTERS
  result = stats.permutation_test(
      (sums_c, -sums_c), lambda x, y, axis: np.sum(x, axis=axis),
      permutation_type="samples", vectorized=True, alternative="two-sided",
      n_resamples=np.inf if exact else RESAMPLES,
      rng=np.random.default_rng(seed))
  return ClusterTest(unit, len(names), float(result.pvalue))
