"""Document scores from segment scores: FirstP, MaxP (max), sum and mean.

A reranker scores every segment of a candidate document; the document's score
is an aggregate of its valid segments' scores (SPEC §2): FirstP takes the first
segment, MaxP the maximum; `sum` and `mean` are options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from best_jax.data.trec import Run

AGGREGATIONS = ("first", "max", "sum", "mean")


def aggregate(scores_s: Sequence[float] | np.ndarray, method: str = "max"
              ) -> float:
  """One document score from its (valid, in order) segment scores."""
  if method not in AGGREGATIONS:
    raise ValueError(f"unknown aggregation {method!r}; one of {AGGREGATIONS}")
  scores_s = np.asarray(scores_s, dtype=np.float64)
  if scores_s.size == 0:
    raise ValueError("a document without segments cannot be scored")
  if method == "first":
    return float(scores_s[0])
  return float(getattr(np, method)(scores_s))


def rerank(segment_scores: Mapping[str, Mapping[str, Sequence[float]]],
           method: str = "max") -> Run:
  """`{qid: {docid: segment scores}}` -> a run `{qid: {docid: score}}`."""
  return {qid: {docid: aggregate(scores, method)
                for docid, scores in docs.items()}
          for qid, docs in segment_scores.items()}


def best_segment(scores_s: Sequence[float] | np.ndarray) -> int:
  """Index of the highest-scoring segment (the earliest on ties)."""
  scores_s = np.asarray(scores_s, dtype=np.float64)
  if scores_s.size == 0:
    raise ValueError("a document without segments has no best segment")
  return int(np.argmax(scores_s))
