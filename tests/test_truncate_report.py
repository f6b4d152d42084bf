"""The truncation report's tests compare one value per distinct query."""

import numpy as np

from best_jax.evaluate import significance
from best_jax.truncate import report


def _split(qids, attncut, bicut):
  return {"qids": qids, "methods": {"attncut": {"values": attncut},
                                    "bicut": {"values": bicut}}}


def test_p_values_take_each_query_once_averaged_over_its_splits():
  """Two random splits test q1 and q2 twice: the Wilcoxon test sees four
  queries (q1 and q2 as the mean of their two splits), not six pairs;
  BiCut did not run on split 2, so there only split 0 and 1 count."""
  per_split = {0: _split(["q1", "q2", "q3"], [1.0, 0.5, 0.9], [0.0, 0.1, 0.2]),
               1: _split(["q1", "q2", "q4"], [0.0, 0.3, 0.8], [0.4, 0.1, 0.3]),
               2: {"qids": ["q1"], "methods": {"attncut": {"values": [9.0]}}}}
  a = report._summary(per_split, "attncut")  # pylint: disable=protected-access
  b = report._summary(per_split, "bicut")  # pylint: disable=protected-access
  mine, other = report.by_query(a, b)
  assert mine == {"q1": {"value": 0.5}, "q2": {"value": 0.4},
                  "q3": {"value": 0.9}, "q4": {"value": 0.8}}
  assert other["q1"] == {"value": 0.2} and len(other) == 4
  _, data = report._comparisons({"f1": per_split}, None)  # pylint: disable=protected-access
  row = data["f1/attncut/bicut"]
  assert row["queries"] == 4
  t_p, w_p = significance.paired_p_values(
      np.array([0.5, 0.4, 0.9, 0.8]), np.array([0.2, 0.1, 0.2, 0.3]))
  assert (row["t_test_p"], row["wilcoxon_p"]) == (t_p, w_p)


def test_clusters_add_a_test_flipping_whole_clusters():
  """With a cluster map the comparison adds a randomization test over
  whole clusters of the per-query means: four queries in two articles
  allow only 2^2 sign patterns, so p is at least 2/4; without a map there
  is no such column."""
  per_split = {0: _split(["q1", "q2", "q3"], [1.0, 0.5, 0.9], [0.0, 0.1, 0.2]),
               1: _split(["q1", "q2", "q4"], [0.0, 0.3, 0.8], [0.4, 0.1, 0.3])}
  clusters = {"q1": "a", "q2": "a", "q3": "b", "q4": "b"}
  lines, data = report._comparisons({"f1": per_split}, clusters)  # pylint: disable=protected-access
  row = data["f1/attncut/bicut"]
  assert row["clusters"] == 2 and row["cluster_p"] == 0.5
  assert "cluster p (clusters)" in lines[2]
  assert lines[4].endswith(" 0.5 (2) |")
  lines, data = report._comparisons({"f1": per_split}, None)  # pylint: disable=protected-access
  assert "cluster_p" not in data["f1/attncut/bicut"]
  assert "cluster" not in lines[2]
